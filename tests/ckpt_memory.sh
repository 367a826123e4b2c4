#!/bin/sh
# ckpt_memory.sh — the memory checkpoint tier (checkpoint.memory.*) under
# OpenMPI's mpirun, each rank its own node (SHARDRUN_TEST_NODE_RANKS=1, the
# directories told apart by %n): a run killed after the memory save of step
# 6 (checkpoint.dir holds step 4) resumes from memory bitwise; a node lost
# with its memory is covered by its buddy's replica (fetched over the
# tier's links), also on fewer ranks; a corrupted replica and a buddy
# absent at start each fall back to the next copy with one message; a full
# memory directory and one of another user leave the run going with a
# warning; the end of the job removes the directories; bad keys are 78.
. "${SR_SRCDIR:-.}/tests/tap.sh"
S=$SHARDRUN
CMP=${SR_BUILDDIR:-.}/tests/cmp_params
need_mpirun -x SHARDRUN_TEST_NODE_RANKS
cd "$T" || exit 99
MPI="timeout 120 $MPI"
export SHARDRUN_TEST_NODE_RANKS=1
tiny_job job.yaml model.n_head=2 train.steps=10 train.batch_size=12 checkpoint.every_steps=4 \
    checkpoint.memory.every_steps=2
# train NAME RANKS DIR [--set ...]: checkpoint.dir DIR/ck, memory DIR/mem/%n;
# params NAME.params, log NAME.err, status $rc
train() {
    name=$1 n=$2 d=$3
    shift 3
    SHARDRUN_TEST_DUMP_PARAMS="$T/$name.params" $MPI -n "$n" "$S" train job.yaml --set checkpoint.dir="$T/$d/ck" \
        --set "checkpoint.memory.dir=$T/$d/mem/%n" "$@" >"$name.out" 2>"$name.err"
    rc=$?
}
# scenario NAME: a copy of the killed run's directories
scenario() { rm -rf "$1" && cp -a base "$1"; }

train ref2 2 r2
check "reference: 10 steps on 2 ranks, memory saves every 2 steps, the directories removed at the end" \
    sh -c "[ $rc -eq 0 ] && grep -q 'memory tier: step 6 saved' ref2.err && grep -q 'removed checkpoint.memory.dir on every node ($T/r2/mem/node0 here)' ref2.err && [ -z \"\$(ls r2/mem)\" ]"

SHARDRUN_TEST_CRASH_AT=memory_committed:6@1 train kill 2 base
check "rank 1 killed after the memory save of step 6: checkpoint.dir's newest is step 4" \
    sh -c "[ $rc -ne 0 ] && [ -d base/ck/step_00000004 ] && [ ! -e base/ck/step_00000006 ]"
check "  each node's directory (0700) holds its own file and its buddy's replica" \
    sh -c "[ \"\$(stat -c %a base/mem/node0)\" = 700 ] && cmp -s base/mem/node0/step_00000006/shard_00001.bin base/mem/node1/step_00000006/shard_00001.bin && cmp -s base/mem/node0/step_00000006/shard_00000.bin base/mem/node1/step_00000006/shard_00000.bin"

scenario a
train a 2 a
check "resume on 2 ranks from the memory tier's step 6, bitwise the uninterrupted run" \
    sh -c "[ $rc -eq 0 ] && grep -q 'resume: step 6 from the memory tier' a.err && grep -q 'resume=6' a.err && cmp -s a.params ref2.params"

scenario b
rm -rf b/mem/node0
train b 2 b
check "node 0 lost with its memory: its shard from node 1's replica (fetched), bitwise" \
    sh -c "[ $rc -eq 0 ] && grep -q 'shard_00000.bin from node1, shard_00001.bin from node1; 1 file fetched' b.err && cmp -s b.params ref2.params"

scenario d
rm -rf d/mem/node1
printf 'X' | dd of=d/mem/node0/step_00000006/shard_00001.bin bs=1 seek=5000 conv=notrunc 2>/dev/null
train d 2 d
check "a corrupted replica (its owner's node lost): named, and the next copy (checkpoint.dir's step 4) resumes bitwise" \
    sh -c "[ $rc -eq 0 ] && grep -q 'node0/step_00000006/shard_00001.bin: not used: .*SHA-256' d.err && grep -q 'step 6 is incomplete: shard_00001.bin' d.err && grep -q 'resume: loaded $T/d/ck/step_00000004' d.err && cmp -s d.params ref2.params"

if group --long "fewer ranks, a full or foreign directory"; then
train o 2 o --set "checkpoint.memory.dir=$T/o/ck/mem"
check "a memory directory inside checkpoint.dir: refused with one warning, the tier off, the persistent checkpoints kept" \
    sh -c "[ $rc -eq 0 ] && [ \$(grep -c 'checkpoint.memory.dir $T/o/ck/mem is checkpoint.dir $T/o/ck, inside it or around it' o.err) -eq 1 ] && [ -d o/ck/step_00000004 ] && [ -d o/ck/step_00000010 ] && cmp -s o.params ref2.params"

train ref1 1 r1 --set checkpoint.memory.every_steps=0
check "reference: 10 steps on 1 rank" test "$rc" -eq 0

scenario c
rm -rf c/mem/node1
train c 1 c
check "node 1 lost, the run goes on 1 rank: node 0's replica, resharded 2 -> 1 within 1e-5" \
    sh -c "[ $rc -eq 0 ] && grep -q 'resume: step 6 from the memory tier' c.err && grep -q 'resharded from 2 ranks' c.err && '$CMP' c.params ref1.params 1e-5 >/dev/null"

scenario e
rm -f e/mem/node0/step_00000006/shard_00001.bin e/mem/node0/step_00000004/shard_00001.bin
train e 1 e
check "the buddy holding the only copy not in the job at start: step 6 incomplete, checkpoint.dir's step 4, within 1e-5" \
    sh -c "[ $rc -eq 0 ] && grep -q 'step 6 is incomplete: shard_00001.bin is in no memory directory' e.err && grep -q 'resume: loaded $T/e/ck/step_00000004' e.err && '$CMP' e.params ref1.params 1e-5 >/dev/null"

# a full memory directory: a 64 KiB tmpfs in a mount namespace of its own
if [ "$(id -u)" = 0 ] && unshare -m true 2>/dev/null; then
    mkdir -p f/mem
    SHARDRUN_TEST_DUMP_PARAMS="$T/f.params" unshare -m sh -c "mount -t tmpfs -o size=64k tmpfs '$T/f/mem' && \
        $MPI -n 2 '$S' train job.yaml --set checkpoint.dir='$T/f/ck' --set 'checkpoint.memory.dir=$T/f/mem/%n'" \
        >f.out 2>f.err
    rc=$?
    check "a full memory directory: each save a warning naming it, the run completes bitwise" \
        sh -c "[ $rc -eq 0 ] && grep -q 'memory tier: step 2 not saved: .*$T/f/mem/node.*No space left' f.err && cmp -s f.params ref2.params"
else
    skip_or_fail mount "a full memory directory: needs root and unshare -m (a tmpfs of its own)"
fi

# a memory directory of another user
if [ "$(id -u)" = 0 ] && id nobody >/dev/null 2>&1; then
    mkdir -p g/mem/node0 && chown nobody g/mem/node0
    train g 2 g
    check "another user's memory directory: one warning naming its owner, the tier off, nothing written there" \
        sh -c "[ $rc -eq 0 ] && [ \$(grep -c 'belongs to nobody' g.err) -eq 1 ] && grep -q 'the memory tier is off' g.err && [ -z \"\$(ls g/mem/node0)\" ] && cmp -s g.params ref2.params"
else
    skip_or_fail mount "another user's memory directory: needs root (chown), as the mount tests do"
fi
fi

# shardrun plan counts the tier: its snapshot and its tmpfs pages (3 steps
# of the shard file: 2 kept and the one being written), beside the
# asynchronous snapshot
"$S" plan job.yaml --ranks 2 --set checkpoint.dir="$T/p" >plan1 2>&1
"$S" plan job.yaml --ranks 2 --set checkpoint.dir="$T/p" --set checkpoint.memory.every_steps=0 >plan0 2>&1
with=$(awk '$1 == "ckpt_staging" { print $3 }' plan1) without=$(awk '$1 == "ckpt_staging" { print $3 }' plan0)
check "plan: the tier's snapshot and 3 steps of tmpfs pages in ckpt_staging ($without -> $with bytes), and its line" \
    sh -c "[ -n '$without' ] && [ '$with' -eq \$((5 * $without + 192)) ] && grep -q '^memory tier: every 2 steps, .* its snapshot .* pages in checkpoint.memory.dir' plan1"

# the Epilog line of slurm.conf.shardrun: what a killed job left goes
u=$(id -un)
mkdir -p "shm/shardrun-$u-77/step_00000006" shm/other && : >shm/other/keep && ln -s "$T/shm/other" "shm/shardrun-$u-78"
: >"shm/shardrun-$u-77/step_00000006/shard_00000.bin"
SHARDRUN_MEMORY_ROOT=$T/shm SLURM_JOB_USER=$u SLURM_JOB_ID=77 sh "$SR_SRCDIR/slurm/shardrun-epilog"
st77=$?
SHARDRUN_MEMORY_ROOT=$T/shm SLURM_JOB_USER=$u SLURM_JOB_ID=78 sh "$SR_SRCDIR/slurm/shardrun-epilog"
check "the epilog removes the job's memory directory, never through a link, and exits 0" \
    sh -c "[ $st77 -eq 0 ] && [ ! -e 'shm/shardrun-$u-77' ] && [ -e shm/other/keep ] && [ -L 'shm/shardrun-$u-78' ]"

expect_status 78 "checkpoint.memory.every_steps without checkpoint.dir is 78" \
    "$S" train job.yaml --set checkpoint.dir= --set train.steps=1
expect_status 78 "a checkpoint.memory.dir with %x is 78 naming the key" \
    sh -c "'$S' train job.yaml --set checkpoint.dir='$T/h' --set 'checkpoint.memory.dir=$T/m%x' --set train.steps=1 2>h.err; rc=\$?; grep -q \"checkpoint.memory.dir '.*%x is not a substitution\" h.err && exit \$rc"

done_testing
