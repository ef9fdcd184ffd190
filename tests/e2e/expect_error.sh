#!/usr/bin/env bash
# expect_error.sh CODE REGEX -- COMMAND...
# Runs COMMAND and checks that it exits with CODE and prints exactly one line (stdout and
# stderr together) matching REGEX: a clear error, no stack trace, no noise.
set -u
code=$1 regex=$2
shift 3
out=$("$@" 2>&1)
rc=$?
lines=$(printf '%s\n' "$out" | grep -c .)
if [ "$rc" -ne "$code" ]; then
  echo "expected exit code $code, got $rc; output:"; echo "$out"; exit 1
fi
if [ "$lines" -ne 1 ]; then
  echo "expected one line, got $lines:"; echo "$out"; exit 1
fi
if ! printf '%s' "$out" | grep -Eq -- "$regex"; then
  echo "output does not match /$regex/:"; echo "$out"; exit 1
fi
echo "ok: $out"
