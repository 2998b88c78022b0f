#!/usr/bin/env bash
# test_tune_cache_gpu.sh VAE -- the tune cache on a GPU: "dnn:" entries that cannot be replayed
# (a damaged geometry, an output size cuDNN disagrees with) are forgotten and chosen afresh, never
# the session's failure; a lock another process holds costs a bounded wait, then the process runs
# without the cache and says so with -v. Prints "skipped: no GPU" without one.
set -u
vae=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
export VAE_TUNE_CACHE=$dir/tune.txt
fail() { echo "FAIL: $*"; exit 1; }
bench() { # a small Wan2.1 encode: its strided convs run through cuDNN
    "$vae" -v bench wan2.1 --config '{"dim": 16, "dec_dim": 16}' --frames 9 --size 64x64 \
        --op encode --device cuda --dtype bf16 --runs 1 --warmup 0 >"$dir/out" 2>&1
}
if ! bench; then
    grep -qiE "no usable CUDA|no (CUDA|GPU)|cuda.*(not available|unavailable)" "$dir/out" &&
        { echo "skipped: no GPU"; exit 0; }
    cat "$dir/out"; fail "the first run (fresh cache)"
fi
grep -q ' dnn:' "$VAE_TUNE_CACHE" || { cat "$VAE_TUNE_CACHE"; fail "no dnn: entries written"; }
dnn=$(grep -c ' dnn:' "$VAE_TUNE_CACHE")

# 1. every dnn: entry damaged in place: its output height (the 18th of its 20 numbers) one more,
# so that cuDNN would compute another size; plus one whose numbers are cut short
awk '$3 ~ /^dnn:/ { n = split($3, p, ":"); split(p[n], g, ".");
                    g[18]++; s = g[1]; for (i = 2; i <= 20; i++) s = s "." g[i];
                    sub(/[^:]*$/, s, $3) } { print }' "$VAE_TUNE_CACHE" >"$dir/t" &&
    mv "$dir/t" "$VAE_TUNE_CACHE"
key=$(awk '$3 ~ /^dnn:/ { print $1, $2; exit }' "$VAE_TUNE_CACHE")
echo "$key dnn:decoder.cut:1.2.3 1" >>"$VAE_TUNE_CACHE"
bench || { cat "$dir/out"; fail "a session with damaged dnn: entries"; }
forgot=$(grep -c ' dnn:[^ ]* -$' "$VAE_TUNE_CACHE")
[ "$forgot" -ge "$dnn" ] || { cat "$VAE_TUNE_CACHE"; fail "$forgot of $dnn damaged entries forgotten"; }
before=$(wc -l <"$VAE_TUNE_CACHE")
bench || { cat "$dir/out"; fail "the run after the forgetting"; }
[ "$(grep -c ' dnn:[^ ]* -$' "$VAE_TUNE_CACHE")" -eq "$forgot" ] || fail "forgotten twice"
[ "$(wc -l <"$VAE_TUNE_CACHE")" -eq "$before" ] || fail "the fresh choices were not stored once"

# 2. a lock another process holds: a bounded wait (about 2 s), then no cache, said with -v
command -v flock >/dev/null || { echo "(no flock(1): the lock case not run)"; exit 0; }
flock -x "$VAE_TUNE_CACHE" sleep 30 &
holder=$!
sleep 0.5
t0=$(date +%s)
bench || { kill $holder; cat "$dir/out"; fail "a session while another process holds the lock"; }
t=$(($(date +%s) - t0))
kill $holder
grep -q "locked by another process" "$dir/out" || { cat "$dir/out"; fail "the lock's wait not logged"; }
[ "$t" -lt 25 ] || fail "the run took ${t} s with the lock held"
echo "ok: $dnn dnn: entries damaged and forgotten, the lock waited for a bounded time"
