#!/usr/bin/env python3
"""Times SeedVR2's own upstream VAE (ByteDance-Seed/SeedVR, models/video_vae_v3) in bf16 on the
GPU, as its inference configuration runs it (causal slicing of 4 latent frames, conv/norm memory
limits of 0.5 GiB), for the same workload as `vae bench seedvr2`. The upstream code is not part of
this repository: pass the folder of a checkout with --upstream (it is never committed).

usage: seedvr2_ref.py --upstream DIR [--op decode|encode] [--frames 81] [--size 720x1248]
prints one line: REF {json}
"""
import argparse
import os
import sys
import tempfile
import types

import torch

from timing import report, time_runs

RELEASED = dict(act_fn="silu", block_out_channels=[128, 256, 512, 512], in_channels=3,
                latent_channels=16, layers_per_block=2, norm_num_groups=32, out_channels=3,
                slicing_sample_min_size=4, temporal_scale_num=2, inflation_mode="pad",
                down_block_types=["DownEncoderBlock3D"] * 4, up_block_types=["UpDecoderBlock3D"] * 4,
                spatial_downsample_factor=8, temporal_downsample_factor=4, use_quant_conv=False,
                use_post_quant_conv=False)


def load(upstream):
    # rotary_embedding_torch is imported by a module the VAE does not use
    stub = types.ModuleType("rotary_embedding_torch")
    stub.RotaryEmbedding = object
    sys.modules.setdefault("rotary_embedding_torch", stub)
    sys.path.insert(0, upstream)
    import torch.distributed as dist
    if not dist.is_initialized():  # the slicing code asks for the rank
        path = os.path.join(tempfile.mkdtemp(), "pg")
        dist.init_process_group("gloo", init_method="file://" + path, rank=0, world_size=1)
    from models.video_vae_v3.modules import attn_video_vae
    return attn_video_vae


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--upstream", required=True)
    ap.add_argument("--op", default="decode")
    ap.add_argument("--frames", type=int, default=81)
    ap.add_argument("--size", default="720x1248")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    a = ap.parse_args()
    h, w = map(int, a.size.split("x"))
    m = load(a.upstream)
    model = m.VideoAutoencoderKLWrapper(freeze_encoder=False, **RELEASED).eval().requires_grad_(False)
    model = model.to("cuda", torch.bfloat16)
    model.set_causal_slicing(split_size=4, memory_device="same")
    model.set_memory_limit(conv_max_mem=0.5, norm_max_mem=0.5)
    if a.op == "decode":
        x = torch.randn(1, 16, 1 + (a.frames - 1) // 4, h // 8, w // 8, device="cuda", dtype=torch.bfloat16)
        run = lambda: model.decode(x).sample
    else:
        x = torch.rand(1, 3, a.frames, h, w, device="cuda", dtype=torch.bfloat16) * 2 - 1
        run = lambda: super(m.VideoAutoencoderKLWrapper, model).encode(x).latent_dist.mean
    times, peak = time_runs(run, a.warmup, a.runs)
    impl = "SeedVR upstream VideoAutoencoderKLWrapper bf16 (slicing 4, memory limits 0.5)"
    report({"arch": "seedvr2", "op": a.op, "frames": a.frames, "height": h, "width": w,
            "impl": impl}, times, peak)


if __name__ == "__main__":
    main()
