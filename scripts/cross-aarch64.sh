#!/usr/bin/env bash
# Cross-compiles mtron's CPU build for aarch64 (Debian's g++-aarch64-linux-gnu, the arm64
# multiarch libraries) and runs the kernel, model and reference tests and one 2-rank
# layout-invariance test (gpt2 at TP 2, the host's mpirun starting emulated ranks) under
# qemu-aarch64. Ends with ctest's summary line; exits nonzero when a step or a test fails.
#
#   scripts/cross-aarch64.sh
#
# Installs what is missing, idempotently (as root, or with sudo): the cross compiler, qemu-user,
# the arm64 architecture and libraries. The arm64 packages that cannot be installed beside their
# amd64 variants are unpacked into build/aarch64-overlay instead (docs/kernels.md, "aarch64"),
# where cmake/aarch64-linux-gnu.cmake and qemu-aarch64 -L find them. The host's own build
# dependencies (cmake, ninja, mpirun, python3-torch, ...) come from scripts/install-deps.sh.
#
# Environment: JOBS (build and test jobs; default: the number of cores); QEMU_CPU (the emulated
# CPU; default max,sve-default-vector-length=16: SVE2 with 128-bit vectors, like Grace's
# Neoverse V2 cores).
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
jobs=${JOBS:-$(nproc)}
export QEMU_CPU=${QEMU_CPU:-max,sve-default-vector-length=16}
overlay=$PWD/build/aarch64-overlay
preset=cpu-aarch64

say() { echo "== cross-aarch64: $*"; }
die() {
  echo "cross-aarch64: $*" >&2
  exit 1
}
declare -a stage_times=()
stage_start=$(date +%s)
stage_done() {  # stage_done NAME: records and prints the time since the previous stage ended
  local t=$(($(date +%s) - stage_start))
  stage_times+=("$1 $t s")
  say "$1 done in $t s"
  stage_start=$(date +%s)
}

# Host packages (amd64) and the arm64 multiarch packages: the libraries mtron links, and the
# runtime dependencies of the overlay's libraries.
host_packages=(g++-aarch64-linux-gnu qemu-user)
arm64_packages=(
  libopenblas-openmp-dev libhwy-dev libgtest-dev libgmock-dev libfmt-dev libpcre2-dev
  libzstd-dev zlib1g-dev libicu-dev libstdc++6 libgomp1
  libevent-core-2.1-7 libevent-pthreads-2.1-7 libfabric1 libhwloc15 libhwloc-plugins
  libibverbs1 libnl-3-200 libucx0
)
# Unpacked into the overlay: Open MPI (libpmix2 depends on libmunge2, which has no Multi-Arch
# field, so its arm64 variant would replace the amd64 one and Open MPI with it), sentencepiece
# (no Multi-Arch field) and oneDNN (dpkg refuses libdnnl-dev:arm64 beside libdnnl-dev: their
# dnnl_config.h differ; libdnnl2 comes along so that oneDNN's CMake package finds its library).
overlay_packages=(libopenmpi3 libopenmpi-dev libpmix2 libmunge2 libsentencepiece0
  libsentencepiece-dev libdnnl2 libdnnl-dev)

for c in cmake ninja pkg-config mpirun /usr/bin/python3; do
  command -v "$c" >/dev/null || die "$c not found: run scripts/install-deps.sh first"
done
for p in nlohmann-json3-dev libcli11-dev; do  # header-only, architecture-independent
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
    die "$p is not installed: run scripts/install-deps.sh first"
done

installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  sudo=sudo
fi
as_root() {  # as_root WHAT COMMAND...: runs COMMAND as root; WHAT names it when that is impossible
  local what=$1
  shift
  if [ -n "$sudo" ] && ! command -v sudo >/dev/null; then
    die "$what needs root: run this script as root (or install sudo)"
  fi
  $sudo "$@"
}

say "packages"
missing=()
for p in "${host_packages[@]}"; do installed "$p" || missing+=("$p"); done
for p in "${arm64_packages[@]}"; do installed "$p:arm64" || missing+=("$p:arm64"); done
if ! dpkg --print-foreign-architectures | grep -qx arm64; then
  say "adding the arm64 architecture (dpkg --add-architecture arm64)"
  as_root "adding the arm64 architecture" dpkg --add-architecture arm64 ||
    die "dpkg --add-architecture arm64 failed"
fi
if [ ${#missing[@]} -gt 0 ]; then
  say "installing ${#missing[@]} packages: ${missing[*]}"
  as_root "installing ${missing[*]}" apt-get update -qq || die "apt-get update failed"
  # --no-remove: apt must never replace an installed amd64 package by its arm64 variant.
  as_root "installing ${missing[*]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
    --no-install-recommends --no-remove "${missing[@]}" >/dev/null ||
    die "apt-get install failed for: ${missing[*]}"
fi
stage_done packages

# The overlay is unpacked again when the candidate version of one of its packages changes.
say "overlay ($overlay)"
wanted=$(apt-cache show --no-all-versions "${overlay_packages[@]/%/:arm64}" 2>/dev/null |
  awk '/^Package: /{p=$2} /^Version: /{print p ":arm64=" $2}')
[ "$(wc -l <<<"$wanted")" -eq ${#overlay_packages[@]} ] ||
  die "apt knows not all of the arm64 packages ${overlay_packages[*]} (apt-get update?)"
if [ "$(cat "$overlay/.packages" 2>/dev/null)" != "$wanted" ]; then
  rm -rf "$overlay"
  mkdir -p "$overlay/.debs"
  mapfile -t specs <<<"$wanted"
  (cd "$overlay/.debs" && apt-get download -qq -o APT::Sandbox::User=root "${specs[@]}") ||
    die "apt-get download failed for: ${overlay_packages[*]}"
  for d in "$overlay"/.debs/*.deb; do dpkg-deb -x "$d" "$overlay"; done
  rm -rf "$overlay/.debs"
  # sentencepiece.pc names /usr as its prefix: its headers and library are in the overlay.
  sed -i "s|^prefix=/usr\$|prefix=$overlay/usr|" \
    "$overlay/usr/lib/aarch64-linux-gnu/pkgconfig/sentencepiece.pc"
  echo "$wanted" >"$overlay/.packages"
fi
stage_done overlay

say "configure ($preset)"
cmake --preset "$preset" >/dev/null
stage_done configure

say "build ($jobs jobs)"
cmake --build --preset "$preset" -j "$jobs" --target test_kernels op_check_sim test_model test_moe fp8_tool fp8_scaling_tool \
  ref_dump mtron
stage_done build

# One ctest run: the tests labelled kernels, model and reference, and the 2-rank layout test
# with its baseline (-I takes their numbers, as ctest -N lists them).
say "tests under qemu-aarch64 (QEMU_CPU=$QEMU_CPU)"
numbers() { ctest --preset "$preset" -N "$@" | sed -n 's/^ *Test *#\([0-9]*\):.*/\1/p'; }
ids=$({
  numbers -L '^(kernels|model|reference)$'
  numbers -R '^layout_(baseline_gpt2|gpt2_tp2)$'
} | paste -sd,)
[ -n "$ids" ] || die "ctest lists none of the tests"
log=build/$preset/cross-aarch64-ctest.log
set +e
ctest --preset "$preset" -j "$jobs" -I "0,0,0,$ids" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
set -e
stage_done tests

times=$(printf '%s, ' "${stage_times[@]}")
say "${times}total $(($(date +%s) - start)) s"
grep -E '^[0-9]+% tests passed' "$log" || echo "ctest printed no summary (exit $rc)"
exit "$rc"
