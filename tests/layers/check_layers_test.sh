#!/usr/bin/env bash
# scripts/check_layers.py must pass on a tree whose includes follow the layer order and fail,
# naming each offending include, on one where a lower layer includes a higher one (core ->
# model) or plan outside its front end includes more than core (plan -> kernels).
set -euo pipefail
check=$1
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
mk() { mkdir -p "$(dirname "$t/$1")"; printf '%s\n' "$2" > "$t/$1"; }
mk src/mtron/core/a.h '#include "mtron/core/b.h"'
mk src/mtron/model/m.cpp '#include "mtron/parallel/mappings.h"'
mk src/mtron/plan/cli.cpp '#include "mtron/kernels/gemm.h"'
mk src/mtron/plan/search.cpp '#include "mtron/core/error.h"'
python3 "$check" "$t" > "$t/ok.log" || { cat "$t/ok.log"; echo "FAIL: a clean tree was rejected"; exit 1; }
mk src/mtron/core/a.h '#include "mtron/model/gpt.h"'
mk src/mtron/plan/search.cpp '  #include "mtron/kernels/gemm.h"'
if python3 "$check" "$t" > "$t/bad.log"; then
  cat "$t/bad.log"; echo "FAIL: upward includes were accepted"; exit 1
fi
grep -q 'src/mtron/core/a.h:1: layer core includes model' "$t/bad.log"
grep -q 'src/mtron/plan/search.cpp:1: layer plan includes kernels' "$t/bad.log"
[ "$(grep -c ': layer ' "$t/bad.log")" = 2 ] || { cat "$t/bad.log"; echo "FAIL: wrong count"; exit 1; }
echo "check_layers: accepts the clean tree, rejects both upward includes"
