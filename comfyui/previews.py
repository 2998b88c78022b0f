"""Live previews from vae.c's TAEHV during sampling: ComfyUI's latent previewer hook
(latent_preview.get_previewer) answers Wan2.1, Wan2.2 and HunyuanVideo latents with the tiny
video decoder found in models/vae_approx (taew2_1*, taew2_2*, taehv*: madebyollin/taehv's files),
where ComfyUI would fall back to its linear Latent2RGB projection. Previews use the decoder's time
preview (one frame per latent frame) of the first latent frame only: TAEHV is causal, so that
frame needs nothing after it. Other latent formats, --preview-method none or latent2rgb, or no
file: ComfyUI's own previewer, unchanged."""
import logging

import torch
import vaec

import folder_paths
import latent_preview
from comfy.cli_args import LatentPreviewMethod, args

from . import vaec_core as core

# ComfyUI latent format class -> the TAEHV file name prefix in models/vae_approx
TAEHV_FOR_FORMAT = {f: p for p, f in core.TAEHV_LATENT_FORMATS.items()}


def taehv_file(latent_format):
    """The vae_approx file of the TAEHV decoder for this latent format, or None."""
    prefix = TAEHV_FOR_FORMAT.get(type(latent_format).__name__)
    if prefix is None:
        return None
    names = [n for n in folder_paths.get_filename_list("vae_approx") if n.startswith(prefix)]
    return folder_paths.get_full_path("vae_approx", sorted(names)[0]) if names else None


class TAEHVPreviewer(latent_preview.LatentPreviewer):
    """x0 (the sampler's denoised latent, the diffusion model's space: what TAEHV decodes) ->
    the first frame of its first video, as ComfyUI's previewers return it."""

    def __init__(self, path, device):
        cuda = device.type == "cuda" and vaec.cuda_available()
        self.model = vaec.load(path, device=f"cuda:{device.index or 0}" if cuda else "cpu",
                               dtype="bf16" if cuda else "fp32", preview="time")

    def decode_latent_to_preview(self, x0):
        lat = x0[:1, :, :1] if x0.ndim == 5 else x0[:1, :, None]
        frame = self.model.decode(lat.float())[0, :, 0]  # [3, H, W] in 0..1
        return latent_preview.preview_to_image(frame.float().movedim(0, -1) * 2 - 1)


_cache = {}


def get_previewer(original, device, latent_format):
    method = args.preview_method
    if method in (LatentPreviewMethod.TAESD, LatentPreviewMethod.Auto):
        path = taehv_file(latent_format)
        if path:
            try:
                if path not in _cache:
                    _cache.clear()  # one decoder at a time
                    _cache[path] = TAEHVPreviewer(path, torch.device(device))
                return _cache[path]
            except vaec.Error as e:
                logging.warning("vae.c previews: cannot open %s (%s): ComfyUI's previewer", path, e)
    return original(device, latent_format)


def install():
    """Puts the hook in front of ComfyUI's get_previewer (once; the original stays the fallback)."""
    original = latent_preview.get_previewer
    if getattr(original, "vaec_hook", False):
        return
    hook = lambda device, latent_format: get_previewer(original, device, latent_format)  # noqa: E731
    hook.vaec_hook = True
    hook.__wrapped__ = original  # what ComfyUI alone would do (inspect.unwrap, the tests)
    latent_preview.get_previewer = hook

