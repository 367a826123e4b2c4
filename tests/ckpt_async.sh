#!/bin/sh
# ckpt_async.sh — asynchronous checkpoints (checkpoint.async, the default):
# the snapshot is written by a background thread while training goes on and
# committed at a later step boundary.  The files are byte for byte those of a
# synchronous save; a resume from them is bitwise; with a slowed writer
# (SHARDRUN_TEST_CKPT_WRITE_DELAY_MS) the commit lands steps after the
# snapshot while steps are trained in between; a save due while one is
# writing waits for it (logged); a preemption during a save in flight lets
# it finish, saves the agreed step and exits 75; a full disk in the
# background write is 74 with the previous checkpoint intact; the snapshot
# is accounted (ckpt_staging) and one that does not fit async_max_mb makes
# saves synchronous with a warning; the fake device and 2 ranks under
# mpirun resume bitwise too.  (ckpt.sh's crash sites and kill -9 points and
# the kill campaign run with it on, as the default, and off.)
. "${SR_SRCDIR:-.}/tests/tap.sh"
S=$SHARDRUN
CMP=${SR_BUILDDIR:-.}/tests/cmp_params
cd "$T" || exit 99

tiny_job job.yaml model.n_head=2 train.steps=12 train.batch_size=4 train.warmup_steps=2 checkpoint.every_steps=4 \
    checkpoint.keep=5
run() { # NAME [ENV=V...] -- [--set ...]
    name=$1
    shift
    envs=""
    while [ "$1" != "--" ]; do envs="$envs $1" && shift; done
    shift
    env SHARDRUN_TEST_DUMP_PARAMS="$T/$name.params" $envs "$S" train job.yaml --set log.metrics="$T/$name.jsonl" "$@" \
        >"$name.out" 2>"$name.err"
    rc=$?
}

# 1. async and sync write the same bytes; the start line says which
run sync -- --set checkpoint.dir="$T/syncck" --set checkpoint.async=false
run async -- --set checkpoint.dir="$T/asyncck"
check "an asynchronous run finishes (status $rc)" test "$rc" -eq 0
check "  ...and says its periodic saves are asynchronous" grep -q "periodic saves asynchronous" async.err
check "  ...a synchronous one says so" grep -q "saves synchronous" sync.err
for st in 4 8 12; do
    d=$(printf step_%08d $st)
    check "step $st: the shard file is byte for byte the synchronous save's" cmp -s syncck/$d/shard_00000.bin asyncck/$d/shard_00000.bin
done
check "the periodic saves were asynchronous, the final one synchronous" sh -c \
    "grep -q 'step 4 saved (asynchronous: started at step 4, committed at step [0-9]*)' async.err &&
     grep -q 'step 8 saved (asynchronous: started at step 8' async.err && grep -q 'step 12 saved: ' async.err"
check "every checkpoint verifies" sh -c "'$S' ckpt verify asyncck >/dev/null"
check "training is bitwise unchanged by asynchronous saves" cmp -s async.params sync.params
staging=$(last async.jsonl mem_ckpt_staging)
shard=$(last async.jsonl mem_param_shard)
check "the snapshot is accounted as ckpt_staging: params, m and v of the shard ($staging = 3 x $shard)" \
    test "$staging" -eq $((3 * shard))
check "  ...and a synchronous run has none" test "$(last sync.jsonl mem_ckpt_staging)" -eq 0

# 2. bitwise resume from an asynchronously written checkpoint
rm -rf resck && cp -a asyncck resck && rm -rf resck/step_00000008 resck/step_00000012 && ln -sfn step_00000004 resck/latest
run res -- --set checkpoint.dir="$T/resck"
check "a resume from the asynchronous step 4 finishes bitwise equal to the uninterrupted run" \
    sh -c "[ $rc -eq 0 ] && grep -q 'resume=4' res.err && cmp -s res.params sync.params"

# 3. a slowed writer: the commit lands steps after the snapshot, training goes on
run slow SHARDRUN_TEST_CKPT_WRITE_DELAY_MS=1500 -- --set checkpoint.dir="$T/slowck" --set checkpoint.every_steps=5
committed=$(sed -n 's/.*step 5 saved (asynchronous: started at step 5, committed at step \([0-9]*\)).*/\1/p' slow.err)
diag "step 5: committed at step ${committed:-?}"
check "with a 1.5 s writer delay step 5 commits at a later step (${committed:-none})" test "${committed:-0}" -gt 5
check "  ...and steps were trained between the snapshot and the commit" sh -c \
    "sed -n '/saving step 5/,/step 5 saved/p' slow.err | grep -q 'step  *6/12'"
check "  ...with bitwise the same training" cmp -s slow.params sync.params
check "  ...and the checkpoint verifies" sh -c "'$S' ckpt verify slowck/step_00000005 >/dev/null"

# 4. a save due while one is writing waits for it, and says so
run due SHARDRUN_TEST_CKPT_WRITE_DELAY_MS=2000 -- --set checkpoint.dir="$T/dueck" --set checkpoint.every_steps=2
check "a save due while another is writing waits for it (logged with the wait)" sh -c \
    "grep -q 'step 4 is due while step 2 is still being written: waiting for it' due.err &&
     grep -q 'waited [0-9.]* s for the save of step 2' due.err && [ $rc -eq 0 ]"
check "  ...every save committed once, in order" test "$(grep -o 'step [0-9]* saved' due.err | tr '\n' ' ')" = \
    "step 2 saved step 4 saved step 6 saved step 8 saved step 10 saved step 12 saved "
check "  ...bitwise the same training" cmp -s due.params sync.params

# 5. a preemption during a save in flight: it finishes, the agreed step is saved, 75
run pre SHARDRUN_TEST_CKPT_WRITE_DELAY_MS=3000 SHARDRUN_TEST_PREEMPT_AT=6 -- --set checkpoint.dir="$T/preck"
check "a preemption while step 4 is being written exits 75 ($rc)" test "$rc" -eq 75
check "  ...after the save in flight finished and committed" sh -c \
    "grep -q 'preemption: the save of step 4 in flight finished first' pre.err &&
     grep -q 'step 4 saved (asynchronous: started at step 4, committed at step 6)' pre.err"
check "  ...then one committed checkpoint at the agreed step 6, which verifies" sh -c \
    "grep -q 'agreed to stop after step 6' pre.err && [ \$(grep -c 'step 6 saved' pre.err) -eq 1 ] &&
     '$S' ckpt verify preck/step_00000006 >/dev/null && [ \"\$(readlink preck/latest)\" = step_00000006 ]"
run preres -- --set checkpoint.dir="$T/preck"
check "  ...and the resume from step 6 ends bitwise equal" sh -c "[ $rc -eq 0 ] && grep -q 'resume=6' preres.err && cmp -s preres.params sync.params"

# 6. a full disk during a background write: 74, the previous checkpoint still verifies
rm -rf fullck && mkdir fullck && cp -a syncck/step_00000004 fullck/ && ln -s step_00000004 fullck/latest
size=$(($(stat -c %s syncck/step_00000004/shard_00000.bin) / 1024 / 2))
(ulimit -f "$size" && exec "$S" train job.yaml --set checkpoint.dir="$T/fullck") >full.out 2>full.err
frc=$?
check "a background write beyond the file-size limit fails with status 74 ($frc)" test "$frc" -eq 74
check "  ...it was the asynchronous save of step 8, reported at a step boundary" sh -c \
    "grep -q 'saving step 8 .*asynchronous' full.err && grep -q 'checkpoint at step 8 not saved' full.err &&
     grep -q 'File too large' full.err"
check "  ...no temporary directory is left and step 4 still verifies" \
    sh -c "! ls -a fullck | grep -q '^\.step_' && '$S' ckpt verify fullck/step_00000004 >/dev/null"

# 7. a snapshot larger than async_max_mb: synchronous saves, with a warning
run small -- --set checkpoint.dir="$T/smallck" --set checkpoint.async_max_mb=1
check "a snapshot above checkpoint.async_max_mb makes saves synchronous with a warning" sh -c \
    "[ $rc -eq 0 ] && grep -q 'does not fit checkpoint.async_max_mb (1.0 MiB) on 1 rank: saves are synchronous' small.err &&
     grep -q 'saves synchronous' small.err && ! grep -q 'asynchronous: started' small.err"
check "  ...and accounts no snapshot" test "$(last small.jsonl mem_ckpt_staging)" -eq 0

# 8. the fake device: the snapshot is a download into pinned memory; resume is bitwise
run fake SHARDRUN_TEST_DEVICE=fake -- --set checkpoint.dir="$T/fakeck"
check "fake device: asynchronous saves, the snapshot in pinned memory" sh -c \
    "[ $rc -eq 0 ] && grep -q 'step 4 saved (asynchronous' fake.err && [ $(last fake.jsonl mem_pinned_total) -ge $((3 * shard)) ]"
check "  ...the shard files equal the CPU run's" cmp -s fakeck/step_00000008/shard_00000.bin syncck/step_00000008/shard_00000.bin
rm -rf fakeck/step_00000008 fakeck/step_00000012 && ln -sfn step_00000004 fakeck/latest
run fakeres SHARDRUN_TEST_DEVICE=fake -- --set checkpoint.dir="$T/fakeck"
check "  ...and a resume on the fake device is bitwise" sh -c "[ $rc -eq 0 ] && cmp -s fakeres.params sync.params"

# 9. a bad key value
"$S" train job.yaml --set checkpoint.async=maybe >bad.out 2>bad.err
check "checkpoint.async: maybe is refused with 78" sh -c "[ $? -eq 78 ] && grep -q 'checkpoint.async' bad.err"

# 9b. a fresh start with checkpoint.dir (nothing to resume) begins a new
# metrics file; a resumed one appends (ckpt.sh)
run fr -- --set checkpoint.dir="$T/freshck"
rm -rf freshck
run fr -- --set checkpoint.dir="$T/freshck"
check "a fresh start with checkpoint.dir begins a new metrics file (12 step records, not 24; one start)" \
    sh -c "[ \$(grep -vc '\"event\"' fr.jsonl) -eq 12 ] && [ \$(grep -c '\"event\":\"start\"' fr.jsonl) -eq 1 ]"

# 10. 2 ranks under mpirun, one writer slowed: the commit waits for both; resume bitwise
if have_mpirun; then
    SHARDRUN_TEST_DUMP_PARAMS="$T/m2.params" timeout 300 $MPI -n 2 "$S" train job.yaml \
        --set checkpoint.async=false </dev/null >m2.out 2>m2.err
    SHARDRUN_TEST_CKPT_WRITE_DELAY_MS=1000 SHARDRUN_TEST_DUMP_PARAMS="$T/m2a.params" timeout 300 $MPI -n 2 \
        -x SHARDRUN_TEST_CKPT_WRITE_DELAY_MS -x SHARDRUN_TEST_DUMP_PARAMS "$S" train job.yaml \
        --set checkpoint.dir="$T/m2ck" </dev/null >m2a.out 2>m2a.err
    check "2 ranks: asynchronous saves commit at a later step" sh -c \
        "grep -q 'step 4 saved (asynchronous: started at step 4, committed at step' m2a.err && '$S' ckpt verify m2ck >/dev/null"
    check "  ...training bitwise unchanged" cmp -s m2a.params m2.params
    rm -rf m2ck/step_00000008 m2ck/step_00000012 && ln -sfn step_00000004 m2ck/latest
    SHARDRUN_TEST_DUMP_PARAMS="$T/m2r.params" timeout 300 $MPI -n 2 -x SHARDRUN_TEST_DUMP_PARAMS "$S" train job.yaml \
        --set checkpoint.dir="$T/m2ck" </dev/null >m2r.out 2>m2r.err
    check "  ...a 2-rank resume from step 4 ends bitwise equal" sh -c "grep -q 'resume=4' m2r.err && cmp -s m2r.params m2.params"
else
    skip_mpirun "asynchronous saves on 2 ranks"
fi
done_testing
