#!/bin/sh
# baseline.sh — prints the build directory of the baseline the benchmarks
# compare against (make bench and make bench-ckpt print both in one run):
#   BASELINE=DIR      an existing build tree of the baseline (with shardrun;
#                     bench/bench_train is built there when missing)
#   BASELINE=FILE     a baseline shardrun binary: its directory
#   BASELINE=REV      a git revision (default HEAD~1 when BASELINE is unset
#                     and this is a git checkout): `git archive` of REV into
#                     BASELINE_CACHE (default /tmp/shardrun-baseline-REV),
#                     configured with its own defaults and built there once
# Prints nothing (and says why on stderr) when no baseline can be had.
# usage: bench/baseline.sh  (from the build directory; SR_SRCDIR = sources)
set -u
src=${SR_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}
want=${BASELINE:-}
if [ -n "$want" ] && [ -d "$want" ]; then
    dir=$(cd "$want" && pwd)
elif [ -n "$want" ] && [ -f "$want" ]; then
    dir=$(cd "$(dirname "$want")" && pwd)
else
    rev=${want:-HEAD~1}
    if ! git -C "$src" rev-parse --verify -q "$rev^{commit}" >/dev/null; then
        echo "baseline: '$rev' is neither a build directory, a binary nor a git revision of $src" >&2
        exit 0
    fi
    id=$(git -C "$src" rev-parse --short "$rev")
    dir=${BASELINE_CACHE:-${TMPDIR:-/tmp}/shardrun-baseline-$id}
    if [ ! -x "$dir/shardrun" ]; then
        echo "baseline: building $rev ($id) in $dir (once)" >&2
        rm -rf "$dir" && mkdir -p "$dir" || exit 0
        git -C "$src" archive "$id" | tar -x -C "$dir" || exit 0
        (cd "$dir" && autoreconf -fi && ./configure && make -j"$(nproc)") >"$dir.build.log" 2>&1 ||
            { echo "baseline: the build of $id failed; see $dir.build.log" >&2; exit 0; }
    fi
fi
[ -x "$dir/shardrun" ] || { echo "baseline: no shardrun in $dir" >&2; exit 0; }
[ -x "$dir/bench/bench_train" ] || make -C "$dir" bench/bench_train >/dev/null 2>&1 ||
    echo "baseline: cannot build bench/bench_train in $dir" >&2
echo "$dir"
