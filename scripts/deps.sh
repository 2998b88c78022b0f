#!/usr/bin/env bash
# Installs the Debian packages the build and tests need (only those missing).
set -eu
cd "$(dirname "$0")/.."
. scripts/progress.sh
pkgs="cmake gcc g++ make pkg-config python3 libopenblas-dev libcjson-dev libpng-dev zlib1g-dev
      libavformat-dev libavcodec-dev libswscale-dev libavutil-dev ffmpeg
      clang libclang-rt-14-dev libomp-14-dev"
missing=""
for p in $pkgs; do
    dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"
done
if [ -n "$missing" ]; then
    echo "deps: installing$missing"
    SUDO=""
    [ "$(id -u)" -ne 0 ] && SUDO=sudo
    (
        $SUDO apt-get update -qq
        DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $missing >/dev/null
    ) &
    wait_with_heartbeat $! "deps: still installing"
fi
# CUTLASS's headers (the nvidia-cutlass wheel) for the Hopper conv kernels, where CUDA is built:
# a visible GPU (cmake/cuda_archs.cmake) or VAE_CUDA=ON in the environment
if { [ "${VAE_CUDA:-}" = ON ] || nvidia-smi -L >/dev/null 2>&1; } &&
    { command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; }; then
    python3 -c "import importlib.util as u, sys; sys.exit(u.find_spec('cutlass_library') is None)" ||
        python3 -m pip install -q "nvidia-cutlass>=4.2"
fi
