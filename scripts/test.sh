#!/usr/bin/env bash
# The test suite: installs what is missing, builds (release, then ASan+UBSan), runs ctest.
# GPU tests print "skipped: no GPU" where there is none.
set -eu
cd "$(dirname "$0")/.."
bash scripts/deps.sh
bash scripts/build.sh build
(cd build && ctest --output-on-failure --timeout 1500)
# Sanitizers: everything but the large-model fixtures (those run above; ASan makes them slow).
bash scripts/build.sh build-asan -DVAE_SANITIZE=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo -DVAE_CUDA=OFF
(cd build-asan && ASAN_OPTIONS=detect_leaks=1 ctest --output-on-failure --timeout 1500 \
    -E 'fixture_(wan21_full|wan22_full|seedvr2_full|wan21_small)|gpu_')
# ThreadSanitizer: one model's sessions on several threads at once (CPU backend), and the
# in-process communicator's ranks
mkdir -p build-tsan
cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DVAE_SANITIZE_THREAD=ON -DVAE_CUDA=OFF \
    -DVAE_MEDIA=OFF >build-tsan/configure.log 2>&1 || { cat build-tsan/configure.log; exit 1; }
cmake --build build-tsan --target test_threads test_comm -j"$(nproc)" >build-tsan/build.log 2>&1 ||
    { tail -40 build-tsan/build.log; exit 1; }
TSAN_OPTIONS="halt_on_error=1 exitcode=66" build-tsan/test_threads ../shared
TSAN_OPTIONS="halt_on_error=1 exitcode=66" build-tsan/test_comm
# Python: the package as the README installs it (pip install .: scikit-build-core builds
# libvae.so), torch (the PyPI wheel, used on the CPU here) and diffusers from PyPI, then pytest on
# the installed package (python/tests; the ComfyUI tests run inside ComfyUI with COMFYUI_PATH).
python3 -m pip install -q torch diffusers safetensors pytest tqdm
python3 -m pip install -q ./
python3 -m pytest -q -rs python/tests
