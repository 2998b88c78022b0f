#!/usr/bin/env python3
"""Writes the small hostile files of tests/regress/ (issue 12: files that made the engine use
gigabytes or hang). Standard library only; the output is byte-for-byte reproducible.

usage: make_hostile_inputs.py OUT_DIR

Each file is a few KiB to ~80 KiB and, before the bounds of src/formats/limits.h, cost 1 to 16+ GiB
of memory. tests/regress/README.md lists them with the error each must now give.
"""
import os
import struct
import sys
import zlib


# ---- zip (what torch.save writes, built by hand so that entries can share bytes) ----

def deflate(data):
    """Raw deflate (no zlib header), as zip entries hold it; level 9 for the smallest files."""
    c = zlib.compressobj(9, zlib.DEFLATED, -15, 9)
    return c.compress(data) + c.flush()


def local_header(name, method, crc, csize, usize):
    return struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 0, method, 0, 0, crc, csize, usize,
                       len(name), 0) + name


def central_record(name, method, crc, csize, usize, offset):
    return struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 20, 20, 0, method, 0, 0, crc, csize,
                       usize, len(name), 0, 0, 0, 0, 0, offset) + name


def end_record(count, cd_size, cd_off):
    return struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, count, count, cd_size, cd_off, 0)


def make_zip(entries, aliases=()):
    """entries: (name, data, deflated?); aliases: (name, target) central records that point at
    the bytes of an earlier entry (the hostile part of class 1)."""
    body, central, where = b"", [], {}
    for name, data, comp in entries:
        name = name.encode()
        blob = deflate(data) if comp else data
        method, crc = (8 if comp else 0), zlib.crc32(data)
        where[name] = (method, crc, len(blob), len(data), len(body))
        central.append(central_record(name, *where[name]))
        body += local_header(name, method, crc, len(blob), len(data)) + blob
    for name, target in aliases:
        central.append(central_record(name.encode(), *where[target.encode()]))
    cd = b"".join(central)
    return body + cd + end_record(len(central), len(cd), len(body))


# ---- pickle protocol 2, just the opcodes torch.save uses ----

class Pickle:
    def __init__(self):
        self.b = bytearray(b"\x80\x02")
        self.memo = {}

    def op(self, data):
        self.b += data
        return self

    def uni(self, s):
        s = s.encode() if isinstance(s, str) else s
        return self.op(b"X" + struct.pack("<I", len(s)) + s)

    def int(self, v):
        return self.op(b"J" + struct.pack("<i", v))

    def put(self, key):
        """Stores the top of the stack under memo slot `key` (a label)."""
        self.memo[key] = len(self.memo)
        return self.op(b"r" + struct.pack("<I", self.memo[key]))

    def get(self, key):
        return self.op(b"j" + struct.pack("<I", self.memo[key]))

    def glob(self, mod, name):
        key = "g:" + mod + "." + name
        if key in self.memo:
            return self.get(key)
        return self.op(b"c" + mod.encode() + b"\n" + name.encode() + b"\n").put(key)

    def ints(self, vals):
        self.op(b"(")
        for v in vals:
            self.int(v)
        return self.op(b"t")

    def tensor(self, key, numel, size, stride, offset=0):
        """_rebuild_tensor_v2(storage('FloatStorage', key, numel), offset, size, stride, False,
        OrderedDict())"""
        self.glob("torch._utils", "_rebuild_tensor_v2").op(b"(")
        self.op(b"(").uni("storage").glob("torch", "FloatStorage").uni(key).uni("cpu")
        self.int(numel).op(b"tQ").int(offset).ints(size).ints(stride).op(b"\x89")
        return self.glob("collections", "OrderedDict").op(b")R").op(b"tR")

    def done(self):
        return bytes(self.op(b".").b)


def checkpoint(pkl, storages, pkl_deflated=False, aliases=()):
    """A torch.save-style archive: archive/data.pkl and archive/data/<key> (deflated storages)."""
    entries = [("archive/data.pkl", pkl, pkl_deflated), ("archive/byteorder", b"little", False)]
    entries += [("archive/data/" + k, v, True) for k, v in storages]
    return make_zip(entries, [("archive/data/" + a, "archive/data/" + t) for a, t in aliases])


# ---- class 1: zip entries sharing one deflate stream ----

def zip_shared_stream():
    # 400 central records point at one 4 MiB stream of zeros (~4 KiB deflated): 1.6 GiB claimed.
    n, numel = 400, 1 << 20
    p = Pickle().op(b"}")
    for i in range(n):
        p.uni("w%d" % i).tensor(str(i), numel, [numel], [1]).op(b"s")
    return checkpoint(p.done(), [("0", bytes(4 * numel))], aliases=[(str(i), "0") for i in range(1, n)])


# ---- class 2: views with zero or overlapping strides ----

def view_zero_stride():
    # one float viewed 2^29 times: a 2 GiB gather from a 4-byte storage
    p = Pickle().op(b"}").uni("w").tensor("0", 1, [1 << 29], [0]).op(b"s")
    return checkpoint(p.done(), [("0", bytes(4))])


def view_overlap_many():
    # 256 views [1024, 1024] with strides (1, 1) over one 4 MiB storage: each within 2x the
    # storage, 1 GiB together
    numel = 1 << 20
    p = Pickle().op(b"}")
    for i in range(256):
        p.uni("w%d" % i).tensor("0", numel, [1024, 1024], [1, 1]).op(b"s")
    return checkpoint(p.done(), [("0", bytes(4 * numel))])


# ---- class 3: pickles that unfold or allocate far beyond their size ----

def pickle_memo_fanout():
    # 5 levels of dicts, each with 16 250-byte keys that all point at the level below through
    # the memo: 16^5 = 1M tensors with 1.3 KiB names from a 20 KiB pickle
    p = Pickle().op(b"}").uni("w").tensor("0", 1, [1], [1]).op(b"s").put("level0").op(b"0")
    for lv in range(1, 6):
        p.op(b"}")
        for k in range(16):
            p.uni(("%c%d" % (ord("a") + k, lv)) * 125).get("level%d" % (lv - 1)).op(b"s")
        p.put("level%d" % lv)
        if lv < 5:
            p.op(b"0")
    return checkpoint(p.done(), [("0", bytes(4))])


def pickle_many_objects(count):
    # MARK, `count` NONE objects, POP_MARK, then an empty dict: each NONE is a heap object, so
    # a pickle of highly compressible bytes becomes ~200 bytes of heap per byte
    pkl = b"\x80\x02(" + b"N" * count + b"1}."
    return checkpoint(pkl, [], pkl_deflated=True)


# ---- class 4: images, safetensors dtypes ----

def png_chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def png_huge(w=20000, h=20000):
    # 20000x20000 1-bit grey, all black: ~50 KiB compressed, 1.2 GB as 8-bit RGB, 4.8 GB as float
    raw = (b"\x00" * (1 + (w + 7) // 8)) * h
    ihdr = struct.pack(">IIBBBBB", w, h, 1, 0, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", ihdr) + png_chunk(b"IDAT", zlib.compress(raw, 9)) +
            png_chunk(b"IEND", b""))


def st_unknown_dtype():
    # an unknown dtype: its size per element is unknown, so nothing bounds the shape by the data
    h = b'{"x":{"dtype":"Q9_Z","shape":[1099511627776],"data_offsets":[0,4]}}'
    h += b" " * ((8 - len(h) % 8) % 8)
    return struct.pack("<Q", len(h)) + h + bytes(4)


FILES = {
    "zip_shared_stream.pth": zip_shared_stream,
    "view_zero_stride.pth": view_zero_stride,
    "view_overlap_many.pth": view_overlap_many,
    "pickle_memo_fanout.pth": pickle_memo_fanout,
    "pickle_many_objects.pth": lambda: pickle_many_objects(60_000_000),
    "pickle_oversized.pth": lambda: pickle_many_objects(80_000_000),
    "png_huge.png": png_huge,
    # below FFmpeg's own size check (which refuses 20000x20000), so its decoder is reached
    "png_16000.png": lambda: png_huge(16000, 16000),
    "st_unknown_dtype.safetensors": st_unknown_dtype,
}


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    for name, make in FILES.items():
        with open(os.path.join(out, name), "wb") as f:
            f.write(make())


if __name__ == "__main__":
    main()
