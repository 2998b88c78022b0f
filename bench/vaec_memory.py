"""Memory a host can trust (issue 55): Wan2.1 decode through vaec on torch's allocator, five
calls in a row; for each, torch's own peak over what torch held before the model was loaded
(the engine's blocks are torch's blocks) beside the engine's reported peak and the plan's
prediction, and torch's reserved memory after the call (flat from the second call on).

usage: python3 bench/vaec_memory.py [--frames 81] [--size 480x832] [--dtype bf16] [--calls 5]
Prints MEM lines, one per call, and a MEM summary with the worst ratio.
"""
import argparse
import tempfile

import torch

import vaec


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--frames", type=int, default=81)
    ap.add_argument("--size", default="480x832")
    ap.add_argument("--dtype", default="bf16")
    ap.add_argument("--calls", type=int, default=5)
    a = ap.parse_args()
    h, w = map(int, a.size.split("x"))
    dt = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[a.dtype]
    lat = (1, 16, (a.frames - 1) // 4 + 1, h // 8, w // 8)
    z = torch.randn(lat, device="cuda", dtype=dt)
    out = torch.empty((1, 3, a.frames, h, w), device="cuda", dtype=dt)
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()  # the caller's tensors: not the engine's
    with tempfile.TemporaryDirectory() as d:
        path = f"{d}/wan21.safetensors"
        vaec.synth_checkpoint("wan2.1", path)
        m = vaec.load(path, device="cuda", dtype=a.dtype)
    plan = m.plan(lat)
    worst, reserved = 0.0, []
    for k in range(a.calls):
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        m.decode(z, out=out)
        torch.cuda.synchronize()
        torch_peak = torch.cuda.max_memory_allocated() - base
        engine = m.peak_bytes()
        reserved.append(torch.cuda.memory_reserved())
        ratio = torch_peak / engine
        worst = max(worst, abs(ratio - 1))
        print(f"MEM call {k + 1}: torch peak {torch_peak / 2**30:.3f} GiB, engine peak "
              f"{engine / 2**30:.3f} GiB (torch/engine {ratio:.3f}), plan {plan['peak_bytes'] / 2**30:.3f}"
              f" GiB, torch reserved {reserved[-1] / 2**30:.3f} GiB")
    flat = all(r == reserved[1] for r in reserved[1:]) if len(reserved) > 1 else True
    print(f"MEM Wan2.1 decode {a.frames}x{h}x{w} {a.dtype}: worst |torch/engine - 1| = {worst:.3f}"
          f" (acceptance <= 0.10); reserved from call 2 on {'flat' if flat else 'NOT flat'}: "
          f"{[round(r / 2**30, 3) for r in reserved]} GiB")


if __name__ == "__main__":
    main()
