"""A real sampling run inside ComfyUI (COMFYUI_PATH) whose live previews come from vae.c's TAEHV:
a tiny Wan2.1 diffusion model (ComfyUI's own WanModel, random weights from a fixed seed) that
ComfyUI's UNETLoader detects as Wan2.1 t2v, sampled by KSampler with a synthetic taew2_1 in
models/vae_approx -- once in-process (the previews the progress-bar hook receives, compared
exactly) and once in a headless server (the prompt API, the previews as the websocket sends them:
JPEG). Each step's preview is vaec's TAEHV time-preview decode of that step's x0 (the sampler's
denoised latent, first frame), made by comfyui/previews.py's previewer, where ComfyUI alone would
have used its Latent2RGB projection for the same model."""
import asyncio
import importlib.util
import inspect
import io
import json
import os
import struct
import sys
import uuid

import numpy as np
import pytest
import torch
from PIL import Image
from safetensors.torch import save_file

import vaec
from conftest import fixture
from test_comfyui import REPO, comfy  # noqa: F401 (comfy: ComfyUI imported in-process, a fixture)
from test_comfyui_server import _request, running_comfyui

COMFYUI_PATH = os.environ.get("COMFYUI_PATH")
needs_comfyui = pytest.mark.skipif(not COMFYUI_PATH, reason="COMFYUI_PATH is not set")
WAN_NAME = "wan2.1_t2v_tiny.safetensors"
TAEHV_NAME = "taew2_1.safetensors"
# ComfyUI's Wan detection reads every size from the weights but the heads (dim // 128) and the
# text width (4096, its default): dim 128 is the smallest a detected model can have.
TINY_WAN = {"dim": 128, "ffn_dim": 256, "num_heads": 1, "num_layers": 2, "in_dim": 16,
            "out_dim": 16}
TEXT_DIM, TEXT_TOKENS = 4096, 8
STEPS, SEED = 3, 7
WIDTH = HEIGHT = 64  # latent 16 x 3 x 8 x 8 for 9 frames
FRAMES = 9
LSB = 1 / 255 + 1e-4  # preview_to_image truncates to 8 bits

# Test-only nodes (also loaded in-process): the conditioning a text encoder would give (seeded
# random tokens of the width the model expects), a node that saves the sampled latent, and a
# recorder of each sampling step's x0 and of the previewer KSampler's callback uses.
TEST_NODES = '''
import inspect
import os
import torch
import folder_paths
import latent_preview

TEXT_DIM, TEXT_TOKENS = %d, %d


class VaecTestConditioning:
    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"seed": ("INT", {"default": 0})}}

    RETURN_TYPES = ("CONDITIONING",)
    FUNCTION = "make"
    CATEGORY = "_for_testing"

    def make(self, seed):
        g = torch.Generator().manual_seed(seed)
        return ([[torch.randn(1, TEXT_TOKENS, TEXT_DIM, generator=g), {}]],)


class VaecTestSaveLatent:
    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"latent": ("LATENT",)}}

    RETURN_TYPES = ()
    OUTPUT_NODE = True
    FUNCTION = "save"
    CATEGORY = "_for_testing"

    def save(self, latent):
        path = os.path.join(folder_paths.get_output_directory(), "samples.pt")
        torch.save(latent["samples"].detach().cpu().float().clone(), path)
        return {}


def recording(prepare_callback, record, save=None):
    """prepare_callback (as nodes.common_ksampler calls it), recording into `record` the class
    of the previewer it uses, the class ComfyUI's own get_previewer would have given, and each
    step's x0; `save(record)` after each step."""
    def prepare(model, steps, x0_output_dict=None):
        callback = prepare_callback(model, steps, x0_output_dict)
        args = (model.load_device, model.model.latent_format)
        name = lambda p: type(p).__module__ + "." + type(p).__qualname__  # noqa: E731
        record["previewer"] = name(latent_preview.get_previewer(*args))
        record["without_hook"] = name(inspect.unwrap(latent_preview.get_previewer)(*args))
        record["x0"] = []

        def step(i, x0, x, total_steps):
            record["x0"].append(x0.detach().cpu().float().clone())
            callback(i, x0, x, total_steps)
            if save:
                save(record)
        return step
    return prepare


if os.environ.get("VAEC_TEST_RECORD"):  # in the server: the record goes to a file
    latent_preview.prepare_callback = recording(
        latent_preview.prepare_callback, {},
        lambda record: torch.save(record, os.environ["VAEC_TEST_RECORD"]))

NODE_CLASS_MAPPINGS = {"VaecTestConditioning": VaecTestConditioning,
                       "VaecTestSaveLatent": VaecTestSaveLatent}
''' % (TEXT_DIM, TEXT_TOKENS)


@pytest.fixture(scope="module")
def base(comfy, tmp_path_factory):  # noqa: F811 (the imported fixture)
    """A ComfyUI base folder: models/diffusion_models/ the tiny Wan2.1 (ComfyUI's WanModel,
    normal weights of std 0.05 from seed 0), models/vae_approx/ a synthetic taew2_1,
    custom_nodes/ the test nodes."""
    import comfy.ldm.wan.model as wan
    import comfy.ops
    base = tmp_path_factory.mktemp("comfyui_sampling")
    for sub in ("custom_nodes", "models/diffusion_models", "models/vae_approx", "input",
                "output"):
        (base / sub).mkdir(parents=True)
    shapes = wan.WanModel(**TINY_WAN, operations=comfy.ops.disable_weight_init).state_dict()
    g = torch.Generator().manual_seed(0)
    weights = {k: torch.randn(v.shape, generator=g) * 0.05 for k, v in shapes.items()}
    save_file(weights, str(base / "models" / "diffusion_models" / WAN_NAME))
    vaec.synth_checkpoint("taehv", base / "models" / "vae_approx" / TAEHV_NAME,
                          fixture("taehv_w21")["config"])
    (base / "custom_nodes" / "vaec_test_sampling_nodes.py").write_text(TEST_NODES)
    return base


@pytest.fixture(scope="module")
def test_nodes(base):
    spec = importlib.util.spec_from_file_location(
        "vaec_test_sampling_nodes", base / "custom_nodes" / "vaec_test_sampling_nodes.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def taehv_previews(base, x0s):
    """vaec's TAEHV time preview of each x0's first latent frame: [H, W, 3] in 0..1."""
    m = vaec.load(base / "models" / "vae_approx" / TAEHV_NAME, device="cpu", preview="time")
    return [m.decode(x0[:1, :, :1].float())[0, :, 0].movedim(0, -1) for x0 in x0s]


def check_record(record):
    """The previewer was vae.c's; ComfyUI alone would have projected linearly; x0 changed."""
    assert record["previewer"].endswith("previews.TAEHVPreviewer"), record["previewer"]
    assert record["without_hook"] == "latent_preview.Latent2RGBPreviewer", record["without_hook"]
    x0s = record["x0"]
    assert len(x0s) == STEPS and all(x.shape == (1, 16, 3, 8, 8) for x in x0s)
    assert all(torch.isfinite(x).all() for x in x0s)
    assert all(float((a - b).abs().max()) > 1e-3 for a, b in zip(x0s, x0s[1:]))


@needs_comfyui
def test_sampling_previews_in_process(comfy, base, test_nodes, monkeypatch):  # noqa: F811
    """UNETLoader -> KSampler (nodes.common_ksampler) with --preview-method taesd: the progress
    bar hook receives, per step, vae.c's preview of that step's x0, to the 8-bit step."""
    import comfy.latent_formats as formats
    import folder_paths
    import latent_preview
    from comfy.cli_args import LatentPreviewMethod, args
    n = comfy["nodes"]
    for kind in ("diffusion_models", "vae_approx"):  # first: other tests add a taew2_1 too
        folder_paths.add_model_folder_path(kind, str(base / "models" / kind), is_default=True)
    monkeypatch.setattr(args, "preview_method", LatentPreviewMethod.TAESD)
    record = {}
    monkeypatch.setattr(latent_preview, "prepare_callback",
                        test_nodes.recording(latent_preview.prepare_callback, record))
    shown = []
    comfy["utils"].set_progress_bar_global_hook(
        lambda value, total, preview, node_id=None: shown.append((value, total, preview)))
    try:
        with torch.inference_mode():
            (model,) = n.UNETLoader().load_unet(WAN_NAME, "default")
            assert type(model.model.model_config).__name__ == "WAN21_T2V"
            assert isinstance(model.model.latent_format, formats.Wan21)
            cond = test_nodes.VaecTestConditioning()
            latent = {"samples": torch.zeros(1, 16, (FRAMES - 1) // 4 + 1, HEIGHT // 8, WIDTH // 8)}
            (out,) = n.KSampler().sample(model, SEED, STEPS, 1.0, "euler", "simple",
                                         cond.make(1)[0], cond.make(2)[0], latent)
    finally:
        comfy["utils"].set_progress_bar_global_hook(None)
    assert out["samples"].shape == latent["samples"].shape and out["samples"].isfinite().all()
    check_record(record)
    previews_module = sys.modules[record["previewer"].rsplit(".", 1)[0]]
    assert previews_module.taehv_file(formats.Wan21()) == str(base / "models" / "vae_approx" /
                                                             TAEHV_NAME)
    # ComfyUI alone: a linear projection of the latent pixels (8 x 8 here, not 64 x 64)
    fallback = inspect.unwrap(latent_preview.get_previewer)(model.load_device, formats.Wan21())
    assert fallback.decode_latent_to_preview(record["x0"][-1]).size == (WIDTH // 8, HEIGHT // 8)
    previews = [s for s in shown if s[2] is not None]
    assert [s[:2] for s in previews] == [(i + 1, STEPS) for i in range(STEPS)]
    for i, ((_, _, (kind, image, _)), want) in enumerate(
            zip(previews, taehv_previews(base, record["x0"]))):
        got = torch.tensor(np.array(image)).float() / 255
        assert kind == "JPEG" and got.shape == want.shape == (HEIGHT, WIDTH, 3), i
        assert float(want.std()) > 0.02, i  # an image, not a flat colour
        err = float((got - want).abs().max())
        print(f"step {i}: preview vs vaec's TAEHV decode of x0: max abs diff {err:.3g}")
        assert err <= LSB, i


# ---- the same run in a headless server: the prompt API, the previews from its websocket ----
@pytest.fixture(scope="module")
def server(base):
    """ComfyUI's main.py on the CPU with --preview-method auto (what a user sets for previews)
    and --preview-size 64 (the preview's own size: the websocket sends it without resizing), this
    repository in custom_nodes as a clone would be."""
    (base / "custom_nodes" / "vae.c").symlink_to(REPO, target_is_directory=True)
    record = base / "record.pt"
    args = ["--preview-method", "auto", "--preview-size", str(WIDTH)]
    with running_comfyui(base, args, {"VAEC_TEST_RECORD": str(record)}) as (url, _):
        yield {"url": url, "base": base, "record": record, "output": base / "output"}


def _workflow():
    nodes = {
        "model": ("UNETLoader", {"unet_name": WAN_NAME, "weight_dtype": "default"}),
        "positive": ("VaecTestConditioning", {"seed": 1}),
        "negative": ("VaecTestConditioning", {"seed": 2}),
        "latent": ("EmptyHunyuanLatentVideo", {"width": WIDTH, "height": HEIGHT,
                                               "length": FRAMES, "batch_size": 1}),
        "sampler": ("KSampler", {"model": ["model", 0], "seed": SEED, "steps": STEPS, "cfg": 1.0,
                                 "sampler_name": "euler", "scheduler": "simple",
                                 "positive": ["positive", 0], "negative": ["negative", 0],
                                 "latent_image": ["latent", 0], "denoise": 1.0}),
        "save": ("VaecTestSaveLatent", {"latent": ["sampler", 0]}),
    }
    return {k: {"class_type": c, "inputs": i} for k, (c, i) in nodes.items()}


async def _run_with_previews(url, prompt, timeout_s=120):
    """Queues the prompt on a websocket client's id; returns (the JSON messages, the binary
    preview messages as (format, image bytes)) until the prompt finished."""
    import aiohttp
    client_id = uuid.uuid4().hex
    messages, previews = [], []
    async with aiohttp.ClientSession() as session:
        async with session.ws_connect(f"{url}/ws?clientId={client_id}") as ws:
            async with session.post(f"{url}/prompt", json={"prompt": prompt,
                                                          "client_id": client_id}) as r:
                answer = await r.json()
                assert r.status == 200, answer
            prompt_id = answer["prompt_id"]
            while True:
                msg = await asyncio.wait_for(ws.receive(), timeout_s)
                if msg.type == aiohttp.WSMsgType.BINARY:
                    event, kind = struct.unpack(">II", msg.data[:8])
                    if event == 1:  # PREVIEW_IMAGE: the image format (1: JPEG), the image
                        previews.append((kind, msg.data[8:]))
                    continue
                assert msg.type == aiohttp.WSMsgType.TEXT, msg
                data = json.loads(msg.data)
                messages.append(data)
                if data["type"] in ("execution_success", "execution_error") and \
                        data["data"].get("prompt_id") == prompt_id:
                    return messages, previews


@needs_comfyui
def test_sampling_previews_in_server(server):
    """The server's KSampler previews (auto) each step with vae.c's TAEHV: each JPEG preview the
    websocket sends is vaec's decode of that step's x0 made a preview by ComfyUI's
    preview_to_image and saved as the server saves it (quality 95)."""
    assert "VaecVAEDecode" in _request(server["url"] + "/object_info/VaecVAEDecode")
    messages, previews = asyncio.run(_run_with_previews(server["url"], _workflow()))
    assert messages[-1]["type"] == "execution_success", json.dumps(messages[-3:], indent=1)
    progress = [m["data"] for m in messages if m["type"] == "progress"]
    assert [(p["value"], p["max"]) for p in progress if p["node"] == "sampler"] == \
        [(i + 1, STEPS) for i in range(STEPS)]
    record = torch.load(server["record"])
    check_record(record)
    samples = torch.load(server["output"] / "samples.pt")
    assert samples.shape == (1, 16, 3, 8, 8) and samples.isfinite().all()
    assert len(previews) == STEPS
    import latent_preview
    for i, ((kind, data), want) in enumerate(zip(previews, taehv_previews(server["base"],
                                                                           record["x0"]))):
        image = Image.open(io.BytesIO(data))
        assert kind == 1 and image.format == "JPEG" and image.size == (WIDTH, HEIGHT), i
        got = torch.tensor(np.array(image.convert("RGB"))).float() / 255
        # vaec's decode as ComfyUI makes it a preview and the server a JPEG (identical bytes
        # here; a pixel one 8-bit step off, were the two decodes to round apart, moves the JPEG
        # by about as much)
        ours = io.BytesIO()
        latent_preview.preview_to_image(want * 2 - 1).save(ours, format="JPEG", quality=95)
        same = ours.getvalue() == data
        ours = torch.tensor(np.array(Image.open(ours).convert("RGB"))).float() / 255
        err, jpeg_err = float((got - ours).abs().max()), float((got - want).abs().max())
        print(f"step {i}: websocket preview vs vaec's TAEHV decode of x0 as the server's JPEG: "
              f"max abs diff {err:.3g} (identical bytes: {same}); vs the decode itself "
              f"{jpeg_err:.3g}")
        assert err <= 2 * LSB, i
