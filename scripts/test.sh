#!/usr/bin/env bash
# The test suite: installs what is missing, builds (release, then ASan+UBSan), runs ctest, then
# the Python package's tests.
#   bash scripts/test.sh            the suite (CI: <= 25 min on 2 cores)
#   bash scripts/test.sh --nightly  also what the suite leaves to a nightly run (each covered in
#                                   the suite on a subset or by another test: docs/testing.md)
set -eu
cd "$(dirname "$0")/.."
nightly=0
[ "${1:-}" = --nightly ] && nightly=1
t0=$(date +%s)
stage() { echo "== $* ($(($(date +%s) - t0)) s in)"; }
# The release build. With a GPU: CUDA for it (the default), and the GPU tests run on it. Without
# one but with nvcc: the release build is the CPU backend's, and the CUDA backend (sm_90: its
# CUTLASS kernels, ~5 min of nvcc on 2 cores) compiles in build-cuda beside the rest of the suite,
# at the lowest priority, so that it takes the cores the tests leave idle; at the end its GPU tests
# run there ("skipped: no GPU"), with the CUDA pool's test and a few CPU tests of a library that
# has a CUDA backend but no GPU.
cuda=()
if ! nvidia-smi -L >/dev/null 2>&1 && { command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ]; }; then
    cuda=(-DVAE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90)
    export VAE_CUDA=ON # scripts/deps.sh: CUTLASS's headers
fi
stage "dependencies and the release build"
bash scripts/deps.sh
cuda_job=""
if [ ${#cuda[@]} -gt 0 ]; then
    mkdir -p build-cuda
    # scripts/build.sh in a process group of its own (set -m): a failing suite stops it (its
    # follow_build stops the build's group in turn), and the nice value holds against the
    # suite's processes; what it prints goes to build-cuda/progress.log
    set -m
    nice -n 19 bash scripts/build.sh build-cuda "${cuda[@]}" </dev/null \
        >build-cuda/progress.log 2>&1 &
    cuda_job=$!
    set +m
    trap 'kill -- -"$cuda_job" 2>/dev/null || true' EXIT
    bash scripts/build.sh build -DVAE_CUDA=OFF
else
    bash scripts/build.sh build
fi
python3 scripts/layers.py --check # the include/call graph against the layering (docs/testing.md)
# Two tests at a time, each on every core (OpenMP) with its threads waiting passively between
# parallel loops (OMP_WAIT_POLICY=passive): spinning threads took the cores the other test needed,
# which made two at once slower than one; waiting ones leave them to it, and the cores one test
# leaves idle (its serial parts, its files) the other uses. The allocation-failure sweeps' full
# runs (label "nightly") only with --nightly.
run_ctest() { # run_ctest LABELS_LEFT_OUT [ctest options]: nightly's too but with --nightly
    local out=$1
    shift
    [ $nightly = 1 ] || out="${out:+$out|}nightly"
    OMP_WAIT_POLICY=passive ctest --output-on-failure --timeout 1500 -j2 ${out:+-LE "$out"} "$@"
}
stage "ctest (release)"
(cd build && run_ctest "")
# Sanitizers: everything but the large-model fixtures (those run above; ASan makes them slow) and,
# but for --nightly, the second repeats of a code path (label "repeat", tests/tests.cmake).
repeats=repeat
[ $nightly = 1 ] && repeats=""
stage "ASan+UBSan build and ctest"
bash scripts/build.sh build-asan -DVAE_SANITIZE=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo -DVAE_CUDA=OFF
(cd build-asan && ASAN_OPTIONS=detect_leaks=1 run_ctest "$repeats" \
    -E 'fixture_(fp8_)?(wan21_full|wan22_full|seedvr2_full|wan21_small)|gpu_')
# ThreadSanitizer: one model's sessions on several threads at once (CPU backend), the
# in-process communicator's ranks, and device groups of CPU lanes: row bands (their GroupNorm
# sums through it; a band encoder, whose C then runs on both lanes, the attention's queries
# all-gathered), A once (the other lane reading A's frames as they come) and stores in files;
# one thread a lane: no OpenMP workers, which it cannot see into
stage "ThreadSanitizer"
mkdir -p build-tsan
cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DVAE_SANITIZE_THREAD=ON -DVAE_CUDA=OFF \
    -DVAE_MEDIA=OFF >build-tsan/configure.log 2>&1 || { cat build-tsan/configure.log; exit 1; }
cmake --build build-tsan --target test_threads test_comm test_ranks test_fixtures vae_cli -j"$(nproc)" \
    >build-tsan/build.log 2>&1 ||
    { tail -40 build-tsan/build.log; exit 1; }
TSAN_OPTIONS="halt_on_error=1 exitcode=66" build-tsan/test_threads ../shared
TSAN_OPTIONS="halt_on_error=1 exitcode=66" build-tsan/test_comm
# groups of processes, ranks as threads with a session each: their failures, exact tiles (the
# output exchanged frame by frame as each rank's last tile puts it) and row bands
TSAN_OPTIONS="halt_on_error=1 exitcode=66" build-tsan/test_ranks
TSAN_OPTIONS="halt_on_error=1 exitcode=66" build-tsan/test_fixtures ../shared wan21_tiny --tiles 3 \
    --ranks 3 --threads 1 --case dec_t6_odd
TSAN_OPTIONS="halt_on_error=1 exitcode=66" VAE_PLAN_BANDS=1 build-tsan/test_fixtures ../shared \
    seedvr2_tiny --ranks 2 --threads 1 --case enc_t9
TSAN_OPTIONS="halt_on_error=1 exitcode=66" VAE_PLAN_BANDS=1 build-tsan/test_fixtures ../shared \
    seedvr2_tiny --devices 2 --threads 1 --case dec_t6_odd
TSAN_OPTIONS="halt_on_error=1 exitcode=66" build-tsan/test_fixtures ../shared wan22_tiny \
    --devices 2 --max-memory 2700000 --threads 1 --case dec_t3
TSAN_OPTIONS="halt_on_error=1 exitcode=66" VAE_PLAN_BANDS=1 build-tsan/vae bench seedvr2 \
    --config '{"block_out_channels":[32,32,64,64],"norm_num_groups":8}' --op encode --frames 5 \
    --size 64x64 --devices 0,1 --device cpu --dtype fp32 --runs 1 --warmup 0 --threads 2
# stores in temporary files through each lane's ring: B's written by both lanes, a shared A's
# published by lane 0 as the other reads it
TSAN_OPTIONS="halt_on_error=1 exitcode=66" VAE_EXEC_STORE_HOST=1 VAE_EXEC_HOST_MB=0 VAE_PLAN_CUT=2 \
    build-tsan/vae bench wan2.1 --config '{"dim": 8, "dec_dim": 8}' --op encode --frames 17 \
    --size 64x256 --tile 32x128 --devices 0,1 --device cpu --dtype fp32 --runs 1 --warmup 0 --threads 1
TSAN_OPTIONS="halt_on_error=1 exitcode=66" VAE_EXEC_HOST_MB=0 build-tsan/test_fixtures ../shared \
    wan22_tiny --devices 2 --max-memory 2700000 --threads 1 --case dec_t3
# Python: the package as the README installs it (pip install .: scikit-build-core builds
# libvae.so, the CPU backend alone where no GPU is visible), torch (the PyPI wheel, used on the CPU
# here) and diffusers from PyPI, then pytest on the installed package.
# The suite leaves to nightly: the full-size fixtures through vaec (ctest's fixture_*_full run
# them through the same library; the binding's part is the small ones'), and the layouts' property
# test at 3,000 random cases instead of 10,000.
stage "Python"
python3 -m pip install -q torch diffusers safetensors pytest tqdm
python3 -m pip install -q ./
if [ $nightly = 1 ]; then python3 -m pytest -q -rs python/tests
else VAEC_FULL_FIXTURES=0 VAEC_FUZZ_CASES=3000 python3 -m pytest -q -rs python/tests; fi
# The ComfyUI nodes inside the ComfyUI snapshot of ../shared/third_party (its own venv over the
# system's torch and the vaec just installed): in-process and through a headless server.
stage "ComfyUI"
bash scripts/test_comfyui.sh
# The binding once more with the library of the ASan+UBSan build above, its runtime preloaded
# into the interpreter (Python's own allocations are not leak-checked): the crash classes, the
# layouts' property test and the layouts, dtypes, batches, errors and cancels of the main tests.
stage "Python on the ASan+UBSan library"
LD_PRELOAD="$(cc -print-file-name=libasan.so)" ASAN_OPTIONS=detect_leaks=0 \
    UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 VAEC_LIBRARY="$PWD/build-asan/libvae.so" \
    PYTHONPATH=python VAEC_FUZZ_CASES=2000 python3 -m pytest -q -p no:cacheprovider \
    python/tests/test_safety.py python/tests/test_binding_fuzz.py python/tests/test_vaec.py \
    -k "safety or fuzz or non_contiguous or half_precision or batch or state_dict or errors or progress"
# Windows: the library, the CLI and the CPU tests cross-compiled with mingw-w64, run under Wine;
# the suite leaves out the tiled repeats there (VAE_WIN_QUICK: the platform's files, host stores,
# threads, lanes, ranks, bands, strips and FP8 stay; the tiles' arithmetic is Linux's)
stage "Windows (Wine)"
if [ $nightly = 1 ]; then bash scripts/test_windows.sh build-win
else VAE_WIN_QUICK=1 bash scripts/test_windows.sh build-win; fi
if [ -n "$cuda_job" ]; then
    stage "the CUDA backend's build (compiled beside the suite)"
    wait "$cuda_job" || {
        tail -60 build-cuda/progress.log # (scripts/build.sh: the configure log, or the errors)
        echo "build-cuda: failed (logs: build-cuda/configure.log, build-cuda/build.log)"
        exit 1
    }
    trap - EXIT
    grep -E "^-- vae:|^build: done" build-cuda/progress.log || true
    if (cd build-cuda && OMP_WAIT_POLICY=passive ctest --output-on-failure --timeout 300 -j2 \
        --no-tests=error >ctest.log 2>&1 \
        -R '^(gpu_.*|cuda_pool|test_formats|test_executor|fixture_wan21_tiny|cli_regress)$')
    then grep -E "tests passed|Total Test time" build-cuda/ctest.log
    else grep -vE "Skipped|Passed" build-cuda/ctest.log | tail -80; exit 1; fi
fi
stage "done"
