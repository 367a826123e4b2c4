#!/bin/sh
# stall.sh — the crash-loop guard (preemption.max_stalled_restarts,
# starts.h) with a fault injected at a fixed step (SHARDRUN_TEST_NAN_AT_STEP:
# the loss of step 8 is not finite, status 1, every time):
#   a. checkpoints every 5 steps: the first start commits step 5 and fails;
#      the next three resume from step 5 and fail; the fifth is refused
#      with 76, naming the step and the three starts, and changes nothing
#      on disk; `shardrun ckpt list` shows the start history
#   b. preemption.max_stalled_restarts: 0 starts it again (the documented
#      way after a fix); the fixed run completes, and the next start is
#      allowed (a completed start is not a stall)
#   c. a preemption whose checkpoint committed is not a stall: a start that
#      resumed from step 5 and ended "preempted" (SHARDRUN_TEST_PREEMPT_AT,
#      75) between failed ones does not count; and 2 ranks under mpirun
#      agree on the verdict (both exit 76, one message)
#   d. preemption.exit_status: 76 is refused (78)
. "${SR_SRCDIR:-.}/tests/tap.sh"
S=$SHARDRUN
cd "$T" || exit 99

tiny_job j.yaml train.steps=12 train.batch_size=4 checkpoint.dir=ck checkpoint.every_steps=5 checkpoint.async=false
fault() { SHARDRUN_TEST_NAN_AT_STEP=8 "$S" train j.yaml "$@" >>runs.out 2>&1; }
# (the lock file names its last holder, and flight dumps are the run's own)
snapshot() { (cd ck && find . -type f ! -name .lock ! -path './flight/*' | sort | xargs sha256sum) 2>/dev/null; }

group "a: refused at the fourth stalled start" && {
    codes=
    for i in 1 2 3 4; do
        fault
        codes="$codes $?"
    done
    check "a: four starts with the fault fail with 1 (codes:$codes)" test "$codes" = " 1 1 1 1"
    snapshot >before
    SHARDRUN_TEST_NAN_AT_STEP=8 "$S" train j.yaml >a5.out 2>a5.err
    rc=$?
    check "  the fifth is refused with 76 (got $rc)" test "$rc" -eq 76
    check "  one message naming step 5 and three starts, with the hint" \
        sh -c "[ \$(grep -c 'error:' a5.err) -eq 1 ] && grep -q 'the last 3 starts all began from the checkpoint of step 5 and none committed a newer checkpoint' a5.err && [ \$(grep -o 'job [^ ]* restart 0 at ' a5.err | wc -l) -eq 3 ] && grep -q 'max_stalled_restarts=0' a5.err"
    check "  no training" sh -c "! grep -Eq 'step +[0-9]+/12' a5.out"
    snapshot >after
    check "  nothing changed in the checkpoint directory (start history included)" cmp -s before after
    "$S" ckpt list ck >list.out 2>&1
    check "  ckpt list shows the four starts (resumed from 0, 5, 5, 5) and the guard's count" \
        sh -c "[ \$(grep -Ec '^[1-4] +[0-9T:Z-]+ +[^ ]+ +0 +1 +(0|5) (failed|running, or failed)$' list.out) -eq 4 ] && grep -q 'the newest 3 starts began from step 5' list.out" ||
        diag "$(cat list.out)"
}

group "b: max_stalled_restarts 0, then a fix" && {
    fault --set preemption.max_stalled_restarts=0
    check "b: max_stalled_restarts=0 starts again (and the fault fails it: 1)" test $? -eq 1
    "$S" train j.yaml >b.out 2>&1
    rc=$?
    check "  with the guard back on, the history still stalls at step 5: refused ($rc)" test "$rc" -eq 76
    "$S" train j.yaml --set preemption.max_stalled_restarts=0 >b2.out 2>&1
    check "  the fixed run with max_stalled_restarts=0 completes" grep -q 'done: 7 steps' b2.out
    "$S" train j.yaml >b3.out 2>&1
    check "  the next start (default guard) is allowed: a completed start is not a stall (exit $?)" \
        grep -q 'nothing left to train' b3.out
    check "  the history records both ends as done at step 12" test "$(grep -c '"how":"done","step":12' ck/starts.jsonl)" -eq 2
}

group "c: preemptions do not count" && {
    rm -rf ck
    fault # commits 5, fails
    fault # resumes 5, fails
    SHARDRUN_TEST_PREEMPT_AT=6 "$S" train j.yaml >c.out 2>&1
    check "c: a preempted start saves step 6 and exits 75 ($?)" grep -q 'exiting with status 75' c.out
    # the history as a preemption that saved nothing newer would leave it:
    # resumed from 5, ended preempted at 5 (as when the stop step is the
    # checkpoint just committed); then the newest checkpoint is 5 again
    rm -rf ck/step_00000006
    ln -sfn step_00000005 ck/latest
    sed -i 's/"how":"preempted","step":6/"how":"preempted","step":5/' ck/starts.jsonl
    SHARDRUN_TEST_NAN_AT_STEP=8 "$S" train j.yaml >c3.out 2>&1
    check "  a third start from step 5 runs (2 failed ones stall; the preempted one does not count; exit $?)" \
        grep -q 'step 8: non-finite' c3.out
    fault # the third stalled start
    if have_mpirun; then
        $MPI -n 2 -x SHARDRUN_TEST_NAN_AT_STEP=8 "$S" train j.yaml >c2.out 2>c2.err
        rc=$?
        check "  the next start, on 2 ranks under mpirun, is refused by both with 76 (mpirun: $rc) and one message" \
            sh -c "[ $rc -eq 76 ] && [ \$(grep -c 'restarts stall' c2.err) -eq 1 ]" || diag "$(cat c2.err)"
    else
        skip_mpirun "c: 2 ranks agree on the verdict"
    fi
}

group "d: exit_status 76 refused" && {
    "$S" config check j.yaml --set preemption.exit_status=76 >d.out 2>&1
    rc=$?
    check "d: preemption.exit_status: 76 is refused with 78 ($rc)" \
        sh -c "[ $rc -eq 78 ] && grep -q 'is the crash-loop guard' d.out"
}
done_testing
