"""vaec with torch tensors: every fixture case, layouts and dtypes, errors, cancellation."""
import os
import threading

import pytest
import torch
from safetensors.torch import load_file, save_file

import vaec
from conftest import FIXTURES, SHARED, fixture, rel_err

# The full-size ones: VAEC_FULL_FIXTURES=0 leaves them to the C suite (ctest fixture_*_full runs them
# through the same library; what is the binding's shows on the small ones), as scripts/test.sh does
# but for --nightly.
FULL = os.environ.get("VAEC_FULL_FIXTURES", "1") != "0"
ALL = ["wan21_tiny", "wan21_small", "wan22_tiny", "seedvr2_tiny", "taef2_real"] + [
    pytest.param(n, marks=pytest.mark.skipif(not FULL, reason="VAEC_FULL_FIXTURES=0"))
    for n in ("wan21_full", "seedvr2_full", "wan22_full")]


def open_models(name, tmp_path):
    """(encoder model, decoder model) of a fixture, as the C fixture test builds them."""
    fx = fixture(name)
    if name == "taef2_real":
        return (vaec.load(SHARED / "models" / "taef2_encoder.pth"),
                vaec.load(SHARED / "models" / "taef2_decoder.pth"))
    if fx["weights"] == "synthetic":
        path = tmp_path / f"{name}.safetensors"
        vaec.synth_checkpoint(fx["arch"], path, fx["config"])
    else:
        path = FIXTURES / f"{name}.safetensors"
    m = vaec.load(path)
    return m, m


@pytest.mark.parametrize("name", ALL)
def test_fixture_cases(name, shared, tmp_path):
    """Every case of every fixture through vaec on CPU tensors, within 1e-4 of the reference."""
    enc, dec = open_models(name, tmp_path)
    io = load_file(str(FIXTURES / f"{name}.io.safetensors"))
    for case in fixture(name)["cases"]:
        x, ref = io[case["input"]], io[case["expect"]]
        y = enc.encode(x) if case["op"] == "encode" else dec.decode(x)
        assert tuple(y.shape) == tuple(case["out_shape"]), case["name"]
        assert y.dtype == x.dtype and y.device == x.device
        err = rel_err(y, ref)
        assert err < 1e-4, f"{name}/{case['name']}: relative error {err:.3g}"


@pytest.fixture(scope="module")
def tiny():
    return vaec.load(FIXTURES / "wan21_tiny.safetensors")


@pytest.fixture(scope="module")
def tiny_io():
    return load_file(str(FIXTURES / "wan21_tiny.io.safetensors"))


def test_fp8_emulated_on_cpu(tiny, tiny_io):
    """dtype="fp8" on the CPU: quantised convolutions, near the reference but not equal to it."""
    case = next(c for c in fixture("wan21_tiny")["cases"] if c["op"] == "decode")
    x, want = tiny_io[case["input"]], tiny_io[case["expect"]]
    # the tiny model has no conv of the shapes the GPU's E4M3 kernels take: fp32 throughout
    err_kernels = rel_err(tiny.with_options(dtype="fp8").decode(x), want)
    assert err_kernels < 1e-4, f"fp8 (kernels' shapes) relative error {err_kernels:.3g}"
    # every residual-branch conv wider than 16 channels may (the emulation alone runs those), 6
    wide = tiny.with_options(dtype="fp8", fp8_shapes="wide", fp8_convs=6)
    err = rel_err(wide.decode(x), want)
    assert 1e-3 < err < 0.05, f"fp8 relative error {err:.3g}"
    # every conv that may run in E4M3: more of them, more error; one: less
    err_all = rel_err(wide.with_options(fp8_convs="all").decode(x), want)
    err_one = rel_err(wide.with_options(fp8_convs=1).decode(x), want)
    assert err_one < err < err_all, f"fp8 errors: 1 conv {err_one:.3g}, 6 {err:.3g}, all {err_all:.3g}"
    for bad in (-1, "some", 1.5):
        with pytest.raises(vaec.Error):
            tiny.with_options(dtype="fp8", fp8_convs=bad).decode(x)
    for bad in ("all", 1, True):
        with pytest.raises(vaec.Error):
            tiny.with_options(dtype="fp8", fp8_shapes=bad).decode(x)
    # the error budget (the default, 0.04) chooses the convs; plan()'s text says how many
    budget = tiny.with_options(dtype="fp8", fp8_shapes="wide", fp8_error=0.04, tune_cache="")
    assert "fp8: " in budget.plan(x.shape)["text"]
    assert rel_err(budget.decode(x), want) < 0.05
    for bad in (-0.1, 2, "0.04", True):
        with pytest.raises(vaec.Error):
            tiny.with_options(dtype="fp8", fp8_error=bad).decode(x)
    with pytest.raises(vaec.Error):
        vaec.load(FIXTURES / "wan21_tiny.safetensors", dtype="fp4")


def _fp8_checkpoints(sd, tmp_path):
    """wan21_tiny's conv weights stored in fp8 three ways (a plain cast; ComfyUI's scaled_fp8, one
    scale a tensor; a weight_scale for each output channel), each beside its float32 dequantised
    copy: {name: (fp8 file, float32 file)}."""
    e4m3 = torch.float8_e4m3fn
    out = {}
    for how in ("cast", "scaled_fp8", "per_channel"):
        q8, f32 = {}, {}
        for k, v in sd.items():
            if v.ndim < 4 or not k.endswith(".weight"):
                q8[k] = f32[k] = v
                continue
            if how == "cast":
                s = torch.ones(())
            elif how == "scaled_fp8":
                s = v.abs().max().float() / 448
            else:
                s = v.abs().flatten(1).amax(1).float() / 448
            b = s.reshape(-1, *[1] * (v.ndim - 1))
            q = (v.float() / b).to(e4m3)
            q8[k], f32[k] = q, q.float() * b
            if how == "scaled_fp8":
                q8[k[:-len("weight")] + "scale_weight"] = s
                q8[k[:-len("weight")] + "scale_input"] = torch.ones(())
            elif how == "per_channel":
                q8[k + "_scale"] = s
        if how == "scaled_fp8":
            q8["scaled_fp8"] = torch.zeros(2, dtype=e4m3)
        out[how] = (tmp_path / f"{how}.safetensors", tmp_path / f"{how}_f32.safetensors")
        save_file(q8, str(out[how][0]))
        save_file(f32, str(out[how][1]))
    return out


def test_fp8_checkpoints(tmp_path, tiny_io):
    """Checkpoints stored in fp8 decode as their dequantised float32 copies do; under dtype fp8
    their E4M3 convs run the stored codes, not rounded again: their error against their own fp32
    decode is the activations' alone, below what E4M3 adds to float32 weights (measured 0.73-0.80
    of it since fp8.h spreads the weights' rounding errors, 0.70-0.74 with each weight rounded to
    its nearest; rounded again, the plain cast's were 0.87-1.04); a scale of the wrong shape is an
    error naming it."""
    sd = load_file(str(FIXTURES / "wan21_tiny.safetensors"))
    fp8 = dict(dtype="fp8", fp8_shapes="wide", fp8_convs=6)
    orig = vaec.load(FIXTURES / "wan21_tiny.safetensors")
    models = {how: [vaec.load(f) for f in files] + [vaec.load(files[0], **fp8)]
              for how, files in _fp8_checkpoints(sd, tmp_path).items()}
    for case in (c for c in fixture("wan21_tiny")["cases"] if c["op"] == "decode"):
        x = tiny_io[case["input"]]
        e_orig = rel_err(orig.with_options(**fp8).decode(x), orig.decode(x))
        for how, (q8, f32, q8_fp8) in models.items():
            want = q8.decode(x)
            err = rel_err(want, f32.decode(x))
            assert err < 1e-6, f"{how}: fp8 file against its float32 copy: {err:.3g}"
            e8 = rel_err(q8_fp8.decode(x), want)
            assert 1e-3 < e8 < 0.85 * e_orig, f"{case['name']} {how}: {e8:.3g} ({e_orig:.3g})"
    w = next(k for k, v in sd.items() if v.ndim == 5 and k.endswith(".weight"))
    for scale, says in ((torch.ones(2, 2), "expected one float value"),
                        (torch.tensor(float("nan")), "not finite")):
        bad = {**sd, w: sd[w].to(torch.float8_e4m3fn), w + "_scale": scale}
        save_file(bad, str(tmp_path / "bad.safetensors"))
        with pytest.raises(vaec.Error, match=f"{w}_scale.*{says}"):
            vaec.load(tmp_path / "bad.safetensors")


def test_info_and_shapes(tiny):
    assert tiny.info["arch"] == "wan2.1" and tiny.info["latent_channels"] == 16
    assert len(tiny.latents_mean) == 16 and len(tiny.latents_std) == 16
    assert tiny.output_shape((1, 16, 3, 4, 6)) == (1, 3, 9, 32, 48)
    assert tiny.output_shape((1, 3, 9, 32, 48), encode=True) == (1, 16, 3, 4, 6)
    plan = tiny.plan((1, 16, 3, 4, 6))
    assert plan["fits"] and plan["peak_bytes"] > 0 and plan["order"] == "whole"
    # whole frames step through 2 latent frames after the first (up to 4 that divide t - 1)
    assert plan["step_frames"] == 2 and tiny.plan((1, 16, 6, 4, 6))["step_frames"] == 1


def test_non_contiguous_in_and_out(tiny, tiny_io):
    """Strided views in (a channels-last copy, a slice of a wider tensor) and out."""
    x, ref = tiny_io["dec_t3.latent"], tiny_io["dec_t3.video"]
    cl = x.permute(0, 2, 3, 4, 1).contiguous().permute(0, 4, 1, 2, 3)  # channels-last storage
    assert not cl.is_contiguous()
    assert rel_err(tiny.decode(cl), ref) < 1e-4
    wide = torch.zeros(1, 16, 3, 4, 9)
    wide[..., 2:8] = x
    assert rel_err(tiny.decode(wide[..., 2:8]), ref) < 1e-4
    big = torch.full((1, 3, 9, 32, 60), float("nan"))
    out = big[..., 5:53]
    tiny.decode(x, out=out)
    assert rel_err(out, ref) < 1e-4
    assert big[..., :5].isnan().all() and big[..., 53:].isnan().all()  # nothing outside written


def test_half_precision_tensors(tiny, tiny_io):
    """bf16 / fp16 tensors in: the output has the input's dtype (computed in fp32 on the CPU)."""
    x, ref = tiny_io["dec_t3.latent"], tiny_io["dec_t3.video"]
    for dt in (torch.bfloat16, torch.float16):
        y = tiny.decode(x.to(dt))
        assert y.dtype == dt
        # the error of rounding the input and the output to 16 bits
        assert rel_err(y, ref) < (2e-2 if dt == torch.bfloat16 else 3e-3)
    v = tiny_io["enc_t9.video"].to(torch.bfloat16)
    assert rel_err(tiny.encode(v), tiny_io["enc_t9.latent"]) < 3e-2


def test_batch_and_unbatched(tiny, tiny_io):
    x, ref = tiny_io["dec_t3.latent"], tiny_io["dec_t3.video"]
    y = tiny.decode(torch.cat([x, 2 * x]))
    assert y.shape[0] == 2 and rel_err(y[:1], ref) < 1e-4
    assert rel_err(y[1:], tiny.decode(2 * x)) < 1e-6
    assert rel_err(tiny.decode(x[0]), ref[0]) < 1e-4  # [C,T,h,w] -> [3,T,H,W]


def test_state_dict_equals_file(tiny, tiny_io):
    sd = load_file(str(FIXTURES / "wan21_tiny.safetensors"))
    m = vaec.from_state_dict(sd)
    x = tiny_io["dec_t3.latent"]
    assert rel_err(m.decode(x), tiny.decode(x)) < 1e-7
    # transposed (non-contiguous) weights are gathered, not misread
    sd2 = {k: (v.t().contiguous().t() if v.dim() == 2 else v) for k, v in sd.items()}
    assert rel_err(vaec.from_state_dict(sd2).decode(x), tiny.decode(x)) < 1e-7


def test_exact_tiles_and_blend(tiny_io):
    x, ref = tiny_io["dec_t6_odd.latent"], tiny_io["dec_t6_odd.video"]
    m = vaec.load(FIXTURES / "wan21_tiny.safetensors", tile=16)
    assert m.plan(tuple(x.shape))["order"] == "tiled"
    y = m.decode(x)
    assert rel_err(y, ref) < 1e-4
    # host_memory=0: the tiles' output put together in a temporary file, the same output
    assert rel_err(m.with_options(host_memory=0).decode(x), y) == 0
    b = vaec.load(FIXTURES / "wan21_tiny.safetensors", tile_mode="blend", blend_tile=32,
                  blend_overlap=8)
    assert rel_err(b.decode(x), ref) < 0.5  # blended tiles are approximate, but close


def test_device_group_of_cpu_lanes(tiny_io):
    """devices=[0, 1]: the exact tiles shared out (here two CPU lanes, the code GPUs run), the
    output equal to one device's, a peak per device; bad device lists are errors."""
    x, ref = tiny_io["dec_t6_odd.latent"], tiny_io["dec_t6_odd.video"]
    one = vaec.load(FIXTURES / "wan21_tiny.safetensors", tile=16, threads=1)
    two = one.with_options(devices=[0, 1], threads=2)
    assert "shared by 2 devices" in two.plan(tuple(x.shape))["text"]
    assert torch.equal(two.decode(x), one.decode(x))
    assert rel_err(two.decode(x), ref) < 1e-4
    assert len(two.device_peak_bytes()) == 2 and min(two.device_peak_bytes()) > 0
    v = tiny_io["enc_t9.video"]
    assert torch.equal(two.encode(v), one.encode(v))
    for bad in ([0, -1], ["gpu1"], list(range(9))):
        with pytest.raises(vaec.Error):
            vaec.load(FIXTURES / "wan21_tiny.safetensors", devices=bad)


def test_device_group_in_row_bands(tmp_path, monkeypatch):
    """SeedVR2 (GroupNorm over whole frames) on devices=[0, 1]: row bands whose GroupNorm sums
    the two lanes add up (VAE_PLAN_BANDS=1: wherever they apply), within 1e-5 of one device and
    1e-4 of the reference."""
    fx = fixture("seedvr2_tiny")
    path = tmp_path / "seedvr2_tiny.safetensors"
    vaec.synth_checkpoint(fx["arch"], path, fx["config"])
    io = load_file(str(FIXTURES / "seedvr2_tiny.io.safetensors"))
    x, ref = io["dec_t6_odd.latent"], io["dec_t6_odd.video"]
    monkeypatch.setenv("VAE_PLAN_BANDS", "1")
    one = vaec.load(path, threads=1)
    two = one.with_options(devices=[0, 1], threads=2)
    assert "row bands" in two.plan(tuple(x.shape))["text"]
    y1, y2 = one.decode(x), two.decode(x)
    assert rel_err(y2, y1) < 1e-5 and rel_err(y2, ref) < 1e-4


def test_progress_and_cancel(tiny, tiny_io):
    x = tiny_io["dec_t6_odd.latent"]
    seen = []
    tiny.decode(x, callback=lambda done, total: seen.append((done, total)) and False)
    assert seen and seen[-1][0] == seen[-1][1] and [d for d, _ in seen] == list(range(1, len(seen) + 1))
    with pytest.raises(vaec.Error) as e:
        tiny.decode(x, callback=lambda done, total: done >= 2)
    assert e.value.name == "EINTERRUPTED"
    # from another thread, as a UI's interrupt button does
    started = threading.Event()

    def slow(done, total):
        started.set()
        threading.Event().wait(0.05)
        return False

    t = threading.Timer(0.0, lambda: (started.wait(), tiny.cancel()))
    t.start()
    with pytest.raises(vaec.Error) as e:
        tiny.decode(x, callback=slow)
    t.join()
    assert e.value.name == "EINTERRUPTED"
    assert rel_err(tiny.decode(x), tiny_io["dec_t6_odd.video"]) < 1e-4  # usable afterwards
    assert rel_err(tiny.decode(x, progress=True), tiny_io["dec_t6_odd.video"]) < 1e-4  # tqdm


def test_errors(tiny, tiny_io, tmp_path):
    x = tiny_io["dec_t3.latent"]
    cases = [
        (lambda: tiny.decode(x[:, :8]), "ESHAPE", "channels"),
        (lambda: tiny.decode(x.to(torch.float64)), "EDTYPE", "float64"),
        (lambda: tiny.decode(torch.full_like(x, float("nan"))), "ENAN", "NaN"),
        (lambda: tiny.encode(torch.zeros(1, 3, 9, 30, 48)), "ESHAPE", "multiple"),
        (lambda: tiny.decode(x, out=torch.empty(1, 3, 9, 32, 47)), "ESHAPE", "out shape"),
        (lambda: tiny.decode([1, 2]), "EINVAL", "torch.Tensor"),
        (lambda: vaec.load(tmp_path / "missing.safetensors"), "EIO", "missing.safetensors"),
        (lambda: vaec.load(FIXTURES / "wan21_tiny.json"), "EFORMAT", "wan21_tiny.json"),
        (lambda: vaec.load(FIXTURES / "wan21_tiny.safetensors", device="tpu"), "EINVAL", "tpu"),
        (lambda: vaec.load(FIXTURES / "wan21_tiny.safetensors", dtype="int8"), "EINVAL", "int8"),
        (lambda: vaec.load(FIXTURES / "wan21_tiny.safetensors", max_memory="lots"), "EINVAL", "lots"),
        (lambda: vaec.load(FIXTURES / "wan21_tiny.safetensors", tile_mode="grid"), "EINVAL", "grid"),
        (lambda: vaec.load(FIXTURES / "wan21_tiny.safetensors", host_memory="lots"), "EINVAL",
         "host_memory"),
        (lambda: vaec.load(FIXTURES / "wan21_tiny.safetensors", host_memory="100T"), "EINVAL",
         "VAE_EXEC_HOST_MB"),
        (lambda: vaec.load(FIXTURES / "wan21_tiny.safetensors", config={"nope": 1}), None, "nope"),
        (lambda: vaec.load(FIXTURES / "wan21_tiny.safetensors", max_memory="1K").decode(x),
         "ENOMEM", "floor"),
    ]
    for fn, code, text in cases:
        with pytest.raises(vaec.Error) as e:
            fn()
        assert code is None or e.value.name == code, (code, e.value.name, str(e.value))
        assert text in str(e.value), (text, str(e.value))
    if not vaec.cuda_available():
        with pytest.raises(vaec.Error):
            vaec.load(FIXTURES / "wan21_tiny.safetensors", device="cuda")


def test_unknown_config_keys_for_every_architecture(tmp_path):
    """A configuration key the engine does not read is an error naming it, for every arch."""
    sv = tmp_path / "seedvr2.safetensors"
    vaec.synth_checkpoint("seedvr2", sv, fixture("seedvr2_tiny")["config"])
    cases = [(FIXTURES / "wan21_tiny.safetensors", {"dims": 8}, "dims"),
             (sv, {"norm_num_group": 8}, "norm_num_group"),
             (sv, {"spatial_downsample_factor": 16}, "spatial_downsample_factor"),
             (SHARED / "models" / "taef2_decoder.pth", {"widht": 64}, "widht"),
             (SHARED / "models" / "taef2_decoder.pth", {"arch_variant": "flux_3"}, "arch_variant")]
    for path, cfg, text in cases:
        with pytest.raises(vaec.Error) as e:
            vaec.load(path, config=cfg)
        assert text in str(e.value), (path, str(e.value))
    assert vaec.load(sv, config={"norm_num_groups": 8}).info["arch"] == "seedvr2"


@pytest.mark.skipif(not torch.cuda.is_available() or not vaec.cuda_available(),
                    reason="no CUDA device (the GPU variant runs on the device machine)")
def test_cuda_tensors_in_place(tiny_io):
    """CUDA tensors in and out, on torch's current stream, bf16 and fp32, strided."""
    m = vaec.load(FIXTURES / "wan21_tiny.safetensors", device="cuda")
    x, ref = tiny_io["dec_t3.latent"].cuda(), tiny_io["dec_t3.video"]
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        y = m.decode(x)
        z = y * 1  # queued on s after the engine's work
    s.synchronize()
    assert y.is_cuda and rel_err(z, ref) < 1e-4
    wide = torch.zeros(1, 16, 3, 4, 9, device="cuda")
    wide[..., 2:8] = x
    assert rel_err(m.decode(wide[..., 2:8]), ref) < 1e-4
    mb = vaec.load(FIXTURES / "wan21_tiny.safetensors", device="cuda", dtype="bf16")
    assert rel_err(mb.decode(x.bfloat16()), ref) < 3e-2
    assert rel_err(m.encode(tiny_io["enc_t9.video"].cuda()), tiny_io["enc_t9.latent"]) < 1e-4
    mt = vaec.load(FIXTURES / "wan21_tiny.safetensors", device="cuda", tile=16)
    x6 = tiny_io["dec_t6_odd.latent"].cuda()
    assert rel_err(mt.decode(x6), tiny_io["dec_t6_odd.video"]) < 1e-4
    v9 = tiny_io["enc_t9.video"].cuda()
    assert rel_err(mt.encode(v9), tiny_io["enc_t9.latent"]) < 1e-4  # tiled encode in place
    # blended tiles: assembled on the host, then written into the CUDA output
    opts = dict(tile_mode="blend", blend_tile=32, blend_overlap=8)
    mbl, cbl = m.with_options(**opts), vaec.load(FIXTURES / "wan21_tiny.safetensors", **opts)
    assert rel_err(mbl.decode(x6), cbl.decode(x6.cpu())) < 1e-4
    with pytest.raises(vaec.Error) as e:
        m.decode(torch.full_like(x, float("inf")))
    assert e.value.name == "ENAN"
    # a device group (one GPU: two lanes on it), tensors on the first GPU: the tiles written into
    # the CUDA output in place, the encoder's store shared on the host; a blend assembled
    gpus = [0, 1] if torch.cuda.device_count() >= 2 else [0, 0]
    g = vaec.load(FIXTURES / "wan21_tiny.safetensors", device="cuda", tile=16, devices=gpus)
    assert "shared by 2 devices" in g.plan(tuple(x6.shape))["text"]
    assert rel_err(g.decode(x6), mt.decode(x6)) < 1e-5
    assert rel_err(g.encode(v9), mt.encode(v9)) < 1e-5
    assert len(g.device_peak_bytes()) == 2
    gb = g.with_options(**opts, tile=None)
    assert rel_err(gb.decode(x6), cbl.decode(x6.cpu())) < 1e-4


def test_raw_latent_space(tiny, tiny_io):
    """raw=True: the VAE's own latent space (diffusers', ComfyUI's), converted in float32."""
    fx = fixture("wan21_tiny")
    mean = torch.tensor(fx["latent_mean"]).view(1, -1, 1, 1, 1)
    std = torch.tensor(fx["latent_std"]).view(1, -1, 1, 1, 1)
    x, ref = tiny_io["dec_t3.latent"], tiny_io["dec_t3.video"]
    assert rel_err(tiny.decode(x * std + mean, raw=True), ref) < 1e-4
    v, lat = tiny_io["enc_t9.video"], tiny_io["enc_t9.latent"]
    assert rel_err(tiny.encode(v, raw=True), lat * std + mean) < 1e-4
    y = tiny.decode((x * std + mean).bfloat16(), raw=True)
    assert y.dtype == torch.bfloat16 and rel_err(y, ref) < 2e-2


def test_sessions_share_weights(tiny, tiny_io):
    x = tiny_io["dec_t6_odd.latent"]
    t = tiny.with_options(tile=16)
    assert t._weights is tiny._weights and t.options["tile"] == 16 and tiny.options["tile"] is None
    assert t.plan(tuple(x.shape))["order"] == "tiled"
    assert rel_err(t.decode(x), tiny.decode(x)) < 1e-5
    t.close()
    assert rel_err(tiny.decode(x), tiny_io["dec_t6_odd.video"]) < 1e-4  # the weights stay
    with pytest.raises(vaec.Error) as e:
        tiny.with_options(tiles=3)
    assert "tiles" in str(e.value)


# ---- groups of processes (ranks): on the CPU the ranks are threads of this process ----

def run_ranks(world, fn, timeout=300):
    """fn(rank) on `world` threads at once (each rank's collective calls wait for the others; the
    library's calls release the GIL): the results by rank; a rank's exception is raised here."""
    results, errors = [None] * world, [None] * world

    def body(r):
        try:
            results[r] = fn(r)
        except BaseException as e:  # noqa: B902 -- handed to the test's thread
            errors[r] = e

    threads = [threading.Thread(target=body, args=(r,), daemon=True) for r in range(world)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
    assert not any(t.is_alive() for t in threads), f"a rank of {world} did not return"
    for e in errors:
        if e is not None:
            raise e
    return results


def tile_regions(plan, shape):
    """The (rows, cols) slices of the owned tiles of an exact tiled plan, over an output shape."""
    (ty, tx), (th, tw) = plan["tiles"], plan["tile_size"]
    assert ty * th >= shape[-2] and tx * tw >= shape[-1], plan
    return [(slice(y * th, (y + 1) * th), slice(x * tw, (x + 1) * tw))
            for y in range(ty) for x in range(tx)]


@pytest.mark.parametrize("world", [2, 3])
def test_group_of_cpu_ranks(tiny_io, world):
    """world ranks (threads, each its own session with the same group id): exact tiles shared
    out; group_output="all": every rank's output equals one ordinary session's tiled output;
    "own": each tile is one rank's (equal there), zeros elsewhere, the ranks' union the whole."""
    x, v = tiny_io["dec_t6_odd.latent"], tiny_io["enc_t9.video"]
    one = vaec.load(FIXTURES / "wan21_tiny.safetensors", tile=16, threads=1)
    plan = one.plan(tuple(x.shape))
    assert plan["order"] == "tiled" and plan["tiles"][0] * plan["tiles"][1] >= world
    y1, l1 = one.decode(x), one.encode(v)
    assert rel_err(y1, tiny_io["dec_t6_odd.video"]) < 1e-4

    for output in ("all", "own"):
        gid = vaec.group_id_create("cpu")
        assert isinstance(gid, bytes) and len(gid) == 128

        def rank(r):
            m = one.with_options(group_id=gid, rank=r, world=world, group_output=output)
            assert (m.rank, m.world) == (r, world) and f"rank {r} of {world}" in repr(m)
            ys = [m.decode(x.clone()) for _ in range(2)]  # two calls: collective in order
            return ys, (m.encode(v.clone()) if output == "all" else None)

        outs = run_ranks(world, rank)
        for r, (ys, lat) in enumerate(outs):
            assert torch.equal(ys[0], ys[1]), (output, r)
        if output == "all":
            for r, (ys, lat) in enumerate(outs):
                assert torch.equal(ys[0], y1), f"rank {r}: {rel_err(ys[0], y1):.3g}"
                assert torch.equal(lat, l1), f"rank {r} encode: {rel_err(lat, l1):.3g}"
            continue
        owners = []
        for rows, cols in tile_regions(plan, y1.shape):
            mine = [r for r, (ys, _) in enumerate(outs) if ys[0][..., rows, cols].any()]
            assert len(mine) == 1, f"tile {rows}, {cols}: computed by ranks {mine}"
            assert torch.equal(outs[mine[0]][0][0][..., rows, cols], y1[..., rows, cols])
            owners.append(mine[0])
        assert sorted(set(owners)) == list(range(world)), owners  # every rank has tiles
        union = sum(ys[0] for ys, _ in outs)  # zeros outside each rank's tiles
        assert torch.equal(union, y1)


def test_group_option_errors(tiny):
    """Bad group options are errors naming the option, before any rank waits for the others."""
    gid = vaec.group_id_create("cpu")
    cases = [
        (dict(group_id=gid[:100], rank=0, world=2), "group_id"),
        (dict(group_id=gid.hex(), rank=0, world=2), "group_id"),
        (dict(rank=0, world=2), "group_id"),
        (dict(group_id=gid, rank=2, world=2), "rank"),
        (dict(group_id=gid, rank=-1, world=2), "rank"),
        (dict(group_id=gid, rank=0), "world"),
        (dict(group_id=gid, world=2), "rank"),
        (dict(group_id=gid, rank=0, world=0), "world"),
        (dict(group_id=gid, rank=True, world=2), "rank"),
        (dict(group_id=gid, rank=0, world=2, group_output="mine"), "group_output"),
        (dict(group_output="own"), "group_output"),
        (dict(group_id=gid, rank=0, world=2, devices=[0, 1]), "devices"),
        (dict(process_group=True, rank=0), "process_group"),
        (dict(process_group=True, group_id=gid), "process_group"),
        (dict(process_group="world"), "process_group"),
    ]
    for opts, text in cases:
        with pytest.raises(vaec.Error) as e:
            tiny.with_options(**opts)
        assert e.value.name == "EINVAL" and text in str(e.value), (opts, str(e.value))
    with pytest.raises(vaec.Error) as e:
        vaec.group_id_create("tpu")
    assert "tpu" in str(e.value)
    assert vaec.group_id_create("cpu") != gid  # a fresh id each time


def test_process_group_of_one(tiny_io, tmp_path):
    """process_group= with torch.distributed (gloo, one process): rank and world from the group,
    the id broadcast from its rank 0 (a world of 1 is an ordinary session)."""
    import torch.distributed as dist
    x = tiny_io["dec_t6_odd.latent"]
    one = vaec.load(FIXTURES / "wan21_tiny.safetensors", tile=16, threads=1)
    with pytest.raises(vaec.Error) as e:  # not initialised yet
        one.with_options(process_group=True)
    assert "process_group" in str(e.value)
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0,
                            world_size=1)
    try:
        for pg, output in ((True, "all"), (dist.group.WORLD, "own"), (dist.new_group([0]), "all")):
            m = one.with_options(process_group=pg, group_output=output)
            assert (m.rank, m.world) == (0, 1)
            assert torch.equal(m.decode(x), one.decode(x))
    finally:
        dist.destroy_process_group()


class _FakeGroup:
    """A torch.distributed stand-in whose ranks are threads (torch's own groups are processes):
    the group's rank 0 is global rank 10 (so that the broadcast's src is translated)."""

    def __init__(self, world):
        self.world, self.local = world, threading.local()
        self.barrier, self.box, self.sources = threading.Barrier(world), None, set()

    def broadcast_object_list(self, objs, src, group):
        assert group is self
        self.sources.add(src)
        if self.local.rank + 10 == src:
            self.box = list(objs)
        self.barrier.wait()
        objs[:] = self.box
        self.barrier.wait()


def test_process_group_of_threads(tiny_io, monkeypatch):
    """process_group= of 2 ranks through the torch.distributed calls vaec makes (here a stand-in
    whose ranks are threads): the id made on rank 0 and broadcast, the output one session's."""
    import torch.distributed as dist
    g = _FakeGroup(2)
    monkeypatch.setattr(dist, "ProcessGroup", _FakeGroup)
    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    monkeypatch.setattr(dist, "get_rank", lambda group: group.local.rank)
    monkeypatch.setattr(dist, "get_world_size", lambda group: group.world)
    monkeypatch.setattr(dist, "get_global_rank", lambda group, r: r + 10)
    monkeypatch.setattr(dist, "broadcast_object_list", g.broadcast_object_list)
    x = tiny_io["dec_t6_odd.latent"]
    one = vaec.load(FIXTURES / "wan21_tiny.safetensors", tile=16, threads=1)

    def rank(r):
        g.local.rank = r
        m = one.with_options(process_group=g)
        return m.rank, m.world, m.decode(x.clone())

    outs = run_ranks(2, rank)
    assert g.sources == {10} and len(g.box[0]) == 128
    y1 = one.decode(x)
    for r, (rk, world, y) in enumerate(outs):
        assert (rk, world) == (r, 2) and torch.equal(y, y1)


def test_sizes_read_as_the_library_reads_them():
    """max_memory / host_memory strings go through the library's grammar (vae_parse_size), the
    one the CLI's --max-memory reads: the same text means the same bytes everywhere."""
    parse = vaec._parse_memory
    assert parse("13G") == 13 << 30 and parse("800M") == 800 << 20 and parse("1.5GiB") == 3 << 29
    assert parse(" 2tb ") == 2 << 40 and parse("4096") == 4096 and parse(4096) == 4096
    for bad in ["lots", "-1G", "1Q", "nan", "inf", "1e30G", "", "1G\0"]:
        with pytest.raises(vaec.Error, match="max_memory"):
            parse(bad)


def test_output_shape_after_a_call():
    """A call plans steps of several latent frames (the session's program then takes them at
    once): the frame count of a later shape is still the model's rule (T latents -> 1 + 4(T-1))."""
    m = vaec.load(FIXTURES / "wan21_tiny.safetensors")
    io = load_file(str(FIXTURES / "wan21_tiny.io.safetensors"))
    lat = io["dec_t3.latent"]
    m.decode(lat)
    six = (1, lat.shape[1], 6) + tuple(lat.shape[3:])
    assert m.output_shape(six)[2] == 21
    assert m.decode(torch.zeros(six)).shape[2] == 21
