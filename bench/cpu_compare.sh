#!/usr/bin/env bash
# Same-run comparison of the CPU backend against the upstream PyTorch code on the CPU (float32,
# the same thread count): for each workload, `vae bench --device cpu --dtype fp32 --threads N`
# and bench/pytorch_ref.py --device cpu --threads N (diffusers AutoencoderKLWan, oneDNN's convs)
# back to back, then both median times and the ratio. Builds nothing; needs diffusers importable.
#
# usage: bench/cpu_compare.sh VAE_BINARY [WORKLOAD...]   (workload = arch:op:frames:HxW)
# Default workloads: Wan2.1 decode and encode of a 9x192x256 video. THREADS=N (default 2), RUNS=N
# timed runs on each side after one warm-up (default 2). The load average before each side is
# printed beside it: on a shared machine, compare only rows measured under the same load.
set -u
VAE=${1:?usage: bench/cpu_compare.sh VAE_BINARY [arch:op:frames:HxW ...]}
shift
DIR=$(cd "$(dirname "$0")" && pwd)
T=${THREADS:-2}
R=${RUNS:-2}
W=("$@")
[ ${#W[@]} -eq 0 ] && W=(wan2.1:decode:9:192x256 wan2.1:encode:9:192x256)
load() { cut -d' ' -f1 /proc/loadavg; }
rows=()
for w in "${W[@]}"; do
    IFS=: read -r arch op frames size <<<"$w"
    l1=$(load)
    ours=$("$VAE" bench "$arch" --op "$op" --frames "$frames" --size "$size" --dtype fp32 \
        --device cpu --threads "$T" --runs "$R" --warmup 1 2>/dev/null | sed -n 's/^BENCH //p')
    l2=$(load)
    ref=$(OMP_NUM_THREADS=$T python3 "$DIR/pytorch_ref.py" "$arch" --op "$op" --frames "$frames" \
        --size "$size" --device cpu --threads "$T" --runs "$R" --warmup 1 2>/dev/null |
        sed -n 's/^REF //p')
    echo "BENCH $ours"
    echo "REF $ref"
    rows+=("$(python3 - "$arch" "$op" "$frames x $size" "${ours:-{\}}" "${ref:-{\}}" "$l1" "$l2" <<'PY'
import json, sys
arch, op, wl, ours, ref, l1, l2 = sys.argv[1:8]
o, r = json.loads(ours or "{}"), json.loads(ref or "{}")
os_, rs = o.get("median_s"), r.get("median_s")
print("%-8s %-6s %-12s %9s %6s %10s %6s %11s" % (arch, op, wl.replace(" ", ""),
      "%.2f" % os_ if os_ else "fail", l1, "%.2f" % rs if rs else "fail", l2,
      "%.3f" % (rs / os_) if rs and os_ else "-"))
PY
)")
done
echo "threads $T, median of $R runs after one warm-up; load = 1-minute load average before each side"
printf "%-8s %-6s %-12s %9s %6s %10s %6s %11s\n" arch op workload vae_s load pytorch_s load "pytorch/vae"
printf "%s\n" "${rows[@]}"
