#!/bin/sh
# run.sh — the training-throughput benchmark table (make bench).
#
# Rows: tiny and gpt2-124m (seq_len 256, 4 sequences per micro-batch) on 1
# and 2 cores.  For each row, in the same run and interleaved over ROUNDS
# rounds so machine noise hits both alike:
#   shardrun: bench/bench_train (ms per optimizer step, and OpenBLAS SGEMM
#             GFLOP/s on the step's own GEMM shapes = the machine's ceiling);
#   PyTorch:  bench/bench_torch.py, eager float32, in its best thread setting
#             (1 core: torch threads 1 pinned with taskset; 2 cores: the
#             faster of torch threads 2 with OMP_WAIT_POLICY=PASSIVE and
#             torch threads 1 letting OpenBLAS use both cores).
# Cores are pinned with taskset (-c 0, or -c 0,1), so a "1 thread" row
# really has one core.  Reported: median and spread (min..max) over all timed
# steps, tokens/s, GFLOP/s, ratio to the SGEMM ceiling and to PyTorch.
#
# usage: bench/run.sh [STEPS [ROUNDS]]   env: BENCH_MODELS="tiny gpt2-124m"
set -u
STEPS=${1:-3}
ROUNDS=${2:-2}
MODELS=${BENCH_MODELS:-"tiny gpt2-124m"}
here=$(cd "$(dirname "$0")" && pwd)
BENCH=${BENCH_TRAIN:-./bench/bench_train}
PY=/usr/bin/python3
out=$(mktemp "${TMPDIR:-/tmp}/shardrun-bench.XXXXXX")
trap 'rm -f "$out"' EXIT
have_torch=yes
$PY -c 'import torch' 2>/dev/null || have_torch=no

for model in $MODELS; do
    for th in 1 2; do
        cpus=0; [ "$th" -eq 2 ] && cpus=0,1
        r=0
        while [ "$r" -lt "$ROUNDS" ]; do
            echo "# round $((r + 1))/$ROUNDS: $model, $th core(s)" >&2
            taskset -c "$cpus" "$BENCH" "$model" "$th" "$STEPS" >>"$out" || exit 1
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
    for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
    lo = a[1]; hi = a[n]
    return (n % 2) ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
}
/^RESULT/ {
    delete f
    for (i = 2; i <= NF; i++) { eq = index($i, "="); f[substr($i, 1, eq - 1)] = substr($i, eq + 1) }
    key = f["model"] SUBSEP f["threads"]
    if (!(key in seen)) { seen[key] = 1; order[++nrows] = key }
    if (f["impl"] == "shardrun") {
        sr[key] = sr[key] (sr[key] ? "," : "") f["ms"]
        flops[key] = f["flops_per_step"]
        g = f["sgemm_gflops"]; if (g > ceil[key]) ceil[key] = g
    } else {
        s = f["setting"]
        tr[key, s] = tr[key, s] (tr[key, s] ? "," : "") f["ms"]
        if (!((key, s) in tset)) { tset[key, s] = 1; tsets[key] = tsets[key] (tsets[key] ? ";" : "") s }
    }
}
END {
    printf "| %-9s | %-5s | %-8s | %-24s | %8s | %8s | %8s | %6s | %s\n", "model", "cores", "impl", "ms/step median (min..max)", "tok/s", "GFLOP/s", "SGEMM", "ratio", "vs torch"
    printf "|-----------|-------|----------|--------------------------|----------|----------|----------|--------|---------\n"
    for (r = 1; r <= nrows; r++) {
        key = order[r]; split(key, kt, SUBSEP)
        m = median(sr[key]); l = lo; h = hi
        tok = 1024 / (m / 1000); gf = flops[key] / (m / 1000) / 1e9
        best = 0; bests = ""
        n = split(tsets[key], ss, ";")
        for (i = 1; i <= n; i++) { tm = median(tr[key, ss[i]]); if (best == 0 || tm < best) { best = tm; bests = ss[i]; bl = lo; bh = hi } }
        vs = best ? sprintf("%.2fx", best / m) : "blocked"
        printf "| %-9s | %-5s | %-8s | %9.1f (%6.1f..%6.1f) | %8.0f | %8.1f | %8.1f | %6.2f | %s\n", kt[1], kt[2], "shardrun", m, l, h, tok, gf, ceil[key], gf / ceil[key], vs
        if (best) {
            gsub("~", " ", bests)
            printf "| %-9s | %-5s | %-8s | %9.1f (%6.1f..%6.1f) | %8.0f | %8.1f | %8s | %6s | %s\n", kt[1], kt[2], "pytorch", best, bl, bh, 1024 / (best / 1000), flops[key] / (best / 1000) / 1e9, "", "", bests
        }
    }
    print "vs torch = shardrun tokens/s / PyTorch tokens/s (above 1: shardrun faster)."
}' "$out"
