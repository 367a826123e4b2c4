#!/bin/sh
# run.sh — builds the libFuzzer harnesses in their own clang tree and runs
# them (make fuzz; tests/fuzz.sh).  From any configured build directory:
#   FUZZ_SECONDS=N   seconds per harness (default 60)
#   FUZZ_JOBS=N      harnesses at a time (default 2)
#   FUZZ_ONLY="a b"  only these harnesses
# The tree is fuzz-build/tree under the build directory: clang,
# -fsanitize=fuzzer-no-link,address,undefined for the library, fuzzer for
# the harnesses, no CUDA, configured from fuzz-build/src, a `make distdir`
# copy of the sources (a source directory configured in place cannot host
# a second build; distdir keeps time stamps, so later runs rebuild only
# what changed).  Each harness starts from its committed seeds
# (tests/fuzz/corpus/NAME) and keeps what it finds in fuzz-build/tree/corpus/NAME,
# so later runs go on from there.  Writes fuzz-build/tree/NAME.log; prints each
# harness's last "DONE cov: ... corp: ..." line and the CPU seconds it
# used (user + system, from /usr/bin/time when installed: the measure a
# campaign's length is given in); exits non-zero when a
# harness found a crash, a leak or a timeout (the reproducer is
# fuzz-build/tree/NAME-crash-*, -leak-* or -timeout-*).
set -u
src=${SR_SRCDIR:?}
secs=${FUZZ_SECONDS:-60}
jobs=${FUZZ_JOBS:-2}
all="fuzz_config fuzz_manifest fuzz_shardfile fuzz_token_shard fuzz_transport fuzz_env fuzz_safetensors fuzz_tokenizer fuzz_task"
only=${FUZZ_ONLY:-$all}
CLANG=${FUZZ_CC:-clang}
command -v "$CLANG" >/dev/null 2>&1 || { echo "fuzz: $CLANG not found (apt-get install clang libclang-rt-14-dev)"; exit 77; }
mkdir -p fuzz-build || exit 1
make -s distdir distdir=fuzz-build/src >fuzz-build/distdir.log 2>&1 || { tail -20 fuzz-build/distdir.log; exit 1; }
mkdir -p fuzz-build/tree && cd fuzz-build/tree || exit 1
san="-fsanitize=address,undefined -fno-sanitize-recover=all"
if [ ! -f Makefile ]; then
    echo "fuzz: configuring a clang tree in $(pwd)" >&2
    CC=$CLANG CFLAGS="-O1 -g -fno-omit-frame-pointer -fsanitize=fuzzer-no-link $san" \
        ../src/configure --without-cuda --without-nccl --disable-native >configure.log 2>&1 ||
        { tail -20 configure.log; exit 1; }
fi
make -j"${FUZZ_JOBS:-2}" libshardrun.a >build.log 2>&1 || { tail -20 build.log; exit 1; }
for h in $only; do
    make -s fuzz-harness HARNESS="$h" >>build.log 2>&1 || { tail -20 build.log; exit 1; }
done
rc=0
timer=""
[ -x /usr/bin/time ] && timer="/usr/bin/time -f %U+%S -o"
run_one() {
    h=$1
    mkdir -p "corpus/$h"
    rm -f "$h.cpu"
    ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
        ${timer:+$timer "$h.cpu"} "./$h" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -print_final_stats=0 \
        -artifact_prefix="$(pwd)/$h-" "corpus/$h" "$src/tests/fuzz/corpus/$h" >"$h.log" 2>&1
    echo $? >"$h.rc"
}
set -- $only
while [ $# -gt 0 ]; do
    n=0
    while [ $# -gt 0 ] && [ $n -lt "$jobs" ]; do
        run_one "$1" &
        shift
        n=$((n + 1))
    done
    wait
done
for h in $only; do
    done_line=$(grep '^#[0-9]*[[:space:]]*DONE' "$h.log" | tail -1)
    [ -n "$done_line" ] || done_line=$(grep -E 'cov: [0-9]+' "$h.log" | tail -1)
    status=$(cat "$h.rc")
    cpu=$(tail -1 "$h.cpu" 2>/dev/null | awk -F+ '/^[0-9.]+\+[0-9.]+$/ { printf "; cpu %.0f s", $1 + $2 }')
    echo "$h: ${done_line:-no DONE line} (status $status$cpu)"
    if [ "$status" -ne 0 ]; then
        rc=1
        grep -E 'ERROR|SUMMARY|artifact' "$h.log" | head -5 | sed 's/^/    /'
    fi
done
exit $rc
