"""ComfyUI nodes that run VAEs on the vae.c engine (the installed `vaec` package).

VaecVAE is a comfy.sd.VAE, so every node that takes a VAE (VAE Decode, VAE Encode, the tiled
ones, Wan image-to-video...) runs it unchanged; only decode/encode and their tiled forms go
through the engine. ComfyUI's conventions hold at the boundary: raw latents in and out, images
[N,H,W,3] in 0..1, its progress bar, its interrupt and its memory estimate.
"""
import logging
import math
import time
import weakref

import torch
import vaec

import comfy.latent_formats
import comfy.model_management as mm
import comfy.sd
import comfy.utils
import folder_paths

from . import vaec_core as core

_log = logging.getLogger(core.NODE_LOGGER)

# what the VAE computes its activations in (fp8: E4M3 convs on bf16 activations)
_TORCH_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16,
                 "fp8": torch.bfloat16}


_warned_cpu = False


def _resolve_device(device):
    """"auto": ComfyUI's VAE device (its --cpu / --cpu-vae flags hold), CPU when the installed
    vaec cannot run CUDA -- said once, with vaec's reason, since a video on the CPU takes long."""
    global _warned_cpu
    if device != "auto":
        return device
    dev = mm.vae_device()
    if dev.type == "cuda" and vaec.cuda_available():
        return f"cuda:{dev.index or 0}"
    if dev.type == "cuda" and not _warned_cpu:
        _warned_cpu = True
        logging.warning("vae.c: ComfyUI's VAE device is a GPU but vaec runs on the CPU: %s",
                        vaec.info()["cuda_off"])
    return "cpu"


def _set_options(options):
    """Engine options without the unset ones, so that None and absent compare equal."""
    return {k: v for k, v in options.items() if v is not None}


def _open(opener, options, name):
    try:
        model = opener(**options)
    except vaec.Error as e:
        raise ValueError(f"{name}: vae.c cannot open it ({e}); it runs Wan2.1, Wan2.2, SeedVR2, "
                         "TAESD and TAEHV VAEs, use ComfyUI's Load VAE for others") from e
    if model.info["arch"] not in core.SUPPORTED_ARCHS:
        raise ValueError(f"{name}: architecture {model.info['arch']} is not one vae.c's nodes "
                         f"support ({', '.join(core.SUPPORTED_ARCHS)})")
    return model


def _taehv_latent_format(info, name):
    """A TAEHV model's ComfyUI latent format (by its file name), which the VAE's latents pass
    through; None for other models. Raises where the name does not tell."""
    if info["arch"] != "taehv":
        return None
    fmt = core.taehv_latent_format(name)
    if fmt is None:
        raise ValueError(f"{name}: a TAEHV decoder, but its name does not say whose latents it "
                         f"takes: name it {', '.join(p + '*' for p in core.TAEHV_LATENT_FORMATS)} "
                         "(madebyollin/taehv's names) for Wan2.1, Wan2.2 or HunyuanVideo")
    return getattr(comfy.latent_formats, fmt)()


def planned_peak(model, shape, encode):
    """The engine's planned peak bytes for one item of a batch of this shape (the engine runs a
    batch one item at a time)."""
    one = (1,) + tuple(shape[1:])
    return max(1, int(model.plan(one, encode=encode)["peak_bytes"]))


def make_room(model, shape, encode, device):
    """Frees the plan's peak on device as ComfyUI's load_models_gpu would for its own VAE (other
    models are unloaded): the engine allocates through torch, so what they give back becomes
    the engine's. Returns the bytes asked for."""
    need = planned_peak(model, shape, encode)
    mm.free_memory(need, device)
    return need


class VaecVAE(comfy.sd.VAE):
    """A VAE whose decode/encode run on the vae.c engine.

    opener(**options) opens the engine model (vaec.load on a path, vaec.from_state_dict on
    weights); get_weights() gives the weights back for nodes that save a VAE. The torch module
    ComfyUI's own VAE builds is never built, so comfy.sd.VAE.__init__ is not called: the
    attributes ComfyUI reads are set here from the engine's model description.
    """

    def __init__(self, opener, options, get_weights, name="VAE"):
        self._options, self._get_weights, self._name = options, get_weights, name
        self.model = _open(opener, options, name)
        self._variant = None  # (options, session): the one other option set last asked for
        info = self.model.info
        self.info = info
        f, tf = info["spatial_factor"], info["temporal_factor"]
        if info["is_video"]:
            self.upscale_ratio = (lambda a: max(0, a * tf - (tf - 1)), f, f)
            self.downscale_ratio = (lambda a: max(0, math.floor((a + tf - 1) / tf)), f, f)
            self.upscale_index_formula = self.downscale_index_formula = (tf, f, f)
            self.latent_dim = 3
        else:
            self.upscale_ratio = self.downscale_ratio = f
            self.upscale_index_formula = self.downscale_index_formula = None
            self.latent_dim = 2
        self._latent_format = _taehv_latent_format(info, name)
        lo, hi = info["image_min"], info["image_max"]
        self.process_input = lambda image: image * (hi - lo) + lo
        self.process_output = lambda image: core.to_unit(image, lo, hi)
        self.latent_channels = info["latent_channels"]
        self.output_channels = info["image_channels"]
        self.not_video = not info["is_video"]
        self.extra_1d_channel = None
        self.crop_input = True
        self.disable_offload = False
        self.working_dtypes = [torch.bfloat16, torch.float16, torch.float32]
        self.first_stage_model = None
        self.patcher = None
        self.device = torch.device(self.model.device)
        self.vae_dtype = _TORCH_DTYPES[self.model.dtype]
        self.output_device = mm.intermediate_device()

    @classmethod
    def from_file(cls, path, options):
        return cls(lambda **o: vaec.load(path, **o), options,
                   lambda: comfy.utils.load_torch_file(path), name=path)

    @classmethod
    def from_comfy_vae(cls, vae, options):
        """The engine on the weights of a VAE ComfyUI loaded (a checkpoint's, say). Held weakly:
        the twin lives in a WeakKeyDictionary keyed by that VAE and must not keep it alive."""
        ref = weakref.ref(vae)
        return cls(lambda **o: vaec.from_state_dict(ref().get_sd(), **o), options,
                   lambda: ref().get_sd())

    def throw_exception_if_invalid(self):
        pass  # __init__ raised already if the engine could not open the weights

    def get_sd(self):
        return self._get_weights()

    def engine(self, **overrides):
        """The engine session for the loader's options with overrides (a decode node's dtype or
        tiles; None: vaec's default): the loader's, or one more session of the same weights kept
        for the last other option set (the checkpoint is never read again)."""
        options = _set_options({**self._options, **overrides})
        if options == _set_options(self._options):
            return self.model
        if self._variant is None or self._variant[0] != options:
            self._variant = None  # free the previous one before opening the next
            self._variant = (options, self.model.with_options(**options))
        return self._variant[1]

    # ---- ComfyUI's memory hooks: the engine's own plan for one batch item ----
    def memory_used_decode(self, shape, dtype=None):
        return planned_peak(self.model, shape, False)

    def memory_used_encode(self, shape, dtype=None):
        return planned_peak(self.model, shape, True)

    # ---- running ----
    def _run(self, model, x, encode):
        """Runs the engine over the batch one item at a time (the engine's unit), with ComfyUI's
        progress bar and interrupt. x is on the engine's device in float32: raw latents (decode;
        ComfyUI keeps latents raw) or pixels in the model's range (encode)."""
        mm.throw_exception_if_processing_interrupted()
        one = (1,) + tuple(x.shape[1:])
        if x.is_cuda:
            make_room(model, x.shape, encode, x.device)
        out = torch.empty((x.shape[0],) + model.output_shape(one, encode)[1:],
                          dtype=x.dtype, device=x.device)
        pbar = comfy.utils.ProgressBar(x.shape[0])
        run = model.encode if encode else model.decode
        start, peak = time.perf_counter(), 0
        try:
            for b in range(x.shape[0]):
                def step(done, total, b=b):
                    pbar.update_absolute(*core.batch_progress(b, x.shape[0], done, total))
                    return mm.processing_interrupted()
                run(x[b : b + 1], out=out[b : b + 1], raw=True, callback=step)
                peak = max(peak, model.peak_bytes())
            _log.info(core.run_summary(encode, x.shape, out.shape, time.perf_counter() - start,
                                       peak, model.device, model.dtype))
        except vaec.Error as e:
            if e.name == "EINTERRUPTED":
                mm.throw_exception_if_processing_interrupted()
            raise
        finally:
            if x.is_cuda:
                model.trim()  # the engine's cached blocks back to torch, where ComfyUI sees them
        return out

    def _decode_with(self, model, samples):
        samples = samples.to(self.device, torch.float32)
        if self._latent_format is not None:  # ComfyUI's LATENT -> the diffusion model's latents
            samples = self._latent_format.process_in(samples)
        video = self._run(model, samples, encode=False)
        lo, hi = self.info["image_min"], self.info["image_max"]
        return core.video_to_images(video, lo, hi).to(self.output_device)

    def _encode_with(self, model, pixels):
        x = core.images_to_video(pixels.to(self.device, torch.float32), self.info)
        z = self._run(model, x, encode=True)
        if self._latent_format is not None:
            z = self._latent_format.process_out(z)
        return z.to(self.output_device)

    def decode(self, samples_in, vae_options={}):
        """Raw latents [B,C,T,h,w] -> [B,T,H,W,3] in 0..1 (image models [B,H,W,3])."""
        return self._decode_with(self.model, samples_in)

    def encode(self, pixel_samples):
        """[N,H,W,3] in 0..1 (a video model takes the N images as frames) -> raw latents."""
        return self._encode_with(self.model, pixel_samples)

    # The tiled forms run the engine's exact tiles of the size asked for: the result equals the
    # untiled one. Overlaps are not needed (the engine computes each tile's halo) and time is
    # never cut (the engine streams frames through its causal caches), so those are ignored.
    def decode_tiled(self, samples, tile_x=None, tile_y=None, overlap=None, tile_t=None,
                     overlap_t=None):
        f = self.spacial_compression_decode()
        tile = (tile_x * f, (tile_y or tile_x) * f) if tile_x else None
        return self._decode_with(self.engine(tile_mode="auto", tile=tile), samples)

    def encode_tiled(self, pixel_samples, tile_x=None, tile_y=None, overlap=None, tile_t=None,
                     overlap_t=None):
        tile = (tile_x, tile_y or tile_x) if tile_x else None
        return self._encode_with(self.engine(tile_mode="auto", tile=tile), pixel_samples)


# Plain ComfyUI VAEs handed to the vae.c decode/encode nodes: their engine twin, built once.
_twins = weakref.WeakKeyDictionary()


def as_vaec_vae(vae):
    if isinstance(vae, VaecVAE):
        return vae
    if vae not in _twins:
        vae.throw_exception_if_invalid()
        _twins[vae] = VaecVAE.from_comfy_vae(vae, core.engine_options(_resolve_device("auto")))
    return _twins[vae]


_RUN_OPTIONS = {
    "dtype": (core.DTYPES, {"default": "auto", "tooltip": "Compute precision (auto: the VAE's)."}),
    "max_memory": ("STRING", {"default": "", "tooltip": "Memory budget, e.g. 13G (empty: the VAE's)."}),
    "tile_mode": (core.TILE_MODES, {"default": "auto", "tooltip": "auto: exact tiles as the budget needs; none: whole frames; blend: overlapping tiles, blended (not exact)."}),
    "tile_size": ("INT", {"default": 0, "min": 0, "max": 8192, "step": 16, "tooltip": "Tile size in pixels (0: the engine's choice)."}),
}


def _run_options(vae, dtype, max_memory, tile_mode, tile_size):
    """The decode/encode nodes' widgets, "auto" and empty falling back to the VAE's options."""
    base = vae._options
    return core.engine_options(base["device"], base["dtype"] if dtype == "auto" else dtype,
                               max_memory or base["max_memory"] or "", tile_mode, tile_size)


class VaecVAELoader:
    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {
            "vae_name": (folder_paths.get_filename_list("vae"),),
            "device": (core.DEVICES, {"default": "auto", "tooltip": "auto: ComfyUI's VAE device."}),
            "dtype": (core.DTYPES, {"default": "auto", "tooltip": "auto: bf16 on CUDA, fp32 on the CPU; fp8: E4M3 convs (RTX 40/50, H100/H200)."}),
            "max_memory": ("STRING", {"default": "", "tooltip": "Memory budget, e.g. 13G (empty: free memory less a margin)."}),
            "tile_mode": _RUN_OPTIONS["tile_mode"],
        }, "optional": {
            "devices": ("STRING", {"default": "", "tooltip": "Several GPUs sharing each decode/encode, e.g. 0,1 (exact tiles, or SeedVR2 row bands, shared out; empty: the one device)."}),
        }}

    RETURN_TYPES = ("VAE",)
    FUNCTION = "load_vae"
    CATEGORY = "loaders"
    DESCRIPTION = ("Loads a Wan2.1/Wan2.2/SeedVR2/TAESD/TAEHV VAE on the vae.c engine. The VAE "
                   "works with every node that takes one (VAE Decode, VAE Encode, tiled...).")

    def load_vae(self, vae_name, device="auto", dtype="auto", max_memory="", tile_mode="auto",
                 devices=""):
        path = folder_paths.get_full_path_or_raise("vae", vae_name)
        opts = core.engine_options(_resolve_device(device), dtype, max_memory, tile_mode,
                                   devices=devices)
        return (VaecVAE.from_file(path, opts),)


class VaecVAEDecode:
    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"samples": ("LATENT",), "vae": ("VAE",), **_RUN_OPTIONS}}

    RETURN_TYPES = ("IMAGE",)
    FUNCTION = "decode"
    CATEGORY = "latent"
    DESCRIPTION = ("Decodes a latent on the vae.c engine with its options. Takes any Wan2.1/"
                   "Wan2.2/SeedVR2/TAESD/TAEHV VAE, also one a checkpoint loader gave.")

    def decode(self, samples, vae, dtype="auto", max_memory="", tile_mode="auto", tile_size=0):
        vae = as_vaec_vae(vae)
        model = vae.engine(**_run_options(vae, dtype, max_memory, tile_mode, tile_size))
        images = vae._decode_with(model, samples["samples"])
        return (images.reshape((-1,) + tuple(images.shape[-3:])),)  # video frames -> images


class VaecVAEEncode:
    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"pixels": ("IMAGE",), "vae": ("VAE",), **_RUN_OPTIONS}}

    RETURN_TYPES = ("LATENT",)
    FUNCTION = "encode"
    CATEGORY = "latent"
    DESCRIPTION = "Encodes images (a video model: the frames of one video) on the vae.c engine."

    def encode(self, pixels, vae, dtype="auto", max_memory="", tile_mode="auto", tile_size=0):
        vae = as_vaec_vae(vae)
        model = vae.engine(**_run_options(vae, dtype, max_memory, tile_mode, tile_size))
        return ({"samples": vae._encode_with(model, pixels)},)
