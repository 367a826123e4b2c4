#!/bin/sh
# bundle.sh — `make gpu-bundle`: one archive with what a GPU machine needs
# to run tests/gpu/check.sh without a package registry: the source tree
# (git archive), a CUDA build in build-gpu/ (configured --with-cuda, VPATH),
# the runtime libraries of Debian's packages extracted with dpkg -x into
# .deps/ (never into /, never committed), and the CPU references gpu-refs/.
# Prints the archive's size; fails above 48 MiB.
set -eu
SRC=${SR_SRCDIR:-$(pwd)}
cd "$SRC"
mkdir -p build-gpu .deps-gpu/debs
(cd build-gpu && { [ -f Makefile ] || ../configure --with-cuda >configure.out; } &&
    make -j"$(nproc)" shardrun tests/cmp_params tests/test_kernels tests/test_gemm_plan tests/test_ops bench/gpu_gemm >make.out)
pkgs="libyaml-0-2 libpmix2 libevent-core-2.1-7 libevent-pthreads-2.1-7 libhwloc15 libmunge2 libopenblas0-pthread"
(cd .deps-gpu/debs && apt-get download $pkgs >/dev/null)
rm -rf .deps && mkdir -p .deps
for d in .deps-gpu/debs/*.deb; do dpkg -x "$d" .deps; done
rm -rf .deps/usr/share
git archive --format=tar --prefix=shardrun/ HEAD >.deps-gpu/tree.tar
tar -rf .deps-gpu/tree.tar --transform 's,^,shardrun/,' build-gpu/shardrun build-gpu/tests build-gpu/bench/gpu_gemm \
    build-gpu/srconfig.h build-gpu/config.log .deps gpu-refs
gzip -9 -c .deps-gpu/tree.tar >gpu-bundle.tar.gz
size=$(stat -c %s gpu-bundle.tar.gz)
echo "gpu-bundle.tar.gz: $((size / 1048576)) MiB ($size bytes); unpack, cd shardrun, run tests/gpu/check.sh OUTDIR"
[ "$size" -le $((48 * 1048576)) ] || { echo "gpu-bundle: above 48 MiB" >&2; exit 1; }
