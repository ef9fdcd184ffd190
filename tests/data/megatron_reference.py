#!/usr/bin/python3
"""Independent reference for mtron's data layer, run with Debian's /usr/bin/python3 (numpy).

Written from Megatron-LM's published formats and algorithms (megatron/core/datasets:
indexed_dataset.py, gpt_dataset.py, helpers.cpp, blended_megatron_dataset_builder.py), not from
mtron's code, so that the C++ tests compare two implementations.

Commands (arguments as JSON in argv[2], or "@file" holding it; results on stdout as JSON or in
files):
  write_idx      {"prefix", "dtype": "uint16"|"int32", "documents": [[[ids...], ...], ...]}
                 writes <prefix>.bin/.idx; a document is a list of sequences
  read_idx       {"prefix"} -> {"dtype", "sequences": [[ids...]], "document_index": [...]}
  gpt_indices    {"prefix", "begin", "end", "num_samples"|null, "seq_length", "seed", "out"}
                 writes <out>-{document,sample,shuffle}_index.npy
  gpt_samples    same + "count": the first `count` samples' tokens -> [[ids...]]
  blend          {"weights", "size"} -> {"dataset_index", "dataset_sample_index"}
  shuffle        {"seed", "sizes": [n...]} -> successive RandomState.shuffle(arange(n))
  save_npy       {"path", "dtype", "shape", "values"} -> numpy.save
"""
import json
import struct
import sys

import numpy

MAGIC = b"MMIDIDX\x00\x00"
CODES = {1: numpy.uint8, 2: numpy.int8, 3: numpy.int16, 4: numpy.int32, 5: numpy.int64,
         6: numpy.float64, 7: numpy.float32, 8: numpy.uint16}
CODE_OF = {numpy.dtype(v).name: k for k, v in CODES.items()}


def write_idx(prefix, dtype, documents):
    dt = numpy.dtype(dtype)
    lengths, doc_index = [], [0]
    with open(prefix + ".bin", "wb") as f:
        for doc in documents:
            for seq in doc:
                f.write(numpy.asarray(seq, dtype=dt).tobytes())
                lengths.append(len(seq))
            doc_index.append(len(lengths))
    pointers, p = [], 0
    for n in lengths:
        pointers.append(p)
        p += n * dt.itemsize
    with open(prefix + ".idx", "wb") as f:
        f.write(MAGIC)
        f.write(struct.pack("<Q", 1))
        f.write(struct.pack("<B", CODE_OF[dt.name]))
        f.write(struct.pack("<Q", len(lengths)))
        f.write(struct.pack("<Q", len(doc_index)))
        f.write(numpy.asarray(lengths, dtype="<i4").tobytes())
        f.write(numpy.asarray(pointers, dtype="<i8").tobytes())
        f.write(numpy.asarray(doc_index, dtype="<i8").tobytes())


def read_idx(prefix):
    raw = open(prefix + ".idx", "rb").read()
    assert raw[:9] == MAGIC, "bad magic"
    version, = struct.unpack("<Q", raw[9:17])
    assert version == 1
    code = raw[17]
    n, d = struct.unpack("<QQ", raw[18:34])
    off = 34
    lengths = numpy.frombuffer(raw, "<i4", n, off)
    off += 4 * n
    pointers = numpy.frombuffer(raw, "<i8", n, off)
    off += 8 * n
    doc_index = numpy.frombuffer(raw, "<i8", d, off)
    dt = numpy.dtype(CODES[code])
    data = open(prefix + ".bin", "rb").read()
    seqs = [numpy.frombuffer(data, dt, int(l), int(p)).tolist() for l, p in zip(lengths, pointers)]
    return dt.name, seqs, doc_index.tolist(), lengths


def num_epochs(tokens_per_epoch, num_samples, seq_length):
    if num_samples is None:
        return 1
    epochs, tokens = 1, tokens_per_epoch
    while tokens < num_samples * seq_length + 1:
        epochs += 1
        tokens += tokens_per_epoch
    return epochs


def document_index(docs, epochs, rng, separate_last):
    if not separate_last or epochs == 1:
        idx = numpy.tile(numpy.asarray(docs, dtype=numpy.int32), epochs)
        rng.shuffle(idx)
        return idx
    first = document_index(docs, epochs - 1, rng, False)
    last = document_index(docs, 1, rng, False)
    return numpy.concatenate((first, last))


def sample_index(lengths, doc_idx, seq_length, epochs, tokens_per_epoch):
    # Cut samples of seq_length + 1 tokens every seq_length tokens from the concatenated
    # documents; record (position in doc_idx, offset) of each sample's first token.
    n = (epochs * tokens_per_epoch - 1) // seq_length
    out = [(0, 0)]
    pos, off = 0, 0
    for _ in range(n):
        need = seq_length  # tokens to advance to the next sample's start
        while True:
            avail = int(lengths[doc_idx[pos]]) - off
            if need < avail:
                off += need
                break
            need -= avail
            if pos == len(doc_idx) - 1:  # ran out exactly: the last token of the data
                off = int(lengths[doc_idx[pos]]) - 1
                break
            pos, off = pos + 1, 0
        out.append((pos, off))
    return numpy.asarray(out, dtype=numpy.int64)


def gpt_indices(lengths, begin, end, num_samples, seq_length, seed):
    tpe = int(numpy.sum(lengths[begin:end]))
    epochs = num_epochs(tpe, num_samples, seq_length)
    separate = False
    if epochs > 1:
        sans = ((epochs - 1) * tpe - 1) // seq_length
        per_epoch = (tpe - 1) // seq_length
        separate = (num_samples - sans) < int(0.80 * per_epoch)
    rng = numpy.random.RandomState(seed)
    doc_idx = document_index(numpy.arange(begin, end), epochs, rng, separate)
    samples = sample_index(lengths, doc_idx, seq_length, epochs, tpe)
    n = samples.shape[0] - 1
    big = max(doc_idx.shape[0], int(numpy.max(lengths))) > numpy.iinfo(numpy.int32).max
    samples = samples.astype(numpy.int64 if big else numpy.int32)
    sdt = numpy.int64 if n >= numpy.iinfo(numpy.uint32).max - 1 else numpy.uint32
    first = ((epochs - 1) * tpe - 1) // seq_length if separate else n
    a = numpy.arange(0, first, dtype=sdt)
    rng.shuffle(a)
    b = numpy.arange(first, n, dtype=sdt)
    rng.shuffle(b)
    return doc_idx, samples, numpy.concatenate((a, b)), epochs


def gpt_sample(seqs, doc_idx, samples, shuffle, seq_length, idx):
    i = shuffle[idx]
    (pb, ob), (pe, oe) = samples[i], samples[i + 1]
    tokens = []
    for p in range(pb, pe + 1):
        seq = seqs[doc_idx[p]]
        lo = ob if p == pb else 0
        hi = oe + 1 if p == pe else len(seq)
        tokens += seq[lo:hi]
    assert len(tokens) == seq_length + 1
    return tokens


def blend(weights, size):
    w = numpy.asarray(weights, dtype=numpy.float64)
    w = (w / numpy.sum(w)).tolist()
    taken = [0] * len(w)
    di, dsi = [], []
    for j in range(size):
        errs = [w[i] * max(j, 1) - taken[i] for i in range(len(w))]
        best = max(range(len(w)), key=lambda i: (errs[i], -i))
        di.append(best)
        dsi.append(taken[best])
        taken[best] += 1
    return di, dsi


def main():
    cmd, arg = sys.argv[1], sys.argv[2]
    args = json.loads(open(arg[1:]).read() if arg.startswith("@") else arg)
    if cmd == "write_idx":
        write_idx(args["prefix"], args["dtype"], args["documents"])
    elif cmd == "read_idx":
        dt, seqs, doc_index, _ = read_idx(args["prefix"])
        print(json.dumps({"dtype": dt, "sequences": seqs, "document_index": doc_index}))
    elif cmd in ("gpt_indices", "gpt_samples"):
        _, seqs, _, lengths = read_idx(args["prefix"])
        d, s, sh, epochs = gpt_indices(lengths, args["begin"], args["end"], args["num_samples"],
                                       args["seq_length"], args["seed"])
        if cmd == "gpt_indices":
            numpy.save(args["out"] + "-document_index.npy", d)
            numpy.save(args["out"] + "-sample_index.npy", s)
            numpy.save(args["out"] + "-shuffle_index.npy", sh)
            print(json.dumps({"epochs": epochs}))
        else:
            print(json.dumps([gpt_sample(seqs, d, s, sh, args["seq_length"], k)
                              for k in range(args["count"])]))
    elif cmd == "blend":
        di, dsi = blend(args["weights"], args["size"])
        print(json.dumps({"dataset_index": di, "dataset_sample_index": dsi}))
    elif cmd == "shuffle":
        rng = numpy.random.RandomState(args["seed"])
        out = []
        for n in args["sizes"]:
            a = numpy.arange(n, dtype=numpy.int64)
            rng.shuffle(a)
            out.append(a.tolist())
        print(json.dumps(out))
    elif cmd == "save_npy":
        a = numpy.asarray(args["values"], dtype=args["dtype"]).reshape(args["shape"])
        numpy.save(args["path"], a)
    else:
        sys.exit(f"unknown command {cmd}")


if __name__ == "__main__":
    main()
