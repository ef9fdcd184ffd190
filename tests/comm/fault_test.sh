#!/usr/bin/env bash
# fault_test.sh <mode> <fault_app> <mpirun>: runs fault_app <mode> on 4 ranks and checks how the
# job ends. A fatal error must end every rank (never a hang): user errors exit 2, internal ones 1,
# a killed rank or a collective timeout non-zero. "timeout" bounds each run: exit 124 = a hang.
set -u
mode=$1 app=$2 mpirun=$3
out=$(mktemp)
trap 'rm -f "$out"' EXIT
limit=60
[ "$mode" = all-error ] && limit=30
start=$(date +%s%3N)
timeout -k 5 "$limit" "$mpirun" --allow-run-as-root --oversubscribe --bind-to none -np 4 \
  "$app" "$mode" >"$out" 2>&1
rc=$?
end=$(date +%s%3N)
cat "$out"
echo "== mode $mode: exit code $rc after $((end - start)) ms"

fail() { echo "FAIL ($mode): $*"; exit 1; }
[ $rc -eq 124 ] && fail "the job hung (killed by timeout after ${limit} s)"
errors=$(grep -c '^\[mtron r[0-9]*/4\] error: ' "$out")
# Milliseconds from the failure (stamped by rank 0 or 1) to the end of mpirun.
t_fail=$(sed -n 's/^failure at \([0-9]*\) ms$/\1/p' "$out" | head -1)
since_failure() { [ -n "$t_fail" ] && echo $((end - t_fail)) || echo "?"; }

case $mode in
  ok)
    [ $rc -eq 0 ] || fail "exit code $rc, want 0" ;;
  all-error)
    [ $rc -eq 2 ] || fail "exit code $rc, want 2"
    [ "$errors" -eq 1 ] || fail "$errors error lines, want exactly 1"
    grep -q '^\[mtron r0/4\] error: --tensor-model-parallel-size (3) does not divide' "$out" ||
      fail "rank 0's message missing"
    [ -n "$t_fail" ] || fail "no failure stamp"
    ms=$(since_failure)
    echo "== exited ${ms} ms after the error"
    [ "$ms" -le 5000 ] || fail "took ${ms} ms from the error to the end of the job, want <= 5000" ;;
  different-errors)
    [ $rc -eq 2 ] || fail "exit code $rc, want 2"
    [ "$errors" -eq 4 ] || fail "$errors error lines, want 4 (one per rank: the messages differ)" ;;
  one-error)
    [ $rc -eq 2 ] || fail "exit code $rc, want 2"
    [ "$errors" -eq 1 ] || fail "$errors error lines, want 1"
    grep -q '^\[mtron r3/4\] error: bad input on rank 3$' "$out" || fail "rank 3's message missing" ;;
  internal)
    [ $rc -eq 1 ] || fail "exit code $rc, want 1"
    grep -q '^\[mtron r1/4\] error: internal error at .*broken invariant on rank 1' "$out" ||
      fail "rank 1's message missing" ;;
  kill)
    [ $rc -ne 0 ] || fail "exit code 0 after a rank was killed"
    echo "== exited $(since_failure) ms after the kill" ;;
  hang)
    [ $rc -ne 0 ] || fail "exit code 0 after a hang"
    grep -q "error: all_reduce on group 'world' (4 ranks, 4 bytes) has waited [0-9]* s" "$out" ||
      fail "no watchdog message naming the collective and group"
    echo "== exited $(since_failure) ms after rank 1 stopped communicating (timeout 2 s)" ;;
  *) fail "unknown mode" ;;
esac
echo "== PASS ($mode)"
