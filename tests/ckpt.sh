#!/bin/sh
# ckpt.sh — sharded checkpoints in one process: the on-disk format and
# manifest, retention, exact (bitwise) resume after a preemption signal, a
# real signal (and a second one during the save), every named crash site and
# 10 seeded random kill -9 points, the corruption matrix with fallback to the
# previous checkpoint, a full disk (ulimit -f), the directory lock,
# checkpoint.resume never / PATH, changed keys, a changed model shape, the
# requeue modes, and the ckpt list / verify / inspect / export commands.
. "${SR_SRCDIR:-.}/tests/tap.sh"
S=$SHARDRUN
cd "$T" || exit 99

tiny_job job.yaml model.n_head=2 train.steps=12 train.batch_size=4 train.warmup_steps=2 train.eval_every=6 \
    train.eval_batches=1 checkpoint.every_steps=4 checkpoint.keep=3
# run NAME [args]: trains job.yaml; params in NAME.params, log in NAME.err, status in $rc
run() {
    name=$1
    shift
    SHARDRUN_TEST_DUMP_PARAMS="$T/$name.params" "$S" train job.yaml --set log.metrics="$T/$name.jsonl" "$@" \
        >"$name.out" 2>"$name.err"
    rc=$?
}
same() { cmp -s "$1.params" "$2.params"; }
flipbit() { # FILE OFFSET: flips the lowest bit of the byte at OFFSET
    python3 -c "import sys
p, o = sys.argv[1], int(sys.argv[2])
b = bytearray(open(p, 'rb').read()); b[o] ^= 1; open(p, 'wb').write(bytes(b))" "$1" "$2"
}
rehash() { # MANIFEST: recomputes the manifest_sha256 line after an edit
    head -n -1 "$1" >"$1.body"
    printf 'manifest_sha256: %s\n' "$(sha256sum <"$1.body" | cut -d' ' -f1)" >>"$1.body"
    mv "$1.body" "$1"
}

# 1. the reference: 12 steps uninterrupted
run ref --set checkpoint.dir="$T/refck"
check "an uninterrupted run with checkpoint.dir finishes" test "$rc" -eq 0
check "checkpoints step_00000004, step_00000008 and the final step_00000012 exist" \
    test -d refck/step_00000004 -a -d refck/step_00000008 -a -d refck/step_00000012
check "latest points to the newest checkpoint" test "$(readlink refck/latest)" = step_00000012
check "no temporary directory is left" sh -c "! ls -a refck | grep -q '^\.step_'"
check "the lock file records host, pid and job" grep -q "^host .* pid [0-9]* job " refck/.lock
M=refck/step_00000012/manifest.yaml
for key in "format: shardrun-checkpoint" "version: 4" "arch: gpt2" "step: 12" "tokens: 3072" "cursor: 48" "seed: 1337" \
    "next_lr:" "size: 1" "mesh: {shard: 1, replicate: 1}" "hash: " "chunk_bytes: 4194304" \
    "name: shard_00000.bin" "train.lr:" "isa: " "{name: params, dtype: f32}" "{name: adam_m, dtype: f32}" \
    "{name: adam_v, dtype: f32}" "manifest_sha256: "; do
    check "the manifest records '$key'" grep -q "$key" "$M"
done
check "the manifest lists every tensor with shape, dtype, unit and offset" \
    sh -c "[ \$(grep -c '{name: .*, shape: \[.*\], dtype: f32, unit: [0-9]*, offset: [0-9]*}' $M) -eq 28 ]"
check "each shard file has its byte ranges and a SHA-256 per chunk" \
    sh -c "grep -q 'slices: \[\[' $M && grep -Eq '^  - [0-9a-f]{64}$' $M"
check "the shard file starts with its magic" sh -c "head -c 7 refck/step_00000012/shard_00000.bin | grep -q SRSHARD"
check "files are not world-writable" sh -c "[ -z \"\$(find refck -perm -o+w ! -type l)\" ]"
old_umask=$(umask)
umask 000
run um --set checkpoint.dir="$T/umck" --set train.steps=4
umask "$old_umask"
check "  ...not even under umask 000" sh -c "[ $rc -eq 0 ] && [ -z \"\$(find umck -perm -o+w ! -type l)\" ]"

# 2. retention: keep 2 keeps the two newest; keep_every keeps multiples too
run keep --set checkpoint.dir="$T/keepck" --set checkpoint.every_steps=2 --set checkpoint.keep=2 \
    --set checkpoint.keep_every=6
check "retention: keep 2 + keep_every 6 leaves steps 6, 10, 12" \
    test "$(ls keepck | grep step_ | tr '\n' ' ')" = "step_00000006 step_00000010 step_00000012 "

# checkpoint.every_minutes: rank 0's clock, agreed by all ranks (0.0001 min = 6 ms: about every step)
run mins --set checkpoint.dir="$T/minck" --set checkpoint.every_minutes=0.0001 --set checkpoint.every_steps=0
check "checkpoint.every_minutes saves on the clock (more than 3 saves in 12 steps)" \
    sh -c "[ $rc -eq 0 ] && [ \$(grep -c 'checkpoint: saving step' mins.err) -gt 3 ] && cmp -s mins.params ref.params"

# 3. exact resume after a preemption (the signal comes through the real handler)
SHARDRUN_TEST_PREEMPT_AT=6 run pre --set checkpoint.dir="$T/preck"
check "a preemption signal at step 6 exits with 75" test "$rc" -eq 75
check "the timeline: signal, agreed step, save, exit status" sh -c \
    "grep -q 'received SIGUSR1 at .* during step 6' pre.err && grep -q 'agreed to stop after step 6' pre.err &&
     grep -q 'step 6 saved: .* MB/s' pre.err && grep -q 'exiting with status 75' pre.err"
check "the preemption checkpoint is step_00000006" test -f preck/step_00000006/manifest.yaml
cp pre.jsonl res.jsonl
run res --set checkpoint.dir="$T/preck"
check "the resumed run finishes" test "$rc" -eq 0
check "the start line says resume=6" grep -q "restart=0 resume=6" res.err
check "resumed final parameters are bitwise the uninterrupted run's" same res ref
field ref.jsonl loss | tail -6 >ref.tail
field res.jsonl loss | tail -6 >res.tail
check "losses of steps 7..12 are bitwise the uninterrupted run's" cmp -s ref.tail res.tail
check "the resumed run appends to the metrics file (12 step records, 2 start events)" \
    sh -c "[ \$(grep -vc '\"event\"' res.jsonl) -eq 12 ] && [ \$(grep -c '\"event\":\"start\"' res.jsonl) -eq 2 ]"
run again --set checkpoint.dir="$T/preck"
check "a rerun after the end has nothing left to train (status 0)" sh -c "[ $rc -eq 0 ] && grep -q 'nothing left to train' again.err"

# 4. a real signal, then more signals during the save
"$S" train job.yaml --set train.steps=3000 --set checkpoint.dir="$T/sigck" --set checkpoint.every_steps=0 \
    >sig.out 2>sig.err &
pid=$!
i=0
while [ $i -lt 100 ] && ! grep -q "step  *2/3000" sig.err; do sleep 0.1; i=$((i + 1)); done
kill -CONT $pid
sleep 0.5
check "SIGCONT (Slurm sends it with every SIGTERM) does not stop the run" kill -0 $pid
kill -USR1 $pid
sleep 0.01
kill -TERM $pid 2>/dev/null
kill -USR2 $pid 2>/dev/null
wait $pid
rc=$?
check "SIGUSR1 (then TERM and USR2 during the save) exits with 75" test "$rc" -eq 75
[ "$rc" -eq 75 ] || diag "$(tail -5 sig.err)"
check "exactly one checkpoint was saved and it verifies" sh -c "[ \$(ls sigck | grep -c step_) -eq 1 ] && '$S' ckpt verify sigck >/dev/null"
stopped=$(sed -n 's/.*agreed to stop after step \([0-9]*\).*/\1/p' sig.err)
check "the agreed stop step ($stopped) is the checkpoint's" test -d "sigck/step_$(printf %08d "${stopped:-0}")"

# 5. named crash sites: the process dies there, resume reaches the same state
# (with asynchronous saves, the default: after_shard_write is reached on the
# writer thread, the others at the commit a step later; and synchronous)
for mode in async sync; do
for site in after_shard_write before_manifest after_manifest before_rename after_rename before_latest after_latest; do
    rm -rf crashck
    SHARDRUN_TEST_CRASH_AT=$site:8 run crash --set checkpoint.dir="$T/crashck" --set checkpoint.async=$([ $mode = async ] && echo true || echo false)
    check "crash at $site ($mode) kills the run (status $rc)" test "$rc" -eq 137
    case $site in
    after_shard_write | before_manifest | after_manifest | before_rename)
        check "  $site: step 8 is not visible, its temporary directory is ignored" \
            sh -c "[ ! -e crashck/step_00000008 ] && [ -d crashck/.step_00000008.tmp ]" ;;
    *) check "  $site: step 8 is committed" test -f crashck/step_00000008/manifest.yaml ;;
    esac
    run after --set checkpoint.dir="$T/crashck"
    check "  resume after $site finishes bitwise equal to the uninterrupted run" sh -c "[ $rc -eq 0 ] && cmp -s after.params ref.params"
    case $site in
    after_shard_write | before_manifest | after_manifest | before_rename)
        check "  resume removed the interrupted save and resumed from step 4" \
            sh -c "grep -q 'removed .*step_00000008.tmp left by an interrupted save' after.err && grep -q 'resume=4' after.err" ;;
    *) check "  resume continued from step 8" grep -q "resume=8" after.err ;;
    esac
done
done

# 6. 10 seeded random kill -9 points (saves every step, so many land inside a
# save; odd ones with asynchronous saves, even ones synchronous)
seed=20261130
insave=0
for k in 1 2 3 4 5 6 7 8 9 10; do
    delay=$(awk -v s=$((seed + k)) 'BEGIN { srand(s); printf "%.3f", 0.03 + rand() * 0.4 }')
    rm -rf killck
    async=$([ $((k % 2)) -eq 1 ] && echo true || echo false)
    "$S" train job.yaml --set train.steps=40 --set checkpoint.dir="$T/killck" --set checkpoint.every_steps=1 \
        --set checkpoint.async=$async >kill.out 2>kill.err &
    pid=$!
    sleep "$delay"
    kill -9 $pid 2>/dev/null
    wait $pid 2>/dev/null
    SHARDRUN_TEST_DUMP_PARAMS="$T/k.params" "$S" train job.yaml --set train.steps=40 --set checkpoint.dir="$T/killck" \
        --set checkpoint.every_steps=1 >k.out 2>k.err
    krc=$?
    from=$(sed -n 's/.*resume=\([a-z0-9]*\).*/\1/p' k.err)
    grep -q "left by an interrupted save" k.err && insave=$((insave + 1))
    if [ $k -eq 1 ]; then
        SHARDRUN_TEST_DUMP_PARAMS="$T/k40.params" "$S" train job.yaml --set train.steps=40 >/dev/null 2>&1
    fi
    check "kill -9 after ${delay}s (seed $((seed + k)), async $async): resume from $from ends bitwise equal" \
        sh -c "[ $krc -eq 0 ] && cmp -s k.params k40.params"
done
diag "$insave of the 10 kills landed inside a save (a temporary directory was left and removed)"

# 7. the corruption matrix: each detected, verify says 65, training falls back to step 4
run base --set checkpoint.dir="$T/pristine" --set train.steps=8
C=pristine/step_00000008
corrupt() { # NAME: copies pristine to cck and damages cck/step_00000008
    rm -rf cck
    cp -a pristine cck
    D=cck/step_00000008
    case $1 in
    flip_shard) flipbit $D/shard_00000.bin 100000 ;;
    flip_header) flipbit $D/shard_00000.bin 3 ;;
    flip_manifest) flipbit $D/manifest.yaml 200 ;;
    truncate) truncate -s 1000000 $D/shard_00000.bin ;;
    delete_shard) rm $D/shard_00000.bin ;;
    delete_manifest) rm $D/manifest.yaml ;;
    garbage_manifest) head -c 3000 /dev/urandom >$D/manifest.yaml ;;
    outside_path) sed -i 's|name: shard_00000.bin|name: ../../outside.bin|' $D/manifest.yaml && rehash $D/manifest.yaml ;;
    sizes_disagree) sed -i 's|^  bytes: \([0-9]*\)|  bytes: 1\1|' $D/manifest.yaml && rehash $D/manifest.yaml ;;
    esac
}
cp pristine/step_00000008/shard_00000.bin outside.bin
for what in flip_shard flip_header flip_manifest truncate delete_shard delete_manifest garbage_manifest outside_path sizes_disagree; do
    corrupt $what
    "$S" ckpt verify cck/step_00000008 >v.out 2>v.err
    vrc=$?
    check "$what: ckpt verify exits 65" test "$vrc" -eq 65
    run fb --set checkpoint.dir="$T/cck" --set train.steps=8
    check "$what: training logs the bad checkpoint and resumes from step 4" \
        sh -c "[ $rc -eq 0 ] && grep -q 'step_00000008 is unusable: .*; trying the next older' fb.err && grep -q 'resume=4' fb.err"
    check "$what: the result equals the uninterrupted 8-step run" cmp -s fb.params base.params
done
corrupt flip_shard
"$S" ckpt verify cck/step_00000008 >v.out 2>v.err
check "a flipped bit is reported with its file and chunk" grep -q "shard_00000.bin: FAILED: chunk 0 (bytes 0\.\.[0-9]*): SHA-256 mismatch" v.out
check "  ...and the error message on stderr names them too" grep -q "error: .*verification failed.*shard_00000.bin: FAILED: chunk 0" v.err
corrupt outside_path
"$S" ckpt verify cck/step_00000008 >v.out 2>v.err
check "a manifest naming a path outside the checkpoint is refused" grep -q "not a shard file name.*outside its checkpoint directory" v.out
corrupt sizes_disagree
"$S" ckpt verify cck/step_00000008 >v.out 2>v.err
check "a manifest whose sizes disagree is refused" grep -q "disagree" v.out

# every checkpoint bad: 65, each listed with its reason, nothing changed on disk
rm -rf cck && cp -a pristine cck
flipbit cck/step_00000004/shard_00000.bin 5000
flipbit cck/step_00000008/shard_00000.bin 5000
# (.lock is runtime state: it names the current holder)
before=$(cd cck && find . -type f ! -name .lock -exec sha256sum {} + | sort)
run none --set checkpoint.dir="$T/cck" --set train.steps=8
check "no checkpoint verifies: status 65, never a silent fresh start" test "$rc" -eq 65
check "  the error lists each checkpoint and why" sh -c "grep -q 'none of the 2 checkpoints' none.err && grep -q 'step_00000008: .*chunk 0' none.err && grep -q 'step_00000004: .*chunk 0' none.err"
check "  nothing changed on disk" test "$before" = "$(cd cck && find . -type f ! -name .lock -exec sha256sum {} + | sort)"
"$S" ckpt verify cck >v.out 2>v.err
check "ckpt verify DIR checks every checkpoint and exits 65" test $? -eq 65

# 8. a full disk (a file-size limit): status 74, the previous checkpoint stays usable
rm -rf fullck && cp -a pristine fullck
(ulimit -f 1000 && exec "$S" train job.yaml --set checkpoint.dir="$T/fullck" --set train.steps=12) >full.out 2>full.err
check "a write beyond the file-size limit fails with status 74" test $? -eq 74
check "  the message names the file and says why" grep -q "write failed: File too large" full.err
check "  no temporary directory is left and step 8 still verifies" \
    sh -c "! ls -a fullck | grep -q '^\.step_' && '$S' ckpt verify fullck/step_00000008 >/dev/null"

# 9. the lock: a second job on the same directory fails with 73 naming the holder
rm -rf lockck
"$S" train job.yaml --set train.steps=100000 --set checkpoint.dir="$T/lockck" --set checkpoint.every_steps=0 >l1.out 2>l1.err &
pid=$!
i=0
while [ $i -lt 100 ] && ! grep -q "step  *2/" l1.err; do sleep 0.1; i=$((i + 1)); done
expect_status 73 "a second job on a locked checkpoint.dir fails" "$S" train job.yaml --set checkpoint.dir="$T/lockck"
check "  the message names the holder's host and pid" grep -q "in use by another job (host .* pid $pid job " "$T/err"
kill -9 $pid
wait $pid 2>/dev/null
expect_status 0 "after the holder is killed the directory is free again" "$S" train job.yaml --set checkpoint.dir="$T/lockck"

# 10. checkpoint.resume never and PATH; changed keys; a changed model shape
run never --set checkpoint.dir="$T/preck" --set checkpoint.resume=never
check "resume: never starts fresh on a directory with checkpoints" sh -c "[ $rc -eq 0 ] && grep -q 'resume=fresh' never.err && cmp -s never.params ref.params"
run path --set checkpoint.dir="$T/pathck" --set checkpoint.resume="$T/refck/step_00000008"
check "resume: PATH loads that checkpoint and equals the uninterrupted run" \
    sh -c "[ $rc -eq 0 ] && grep -q 'resume=8' path.err && cmp -s path.params ref.params"
expect_status 66 "resume: a PATH that does not exist is a missing input" "$S" train job.yaml --set checkpoint.resume="$T/nope"
run lr --set checkpoint.dir="$T/refck" --set checkpoint.resume="$T/refck/step_00000008" --set train.lr=3e-4 --set checkpoint.dir="$T/lrck"
check "a changed key takes effect with a warning naming old and new values" \
    sh -c "[ $rc -eq 0 ] && grep -q 'train.lr changed since .*: 0.0006 -> 0.0003 (the new value takes effect)' lr.err"
expect_status 65 "a checkpoint of a different model shape is refused" \
    "$S" train job.yaml --set model.n_layer=3 --set checkpoint.resume="$T/refck/step_00000008"
check "  naming both shapes" grep -q "different model (gpt2, n_layer 2.*this job has gpt2, n_layer 3" "$T/err"

# 11. requeue modes and the exit status key
SHARDRUN_TEST_PREEMPT_AT=3 run st --set checkpoint.dir="$T/stck" --set preemption.exit_status=99
check "preemption.exit_status 99 is the exit status" test "$rc" -eq 99
SHARDRUN_TEST_PREEMPT_AT=3 SLURM_JOB_ID= run sc --set checkpoint.dir="$T/scck" --set preemption.requeue=scontrol
check "requeue scontrol outside Slurm falls back to exit 75 with a warning" \
    sh -c "[ $rc -eq 75 ] && grep -q 'SLURM_JOB_ID is not set' sc.err"
mkdir -p fakebin
printf '#!/bin/sh\necho "$@" >"%s/scontrol.args"\n' "$T" >fakebin/scontrol
chmod +x fakebin/scontrol
SHARDRUN_TEST_PREEMPT_AT=3 SLURM_JOB_ID=4242 PATH="$T/fakebin:$PATH" run sc2 --set checkpoint.dir="$T/sc2ck" --set preemption.requeue=scontrol
check "requeue scontrol runs 'scontrol requeue JOBID' and exits 0" \
    sh -c "[ $rc -eq 0 ] && [ \"\$(cat scontrol.args)\" = 'requeue 4242' ] && test -d sc2ck/step_00000003"

run cont --set checkpoint.dir="$T/contck" --set train.steps=4 --set 'preemption.signals=[USR1, CONT]'
check "CONT in preemption.signals is accepted with a warning and ignored" \
    sh -c "[ $rc -eq 0 ] && grep -q 'SIGCONT is ignored' cont.err"

# 12. the ckpt commands
expect_status 0 "ckpt list DIR" "$S" ckpt list refck
check "  lists every step with its state and marks latest" sh -c "grep -q 'step_00000012 .* 12 .* 1 .*manifest ok, latest' '$T/out' && grep -q step_00000004 '$T/out'"
expect_status 0 "ckpt verify PATH of a good checkpoint" "$S" ckpt verify refck/step_00000012
check "  prints OK with the bytes verified" grep -q "OK: 1 checkpoint, .* MB verified" "$T/out"
expect_status 0 "ckpt inspect PATH" "$S" ckpt inspect refck/step_00000012
check "  summarizes step, world size, tensors and sizes" sh -c "grep -q '^step  *12' '$T/out' && grep -q '^world size   1' '$T/out' && grep -q 'tensors (28)' '$T/out' && grep -q 'h.1.mlp.c_fc.weight  *\[256, 64\]' '$T/out'"
expect_status 0 "ckpt export PATH -o FILE" "$S" ckpt export refck/step_00000012 -o model.bin
check "  the llm.c model file read the llm.c way equals the final parameters bitwise" python3 "$SR_SRCDIR/tests/llmc_check.py" model.bin ref.params
expect_status 64 "ckpt export without -o is a usage error" "$S" ckpt export refck/latest
expect_status 64 "ckpt with an unknown subcommand is a usage error" "$S" ckpt frobnicate refck
expect_status 66 "ckpt verify of a missing path is a missing input" "$S" ckpt verify "$T/missing"
corrupt flip_manifest
expect_status 65 "ckpt inspect of a corrupt manifest is a data error" "$S" ckpt inspect cck/step_00000008

done_testing
