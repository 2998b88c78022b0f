#!/usr/bin/env bash
# The Windows build, cross-compiled with mingw-w64 and tested under Wine:
#   bash scripts/test_windows.sh [BUILD_DIR]          (default build-win)
# 1. the toolchain (Debian packages; apt-get where missing);
# 2. cJSON and libpng, which Debian has no mingw packages of: their Debian source tarballs,
#    checked against the sha256 below, built for the target into BUILD_DIR/deps (nothing
#    downloaded is kept in the repository);
# 3. the library, the CLI and the tests (CPU backend, built-in GEMM, no FFmpeg), then ctest under
#    Wine for the subset below;
# 4. the CUDA backend's host C files compiled for Windows (-fsyntax-only) against the CUDA
#    toolkit's headers, where one is installed: they use the same platform layer.
set -eu
cd "$(dirname "$0")/.."
dir=${1:-build-win}
triple=x86_64-w64-mingw32
jobs=$(nproc)
[ "$jobs" -gt 4 ] && jobs=4
t0=$(date +%s)

# ---- 1. the toolchain ------------------------------------------------------------------------
need=""
command -v $triple-gcc-posix >/dev/null || need="$need gcc-mingw-w64-x86-64-posix"
[ -f /usr/$triple/lib/libz.a ] || need="$need libz-mingw-w64-dev"
command -v wine >/dev/null || need="$need wine wine64" # wine: the wine and wineboot commands
command -v cmake >/dev/null || need="$need cmake"
if [ -n "$need" ]; then
    echo "== installing:$need"
    SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $need >/dev/null
fi
CC=$triple-gcc-posix

# ---- 2. cJSON and libpng for the target ------------------------------------------------------
deps=$PWD/$dir/deps
mkdir -p "$deps/src"
debian=http://deb.debian.org/debian/pool/main
fetch() { # URL SHA256 -> the file in deps/src, checked
    local f="$deps/src/$(basename "$1")"
    if [ ! -f "$f" ] || ! echo "$2  $f" | sha256sum -c --status; then
        curl -fsSL --retry 3 -o "$f.part" "$1"
        mv "$f.part" "$f"
    fi
    echo "$2  $f" | sha256sum -c --status || { echo "sha256 mismatch: $f" >&2; exit 1; }
    echo "$f"
}
if [ ! -f "$deps/lib/libcjson.a" ]; then
    echo "== cJSON 1.7.15 (Debian bookworm's source)"
    tgz=$(fetch $debian/c/cjson/cjson_1.7.15.orig.tar.gz \
        5308fd4bd90cef7aa060558514de6a1a4a0819974a26e6ed13973c5f624c24b2)
    rm -rf "$deps/src/cjson" && mkdir -p "$deps/src/cjson" "$deps/include/cjson" "$deps/lib"
    tar -xzf "$tgz" -C "$deps/src/cjson" --strip-components=1
    $CC -O2 -c "$deps/src/cjson/cJSON.c" -o "$deps/src/cjson/cJSON.o"
    $triple-ar rcs "$deps/lib/libcjson.a" "$deps/src/cjson/cJSON.o"
    cp "$deps/src/cjson/cJSON.h" "$deps/include/cjson/"
fi
if [ ! -f "$deps/lib/libpng16.a" ]; then
    echo "== libpng 1.6.39 (Debian bookworm's source)"
    tgz=$(fetch $debian/libp/libpng1.6/libpng1.6_1.6.39.orig.tar.gz \
        a00e9d2f2f664186e4202db9299397f851aea71b36a35e74910b8820e380d441)
    rm -rf "$deps/src/libpng" && mkdir -p "$deps/src/libpng"
    tar -xzf "$tgz" -C "$deps/src/libpng" --strip-components=1
    cmake -S "$deps/src/libpng" -B "$deps/src/libpng/build" \
        -DCMAKE_TOOLCHAIN_FILE="$PWD/cmake/mingw-w64.cmake" -DCMAKE_BUILD_TYPE=Release \
        -DCMAKE_INSTALL_PREFIX="$deps" -DPNG_SHARED=OFF -DPNG_TESTS=OFF -DPNG_EXECUTABLES=OFF \
        -DZLIB_LIBRARY=/usr/$triple/lib/libz.a -DZLIB_INCLUDE_DIR=/usr/$triple/include \
        >"$deps/libpng.log" 2>&1 || { cat "$deps/libpng.log"; exit 1; }
    cmake --build "$deps/src/libpng/build" -j"$jobs" --target install >>"$deps/libpng.log" 2>&1 \
        || { tail -30 "$deps/libpng.log"; exit 1; }
fi

# ---- 3. the build, and the tests under Wine ----------------------------------------------------
echo "== configure and build ($dir)"
cmake -S . -B "$dir" -DCMAKE_TOOLCHAIN_FILE=cmake/mingw-w64.cmake -DCMAKE_BUILD_TYPE=Release \
    -DVAE_CUDA=OFF -DVAE_MEDIA=OFF -DVAE_WIN_DEPS="$deps" -DCJSON_INCLUDE="$deps/include" \
    -DCJSON_LIB="$deps/lib/libcjson.a" -DPNG_PNG_INCLUDE_DIR="$deps/include" \
    -DPNG_LIBRARY="$deps/lib/libpng16.a" >"$dir/configure.log" 2>&1 \
    || { cat "$dir/configure.log"; exit 1; }
grep "^-- vae:" "$dir/configure.log" || true
cmake --build "$dir" -j"$jobs" >"$dir/build.log" 2>&1 || { grep -B2 -A8 "error" "$dir/build.log" | head -80; exit 1; }
if grep -q "warning:" "$dir/build.log"; then
    echo "== compiler warnings:"; grep "warning:" "$dir/build.log" | sort -u
fi

export WINEDEBUG=-all WINEPREFIX=${WINEPREFIX:-$PWD/$dir/wineprefix}
[ -d "$WINEPREFIX" ] || { echo "== a Wine prefix ($WINEPREFIX)"; wineboot -i >/dev/null 2>&1 || true; }
wine cmd /c exit >/dev/null 2>&1 || true # the prefix brought up to date before tests run in parallel

# Left out under Wine, with the reasons:
#  cli, cli_regress, media, install, fuzz_short  shell/Python drivers that run the .exe directly,
#       pkg-config and .so checks, clang's libFuzzer: Linux tooling
#  alloc_fail_*        every host allocation failing in turn: ~20 min of one thread on Linux
#  fixture_.*full      the released-size models: minutes each on Linux, several times that here
#  gpu_*               no GPU (they would print "skipped: no GPU")
#  the wan21_tiny decoder's tiled repeats (exact tiles, from a later cut in a file, two lanes, one-
#                      chunk steps, ranks over tiles): ~11 min of test time here, the slowest, and
#                      the same arithmetic as on Linux; the wan22, SeedVR2 and taef2 repeats keep
#                      the platform's files, host stores, threads, lanes and ranks covered
#  label "repeat"      second repeats of one code path or platform service (~4 min of test
#                      time; tests/tests.cmake says which test keeps each covered)
# The rest (the units, every tiny fixture, the tiles, strips, lanes, ranks, bands, blends, spills
# and FP8 of the others) takes ~5 min on 2 busy cores. VAE_WIN_QUICK=1 leaves out the tiled
# repeats (exact tiles, lanes and ranks over tiles, blends, one-chunk steps; the spilled tiles,
# host stores, bands, strips and FP8 stay, one or two of each kind; test_taehv_variants'
# arithmetic is Linux's too): 48 tests, ~3 min on 2 busy cores.
# test_rendezvous is not built on Windows (forked ranks, POSIX sockets: --dist is refused there);
# test_tune_cache skips its two forked appenders there, saying so.
exclude='^(cli|cli_regress|media|install|fuzz_short)$|^alloc_fail_|^gpu_|fixture_.*full'
exclude="$exclude|^fixture_(tiles|tiles_cut1_file|group2|chunks1)_wan21_tiny$|^fixture_ranks[23]_tiles_wan21_tiny_"
if [ -n "${VAE_WIN_QUICK:-}" ]; then
    exclude="$exclude|^fixture_tiles_(wan21_tiny|wan22_tiny|taef2_real|seedvr2_tiny|wan21_small|cut1_file_wan21_tiny|cut2_host_taef2_real|taehv_w22)$"
    exclude="$exclude|^fixture_(group2_wan21_tiny|group3_wan22_tiny|group2_seedvr2_tiny|chunks1_wan21_tiny|group2_blend_taef2_real|blend_taef2_real|frames_wan22_tiny|frames2_wan22_tiny|group2_file_wan22_tiny)$"
    exclude="$exclude|^fixture_ranks[23]_(tiles|file|blend)_|^test_taehv_variants$"
    # the second and third of a kind: bands (group2_bands, ranks2_bands and bands_encode stay),
    # host-memory caches (offload_wan21/wan22/offload3/frames/taehv stay; frames2, loops of two
    # frames, is Linux's like frames2_wan22_tiny above), host and file stores
    # (the spilled tiles, strips_wan22_synth_host and store_file_decode/encode_group2 stay), strips
    # of a 2-D model; the bands' pattern has no $: ranks3_bands' tests are named by their case
    exclude="$exclude|^fixture_(group3_bands|ranks3_bands|group2_bands_frames)_seedvr2_tiny|^fixture_offload(_list|_frames2)?_seedvr2_tiny$"
    exclude="$exclude|^fixture_tiles_cut1_host_wan22_tiny$|^store_file_encode_wan21_synth$|^fixture_strips_taef2_real$"
fi
echo "== ctest under Wine (left out: $exclude)"
rc=0
# VAE_TEST_QUICK: test_fp8_calibrate's error bound on the larger models stays Linux's
(cd "$dir" && VAE_TEST_QUICK=1 ctest -E "$exclude" -LE repeat --output-on-failure -j2 --timeout 600) ||
    rc=$?

# ---- 4. the CUDA backend's host C files, compiled for Windows --------------------------------
cuda_inc=${CUDA_HOME:-/usr/local/cuda}/include
if [ -f "$cuda_inc/cuda_runtime.h" ]; then
    echo "== CUDA host C files for Windows (-fsyntax-only against $cuda_inc)"
    nccl=""
    [ -f "$cuda_inc/nccl.h" ] && nccl="-DVAE_HAVE_NCCL=1"
    # (the toolkit's crt/host_defines.h defines __cdecl empty under GCC, over mingw's no-op
    # attribute of x86-64: that one warning is left out)
    n=0
    for f in src/backends/cuda/*.c src/backends/cuda/*/*.c; do
        out=$($CC -std=c11 -fsyntax-only -Wall -Wextra -Wno-unused-parameter -Wno-format -fopenmp \
            -D_FILE_OFFSET_BITS=64 -D__USE_MINGW_ANSI_STDIO=1 -DVAE_HAVE_CUDA=1 $nccl \
            -DVAE_CUDA_ARCHS_STRING='"sm_90"' -Iinclude -Isrc -I"$cuda_inc" "$f" 2>&1) || rc=1
        echo "$out" | grep -v -e '"__cdecl" redefined' -e 'host_defines.h' -e '^ *[0-9]* |' \
            -e '^ *|' -e '^In file included' -e '^ *from ' -e '^<built-in>' | grep . || true
        n=$((n + 1))
    done
    echo "   $n files"
else
    echo "== no CUDA toolkit headers at $cuda_inc: the CUDA host files not checked"
fi
echo "== test_windows.sh: $(( $(date +%s) - t0 )) s, exit $rc"
exit $rc
