#!/bin/sh
# kill_campaign.sh [N [SEED]] — N seeded moments at which every rank of a
# 2-rank job and its launcher are killed with SIGKILL, then the job is
# started again.  Half the moments are inside a checkpoint save (each rank
# that reaches a chosen point of the commit protocol at a chosen step stops
# itself there, SHARDRUN_TEST_PAUSE_AT, and the test kills everything while
# it waits), the other half a seeded delay after a chosen step was logged
# and a checkpoint committed; none before the first committed checkpoint
# (step 2); moments 1-2, 5-6, ...
# with asynchronous saves (the default), 3-4, 7-8, ... synchronous.  After each kill:
# every step_* verifies; the next start resumes, leaves no temporary
# directory behind, and ends with final parameters bitwise equal to an
# uninterrupted run's (same world size and threads: doc/ARCHITECTURE.md §3).
# make check-long runs N = 10, make check N = 2 (one kill inside an
# asynchronous save, one between steps); SHARDRUN_KILL_N, SHARDRUN_KILL_SEED
# override.
. "${SR_SRCDIR:-.}/tests/tap.sh"
S=$SHARDRUN
N=2
long_tier && N=10
N=${1:-${SHARDRUN_KILL_N:-$N}}
SEED=${2:-${SHARDRUN_KILL_SEED:-20261201}}
need_mpirun -x WRAPDIR -x SHARDRUN_TEST_PAUSE_AT -x SHARDRUN_TEST_DUMP_PARAMS
cd "$T" || exit 99
STEPS=12
job="--set model.n_layer=1 --set model.seq_len=32 --set threads=1 --set train.batch_size=4 --set log.every=1
     --set train.steps=$STEPS --set train.eval_every=0 --set checkpoint.every_steps=2 --set checkpoint.keep=2"
SITES="after_shard_write before_manifest after_manifest before_rename after_rename before_latest after_latest"

SHARDRUN_TEST_DUMP_PARAMS="$T/ref.params" $MPI -n 2 "$S" train $job </dev/null >ref.out 2>ref.err
check "the uninterrupted 2-rank run (status $?)" test -s ref.params || { done_testing; exit 0; }

# the moments, one line each: "save SITE STEP" or "run STEP DELAY_MS"
awk -v n="$N" -v seed="$SEED" -v sites="$SITES" 'BEGIN {
    srand(seed); ns = split(sites, site, " ")
    for (i = 1; i <= n; i++) {
        if (i % 2 == 1) printf "save %s %d\n", site[1 + int(rand() * ns)], 4 + 2 * int(rand() * 4)
        else printf "run %d %d\n", 3 + int(rand() * 9), int(rand() * 400)
    }
}' >moments
diag "seed $SEED: $(tr '\n' ';' <moments)"

# kill_all DIR: SIGKILL to every rank (pid.R from rank_wrap.sh) and mpirun
kill_all() {
    kill -9 "$mp" 2>/dev/null
    for f in "$1"/pid.*; do
        p=$(cat "$f" 2>/dev/null) && kill -9 "$p" 2>/dev/null
    done
    wait "$mp" 2>/dev/null
    # the wrappers end with their ranks; wait for the status files
    w=0
    while { [ ! -s "$1/status.0" ] || [ ! -s "$1/status.1" ]; } && [ $w -lt 100 ]; do sleep 0.1; w=$((w + 1)); done
}
# wait_for FILE... PATTERN: up to 60 s for PATTERN in any FILE
wait_for() {
    pat=$1
    shift
    w=0
    until grep -q "$pat" "$@" 2>/dev/null; do
        [ $w -ge 600 ] && return 1
        sleep 0.1
        w=$((w + 1))
    done
}

i=0
in_save=0
while read -r kind a b; do
    i=$((i + 1))
    d=m$i
    mkdir -p "$d"
    if [ "$kind" = save ]; then
        pause="$a:$b"
        what="inside the save of step $b at $a"
    else
        pause=""
        what="$b ms after step $a was logged"
    fi
    # moments 1, 2 with asynchronous saves (the default), 3, 4 synchronous, ...
    async=$([ $(((i - 1) / 2 % 2)) -eq 0 ] && echo true || echo false)
    what="$what, async $async"
    WRAPDIR="$T/$d" SHARDRUN_TEST_PAUSE_AT="$pause" $MPI -n 2 sh "$SR_SRCDIR/tests/rank_wrap.sh" \
        "$S" train $job --set checkpoint.dir="$d/ck" --set checkpoint.async=$async </dev/null >"$d/mpirun.out" 2>&1 &
    mp=$!
    if [ "$kind" = save ]; then
        wait_for "SHARDRUN_TEST_PAUSE_AT: rank [01] stopped at $a (step $b)" "$d/err.0" "$d/err.1"
        reached=$?
    else
        wait_for "step  *$a/$STEPS " "$d/err.0"
        reached=$?
        # and a committed checkpoint (an asynchronous save of step 2
        # commits at a later step boundary, when both writers are done)
        [ $reached -eq 0 ] && wait_for "checkpoint: step [0-9]* saved" "$d/err.0"
        reached=$?
        sleep "$(awk -v ms="$b" 'BEGIN { printf "%.3f", ms / 1000 }')"
    fi
    kill_all "$d"
    tmp_left=$(ls -a "$d/ck" 2>/dev/null | grep -c '^\.step_')
    [ "$kind" = save ] || [ "$tmp_left" -eq 0 ] || what="$what (inside a save)"
    { [ "$kind" = save ] || [ "$tmp_left" -gt 0 ]; } && in_save=$((in_save + 1))
    # every committed checkpoint verifies right after the kill
    bad=""
    for c in "$d"/ck/step_*; do
        [ -d "$c" ] || continue
        "$S" ckpt verify "$c" </dev/null >/dev/null 2>&1 || bad="$bad $(basename "$c")"
    done
    first=$(ls -d "$d"/ck/step_* 2>/dev/null | head -1)
    # the next start resumes and finishes
    WRAPDIR="$T/$d" SHARDRUN_TEST_DUMP_PARAMS="$T/$d/final.params" $MPI -n 2 "$S" train $job \
        --set checkpoint.dir="$d/ck" </dev/null >"$d/resume.out" 2>"$d/resume.err"
    rc=$?
    resumed=$(sed -n 's/.*resume=\([0-9]*\).*/\1/p' "$d/resume.err" | head -1)
    left=$(ls -a "$d/ck" | grep -c '^\.step_')
    for c in "$d"/ck/step_*; do
        "$S" ckpt verify "$c" </dev/null >/dev/null 2>&1 || bad="$bad $(basename "$c")(after)"
    done
    why=""
    [ "$reached" -eq 0 ] || why="$why; the moment was never reached"
    [ -n "$first" ] || why="$why; no checkpoint committed before the kill"
    [ -z "$bad" ] || why="$why; not verified:$bad"
    [ "$rc" -eq 0 ] || why="$why; resume status $rc"
    [ "$left" -eq 0 ] || why="$why; $left temporary directories left"
    cmp -s ref.params "$d/final.params" || why="$why; final parameters differ from the uninterrupted run"
    check "kill $i: $what; resumed at ${resumed:-?}, bitwise equal${why:+ — NOT:$why}" test -z "$why"
    [ -z "$why" ] && rm -rf "$d"
done <moments
check "$in_save of $N kills landed inside a save (at least a third)" test $((3 * in_save)) -ge "$N"
done_testing
