#!/usr/bin/env bash
# The whole suite `make test` runs (and so CI): formatting, then every CTest test of the build
# (unit, kernel, reference-against-PyTorch, parallel under mpirun, end-to-end), then the CUDA
# build (compile and link) and cuDNN's acceptance of the attention graphs (deviceless).
set -euo pipefail
preset=${1:-cpu-release}
cd "$(dirname "$0")/.."
start=$(date +%s)
# A stage's header, with the seconds since the start (where the suite's time goes).
stage() { echo "== $* (at $(( $(date +%s) - start )) s)"; }

stage "clang-format"
git ls-files '*.cpp' '*.h' '*.cu' '*.cuh' | xargs -r clang-format --dry-run -Werror

# Tests run side by side on a few cores: MPI ranks yield instead of busy-polling (mtron already
# does so by itself when one job's ranks outnumber the cores).
export OMPI_MCA_mpi_yield_when_idle=1

stage "ctest ($preset)"
ctest --preset "$preset" -j "$(nproc)" --timeout 900

# The AVX2 path on CPUs that have more (MTRON_CPU_ISA caps the SIMD kernels and the GEMM
# libraries): kernels, model, the PyTorch reference and a few parallel layouts a second time. On
# a CPU whose best level is avx2 or lower the first pass already ran it.
mtron=build/$preset/apps/mtron
level=$("$mtron" --version | sed -n 's/^mtron [^:]*: CPU \([a-z0-9_]*\).*/\1/p')
case "$level" in
  avx512*|amx)
    stage "ctest ($preset) again with MTRON_CPU_ISA=avx2 (this CPU: $level)"
    MTRON_CPU_ISA=avx2 ctest --preset "$preset" -j "$(nproc)" --timeout 900 \
      -L 'kernels|model|reference'
    MTRON_CPU_ISA=avx2 ctest --preset "$preset" -j "$(nproc)" --timeout 900 \
      -R '^layout_(gpt2|llama)_(tp2_sp|pp2_vpp2|dp2_distopt|cp2)$'
    ;;
  *) stage "second pass with MTRON_CPU_ISA=avx2 skipped: this CPU's best level is $level" ;;
esac

# The CUDA build compiles and links here (no GPU needed; the kernels' logic is tested above on
# the CPU emulation, kernels.cuda_sim_op_check). Its own build directory, the preset's sm_90 and
# sm_80, no tests: about 50 s after the CPU build, whose objects it takes from ccache (all but
# the .cu files and the CUDA host code). MTRON_SKIP_CUDA_BUILD=1 skips it.
nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
if [ "${MTRON_SKIP_CUDA_BUILD:-0}" = 1 ]; then
  stage "cuda build skipped (MTRON_SKIP_CUDA_BUILD=1)"
elif [ -x "$nvcc" ]; then
  stage "cuda build (cuda-release, compile and link only)"
  t=$(date +%s)
  cmake --preset cuda-release -DCMAKE_CUDA_COMPILER="$nvcc" -DMTRON_BUILD_TESTS=OFF >/dev/null
  cmake --build build/cuda-release -j "$(nproc)" --target mtron op_check gpu_bench nccl_check \
    cudnn_check
  echo "== cuda build ok in $(( $(date +%s) - t )) s"
  # cuDNN takes mtron's attention graphs (forward and backward at the models' shapes) on an
  # H200: deviceless, its heuristics pick engines and compile their kernels for the GPU that
  # bench/gpu/h200.cudnn.json describes; the toolkit's stub driver library stands in for the driver
  # (loading the compiled kernels would need a GPU: the check stops there).
  stub=$(dirname "$nvcc")/../lib64/stubs/libcuda.so
  if [ -f "$stub" ]; then
    stage "cuDNN attention graphs (deviceless, H200)"
    stubdir=$(mktemp -d)
    ln -s "$(readlink -f "$stub")" "$stubdir/libcuda.so.1"
    LD_LIBRARY_PATH="$stubdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
      build/cuda-release/bench/gpu/cudnn_check --device bench/gpu/h200.cudnn.json
    rm -rf "$stubdir"
  else
    stage "cuDNN attention graphs: not checked (no stub libcuda.so in the toolkit)"
  fi
else
  stage "cuda build skipped: no nvcc (install the CUDA toolkit to check it)"
fi

stage "fuzz (libFuzzer, ASan+UBSan; MTRON_SKIP_FUZZ=1 skips)"
[ "${MTRON_SKIP_FUZZ:-0}" = 1 ] || bash scripts/run-fuzz.sh

echo "== all tests passed in $(( $(date +%s) - start )) s"
