"""vaec's streams (Model.stream): latents pushed a few at a time give, concatenated, exactly what
decode of the whole gives (and frames of video for encode), with each latent's frames out in its
push; the errors raise vaec.Error."""
import json
import random

import pytest

from conftest import FIXTURES, fixture

vaec = pytest.importorskip("vaec")
torch = pytest.importorskip("torch")
safetensors_torch = pytest.importorskip("safetensors.torch")


def _streamed(model, x, encode, sizes, raw=False):
    outs = []
    with model.stream(encode=encode, raw=raw) as s:
        t = 0
        for n in sizes:
            outs.append(s.push(x[:, :, t : t + n]))
            t += n
        outs.append(s.end())
    return torch.cat(outs, dim=2), outs


def _split(T, rng):
    sizes = []
    while sum(sizes) < T:
        sizes.append(min(rng.randint(0, 4), T - sum(sizes)))
    return sizes


@pytest.fixture(scope="module")
def taehv(tmp_path_factory):
    ckpt = tmp_path_factory.mktemp("taehv") / "taehv_w21.safetensors"
    vaec.synth_checkpoint("taehv", str(ckpt), json.dumps(fixture("taehv_w21")["config"]))
    return vaec.load(str(ckpt))


@pytest.mark.parametrize("name", ["taehv_w21", "wan21_tiny"])
def test_stream_equals_whole(shared, taehv, name):
    model = taehv if name == "taehv_w21" else vaec.load(str(FIXTURES / f"{name}.safetensors"))
    io = safetensors_torch.load_file(str(FIXTURES / f"{name}.io.safetensors"))
    rng = random.Random(5)
    for case in fixture(name)["cases"]:
        if case.get("options"):
            continue  # (the preview decoders: test_stream.c)
        encode = case["op"] == "encode"
        x = io[case["input"]]
        whole = model.encode(x) if encode else model.decode(x)
        T = x.shape[2]
        for sizes in ([1] * T, _split(T, rng)):
            got, outs = _streamed(model, x, encode, sizes)
            assert torch.equal(got, whole), (case["name"], sizes)
            if not encode:  # each push of latents hands out their frames at once
                done = ready = 0
                for n, out in zip(sizes, outs):
                    done, ready = done + n, ready + out.shape[2]
                    if done:
                        shape = (1, x.shape[1], done) + tuple(x.shape[3:])
                        assert ready == model.output_shape(shape)[2], (case["name"], sizes)


def test_stream_layouts(taehv):
    torch.manual_seed(0)
    lat = torch.randn(16, 3, 2, 3)  # [C,T,h,w]: frames come back [3,n,H,W]
    whole = taehv.decode(lat)
    with taehv.stream() as s:
        parts = [s.push(lat[:, t : t + 1]) for t in range(3)] + [s.end()]
    assert all(p.dim() == 4 for p in parts) and parts[0].shape[1] == 1
    assert torch.equal(torch.cat(parts, dim=1), whole)
    half = lat.unsqueeze(0).to(torch.bfloat16)
    got, _ = _streamed(taehv, half, False, [2, 1])
    assert got.dtype == torch.bfloat16 and torch.equal(got, taehv.decode(half))
    raw, _ = _streamed(taehv, lat.unsqueeze(0), False, [1, 2], raw=True)
    assert torch.equal(raw, taehv.decode(lat.unsqueeze(0), raw=True))
    video = torch.rand(1, 3, 6, 16, 16)  # TAEHV pads 6 frames to 8 by repeating the last
    got, outs = _streamed(taehv, video, True, [3, 3])
    assert outs[-1].shape[2] == 1 and torch.equal(got, taehv.encode(video))


def test_stream_errors(taehv):
    lat = torch.randn(1, 16, 2, 2, 3)
    with taehv.stream() as s:
        s.push(lat[:, :, :1])
        with pytest.raises(vaec.Error, match="expected \\[1,16,T,2,3\\]"):
            s.push(torch.randn(1, 16, 1, 2, 4))
        with pytest.raises(vaec.Error, match="stream is open"):
            taehv.decode(lat)
        with pytest.raises(vaec.Error, match="already open"):
            taehv.stream().push(lat)
        with pytest.raises(vaec.Error, match="float32"):
            s.push(lat.to(torch.float64))
        s.push(lat[:, :, 1:])
    assert taehv.decode(lat).shape[2] == 5  # aborted on leaving the block: the session is free
    s = taehv.stream()
    with pytest.raises(vaec.Error, match="nothing was pushed"):
        s.end()
    s.push(lat)
    s.end()
    with pytest.raises(vaec.Error, match="ended"):
        s.push(lat)
    with pytest.raises(vaec.Error, match="batch 1"):
        taehv.stream().push(torch.randn(2, 16, 1, 2, 3))
