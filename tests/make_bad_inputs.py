#!/usr/bin/env python3
"""Writes damaged and wrong inputs for tests/test_cli.sh (standard library only).

usage: make_bad_inputs.py SHARED_DIR OUT_DIR
"""
import json
import math
import os
import struct
import sys


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8 : 8 + n])
    return header, data[8 + n :]


def write_safetensors(path, tensors, metadata=None):
    """tensors: list of (name, dtype, shape, bytes)"""
    header, off, blobs = {}, 0, []
    for name, dtype, shape, blob in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + len(blob)]}
        off += len(blob)
        blobs.append(blob)
    if metadata:
        header["__metadata__"] = metadata
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def tensors_of(path):
    header, body = read_safetensors(path)
    out = []
    for k, v in header.items():
        if k == "__metadata__":
            continue
        a, b = v["data_offsets"]
        out.append((k, v["dtype"], v["shape"], body[a:b]))
    return out


def f32(values):
    return struct.pack("<%df" % len(values), *values)


def main():
    shared, out = sys.argv[1], sys.argv[2]
    model = os.path.join(shared, "fixtures", "wan21_tiny.safetensors")
    with open(model, "rb") as f:
        raw = f.read()
    # truncated and corrupted checkpoints
    for i, cut in enumerate([4, 8, 100, len(raw) // 2, len(raw) - 1]):
        with open(os.path.join(out, "trunc%d.safetensors" % i), "wb") as f:
            f.write(raw[:cut])
    open(os.path.join(out, "empty.safetensors"), "wb").close()
    bad = bytearray(raw)
    bad[20] = ord("}")  # breaks the JSON header
    with open(os.path.join(out, "badjson.safetensors"), "wb") as f:
        f.write(bad)
    huge = bytearray(raw)
    huge[0:8] = struct.pack("<Q", 1 << 62)  # header length beyond the file
    with open(os.path.join(out, "hugeheader.safetensors"), "wb") as f:
        f.write(huge)
    pth = open(os.path.join(shared, "models", "taef2_encoder.pth"), "rb").read()
    for i, cut in enumerate([10, len(pth) // 3, len(pth) - 30]):
        with open(os.path.join(out, "trunc%d.pth" % i), "wb") as f:
            f.write(pth[:cut])
    # a corrupted pickle: overwrite bytes inside data.pkl (found by name in the zip)
    p = bytearray(pth)
    at = p.find(b"data.pkl")
    if at > 0:
        for j in range(at + 60, at + 120):
            p[j] = 0xFF
    with open(os.path.join(out, "corrupt.pth"), "wb") as f:
        f.write(p)
    with open(os.path.join(out, "notamodel.gguf"), "wb") as f:
        f.write(b"GGUF" + struct.pack("<I", 3) + struct.pack("<QQ", 1 << 40, 1 << 40))

    ts = tensors_of(model)
    # missing key, unexpected key, wrong shape, NaN weights, wrong weight dtype
    write_safetensors(os.path.join(out, "missing_key.safetensors"),
                      [t for t in ts if t[0] != "decoder.head.2.bias"])
    write_safetensors(os.path.join(out, "extra_key.safetensors"),
                      ts + [("decoder.extra.weight", "F32", [2], f32([1, 2]))])
    write_safetensors(os.path.join(out, "wrong_shape.safetensors"),
                      [(n, d, [1] + s if n == "decoder.head.2.bias" else s, b) for n, d, s, b in ts])
    def nan_first(n, d, s, b):
        if n != "decoder.conv1.weight":
            return (n, d, s, b)
        return (n, d, s, f32([math.nan]) + b[4:])
    write_safetensors(os.path.join(out, "nan_weight.safetensors"), [nan_first(*t) for t in ts])
    write_safetensors(os.path.join(out, "int_weight.safetensors"),
                      [(n, "I32", s, b) if n == "decoder.conv1.bias" else (n, d, s, b)
                       for n, d, s, b in ts])
    # latents: good, wrong channel count, NaN, Inf, integer dtype, wrong rank, several tensors
    c, t, h, w = 16, 2, 4, 6
    good = [0.1 * ((i * 7) % 13 - 6) for i in range(c * t * h * w)]
    write_safetensors(os.path.join(out, "latent_ok.safetensors"), [("x", "F32", [1, c, t, h, w], f32(good))])
    write_safetensors(os.path.join(out, "latent_15ch.safetensors"),
                      [("x", "F32", [1, 15, t, h, w], f32(good[: 15 * t * h * w]))])
    nan = list(good)
    nan[77] = math.nan
    write_safetensors(os.path.join(out, "latent_nan.safetensors"), [("x", "F32", [1, c, t, h, w], f32(nan))])
    inf = list(good)
    inf[5] = math.inf
    write_safetensors(os.path.join(out, "latent_inf.safetensors"), [("x", "F32", [1, c, t, h, w], f32(inf))])
    write_safetensors(os.path.join(out, "latent_i64.safetensors"),
                      [("x", "I64", [1, c, t, h, w], struct.pack("<%dq" % len(good), *([1] * len(good))))])
    write_safetensors(os.path.join(out, "latent_rank3.safetensors"), [("x", "F32", [c, h, w], f32(good[: c * h * w]))])
    write_safetensors(os.path.join(out, "latent_two.safetensors"),
                      [("a", "F32", [1, c, t, h, w], f32(good)), ("b", "F32", [1, c, t, h, w], f32(good))])
    # a video with a size the encoder cannot take (not a multiple of 8)
    write_safetensors(os.path.join(out, "video_odd.safetensors"),
                      [("v", "F32", [1, 3, 1, 30, 44], f32([0.0] * (3 * 30 * 44)))])


if __name__ == "__main__":
    main()
