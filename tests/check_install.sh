#!/usr/bin/env bash
# The installed library as users get it: `cmake --install` into a temporary prefix; libvae.so
# exports exactly the VAE_API functions of include/vae.h and include/vae_dev.h (everything else
# hidden); a C program built with `pkg-config --cflags --libs vae` against the installed files
# runs.
# usage: tests/check_install.sh BUILD_DIR SOURCE_DIR SHARED_DIR
set -eu
build=$1 src=$2 shared=$3
prefix=$(mktemp -d)
trap 'rm -rf "$prefix"' EXIT
cmake --install "$build" --prefix "$prefix" >/dev/null
lib=$(find "$prefix" -name 'libvae.so' | head -1)
pc=$(find "$prefix" -name 'vae.pc' | head -1)
[ -n "$lib" ] && [ -n "$pc" ] && [ -f "$prefix/include/vae.h" ] &&
    [ -f "$prefix/include/vae_dev.h" ] || { echo "FAIL install: missing files"; exit 1; }
want=$(grep -oE 'VAE_API [^(]*[ *]vae_[a-z0-9_]+\(' "$src/include/vae.h" "$src/include/vae_dev.h" | sed -E 's/.*[ *](vae_[a-z0-9_]+)\($/\1/' | sort -u)
got=$(nm -D --defined-only "$lib" | awk '$2 == "T" {print $3}' | sort -u)
if [ "$want" != "$got" ]; then
    echo "FAIL exports differ from include/vae.h + vae_dev.h (< header only, > library only):"
    diff <(echo "$want") <(echo "$got") || true
    exit 1
fi
echo "exports: $(echo "$got" | wc -l) functions, all in vae.h and vae_dev.h"
export PKG_CONFIG_PATH=$(dirname "$pc")
san=() # a sanitized library (the ASan build) needs its runtime in the client too
ldd "$lib" | grep -q libasan && san=(-fsanitize=address,undefined)
cc -std=c11 -Wall -Werror ${san[@]+"${san[@]}"} "$src/tests/install_client.c" -o "$prefix/client" \
    $(pkg-config --cflags --libs vae) -lm
LD_LIBRARY_PATH=$(dirname "$lib") "$prefix/client" "$shared"
