#!/bin/sh
# limits.sh — resource limits met at start, not an hour later: an
# open-file limit below what a rank needs (78 naming the number, on every
# rank of a job), a soft limit raised to fit, a checkpoint directory on a
# read-only file system (73 before step 1), free space below one checkpoint
# (74 before step 1) and below checkpoint.keep + 1 (a warning).  The file
# systems are a small tmpfs and a read-only bind mount inside a private
# mount namespace (unshare -m; root), gone when the test ends.
. "${SR_SRCDIR:-.}/tests/tap.sh"
S=$SHARDRUN
cd "$T" || exit 99
small="--set model.n_layer=1 --set model.seq_len=32 --set threads=1 --set train.batch_size=2"

# --- open files --------------------------------------------------------------
sh -c "ulimit -n 20 && exec \"$S\" train $small --set train.steps=1 --set checkpoint.dir=nofile_ck" >out 2>err
rc=$?
check "ulimit -n 20: refused at start (status $rc)" test "$rc" -eq 78
check "  ...naming the limit and the number a rank needs" \
    grep -q "the open-file limit (RLIMIT_NOFILE) is 20, below the [0-9]* descriptors this rank needs" err
check "  ...with the ulimit -n hint, and nothing written" sh -c "grep -q 'hint: ulimit -n [0-9]* or more' err && [ ! -e nofile_ck ]"
sh -c "ulimit -S -n 24 && exec \"$S\" train $small --set train.steps=1" >out 2>err
rc=$?
check "a soft limit of 24 under a higher hard limit is raised and the run ends well (status $rc)" \
    sh -c "[ $rc -eq 0 ] && grep -q 'raised the open-file limit (RLIMIT_NOFILE) from 24 to' err"

if have_mpirun; then
    mkdir -p w2
    LIMIT_RANK=1 LIMIT_NOFILE=30 WRAPDIR="$T/w2" timeout 120 $MPI -x LIMIT_RANK -x LIMIT_NOFILE -x WRAPDIR -n 2 \
        sh "$SR_SRCDIR/tests/rank_wrap.sh" "$S" train $small --set train.steps=1 >w2/mpirun.out 2>&1
    check "2 ranks, rank 1 under ulimit -n 30: both end 78 ($(cat w2/status.0 2>/dev/null), $(cat w2/status.1 2>/dev/null))" \
        sh -c "[ \"\$(cat w2/status.0)\" = 78 ] && [ \"\$(cat w2/status.1)\" = 78 ]"
    check "  ...rank 1 names its limit, rank 0 names rank 1" \
        sh -c "grep -q 'RLIMIT_NOFILE) is 30, below the' w2/err.1 && grep -q \"rank 1's open-file limit\" w2/err.0"
else
    skip_mpirun "2-rank open-file limit"
fi

# --- descriptors running out later (prlimit on a stopped rank) ----------------
# lowest_free PID: the lowest descriptor number PID does not use; a limit of
# it makes the next open fail with EMFILE
lowest_free() {
    n=0
    while [ -e "/proc/$1/fd/$n" ]; do n=$((n + 1)); done
    echo $n
}
# wait_for FILE PATTERN: up to 60 s
wait_for() {
    w=0
    until grep -q "$2" "$1" 2>/dev/null; do
        [ $w -ge 600 ] && return 1
        sleep 0.1
        w=$((w + 1))
    done
}
if command -v prlimit >/dev/null 2>&1; then
    SHARDRUN_TEST_PAUSE_AT=after_latest:2 "$S" train $small --set train.steps=6 --set checkpoint.dir=emf_ck \
        --set checkpoint.every_steps=2 >emf.out 2>emf.err &
    p=$!
    wait_for emf.err "stopped at after_latest (step 2)"
    lim=$(lowest_free $p)
    prlimit --pid "$p" --nofile="$lim:$lim"
    kill -CONT "$p"
    wait "$p"
    rc=$?
    check "no descriptor left for the step-4 save (prlimit --nofile=$lim on the running rank): 74 (status $rc)" \
        test "$rc" -eq 74
    check "  ...naming EMFILE and the shard file, with the ulimit -n hint; step 2 stays" \
        sh -c "grep -q 'shard_00000.bin: cannot create: Too many open files (EMFILE) (hint: raise the open-file limit, ulimit -n)' emf.err &&
               \"$S\" ckpt verify emf_ck/step_00000002 >/dev/null"
    if have_mpirun; then
        mkdir -p wc
        WRAPDIR="$T/wc" SHARDRUN_TEST_PAUSE_AT=before_connect@1 timeout 120 \
            $MPI -x WRAPDIR -x SHARDRUN_TEST_PAUSE_AT -n 2 \
            sh "$SR_SRCDIR/tests/rank_wrap.sh" "$S" train $small --set train.steps=1 --set comm.timeout_s=5 \
            </dev/null >wc/mpirun.out 2>&1 &
        mp=$!
        wait_for wc/err.1 "stopped at before_connect"
        p=$(cat wc/pid.1)
        lim=$(lowest_free "$p")
        prlimit --pid "$p" --nofile="$lim:$lim"
        kill -CONT "$p"
        wait "$mp"
        check "no descriptor left for the socket to rank 0: both ranks end 69 ($(cat wc/status.0 2>/dev/null), $(cat wc/status.1 2>/dev/null))" \
            sh -c "[ \"\$(cat wc/status.0)\" = 69 ] && [ \"\$(cat wc/status.1)\" = 69 ]"
        check "  ...rank 1 naming EMFILE and rank 0, with the ulimit -n hint" \
            grep -q "cannot open a socket to rank 0 at .*: Too many open files (EMFILE) (hint: raise the open-file limit, ulimit -n)" wc/err.1 ||
            diag "$(cat wc/err.0 wc/err.1)"
    fi
else
    skip "descriptors running out later: prlimit not installed (apt-get install util-linux)"
fi

# --- file systems: a private mount namespace ---------------------------------
if [ "$(id -u)" -ne 0 ] || ! unshare -m true 2>/dev/null; then
    case ",${SHARDRUN_TEST_REQUIRE:-}," in
    *",mount,"*) not_ok "read-only and small file systems need root and unshare -m (SHARDRUN_TEST_REQUIRE requires mount)" ;;
    *) skip "read-only and small file systems need root and unshare -m" ;;
    esac
    done_testing
    exit 0
fi
# a checkpoint of this job, for its size
"$S" train $small --set train.steps=1 --set checkpoint.dir=size_ck --set checkpoint.every_steps=1 >/dev/null 2>&1
one=$(du -sk size_ck/step_00000001 | cut -f1)
check "a checkpoint of the test job takes ${one:-?} KiB" test "${one:-0}" -gt 100

mkdir -p ro/ck ro/fresh mnt
cp -r size_ck/step_00000001 ro/ck/
unshare -m sh -c "mount --bind ro ro && mount -o remount,bind,ro ro &&
    exec \"$S\" train $small --set train.steps=3 --set checkpoint.dir=ro/ck" >out 2>err
rc=$?
check "a checkpoint directory on a read-only file system: 73 before step 1 (status $rc)" \
    sh -c "[ $rc -eq 73 ] && ! grep -q 'step 1 ' err"
check "  ...naming it, with the hint" grep -q "ro/ck/.lock: cannot create the checkpoint lock: Read-only file system (hint: checkpoint.dir must be writable" err
unshare -m sh -c "mount --bind ro ro && mount -o remount,bind,ro ro &&
    exec \"$S\" train $small --set train.steps=3 --set checkpoint.dir=ro/fresh/ck" >out 2>err
rc=$?
check "a checkpoint directory to create on a read-only file system: 73 (status $rc)" \
    sh -c "[ $rc -eq 73 ] && grep -q 'ro/fresh/ck: cannot create checkpoint.dir: Read-only file system' err"

small_kb=$((one / 2))
unshare -m sh -c "mount -t tmpfs -o size=${small_kb}k tmpfs mnt &&
    \"$S\" train $small --set train.steps=3 --set checkpoint.dir=mnt/ck; echo \$? >mnt_rc; ls -A mnt/ck >mnt_ls" >out 2>err
rc=$(cat mnt_rc)
check "free space below one checkpoint (${small_kb} KiB tmpfs): 74 before step 1 (status $rc)" \
    sh -c "[ $rc -eq 74 ] && ! grep -q 'step 1 ' err"
check "  ...naming the free space and the checkpoint's size, with the hint" \
    grep -q "mnt/ck: .* free, below the .* one checkpoint of this job takes: the first save would fail (hint:" err
check "  ...and no checkpoint was started" sh -c "! grep -q step_ mnt_ls"

mid_kb=$((one * 5 / 2))
unshare -m sh -c "mount -t tmpfs -o size=${mid_kb}k tmpfs mnt &&
    exec \"$S\" train $small --set train.steps=2 --set checkpoint.dir=mnt/ck --set checkpoint.keep=3 --set checkpoint.every_steps=1" >out 2>err
rc=$?
check "room for 2 of the 4 checkpoints keep 3 needs: the run ends well (status $rc)" test "$rc" -eq 0
check "  ...with a warning naming checkpoint.keep" \
    grep -q "warning: .*mnt/ck: .* free, below the .* that 4 more checkpoints of .* need (checkpoint.keep 3 + the one being written, 0 already there)" err
unshare -m sh -c "mount -t tmpfs -o size=${mid_kb}k tmpfs mnt &&
    exec \"$S\" train $small --set train.steps=2 --set checkpoint.dir=mnt/ck --set checkpoint.keep=1 --set checkpoint.every_steps=1" >out 2>err
rc=$?
check "the same room with checkpoint.keep 1: no warning (status $rc)" sh -c "[ $rc -eq 0 ] && ! grep -q 'free, below' err"
done_testing
