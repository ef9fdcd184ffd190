#!/usr/bin/env bash
# Collective bandwidth at 2, 4 and 8 ranks on this machine (bench/README.md, "comm").
#   bash bench/comm/run.sh [build-dir] [extra comm_bench flags]
set -euo pipefail
build=${1:-build/cpu-release}
shift || true
export OMPI_MCA_rmaps_base_oversubscribe=1
# Keep large buffers on the heap: Open MPI's single-copy path is ~2x slower on fresh mmapped
# pages (measured on Emerald Rapids).
export MALLOC_MMAP_THRESHOLD_=1073741824 MALLOC_TRIM_THRESHOLD_=1073741824
for np in 2 4 8; do
  mpirun --allow-run-as-root --oversubscribe --bind-to none -np "$np" \
    "$build/bench/comm/comm_bench" "$@"
done
