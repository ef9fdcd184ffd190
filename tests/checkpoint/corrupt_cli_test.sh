#!/usr/bin/env bash
# corrupt_cli_test.sh MTRON WORKDIR: `mtron train --load` of a damaged checkpoint exits 2 with
# one clear error line naming the file and the tensor (no stack trace), for a flipped data byte,
# a truncated shard and a mismatched model; the same for hostile Hugging Face folders and a
# rope_scaling mtron does not have; then
# Megatron's --ckpt-step, --no-save-optim and --ckpt-format.
set -u
mtron=$1 work=$2
rm -rf "$work" && mkdir -p "$work"
flags=(--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 8 --micro-batch-size 1
       --train-iters 2 --lr 1e-3 --mock-data --vocab-size 100 --metrics-file /dev/null)
"$mtron" train "${flags[@]}" --save "$work/ck" --save-interval 2 >/dev/null 2>&1 || { echo "setup failed"; exit 1; }
shard=$work/ck/iter_0000002/rank_00000.safetensors
cp "$shard" "$work/pristine"
fail=0
expect() {  # expect REGEX [extra train flags...]
  local regex=$1; shift
  expect_cmd "$regex" train "${flags[@]}" --load "$work/ck" "$@"
}
expect_cmd() {  # expect_cmd REGEX MTRON-ARGS...
  local regex=$1; shift
  out=$(OMP_NUM_THREADS=1 "$mtron" "$@" 2>&1)
  rc=$?
  err=$(printf '%s\n' "$out" | grep 'error:')
  if [ $rc -ne 2 ] || [ "$(printf '%s\n' "$err" | grep -c .)" -ne 1 ] ||
     ! printf '%s' "$err" | grep -Eq -- "$regex" || printf '%s' "$out" | grep -q 'terminate called'; then
    echo "FAIL (exit $rc, want 2 and /$regex/):"; echo "$out"; fail=1
  else
    echo "ok: $err"
  fi
}
size=$(stat -c %s "$shard")
printf '\x55' | dd of="$shard" bs=1 seek=$((size - 5)) conv=notrunc status=none
expect "rank_00000\.safetensors: tensor '[^']+': checksum mismatch"
cp "$work/pristine" "$shard"
truncate -s $((size - 1000)) "$shard"
expect "rank_00000\.safetensors has [0-9]+ bytes; the manifest says [0-9]+ \(truncated"
cp "$work/pristine" "$shard"
expect "trained with --hidden-size 32 but this run has 64" --hidden-size 64
expect "trained with --multi-latent-attention off but this run has on" --multi-latent-attention \
  --position-embedding-type rope
expect "trained with --seed 1234; pass --seed 1234" --seed 99
expect "--lr 0.001 but this run has 0.002" --lr 2e-3

# Hugging Face folders are input too: a hostile index, a truncated weight file, an unknown model.
"$mtron" export --load "$work/ck" --output "$work/hf" >/dev/null 2>&1 || { echo "export failed"; exit 1; }
cp -r "$work/hf" "$work/hf_bad"
echo '{"weight_map": {"transformer.wte.weight": "../../etc/passwd"}}' > "$work/hf_bad/model.safetensors.index.json"
expect_cmd "invalid file name '\.\./\.\./etc/passwd'" import --input "$work/hf_bad" --output "$work/imp1"
rm "$work/hf_bad/model.safetensors.index.json"
truncate -s 5000 "$work/hf_bad/model.safetensors"
expect_cmd "model\.safetensors: (file is truncated|tensor '[^']+')" import --input "$work/hf_bad" --output "$work/imp2"
sed -i 's/"gpt2"/"bert"/' "$work/hf_bad/config.json"
expect_cmd "model_type 'bert' is not supported" import --input "$work/hf_bad" --output "$work/imp3"
# A Llama 3.1 config (rope_scaling "llama3") whose scaling mtron does not have.
"$mtron" train "${flags[@]}" --group-query-attention --num-query-groups 2 --swiglu \
  --normalization RMSNorm --position-embedding-type rope --untie-embeddings-and-output-weights \
  --disable-bias-linear --use-rope-scaling --save "$work/ck31" --save-interval 2 >/dev/null 2>&1 &&
  "$mtron" export --load "$work/ck31" --output "$work/hf31" >/dev/null 2>&1 ||
  { echo "llama 3.1 setup failed"; exit 1; }
sed -i 's/"low_freq_factor": 1.0/"low_freq_factor": 2.0/' "$work/hf31/config.json"
expect_cmd "rope_scaling low_freq_factor 2 is not supported" import --input "$work/hf31" --output "$work/imp4"
sed -i 's/"rope_type": "llama3"/"rope_type": "dynamic"/' "$work/hf31/config.json"
expect_cmd "rope_scaling type 'dynamic' is not supported" import --input "$work/hf31" --output "$work/imp5"
expect_cmd "--output .* exists and is not an empty directory" export --load "$work/ck" --output "$work/hf"

# --no-save-optim writes weights only; --ckpt-step picks an older iteration; --ckpt-format is a note.
"$mtron" train "${flags[@]}" --train-iters 4 --save "$work/w" --save-interval 2 --no-save-optim \
  >/dev/null 2>&1 || { echo "FAIL: --no-save-optim run"; fail=1; }
if ! grep -q '"optimizer": null' "$work/w/iter_0000004/manifest.json"; then
  echo "FAIL: --no-save-optim saved optimizer state"; fail=1
fi
out=$("$mtron" train "${flags[@]}" --train-iters 4 --load "$work/w" --ckpt-step 2 --ckpt-format torch_dist 2>&1)
for want in "loading checkpoint $work/w/iter_0000002 \\(iteration 2," "has no optimizer state" \
            "--ckpt-format torch_dist has no effect" "iteration +4/ +4"; do
  printf '%s' "$out" | grep -Eq -- "$want" || { echo "FAIL: no /$want/ in:"; echo "$out"; fail=1; }
done
[ $fail = 0 ] && echo "ok: --no-save-optim, --ckpt-step 2, --ckpt-format"
expect "iter_0000003/manifest.json" --ckpt-step 3
exit $fail
