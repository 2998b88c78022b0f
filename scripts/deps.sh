#!/usr/bin/env bash
# Installs the Debian packages the build and tests need (only those missing).
set -eu
pkgs="cmake gcc g++ make pkg-config python3 libopenblas-dev libcjson-dev libpng-dev zlib1g-dev
      libavformat-dev libavcodec-dev libswscale-dev libavutil-dev ffmpeg
      clang libclang-rt-14-dev libomp-14-dev"
missing=""
for p in $pkgs; do
    dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"
done
if [ -n "$missing" ]; then
    echo "deps: installing$missing"
    SUDO=""
    [ "$(id -u)" -ne 0 ] && SUDO=sudo
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $missing >/dev/null
fi
