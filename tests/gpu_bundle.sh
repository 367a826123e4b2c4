#!/bin/sh
# gpu_bundle.sh — tests/gpu/needed.sh, the NEEDED check of `make gpu-bundle`,
# on a bundle made here from this build's shardrun (no package registry
# needed): with every library ldd resolves that is not on the GPU image's
# list copied into .deps, nothing is missing; with libjansson or libyaml
# taken out, or a planted binary needing a library nobody has, the check
# names the gap and fails.  (The real bundle is checked by `make
# gpu-bundle` itself, which .ci/run makes.)
. "${SR_SRCDIR:-.}/tests/tap.sh"
B=${SR_BUILDDIR:-.}
N="$SR_SRCDIR/tests/gpu/needed.sh"
if ! command -v readelf >/dev/null 2>&1; then
    skip_or_fail readelf "readelf (binutils) is not installed"
    done_testing
    exit 0
fi
R=$T/bundle
mkdir -p "$R/build-gpu/tests" "$R/.deps/usr/lib"
cp "$B/shardrun" "$R/build-gpu/"
cp "$B/tests/cmp_params" "$R/build-gpu/tests/"
# the CUDA module, as bundle.sh carries it (a CUDA build's)
[ -f "$B/shardrun-cuda.so" ] && cp "$B/shardrun-cuda.so" "$R/build-gpu/"
# what the image is said to provide stays out of the bundle, as in bundle.sh
ldd "$B/shardrun" | awk '/=> \// { print $1, $3 }' | while read -r name path; do
    case $name in
    ld-linux* | libc.so.* | libm.so.* | libpthread.so.* | libdl.so.* | librt.so.* | libgcc_s.so.* | libstdc++.so.* | \
        libcuda.so.* | libcudart.so.* | libcublasLt.so.* | libnccl.so.*) ;;
    *) cp -L "$path" "$R/.deps/usr/lib/$name" ;;
    esac
done
expect_status 0 "needed.sh: every NEEDED entry of this build's shardrun is in the bundle or on the image's list" \
    sh "$N" "$R"
sh "$N" "$R" >"$T/report" 2>&1
check "the report has a line per binary and library, and the summary" \
    sh -c "grep -q '^build-gpu/shardrun: .*libyaml-0.so.2 (bundle)' '$T/report' && grep -q '^needed: [0-9]* files, [0-9]* entries, all found' '$T/report'"
check "the C runtime and the torch wheels' CUDA libraries are named as the image's" \
    sh -c "grep '^build-gpu/shardrun:' '$T/report' | grep -q 'libc.so.6 (image: C runtime)'"
if [ -f "$B/shardrun-cuda.so" ] && ! emulator_tree; then
    check "  ...the CUDA module's CUDA libraries among them (the program needs none)" \
        sh -c "grep '^build-gpu/shardrun-cuda.so:' '$T/report' | grep -q 'libcudart.so.[0-9]* (image: torch wheels)' &&
            ! grep '^build-gpu/shardrun:' '$T/report' | grep -q 'libcudart'"
fi
rm "$R/.deps/usr/lib/libjansson.so.4"
sh "$N" "$R" >"$T/report2" 2>&1
rc=$?
check "libjansson taken out of the bundle: status 1, the gap named (status $rc)" \
    sh -c "[ $rc = 1 ] && grep -q 'missing from the bundle.*build-gpu/shardrun:libjansson.so.4' '$T/report2'"
# a library of the bundle that needs what nobody has: the check reads the
# bundle's libraries too, not only its binaries
cp "$B/shardrun" "$R/.deps/usr/lib/libjansson.so.4"
rm "$R/.deps/usr/lib/libyaml-0.so.2"
sh "$N" "$R" >"$T/report3" 2>&1
rc=$?
check "a bundled library's own NEEDED entries are checked too (status $rc)" \
    sh -c "[ $rc = 1 ] && grep -q 'usr/lib/libjansson.so.4:libyaml-0.so.2' '$T/report3'"
expect_status 64 "needed.sh without a bundle directory: usage, 64" sh "$N" "$T/none"
done_testing
