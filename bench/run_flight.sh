#!/bin/sh
# run_flight.sh — the flight recorder's cost in a training step (make
# bench): nanoseconds per record (bench/bench_flight, median and spread)
# x records per step (what the run's last line counts) / the step's time
# (median step_ms of the metrics file), measured in the same run, on the
# embedded default job with 2 ranks under mpirun (1 rank without it),
# ROUNDS runs.  The result is a fraction of the step, not a time.
#
# usage: bench/run_flight.sh [ROUNDS [STEPS]]
set -u
ROUNDS=${1:-${BENCH_ROUNDS:-3}}
STEPS=${2:-${BENCH_STEPS:-12}}
B=${SR_BUILDDIR:-.}
S=${SHARDRUN:-$B/shardrun}
d=$(mktemp -d "${TMPDIR:-/tmp}/shardrun-flight-bench.XXXXXX")
trap 'rm -rf "$d"' EXIT
set -- $("$B/bench/bench_flight" 9) || exit 1
ns=$2 ns_min=$3 ns_max=$4
ranks=1
launch=""
if command -v mpirun >/dev/null 2>&1; then
    ranks=2
    launch="mpirun --allow-run-as-root --oversubscribe -x OMP_WAIT_POLICY=PASSIVE -n 2"
fi
: >"$d/rows"
r=0
while [ $r -lt "$ROUNDS" ]; do
    $launch "$S" train -v --set train.steps="$STEPS" --set log.metrics="$d/m$r.jsonl" --set log.every=1 \
        --set threads=1 >"$d/out$r" 2>"$d/err$r" </dev/null || { echo "flight bench: the run failed:"; tail -3 "$d/err$r"; exit 1; }
    per=$(sed -n 's/.*flight recorder: [0-9]* records in [0-9]* steps (\([0-9.]*\) per step.*/\1/p' "$d/err$r" | head -1)
    # the median step time, without the first step (start-up)
    ms=$(grep -o '"step_ms":[0-9.e+-]*' "$d/m$r.jsonl" | sed 1d | cut -d: -f2 | sort -g | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}')
    echo "$per $ms" >>"$d/rows"
    r=$((r + 1))
done
awk -v ns="$ns" -v lo="$ns_min" -v hi="$ns_max" -v ranks="$ranks" -v steps="$STEPS" '
    { per[NR] = $1; ms[NR] = $2; f[NR] = ns * $1 / ($2 * 1e6) }
    function med(a, n,   i, j, t, c) { for (i = 1; i <= n; i++) c[i] = a[i]
        for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (c[j] < c[i]) { t = c[i]; c[i] = c[j]; c[j] = t }
        return c[int((n + 1) / 2)] }
    function mn(a, n,   i, m) { m = a[1]; for (i = 2; i <= n; i++) if (a[i] < m) m = a[i]; return m }
    function mx(a, n,   i, m) { m = a[1]; for (i = 2; i <= n; i++) if (a[i] > m) m = a[i]; return m }
    END {
        n = NR
        printf "flight recorder cost (%d runs of %d steps, %d rank%s, the embedded default job; median (min..max))\n", n, steps, ranks, (ranks > 1 ? "s" : "")
        printf "  ns per record (enter+start+end)  %10.1f  (%.1f..%.1f)\n", ns, lo, hi
        printf "  records per step                 %10.1f  (%.1f..%.1f)\n", med(per, n), mn(per, n), mx(per, n)
        printf "  step time, ms                    %10.2f  (%.2f..%.2f)\n", med(ms, n), mn(ms, n), mx(ms, n)
        printf "  cost: ns x records / step time   %9.5f%%  (%.5f..%.5f %%)\n", 100 * med(f, n), 100 * mn(f, n), 100 * mx(f, n)
    }' "$d/rows"
