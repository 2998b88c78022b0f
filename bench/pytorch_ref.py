#!/usr/bin/env python3
"""Times the upstream PyTorch reference of a VAE (bf16, on the GPU) for the same workload as
`vae bench`: diffusers' AutoencoderKLWan for Wan2.1/2.2. Weights are diffusers' random init (the
timing does not depend on the values); no tiling, no slicing.

usage: pytorch_ref.py ARCH --op decode|encode --frames N --size HxW [--runs 5] [--warmup 1]
prints one line: REF {json}
"""
import argparse

import torch

from timing import report, time_runs


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
    a = ap.parse_args()
    h, w = map(int, a.size.split("x"))
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


if __name__ == "__main__":
    main()
