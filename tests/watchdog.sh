#!/bin/sh
# watchdog.sh — the data plane's watchdog (comm.h): with
# SHARDRUN_TEST_STALL_SEQ=K, collective K never completes on rank 0 (its
# progress thread sleeps, as a hung plane would); rank 0's watchdog breaks
# the plane, runs its post-mortem and the run ends with 69 naming the
# collective (sequence number, operation, group), every rank within
# comm.timeout_s + 12 s:
#   a. virtual ranks (tests/test_vranks stall S): 2 and 4 ranks
#   b. mpirun, 2 and 4 ranks, each rank's status recorded
#      (tests/rank_wrap.sh)
# and a malformed SHARDRUN_TEST_STALL_SEQ is refused (78).  The fast tier
# stalls 4 virtual ranks and 2 under mpirun; the long tier also 2 virtual
# ranks and 4 under mpirun.
. "${SR_SRCDIR:-.}/tests/tap.sh"
S=$SHARDRUN
VR=${SR_BUILDDIR:-.}/tests/test_vranks
cd "$T" || exit 99

named='watchdog: collective 40 (all-gather of [0-9]* bytes on group shard) has not completed'
for n in 2 4; do
    if [ $n = 2 ]; then group --long "virtual ranks (2)"; else group "virtual ranks (4)"; fi || continue
    t0=$(date +%s)
    SHARDRUN_TEST_STALL_SEQ=40 timeout 60 "$VR" stall "$n" >vr$n.out 2>vr$n.err
    rc=$? took=$(($(date +%s) - t0))
    check "virtual ranks ($n): collective 40 stalled on rank 0 ends the run with 69 (status $rc)" test "$rc" -eq 69 ||
        diag "$(cat vr$n.out vr$n.err | head -8)"
    check "  ...within comm.timeout_s + 12 s ($took s; timeout 2 s)" test "$took" -le 14
    check "  ...rank 0 names the collective, its operation and group" grep -q "^rank 0: status 69: $named" vr$n.out
    check "  ...with the post-mortem's finding" grep -q "^rank 0: status 69: .*; post-mortem: " vr$n.out
    check "  ...and every other rank ends with 69" sh -c "[ \$(grep -c '^rank [1-9]: status 69: ' vr$n.out) -eq $((n - 1)) ]"
done

tiny_job job.yaml model.seq_len=32 train.steps=200 train.batch_size=8 train.eval_every=0 comm.timeout_s=3
expect_status 78 "a malformed SHARDRUN_TEST_STALL_SEQ is refused" env SHARDRUN_TEST_STALL_SEQ=soon "$S" train job.yaml
check "  ...naming the variable" grep -q "SHARDRUN_TEST_STALL_SEQ" "$T/err"

if have_mpirun; then
    WRAP="sh $SR_SRCDIR/tests/rank_wrap.sh"
    for n in 2 4; do
        if [ $n = 2 ]; then group "mpirun, 2 ranks"; else group --long "mpirun, 4 ranks"; fi || continue
        rm -rf w && mkdir w
        t0=$(date +%s)
        SHARDRUN_TEST_STALL_SEQ=60 WRAPDIR=$T/w timeout 120 $MPI \
            --enable-recovery -n $n -x WRAPDIR=$T/w -x SHARDRUN_TEST_STALL_SEQ $WRAP "$S" train "$T/job.yaml" \
            </dev/null >w/mpirun.out 2>&1
        took=$(($(date +%s) - t0))
        st=$(cat w/status.* 2>/dev/null | tr '\n' ' ')
        check "mpirun, $n ranks: collective 60 stalled on rank 0: every rank exits 69 ($st)" \
            sh -c "[ \$(cat w/status.* 2>/dev/null | grep -c '^69\$') -eq $n ]" || diag "$(grep -h error: w/err.* | head -6)"
        check "  ...within comm.timeout_s + 12 s ($took s; timeout 3 s)" test "$took" -le 15
        check "  ...rank 0 names the collective, its operation and group" \
            grep -q "error: watchdog: collective 60 (.* of [0-9]* bytes on group [a-z]*" w/err.0 ||
            diag "$(grep error: w/err.0)"
    done
else
    skip_mpirun "the watchdog under mpirun"
fi

done_testing
