#!/usr/bin/env bash
# The whole suite `make test` runs (and so CI): formatting, then every CTest test of the build
# (unit, kernel, reference-against-PyTorch, parallel under mpirun, end-to-end).
set -euo pipefail
preset=${1:-cpu-release}
cd "$(dirname "$0")/.."
start=$(date +%s)

echo "== clang-format"
git ls-files '*.cpp' '*.h' '*.cu' '*.cuh' | xargs -r clang-format --dry-run -Werror

echo "== ctest ($preset)"
ctest --preset "$preset" -j "$(nproc)" --timeout 900

echo "== fuzz (libFuzzer, ASan+UBSan; MTRON_SKIP_FUZZ=1 skips)"
[ "${MTRON_SKIP_FUZZ:-0}" = 1 ] || bash scripts/run-fuzz.sh

echo "== all tests passed in $(( $(date +%s) - start )) s"
