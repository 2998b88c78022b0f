#!/usr/bin/env python3
"""Writes the fuzz seed corpus, tests/fuzz/corpus/<target>/ (Python standard library only).

Tiny valid files of each format (safetensors, PyTorch .pth zip + pickle, GGUF, .npy) in the
storage types the readers know, plus truncated and damaged variants; for fuzz_model, tiny
checkpoints of each architecture's key scheme (a TAESD decoder of width 1 built here; with
--vae PATH/TO/vae also `vae synth` Wan2.1 / Wan2.2 / SeedVR2 checkpoints, stored as F16).
Every file is small (< 20 KB). Run from anywhere: python3 tests/fuzz/make_corpus.py [--vae BIN]
"""
import argparse
import io
import json
import os
import struct
import subprocess
import sys
import tempfile
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
CORPUS = os.path.join(HERE, "corpus")


def put(target, name, data):
    d = os.path.join(CORPUS, target)
    os.makedirs(d, exist_ok=True)
    assert len(data) < 20 * 1024, (target, name, len(data))
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def variants(target, name, data):
    """The file, a truncated copy and one with a byte flipped in the header."""
    put(target, name, data)
    put(target, name + ".trunc", data[: max(1, len(data) * 2 // 3)])
    bad = bytearray(data)
    bad[min(len(bad) - 1, 12)] ^= 0x5A
    put(target, name + ".flip", bytes(bad))


def floats(n, fmt="f"):
    return struct.pack("<%d%s" % (n, fmt), *[(i % 7) * 0.25 - 0.5 for i in range(n)])


# ---- safetensors -------------------------------------------------------------------------------
ST_SIZE = {"F32": 4, "F16": 2, "BF16": 2, "F64": 8, "F8_E4M3": 1, "F8_E5M2": 1, "I64": 8, "I32": 4}


def safetensors(tensors, meta=None):
    """tensors: list of (name, dtype, shape, bytes)."""
    header, blob = {}, b""
    for name, dt, shape, data in tensors:
        header[name] = {"dtype": dt, "shape": list(shape), "data_offsets": [len(blob), len(blob) + len(data)]}
        blob += data
    if meta:
        header["__metadata__"] = meta
    js = json.dumps(header, separators=(",", ":")).encode()
    js += b" " * (-len(js) % 8)
    return struct.pack("<Q", len(js)) + js + blob


def bf16(n):
    return b"".join(struct.pack("<f", (i % 5) * 0.5)[2:] for i in range(n))


def make_safetensors():
    variants("fuzz_safetensors", "f32_2.safetensors",
             safetensors([("a.weight", "F32", (2, 3), floats(6)), ("a.bias", "F32", (2,), floats(2))]))
    variants("fuzz_safetensors", "mixed.safetensors", safetensors([
        ("h", "F16", (4,), floats(4, "e")), ("b", "BF16", (2, 2), bf16(4)), ("d", "F64", (3,), floats(3, "d")),
        ("e4", "F8_E4M3", (8,), bytes(range(8))), ("e5", "F8_E5M2", (8,), bytes(range(100, 108))),
        ("i", "I64", (1,), struct.pack("<q", 7)), ("u", "U8", (2,), b"\x01\x02"),
        ("scalar", "F32", (), floats(1)), ("empty", "F32", (0, 4), b"")]))
    put("fuzz_safetensors", "meta.safetensors", safetensors(
        [("x", "F32", (1,), floats(1))], {"vae.arch": "wan2.1", "vae.config": '{"dim":2}'}))
    put("fuzz_safetensors", "empty_header.safetensors", safetensors([]))


# ---- npy ---------------------------------------------------------------------------------------
def npy(descr, shape, data, fortran=False, version=1):
    d = "{'descr': '%s', 'fortran_order': %s, 'shape': %s, }" % (
        descr, "True" if fortran else "False", "(%s)" % "".join("%d, " % s for s in shape) if len(shape) != 1
        else "(%d,)" % shape[0])
    pre = 10 if version == 1 else 12
    d = d.encode() + b" " * (-(pre + len(d) + 1) % 64) + b"\n"
    hl = struct.pack("<H", len(d)) if version == 1 else struct.pack("<I", len(d))
    return b"\x93NUMPY" + bytes([version, 0]) + hl + d + data


def make_npy():
    variants("fuzz_npy", "f4_2x3.npy", npy("<f4", (2, 3), floats(6)))
    put("fuzz_npy", "f2_4.npy", npy("<f2", (4,), floats(4, "e")))
    put("fuzz_npy", "f8_scalar_v2.npy", npy("<f8", (), floats(1, "d"), version=2))
    put("fuzz_npy", "fortran_2x2.npy", npy("<f4", (2, 2), floats(4), fortran=True))
    put("fuzz_npy", "bigendian.npy", npy(">f4", (2,), struct.pack(">2f", 1.0, 2.0)))


# ---- GGUF --------------------------------------------------------------------------------------
def gstr(s):
    s = s.encode()
    return struct.pack("<Q", len(s)) + s


def gguf(tensors, kv=(), alignment=32, version=3):
    """tensors: (name, ggml type, dims innermost first, bytes); kv: (key, type, packed value)."""
    out = b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(kv))
    for k, t, v in kv:
        out += gstr(k) + struct.pack("<I", t) + v
    blob = b""
    infos = b""
    for name, typ, dims, data in tensors:
        blob += b"\0" * (-len(blob) % alignment)
        infos += gstr(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims)
        infos += struct.pack("<IQ", typ, len(blob))
        blob += data
    out += infos
    out += b"\0" * (-len(out) % alignment)
    return out + blob


def q8_0(nblocks):
    return b"".join(struct.pack("<e", 0.5) + bytes((j * 3) & 0xFF for j in range(32)) for _ in range(nblocks))


def make_gguf():
    kv = [("general.architecture", 8, gstr("vae")), ("general.alignment", 4, struct.pack("<I", 32)),
          ("list", 9, struct.pack("<IQ", 5, 2) + struct.pack("<2i", 1, 2)), ("f", 6, struct.pack("<f", 1.5))]
    variants("fuzz_gguf", "mixed.gguf", gguf([
        ("w", 0, (3, 2), floats(6)), ("h", 1, (4,), floats(4, "e")), ("q", 8, (32, 2), q8_0(2)),
        ("bf", 30, (2,), bf16(2)), ("d", 28, (1,), floats(1, "d")), ("i", 27, (1,), struct.pack("<q", 3))], kv))
    put("fuzz_gguf", "v2_one.gguf", gguf([("x", 0, (2,), floats(2))], version=2))
    put("fuzz_gguf", "align64.gguf", gguf([("x", 0, (2,), floats(2)), ("y", 0, (1,), floats(1))],
                                          [("general.alignment", 4, struct.pack("<I", 64))], alignment=64))


# ---- PyTorch .pth: zip + pickle ----------------------------------------------------------------
class Pickle:
    """Just the opcodes torch.save writes for a (nested) dict of tensors, protocol 2."""

    def __init__(self):
        self.b = bytearray(b"\x80\x02")
        self.memo = 0

    def op(self, x):
        self.b += x
        return self

    def put(self):
        self.b += b"q" + bytes([self.memo])  # BINPUT
        self.memo += 1

    def global_(self, mod, name):
        self.b += b"c" + mod.encode() + b"\n" + name.encode() + b"\n"
        self.put()

    def str_(self, s):
        s = s.encode()
        self.b += b"X" + struct.pack("<I", len(s)) + s  # BINUNICODE
        self.put()

    def int_(self, v):
        self.b += b"K" + bytes([v]) if 0 <= v < 256 else b"J" + struct.pack("<i", v)

    def tuple_(self, items):
        self.b += b"("
        for it in items:
            it()
        self.b += b"t"
        self.put()

    def tensor(self, storage_cls, key, numel, shape, v3_dtype=None):
        self.global_("torch._utils", "_rebuild_tensor_v3" if v3_dtype else "_rebuild_tensor_v2")
        self.b += b"("
        # persistent id ('storage', torch.XStorage, key, 'cpu', numel)
        self.tuple_([lambda: self.str_("storage"), lambda: self.global_("torch", storage_cls),
                     lambda: self.str_(key), lambda: self.str_("cpu"), lambda: self.int_(numel)])
        self.b += b"Q"  # BINPERSID
        self.int_(0)  # storage offset
        self.tuple_([(lambda d: lambda: self.int_(d))(d) for d in shape])
        strides, acc = [], 1
        for d in reversed(shape):
            strides.insert(0, acc)
            acc *= d
        self.tuple_([(lambda d: lambda: self.int_(d))(d) for d in strides])
        self.b += b"\x89"  # requires_grad False
        self.global_("collections", "OrderedDict")
        self.b += b")R"
        self.put()
        if v3_dtype:
            self.global_("torch", v3_dtype)
        self.b += b"t"
        self.put()
        self.b += b"R"  # REDUCE
        self.put()


def pth(entries, dirname="archive", compress=False):
    """entries: list of (dotted name, storage class, shape, bytes); nested dicts by the dots."""
    p = Pickle()
    p.b += b"}"  # EMPTY_DICT (the top-level state dict)
    p.put()
    p.b += b"("
    storages = {}
    for i, (name, cls, shape, data) in enumerate(entries):
        p.str_(name)
        numel = 1
        for d in shape:
            numel *= d
        p.tensor(cls, str(i), numel, shape)
        storages[str(i)] = data
    p.b += b"u."  # SETITEMS, STOP
    buf = io.BytesIO()
    method = zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED
    with zipfile.ZipFile(buf, "w", method) as z:
        for name, data in [("data.pkl", bytes(p.b)), ("byteorder", b"little")] + \
                [("data/" + k, v) for k, v in storages.items()] + [("version", b"3\n")]:
            info = zipfile.ZipInfo(dirname + "/" + name, date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = method
            z.writestr(info, data)
    return buf.getvalue()


def make_pth():
    variants("fuzz_pth", "f32.pth", pth([("enc.w", "FloatStorage", (2, 3), floats(6)),
                                         ("enc.b", "FloatStorage", (2,), floats(2))]))
    put("fuzz_pth", "half_bf16.pth", pth([("h", "HalfStorage", (4,), floats(4, "e")),
                                          ("b", "BFloat16Storage", (2,), bf16(2))], dirname="model"))
    put("fuzz_pth", "deflated.pth", pth([("w", "FloatStorage", (4, 4), floats(16))], compress=True))


# ---- model detection (fuzz_model): TAESD decoder of width 1, any file of the other formats -----
def taesd_decoder(width=1, latent=1):
    t = []

    def conv(idx, ci, co, bias=True):
        t.append(("%d.weight" % idx, "F16", (co, ci, 3, 3), floats(co * ci * 9, "e")))
        if bias:
            t.append(("%d.bias" % idx, "F16", (co,), floats(co, "e")))

    def block(idx):
        for k in (0, 2, 4):
            t.append(("%d.conv.%d.weight" % (idx, k), "F16", (width, width, 3, 3), floats(width * width * 9, "e")))
            t.append(("%d.conv.%d.bias" % (idx, k), "F16", (width,), floats(width, "e")))

    conv(1, latent, width)
    for i in (3, 4, 5):
        block(i)
    conv(7, width, width, False)
    for i in (8, 9, 10):
        block(i)
    conv(12, width, width, False)
    for i in (13, 14, 15):
        block(i)
    conv(17, width, width, False)
    block(18)
    conv(19, width, 3)
    return safetensors(t)


def to_f16(st_bytes):
    """A safetensors file with its F32 tensors stored as F16 (halves a synthetic checkpoint)."""
    (n,) = struct.unpack("<Q", st_bytes[:8])
    header = json.loads(st_bytes[8:8 + n])
    data = st_bytes[8 + n:]
    out = []
    for name, e in header.items():
        if name == "__metadata__":
            continue
        b, end = e["data_offsets"]
        raw = data[b:end]
        if e["dtype"] == "F32":
            vals = struct.unpack("<%df" % (len(raw) // 4), raw)
            raw = struct.pack("<%de" % len(vals), *[max(-65504.0, min(65504.0, v)) for v in vals])
            e["dtype"] = "F16"
        out.append((name, e["dtype"], e["shape"], raw))
    return safetensors(out, header.get("__metadata__"))


def make_model(vae):
    put("fuzz_model", "taesd_dec_w1.safetensors", taesd_decoder())
    put("fuzz_model", "f32.pth", pth([("decoder.conv1.weight", "FloatStorage", (2, 3), floats(6))]))
    put("fuzz_model", "one.npy", npy("<f4", (2, 3), floats(6)))
    put("fuzz_model", "one.gguf", gguf([("decoder.conv1.weight", 0, (3, 2), floats(6))]))
    if not vae:
        return
    tiny = {"dim": 2, "dec_dim": 2, "z_dim": 2, "dim_mult": [1, 1], "num_res_blocks": 1,
            "temperal_downsample": [False]}
    cfgs = [("wan2.1", "wan21_tiny", dict(tiny, dec_dim=None)), ("wan2.2", "wan22_tiny", tiny),
            ("seedvr2", "seedvr2_tiny", {"block_out_channels": [2, 2], "layers_per_block": 1,
                                          "latent_channels": 2, "norm_num_groups": 1,
                                          "temporal_scale_num": 1})]
    with tempfile.TemporaryDirectory() as tmp:
        for arch, name, cfg in cfgs:
            cfg = {k: v for k, v in cfg.items() if v is not None}
            out = os.path.join(tmp, name + ".safetensors")
            subprocess.run([vae, "synth", arch, "-o", out, "--config", json.dumps(cfg)], check=True,
                           stdout=subprocess.DEVNULL)
            with open(out, "rb") as f:
                put("fuzz_model", name + ".f16.safetensors", to_f16(f.read()))


# ---- images (fuzz_media): tiny PNGs of each colour type and depth ------------------------------
def png(w, h, color_type, depth, interlace=0):
    import zlib
    chans = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}[color_type]
    bpr = (w * chans * depth + 7) // 8
    raw = b"".join(b"\0" + bytes((x * 37 + y * 11) & 0xFF for x in range(bpr)) for y in range(h))

    def chunk(kind, data):
        c = kind + data
        return struct.pack(">I", len(data)) + c + struct.pack(">I", zlib.crc32(c) & 0xFFFFFFFF)

    out = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, depth, color_type, 0, 0, interlace))
    if color_type == 3:
        out += chunk(b"PLTE", bytes(range(48)))
    return out + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")


def make_media():
    variants("fuzz_media", "rgb8_8x8.png", png(8, 8, 2, 8))
    put("fuzz_media", "gray8_16x4.png", png(16, 4, 0, 8))
    put("fuzz_media", "rgba16_4x4.png", png(4, 4, 6, 16))
    put("fuzz_media", "pal4_6x6.png", png(6, 6, 3, 4))
    put("fuzz_media", "rgb8_adam7.png", png(8, 8, 2, 8, interlace=1))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vae", help="a built vae CLI, for `vae synth` model seeds")
    a = ap.parse_args()
    make_safetensors()
    make_npy()
    make_gguf()
    make_pth()
    make_media()
    make_model(a.vae)
    total = sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(CORPUS) for f in fs)
    print("corpus: %s (%d bytes)" % (CORPUS, total))


if __name__ == "__main__":
    sys.exit(main())
