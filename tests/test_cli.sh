#!/usr/bin/env bash
# The command-line tool on good input (info, decode, encode, synth, compare, roundtrip) and on bad
# input: every bad input must give a clear message, the documented non-zero exit code, no crash
# (signals, sanitizer reports) and no output file left behind.
#
# usage: test_cli.sh VAE_BINARY SHARED_DIR
set -u
VAE=$1
SHARED=$2
T=$(mktemp -d "${TMPDIR:-/tmp}/vae_cli.XXXXXX")
trap 'rm -rf "$T"' EXIT
export ASAN_OPTIONS=${ASAN_OPTIONS:-exitcode=99:detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1:exitcode=98}
pass=0
fail=0
ok() { pass=$((pass + 1)); echo "PASS $*"; }
ko() { fail=$((fail + 1)); echo "FAIL $*"; }

# expect_fail CODE NAME OUTPUT -- command...
expect_fail() {
    local want=$1 name=$2 out=$3
    shift 4
    "$@" >"$T/stdout" 2>"$T/stderr"
    local rc=$?
    local msg
    msg=$(head -c 300 "$T/stderr" | tr '\n' ' ')
    if [ $rc -ne "$want" ]; then
        ko "$name: exit $rc, expected $want ($msg)"
    elif grep -qE "AddressSanitizer|runtime error|LeakSanitizer" "$T/stderr"; then
        ko "$name: sanitizer report: $msg"
    elif ! grep -q "vae" "$T/stderr"; then
        ko "$name: no error message"
    elif [ -n "$out" ] && ls "$out"* >/dev/null 2>&1; then
        ko "$name: output file left behind: $(ls "$out"*)"
    else
        ok "$name: exit $rc: $msg"
    fi
}

expect_ok() {
    local name=$1
    shift 2
    if "$@" >"$T/stdout" 2>"$T/stderr"; then
        if grep -qE "AddressSanitizer|runtime error|LeakSanitizer" "$T/stderr"; then
            ko "$name: sanitizer report"
        else
            ok "$name"
        fi
    else
        ko "$name: exit $? $(head -c 400 "$T/stderr")"
    fi
}

python3 "$(dirname "$0")/make_bad_inputs.py" "$SHARED" "$T" || { echo "cannot make inputs"; exit 1; }
FX=$SHARED/fixtures
M=$FX/wan21_tiny.safetensors
IO=$FX/wan21_tiny.io.safetensors

# ---- good input ----
expect_ok "info wan21_tiny" -- "$VAE" info "$M"
grep -q "wan2.1" "$T/stdout" && ok "info names the architecture" || ko "info output: $(cat "$T/stdout")"
expect_ok "info diffusers names" -- "$VAE" info "$FX/wan21_tiny.diffusers.safetensors"
expect_ok "info taef2 encoder .pth" -- "$VAE" info "$SHARED/models/taef2_encoder.pth"
expect_ok "info latent .pth" -- "$VAE" info "$SHARED/media/wan21_latents_1x16x16x40x64.pth"
grep -q "1,16,16,40,64" "$T/stdout" && ok "latent .pth shape" || ko "latent .pth: $(cat "$T/stdout")"
expect_ok "decode" -- "$VAE" decode -m "$M" -i "$IO:dec_t3.latent" -o "$T/dec.safetensors"
expect_ok "decode matches the fixture" -- "$VAE" compare "$T/dec.safetensors:video" "$IO:dec_t3.video" --tol 1e-4
expect_ok "encode" -- "$VAE" encode -m "$M" -i "$IO:enc_t9.video" -o "$T/enc.safetensors"
expect_ok "encode matches the fixture" -- "$VAE" compare "$T/enc.safetensors:latent" "$IO:enc_t9.latent" --tol 1e-4
expect_ok "decode in 16x16 tiles, nothing whole-video in host memory" -- "$VAE" decode -m "$M" -i "$IO:dec_t3.latent" -o "$T/dec_hm.safetensors" --tile 16x16 --host-memory 0
expect_ok "decode on a group of 2 cpu lanes, 16x16 tiles" -- "$VAE" decode -m "$M" -i "$IO:dec_t3.latent" -o "$T/dec2.safetensors" --devices 0,1 --tile 16x16 -v
grep -q "shared by 2 devices" "$T/stderr" && ok "  the plan shares the tiles" || ko "  plan: $(grep plan: "$T/stderr")"
expect_ok "  matches the fixture" -- "$VAE" compare "$T/dec2.safetensors:video" "$IO:dec_t3.video" --tol 1e-4
expect_ok "synth wan2.1" -- "$VAE" synth wan2.1 -o "$T/synth.safetensors" --config '{"dim":8}'
expect_ok "synth model decodes" -- "$VAE" decode -m "$T/synth.safetensors" -i "$T/latent_ok.safetensors" -o "$T/s.safetensors"
# SeedVR2 GroupNorm groups are not in plain checkpoints: metadata or --config supplies them
expect_ok "synth seedvr2 tiny" -- "$VAE" synth seedvr2 -o "$T/s8.safetensors" --config '{"block_out_channels":[32,32,64,64],"norm_num_groups":8}'
python3 -c "
import json, struct, sys
d = open(sys.argv[1], 'rb').read(); n = struct.unpack('<Q', d[:8])[0]
h = json.loads(d[8:8 + n]); h.pop('__metadata__')
hb = json.dumps(h).encode(); hb += b' ' * ((8 - len(hb) % 8) % 8)
open(sys.argv[2], 'wb').write(struct.pack('<Q', len(hb)) + hb + d[8 + n:])" "$T/s8.safetensors" "$T/s8_plain.safetensors"
SIO=$FX/seedvr2_tiny.io.safetensors
expect_ok "decode with groups from metadata" -- "$VAE" decode -m "$T/s8.safetensors" -i "$SIO:dec_t3.latent" -o "$T/s8a.safetensors"
expect_ok "  matches the fixture" -- "$VAE" compare "$T/s8a.safetensors:video" "$SIO:dec_t3.video" --tol 1e-4
expect_ok "decode with groups from --config" -- "$VAE" decode -m "$T/s8_plain.safetensors" --config '{"norm_num_groups":8}' -i "$SIO:dec_t3.latent" -o "$T/s8b.safetensors"
expect_ok "  matches the fixture" -- "$VAE" compare "$T/s8b.safetensors:video" "$SIO:dec_t3.video" --tol 1e-4
expect_ok "roundtrip taef2" -- "$VAE" roundtrip -e "$SHARED/models/taef2_encoder.pth" -d "$SHARED/models/taef2_decoder.pth" -i "$SHARED/media/astronaut_256.png" -o "$T/rt.png"
psnr=$(sed -n 's/.*PSNR \([0-9.]*\) dB.*/\1/p' "$T/stdout")
awk -v p="${psnr:-0}" 'BEGIN { exit !(p >= 29) }' && ok "taef2 PSNR $psnr dB >= 29" || ko "taef2 PSNR '$psnr'"
expect_ok "compare of identical tensors" -- "$VAE" compare "$IO:dec_t3.video" "$IO:dec_t3.video" --tol 0
expect_fail 1 "compare fails above tolerance" "" -- "$VAE" compare "$T/dec.safetensors:video" "$IO:dec_t6_odd.video" --tol 1e-4

# ---- bad checkpoints ----
for f in trunc0 trunc1 trunc2 trunc3 trunc4 empty badjson hugeheader; do
    expect_fail 4 "model $f.safetensors" "$T/o_$f" -- "$VAE" decode -m "$T/$f.safetensors" -i "$T/latent_ok.safetensors" -o "$T/o_$f.safetensors"
done
for f in trunc0 trunc1 trunc2 corrupt; do
    expect_fail 4 "model $f.pth" "$T/o_$f" -- "$VAE" decode -m "$T/$f.pth" -i "$T/latent_ok.safetensors" -o "$T/o_$f.safetensors"
done
expect_fail 4 "model notamodel.gguf" "$T/o_gguf" -- "$VAE" decode -m "$T/notamodel.gguf" -i "$T/latent_ok.safetensors" -o "$T/o_gguf.safetensors"
expect_fail 4 "model missing key" "$T/o_mk" -- "$VAE" decode -m "$T/missing_key.safetensors" -i "$T/latent_ok.safetensors" -o "$T/o_mk.safetensors"
grep -q "decoder.head.2.bias" "$T/stderr" && ok "missing key is named" || ko "missing key not named: $(cat "$T/stderr")"
expect_fail 4 "model unexpected key" "$T/o_ek" -- "$VAE" decode -m "$T/extra_key.safetensors" -i "$T/latent_ok.safetensors" -o "$T/o_ek.safetensors"
grep -q "decoder.extra.weight" "$T/stderr" && ok "unexpected key is named" || ko "unexpected key not named"
expect_fail 4 "model wrong shape" "$T/o_ws" -- "$VAE" decode -m "$T/wrong_shape.safetensors" -i "$T/latent_ok.safetensors" -o "$T/o_ws.safetensors"
expect_fail 4 "model NaN weight" "$T/o_nw" -- "$VAE" decode -m "$T/nan_weight.safetensors" -i "$T/latent_ok.safetensors" -o "$T/o_nw.safetensors"
expect_fail 4 "model integer weight" "$T/o_iw" -- "$VAE" decode -m "$T/int_weight.safetensors" -i "$T/latent_ok.safetensors" -o "$T/o_iw.safetensors"
expect_fail 3 "model does not exist" "$T/o_ne" -- "$VAE" decode -m "$T/nothere.safetensors" -i "$T/latent_ok.safetensors" -o "$T/o_ne.safetensors"

# ---- bad inputs ----
expect_fail 4 "latent with 15 channels" "$T/o_15" -- "$VAE" decode -m "$M" -i "$T/latent_15ch.safetensors" -o "$T/o_15.safetensors"
grep -q "15" "$T/stderr" && ok "channel count is named" || ko "channel count not named"
expect_fail 4 "latent with NaN" "$T/o_nan" -- "$VAE" decode -m "$M" -i "$T/latent_nan.safetensors" -o "$T/o_nan.safetensors"
expect_fail 4 "latent with Inf" "$T/o_inf" -- "$VAE" decode -m "$M" -i "$T/latent_inf.safetensors" -o "$T/o_inf.safetensors"
expect_fail 4 "latent of integers" "$T/o_i64" -- "$VAE" decode -m "$M" -i "$T/latent_i64.safetensors" -o "$T/o_i64.safetensors"
expect_fail 4 "latent of rank 3" "$T/o_r3" -- "$VAE" decode -m "$M" -i "$T/latent_rank3.safetensors" -o "$T/o_r3.safetensors"
expect_fail 4 "file with two tensors and no key" "$T/o_two" -- "$VAE" decode -m "$M" -i "$T/latent_two.safetensors" -o "$T/o_two.safetensors"
expect_fail 4 "key not in file" "$T/o_key" -- "$VAE" decode -m "$M" -i "$T/latent_two.safetensors:nope" -o "$T/o_key.safetensors"
expect_fail 4 "video size not a multiple of 8" "$T/o_odd" -- "$VAE" encode -m "$M" -i "$T/video_odd.safetensors" -o "$T/o_odd.safetensors"
expect_fail 4 "truncated input" "$T/o_ti" -- "$VAE" decode -m "$M" -i "$T/trunc3.safetensors" -o "$T/o_ti.safetensors"
expect_fail 3 "unwritable output" "" -- "$VAE" decode -m "$M" -i "$T/latent_ok.safetensors" -o "/nonexistent_dir/out.safetensors"
expect_fail 2 "unknown option" "" -- "$VAE" decode -m "$M" --bogus
expect_fail 2 "missing output" "" -- "$VAE" decode -m "$M" -i "$T/latent_ok.safetensors"
expect_fail 2 "bad device" "$T/o_dev" -- "$VAE" decode -m "$M" -i "$T/latent_ok.safetensors" -o "$T/o_dev.safetensors" --device tpu
expect_fail 2 "devices negative" "$T/o_dv" -- "$VAE" decode -m "$M" -i "$T/latent_ok.safetensors" -o "$T/o_dv.safetensors" --devices 0,-1
expect_fail 2 "host memory not a size" "$T/o_hm" -- "$VAE" decode -m "$M" -i "$T/latent_ok.safetensors" -o "$T/o_hm.safetensors" --host-memory 12q
expect_fail 2 "host memory beyond the range" "$T/o_hm2" -- "$VAE" decode -m "$M" -i "$T/latent_ok.safetensors" -o "$T/o_hm2.safetensors" --host-memory 100T
expect_fail 2 "devices not a list" "$T/o_dl" -- "$VAE" decode -m "$M" -i "$T/latent_ok.safetensors" -o "$T/o_dl.safetensors" --devices 0,x
expect_fail 2 "devices ending in a comma" "$T/o_dc" -- "$VAE" decode -m "$M" -i "$T/latent_ok.safetensors" -o "$T/o_dc.safetensors" --devices 0,
expect_fail 2 "synth unknown arch" "$T/o_sa" -- "$VAE" synth wan9 -o "$T/o_sa.safetensors"
expect_fail 2 "synth bad JSON" "$T/o_sj" -- "$VAE" synth wan2.1 -o "$T/o_sj.safetensors" --config '{dim:'
expect_fail 2 "unknown command" "" -- "$VAE" frobnicate
expect_fail 5 "encode with a decoder-only file" "$T/o_do" -- "$VAE" encode -m "$SHARED/models/taef2_decoder.pth" -i "$SHARED/media/astronaut_256.png" -o "$T/o_do.safetensors"

# a device group's plan (CPU lanes; --plan-only runs nothing): the tiles share the upsampling
# stages, not only a last op without work (eb380bd's planner ran Wan2.2 on one GPU that way)
for w in "wan2.1 --frames 81 --size 720x1280" "wan2.2 --frames 121 --size 704x1280"; do
    for d in 0,1 0,1,2,3; do
        plan=$("$VAE" bench $w --device cpu --dtype fp32 --devices $d --max-memory 100G \
            --plan-only 2>&1 | grep "tiled in steps")
        ops=$(echo "$plan" | grep -oE "ops [0-9]+\.\.[0-9]+ tiled" | grep -oE "[0-9]+" | tr '\n' ' ')
        set -- $ops
        if [ $# -eq 2 ] && [ $(($2 - $1)) -gt 20 ] && echo "$plan" | grep -q "shared by"; then
            ok "group plan $w on $d: ops $1..$2 tiled"
        else
            ko "group plan $w on $d: ${plan:-no tiled plan}"
        fi
    done
done

# ---- --dist: one rank of a group of processes (torchrun / mpirun variables) ----
DIST_IN=(-m "$M" -i "$IO:dec_t3.latent")
NOLAUNCHER=(env -u LOCAL_RANK -u LOCAL_WORLD_SIZE -u MASTER_ADDR -u MASTER_PORT -u VAE_RDZV_PORT
            -u OMPI_COMM_WORLD_RANK -u OMPI_COMM_WORLD_SIZE -u PMI_RANK -u PMI_SIZE)
expect_fail 2 "--dist on the cpu" "$T/o_dc" -- "${NOLAUNCHER[@]}" RANK=0 WORLD_SIZE=2 LOCAL_RANK=0 \
    "$VAE" decode "${DIST_IN[@]}" -o "$T/o_dc.safetensors" --device cpu --dist
grep -q -- "--dist needs --device cuda" "$T/stderr" && ok "  names --dist and why" || ko "  message: $(cat "$T/stderr")"
expect_fail 2 "--dist with RANK=abc" "$T/o_dr" -- "${NOLAUNCHER[@]}" RANK=abc WORLD_SIZE=2 \
    "$VAE" encode -m "$M" -i "$IO:enc_t9.video" -o "$T/o_dr.safetensors" --device cuda --dist
grep -q "RANK=abc" "$T/stderr" && ok "  names RANK" || ko "  message: $(cat "$T/stderr")"
expect_fail 2 "--dist with --devices" "$T/o_dd" -- "${NOLAUNCHER[@]}" RANK=0 WORLD_SIZE=2 \
    "$VAE" decode "${DIST_IN[@]}" -o "$T/o_dd.safetensors" --devices 0,1 --dist
expect_fail 2 "--dist without a launcher" "$T/o_dn" -- "${NOLAUNCHER[@]}" -u RANK -u WORLD_SIZE \
    "$VAE" decode "${DIST_IN[@]}" -o "$T/o_dn.safetensors" --device cuda --dist
expect_fail 2 "bench --dist on the cpu" "" -- "${NOLAUNCHER[@]}" RANK=0 WORLD_SIZE=2 LOCAL_RANK=0 \
    "$VAE" bench wan2.1 --device cpu --dist --plan-only
# rank 1 with no rank 0 to reach gives up after VAE_RDZV_TIMEOUT, its message marked as rank 1's
# (the rendezvous comes before any GPU work: this runs on any build)
RDZV_PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
expect_fail 1 "--dist rank 1 without rank 0" "$T/o_d1" -- "${NOLAUNCHER[@]}" RANK=1 WORLD_SIZE=2 \
    LOCAL_RANK=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=$((RDZV_PORT - 1)) VAE_RDZV_TIMEOUT=1 \
    "$VAE" decode "${DIST_IN[@]}" -o "$T/o_d1.safetensors" --device cuda --dist
grep -q "^rank 1: vae: --dist: cannot reach rank 0 at 127.0.0.1:$RDZV_PORT within 1 s" "$T/stderr" \
    && ok "  rank 1 says so, naming the address" || ko "  message: $(cat "$T/stderr")"
# a group of one is a plain run, on any device
expect_ok "--dist with WORLD_SIZE=1 on the cpu" -- "${NOLAUNCHER[@]}" RANK=0 WORLD_SIZE=1 \
    "$VAE" decode "${DIST_IN[@]}" -o "$T/dec_w1.safetensors" --device cpu --dist
expect_ok "  the same output as without --dist" -- "$VAE" compare "$T/dec_w1.safetensors:video" "$T/dec.safetensors:video" --tol 0
expect_ok "bench --dist with WORLD_SIZE=1" -- "${NOLAUNCHER[@]}" RANK=0 WORLD_SIZE=1 "$VAE" bench wan2.1 \
    --config '{"dim":8}' --frames 1 --size 16x16 --runs 1 --warmup 0 --device cpu --dtype fp32 --dist
sed -n 's/^BENCH //p' "$T/stdout" | python3 -c 'import json, sys; assert json.load(sys.stdin)["ranks"] == 1' \
    && ok "  BENCH json with \"ranks\": 1" || ko "  BENCH line: $(grep BENCH "$T/stdout")"

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
