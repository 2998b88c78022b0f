#!/usr/bin/env bash
# The ComfyUI nodes inside a real ComfyUI: unpacks the ComfyUI snapshot of ../shared/third_party
# into build-comfyui/, makes a virtual environment there that reuses the system's torch, installs
# ComfyUI's other requirements from PyPI, then runs the ComfyUI tests (in-process and a headless
# server; test_comfyui_sampling.py: a real sampling run previewed by vae.c's TAEHV) with
# COMFYUI_PATH set. Fails if any of them is skipped.
#
# vaec: the one installed in the system Python (scripts/test.sh runs `pip install ./` first), or,
# with VAEC_LIBRARY set (a developer's build of libvae.so), the package of python/ on that library:
#   bash scripts/build.sh build-comfyui/lib -DVAE_CUDA=OFF -DVAE_TESTS=OFF
#   VAEC_LIBRARY=$PWD/build-comfyui/lib/libvae.so bash scripts/test_comfyui.sh
set -eu
cd "$(dirname "$0")/.."
root=$PWD
shared=${VAE_SHARED_DIR:-$root/../shared}
snapshot=comfyui-a125cd8
tarball=$shared/third_party/$snapshot.tar.gz
work=$root/build-comfyui
comfy=$work/$snapshot/ComfyUI
venv=$work/venv
python=${PYTHON:-python3}

mkdir -p "$work"
if [ ! -f "$comfy/main.py" ]; then
    [ -f "$tarball" ] || { echo "test_comfyui: $tarball not found (set VAE_SHARED_DIR)" >&2; exit 1; }
    mkdir -p "$work/$snapshot"
    tar -xzf "$tarball" -C "$work/$snapshot"
fi

# The venv sees the system's packages: torch is never installed again, and so the wheel that
# scripts/test.sh installed is the vaec the tests import.
torch_version=$("$python" -c "import importlib.metadata as m; print(m.version('torch'))")
stamp="$venv/.installed-$snapshot-torch-$torch_version"
if [ ! -f "$stamp" ]; then
    rm -rf "$venv"
    "$python" -m venv --system-site-packages "$venv"
    # torch stays the installed one: torchvision / torchaudio resolve against it or not at all
    echo "torch==$torch_version" >"$work/constraints.txt"
    # ComfyUI's requirements less torch (the system's), torchvision and torchaudio (below)
    grep -vE '^\s*(#|$)|^(torch|torchvision|torchaudio)\s*$' "$comfy/requirements.txt" \
        >"$work/requirements.txt"
    "$venv/bin/python" -m pip install -q --disable-pip-version-check -c "$work/constraints.txt" \
        -r "$work/requirements.txt" torchvision pytest
    # torchaudio: only ComfyUI's audio models import it (they log a warning without it)
    "$venv/bin/python" -m pip install -q --disable-pip-version-check -c "$work/constraints.txt" \
        torchaudio || echo "test_comfyui: no torchaudio for torch $torch_version: skipped (audio nodes only)"
    touch "$stamp"
fi
"$venv/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('torch') != '$torch_version')" ||
    { echo "test_comfyui: the venv's torch is not the system's $torch_version" >&2; exit 1; }

if [ -n "${VAEC_LIBRARY:-}" ]; then
    export PYTHONPATH="$root/python${PYTHONPATH:+:$PYTHONPATH}"
fi
"$venv/bin/python" -c "import vaec; print('test_comfyui: vaec', vaec.version(), 'from', vaec.__file__)" ||
    { echo "test_comfyui: vaec is not importable: pip install ./ (or set VAEC_LIBRARY)" >&2; exit 1; }

export COMFYUI_PATH="$comfy"
log="$work/pytest.log"
set +e
"$venv/bin/python" -m pytest -rs -p no:cacheprovider python/tests/test_comfyui.py \
    python/tests/test_comfyui_server.py python/tests/test_comfyui_sampling.py "$@" 2>&1 |
    tee "$log"
rc=${PIPESTATUS[0]}
set -e
[ "$rc" -eq 0 ] || exit "$rc"
# every test runs here: a skip means ComfyUI or the server was not really exercised
if tail -n 1 "$log" | grep -qE '[0-9]+ (skipped|xfailed)'; then
    echo "test_comfyui: some tests were skipped (see above): all must run here" >&2
    exit 1
fi
