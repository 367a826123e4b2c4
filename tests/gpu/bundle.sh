#!/bin/sh
# bundle.sh — `make gpu-bundle`: one archive with what a GPU machine needs
# to run tests/gpu/check.sh without a package registry:
#   shardrun/            the committed tree (git archive HEAD) with configure
#                        generated, so a rebuild there needs no autotools;
#   shardrun/build-gpu/  the binaries the check runs, built --with-cuda from
#                        that tree in a VPATH build;
#   shardrun/.deps/      the runtime libraries of Debian's packages, fetched
#                        with apt-get download and extracted with dpkg -x
#                        (never into /, never committed);
#   shardrun/gpu-refs/   the CPU references of the loss curves.
# Prints the archive's size; fails above 48 MiB.
set -eu
SRC=${SR_SRCDIR:-$(pwd)}
cd "$SRC"
W=$SRC/.deps-gpu
rm -rf "$W" && mkdir -p "$W/debs" "$W/stage/shardrun"
git archive HEAD | tar -x -C "$W/stage/shardrun"
(cd "$W/stage/shardrun" && autoreconf -fi >/dev/null 2>&1 && rm -rf autom4te.cache)
mkdir -p "$W/build"
(cd "$W/build" && "$W/stage/shardrun/configure" --with-cuda >configure.out 2>&1 &&
    make -j"$(nproc)" shardrun tests/cmp_params tests/test_kernels tests/test_gemm_plan tests/test_ops \
        tests/test_vranks bench/gpu_gemm bench/bench_train >make.out 2>&1) || { tail -20 "$W/build/configure.out" "$W/build/make.out"; exit 1; }
B=$W/stage/shardrun/build-gpu
mkdir -p "$B/tests" "$B/bench"
cp "$W/build/shardrun" "$W/build/config.log" "$W/build/srconfig.h" "$B/"
cp "$W/build/tests/cmp_params" "$W/build/tests/test_kernels" "$W/build/tests/test_gemm_plan" \
    "$W/build/tests/test_ops" "$W/build/tests/test_vranks" "$B/tests/"
cp "$W/build/bench/gpu_gemm" "$W/build/bench/bench_train" "$B/bench/"
pkgs="libyaml-0-2 libpmix2 libevent-core-2.1-7 libevent-pthreads-2.1-7 libhwloc15 libmunge2 libopenblas0-pthread libgomp1"
# shellcheck disable=SC2086
(cd "$W/debs" && apt-get download $pkgs >/dev/null 2>&1) ||
    { echo "gpu-bundle: apt-get download $pkgs failed" >&2; exit 1; }
for d in "$W"/debs/*.deb; do dpkg -x "$d" "$W/stage/shardrun/.deps"; done
rm -rf "$W/stage/shardrun/.deps/usr/share"
[ -d gpu-refs ] && cp -r gpu-refs "$W/stage/shardrun/"
tar -C "$W/stage" -czf gpu-bundle.tar.gz shardrun
size=$(stat -c %s gpu-bundle.tar.gz)
echo "gpu-bundle.tar.gz: $((size / 1048576)) MiB ($size bytes): tar -xzf it on the GPU machine, cd shardrun, run tests/gpu/check.sh OUTDIR"
[ "$size" -le $((48 * 1048576)) ] || { echo "gpu-bundle: above 48 MiB" >&2; exit 1; }
