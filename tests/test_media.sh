#!/usr/bin/env bash
# test_media.sh -- real media in, real media out, through the `vae` command.
#
# usage: tests/test_media.sh PATH/TO/vae SHARED_DIR
#
# Needs a vae built with FFmpeg (media I/O ON) and the ffmpeg/ffprobe command-line tools. Round
# trips on the shipped clips (taef2 on Big Buck Bunny, PSNR >= 25 dB), the synthetic Wan2.1 /
# Wan2.2 / SeedVR2 models end to end with ffprobe checks, the shipped .pth latent, latent spaces,
# ComfyUI latents, PNG sequences and folders, bad inputs and outputs, Ctrl-C in the middle of a
# decode, and byte-identical outputs. Workloads are kept small for a 2-core CPU.
# Prints one line per check and "N passed, M failed"; exits 1 when anything failed.
set -u

VAE=${1:?usage: test_media.sh VAE_BINARY SHARED_DIR}
SHARED=${2:?usage: test_media.sh VAE_BINARY SHARED_DIR}
MEDIA=$SHARED/media
MODELS=$SHARED/models
T=$(mktemp -d /tmp/vae_media_test.XXXXXX)
trap 'rm -rf "$T"' EXIT
passed=0
failed=0
# sanitizer builds: libx265 leaks a few bytes per encoder (x265_param_parse/x265_copy_params)
printf 'leak:libx265\n' >"$T/lsan.supp"
export LSAN_OPTIONS="suppressions=$T/lsan.supp${LSAN_OPTIONS:+:$LSAN_OPTIONS}"

ok() { echo "PASS $*"; passed=$((passed + 1)); }
bad() { echo "FAIL $*"; failed=$((failed + 1)); }
check() { # check NAME COMMAND...: passes when the command succeeds
    local name=$1
    shift
    if "$@" >"$T/last.out" 2>"$T/last.err"; then ok "$name"; else
        bad "$name"
        sed 's/^/    /' "$T/last.err" | tail -5
    fi
}
# expect_fail NAME OUTPUT_FILE COMMAND...: non-zero exit, a "vae" message on stderr, no OUTPUT left
expect_fail() {
    local name=$1 out=$2
    shift 2
    "$@" >"$T/last.out" 2>"$T/last.err"
    local rc=$?
    local left
    left=$(ls "$out" "${out%.*}".tmp.* 2>/dev/null | head -1)
    if [ $rc -ne 0 ] && [ $rc -ne 139 ] && [ $rc -ne 134 ] && grep -q "vae" "$T/last.err" && [ -z "$left" ]; then
        ok "$name (exit $rc: $(head -c 160 "$T/last.err" | tr '\n' ' '))"
    else
        bad "$name (exit $rc, left: '$left')"
        sed 's/^/    /' "$T/last.err" | tail -3
    fi
}
probe() { # probe FILE ENTRIES -> "k=v" lines of the first video stream
    ffprobe -v error -count_frames -select_streams v:0 -show_entries "stream=$2" -of default=nw=1 "$1"
}
# probe_is NAME FILE "codec_name=h264 width=64 ..." (every k=v must appear)
probe_is() {
    local name=$1 file=$2 want=$3 got keys
    keys=$(echo "$want" | tr ' ' '\n' | cut -d= -f1 | paste -sd, -)
    got=$(probe "$file" "$keys" 2>&1)
    for kv in $want; do
        if ! echo "$got" | grep -qx "$kv"; then
            bad "$name: $kv not in: $(echo $got)"
            return
        fi
    done
    ok "$name ($want)"
}

if ! command -v ffprobe >/dev/null || ! command -v ffmpeg >/dev/null; then
    echo "FAIL ffmpeg/ffprobe command-line tools are not installed"
    echo "0 passed, 1 failed"
    exit 1
fi
if ! "$VAE" --info | grep -q '^media: *FFmpeg'; then
    echo "FAIL this vae has no media I/O (configure with FFmpeg dev packages, -DVAE_MEDIA=ON)"
    echo "0 passed, 1 failed"
    exit 1
fi

# ---- system and file info ------------------------------------------------------------------------
"$VAE" --info >"$T/info.txt" 2>&1
if grep -q "^vae [0-9]" "$T/info.txt" && grep -q "cpu threads" "$T/info.txt" && grep -q "cuda" "$T/info.txt"; then
    ok "vae --info: version, CPU threads, CUDA"
else bad "vae --info"; fi
"$VAE" info "$MEDIA/bigbuckbunny_720p.mp4" >"$T/i.txt" 2>&1
if grep -q "1280x720" "$T/i.txt" && grep -q "frames: *132" "$T/i.txt" && grep -q "25.000" "$T/i.txt" &&
    grep -q "codec: *h264" "$T/i.txt" && grep -q "yuv420p" "$T/i.txt" && grep -q "colour:" "$T/i.txt"; then
    ok "vae info VIDEO: container, codec, size, fps, frames, pixel format, colour"
else bad "vae info VIDEO: $(cat "$T/i.txt")"; fi
if "$VAE" info "$MEDIA/wan21_latents_1x16x16x40x64.pth" 2>&1 | grep -q "\[1,16,16,40,64\]"; then
    ok "vae info LATENT.pth: shape"
else bad "vae info LATENT.pth"; fi
for c in encode decode roundtrip-video; do
    if "$VAE" $c --help | grep -q "example"; then ok "vae $c --help has examples"; else bad "vae $c --help"; fi
done

# ---- taef2 on Big Buck Bunny: PSNR >= 25 dB ------------------------------------------------------
if [ -f "$MODELS/taef2_encoder.pth" ]; then
    "$VAE" roundtrip-video -e "$MODELS/taef2_encoder.pth" -d "$MODELS/taef2_decoder.pth" \
        -i "$MEDIA/bigbuckbunny_720p.mp4" --frames 9 --size 320x184 -o "$T/bbb.mp4" >"$T/rt.txt" 2>"$T/rt.err"
    psnr=$(grep -o 'PSNR [0-9.]*' "$T/rt.txt" | head -1 | cut -d' ' -f2)
    if [ -n "$psnr" ] && awk "BEGIN{exit !($psnr >= 25)}"; then
        ok "taef2 roundtrip-video Big Buck Bunny 9 frames 320x184: PSNR $psnr dB >= 25"
    else bad "taef2 roundtrip-video PSNR '$psnr': $(cat "$T/rt.txt" "$T/rt.err" | tail -3)"; fi
    probe_is "roundtrip-video output" "$T/bbb.mp4" \
        "codec_name=h264 width=320 height=184 r_frame_rate=25/1 nb_read_frames=9 pix_fmt=yuv420p color_space=bt709 color_transfer=bt709 color_primaries=bt709 color_range=tv"
    # FP8 (emulated) against fp32 on real frames: taef2 encode + decode of 9 Big Buck Bunny frames
    # (its convs are 2-D, no shape of the GPU's E4M3 kernels: VAE_FP8_SHAPES=wide lets the
    # emulation run 6 of them in E4M3, as the fixture tests; below 70 dB says it did).
    # VAE_TEST_QUICK (the sanitizer build): left to the release run, the same arithmetic
    [ -n "${VAE_TEST_QUICK:-}" ] && fp8_runs="" || fp8_runs="fp32 fp8"
    for d in $fp8_runs; do
        (export VAE_FP8_SHAPES=wide VAE_FP8_CONVS=6
            "$VAE" encode -q -m "$MODELS/taef2_encoder.pth" -i "$MEDIA/bigbuckbunny_720p.mp4" \
                --start 40 --frames 9 --size 320x184 --dtype $d -o "$T/bbb_$d.npy" &&
                "$VAE" decode -q -m "$MODELS/taef2_decoder.pth" -i "$T/bbb_$d.npy" --dtype $d \
                    -o "$T/bbb_out_$d.npy")
    done
    if [ -z "$fp8_runs" ]; then echo "SKIP taef2 fp8 vs fp32 (VAE_TEST_QUICK: the release run's)"
    elif "$VAE" compare "$T/bbb_out_fp8.npy" "$T/bbb_out_fp32.npy" --min-psnr 44 >"$T/fp8.txt" 2>&1 &&
        awk "BEGIN{exit !($(grep -o 'psnr [0-9.]*' "$T/fp8.txt" | cut -d' ' -f2) < 70)}"; then
        ok "taef2 fp8 (emulated) vs fp32 on Big Buck Bunny: $(grep -o 'psnr [0-9.]* dB' "$T/fp8.txt") (measured 48.2)"
    else bad "taef2 fp8 vs fp32: $(cat "$T/fp8.txt")"; fi
    # encode a video with an image model -> [1,32,T,h,w]; decode it back frame by frame
    check "taef2 encode video -> latent .npy" "$VAE" encode -q -m "$MODELS/taef2_encoder.pth" \
        -i "$MEDIA/bigbuckbunny_720p.mp4" --start 40 --frames 3 --size 128x72 --fit crop -o "$T/taef2.npy"
    check "taef2 decode .npy latent -> mp4" "$VAE" decode -q -m "$MODELS/taef2_decoder.pth" -i "$T/taef2.npy" -o "$T/taef2.mp4" --fps 25
    probe_is "taef2 frame-by-frame video" "$T/taef2.mp4" "width=128 height=72 nb_read_frames=3 r_frame_rate=25/1"
    # a JPEG image
    ffmpeg -v error -y -i "$MEDIA/coffee_192x288.png" -q:v 2 "$T/coffee.jpg"
    check "taef2 encode JPEG" "$VAE" encode -q -m "$MODELS/taef2_encoder.pth" -i "$T/coffee.jpg" -o "$T/coffee.safetensors"
    if "$VAE" info "$T/coffee.safetensors" 2>&1 | grep -q "latent .*\[1,32,24,36\]"; then
        ok "JPEG latent is [1,32,24,36] under 'latent'"
    else bad "JPEG latent shape"; fi
else
    bad "taef2 checkpoints missing in $MODELS"
fi

# ---- synthetic Wan2.1 / Wan2.2 / SeedVR2: clip -> latent -> mp4 ----------------------------------
"$VAE" synth wan2.1 -o "$T/w21.safetensors" --config '{"dim":8}' 2>/dev/null
"$VAE" synth wan2.2 -o "$T/w22.safetensors" --config '{"dim":8,"dec_dim":16}' 2>/dev/null
"$VAE" synth seedvr2 -o "$T/sv2.safetensors" --config '{"block_out_channels":[32,32,64,64],"norm_num_groups":8}' 2>/dev/null
for m in w21 w22 sv2; do
    if [ ! -f "$T/$m.safetensors" ]; then bad "vae synth $m"; continue; fi
    check "$m encode 5 frames of a real clip" "$VAE" encode -q -m "$T/$m.safetensors" \
        -i "$MEDIA/wan21_14b_t2v_832x480.mp4" --frames 5 --size 128x64 -o "$T/$m.lat.safetensors"
    check "$m decode -> mp4" "$VAE" decode -q -m "$T/$m.safetensors" -i "$T/$m.lat.safetensors" -o "$T/$m.mp4" --fps 16
    probe_is "$m video" "$T/$m.mp4" "codec_name=h264 width=128 height=64 r_frame_rate=16/1 nb_read_frames=5"
done
# frame count rule: 6 frames is not 1+4k
expect_fail "6 frames for a video model without --fit" "$T/x6.safetensors" \
    "$VAE" encode -m "$T/w21.safetensors" -i "$MEDIA/bikes_640x272.mp4" --frames 6 --size 64x32 -o "$T/x6.safetensors"
grep -q -- "--fit" "$T/last.err" && ok "the message names --fit" || bad "the message names --fit"
check "--fit pad: 6 frames -> 9, 64x27 -> 64x32" "$VAE" encode -q -m "$T/w21.safetensors" \
    -i "$MEDIA/bikes_640x272.mp4" --frames 6 --size 64x0 --fit pad -o "$T/pad.safetensors"
"$VAE" info "$T/pad.safetensors" 2>&1 | grep -q "\[1,16,3,4,8\]" && ok "--fit pad latent [1,16,3,4,8]" || bad "--fit pad latent shape"
check "--fit crop" "$VAE" encode -q -m "$T/w21.safetensors" -i "$MEDIA/bikes_640x272.mp4" --frames 6 --size 64x0 --fit crop -o "$T/crop.safetensors"
"$VAE" info "$T/crop.safetensors" 2>&1 | grep -q "\[1,16,2,3,8\]" && ok "--fit crop latent [1,16,2,3,8]" || bad "--fit crop latent shape"

# ---- the shipped real Wan2.1 latent (.pth, bf16) decodes directly ---------------------------------
check "decode the .pth latent (2 of 16 latent frames)" "$VAE" decode -q -m "$T/w21.safetensors" \
    -i "$MEDIA/wan21_latents_1x16x16x40x64.pth" --latent-frames 2 -o "$T/pth.mp4"
probe_is "the .pth latent video" "$T/pth.mp4" "width=512 height=320 nb_read_frames=5 r_frame_rate=16/1"

# ---- latent spaces, .npy, ComfyUI latents --------------------------------------------------------
check "encode --latent-space raw" "$VAE" encode -q -m "$T/w21.safetensors" -i "$MEDIA/bikes_640x272.mp4" \
    --frames 5 --size 64x32 --latent-space raw -o "$T/raw.safetensors"
check "encode (diffusion) -> .npy" "$VAE" encode -q -m "$T/w21.safetensors" -i "$MEDIA/bikes_640x272.mp4" \
    --frames 5 --size 64x32 -o "$T/dif.npy"
check "decode --latent-space raw" "$VAE" decode -q -m "$T/w21.safetensors" -i "$T/raw.safetensors" --latent-space raw -o "$T/from_raw.safetensors"
check "decode .npy (diffusion)" "$VAE" decode -q -m "$T/w21.safetensors" -i "$T/dif.npy" -o "$T/from_dif.safetensors"
check "raw and diffusion paths agree" "$VAE" compare "$T/from_raw.safetensors:video" "$T/from_dif.safetensors:video" --tol 1e-4
if command -v python3 >/dev/null; then
    # a ComfyUI "Save Latent" file: latent_tensor (raw VAE latents) + latent_format_version_0
    python3 - "$T/raw.safetensors" "$T/comfy.latent.safetensors" <<'EOF'
import json, struct, sys
src, dst = sys.argv[1], sys.argv[2]
b = open(src, "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
info = h["latent"]
s, e = info["data_offsets"]
data = b[8 + n + s:8 + n + e]
hdr = {"latent_tensor": {"dtype": "F32", "shape": info["shape"], "data_offsets": [0, len(data)]},
       "latent_format_version_0": {"dtype": "F32", "shape": [0], "data_offsets": [len(data), len(data)]}}
j = json.dumps(hdr).encode()
j += b" " * ((8 - len(j) % 8) % 8)
open(dst, "wb").write(struct.pack("<Q", len(j)) + j + data)
EOF
    check "decode a ComfyUI latent (auto: raw)" "$VAE" decode -q -m "$T/w21.safetensors" -i "$T/comfy.latent.safetensors" -o "$T/from_comfy.safetensors"
    check "ComfyUI latent decodes like the raw one" "$VAE" compare "$T/from_comfy.safetensors:video" "$T/from_raw.safetensors:video" --tol 1e-6
    "$VAE" info "$T/comfy.latent.safetensors" 2>&1 | grep -q "latent_tensor" && ok "vae info lists the ComfyUI tensors" || bad "vae info ComfyUI latent"
else
    echo "SKIP ComfyUI latent checks (no python3)"
fi

# ---- tensor outputs keep their names -------------------------------------------------------------
"$VAE" info "$T/from_dif.safetensors" 2>&1 | grep -q "video .*\[1,3,5,32,64\]" && ok "decode .safetensors writes 'video' [1,3,5,32,64]" || bad "decode .safetensors tensor name"
"$VAE" info "$T/raw.safetensors" 2>&1 | grep -q "latent .*\[1,16,2,4,8\]" && ok "encode .safetensors writes 'latent'" || bad "encode .safetensors tensor name"

# ---- codecs, bit depths, PNG sequences, folders --------------------------------------------------
check "h265 10-bit" "$VAE" decode -q -m "$T/w21.safetensors" -i "$T/dif.npy" -o "$T/h265.mp4" --codec h265 --bit-depth 10 --crf 28 --preset fast
probe_is "h265 10-bit stream" "$T/h265.mp4" "codec_name=hevc pix_fmt=yuv420p10le color_space=bt709 nb_read_frames=5"
check "ffv1 .mkv" "$VAE" decode -q -m "$T/w21.safetensors" -i "$T/dif.npy" -o "$T/ffv1.mkv"
probe_is "ffv1 stream" "$T/ffv1.mkv" "codec_name=ffv1 width=64 height=32 nb_read_frames=5"
mkdir -p "$T/seq"
check "PNG sequence output" "$VAE" decode -q -m "$T/w21.safetensors" -i "$T/dif.npy" -o "$T/seq/f%03d.png"
[ "$(ls "$T/seq" | wc -l)" = 5 ] && [ -f "$T/seq/f000.png" ] && [ -f "$T/seq/f004.png" ] && ok "5 PNG files f000..f004" || bad "PNG sequence files: $(ls "$T/seq")"
check "encode from a frame pattern" "$VAE" encode -q -m "$T/w21.safetensors" -i "$T/seq/f%03d.png" -o "$T/fromseq.safetensors"
check "encode from a folder" "$VAE" encode -q -m "$T/w21.safetensors" -i "$T/seq" -o "$T/fromdir.safetensors"
check "pattern and folder give the same latent" "$VAE" compare "$T/fromseq.safetensors" "$T/fromdir.safetensors" --tol 0
# lossless: ffv1 frames read back equal the PNG frames
check "encode from ffv1 .mkv" "$VAE" encode -q -m "$T/w21.safetensors" -i "$T/ffv1.mkv" -o "$T/fromffv1.safetensors"
check "FFV1 is lossless (same latent as from the PNGs)" "$VAE" compare "$T/fromffv1.safetensors" "$T/fromseq.safetensors" --tol 0

# ---- determinism ---------------------------------------------------------------------------------
for ext in mp4 mkv; do
    "$VAE" decode -q -m "$T/w21.safetensors" -i "$T/dif.npy" -o "$T/det1.$ext"
    "$VAE" decode -q -m "$T/w21.safetensors" -i "$T/dif.npy" -o "$T/det2.$ext"
    cmp -s "$T/det1.$ext" "$T/det2.$ext" && ok "decode to .$ext is byte-identical between runs" || bad "decode to .$ext differs between runs"
done

# ---- quiet ---------------------------------------------------------------------------------------
"$VAE" decode -q -m "$T/w21.safetensors" -i "$T/dif.npy" -o "$T/quiet.mp4" 2>"$T/q.err"
[ ! -s "$T/q.err" ] && ok "-q prints nothing on success" || bad "-q printed: $(cat "$T/q.err")"

# ---- bad inputs ----------------------------------------------------------------------------------
: >"$T/empty.mp4"
echo "this is not a video" >"$T/text.mp4"
head -c 200000 "$MEDIA/bigbuckbunny_720p.mp4" >"$T/trunc.mp4"
[ -f "$T/bbb.mp4" ] && head -c $(($(wc -c <"$T/bbb.mp4") / 2)) "$T/bbb.mp4" >"$T/trunc_faststart.mp4"
cp "$MEDIA/bigbuckbunny_720p.mp4" "$T/corrupt.mp4"
chmod u+w "$T/corrupt.mp4"
dd if=/dev/urandom of="$T/corrupt.mp4" bs=1 seek=120000 count=40000 conv=notrunc 2>/dev/null
cp "$T/raw.safetensors" "$T/latent_not_video.mp4"
for f in empty text trunc corrupt latent_not_video; do
    expect_fail "encode from $f.mp4" "$T/bad_$f.safetensors" \
        "$VAE" encode -m "$T/w21.safetensors" -i "$T/$f.mp4" --size 64x32 -o "$T/bad_$f.safetensors"
done
if [ -s "$T/trunc_faststart.mp4" ]; then
    expect_fail "encode all frames of a truncated mp4 (index says 9 frames)" "$T/bad_tf.safetensors" \
        "$VAE" encode -m "$T/w21.safetensors" -i "$T/trunc_faststart.mp4" --size 64x32 --fit crop -o "$T/bad_tf.safetensors"
fi
expect_fail "missing input file" "$T/bad_missing.safetensors" \
    "$VAE" encode -m "$T/w21.safetensors" -i "$T/nope.mp4" -o "$T/bad_missing.safetensors"
expect_fail "a video given as a latent" "$T/bad_lat.mp4" \
    "$VAE" decode -m "$T/w21.safetensors" -i "$T/bbb.mp4" -o "$T/bad_lat.mp4"
expect_fail "start past the end" "$T/bad_start.safetensors" \
    "$VAE" encode -m "$T/w21.safetensors" -i "$MEDIA/bikes_640x272.mp4" --start 1000 -o "$T/bad_start.safetensors"

# ---- bad outputs ---------------------------------------------------------------------------------
expect_fail "output in a missing folder" "$T/no/such/dir/out.mp4" \
    "$VAE" decode -m "$T/w21.safetensors" -i "$T/dif.npy" -o "$T/no/such/dir/out.mp4"
grep -q "cannot create" "$T/last.err" && ok "unwritable output: says it cannot create" || bad "unwritable output message"
mkdir -p "$T/isdir.mp4"
"$VAE" decode -q -m "$T/w21.safetensors" -i "$T/dif.npy" -o "$T/isdir.mp4" 2>"$T/last.err"
rc=$?
[ $rc -ne 0 ] && [ -z "$(ls "$T"/isdir.tmp.* 2>/dev/null)" ] && ok "output path is a folder (exit $rc)" || bad "output path is a folder (exit $rc)"
expect_fail "unknown output extension" "$T/out.avi" \
    "$VAE" decode -m "$T/w21.safetensors" -i "$T/dif.npy" -o "$T/out.avi"
expect_fail "ffv1 in .mp4" "$T/ffv1bad.mp4" \
    "$VAE" decode -m "$T/w21.safetensors" -i "$T/dif.npy" -o "$T/ffv1bad.mp4" --codec ffv1
expect_fail "PNG pattern into a missing folder" "$T/nodir/f%03d.png" \
    "$VAE" decode -m "$T/w21.safetensors" -i "$T/dif.npy" -o "$T/nodir/f%03d.png"

# ---- Ctrl-C in the middle of a decode: exit 130, no file -----------------------------------------
"$VAE" decode -m "$T/w21.safetensors" -i "$MEDIA/wan21_latents_1x16x16x40x64.pth" -o "$T/sig.mp4" 2>"$T/sig.err" &
pid=$!
for _ in $(seq 1 600); do # wait until the output file is being written
    ls "$T"/sig.tmp.* >/dev/null 2>&1 && break
    sleep 0.1
done
sleep 1
kill -INT $pid 2>/dev/null
wait $pid
rc=$?
left=$(ls "$T"/sig.mp4 "$T"/sig.tmp.* 2>/dev/null)
if [ $rc -eq 130 ] && [ -z "$left" ] && grep -q "interrupted" "$T/sig.err"; then
    ok "SIGINT during decode: exit 130, no partial file ($(tail -1 "$T/sig.err"))"
else
    bad "SIGINT during decode: exit $rc, left '$left': $(tail -2 "$T/sig.err")"
fi

echo "$passed passed, $failed failed"
[ $failed -eq 0 ]
