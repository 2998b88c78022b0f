"""The parts of the vae.c ComfyUI nodes that need no ComfyUI: node names, option parsing, and the
conversions between ComfyUI's conventions and the engine's. ComfyUI keeps latents raw (its latent
formats normalise them outside the VAE: the nodes call the engine with raw=True) and images as
[N,H,W,3] in 0..1; the engine takes videos [B,3,T,H,W] in its model's pixel range.
Importable, and tested, without ComfyUI.
"""
import logging
import os

import torch

# Class names (the keys workflows refer to) and the names the UI shows.
NODE_NAMES = {
    "VaecVAELoader": "Load VAE (vae.c)",
    "VaecVAEDecode": "VAE Decode (vae.c)",
    "VaecVAEEncode": "VAE Encode (vae.c)",
}

DEVICES = ("auto", "cuda", "cpu")
DTYPES = ("auto", "bf16", "fp16", "fp32", "fp8")
TILE_MODES = ("auto", "none", "blend")
SUPPORTED_ARCHS = ("wan2.1", "wan2.2", "seedvr2", "taesd", "taehv")
# TAEHV decodes the diffusion model's own latents; ComfyUI's LATENT holds the VAE's (its latent
# format's process_out). Which model a TAEHV file serves is in its name only (taew2_1 and taehv
# have the same layout): file name prefix -> ComfyUI latent format class (comfy.latent_formats).
TAEHV_LATENT_FORMATS = {"taew2_1": "Wan21", "taew2_2": "Wan22", "taehv": "HunyuanVideo"}


def taehv_latent_format(name):
    """The ComfyUI latent format class name of a TAEHV file (by its base name), or None."""
    base = os.path.basename(str(name))
    return next((f for p, f in TAEHV_LATENT_FORMATS.items() if base.startswith(p)), None)

ENGINE_LOGGER = "vaec"  # where vaec sends the engine's log lines (INFO and up)
NODE_LOGGER = "vaec.comfyui"  # the nodes' one line per decode/encode (a child: not demoted)


class EngineInfoToDebug(logging.Filter):
    """Makes the engine's INFO lines DEBUG ones: ComfyUI's console (INFO by default) shows them
    only with --verbose DEBUG; warnings and errors pass unchanged. A logger's level is checked
    only where a record is made, not as it propagates to the root's handlers, so a demoted
    record is also dropped here unless the logger is enabled for DEBUG."""

    demotes_vaec_info = True  # marks it: the pack may be loaded twice (folder and clone)

    def filter(self, record):
        if record.levelno != logging.INFO:
            return True
        record.levelno, record.levelname = logging.DEBUG, logging.getLevelName(logging.DEBUG)
        return logging.getLogger(record.name).isEnabledFor(logging.DEBUG)


def quiet_engine_log():
    """Installs EngineInfoToDebug on the engine's logger once (the pack calls it on loading)."""
    logger = logging.getLogger(ENGINE_LOGGER)
    if not any(getattr(f, "demotes_vaec_info", False) for f in logger.filters):
        logger.addFilter(EngineInfoToDebug())


def run_summary(encode, in_shape, out_shape, seconds, peak_bytes, device, dtype):
    """The one console line of a decode/encode: shapes, time and the engine's peak memory."""
    shape = lambda s: "x".join(str(int(n)) for n in s)
    peak = (f"{peak_bytes / 2**30:.2f} GiB" if peak_bytes >= 2**30 else
            f"{peak_bytes / 2**20:.1f} MiB")
    return (f"vae.c {'encode' if encode else 'decode'}: {shape(in_shape)} -> {shape(out_shape)} "
            f"in {seconds:.2f} s, engine peak {peak} ({device}, {dtype})")


def parse_devices(devices):
    """"0,1" (the loader's widget) -> [0, 1]; "" -> None (one device)."""
    text = str(devices or "").replace(" ", "")
    if not text:
        return None
    parts = text.split(",")
    if not all(p.isdigit() for p in parts) or len(parts) > 8:
        raise ValueError(f"devices {devices!r}: expected up to 8 GPU indices such as 0,1")
    return [int(p) for p in parts]


def engine_options(device, dtype="auto", max_memory="", tile_mode="auto", tile_size=0,
                   devices=""):
    """Keyword arguments for vaec.load / vaec.from_state_dict from the nodes' widget values.

    device: "cpu", "cuda" or "cuda:N", already resolved (the node maps "auto" to ComfyUI's VAE
    device). dtype "auto": bf16 on CUDA (what ComfyUI picks for Wan VAEs), fp32 on the CPU (the
    CPU backend computes in fp32 only); "fp8": E4M3 convolutions on bf16 activations (GPUs with
    E4M3 tensor cores: Ada, Hopper, Blackwell; the CPU emulates them). max_memory "": the engine's default budget. tile_size 0:
    the engine chooses; otherwise pixels: the exact tile size in "auto" mode, the blend tile in
    "blend" mode. devices "0,1": a device group of these GPUs sharing each call (the tensors on
    the first); "": the one device.
    """
    if dtype not in DTYPES:
        raise ValueError(f"dtype {dtype!r}: expected one of {', '.join(DTYPES)}")
    if tile_mode not in TILE_MODES:
        raise ValueError(f"tile_mode {tile_mode!r}: expected one of {', '.join(TILE_MODES)}")
    if tile_size < 0:
        raise ValueError(f"tile_size {tile_size}: expected 0 (the engine's choice) or pixels")
    group = parse_devices(devices)
    if group and len(group) > 1:
        device = f"cuda:{group[0]}"
    cuda = str(device).startswith("cuda")
    if dtype == "auto":
        dtype = "bf16" if cuda else "fp32"
    opts = {"device": str(device), "dtype": dtype, "tile_mode": tile_mode,
            "max_memory": str(max_memory).strip() or None}
    if tile_size and tile_mode == "blend":
        opts["blend_tile"] = int(tile_size)
    elif tile_size and tile_mode == "auto":
        opts["tile"] = int(tile_size)
    if group and len(group) > 1:
        opts["devices"] = group
    return opts


def to_unit(video, image_min, image_max):
    """Pixels in the model's range -> 0..1, clamped (ComfyUI's VAE.process_output)."""
    return ((video - image_min) / (image_max - image_min)).clamp(0.0, 1.0)


def video_to_images(video, image_min, image_max):
    """The engine's output [B,3,T,H,W] (image models [B,3,H,W]) in its pixel range -> ComfyUI's
    [B,T,H,W,3] ([B,H,W,3]) in 0..1, as ComfyUI's VAE.decode returns it."""
    return to_unit(video, image_min, image_max).movedim(1, -1)


def crop_pixels(pixels, factor):
    """Centre-crops the spatial dimensions of [...,H,W,C] to multiples of factor, as ComfyUI's
    VAE does before encoding (the encoder needs whole latent pixels)."""
    for dim in (-3, -2):
        size = pixels.shape[dim]
        keep = size // factor * factor
        if keep != size:
            pixels = pixels.narrow(dim, (size % factor) // 2, keep)
    return pixels


def images_to_video(pixels, info):
    """ComfyUI pixels [N,H,W,C] (for a video model: N frames of one video) or [B,T,H,W,C], in
    0..1 -> the engine's input [1,3,T,H,W] / [B,3,T,H,W] (image models [N,3,H,W]) in the model's
    pixel range. Video frames past the last whole latent frame (1 + k * temporal factor) are
    dropped, as ComfyUI's Wan encoder does; TAEHV models take every frame (they pad the last
    group of the time factor with copies of the last frame, as upstream does)."""
    x = crop_pixels(pixels[..., :3], info["spatial_factor"]).movedim(-1, 1)
    if info["is_video"]:
        if x.dim() == 4:
            x = x.movedim(1, 0).unsqueeze(0)
        tf = info["temporal_factor"]
        if info.get("arch") != "taehv":
            x = x[:, :, : 1 + (x.shape[2] - 1) // tf * tf]
    lo, hi = info["image_min"], info["image_max"]
    return x * (hi - lo) + lo


def batch_progress(index, batch, done, total):
    """(value, total) for ComfyUI's progress bar while item index of batch reports done/total."""
    return index * total + done, batch * total
