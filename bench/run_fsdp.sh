#!/bin/sh
# run_fsdp.sh — the sharding benchmark (make bench-fsdp), all in one run:
#  1. training throughput of gpt2-124m (seq_len 256, batch 8 = 4 per rank per
#     micro-batch on 2 ranks): 1 rank x 2 threads against 2 ranks x 1 thread
#     under mpirun, median and spread of tokens/s over the timed steps;
#  2. per-rank memory by category (peaks from shardrun's own accounting) at
#     1, 2 and 4 ranks;
#  3. transport all-gather and reduce-scatter bus bandwidth (nccl-tests'
#     busBw) for 64 MiB on 2 ranks, against raw single-stream loopback TCP
#     throughput measured by the same program.
# usage: bench/run_fsdp.sh [STEPS]   (run from the build directory)
set -u
STEPS=${1:-4}
S=${SHARDRUN:-./shardrun}
MPI="mpirun --allow-run-as-root --oversubscribe"
export OMP_WAIT_POLICY=PASSIVE
d=$(mktemp -d "${TMPDIR:-/tmp}/shardrun-bench.XXXXXX")
trap 'rm -rf "$d"' EXIT
job="--set model.preset=gpt2-124m --set model.seq_len=256 --set train.batch_size=8 --set train.micro_batch=4 \
--set train.eval_every=0 --set log.every=1 --set train.steps=$STEPS --set data.train=$d/data.bin"
# byte-level data is enough for throughput: token ids < 256 are valid GPT-2 ids
"$S" data prepare -o "$d/data.bin" "$(dirname "$0")/../data/corpus.txt" 2>/dev/null || exit 1

field() { sed -n "s/.*\"$2\":\([^,}]*\).*/\1/p" "$1"; }
stats() { # FILE FIELD -> "median min max" over steps 2.. (step 1 warms up)
    field "$1" "$2" | sed 1d | sort -g | awk '{ a[NR] = $1 } END { m = (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2; printf "%.0f %.0f %.0f", m, a[1], a[NR] }'
}

echo "# 1/3 throughput" >&2
"$S" train $job --set threads=2 --set log.metrics="$d/r1.jsonl" 2>"$d/r1.err" || { tail -3 "$d/r1.err"; exit 1; }
$MPI -n 2 "$S" train $job --set threads=1 --set log.metrics="$d/r2.jsonl" 2>"$d/r2.err" || { tail -3 "$d/r2.err"; exit 1; }
set -- $(stats "$d/r1.jsonl" tokens_per_s); t1=$1 t1lo=$2 t1hi=$3
set -- $(stats "$d/r2.jsonl" tokens_per_s); t2=$1 t2lo=$2 t2hi=$3
echo
echo "gpt2-124m, seq_len 256, batch 8 sequences/step; tokens/s median (min..max) of steps 2..$STEPS"
printf '| %-24s | %-22s | %s\n' "layout" "tokens/s" "ratio"
printf '|--------------------------|------------------------|------\n'
printf '| %-24s | %6s (%6s..%6s)   | 1.00\n' "1 rank x 2 threads" "$t1" "$t1lo" "$t1hi"
printf '| %-24s | %6s (%6s..%6s)   | %.2f\n' "2 ranks x 1 thread" "$t2" "$t2lo" "$t2hi" "$(echo "$t2 $t1" | awk '{ print $1 / $2 }')"

echo "# 2/3 memory" >&2
echo
echo "gpt2-124m per-rank memory peaks by category (MiB), 1 step, micro-batch 4 per rank"
printf '| %-5s | %11s | %10s | %11s | %10s | %10s | %11s | %8s | %8s\n' ranks param_shard grad_shard optim_shard grad_accum full_units activations comm total
printf '|-------|-------------|------------|-------------|------------|------------|-------------|----------|---------\n'
for n in 1 2 4; do
    b=$((8 / n)); [ "$n" -eq 1 ] && b=8
    $MPI -n "$n" "$S" train $job --set train.steps=1 --set threads=1 --set train.micro_batch=$((b > 4 ? 4 : b)) \
        --set log.metrics="$d/m$n.jsonl" 2>"$d/m$n.err" || { tail -3 "$d/m$n.err"; exit 1; }
    row=""
    for c in param_shard grad_shard optim_shard grad_accum full_units activations comm total; do
        row="$row $(field "$d/m$n.jsonl" "mem_${c}_peak" | tail -1)"
    done
    echo "$n $row" | awk '{ printf "| %-5s | %11.1f | %10.1f | %11.1f | %10.1f | %10.1f | %11.1f | %8.1f | %8.1f\n", $1, $2/1048576, $3/1048576, $4/1048576, $5/1048576, $6/1048576, $7/1048576, $8/1048576, $9/1048576 }'
done

echo "# 3/3 transport" >&2
$MPI -n 2 ./bench/bench_comm 64 7 >"$d/comm.txt" || exit 1
raw=$(sed -n 's/.*what=raw_tcp.*MBps_median=\([0-9.]*\).*/\1/p' "$d/comm.txt")
echo
echo "CPU transport, 2 ranks, 64 MiB fp32; busBw = size x (n-1)/n / time; raw = one loopback TCP stream, same run"
printf '| %-15s | %-28s | %s\n' "operation" "MB/s median (min..max)" "ratio to raw TCP"
printf '|-----------------|------------------------------|-----------------\n'
for op in allgather reduce_scatter; do
    sed -n "s/.*what=$op .*busbw_median_MBps=\([0-9.]*\) busbw_min_MBps=\([0-9.]*\) busbw_max_MBps=\([0-9.]*\).*/\1 \2 \3/p" "$d/comm.txt" |
        awk -v op="$op" -v raw="$raw" '{ printf "| %-15s | %7.0f (%6.0f..%6.0f)      | %.2f\n", op, $1, $2, $3, $1 / raw }'
done
sed -n 's/.*what=raw_tcp.*MBps_median=\([0-9.]*\) MBps_min=\([0-9.]*\) MBps_max=\([0-9.]*\).*/\1 \2 \3/p' "$d/comm.txt" |
    awk '{ printf "| %-15s | %7.0f (%6.0f..%6.0f)      | 1.00\n", "raw TCP", $1, $2, $3 }'
