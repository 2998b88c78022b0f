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
# TAEHV (taew2_1 layout): synthesised, decoded fully and as a time preview, both equal to the fixture
HV_IO=$FX/taehv_w21.io.safetensors
expect_ok "synth taehv" -- "$VAE" synth taehv -o "$T/hv.safetensors"
expect_ok "taehv decode" -- "$VAE" decode -m "$T/hv.safetensors" -i "$HV_IO:dec_t3.latent" -o "$T/hv_dec.safetensors"
expect_ok "  matches the fixture" -- "$VAE" compare "$T/hv_dec.safetensors:video" "$HV_IO:dec_t3.video" --tol 1e-4
expect_ok "taehv decode --preview time" -- "$VAE" decode -m "$T/hv.safetensors" -i "$HV_IO:dec_t3_preview_t.latent" -o "$T/hv_prev.safetensors" --preview time
expect_ok "  matches the fixture" -- "$VAE" compare "$T/hv_prev.safetensors:video" "$HV_IO:dec_t3_preview_t.video" --tol 1e-4
expect_fail 2 "--preview of an unknown kind" "$T/o_pv" -- "$VAE" decode -m "$T/hv.safetensors" -i "$HV_IO:dec_t3.latent" -o "$T/o_pv.safetensors" --preview fast
expect_fail 5 "--preview of a model without previews" "$T/o_pw" -- "$VAE" decode -m "$M" -i "$IO:dec_t3.latent" -o "$T/o_pw.safetensors" --preview time
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

# ---- options: the library checks them (the CLI only parses), its words mapped to the flags ----
opt_case() { # NAME "what the message says" -- flags...
    local name=$1 want=$2
    shift 3
    expect_fail 2 "$name" "$T/o_opt" -- "$VAE" decode -m "$M" -i "$IO:dec_t3.latent" \
        -o "$T/o_opt.safetensors" "$@"
    grep -qF -- "$want" "$T/stderr" && ok "  says: $want" || ko "  $name: $(head -c 300 "$T/stderr")"
}
opt_case "blend sizes without blend" "--tile-size and --tile-overlap are for --tile-mode blend" -- --tile-size 64
opt_case "forced tiles with blend" "a forced tile size (--tile) goes with --tile-mode auto" -- --tile 16x16 --tile-mode blend
opt_case "overlap over half the tile" "--tile-overlap 40 px is more than half the tile (--tile-size 64 px)" -- --tile-mode blend --tile-size 64 --tile-overlap 40
opt_case "blend tile under 16 px" "--tile-size 8 px: blended tiles are at least 16 px" -- --tile-mode blend --tile-size 8
opt_case "a size that is not one" "--max-memory: 'lots' is not a size" -- --max-memory lots
expect_ok "a size as people write it (1.5GiB)" -- "$VAE" decode -m "$M" -i "$IO:dec_t3.latent" -o "$T/o_gib.safetensors" --max-memory 1.5GiB

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

# ---- signals: SIGINT, SIGTERM, SIGHUP and SIGPIPE stop every plan within 1 s, exit 130, and leave
# no file of any output kind ----
# a synthetic Wan2.1 (dim 8) and 1001-frame latents: their tiled decodes take a minute or more, so
# each signal lands in the middle of the run (tile-major: no frame out before the last tile)
SIG_M=$T/sig_w21.safetensors
"$VAE" synth wan2.1 -o "$SIG_M" --config '{"dim": 8, "dec_dim": 8}' >/dev/null 2>&1 || ko "synth for the signal cases"
python3 -c '
import math, struct, sys
def npy(path, shape):
    n = 1
    for s in shape:
        n *= s
    h = "{\"descr\": \"<f4\", \"fortran_order\": False, \"shape\": (%s), }" % ", ".join(map(str, shape))
    h = h.replace("\"", "\x27")
    h += " " * ((64 - (10 + len(h) + 1) % 64) % 64) + "\n"
    data = struct.pack("<%df" % n, *[0.5 * math.sin(0.37 * i) for i in range(n)])
    open(path, "wb").write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(h)) + h.encode() + data)
npy(sys.argv[1], (1, 16, 251, 8, 8))
npy(sys.argv[2], (1, 16, 251, 8, 32))
npy(sys.argv[3], (1, 16, 1, 8, 8))
npy(sys.argv[4], (1, 16, 6, 8, 8))' "$T/sig_1001.npy" "$T/sig_wide.npy" "$T/sig_short.npy" "$T/sig_21.npy"
HAVE_MEDIA=0
"$VAE" --info 2>/dev/null | grep -q "^media: *FFmpeg" && HAVE_MEDIA=1

# sig_case NAME SIGNAL OUTPUT [ENV=VALUE ...] -- decode options: the decode into its own folder,
# the signal 1 s after it started, then exit 130 within 1 s and an empty folder
sig_case() {
    local name=$1 sig=$2 out=$3
    shift 3
    local envs=()
    while [ "$1" != "--" ]; do envs+=("$1"); shift; done
    shift
    local dir=$T/sig_$name
    mkdir -p "$dir"
    env ${envs[@]+"${envs[@]}"} "$VAE" decode -m "$SIG_M" -o "$dir/$out" "$@" 2>"$T/sig.err" &
    local pid=$! t0 ms rc
    sleep 1
    t0=$(date +%s%N)
    kill -"$sig" $pid
    for _ in $(seq 1 30); do kill -0 $pid 2>/dev/null || break; sleep 0.05; done
    ms=$((($(date +%s%N) - t0) / 1000000))
    kill -0 $pid 2>/dev/null && kill -KILL $pid
    wait $pid
    rc=$?
    if [ $rc -eq 130 ] && [ $ms -lt 1000 ] && [ -z "$(ls -A "$dir")" ]; then
        ok "SIG$sig during $name into $out: exit 130 after $ms ms, no file"
    else
        ko "SIG$sig during $name into $out: exit $rc after $ms ms, left '$(ls -A "$dir" | tr '\n' ' ')': $(tail -c 300 "$T/sig.err")"
    fi
}
TILES=(-i "$T/sig_1001.npy" --tile 32x32)
sig_case tiles INT out.npy -- "${TILES[@]}"
sig_case tiles TERM out.safetensors -- "${TILES[@]}"
sig_case tiles HUP out.png -- "${TILES[@]}"
sig_case strips TERM out.npy VAE_PLAN_STRIPS=2 -- -i "$T/sig_wide.npy"
sig_case blend HUP out.npy -- -i "$T/sig_1001.npy" --tile-mode blend --tile-size 32 --tile-overlap 8
sig_case group PIPE out.npy -- "${TILES[@]}" --devices 0,1
sig_case tiles_spilled PIPE out.npy VAE_EXEC_HOST_MB=0 -- "${TILES[@]}"
if [ $HAVE_MEDIA -eq 1 ]; then
    sig_case tiles PIPE 'f%05d.png' -- "${TILES[@]}"
    sig_case tiles INT out.mkv -- "${TILES[@]}"
    sig_case whole_frames TERM out.mp4 -- -i "$T/sig_1001.npy"
    # a second Ctrl-C at once, while a PNG sequence's frames come out: nothing left either
    mkdir -p "$T/sig_twice"
    "$VAE" decode -m "$SIG_M" -i "$T/sig_1001.npy" -o "$T/sig_twice/f%05d.png" 2>"$T/sig.err" &
    pid=$!
    for _ in $(seq 1 100); do [ -n "$(find "$T/sig_twice" -name '*.png')" ] && break; sleep 0.05; done
    kill -INT $pid
    sleep 0.01 # (two signals sent at once are one)
    kill -INT $pid
    wait $pid
    rc=$?
    [ $rc -eq 130 ] && [ -z "$(ls -A "$T/sig_twice")" ] && ok "two SIGINTs during a PNG sequence: exit 130, no file" \
        || ko "two SIGINTs during a PNG sequence: exit $rc, left '$(ls -A "$T/sig_twice")'"
    # stderr into a pipe whose reader has gone: the next log line raises SIGPIPE, the decode stops
    # and removes its video (it used to die there with its temporary file left)
    mkdir -p "$T/sig_pipe"
    "$VAE" -v decode -m "$SIG_M" -i "$T/sig_21.npy" -o "$T/sig_pipe/out.mp4" 2>&1 | grep -m1 -q "plan:"
    rc=${PIPESTATUS[0]}
    [ $rc -eq 130 ] && [ -z "$(ls -A "$T/sig_pipe")" ] && ok "stderr into a closed pipe: exit 130, no file" \
        || ko "stderr into a closed pipe: exit $rc, left '$(ls -A "$T/sig_pipe")'"
fi

# ---- temporary files: unique names made with O_EXCL, spills in TMPDIR ----
# a link planted where the old fixed temporary name of a PNG output was must not be written
mkdir -p "$T/tmpl"
echo keep >"$T/tmpl/victim"
ln -s "$T/tmpl/victim" "$T/tmpl/out.png.tmp.png"
expect_ok "PNG output next to a planted link" -- "$VAE" decode -m "$SIG_M" -i "$T/sig_short.npy" -o "$T/tmpl/out.png"
[ "$(cat "$T/tmpl/victim")" = keep ] && ok "  the link's target is untouched" || ko "  the link's target was overwritten"
[ "$(ls -A "$T/tmpl" | tr '\n' ' ')" = "out.png out.png.tmp.png victim " ] && ok "  no temporary left" \
    || ko "  files: $(ls -A "$T/tmpl" | tr '\n' ' ')"
# a spilled output goes to TMPDIR: an unusable one is an error, a usable one is left empty
expect_fail 3 "spill into a missing TMPDIR" "$T/tmpd_out" -- env TMPDIR="$T/no_such_dir" VAE_EXEC_HOST_MB=0 \
    "$VAE" decode -m "$SIG_M" -i "$T/sig_short.npy" -o "$T/tmpd_out.npy" --tile 32x32
grep -q "temporary file" "$T/stderr" && ok "  says it cannot make the temporary file" || ko "  message: $(cat "$T/stderr")"
mkdir -p "$T/tmpd"
expect_ok "spill into TMPDIR" -- env TMPDIR="$T/tmpd" VAE_EXEC_HOST_MB=0 "$VAE" -v decode -m "$SIG_M" \
    -i "$T/sig_short.npy" -o "$T/tmpd_out.npy" --tile 32x32
grep -q "in a temporary file" "$T/stderr" && [ -z "$(ls -A "$T/tmpd")" ] && ok "  spilled, nothing left in TMPDIR" \
    || ko "  spill: $(grep -c "temporary file" "$T/stderr") lines, TMPDIR: $(ls -A "$T/tmpd")"

# ---- planning: bench --plan-only without the input, in bounded time, the engine's limits ----
# Huge sizes planned within 2 GiB of address space (not under ASan, whose shadow memory needs
# more) and in well under 2 s (10 s under ASan): --plan-only used to allocate and fill the whole
# input first (1.4 TB for the first one), and the planner stepped over every row of every tile's
# crop at every op (6 s there). Sizes beyond what the engine indexes (a frame an op call takes
# whole over INT32_MAX / 2 pixels, a tile grid finer than 96 a side) are refused at once, naming
# the argument and the limit (a tile grid that fine used to cover part of the frame, silently).
PLAN_CFG='{"dim": 8, "z_dim": 16}' # wan2.1's layers, narrow: synthetic weights of a few MB
plan_asan=0
grep -qa "__asan_init" "$VAE" && plan_asan=1
# plan_case NAME WANT_RC PATTERN -- bench arguments...
plan_case() {
    local name=$1 want=$2 pat=$3 t0 ms rc limit=2000
    shift 4
    [ $plan_asan -eq 1 ] && limit=10000
    t0=$(date +%s%N)
    (
        [ $plan_asan -eq 1 ] || ulimit -v 2097152
        exec "$VAE" bench wan2.1 --config "$PLAN_CFG" --device cpu --dtype fp32 --plan-only "$@"
    ) >"$T/stdout" 2>"$T/stderr"
    rc=$?
    ms=$((($(date +%s%N) - t0) / 1000000))
    local msg
    msg=$(head -c 400 "$T/stderr" | tr '\n' ' ')
    if grep -qE "AddressSanitizer|runtime error|LeakSanitizer" "$T/stderr"; then
        ko "$name: sanitizer report: $msg"
    elif [ $rc -ne "$want" ] || ! cat "$T/stdout" "$T/stderr" | grep -qE -- "$pat"; then
        ko "$name: exit $rc (expected $want), after $ms ms: $(head -c 300 "$T/stdout") $msg"
    elif [ $ms -ge $limit ]; then
        ko "$name: $ms ms (at most $limit)"
    else
        ok "$name: exit $rc after $ms ms"
    fi
}
plan_case "--plan-only of 81 frames of 262080x262080" 0 "^plan: peak .* tiles" -- \
    --frames 81 --size 262080x262080 --max-memory 100000G
plan_case "--plan-only of 81 frames of 131072x131072, over the budget" 6 "exact floor" -- \
    --frames 81 --size 131072x131072 --max-memory 8G
plan_case "a latent frame over what an op call takes whole" 4 \
    "decode input latent 21x65536x65536: .*more than the 1073741823 pixels" -- \
    --frames 81 --size 524288x524288 --max-memory 100000G
plan_case "whole frames over what an op call takes (--tile-mode none)" 4 \
    "more than the 1073741823 pixels .*--tile-mode auto" -- \
    --frames 5 --size 32768x32768 --max-memory 100000G --tile-mode none
plan_case "exact tiles finer than 96 a side" 2 "tiles of 256x256 px \(--tile\) .* at least" -- \
    --frames 81 --size 131072x131072 --max-memory 100000G --tile 256x256
plan_case "blended tiles finer than 96 a side" 2 "\(--tile-size\) .*more than 96 tiles" -- \
    --frames 81 --size 131072x131072 --max-memory 100000G --tile-mode blend --tile-size 512
plan_case "blended tiles without a size: even tiles the backends index" 0 " 5 x [5-7] tiles" -- \
    --frames 81 --size 131072x131072 --max-memory 100000G --tile-mode blend

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
