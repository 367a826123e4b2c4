#!/bin/sh
# needed.sh — what the GPU bundle's binaries need, and whether a bare GPU
# machine has it.
#
# usage: tests/gpu/needed.sh ROOT
#   ROOT is an unpacked bundle (shardrun/ of gpu-bundle.tar.gz): every ELF
#   file under ROOT/build-gpu and every shared library under ROOT/.deps is
#   read with readelf -d, and each NEEDED entry must be either a file of the
#   bundle (ROOT/.deps, any folder) or on the short list of what the GPU
#   image provides:
#     - the C and C++ runtime: the loader, libc, libm, libpthread, libdl,
#       librt, libutil, libgcc_s, libstdc++ (every Debian- or Ubuntu-based
#       image with Python has them);
#     - the NVIDIA driver: libcuda;
#     - the CUDA libraries of the image's PyTorch environment (NVIDIA's
#       wheels; tests/gpu/check.sh finds them when the loader does not):
#       libcudart, libcublasLt, libcublas, libnccl.
# Prints one line per binary or library (its NEEDED entries and where each
# is found), then "needed: N files, M entries, all found" or the missing
# ones; exits 0 only when nothing is missing.  `make gpu-bundle` runs it on
# the bundle it made; tests/gpu_bundle.sh tests it with planted gaps.
set -u
[ $# = 1 ] && [ -d "$1" ] || { echo "usage: $0 ROOT (an unpacked gpu bundle)" >&2; exit 64; }
ROOT=$1
command -v readelf >/dev/null 2>&1 || { echo "needed: readelf (binutils) is not installed" >&2; exit 69; }
# image_has SONAME: the part of the GPU image that provides it, or nothing
image_has() {
    case $1 in
    ld-linux*.so* | libc.so.* | libm.so.* | libpthread.so.* | libdl.so.* | librt.so.* | libutil.so.* | libgcc_s.so.* | \
        libstdc++.so.*) echo "image: C runtime" ;;
    libcuda.so.*) echo "image: driver" ;;
    libcudart.so.* | libcublasLt.so.* | libcublas.so.* | libnccl.so.*) echo "image: torch wheels" ;;
    esac
}
files=0 entries=0 missing=""
list=$(mktemp)
{
    [ -d "$ROOT/build-gpu" ] && find "$ROOT/build-gpu" -type f
    [ -d "$ROOT/.deps" ] && find "$ROOT/.deps" \( -type f -o -type l \) -name '*.so*'
} | while read -r f; do readlink -f "$f"; done | sort -u >"$list"
while read -r f; do
    # ELF files only (build-gpu also holds config.log and srconfig.h)
    [ "$(head -c 4 "$f" | od -An -c | tr -d ' \n')" = 177ELF ] || continue
    files=$((files + 1))
    line=""
    for n in $(readelf -d "$f" 2>/dev/null | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'); do
        entries=$((entries + 1))
        if [ -n "$(find "$ROOT/.deps" -name "$n" 2>/dev/null | head -1)" ]; then
            where=bundle
        else
            where=$(image_has "$n")
            [ -z "$where" ] && { where=MISSING; missing="$missing ${f#"$ROOT"/}:$n"; }
        fi
        line="$line $n ($where)"
    done
    echo "${f#"$ROOT"/}:$line"
done <"$list"
rm -f "$list"
if [ -n "$missing" ]; then
    echo "needed: $files files, $entries entries; missing from the bundle and not on the image's list:$missing"
    exit 1
fi
echo "needed: $files files, $entries entries, all found (the bundle, or the image's C runtime, driver and torch wheels)"
