#!/bin/sh
# eval.sh — downstream evaluation and validation sets.  `shardrun eval`
# scores a HellaSwag-form task on a step directory, a checkpoint.dir and
# the Hugging Face export alike (the same JSON), at any --batch; against
# transformers on the same random model (tests/hf/eval_ref.py, the Python
# of tests/hf/setup-venv.sh): the same log-likelihoods within 1e-4, the
# same choices and accuracies, byte-level and with a BPE tokenizer the
# checkpoint recorded (the long tier).  Hostile task files (a label out of range, an
# empty ending, a 10 MB context, bad JSON, ...) are 65 naming FILE:LINE
# with nothing written.  In the loop (train.eval_tasks) 1 and 2 ranks give
# the same accuracies, which are `shardrun eval`'s on the same step; named
# data.val sets reach every sink (metrics, TensorBoard, log.prometheus's
# set= label, the report); bad sets are 78 with their place.
. "${SR_SRCDIR:-.}/tests/tap.sh"
S=$SHARDRUN
HFPY=${SHARDRUN_HF_PYTHON:-$SR_SRCDIR/.venv-hf/bin/python}
REF=$SR_SRCDIR/tests/hf/eval_ref.py
cd "$T" || exit 99
have_hf=false
[ -x "$HFPY" ] && "$HFPY" -c 'import transformers, tokenizers' 2>/dev/null && have_hf=true

# a task of 40 items, some endings with multi-byte UTF-8 (acc_norm counts bytes)
python3 - <<'PYEOF'
import json, random
random.seed(7)
w = "the cat sat on a mat and then it ran to the door because someone was there with food caf\u00e9 na\u00efve".split()
with open("t.jsonl", "w") as f:
    for i in range(40):
        ctx = " ".join(random.choice(w) for _ in range(random.randint(2, 14))).capitalize()
        ends = [" ".join(random.choice(w) for _ in range(random.randint(1, 5))) for _ in range(random.choice([2, 4, 4]))]
        f.write(json.dumps({"ctx": ctx, "endings": ends, "label": random.randrange(len(ends)), "split": "val", "id": i}) + "\n")
        if i == 10:
            f.write("\n")  # a blank line is skipped
# contexts longer than a 256-position model: cut from the left
with open("long.jsonl", "w") as f:
    for i in range(6):
        ctx = " ".join(random.choice(w) for _ in range(150))
        f.write(json.dumps({"ctx": ctx, "endings": [random.choice(w), random.choice(w) + " " + random.choice(w)], "label": i % 2}) + "\n")
PYEOF

# close A.json B.json TOL: the same items, choices, token counts and
# accuracies; logprobs within TOL
close() {
    python3 - "$1" "$2" "$3" <<'PYEOF'
import json, sys
a, b = (json.loads(open(p).readline()) for p in sys.argv[1:3])
d = max(abs(x - y) for p, q in zip(a["items"], b["items"]) for x, y in zip(p["logprobs"], q["logprobs"]))
same = a["n"] == b["n"] == len(a["items"]) == len(b["items"]) and a["acc"] == b["acc"] and a["acc_norm"] == b["acc_norm"]
same = same and all(p[k] == q[k] for p, q in zip(a["items"], b["items"]) for k in ("label", "pred", "pred_norm", "tokens"))
print("# %d items, acc %.4f acc_norm %.4f, max |logprob difference| %.3g" % (a["n"], a["acc"], a["acc_norm"], d))
sys.exit(0 if same and d <= float(sys.argv[3]) else 1)
PYEOF
}

group "a: shardrun eval" && {
    tiny_job job.yaml train.steps=12 checkpoint.dir=ck checkpoint.every_steps=6 log.every=6 model.seq_len=256
    "$S" train job.yaml >tr.out 2>tr.err
    check "a tiny byte-level model trains (status $?)" test -d ck/step_00000012 || diag "$(tail -3 tr.err)"
    expect_status 0 "shardrun eval CKPT_DIR --task t.jsonl" "$S" eval ck --task t.jsonl
    check "  ...one line: NAME: N items, acc A, acc_norm B" grep -Eqx 't: 40 items, acc 0\.[0-9]{4}, acc_norm 0\.[0-9]{4}' "$T/out" ||
        diag "$(cat "$T/out")"
    check "  ...the summary names the newest step, the bytes, the batch, the 128 positions its windows need, the throughput" \
        grep -q "eval of ck/step_00000012 (step 12): 1 task, 132 sequences of up to 256 tokens (UTF-8 bytes).* sequences/s; batch 64 of 128 positions" "$T/err" ||
        diag "$(cat "$T/err")"
    "$S" eval ck --task t.jsonl --json >dir.json 2>/dev/null
    "$S" eval ck/step_00000012 --task t.jsonl --json >step.json 2>/dev/null
    check "--json on the checkpoint.dir and on its newest step: the same object" cmp -s dir.json step.json
    python3 - dir.json >shape.out 2>&1 <<'PYEOF'
import json, sys
o = json.loads(open(sys.argv[1]).read())
assert list(o)[:5] == ["task", "file", "n", "acc", "acc_norm"] and o["task"] == "t" and o["n"] == 40, o.keys()
lines = [json.loads(l) for l in open("t.jsonl") if l.strip()]
right = rn = 0
for it, src in zip(o["items"], lines):
    lp, tk = it["logprobs"], it["tokens"]
    assert it["label"] == src["label"] and len(lp) == len(tk) == len(src["endings"])
    assert all(x < 0 for x in lp) and tk == [len((" " + e).encode()) for e in src["endings"]]
    best = max(range(len(lp)), key=lambda k: (lp[k], -k))
    bn = max(range(len(lp)), key=lambda k: (lp[k] / len(src["endings"][k].encode()), -k))
    assert (it["pred"], it["pred_norm"]) == (best, bn)
    right += best == src["label"]; rn += bn == src["label"]
assert abs(o["acc"] - right / 40) < 1e-12 and abs(o["acc_norm"] - rn / 40) < 1e-12
print("ok")
PYEOF
    check "  ...its items: the labels, a logprob and a byte count per ending, the choices and accuracies they imply" \
        grep -qx ok shape.out || diag "$(cat shape.out)"
    "$S" eval ck --task t.jsonl --json --batch 1 >b1.json 2>/dev/null
    "$S" eval ck --task t.jsonl --json --batch 7 --threads 1 >b7.json 2>/dev/null
    close b1.json dir.json 1e-5 >b1.cmp 2>&1 && close b7.json dir.json 1e-5 >b7.cmp 2>&1
    check "--batch 1 and --batch 7 --threads 1: the same choices, logprobs within 1e-5" test $? -eq 0 || diag "$(cat b1.cmp b7.cmp)"
    "$S" ckpt export ck -o hf/ >/dev/null 2>&1
    "$S" eval hf --task t.jsonl --json --threads 1 >hf.json 2>hf.err
    check "the Hugging Face export: the same scores as its checkpoint" close hf.json dir.json 1e-6 || diag "$(cat hf.err)"
    "$S" eval ck --task t.jsonl --task t.jsonl >two.out 2>/dev/null
    check "two --task files: a line each" test "$(grep -c '^t: 40 items' two.out)" -eq 2
    if $have_hf; then
        "$HFPY" "$REF" hf t.jsonl >ref.json 2>ref.err
        close dir.json ref.json 1e-4 >cmp.out 2>&1
        check "transformers on the same model: the same log-likelihoods (within 1e-4), choices and accuracies $(head -1 cmp.out)" \
            close dir.json ref.json 1e-4 || diag "$(cat cmp.out ref.err | tail -5)"
        "$S" eval ck --task long.jsonl --json >long.json 2>long.err
        "$HFPY" "$REF" hf long.jsonl >lref.json 2>lref.err
        close long.json lref.json 1e-4 >lcmp.out 2>&1
        lrc=$?
        check "  ...and with contexts cut from the left to the 256 positions $(head -1 lcmp.out)" \
            sh -c "[ $lrc -eq 0 ] && grep -q 'of 256 positions' long.err" || diag "$(cat lcmp.out lref.err long.err | tail -5)"
    else
        skip_or_fail transformers "shardrun eval against transformers: $HFPY cannot import transformers (tests/hf/setup-venv.sh; SHARDRUN_HF_PYTHON)"
    fi
    # on the emulated GPU (an emulator tree: the sanitizer tree of .ci/run)
    if emulator_tree; then
        head -n 10 t.jsonl >t10.jsonl # (the emulator is slow: 10 items)
        "$S" eval ck --task t10.jsonl --json --threads 1 >cpu10.json 2>/dev/null
        "$S" eval ck --task t10.jsonl --json --device cuda >gpu.json 2>gpu.err
        python3 - gpu.json cpu10.json >gpu.cmp 2>&1 <<'PYEOF'
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:])
rel = max(abs(x - y) / abs(y) for p, q in zip(a["items"], b["items"]) for x, y in zip(p["logprobs"], q["logprobs"]))
same = sum(p["pred"] == q["pred"] for p, q in zip(a["items"], b["items"]))
print("max relative logprob difference %.3g, %d of %d choices the same" % (rel, same, a["n"]))
sys.exit(0 if rel <= 0.03 and same >= 0.9 * a["n"] else 1)
PYEOF
        grc=$?
        check "--device cuda (bf16, the emulated GPU): the CPU's log-likelihoods within 3%, its choices ($(tail -n 1 gpu.cmp))" \
            sh -c "[ $grc -eq 0 ] && grep -q 'on cuda-emulated (bf16)' gpu.err" || diag "$(tail -n 3 gpu.err)"
    else
        skip_or_fail cudaemu "--device cuda: not a CUDA emulator tree (configure --with-cuda=emulator; the sanitizer tree of .ci/run)"
    fi
    # usage and model errors
    expect_status 64 "eval without --task: 64" "$S" eval ck
    expect_status 64 "eval with two models: 64" "$S" eval ck ck --task t.jsonl
    expect_status 66 "a missing task file: 66" "$S" eval ck --task nothere.jsonl
    expect_status 66 "a missing model: 66" "$S" eval nothere --task t.jsonl
    expect_status 64 "--device gpu: 64" "$S" eval ck --task t.jsonl --device gpu
}

group "b: hostile task files" && {
    python3 - <<'PYEOF'
import json
ok = {"ctx": "A cat", "endings": ["sat", "ran"], "label": 0}
cases = {
    "label": {**ok, "label": 2},
    "neglabel": {**ok, "label": -1},
    "strlabel": {**ok, "label": "0"},
    "empty_ending": {**ok, "endings": ["sat", ""]},
    "one_ending": {**ok, "endings": ["sat"]},
    "empty_ctx": {**ok, "ctx": ""},
    "no_ctx": {"endings": ["a", "b"], "label": 0},
    "nul": {**ok, "endings": ["s\u0000t", "ran"]},
}
for name, bad in cases.items():
    with open(name + ".jsonl", "w") as f:
        f.write(json.dumps(ok) + "\n" + json.dumps(ok) + "\n" + json.dumps(bad) + "\n")
with open("badjson.jsonl", "w") as f:
    f.write(json.dumps(ok) + "\n" + json.dumps(ok) + "\n" + '{"ctx": "x", "endings": ["a", "b"], "label": 0\n')
with open("array.jsonl", "w") as f:
    f.write(json.dumps(ok) + "\n" + json.dumps(ok) + "\n" + "[1, 2]\n")
with open("huge.jsonl", "w") as f:
    f.write(json.dumps(ok) + "\n" + json.dumps(ok) + "\n" + json.dumps({**ok, "ctx": "x" * (10 << 20)}) + "\n")
open("empty.jsonl", "w").write("\n\n")
PYEOF
    for f in label neglabel strlabel empty_ending one_ending empty_ctx no_ctx nul badjson array huge; do
        ls -a >before.ls
        expect_status 65 "$f.jsonl: 65" "$S" eval ck --task $f.jsonl
        check "  ...naming $f.jsonl:3, nothing on standard output or disk" \
            sh -c "grep -q '$f.jsonl:3' '$T/err' && [ ! -s '$T/out' ] && ls -a | cmp -s - before.ls" || diag "$(cat "$T/err")"
    done
    grep -q "empty" "$T/err" 2>/dev/null
    expect_status 65 "a file without an item: 65" "$S" eval ck --task empty.jsonl
    check "  ...saying so" grep -q "empty.jsonl: no item" "$T/err"
    expect_status 65 "train.eval_tasks with a hostile file: 65 from config check" "$S" config check job.yaml \
        --set 'train.eval_tasks=[label.jsonl]'
    check "  ...naming label.jsonl:3" grep -q "train.eval_tasks: label.jsonl:3: \"label\" is out of range" "$T/err" ||
        diag "$(cat "$T/err")"
    expect_status 78 "train.eval_tasks for a model of 512 tokens without data.tokenizer: 78 from config check" \
        "$S" config check job.yaml --set 'train.eval_tasks=[t.jsonl]' --set model.vocab_size=512 --set data.embedded_any_vocab=true
    check "  ...saying why" grep -q "data.tokenizer is unset, so the tasks' text cannot be encoded" "$T/err" || diag "$(cat "$T/err")"
    mkdir x && cp t.jsonl x/t.jsonl
    expect_status 0 "train.eval_tasks takes a glob" "$S" config check job.yaml --set 'train.eval_tasks=[x/*.jsonl]'
    expect_status 66 "  ...one that matches nothing: 66" "$S" config check job.yaml --set 'train.eval_tasks=[x/*.json]'
    check "  ...saying so" grep -q "x/\*.json: no task file matches" "$T/err" || diag "$(cat "$T/err")"
    expect_status 78 "two task files of one name: 78" "$S" config check job.yaml --set 'train.eval_tasks=[t.jsonl, x/t.jsonl]'
}

# sets SRC: a data prepare directory with a validation shard
awk 'BEGIN { for (i = 0; i < 400; i++) printf "line %d of the web says hello\n", i }' >web.txt
awk 'BEGIN { for (i = 0; i < 300; i++) printf "def f%d(x): return x * %d\n", i, i }' >code.txt
"$S" data prepare -o web/ --val-tokens 3000 web.txt >/dev/null 2>&1
"$S" data prepare -o code/ --val-tokens 3000 code.txt >/dev/null 2>&1

group "c: in the loop" && {
    LOOP="train.steps=8 train.eval_every=4 train.batch_size=4 data.train=web/ train.eval_tasks=[t.jsonl] log.every=4"
    LOOP="$LOOP checkpoint.dir=ck1 checkpoint.every_steps=4"
    tiny_job loop1.yaml $LOOP log.metrics=m1.jsonl 'data.val={web: web/, code: code/data_val_000000.bin}' \
        log.prometheus=p1.prom log.tensorboard=tb
    "$S" train loop1.yaml >l1.out 2>l1.err
    check "train.eval_tasks and two named data.val sets: a run (status $?)" grep -q "done: 8 steps" l1.err || diag "$(tail -3 l1.err)"
    check "  ...the banner names each set and the task" \
        sh -c "grep -q 'val  web: ' l1.err && grep -q 'val  code: ' l1.err && grep -q 'task t: t.jsonl, 40 items, 132 sequences (UTF-8 bytes)' l1.err"
    check "  ...the log line: val_loss, each set's, the task's accuracies" \
        grep -Eq 'step 8: val_loss [0-9.]+ \(web [0-9.]+, code [0-9.]+\); t acc 0\.[0-9]+ acc_norm 0\.[0-9]+' l1.err
    python3 - m1.jsonl >sinks.out 2>&1 <<'PYEOF'
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1]) if '"event":"eval"' in l]
st = {json.loads(l)["step"]: json.loads(l) for l in open(sys.argv[1]) if '"event"' not in l}
assert [e["step"] for e in ev] == [4, 8], ev
for e in ev:
    assert e["val_loss"] == e["val_loss/web"] and e["val_loss/code"] != e["val_loss/web"], e
    assert 0 <= e["acc/t"] <= 1 and 0 <= e["acc_norm/t"] <= 1
    r = st[e["step"]]
    assert all(abs(r[k] - e[k]) <= 1e-12 * abs(e[k]) + 1e-15 for k in ("val_loss", "val_loss/web", "val_loss/code", "acc/t", "acc_norm/t")), (r, e)
print(ev[-1]["acc/t"], ev[-1]["acc_norm/t"])
PYEOF
    check "metrics: each eval event and its step record carry val_loss (the first set's), val_loss/web, val_loss/code, acc/t, acc_norm/t" \
        sh -c "[ \$(wc -w <sinks.out) -eq 2 ]" || diag "$(cat sinks.out)"
    check "log.prometheus: shardrun_val_loss with set=\"web\" and set=\"code\", shardrun_eval_acc{task=\"t\"}, acc_norm" \
        sh -c "grep -q '^shardrun_val_loss{.*,set=\"web\"} ' p1.prom && grep -q '^shardrun_val_loss{.*,set=\"code\"} ' p1.prom &&
               grep -q '^shardrun_eval_acc{.*,task=\"t\"} ' p1.prom && grep -q '^shardrun_eval_acc_norm{.*,task=\"t\"} ' p1.prom &&
               grep -q '^# TYPE shardrun_eval_acc gauge' p1.prom" || diag "$(grep -v '^#' p1.prom | head -20)"
    "$S" report m1.jsonl -o r1.html >/dev/null 2>&1
    check "the report names the sets and the task" sh -c "grep -q 'val_loss/code' r1.html && grep -q 'acc_norm/t' r1.html"
    if $have_hf && "$HFPY" -c 'import tensorboard' 2>/dev/null; then
        "$HFPY" - tb m1.jsonl >tb.out 2>&1 <<'PYEOF'
import json, sys
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
acc = EventAccumulator(sys.argv[1], size_guidance={"scalars": 0})
acc.Reload()
ev = [json.loads(l) for l in open(sys.argv[2]) if '"event":"eval"' in l]
for k in ("val_loss", "val_loss/web", "val_loss/code", "acc/t", "acc_norm/t"):
    got = [(s.step, s.value) for s in acc.Scalars(k)]
    assert [g[0] for g in got] == [4, 8], (k, got)
    assert all(abs(v - e[k]) <= 1e-6 * max(1, abs(e[k])) for (_, v), e in zip(got, ev)), (k, got)
print("ok")
PYEOF
        check "TensorBoard: val_loss, val_loss/web, val_loss/code, acc/t and acc_norm/t at steps 4 and 8, as the metrics say" \
            grep -qx ok tb.out || diag "$(tail -3 tb.out)"
    else
        skip_or_fail tensorboard "TensorBoard's reader: $HFPY cannot import tensorboard (tests/hf/setup-venv.sh; SHARDRUN_HF_PYTHON)"
    fi
    "$S" eval ck1/step_00000008 --task t.jsonl --json >s8.json 2>/dev/null
    want=$(python3 -c 'import json; o = json.load(open("s8.json")); print(o["acc"], o["acc_norm"])')
    check "the loop's accuracies at step 8 are shardrun eval's on its checkpoint ($want)" test "$(cat sinks.out)" = "$want"
    if have_mpirun; then
        tiny_job loop2.yaml $LOOP log.metrics=m2.jsonl 'data.val={web: web/, code: code/data_val_000000.bin}' checkpoint.dir=ck2
        $MPI -n 2 "$S" train loop2.yaml </dev/null >l2.out 2>l2.err
        python3 - m2.jsonl >sinks2.out 2>&1 <<'PYEOF'
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1]) if '"event":"eval"' in l]
print(ev[-1]["acc/t"], ev[-1]["acc_norm/t"])
PYEOF
        check "2 ranks (each its share of the items): the same accuracies as 1 rank ($(cat sinks2.out))" \
            test "$(cat sinks2.out)" = "$(cat sinks.out)" || diag "$(tail -3 l2.err)"
        "$S" eval ck2/step_00000008 --task t.jsonl --json >s8b.json 2>/dev/null
        check "  ...and shardrun eval's on the 2-rank checkpoint" \
            test "$(python3 -c 'import json; o = json.load(open("s8b.json")); print(o["acc"], o["acc_norm"])')" = "$(cat sinks2.out)"
    else
        skip_mpirun "train.eval_tasks on 2 ranks"
    fi
    tiny_job plain.yaml train.steps=4 train.eval_every=2 log.metrics=m0.jsonl log.prometheus=p0.prom
    "$S" train plain.yaml >/dev/null 2>&1
    check "data.val as before (the embedded tail): val_loss alone, no set= label, no task key" \
        sh -c "grep -q '\"event\":\"eval\",\"step\":4,[^}]*\"val_loss\":' m0.jsonl && ! grep -q 'val_loss/\|acc/' m0.jsonl && ! grep -q 'set=' p0.prom"
}

group "d: bad data.val sets" && {
    printf 'data:\n  val: {web: web/, "bad name": code/}\n' >b1.yaml
    expect_status 78 "a set name with a space: 78" "$S" config check b1.yaml
    check "  ...at its place" grep -q "b1.yaml:2:.*data.val: set name 'bad name'" "$T/err" || diag "$(cat "$T/err")"
    printf 'data:\n  val: {web: web/, web: code/}\n' >b2.yaml
    expect_status 78 "a set given twice: 78" "$S" config check b2.yaml
    printf 'data:\n  val:\n    web: []\n' >b3.yaml
    expect_status 78 "an empty set: 78" "$S" config check b3.yaml
    check "  ...at its place" grep -q "b3.yaml:3:.*the set 'web' is empty" "$T/err" || diag "$(cat "$T/err")"
    printf 'data:\n  val: {}\n' >b6.yaml
    expect_status 78 "an empty mapping: 78 (not the default silently)" "$S" config check b6.yaml
    python3 -c 'print("data:\n  val: {" + ", ".join("s%d: web/" % i for i in range(17)) + "}")' >b4.yaml
    expect_status 78 "17 sets: 78" "$S" config check b4.yaml
    printf 'data:\n  val: {web: web/, code: nothere/*.bin}\n' >b5.yaml
    "$S" config check b5.yaml >/dev/null 2>b5.err
    check "a set whose glob matches nothing: refused, naming the set" grep -q "code" b5.err || diag "$(cat b5.err)"
    "$S" config show --set 'data.val={web: web/data_val_000000.bin, code: [code/a.bin, "code/b*.bin"]}' >show.out 2>&1
    check "config show prints the sets as a mapping" \
        grep -q 'val: {web: \["web/data_val_000000.bin"\], code: \["code/a.bin", "code/b\*.bin"\]}' show.out ||
        diag "$(grep 'val:' show.out)"
    sed -n 's/^  val: //p' show.out >shown.txt
    "$S" config show --set "data.val=$(cat shown.txt)" 2>&1 | sed -n 's/^  val: //p' >shown2.txt
    check "  ...which reads back as itself" cmp -s shown.txt shown2.txt
}

if group --long "e: a BPE tokenizer, recorded by the checkpoint"; then
    if $have_hf; then
        "$HFPY" "$SR_SRCDIR/tests/tok/ref.py" corpus c 60000 >/dev/null 2>&1 && "$HFPY" "$SR_SRCDIR/tests/tok/ref.py" train c >/dev/null 2>&1
        "$S" data prepare --tokenizer c/tokenizer.json --val-tokens 2000 -o bpe/ c/docs/*.txt >/dev/null 2>&1
        tiny_job bpe.yaml train.steps=6 data.train=bpe/ checkpoint.dir=ckb checkpoint.every_steps=6 model.seq_len=64
        "$S" train bpe.yaml >bpe.out 2>bpe.err
        "$S" eval ckb --task t.jsonl --json >bpe.json 2>bpe.eerr
        check "eval with the tokenizer the checkpoint recorded" grep -q "encoded by the tokenizer" bpe.eerr || diag "$(tail -n 3 bpe.err bpe.eerr)"
        "$S" ckpt export ckb -o hfb/ >/dev/null 2>&1
        "$S" eval hfb --task t.jsonl --json --threads 1 >bpehf.json 2>/dev/null
        check "  ...the export's tokenizer.json gives the same scores" close bpehf.json bpe.json 1e-6
        "$HFPY" "$REF" hfb t.jsonl hfb/tokenizer.json >bperef.json 2>bperef.err
        close bpe.json bperef.json 1e-4 >bcmp.out 2>&1
        check "transformers with the tokenizers package: the same log-likelihoods (within 1e-4) and choices $(head -1 bcmp.out)" \
            close bpe.json bperef.json 1e-4 || diag "$(cat bcmp.out bperef.err | tail -5)"
    else
        skip_or_fail transformers "a BPE tokenizer against transformers: $HFPY cannot import transformers and tokenizers (tests/hf/setup-venv.sh; SHARDRUN_HF_PYTHON)"
    fi
fi

done_testing
