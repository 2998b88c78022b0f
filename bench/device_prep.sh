#!/usr/bin/env bash
# On the development machine (network, no GPU): fills the ignored folders a device run carries
# (`run` with carry ["build-gpu-shared", "build-gpu-deps", ".whl"]; the device has no network and
# no ../shared): a copy of the shared fixtures and models, the Debian packages bench/gpu_check.sh
# unpacks where the device lacks their headers, and wheels (CUTLASS's headers, pytest).
# Then, on the device: bench/gpu_check.sh build-gpu-shared [options].
#   usage: bench/device_prep.sh [SHARED_DIR]   (default ../shared)
set -eu
cd "$(dirname "$0")/.."
shared=${1:-../shared}
mkdir -p build-gpu-shared build-gpu-deps .whl
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo /.whl/ >>.git/info/exclude
cp -r "$shared/fixtures" "$shared/models" build-gpu-shared/
(cd build-gpu-deps && apt-get download libcjson-dev libcjson1 libpng-dev libpng16-16 zlib1g-dev)
for f in build-gpu-deps/*%3a*; do [ -e "$f" ] && mv "$f" "${f//%3a/_}"; done # plain names
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 \
    -d .whl nvidia-cutlass pytest pluggy iniconfig
du -sh build-gpu-shared build-gpu-deps .whl
