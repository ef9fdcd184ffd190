#!/usr/bin/env bash
# Builds the libFuzzer targets (cpu-asan preset: clang, ASan + UBSan, MTRON_FUZZ=ON) and runs
# each for a fixed time, as many at once as there are cores. Only the fuzz targets and the
# libraries they link are built, not the rest of the project.
#
#   scripts/run-fuzz.sh [--seconds N] [--seed S|random] [target...]
#                                    (default: every fuzz_* target, 60 s each, seed 1)
#
# The seed is fixed by default so that CI's run is reproducible: from a fresh output folder, a
# given seed replays the same mutations, and a longer local run with that seed covers every input
# a shorter CI run tries. `--seed random` explores further (use it for long local runs).
#
# Seeds come from fuzz/<layer>/corpus/<target>/; the growing corpus and any crash reproducer go
# to build/cpu-asan/fuzz-out/<target>/. Exits non-zero if any target finds a crash, a leak, a
# sanitizer report or a timeout, printing the reproducer's path (rerun it with
# build/cpu-asan/fuzz/<layer>/<target> <file>).
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=60
seed=1
targets=()
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) seconds=$2; shift 2 ;;
    --seed) seed=$2; shift 2 ;;
    -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
    *) targets+=("$1"); shift ;;
  esac
done

build=build/cpu-asan
echo "== fuzz: configure $build and build the fuzz targets"
[ -f "$build/build.ninja" ] || cmake --preset cpu-asan >/dev/null
cmake --build "$build" --target fuzzers -j "$(nproc)"

if [ ${#targets[@]} -eq 0 ]; then
  mapfile -t targets < <(find "$build/fuzz" -mindepth 2 -maxdepth 2 -type f -executable -name 'fuzz_*' \
                           -printf '%f\n' | sort)
fi
[ ${#targets[@]} -gt 0 ] || { echo "run-fuzz: no fuzz targets found" >&2; exit 1; }

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}

run_one() {
  local t=$1 bin seeds out
  bin=$(find "$build/fuzz" -mindepth 2 -maxdepth 2 -type f -name "$t" | head -n 1)
  [ -n "$bin" ] || { echo "run-fuzz: no target $t" >&2; return 1; }
  seeds=$(find fuzz -type d -path "*/corpus/$t" | head -n 1)
  out="$build/fuzz-out/$t"
  mkdir -p "$out/corpus"
  # -fork is not used: one process per target keeps the report readable.
  local seed_flag=()
  [ "$seed" = random ] || seed_flag=(-seed="$seed")
  if "$bin" "$out/corpus" ${seeds:+"$seeds"} "${seed_flag[@]}" -max_total_time="$seconds" -timeout=10 \
       -rss_limit_mb=2048 -max_len=16384 -artifact_prefix="$out/" -print_final_stats=1 \
       >"$out/log.txt" 2>&1; then
    echo "fuzz: $t clean for ${seconds} s ($(grep -m1 -o 'stat::number_of_executed_units: *[0-9]*' "$out/log.txt" | grep -o '[0-9]*$') runs, corpus $(ls "$out/corpus" | wc -l))"
  else
    echo "fuzz: $t FAILED; last lines of $out/log.txt:"
    tail -n 40 "$out/log.txt"
    ls "$out"/crash-* "$out"/leak-* "$out"/timeout-* "$out"/oom-* 2>/dev/null | sed 's/^/fuzz: reproducer: /'
    return 1
  fi
}

echo "== fuzz: ${targets[*]} (${seconds} s each, $(nproc) at a time)"
status=0
pids=()
for t in "${targets[@]}"; do
  run_one "$t" &
  pids+=($!)
  if [ ${#pids[@]} -ge "$(nproc)" ]; then
    wait "${pids[0]}" || status=1
    pids=("${pids[@]:1}")
  fi
done
for p in "${pids[@]}"; do wait "$p" || status=1; done
exit $status
