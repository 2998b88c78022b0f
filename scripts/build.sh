#!/usr/bin/env bash
# Configures and builds into a folder: scripts/build.sh [BUILD_DIR] [cmake options...]
set -eu
cd "$(dirname "$0")/.."
dir=${1:-build}
shift || true
mkdir -p "$dir"
log="$dir/configure.log" # build logs stay inside the build folder
cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Release "$@" >"$log" 2>&1 || { cat "$log"; exit 1; }
grep "^-- vae:" "$log" || true
cmake --build "$dir" -j"$(nproc)"
