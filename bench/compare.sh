#!/usr/bin/env bash
# Same-run comparison against the PyTorch reference on a GPU machine: for each workload, times
# the upstream implementation (bench/pytorch_ref.py) and then `vae bench`, and prints both with
# the ratio. Needs diffusers importable (see bench/README.md).
#
# usage: bench/compare.sh VAE_BINARY [WORKLOAD...]   (workload = arch:op:frames:HxW)
# RUNS=N (default 5) timed runs on each side after one warm-up; COMPARE_LOG=FILE keeps the `vae -v`
# log (engine decisions, per-shape conv path timings). SeedVR2's reference is its own upstream
# code (bench/seedvr2_ref.py): SEEDVR_UPSTREAM=DIR names a checkout of ByteDance-Seed/SeedVR (never
# committed; carry it in an ignored folder such as .upstream/seedvr); without it the row shows n/a.
# A TAEHV file name as ARCH (taew2_1, taew2_2, ...: `vae bench taehv` with that variant) is timed
# against upstream's taehv.py (bench/taehv_ref.py: the faster of its two modes), TAEHV_UPSTREAM=FILE
# naming it (fetched into .upstream/taehv/, never committed).
# RECORD=FILE also appends each workload's two measurements to FILE as run records (JSON Lines,
# bench/record.py; bench/runs/README.md).
set -u
VAE=$1
shift
DIR=$(cd "$(dirname "$0")" && pwd)
W=("$@")
declare -A taehv_names # upstream taehv.py's file names (bench/taehv_upstream_check.py VARIANTS)
for v in taew2_1 taehv taeos1_3 taecvx taew2_2 taew2_2_super taehv1_5 taehv1_5_super taeh3 \
    taeltx_2 taeltx2_3; do taehv_names[$v]=1; done
[ ${#W[@]} -eq 0 ] && W=(wan2.1:decode:81:480x832 wan2.1:decode:81:720x1280 wan2.1:encode:81:480x832
                         wan2.2:decode:121:704x1280 seedvr2:decode:81:720x1248)
printf "%-8s %-6s %-14s %12s %12s %8s %14s %14s\n" arch op workload "pytorch_s" "vae_s" ratio "torch_peakGiB" "vae_peakGiB"
for w in "${W[@]}"; do
    IFS=: read -r arch op frames size <<<"$w"
    ref=""
    if [ "$arch" = seedvr2 ] && [ -n "${SEEDVR_UPSTREAM:-}" ]; then
        ref=$(timeout 400 python3 "$DIR/seedvr2_ref.py" --upstream "$SEEDVR_UPSTREAM" --op "$op" \
            --frames "$frames" --size "$size" --runs "${RUNS:-3}" 2>/dev/null | sed -n 's/^REF //p')
    elif [ -n "${taehv_names[$arch]:-}" ]; then # a TAEHV file name: upstream's taehv.py
        [ -n "${TAEHV_UPSTREAM:-}" ] &&
            ref=$(timeout 400 python3 "$DIR/taehv_ref.py" "$TAEHV_UPSTREAM" "$arch" --op "$op" \
                --frames "$frames" --size "$size" --runs "${RUNS:-5}" 2>/dev/null | sed -n 's/^REF //p')
    elif [ "$arch" != seedvr2 ]; then
        ref=$(timeout 300 python3 "$DIR/pytorch_ref.py" "$arch" --op "$op" --frames "$frames" --size "$size" \
            --runs "${RUNS:-5}" 2>/dev/null | sed -n 's/^REF //p')
    fi
    model=("$arch")
    [ -n "${taehv_names[$arch]:-}" ] && model=(taehv --config "{\"variant\":\"$arch\"}")
    ours=$(timeout 300 "$VAE" ${COMPARE_LOG:+-v} bench "${model[@]}" --op "$op" --frames "$frames" --size "$size" \
        --dtype bf16 --device cuda --runs "${RUNS:-5}" 2>>"${COMPARE_LOG:-/dev/null}" | sed -n 's/^BENCH //p')
    echo "REF $ref"
    echo "BENCH $ours"
    python3 - "$arch" "$op" "$frames x $size" "${ref:-{\}}" "${ours:-{\}}" <<'PY'
import json, sys
arch, op, wl, ref, ours = sys.argv[1:6]
r, o = json.loads(ref or "{}"), json.loads(ours or "{}")
rs, os_ = r.get("median_s"), o.get("median_s")
g = lambda d: "%.2f" % (d["peak_bytes"] / 2**30) if "peak_bytes" in d else "-"
print("%-8s %-6s %-14s %12s %12s %8s %14s %14s" % (arch, op, wl.replace(" ", ""),
      "%.3f" % rs if rs else "n/a", "%.3f" % os_ if os_ else "fail",
      "%.2fx" % (rs / os_) if rs and os_ else "-", g(r), g(o)))
PY
    if [ -n "${RECORD:-}" ]; then
        printf 'REF %s\nBENCH %s\n' "$ref" "$ours" |
            python3 "$DIR/record.py" --source "bench/compare.sh $VAE $w" --out "$RECORD" -
    fi
done
