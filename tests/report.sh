#!/bin/sh
# report.sh — the metrics file's event records and `shardrun report`:
#   1. a run with evaluations and asynchronous checkpoints, preempted by the
#      test hook (status 75) and resumed into the same metrics file, writes
#      start/eval/preempt/checkpoint/resume events with their keys
#   2. the report: one path point per record that carries the series'
#      key, one event-KIND element per event with a <title> naming its
#      step, no script and no link to anything outside the page; the summary
#      (validation loss, tokens, wall time, time lost) recomputed by
#      tests/report_check.py
#   3. the page renders in a real browser engine (chromium --headless
#      --screenshot) into a non-blank image of the size asked for
#   4. bad and truncated lines are named by number and skipped; bad input
#      to the command: one message, a documented status, nothing written
#   5. every string from the file is inert: hostile strings in every field
#      that reaches the page (and in the file's name) leave Chromium's DOM
#      with only what the report writes; legends never meet their plot and
#      coincident event markers stay apart (bounding boxes in Chromium)
#   6. any finite input ends: values within an ulp, a step of 1e17; a file
#      of 30,000 records over three runs (a crash, a preemption) and 2,500
#      events, plus a 1 MB line: at most 4,096 points per series, 1,000
#      markers, no segment stepping back, a page under 4 MiB, memory within
#      64 MiB of a tiny file's; crashes and preemptions counted apart
#   7. evaluation results (eval events and step records with val_loss/NAME,
#      acc/TASK, acc_norm/TASK): one series per set and task with a point
#      per record, the summary's rows and lines (final and best loss per set,
#      final accuracies per task in percent), the eval events' titles, the
#      caps (16 sets, 32 tasks, the rest counted), hostile names escaped and
#      inert, no NaN where val_loss is missing, and a file without them gives
#      the page it gave before (no new chart, no new row)
# (The same checks run on a file made under real Slurm with a requeue: slurm.sh.)
. "${SR_SRCDIR:-.}/tests/tap.sh"
S=$SHARDRUN
CHECK="python3 $SR_SRCDIR/tests/report_check.py"
command -v python3 >/dev/null 2>&1 || require_or_skip python3 "python3 not found"
cd "$T" || exit 99

$S data prepare -o val.bin "$SR_SRCDIR/data/corpus.txt" >/dev/null 2>&1
tiny_job job.yaml train.steps=30 train.batch_size=4 train.eval_every=10 train.eval_batches=1 data.val="$T/val.bin" \
    log.metrics="$T/m.jsonl" checkpoint.dir="$T/ck" checkpoint.every_steps=8

# 1. events
SHARDRUN_TEST_PREEMPT_AT=13 $S train job.yaml >run1.out 2>&1
check "a run preempted at step 13 exits 75" test $? -eq 75
$S train job.yaml >run2.out 2>&1
check "the rerun resumes and finishes" test $? -eq 0
cat >events.py <<'EOF'
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
ev = [r for r in recs if "event" in r]
steps = [r for r in recs if "event" not in r]
want = {"start": ["restart", "resume_step", "world_size", "job_id", "preset", "n_layer", "n_head", "n_embd", "seq_len",
                  "vocab_size", "device", "param_dtype", "reduce_dtype", "mesh_shard", "mesh_replicate",
                  "reshard_blocks", "reshard_root", "offload_optimizer", "recompute"],
        "checkpoint": ["started_step", "committed_step", "duration_s", "bytes", "async"],
        "preempt": ["signal"], "resume": ["from"], "eval": ["val_loss"]}
bad = []
for r in ev:
    keys = list(r)
    if keys[:3] != ["event", "step", "time"]:
        bad.append("event keys start %s" % keys[:3])
    for k in want.get(r["event"], ["?"]):
        if k not in r:
            bad.append("%s lacks %s" % (r["event"], k))
kinds = [r["event"] for r in ev]
starts = [r for r in ev if r["event"] == "start"]
if [s["resume_step"] for s in starts] != [0, 13]:
    bad.append("start events' resume_step %s" % [s["resume_step"] for s in starts])
pre = [r for r in ev if r["event"] == "preempt"]
if len(pre) != 1 or pre[0]["step"] != 13 or pre[0]["signal"] != "SIGUSR1":
    bad.append("preempt events %s" % pre)
res = [r for r in ev if r["event"] == "resume"]
if len(res) != 1 or not res[0]["from"].endswith("/ck/step_00000013"):
    bad.append("resume events %s" % res)
ck = [r for r in ev if r["event"] == "checkpoint"]
if not any(c["committed_step"] == 13 and not c["async"] for c in ck):
    bad.append("no synchronous checkpoint of step 13 (the preemption's)")
if not any(c["async"] and c["committed_step"] >= c["started_step"] for c in ck):
    bad.append("no asynchronous checkpoint")
if not all(c["bytes"] > 0 and c["duration_s"] > 0 for c in ck):
    bad.append("checkpoint bytes/duration")
if [r["step"] for r in ev if r["event"] == "eval"] != [10, 20, 30]:
    bad.append("eval steps %s" % [r["step"] for r in ev if r["event"] == "eval"])
if [r["step"] for r in steps] != list(range(1, 14)) + list(range(14, 31)):
    bad.append("step records %s" % [r["step"] for r in steps])
if not all("loss" in r and "mem_total_peak" in r for r in steps):
    bad.append("step records lost keys")
if bad:
    print("\n".join(bad))
sys.exit(1 if bad else 0)
EOF
check "start (with the run's configuration), eval, preempt, checkpoint and resume events with event/step/time first and their keys; step records unchanged; the rerun appends" \
    python3 events.py m.jsonl
check "the preemption's event precedes its checkpoint's" \
    sh -c "grep -n '\"event\"' m.jsonl | grep -A1 '\"preempt\"' | tail -1 | grep -q '\"checkpoint\"'"

# 2. the report
$S report m.jsonl >sum.out 2>sum.err
check "report exits 0" test $? -eq 0
check "  default output <metrics>.html" test -s m.jsonl.html
check "  every series: one path point per record carrying its key, no segment stepping back" $CHECK points m.jsonl m.jsonl.html
check "  one event-KIND element per event, titles name step and detail" $CHECK events m.jsonl m.jsonl.html
check "  summary: validation loss, tokens, wall time, time lost to preemption" $CHECK summary m.jsonl sum.out
check "  summary counts the records and events" \
    grep -q "report: m.jsonl: 30 step records, 12 events (2 starts, 1 resume, 1 preemption, 5 checkpoints, 3 evaluations), 0 lines skipped" sum.out
check "  self-contained: no script, no external link or source, no URL at all" \
    sh -c "! grep -Eiq '<script|<link|<iframe|<img|src=|href=|@import|url\(|https?:|ftp:' m.jsonl.html"
check "  charts for loss, lr, gradient norm, tokens/s, MFU, exposed communication, memory" \
    sh -c "for c in loss lr grad-norm tokens-per-s mfu comm memory; do grep -q \"id=\\\"chart-\$c\\\"\" m.jsonl.html || exit 1; done"
check "  memory stacked and filled: each category's line is at or above the one before, one filled band each" \
    python3 -c "
import re,sys
h=open('m.jsonl.html').read()
sec=h[h.index('id=\"chart-memory\"'):]
ys=[[float(p.split(',')[1]) for p in m.replace('M','').replace('L','').split()] for m in re.findall(r'class=\"series series-mem_[a-z_]*_peak\" data-series=\"[^\"]*\" stroke=\"[^\"]*\" d=\"([^\"]*)\"', sec)]
fills=re.findall(r'class=\"fill fill-mem_', sec)
sys.exit(0 if len(ys)>=4 and len(fills)==len(ys) and all(a>=b-1e-9 for u,v in zip(ys,ys[1:]) for a,b in zip(u,v)) else 1)"
check "  the newest start's configuration in a table" \
    sh -c "grep -q '<th>preset</th><td>tiny</td>' m.jsonl.html && grep -q '<th>param_dtype</th><td>fp32</td>' m.jsonl.html && grep -q '<th>mesh_shard</th>' m.jsonl.html"
$S report m.jsonl -o "$T/sub.html" >/dev/null 2>&1
check "  -o writes where asked" test -s sub.html

# 3. a real browser engine
if command -v chromium >/dev/null 2>&1; then
    HOME=$T timeout 120 chromium --headless --no-sandbox --disable-gpu --hide-scrollbars --window-size=1200,1500 \
        --screenshot="$T/shot.png" "file://$T/m.jsonl.html" >chromium.out 2>&1
    check "chromium --headless renders the page" test -s shot.png
    check "  into a non-blank 1200x1500 image" $CHECK png shot.png 1200 1500
else
    case ",${SHARDRUN_TEST_REQUIRE:-}," in
    *,chromium,*) not_ok "chromium not found (apt-get install chromium) and SHARDRUN_TEST_REQUIRE requires it" ;;
    *) skip "chromium not found (apt-get install chromium): the page is not rendered" ;;
    esac
fi

# 5. strings from the file are inert; the layout in a real browser engine
cat >hostile.py <<'EOF'
import json, sys
bad = ['<script>document.body.setAttribute("data-pwned", "1")</script>', '"><img src=x onerror=alert(1)>',
       "'><svg onload=alert(1)>", '</title><script>document.title="x"</script>', '<iframe src="javascript:1">',
       '&lt;b&gt;&#x3c;b&#62;', 'bell\u0007escape\u001b[31mred', '<style>body{display:none}</style>']
out = open(sys.argv[1], "w")
t = 1000.0
for i, b in enumerate(bad):
    cfg = {k: b for k in ("job_id", "preset", "device", "param_dtype", "reduce_dtype", "recompute")}
    cfg.update(restart=i, resume_step=3 * i, world_size=b, reshard_blocks=b, mesh_shard=b)
    out.write(json.dumps(dict({"event": "start", "step": 3 * i, "time": t}, **cfg)) + "\n")
    out.write(json.dumps({"event": "resume", "step": 3 * i, "time": t, "from": b}) + "\n")
    for s in range(3 * i + 1, 3 * i + 4):
        t += 1
        out.write(json.dumps({"step": s, "loss": 5.0 - s / 10, "lr": 1e-3, "time": t, "step_ms": 10, "nccl": b}) + "\n")
    out.write(json.dumps({"event": "preempt", "step": 3 * i + 3, "time": t, "signal": b}) + "\n")
    out.write(json.dumps({"event": b, "step": 3 * i + 3, "time": t}) + "\n")
    out.write(json.dumps({"event": "eval", "step": 3 * i + 3, "time": t, "val_loss": b}) + "\n")
EOF
hostile='x"<b>&y.jsonl'
python3 hostile.py "$hostile"
$S report "$hostile" -o hostile.html >hostile.out 2>hostile.err
check "hostile strings in every field and in the file's name: the report is written" test $? -eq 0
esc=$(printf '\033')
check "  each appears as text, escaped; no control character reaches the page" \
    sh -c "grep -q '&lt;script&gt;document.body.setAttribute(&quot;data-pwned&quot;' hostile.html && grep -q 'x&quot;&lt;b&gt;&amp;y.jsonl' hostile.html && ! grep -q '$esc' hostile.html"
if command -v chromium >/dev/null 2>&1; then
    HOME=$T timeout 120 chromium --headless --no-sandbox --disable-gpu --virtual-time-budget=3000 --dump-dom \
        "file://$T/hostile.html" >hostile.dom 2>chromium.err
    check "  Chromium's DOM of that page: only the elements and attributes the report writes" $CHECK dom hostile.html hostile.dom
    $CHECK probe m.jsonl.html probe.html
    HOME=$T timeout 120 chromium --headless --no-sandbox --disable-gpu --window-size=1400,2400 --virtual-time-budget=3000 \
        --dump-dom "file://$T/probe.html" >probe.dom 2>chromium.err
    check "  in Chromium: no legend meets its plot; coincident events (start, resume, preemption, checkpoint at step 13) in boxes of their own" \
        $CHECK layout probe.dom
else
    skip_or_fail chromium "chromium not found (apt-get install chromium): the DOM and layout checks"
fi

# 6. any finite input ends; the file's size does not matter
printf '%s\n' '{"step": 1, "loss": 4.0, "lr": 4.0, "time": 1}' \
    '{"step": 2, "loss": 4.000000000000001, "lr": 4.000000000000001, "time": 2}' \
    '{"step": 1e17, "loss": 4.0, "time": 3}' '{"event": "eval", "step": 1e17, "val_loss": 1e308, "time": 4}' >ulp.jsonl
timeout 30 $S report ulp.jsonl -o ulp.html >ulp.out 2>ulp.err
rc=$?
check "values within an ulp and a step of 1e17: the report ends (status $rc)" test "$rc" -eq 0
check "  with a small page" sh -c "[ \$(wc -c <ulp.html) -lt 200000 ]"
cat >big.py <<'EOF'
import json, sys
out = open(sys.argv[1], "w")
t = 0.0
def rec(o):
    out.write(json.dumps(o) + "\n")
mem = {"mem_%s_peak" % c: 1000 * (k + 1) for k, c in enumerate(("param_shard", "optim_shard", "activations"))}
# run 1: steps 1..12000, then a crash; run 2 resumes at 10000 (2000 redone), preempted at 20000; run 3 resumes there
for run, (first, last, resume) in enumerate(((1, 12000, 0), (10001, 20000, 10000), (20001, 30000, 20000))):
    rec({"event": "start", "step": resume, "time": t, "resume_step": resume, "restart": run, "world_size": 1})
    for s in range(first, last + 1):
        t += 0.1
        rec(dict({"step": s, "loss": 5 + ((s * 7919) % 1000) / 1000, "lr": 1e-3, "grad_norm": 1, "tokens_per_s": 1e4,
                  "mfu": 0.3, "step_ms": 100 + s % 7, "comm_exposed_ms": 1, "time": t, "tokens": s * 1024}, **mem))
        if s % 12 == 0:
            rec({"event": "checkpoint", "step": s, "time": t, "started_step": s, "committed_step": s,
                 "duration_s": 0.5, "bytes": 1e6, "async": True})
    if run == 1:
        rec({"event": "preempt", "step": last, "time": t, "signal": "SIGUSR1"})
    t += 30
out.write('{"step": 1, "loss": 1, "pad": "' + "x" * 1000000 + '"}\n')
EOF
python3 big.py big.jsonl
printf '%s\n' '{"step": 1, "loss": 4.0, "time": 1}' >tiny.jsonl
/usr/bin/time -f '%M' -o tiny.rss $S report tiny.jsonl -o tiny.html >/dev/null 2>&1
/usr/bin/time -f '%M' -o big.rss timeout 120 $S report big.jsonl -o big.html >big.out 2>big.err
rc=$?
check "30,000 records over three runs, 2,500 events and a 1 MB line: the report ends well (status $rc)" test "$rc" -eq 0
check "  the 1 MB line is named and skipped" grep -q "big.jsonl:$(wc -l <big.jsonl): longer than 65536 bytes; line skipped" big.err
check "  at most 4,096 points per series, at most 1,000 markers, no segment stepping back" $CHECK bounded big.html 4096
check "  the events beyond 1,000 counted" sh -c "grep -q 'more events, counted per step range' big.html && grep -q 'class=\"event-count' big.html"
check "  the redone steps drawn as their own (dashed) segment" grep -q 'class="series series-loss redone"' big.html
check "  a page under 4 MiB ($(wc -c <big.html) bytes)" sh -c "[ \$(wc -c <big.html) -lt 4194304 ]"
if [ -z "${ASAN_OPTIONS:-}" ]; then
    check "  memory within 64 MiB of a tiny file's ($(cat big.rss) KiB, tiny $(cat tiny.rss) KiB)" \
        sh -c "[ \$(cat big.rss) -le \$((\$(cat tiny.rss) + 65536)) ]"
else
    skip "the memory bound under the sanitizers (ASan's quarantine keeps freed memory): the plain build checks it"
fi
check "  a crash and a preemption counted apart" \
    sh -c "grep -q 'time lost to preemption: .* (1 resume after a preemption)' big.out && grep -q 'time lost to crashes: .* 2000 steps redone .* (1 restart without a preemption)' big.out"
check "  the summary's figures recomputed" $CHECK summary big.jsonl big.out

# 4. bad lines, bad input
cp m.jsonl bad.jsonl
echo '{"step": 31, "loss": ' >>bad.jsonl
echo 'not json at all' >>bad.jsonl
echo '[1, 2]' >>bad.jsonl
echo '{"event": "eval", "val_loss": 1.0}' >>bad.jsonl
printf '{"step": 32, "loss": 1.5' >>bad.jsonl
n=$(wc -l <m.jsonl)
$S report bad.jsonl -o bad.html >bad.out 2>bad.err
check "bad lines: report still exits 0" test $? -eq 0
check "  each bad line named with its number and skipped" sh -c "
    grep -q 'bad.jsonl:$((n + 1)): not JSON' bad.err && grep -q 'bad.jsonl:$((n + 2)): not JSON' bad.err &&
    grep -q 'bad.jsonl:$((n + 3)): not a JSON object' bad.err && grep -q 'bad.jsonl:$((n + 4)): no numeric \"step\"' bad.err &&
    grep -q 'bad.jsonl:$((n + 5)): truncated' bad.err && [ \$(wc -l <bad.err) -eq 5 ]"
check "  the summary counts 5 lines skipped" grep -q "5 lines skipped" bad.out
check "  the page is the good records' page" $CHECK points m.jsonl bad.html

$S report missing.jsonl >miss.out 2>miss.err
check "a missing metrics file: 66, one message" sh -c "[ $? = 66 ] && grep -q 'missing.jsonl: cannot open the metrics file' miss.err"
check "  nothing written" test ! -e missing.jsonl.html
printf 'garbage\n' >junk.jsonl
$S report junk.jsonl >junk.out 2>junk.err
check "no record at all: 65 with a hint" sh -c "[ $? = 65 ] && grep -q 'junk.jsonl: no records (1 line skipped)' junk.err"
check "  nothing written" test ! -e junk.jsonl.html
$S report m.jsonl -o "$T/no/such/dir/r.html" >dir.out 2>dir.err
rc=$?
check "an output in a missing directory: 73 naming it" sh -c "[ $rc = 73 ] && grep -q 'no/such/dir' dir.err"
mkdir adir
$S report adir >d.out 2>d.err
check "a directory: 66 naming its kind" sh -c "[ $? = 66 ] && grep -q 'adir: the metrics file is a directory' d.err && [ ! -e adir.html ]"
$S report m.jsonl -o m.jsonl >same.out 2>same.err
check "an output that is the input: 73, the metrics file untouched" \
    sh -c "[ $? = 73 ] && grep -q 'this output is the input m.jsonl' same.err && head -1 m.jsonl | grep -q '\"event\":\"start\"'"
ln -s m.jsonl mlink
$S report m.jsonl -o mlink >same.out 2>same.err
check "  ...also through a symbolic link to it" sh -c "[ $? = 73 ] && head -1 m.jsonl | grep -q '\"event\":\"start\"'"
mkfifo fifo.html
timeout 20 $S report m.jsonl -o fifo.html >fifo.out 2>fifo.err
check "an output that is a FIFO: 73 naming its kind, at once" sh -c "[ $? = 73 ] && grep -q 'fifo.html: a FIFO is there' fifo.err"
timeout 20 $S report /dev/stdin -o piped.html <m.jsonl >piped.out 2>piped.err
check "a pipe as the input works (a streamed input)" sh -c "[ $? = 0 ] && grep -q '30 step records' piped.out"
$S report >u.out 2>u.err
check "no argument: usage error 64" test $? -eq 64
$S report m.jsonl --ranks 2 >u.out 2>u.err
check "  an option of another command: 64" sh -c "[ $? = 64 ] && grep -q 'report: takes -o only' u.err"

# 7. evaluation results: named validation sets and tasks
cat >evalcheck.py <<'EOF'
import html, json, re, sys
NAMED = re.compile(r"(val_loss|acc|acc_norm)/.")
CAPS = {"val_loss": 16, "acc": 32, "acc_norm": 32}


def gen(path, kind):
    out = open(path, "w")
    sets, tasks = ["readme", "other"], ["hellaswag", "piqa"]
    if kind == "hostile":
        sets = ["<script>alert(1)</script>", '"><img src=x onerror=alert(1)>', "a&amp;b" + "\u00e9" * 100]
        tasks = ["t'<b>\"&", "bell\u0007esc\u001b[31m", "<style>body{display:none}</style>"]
    if kind == "caps":
        sets, tasks = ["s%02d" % i for i in range(20)], ["t%02d" % i for i in range(40)]
    t = 100.0
    out.write(json.dumps({"event": "start", "step": 0, "time": t, "resume_step": 0, "restart": 0, "world_size": 1}) + "\n")
    for s in range(1, 31):
        t += 1
        r = {"step": s, "loss": 5 - s / 10, "lr": 1e-3, "grad_norm": 1, "tokens_per_s": 1e4, "step_ms": 10,
             "comm_exposed_ms": 1, "time": t, "tokens": 1024 * s}
        r.update({"mem_%s_peak" % c: 1000 for c in ("param_shard", "grad_shard", "optim_shard", "grad_accum",
                                                    "full_units", "activations", "comm", "ckpt_staging", "other")})
        ev = None
        if s % 10 == 0:
            ev = {} if kind == "tasks" else {"val_loss": 4 - s / 100}
            for i, n in enumerate(sets if kind != "tasks" else []):
                ev["val_loss/" + n] = 4 + i / 10 - s / 100 + (0.15 if s == 30 else 0)  # the best at step 20
            for i, n in enumerate(tasks):
                ev["acc/" + n] = 0.25 + i / 100 + s / 1000
                ev["acc_norm/" + n] = 0.3 + i / 100 + s / 1000
            if kind == "plain":
                ev = {k: v for k, v in ev.items() if not NAMED.match(k)}
            r.update(ev)
        event = ev is not None and kind != "steps" and json.dumps(dict({"event": "eval", "step": s, "time": t}, **ev))
        if event and s != 10:  # at step 10 the step record's copies come first
            out.write(event + "\n")
        out.write(json.dumps(r) + "\n")
        if event and s == 10:
            out.write(event + "\n")


def ctl(s):
    return "".join("\ufffd" if ord(c) < 0x20 or ord(c) == 0x7F else c for c in s)


def esc_cut(s, n=64):  # rep_esc_n: the characters that begin before byte n, then an ellipsis
    out, at = "", 0
    for c in s:
        if at >= n:
            return out + "\u2026"
        out, at = out + c, at + len(c.encode())
    return out


def cut(s, n=64):  # cut_text: at most n bytes at a character boundary, then "..."
    b = s.encode()
    if len(b) <= n:
        return s
    while n > 0 and (b[n] & 0xC0) == 0x80:
        n -= 1
    return b[:n].decode() + "..."


def check(metrics, page, summary):
    recs = [json.loads(line) for line in open(metrics)]
    raw = open(page, encoding="utf-8").read()
    text = html.unescape(raw)
    summ = open(summary, encoding="utf-8").read()
    evals = [r for r in recs if r.get("event") == "eval"]
    src = evals or [r for r in recs if "event" not in r]
    keys, seen, dropped = [], {k: 0 for k in CAPS}, 0
    for r in src:
        for k in r:
            if NAMED.match(k) and k not in keys:
                kind = k.split("/")[0]
                seen[kind] += 1
                if seen[kind] <= CAPS[kind]:
                    keys.append(k)
        dropped += sum(1 for k in r if NAMED.match(k) and k not in keys)
    bad = []
    paths = {}
    for m in re.finditer(r'<path class="series [^"]*" data-series="([^"]*)" stroke="[^"]*" d="([^"]*)"', raw):
        paths.setdefault(html.unescape(m.group(1)), []).append(m.group(2))
    charted = {k for k in paths if NAMED.match(k)}
    if charted != {ctl(esc_cut(k)) for k in keys}:
        bad.append("charted %s, want %s" % (sorted(charted), sorted(ctl(esc_cut(k)) for k in keys)))
    for k in keys:
        vals = [(r["step"], r[k]) for r in src if k in r]
        n = sum(len(re.findall(r"[ML]", d)) for d in paths.get(ctl(esc_cut(k)), []))
        if n != len(vals):
            bad.append("%r: %d points, %d records" % (k, n, len(vals)))
        kind, name = k.split("/", 1)
        if kind == "val_loss":
            best = min(vals, key=lambda v: v[1])
            want = "<tr><th>validation loss (%s)</th><td>final %.4f (step %d), best %.4f (step %d)</td></tr>" % (
                ctl(esc_cut(name)), vals[-1][1], vals[-1][0], best[1], best[0])
            line = "  validation loss (%s): final %.4f (step %d), best %.4f (step %d)\n" % (
                name, vals[-1][1], vals[-1][0], best[1], best[0])
        else:
            acc = [(r["step"], r["acc/" + name]) for r in src if "acc/" + name in r]
            norm = [(r["step"], r["acc_norm/" + name]) for r in src if "acc_norm/" + name in r]
            row = "acc final %.2f%% (step %d), acc_norm final %.2f%% (step %d)" % (
                100 * acc[-1][1], acc[-1][0], 100 * norm[-1][1], norm[-1][0])
            want = "<tr><th>accuracy (%s)</th><td>%s</td></tr>" % (ctl(esc_cut(name)), row)
            line = "  accuracy (%s): %s\n" % (name, row)
        if want not in text:
            bad.append("no summary row %r" % want)
        if re.fullmatch(r"[ -~]*", name) and line not in summ:
            bad.append("no summary line %r" % line)
        label = ("" if kind == "val_loss" else kind + " ") + name
        if re.fullmatch(r"[a-z0-9 _]*", label) and ('class="legend">%s</text>' % label) not in raw:
            bad.append("no legend %r" % label)
    for r in evals:
        parts = ["val_loss %.4f" % r["val_loss"]] if "val_loss" in r else []
        shown, more = {k: 0 for k in CAPS}, 0
        for k, v in r.items():
            if not NAMED.match(k):
                continue
            kind = k.split("/")[0]
            shown[kind] += 1
            if shown[kind] > CAPS[kind]:
                more += 1
            else:
                parts.append("%s %.4f" % (cut(k), v) if kind == "val_loss" else "%s %.2f%%" % (cut(k), 100 * v))
        if more:
            parts.append("%d more" % more)
        want = ctl("eval at step %d" % r["step"] + (": " + ", ".join(parts) if parts else ""))
        if "<title>%s</title>" % want not in text or "<td>%s</td>" % want not in text:
            bad.append("no event title %r" % want)
    if dropped and ("<tr><th>not charted</th><td>%d values of more validation sets or tasks" % dropped) not in text:
        bad.append("dropped: want %d values" % dropped)
    if not dropped and "not charted" in text:
        bad.append("a 'not charted' row, nothing was dropped")
    for chart, kinds in (("val-sets", ("val_loss",)), ("accuracy", ("acc", "acc_norm"))):
        has = any(k.split("/")[0] in kinds for k in keys)
        if has != ('id="chart-%s"' % chart in raw):
            bad.append("chart-%s %s" % (chart, "missing" if has else "drawn without a series"))
    if re.search(r"\bnan\b", raw + summ, re.I):
        bad.append("NaN in the page or the summary")
    return bad


def strip_named(page):
    """The page without what the named series add: their rows, charts and
    title parts (names of letters only)."""
    t = open(page, encoding="utf-8").read()
    t = re.sub(r"<tr><th>(validation loss|accuracy) \([^)]*\)</th>.*\n", "", t)
    t = re.sub(r'<section class="chart" id="chart-(val-sets|accuracy)">.*?</section>\n', "", t, flags=re.S)
    return re.sub(r", (val_loss|acc|acc_norm)/[a-z]+ [0-9.]+%?", "", t)


if sys.argv[1] == "gen":
    gen(sys.argv[2], sys.argv[3])
elif sys.argv[1] == "same":
    sys.exit(0 if strip_named(sys.argv[2]) == open(sys.argv[3], encoding="utf-8").read() else 1)
else:
    bad = check(sys.argv[2], sys.argv[3], sys.argv[4])
    print("\n".join(bad)) if bad else None
    sys.exit(1 if bad else 0)
EOF
EV="python3 $T/evalcheck.py"
for k in named tasks steps hostile caps plain; do
    mkdir ev_$k && $EV gen ev_$k/m.jsonl $k && (cd ev_$k && $S report m.jsonl -o m.html >sum.out 2>err.out) || echo "$k: status $?" >>ev.err
done
check "evaluation results: every report ends well" test ! -s ev.err
check "  named sets and tasks: a series each (one point per eval event), the summary's rows and lines, the events' titles" \
    $EV check ev_named/m.jsonl ev_named/m.html ev_named/sum.out
check "  ...the charts 'validation loss by set' and 'downstream accuracy' with their legends" \
    sh -c "grep -q 'id=\"chart-val-sets\"' ev_named/m.html && grep -q 'id=\"chart-accuracy\"' ev_named/m.html &&
    grep -q 'class=\"legend\">readme</text>' ev_named/m.html && grep -q 'class=\"legend\">acc_norm hellaswag</text>' ev_named/m.html"
check "  ...the other series and events as before" sh -c "$CHECK points ev_named/m.jsonl ev_named/m.html && $CHECK events ev_named/m.jsonl ev_named/m.html"
check "  tasks only (no val_loss): no NaN, no set chart, the accuracy chart" $EV check ev_tasks/m.jsonl ev_tasks/m.html ev_tasks/sum.out
check "  ...the summary says no validation loss" grep -q 'validation loss: none recorded' ev_tasks/sum.out
check "  from step records alone (no eval event)" $EV check ev_steps/m.jsonl ev_steps/m.html ev_steps/sum.out
check "  20 sets and 40 tasks: 16 sets and 32 tasks charted, the other values counted" \
    $EV check ev_caps/m.jsonl ev_caps/m.html ev_caps/sum.out
check "  ...and the summary says so" grep -q '\.\.\.and 60 values of more validation sets or tasks, not charted' ev_caps/sum.out
check "  hostile names (<, \", ', &, control characters, 200 bytes): escaped, cut, in the page" \
    $EV check ev_hostile/m.jsonl ev_hostile/m.html ev_hostile/sum.out
check "  ...none becomes markup; class names only letters, digits, - and _; no control character" \
    sh -c "! grep -Eq '<script|<img|<style>body|$esc|$(printf '\007')' ev_hostile/m.html &&
    ! grep -o 'class=\"[^\"]*\"' ev_hostile/m.html | grep -vq '^class=\"[A-Za-z0-9_ -]*\"\$' &&
    grep -q 'validation loss (&lt;script&gt;alert(1)&lt;/script&gt;)' ev_hostile/m.html"
check "  ...and the terminal's summary shows control characters escaped" grep -q 'accuracy (bell\\x07esc\\x1b\[31m)' ev_hostile/sum.out
if command -v chromium >/dev/null 2>&1; then
    HOME=$T timeout 120 chromium --headless --no-sandbox --disable-gpu --virtual-time-budget=3000 --dump-dom \
        "file://$T/ev_hostile/m.html" >ev_hostile.dom 2>chromium.err
    check "  ...Chromium's DOM of that page: only the elements and attributes the report writes" \
        $CHECK dom ev_hostile/m.html ev_hostile.dom
else
    skip_or_fail chromium "chromium not found (apt-get install chromium): the DOM check of hostile names"
fi
check "  a file without them: no new chart and no new row" \
    sh -c "! grep -Eq 'chart-val-sets|chart-accuracy|<th>(validation loss|accuracy) \(|not charted' ev_plain/m.html"
check "  ...the page the same file with them gives, less their rows, charts and title parts" \
    $EV same ev_named/m.html ev_plain/m.html
done_testing
