"""The ComfyUI nodes in comfyui/: the pure conversions always; with COMFYUI_PATH pointing at a
ComfyUI checkout, the nodes loaded by ComfyUI's own custom-node loader and compared with
ComfyUI's own VAE on the wan21_tiny weights (fp32, CPU)."""
import asyncio
import importlib.util
import json
import logging
import os
import pathlib
import sys

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

import vaec
from conftest import FIXTURES, fixture, rel_err

REPO = pathlib.Path(__file__).resolve().parents[2]
NODES_DIR = REPO / "comfyui"
COMFYUI_PATH = os.environ.get("COMFYUI_PATH")
needs_comfyui = pytest.mark.skipif(
    not COMFYUI_PATH, reason="COMFYUI_PATH is not set: point it at a ComfyUI checkout to run the "
    "nodes inside ComfyUI")
VAE_NAME = "wan_2.1_vae.safetensors"
DEC_CASES = ("dec_t3", "dec_img", "dec_t6_odd")
ENC_CASES = ("enc_t9", "enc_img", "enc_t21_odd")


def _load_core():
    spec = importlib.util.spec_from_file_location("vaec_comfyui_core", NODES_DIR / "vaec_core.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


core = _load_core()


@pytest.fixture(scope="module")
def io():
    return load_file(str(FIXTURES / "wan21_tiny.io.safetensors"))


@pytest.fixture(scope="module")
def norm():
    cfg = fixture("wan21_tiny")
    shape = (1, -1, 1, 1, 1)
    return (torch.tensor(cfg["latent_mean"]).view(shape),
            torch.tensor(cfg["latent_std"]).view(shape))


def raw_latent(io, case, norm):
    mean, std = norm
    return io[f"{case}.latent"].float() * std + mean


def frames(video):
    """A fixture video [1,3,T,H,W] in -1..1 -> ComfyUI's IMAGE [T,H,W,3] in 0..1."""
    return ((video.float()[0].movedim(0, -1) + 1) / 2).clamp(0, 1)


# ---- without ComfyUI ----
def test_engine_options():
    assert core.engine_options("cpu") == {"device": "cpu", "dtype": "fp32", "tile_mode": "auto",
                                          "max_memory": None}
    o = core.engine_options("cuda:1", "auto", " 13G ", "auto", 256)
    assert (o["device"], o["dtype"], o["max_memory"], o["tile"]) == ("cuda:1", "bf16", "13G", 256)
    assert core.engine_options("cuda", "fp16", "", "blend", 512)["blend_tile"] == 512
    assert "tile" not in core.engine_options("cpu", tile_mode="none", tile_size=64)
    g = core.engine_options("cuda", devices="1, 2")
    assert (g["device"], g["devices"]) == ("cuda:1", [1, 2])
    assert "devices" not in core.engine_options("cuda", devices="")
    assert core.engine_options("cuda", "fp8")["dtype"] == "fp8"
    for bad in ({"dtype": "int8"}, {"tile_mode": "x"}, {"tile_size": -1}, {"devices": "0,x"}):
        with pytest.raises(ValueError):
            core.engine_options("cpu", **bad)


def test_pixel_conversions():
    video = torch.linspace(-1.5, 1.5, 2 * 3 * 5 * 4 * 6).view(2, 3, 5, 4, 6)
    images = core.video_to_images(video, -1.0, 1.0)
    assert images.shape == (2, 5, 4, 6, 3)
    assert torch.equal(images, torch.clamp((video + 1.0) / 2.0, 0.0, 1.0).movedim(1, -1))
    info = {"spatial_factor": 8, "temporal_factor": 4, "is_video": 1, "image_min": -1.0,
            "image_max": 1.0}
    pixels = torch.rand(11, 37, 50, 4)  # 11 frames, RGBA, not multiples of 8
    x = core.images_to_video(pixels, info)
    assert x.shape == (1, 3, 9, 32, 48)  # 1 + 2*4 frames; centre crop (offsets 2 and 1)
    assert torch.equal(x[0, :, 0], pixels[0, 2:34, 1:49, :3].movedim(-1, 0) * 2.0 - 1.0)
    image_info = dict(info, is_video=0, image_min=0.0)
    assert core.images_to_video(pixels, image_info).shape == (11, 3, 32, 48)
    assert core.batch_progress(1, 3, 2, 5) == (7, 15)


def test_engine_through_the_conversions(io, norm):
    """ComfyUI's raw latents through the conversions equal the float64 reference decode."""
    m = vaec.load(FIXTURES / "wan21_tiny.safetensors")
    for case in DEC_CASES:
        video = m.decode(raw_latent(io, case, norm), raw=True)
        want = core.video_to_images(io[f"{case}.video"].double(), -1.0, 1.0)
        assert rel_err(core.video_to_images(video, -1.0, 1.0), want) < 1e-4, case


def test_example_workflow_uses_the_nodes():
    workflow = json.loads((NODES_DIR / "example_workflow.json").read_text())
    types = {node["class_type"] for node in workflow.values()}
    assert {"VaecVAELoader", "VaecVAEDecode"} <= types
    for node in workflow.values():
        for value in node["inputs"].values():
            if isinstance(value, list):  # a link: [node id, output index]
                assert value[0] in workflow
    init = (NODES_DIR / "__init__.py").read_text()
    assert "vaec_core.NODE_NAMES" in init  # the registered names are core.NODE_NAMES


class _Records(logging.Handler):
    """Collects what reaches the root logger's handlers (ComfyUI's console is one)."""

    def __init__(self):
        super().__init__(logging.NOTSET)
        self.records = []

    def emit(self, record):
        self.records.append(record)


@pytest.fixture
def root_records():
    """The root logger at INFO (ComfyUI's default) with a collecting handler; the engine's
    logger without the pack's filter afterwards (other tests see vaec as it is)."""
    root, handler = logging.getLogger(), _Records()
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    yield handler
    root.removeHandler(handler)
    root.setLevel(level)
    engine = logging.getLogger(core.ENGINE_LOGGER)
    for f in [f for f in engine.filters if getattr(f, "demotes_vaec_info", False)]:
        engine.removeFilter(f)


def test_engine_log_is_debug_only(root_records):
    """The pack's filter: the engine's INFO lines reach the console only at DEBUG, as DEBUG;
    its warnings stay warnings; the nodes' own line (a child logger) stays INFO."""
    engine = logging.getLogger(core.ENGINE_LOGGER)
    core.quiet_engine_log()
    core.quiet_engine_log()  # the pack loaded twice (its folder and a clone) adds one filter
    assert sum(getattr(f, "demotes_vaec_info", False) for f in engine.filters) == 1
    m = vaec.load(FIXTURES / "wan21_tiny.safetensors")  # the engine logs the model and session
    m.decode(torch.zeros(1, 16, 1, 2, 2))  # and the plan and time of a decode
    engine.warning("a warning")
    logging.getLogger(core.NODE_LOGGER).info("vae.c decode: the node's line")
    seen = [(r.name, r.levelno) for r in root_records.records if r.name.startswith("vaec")]
    assert seen == [("vaec", logging.WARNING), ("vaec.comfyui", logging.INFO)]
    logging.getLogger().setLevel(logging.DEBUG)  # ComfyUI's --verbose DEBUG
    root_records.records.clear()
    m.decode(torch.zeros(1, 16, 1, 2, 2))
    engine_records = [r for r in root_records.records if r.name == "vaec"]
    assert engine_records and all(r.levelno == logging.DEBUG and r.levelname == "DEBUG"
                                  for r in engine_records)


def test_run_summary():
    line = core.run_summary(False, (1, 16, 3, 4, 6), (1, 3, 9, 32, 48), 0.123, 5 << 20, "cpu",
                            "fp32")
    assert line == ("vae.c decode: 1x16x3x4x6 -> 1x3x9x32x48 in 0.12 s, engine peak 5.0 MiB "
                    "(cpu, fp32)")
    line = core.run_summary(True, (1, 3, 81, 720, 1280), (1, 16, 21, 90, 160), 61.5, 5 << 29,
                            "cuda:0", "bf16")
    assert line == ("vae.c encode: 1x3x81x720x1280 -> 1x16x21x90x160 in 61.50 s, engine peak "
                    "2.50 GiB (cuda:0, bf16)")


def test_clone_layout_files():
    """A clone of the repository is a node pack: the root __init__.py loads comfyui/ (and
    outside ComfyUI, where pytest imports it too, defines no nodes); requirements.txt names the
    package; pyproject.toml has the registry's [tool.comfy]."""
    init = (REPO / "__init__.py").read_text()
    assert "from .comfyui import NODE_CLASS_MAPPINGS, NODE_DISPLAY_NAME_MAPPINGS" in init
    spec = importlib.util.spec_from_file_location("vaec_clone_root", REPO / "__init__.py",
                                                  submodule_search_locations=[str(REPO)])
    root = importlib.util.module_from_spec(spec)
    if "folder_paths" not in sys.modules:  # (ComfyUI imported by a test before: it loads)
        spec.loader.exec_module(root)
        assert root.NODE_CLASS_MAPPINGS == {} and root.NODE_DISPLAY_NAME_MAPPINGS == {}
    reqs = [l.strip() for l in (REPO / "requirements.txt").read_text().splitlines()]
    assert "vaec" in reqs
    tomllib = pytest.importorskip("tomllib")
    comfy = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["comfy"]
    assert comfy["PublisherId"] and comfy["DisplayName"] == "vae.c" and "Icon" in comfy


# ---- inside ComfyUI ----
@pytest.fixture(scope="module")
def comfy(tmp_path_factory):
    """ComfyUI imported on the CPU, the nodes loaded by its custom-node loader, a models folder
    holding the wan21_tiny weights under the example workflow's VAE name."""
    if not COMFYUI_PATH:
        pytest.skip("COMFYUI_PATH is not set")
    sys.path.insert(0, COMFYUI_PATH)
    argv, sys.argv = sys.argv, ["main.py", "--cpu"]  # ComfyUI parses its flags on import
    try:  # in main.py's order: nodes puts comfy/ first on sys.path, utils/ must come before
        import comfy.options
        comfy.options.enable_args_parsing()
        import folder_paths
        import utils.extra_config  # noqa: F401
        import comfy.utils
        import execution
        import server  # noqa: F401
        import nodes
        import comfy.model_management
        import comfy.sd
    finally:
        sys.argv = argv
    assert asyncio.run(nodes.load_custom_node(str(NODES_DIR)))
    models = tmp_path_factory.mktemp("vae")
    (models / VAE_NAME).symlink_to(FIXTURES / "wan21_tiny.safetensors")
    folder_paths.add_model_folder_path("vae", str(models), is_default=True)
    folder_paths.set_output_directory(str(tmp_path_factory.mktemp("output")))
    return {"nodes": nodes, "mm": comfy.model_management, "sd": comfy.sd,
            "utils": comfy.utils, "execution": execution}


@pytest.fixture(autouse=True)
def inference_mode():
    """ComfyUI runs nodes under torch.inference_mode (its executor does)."""
    with torch.inference_mode():
        yield


@pytest.fixture(scope="module")
def comfy_vae(comfy, monkeypatch_module):
    """ComfyUI's own VAE on the wan21_tiny weights. Its Wan branch builds the released widths
    (dim 96), so the WanVAE it constructs is given the fixture's configuration."""
    import comfy.ldm.wan.vae as wan
    config = fixture("wan21_tiny")["config"]

    class TinyWanVAE(wan.WanVAE):
        def __init__(self, **kw):
            super().__init__(**{**kw, **config})

    monkeypatch_module.setattr(wan, "WanVAE", TinyWanVAE)
    sd = comfy["utils"].load_torch_file(str(FIXTURES / "wan21_tiny.safetensors"))
    vae = comfy["sd"].VAE(sd=sd, dtype=torch.float32)
    monkeypatch_module.undo()
    assert vae.device.type == "cpu"
    return vae


@pytest.fixture(scope="module")
def monkeypatch_module():
    mp = pytest.MonkeyPatch()
    yield mp
    mp.undo()


@pytest.fixture(scope="module")
def node_vae(comfy):
    loader = comfy["nodes"].NODE_CLASS_MAPPINGS["VaecVAELoader"]()
    (vae,) = loader.load_vae("wan_2.1_vae.safetensors", device="auto", dtype="auto")
    assert vae.model.device == "cpu" and vae.model.dtype == "fp32"  # --cpu holds
    return vae


@needs_comfyui
def test_registered(comfy):
    nodes = comfy["nodes"]
    for name, title in core.NODE_NAMES.items():
        assert name in nodes.NODE_CLASS_MAPPINGS
        assert nodes.NODE_DISPLAY_NAME_MAPPINGS[name] == title
    assert isinstance(comfy["nodes"].NODE_CLASS_MAPPINGS["VaecVAELoader"]().load_vae(
        "wan_2.1_vae.safetensors")[0], comfy["sd"].VAE)


@needs_comfyui
@pytest.mark.parametrize("case", DEC_CASES)
def test_decode_equals_comfyui(comfy, comfy_vae, node_vae, io, norm, case):
    raw = raw_latent(io, case, norm)
    want = comfy_vae.decode(raw)
    got = node_vae.decode(raw)
    assert got.shape == want.shape and got.dtype == want.dtype
    err = rel_err(got, want)
    print(f"{case}: decode rel err {err:.3g}")
    assert err < 1e-4
    # ComfyUI's nodes with the node's VAE: the frames as a batch of images
    n = comfy["nodes"]
    (images,) = n.VAEDecode().decode(node_vae, {"samples": raw})
    assert rel_err(images, want.reshape(-1, *want.shape[-3:])) < 1e-4
    (tiled,) = n.VAEDecodeTiled().decode(node_vae, {"samples": raw}, tile_size=64, overlap=16)
    assert rel_err(tiled, images) < 1e-4
    # exact tiles of 16 pixels: several tiles, the untiled result
    got = node_vae.decode_tiled(raw, tile_x=2, tile_y=2, overlap=1)
    assert node_vae.engine(tile_mode="auto", tile=(16, 16)).plan(raw.shape)["tiles"] != (1, 1)
    assert rel_err(got, want) < 1e-4


@needs_comfyui
def test_taehv_nodes_equal_the_fixtures(comfy, tmp_path):
    """The TAEHV weights as a VAE of the nodes: ComfyUI's VAE Decode and VAE Encode through vae.c
    equal upstream taehv.py's float64 outputs (taehv_w21: video in 0..1, the diffusion model's
    latents, which ComfyUI's LATENT holds through Wan2.1's latent format, by the file's name; the
    encoder pads 9 frames to 12 with copies of the last, the nodes keep every frame)."""
    import comfy.latent_formats as formats
    import folder_paths
    wan = formats.Wan21()
    vaec.synth_checkpoint("taehv", tmp_path / "taew2_1.safetensors", fixture("taehv_w21")["config"])
    folder_paths.add_model_folder_path("vae", str(tmp_path))
    (vae,) = comfy["nodes"].NODE_CLASS_MAPPINGS["VaecVAELoader"]().load_vae(
        "taew2_1.safetensors", device="auto", dtype="auto")
    io = load_file(str(FIXTURES / "taehv_w21.io.safetensors"))
    n = comfy["nodes"]
    for case in ("dec_t3", "dec_t1"):
        (images,) = n.VAEDecode().decode(vae, {"samples": wan.process_out(io[f"{case}.latent"])})
        want = io[f"{case}.video"][0].permute(1, 2, 3, 0)  # [T,H,W,3]
        assert images.shape == want.shape and rel_err(images, want) < 1e-4, case
    for case in ("enc_t8", "enc_t9_pad"):
        video = io[f"{case}.video"][0].permute(1, 2, 3, 0)
        (latent,) = n.VAEEncode().encode(vae, video)
        want = wan.process_out(io[f"{case}.latent"])
        assert latent["samples"].shape == want.shape, case
        assert rel_err(latent["samples"], want) < 1e-4, case


@needs_comfyui
def test_taehv_file_name_tells_the_latents(comfy, tmp_path):
    """A TAEHV file whose name does not say whose latents it decodes is refused, naming the
    names that do (taew2_1 and taehv have the same layout)."""
    import folder_paths
    vaec.synth_checkpoint("taehv", tmp_path / "tiny_video_vae.safetensors",
                          fixture("taehv_w21")["config"])
    folder_paths.add_model_folder_path("vae", str(tmp_path))
    with pytest.raises(ValueError, match="taew2_1"):
        comfy["nodes"].NODE_CLASS_MAPPINGS["VaecVAELoader"]().load_vae(
            "tiny_video_vae.safetensors", device="auto", dtype="auto")


@needs_comfyui
def test_taehv_live_previews(comfy, tmp_path, monkeypatch):
    """A sampling step's preview (latent_preview.prepare_callback, as KSampler calls it) of Wan2.1
    latents comes from vae.c's TAEHV in models/vae_approx: the time preview's first frame of
    upstream taehv.py (fixture dec_t3_preview_t), as a JPEG preview; other formats keep ComfyUI's
    own previewer."""
    import comfy.latent_formats as formats
    import folder_paths
    import latent_preview
    from comfy.cli_args import LatentPreviewMethod, args
    approx = tmp_path / "vae_approx"
    approx.mkdir()
    vaec.synth_checkpoint("taehv", approx / "taew2_1.safetensors", fixture("taehv_w21")["config"])
    folder_paths.add_model_folder_path("vae_approx", str(approx))
    monkeypatch.setattr(args, "preview_method", LatentPreviewMethod.TAESD)
    io = load_file(str(FIXTURES / "taehv_w21.io.safetensors"))

    class Patcher:  # what prepare_callback reads of a model patcher
        load_device = torch.device("cpu")
        model = type("Model", (), {"latent_format": formats.Wan21()})()

    shown = []
    comfy["utils"].set_progress_bar_global_hook(
        lambda value, total, preview, node_id=None: shown.append(preview))
    try:
        callback = latent_preview.prepare_callback(Patcher(), 2)
        x0 = io["dec_t3_preview_t.latent"]
        callback(0, x0, x0, 2)
    finally:
        comfy["utils"].set_progress_bar_global_hook(None)
    kind, image, _ = shown[-1]
    want = io["dec_t3_preview_t.video"][0, :, 0].movedim(0, -1)  # [H, W, 3] in 0..1
    got = torch.tensor(np.array(image)).float() / 255
    assert kind == "JPEG" and got.shape == want.shape
    assert float((got - want).abs().max()) <= 1 / 255 + 1e-4  # preview_to_image truncates
    other = latent_preview.get_previewer(torch.device("cpu"), formats.SD15())
    assert isinstance(other, latent_preview.Latent2RGBPreviewer)


@needs_comfyui
@pytest.mark.parametrize("case", ENC_CASES)
def test_encode_equals_comfyui(comfy, comfy_vae, node_vae, io, case):
    pixels = frames(io[f"{case}.video"])
    want = comfy_vae.encode(pixels)
    got = node_vae.encode(pixels)
    assert got.shape == want.shape
    err = rel_err(got, want)
    print(f"{case}: encode rel err {err:.3g}")
    assert err < 1e-4
    n = comfy["nodes"]
    (latent,) = n.VAEEncode().encode(node_vae, pixels)
    assert rel_err(latent["samples"], want) < 1e-4
    (latent,) = n.VAEEncodeTiled().encode(node_vae, pixels, tile_size=64, overlap=0)
    assert rel_err(latent["samples"], want) < 1e-4
    assert rel_err(node_vae.encode_tiled(pixels, tile_x=16, tile_y=16), want) < 1e-4


@needs_comfyui
def test_vaec_nodes(comfy, comfy_vae, node_vae, io, norm):
    """The vae.c decode/encode nodes, on the loader's VAE and on ComfyUI's own (its weights)."""
    n = comfy["nodes"].NODE_CLASS_MAPPINGS
    raw = raw_latent(io, "dec_t3", norm)
    want = comfy_vae.decode(raw).reshape(-1, 32, 48, 3)
    for vae in (node_vae, comfy_vae):
        for tile in (0, 16):
            (images,) = n["VaecVAEDecode"]().decode({"samples": raw}, vae, tile_size=tile)
            assert rel_err(images, want) < 1e-4
    pixels = frames(io["enc_t9.video"])
    (latent,) = n["VaecVAEEncode"]().encode(pixels, comfy_vae, tile_size=16)
    assert rel_err(latent["samples"], comfy_vae.encode(pixels)) < 1e-4


@needs_comfyui
def test_fp8_nodes(comfy, node_vae, io, norm):
    """dtype fp8 from the loader and from a decode node: bf16 activations to ComfyUI; the tiny
    model has no conv of the E4M3 kernels' shapes, so its output is the fp32 one."""
    loader = comfy["nodes"].NODE_CLASS_MAPPINGS["VaecVAELoader"]()
    (vae8,) = loader.load_vae("wan_2.1_vae.safetensors", device="cpu", dtype="fp8")
    assert vae8.model.dtype == "fp8" and vae8.vae_dtype == torch.bfloat16
    raw = raw_latent(io, "dec_t3", norm)
    want = node_vae.decode(raw)
    assert rel_err(vae8.decode(raw), want) < 1e-4
    (images,) = comfy["nodes"].NODE_CLASS_MAPPINGS["VaecVAEDecode"]().decode(
        {"samples": raw}, node_vae, dtype="fp8")
    assert rel_err(images, want.reshape(images.shape)) < 1e-4


@needs_comfyui
def test_memory_hooks(comfy, node_vae, io, norm, monkeypatch):
    """ComfyUI's memory estimate is the engine's planned peak for one batch item (the engine
    runs a batch item by item), which bounds what a decode then holds; on CUDA the node asks
    ComfyUI to free that much before running (make_room)."""
    nodes_mod = sys.modules[type(node_vae).__module__]
    for hook, shape, encode in ((node_vae.memory_used_decode, (2, 16, 3, 4, 6), False),
                                (node_vae.memory_used_encode, (1, 3, 9, 32, 48), True)):
        used = hook(shape, torch.float32)
        plan = node_vae.model.plan((1,) + shape[1:], encode=encode)
        assert isinstance(used, int) and used == plan["peak_bytes"] > 0
        assert hook((5,) + shape[1:]) == used  # per item, whatever the batch
        freed = []
        monkeypatch.setattr(comfy["mm"], "free_memory",
                            lambda need, device, *a, **k: freed.append((need, device)))
        assert nodes_mod.make_room(node_vae.model, shape, encode, "cuda:0") == used
        assert freed == [(used, "cuda:0")]
    raw = raw_latent(io, "dec_t3", norm)
    node_vae.decode(raw)
    assert 0 < node_vae.model.peak_bytes() <= node_vae.memory_used_decode(raw.shape)


@needs_comfyui
def test_one_console_line_per_run(comfy, node_vae, io, norm, root_records):
    """Loaded by ComfyUI, the pack has quieted the engine: a decode through ComfyUI's node and
    an encode through the pack's each put one vae.c line on the console, nothing else."""
    core.quiet_engine_log()  # (root_records' teardown of an earlier test removed it)
    n = comfy["nodes"]
    raw = raw_latent(io, "dec_t3", norm)
    (vae,) = n.NODE_CLASS_MAPPINGS["VaecVAELoader"]().load_vae(VAE_NAME, dtype="fp32")
    (images,) = n.VAEDecode().decode(vae, {"samples": raw})
    n.NODE_CLASS_MAPPINGS["VaecVAEEncode"]().encode(images, vae)
    lines = [r.getMessage() for r in root_records.records if r.name.startswith("vaec")]
    assert len(lines) == 2, lines
    assert lines[0].startswith("vae.c decode: 1x16x3x4x6 -> 1x3x9x32x48 in ")
    assert lines[1].startswith("vae.c encode: 1x3x9x32x48 -> 1x16x3x4x6 in ")


@needs_comfyui
def test_registry_metadata_in_comfyui(comfy):
    """ComfyUI's own parser of a node pack's pyproject.toml reads the repository's."""
    from comfy_config import config_parser
    config = config_parser.extract_node_configuration(str(REPO))
    assert config.tool_comfy.publisher_id and config.tool_comfy.display_name == "vae.c"
    assert config.project.name == "vaec"


@needs_comfyui
def test_progress_and_interrupt(comfy, node_vae, io, norm):
    mm, utils = comfy["mm"], comfy["utils"]
    raw = raw_latent(io, "dec_t6_odd", norm)
    seen = []
    utils.set_progress_bar_global_hook(lambda value, total, preview, node_id=None:
                                       seen.append((value, total)))
    try:
        node_vae.decode(raw)
        assert seen and seen[-1][0] == seen[-1][1] and len(seen) > 1
        mm.interrupt_current_processing(True)  # before the call
        with pytest.raises(mm.InterruptProcessingException):
            node_vae.decode(raw)
        assert not mm.processing_interrupted()  # ComfyUI's exception clears the flag
        # during the call: the engine stops at its next unit of work
        utils.set_progress_bar_global_hook(
            lambda value, total, preview, node_id=None: mm.interrupt_current_processing(True))
        with pytest.raises(mm.InterruptProcessingException):
            node_vae.decode(raw)
        assert not mm.processing_interrupted()
    finally:
        utils.set_progress_bar_global_hook(None)
        mm.interrupt_current_processing(False)
    assert rel_err(node_vae.decode(raw), node_vae.decode(raw)) == 0  # usable afterwards


class _Server:
    """What ComfyUI's executor needs of its server when no client is connected."""
    client_id = None
    last_node_id = None
    last_prompt_id = None

    def send_sync(self, event, data, sid=None):
        pass


@needs_comfyui
def test_example_workflow_runs_in_comfyui(comfy):
    nodes, execution = comfy["nodes"], comfy["execution"]
    for extra in ("nodes_hunyuan.py", "nodes_images.py"):  # the workflow's non-core nodes
        asyncio.run(nodes.load_custom_node(os.path.join(COMFYUI_PATH, "comfy_extras", extra),
                                           module_parent="comfy_extras"))
    prompt = json.loads((NODES_DIR / "example_workflow.json").read_text())
    prompt["2"]["inputs"].update(width=64, height=48, length=9)  # small: the tiny fixture VAE
    valid, error, outputs, node_errors = asyncio.run(execution.validate_prompt("t", prompt, None))
    assert valid, (error, node_errors)
    executor = execution.PromptExecutor(_Server())
    executor.execute(prompt, "t", {}, outputs)
    assert executor.success, executor.status_messages
    saved = [o["images"] for o in executor.history_result["outputs"].values()]
    assert len(saved) == 2 and all(s[0]["filename"].endswith(".webp") for s in saved)
