"""diffusers drop-in: a pipeline's AutoencoderKLWan decodes and encodes through the engine.

    pipe = WanPipeline.from_pretrained(...)
    vaec.diffusers.accelerate(pipe)        # pipe.vae.decode / encode now run on vae.c
    video = pipe(prompt).frames

The engine is built from the module's own weights (no file). Inputs and outputs are diffusers':
raw latents in (the pipeline un-normalises them before vae.decode), DecoderOutput out, clamped to
[-1, 1] as AutoencoderKLWan does; encode returns an AutoencoderKLOutput whose latent_dist gives
the engine's posterior mean (mode()/mean); sample() needs the variance, which the engine does not
compute, so it runs the module's own encoder for that call.
"""
import torch

from . import Error, from_state_dict

_SUPPORTED = ("AutoencoderKLWan",)


def _dtype_name(dtype):
    names = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}
    if dtype not in names:
        raise Error(-8, f"vae dtype {dtype}: the engine runs fp32, bf16 or fp16")
    return names[dtype]


class EngineLatentDist:
    """latent_dist of an engine encode: the posterior mean (raw latent space)."""

    def __init__(self, mean, vae, x):
        self.mean = mean
        self._vae, self._x = vae, x

    def mode(self):
        return self.mean

    def sample(self, generator=None):
        # the engine computes the mean only: the module's own encoder gives the variance
        return self._vae._vaec_original_encode(self._x).latent_dist.sample(generator)


def wrap(vae, device=None, dtype=None, **options):
    """Makes `vae` (a diffusers AutoencoderKLWan) decode and encode through the engine, in place;
    returns it. device/dtype: the module's own by default (fp32 on the CPU); options: vaec.load's (max_memory,
    tile_mode, tile, ...). vae.vaec is the engine's Model; unwrap(vae) restores the module."""
    from diffusers.models.autoencoders.vae import DecoderOutput
    from diffusers.models.modeling_outputs import AutoencoderKLOutput

    if type(vae).__name__ not in _SUPPORTED:
        raise Error(-5, f"{type(vae).__name__}: vaec.diffusers supports {', '.join(_SUPPORTED)}")
    if getattr(vae, "vaec", None) is not None:
        return vae
    p = next(vae.parameters())
    dev = torch.device(device) if device is not None else p.device
    if dtype is None:  # the module's precision on the GPU; the CPU backend computes in fp32
        dtype = _dtype_name(p.dtype) if dev.type == "cuda" else "fp32"
    model = from_state_dict(vae.state_dict(), device=str(dev), dtype=dtype, **options)

    def decode(z, return_dict=True):
        x = model.decode(z, raw=True)
        x.clamp_(-1.0, 1.0)
        return DecoderOutput(sample=x) if return_dict else (x,)

    def encode(x, return_dict=True):
        dist = EngineLatentDist(model.encode(x, raw=True), vae, x)
        return AutoencoderKLOutput(latent_dist=dist) if return_dict else (dist,)

    vae._vaec_original_decode, vae._vaec_original_encode = vae.decode, vae.encode
    vae.decode, vae.encode, vae.vaec = decode, encode, model
    return vae


def unwrap(vae):
    """Restores the module's own decode/encode and frees the engine."""
    if getattr(vae, "vaec", None) is None:
        return vae
    vae.decode, vae.encode = vae._vaec_original_decode, vae._vaec_original_encode
    vae.vaec.close()
    del vae.vaec, vae._vaec_original_decode, vae._vaec_original_encode
    return vae


def accelerate(pipe, **options):
    """Wraps pipe.vae (see wrap); returns the pipeline."""
    if getattr(pipe, "vae", None) is None:
        raise Error(-1, "accelerate: the pipeline has no .vae")
    wrap(pipe.vae, **options)
    return pipe
