"""Inputs that once crashed or fooled the host process: each must give the right answer or a
clear vaec.Error, and leave the process and the model usable."""
import copy
import ctypes as C
import gc
import pickle
import sys
import threading

import pytest
import torch
from safetensors.torch import load_file

import vaec
from vaec import _lib
from conftest import FIXTURES, rel_err


@pytest.fixture(scope="module")
def tiny():
    return vaec.load(FIXTURES / "wan21_tiny.safetensors", threads=1)


@pytest.fixture(scope="module")
def x():
    return load_file(str(FIXTURES / "wan21_tiny.io.safetensors"))["dec_t3.latent"]


def expect(code, text, fn):
    with pytest.raises(vaec.Error) as e:
        fn()
    assert e.value.name == code and text in str(e.value), (e.value.name, str(e.value))


def test_broadcast_input_reads_one_value(tiny):
    """All strides zero (torch.tensor(.5).expand): a broadcast, read as one value everywhere."""
    b = torch.tensor(0.5).expand(1, 16, 2, 3, 4)
    assert torch.equal(tiny.decode(b), tiny.decode(b.contiguous()))
    part = torch.randn(1, 16, 1, 3, 1).expand(1, 16, 2, 3, 4)
    assert torch.equal(tiny.decode(part), tiny.decode(part.contiguous()))


def test_outputs_that_overlap_are_refused(tiny, x):
    shape = (1, 3, 9, 32, 48)
    zero = torch.zeros(1)
    expect("EINVAL", "overlap", lambda: tiny.decode(x, out=zero.expand(shape)))
    assert zero.item() == 0
    partly = torch.zeros(1, 3, 1, 32, 48)
    expect("EINVAL", "overlap", lambda: tiny.decode(x, out=partly.expand(shape)))
    assert not partly.any()
    # the input inside the output's memory: refused, nothing written
    buf = torch.zeros(3 * 9 * 32 * 48)
    buf[100:100 + x.numel()] = x.reshape(-1)
    before = buf.clone()
    expect("EINVAL", "overlaps the input",
           lambda: tiny.decode(buf[100:100 + x.numel()].view(x.shape), out=buf.view(shape)))
    assert torch.equal(buf, before)
    # a batch whose second item's output would overwrite the first item's input
    v = torch.rand(2, 3, 1, 8, 8) * 2 - 1
    enc_out = v.view(-1)[:2 * 16].view(2, 16, 1, 1, 1)
    expect("EINVAL", "overlaps the input", lambda: tiny.encode(v, out=enc_out))


def test_expanded_weights_are_gathered(tiny, x):
    sd = load_file(str(FIXTURES / "wan21_tiny.safetensors"))
    bias = next(k for k, v in sd.items() if k.endswith("bias") and v.numel() > 1)
    sd[bias] = torch.full((1,), 0.25).expand(sd[bias].shape)  # a zero stride
    dense = dict(sd)
    dense[bias] = sd[bias].contiguous()
    assert torch.equal(vaec.from_state_dict(sd).decode(x), vaec.from_state_dict(dense).decode(x))


def test_copies_own_their_session(tiny, x):
    m = vaec.load(FIXTURES / "wan21_tiny.safetensors", threads=1)
    want = m.decode(x)
    c = copy.copy(m)
    del c
    gc.collect()
    assert torch.equal(m.decode(x), want)  # the copy's collection left the session alone
    unraisable = []
    old, sys.unraisablehook = sys.unraisablehook, unraisable.append
    try:
        d = copy.deepcopy(m)
        assert d._s is not m._s and torch.equal(d.decode(x), want)
        del d
        gc.collect()
    finally:
        sys.unraisablehook = old
    assert not unraisable, unraisable  # no "Exception ignored"
    with pytest.raises(TypeError):
        pickle.dumps(m)
    m.close()
    m.close()  # twice: nothing
    expect("EINVAL", "closed", lambda: m.decode(x))
    expect("EINVAL", "closed", lambda: m.trim())


def test_trim_and_plan_wait_for_a_running_call(x):
    m = vaec.load(FIXTURES / "wan21_tiny.safetensors", threads=1)
    want = m.decode(x)
    started, results = threading.Event(), []

    def slow(done, total):
        started.set()
        threading.Event().wait(0.02)
        return False

    t = threading.Thread(target=lambda: results.append(m.decode(x, callback=slow)))
    t.start()
    started.wait()
    m.trim()  # waits for the decode instead of freeing its buffers
    assert m.plan(tuple(x.shape))["fits"]
    t.join()
    assert torch.equal(results[0], want)
    # from inside the call's own callback: an error, not a wait for itself
    errors = []

    def inner(done, total):
        for f in (m.trim, lambda: m.plan(tuple(x.shape)), m.close):
            try:
                f()
            except vaec.Error as e:
                errors.append(str(e))
        return False

    assert torch.equal(m.decode(x, callback=inner), want)
    assert len(errors) >= 3 and all("inside this model's running call" in e for e in errors)


def test_callback_exceptions_reach_the_caller(tiny, x):
    def boom(done, total):
        raise KeyError("from the callback")

    with pytest.raises(KeyError):
        tiny.decode(x, callback=boom)
    assert rel_err(tiny.decode(x), tiny.decode(x.contiguous())) == 0


def test_integers_are_range_checked(x):
    path = FIXTURES / "wan21_tiny.safetensors"
    for opts, text in [({"max_memory": 2**64 + 10 * 2**20}, "max_memory"),
                       ({"max_memory": -1}, "max_memory"), ({"max_memory": "1e30G"}, "max_memory"),
                       ({"threads": 2**32 + 1}, "threads"), ({"threads": -1}, "threads"),
                       ({"threads": 100000}, "8 a core"), ({"tile": 2**40}, "tile"),
                       ({"tile": (16, 2**33)}, "tile"), ({"tile": 1 << 21}, "tile_height"),
                       ({"blend_tile": 2**32 + 512}, "blend_tile"),
                       ({"device": "cuda:99999999999"}, "device index")]:
        expect("EINVAL", text, lambda: vaec.load(path, **opts))
    m = vaec.load(path, threads=1)
    expect("EINVAL", "size", lambda: m.output_shape((1, 16, 2**64 + 3, 4, 6)))
    expect("EINVAL", "size", lambda: m.plan((1, 16, -1, 4, 6)))


def c_tensor(ndim, data=None):
    t = _lib.Tensor()
    t.ndim, t.dtype, t.data = ndim, _lib.DTYPE_F32, data
    for i in range(8):
        t.shape[i], t.strides[i] = 1, 1
    return t


def test_c_api_ranks_and_storage(tiny, x, tmp_path):
    lib = _lib.lib
    lib.vae_tensor_save.argtypes = [C.c_char_p, C.POINTER(C.c_char_p), C.POINTER(_lib.Tensor),
                                    C.c_int]
    buf = (C.c_float * 16)()
    names = (C.c_char_p * 1)(b"t")
    for nd, code in ((-1, -6), (9, -6), (1 << 30, -6)):
        ts = (_lib.Tensor * 1)(c_tensor(nd, C.addressof(buf)))
        assert lib.vae_tensor_save(b"/nonexistent/x.safetensors", names, ts, 1) == code
        assert "ndim" in lib.vae_last_error().decode()
    # ndim 9 given to a decode: the message tells the rank, not words beyond shape[8]
    nine = c_tensor(9, C.addressof(buf))
    out = c_tensor(5, C.addressof(buf))
    rc = lib.vae_decode_into(tiny._s.handle, C.byref(nine), C.byref(out), None)
    assert rc == -6 and "ndim 9" in lib.vae_last_error().decode()
    # a view that reaches past the storage it states
    t = c_tensor(5, C.addressof(buf))
    t.shape[1], t.strides[0], t.storage_bytes = 16, 16, 60
    assert lib.vae_tensor_check(C.byref(t), b"t", 0, None) == -1
    assert "beyond the 60 bytes" in lib.vae_last_error().decode()
    # strides whose extent in bytes would overflow int64: refused, never wrapped past the check
    t = c_tensor(5, C.addressof(buf))
    t.shape[1], t.strides[1], t.storage_bytes = 16, 1 << 58, 64
    assert lib.vae_tensor_check(C.byref(t), b"t", 0, None) == -6
    # a tensor with a zero-size dimension is dense whatever its strides (a load -> save trip)
    lib.vae_tensor_dense.restype = _lib.Tensor
    lib.vae_tensor_dense.argtypes = [C.c_int, C.POINTER(C.c_int64), C.c_int, C.c_void_p]
    empty = lib.vae_tensor_dense(2, (C.c_int64 * 2)(4, 0), _lib.DTYPE_F32, None)
    assert list(empty.strides[:2]) == [1, 1]
    path = str(tmp_path / "e.safetensors")
    assert lib.vae_tensor_save(path.encode(), names, (_lib.Tensor * 1)(empty), 1) == 0, \
        lib.vae_last_error()
    # all-zero strides with no storage stated: ambiguous, refused
    t = c_tensor(5, C.addressof(buf))
    t.shape[1] = 16
    for i in range(5):
        t.strides[i] = 0
    assert lib.vae_tensor_check(C.byref(t), b"t", 0, None) == -1
    assert "storage" in lib.vae_last_error().decode()


def test_no_stale_error_after_output_shape(tiny):
    lib = _lib.lib
    with pytest.raises(vaec.Error):
        tiny.output_shape((1, 7, 1, 2, 2))
    assert tiny.output_shape((1, 16, 1, 2, 2)) == (1, 3, 1, 16, 16)
    assert lib.vae_last_error() == b""


def test_model_outlives_its_handle(x):
    """The C model is freed once its last session is: freeing it first is safe."""
    h = C.c_void_p()
    o = _lib.ModelOptions()
    _lib.lib.vae_model_options_default(C.byref(o))
    _lib.check(_lib.lib.vae_model_open(C.byref(h), str(FIXTURES / "wan21_tiny.safetensors").encode(),
                                       C.byref(o)))
    opts = _lib.SessionOptions()
    _lib.lib.vae_session_options_default(C.byref(opts))
    opts.threads = 1
    s = C.c_void_p()
    _lib.check(_lib.lib.vae_session_create(C.byref(s), h, C.byref(opts)))
    _lib.lib.vae_model_free(h)  # before the session: the session keeps it
    out = torch.empty(1, 3, 9, 32, 48)
    xin, cout = vaec._as_c_tensor(x), vaec._as_c_tensor(out)
    _lib.check(_lib.lib.vae_decode_into(s, C.byref(xin), C.byref(cout), None))
    _lib.lib.vae_session_free(s)
    assert out.abs().sum() > 0


def test_torch_imports_after_vaec(tmp_path):
    """vaec imports an installed torch before it loads libvae.so, so that torch's own libraries
    come first in the process (with the CUDA build loaded first, torch's import can abort the
    interpreter); then torch imports and runs after `import vaec`. Without torch, or with one
    that fails to import, vaec imports all the same."""
    import os
    import subprocess

    def python(code, path=None):
        env = dict(os.environ)
        if path:
            env["PYTHONPATH"] = os.pathsep.join([str(path)] + [p for p in sys.path if p])
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           timeout=300, env=env)
        assert r.returncode == 0, (code, r.stderr[-2000:])
        return r.stdout.strip()

    assert python("import sys, vaec; assert 'torch' in sys.modules; import torch; "
                  "print(float(torch.ones(2).sum()))") == "2.0"
    assert python("import sys; sys.modules['torch'] = None; import vaec; "
                  "print(vaec.info()['version'])")
    broken = tmp_path / "torch"
    broken.mkdir()
    (broken / "__init__.py").write_text("raise ImportError('a broken torch')\n")
    assert python("import vaec; print(vaec.info()['version'])", path=tmp_path)
