#!/bin/sh
# scale.sh — the scale rehearsal: what each rank sends and asks of its
# bootstrap as the rank count doubles, on one machine (mpirun,
# oversubscribed), with the tiny model.  Counts, not times: connections a
# rank opens, messages and bytes it sends over the host transport, and
# bootstrap (PMIx) operations, per phase — start-up, one training step, one
# checkpoint commit, a resume (its start-up beyond a fresh one) — from the
# ranks' counters (SHARDRUN_BENCH_COUNTS, counts.h).  The counts are
# deterministic; the table prints the largest rank's value and its growth
# per doubling of the rank count (2.0 = linear in the ranks, 1.0 = flat).
# Then a 32-rank checkpoint resumed on 24 ranks: the next 4 steps' losses
# within 1e-5 relative of the 32-rank continuation, and the parameters
# within 1e-5 x max|b| per tensor (tests/cmp_params).  Then the manifest of
# 4,096 ranks' shard records written, parsed and verified
# (bench/bench_manifest: time and size, and their growth per doubling).
#
# usage: bench/scale.sh [RANKS...]   (default 4 8 16 32)
set -u
B=${SR_BUILDDIR:-.}
S=${SHARDRUN:-$B/shardrun}
CMP=$B/tests/cmp_params
RANKS=${*:-4 8 16 32}
command -v mpirun >/dev/null 2>&1 || { echo "scale.sh: needs mpirun (apt-get install openmpi-bin)"; exit 1; }
d=$(mktemp -d "${TMPDIR:-/tmp}/shardrun-scale.XXXXXX")
trap 'rm -rf "$d"' EXIT
MPI="mpirun --allow-run-as-root --oversubscribe --bind-to none -x OMP_WAIT_POLICY=PASSIVE -x SHARDRUN_BENCH_COUNTS"
MPI="$MPI -x SHARDRUN_TEST_DUMP_PARAMS"
# the job: 96 sequences per step split over every rank count used here
cat >"$d/job.yaml" <<YAML
model: {preset: tiny, n_layer: 2, n_embd: 64, n_head: 4, seq_len: 32}
train: {steps: 5, batch_size: 96, eval_every: 0, schedule: constant}
log: {every: 1}
threads: 1
checkpoint: {every_steps: 3, async: false}
comm: {timeout_s: 120}
YAML
# run N NAME CKPTDIR STEPS: one run; its counters in $d/NAME/
run() {
    mkdir -p "$d/$2"
    SHARDRUN_BENCH_COUNTS=$d/$2 SHARDRUN_TEST_DUMP_PARAMS=$d/$2.params \
        timeout 900 $MPI -n "$1" "$S" train "$d/job.yaml" --set checkpoint.dir="$3" --set train.steps="$4" \
        --set log.metrics="$d/$2.jsonl" >"$d/$2.out" 2>&1 </dev/null ||
        { echo "scale.sh: the $1-rank run $2 failed:"; tail -5 "$d/$2.out"; exit 1; }
}
# max over ranks of counter F (1 = connections .. 4 = boot ops) of line
# "WHAT STEP" minus line "WHAT2 STEP2" of the same rank (WHAT2 "-": 0)
delta() { # DIR WHAT STEP WHAT2 STEP2 FIELD
    for f in "$1"/rank*.tsv; do
        awk -v w="$2" -v s="$3" -v w2="$4" -v s2="$5" -v c="$6" '
            $1 == w && $2 == s { a = $(c + 2) } $1 == w2 && $2 == s2 { b = $(c + 2) }
            END { print a - b }' "$f"
    done | sort -n | tail -1
}
echo "scale rehearsal: the tiny model (2 layers, width 64), batch 96, under mpirun --oversubscribe on $(nproc) cores"
echo "largest per-rank count; growth = this row / the row at half the ranks (2.0 = linear)"
printf '%-27s %6s %12s %12s %15s %14s\n' phase ranks connections messages bytes bootstrap_ops
prev=""
for n in $RANKS; do
    run "$n" "f$n" "$d/ck$n" 5
    run "$n" "r$n" "$d/ck$n" 7 # resumes from step 5
    for ph in startup step save resume; do
        row=""
        for c in 1 2 3 4; do
            case $ph in
            startup) v=$(delta "$d/f$n" startup 0 - 0 $c) ;;
            step) v=$(delta "$d/f$n" step 2 step 1 $c) ;;
            save) v=$(($(delta "$d/f$n" step 4 step 3 $c) - $(delta "$d/f$n" step 2 step 1 $c))) ;;
            resume) v=$(($(delta "$d/r$n" resume 5 - 0 $c) - $(delta "$d/f$n" startup 0 - 0 $c))) ;;
            esac
            row="$row $v"
        done
        echo "$ph $n$row" >>"$d/table"
    done
done
awk '
    { key = $1; n = $2; for (c = 3; c <= 6; c++) v[key, n, c] = $c; ranks[n] = 1; phases[key] = NR }
    END {
        split("startup step save resume", order, " ")
        label["startup"] = "start-up"; label["step"] = "a step"; label["save"] = "a checkpoint commit"
        label["resume"] = "a resume (beyond start-up)"
        for (i = 1; i <= 4; i++) {
            p = order[i]; last = 0
            for (n = 1; n <= 4096; n *= 2) if ((p, n, 3) in v) {
                printf "%-27s %6d", label[p], n
                for (c = 3; c <= 6; c++) {
                    g = (last && v[p, last, c] > 0) ? sprintf("(x%.2f)", v[p, n, c] / v[p, last, c]) : ""
                    printf " %12s", v[p, n, c] g
                }
                printf "\n"; last = n
            }
        }
    }' "$d/table"

# --- a 32-rank checkpoint resumed on 24 ranks -------------------------------
big=$(echo $RANKS | awk '{ print $NF }')
small=$((big * 3 / 4))
run "$big" "c$big" "$d/cont$big" 10 # its own lineage: 1..10, checkpoints at 3, 6, 9 and 10
mkdir -p "$d/from"
cp -r "$d/cont$big/step_00000006" "$d/from/"
run "$small" "x$small" "$d/from" 10 # resumes the big run's step 6 on fewer ranks
loss() { grep -o '"step":[0-9]*,[^}]*"loss":[0-9.e+-]*' "$1" | sed 's/"step":\([0-9]*\),.*"loss":\(.*\)/\1 \2/'; }
loss "$d/c$big.jsonl" | awk '$1 > 6' >"$d/lb"
loss "$d/x$small.jsonl" | awk '$1 > 6' >"$d/ls"
worst=$(paste "$d/lb" "$d/ls" | awk '{ r = ($2 - $4) / $2; if (r < 0) r = -r; if (r > m) m = r } END { printf "%.2e", m }')
n4=$(wc -l <"$d/ls")
pok=FAIL
"$CMP" "$d/x$small.params" "$d/c$big.params" 1e-5 >"$d/cmp" 2>&1 && pok=ok
lok=FAIL
awk -v w="$worst" -v n="$n4" 'BEGIN { exit !(w <= 1e-5 && n == 4) }' && lok=ok
echo
echo "resume across rank counts: $big ranks' checkpoint of step 6 resumed on $small ranks, steps 7-10 against the $big-rank run"
printf '  largest relative loss difference %s (%s, bound 1e-5); final parameters %s (1e-5 x max|b| per tensor): %s\n' \
    "$worst" "$lok" "$pok" "$(tail -1 "$d/cmp")"

# --- the manifest of many ranks ------------------------------------------------
echo
"$B/bench/bench_manifest" 512 1024 2048 4096
[ "$lok" = ok ] && [ "$pok" = ok ]
