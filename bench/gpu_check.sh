#!/usr/bin/env bash
# On a GPU machine: configure + build with the CUDA backend (sm_90 only: fast) into build-gpu,
# run the CUDA op tests (tests/test_cuda_ops.c: every op against the CPU backend) and the
# fixture tests on the GPU (fp32, bf16 and fp16), and write logs and a summary to $OUT.
#
# usage: bench/gpu_check.sh SHARED_DIR [--deps DIR] [--full] [--bench] [--ab] [--torch] [--compare]
#                           [--runs N] [--no-ops] [--no-fixtures] [--repeat SECONDS] [--sanitize]
#   SHARED_DIR  folder with fixtures/ and models/ (a copy of ../shared: the device machine has
#               no ../shared; copy what is needed into an ignored folder that travels, e.g.
#               build-gpu-shared/)
#   --deps DIR  folder of .deb files (libcjson, libpng, zlib dev packages) unpacked and used when
#               the machine lacks them (default: build-gpu-deps if present)
#   --full      also the *_full fixtures on the GPU (real-size synthetic models, slower)
#   --bench     also `vae bench` of the five workloads of the CUDA issue (bf16, GPU-time profile)
#   --ab        also A/B timings of the Wan2.1 480p decode with the new paths turned off one by one
#               (VAE_EXEC_CONTIG=0 / VAE_CUDA_CONV3D=0 / VAE_CUDA_FUSE=0)
#   --torch     also bench/pytorch_ref.py alone for the four Wan workloads (--runs N runs)
#   --compare   also bench/compare.sh (needs diffusers on the machine, see bench/README.md)
#   --runs N    timed runs per workload for --bench/--torch/--compare (default 2; compare: 5)
#   --tiles     also the tiny fixtures with forced exact tiles (>= 3 per axis, fp32 and bf16:
#               within 1e-5 / 2e-2 of the untiled output; also from a later cut with the store
#               pinned on the host, and in a temporary file), column strips and blended tiles
#   --strips    of those, only the column strips (poisoned memory, checked outputs)
#   --budget    also the memory-budget workloads of the planner issue (vae bench --max-memory,
#               each beside its untiled run; BUDGET_LIST overrides: 'WORKLOAD|FLAGS;...';
#               UNTILED=skip leaves the untiled runs out)
#   --group     also the fixtures on a device group of every GPU there is (one GPU: two lanes
#               on it; --tiles 3 --devices N), and with --budget, scaling: set BUDGET_LIST to workloads with
#               '--devices 0,1,..' as their flags (each beside its one-GPU run)
#   --scaling   also device-group scaling: each workload of SCALING_LIST ('WORKLOAD;...'; default:
#               Wan2.1 720p decode and encode, SeedVR2 1080p, Wan2.2 704p) on 1 GPU, then on
#               groups of 2, 4, 8 (as many as there are), with the speedup and each device's peak
#   --ranks     also groups of processes (issue 13; 2+ GPUs): the fixtures as ranks of a group
#               of every GPU (threads standing in for the processes, NCCL between their GPUs:
#               test_fixtures --ranks N), and with --scaling, each workload also as n processes
#               of `vae bench --dist` (one GPU each, the torchrun environment) beside the group
#   --python    also the Python package: pytest python/tests with build-gpu/libvae.so (CUDA
#               tensors in place; diffusers from the carried .whl folder) and bench/vaec_bench.py
#               beside `vae bench` of the same workload (Wan2.1 decode 81x480x832, bf16)
#   --perf      also bench/perf_ops (every conv shape of the three decoders and Wan2.1's encoder on
#               every conv path, with TFLOP/s and GB/s) at the bench sizes: perf.log, the totals in
#               the summary
#   --cold      also the cold start with the conv path cache (--tune-cache): Wan2.1 decode 480p in
#               a fresh process without a cache, then again with the cache it wrote, then with
#               that cache damaged, then two processes at once on a new cache file
#   --wheel W   also a release wheel of scripts/wheel.sh: pip-installed (--no-index) into a fresh
#               venv that sees the machine's torch, vaec.info(), bench/vaec_bench.py on it beside
#               `vae bench` of build-gpu (Wan2.1 decode 81x480x832 bf16), and a CPU decode
#   --no-ops / --no-fixtures  skip the op tests / the fixture tests
#   --record FILE  also append the run's measurements to FILE as run records (JSON Lines, made by
#               bench/record.py from the logs, which then start empty; bench/runs/README.md),
#               e.g. $OUT/run.jsonl, which comes back with the logs
#   --repeat S  also, for S seconds, the fixture REPEAT_FIXTURE (default wan21_tiny) in
#               REPEAT_DTYPE (default fp32) over and over, REPEAT_PAR (default 4) processes at
#               once (the GPU shared: timing-dependent tuning varies), cycling through the
#               environments of REPEAT_ENVS (';'-separated; default: as is, graphs off, tuning
#               off, contiguous windows off; %k in an entry is the run's number, e.g.
#               VAE_CUDA_TUNE=seed:%k); failures and their logs go to repeat.log
#   --sanitize  also compute-sanitizer (initcheck, memcheck, racecheck) on that fixture, in the
#               background of --repeat: sanitize.log
# Run from the repository root. Logs: $OUT (default ./gpu-out): env.log, build.log,
# test_cuda_ops.log, fixtures.log, summary.txt (+ bench.log).
set -u
ROOT=$(pwd)
CALL="bench/gpu_check.sh $*"
SHARED=${1:?usage: bench/gpu_check.sh SHARED_DIR [--deps DIR] [--full] [--bench] [--compare]}
shift
DEPS=""
[ -d build-gpu-deps ] && DEPS=$ROOT/build-gpu-deps
FULL=0 BENCH=0 COMPARE=0 AB=0 TORCH=0 RUNS="" OPS=1 FIXTURES=1 REPEAT=0 SANITIZE=0 TILES=0 STRIPS=0 BUDGET=0
GROUP=0 SCALING=0 RANKS=0
PYTHON=0 COLD=0 PERF=0 WHEEL="" RECORD_FILE=""
while [ $# -gt 0 ]; do
    case "$1" in
    --deps) DEPS=$(cd "$2" && pwd); shift ;;
    --full) FULL=1 ;;
    --bench) BENCH=1 ;;
    --ab) AB=1 ;;
    --torch) TORCH=1 ;;
    --runs) RUNS=$2; shift ;;
    --no-ops) OPS=0 ;;
    --no-fixtures) FIXTURES=0 ;;
    --repeat) REPEAT=$2; shift ;;
    --sanitize) SANITIZE=1 ;;
    --compare) COMPARE=1 ;;
    --tiles) TILES=1 STRIPS=1 ;;
    --strips) STRIPS=1 ;;
    --budget) BUDGET=1 ;;
    --group) GROUP=1 ;;
    --scaling) SCALING=1 ;;
    --ranks) RANKS=1 ;;
    --python) PYTHON=1 ;;
    --wheel) WHEEL=$(cd "$(dirname "$2")" && pwd)/$(basename "$2"); shift ;;
    --cold) COLD=1 ;;
    --perf) PERF=1 ;;
    --record) RECORD_FILE=$2; shift ;;
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
# with --record the logs it reads start empty, so that the records are this run's alone
[ -n "$RECORD_FILE" ] && : >"$OUT/bench.log" && : >"$OUT/wheel.log"
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
# CUTLASS's headers (the implicit-GEMM conv kernels): the machine's Python, else the nvidia-cutlass
# wheel carried in .whl (unpacked; nothing is installed)
if ! python3 -c "import importlib.util as u, sys; sys.exit(u.find_spec('cutlass_library') is None)" \
    2>/dev/null; then
    w=$(ls "$ROOT"/.whl/nvidia_cutlass-*.whl 2>/dev/null | head -1)
    if [ -n "$w" ]; then
        [ -d /tmp/vae-cutlass ] || python3 -m zipfile -e "$w" /tmp/vae-cutlass
        EXTRA+=(-DCUTLASS_DIR=/tmp/vae-cutlass/cutlass_library/source)
    fi
    echo "== CUTLASS: ${w:-none (no implicit-GEMM kernels)}" >>"$OUT/env.log"
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
if [ $OPS = 1 ]; then
    t0=$(date +%s)
    VAE_TEST_DEBUG=1 timeout 240 build-gpu/test_cuda_ops >"$OUT/test_cuda_ops.log" 2>&1
    rc=$?
    say "test_cuda_ops: rc $rc in $(($(date +%s) - t0)) s: $(tail -1 "$OUT/test_cuda_ops.log")"
    grep -E "^FAIL" "$OUT/test_cuda_ops.log" | head -40 >>"$SUMMARY"
    grep -E "^(TIME|INFO)" "$OUT/test_cuda_ops.log" >>"$SUMMARY"
    # a failing phase-conv check (nearest x2 + 3x3 as 2x2 phase convs): the rest runs without it
    if grep -q -E "^FAIL \[(bf16|fp32|fp16[^]]*)\] conv up2" "$OUT/test_cuda_ops.log"; then
        export VAE_CUDA_PHASE=0
        say "phase path failed its op test: fixtures and benchmarks run with VAE_CUDA_PHASE=0"
    fi
fi

# ---- fixtures on the GPU ------------------------------------------------------------------------
# one fixture on the GPU: fixture_run LABEL FIXTURE DTYPE [VAR=value ...] (logged, summarised)
fixture_run() {
    local label=$1 fx=$2 dt=$3 t0 args=()
    shift 3
    while [ $# -gt 0 ] && [ "${1#--}" != "$1" ]; do args+=("$1" "$2"); shift 2; done
    t0=$(date +%s)
    echo "=== $label" >>"$OUT/fixtures.log"
    (cd build-gpu && env "$@" timeout 90 ./test_fixtures "$SHARED" $fx --device cuda --dtype $dt \
        ${args[@]+"${args[@]}"}) >>"$OUT/fixtures.log" 2>&1
    say "$label: rc $? in $(($(date +%s) - t0)) s: $(tail -1 "$OUT/fixtures.log")"
}
FX="wan21_tiny wan22_tiny seedvr2_tiny taef2_real taehv_w21 taehv_w22 taehv_w22_super"
[ $FULL = 1 ] && FX="$FX wan21_small wan21_full wan22_full seedvr2_full"
[ $FIXTURES = 1 ] || FX=""
: >"$OUT/fixtures.log"
for fx in $FX; do
    [ -f "$SHARED/fixtures/$fx.json" ] || { say "fixture $fx: not in $SHARED/fixtures"; continue; }
    for dt in fp32 bf16 fp16; do
        fixture_run "fixture $fx $dt" $fx $dt
    done
done
# bf16 with the implicit-GEMM kernels wherever they apply, and fp8 (sm_90 builds with CUTLASS;
# fp8: the CPU emulation's tolerances, tests/tests.cmake; the small models have no conv of the
# E4M3 kernels' shapes, so the full-size ones run in fp8 even without --full)
for fx in $FX; do
    fixture_run "igemm always $fx bf16" $fx bf16 VAE_CUDA_IGEMM=always
    # the halo-tile kernel wherever it applies (96-filter 3x3 convs: Wan2.1's real config only)
    [ $fx = wan21_full ] && fixture_run "halo always $fx bf16" $fx bf16 VAE_CUDA_HALO=always
    if [ $fx = taef2_real ]; then fixture_run "fp8 $fx" $fx fp8 --tol 0.05 --min-psnr 45
    else fixture_run "fp8 $fx" $fx fp8 --tol 0.05; fi
    # the mma.sync kernels (Ampere / Ada / Blackwell's) in place of the sm_90a ones: 16-bit
    # wherever they apply, and E4M3
    case $fx in *_full)
        fixture_run "mma.sync always $fx bf16" $fx bf16 VAE_CUDA_MMA=1 VAE_CUDA_IGEMM=always
        fixture_run "fp8 mma.sync $fx" $fx fp8 --tol 0.05 VAE_CUDA_MMA=1 ;;
    esac
done
if [ $FIXTURES = 1 ] && [ $FULL = 0 ]; then
    for fx in wan21_full wan22_full seedvr2_full; do
        fixture_run "fp8 $fx" $fx fp8 --tol 0.05
        fixture_run "fp8 mma.sync $fx" $fx fp8 --tol 0.05 VAE_CUDA_MMA=1
    done
fi
# the tiny ones again with poisoned memory and per-op checks, and with seeded conv path choices
# (the gpu_poisoned_* / gpu_tune_seed* ctests)
if [ $FIXTURES = 1 ]; then
    for fx in wan21_tiny wan22_tiny seedvr2_tiny taef2_real; do
        for dt in fp32 bf16; do
            fixture_run "poisoned $fx $dt" $fx $dt VAE_CUDA_POISON=1 VAE_EXEC_CHECK=1
        done
    done
    for seed in 1 2 3 4 5 6; do
        fixture_run "tune seed $seed wan21_tiny fp32" wan21_tiny fp32 VAE_CUDA_TUNE=seed:$seed
    done
    # every causal cache in host memory, through the bus with one stream and with the prefetches
    # on their own (the gpu_offload_* ctests), on poisoned memory
    for fx in wan22_tiny seedvr2_tiny taehv_w21; do
        for bus in 1 2; do
            fixture_run "offload bus $bus $fx bf16" $fx bf16 --offload 1048576 VAE_CUDA_BUS=$bus \
                VAE_CUDA_POISON=1
        done
    done
    fixture_run "offload frames bus 2 seedvr2_tiny fp32" seedvr2_tiny fp32 --offload 1048576 \
        VAE_CUDA_BUS=2 VAE_EXEC_FRAMES=2
    fixture_run "offload 2 frames at a time bus 2 seedvr2_tiny fp32" seedvr2_tiny fp32 \
        --offload 1048576 VAE_CUDA_BUS=2 VAE_EXEC_FRAMES=2 VAE_EXEC_LOOP_FRAMES=2 VAE_CUDA_POISON=1
fi
if [ $TILES = 1 ]; then
    for fx in wan21_tiny wan22_tiny seedvr2_tiny taef2_real wan21_small; do
        for dt in fp32 bf16; do
            fixture_run "tiles $fx $dt" $fx $dt --tiles 3
        done
    done
    # B from a later cut of the planner, its store pinned on the host
    for fx in wan21_small wan22_tiny taef2_real; do
        for dt in fp32 bf16; do
            fixture_run "tiles cut1 host $fx $dt" $fx $dt --tiles 3 VAE_PLAN_CUT=1 VAE_EXEC_STORE_HOST=1
        done
    done
    # stores in a temporary file through the run's ring of pinned slots, crops inside the frame
    # (tests.cmake's store_file_*): A's store read by decode tiles, B's written by encode tiles
    for op in "decode --tile 16x16" "encode --tile 32x128"; do
        for dt in fp32 bf16; do
            log=$(VAE_PLAN_CUT=2 VAE_EXEC_STORE_HOST=1 VAE_EXEC_HOST_MB=0 timeout 120 build-gpu/vae -v \
                bench wan2.1 --config '{"dim": 8, "dec_dim": 8}' --op $op --frames 41 --size 64x256 \
                --device cuda --dtype $dt --runs 1 --warmup 0 --psnr 2>&1)
            say "file store wan2.1 ${op%% *} $dt: rc $? $(echo "$log" | grep -c 'in a temporary file') plan lines with a file store; $(echo "$log" | grep 'against the untiled')"
        done
    done
    # plans with every op's least scratch (3-D convs where gathers would not fit), and with the
    # paths of choice (the fixtures' default budget takes the least scratch where it saves memory)
    for fx in wan21_small wan22_tiny seedvr2_tiny; do
        for dt in fp32 bf16; do
            fixture_run "scratch min $fx $dt" $fx $dt VAE_PLAN_SCRATCH_MIN=1
            fixture_run "paths of choice $fx $dt" $fx $dt VAE_PLAN_SCRATCH_MIN=-1
        done
    done
    fixture_run "blend taef2_real fp32" taef2_real fp32 --blend 128
fi
if [ $STRIPS = 1 ]; then
    # column strips that hand their edge columns on (no halos), poisoned memory, checked outputs
    for fx in wan21_tiny:2 wan22_tiny:3 taef2_real:3; do
        for dt in fp32 bf16; do
            fixture_run "strips ${fx%%:*} $dt" ${fx%%:*} $dt --strips ${fx##*:} \
                VAE_CUDA_POISON=1 VAE_EXEC_CHECK=1
        done
    done
    # slots in pinned host memory, staged through the device (taef2_real: the fixture whose
    # strips have carries from every cut)
    fixture_run "strips host slots taef2_real bf16" taef2_real bf16 --strips 3 \
        VAE_CUDA_POISON=1 VAE_EXEC_CHECK=1 VAE_EXEC_STORE_HOST=1
    # the whole Wan2.2 decoder after its middle block in 3 strips (synthetic weights of the tiny
    # fixture's configuration), slots on the device and on the host: against the untiled output
    W22_TINY='{"dim": 8, "dec_dim": 16, "z_dim": 48, "dim_mult": [1, 2, 4, 4], "num_res_blocks": 2, "attn_scales": [], "temperal_downsample": [false, true, true]}'
    for host in 0 1; do
        for dt in fp32 bf16; do
            VAE_PLAN_STRIPS=3 VAE_PLAN_CUT=0 VAE_EXEC_STORE_HOST=$host VAE_CUDA_POISON=1 \
                VAE_EXEC_CHECK=1 timeout 120 build-gpu/vae -v bench wan2.2 --config "$W22_TINY" \
                --op decode --frames 9 --size 32x768 --dtype $dt --device cuda --runs 1 \
                --warmup 0 --psnr >>"$OUT/fixtures.log" 2>&1
            say "strips wan2.2 synthetic $dt host slots $host: rc $? $(grep -o 'relative error.*' "$OUT/fixtures.log" | tail -1)"
        done
    done
fi
# device groups of every GPU there is (one GPU: two lanes on it): each fixture case on the
# group's own plan and with exact tiles shared out, within 1e-5 (fp32) / 2e-2 (bf16) of one GPU's
# output, and a blend
NGPU=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
GN=$([ "$NGPU" -lt 2 ] && echo 2 || echo "$NGPU")
if [ $GROUP = 1 ]; then
    for fx in wan21_tiny wan22_tiny seedvr2_tiny taef2_real wan21_small; do
        for dt in fp32 bf16; do
            fixture_run "group of $GN $fx $dt" $fx $dt --tiles 3 --devices $GN
        done
    done
    fixture_run "group of $GN blend taef2_real fp32" taef2_real fp32 --blend 128 --devices $GN
fi
# groups of processes: ranks as threads of test_fixtures, one GPU each, NCCL between them
if [ $RANKS = 1 ] && [ "$NGPU" -ge 2 ]; then
    for fx in wan21_tiny wan22_tiny taef2_real wan21_small; do
        for dt in fp32 bf16; do
            fixture_run "ranks $NGPU $fx $dt" $fx $dt --tiles 3 --ranks $NGPU
        done
    done
    for dt in fp32 bf16; do
        fixture_run "ranks $NGPU bands seedvr2_tiny $dt" seedvr2_tiny $dt --ranks $NGPU VAE_PLAN_BANDS=1
    done
    fixture_run "ranks $NGPU blend taef2_real fp32" taef2_real fp32 --blend 128 --ranks $NGPU
    # real processes: the CLI under torchrun's environment (the output against one GPU's), and
    # vaec with a torch.distributed group when torch is there
    port=$((31000 + RANDOM % 2000))
    for r in $(seq 0 $((NGPU - 1))); do
        RANK=$r LOCAL_RANK=$r WORLD_SIZE=$NGPU LOCAL_WORLD_SIZE=$NGPU MASTER_ADDR=127.0.0.1 \
            MASTER_PORT=$port timeout 120 build-gpu/vae decode --dist --device cuda --dtype fp32 \
            --tile 16x16 -m "$SHARED/fixtures/wan21_tiny.safetensors" \
            -i "$SHARED/fixtures/wan21_tiny.io.safetensors:dec_t6_odd.latent" -o "$OUT/dist_$r.npy" \
            >>"$OUT/fixtures.log" 2>&1 &
    done
    wait
    timeout 120 build-gpu/vae decode --device cuda --dtype fp32 --tile 16x16 \
        -m "$SHARED/fixtures/wan21_tiny.safetensors" \
        -i "$SHARED/fixtures/wan21_tiny.io.safetensors:dec_t6_odd.latent" -o "$OUT/one.npy" \
        >>"$OUT/fixtures.log" 2>&1
    timeout 60 build-gpu/vae compare "$OUT/dist_0.npy" "$OUT/one.npy" --tol 1e-5 >>"$OUT/fixtures.log" 2>&1
    say "ranks: vae decode --dist as $NGPU processes, rank 0's file against one GPU's: rc $? ($(ls "$OUT"/dist_*.npy 2>/dev/null | wc -l) files: rank 0 writes)"
    rm -f "$OUT"/dist_*.npy "$OUT/one.npy"
    if python3 -c "import torch.distributed" 2>/dev/null; then
        PYTHONPATH=python VAEC_LIBRARY=build-gpu/libvae.so timeout 180 python3 -m torch.distributed.run \
            --nproc-per-node "$NGPU" bench/vaec_dist_check.py "$SHARED/fixtures/wan21_tiny.safetensors" \
            >>"$OUT/fixtures.log" 2>&1
        say "ranks: vaec under torchrun: rc $? $(grep -c '^PASS vaec rank' "$OUT/fixtures.log") ranks passed"
    else
        say "ranks: vaec under torchrun: skipped (no torch)"
    fi
elif [ $RANKS = 1 ]; then
    say "ranks: skipped (one GPU: NCCL takes each GPU once)"
fi
grep -E "^FAIL" "$OUT/fixtures.log" | head -40 >>"$SUMMARY"
grep -E "^PASS .*rel_err|^INFO .*predicted" "$OUT/fixtures.log" >>"$SUMMARY"

# ---- optional benchmarks ------------------------------------------------------------------------
# bf16, with the backend's GPU-time profile per op category (VAE_CUDA_PROFILE=1, logged with -v)
WORKLOADS=("wan2.1 --op decode --frames 81 --size 480x832"
    "wan2.1 --op encode --frames 81 --size 480x832"
    "wan2.1 --op decode --frames 81 --size 720x1280"
    "wan2.2 --op decode --frames 121 --size 704x1280"
    "seedvr2 --op decode --frames 81 --size 720x1248")
if [ $BENCH = 1 ] && [ -x build-gpu/vae ]; then
    for w in "${WORKLOADS[@]}"; do
        echo "=== vae bench $w" >>"$OUT/bench.log"
        VAE_CUDA_PROFILE=${PROFILE:-2} timeout 150 build-gpu/vae -v bench $w --dtype bf16 --device cuda \
            --warmup 1 --runs "${RUNS:-2}" >>"$OUT/bench.log" 2>&1
        say "bench $w: rc $? $(grep BENCH "$OUT/bench.log" | tail -1)"
        grep "cuda profile" "$OUT/bench.log" | tail -13 >>"$SUMMARY"
        grep "cuda op profile" "$OUT/bench.log" | tail -30 | cut -c1-140 >>"$SUMMARY"
        grep "conv blocks" "$OUT/bench.log" | tail -1 >>"$SUMMARY"
    done
fi
# the planner issue's budget table: each workload untiled (the time to compare with) and with
# its flags (budget, tile mode); vae prints the plan (-v) and the BENCH line has the measured and
# predicted peaks and the host's max RSS. BUDGET_LIST overrides: 'WORKLOAD|FLAGS;...' (FLAGS
# may hold VAE_*=VALUE settings, e.g. VAE_PLAN_STRIPS=4; UNTILED=skip leaves the untiled runs out)
BUDGET_DEFAULT="wan2.1 --op decode --frames 81 --size 720x1280|--max-memory 3G;\
wan2.2 --op decode --frames 121 --size 704x1280|--max-memory 4G;\
seedvr2 --op decode --frames 81 --size 720x1248|--max-memory 8G"
if [ $BUDGET = 1 ] && [ -x build-gpu/vae ]; then
    IFS=';' read -r -a BL <<<"${BUDGET_LIST:-$BUDGET_DEFAULT}"
    for entry in "${BL[@]}"; do
        w=${entry%%|*} flags=${entry#*|}
        for f in "${UNTILED:-}" "$flags"; do
            [ "$f" = "skip" ] && continue
            echo "=== budget [${f:-untiled}] $w" >>"$OUT/bench.log"
            # words of the form NAME=VALUE among the flags are settings for the environment
            envs=() args=()
            for word in $f; do
                if [[ $word =~ ^VAE_[A-Z0-9_]+= ]]; then envs+=("$word"); else args+=("$word"); fi
            done
            timeout 400 env "${envs[@]}" build-gpu/vae -v bench $w --dtype bf16 --device cuda \
                --warmup 1 --runs "${RUNS:-2}" "${args[@]}" >>"$OUT/bench.log" 2>&1
            say "budget [${f:-untiled}] $w: rc $? $(grep BENCH "$OUT/bench.log" | tail -1 | sed 's/.*median_s/median_s/')"
            grep "plan:" "$OUT/bench.log" | tail -1 | cut -c1-500 >>"$SUMMARY"
        done
    done
fi
# device groups (issue 13): each workload on one GPU, then on groups of 2, 4, 8 GPUs (as many as
# the machine has), speedup against the one-GPU run of this job and each device's peak
SCALING_DEFAULT="wan2.1 --op decode --frames 81 --size 720x1280;\
seedvr2 --op decode --frames 81 --size 1080x1920;\
wan2.2 --op decode --frames 121 --size 704x1280;\
wan2.1 --op encode --frames 81 --size 720x1280"
# `vae bench --dist` as n processes, one GPU each, in the environment torchrun gives them; rank 0
# prints (its BENCH line goes to bench.log), the others' errors go there too
dist_bench() {
    local n=$1 port=$((29500 + RANDOM % 2000)) r rc
    shift
    for r in $(seq 1 $((n - 1))); do
        RANK=$r WORLD_SIZE=$n LOCAL_RANK=$r LOCAL_WORLD_SIZE=$n MASTER_ADDR=127.0.0.1 \
            MASTER_PORT=$port timeout 300 build-gpu/vae bench "$@" --dist 2>>"$OUT/bench.log" &
    done
    RANK=0 WORLD_SIZE=$n LOCAL_RANK=0 LOCAL_WORLD_SIZE=$n MASTER_ADDR=127.0.0.1 \
        MASTER_PORT=$port timeout 300 build-gpu/vae -v bench "$@" --dist >>"$OUT/bench.log" 2>&1
    rc=$?
    wait
    return $rc
}
if [ $SCALING = 1 ] && [ -x build-gpu/vae ]; then
    IFS=';' read -r -a SL <<<"${SCALING_LIST:-$SCALING_DEFAULT}"
    for w in "${SL[@]}"; do
        one=""
        for n in 1 2 4 8; do
            [ "$n" -gt "$NGPU" ] && break
            devs=$(seq -s, 0 $((n - 1)))
            echo "=== scaling [$n GPUs] $w" >>"$OUT/bench.log"
            timeout 300 build-gpu/vae -v bench $w --dtype bf16 --device cuda --warmup 1 \
                --runs "${RUNS:-3}" $([ "$n" -gt 1 ] && echo --devices "$devs") >>"$OUT/bench.log" 2>&1
            rc=$?
            line=$(grep BENCH "$OUT/bench.log" | tail -1)
            med=$(echo "$line" | grep -oE '"median_s":[0-9.]+' | cut -d: -f2)
            [ "$n" = 1 ] && one=$med
            say "scaling [$n GPUs] $w: rc $rc median ${med:-?} s, speedup $(awk -v a="$one" -v b="$med" 'BEGIN { if (b > 0) printf "%.2fx", a / b; else print "?" }'), peaks $(echo "$line" | grep -oE '"device_peak_bytes":\[[0-9,]*\]' | cut -d: -f2)"
            grep "plan:" "$OUT/bench.log" | tail -1 | cut -c1-400 >>"$SUMMARY"
            [ $RANKS = 1 ] && [ "$n" -gt 1 ] || continue
            echo "=== scaling [$n processes] $w" >>"$OUT/bench.log"
            dist_bench $n $w --dtype bf16 --device cuda --warmup 1 --runs "${RUNS:-3}"
            rc=$?
            line=$(grep BENCH "$OUT/bench.log" | tail -1)
            med=$(echo "$line" | grep -oE '"median_s":[0-9.]+' | cut -d: -f2)
            say "scaling [$n processes] $w: rc $rc median ${med:-?} s, speedup $(awk -v a="$one" -v b="$med" 'BEGIN { if (b > 0) printf "%.2fx", a / b; else print "?" }'), rank 0's peak $(echo "$line" | grep -oE '"peak_bytes":[0-9]+' | cut -d: -f2)"
            grep "plan:" "$OUT/bench.log" | tail -1 | cut -c1-400 >>"$SUMMARY"
        done
    done
fi
if [ $PERF = 1 ] && [ -x build-gpu/perf_ops ]; then
    for w in "wan2.1 --frames 81 --size 480x832" "wan2.2 --frames 121 --size 704x1280" \
        "seedvr2 --frames 81 --size 720x1248" "wan2.1 --op encode --frames 81 --size 480x832"; do
        timeout 300 build-gpu/perf_ops --arch $w --dtype bf16 --device cuda >>"$OUT/perf.log" 2>&1
        say "perf_ops $w: rc $?"
        grep "^TOTAL" "$OUT/perf.log" | tail -6 >>"$SUMMARY"
    done
fi
# the carried wheels (diffusers for the PyTorch reference and the Python tests) in a site folder
SITE=/tmp/vaec-site
site_install() {
    if [ -d .whl ] && [ ! -d $SITE ]; then
        python3 -m pip install -q --no-index --no-deps --target $SITE .whl/*.whl >>"$OUT/env.log" 2>&1
    fi
    case ":${PYTHONPATH:-}:" in *":$SITE:"*) ;; *) export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$SITE ;; esac
}
if [ $PYTHON = 1 ] && [ -f build-gpu/libvae.so ]; then
    site_install
    export VAEC_LIBRARY=$ROOT/build-gpu/libvae.so VAE_SHARED_DIR=$SHARED
    export PYTHONPATH=$ROOT/python:$ROOT/python/tests${PYTHONPATH:+:$PYTHONPATH}
    t0=$(date +%s)
    timeout 500 python3 -m pytest -q -rs python/tests >"$OUT/pytest.log" 2>&1
    say "pytest python/tests: rc $? in $(($(date +%s) - t0)) s: $(tail -1 "$OUT/pytest.log")"
    grep -E "^(FAILED|ERROR|SKIPPED)" "$OUT/pytest.log" | head -20 >>"$SUMMARY"
    echo "=== vae bench wan2.1 decode 81x480x832 (beside vaec)" >>"$OUT/bench.log"
    timeout 150 build-gpu/vae bench wan2.1 --op decode --frames 81 --size 480x832 --dtype bf16 \
        --device cuda --warmup 1 --runs "${RUNS:-5}" >>"$OUT/bench.log" 2>&1
    say "vae bench 480p: rc $? $(grep BENCH "$OUT/bench.log" | tail -1 | sed 's/.*median_s/median_s/' | cut -c1-160)"
    timeout 300 python3 bench/vaec_bench.py --runs "${RUNS:-5}" >>"$OUT/bench.log" 2>&1
    say "vaec_bench: rc $?"
    grep "^VAEC" "$OUT/bench.log" | cut -c1-400 >>"$SUMMARY"
fi
if [ -n "$WHEEL" ]; then
    # a fresh venv whose only view of the machine is its torch (a .pth naming the interpreter's
    # site-packages): what a user with torch installed gets from `pip install vaec-*.whl`
    V=/tmp/vaec-wheel-venv
    rm -rf $V && python3 -m venv --without-pip $V
    python3 -c "import site; print('\n'.join(site.getsitepackages()))" \
        >"$($V/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/machine.pth"
    $V/bin/python -m pip install -q --no-index --no-deps "$WHEEL" >>"$OUT/wheel.log" 2>&1
    say "wheel install: rc $? ($(basename "$WHEEL"))"
    (cd /tmp && $V/bin/python -c "import vaec, json; print(json.dumps(vaec.info()))") >>"$OUT/wheel.log" 2>&1
    say "wheel vaec.info(): $(tail -1 "$OUT/wheel.log" | cut -c1-400)"
    echo "=== vae bench wan2.1 decode 81x480x832 (beside the wheel)" >>"$OUT/bench.log"
    timeout 150 build-gpu/vae bench wan2.1 --op decode --frames 81 --size 480x832 --dtype bf16 \
        --device cuda --warmup 1 --runs "${RUNS:-5}" >>"$OUT/bench.log" 2>&1
    say "vae bench 480p: rc $? $(grep BENCH "$OUT/bench.log" | tail -1 | grep -oE '"median_s":[0-9.]+')"
    (cd /tmp && timeout 300 $V/bin/python "$ROOT/bench/vaec_bench.py" --runs "${RUNS:-5}") \
        >>"$OUT/wheel.log" 2>&1
    say "wheel vaec_bench: rc $? $(grep '^VAEC decode' "$OUT/wheel.log" | tail -1 | cut -c1-200)"
    (cd /tmp && timeout 300 $V/bin/python - >>"$OUT/wheel.log" 2>&1 <<'PY'
import os, tempfile, time, torch, vaec
p = os.path.join(tempfile.mkdtemp(), "w.safetensors")
vaec.synth_checkpoint("wan2.1", p)
m = vaec.load(p, device="cpu", dtype="fp32")
z = torch.randn(1, 16, 3, 24, 32)
t = time.perf_counter(); v = m.decode(z); t = time.perf_counter() - t
print(f"WHEEL cpu decode {tuple(z.shape)} -> {tuple(v.shape)} in {t:.2f} s, finite {bool(v.isfinite().all())}")
PY
    )
    say "wheel cpu: rc $? $(grep '^WHEEL cpu' "$OUT/wheel.log" | tail -1)"
fi
if [ $COLD = 1 ] && [ -x build-gpu/vae ]; then
    TC=/tmp/vae-tune-check.txt
    cold_run() { # label: one fresh process, its first (cold) run beside the warm median
        echo "=== cold: $1" >>"$OUT/bench.log"
        timeout 150 build-gpu/vae bench wan2.1 --op decode --frames 81 --size 480x832 --dtype bf16 \
            --device cuda --warmup 1 --runs 3 --tune-cache "$TC" >>"$OUT/bench.log" 2>&1
        say "cold [$1]: rc $? $(grep BENCH "$OUT/bench.log" | tail -1 | grep -oE '"(median_s|cold_s)":[0-9.]+' | tr '\n' ' ')"
    }
    rm -f $TC
    cold_run "no cache yet"
    say "tune cache: $(wc -l <$TC) lines"
    cold_run "cache from the run before"
    printf 'garbage \x01\x02\nvae-tune-1 x y 99\n%0600d\nvae-tune-1 cut' 0 >>$TC
    cold_run "cache with damaged lines appended"
    rm -f $TC
    for k in 1 2; do
        timeout 150 build-gpu/vae bench wan2.1 --op decode --frames 81 --size 480x832 --dtype bf16 \
            --device cuda --warmup 0 --runs 1 --tune-cache "$TC" >"$OUT/cold_par$k.log" 2>&1 &
    done
    wait
    say "two processes at once: $(grep -c BENCH "$OUT"/cold_par*.log | tr '\n' ' '); cache $(wc -l <$TC) lines, $(grep -vc '^vae-tune-1 [^ ]* [^ ]* [0-9]$' $TC) not parsing"
    rm -f "$OUT"/cold_par*.log
fi
if [ $TORCH = 1 ]; then
    site_install
    for w in wan2.1:decode:81:480x832 wan2.1:decode:81:720x1280 wan2.1:encode:81:480x832 \
        wan2.2:decode:121:704x1280; do
        IFS=: read -r arch op frames size <<<"$w"
        echo "=== pytorch_ref $w" >>"$OUT/bench.log"
        timeout 150 python3 bench/pytorch_ref.py "$arch" --op "$op" --frames "$frames" \
            --size "$size" --runs "${RUNS:-2}" >>"$OUT/bench.log" 2>&1
        say "torch $w: rc $? $(grep '^REF' "$OUT/bench.log" | tail -1 | cut -c1-260)"
    done
fi
if [ $COMPARE = 1 ] && [ -x build-gpu/vae ]; then
    site_install
    RUNS=${RUNS:-5} COMPARE_LOG=$OUT/compare_vae.log RECORD= bash bench/compare.sh build-gpu/vae \
        >>"$OUT/bench.log" 2>&1
    grep -v -E "^(REF|BENCH)" "$OUT/bench.log" | tail -6 >>"$SUMMARY"
fi
if [ $AB = 1 ] && [ -x build-gpu/vae ]; then
    # workload | environment (AB_LIST overrides: entries separated by ';')
    AB_DEFAULT="wan2.1 --op decode --frames 81 --size 480x832|VAE_EXEC_CONTIG=0 VAE_CUDA_CONV3D=0 VAE_CUDA_FUSE=0;\
wan2.1 --op decode --frames 81 --size 480x832|VAE_CUDA_TUNE=0;\
wan2.1 --op decode --frames 81 --size 480x832|VAE_CUDA_FUSE=0;\
wan2.1 --op decode --frames 81 --size 480x832|"
    IFS=';' read -r -a ABL <<<"${AB_LIST:-$AB_DEFAULT}"
    for entry in "${ABL[@]}"; do
        w=${entry%%|*} envs=${entry#*|}
        echo "=== A/B [$envs] $w" >>"$OUT/bench.log"
        env $envs timeout 120 build-gpu/vae -v bench $w --dtype bf16 --device cuda --warmup 1 \
            --runs "${RUNS:-2}" >>"$OUT/bench.log" 2>&1
        say "A/B [$envs] $w: rc $? $(grep BENCH "$OUT/bench.log" | tail -1 | sed 's/.*median_s/median_s/' | cut -c1-120)"
        # the last run's wall time and peak, memory and graph launches
        grep -E "(de|en)code: done in" "$OUT/bench.log" | tail -1 | cut -c1-200 >>"$SUMMARY"
        grep -E "conv blocks" "$OUT/bench.log" | tail -1 | sed 's/.*GEMM, //' >>"$SUMMARY"
    done
fi

# ---- repeated fixture runs (intermittent failures) and compute-sanitizer -------------------------
RFX=${REPEAT_FIXTURE:-wan21_tiny} RDT=${REPEAT_DTYPE:-fp32}
SPID=""
if [ $SANITIZE = 1 ]; then
    CS=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)
    if [ -z "$CS" ]; then
        say "sanitize: no compute-sanitizer on this machine"
    else
        (
            for tool in initcheck memcheck racecheck; do
                echo "=== compute-sanitizer --tool $tool $RFX $RDT"
                t0=$(date +%s)
                (cd build-gpu && timeout 400 "$CS" --tool $tool --print-limit 40 \
                    ./test_fixtures "$SHARED" $RFX --device cuda --dtype $RDT) 2>&1 | tail -120
                echo "=== $tool: rc ${PIPESTATUS[0]} in $(($(date +%s) - t0)) s"
            done
        ) >"$OUT/sanitize.log" 2>&1 &
        SPID=$!
    fi
fi
if [ "$REPEAT" -gt 0 ] 2>/dev/null; then
    RDEF="VAE_NONE=1;VAE_EXEC_GRAPH=0;VAE_CUDA_TUNE=0;VAE_EXEC_CONTIG=0" # VAE_NONE: as is
    IFS=';' read -r -a RENV <<<"${REPEAT_ENVS:-$RDEF}"
    PAR=${REPEAT_PAR:-4}
    declare -A NRUN NFAIL
    : >"$OUT/repeat.log"
    end=$(($(date +%s) + REPEAT)) k=0
    while [ "$(date +%s)" -lt $end ]; do
        pids=() envs=()
        for ((j = 0; j < PAR; j++, k++)); do
            ev=${RENV[$((k % ${#RENV[@]}))]}
            (cd build-gpu && env ${ev//%k/$k} timeout 120 ./test_fixtures "$SHARED" $RFX \
                --device cuda --dtype $RDT >/tmp/repeat.$j.log 2>&1) &
            pids+=($!) envs+=("$ev")
        done
        for ((j = 0; j < PAR; j++)); do
            wait ${pids[$j]}
            rc=$?
            ev=${envs[$j]}
            NRUN[$ev]=$((${NRUN[$ev]:-0} + 1))
            if [ $rc != 0 ]; then
                NFAIL[$ev]=$((${NFAIL[$ev]:-0} + 1))
                echo "=== FAIL rc $rc [${ev//%k/$((k - PAR + j))}]" >>"$OUT/repeat.log"
                cat /tmp/repeat.$j.log >>"$OUT/repeat.log"
            fi
        done
    done
    for ev in "${RENV[@]}"; do
        say "repeat $RFX $RDT [$ev]: ${NFAIL[$ev]:-0} failed of ${NRUN[$ev]:-0}"
    done
    grep -E "^(FAIL|===)" "$OUT/repeat.log" | head -30 >>"$SUMMARY"
fi
if [ -n "$SPID" ]; then
    wait $SPID
    grep -E "^===|ERROR SUMMARY|LEAK SUMMARY|RACECHECK SUMMARY" "$OUT/sanitize.log" >>"$SUMMARY"
fi
if [ -n "$RECORD_FILE" ]; then
    python3 bench/record.py --source "$CALL" --out "$RECORD_FILE" "$SUMMARY" "$OUT/fixtures.log" \
        "$OUT/bench.log" "$OUT/wheel.log" 2>>"$SUMMARY"
fi
cat "$SUMMARY"
