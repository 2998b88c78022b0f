#!/usr/bin/env bash
# The main job on shipped defaults: builds, then encodes and decodes real media with the real
# tiny FLUX.2 autoencoder (taef2) and prints the PSNR of the round trip.
set -eu
cd "$(dirname "$0")/.."
bash scripts/deps.sh
bash scripts/build.sh build >/dev/null
SHARED=${VAE_SHARED:-../shared}
mkdir -p demo_out
./build/vae roundtrip -e "$SHARED/models/taef2_encoder.pth" -d "$SHARED/models/taef2_decoder.pth" \
    -i "$SHARED/media/astronaut_256.png" -o demo_out/astronaut_roundtrip.png
if ./build/vae --help | grep -q roundtrip-video; then
    ./build/vae roundtrip-video -e "$SHARED/models/taef2_encoder.pth" -d "$SHARED/models/taef2_decoder.pth" \
        -i "$SHARED/media/bigbuckbunny_720p.mp4" --frames 25 -o demo_out/bigbuckbunny_roundtrip.mp4
fi
echo "outputs in demo_out/"
