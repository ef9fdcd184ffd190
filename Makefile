# The two commands (README): `make demo` and `make test`. Each installs what is missing,
# configures and builds as needed. PRESET picks the CMake preset (CMakePresets.json).
PRESET ?= cpu-release
BUILD  := build/$(PRESET)
JOBS   ?= $(shell nproc)

.PHONY: all deps configure build test demo format format-check clean

all: build

# Re-run the installer whenever its package list changes.
build/.deps-stamp: scripts/install-deps.sh
	bash scripts/install-deps.sh
	@mkdir -p build && touch $@

deps: build/.deps-stamp

$(BUILD)/build.ninja: CMakeLists.txt CMakePresets.json | build/.deps-stamp
	cmake --preset $(PRESET)

configure: $(BUILD)/build.ninja

build: configure
	cmake --build $(BUILD) -j $(JOBS)

test: build
	bash scripts/run-tests.sh $(PRESET)

demo: build
	bash scripts/demo.sh $(BUILD)

format:
	git ls-files '*.cpp' '*.h' '*.cu' '*.cuh' | xargs clang-format -i

format-check:
	git ls-files '*.cpp' '*.h' '*.cu' '*.cuh' | xargs clang-format --dry-run -Werror

clean:
	rm -rf build
