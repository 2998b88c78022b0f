"""fp8_conv_probe.py -- can cuDNN run our 3-D convs in FP8 on this GPU, and how fast?

The question behind the FP8 path of the speed issue: before writing kernels, measure what the
library of the field does. For the heavy conv shapes of the released models (steady-state windows
of kt-1 cache frames + the chunk, channels-last, spatial padding 1, no temporal padding: what the
executor hands the backend), this times
  bf16   torch.nn.functional.conv3d in bf16, channels_last_3d (cuDNN, as PyTorch calls it)
  g-bf16 the same conv as a cuDNN graph (cudnn-frontend), bf16 in and out
  g-fp8  a cuDNN graph: E4M3 input and weights, float32 accumulation, one descale multiply,
         bf16 out (what an FP8 path would run)
and prints ms and TFLOP/s per shape and the FP8 output's error against bf16 (relative L2).

Needs torch and the nvidia-cudnn-frontend wheel (carry it: `python3 -m pip download --no-deps
--only-binary=:all: --python-version 3.12 -d .whl nvidia-cudnn-frontend`, then on the device
`pip install --no-index --no-deps --target /tmp/fe .whl/nvidia_cudnn_frontend*.whl` and
PYTHONPATH=/tmp/fe). Prints "PROBE ..." lines.
"""
import sys

import torch

SHAPES = [  # name, c_in, c_out, frames in (window), h, w
    ("wan2.1 96ch 480x832", 96, 96, 6, 480, 832),
    ("wan2.1 192ch 240x416", 192, 192, 6, 240, 416),
    ("wan2.1 384ch 120x208", 384, 384, 4, 120, 208),
    ("seedvr2 128ch 720x1248", 128, 128, 6, 720, 1248),
    ("wan2.2 256ch 352x640", 256, 256, 6, 352, 640),
]


def bench(fn, reps=10):
    fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b))
    ts.sort()
    return ts[len(ts) // 2]


def cl_strides(dims):
    """channels-last strides of an N, C, D, H, W tensor"""
    n, c, d, h, w = dims
    return [d * h * w * c, 1, h * w * c, w * c, c]


def graph_conv(cudnn, handle, x, wt, io_type, descale):
    g = cudnn.pygraph(io_data_type=io_type, intermediate_data_type=cudnn.data_type.FLOAT,
                      compute_data_type=cudnn.data_type.FLOAT, handle=handle)
    X = g.tensor(name="X", dim=list(x.shape), stride=cl_strides(x.shape), data_type=io_type)
    W = g.tensor(name="W", dim=list(wt.shape), stride=cl_strides(wt.shape), data_type=io_type)
    y = g.conv_fprop(image=X, weight=W, padding=[0, 1, 1], stride=[1, 1, 1],
                     dilation=[1, 1, 1], compute_data_type=cudnn.data_type.FLOAT)
    S = None
    if descale is not None:
        S = g.tensor(name="S", dim=[1, 1, 1, 1, 1], stride=[1, 1, 1, 1, 1],
                     data_type=cudnn.data_type.FLOAT)
        y = g.mul(a=y, b=S)
    y.set_output(True).set_data_type(cudnn.data_type.BFLOAT16)
    g.validate()
    g.build_operation_graph()
    g.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    g.check_support()
    g.build_plans()
    n, _, d, h, wd = x.shape
    out = torch.empty((n, wt.shape[0], d - wt.shape[2] + 1, h, wd), dtype=torch.bfloat16,
                      device="cuda").to(memory_format=torch.channels_last_3d)
    ws = torch.empty(g.get_workspace_size(), dtype=torch.uint8, device="cuda")
    pack = {X: x, W: wt, y: out}
    if S is not None:
        pack[S] = descale
    return (lambda: g.execute(pack, ws, handle=handle)), out


def main():
    try:
        import cudnn
    except ImportError as e:
        print(f"PROBE no cudnn-frontend: {e}")
        return 1
    torch.manual_seed(0)
    handle = cudnn.create_handle()
    print(f"PROBE {torch.cuda.get_device_name()}, cuDNN backend {cudnn.backend_version()}, "
          f"frontend {getattr(cudnn, '__version__', '?')}")
    for name, ci, co, t, h, w in SHAPES:
        x = torch.randn(1, ci, t, h, w, device="cuda").to(memory_format=torch.channels_last_3d)
        wt = (torch.randn(co, ci, 3, 3, 3, device="cuda") / (27 * ci) ** 0.5).to(
            memory_format=torch.channels_last_3d)
        flop = 2.0 * co * ci * 27 * (t - 2) * h * w
        xb, wb = x.bfloat16(), wt.bfloat16()
        ref = torch.nn.functional.conv3d(xb, wb, padding=(0, 1, 1))
        line = f"PROBE {name}:"
        ms = bench(lambda: torch.nn.functional.conv3d(xb, wb, padding=(0, 1, 1)))
        line += f" bf16 {ms:.3f} ms {flop / ms * 1e-9:.0f} TF/s |"
        try:
            run, _ = graph_conv(cudnn, handle, xb, wb, cudnn.data_type.BFLOAT16, None)
            ms = bench(run)
            line += f" g-bf16 {ms:.3f} ms {flop / ms * 1e-9:.0f} TF/s |"
        except Exception as e:  # noqa: BLE001 -- report what cuDNN says and go on
            line += f" g-bf16 unsupported ({str(e).splitlines()[0][:80]}) |"
        try:
            sx, sw = x.abs().amax() / 448, wt.abs().amax() / 448
            x8 = (x / sx).to(torch.float8_e4m3fn)
            w8 = (wt / sw).to(torch.float8_e4m3fn)
            ds = (sx * sw).reshape(1, 1, 1, 1, 1).float()
            run, out = graph_conv(cudnn, handle, x8, w8, cudnn.data_type.FP8_E4M3, ds)
            ms = bench(run)
            err = ((out.float() - ref.float()).norm() / ref.float().norm()).item()
            line += f" g-fp8 {ms:.3f} ms {flop / ms * 1e-9:.0f} TF/s, error vs bf16 {err:.3e}"
        except Exception as e:  # noqa: BLE001
            line += f" g-fp8 unsupported ({str(e).splitlines()[0][:120]})"
        print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
