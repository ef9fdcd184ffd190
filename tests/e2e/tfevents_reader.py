"""An independent reader of TensorBoard event files, written from the format's description (not
from mtron's writer): TFRecord framing, each length and payload guarded by a masked CRC-32C, and
the tensorflow.Event / Summary protocol buffers decoded field by field.

    record  := uint64 length | uint32 masked_crc(length) | data | uint32 masked_crc(data)
    masked  := ((crc >> 15) | (crc << 17)) + 0xa282ead8 (mod 2**32), crc = CRC-32C (Castagnoli)
    Event   := wall_time (1, double) | step (2, int64) | file_version (3, string) | summary (5)
    Summary := repeated value (1); Value := tag (1, string) | simple_value (2, float)
"""
import struct

# CRC-32C, reflected polynomial 0x82F63B78, bit by bit.
_TABLE = []
for _n in range(256):
    _c = _n
    for _ in range(8):
        _c = (_c >> 1) ^ 0x82F63B78 if _c & 1 else _c >> 1
    _TABLE.append(_c)


def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc = _TABLE[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked(crc):
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def records(path):
    with open(path, "rb") as f:
        blob = f.read()
    at = 0
    while at < len(blob):
        header = blob[at:at + 8]
        (length,) = struct.unpack("<Q", header)
        (crc_len,) = struct.unpack("<I", blob[at + 8:at + 12])
        assert crc_len == masked(crc32c(header)), "length CRC mismatch at byte %d" % at
        data = blob[at + 12:at + 12 + length]
        (crc_data,) = struct.unpack("<I", blob[at + 12 + length:at + 16 + length])
        assert len(data) == length and crc_data == masked(crc32c(data)), \
            "data CRC mismatch at byte %d" % at
        yield data
        at += 16 + length


def fields(buf):
    """(field number, wire type, value) of a protocol buffer message."""
    at = 0

    def varint():
        nonlocal at
        v, shift = 0, 0
        while True:
            b = buf[at]
            at += 1
            v |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                return v

    while at < len(buf):
        key = varint()
        num, wire = key >> 3, key & 7
        if wire == 0:
            yield num, wire, varint()
        elif wire == 1:
            yield num, wire, buf[at:at + 8]
            at += 8
        elif wire == 2:
            n = varint()
            yield num, wire, buf[at:at + n]
            at += n
        elif wire == 5:
            yield num, wire, buf[at:at + 4]
            at += 4
        else:
            raise ValueError("unexpected wire type %d" % wire)


def events(path):
    """Every event as a dict: wall_time, step, file_version, scalars [(tag, value)]."""
    out = []
    for data in records(path):
        e = {"step": 0, "scalars": []}
        for num, wire, v in fields(data):
            if num == 1 and wire == 1:
                e["wall_time"] = struct.unpack("<d", v)[0]
            elif num == 2 and wire == 0:
                e["step"] = v
            elif num == 3 and wire == 2:
                e["file_version"] = v.decode()
            elif num == 5 and wire == 2:
                for vn, vw, value in fields(v):
                    if vn != 1 or vw != 2:
                        continue
                    tag, simple = None, None
                    for f, w, x in fields(value):
                        if f == 1 and w == 2:
                            tag = x.decode()
                        elif f == 2 and w == 5:
                            simple = struct.unpack("<f", x)[0]
                    e["scalars"].append((tag, simple))
        out.append(e)
    return out


def scalars(path):
    """{tag: {step: value}} of every scalar in the file (the first value of a step)."""
    s = {}
    for tag, points in series(path).items():
        s[tag] = {}
        for step, value in points:
            s[tag].setdefault(step, value)
    return s


def series(path):
    """{tag: [(step, value), ...]} in file order (a step may repeat)."""
    s = {}
    for e in events(path):
        for tag, value in e["scalars"]:
            s.setdefault(tag, []).append((e["step"], value))
    return s
