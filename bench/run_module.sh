#!/bin/sh
# run_module.sh — what the CUDA back end costs a CPU run (make bench-module):
# the default job's peak RSS (/usr/bin/time's maximum resident set) in this
# CUDA build, whose back end is a module a CPU run never loads
# (src/cudamod.h), against a --with-cuda=no build of the same sources, in
# the same run, alternating, BENCH_ROUNDS rounds (default 3) of
# BENCH_STEPS steps (default 5: the peak is reached in the first step);
# median and spread, and the ratio.  Fails when the CUDA build's median
# is more than 10 % above (the claim shardrun(1) and the README make).
#   NOCUDA=DIR|FILE  a --with-cuda=no build tree, or its shardrun; unset: HEAD
#                    of the sources, `git archive`d into NOCUDA_CACHE (default
#                    /tmp/shardrun-nocuda-REV), configured --with-cuda=no and
#                    built there once
# usage: bench/run_module.sh  (from the CUDA build's directory; SR_SRCDIR = sources)
set -u
src=${SR_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}
rounds=${BENCH_ROUNDS:-3}
steps=${BENCH_STEPS:-5}
here=$(pwd)
grep -q '^#define SR_HAVE_CUDA 1' srconfig.h 2>/dev/null ||
    { echo "bench-module: $here is not a CUDA build (configure --with-cuda): nothing to compare" >&2; exit 1; }
[ -x /usr/bin/time ] || { echo "bench-module: needs /usr/bin/time (apt-get install time)" >&2; exit 1; }
want=${NOCUDA:-}
if [ -n "$want" ] && [ -d "$want" ]; then
    other=$(cd "$want" && pwd)/shardrun
elif [ -n "$want" ]; then
    other=$want
else
    id=$(git -C "$src" rev-parse --short HEAD) || { echo "bench-module: give NOCUDA=DIR (no git checkout)" >&2; exit 1; }
    dir=${NOCUDA_CACHE:-${TMPDIR:-/tmp}/shardrun-nocuda-$id}
    if [ ! -x "$dir/shardrun" ]; then
        echo "bench-module: building HEAD ($id) --with-cuda=no in $dir (once)" >&2
        rm -rf "$dir" && mkdir -p "$dir" || exit 1
        git -C "$src" archive "$id" | tar -x -C "$dir" || exit 1
        (cd "$dir" && autoreconf -fi && ./configure --with-cuda=no && make -j"$(nproc)") >"$dir.build.log" 2>&1 ||
            { echo "bench-module: the build failed; see $dir.build.log" >&2; exit 1; }
    fi
    other=$dir/shardrun
fi
[ -x "$other" ] || { echo "bench-module: no shardrun at $other" >&2; exit 1; }
grep -q '^#define SR_HAVE_CUDA 1' "$(dirname "$other")/srconfig.h" 2>/dev/null &&
    { echo "bench-module: $other is a CUDA build too; NOCUDA names a --with-cuda=no build" >&2; exit 1; }
T=$(mktemp -d) || exit 1
trap 'rm -rf "$T"' EXIT
# peak NAME BINARY: one run's peak RSS in KiB appended to $T/NAME
peak() {
    rm -rf "$T/ck"
    /usr/bin/time -f '%M' -o "$T/time" "$2" train --set train.steps="$steps" --set checkpoint.dir="$T/ck" \
        >"$T/$1.out" 2>"$T/$1.err" || { echo "bench-module: $2 failed:" >&2; tail -5 "$T/$1.err" >&2; exit 1; }
    tail -1 "$T/time" >>"$T/$1"
    # the CUDA build's CPU run must not have loaded the module at all
    if grep -q 'CUDA back end:' "$T/$1.err"; then
        echo "bench-module: the CPU run loaded the CUDA module ($(grep 'CUDA back end:' "$T/$1.err"))" >&2
        exit 1
    fi
}
r=1
while [ $r -le "$rounds" ]; do
    peak cuda "$here/shardrun"
    peak nocuda "$other"
    r=$((r + 1))
done
# stats NAME: "median min max" in MiB
stats() { sort -n "$T/$1" | awk '{ v[NR] = $1 / 1024 } END { printf "%.1f %.1f %.1f\n", v[int((NR + 1) / 2)], v[1], v[NR] }'; }
read -r cm cl ch <<EOF
$(stats cuda)
EOF
read -r nm nl nh <<EOF
$(stats nocuda)
EOF
echo "peak RSS of the default job ($steps steps, device: auto on a machine without a GPU), $rounds rounds each, alternating:"
printf '%-34s %14s %18s %8s\n' build "median MiB" "spread (min-max)" ratio
printf '%-34s %14s %18s %8s\n' "CUDA build (module not loaded)" "$cm" "$cl-$ch" "$(awk -v a="$cm" -v b="$nm" 'BEGIN { printf "%.3f", a / b }')"
printf '%-34s %14s %18s %8s\n' "--with-cuda=no build" "$nm" "$nl-$nh" "1.000"
awk -v a="$cm" -v b="$nm" 'BEGIN { exit !(a <= 1.10 * b) }' ||
    { echo "bench-module: the CUDA build's peak RSS is more than 10 % above the --with-cuda=no build's" >&2; exit 1; }
