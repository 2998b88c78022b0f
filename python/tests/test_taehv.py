"""vaec with the TAEHV family: every case of the taehv_* fixtures (synthetic weights written by
vaec.synth_checkpoint), the preview cases through preview=, within 1e-4 of the float64 upstream."""
import json

import pytest

from conftest import FIXTURES, fixture, rel_err

vaec = pytest.importorskip("vaec")
safetensors_torch = pytest.importorskip("safetensors.torch")


def _close(a, b):
    """Equal within fp32's rounding (calls of a session may take different steps, whose convs sum
    in another order)."""
    return a.shape == b.shape and bool((a - b).abs().max() <= 1e-5)


def _preview(options):
    """A case's upstream flags (decoder_time_upscale / decoder_space_upscale all false) as
    vaec's preview= value."""
    time = "decoder_time_upscale" in options and not any(options["decoder_time_upscale"])
    space = "decoder_space_upscale" in options and not any(options["decoder_space_upscale"])
    return {(0, 0): None, (1, 0): "time", (0, 1): "space", (1, 1): "both"}[(time, space)]


@pytest.mark.parametrize("name", ["taehv_w21", "taehv_w22", "taehv_w22_super"])
def test_taehv_fixture(shared, tmp_path, name):
    fx = fixture(name)
    ckpt = tmp_path / f"{name}.safetensors"
    vaec.synth_checkpoint("taehv", str(ckpt), json.dumps(fx["config"]))
    io = safetensors_torch.load_file(str(FIXTURES / f"{name}.io.safetensors"))
    model = vaec.load(str(ckpt))
    assert model.info["arch"] == "taehv"
    for case in fx["cases"]:
        m = model.with_options(preview=_preview(case["options"]))
        x = io[case["input"]]
        out = m.encode(x) if case["op"] == "encode" else m.decode(x)
        assert list(out.shape) == case["out_shape"], case["name"]
        assert rel_err(out, io[case["expect"]]) <= 1e-4, case["name"]


def test_preview_errors(shared):
    model = vaec.load(str(FIXTURES / "wan21_tiny.safetensors"))
    with pytest.raises(vaec.Error, match="preview"):
        model.with_options(preview="time")
    with pytest.raises(vaec.Error, match="preview"):
        model.with_options(preview="fast")


@pytest.mark.skipif(not vaec.cuda_available(), reason="no GPU")
@pytest.mark.parametrize("variant", ["taeh3", "taecvx"])
def test_frame_rules_with_cuda_tensors(tmp_path, variant):
    """taeh3's segments and periods and taecvx's untrimmed even decodes read a tensor in device
    memory and write one (through the host) as they do host tensors (within fp32's rounding:
    calls of the session may take different steps, whose convs sum in another order)."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA")
    ckpt = tmp_path / f"{variant}.safetensors"
    vaec.synth_checkpoint("taehv", str(ckpt), json.dumps({"variant": variant}))
    m = vaec.load(str(ckpt), arch="taehv", config={"variant": variant}, device="cuda",
                  dtype="fp32")
    g = torch.Generator().manual_seed(1)
    channels = m.info["latent_channels"]

    for latents in (2, 5, 6):
        z = torch.randn(1, channels, latents, 8, 12, generator=g)
        host = m.decode(z)
        dev = m.decode(z.cuda())
        assert dev.is_cuda and _close(dev.cpu(), host), (variant, latents)
        out = torch.full_like(dev, float("nan"))
        m.decode(z.cuda(), out=out)
        assert _close(out.cpu(), host), (variant, latents)
    video = torch.rand(1, 3, 20, 64, 96, generator=g)
    assert _close(m.encode(video.cuda()).cpu(), m.encode(video)), variant


@pytest.mark.skipif(not vaec.cuda_available(), reason="no GPU")
@pytest.mark.parametrize("tile", [None, 32])
def test_padded_encode_of_cuda_tensors(tmp_path, tile):
    """An encoder that pads its input to its time factor (taew2_1: repeats the last frame) reads a
    video in device memory on the device, whole or in exact tiles, as it reads a host one."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA")
    ckpt = tmp_path / "taew2_1.safetensors"
    vaec.synth_checkpoint("taehv", str(ckpt), json.dumps({"variant": "taew2_1"}))
    m = vaec.load(str(ckpt), arch="taehv", config={"variant": "taew2_1"}, device="cuda",
                  dtype="fp32", tile=tile)
    g = torch.Generator().manual_seed(2)
    for frames in (1, 3, 5, 6, 8, 9):
        video = torch.rand(1, 3, frames, 64, 96, generator=g)
        host = m.encode(video)
        dev = m.encode(video.cuda())
        assert dev.is_cuda and _close(dev.cpu(), host), frames
