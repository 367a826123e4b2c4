#!/bin/sh
# ckpt_mpirun.sh — checkpoints across ranks under OpenMPI's mpirun: exact
# resume on the same world size, resharding 4->2, 2->3, 1->4, 3->1 (and HSDP
# 2x2 -> 3), a real SIGUSR1 sent to one rank only (all agree, save, exit 75),
# a save that fails on one rank only (all abort with 74, the previous
# checkpoint stays usable) and a rank killed inside a save.
. "${SR_SRCDIR:-.}/tests/tap.sh"
S=$SHARDRUN
CMP=${SR_BUILDDIR:-.}/tests/cmp_params
need_mpirun
cd "$T" || exit 99
MPI="timeout 300 $MPI"
STEPS=16
tiny_job job.yaml model.n_head=2 train.steps=$STEPS train.batch_size=12 checkpoint.every_steps=0
# train NAME RANKS [--set ...]: params NAME.params, metrics NAME.jsonl, log NAME.err, status $rc
train() {
    name=$1 n=$2
    shift 2
    SHARDRUN_TEST_DUMP_PARAMS="$T/$name.params" $MPI -n "$n" "$S" train job.yaml --set log.metrics="$T/$name.jsonl" \
        "$@" >"$name.out" 2>"$name.err"
    rc=$?
}
# losses A B TOL: the steps A logged equal B's same steps within TOL (relative)
losses() {
    grep -v '"event"' "$1.jsonl" >a.steps
    field a.steps step >a.s
    field "$1.jsonl" loss >a.l
    field "$2.jsonl" loss >b.l
    [ -s a.l ] && paste a.s a.l | awk -v tol="$3" 'NR == FNR { ref[FNR] = $1; next }
        { d = $2 - ref[$1]; if (d < 0) d = -d; if (d > tol * ref[$1]) bad = 1; n++ } END { exit bad || n == 0 }' b.l -
}

# references: uninterrupted runs
for n in 1 2 4; do
    train ref$n $n
    check "reference: $STEPS steps on $n rank(s)" test "$rc" -eq 0
done

# 1. same world size: bitwise

SHARDRUN_TEST_PREEMPT_AT=6@1 train p2 2 --set checkpoint.dir="$T/ck2b"
check "2 ranks, a signal on rank 1 at step 6: exit 75" test "$rc" -eq 75
train r2 2 --set checkpoint.dir="$T/ck2b"
check "resume on 2 ranks finishes" test "$rc" -eq 0
check "  final parameters bitwise equal the uninterrupted 2-rank run" cmp -s r2.params ref2.params
check "  losses of the resumed steps bitwise equal" losses r2 ref2 0

# 2. resharding: save on A ranks at step 6, resume on B ranks
for ab in 4:2 2:3 1:4 3:1; do
    a=${ab%:*} b=${ab#*:}
    rm -rf ck
    SHARDRUN_TEST_PREEMPT_AT=6 train sa $a --set checkpoint.dir="$T/ck"
    check "reshard $a->$b: the $a-rank run stops at step 6 with 75" sh -c "[ $rc -eq 75 ] && test -d ck/step_00000006"
    train sb $b --set checkpoint.dir="$T/ck"
    check "  the $b-rank run resumes from step 6 and finishes" sh -c "[ $rc -eq 0 ] && grep -q 'resharded from $a rank' sb.err && grep -q 'resume=6' sb.err"
    check "  losses within 1e-5 of the uninterrupted run" losses sb ref1 1e-5
    check "  parameters per tensor within 1e-5 x max" "$CMP" sb.params ref1.params 1e-5
    diag "$("$CMP" sb.params ref1.params 1e-5)"
done
rm -rf ck
SHARDRUN_TEST_PREEMPT_AT=6 train sa 4 --set checkpoint.dir="$T/ck" --set sharding.mesh.replicate=2
check "HSDP 2x2 writes one file per shard index (2 files)" sh -c "[ $rc -eq 75 ] && [ \$(ls ck/step_00000006/shard_*.bin | wc -l) -eq 2 ]"
train sb 3 --set checkpoint.dir="$T/ck"
check "  and resumes on 3 ranks within tolerance" sh -c "[ $rc -eq 0 ] && '$CMP' sb.params ref1.params 1e-5 >/dev/null"

# 3. a real signal to one rank only
WRAP="sh $SR_SRCDIR/tests/rank_wrap.sh"
rm -rf w sigck && mkdir w
WRAPDIR=$T/w $MPI -n 4 -x WRAPDIR=$T/w $WRAP "$S" train job.yaml --set train.steps=3000 \
    --set checkpoint.dir="$T/sigck" >w/mpirun.out 2>&1 &
mpid=$!
i=0
while [ $i -lt 100 ] && ! grep -q 'step  *3/3000' w/err.0 2>/dev/null; do sleep 0.2; i=$((i + 1)); done
kill -USR1 "$(cat w/pid.2)"
wait $mpid
for r in 0 1 2 3; do
    check "SIGUSR1 on rank 2 only: rank $r exits 75" test "$(cat w/status.$r 2>/dev/null)" = 75
done
check "  rank 2 logs the signal; rank 0 the agreement of 1 of 4 ranks" \
    sh -c "grep -q 'rank 2 received SIGUSR1' w/err.2 && grep -q 'agreed to stop after step [0-9]* (1 of 4 ranks saw a signal)' w/err.0"
check "  one checkpoint with 4 shard files that verifies" \
    sh -c "[ \$(ls sigck | grep -c step_) -eq 1 ] && [ \$(ls sigck/step_*/shard_*.bin | wc -l) -eq 4 ] && '$S' ckpt verify sigck >/dev/null"

# 4. a save that fails on rank 1 only: every rank exits 74, the previous checkpoint stays
rm -rf w fck && mkdir w
train base 2 --set checkpoint.dir="$T/fck" --set train.steps=4
WRAPDIR=$T/w LIMIT_RANK=1 LIMIT_BLOCKS=200 $MPI -n 2 -x WRAPDIR=$T/w -x LIMIT_RANK -x LIMIT_BLOCKS $WRAP "$S" train job.yaml \
    --set train.steps=8 --set checkpoint.dir="$T/fck" >w/mpirun.out 2>&1
check "a write failure on rank 1: rank 0 exits 74" test "$(cat w/status.0 2>/dev/null)" = 74
check "  rank 1 exits 74" test "$(cat w/status.1 2>/dev/null)" = 74
check "  rank 0 names rank 1 and the failure" grep -q "checkpoint at step 8 not saved.*rank 1: .*File too large" w/err.0
check "  the save is gone and step 4 still verifies" \
    sh -c "! ls -a fck | grep -q '^\.step_' && [ ! -e fck/step_00000008 ] && '$S' ckpt verify fck/step_00000004 >/dev/null"

# 5. a rank killed right after writing its shard: resume ends bitwise equal
rm -rf kck
SHARDRUN_TEST_CRASH_AT=after_shard_write:8@1 train k 2 --set checkpoint.dir="$T/kck" --set checkpoint.every_steps=4 \
    --set comm.timeout_s=10
check "rank 1 killed inside the step-8 save stops the job (status $rc)" test "$rc" -ne 0
train kr 2 --set checkpoint.dir="$T/kck" --set checkpoint.every_steps=4
check "  resume from step 4 ends bitwise equal to the uninterrupted run" \
    sh -c "[ $rc -eq 0 ] && grep -q 'resume=4' kr.err && cmp -s kr.params ref2.params"
done_testing
