#!/usr/bin/env python3
"""Times upstream's taehv.py (madebyollin/taehv) for the same workload as `vae bench taehv`:
bf16 on the GPU, channels-last weights, in both of its modes (parallel over frames, and
sequential), random init weights (the timing does not depend on the values).

usage: taehv_ref.py UPSTREAM_TAEHV_PY VARIANT --op decode|encode --frames N --size HxW
                    [--runs 5] [--warmup 1]
prints one line per mode, MODE {json}, then REF {json}: the faster mode's (the comparison's
baseline, as bench/compare.sh reads it), with both modes' medians under "modes"

VARIANT: an upstream file name (taew2_1, taew2_2, ...): its constructor arguments as
bench/taehv_upstream_check.py spells them out. upstream's taehv.py is fetched by hand into the
ignored .upstream/ (never committed); its module imports tqdm (a silent stand-in where missing).
"""
import argparse
import json
import os
import statistics
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from taehv_upstream_check import VARIANTS, load_upstream  # noqa: E402
from timing import report, time_runs  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("upstream")
    ap.add_argument("variant", choices=sorted(VARIANTS))
    ap.add_argument("--op", choices=("decode", "encode"), default="decode")
    ap.add_argument("--frames", type=int, default=81)
    ap.add_argument("--size", default="480x832")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1)
    a = ap.parse_args()
    h, w = (int(v) for v in a.size.split("x"))
    mod = load_upstream(a.upstream)
    model = mod.TAEHV(checkpoint_path=None, **VARIANTS[a.variant])
    # upstream keys these rules on the checkpoint's file name, which a random init has not
    model.is_h3, model.is_cogvideox = a.variant == "taeh3", a.variant == "taecvx"
    model = model.to("cuda", torch.bfloat16).to(memory_format=torch.channels_last).eval()
    s_factor = 8 * model.patch_size
    torch.manual_seed(0)
    if a.op == "decode":
        latents = (a.frames - 1) // model.t_upscale + 1
        x = torch.randn(1, latents, model.latent_channels, h // s_factor, w // s_factor,
                        device="cuda", dtype=torch.bfloat16)
    else:
        x = torch.rand(1, a.frames, 3, h, w, device="cuda", dtype=torch.bfloat16)
    fields = {"arch": a.variant, "op": a.op, "frames": a.frames, "height": h, "width": w,
              "dtype": "bf16", "impl": "upstream taehv.py"}
    modes = {}
    for parallel in (True, False):
        def run():
            with torch.no_grad():
                if a.op == "decode":
                    return model.decode_video(x, parallel=parallel, show_progress_bar=False)
                return model.encode_video(x, parallel=parallel, show_progress_bar=False)
        times, peak = time_runs(run, a.warmup, a.runs)
        mode = "parallel" if parallel else "sequential"
        modes[mode] = (times, peak)
        print("MODE " + json.dumps(dict(fields, mode=mode, median_s=statistics.median(times))),
              flush=True)
    best = min(modes, key=lambda k: statistics.median(modes[k][0]))
    report(dict(fields, mode=best, modes={k: statistics.median(v[0]) for k, v in modes.items()}),
           *modes[best])


if __name__ == "__main__":
    main()
