"""The binding's property test: random layouts of torch tensors against torch's own semantics.

Each case builds an input view (permuted storage, padded slices, steps, storage offsets,
broadcasts made by expand) and maybe an `out=` view, decodes or encodes through vaec, and compares
with vaec on a dense copy of the same values: the result must be bit-identical (the engine reads
every layout into the same float32 planes), and every output that torch itself would refuse to
write (zero strides, overlapping elements, overlap with the input) must be refused with
vaec.Error before anything is written. VAEC_FUZZ_CASES sets the count (default 10000),
VAEC_FUZZ_SEED the seed (default: a new one, printed on failure).
"""
import os
import random

import pytest
import torch

import vaec
from conftest import FIXTURES

CASES = int(os.environ.get("VAEC_FUZZ_CASES", "10000"))
DTYPES = [torch.float32, torch.float16, torch.bfloat16]


@pytest.fixture(scope="module")
def models():
    """{device: model}: the CPU's, and a GPU's (fp32) where there is one."""
    path = FIXTURES / "wan21_tiny.safetensors"
    ms = {"cpu": vaec.load(path, threads=1)}
    if vaec.cuda_available() and torch.cuda.is_available():
        ms["cuda"] = vaec.load(path, device="cuda")
    return ms


def same(got, want, device):
    """Bit-identical on the CPU; on a GPU the conv paths' sums may differ in the last bits."""
    if device == "cpu":
        return torch.equal(got, want)
    return float((got.double() - want.double()).norm()) <= 1e-6 * float(want.double().norm())


def random_view(rng, values, allow_broadcast):
    """A view holding `values` (dense) in a random layout: (view, the buffer it lives in)."""
    nd = values.dim()
    kind = rng.choice(["dense", "permuted", "padded", "stepped", "broadcast" if allow_broadcast
                       else "permuted"])
    if kind == "broadcast":  # values must be constant along the expanded dims: make them so
        dims = [d for d in range(1, nd) if values.shape[d] > 1]
        if not dims:
            return values.clone(), None
        keep = [slice(None)] * nd
        for d in rng.sample(dims, rng.randint(1, len(dims))):
            keep[d] = slice(0, 1)
        base = values[tuple(keep)].clone()
        return base.expand(values.shape), base
    if kind == "dense":
        v = values.clone()
        return v, v
    if kind == "permuted":  # e.g. channels-last storage
        perm = list(range(nd))
        rng.shuffle(perm)
        store = values.permute(perm).contiguous()
        inv = [perm.index(d) for d in range(nd)]
        return store.permute(inv), store
    # padded / stepped: a slice of a larger buffer, at an offset, with steps in some dims
    steps = [rng.choice([1, 1, 2, 3]) if kind == "stepped" else 1 for _ in range(nd)]
    pads = [rng.randint(0, 3) for _ in range(nd)]
    big = torch.full([s * n + p for s, n, p in zip(steps, values.shape, pads)], float("nan"),
                     dtype=values.dtype, device=values.device)
    idx = tuple(slice(p, p + s * n, s) for s, n, p in zip(steps, values.shape, pads))
    big[idx] = values
    return big[idx], big


def numel(shape):
    n = 1
    for v in shape:
        n *= v
    return n


def bad_out(rng, shape, dtype, x):
    """An output torch would not write, or one over the input's memory: (out, its buffer, the
    input to call with)."""
    kind = rng.choice(["zero", "partly", "overlap", "alias"])
    dev = x.device
    if kind == "zero":
        base = torch.zeros(1, dtype=dtype, device=dev)
        return base.expand(shape), base, x
    if kind == "partly":
        d = rng.choice([d for d in range(len(shape)) if shape[d] > 1])
        base = torch.zeros([1 if k == d else v for k, v in enumerate(shape)], dtype=dtype,
                           device=dev)
        return base.expand(shape), base, x
    if kind == "overlap":  # rows that share elements: a stride smaller than what it steps over
        base = torch.zeros(numel(shape), dtype=dtype, device=dev)
        strides = list(torch.empty(shape).stride())
        d = rng.choice([d for d in range(len(shape) - 1) if shape[d] > 1])
        strides[d] = strides[d] // 2
        return base.as_strided(shape, strides), base, x
    # alias: the input's values placed inside the output's buffer, at a random offset
    n_in, n_out = x.numel(), numel(shape)
    buf = torch.zeros(max(n_in, n_out) + 8, dtype=dtype, device=dev)
    off = rng.randint(0, buf.numel() - n_in)
    buf[off : off + n_in] = x.contiguous().to(dtype).reshape(-1)
    return buf[:n_out].view(shape), buf, buf[off : off + n_in].view(x.shape)


def one_case(rng, models):
    device = rng.choice(sorted(models))
    model = models[device]
    encode = rng.random() < 0.3
    b = rng.choice([1, 1, 2])
    if encode:
        t = rng.choice([1, 5])
        values = torch.rand(b, 3, t, 8 * rng.randint(1, 2), 8 * rng.randint(1, 2)) * 2 - 1
    else:
        values = torch.randn(b, 16, rng.randint(1, 2), rng.randint(1, 2), rng.randint(1, 3))
    values = values.to(device=device, dtype=rng.choice(DTYPES))
    x, x_buf = random_view(rng, values, allow_broadcast=True)
    dense = x.contiguous()
    run = model.encode if encode else model.decode
    want = run(dense)
    out_kind = rng.choice(["none", "good", "good", "bad"])
    if out_kind == "none":
        got = run(x)
        assert same(got, want, device), "result differs from the dense copy's"
        return
    out_dtype = rng.choice(DTYPES)
    want = want if out_dtype == want.dtype else run(dense, out=torch.empty(
        want.shape, dtype=out_dtype, device=device))
    if out_kind == "good":
        out, buf = random_view(rng, torch.zeros(want.shape, dtype=out_dtype, device=device),
                               False)
        snapshot = buf.clone()
        inside = torch.zeros_like(buf, dtype=torch.bool)
        if buf is out:
            inside[...] = True
        else:  # which elements of the buffer the view covers
            flags = torch.zeros(buf.numel(), dtype=torch.bool, device=device)
            off = out.storage_offset() - buf.storage_offset()
            idx = torch.as_strided(torch.arange(buf.numel(), device=device), out.shape,
                                   out.stride(), off)
            flags[idx.reshape(-1)] = True
            inside = flags.view(buf.shape)
        got = run(x, out=out)
        assert got is out
        assert same(out, want, device), "out= result differs from the dense copy's"
        assert torch.equal(buf[~inside].isnan(), snapshot[~inside].isnan()), "wrote outside"
        return
    out, buf, x = bad_out(rng, tuple(want.shape), out_dtype, x)
    before = buf.clone()
    with pytest.raises(vaec.Error) as e:
        run(x, out=out)
    assert e.value.name == "EINVAL" and "overlap" in str(e.value), str(e.value)
    assert torch.equal(buf, before), "a refused out= was written"


def test_random_layouts_against_dense(models):
    seed = int(os.environ.get("VAEC_FUZZ_SEED", random.randrange(1 << 30)))
    rng = random.Random(seed)
    torch.manual_seed(seed)
    for i in range(CASES):
        try:
            one_case(rng, models)
        except AssertionError as e:
            raise AssertionError(f"case {i} of seed {seed} (VAEC_FUZZ_SEED={seed}): {e}") from e
