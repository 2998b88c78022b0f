"""vaec in a group of processes over NCCL (issue 13): run under torchrun, one GPU per process.

    torchrun --nproc-per-node N bench/vaec_dist_check.py CHECKPOINT

Every rank loads CHECKPOINT (fp32, forced exact tiles so that there are tiles to share) on its own
GPU twice: alone, and as a rank of the torch.distributed group (process_group=True: rank 0 makes
the NCCL group id and broadcasts it); decodes the same latent (the same seed on every rank) both
ways, with CUDA tensors in and out, and prints one PASS/FAIL line per rank: the group's output
against its own one-GPU output (within 1e-5: each GPU tunes its conv paths by its own timing).
"""
import os
import sys

import torch
import torch.distributed as dist

import vaec


def main():
    dist.init_process_group("nccl")
    rank, local = dist.get_rank(), int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local)
    torch.manual_seed(0)
    x = torch.randn(1, 16, 5, 16, 24, device="cuda")
    alone = vaec.load(sys.argv[1], device=f"cuda:{local}", dtype="fp32", tile=32)
    group = alone.with_options(process_group=True)
    want = alone.decode(x)
    got = [group.decode(x) for _ in range(2)]  # two calls: every rank in the same order
    err = max(float((g - want).norm() / want.norm()) for g in got)
    ok = err <= 1e-5 and all(g.is_cuda and not g.isnan().any() for g in got)
    print(f"{'PASS' if ok else 'FAIL'} vaec rank {rank} of {dist.get_world_size()} ({group!r}): "
          f"relative error {err:.2e} against one GPU (tol 1e-5)", flush=True)
    dist.destroy_process_group()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
