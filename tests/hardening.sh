#!/bin/sh
# hardening.sh — the defects the fourth hostile probe found (issue 55), each
# as the rule it broke; every hostile input is listed here:
#   1. a file the program names itself is never reached through a link and
#      never blocks: .shardrun-sha256.json as a link to a victim, a FIFO, a
#      directory; index.json as a FIFO and a directory (hints: one warning,
#      skipped, the cache goes to checkpoint.dir's data-sha256.json);
#      starts.jsonl as a FIFO, a link out of the checkpoint directory and a
#      directory (state: train 73, ckpt list warns and lists); the flight
#      dump's temporary as a link to a victim and rank0.json as a FIFO;
#      model.safetensors.index.json as a FIFO (66 at once); a preemption
#      signal before step 1 (75 and nothing saved; 0 with requeue scontrol)
#   2. no input is quadratic in its size: tiktoken tokens of 64 KiB load
#      at once, one of 100,000 bytes is 65 naming FILE:LINE; vocab.json's
#      cap too
#   3. data prepare's memory bound holds: a JSON Lines document without
#      whitespace is cut at 1 MiB (one warning) and the peak RSS stays
#      small
#   4. an interrupted command leaves nothing behind: data prepare killed by
#      SIGTERM, SIGINT and SIGHUP (143, 130, 129; no temporary left)
#   5. debug trace and debug flight: an output onto their own input (73),
#      a FIFO named rank0.json (65 at once)
#   6. text formats refuse what they cannot represent: a NUL in
#      merges.txt and in a rank file (65 with FILE:LINE), added_tokens
#      that is an object (65)
#   7. values from other programs are bounded: squeue's 99999999-00:00:00
#      and a long digit string (one warning, saves only on a signal); 0:00
#      (now: stop after the current step)
#   8. messages say the truth: model.init on resume (one line), a dump's
#      host name with terminal escapes, config.json that is a FIFO (66
#      naming it), log.tensorboard naming a file (73 naming the key), a
#      tokenizer.json without "model", --prefix .., a weight_map list
#   9. SIGTERM writes the flight recorder's dump at once (with a
#      checkpoint.dir the preemption's replaces it; without, 143)
#   10. a C test's exit status is its verdict (tests/tap_probe)
# (Also item 9: tests/flight.sh's stall under plain mpirun; item 11:
# tests/cudaemu.sh's launch blocked in the driver, tests/nccl_emu.sh's
# refused split.)
. "${SR_SRCDIR:-.}/tests/tap.sh"
S=$SHARDRUN
cd "$T" || exit 99
command -v python3 >/dev/null 2>&1 || require_or_skip python3 "python3 not found"
small="--set model.n_layer=1 --set model.n_embd=32 --set model.n_head=2 --set model.seq_len=16 --set threads=1"
small="$small --set train.batch_size=2 --set log.every=1"
# timed CMD...: runs CMD that must not hang (killed after 60 s: status 124);
# status in $rc, output in out and err
timed() {
    timeout -k 10 60 "$@" >out 2>err </dev/null
    rc=$?
}
echo precious >victim
# a token shard in a data directory of its own: data/NAME.bin
shard() { mkdir -p "$1" && "$S" data prepare "$SR_SRCDIR/data/corpus.txt" -o "$1/s.bin" >/dev/null 2>&1; }
# shared fixtures: a checkpoint (ck0), its Hugging Face export (hf0/) and a
# flight dump (fl0/rank0.json)
SHARDRUN_TEST_PREEMPT_AT=2 "$S" train $small --set train.steps=3 --set checkpoint.dir=ck0 --set log.flight_dir=fl0 \
    >base.out 2>&1
"$S" ckpt export ck0 -o hf0/ >>base.out 2>&1
[ -f hf0/config.json ] && [ -f fl0/rank0.json ] || { echo "Bail out! the fixtures failed: $(tail -2 base.out)"; exit 1; }
# a job without model.preset, for model.init directories (their config.json
# declares the model)
printf 'train: {batch_size: 2}\nthreads: 1\nlog: {every: 1}\n' >hfjob.yaml

# rank files: 64 KiB tokens (every split of x^k a pair), one of 100,000 bytes
python3 - <<'EOF'
import base64
lines = [base64.b64encode(bytes([b])).decode() + " %d" % b for b in range(256)]
r = 256
k = 2
while k <= 65536:  # x, xx, xxxx, ..., 64 KiB of x: every split of each is a pair
    lines.append(base64.b64encode(b"x" * k).decode() + " %d" % r); r += 1; k *= 2
for i in range(24):  # long tokens of distinct bytes
    lines.append(base64.b64encode(bytes([(i * 7 + j) % 251 + 1 for j in range(65536)])).decode() + " %d" % r); r += 1
open("long.tiktoken", "w").write("\n".join(lines) + "\n")
big = lines[:256] + [base64.b64encode(b"y" * 100000).decode() + " 256"]
open("big.tiktoken", "w").write("\n".join(big) + "\n")
EOF
printf 'xxxxxxxx yyy\n' >x.txt

# minimal byte-level tokenizer files: a vocab.json + merges.txt pair and a
# tokenizer.json (GPT-2's byte-to-character map, one merge)
python3 - <<'EOF'
import json
bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
cs = bs[:]
n = 0
for b in range(256):
    if b not in bs:
        bs.append(b); cs.append(256 + n); n += 1
m = {b: chr(c) for b, c in zip(bs, cs)}
vocab = {m[b]: b for b in range(256)}
vocab["hh"] = 256
vocab["<|endoftext|>"] = 257
json.dump(vocab, open("vocab.json", "w"))
open("merges.txt", "w").write("#version: 0.2\nh h\n")
tj = {"version": "1.0", "added_tokens": [{"id": 257, "content": "<|endoftext|>", "special": True}],
      "normalizer": None, "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "use_regex": True},
      "model": {"type": "BPE", "vocab": vocab, "merges": ["h h"]}}
json.dump(tj, open("tokenizer.json", "w"))
tj["added_tokens"] = {"id": 257, "content": "<|endoftext|>"}
json.dump(tj, open("added_obj.json", "w"))
del tj["model"]
tj["added_tokens"] = []
json.dump(tj, open("nomodel.json", "w"))
EOF

# --- 1. names the program chooses ----------------------------------------------
group "1. own names" && {
    shard d1 && ln -s "$T/victim" d1/.shardrun-sha256.json
    timed "$S" train $small --set train.steps=1 --set data.train=d1/s.bin --set checkpoint.dir=ck1
    check "a hash cache that is a symbolic link: the run goes on (status $rc)" test $rc -eq 0 || diag "$(tail -3 err)"
    check "  ...the file it points to is untouched, the link still a link" \
        sh -c '[ "$(cat victim)" = precious ] && [ -L d1/.shardrun-sha256.json ]'
    check "  ...one warning naming the path and its kind" \
        sh -c "[ \$(grep -c 'd1/.shardrun-sha256.json: a symbolic link is there, not a regular file: the hash cache skipped' err) -eq 1 ]"
    check "  ...the hash went to checkpoint.dir's data-sha256.json" grep -q '"sha256"' ck1/data-sha256.json
    for kind in fifo dir; do
        shard d$kind
        if [ $kind = fifo ]; then mkfifo d$kind/.shardrun-sha256.json d$kind/index.json; else
            mkdir d$kind/.shardrun-sha256.json d$kind/index.json; fi
        timed "$S" train $small --set train.steps=1 --set data.train=d$kind/s.bin --set checkpoint.dir=ck$kind
        check "the hash cache and index.json as a $kind: no hang, the run goes on (status $rc)" test $rc -eq 0 ||
            diag "$(tail -3 err)"
        check "  ...one warning for each, naming its kind" \
            sh -c "grep -q 'd$kind/.shardrun-sha256.json: a .* is there, not a regular file' err && grep -q 'd$kind/index.json: a .* is there, not a regular file: the data index skipped' err"
    done
    # starts.jsonl: state
    "$S" train $small --set train.steps=2 --set checkpoint.dir=cks --set checkpoint.every_steps=1 >/dev/null 2>&1
    for kind in fifo link dir; do
        rm -f cks/starts.jsonl
        case $kind in
        fifo) mkfifo cks/starts.jsonl ;;
        link) ln -s "$T/victim" cks/starts.jsonl ;;
        dir) rm -rf cks/starts.jsonl && mkdir cks/starts.jsonl ;;
        esac
        timed "$S" train $small --set train.steps=3 --set checkpoint.dir=cks
        check "starts.jsonl as a $kind: train is 73 at once (status $rc)" test $rc -eq 73 || diag "$(tail -2 err)"
        check "  ...naming it and its kind; nothing trained" \
            sh -c "grep -q 'cks/starts.jsonl: a .* is there; shardrun reads and writes the files it names itself only as regular files' err && [ ! -d cks/step_00000003 ]"
        timed "$S" ckpt list cks
        check "  ...ckpt list warns and still lists the checkpoints (status $rc)" \
            sh -c "[ $rc -eq 0 ] && grep -q 'starts.jsonl' err && grep -q 'step_00000002\|^ *2 ' out"
        [ $kind = dir ] && rmdir cks/starts.jsonl
    done
    check "  ...the link's target was never appended to" sh -c '[ "$(cat victim)" = precious ]'
    # the flight recorder's dump: its temporary a link, the dump a FIFO
    mkdir fl && ln -s "$T/victim" fl/.rank0.json.tmp
    (umask 000 && SHARDRUN_TEST_PREEMPT_AT=2 timeout -k 10 60 "$S" train $small --set train.steps=4 --set checkpoint.dir=ckf \
        --set log.flight_dir=fl >out 2>err)
    rc=$?
    check "the dump's temporary planted as a link: the dump is written (status $rc)" \
        sh -c "[ $rc -eq 75 ] && [ -f fl/rank0.json ] && [ ! -L fl/rank0.json ]" || diag "$(tail -2 err)"
    check "  ...the link's target untouched; the dump 0664 under umask 000 (never world-writable)" \
        sh -c '[ "$(cat victim)" = precious ] && [ "$(stat -c %a fl/rank0.json)" = 664 ]'
    mkdir fl2 && mkfifo fl2/rank0.json
    timed "$S" train $small --set train.steps=2 --set log.flight_dir=fl2
    check "the flight dump's name is a FIFO: 73 before training (status $rc)" \
        sh -c "[ $rc -eq 73 ] && grep -q 'fl2/rank0.json: a FIFO is there' err"
    # a Hugging Face directory with hostile names
    mkdir hf && cp hf0/config.json hf/ && mkfifo hf/model.safetensors.index.json
    timed "$S" train hfjob.yaml --set train.steps=1 --set model.init=hf
    check "model.safetensors.index.json as a FIFO: 66 at once (status $rc)" \
        sh -c "[ $rc -eq 66 ] && grep -q 'model.safetensors.index.json: the sharded model.s index is a FIFO' err" ||
        diag "$(tail -2 err)"
    # a preemption signal during set-up
    timed env SHARDRUN_TEST_PREEMPT_AT=0 "$S" train $small --set train.steps=3 --set checkpoint.dir=ckp
    check "a preemption signal before step 1: 75 without training or saving (status $rc)" \
        sh -c "[ $rc -eq 75 ] && grep -q 'preemption: SIGUSR1 before step 1: nothing to save' err && ! ls -d ckp/step_* 2>/dev/null && ! grep -q 'step  *1/3' err"
    mkdir -p fake && printf '#!/bin/sh\nexit 0\n' >fake/scontrol && chmod +x fake/scontrol
    timed env PATH="$T/fake:$PATH" SLURM_JOB_ID=77 SHARDRUN_TEST_PREEMPT_AT=0 "$S" train $small --set train.steps=3 \
        --set checkpoint.dir=ckq --set preemption.requeue=scontrol
    check "  ...0 with preemption.requeue: scontrol (status $rc)" test $rc -eq 0
}

# --- 2. linear tokenizer loading -------------------------------------------------
group "2. tokenizer loading is linear" && {
    timed "$S" data prepare --tokenizer long.tiktoken --doc-token none -o tl x.txt
    check "a rank file with 24 tokens of 64 KiB loads and encodes (status $rc; quadratic took minutes)" test $rc -eq 0 ||
        diag "$(tail -2 err)"
    timed "$S" data prepare --tokenizer big.tiktoken --doc-token none -o tb x.txt
    check "a token of 100,000 bytes: 65 naming FILE:LINE and the cap (status $rc)" \
        sh -c "[ $rc -eq 65 ] && grep -q 'big.tiktoken:257: a token of 100000 bytes (at most 65536)' err"
}

# --- 3. data prepare's memory ------------------------------------------------------
group "3. data prepare's memory bound" && {
    python3 -c "
import json
open('one.jsonl', 'w').write(json.dumps({'text': 'ab' * (6 << 20)}) + '\n')"
    /usr/bin/time -f 'rss_kb=%M' -o rss timeout -k 10 120 "$S" data prepare --tokenizer tokenizer.json --threads 1 \
        --field text -o jl one.jsonl >out 2>err
    rc=$?
    rss=$(sed -n 's/rss_kb=//p' rss)
    check "a 12 MiB JSON Lines document without whitespace: prepared (status $rc)" test $rc -eq 0 || diag "$(tail -2 err)"
    check "  ...cut at 1 MiB with one warning" sh -c "[ \$(grep -c 'no space or tab in 1 MiB of text: cut there' err) -eq 1 ]"
    check "  ...in at most 256 MiB of peak RSS at 1 thread (${rss:-?} KiB; it took about 32 bytes per byte)" \
        test "${rss:-999999}" -le 262144
}

# --- 4. interrupted commands ---------------------------------------------------------
group "4. an interrupted command leaves nothing behind" && {
    python3 -c "
import random
random.seed(3)
w = ['alpha', 'beta', 'gamma', 'delta', 'eps']
open('long.txt', 'w').write('\n'.join(' '.join(random.choice(w) for _ in range(12)) for _ in range(300000)))"
    for sig in TERM INT HUP; do
        rm -rf pr && mkdir pr
        # (a shell starts a background job with SIGINT ignored, which
        # shardrun keeps: nohup's SIGHUP too; env restores the default)
        env --default-signal=INT,HUP "$S" data prepare --threads 1 --tokenizer tokenizer.json --shard-tokens 200000 \
            -o pr/ long.txt long.txt \
            long.txt long.txt long.txt long.txt long.txt long.txt >out 2>err &
        pid=$!
        w=0
        until ls -A pr | grep -q '^\.data_train'; do sleep 0.05; w=$((w + 1)); [ $w -gt 400 ] && break; done
        kill -$sig $pid
        wait $pid
        rc=$?
        case $sig in TERM) want=143 ;; INT) want=130 ;; HUP) want=129 ;; esac
        check "data prepare ended by SIG$sig: status $want ($rc), no temporary left" \
            sh -c "[ $rc -eq $want ] && [ -z \"\$(ls -A pr)\" ]" || diag "$(ls -A pr | head -3)"
    done
}

group "4. a signal the process starts with ignored stays ignored" && {
    env --ignore-signal=HUP "$S" train $small --set train.steps=40 >out 2>err </dev/null &
    pid=$!
    w=0
    until grep -q "step  *2/" err || [ $w -ge 600 ]; do sleep 0.05; w=$((w + 1)); done
    kill -HUP $pid
    wait $pid
    rc=$?
    check "SIGHUP to a run started under nohup (SIGHUP ignored) changes nothing: it trains to the end (status $rc)" \
        sh -c "[ $rc -eq 0 ] && grep -q 'done: 40 steps' err"
}

# --- 5. debug trace and debug flight -------------------------------------------------
group "5. debug trace and debug flight" && {
    "$S" train $small --set train.steps=3 --set log.trace_steps=2-2 --set log.trace_dir=tr >/dev/null 2>&1
    cp tr/rank0.json rank0.saved
    timed "$S" debug trace tr -o tr/rank0.json
    check "debug trace -o onto its own input: 73 (status $rc), the input untouched" \
        sh -c "[ $rc -eq 73 ] && grep -q 'this output is the input' err && cmp -s tr/rank0.json rank0.saved"
    mkdir tf && mkfifo tf/rank0.json
    timed "$S" debug trace tf -o merged.json
    check "debug trace of a FIFO named rank0.json: 65 at once (status $rc)" \
        sh -c "[ $rc -eq 65 ] && grep -q 'tf/rank0.json: a FIFO, not a regular file' err"
    timed "$S" debug flight tf
    check "debug flight of a FIFO named rank0.json: 65 at once (status $rc)" test $rc -eq 65
}

# --- 6. text formats -----------------------------------------------------------------
group "6. text formats refuse what they cannot represent" && {
    mkdir nul && cp vocab.json nul/ && printf '#version: 0.2\nh h\nh\000 h\n' >nul/merges.txt
    timed "$S" data prepare --tokenizer nul/vocab.json -o n1 x.txt
    check "a NUL in merges.txt: 65 naming merges.txt:3 (status $rc)" \
        sh -c "[ $rc -eq 65 ] && grep -q 'nul/merges.txt:3: a NUL byte' err"
    head -3 long.tiktoken >nul.tiktoken && printf 'eA\000= 7\n' >>nul.tiktoken
    timed "$S" data prepare --tokenizer nul.tiktoken -o n2 x.txt
    check "a NUL in a rank file: 65 naming the line (status $rc)" \
        sh -c "[ $rc -eq 65 ] && grep -q 'nul.tiktoken:4: a NUL byte' err"
    timed "$S" data prepare --tokenizer added_obj.json -o n3 x.txt
    check "added_tokens that is an object: 65 'expected a list' (status $rc)" \
        sh -c "[ $rc -eq 65 ] && grep -q 'added_tokens: expected a list' err"
}

# --- 7. squeue's answers --------------------------------------------------------------
group "7. values from other programs are bounded" && {
    mkdir -p sq && printf '#!/bin/sh\necho "$FAKE_LEFT"\n' >sq/squeue && chmod +x sq/squeue
    for left in 99999999-00:00:00 123456789012345678901234:00 366-00:00:00 1-24:00:00 0:60; do
        timed env PATH="$T/sq:$PATH" SLURM_JOB_ID=9 FAKE_LEFT=$left "$S" train $small --set train.steps=2 \
            --set checkpoint.dir=cksq
        check "squeue answering $left: one warning, the run saves only on a signal, trains on (status $rc)" \
            sh -c "[ $rc -eq 0 ] && [ \$(grep -c 'the run saves before the end only on a signal' err) -eq 1 ] && ! grep -q 'ends at' err"
    done
    timed env PATH="$T/sq:$PATH" SLURM_JOB_ID=9 FAKE_LEFT=0:00 "$S" train $small --set train.steps=5 \
        --set checkpoint.dir=cknow
    check "squeue answering 0:00: '(now)', the run stops after step 1, saves, 75 (status $rc)" \
        sh -c "[ $rc -eq 75 ] && grep -q 'ends at .* (now)' err && [ -d cknow/step_00000001 ] && ! grep -q 'in -0 s' err"
}

# --- 8. messages --------------------------------------------------------------------
group "8. messages say the truth" && {
    # a run started from model.init resumed with another model.init: the
    # change once said "(the new value takes effect)" and then "ignored"
    timed "$S" train hfjob.yaml --set train.steps=2 --set checkpoint.dir=ck8 --set model.init=hf0
    cp -r hf0 hf0b
    timed "$S" train hfjob.yaml --set train.steps=3 --set checkpoint.dir=ck8 --set model.init=hf0b
    check "model.init changed on a resume: one line saying it is ignored, no 'takes effect' (status $rc)" \
        sh -c "[ $rc -eq 0 ] && [ \$(grep -c 'model.init' err) -eq 1 ] && grep -q 'model.init: ignored' err" ||
        diag "$(grep model.init err)"
    mkdir esc && sed 's/"host": "[^"]*"/"host": "evil\\u001b[31mred"/' fl0/rank0.json >esc/rank0.json
    timed "$S" debug flight esc
    check "debug flight escapes a dump's host name (no terminal escape reaches the verdict)" \
        sh -c "grep -q 'evil.x1b\[31mred' out && ! grep -q \"\$(printf '\033')\" out"
    mkdir hf3 && mkfifo hf3/config.json
    timed "$S" train hfjob.yaml --set train.steps=1 --set model.init=hf3
    check "a Hugging Face directory whose config.json is a FIFO: 66 naming config.json (status $rc)" \
        sh -c "[ $rc -eq 66 ] && grep -q \"hf3/config.json: the model's config.json is a FIFO\" err"
    echo x >tbfile
    timed "$S" train $small --set train.steps=1 --set log.tensorboard=tbfile
    check "log.tensorboard naming a file: 73 naming the key (status $rc)" \
        sh -c "[ $rc -eq 73 ] && grep -q 'log.tensorboard: tbfile is a regular file; expected a directory' err"
    timed "$S" data prepare --tokenizer nomodel.json -o n4 x.txt
    check "a tokenizer.json without \"model\": 65 saying so, not read as a vocab.json (status $rc)" \
        sh -c "[ $rc -eq 65 ] && grep -q 'a tokenizer.json (it has \"added_tokens\") without \"model\"' err"
    timed "$S" data prepare --tokenizer tokenizer.json --prefix .. -o n5 x.txt
    check "--prefix ..: 64, no dot file written (status $rc)" sh -c "[ $rc -eq 64 ] && [ ! -e n5 ] || [ -z \"\$(ls -A n5)\" ]"
    mkdir hf4 && cp hf0/config.json hf4/ && echo '{"weight_map": ["a", "b"]}' >hf4/model.safetensors.index.json
    timed "$S" train hfjob.yaml --set train.steps=1 --set model.init=hf4
    check "a weight_map that is a list: 65 saying so, no -1:-1 position (status $rc)" \
        sh -c "[ $rc -eq 65 ] && grep -q 'weight_map\" is a list' err && ! grep -q -- '-1:-1' err"
}

# --- 9. the dump survives a terminating signal ----------------------------------------
group "9. SIGTERM writes the flight recorder's dump" && {
    for ck in with without; do
        extra=""
        [ $ck = with ] && extra="--set checkpoint.dir=ck9"
        # the first case's err9 goes first: its "step 3/" must not end the
        # second case's wait before its process has even started (a SIGTERM
        # during set-up dumps nothing: CI failed so, under load)
        rm -f out9 err9
        # shellcheck disable=SC2086
        "$S" train $small --set train.steps=100000 --set log.flight_dir=f9$ck $extra >out9 2>err9 </dev/null &
        pid=$!
        w=0
        until grep -q "step  *3/" err9 || [ $w -ge 600 ]; do sleep 0.05; w=$((w + 1)); done
        kill -TERM $pid
        wait $pid
        rc=$?
        if [ $ck = with ]; then
            check "SIGTERM with a checkpoint.dir: the signal's dump at once, then the preemption's (75; status $rc)" \
                sh -c "[ $rc -eq 75 ] && grep -q 'wrote f9with/rank0.json (signal SIGTERM)' err9 && grep -q 'wrote f9with/rank0.json (preempt)' err9 && grep -q '\"reason\": \"preempt\"' f9with/rank0.json"
        else
            check "SIGTERM without one: the dump (reason signal SIGTERM), then the signal's default action (143; status $rc)" \
                sh -c "[ $rc -eq 143 ] && grep -q '\"reason\": \"signal SIGTERM\"' f9without/rank0.json"
        fi
    done
}

# --- 10. a C test's verdict is its status ----------------------------------------------
group "10. a C test's exit status" && {
    "${SR_BUILDDIR:-.}/tests/tap_probe" pass >out 2>err
    a=$?
    "${SR_BUILDDIR:-.}/tests/tap_probe" fail >out 2>err
    b=$?
    check "tap_done returns 0 when every check passed ($a) and 1 when one failed ($b)" \
        sh -c "[ $a -eq 0 ] && [ $b -eq 1 ] && grep -q '^not ok' out"
}
done_testing
