#!/usr/bin/env bash
# Configures and builds into a folder: scripts/build.sh [BUILD_DIR] [cmake options...]
# Shows what it compiles as it goes; the full logs stay in the folder (configure.log, build.log).
set -eu
cd "$(dirname "$0")/.."
. scripts/progress.sh
dir=${1:-build}
shift || true
mkdir -p "$dir"
log="$dir/configure.log"
cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Release "$@" >"$log" 2>&1 || { cat "$log"; exit 1; }
grep "^-- vae:" "$log" || true
setsid cmake --build "$dir" -j"$(nproc)" >"$dir/build.log" 2>&1 &
follow_build "$dir/build.log" $!
