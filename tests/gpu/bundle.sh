#!/bin/sh
# bundle.sh — `make gpu-bundle`: one archive with what a GPU machine needs
# to run tests/gpu/check.sh without a package registry or a compiler:
#   shardrun/            the committed tree (git archive HEAD): the scripts
#                        the check runs, the PyTorch models it compares with;
#   shardrun/build-gpu/  the binaries the check runs, built --with-cuda from
#                        that tree in a VPATH build (the check never rebuilds:
#                        the GPU image is not Debian 12, -dev packages would
#                        not link there);
#   shardrun/.deps/      the runtime libraries of Debian's packages, fetched
#                        with apt-get download and extracted with dpkg -x
#                        (never into /, never committed): every shared
#                        library the binaries need that a bare Debian- or
#                        Ubuntu-based image may lack;
#   shardrun/gpu-refs/   the CPU references of the loss curves.
# Then tests/gpu/needed.sh reads every bundled binary's and library's
# NEEDED entries: each must be in the bundle or on its short list of what
# the GPU image provides (C runtime, driver, the torch wheels' CUDA
# libraries); its report is printed and a gap fails the target.
# Prints the archive's size; fails above 48 MiB.
set -eu
SRC=${SR_SRCDIR:-$(pwd)}
cd "$SRC"
W=$SRC/.deps-gpu
rm -rf "$W" && mkdir -p "$W/debs" "$W/stage/shardrun"
git archive HEAD | tar -x -C "$W/stage/shardrun"
mkdir -p "$W/src" "$W/build"
git archive HEAD | tar -x -C "$W/src"
(cd "$W/src" && autoreconf -fi >/dev/null 2>&1)
(cd "$W/build" && "$W/src/configure" --with-cuda >configure.out 2>&1 &&
    make -j"$(nproc)" shardrun shardrun-cuda.so tests/cmp_params tests/test_kernels tests/test_gemm_plan tests/test_ops \
        tests/test_vranks tests/cuda_probe bench/gpu_gemm bench/bench_train >make.out 2>&1) || { tail -n 20 "$W/build/configure.out" "$W/build/make.out"; exit 1; }
B=$W/stage/shardrun/build-gpu
mkdir -p "$B/tests" "$B/bench"
cp "$W/build/shardrun" "$W/build/shardrun-cuda.so" "$W/build/config.log" "$W/build/srconfig.h" "$B/"
cp "$W/build/tests/cmp_params" "$W/build/tests/test_kernels" "$W/build/tests/test_gemm_plan" \
    "$W/build/tests/test_ops" "$W/build/tests/test_vranks" "$W/build/tests/cuda_probe" "$B/tests/"
cp "$W/build/bench/gpu_gemm" "$W/build/bench/bench_train" "$B/bench/"
pkgs="libyaml-0-2 libjansson4 libssl3 libpmix2 libevent-core-2.1-7 libevent-pthreads-2.1-7 libhwloc15 libudev1 libmunge2
zlib1g libpcre2-8-0 libopenblas0-pthread libgfortran5 libquadmath0 libgomp1"
# shellcheck disable=SC2086
(cd "$W/debs" && apt-get download $pkgs >/dev/null 2>&1) ||
    { echo "gpu-bundle: apt-get download $pkgs failed" >&2; exit 1; }
for d in "$W"/debs/*.deb; do dpkg -x "$d" "$W/stage/shardrun/.deps"; done
rm -rf "$W/stage/shardrun/.deps/usr/share"
[ -d gpu-refs ] && cp -r gpu-refs "$W/stage/shardrun/"
sh "$SRC/tests/gpu/needed.sh" "$W/stage/shardrun" >"$W/needed.txt" || { cat "$W/needed.txt"; exit 1; }
cat "$W/needed.txt"
tar -C "$W/stage" -czf gpu-bundle.tar.gz shardrun
size=$(stat -c %s gpu-bundle.tar.gz)
echo "gpu-bundle.tar.gz: $((size / 1048576)) MiB ($size bytes): tar -xzf it on the GPU machine, cd shardrun, run tests/gpu/check.sh --quick OUTDIR first"
[ "$size" -le $((48 * 1048576)) ] || { echo "gpu-bundle: above 48 MiB" >&2; exit 1; }
