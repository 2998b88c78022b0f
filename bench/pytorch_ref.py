#!/usr/bin/env python3
"""Times the upstream PyTorch reference of a VAE (bf16, on the GPU) for the same workload as
`vae bench`: diffusers' AutoencoderKLWan for Wan2.1/2.2. Weights are diffusers' random init (the
timing does not depend on the values); no tiling, no slicing.

usage: pytorch_ref.py ARCH --op decode|encode --frames N --size HxW [--runs 5] [--warmup 1]
                      [--device cpu --threads N]
prints one line: REF {json}

--device cpu: float32 on the CPU with torch.set_num_threads(N) (oneDNN's convs), the comparison
of `vae bench --device cpu --dtype fp32 --threads N` (bench/cpu_compare.sh).
"""
import argparse
import json
import statistics
import time

import torch

from timing import report, time_runs


def time_runs_cpu(run, warmup, runs):
    """time_runs for the CPU: wall time per call (no device to synchronise), peak memory unknown."""
    times = []
    with torch.no_grad():
        for i in range(warmup + runs):
            t0 = time.perf_counter()
            y = run()
            if i >= warmup:
                times.append(time.perf_counter() - t0)
            del y
    return times


def report_cpu(fields, times, threads):
    out = dict(fields)
    out.update({"median_s": statistics.median(times), "min_s": min(times), "runs": len(times),
                "threads": threads, "torch": torch.__version__})
    print("REF " + json.dumps(out), flush=True)


def wan_model(arch):
    from diffusers import AutoencoderKLWan

    if arch == "wan2.1":
        return AutoencoderKLWan(), 16, 8
    if arch == "wan2.2":
        return (
            AutoencoderKLWan(base_dim=160, decoder_base_dim=256, z_dim=48, is_residual=True,
                             in_channels=12, out_channels=12, patch_size=2,
                             scale_factor_spatial=16, latents_mean=[0.0] * 48, latents_std=[1.0] * 48),
            48, 16)
    raise SystemExit("pytorch_ref.py: unsupported arch " + arch)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("arch")
    ap.add_argument("--op", default="decode")
    ap.add_argument("--frames", type=int, default=81)
    ap.add_argument("--size", default="480x832")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--threads", type=int, default=0, help="cpu: torch.set_num_threads (0: torch's default)")
    a = ap.parse_args()
    h, w = map(int, a.size.split("x"))
    if a.device == "cpu":
        return main_cpu(a, h, w)
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    model, zc, f = wan_model(a.arch)
    model = model.to("cuda", torch.bfloat16).eval()
    if a.op == "decode":
        x = torch.randn(1, zc, 1 + (a.frames - 1) // 4, h // f, w // f, device="cuda", dtype=torch.bfloat16)
        run = lambda: model.decode(x).sample
    else:
        x = torch.rand(1, 3, a.frames, h, w, device="cuda", dtype=torch.bfloat16) * 2 - 1
        run = lambda: model.encode(x).latent_dist.mode()
    times, peak = time_runs(run, a.warmup, a.runs)
    report({"arch": a.arch, "op": a.op, "frames": a.frames, "height": h, "width": w,
            "impl": "diffusers AutoencoderKLWan bf16"}, times, peak)


def main_cpu(a, h, w):
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    model, zc, f = wan_model(a.arch)
    model = model.to(torch.float32).eval()
    g = torch.Generator().manual_seed(0)
    if a.op == "decode":
        x = torch.randn(1, zc, 1 + (a.frames - 1) // 4, h // f, w // f, generator=g)
        run = lambda: model.decode(x).sample
    else:
        x = torch.rand(1, 3, a.frames, h, w, generator=g) * 2 - 1
        run = lambda: model.encode(x).latent_dist.mode()
    times = time_runs_cpu(run, a.warmup, a.runs)
    report_cpu({"arch": a.arch, "op": a.op, "frames": a.frames, "height": h, "width": w,
                "impl": "diffusers AutoencoderKLWan fp32 cpu"}, times, torch.get_num_threads())


if __name__ == "__main__":
    main()
