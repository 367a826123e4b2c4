#!/bin/sh
# report.sh — the metrics file's event records and `shardrun report`:
#   1. a run with evaluations and asynchronous checkpoints, preempted by the
#      test hook (status 75) and resumed into the same metrics file, writes
#      start/eval/preempt/checkpoint/resume events with their keys
#   2. the report: one polyline point per record that carries the series'
#      key, one event-KIND element per event with a <title> naming its
#      step, no script and no link to anything outside the page; the summary
#      (validation loss, tokens, wall time, time lost) recomputed by
#      tests/report_check.py
#   3. the page renders in a real browser engine (chromium --headless
#      --screenshot) into a non-blank image of the size asked for
#   4. bad and truncated lines are named by number and skipped; bad input
#      to the command: one message, a documented status, nothing written
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
want = {"start": ["restart", "resume_step", "world_size", "job_id"],
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
check "start, eval, preempt, checkpoint and resume events with event/step/time first and their keys; step records unchanged; the rerun appends" \
    python3 events.py m.jsonl
check "the preemption's event precedes its checkpoint's" \
    sh -c "grep -n '\"event\"' m.jsonl | grep -A1 '\"preempt\"' | tail -1 | grep -q '\"checkpoint\"'"

# 2. the report
$S report m.jsonl >sum.out 2>sum.err
check "report exits 0" test $? -eq 0
check "  default output <metrics>.html" test -s m.jsonl.html
check "  every series: one polyline point per record carrying its key" $CHECK points m.jsonl m.jsonl.html
check "  one event-KIND element per event, titles name step and detail" $CHECK events m.jsonl m.jsonl.html
check "  summary: validation loss, tokens, wall time, time lost to preemption" $CHECK summary m.jsonl sum.out
check "  summary counts the records and events" \
    grep -q "report: m.jsonl: 30 step records, 12 events (2 starts, 1 resume, 1 preemption, 5 checkpoints, 3 evaluations), 0 lines skipped" sum.out
check "  self-contained: no script, no external link or source, no URL at all" \
    sh -c "! grep -Eiq '<script|<link|<iframe|<img|src=|href=|@import|url\(|https?:|ftp:' m.jsonl.html"
check "  charts for loss, lr, gradient norm, tokens/s, MFU, exposed communication, memory" \
    sh -c "for c in loss lr grad-norm tokens-per-s mfu comm memory; do grep -q \"id=\\\"chart-\$c\\\"\" m.jsonl.html || exit 1; done"
check "  memory stacked: each category's line is at or above the one before" \
    python3 -c "
import re,sys
h=open('m.jsonl.html').read()
sec=h[h.index('id=\"chart-memory\"'):]
ys=[[float(p.split(',')[1]) for p in m.split()] for m in re.findall(r'data-series=\"mem_[a-z_]*_peak\"[^>]*points=\"([^\"]*)\"', sec)]
sys.exit(0 if len(ys)>=4 and all(a>=b-1e-9 for u,v in zip(ys,ys[1:]) for a,b in zip(u,v)) else 1)"
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
$S report >u.out 2>u.err
check "no argument: usage error 64" test $? -eq 64
$S report m.jsonl --ranks 2 >u.out 2>u.err
check "  an option of another command: 64" sh -c "[ $? = 64 ] && grep -q 'report: takes -o only' u.err"
done_testing
