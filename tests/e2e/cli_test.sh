#!/usr/bin/env bash
# `mtron train` and its neighbours as a user meets them, one CASE per CTest test:
#   help          --help prints every group, the choice flags with their names
#   print_layout  --print-layout validates the flags, prints the layout and the memory report,
#                 and opens none of the data, tokenizer or checkpoint files the flags name
#   save          a --save that cannot be created fails at start-up, before any compute, also
#                 under mpirun
#   checkpoint    a checkpoint carries its tokenizer: moved, with the tokenizer file gone, it
#                 still generates and exports; `--output hf/` works; a failed export leaves nothing
#   docs          the README's commands verbatim (mtron on PATH): preprocess creates the output
#                 folder, the --print-layout example runs
# Usage: cli_test.sh MTRON_BINARY CASE
set -euo pipefail
MTRON=$1
CASE=$2
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
export OMP_NUM_THREADS=1 OMPI_MCA_rmaps_base_oversubscribe=1
TINY=(--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16 --micro-batch-size 2
      --train-iters 2 --lr 1e-3 --eval-iters 0 --metrics-file /dev/null)

case $CASE in
help)
  "$MTRON" train --help > "$TMP/help"
  [ "$(tr -d '\000' < "$TMP/help" | wc -c)" -eq "$(wc -c < "$TMP/help")" ] || fail "NUL byte in --help"
  for group in "Model:" "Mixture of experts:" "Parallelism:" "Training:" "Optimizer:" "Data:" \
               "Logging:" "Checkpointing:" "Accepted for Megatron scripts"; do
    grep -q "^$group" "$TMP/help" || fail "--help lacks the group '$group'"
  done
  grep -q -- "--device.*{cpu,cuda}" "$TMP/help" || fail "--device choices"
  grep -q -- "--lr-decay-style.*{WSD,constant,cosine,inverse-square-root,linear}" "$TMP/help" \
    || fail "--lr-decay-style choices"
  for flag in --tensorboard-dir --train-samples --rampup-batch-size --decoupled-lr \
              --use-checkpoint-opt_param-scheduler --wandb-project --manual-gc --muon-momentum; do
    grep -q -- "$flag" "$TMP/help" || fail "--help lacks $flag"
  done
  ;;
print_layout)
  "$MTRON" train --num-layers 8 --hidden-size 256 --num-attention-heads 8 --seq-length 128 \
    --micro-batch-size 1 --global-batch-size 16 --train-iters 100 --lr 1e-4 --bf16 \
    --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --sequence-parallel \
    --data-path /nonexistent/corpus_text_document --tokenizer-type GPT2BPETokenizer \
    --vocab-file /nonexistent/vocab.json --merge-file /nonexistent/merges.txt \
    --save /nonexistent/ck --save-interval 10 --load /nonexistent/ck --tensorboard-dir /nonexistent/tb \
    --print-layout --world-size 16 > "$TMP/out" 2>&1 || fail "print-layout: $(cat "$TMP/out")"
  grep -q "world 16 = TP 2 x CP 1 x DP 4 x PP 2" "$TMP/out" || fail "layout: $(cat "$TMP/out")"
  grep -q "Theoretical memory footprints" "$TMP/out" || fail "memory report"
  grep -q "vocabulary assumed 50257" "$TMP/out" || fail "vocabulary note"
  [ ! -e /nonexistent ] || fail "created /nonexistent"
  # Every flag is still validated.
  set +e
  "$MTRON" train --num-layers 8 --hidden-size 256 --num-attention-heads 8 --seq-length 128 \
    --micro-batch-size 1 --train-iters 100 --lr 1e-4 --mock-data --vocab-size 100 \
    --tensor-model-parallel-size 3 --print-layout --world-size 6 > "$TMP/bad" 2>&1
  rc=$?
  set -e
  [ $rc -eq 2 ] && grep -q "must be a multiple of tensor_model_parallel_size (3)" "$TMP/bad" \
    || fail "invalid layout accepted: $(cat "$TMP/bad")"
  ;;
save)
  for np in 1 2; do
    set +e
    if [ $np -eq 1 ]; then
      "$MTRON" train "${TINY[@]}" --mock-data --vocab-size 64 --save /dev/null/ck \
        --save-interval 1 > "$TMP/out" 2>&1
    else
      mpirun --allow-run-as-root --oversubscribe -np 2 "$MTRON" train "${TINY[@]}" --mock-data \
        --vocab-size 64 --save /dev/null/ck --save-interval 1 > "$TMP/out" 2>&1
    fi
    rc=$?
    set -e
    [ $rc -eq 2 ] || fail "np $np: exit $rc: $(cat "$TMP/out")"
    grep -q -- "--save /dev/null/ck: cannot create the directory" "$TMP/out" || fail "np $np: $(cat "$TMP/out")"
    ! grep -q "iteration\|model:" "$TMP/out" || fail "np $np: computed before failing: $(cat "$TMP/out")"
  done
  ;;
checkpoint)
  printf 'the quick brown fox jumps over the lazy dog %s\n' $(seq 1 400) > "$TMP/corpus.txt"
  spm_train --input="$TMP/corpus.txt" --model_prefix="$TMP/m" --vocab_size=200 --model_type=bpe \
    --minloglevel=2 > /dev/null 2>&1 || fail "spm_train"
  "$MTRON" train "${TINY[@]}" --mock-data --tokenizer-type Llama2Tokenizer \
    --tokenizer-model "$TMP/m.model" --save "$TMP/ck" --save-interval 2 > "$TMP/train.out" 2>&1 \
    || fail "train: $(cat "$TMP/train.out")"
  rm "$TMP/m.model"
  mv "$TMP/ck" "$TMP/moved"
  [ -f "$TMP/moved/iter_0000002/tokenizer/m.model" ] || fail "the checkpoint lacks its tokenizer"
  (cd "$TMP" && "$MTRON" generate --load moved --prompt "the quick" --max-new-tokens 4) \
    > "$TMP/gen.out" 2>&1 || fail "generate: $(cat "$TMP/gen.out")"
  (cd "$TMP" && "$MTRON" export --load moved --output hf/) > "$TMP/export.out" 2>&1 \
    || fail "export to hf/: $(cat "$TMP/export.out")"
  for f in config.json model.safetensors tokenizer.model; do
    [ -f "$TMP/hf/$f" ] || fail "hf/ lacks $f: $(ls "$TMP/hf")"
  done
  [ ! -e "$TMP/hf/.tmp-export" ] && [ ! -e "$TMP/hf.tmp-export" ] || fail "export debris"
  # A damaged checkpoint: the export fails and leaves nothing behind.
  shard=$(ls "$TMP"/moved/iter_0000002/*.safetensors | head -1)
  truncate -s 100 "$shard"
  set +e
  (cd "$TMP" && "$MTRON" export --load moved --output hf2/) > "$TMP/bad.out" 2>&1
  rc=$?
  set -e
  [ $rc -eq 2 ] || fail "export of a damaged checkpoint: exit $rc: $(cat "$TMP/bad.out")"
  [ ! -e "$TMP/hf2" ] && [ ! -e "$TMP/hf2.tmp-export" ] || fail "debris: $(ls "$TMP")"
  ;;
docs)
  # The README's commands, verbatim, in a folder holding the files they name.
  mkdir "$TMP/bin" "$TMP/run"
  ln -s "$MTRON" "$TMP/bin/mtron"
  export PATH="$TMP/bin:$PATH"
  cp "$ROOT/data/gpt2-vocab.json" "$ROOT/data/gpt2-merges.txt" "$TMP/run/"
  printf '{"text": "Hello world, this is mtron."}\n{"text": "A second document."}\n' > "$TMP/run/corpus.jsonl"
  awk '/^```sh/{f=1;next} /^```/{f=0} f' "$ROOT/README.md" > "$TMP/commands"
  # Join continuation lines; keep the preprocess and --print-layout commands.
  sed -e ':a' -e '/\\$/N; s/\\\n//; ta' "$TMP/commands" | grep -E "^mtron (preprocess|train --print-layout)" > "$TMP/run.sh"
  [ "$(wc -l < "$TMP/run.sh")" -ge 2 ] || fail "README commands not found: $(cat "$TMP/commands")"
  (cd "$TMP/run" && bash -euo pipefail "$TMP/run.sh") > "$TMP/docs.out" 2>&1 \
    || fail "README commands: $(cat "$TMP/docs.out")"
  [ -f "$TMP/run/data/corpus_text_document.idx" ] || fail "preprocess did not write data/"
  grep -q "Theoretical memory footprints" "$TMP/docs.out" || fail "the --print-layout example"
  ;;
*)
  fail "unknown case $CASE"
  ;;
esac
echo "cli_test $CASE: passed"
