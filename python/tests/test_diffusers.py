"""vaec.diffusers: an AutoencoderKLWan decodes and encodes through the engine like diffusers."""
import pytest
import torch
from safetensors.torch import load_file

import vaec
import vaec.diffusers as vd
from conftest import FIXTURES, fixture, rel_err

diffusers = pytest.importorskip("diffusers")


def tiny_wan():
    """diffusers' AutoencoderKLWan with the wan21_tiny weights under diffusers' key names."""
    cfg = fixture("wan21_tiny")["config"]
    vae = diffusers.AutoencoderKLWan(base_dim=cfg["dim"], z_dim=cfg["z_dim"],
                                     dim_mult=cfg["dim_mult"],
                                     num_res_blocks=cfg["num_res_blocks"],
                                     attn_scales=cfg["attn_scales"],
                                     temperal_downsample=cfg["temperal_downsample"])
    sd = load_file(str(FIXTURES / "wan21_tiny.diffusers.safetensors"))
    vae.load_state_dict(sd, strict=True)
    return vae.eval()


@pytest.fixture(scope="module")
def io():
    return load_file(str(FIXTURES / "wan21_tiny.io.safetensors"))


def raw(latent):
    """diffusion-space fixture latents -> diffusers' raw latent space (what vae.decode takes)"""
    fx = fixture("wan21_tiny")
    mean = torch.tensor(fx["latent_mean"]).view(1, -1, 1, 1, 1)
    std = torch.tensor(fx["latent_std"]).view(1, -1, 1, 1, 1)
    return latent * std + mean


@torch.no_grad()
def test_decode_and_encode_match_diffusers(io):
    ref_vae, vae = tiny_wan(), tiny_wan()
    vd.wrap(vae)
    assert isinstance(vae.vaec, vaec.Model)
    for case in ("dec_t3", "dec_t6_odd", "dec_img"):
        z = raw(io[f"{case}.latent"])
        want = ref_vae.decode(z).sample
        got = vae.decode(z)
        assert type(got).__name__ == "DecoderOutput"
        assert got.sample.shape == want.shape
        assert float(got.sample.abs().max()) <= 1.0  # clamped as diffusers does
        assert rel_err(got.sample, want) < 1e-4, case
        assert rel_err(vae.decode(z, return_dict=False)[0], want) < 1e-4
    for case in ("enc_t9", "enc_t21_odd", "enc_img"):
        x = io[f"{case}.video"]
        want = ref_vae.encode(x).latent_dist
        got = vae.encode(x).latent_dist
        assert rel_err(got.mode(), want.mode()) < 1e-4, case
        assert rel_err(got.mean, want.mean) < 1e-4, case
        g1, g2 = torch.Generator().manual_seed(0), torch.Generator().manual_seed(0)
        # sampling needs the variance: the module's own encoder gives it
        assert rel_err(got.sample(g1), want.sample(g2)) < 1e-5


@torch.no_grad()
def test_non_contiguous_bf16_and_unwrap(io):
    ref_vae, vae = tiny_wan(), tiny_wan()
    vd.wrap(vae)
    z = raw(io["dec_t3.latent"])
    zt = z.transpose(3, 4).contiguous().transpose(3, 4)
    assert not zt.is_contiguous()
    want = ref_vae.decode(z).sample
    assert rel_err(vae.decode(zt).sample, want) < 1e-4
    # a bf16 module: the engine computes in fp32 on the CPU; the error is bf16 rounding of I/O
    vb = tiny_wan().to(torch.bfloat16)
    vd.wrap(vb)
    out = vb.decode(z.bfloat16()).sample
    assert out.dtype == torch.bfloat16 and rel_err(out, want) < 3e-2
    vd.unwrap(vae)
    assert not hasattr(vae, "vaec") and rel_err(vae.decode(z).sample, want) < 1e-6


def test_pipeline_and_errors():
    class Pipe:
        vae = tiny_wan()

    p = vd.accelerate(Pipe())
    assert isinstance(p.vae.vaec, vaec.Model)
    with pytest.raises(vaec.Error):
        vd.accelerate(object())
    with pytest.raises(vaec.Error) as e:
        vd.wrap(torch.nn.Linear(2, 2))
    assert "AutoencoderKLWan" in str(e.value)


@pytest.mark.skipif(not torch.cuda.is_available() or not vaec.cuda_available(),
                    reason="no CUDA device (the GPU variant runs on the device machine)")
@torch.no_grad()
def test_cuda_module(io):
    """A module on the GPU: the engine runs there, on torch's tensors, in the module's dtype."""
    # torch's fp32 convolutions default to TF32 (1e-3 off); the engine's fp32 does not round
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    ref_vae, vae = tiny_wan().cuda(), tiny_wan().cuda()
    vd.wrap(vae)
    assert vae.vaec.device.startswith("cuda") and vae.vaec.dtype == "fp32"
    z = raw(io["dec_t6_odd.latent"]).cuda()
    want = ref_vae.decode(z).sample
    got = vae.decode(z).sample
    assert got.is_cuda and rel_err(got, want) < 1e-4
    x = io["enc_t9.video"].cuda()
    assert rel_err(vae.encode(x).latent_dist.mode(), ref_vae.encode(x).latent_dist.mode()) < 1e-4
    vb = tiny_wan().cuda().to(torch.bfloat16)
    vd.wrap(vb)
    assert vb.vaec.dtype == "bf16"
    assert rel_err(vb.decode(z.bfloat16()).sample, want) < 5e-2
