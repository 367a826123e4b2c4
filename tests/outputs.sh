#!/bin/sh
# outputs.sh — the file-system rules every command's files follow
# (fsio.h), each once a defect a hostile probe found:
#   1. an output written by rename (report -o, data prepare -o, ckpt export
#      to safetensors and llm.c, the parameter dump) never replaces what is
#      not a regular file: a FIFO, a directory or a character device (a copy
#      of /dev/null, made with mknod) is refused with 73 naming its kind and
#      stays what it was; a symbolic link to a regular file has its target
#      replaced and stays a link.  The appended metrics file opens without
#      blocking: a FIFO, a directory or a socket is 73, /dev/null is fine.
#   2. no open() blocks: model.init or a token shard naming a FIFO is 66 at
#      once; streamed inputs take pipes (config check <(...), a FIFO fed to
#      data prepare)
#   3. a file-size limit (ulimit -f) is 74 naming the file, for every
#      command that writes, and leaves no temporary file
#   4. temporaries are .NAME.XXXXXX: a stale one is neither in the way nor
#      removed, also for a writer that is PID 1 of a PID namespace (where
#      OUT.tmp.PID once collided with a kill -9's leftover)
#   5. nothing is deleted that its owner did not write: an output into a
#      checkpoint's step directory or onto an input is 73; retention removes
#      only what its manifest names and names the rest in a warning
#   6. a full disk's hint for export, report and data prepare names free
#      space, not checkpoint.keep (a small tmpfs in a private mount
#      namespace)
. "${SR_SRCDIR:-.}/tests/tap.sh"
S=$SHARDRUN
cd "$T" || exit 99
small="--set model.n_layer=1 --set model.n_embd=32 --set model.n_head=2 --set model.seq_len=16 --set threads=1"
small="$small --set train.batch_size=2 --set log.every=1"
"$S" train $small --set train.steps=2 --set checkpoint.dir=ck --set checkpoint.every_steps=1 --set checkpoint.keep=5 \
    --set log.metrics=m.jsonl >base.out 2>base.err || { echo "Bail out! the base run failed: $(tail -2 base.err)"; exit 1; }
printf 'hello, world\n' >in.txt
# no_temp DIR: nothing but what the test made (no dot file, no .tmp.)
no_temp() { [ -z "$(ls -A "$1" | grep -E '^\.|\.tmp\.')" ]; }

# --- 1. what an output replaces ------------------------------------------------
# writers: NAME COMMAND-with-OUT-as-the-output
writer() {
    case $1 in
    report) "$S" report m.jsonl -o "$2" ;;
    prepare) "$S" data prepare in.txt -o "$2" ;;
    safetensors) "$S" ckpt export ck/step_00000002 -o "$2" --format safetensors ;;
    llmc) "$S" ckpt export ck/step_00000002 -o "$2" --format llmc ;;
    dump) SHARDRUN_TEST_DUMP_PARAMS="$2" "$S" train $small --set train.steps=1 ;;
    esac
}
mkdir kinds
mkfifo kinds/fifo
mkdir kinds/dir
have_mknod=no
mknod kinds/null c 1 3 2>/dev/null && have_mknod=yes
for w in report prepare safetensors llmc dump; do
    writer $w kinds/fifo >w.out 2>w.err </dev/null
    rc=$?
    check "$w onto a FIFO: 73 naming its kind, the FIFO still a FIFO (status $rc)" \
        sh -c "[ $rc = 73 ] && grep -q 'kinds/fifo: a FIFO is there' w.err && [ -p kinds/fifo ]"
    writer $w kinds/dir >w.out 2>w.err </dev/null
    rc=$?
    check "  ...onto a directory: 73 naming its kind (status $rc)" \
        sh -c "[ $rc = 73 ] && grep -q 'kinds/dir: a directory is there' w.err && [ -d kinds/dir ]"
    if [ $have_mknod = yes ]; then
        writer $w kinds/null >w.out 2>w.err </dev/null
        rc=$?
        check "  ...onto a character device (a copy of /dev/null): 73, still a device (status $rc)" \
            sh -c "[ $rc = 73 ] && grep -q 'kinds/null: a character device is there' w.err && [ -c kinds/null ]"
    else
        skip_or_fail mount "mknod needs root: the character-device case of $w"
    fi
    printf 'old\n' >kinds/real.$w
    ln -sf real.$w kinds/link.$w
    writer $w kinds/link.$w >w.out 2>w.err </dev/null
    rc=$?
    check "  ...through a symbolic link to a regular file: the file replaced, the link kept (status $rc)" \
        sh -c "[ $rc = 0 ] && [ -L kinds/link.$w ] && ! grep -qx old kinds/real.$w && [ -s kinds/real.$w ]"
done
check "  ...and no temporary file left in that directory" no_temp kinds

# the appended metrics file
mkfifo m.fifo
timeout 60 "$S" train $small --set train.steps=1 --set log.metrics=m.fifo >a.out 2>a.err
rc=$?
check "log.metrics naming a FIFO: 73 at once, naming its kind (status $rc)" \
    sh -c "[ $rc = 73 ] && grep -q 'm.fifo: a FIFO is there; the metrics file (log.metrics) is appended' a.err"
mkdir m.dir
"$S" train $small --set train.steps=1 --set log.metrics=m.dir >a.out 2>a.err
check "  ...a directory: 73" sh -c "[ $? = 73 ] && grep -q 'm.dir: a directory is there' a.err"
if python3 -c 'import socket,sys; s=socket.socket(socket.AF_UNIX); s.bind(sys.argv[1])' m.sock 2>/dev/null; then
    timeout 60 "$S" train $small --set train.steps=1 --set log.metrics=m.sock >a.out 2>a.err
    check "  ...a socket: 73" sh -c "[ $? = 73 ] && grep -q 'm.sock: a socket is there' a.err"
else
    not_ok "a Unix socket could not be made (python3 socket.bind): the socket case did not run"
fi
"$S" train $small --set train.steps=1 --set log.metrics=/dev/null >a.out 2>a.err
check "  .../dev/null is accepted, and stays a character device" sh -c "[ $? = 0 ] && [ -c /dev/null ]"

# --- 2. inputs never block -----------------------------------------------------
mkfifo init.fifo shard.fifo
timeout 60 "$S" train $small --set train.steps=1 --set model.init=init.fifo >i.out 2>i.err
rc=$?
check "model.init naming a FIFO: 66 at once, naming its kind (status $rc)" \
    sh -c "[ $rc = 66 ] && grep -q 'init.fifo: model.init is a FIFO; expected a regular file' i.err"
timeout 60 "$S" train $small --set train.steps=1 --set data.train=shard.fifo >i.out 2>i.err
rc=$?
check "a token shard naming a FIFO: 66 at once (status $rc)" sh -c "[ $rc = 66 ] && grep -q 'shard.fifo: a FIFO' i.err"
"$S" config show >job.yaml 2>/dev/null
bash -c "timeout 60 \"$S\" config check <(cat job.yaml)" >p.out 2>p.err
check "a streamed job file from a pipe (config check <(cat job.yaml))" test $? -eq 0
mkfifo text.fifo
(sleep 1 && cat in.txt >text.fifo) &
timeout 60 "$S" data prepare text.fifo -o fromfifo.bin >p.out 2>p.err
rc=$?
wait
check "data prepare reads a FIFO its writer opens later (status $rc)" \
    sh -c "[ $rc = 0 ] && grep -q ': 13 tokens' p.err"
mkdir indir
"$S" data prepare indir -o x.bin >p.out 2>p.err
check "  ...a directory as its input: 66 naming its kind, nothing written" \
    sh -c "[ $? = 66 ] && grep -q 'indir: the input is a directory' p.err && [ ! -e x.bin ]"

# --- 3. a file-size limit ------------------------------------------------------
mkdir fsz
head -c 200000 /dev/urandom | base64 >fsz.txt
# (the command's own output goes through a pipe, which no file-size limit applies to)
for w in report prepare safetensors llmc; do
    (ulimit -f 4 && if [ $w = prepare ]; then "$S" data prepare fsz.txt -o fsz/out.$w; else writer $w fsz/out.$w; fi
        echo $? >f.rc) 2>&1 | cat >f.err
    rc=$(cat f.rc)
    check "$w under ulimit -f 4: 74 naming the file, with the ulimit -f hint (status $rc)" \
        sh -c "[ $rc = 74 ] && grep -q 'fsz/out.$w: write failed: File too large (hint: a file-size limit applies; see ulimit -f)' f.err"
done
check "  ...and nothing left, no temporary file either" test -z "$(ls -A fsz)"
(ulimit -f 1 && "$S" train $small --set train.steps=3 --set log.metrics=fsz/m.jsonl; echo $? >f.rc) 2>&1 | cat >f.err
rc=$(cat f.rc)
check "train with only log.metrics under ulimit -f 1: 74 naming the metrics file, not signal 25 (status $rc)" \
    sh -c "[ $rc = 74 ] && grep -q 'fsz/m.jsonl: write failed: File too large' f.err"
check "  ...said at the first failed record, training going on (its progress is not lost)" \
    sh -c "grep -q 'warning: fsz/m.jsonl: write failed: File too large; training goes on without metrics' f.err && grep -q 'done: 3 steps' f.err"

# --- 4. temporaries ------------------------------------------------------------
mkdir tmpd
printf 'stale\n' >tmpd/.out.bin.AbC123
printf 'stale\n' >tmpd/out.bin.tmp.1
"$S" data prepare in.txt -o tmpd/out.bin >t.out 2>t.err
check "stale temporaries are neither in the way nor removed" \
    sh -c "[ $? = 0 ] && [ -s tmpd/out.bin ] && [ -e tmpd/.out.bin.AbC123 ] && [ -e tmpd/out.bin.tmp.1 ]"
if unshare -p -f true 2>/dev/null; then
    unshare -p -f "$S" data prepare in.txt -o tmpd/out.bin >t.out 2>t.err
    check "  ...also for a writer that is PID 1 of a PID namespace (out.bin.tmp.1 once blocked it)" test $? -eq 0
else
    skip_or_fail mount "unshare -p (a PID namespace, root) is not available: the PID 1 case"
fi

# --- 5. nothing deleted that its owner did not write ---------------------------
"$S" ckpt export ck/latest -o ck/latest/ >e.out 2>e.err
check "ckpt export into the checkpoint's own step directory: 73 naming it" \
    sh -c "[ $? = 73 ] && grep -q \"is a checkpoint's step directory (it holds manifest.yaml)\" e.err && [ ! -e ck/step_00000002/model.safetensors ]"
"$S" report m.jsonl -o ck/step_00000001/report.html >e.out 2>e.err
check "  ...report -o into a step directory: 73" sh -c "[ $? = 73 ] && [ ! -e ck/step_00000001/report.html ]"
"$S" data prepare in.txt -o in.txt >e.out 2>e.err
check "data prepare -o its own input: 73, the input untouched" \
    sh -c "[ $? = 73 ] && grep -q 'this output is the input in.txt' e.err && grep -qx 'hello, world' in.txt"
printf 'precious\n' >ck/step_00000001/notes.txt
"$S" train $small --set train.steps=4 --set checkpoint.dir=ck --set checkpoint.every_steps=1 --set checkpoint.keep=1 \
    >r.out 2>r.err
rc=$?
check "retention with a file no checkpoint wrote in an old step directory: the run ends well (status $rc)" test "$rc" -eq 0
check "  ...the file survives, named in a warning" \
    sh -c "grep -q 'holds files no checkpoint wrote (notes.txt); they and the directory are left in place' r.err && [ \"\$(cat \$(find ck -name notes.txt))\" = precious ]"
check "  ...the checkpoints without one are gone, the newest kept" \
    sh -c "[ ! -e ck/step_00000002 ] && [ ! -e ck/step_00000003 ] && [ -d ck/step_00000004 ]"

# --- 6. a full disk's hint ---------------------------------------------------------
if unshare -m true 2>/dev/null; then
    mkdir full
    head -c 300000 /dev/urandom | base64 >big.txt
    unshare -m sh -c "mount -t tmpfs -o size=256k tmpfs full && \"$S\" data prepare big.txt -o full/out.bin" >n.out 2>n.err
    rc=$?
    check "data prepare on a full file system: 74 with the free-space hint, not checkpoint.keep (status $rc)" \
        sh -c "[ $rc = 74 ] && grep -q 'full/out.bin: write failed: No space left on device (hint: the file system is full or over quota; free space)' n.err && ! grep -q checkpoint.keep n.err"
else
    skip_or_fail mount "unshare -m (a private mount namespace) is not available: the full-disk hint"
fi
done_testing
