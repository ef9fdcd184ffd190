#!/usr/bin/env bash
# cpu_isa_test.sh MTRON: MTRON_CPU_ISA at every level of this architecture. Levels up to the
# CPU's best run (`mtron --version` names the level and its SIMD target); every level above it
# exits 2 with one line naming what the CPU has; a value that is not a level exits 2 with one line.
set -u
mtron=$1
case "$(uname -m)" in
  x86_64) levels="scalar sse4 avx2 avx512 avx512_bf16 amx" ;;
  aarch64) levels="scalar neon" ;;
  *) echo "no levels known for $(uname -m)"; exit 1 ;;
esac
target_of() {
  case "$1" in
    scalar) echo "SCALAR|EMU128" ;;
    sse4) echo "SSE4" ;;
    avx2) echo "AVX2" ;;
    avx512*|amx) echo "AVX3" ;;
    neon) echo "NEON" ;;
  esac
}
fail=0 above=0 ran=0
for level in $levels; do
  out=$(MTRON_CPU_ISA=$level "$mtron" --version 2>&1)
  rc=$?
  lines=$(printf '%s\n' "$out" | grep -c .)
  if [ "$rc" -eq 0 ] && [ "$above" -eq 0 ]; then
    if ! printf '%s' "$out" | grep -Eq "^mtron [0-9.]+: CPU $level .*SIMD kernels ($(target_of "$level")), GEMM fp32 .* bf16 .* OpenMP [0-9]+ threads$"; then
      echo "FAIL $level: $out"; fail=1
    fi
    ran=$((ran + 1))
  elif [ "$rc" -eq 2 ] && [ "$lines" -eq 1 ] &&
      printf '%s' "$out" | grep -q "MTRON_CPU_ISA=$level: this CPU has at most "; then
    above=1
  else
    echo "FAIL $level: exit $rc, $lines lines: $out"; fail=1
  fi
  echo "$level: exit $rc: $out"
done
out=$(MTRON_CPU_ISA=avx9 "$mtron" --version 2>&1)
rc=$?
if [ "$rc" -ne 2 ] || [ "$(printf '%s\n' "$out" | grep -c .)" -ne 1 ] ||
    ! printf '%s' "$out" | grep -q "MTRON_CPU_ISA=avx9: not a level; one of scalar"; then
  echo "FAIL unknown value: exit $rc: $out"; fail=1
fi
echo "avx9: exit $rc: $out"
[ "$ran" -ge 2 ] || { echo "FAIL: only $ran levels ran"; fail=1; }
[ "$fail" -eq 0 ] && echo "cpu isa: $ran levels run, the rest refused as they should"
exit "$fail"
