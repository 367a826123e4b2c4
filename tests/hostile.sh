#!/bin/sh
# hostile.sh — inputs a hostile or careless user gives, each once a defect
# (found by probing): symbolic links inside a checkpoint directory (retention
# once deleted the files they pointed to), FIFOs where files are expected
# (once a hang), jobs too big for the process's memory limit (once the OOM
# killer), YAML nested or sized to stall the parser, manifests that
# contradict themselves, and the small things: the final line after a
# resume, long names in messages, a shard that is a directory, `!!str 3`;
# and a launcher whose PMIx server accepts a rank but never answers (once a
# rank waiting in PMIx_Init until the wall-clock limit).
. "${SR_SRCDIR:-.}/tests/tap.sh"
S=$SHARDRUN
cd "$T" || exit 99
small="--set model.n_layer=1 --set model.seq_len=32 --set threads=1 --set train.batch_size=2 --set log.every=1"
# sha256 of a manifest's body, for manifests edited on purpose
resign() { # FILE: replaces the last line with a fresh manifest_sha256 line
    sed '$d' "$1" >"$1.body"
    printf 'manifest_sha256: %s\n' "$(sha256sum "$1.body" | cut -d' ' -f1)" >>"$1.body"
    mv "$1.body" "$1"
}
# runs a command that must not hang: killed after 60 s (status 124); its
# status in $rc, output in $T/out and $T/err, the wall milliseconds in $ms
# (for the messages) and the CPU milliseconds (user + system) in $cpu_ms
timed() {
    t0=$(date +%s%N)
    timeout 60 /usr/bin/time -f 'cpu_s=%U %S' -o "$T/time" "$@" >"$T/out" 2>"$T/err"
    rc=$?
    ms=$((($(date +%s%N) - t0) / 1000000))
    cpu_ms=$(awk '/^cpu_s=/ { sub("cpu_s=", ""); printf "%d", ($1 + $2) * 1000 }' "$T/time" 2>/dev/null)
    cpu_ms=${cpu_ms:-999999}
}

# --- 1. symbolic links inside a checkpoint directory --------------------------
"$S" train $small --set train.steps=4 --set checkpoint.dir=ck --set checkpoint.every_steps=2 --set checkpoint.keep=5 \
    2>base.err || { echo "Bail out! the base run failed: $(tail -2 base.err)"; exit 1; }
mkdir victim && echo precious >victim/shard_00000.bin && echo precious >victim/manifest.yaml
ln -s ../victim ck/step_00000000
"$S" train $small --set train.steps=6 --set checkpoint.dir=ck >r1.out 2>r1.err
rc=$?
check "resume: auto refuses a step_* that is a symbolic link (status $rc)" test "$rc" -eq 65
check "  ...naming it, with the hint checkpoint.resume: PATH" \
    sh -c "grep -q 'step_00000000 (a symbolic link) is not a real checkpoint directory' r1.err && grep -q 'checkpoint.resume: PATH' r1.err"
check "  ...and the files it points to are untouched" sh -c "[ \$(cat victim/shard_00000.bin) = precious ] && [ -e victim/manifest.yaml ]"
"$S" train $small --set train.steps=9 --set checkpoint.dir=ck --set checkpoint.resume=never --set checkpoint.every_steps=1 \
    --set checkpoint.keep=1 >r2.out 2>r2.err
rc=$?
check "retention with keep 1 skips the symbolic link and the run ends well (status $rc)" \
    sh -c "[ $rc -eq 0 ] && grep -q 'step_00000000 (a symbolic link) is not a real checkpoint directory: retention leaves it alone' r2.err"
check "  ...the files it points to are untouched; the link itself is still there" \
    sh -c "[ \$(cat victim/shard_00000.bin) = precious ] && [ -e victim/manifest.yaml ] && [ -L ck/step_00000000 ]"
check "  ...and the real older checkpoints were removed as asked" sh -c "[ \$(ls -d ck/step_* | wc -l) -eq 2 ] && [ -d ck/step_00000009 ]"
expect_status 0 "ckpt list skips it with a warning" "$S" ckpt list ck
check "  ...the warning names it" grep -q "step_00000000 (a symbolic link) is not a real checkpoint directory: skipped" "$T/err"
expect_status 65 "ckpt verify of the directory reports it" "$S" ckpt verify ck
check "  ...as not a real checkpoint directory" grep -q "step_00000000 (a symbolic link): FAILED: not a real checkpoint" "$T/out"
ln -s ck/step_00000009 mylink
"$S" train $small --set train.steps=10 --set checkpoint.dir=ck2 --set checkpoint.resume=mylink >r3.out 2>r3.err
rc=$?
check "a checkpoint.resume PATH the user names may be a symbolic link (status $rc)" sh -c "[ $rc -eq 0 ] && grep -q 'resume=9' r3.err"
expect_status 0 "ckpt verify of a user-named link (latest) follows it" "$S" ckpt verify ck/latest
rm ck/step_00000000
mkdir ck3 && ln -s ../victim ck3/step_00000001
"$S" train $small --set train.steps=1 --set checkpoint.dir=ck3 --set checkpoint.resume=never \
    --set checkpoint.every_steps=1 >r4.out 2>r4.err
rc=$?
check "a save of a step whose name is a symbolic link replaces the link, not what it points to (status $rc)" \
    sh -c "[ $rc -eq 0 ] && [ -d ck3/step_00000001 ] && [ ! -L ck3/step_00000001 ] && [ \$(cat victim/shard_00000.bin) = precious ] && [ -e victim/manifest.yaml ] && grep -q 'was a symbolic link, not a checkpoint directory' r4.err"
check "  ...and leaves nothing behind" sh -c "[ \"\$(ls -A ck3 | sort | tr '\n' ' ')\" = '.lock latest starts.jsonl step_00000001 ' ]"
cp -r ck/step_00000009 ck/step_00000011 && mv ck/step_00000011/manifest.yaml elsewhere.yaml &&
    ln -s "$T/elsewhere.yaml" ck/step_00000011/manifest.yaml
expect_status 65 "a manifest that is a symbolic link is refused" "$S" ckpt inspect ck/step_00000011
check "  ...saying so" grep -q "manifest.yaml: a symbolic link; the files of a checkpoint must be regular files" "$T/err"
rm -rf ck/step_00000011
cp -r ck/step_00000009 ck/step_00000011 && mv ck/step_00000011/shard_00000.bin elsewhere.bin &&
    ln -s "$T/elsewhere.bin" ck/step_00000011/shard_00000.bin
expect_status 65 "a shard file that is a symbolic link fails verification" "$S" ckpt verify ck/step_00000011
check "  ...saying so" grep -q "shard_00000.bin: FAILED: a symbolic link" "$T/out"
rm -rf ck/step_00000011

# --- 2. FIFOs where regular files are expected --------------------------------
mkfifo pipe.bin
timed "$S" train $small --set train.steps=1 --set data.train=pipe.bin
check "a FIFO as a token shard is refused at once with 66 (status $rc, $ms ms)" test "$rc" -eq 66
check "  ...naming it a FIFO" grep -q "pipe.bin: a FIFO, not a regular file" "$T/err"
cp -r ck/step_00000009 fifock && rm fifock/manifest.yaml && mkfifo fifock/manifest.yaml
for cmd in verify inspect; do
    timed "$S" ckpt $cmd fifock
    check "ckpt $cmd of a checkpoint whose manifest is a FIFO: 65 at once (status $rc, $ms ms)" test "$rc" -eq 65
done
mkdir fifodir && mv fifock fifodir/step_00000009
timed "$S" ckpt list fifodir
check "ckpt list of it does not hang (status $rc, $ms ms)" sh -c "[ $rc -eq 0 ] && grep -q 'a FIFO, not a regular file' '$T/out'"
cp -r ck/step_00000009 fifock2 && rm fifock2/shard_00000.bin && mkfifo fifock2/shard_00000.bin
timed "$S" ckpt verify fifock2
check "a shard file that is a FIFO fails verification at once (status $rc, $ms ms)" \
    sh -c "[ $rc -eq 65 ] && grep -q 'shard_00000.bin: FAILED: a FIFO, not a regular file' '$T/out'"
cp -r ck/step_00000009 dirck && rm dirck/shard_00000.bin && mkdir dirck/shard_00000.bin
expect_status 65 "a shard file that is a directory fails verification" "$S" ckpt verify dirck
check "  ...as a directory, not as a size" sh -c "grep -q 'shard_00000.bin: FAILED: a directory, not a regular file' '$T/out' && ! grep -q '4096 bytes' '$T/out'"
mkfifo job.pipe
(printf 'train: {steps: 1}\n' >job.pipe &)
timed "$S" config check job.pipe
check "a job file may still be a pipe (config check reads it: status $rc)" test "$rc" -eq 0
mkfifo text.pipe
(printf 'hello from a pipe\n' >text.pipe &)
timed "$S" data prepare -o piped.bin text.pipe
check "data prepare may still read a pipe (status $rc)" sh -c "[ $rc -eq 0 ] && [ -s piped.bin ]"

# --- 3. memory planned before anything is allocated --------------------------
if ldd "$S" 2>/dev/null | grep -q libasan; then
    skip "memory limits: AddressSanitizer reserves terabytes of address space, so RLIMIT_AS cannot be capped"
    skip "memory limits (AddressSanitizer)"
    skip "memory limits (AddressSanitizer)"
else
    cat >huge.sh <<EOS
ulimit -v 4000000
exec /usr/bin/time -f 'maxrss_kb=%M' "$S" train --set model.n_embd=65536 --set model.n_head=1 --set train.steps=1
EOS
    timed sh huge.sh
    rss=$(sed -n 's/.*maxrss_kb=\([0-9]*\).*/\1/p' "$T/err")
    check "n_embd 65536 under ulimit -v 4 GB is refused before allocating: 78 (status $rc, $ms ms)" test "$rc" -eq 78
    check "  ...naming the limit, the categories and a fix" \
        sh -c "grep -q 'more than RLIMIT_AS (ulimit -v) allows' '$T/err' && grep -q 'param_shard' '$T/err' && grep -q 'hint:' '$T/err'"
    check "  ...with a peak RSS below 1 GB (${rss:-?} kB)" test "${rss:-9999999}" -lt 1000000
    cat >batch.sh <<EOS
ulimit -v 4000000
exec "$S" train --set train.batch_size=1000000 --set train.micro_batch=1000000 --set train.steps=1
EOS
    timed sh batch.sh
    check "a micro-batch of a million sequences under ulimit -v 4 GB: 78 with the micro_batch hint (status $rc)" \
        sh -c "[ $rc -eq 78 ] && grep -q 'activations' '$T/err' && grep -q 'lower train.micro_batch' '$T/err'"
fi

SHARDRUN_TEST_MEM_AVAILABLE=1000000 "$S" train $small --set train.steps=1 >avail.out 2>avail.err
rc=$?
check "a plan above the node's available memory is a warning, not a refusal (status $rc)" \
    sh -c "[ $rc -eq 0 ] && grep -q 'more than this node.s available memory' avail.err && grep -q 'may be killed by the kernel' avail.err"

# --- 4. YAML nested or sized to stall the parser -----------------------------
awk 'BEGIN { s = "model: "; for (i = 0; i < 65; i++) s = s "["; print s }' >deep.yaml
timed "$S" config check deep.yaml
check "a job file nested 65 deep is refused (78) with file:line:col (status $rc, $ms ms)" \
    sh -c "[ $rc -eq 78 ] && grep -q 'deep.yaml:1:[0-9]*: nesting deeper than 64 levels' '$T/err'"
awk 'BEGIN { printf "data:\n  train: ["; for (i = 0; i <= 1000000; i++) printf "%sa", i ? "," : ""; print "]" }' >wide.yaml
timed "$S" config check wide.yaml
check "a job-file list of a million and one entries is refused (status $rc)" \
    sh -c "[ $rc -eq 78 ] && grep -q 'more than 1000000 entries' '$T/err'"
cp -r ck/step_00000009 deepck
awk 'BEGIN { s = "x: "; for (i = 0; i < 100000; i++) s = s "["; for (i = 0; i < 100000; i++) s = s "]"; print s }' >deep.part
sed '$d' deepck/manifest.yaml >m.tmp && cat deep.part >>m.tmp && echo "manifest_sha256: x" >>m.tmp && mv m.tmp deepck/manifest.yaml
resign deepck/manifest.yaml
for cmd in inspect verify; do
    timed "$S" ckpt $cmd deepck
    check "ckpt $cmd of a 100,000-deep manifest (checksum recomputed): 65 in under a second of CPU ($cpu_ms ms; $ms ms wall)" \
        sh -c "[ $rc -eq 65 ] && [ $cpu_ms -lt 1000 ] && grep -q 'nesting deeper than 64' '$T/out' '$T/err'"
done
cp -r ck/step_00000009 bigck
sed '$d' bigck/manifest.yaml >m.tmp
awk 'BEGIN { for (i = 0; i < 700000; i++) printf "pad%d: 0123456789012345678901234567890123456789012345678901234567890123456789012345678901234\n", i }' >>m.tmp
echo "manifest_sha256: x" >>m.tmp && mv m.tmp bigck/manifest.yaml && resign bigck/manifest.yaml
expect_status 65 "a manifest over 64 MiB is refused" "$S" ckpt inspect bigck
check "  ...naming the limit" grep -q "a document may have at most 64 MiB" "$T/err"
rm -rf bigck deepck

# --- 5. manifests that contradict themselves ---------------------------------
mangle() { # NAME SED-EXPRESSION: a copy of step 9 with its manifest edited and re-signed
    rm -rf "$1" && cp -r ck/step_00000009 "$1" && sed -i "$2" "$1/manifest.yaml" && resign "$1/manifest.yaml"
}
mangle dupck 's/^step: 9$/step: 9\nstep: 8/'
expect_status 65 "a manifest with a duplicate key is refused" "$S" ckpt verify dupck
check "  ...naming it and where it was first given" grep -q "duplicate key 'step' (first given at line" "$T/out"
mangle headck 's/^  n_head: 4$/  n_head: 0/'
expect_status 65 "a manifest with n_head 0 is refused" "$S" ckpt inspect headck
check "  ...as a model a job file could not have" grep -q "model: model.n_head: 0 is out of range" "$T/err"
mangle layerck 's/^  n_layer: 1$/  n_layer: 1048576/'
timed /usr/bin/time -f 'maxrss_kb=%M' "$S" ckpt inspect layerck
rss=$(sed -n 's/.*maxrss_kb=\([0-9]*\).*/\1/p' "$T/err")
# what the process holds before reading anything (libraries: cuBLASLt's
# relocations alone are ~210 MB in a CUDA build) is not sized by the manifest
base=$(/usr/bin/time -f 'maxrss_kb=%M' "$S" --version 2>&1 >/dev/null | sed -n 's/.*maxrss_kb=\([0-9]*\).*/\1/p')
check "a manifest claiming 2^20 layers is refused without sizing anything by it (status $rc, ${rss:-?} kB, ${base:-?} kB at start)" \
    sh -c "[ $rc -eq 65 ] && grep -q 'model.n_layer: 1048576 is out of range' '$T/err' && [ $((${rss:-999999} - ${base:-0})) -lt 200000 ]"
mangle vocabck 's/^  padded_vocab_size: 256$/  padded_vocab_size: 64/'
expect_status 65 "a manifest whose vocabulary exceeds its padded vocabulary is refused" "$S" ckpt export vocabck -o x.bin
check "  ...and no model file is written" test ! -e x.bin
long=$(printf 'x%.0s' $(seq 1 100))
mangle namesck "s/name: shard_00000.bin/name: ..\/..\/$long.bin/"
expect_status 65 "a manifest naming a long path is refused" "$S" ckpt verify namesck
check "  ...with the whole name in the message" grep -q "$long.bin' is not a shard file name" "$T/out"

# --- 6. the small things ------------------------------------------------------
"$S" train $small --set train.steps=12 --set checkpoint.dir=ck >r6.out 2>r6.err
check "after a resume the final line counts this run's steps and its first loss (no nan)" \
    sh -c "grep -q 'done: 3 steps (10 to 12, resumed at 9)' r6.err && ! grep -q 'loss nan' r6.err"
printf 'train:\n  steps: !!str 3\n' >tagged.yaml
expect_status 78 "an integer written !!str 3 is refused" "$S" config check tagged.yaml
check "  ...at its place, with the hint" grep -q "tagged.yaml:2:10: train.steps: expected an integer .*, got '3' with an explicit tag (hint: remove the tag)" "$T/err"

# --- 7. a PMIx server that accepts and never answers --------------------------
# (a listener on loopback stands in for a failing launcher: it accepts the
# connection PMIx_Init opens and never sends the handshake reply)
cat >mute.py <<'EOS'
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
s.bind(("127.0.0.1", 0))
s.listen(8)
with open(sys.argv[1] + ".tmp", "w") as f:
    f.write(str(s.getsockname()[1]))
import os
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
held = []
s.settimeout(120)
try:
    while True:
        held.append(s.accept()[0])
except OSError:
    pass
EOS
python3 mute.py mute.port &
mute_pid=$!
i=0
while [ ! -s mute.port ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
uri="mute.0;tcp4://127.0.0.1:$(cat mute.port 2>/dev/null)"
timed env PMIX_NAMESPACE=mute.1 PMIX_RANK=0 PMIX_SERVER_URI41="$uri" PMIX_SERVER_URI4="$uri" PMIX_SERVER_URI3="$uri" \
    PMIX_SECURITY_MODE=native SHARDRUN_PMIX_INIT_TIMEOUT=3 "$S" train $small --set train.steps=1 --set checkpoint.dir=mute_ck
check "a PMIx server that never finishes the handshake: 69 after SHARDRUN_PMIX_INIT_TIMEOUT=3 (status $rc, $ms ms)" \
    sh -c "[ $rc -eq 69 ] && [ $ms -lt 30000 ]"
check "  ...with one message naming PMIx_Init, the server and the setting" \
    sh -c "[ \$(grep -c 'error:' '$T/err') -eq 1 ] && grep -q 'PMIx_Init did not return within 3 s: .*127.0.0.1' '$T/err' &&
           grep -q SHARDRUN_PMIX_INIT_TIMEOUT '$T/err'"
check "  ...and nothing written" test ! -e mute_ck
kill "$mute_pid" 2>/dev/null
wait "$mute_pid" 2>/dev/null
SHARDRUN_PMIX_INIT_TIMEOUT=soon "$S" train $small --set train.steps=1 >out 2>err
rc=$?
check "SHARDRUN_PMIX_INIT_TIMEOUT=soon is refused (status $rc) with the range and the default" \
    sh -c "[ $rc -eq 78 ] && grep -q \"SHARDRUN_PMIX_INIT_TIMEOUT='soon' is not a number of seconds from 0 to 86400\" err"
done_testing
