#!/bin/sh
# newuser2.sh — the rough edges a new user hit, II (issue 65): each item of
# the trial checked where it once fell short.
#   1. the log line ends "| elapsed 12m03s | 3.1 step/s | eta 41m"; a \r
#      progress line between log lines only when stderr is a terminal (a
#      pty from script(1)) and one rank runs on the node
#   2. records carry loss_mean (the mean of the steps' losses since the last
#      record, against a run that records every step) and loss_steps; the
#      log line prints loss_mean; the step a preemption stops at has a record
#   3. the vocabulary is data.tokenizer's when model.vocab_size is unset; an
#      explicit smaller one is 78; a resume keeps the checkpoint's
#   4. data prepare --val-fraction: whole documents, each by a SplitMix64 of
#      (--seed, its index) recomputed here, the shards exactly the documents
#      chosen, empty documents dropped and counted, the summary's --set
#      options train; data.train: DIR reads index.json (its shards, its
#      tokenizer: 65 when changed, 66 when missing); --val-tokens beside it 64
#   5. the training sample prints UTF-8 as text; sample echoes the prompt
#      (--no-echo: not), warns when a prompt is cut to the context
#   6. other tools' names (logging, logging.every, train.warmup, train.batch,
#      gradient_accumulation_steps) suggest shardrun's keys; the batch-split
#      error names the keys the user set
#   7. a resume that raises train.steps warns once with the learning rate
#      of the next step before and after (the records' values)
#   8. report: a one-rank run has no busy-time grid or straggler table; the
#      throughput and MFU axes start at 0; a resume does not break a line
#   9. a one-process CPU run ends without the flight recorder's line (-v
#      prints it)
. "${SR_SRCDIR:-.}/tests/tap.sh"
S=$SHARDRUN
cd "$T" || exit 99
small="--set model.n_layer=1 --set model.n_embd=32 --set model.n_head=2 --set model.seq_len=16 --set threads=1"
small="$small --set train.batch_size=2 --set log.sample_every=0 --set train.eval_every=0"
CR=$(printf '\r')

# a byte-level tokenizer.json of 258 ids (the bytes, one merge, the end of text)
python3 "$SR_SRCDIR/tests/tok/t258.py" t258.json
# 300 documents, each its own words, every 40th empty
python3 -c '
import json
with open("docs.jsonl", "w") as f:
    for i in range(300):
        f.write(json.dumps({"text": "" if i % 40 == 7 else "<doc %d: %s>" % (i, "the cat sat " * (1 + i % 4))}) + "\n")'

# --- 1. where training is ----------------------------------------------------------
group "1. the log line and the progress line" && {
    "$S" train $small --set train.steps=12 --set log.every=4 >p.out 2>p.err
    check "the log line ends with elapsed, steps per second and the estimate of the rest" \
        grep -Eq '^shardrun: step +8/12 \| loss [0-9.]+ \| .* \| elapsed [0-9]+s \| [0-9.]+ step/s \| eta [0-9]+s$' p.err ||
        diag "$(grep 'step ' p.err | head -3)"
    check "  ...and stderr that is not a terminal has no \\r progress line" sh -c "! grep -q '$CR' p.err"
    if command -v script >/dev/null 2>&1; then
        script -qec "'$S' train $small --set train.steps=12 --set log.every=4" /dev/null >tty.out 2>&1
        check "on a terminal a \\r progress line comes between the log lines" \
            grep -Eaq "${CR}shardrun: step 2/12 \| loss [0-9.]+ \| [0-9.e+-]+ step/s \| eta [0-9hms]+ *${CR}" tty.out ||
            diag "$(od -c tty.out | head -20)"
        check "  ...blanked before the next log line, which starts at column 0" \
            grep -Eaq "${CR} +${CR}shardrun: step +4/12 \| loss" tty.out
        if have_mpirun; then
            script -qec "$MPI -n 2 '$S' train $small --set train.steps=6 --set log.every=3" /dev/null >tty2.out 2>&1
            check "two ranks on the node: no progress line on the terminal" \
                sh -c "grep -aq 'step +6/6' tty2.out || grep -Eaq 'step +6/6' tty2.out; ! grep -aq '${CR}shardrun: step [0-9]*/6 |' tty2.out"
        else
            skip_mpirun "two ranks on a terminal"
        fi
    else
        skip_or_fail pty "a terminal's progress line: script(1) is not installed (apt-get install bsdutils)"
    fi
}

# --- 2. the interval's mean loss ----------------------------------------------------
group "2. loss_mean" && {
    "$S" train $small --set train.steps=10 --set log.every=1 --set log.metrics=every.jsonl >/dev/null 2>&1
    "$S" train $small --set train.steps=10 --set log.every=5 --set log.metrics=five.jsonl >five.out 2>five.err
    python3 - every.jsonl five.jsonl >lm.out <<'EOF'
import json, sys
rec = lambda p: [json.loads(l) for l in open(p) if '"event"' not in l]
every = {r["step"]: r["loss"] for r in rec(sys.argv[1])}
five = rec(sys.argv[2])
want = {1: (1, 1), 5: (2, 5), 10: (6, 10)}
ok = [r["step"] for r in five] == [1, 5, 10]
for r in five:
    a, b = want[r["step"]]
    mean = sum(every[s] for s in range(a, b + 1)) / (b - a + 1)
    ok = ok and r["loss_steps"] == b - a + 1 and abs(r["loss_mean"] - mean) <= 1e-12 * abs(mean)
    ok = ok and r["loss"] == every[r["step"]]
print("ok" if ok else "bad %s" % [(r["step"], r["loss"], r["loss_mean"], r["loss_steps"]) for r in five])
print("%.4f" % five[-1]["loss_mean"])
EOF
    check "records: loss is the step's own, loss_mean the mean since the last record, loss_steps their number" \
        test "$(head -1 lm.out)" = ok || diag "$(cat lm.out)"
    check "  ...and the log line prints loss_mean" grep -q "step  *10/10 .*| loss_mean $(tail -1 lm.out) |" five.err
    SHARDRUN_TEST_PREEMPT_AT=7 "$S" train $small --set train.steps=10 --set log.every=5 --set log.metrics=pre.jsonl \
        --set checkpoint.dir=ck2 >pre.out 2>pre.err
    rc=$?
    "$S" train $small --set train.steps=10 --set log.every=5 --set log.metrics=pre.jsonl --set checkpoint.dir=ck2 \
        >res.out 2>res.err
    steps=$(grep -v '"event"' pre.jsonl | sed 's/.*"step":\([0-9]*\),.*"loss_steps":\([0-9]*\),.*/\1:\2/' | tr '\n' ' ')
    check "a preemption at step 7 writes a record there (loss_steps 2), the resumed run's next has 3 ($rc: $steps)" \
        test "$rc $steps" = "75 1:1 5:4 7:2 10:3 "
}

# --- 3. the vocabulary from the tokenizer -----------------------------------------
group "3. the vocabulary from the tokenizer" && {
    "$S" data prepare --field text --tokenizer t258.json -o d3/ docs.jsonl >/dev/null 2>&1
    set3="--set data.train=d3/data_train_*.bin --set data.tokenizer=t258.json"
    "$S" train $small $set3 --set train.steps=2 >v.out 2>v.err
    rc=$?
    check "no model.vocab_size: the tokenizer's 258 ids (status $rc)" \
        sh -c "[ $rc -eq 0 ] && grep -q 'vocab_size 258, .*vocabulary padded to' v.err" || diag "$(grep -E 'model|error' v.err)"
    "$S" config show /dev/null $set3 >show.out 2>&1
    check "  ...config show says so" grep -q '^  vocab_size: 258$' show.out
    expect_status 78 "an explicit model.vocab_size below the tokenizer's ids" "$S" train $small $set3 \
        --set model.vocab_size=256 --set train.steps=1
    check "  ...names both" grep -q "has 258 ids, more than model.vocab_size 256" "$T/err"
    "$S" train $small $set3 --set model.vocab_size=384 --set train.steps=2 --set checkpoint.dir=ck3 \
        --set checkpoint.every_steps=1 >/dev/null 2>&1
    echo 'broken: [' >ck3/step_00000002/manifest.yaml
    "$S" train $small $set3 --set train.steps=3 --set checkpoint.dir=ck3 >r3.out 2>r3.err
    rc=$?
    check "a resume keeps the checkpoint's vocabulary (384, written before it came from the tokenizer; the newest broken, step 1 read; status $rc)" \
        sh -c "[ $rc -eq 0 ] && grep -q 'model.vocab_size 384: the checkpoint' r3.err && grep -q 'vocab_size 384' r3.err && grep -q 'resume: loaded .*step_00000001' r3.err" ||
        diag "$(grep -E 'vocab|error|resume' r3.err)"
    "$S" config show /dev/null --set data.tokenizer=nowhere.json >cs.out 2>cs.err
    rc=$?
    check "config show of a job whose tokenizer is not here: the preset's vocabulary, a warning ($rc)" \
        sh -c "[ $rc -eq 0 ] && grep -q '^  vocab_size: 256$' cs.out && grep -q 'nowhere.json.*the vocabulary stays 256' cs.err"
}

# --- 4. data prepare splits by documents ------------------------------------------
group "4. data prepare --val-fraction" && {
    "$S" data prepare --field text --val-fraction 0.2 --seed 7 -o d4/ docs.jsonl >d4.out 2>d4.err
    rc=$?
    python3 - docs.jsonl d4 7 0.2 >split.out <<'EOF'
import glob, json, struct, sys
M = (1 << 64) - 1
def val(seed, index, f):
    z = (seed * 0x9E3779B97F4A7C15 + index) & M
    for _ in range(2):
        z = (z + 0x9E3779B97F4A7C15) & M
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M
        z ^= z >> 31
    return (z >> 11) * 2.0 ** -53 < f
docs = [json.loads(l)["text"].encode() for l in open(sys.argv[1])]
empty = sum(1 for d in docs if not d)
docs = [d for d in docs if d]
seed, f = int(sys.argv[3]), float(sys.argv[4])
chosen = [val(seed, i, f) for i in range(len(docs))]
def shard(pattern):
    out = b""
    for p in sorted(glob.glob(sys.argv[2] + "/" + pattern)):
        b = open(p, "rb").read()
        n = struct.unpack("<3i", b[:12])[2]
        out += bytes(struct.unpack("<%dH" % n, b[1024:1024 + 2 * n]))
    return out
v = b"".join(d for d, c in zip(docs, chosen) if c)
t = b"".join(d for d, c in zip(docs, chosen) if not c)
idx = json.load(open(sys.argv[2] + "/index.json"))
print("ok" if shard("data_val_*.bin") == v and shard("data_train_*.bin") == t else "bad split")
print(sum(chosen), len(docs), empty, idx["format"], idx["empty_documents"])
EOF
    set -- $(sed -n 2p split.out)
    check "each document goes whole to validation when SplitMix64(seed, index) < F: the shards are exactly those documents (status $rc)" \
        test "$rc $(head -1 split.out)" = "0 ok" || diag "$(cat split.out d4.err)"
    pct=$(awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", 100 * a / b }')
    check "  ...the summary prints the realised fraction ($1 of $2 documents, $pct%) and the empty documents dropped ($3)" \
        sh -c "grep -q 'validation: $1 of the documents ($pct%; --val-fraction 0.2, --seed 7)' d4.err && grep -q '; $3 empty documents dropped' d4.err"
    check "  ...index.json's format is bumped and counts them" test "$4 $5 $6 $7 $8" = "shardrun data prepare 2 $3"
    sets=$(sed -n 's/.*; train with \(.*\) (or .*/\1/p' d4.err)
    eval "'$S' train $small --set train.steps=2 --set train.eval_every=2 $sets" >s4.out 2>s4.err
    rc=$?
    check "  ...and the --set options it prints train on the result, with validation ($sets)" \
        sh -c "[ $rc -eq 0 ] && grep -q 'val  d4/data_val_.*: 1 shard' s4.err && grep -q 'step 2: val_loss' s4.err" ||
        diag "$(cat s4.err | tail -3)"
    cp t258.json tok.json
    "$S" data prepare --field text --tokenizer tok.json --val-fraction 0.2 -o d4t/ docs.jsonl >d4t.out 2>d4t.err
    check "  ...with a tokenizer the summary names data.tokenizer by its absolute path" \
        grep -q " --set data.tokenizer=$T/tok.json (or --set data.train=d4t: index.json names the rest)" d4t.err
    "$S" train $small --set data.train=d4t --set train.steps=2 --set train.eval_every=2 >dir.out 2>dir.err
    rc=$?
    check "data.train: DIR reads its index.json: training shards, validation shards, the tokenizer and its vocabulary ($rc)" \
        sh -c "[ $rc -eq 0 ] && grep -q 'data d4t/data_train_000001.bin' dir.err && grep -q 'val  d4t/data_val_000000.bin' dir.err && grep -q 'vocab_size 258' dir.err" ||
        diag "$(grep -E 'data|val|model|error' dir.err)"
    printf ' ' >>tok.json
    expect_status 65 "a tokenizer changed since data prepare" "$S" train $small --set data.train=d4t --set train.steps=1
    check "  ...says so, with both SHA-256" grep -q "tok.json, which has changed since the data was prepared (SHA-256" "$T/err"
    rm tok.json
    expect_status 66 "a tokenizer index.json names that is missing" "$S" train $small --set data.train=d4t --set train.steps=1
    check "  ...names it" grep -q "tok.json, which is missing" "$T/err"
    expect_status 64 "--val-fraction with --val-tokens" "$S" data prepare --val-fraction 0.1 --val-tokens 5 -o x/ docs.jsonl
    expect_status 64 "--val-fraction 1.5" "$S" data prepare --val-fraction 1.5 -o y/ docs.jsonl
    check "  ...nothing written" sh -c "[ ! -e x ] && [ ! -e y ]"
}

# --- 5. text reads as text --------------------------------------------------------
group "5. text reads as text" && {
    python3 -c '
import random
random.seed(1)
w = ["caf\u00e9", "na\u00efve", "\u2014", "r\u00e9sum\u00e9", "\u00fcber"]
open("u.txt", "w").write(" ".join(random.choice(w) for _ in range(20000)))'
    "$S" data prepare -o u.bin u.txt >/dev/null 2>&1
    "$S" train $small --set data.train=u.bin --set train.batch_size=4 --set train.steps=150 --set train.lr=0.01 \
        --set log.sample_every=150 --set checkpoint.dir=ck5 >u.out 2>u.err
    check "the training sample prints UTF-8 as it is: — and é, not \\xe2\\x80\\x94" \
        sh -c "grep 'sample at step 150' u.err | grep -q '—' && ! grep 'sample at step 150' u.err | grep -q 'xe2'" ||
        diag "$(grep sample u.err)"
    "$S" sample ck5 --prompt "Hello — " --tokens 8 --temperature 0 >e.out 2>e.err
    "$S" sample ck5 --prompt "Hello — " --tokens 8 --temperature 0 --no-echo >n.out 2>n.err
    check "sample echoes the prompt before the continuation; --no-echo prints the continuation alone" \
        sh -c "[ \"\$(cat e.out)\" = \"Hello — \$(cat n.out)\" ] && [ -s n.out ]" || diag "$(cat e.out n.out)"
    "$S" sample ck5 --prompt "a prompt longer than the sixteen positions" --tokens 2 >c.out 2>c.err
    check "a prompt longer than the context: a warning, and the echo is the part the model reads" \
        sh -c "grep -q 'the prompt is 42 tokens, more than the model.s context of 16: its first 26 tokens are cut' c.err && head -c 16 c.out | grep -q '^ixteen positions'" ||
        diag "$(cat c.err c.out)"
}

# --- 6. other tools' names ---------------------------------------------------------
group "6. key suggestions" && {
    printf 'logging:\n  every: 10\n' >l.yaml
    expect_status 78 "logging: in a job file" "$S" config check l.yaml
    check "  ...suggests log, and log.every for logging.every" \
        grep -q "l.yaml:1:1: unknown key 'logging'; did you mean 'log'? (logging.every is log.every)" "$T/err"
    for kv in logging.every:log.every train.warmup:train.warmup_steps train.batch:train.batch_size \
        gradient_accumulation_steps:train.batch_size train.gradient_accumulation_steps:train.batch_size; do
        k=${kv%%:*} v=${kv#*:}
        expect_status 78 "--set $k" "$S" config check /dev/null --set "$k=4"
        check "  ...suggests $v" grep -q "unknown key '$k'; did you mean '$v'?" "$T/err"
    done
    check "  ...and how accumulation follows from batch_size, micro_batch and ranks" \
        grep -q "accumulation steps = train.batch_size / (train.micro_batch x ranks)" "$T/err"
    expect_status 78 "a batch that does not split over 4 ranks" "$S" config check /dev/null --ranks 4 \
        --set train.batch_size=10
    check "  ...names batch_size and the ranks, not a derived micro_batch" \
        sh -c "grep -q 'train.batch_size (10) does not split evenly over the 4 data-parallel ranks' '$T/err' && ! grep -q 'micro_batch (2)' '$T/err'"
}

# --- 7. extending a run -----------------------------------------------------------
group "7. extending a run" && {
    sched="--set train.warmup_steps=2 --set log.every=1"
    "$S" train $small $sched --set train.steps=20 --set log.metrics=ref7.jsonl >/dev/null 2>&1
    SHARDRUN_TEST_PREEMPT_AT=10 "$S" train $small $sched --set train.steps=20 --set checkpoint.dir=ck7 >/dev/null 2>&1
    "$S" train $small $sched --set train.steps=40 --set checkpoint.dir=ck7 --set log.metrics=ext7.jsonl \
        >ext.out 2>ext.err
    rc=$?
    was=$(grep '"step":11,' ref7.jsonl | sed 's/.*"lr":\([^,]*\),.*/\1/')
    now=$(grep '"step":11,' ext7.jsonl | sed 's/.*"lr":\([^,]*\),.*/\1/')
    w=$(awk -v x="$was" 'BEGIN { printf "%.4g", x }') n=$(awk -v x="$now" 'BEGIN { printf "%.4g", x }')
    check "raising train.steps on resume warns once, with step 11's learning rate after ($n) and before ($w)" \
        sh -c "[ $rc -eq 0 ] && [ \$(grep -c 'train.steps' ext.err) -eq 1 ] && grep -q 'warning: resume: train.steps changed since .*: 20 -> 40; .*the learning rate of step 11 is $n (it was to be $w)' ext.err" ||
        diag "$(grep -i 'resume' ext.err)"
}

# --- 8. the report fits the run ----------------------------------------------------
group "8. the report of a one-rank run" && {
    SHARDRUN_TEST_PREEMPT_AT=6 "$S" train $small --set train.steps=12 --set log.every=3 --set log.metrics=r8.jsonl \
        --set checkpoint.dir=ck8 >/dev/null 2>&1
    "$S" train $small --set train.steps=12 --set log.every=3 --set log.metrics=r8.jsonl --set checkpoint.dir=ck8 \
        >/dev/null 2>&1
    "$S" report r8.jsonl -o r8.html >r8.sum 2>&1
    check "no busy-time grid, no straggler table or line for one rank" \
        sh -c "! grep -q 'Busy time per rank' r8.html && ! grep -q 'class=\"stragglers\"' r8.html && ! grep -q straggler r8.sum"
    python3 - r8.html >axes.out <<'EOF'
import re, sys
page = open(sys.argv[1]).read()
out = []
for chart in ("tokens-per-s", "mfu"):
    sec = page.split('id="chart-%s"' % chart)[1].split("</section>")[0]
    out.append(re.findall(r'class="ytick">([^<]*)<', sec)[0])
loss = page.split('id="chart-loss"')[1].split("</section>")[0]
path = re.search(r'class="series series-loss" [^>]*d="([^"]*)"', loss).group(1)
out.append(str(path.count("M")))
print(" ".join(out))
EOF
    check "the throughput and MFU axes start at 0; the loss is one line across the resume (ticks, moves: $(cat axes.out))" \
        test "$(cat axes.out)" = "0 0 1"
}

# --- 9. the recorder's line --------------------------------------------------------
group "9. the flight recorder's line" && {
    "$S" train $small --set train.steps=2 >f.out 2>f.err
    "$S" train $small --set train.steps=2 -v >fv.out 2>fv.err
    check "a one-process CPU run ends without the flight recorder's line; -v prints it" \
        sh -c "! grep -q 'flight recorder' f.err && grep -q 'flight recorder: .* records in 2 steps' fv.err"
}

done_testing
