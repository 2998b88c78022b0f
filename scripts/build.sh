#!/usr/bin/env bash
# Configures and builds into a folder: scripts/build.sh [BUILD_DIR] [cmake options...]
set -eu
cd "$(dirname "$0")/.."
dir=${1:-build}
shift || true
cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Release "$@" >"$dir.cmake.log" 2>&1 || { cat "$dir.cmake.log"; exit 1; }
grep "^-- vae:" "$dir.cmake.log" || true
cmake --build "$dir" -j"$(nproc)"
