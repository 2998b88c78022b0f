#!/usr/bin/env bash
# On a GPU machine: configure + build with the CUDA backend (sm_90 only: fast) into build-gpu,
# run the CUDA op tests (tests/test_cuda_ops.c: every op against the CPU backend) and the
# fixture tests on the GPU (fp32 and bf16), and write logs and a summary to $OUT.
#
# usage: bench/gpu_check.sh SHARED_DIR [--deps DIR] [--full] [--bench] [--compare]
#   SHARED_DIR  folder with fixtures/ and models/ (a copy of ../shared: the device machine has
#               no ../shared; copy what is needed into an ignored folder that travels, e.g.
#               build-gpu-shared/)
#   --deps DIR  folder of .deb files (libcjson, libpng, zlib dev packages) unpacked and used when
#               the machine lacks them (default: build-gpu-deps if present)
#   --full      also the *_full fixtures on the GPU (real-size synthetic models, slower)
#   --bench     also `vae bench` of a Wan2.1 480p decode (bf16)
#   --compare   also bench/compare.sh (needs diffusers on the machine, see bench/README.md)
# Run from the repository root. Logs: $OUT (default ./gpu-out): env.log, build.log,
# test_cuda_ops.log, fixtures.log, summary.txt (+ bench.log).
set -u
ROOT=$(pwd)
SHARED=${1:?usage: bench/gpu_check.sh SHARED_DIR [--deps DIR] [--full] [--bench] [--compare]}
shift
DEPS=""
[ -d build-gpu-deps ] && DEPS=$ROOT/build-gpu-deps
FULL=0 BENCH=0 COMPARE=0
while [ $# -gt 0 ]; do
    case "$1" in
    --deps) DEPS=$(cd "$2" && pwd); shift ;;
    --full) FULL=1 ;;
    --bench) BENCH=1 ;;
    --compare) COMPARE=1 ;;
    *) echo "gpu_check: unknown option $1" >&2; exit 2 ;;
    esac
    shift
done
SHARED=$(cd "$SHARED" && pwd) || exit 2
OUT=${OUT:-$ROOT/gpu-out}
mkdir -p "$OUT"
JOBS=$(nproc 2>/dev/null || echo 4)
SUMMARY=$OUT/summary.txt
: >"$SUMMARY"
say() { echo "$*" | tee -a "$SUMMARY"; }

# ---- environment ------------------------------------------------------------------------------
{
    echo "== date: $(date -u)"
    nvidia-smi 2>&1 | head -20
    echo "== nvcc: $(nvcc --version 2>&1 | tail -2 | tr '\n' ' ')"
    echo "== cmake: $(cmake --version 2>&1 | head -1)"
    echo "== cc: $(cc --version 2>&1 | head -1)"
    echo "== os: $(grep PRETTY_NAME /etc/os-release 2>/dev/null)"
} >"$OUT/env.log" 2>&1

EXTRA=()          # extra cmake arguments
LIBPATH=""        # extra LD_LIBRARY_PATH for the test programs
has_header() { echo "#include <$1>" | cc -E -x c - >/dev/null 2>&1; }

# Debian packages for what the machine lacks (headers / libraries of cJSON, libpng, zlib).
unpack_deps() {
    [ -n "$DEPS" ] || return 1
    [ -d /tmp/vae-deps ] && return 0
    mkdir -p /tmp/vae-deps
    for f in "$DEPS"/*.deb; do [ -f "$f" ] && dpkg -x "$f" /tmp/vae-deps; done
    echo "== unpacked $(ls "$DEPS"/*.deb 2>/dev/null | wc -l) packages from $DEPS" >>"$OUT/env.log"
}
DL=/tmp/vae-deps/usr/lib/x86_64-linux-gnu
if ! has_header cjson/cJSON.h; then
    unpack_deps && EXTRA+=(-DCJSON_INCLUDE=/tmp/vae-deps/usr/include -DCJSON_LIB=$DL/libcjson.so) &&
        LIBPATH=$DL
    echo "== cJSON from $DEPS" >>"$OUT/env.log"
fi
if ! has_header zlib.h; then
    unpack_deps
    zl=$(ls /usr/lib/x86_64-linux-gnu/libz.so.1 /lib/x86_64-linux-gnu/libz.so.1 2>/dev/null | head -1)
    EXTRA+=(-DZLIB_INCLUDE_DIR=/tmp/vae-deps/usr/include -DZLIB_LIBRARY=${zl:-$DL/libz.so})
    echo "== zlib headers from $DEPS, library ${zl:-$DL/libz.so}" >>"$OUT/env.log"
fi
if ! has_header png.h; then
    unpack_deps && EXTRA+=(-DPNG_PNG_INCLUDE_DIR=/tmp/vae-deps/usr/include -DPNG_LIBRARY=$DL/libpng16.so) &&
        LIBPATH=$DL
    echo "== libpng from $DEPS" >>"$OUT/env.log"
fi

# cuDNN: the toolkit's, the system's, or the pip wheel of PyTorch (nvidia-cudnn-cu13).
CUDNN_INC="" CUDNN_LIBF=""
for d in /usr/local/cuda/include /usr/include /usr/include/x86_64-linux-gnu; do
    [ -f $d/cudnn.h ] && CUDNN_INC=$d && break
done
for f in /usr/local/cuda/lib64/libcudnn.so /usr/lib/x86_64-linux-gnu/libcudnn.so \
    /usr/local/cuda/lib64/libcudnn.so.9 /usr/lib/x86_64-linux-gnu/libcudnn.so.9; do
    [ -e $f ] && CUDNN_LIBF=$f && break
done
if [ -z "$CUDNN_LIBF" ] || [ -z "$CUDNN_INC" ]; then
    P=$(python3 -c 'import nvidia.cudnn as m, os; print(list(m.__path__)[0])' 2>/dev/null)
    if [ -n "$P" ]; then
        [ -z "$CUDNN_LIBF" ] && CUDNN_LIBF=$(ls "$P"/lib/libcudnn.so* 2>/dev/null | head -1)
        [ -z "$CUDNN_INC" ] && [ -f "$P/include/cudnn.h" ] && CUDNN_INC=$P/include
    fi
fi
if [ -z "$CUDNN_INC" ] && [ -n "$DEPS" ] && [ -f "$DEPS/cudnn-include/cudnn.h" ]; then
    CUDNN_INC=$DEPS/cudnn-include
fi
echo "== cuDNN headers: ${CUDNN_INC:-none}  library: ${CUDNN_LIBF:-none}" >>"$OUT/env.log"
if [ -n "$CUDNN_LIBF" ]; then
    EXTRA+=(-DCUDNN_LIB="$CUDNN_LIBF")
    LIBPATH=$(dirname "$CUDNN_LIBF")${LIBPATH:+:$LIBPATH}
fi
CF=()
[ -n "$CUDNN_INC" ] && CF=(-DCMAKE_C_FLAGS="-isystem $CUDNN_INC")
export LD_LIBRARY_PATH=${LIBPATH}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
echo "== LD_LIBRARY_PATH=$LD_LIBRARY_PATH" >>"$OUT/env.log"
echo "== cmake extra: ${EXTRA[*]-} ${CF[*]-}" >>"$OUT/env.log"

# ---- build ------------------------------------------------------------------------------------
t0=$(date +%s)
GEN=()
command -v ninja >/dev/null && GEN=(-G Ninja)
[ -f build-gpu/CMakeCache.txt ] && GEN=()
{
    cmake -S . -B build-gpu ${GEN[@]+"${GEN[@]}"} -DCMAKE_BUILD_TYPE=Release -DVAE_CUDA=ON \
        -DCMAKE_CUDA_ARCHITECTURES=90 -DVAE_SHARED_DIR="$SHARED" \
        ${CF[@]+"${CF[@]}"} ${EXTRA[@]+"${EXTRA[@]}"} &&
        cmake --build build-gpu -j"$JOBS"
} >"$OUT/build.log" 2>&1
brc=$?
if [ ! -x build-gpu/test_cuda_ops ] && [ -f build-gpu/libvae.a ]; then
    # not registered in CMake yet: compile it and link it like test_fixtures
    inc=$(sed -n 's/^CJSON_INCLUDE:PATH=//p' build-gpu/CMakeCache.txt)
    {
        cc -std=gnu11 -O2 -Wall -Wextra -Wno-unused-parameter -Iinclude -Isrc ${inc:+-I$inc} \
            -c tests/test_cuda_ops.c -o build-gpu/test_cuda_ops.o &&
            (cd build-gpu && if [ -f CMakeFiles/test_fixtures.dir/link.txt ]; then
                sed 's#CMakeFiles/test_fixtures.dir/tests/test_fixtures.c.o#test_cuda_ops.o#; s#-o test_fixtures#-o test_cuda_ops#' \
                    CMakeFiles/test_fixtures.dir/link.txt | sh -x
            else
                cmd=$(ninja -t commands test_fixtures | tail -1)
                echo "$cmd" | sed 's#CMakeFiles/test_fixtures.dir/tests/test_fixtures.c.o#test_cuda_ops.o#; s#-o test_fixtures#-o test_cuda_ops#' | sh -x
            fi)
    } >>"$OUT/build.log" 2>&1
fi
say "build: rc $brc in $(($(date +%s) - t0)) s ($(grep -c 'warning' "$OUT/build.log") warning lines)"
grep -E "warning|error" "$OUT/build.log" | head -20 >>"$SUMMARY"
if [ ! -x build-gpu/test_cuda_ops ] || [ ! -x build-gpu/test_fixtures ]; then
    say "build failed: see build.log"
    tail -40 "$OUT/build.log"
    exit 1
fi

# ---- CUDA op tests ------------------------------------------------------------------------------
t0=$(date +%s)
VAE_TEST_DEBUG=1 timeout 240 build-gpu/test_cuda_ops >"$OUT/test_cuda_ops.log" 2>&1
rc=$?
say "test_cuda_ops: rc $rc in $(($(date +%s) - t0)) s: $(tail -1 "$OUT/test_cuda_ops.log")"
grep -E "^FAIL" "$OUT/test_cuda_ops.log" | head -40 >>"$SUMMARY"
grep -E "^(TIME|INFO)" "$OUT/test_cuda_ops.log" >>"$SUMMARY"

# ---- fixtures on the GPU ------------------------------------------------------------------------
FX="wan21_tiny wan22_tiny seedvr2_tiny taef2_real"
[ $FULL = 1 ] && FX="$FX wan21_small wan21_full wan22_full seedvr2_full"
: >"$OUT/fixtures.log"
for fx in $FX; do
    [ -f "$SHARED/fixtures/$fx.json" ] || { say "fixture $fx: not in $SHARED/fixtures"; continue; }
    for dt in fp32 bf16; do
        t0=$(date +%s)
        echo "=== $fx $dt" >>"$OUT/fixtures.log"
        (cd build-gpu && timeout 90 ./test_fixtures "$SHARED" $fx --device cuda --dtype $dt) >>"$OUT/fixtures.log" 2>&1
        rc=$?
        say "fixture $fx $dt: rc $rc in $(($(date +%s) - t0)) s: $(tail -1 "$OUT/fixtures.log")"
    done
done
grep -E "^FAIL" "$OUT/fixtures.log" | head -40 >>"$SUMMARY"
grep -E "^PASS .*rel_err" "$OUT/fixtures.log" >>"$SUMMARY"

# ---- optional benchmarks ------------------------------------------------------------------------
# bf16, with the backend's GPU-time profile per op category (VAE_CUDA_PROFILE=1, logged with -v)
if [ $BENCH = 1 ] && [ -x build-gpu/vae ]; then
    for w in "wan2.1 --op decode --frames 81 --size 480x832 --runs 2" \
        "wan2.1 --op encode --frames 81 --size 480x832 --runs 2" \
        "wan2.1 --op decode --frames 81 --size 720x1280 --runs 1" \
        "wan2.2 --op decode --frames 121 --size 704x1280 --runs 1" \
        "seedvr2 --op decode --frames 81 --size 720x1248 --runs 1"; do
        echo "=== vae bench $w" >>"$OUT/bench.log"
        VAE_CUDA_PROFILE=1 timeout 120 build-gpu/vae -v bench $w --dtype bf16 --device cuda --warmup 1 \
            >>"$OUT/bench.log" 2>&1
        say "bench $w: rc $? $(grep BENCH "$OUT/bench.log" | tail -1)"
        grep "cuda profile" "$OUT/bench.log" | tail -13 >>"$SUMMARY"
    done
fi
if [ $COMPARE = 1 ] && [ -x build-gpu/vae ]; then
    bash bench/compare.sh build-gpu/vae >>"$OUT/bench.log" 2>&1
    tail -8 "$OUT/bench.log" >>"$SUMMARY"
fi
cat "$SUMMARY"
