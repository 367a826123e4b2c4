#!/bin/sh
# run_resilience.sh — make bench-resilience: what a lost node costs, inside
# the allocation against a resubmission, in one run on the private
# three-node Slurm cluster of tests/slurm_cluster.sh (root, network
# namespaces, Debian's Slurm and munge; run from the build directory).
# Each round runs the same job twice, in alternating order, through
# slurm/shardrun-cpu.sbatch (--nodes=3, 2 nodes x 1 task training, the
# tiny model, a checkpoint every 4 steps):
#   in-allocation: SHARDRUN_SPARE_NODES=1; node 2's rank pauses in its save
#     of step 12 (SHARDRUN_TEST_PAUSE_AT, in the first start only) and is
#     killed; the template reruns the step on node 1 and the spare;
#   resubmission: the same with MAX_STEP_RESTARTS=0: the job ends 69 and is
#     resubmitted at once, excluding node 2 (what shardrun-gpu.sbatch does;
#     here the bench does it when the job has ended);
#   memory tier: in-allocation with checkpoint.memory.every_steps 2 (each
#     node's directory its own, the namespace nodes sharing /dev/shm), node
#     2's memory directory removed with its rank: the rerun resumes from
#     the newest memory step, from node 1's replica.
# Then the stall: one job (2 nodes x 1 task, a model of 4 x 512, 12 steps)
# saving every 4 steps both to memory and synchronously to checkpoint.dir
# (the run's own disk): each memory save's stall (its snapshot) over the
# persistent save's of the same step, and over the asynchronous
# persistent save's snapshot in a second job (checkpoint.async on).
# recovery: the kill to the first step record after the next start (the
# metrics' own epoch times); steps lost: the steps the failed start did
# past the checkpoint the next start resumed from.  Median (min..max) of
# REPS rounds, and the resubmission's recovery over the in-allocation one.
# The private cluster's queue is empty: a real queue's wait adds to the
# resubmission only (shardrun ckpt list measures it with sacct).
# usage: bench/run_resilience.sh [REPS]
set -u
REPS=${1:-3}
S=$(cd "$(dirname "${SHARDRUN:-./shardrun}")" && pwd)/$(basename "${SHARDRUN:-./shardrun}")
SRC=${SR_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}
require_or_skip() {
    shift
    echo "bench-resilience: cannot run here: $*"
    exit 77
}
. "$SRC/tests/slurm_cluster.sh"
cluster2_need netns
[ -x "$S" ] || { echo "bench-resilience: $S not found (run from the build directory)"; exit 1; }
T=$(mktemp -d "${TMPDIR:-/tmp}/shardrun-bench-resilience.XXXXXX") || exit 1
trap 'cluster_stop; rm -rf "$T"' EXIT
trap 'exit 1' INT TERM
cd "$T" || exit 1
mkdir bin
cat >bin/shardrun <<EOF
#!/bin/sh
[ -n "\${LOSE_PAUSE:-}" ] && [ -z "\${SHARDRUN_RESTART_CAUSE:-}" ] && export SHARDRUN_TEST_PAUSE_AT=\$LOSE_PAUSE
exec "$S" "\$@"
EOF
chmod +x bin/shardrun
export PATH="$T/bin:$PATH" OMP_WAIT_POLICY=PASSIVE
echo "bench-resilience: starting the three-node cluster"
CL_NODES=3 cluster2_start "$T/cl" "$$" || { cluster_logs; exit 1; }

# measure NAME HOW: one lost node; prints "RECOVERY STEPS_LOST" or "- -"
measure() {
    name=$1 how=$2
    rm -rf "ck_$name" "$name.jsonl" "$name.out"
    cat >"$name.yaml" <<EOF
model: {preset: tiny, n_layer: 2, n_embd: 128, n_head: 4, seq_len: 64}
train: {steps: 24, batch_size: 8, eval_every: 0}
log: {every: 1, metrics: $T/$name.jsonl}
threads: 1
checkpoint: {dir: $T/ck_$name, every_steps: 4$([ "$how" = memory ] && echo ", memory: {every_steps: 2, dir: '$T/mem_$name/%n'}")}
comm: {interface: eth0, timeout_s: 10}
EOF
    if [ "$how" = resubmit ]; then x="SHARDRUN_SPARE_NODES=1,MAX_STEP_RESTARTS=0"; else x="SHARDRUN_SPARE_NODES=1"; fi
    J=$(cl sbatch --parsable --nodes=3 --ntasks-per-node=1 --cpus-per-task=1 --no-requeue -o "$T/$name.out" \
        --export="ALL,JOB=$T/$name.yaml,LOSE_PAUSE=after_shard_write:12@1,$x" "$SRC/slurm/shardrun-cpu.sbatch")
    wait_line "$name.out" "rank 1 stopped at after_shard_write" 120 || { echo "- -"; return; }
    for p in $(ip netns pids "$(node_ns 2)"); do
        [ "$(cat /proc/"$p"/comm 2>/dev/null)" = shardrun ] && kill -9 "$p"
    done
    rm -rf "$T/mem_$name/node2" # its memory is lost with it
    t0=$(date +%s.%N)
    st=$(job_wait "$J" "COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL" 120)
    if [ "$how" = resubmit ]; then
        [ "$st" = FAILED ] || { echo "- -"; return; }
        J=$(cl sbatch --parsable --nodes=2 --ntasks-per-node=1 --cpus-per-task=1 --no-requeue --exclude=node2 \
            -o "$T/$name.out" --export="ALL,JOB=$T/$name.yaml" "$SRC/slurm/shardrun-cpu.sbatch")
        st=$(job_wait "$J" "COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL" 120)
    fi
    [ "$st" = COMPLETED ] || { echo "- -"; return; }
    # the kill to the first step after the second start; the failed start's
    # last step less the step the second one resumed from
    awk -v t0="$t0" '
        /"event":"start"/ { n++; if (n == 2) { match($0, /"resume_step":[0-9]+/); resumed = substr($0, RSTART + 14, RLENGTH - 14) } next }
        n == 1 && /^\{"step":/ { match($0, /^\{"step":[0-9]+/); last = substr($0, 9, RLENGTH - 8) }
        n == 2 && /^\{"step":/ { match($0, /"time":[0-9.]+/); printf "%.2f %d\n", substr($0, RSTART + 7, RLENGTH - 7) - t0, last - resumed; done = 1; exit }
        END { if (!done) print "- -" }
    ' "$name.jsonl" 2>/dev/null || echo "- -"
}
# stats VALUES...: "median (min..max)"
stats() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2; printf "%.2f (%.2f..%.2f)", m, v[1], v[NR] }'; }

ra="" rr="" rm="" la="" lr="" lm="" ratios="" lratios=""
i=1
while [ $i -le "$REPS" ]; do
    if [ $((i % 2)) = 1 ]; then order="alloc resubmit memory"; else order="memory resubmit alloc"; fi
    for how in $order; do
        set -- $(measure "r${i}_$how" "$how") - -
        if [ "$1" = - ]; then
            echo "bench-resilience: round $i, $how: the job did not recover; its log:"
            tail -15 "r${i}_$how.out"
            exit 1
        fi
        eval "rec_$how=\$1 lost_$how=\$2"
    done
    echo "round $i: recovery in-allocation ${rec_alloc} s, resubmission ${rec_resubmit} s, memory tier ${rec_memory} s; steps lost ${lost_alloc}, ${lost_resubmit}, ${lost_memory}"
    ra="$ra $rec_alloc" rr="$rr $rec_resubmit" rm="$rm $rec_memory"
    la="$la $lost_alloc" lr="$lr $lost_resubmit" lm="$lm $lost_memory"
    lratios="$lratios $(awk -v m="$lost_memory" -v a="$lost_alloc" 'BEGIN { printf "%.2f", (a > 0 ? m / a : 0) }')"
    ratios="$ratios $(awk -v a="$rec_alloc" -v r="$rec_resubmit" 'BEGIN { printf "%.2f", r / a }')"
    i=$((i + 1))
done

# stall NAME ASYNC: one 2-node job saving every 4 steps to memory and to
# checkpoint.dir (checkpoint.async ASYNC); prints "MEMORY PERSISTENT" stall
# seconds per step saved, from rank 0's lines
stall() {
    name=$1
    rm -rf "ck_$name" "mem_$name"
    cat >"$name.yaml" <<EOF
model: {preset: tiny, n_layer: 4, n_embd: 512, n_head: 8, seq_len: 64}
train: {steps: 12, batch_size: 4, eval_every: 0}
log: {every: 4}
threads: 1
checkpoint: {dir: $T/ck_$name, every_steps: 4, async: $2, memory: {every_steps: 4, dir: '$T/mem_$name/%n'}}
comm: {interface: eth0, timeout_s: 30}
EOF
    J=$(cl sbatch --parsable --nodes=2 --ntasks-per-node=1 --cpus-per-task=1 --no-requeue -o "$T/$name.out" \
        --export="ALL,JOB=$T/$name.yaml" "$SRC/slurm/shardrun-cpu.sbatch")
    st=$(job_wait "$J" "COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL" 300)
    [ "$st" = COMPLETED ] || return 0
    awk '/rank 0\]: memory tier: step [0-9]+ saved/ { match($0, /step [0-9]+/); s = substr($0, RSTART + 5, RLENGTH - 5)
             match($0, /stalled [0-9.]+/); mem[s] = substr($0, RSTART + 8, RLENGTH - 8) }
         /rank 0\]: checkpoint: step [0-9]+ saved: / { match($0, /step [0-9]+/); s = substr($0, RSTART + 5, RLENGTH - 5)
             match($0, / in [0-9.]+ s/); per[s] = substr($0, RSTART + 4, RLENGTH - 6) }
         /rank 0\]: checkpoint: step [0-9]+ saved \(asynchronous/ { match($0, /step [0-9]+/); s = substr($0, RSTART + 5, RLENGTH - 5)
             match($0, /stalled [0-9.]+/); per[s] = substr($0, RSTART + 8, RLENGTH - 8) }
         END { for (s in mem) if ((s in per) && per[s] > 0) print mem[s] ":" per[s] }' "$name.out"
}
sm="" sp="" sr="" am="" ap="" ar=""
i=1
while [ $i -le "$REPS" ]; do
    for pair in $(stall "s${i}_sync" false); do
        m=${pair%:*} p=${pair#*:}
        sm="$sm $m" sp="$sp $p" sr="$sr $(awk -v m="$m" -v p="$p" 'BEGIN { printf "%.4f", m / p }')"
    done
    for pair in $(stall "s${i}_async" true); do
        m=${pair%:*} p=${pair#*:}
        am="$am $m" ap="$ap $p" ar="$ar $(awk -v m="$m" -v p="$p" 'BEGIN { printf "%.4f", m / p }')"
    done
    i=$((i + 1))
done
if [ -z "$sr" ] || [ -z "$ar" ]; then
    echo "bench-resilience: the stall jobs did not complete; their logs:"
    tail -8 "$T/s1_sync.out" "$T/s1_async.out"
    exit 1
fi

echo
echo "bench-resilience: a lost node (its rank killed) in a 2-node job, median (min..max) of $REPS rounds"
printf '%-36s %-24s %-24s %s\n' "" "in the allocation" "resubmitted" "in the allocation + memory tier"
printf '%-36s %-24s %-24s %s\n' "recovery: the loss to the next step" "$(stats $ra) s" "$(stats $rr) s" "$(stats $rm) s"
printf '%-36s %-24s %-24s %s\n' "steps lost (redone)" "$(stats $la)" "$(stats $lr)" "$(stats $lm)"
echo "recovery, resubmitted / in the allocation: $(stats $ratios)x (the same run; target in the allocation <= 20 s + the model's load)"
echo "steps lost, memory tier (every 2 steps) / without (checkpoint.dir every 4): $(stats $lratios)x (target: none before the last memory step)"
echo
echo "bench-resilience: a save's stall (the step waits), memory tier against checkpoint.dir, the same steps of one job,"
echo "median (min..max) over $REPS jobs x 2 saves"
printf '%-44s %-24s %-24s %s\n' "" "memory tier" "checkpoint.dir" "memory / checkpoint.dir"
printf '%-44s %-24s %-24s %s\n' "synchronous checkpoint.dir (async: false)" "$(stats $sm) s" "$(stats $sp) s" "$(stats $sr)x (target <= 0.10)"
printf '%-44s %-24s %-24s %s\n' "asynchronous checkpoint.dir (its snapshot)" "$(stats $am) s" "$(stats $ap) s" "$(stats $ar)x"
