"""The Python package on the GPU, same run as `vae bench`: Wan2.1 decode through vaec with torch
CUDA tensors in and out, and through the diffusers drop-in, timed like bench/timing.py; one run
under torch.profiler to list every memory copy of the decode by kind (no host copy of latents or
frames: only the 8-byte NaN-check result comes back).

usage: python3 bench/vaec_bench.py [--frames 81] [--size 480x832] [--runs 5] [--dtype bf16]
                                   [--taehv VARIANT --op decode|encode]
Prints VAEC lines: wall median, peak, the copy kinds, and diffusers' own decode of the same
module beside the drop-in (the ratio).

--taehv VARIANT (taew2_1, taew2_2, ...): that tiny autoencoder's decode or encode instead, its
input and output CUDA tensors of --dtype, as bench/taehv_ref.py times upstream's taehv.py
(`vae bench` reads and writes float32 host memory: its time holds the copies over the host link).
"""
import argparse
import collections
import statistics
import tempfile
import time

import torch

import vaec


def timed(fn, runs):
    fn()  # warm-up (tuning, graphs)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()  # the timed runs' peak, as `vae bench` reports it
    ts = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts), ts


def copies(fn):
    """What the CUDA activity of one call shows: memory copies and sets by kind ({kind: (n,
    bytes)}), and the GPU's time in kernels against the call's span (ms), which says whether the
    call waits on the GPU or the GPU on the host."""
    from torch.profiler import ProfilerActivity, profile
    t0 = time.perf_counter()
    with profile(activities=[ProfilerActivity.CUDA, ProfilerActivity.CPU]) as prof:
        fn()
        torch.cuda.synchronize()
    kinds = collections.defaultdict(lambda: [0, 0])
    dev = []
    for e in prof.events():
        if e.name.startswith("Memcpy") or e.name.startswith("Memset"):
            k = kinds[e.name.split(" (")[0]]
            k[0] += 1
            k[1] += int(getattr(e, "nbytes", 0) or 0)
        if str(getattr(e, "device_type", "")).endswith("CUDA"):
            dev.append((e.time_range.start, e.time_range.end, e.name))
    dev.sort()
    busy = sum(b - a for a, b, _ in dev) / 1e3
    span = (dev[-1][1] - dev[0][0]) / 1e3 if dev else 0.0
    gaps, end, prev = [], dev[0][1] if dev else 0, dev[0][2] if dev else ""
    for a, b, name in dev[1:]:  # the GPU idle between its events: the host's share of the call
        if a - end > 20:
            gaps.append((round((a - end) / 1e3, 3), prev[:40], name[:40]))
        if b > end:
            end, prev = b, name
    gaps.sort(reverse=True)
    return dict(kinds), {"gpu_ms": round(busy, 2), "gpu_span_ms": round(span, 2),
                         "device_events": len(dev), "idle_over_20us_ms":
                         round(sum(g[0] for g in gaps), 2), "idle_gaps": len(gaps),
                         "largest_idle": gaps[:6],
                         "profiled_wall_ms": round((time.perf_counter() - t0) * 1e3, 1)}


def host_lines(fn):
    """The engine's own account of one call's host time (its INFO lines through vaec's logger)."""
    import logging
    lines = []

    class Keep(logging.Handler):
        def emit(self, record):
            lines.append(record.getMessage())

    log, keep = logging.getLogger("vaec"), Keep()
    level = log.level
    log.addHandler(keep)
    log.setLevel(logging.INFO)
    try:
        fn()
        torch.cuda.synchronize()
    finally:
        log.removeHandler(keep)
        log.setLevel(level)
    return [m for m in lines if "host time" in m or "done in" in m]


def taehv(a, h, w, dt):
    """A TAEHV variant's decode or encode, CUDA tensors in and out."""
    import json
    with tempfile.TemporaryDirectory() as d:
        path = f"{d}/{a.taehv}.safetensors"
        vaec.synth_checkpoint("taehv", path, json.dumps({"variant": a.taehv}))
        m = vaec.load(path, arch="taehv", config={"variant": a.taehv}, device="cuda",
                      dtype=a.dtype)
    f, t, c = m.info["spatial_factor"], m.info["temporal_factor"], m.info["latent_channels"]
    lat = (1, c, (a.frames - 1) // t + 1, h // f, w // f)
    vid = (1, 3, a.frames, h, w)
    x = torch.randn(lat if a.op == "decode" else vid, device="cuda", dtype=dt)
    call = m.decode if a.op == "decode" else m.encode
    out = call(x)  # its shape (the variant's frame rules)
    med, ts = timed(lambda: call(x, out=out), a.runs)
    print(f"VAEC taehv {a.taehv} {a.op} {a.frames}x{h}x{w} {a.dtype}: median {med:.4f} s runs "
          f"{[round(v, 4) for v in ts]} engine-peak {m.peak_bytes() / 2**30:.2f} GiB "
          f"out {tuple(out.shape)} finite {bool(out.isfinite().all())}")
    kinds, gpu = copies(lambda: call(x, out=out))
    print(f"VAEC copies during one {a.op}: {kinds}; GPU {gpu}")
    for line in host_lines(lambda: call(x, out=out)):
        print(f"VAEC host: {line}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--frames", type=int, default=81)
    ap.add_argument("--size", default="480x832")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--dtype", default="bf16")
    ap.add_argument("--taehv", metavar="VARIANT")
    ap.add_argument("--op", choices=("decode", "encode"), default="decode")
    a = ap.parse_args()
    h, w = map(int, a.size.split("x"))
    dt = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[a.dtype]
    if a.taehv:
        return taehv(a, h, w, dt)
    lat = (1, 16, (a.frames - 1) // 4 + 1, h // 8, w // 8)
    with tempfile.TemporaryDirectory() as d:
        path = f"{d}/wan21.safetensors"
        vaec.synth_checkpoint("wan2.1", path)  # the released configuration, synthetic weights
        m = vaec.load(path, device="cuda", dtype=a.dtype)
    z = torch.randn(lat, device="cuda", dtype=dt)
    out = torch.empty((1, 3, a.frames, h, w), device="cuda", dtype=dt)
    med, ts = timed(lambda: m.decode(z, out=out), a.runs)
    peak = torch.cuda.max_memory_allocated()
    print(f"VAEC decode {a.frames}x{h}x{w} {a.dtype}: median {med:.4f} s runs "
          f"{[round(t, 4) for t in ts]} torch-peak {peak / 2**30:.2f} GiB engine-peak "
          f"{m.peak_bytes() / 2**30:.2f} GiB out {out.dtype} {tuple(out.shape)} "
          f"finite {bool(out.isfinite().all())}")
    print(f"VAEC copies during one decode: {copies(lambda: m.decode(z, out=out))[0]}")
    s = torch.cuda.Stream()  # a non-default current stream: the engine orders itself after it
    with torch.cuda.stream(s):
        ref = out.clone()
        z2 = z * 1.0
        y = m.decode(z2)
        same = bool((y == ref).all())
    s.synchronize()
    print(f"VAEC side stream: output identical to the default-stream run: {same}")
    del m
    try:
        import diffusers
        import vaec.diffusers as vd
    except ImportError as e:
        print(f"VAEC diffusers: not installed ({e})")
        return
    vae = diffusers.AutoencoderKLWan().to("cuda", dt).eval()  # released config, random init
    vd.wrap(vae)
    raw = z.float() * torch.tensor(vae.vaec.latents_std, device="cuda").view(1, -1, 1, 1, 1)
    raw = (raw + torch.tensor(vae.vaec.latents_mean, device="cuda").view(1, -1, 1, 1, 1)).to(dt)
    with torch.no_grad():
        med_d, ts_d = timed(lambda: vae.decode(raw), a.runs)
        print(f"VAEC diffusers-dropin decode {a.frames}x{h}x{w} {a.dtype}: median {med_d:.4f} s "
              f"runs {[round(t, 4) for t in ts_d]}")
        print(f"VAEC diffusers copies: {copies(lambda: vae.decode(raw))[0]}")
        mine = vae.decode(raw).sample
        vd.unwrap(vae)  # diffusers' own decode of the same module, same latent
        med_o, ts_o = timed(lambda: vae.decode(raw), max(2, a.runs // 2))
        theirs = vae.decode(raw).sample
        err = float((mine.float() - theirs.float()).norm() / theirs.float().norm())
        print(f"VAEC diffusers-own decode {a.frames}x{h}x{w} {a.dtype}: median {med_o:.4f} s runs "
              f"{[round(t, 4) for t in ts_o]}; drop-in {med_d:.4f} s = {med_o / med_d:.2f}x "
              f"faster; relative difference {err:.2e} (bf16 on both sides, random-init weights)")


if __name__ == "__main__":
    main()
