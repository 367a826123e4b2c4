#!/bin/sh
# launcher.sh — the launcher dies under a running job (kill -9 of mpirun):
# every rank notices, exits 69 within comm.timeout_s + 12 s naming the lost
# launcher, attempts no save, and leaves the checkpoint lock free, so the
# resubmitted job resumes from the last committed checkpoint.  Two
# witnesses, each shown alone:
#   a. PMIx's report that the connection to its server is lost, with the
#      ranks under tests/rank_wrap.sh (their parent is a shell, not the
#      launcher);
#   b. the parent's death, when the parent is the PMIx server (sh -c exec:
#      mpirun is the parent), with PMIx events off (SHARDRUN_TEST_NO_PMIX_EVENTS);
#   c. and the rule's other side: with PMIx events off, a wrapper shell is
#      not taken for the launcher (the ranks are still running after
#      mpirun's death; the test ends them by PID).
# (Under Slurm: tests/slurm.sh, a lost slurmstepd.)
. "${SR_SRCDIR:-.}/tests/tap.sh"
S=$SHARDRUN
cd "$T" || exit 99
need_mpirun -x WRAPDIR -x SHARDRUN_TEST_NO_PMIX_EVENTS
job="--set model.n_layer=1 --set model.seq_len=32 --set threads=1 --set train.batch_size=2 --set log.every=1
     --set checkpoint.every_steps=3 --set comm.timeout_s=10"

# start MODE DIR: a 2-rank job writing checkpoints to DIR/ck, each rank's
# pid, status and stderr in DIR (wrap: tests/rank_wrap.sh; exec: sh -c exec,
# so mpirun is each rank's parent); mpirun's pid in $mp
start() {
    mkdir -p "$2"
    if [ "$1" = wrap ]; then
        WRAPDIR="$T/$2" $MPI -n 2 sh "$SR_SRCDIR/tests/rank_wrap.sh" "$S" train $job --set checkpoint.dir="$2/ck" \
            --set train.steps=1000000 >"$2/mpirun.out" 2>&1 &
    else
        WRAPDIR="$T/$2" $MPI -n 2 sh -c 'r=$OMPI_COMM_WORLD_RANK; echo $$ >"$WRAPDIR/pid.$r"; exec "$@" 2>"$WRAPDIR/err.$r"' \
            sh "$S" train $job --set checkpoint.dir="$2/ck" --set train.steps=1000000 >"$2/mpirun.out" 2>&1 &
    fi
    mp=$!
    i=0
    while [ ! -e "$2/ck/latest" ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i + 1)); done
    sleep 1
}
# stop_all DIR: ends by PID whatever of the job still runs
stop_all() {
    for f in "$1"/pid.*; do
        p=$(cat "$f" 2>/dev/null) && kill -0 "$p" 2>/dev/null && kill -9 "$p"
    done
    kill -9 "$mp" 2>/dev/null
    wait "$mp" 2>/dev/null
}
# alive DIR: how many ranks still run
alive() {
    n=0
    for f in "$1"/pid.*; do
        p=$(cat "$f" 2>/dev/null) && kill -0 "$p" 2>/dev/null && n=$((n + 1))
    done
    echo $n
}
# ended DIR: waits up to 45 s for both ranks to end; seconds taken in $took
ended() {
    t0=$(date +%s)
    i=0
    while [ "$(alive "$1")" -gt 0 ] && [ $i -lt 450 ]; do sleep 0.1; i=$((i + 1)); done
    took=$(($(date +%s) - t0))
}
# resumes DIR: the lock is free and the last checkpoint loads
resumes() {
    last=$(newest "$1/ck")
    "$S" train $job --set checkpoint.dir="$1/ck" --set train.steps=$((last + 2)) >"$1/resume.out" 2>"$1/resume.err"
    rc=$?
    check "  ...the lock is free: a new run resumes from step $last and finishes (status $rc)" \
        sh -c "[ $rc -eq 0 ] && grep -q 'resume=$last' '$1/resume.err'"
    check "  ...no temporary directory is left" sh -c "! ls -a '$1/ck' | grep -q '^\\.step_'"
    expect_status 0 "  ...every checkpoint verifies" "$S" ckpt verify "$1/ck"
}

# --- a. PMIx reports the lost server -----------------------------------------
start wrap a
check "a: the job committed a checkpoint before the kill" test -e a/ck/latest
kill -9 "$mp"
ended a
st0=$(cat a/status.0 2>/dev/null || echo none)
st1=$(cat a/status.1 2>/dev/null || echo none)
stop_all a
check "a: kill -9 of mpirun: both ranks exit 69 ($st0, $st1) within comm.timeout_s + 12 s (${took} s)" \
    sh -c "[ '$st0' = 69 ] && [ '$st1' = 69 ] && [ $took -le 22 ]"
check "  ...each with one message naming the lost PMIx server, and nothing after it (no save)" \
    sh -c "for r in 0 1; do [ \$(grep -c 'error:' a/err.\$r) -eq 1 ] &&
               tail -1 a/err.\$r | grep -q 'lost the connection to the launcher.s PMIx server' || exit 1; done" ||
    diag "rank 0's stderr:" "$(tail -5 a/err.0)" "rank 1's stderr:" "$(tail -5 a/err.1)"
resumes a

# --- b. the parent is the PMIx server, and it dies ----------------------------
export SHARDRUN_TEST_NO_PMIX_EVENTS=1
start exec b
check "b: the job committed a checkpoint before the kill" test -e b/ck/latest
kill -9 "$mp"
ended b
left=$(alive b)
stop_all b
check "b: PMIx events off, kill -9 of mpirun (the ranks' parent): both ranks end within comm.timeout_s + 12 s (${took} s; $left left)" \
    sh -c "[ $left -eq 0 ] && [ $took -le 22 ]"
check "  ...each naming the launcher as its parent and PMIx server, nothing after it" \
    sh -c "for r in 0 1; do tail -1 b/err.\$r | grep -q 'error: the launcher (process [0-9]*, this rank.s parent and its PMIx server) exited' || exit 1; done" ||
    diag "rank 0's stderr:" "$(tail -4 b/err.0)" "rank 1's stderr:" "$(tail -4 b/err.1)"
resumes b

# --- c. a wrapper shell is not the launcher -----------------------------------
start wrap c
kill -9 "$mp"
sleep 5
left=$(alive c)
stop_all c
check "c: PMIx events off, ranks under a wrapper shell: mpirun's death is not taken from the parent ($left of 2 still running after 5 s)" \
    sh -c "[ $left -eq 2 ] && ! grep -q 'the launcher (process' c/err.0 c/err.1"
unset SHARDRUN_TEST_NO_PMIX_EVENTS
done_testing
