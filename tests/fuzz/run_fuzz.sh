#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz/ with clang (ASan + UBSan) into a separate folder and
#   1. runs every regression input once (tests/fuzz/regress/<target>/*, the seed corpus
#      tests/fuzz/corpus/<target>/*, and tests/regress/* through fuzz_model, which opens any
#      tensor format, and fuzz_media);
#   2. fuzzes each target for FUZZ_SECONDS (default 30; 0 skips this step), all in parallel,
#      with an RSS limit of 1024 MB (a block of at most 512 MB) and a 10 s timeout per input.
# Any crash, leak, UBSan report, timeout or out-of-memory fails the script; the input that caused
# it is left in $FUZZ_BUILD/artifacts/. New corpus entries go to $FUZZ_BUILD/corpus/<target>/,
# never into the committed seeds. Without clang + libFuzzer it prints "skipped: no clang libFuzzer"
# and exits 0 (clang's libFuzzer runtime is in Debian's libclang-rt-<N>-dev; -fopenmp needs
# libomp-<N>-dev).
#
# usage: tests/fuzz/run_fuzz.sh [TARGET...]      (default: every fuzz_*.c)
# env:   FUZZ_SECONDS (30), FUZZ_BUILD (build-fuzz), FUZZ_CC (clang), FUZZ_JOBS (nproc),
#        FUZZ_ARGS (extra libFuzzer flags)
set -u
cd "$(dirname "$0")/../.."
root=$PWD
secs=${FUZZ_SECONDS:-30}
bdir=${FUZZ_BUILD:-build-fuzz}
case $bdir in /*) ;; *) bdir=$root/$bdir ;; esac
cc=${FUZZ_CC:-}
if [ -z "$cc" ]; then
    for c in clang clang-19 clang-18 clang-17 clang-16 clang-15 clang-14; do
        command -v "$c" >/dev/null 2>&1 && { cc=$c; break; }
    done
fi
mkdir -p "$bdir"
probe=$bdir/probe
if [ -z "$cc" ] || ! { printf 'int LLVMFuzzerTestOneInput(const char *d, unsigned long n) { return 0; }\n' \
        >"$probe.c" && "$cc" -fsanitize=fuzzer,address,undefined "$probe.c" -o "$probe" \
        >"$probe.log" 2>&1 && "$probe" -runs=1 >>"$probe.log" 2>&1; }; then
    echo "skipped: no clang libFuzzer (${cc:-no clang found}; Debian: libclang-rt-NN-dev)"
    exit 0
fi

log=$bdir/build.log
if ! { cmake -S tests/fuzz -B "$bdir" -DCMAKE_C_COMPILER="$cc" -DCMAKE_BUILD_TYPE= >"$log" 2>&1 &&
       cmake --build "$bdir" -j"$(nproc)" >>"$log" 2>&1; }; then
    cat "$log"
    echo "fuzz: build failed"
    exit 1
fi

if [ $# -gt 0 ]; then
    targets="$*"
else
    targets=$(cd tests/fuzz && ls fuzz_*.c | sed 's/\.c$//')
fi
built=""
for t in $targets; do # fuzz_media is built only with FFmpeg's development files
    if [ -x "$bdir/$t" ]; then built="$built $t"; else echo "fuzz: $t: not built, skipped"; fi
done
targets=$built
# A 32 MB quarantine (default 256) keeps ASan's own memory from counting against the RSS limit:
# the readers' accounted heap bounds (src/formats/limits.h) hold a few hundred MB of small blocks.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1:quarantine_size_mb=32}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
# The media reader accepts frames up to VAE_MAX_IMAGE_PIXELS (2^26), which FFmpeg's decoders hold
# at up to 8 bytes a pixel (512 MiB: its av_max_alloc) besides the rest of the process: a valid
# header of that size is within the design, so the RSS limit leaves room for it (a single block
# above 512 MB still fails)
limits="-rss_limit_mb=1024 -malloc_limit_mb=512 -timeout=10"
fail=0

# 1. regression inputs, each run once
for t in $targets; do
    inputs=()
    for d in tests/fuzz/regress/$t tests/fuzz/corpus/$t; do
        [ -d "$d" ] && for f in "$d"/*; do [ -f "$f" ] && inputs+=("$f"); done
    done
    if { [ "$t" = fuzz_model ] || [ "$t" = fuzz_media ]; } && [ -d tests/regress ]; then
        while IFS= read -r f; do inputs+=("$f"); done < <(find tests/regress -type f | sort)
    fi
    [ ${#inputs[@]} -eq 0 ] && continue
    out=$bdir/$t.regress.log
    if "$bdir/$t" $limits "${inputs[@]}" >"$out" 2>&1; then
        echo "fuzz: $t: ${#inputs[@]} regression inputs ok"
    else
        echo "fuzz: $t: FAILED on a regression input"
        tail -n 60 "$out"
        fail=1
    fi
done

# 2. fuzzing, every target at once
if [ "$secs" -gt 0 ]; then
    mkdir -p "$bdir/artifacts"
    pids=()
    for t in $targets; do
        mkdir -p "$bdir/corpus/$t"
        seeds=()
        [ -d tests/fuzz/corpus/$t ] && seeds+=("tests/fuzz/corpus/$t")
        # shellcheck disable=SC2086
        "$bdir/$t" $limits -max_total_time="$secs" -print_final_stats=1 \
            -artifact_prefix="$bdir/artifacts/$t-" ${FUZZ_ARGS:-} \
            "$bdir/corpus/$t" "${seeds[@]}" >"$bdir/$t.fuzz.log" 2>&1 &
        pids+=("$!")
    done
    i=0
    for t in $targets; do
        rc=0
        wait "${pids[$i]}" || rc=$?
        i=$((i + 1))
        lg=$bdir/$t.fuzz.log
        stats=$(grep -E '^#[0-9]+.*(DONE|cov:)' "$lg" | tail -n 1 | sed 's/^#\([0-9]*\)[^c]*/\1 runs, /')
        if [ $rc -eq 0 ]; then
            echo "fuzz: $t: ok, ${stats:-no stats} in ${secs}s"
        else
            echo "fuzz: $t: FAILED (rc $rc), artifacts in $bdir/artifacts/"
            grep -nE 'ERROR:|SUMMARY:|runtime error|fuzz invariant|Test unit written' "$lg" | head -n 20
            tail -n 60 "$lg"
            fail=1
        fi
    done
fi
[ $fail -eq 0 ] && echo "fuzz: all targets passed" || echo "fuzz: FAILURES"
exit $fail
