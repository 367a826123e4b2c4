#!/bin/sh
# run.sh — the training-throughput benchmark table (make bench).
#
# Rows: tiny, gpt2-124m, llama-tiny and llama-125m (seq_len 256, 4
# sequences per micro-batch) on 1 and 2 cores.  For each row, in the same run and interleaved over ROUNDS
# rounds so machine noise hits all alike:
#   shardrun: bench/bench_train (ms per optimizer step, and OpenBLAS SGEMM
#             GFLOP/s on the step's own GEMM shapes = the machine's ceiling);
#   baseline: the same program of a baseline build (bench/baseline.sh:
#             BASELINE=DIR|FILE|REV, default the previous commit;
#             BASELINE=none to skip), with new/old = tokens/s ratio per
#             round, median (min..max) over rounds;
#   PyTorch:  bench/bench_torch.py, eager float32, in its best thread setting
#             (1 core: torch threads 1 pinned with taskset; 2 cores: the
#             faster of torch threads 2 with OMP_WAIT_POLICY=PASSIVE and
#             torch threads 1 letting OpenBLAS use both cores); BENCH_TORCH=0
#             skips it.
# Cores are pinned with taskset (-c 0, or -c 0,1), so a "1 thread" row
# really has one core.  Reported: median and spread (min..max) over all timed
# steps, tokens/s, GFLOP/s, ratio to the SGEMM ceiling and to PyTorch, and
# each process's peak resident memory (the largest over its rounds).
# With a baseline, also the first 20 losses of the default job from both
# shardrun binaries (relative difference) and their memory per category.
#
# usage: bench/run.sh [STEPS [ROUNDS]]
#   env: BENCH_STEPS, BENCH_ROUNDS (instead of the arguments),
#        BENCH_MODELS="tiny gpt2-124m llama-tiny llama-125m"
set -u
STEPS=${1:-${BENCH_STEPS:-3}}
ROUNDS=${2:-${BENCH_ROUNDS:-2}}
MODELS=${BENCH_MODELS:-"tiny gpt2-124m llama-tiny llama-125m"}
here=$(cd "$(dirname "$0")" && pwd)
BENCH=${BENCH_TRAIN:-./bench/bench_train}
S=${SHARDRUN:-./shardrun}
PY=/usr/bin/python3
out=$(mktemp "${TMPDIR:-/tmp}/shardrun-bench.XXXXXX")
trap 'rm -f "$out" "$out".*' EXIT
have_torch=yes
[ "${BENCH_TORCH:-1}" = 0 ] && have_torch=skipped
[ $have_torch = yes ] && ! $PY -c 'import torch' 2>/dev/null && have_torch=no
BASE=""
[ "${BASELINE:-}" = none ] || BASE=$(SR_SRCDIR="$here/.." sh "$here/baseline.sh")
[ -n "$BASE" ] && echo "# baseline: $BASE" >&2

for model in $MODELS; do
    for th in 1 2; do
        cpus=0
        [ "$th" -eq 2 ] && cpus=0,1
        r=0
        while [ "$r" -lt "$ROUNDS" ]; do
            echo "# round $((r + 1))/$ROUNDS: $model, $th core(s)" >&2
            taskset -c "$cpus" "$BENCH" "$model" "$th" "$STEPS" | sed "s/\$/ round=$r/" >>"$out" || exit 1
            if [ -n "$BASE" ]; then
                taskset -c "$cpus" "$BASE/bench/bench_train" "$model" "$th" "$STEPS" |
                    sed "s/impl=shardrun/impl=baseline/; s/\$/ round=$r/" >>"$out" || exit 1
            fi
            if [ "$have_torch" = yes ]; then
                OMP_WAIT_POLICY=PASSIVE SR_TORCH_SETTING="torch threads $th, OMP_WAIT_POLICY=PASSIVE" \
                    taskset -c "$cpus" $PY "$here/bench_torch.py" "$model" "$th" "$STEPS" >>"$out" || exit 1
                if [ "$th" -eq 2 ]; then
                    OMP_WAIT_POLICY=PASSIVE SR_TORCH_SETTING="torch threads 1, OpenBLAS on 2 cores" \
                        taskset -c "$cpus" $PY "$here/bench_torch.py" "$model" 1 "$STEPS" |
                        sed 's/threads=1/threads=2/' >>"$out" || exit 1
                fi
            fi
            r=$((r + 1))
        done
    done
done

echo
echo "Training step, seq_len 256, 4 sequences per micro-batch; median (min..max) of $((STEPS * ROUNDS)) timed steps per row."
echo "ratio = end-to-end GFLOP/s / OpenBLAS SGEMM GFLOP/s on the step's GEMM shapes (same run, same cores)."
[ "$have_torch" = no ] && echo "PyTorch rows: blocked: /usr/bin/python3 cannot import torch (apt-get install python3-torch)."
awk -v have_torch="$have_torch" '
function median(list,    n, a, i, j, t) {
    n = split(list, a, ",")
    for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
    lo = a[1]; hi = a[n]
    return (n % 2) ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
}
/^RESULT/ {
    delete f
    for (i = 2; i <= NF; i++) { eq = index($i, "="); f[substr($i, 1, eq - 1)] = substr($i, eq + 1) }
    key = f["model"] SUBSEP f["threads"]
    if (!(key in seen)) { seen[key] = 1; order[++nrows] = key }
    pk = f["impl"] == "torch" ? "torch" : f["impl"]
    if (f["peak_mib"] + 0 > peak[key, pk]) peak[key, pk] = f["peak_mib"] + 0
    if (f["impl"] == "shardrun" || f["impl"] == "baseline") {
        im = f["impl"]
        all[key, im] = all[key, im] (all[key, im] ? "," : "") f["ms"]
        per[key, im, f["round"]] = f["ms"]
        rounds[key] = f["round"] + 1 > rounds[key] ? f["round"] + 1 : rounds[key]
        if (im == "shardrun") {
            flops[key] = f["flops_per_step"]
            g = f["sgemm_gflops"]; if (g > ceil[key]) ceil[key] = g
        }
    } else {
        s = f["setting"]
        tr[key, s] = tr[key, s] (tr[key, s] ? "," : "") f["ms"]
        if (!((key, s) in tset)) { tset[key, s] = 1; tsets[key] = tsets[key] (tsets[key] ? ";" : "") s }
    }
}
END {
    printf "| %-10s | %-5s | %-8s | %-24s | %8s | %8s | %8s | %6s | %-8s | %8s | %s\n", "model", "cores", "impl", "ms/step median (min..max)", "tok/s", "GFLOP/s", "SGEMM", "ratio", "vs torch", "peak MiB", "new/old tok/s, median (min..max) of rounds"
    printf "|------------|-------|----------|--------------------------|----------|----------|----------|--------|----------|----------|------------------\n"
    for (r = 1; r <= nrows; r++) {
        key = order[r]; split(key, kt, SUBSEP)
        m = median(all[key, "shardrun"]); l = lo; h = hi
        tok = 1024 / (m / 1000); gf = flops[key] / (m / 1000) / 1e9
        best = 0; bests = ""
        n = split(tsets[key], ss, ";")
        for (i = 1; i <= n; i++) { tm = median(tr[key, ss[i]]); if (best == 0 || tm < best) { best = tm; bests = ss[i]; bl = lo; bh = hi } }
        vs = best ? sprintf("%.2fx", best / m) : (have_torch == "skipped" ? "skipped" : "blocked")
        no = ""
        if ((key, "baseline") in all) {
            ratios = ""
            for (k = 0; k < rounds[key]; k++) {
                split(per[key, "shardrun", k], pa, ","); split(per[key, "baseline", k], pb, ",")
                ma = median(per[key, "shardrun", k]); mb = median(per[key, "baseline", k])
                ratios = ratios (ratios ? "," : "") mb / ma
            }
            rm = median(ratios)
            no = sprintf("%.3f (%.3f..%.3f) over %d rounds", rm, lo, hi, rounds[key])
        }
        printf "| %-10s | %-5s | %-8s | %9.1f (%6.1f..%6.1f) | %8.0f | %8.1f | %8.1f | %6.2f | %-8s | %8.0f | %s\n", kt[1], kt[2], "shardrun", m, l, h, tok, gf, ceil[key], gf / ceil[key], vs, peak[key, "shardrun"], no
        if ((key, "baseline") in all) {
            bm = median(all[key, "baseline"])
            printf "| %-10s | %-5s | %-8s | %9.1f (%6.1f..%6.1f) | %8.0f | %8.1f | %8s | %6s | %-8s | %8.0f |\n", kt[1], kt[2], "baseline", bm, lo, hi, 1024 / (bm / 1000), flops[key] / (bm / 1000) / 1e9, "", "", "", peak[key, "baseline"]
        }
        if (best) {
            gsub("~", " ", bests)
            printf "| %-10s | %-5s | %-8s | %9.1f (%6.1f..%6.1f) | %8.0f | %8.1f | %8s | %6s | %-8s | %8.0f | %s\n", kt[1], kt[2], "pytorch", best, bl, bh, 1024 / (best / 1000), flops[key] / (best / 1000) / 1e9, "", "", "", peak[key, "torch"], bests
        }
    }
    print "vs torch = shardrun tokens/s / PyTorch tokens/s (above 1: shardrun faster); new/old = shardrun / baseline tokens/s;"
    print "peak MiB = the process'"'"'s peak resident memory (getrusage), the largest of its rounds."
}' "$out"

[ -n "$BASE" ] || exit 0
# the default job's first 20 losses and its memory, from both binaries
echo
echo "The default job (tiny), 20 steps, 2 threads: this build vs the baseline"
OMP_WAIT_POLICY=PASSIVE "$S" train --set train.steps=20 --set log.every=1 --set threads=2 \
    --set log.metrics="$out.new" 2>/dev/null || exit 1
OMP_WAIT_POLICY=PASSIVE "$BASE/shardrun" train --set train.steps=20 --set log.every=1 --set threads=2 \
    --set log.metrics="$out.old" 2>/dev/null || exit 1
field() { sed -n "s/.*\"$2\":\([^,}]*\).*/\1/p" "$1"; }
field "$out.new" loss >"$out.nl"
field "$out.old" loss >"$out.ol"
paste "$out.nl" "$out.ol" | awk '
    BEGIN { printf "| step | loss (this build)   | loss (baseline)     | relative difference\n|------|---------------------|---------------------|--------------------\n" }
    { d = $1 - $2; if (d < 0) d = -d; r = d / ($2 < 0 ? -$2 : $2); if (r > worst) worst = r
      printf "| %4d | %19.15f | %19.15f | %.2g\n", NR, $1, $2, r }
    END { printf "worst relative difference %.2g over %d steps: %s\n", worst, NR, worst <= 1e-6 ? "equal within 1e-6" : "NOT within 1e-6" }'
tail -1 "$out.new" | tr ',' '\n' | grep '"mem_' | sed 's/[{}"]//g' | sort >"$out.nm"
tail -1 "$out.old" | tr ',' '\n' | grep '"mem_' | sed 's/[{}"]//g' | sort >"$out.om"
if cmp -s "$out.nm" "$out.om"; then
    echo "memory per category (current and peak, bytes): identical ($(wc -l <"$out.nm") figures)"
else
    echo "memory per category differs:"
    diff "$out.om" "$out.nm" | sed 's/^/  /'
fi
