#!/usr/bin/env bash
# The main job on shipped defaults: builds, then encodes and decodes real media with the real
# tiny FLUX.2 autoencoder (taef2) and prints the PSNR of the round trip. Builds the CPU backend
# where no GPU is visible (under a minute on 2 cores), CUDA for the visible GPU otherwise (README: Install).
set -eu
cd "$(dirname "$0")/.."
bash scripts/deps.sh
bash scripts/build.sh build
SHARED=${VAE_SHARED:-../shared}
mkdir -p demo_out
./build/vae roundtrip -e "$SHARED/models/taef2_encoder.pth" -d "$SHARED/models/taef2_decoder.pth" \
    -i "$SHARED/media/astronaut_256.png" -o demo_out/astronaut_roundtrip.png
# Frames of a real 720p clip through taef2 frame by frame (latents [1,32,T,h,w]) and back to an
# H.264 video; PSNR against the frames that went in.
./build/vae roundtrip-video -e "$SHARED/models/taef2_encoder.pth" -d "$SHARED/models/taef2_decoder.pth" \
    -i "$SHARED/media/bigbuckbunny_720p.mp4" --start 24 --frames 9 --size 320x184 \
    -o demo_out/bigbuckbunny_taef2.mp4
echo "outputs in demo_out/"
