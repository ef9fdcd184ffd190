#!/usr/bin/python3
"""A small corpus whose documents end in the end-of-document token often, for the tests of
--eod-mask-loss: 3000 documents of 1 to 40 NullTokenizer ids in [0, 499), each followed by the
EOD id 499 (NullTokenizer's default for --vocab-size 500), preprocessed by `mtron preprocess`.

  eod_corpus.py MTRON OUT_PREFIX    writes OUT_PREFIX_text_document.{bin,idx}

MTRON_EMULATOR (in the environment; a cross build's tests set it) goes in front of MTRON.

The same files every time (a fixed seed); written under temporary names and renamed, so tests
that make it side by side never read half a file.
"""
import json
import os
import random
import shlex
import subprocess
import sys
import tempfile


def make(mtron, prefix, emulator=()):
    rng = random.Random(1234)
    folder = os.path.dirname(os.path.abspath(prefix))
    os.makedirs(folder, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=folder) as tmp:
        src = os.path.join(tmp, "docs.jsonl")
        with open(src, "w") as f:
            for _ in range(3000):
                n = rng.randint(1, 40)
                f.write(json.dumps({"text": " ".join(str(rng.randrange(499)) for _ in range(n))}))
                f.write("\n")
        part = os.path.join(tmp, "part")
        subprocess.run(list(emulator) + [mtron, "preprocess", "--input", src, "--output-prefix", part,
                        "--tokenizer-type", "NullTokenizer", "--vocab-size", "500", "--append-eod",
                        "--progress", "none"], check=True, stdout=subprocess.DEVNULL)
        for ext in ("bin", "idx"):
            os.replace("%s_text_document.%s" % (part, ext), "%s_text_document.%s" % (prefix, ext))
    return prefix + "_text_document"


if __name__ == "__main__":
    print(make(sys.argv[1], sys.argv[2], shlex.split(os.environ.get("MTRON_EMULATOR", ""))))
