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
# its own process group (set -m: follow_build stops the group), not its own session (setsid): the
# scheduler's autogroups would share the cores with a build beside it (scripts/test.sh's) as
# equals, whatever its nice value
set -m
cmake --build "$dir" -j"$(nproc)" </dev/null >"$dir/build.log" 2>&1 &
pid=$!
set +m
follow_build "$dir/build.log" $pid
