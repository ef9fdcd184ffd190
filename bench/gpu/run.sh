#!/usr/bin/env bash
# bench/gpu/run.sh: everything mtron checks on a GPU, in one run of under 8 minutes on one H200.
#
#   here:   cmake --preset cuda-release -B build/cuda-gpu -DCMAKE_CUDA_ARCHITECTURES=90 \
#             -DMTRON_BUILD_TESTS=OFF && cmake --build build/cuda-gpu --target mtron op_check \
#             gpu_bench nccl_check cudnn_check   (optional: the programs, built here from HEAD)
#           bash bench/gpu/pack-deps.sh [build/cuda-gpu]   (the packages [and programs] -> .gpudeps/)
#   device: run(command="bash bench/gpu/run.sh", carry=[".gpudeps"], timeout_s=600)
#
# Stages in the order they run (each prints a banner, has a time limit, and a failure does not
# stop the next; the budget drops the last ones first):
#   0 machine     GPU, driver, nvcc, cmake, PyTorch
#   a build       none where .gpudeps/bin.tar.xz holds programs that run there (the CUDA libraries
#                 from the toolkit or PyTorch's nvidia wheels); else the cuda-release preset in
#                 build/cuda-gpu, sm_90 only; with .gpudeps/ present, against those packages
#                 unpacked into /tmp (deps-env.sh)
#   b check       op_check --small: every CUDA op against the reference kernels on small shapes
#                 (fp32 rel <= 1e-5, bf16 <= 1e-2, MTRON_CUDA_SYNC=1; head dims up to 256); the
#                 FP8 GEMM cases again with cuBLASLt's log; cudnn_check: cuDNN's engines for the
#                 attention graphs, and the GPU's description for CI's deviceless check
#   d train       mtron train --device cuda: 10 steps of a tiny model (fp32) on the CPU and on the
#                 GPU (MTRON_CUDA_SYNC=1), losses compared (rel <= 1e-4: cuBLAS sums in its own
#                 order; 1e-5 on the emulation), and in bf16 (rel <= 2e-3; attention on cuDNN's
#                 fused kernels with bf16 products where the CPU's are fp32); then GPT-2 124M (64 x 1024 tokens per step)
#                 and the 1.3B model (24 layers, hidden 2048, 16 heads, seq 2048, 8 x 2048 tokens
#                 per step), bf16, 10 steps each: tokens/s and MFU of the last step (the 1.3B
#                 model twice: deterministic, and with NVTE_ALLOW_NONDETERMINISTIC_ALGO=1,
#                 cuDNN's attention backward accumulating dq atomically); GPT-2 and the 1.3B
#                 model again with MTRON_CUDA_SYNC=1 --profile: every op's GPU time
#   c bench       gpu_bench: mtron's GEMMs and attention at GPT-2 124M / 1.3B shapes (TFLOP/s,
#                 % of 989.4); torch_ops.py: cuBLAS GEMMs and flash SDPA at the same shapes
#   d torch       PyTorch eager and torch.compile on the same models (torch_gpt.py), after
#                 mtron's runs so that a slow compile drops them rather than mtron's figures
#   f checks      op_check --small under compute-sanitizer's memcheck, nccl_check: the NCCL Comm
#                 on the GPUs, op_check at GPU sizes (its reference runs on one CPU core)
#   e report      a summary table; the entry for bench/gpu/RESULTS.md is written to
#                 $OUT/RESULTS.md (the device machine's copy of the repository is discarded:
#                 append that file's last entry to bench/gpu/RESULTS.md here)
# What comes back is three files in $OUT (the device tool brings that folder back, a few files
# at most; /tmp/mtron-gpu-out elsewhere): run.log (everything printed), RESULTS.md, and
# logs.tar.gz, the stages' own logs (written to a scratch folder, packed again after every
# stage, so a run cut off by its time limit still returns what it had).
# MTRON_GPU_BUDGET (seconds, default 450) bounds the whole run: a stage that no longer fits is
# skipped and says so.
#
# --dry-run: on a machine without a GPU, everything that can run there, so that the script is
# checked before it spends device time: no build (the cpu-release build's programs, which must
# exist: cmake --build build/cpu-release --target mtron mtron_cudasim op_check_sim), op_check on
# the CPU emulation of the kernels (op_check_sim --small), the loss parity of stage d with
# mtron_cudasim (mtron on the emulated CUDA device) for --device cuda, the two benchmark models'
# flags validated (--print-layout); gpu_bench, nccl_check and PyTorch are skipped.
set -uo pipefail
cd "$(dirname "$0")/../.."
DRY=0
[ "${1:-}" = "--dry-run" ] && DRY=1
OUT=${OUT:-/tmp/mtron-gpu-out}
mkdir -p "$OUT"
LOGS=$(mktemp -d /tmp/mtron-gpu-logs.XXXXXX)
exec > >(tee -a "$OUT/run.log") 2>&1
pack() { tar czf "$OUT/logs.tar.gz" -C "$LOGS" . 2>/dev/null; }
BUDGET=${MTRON_GPU_BUDGET:-450}
T0=$(date +%s)
BUILD=build/cuda-gpu  # the cuda-release preset in a directory of its own (its cache points at /tmp)
[ $DRY = 1 ] && BUILD=build/cpu-release
PY=${PYTHON:-python3}
SUMMARY=()

elapsed() { echo $(($(date +%s) - T0)); }
failed() { echo "FAILED: the end of $(basename "$1"):"; tail -n 6 "$1"; }  # LOG of a failed run
banner() { printf '\n===== [%4ss] %s\n' "$(elapsed)" "$*"; }
note() { SUMMARY+=("$(printf '%-34s %s' "$1" "$2")"); }
# limit WANT: the seconds a stage may take, or 0 when fewer than MIN remain in the budget
limit() {
  local want=$1 min=${2:-20} left=$((BUDGET - $(elapsed)))
  if [ "$left" -lt "$min" ]; then echo 0; elif [ "$want" -gt "$left" ]; then echo "$left"; else echo "$want"; fi
}
# run_timed NAME SECONDS LOGFILE CMD...: runs CMD with a time limit, output to screen and LOGFILE
run_timed() {
  local name=$1 secs=$2 log=$3
  shift 3
  if [ "$secs" -le 0 ]; then
    echo "SKIPPED: $name (no time left in the ${BUDGET}s budget)" >&2
    return 125
  fi
  timeout --kill-after=10 "$secs" "$@" 2>&1 | tee "$log"
  local rc=${PIPESTATUS[0]}
  pack
  [ "$rc" -eq 124 ] && echo "TIMEOUT: $name after ${secs}s" >&2
  return "$rc"
}

# ---- 0 machine ------------------------------------------------------------------------------
banner "0 machine"
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
NGPU=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | wc -l)
[ "$NGPU" -gt 0 ] || NGPU=1  # no nvidia-smi: try one GPU anyway
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv 2>&1 | head -3
echo "nvcc:  $(nvcc --version 2>/dev/null | tail -2 | head -1)"
echo "cmake: $(cmake --version 2>/dev/null | head -1); ninja $(ninja --version 2>/dev/null)"
echo "host:  $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(. /etc/os-release 2>/dev/null; echo "$PRETTY_NAME")"
NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
for f in cublasLt.h nccl.h cudnn.h; do
  echo "$f: $(ls /usr/local/cuda/include/$f /usr/include/$f /usr/include/x86_64-linux-gnu/$f 2>/dev/null | head -1)"
done
TORCH=$($PY -c 'import torch; print(torch.__version__, "cuda", torch.version.cuda)' 2>/dev/null)
echo "torch: ${TORCH:-not importable with $PY}"
echo "git:   $(git log -1 --format='%h %s' 2>/dev/null)"
note "machine" "${GPU:-no GPU found} x${NGPU}; torch ${TORCH:-none}"

# ---- a build --------------------------------------------------------------------------------
banner "a build (cuda-release, sm_90)"
MT=$BUILD/apps/mtron    # mtron for the CPU runs
MT_GPU=$MT              # mtron for the --device cuda runs
OP_CHECK=($BUILD/bench/gpu/op_check)
DEPS_ENV=()
DEPS_CMAKE_ARGS=()
if [ -f .gpudeps/deps.tar.xz ]; then
  source bench/gpu/deps-env.sh
  deps_setup .gpudeps /tmp/mtron-deps && echo "using the carried Debian packages, unpacked in /tmp/mtron-deps"
else
  echo "no .gpudeps/: building against this machine's own packages (run bench/gpu/pack-deps.sh here first if the configure fails)"
fi
# NCCL: beside the toolkit, else PyTorch's nvidia-nccl wheel (headers and libnccl.so.2; CMake's
# find_library wants a libnccl.so, so a small NCCL_HOME of links is made for it).
if [ ! -f "$(dirname "$NVCC")/../include/nccl.h" ] && [ ! -f /usr/include/nccl.h ]; then
  w=$($PY -c 'import nvidia.nccl as n; print(list(n.__path__)[0])' 2>/dev/null)
  if [ -n "$w" ] && [ -f "$w/include/nccl.h" ]; then
    mkdir -p /tmp/mtron-nccl/lib
    ln -sfn "$w/include" /tmp/mtron-nccl/include
    ln -sfn "$(ls "$w"/lib/libnccl.so* | head -1)" /tmp/mtron-nccl/lib/libnccl.so
    echo "NCCL from PyTorch's wheel: $w"
    DEPS_ENV+=("NCCL_HOME=/tmp/mtron-nccl")
    ld=$(printf '%s\n' "${DEPS_ENV[@]}" | sed -n 's/^LD_LIBRARY_PATH=//p' | tail -1)
    ld=${ld:-${LD_LIBRARY_PATH:-}}
    DEPS_ENV+=("LD_LIBRARY_PATH=${ld:+$ld:}$w/lib")  # env applies them in order: the last wins
  else
    echo "no nccl.h beside the toolkit nor in PyTorch's wheels: the configure will say so"
  fi
fi
MENV=(env "${DEPS_ENV[@]}")  # prefix of mtron's commands: they see the carried libraries
# The CUDA libraries a program built elsewhere links (libcudart, libcublasLt, libnccl, libcudnn):
# where the loader does not find one, the folder of PyTorch's nvidia wheels that holds it joins
# the path.
cuda_lib_path() {
  local missing d ld
  missing=$("${MENV[@]}" ldd "$1" 2>/dev/null | awk '/not found/ {print $1}' | grep -E 'libcudart|libcublas|libnccl|libcudnn')
  [ -z "$missing" ] && return 0
  for lib in $missing; do
    d=$($PY -c 'import os, sys, nvidia
for root in nvidia.__path__:
    for d, _, files in os.walk(root):
        if sys.argv[1] in files: print(d); raise SystemExit' "$lib" 2>/dev/null)
    if [ -n "$d" ]; then
      echo "$lib from $d"
      ld=$(printf '%s\n' "${MENV[@]}" | sed -n 's/^LD_LIBRARY_PATH=//p' | tail -1)
      ld=${ld:-${LD_LIBRARY_PATH:-}}
      MENV+=("LD_LIBRARY_PATH=${ld:+$ld:}$d")
    else
      echo "$lib: not found here nor in PyTorch's nvidia wheels"
    fi
  done
}
b0=$(elapsed)
built=0
if [ $DRY = 0 ] && [ -f .gpudeps/bin.tar.xz ]; then
  # The programs pack-deps.sh built on the development machine: no build here when they load.
  PRE=build/cuda-prebuilt
  rm -rf $PRE && mkdir -p $PRE
  if command -v xz >/dev/null; then
    tar -xJf .gpudeps/bin.tar.xz -C $PRE
  else
    $PY -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' .gpudeps/bin.tar.xz $PRE
  fi
  cuda_lib_path $PRE/apps/mtron
  if "${MENV[@]}" $PRE/apps/mtron --version; then
    BUILD=$PRE MT=$PRE/apps/mtron MT_GPU=$PRE/apps/mtron OP_CHECK=($PRE/bench/gpu/op_check) built=1
    echo "the carried programs of $(cat .gpudeps/bin.commit 2>/dev/null) run here: no build"
  else
    "${MENV[@]}" ldd $PRE/apps/mtron | grep 'not found'
    echo "the carried programs do not run here: building"
  fi
fi
if [ $built = 1 ]; then
  :
elif [ $DRY = 1 ]; then
  MT_GPU=$BUILD/tests/train/mtron_cudasim
  OP_CHECK=($BUILD/tests/kernels/op_check_sim --small)
  for f in "$MT" "$MT_GPU" "${OP_CHECK[0]}"; do
    [ -x "$f" ] || echo "dry run: $f is missing (cmake --build build/cpu-release --target mtron mtron_cudasim op_check_sim)"
  done
  [ -x "$MT" ] && [ -x "$MT_GPU" ] && [ -x "${OP_CHECK[0]}" ] && built=1
  echo "dry run: no build; the CPU build's programs, --device cuda on the CUDA emulation"
elif run_timed configure "$(limit 90)" "$LOGS/configure.log" "${MENV[@]}" cmake --preset cuda-release -B $BUILD \
  -DCMAKE_CUDA_COMPILER="$NVCC" -DCMAKE_CUDA_ARCHITECTURES=90 -DMTRON_BUILD_TESTS=OFF -DMTRON_WERROR=OFF -DCMAKE_POLICY_VERSION_MINIMUM=3.5 \
  "${DEPS_CMAKE_ARGS[@]}" >/dev/null; then
  if run_timed build "$(limit 300 60)" "$LOGS/build.log" "${MENV[@]}" cmake --build $BUILD -j "$(nproc)" \
    --target op_check gpu_bench nccl_check cudnn_check mtron >/dev/null; then
    built=1
  else
    grep -E "error|Error" -m 20 "$LOGS/build.log"
  fi
else
  tail -30 "$LOGS/configure.log"
fi
if [ $built = 1 ] && [ "$BUILD" = build/cuda-prebuilt ]; then
  note "a build" "none: the carried programs of $(cat .gpudeps/bin.commit 2>/dev/null)"
elif [ $built = 1 ]; then
  echo "built in $(($(elapsed) - b0)) s"
  note "a build" "ok ($(($(elapsed) - b0)) s)"
else
  echo "BUILD FAILED (configure.log, build.log in $OUT/logs.tar.gz)"
  note "a build" "FAILED: see configure.log / build.log"
fi

# ---- b check (small shapes) -----------------------------------------------------------------
# op_check_stage NAME SECONDS ARGS...: op_check against the reference kernels, a summary line
op_check_stage() {
  local name=$1 secs=$2 log=$LOGS/$1.txt
  shift 2
  run_timed "$name" "$secs" "$log" "${MENV[@]}" MTRON_CUDA_SYNC=1 "${OP_CHECK[@]}" "$@"
  local rc=$? fails rows
  fails=$(grep -c ' FAIL$' "$log" 2>/dev/null)
  rows=$(grep -cE ' (ok|FAIL)$' "$log" 2>/dev/null)
  fails=${fails:-0} rows=${rows:-0}
  if [ "$rc" = 0 ]; then
    note "b $name" "ok: $rows comparisons, 0 failed"
  elif [ "$rows" -gt 0 ]; then
    note "b $name" "FAILED (exit $rc): $fails of $rows comparisons failed"
  else
    note "b $name" "FAILED (exit $rc): $(tail -1 "$log" 2>/dev/null)"
  fi
  grep ' FAIL$' "$log" 2>/dev/null | head -20
}
# The small shapes first (every op and code path, head dims up to 256, in seconds); the GPU
# sizes, whose reference runs on one CPU core for minutes, after the benchmarks (stage f).
banner "b op_check --small: every CUDA op against the reference kernels"
if [ $built = 1 ]; then
  if [ $DRY = 1 ]; then
    op_check_stage op_check "$(limit 300)"
  else
    op_check_stage op_check_small "$(limit 120)" --small
    # cuBLASLt's own account of any FP8 GEMM it refuses (mtron then runs them as bf16 GEMMs)
    run_timed fp8_log "$(limit 30)" "$LOGS/fp8_cublaslt.txt" "${MENV[@]}" CUBLASLT_LOG_LEVEL=2 \
      "${OP_CHECK[@]}" --small --filter gemm.fp8 >/dev/null
    grep -m3 -E 'Error|error' "$LOGS/fp8_cublaslt.txt"
    note "b FP8 GEMM (cuBLASLt log)" "$(grep -m1 -E 'Error|error' "$LOGS/fp8_cublaslt.txt" | cut -c1-160)"
    # cuDNN's engines for the attention graphs on this GPU, and its description of the GPU (for
    # the deviceless check that CI runs: bench/gpu/h200.cudnn.json)
    if run_timed cudnn_check "$(limit 60)" "$LOGS/cudnn_check.txt" "${MENV[@]}" $BUILD/bench/gpu/cudnn_check; then
      note "b cudnn_check" "ok: $(tail -1 "$LOGS/cudnn_check.txt")"
    else
      note "b cudnn_check" "FAILED: $(grep -m1 -E 'REQUIRED|cudnn_check:' "$LOGS/cudnn_check.txt" | cut -c1-200)"
    fi
    "${MENV[@]}" $BUILD/bench/gpu/cudnn_check --print-device >"$LOGS/device.cudnn.json" 2>&1
  fi
else
  note "b op_check" "not run (no build)"
fi

# ---- d train --------------------------------------------------------------------------------
# The two models: name | mtron flags | torch_gpt.py flags | tokens per step
GPT2_M="--num-layers 12 --hidden-size 768 --num-attention-heads 12 --seq-length 1024 --max-position-embeddings 1024 --micro-batch-size 16 --global-batch-size 64"
GPT2_T="--layers 12 --hidden 768 --heads 12 --seq 1024 --batch 64"
# two micro-batches of 4 sequences (the fp32 residual stream and gradients of the 1.3B model),
# the same 8 x 2048 tokens per step
BIG_M="--num-layers 24 --hidden-size 2048 --num-attention-heads 16 --seq-length 2048 --max-position-embeddings 2048 --micro-batch-size 4 --global-batch-size 8"
BIG_T="--layers 24 --hidden 2048 --heads 16 --seq 2048 --batch 8"
# --profile: the per-op table, the step's cost and the step time it gives at an H200's peaks
COMMON_M="--vocab-size 50257 --mock-data --lr 1e-4 --log-interval 1 --eval-iters 0 --metrics-file /dev/null --bf16 --hidden-dropout 0 --attention-dropout 0 --profile"
declare -A TRAIN

# log line -> "tokens/s MFU" of the last iteration
last_rate() {
  grep -o 'tokens per second per GPU: [0-9.]*.*MFU: [0-9.]*%' "$1" | tail -1 |
    sed -E 's/tokens per second per GPU: ([0-9.]*).*MFU: ([0-9.]*%)/\1 \2/'
}

banner "d mtron training on CUDA"
if [ $built = 1 ]; then
  # parity: a tiny model, 10 steps on the CPU and on the GPU, in fp32 and in bf16 (attention on
  # cuDNN's fused kernels: bf16 products, the CPU's fp32)
  TINY="--num-layers 2 --hidden-size 128 --num-attention-heads 4 --seq-length 128 --max-position-embeddings 128 --micro-batch-size 4 --global-batch-size 4 --vocab-size 1000 --mock-data --lr 1e-3 --train-iters 10 --log-interval 1 --eval-iters 0 --metrics-file /dev/null --hidden-dropout 0 --attention-dropout 0"
  # parity NAME TOL [FLAGS]: the bound for fp32: cuBLAS and the GPU's reductions sum in other
  # orders than the CPU (1e-4); the emulation runs the CPU's order but for the GEMMs (1e-5)
  parity() {
    local name=$1 tol=$2 secs=60
    shift 2
    [ $DRY = 1 ] && secs=300  # the emulation runs a step in seconds
    run_timed "mtron tiny $name cpu" "$(limit 60)" "$LOGS/mtron_tiny_${name}_cpu.log" "${MENV[@]}" $MT train $TINY "$@" >/dev/null ||
      failed "$LOGS/mtron_tiny_${name}_cpu.log"
    # MTRON_CUDA_SYNC=1: an asynchronous fault is reported against the kernel that caused it
    run_timed "mtron tiny $name cuda" "$(limit $secs)" "$LOGS/mtron_tiny_${name}_cuda.log" "${MENV[@]}" MTRON_CUDA_SYNC=1 $MT_GPU train $TINY "$@" --device cuda >/dev/null ||
      failed "$LOGS/mtron_tiny_${name}_cuda.log"
    grep -m1 '(after [0-9]* iterations) memory' "$LOGS/mtron_tiny_${name}_cuda.log"
    paste <(grep -o 'lm loss: [0-9.E+-]*' "$LOGS/mtron_tiny_${name}_cpu.log" | awk '{print $3}') \
      <(grep -o 'lm loss: [0-9.E+-]*' "$LOGS/mtron_tiny_${name}_cuda.log" | awk '{print $3}') |
      awk -v tol=$tol '{ d = ($1 - $2) / $1; if (d < 0) d = -d; if (d > m) m = d; n++; print "step " n ": cpu " $1 "  cuda " $2 }
           END { printf "max relative loss difference over %d steps: %.2e (bound %s)\n", n, m, tol;
                 exit !(n == 10 && m <= tol + 0) }' | tee "$LOGS/parity_$name.txt"
    [ "${PIPESTATUS[1]}" = 0 ] && note "d loss parity (tiny, $name)" "ok: $(tail -1 "$LOGS/parity_$name.txt")" ||
      note "d loss parity (tiny, $name)" "FAILED: $(tail -1 "$LOGS/parity_$name.txt")"
  }
  if [ $DRY = 1 ]; then parity fp32 1e-5; else parity fp32 1e-4; fi
  parity bf16 2e-3 --bf16
  # 1.3b-nd: the 1.3B model with NVTE_ALLOW_NONDETERMINISTIC_ALGO=1 (cuDNN's attention backward
  # accumulating dq atomically), beside the deterministic default
  for m in gpt2 1.3b 1.3b-nd; do
    [ $m = gpt2 ] && flags=$GPT2_M secs=90 || flags=$BIG_M secs=150
    nd=0
    [ $m = 1.3b-nd ] && nd=1 secs=90
    if [ $DRY = 1 ]; then  # the flags parse and validate (the trainer is not built)
      "${MENV[@]}" $MT_GPU train $flags $COMMON_M --train-iters 10 --device cuda --print-layout \
        >"$LOGS/mtron_$m.log" 2>&1 && TRAIN[mtron_$m]="flags ok" || TRAIN[mtron_$m]="BAD FLAGS"
      continue
    fi
    run_timed "mtron $m" "$(limit $secs)" "$LOGS/mtron_$m.log" "${MENV[@]}" NVTE_ALLOW_NONDETERMINISTIC_ALGO=$nd $MT_GPU train $flags $COMMON_M --train-iters 10 --device cuda >/dev/null ||
      failed "$LOGS/mtron_$m.log"
    TRAIN[mtron_$m]=$(last_rate "$LOGS/mtron_$m.log")
    grep -E 'iteration +(1|10)/' "$LOGS/mtron_$m.log"
    grep -m1 '(after [0-9]* iterations) memory' "$LOGS/mtron_$m.log"
    note "d mtron $m memory" "$(grep -m1 -o 'max allocated: [0-9.]*' "$LOGS/mtron_$m.log" | awk '{printf "%s %s %.0f", $1, $2, $3}') MB"
    note "d mtron $m predicted" "$(grep -m1 -o 'none overlapped: .*' "$LOGS/mtron_$m.log")"
    # attention on cuDNN's fused kernels, unless cuDNN refused the graph (mtron's kernels then)
    w=$(grep -m1 -oE "(cuDNN does not run this attention graph|cuDNN's fused attention needs).*" "$LOGS/mtron_$m.log" | cut -c1-240)
    note "d mtron $m attention" "${w:-cuDNN fused attention (no fallback warning)}"
  done
  if [ $DRY = 0 ]; then
    # Every op's GPU time: with MTRON_CUDA_SYNC=1 each launch waits for its kernel, so --profile's
    # table holds kernel times (plus a launch and a synchronisation each) where the timed runs
    # above hold launch times. GPT-2 and the 1.3B model, one micro-batch, 3 iterations (the last
    # two profiled); the note names the three ops that took longest.
    for m in gpt2 1.3b; do
      [ $m = gpt2 ] && flags=${GPT2_M/global-batch-size 64/global-batch-size 16} ||
        flags=${BIG_M/global-batch-size 8/global-batch-size 4}
      run_timed "mtron $m synced profile" "$(limit 60)" "$LOGS/mtron_${m}_synced.log" "${MENV[@]}" MTRON_CUDA_SYNC=1 \
        $MT_GPU train $flags $COMMON_M --train-iters 3 --device cuda >/dev/null &&
        note "d mtron $m synced profile" "$(grep -A4 'profile of iterations' "$LOGS/mtron_${m}_synced.log" | tail -3 | awk '{printf "%s%s %s s", (NR > 1 ? ", " : ""), $1, $3}')" ||
        failed "$LOGS/mtron_${m}_synced.log"
    done
  fi
else
  note "d mtron training" "not run (no build)"
fi

# ---- c bench --------------------------------------------------------------------------------
banner "c gpu_bench: mtron's GEMMs and attention"
if [ $DRY = 1 ]; then
  echo "dry run: skipped (needs a GPU)"
  note "c gpu_bench, torch_ops" "dry run: skipped"
elif [ $built = 1 ]; then
  run_timed gpu_bench "$(limit 120)" "$LOGS/gpu_bench.txt" "${MENV[@]}" $BUILD/bench/gpu/gpu_bench 20 &&
    note "c gpu_bench" "ok (table in gpu_bench.txt)" || note "c gpu_bench" "FAILED (exit $?)"
else
  note "c gpu_bench" "not run (no build)"
fi

# PyTorch's side comes after all of mtron's runs: a slow build then costs the comparisons, not
# mtron's own figures (the budget drops the last stages first).
if [ $DRY = 0 ]; then
  banner "c torch_ops: PyTorch's GEMMs and flash attention at the same shapes"
  run_timed torch_ops "$(limit 90)" "$LOGS/torch_ops.txt" $PY bench/gpu/torch_ops.py &&
    note "c torch_ops" "ok (table in torch_ops.txt)" || note "c torch_ops" "FAILED (exit $?)"
fi
[ $DRY = 0 ] && banner "d PyTorch training (bf16 autocast, flash SDPA, fused AdamW)"
torch_run() {  # key seconds flags...
  local key=$1 secs=$2
  shift 2
  [ $DRY = 1 ] && return 0
  run_timed "torch $key" "$(limit "$secs" 30)" "$LOGS/torch_$key.txt" $PY bench/gpu/torch_gpt.py "$@" &&
    TRAIN[torch_$key]=$(grep '^tokens/s' "$LOGS/torch_$key.txt" | awk '{printf "%.0f %.1f%%", $2, 100 * $6}')
}
torch_run eager_gpt2 90 $GPT2_T
torch_run eager_1.3b 120 $BIG_T
torch_run compile_gpt2 150 $GPT2_T --compile
torch_run compile_1.3b 180 $BIG_T --compile

# ---- f checks that the budget may drop ------------------------------------------------------
if [ $built = 1 ] && [ $DRY = 0 ]; then
  banner "f compute-sanitizer: op_check --small under memcheck"
  SANITIZER=$(command -v compute-sanitizer || ls "$(dirname "$NVCC")/compute-sanitizer" 2>/dev/null)
  if [ -z "$SANITIZER" ]; then
    note "f compute-sanitizer" "not run: no compute-sanitizer beside nvcc"
  else
    run_timed sanitizer "$(limit 90)" "$LOGS/sanitizer.txt" "${MENV[@]}" "$SANITIZER" --tool memcheck \
      --error-exitcode 3 --print-limit 20 "${OP_CHECK[0]}" --small >/dev/null
    rc=$?
    errors=$(grep -m1 -o 'ERROR SUMMARY: [0-9]* errors' "$LOGS/sanitizer.txt")
    echo "$errors"
    # exit 3: memcheck found errors; 1: op_check's own comparisons failed (stage b says which)
    if [ "$rc" = 0 ] || { [ "$rc" = 1 ] && [ "$errors" = "ERROR SUMMARY: 0 errors" ]; }; then
      note "f compute-sanitizer" "ok: $errors"
    else
      note "f compute-sanitizer" "FAILED (exit $rc): $errors"
    fi
  fi

  banner "f nccl_check: the NCCL Comm on $NGPU GPU(s)"
  MPIRUN=$("${MENV[@]}" bash -c 'command -v orterun || command -v mpirun' 2>/dev/null)
  if [ -n "$MPIRUN" ]; then
    run_timed nccl_check "$(limit 60)" "$LOGS/nccl_check.txt" "${MENV[@]}" NCCL_DEBUG=WARN "$MPIRUN" --allow-run-as-root \
      --oversubscribe -np "$NGPU" $BUILD/bench/gpu/nccl_check
  else
    run_timed nccl_check "$(limit 60)" "$LOGS/nccl_check.txt" "${MENV[@]}" NCCL_DEBUG=WARN $BUILD/bench/gpu/nccl_check
  fi
  rc=$?
  [ "$rc" = 0 ] && note "f nccl_check" "ok ($NGPU rank(s))" || note "f nccl_check" "FAILED (exit $rc)"

  banner "f op_check at GPU sizes"
  op_check_stage op_check "$(limit 240 40)"
fi

# ---- e report -------------------------------------------------------------------------------
banner "e summary"
for s in "${SUMMARY[@]}"; do echo "$s"; done
echo
printf '%-44s %-22s %-22s %-22s\n' "training (tokens/s, MFU of 989.4 TFLOP/s)" "mtron" "torch eager" "torch.compile"
for m in gpt2 1.3b 1.3b-nd; do
  case $m in
    gpt2) label="GPT-2 124M, 64 x 1024 tokens/step" ;;
    1.3b) label="1.3B (24L, h2048, 16H), 8 x 2048" ;;
    *) label="1.3B, NVTE_ALLOW_NONDETERMINISTIC_ALGO=1" ;;
  esac
  printf '%-44s %-22s %-22s %-22s\n' "$label" "${TRAIN[mtron_$m]:--}" "${TRAIN[torch_eager_$m]:--}" "${TRAIN[torch_compile_$m]:--}"
done
echo
echo "mtron GEMM/attention vs PyTorch (TFLOP/s):"
paste <(grep -E '^(gpt2-124m|1\.3b) ' "$LOGS/gpu_bench.txt" 2>/dev/null | grep -E ' (qkv|proj|fc1|fc2) fwd bf16 |attention (fwd|bwd) bf16 cudnn +B' | awk '{printf "%-34s %8s\n", $1" "$2" "$3" "$4, $(NF-1)}') \
  <(grep -E '^(gpt2-124m|1\.3b) ' "$LOGS/torch_ops.txt" 2>/dev/null | awk '{printf "torch %8s\n", $(NF-1)}') 2>/dev/null | head -24

# The RESULTS.md entry (bench/gpu/RESULTS.md: newest last)
{
  [ -f bench/gpu/RESULTS.md ] && cat bench/gpu/RESULTS.md
  echo
  echo "## $(date -u '+%Y-%m-%d %H:%M UTC'), ${GPU:-unknown GPU} x${NGPU}, $(git log -1 --format=%h 2>/dev/null)"
  echo
  echo "Command: \`bash bench/gpu/run.sh\` (device tool, carry .gpudeps); torch ${TORCH:-none}; $(($(elapsed))) s."
  echo
  echo '```'
  for s in "${SUMMARY[@]}"; do echo "$s"; done
  echo
  printf '%-44s %-22s %-22s %-22s\n' "training (tokens/s, MFU)" "mtron" "torch eager" "torch.compile"
  for m in gpt2 1.3b 1.3b-nd; do
    printf '%-44s %-22s %-22s %-22s\n' "$m" "${TRAIN[mtron_$m]:--}" "${TRAIN[torch_eager_$m]:--}" "${TRAIN[torch_compile_$m]:--}"
  done
  echo
  grep -E '^(gpt2-124m|1\.3b) ' "$LOGS/gpu_bench.txt" 2>/dev/null
  echo
  grep -E '^(gpt2-124m|1\.3b) ' "$LOGS/torch_ops.txt" 2>/dev/null
  echo '```'
} >"$OUT/RESULTS.md"
pack
echo
echo "run.sh: done in $(elapsed) s; run.log, RESULTS.md and logs.tar.gz in $OUT"
