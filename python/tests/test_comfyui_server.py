"""The node pack in a headless ComfyUI server (COMFYUI_PATH: a ComfyUI checkout with its
requirements; scripts/test_comfyui.sh sets one up): this repository linked into custom_nodes as a
clone would be, a workflow POSTed to /prompt that decodes one latent with ComfyUI's own
VAELoader + VAEDecode and with the vae.c nodes, the results compared in float32, and the
server's console checked for the engine's log lines (one line per decode or encode)."""
import contextlib
import json
import os
import pathlib
import re
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest
import torch
from safetensors.torch import save_file

from conftest import FIXTURES, fixture, rel_err
from test_comfyui import raw_latent

REPO = pathlib.Path(__file__).resolve().parents[2]
COMFYUI_PATH = os.environ.get("COMFYUI_PATH")
VAE_NAME = "wan_2.1_vae.safetensors"
STARTUP_S, RUN_S = 240, 240

# Test-only nodes, written into the server's custom_nodes: one saves a tensor with torch.save
# (SaveImage would quantise to 8 bits); loading it gives ComfyUI's Wan VAE the fixture's small
# configuration (its loader builds the released widths from any Wan2.1 checkpoint).
TEST_NODES = '''
import json, os
import torch
import folder_paths
import comfy.ldm.wan.vae as wan

_config = json.loads(os.environ["VAEC_TEST_WAN_CONFIG"])


class _FixtureWanVAE(wan.WanVAE):
    def __init__(self, **kw):
        super().__init__(**{**kw, **_config})


wan.WanVAE = _FixtureWanVAE


class VaecTestSaveTensor:
    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"name": ("STRING", {"default": "out"})},
                "optional": {"images": ("IMAGE",), "latent": ("LATENT",)}}

    RETURN_TYPES = ()
    OUTPUT_NODE = True
    FUNCTION = "save"
    CATEGORY = "_for_testing"

    def save(self, name, images=None, latent=None):
        value = images if images is not None else latent["samples"]
        path = os.path.join(folder_paths.get_output_directory(), name + ".pt")
        torch.save(value.detach().cpu().float().clone(), path)
        return {}


NODE_CLASS_MAPPINGS = {"VaecTestSaveTensor": VaecTestSaveTensor}
'''

# What the engine logs at INFO (vaec's logger): none of it may reach ComfyUI's console.
ENGINE_LINE = re.compile(r"^(plan|session|settings|runner|group|cuda[a-z ]*|decode|encode): |"
                         r"parameters in \d+ tensors|peak backend memory")
NODE_LINE = re.compile(r"^vae\.c (decode|encode): ")


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _request(url, payload=None, timeout=30):
    data = None if payload is None else json.dumps(payload).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read() or b"null")


def _console(server, start=0):
    return server["log"].read_text(errors="replace")[start:]


def _wait_until_up(proc, url, log):
    deadline = time.monotonic() + STARTUP_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"ComfyUI exited with {proc.returncode}:\n{log.read_text()[-4000:]}")
        try:
            _request(url + "/system_stats", timeout=5)
            return
        except (urllib.error.URLError, OSError):
            time.sleep(0.5)
    pytest.fail(f"ComfyUI did not answer within {STARTUP_S} s:\n{log.read_text()[-4000:]}")


def _stop(proc):
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextlib.contextmanager
def running_comfyui(base, args, env):
    """ComfyUI's main.py offline on the CPU over the base folder, with its console in
    base/console.log; yields (url, log) once it answers, and stops it on the way out."""
    port = _free_port()
    cmd = [sys.executable, os.path.join(COMFYUI_PATH, "main.py"), "--cpu", "--listen",
           "127.0.0.1", "--port", str(port), "--base-directory", str(base), *args,
           "--disable-api-nodes", "--database-url", "sqlite:///:memory:", "--disable-metadata"]
    env = dict(os.environ, PYTHONUNBUFFERED="1", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               **env)
    log = base / "console.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, cwd=COMFYUI_PATH, env=env, stdout=out,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        url = f"http://127.0.0.1:{port}"
        _wait_until_up(proc, url, log)
        yield url, log
    finally:
        _stop(proc)


@pytest.fixture(scope="module")
def io_tensors():
    from safetensors.torch import load_file
    return load_file(str(FIXTURES / "wan21_tiny.io.safetensors"))


@pytest.fixture(scope="module")
def server(tmp_path_factory, io_tensors):
    """ComfyUI's main.py on the CPU, offline (no API nodes), in a temporary
    base folder: models/vae holding the fixture weights, custom_nodes this repository (a clone's
    layout: the root __init__.py) and the test-only nodes, input a latent file."""
    if not COMFYUI_PATH:
        pytest.skip("COMFYUI_PATH is not set: point it at a ComfyUI checkout to run the server")
    cfg = fixture("wan21_tiny")
    base = tmp_path_factory.mktemp("comfyui")
    for sub in ("custom_nodes", "models/vae", "input", "output"):
        (base / sub).mkdir(parents=True)
    (base / "custom_nodes" / "vae.c").symlink_to(REPO, target_is_directory=True)
    (base / "custom_nodes" / "vaec_test_nodes.py").write_text(TEST_NODES)
    (base / "models" / "vae" / VAE_NAME).symlink_to(FIXTURES / "wan21_tiny.safetensors")
    mean = torch.tensor(cfg["latent_mean"]).view(1, -1, 1, 1, 1)
    std = torch.tensor(cfg["latent_std"]).view(1, -1, 1, 1, 1)
    latent = raw_latent(io_tensors, "dec_t3", (mean, std)).contiguous()
    # LoadLatent's format: latent_format_version_0 marks a latent stored unscaled
    save_file({"latent_tensor": latent, "latent_format_version_0": torch.tensor([])},
              str(base / "input" / "dec_t3.latent"))
    with running_comfyui(base, ["--fp32-vae"],
                         {"VAEC_TEST_WAN_CONFIG": json.dumps(cfg["config"])}) as (url, log):
        yield {"url": url, "log": log, "base": base, "latent": latent}


def _workflow():
    vaec_run = {"dtype": "auto", "max_memory": "", "tile_mode": "auto"}
    nodes = {
        "latent": ("LoadLatent", {"latent": "dec_t3.latent"}),
        "comfy_vae": ("VAELoader", {"vae_name": VAE_NAME}),
        "comfy_decode": ("VAEDecode", {"samples": ["latent", 0], "vae": ["comfy_vae", 0]}),
        "vaec_vae": ("VaecVAELoader", {"vae_name": VAE_NAME, "device": "auto", "dtype": "auto",
                                       "max_memory": "", "tile_mode": "auto"}),
        "vaec_decode": ("VaecVAEDecode", {"samples": ["latent", 0], "vae": ["vaec_vae", 0],
                                          "tile_size": 0, **vaec_run}),
        "vaec_decode_tiles": ("VaecVAEDecode", {"samples": ["latent", 0], "vae": ["vaec_vae", 0],
                                                "tile_size": 16, **vaec_run}),
        "comfy_node_vaec_vae": ("VAEDecode", {"samples": ["latent", 0], "vae": ["vaec_vae", 0]}),
        "comfy_encode": ("VAEEncode", {"pixels": ["comfy_decode", 0], "vae": ["comfy_vae", 0]}),
        "vaec_encode": ("VaecVAEEncode", {"pixels": ["comfy_decode", 0], "vae": ["vaec_vae", 0],
                                          "tile_size": 0, **vaec_run}),
    }
    for name in ("comfy_decode", "vaec_decode", "vaec_decode_tiles", "comfy_node_vaec_vae"):
        nodes["save_" + name] = ("VaecTestSaveTensor", {"name": name, "images": [name, 0]})
    for name in ("comfy_encode", "vaec_encode"):
        nodes["save_" + name] = ("VaecTestSaveTensor", {"name": name, "latent": [name, 0]})
    return {k: {"class_type": c, "inputs": i} for k, (c, i) in nodes.items()}


VAEC_RUNS = 4  # vaec_decode, vaec_decode_tiles, comfy_node_vaec_vae, vaec_encode


def _queue_and_wait(server, prompt):
    try:
        answer = _request(server["url"] + "/prompt", {"prompt": prompt, "client_id": "tests"})
    except urllib.error.HTTPError as e:
        pytest.fail(f"/prompt refused the workflow: {e.read().decode(errors='replace')}")
    prompt_id = answer["prompt_id"]
    deadline = time.monotonic() + RUN_S
    while time.monotonic() < deadline:
        history = _request(f"{server['url']}/history/{prompt_id}")
        if prompt_id in history and history[prompt_id]["status"].get("completed") is not None:
            return history[prompt_id]
        time.sleep(0.25)
    pytest.fail(f"the workflow did not finish within {RUN_S} s:\n{_console(server)[-4000:]}")


def test_pack_loads_from_a_clone(server):
    """The repository's root __init__.py registers the nodes; nothing failed to import."""
    info = _request(server["url"] + "/object_info")
    for name in ("VaecVAELoader", "VaecVAEDecode", "VaecVAEEncode", "VaecTestSaveTensor"):
        assert name in info, name
    assert info["VaecVAEDecode"]["display_name"] == "VAE Decode (vae.c)"
    assert VAE_NAME in info["VaecVAELoader"]["input"]["required"]["vae_name"][0]
    console = _console(server)
    assert "IMPORT FAILED" not in "\n".join(l for l in console.splitlines() if "vae.c" in l)
    assert not [l for l in console.splitlines() if ENGINE_LINE.search(l)], console


def test_workflow_equals_comfyui(server):
    start = len(_console(server))
    entry = _queue_and_wait(server, _workflow())
    assert entry["status"]["status_str"] == "success", json.dumps(entry["status"], indent=1)
    out = server["base"] / "output"
    load = lambda name: torch.load(out / f"{name}.pt")
    want = load("comfy_decode")
    assert want.shape == (9, 32, 48, 3) and want.dtype == torch.float32
    for name in ("vaec_decode", "vaec_decode_tiles", "comfy_node_vaec_vae"):
        got = load(name)
        assert got.shape == want.shape, name
        diff = float((got - want).abs().max())
        print(f"{name}: max abs difference from ComfyUI's VAEDecode {diff:.3g}")
        assert diff <= 1e-5, name
    assert rel_err(load("vaec_encode"), load("comfy_encode")) < 1e-4

    # The console: the node's one line per decode/encode, none of the engine's own lines.
    # (the lines are written before the prompt ends; give the pipe a moment to drain)
    time.sleep(0.5)
    lines = _console(server, start).splitlines()
    engine = [l for l in lines if ENGINE_LINE.search(l)]
    ours = [l for l in lines if "vae.c" in l]
    assert not engine, "\n".join(lines)
    assert len(ours) == VAEC_RUNS and all(NODE_LINE.match(l) for l in ours), "\n".join(lines)
