#!/bin/sh
# run_report.sh — `shardrun report` on a big metrics file (part of make
# bench): a generated file of at least BENCH_REPORT_MB MiB (default 1100,
# over 1 GiB) of step records in three runs (a crash redoing 5 % of the
# steps, a preemption) with a checkpoint event every 50 steps, in the
# current directory or BENCH_DIR.  In each of REPS rounds (default 3): the
# report's wall time and MB/s against the machine's own sequential read of
# the same file (cat to /dev/null, the page cache warm for both: the read
# ceiling), its peak memory (max RSS) above the same binary's on a one-line
# file (the program's baseline; the bound is 64 MiB), and the page's size
# (the bound is 4 MiB).  Median (min..max) over the rounds.
set -u
S=${SHARDRUN:-./shardrun}
MB=${BENCH_REPORT_MB:-1100}
REPS=${BENCH_REPS:-3}
dir=$(mktemp -d "${BENCH_DIR:-.}/shardrun-bench-report.XXXXXX")
trap 'rm -rf "$dir"' EXIT
echo "report benchmark: generating a metrics file of $MB MiB in $dir ..."
python3 - "$dir/big.jsonl" "$MB" <<'PY'
import sys
out, mb = open(sys.argv[1], "w"), int(sys.argv[2])
mem = "".join(',"mem_%s":%d,"mem_%s_peak":%d' % (c, 1 << 20, c, 1 << 21) for c in
              ("param_shard", "grad_shard", "optim_shard", "grad_accum", "full_units", "activations", "comm",
               "ckpt_staging", "other"))
line = ('{"step":%d,"loss":%.17g,"lr":0.0005999999999999999,"grad_norm":%.17g,"tokens_per_s":20345.6,"mfu":0.0123,'
        '"step_ms":%.6g,"comm_exposed_ms":0.345,"tokens":%d,"ranks":4,"time":%.3f' + mem + '}\n')
per = len(line % (1, 1.0, 1.0, 1.0, 1, 1.0))
n = mb * (1 << 20) // per + 1
runs = ((1, int(n * 0.4), 0), (int(n * 0.35), int(n * 0.7), int(n * 0.35) - 1), (int(n * 0.7) + 1, n, int(n * 0.7)))
t = 1.7e9
for r, (a, b, resume) in enumerate(runs):
    out.write('{"event":"start","step":%d,"time":%.3f,"restart":%d,"resume_step":%d,"world_size":4}\n' % (resume, t, r, resume))
    for s in range(a, b + 1):
        t += 0.1
        out.write(line % (s, 3 + 1.0 / (1 + s * 1e-4), 0.5 + (s % 13) * 0.01, 100 + s % 17, s * 8192, t))
        if s % 50 == 0:
            out.write('{"event":"checkpoint","step":%d,"time":%.3f,"started_step":%d,"committed_step":%d,'
                      '"duration_s":1.5,"bytes":1500000000,"async":true}\n' % (s, t, s, s))
    if r == 1:
        out.write('{"event":"preempt","step":%d,"time":%.3f,"signal":"SIGUSR1"}\n' % (b, t))
    t += 60
PY
bytes=$(wc -c <"$dir/big.jsonl")
printf '{"step": 1, "loss": 4.0, "time": 1}\n' >"$dir/one.jsonl"
/usr/bin/time -f '%M' -o "$dir/one.rss" "$S" report "$dir/one.jsonl" -o "$dir/one.html" >/dev/null 2>&1
base=$(cat "$dir/one.rss")
: >"$dir/rows"
i=0
while [ $i -lt "$REPS" ]; do
    t0=$(date +%s%N)
    cat "$dir/big.jsonl" >/dev/null
    t1=$(date +%s%N)
    /usr/bin/time -f '%e %M' -o "$dir/time" "$S" report "$dir/big.jsonl" -o "$dir/big.html" >"$dir/sum" 2>"$dir/err" ||
        { echo "report failed: $(tail -2 "$dir/err")"; exit 1; }
    read -r secs rss <"$dir/time"
    echo "$(((t1 - t0) / 1000)) $secs $rss $(wc -c <"$dir/big.html")" >>"$dir/rows"
    i=$((i + 1))
done
awk -v bytes="$bytes" -v base="$base" '
function med(a, n,    i, j, t) { for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
    return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 }
function lo(a, n,    i, m) { m = a[1]; for (i = 2; i <= n; i++) if (a[i] < m) m = a[i]; return m }
function hi(a, n,    i, m) { m = a[1]; for (i = 2; i <= n; i++) if (a[i] > m) m = a[i]; return m }
{ n++; readmb[n] = bytes / 1048576 / ($1 / 1e6); secs[n] = $2; mbs[n] = bytes / 1048576 / $2
  ratio[n] = mbs[n] / readmb[n]; over[n] = ($3 - base) / 1024; page[n] = $4 / 1048576 }
END {
  printf "report of a %.0f MiB metrics file (%d rounds; median (min..max))\n", bytes / 1048576, n
  printf "  %-34s %10.2f  (%.2f..%.2f)\n", "wall time, s", med(secs, n), lo(secs, n), hi(secs, n)
  printf "  %-34s %10.1f  (%.1f..%.1f)\n", "report MB/s", med(mbs, n), lo(mbs, n), hi(mbs, n)
  printf "  %-34s %10.1f  (%.1f..%.1f)\n", "sequential read MB/s (ceiling)", med(readmb, n), lo(readmb, n), hi(readmb, n)
  printf "  %-34s %10.4f  (%.4f..%.4f)\n", "ratio report / read", med(ratio, n), lo(ratio, n), hi(ratio, n)
  printf "  %-34s %10.1f  (%.1f..%.1f)  bound 64 MiB; baseline %.1f MiB\n", "peak memory above baseline, MiB", med(over, n), lo(over, n), hi(over, n), base / 1024
  printf "  %-34s %10.2f  (%.2f..%.2f)  bound 4 MiB\n", "page, MiB", med(page, n), lo(page, n), hi(page, n)
}' "$dir/rows"
