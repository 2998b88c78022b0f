#!/usr/bin/env python3
"""Every TAEHV variant against upstream's taehv.py (madebyollin/taehv), on synthetic weights.

    python bench/taehv_upstream_check.py .upstream/taehv/taehv.py [--variants taeh3,taecvx]

For each upstream file name (taew2_1, taehv, taeos1_3, taecvx, taew2_2, taew2_2_super, taehv1_5,
taehv1_5_super, taeh3, taeltx_2, taeltx2_3): upstream's module for it (checkpoint_path=None and
the constructor arguments its file name implies) gives the key names and shapes; the fixtures'
synthetic-weight rule (../shared/fixtures/README.md) fills them; the state dict is saved as
.safetensors and .pth. Upstream then loads the .pth under the variant's file name (its own
name-keyed configuration: taeh3's chunks, taecvx's even-length decodes) and runs in float64 on
the CPU; vae.c (vaec, fp32, CPU) opens the files under a neutral name -- detected from the
weights alone -- except taecvx, whose rule only the name (or config={"variant": "taecvx"})
tells. Cases: decodes of 1, 2 and 3 latents of 3x5, the previews (time, space, both; the super
decoder has no space preview, upstream's neither), decodes and encodes through vae.c's exact
tiles, encodes of frame counts that are not multiples of the time factor (24x40 px per patch),
and taeh3's several 17-frame segments / 5-latent periods. Prints variant x case -> relative
error ||vae.c - upstream|| / ||upstream|| (all must be <= 1e-4) and exits non-zero otherwise.

Needs torch, safetensors, numpy and vaec (tqdm, which upstream imports, where installed; a
silent stand-in otherwise) (VAEC_LIBRARY=
$PWD/build/libvae.so PYTHONPATH=python). Never needs the network; upstream's taehv.py is fetched
by hand into the ignored .upstream/ (never committed).
"""
import argparse
import importlib.util
import math
import os
import sys
import tempfile

import numpy as np
import torch

TOL = 1e-4
T3, F3 = (True, True, True), (False, False, False)
# upstream's constructor arguments of each file name (taehv.py's name-keyed overrides spelled
# out), and what its file name alone adds
VARIANTS = {
    "taew2_1": dict(),
    "taehv": dict(),
    "taeos1_3": dict(),
    "taecvx": dict(),
    "taew2_2": dict(patch_size=2, latent_channels=48),
    "taew2_2_super": dict(patch_size=2, latent_channels=48, arch_variant="super"),
    "taehv1_5": dict(patch_size=2, latent_channels=32),
    "taehv1_5_super": dict(patch_size=2, latent_channels=32, arch_variant="super"),
    "taeh3": dict(patch_size=2, latent_channels=24),
    "taeltx_2": dict(patch_size=4, latent_channels=128, encoder_time_downscale=T3,
                     decoder_time_upscale=T3),
    "taeltx2_3": dict(patch_size=4, latent_channels=128, encoder_time_downscale=T3,
                      decoder_time_upscale=T3),
}
# what vae.c reports for a neutral file name (the first variant of the weights' layout)
DETECTED = {"taehv": "taew2_1", "taeos1_3": "taew2_1", "taecvx": "taew2_1",
            "taeltx2_3": "taeltx_2"}


def _stub_tqdm():
    """upstream imports tqdm.auto for its progress bars: a silent stand-in where tqdm is missing
    (a GPU machine without the network)."""
    import types

    class Bar:
        def __init__(self, *args, **kwargs):
            self.iterable = args[0] if args else None

        def __iter__(self):
            return iter(self.iterable)

        def update(self, *args):
            pass

        def close(self):
            pass

    auto = types.ModuleType("tqdm.auto")
    auto.tqdm = Bar
    top = types.ModuleType("tqdm")
    top.auto, top.tqdm = auto, Bar
    sys.modules.update({"tqdm": top, "tqdm.auto": auto})


def load_upstream(path):
    if importlib.util.find_spec("tqdm") is None:
        _stub_tqdm()
    spec = importlib.util.spec_from_file_location("upstream_taehv", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def fnv1a64(key):
    h = 0xCBF29CE484222325
    for b in key.encode():
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def synth_tensor(key, shape):
    """The fixtures' synthetic-weight rule (../shared/fixtures/README.md)."""
    n = math.prod(shape)
    with np.errstate(over="ignore"):
        z = np.uint64(fnv1a64(key)) + np.arange(1, n + 1, dtype=np.uint64) * np.uint64(
            0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    r = 2.0 * ((z >> np.uint64(11)).astype(np.float64) * 2.0 ** -53) - 1.0
    last = key.split(".")[-1]
    if last == "gamma" or (last == "weight" and "norm" in key):
        v = 1 + 0.25 * r
    elif last == "bias":
        v = 0.1 * r
    else:
        v = r * math.sqrt(3 / (n / shape[0]))
    return torch.from_numpy(v.astype(np.float32).reshape(shape))


def make_checkpoint(mod, name, folder):
    """Upstream's keys for `name` filled by the rule, saved under the upstream and a neutral
    name as .pth and .safetensors. Returns (state dict, {kind: path})."""
    from safetensors.torch import save_file
    keys = mod.TAEHV(checkpoint_path=None, **VARIANTS[name]).state_dict()
    sd = {k: synth_tensor(k, tuple(v.shape)) for k, v in keys.items()}
    paths = {"upstream_pth": os.path.join(folder, f"{name}.pth"),
             "upstream_st": os.path.join(folder, f"{name}.safetensors"),
             "neutral_pth": os.path.join(folder, name + "_files", "model.pth"),
             "neutral_st": os.path.join(folder, name + "_files", "model.safetensors")}
    os.makedirs(os.path.dirname(paths["neutral_st"]), exist_ok=True)
    for kind, p in paths.items():
        torch.save(sd, p) if p.endswith(".pth") else save_file(sd, p)
    return sd, paths


def upstream_model(mod, name, sd, pth, preview):
    """Upstream's model of the .pth under its file name, with the preview's flags; taeltx's name
    forces time upscaling, so its time previews take the arguments without the name."""
    time = preview in ("time", "both")
    space = preview in ("space", "both")
    flags = dict(decoder_time_upscale=(False, False) if time else (False, True, True),
                 decoder_space_upscale=F3 if space else T3)
    if name.startswith("taeltx") and time:
        args = {**VARIANTS[name], **flags}
        m = mod.TAEHV(checkpoint_path=None, **args)
        m.load_state_dict(m.patch_tgrow_layers(dict(sd)))
    else:
        m = mod.TAEHV(checkpoint_path=pth, **flags)
    return m.double().eval()


def rel_err(out, ref):
    if tuple(out.shape) != tuple(ref.shape):
        return float("inf"), f"shape {tuple(out.shape)} != upstream {tuple(ref.shape)}"
    num = torch.linalg.vector_norm(out.double() - ref.double()).item()
    den = torch.linalg.vector_norm(ref.double()).item()
    return (num / den if den > 0 else num), ""


def cases(name):
    """(case, op, latents T or frames, size (h, w) in latents / patches, preview, tiles)"""
    p = VARIANTS[name].get("patch_size", 1)
    t_down = 8 if name.startswith("taeltx") else 4
    out = [("dec1", "decode", 1, (3, 5), None, False), ("dec2", "decode", 2, (3, 5), None, False),
           ("dec3", "decode", 3, (3, 5), None, False),
           ("dec3_pth", "decode", 3, (3, 5), None, False),
           ("time", "decode", 3, (3, 5), "time", False)]
    if "super" not in name:
        out += [("space", "decode", 3, (3, 5), "space", False),
                ("both", "decode", 3, (3, 5), "both", False)]
    out += [("dec_tiles", "decode", 2, (6, 10), None, True),
            ("enc", "encode", 2 * t_down - 1, (3, 5), None, False),
            ("enc_tiles", "encode", t_down + 1, (6, 10), None, True)]
    if name == "taeh3":  # several segments / periods, and a period completed with zeros
        out += [("dec6", "decode", 6, (3, 5), None, False),
                ("dec11", "decode", 11, (2, 3), None, False),
                ("enc20", "encode", 20, (3, 5), None, False),
                ("enc35", "encode", 35, (2, 3), None, False)]
    if name == "taecvx":
        out += [("dec4", "decode", 4, (3, 5), None, False)]
    return [(c, op, t, (h * (8 * p if op == "encode" else 1), w * (8 * p if op == "encode" else 1)),
             pv, tl) for c, op, t, (h, w), pv, tl in out]


def run_variant(mod, vaec, name, folder, gen):
    sd, paths = make_checkpoint(mod, name, folder)
    # taecvx: its rule is in its name only; the others from the weights under a neutral name
    st = paths["upstream_st"] if name == "taecvx" else paths["neutral_st"]
    pth = paths["upstream_pth"] if name == "taecvx" else paths["neutral_pth"]
    model = vaec.load(st)
    want = DETECTED.get(name, name) if name != "taecvx" else "taecvx"
    got = model.info["config"].get("variant")
    named = vaec.load(paths["upstream_st"]).info["config"].get("variant")
    rows = {"detected": (got == want and named == name, f"{got} / {named}")}
    if name == "taecvx":  # the same rule from the option, on a neutral name
        opt = vaec.load(paths["neutral_st"], config={"variant": "taecvx"})
        rows["option"] = (opt.info["config"].get("variant") == "taecvx", "config variant")
    lat_c = VARIANTS[name].get("latent_channels", 16)
    refs = {}
    for case, op, t, (h, w), preview, tiles in cases(name):
        if op == "decode":
            x = torch.randn(1, t, lat_c, h, w, generator=gen, dtype=torch.float64) * 1.5
        else:
            x = torch.rand(1, t, 3, h, w, generator=gen, dtype=torch.float64)
        if preview not in refs:
            refs[preview] = upstream_model(mod, name, sd, paths["upstream_pth"], preview)
        up = refs[preview]
        with torch.no_grad():
            ref = (up.decode_video(x, parallel=True, show_progress_bar=False) if op == "decode"
                   else up.encode_video(x, parallel=True, show_progress_bar=False))
        ref = ref.transpose(1, 2)  # NTCHW -> NCTHW
        m = vaec.load(pth if case.endswith("_pth") else st, preview=preview)
        if name == "taecvx" and case == "dec4":
            m = vaec.load(paths["neutral_st"], config={"variant": "taecvx"}, preview=preview)
        note = ""
        if tiles:
            side = (ref.shape[-2] // 2, ref.shape[-1] // 2) if op == "decode" else (h // 2, w // 2)
            m = m.with_options(tile=side)
            plan = m.plan((1,) + tuple(x.transpose(1, 2).shape[1:]), encode=op == "encode")
            note = "%dx%d tiles" % plan["tiles"]
        xin = x.transpose(1, 2).float().contiguous()
        out = m.decode(xin) if op == "decode" else m.encode(xin)
        err, why = rel_err(out, ref)
        rows[case] = (err <= TOL, f"{err:.1e}" + (f" ({why})" if why else "")
                      + (f" [{note}]" if note else ""))
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("taehv_py", help="upstream's taehv.py (madebyollin/taehv)")
    ap.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated names")
    args = ap.parse_args()
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    mod = load_upstream(args.taehv_py)
    import vaec
    gen = torch.Generator().manual_seed(58)
    failed = 0
    with tempfile.TemporaryDirectory() as folder:
        for name in args.variants.split(","):
            rows = run_variant(mod, vaec, name, folder, gen)
            for case, (ok, text) in rows.items():
                failed += not ok
                print(f"{name:15s} {case:10s} {text:28s} {'ok' if ok else 'FAIL'}", flush=True)
    print(f"{'all within ' + str(TOL) if not failed else str(failed) + ' FAILED'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
