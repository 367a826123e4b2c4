#!/bin/sh
# restarts.sh — what decides whether and when a run stops and starts again,
# without a real Slurm (tests/slurm.sh has those): the crash-loop guard (preemption.max_stalled_restarts,
# starts.h) with a fault injected at a fixed step (SHARDRUN_TEST_NAN_AT_STEP:
# the loss of step 8 is not finite, status 1, every time):
#   a. checkpoints every 5 steps: the first start commits step 5 and fails;
#      the next three resume from step 5 and fail; the fifth is refused
#      with 76, naming the step and the three starts, and changes nothing
#      on disk; `shardrun ckpt list` shows the start history
#   b. preemption.max_stalled_restarts: 0 starts it again (the documented
#      way after a fix); the fixed run completes, and the next start is
#      allowed (a completed start is not a stall)
#   c. a preemption whose checkpoint committed is not a stall: a start that
#      resumed from step 5 and ended "preempted" (SHARDRUN_TEST_PREEMPT_AT,
#      75) between failed ones does not count; and 2 ranks under mpirun
#      agree on the verdict (both exit 76, one message)
#   d. preemption.exit_status: 76 is refused (78)
#   e. preemption.before_end with stand-in squeue and scontrol on PATH
#      (SLURM_JOB_ID set): a time left below the lead stops the run after
#      its first timed step, saved, 75; squeue failing is one warning and
#      the run trains on; scontrol failing is one warning about the comment;
#      preemption.requeue: scontrol records its start as preempted (the
#      guard's rule is the same for both requeue modes)
#   f. PMI2's environment (PMI_FD) with no loadable libpmi2: 78 naming it;
#      without that environment the same program trains alone
. "${SR_SRCDIR:-.}/tests/tap.sh"
S=$SHARDRUN
cd "$T" || exit 99

tiny_job j.yaml train.steps=12 train.batch_size=4 checkpoint.dir=ck checkpoint.every_steps=5 checkpoint.async=false
fault() { SHARDRUN_TEST_NAN_AT_STEP=8 "$S" train j.yaml "$@" >>runs.out 2>&1; }
# (the lock file names its last holder, and flight dumps are the run's own)
snapshot() { (cd ck && find . -type f ! -name .lock ! -path './flight/*' | sort | xargs sha256sum) 2>/dev/null; }

group "a: refused at the fourth stalled start" && {
    codes=
    for i in 1 2 3 4; do
        fault
        codes="$codes $?"
    done
    check "a: four starts with the fault fail with 1 (codes:$codes)" test "$codes" = " 1 1 1 1"
    snapshot >before
    SHARDRUN_TEST_NAN_AT_STEP=8 "$S" train j.yaml >a5.out 2>a5.err
    rc=$?
    check "  the fifth is refused with 76 (got $rc)" test "$rc" -eq 76
    check "  one message naming step 5 and three starts, with the hint" \
        sh -c "[ \$(grep -c 'error:' a5.err) -eq 1 ] && grep -q 'the last 3 starts all began from the checkpoint of step 5 and none committed a newer checkpoint' a5.err && [ \$(grep -o 'job [^ ]* restart 0 at ' a5.err | wc -l) -eq 3 ] && grep -q 'max_stalled_restarts=0' a5.err"
    check "  no training" sh -c "! grep -Eq 'step +[0-9]+/12' a5.out"
    snapshot >after
    check "  nothing changed in the checkpoint directory (start history included)" cmp -s before after
    "$S" ckpt list ck >list.out 2>&1
    check "  ckpt list shows the four starts (resumed from 0, 5, 5, 5; each its seconds to the first step) and the guard's count" \
        sh -c "[ \$(grep -Ec '^[1-4] +[0-9T:Z-]+ +[^ ]+ +0 +1 +(0|5) +[0-9]+\.[0-9] s +- +(failed|running, or failed)$' list.out) -eq 4 ] && grep -q 'the newest 3 starts began from step 5' list.out" ||
        diag "$(cat list.out)"
    check "  ...and no goodput without a metrics file, saying so" \
        grep -q '^goodput: no start named a metrics file (log.metrics)' list.out
}

group "b: max_stalled_restarts 0, then a fix" && {
    fault --set preemption.max_stalled_restarts=0
    check "b: max_stalled_restarts=0 starts again (and the fault fails it: 1)" test $? -eq 1
    "$S" train j.yaml >b.out 2>&1
    rc=$?
    check "  with the guard back on, the history still stalls at step 5: refused ($rc)" test "$rc" -eq 76
    "$S" train j.yaml --set preemption.max_stalled_restarts=0 >b2.out 2>&1
    check "  the fixed run with max_stalled_restarts=0 completes" grep -q 'done: 7 steps' b2.out
    "$S" train j.yaml >b3.out 2>&1
    check "  the next start (default guard) is allowed: a completed start is not a stall (exit $?)" \
        grep -q 'nothing left to train' b3.out
    check "  the history records both ends as done at step 12" test "$(grep -c '"how":"done","step":12' ck/starts.jsonl)" -eq 2
}

group "c: preemptions do not count" && {
    rm -rf ck
    fault # commits 5, fails
    fault # resumes 5, fails
    SHARDRUN_TEST_PREEMPT_AT=6 "$S" train j.yaml >c.out 2>&1
    check "c: a preempted start saves step 6 and exits 75 ($?)" grep -q 'exiting with status 75' c.out
    # the history as a preemption that saved nothing newer would leave it:
    # resumed from 5, ended preempted at 5 (as when the stop step is the
    # checkpoint just committed); then the newest checkpoint is 5 again
    rm -rf ck/step_00000006
    ln -sfn step_00000005 ck/latest
    sed -i 's/"how":"preempted","step":6/"how":"preempted","step":5/' ck/starts.jsonl
    SHARDRUN_TEST_NAN_AT_STEP=8 "$S" train j.yaml >c3.out 2>&1
    check "  a third start from step 5 runs (2 failed ones stall; the preempted one does not count; exit $?)" \
        grep -q 'step 8: non-finite' c3.out
    fault # the third stalled start
    if have_mpirun; then
        $MPI -n 2 -x SHARDRUN_TEST_NAN_AT_STEP=8 "$S" train j.yaml >c2.out 2>c2.err
        rc=$?
        check "  the next start, on 2 ranks under mpirun, is refused by both with 76 (mpirun: $rc) and one message" \
            sh -c "[ $rc -eq 76 ] && [ \$(grep -c 'restarts stall' c2.err) -eq 1 ]" || diag "$(cat c2.err)"
    else
        skip_mpirun "c: 2 ranks agree on the verdict"
    fi
}

group "d: exit_status 76 refused" && {
    "$S" config check j.yaml --set preemption.exit_status=76 >d.out 2>&1
    rc=$?
    check "d: preemption.exit_status: 76 is refused with 78 ($rc)" \
        sh -c "[ $rc -eq 78 ] && grep -q 'is the crash-loop guard' d.out"
}
group "e: the end time, stand-in Slurm commands" && {
    mkdir -p fake
    cat >fake/squeue <<'SH'
#!/bin/sh
[ -n "$FAKE_LEFT" ] || { echo "squeue: error: Invalid job id specified" >&2; exit 1; }
echo "$FAKE_LEFT"
SH
    cat >fake/scontrol <<'SH'
#!/bin/sh
[ "$1" = requeue ] && exit 0 # preemption.requeue: scontrol
echo "scontrol: error: Access/permission denied" >&2
exit 1
SH
    chmod +x fake/squeue fake/scontrol
    tiny_job e.yaml train.steps=40 train.batch_size=4 checkpoint.dir=cke preemption.end_margin_s=100 \
        slurm.comment_every_minutes=0.001
    PATH="$T/fake:$PATH" SLURM_JOB_ID=4242 FAKE_LEFT=1:00 "$S" train e.yaml >e1.out 2>&1
    rc=$?
    check "e: 60 s left, lead above 100 s: the run stops after step 2, saves it and exits 75 ($rc)" \
        sh -c "[ $rc -eq 75 ] && grep -q 'agreed to stop after step 2: the job.s time limit is near (.* s left, lead 1[0-9][0-9] s' e1.out && grep -q 'step 2 saved' e1.out && [ -d cke/step_00000002 ]" ||
        diag "$(tail -5 e1.out)"
    check "  the start line names the end time and the margin; the first timed step, the lead" \
        sh -c "grep -q 'preemption.before_end: job 4242 ends at .*(in [56][0-9] s).* + 100 s (preemption.end_margin_s)' e1.out && grep -q 'preemption.before_end: lead 1[0-9][0-9] s (step .* + 100 s); [56][0-9] s left' e1.out"
    PATH="$T/fake:$PATH" SLURM_JOB_ID=4242 "$S" train e.yaml --set slurm.comment_every_minutes=0 >e2.out 2>&1
    rc=$?
    check "  squeue failing: one warning naming it, and the run trains on to the end ($rc)" \
        sh -c "[ $rc -eq 0 ] && [ \$(grep -c 'warning: preemption.before_end: squeue -h -j 4242 -o %L failed: squeue: error: Invalid job id' e2.out) -eq 1 ] && grep -q 'done: 38 steps' e2.out"
    PATH="$T/fake:$PATH" SLURM_JOB_ID=4242 FAKE_LEFT=UNLIMITED "$S" train e.yaml --set train.steps=42 \
        --set slurm.comment_every_minutes=0 >e3.out 2>&1
    check "  no time limit (UNLIMITED): one warning, trains on ($?)" \
        sh -c "grep -q 'has no time limit' e3.out && grep -q 'done: 2 steps' e3.out"
    PATH="$T/fake:$PATH" SLURM_JOB_ID=4242 FAKE_LEFT=1:00 "$S" train e.yaml --set train.steps=44 \
        --set preemption.before_end=off --set slurm.comment_every_minutes=0 >e4.out 2>&1
    check "  preemption.before_end: off asks nothing and trains on ($?)" \
        sh -c "! grep -q 'preemption.before_end: job' e4.out && grep -q 'done: 2 steps' e4.out"
    PATH="$T/fake:$PATH" SLURM_JOB_ID=4242 "$S" train e.yaml --set train.steps=60 --set preemption.before_end=off \
        --set slurm.comment_every_minutes=0.0002 >e5.out 2>&1
    check "  scontrol failing: one warning about the comment, and the run trains on ($?)" \
        sh -c "[ \$(grep -c 'warning: the job comment (slurm.comment_every_minutes): scontrol update JobId=4242 .*Access/permission denied' e5.out) -eq 1 ] && grep -q 'done: 16 steps' e5.out" ||
        diag "$(grep -i 'comment\|done' e5.out)"
    PATH="$T/fake:$PATH" SLURM_JOB_ID=4242 SHARDRUN_TEST_PREEMPT_AT=62 "$S" train e.yaml --set train.steps=70 \
        --set preemption.before_end=off --set preemption.requeue=scontrol >e6.out 2>&1
    rc=$?
    check "  preemption.requeue: scontrol: requeue requested, exit 0, and the start's end recorded as preempted ($rc)" \
        sh -c "[ $rc -eq 0 ] && grep -q 'scontrol requeue 4242: requested' e6.out && tail -1 cke/starts.jsonl | grep -q '\"how\":\"preempted\",\"step\":62'"
}
group "f: PMI2 without Slurm's library" && {
    tiny_job f.yaml train.steps=2 train.batch_size=4
    PMI_FD=9 PMI_RANK=0 PMI_SIZE=1 SHARDRUN_PMI2_LIBRARY=$T/no/libpmi2.so.0 "$S" train f.yaml >f.out 2>&1
    rc=$?
    check "f: PMI2's environment without a loadable libpmi2 is 78 ($rc), naming the library and the package" \
        sh -c "[ $rc -eq 78 ] && grep -q 'Slurm.s PMI2 library does not load: .*no/libpmi2.so.0' f.out && grep -q 'libpmi2-0' f.out && ! grep -q 'step ' f.out"
    "$S" train f.yaml >f2.out 2>&1
    check "  without PMI2's environment the same build trains alone (bootstrap none; $?)" \
        sh -c "grep -q 'bootstrap none' f2.out && grep -q 'done: 2 steps' f2.out"
}
# g. a rerun's record and the goodput: a start that fails at step 8
#    (checkpoint 5), then a rerun as the job templates run one
#    (SHARDRUN_RESTART_CAUSE, _BLAMED, _AT), then one with nothing left and
#    a cause that is not a cause; the start-up split on the start line, in
#    the metrics' start records and starts.jsonl's ready records; ckpt list's
#    goodput line and table, whose rows add up to the wall time
group "g: a rerun's cause, the start-up split and the goodput" && {
    rm -rf ck
    fault --set log.metrics=g.jsonl
    SHARDRUN_RESTART_CAUSE=exit_69 SHARDRUN_RESTART_BLAMED=node7,node8 SHARDRUN_RESTART_AT=$(($(date +%s) - 2)) \
        "$S" train j.yaml --set log.metrics=g.jsonl >g.out 2>g.err
    check "g: the rerun resumes from step 5 and completes (exit $?)" grep -q 'done: 7 steps' g.err
    check "  ...its start line: the seconds to the first step, per phase" \
        grep -Eq '^shardrun: start-up: [0-9.]+ s to the first step: bootstrap [0-9.]+ s, device [0-9.]+ s, model [0-9.]+ s, checkpoint [0-9.]+ s, other [0-9.]+ s$' g.err
    SHARDRUN_RESTART_CAUSE='exit 69; rm -rf' "$S" train j.yaml --set log.metrics=g.jsonl >g3.out 2>g3.err
    check "  a cause of other characters is one warning and not recorded; the start goes on (exit $?)" \
        sh -c "[ \$(grep -c \"warning: SHARDRUN_RESTART_CAUSE='exit 69; rm -rf' is not recorded\" g3.err) -eq 1 ] && grep -q 'nothing left to train' g3.err"
    python3 - ck/starts.jsonl g.jsonl >g.py.out 2>&1 <<'PY'
import json, os, sys
starts = [json.loads(l) for l in open(sys.argv[1])]
s = [o for o in starts if "start" in o]
ready = [o for o in starts if "ready" in o]
ends = [o for o in starts if "end" in o]
assert len(s) == 3 and len(ready) == 3, (len(s), len(ready))
assert "cause" not in s[0] and "lost_s" not in s[0], s[0]
assert s[1]["cause"] == "exit_69" and s[1]["blamed"] == "node7,node8", s[1]
assert 2 <= s[1]["lost_s"] < 60, s[1]
assert "cause" not in s[2], s[2]
m = os.path.realpath(sys.argv[2])
assert all(o["metrics"] == m for o in s), [o.get("metrics") for o in s]
phases = ["bootstrap", "device", "model", "checkpoint", "other"]
for o in ready:
    u = o["startup"]
    assert abs(sum(u[p] for p in phases) - u["total"]) < 1e-6 and u["total"] > 0, u
assert all("time" in o for o in ends), ends
recs = [json.loads(l) for l in open(sys.argv[2])]
st = [o for o in recs if o.get("event") == "start"]
assert len(st) == 3 and all(set(phases) < set(o["startup"]) for o in st), st
print("ok")
PY
    check "  starts.jsonl: the rerun's cause, blamed hosts and seconds lost, the metrics file; a ready record per start with its split; the metrics' start records with it too" \
        grep -qx ok g.py.out || diag "$(cat g.py.out)"
    "$S" ckpt list ck >g.list 2>&1
    check "  ckpt list: the rerun's cause and blamed hosts in the start history" \
        grep -Eq '^2 +[0-9T:Z-]+ +[^ ]+ +0 +1 +5 +[0-9]+\.[0-9] s exit_69 node7,node8 +done at step 12$' g.list
    check "  ...the goodput line: 12 steps kept over 3 starts, at least 2 redone (6 and 7: past checkpoint 5)" \
        grep -Eq '^goodput 0\.[0-9]+: [0-9.]+ s of [0-9.]+ s in steps kept \(12 steps; 3 starts; [2-9] steps redone\)$' g.list ||
        diag "$(sed -n '/^goodput/,$p' g.list)"
    check "  ...and its table: 11 rows (kept, redone, start-up per phase, stalls, restarts, queue wait, other), the kept share the goodput, redone and restarts not 0" \
        awk '/^goodput / { ratio = $2 + 0 } /^  [a-z]/ && / s +-?[0-9.]+%/ { n++; for (i = 1; i <= NF; i++) if ($i ~ /%$/) { p = $i + 0; break }
                 if ($2 == "kept") kept = p; if ($2 == "redone") redone = p; if ($1 == "restarts") restarts = p }
             END { d = kept - 100 * ratio; if (d < 0) d = -d; exit !(n == 11 && d <= 0.6 && redone > 0 && restarts > 0) }' g.list ||
        diag "$(sed -n '/^goodput/,$p' g.list)"
    check "  ...its queue-wait row: not asked, no start ran under Slurm" \
        grep -Eq '^  queue wait +0\.0 s +0\.0%  not asked: no start ran under Slurm$' g.list
    # the same metrics file as Slurm jobs 4242 (requeued once) and 4250, with a
    # stand-in sacct: the requeue's and the resubmission's waits (1 s and
    # 0 s) move from the restarts into the queue-wait row; the first
    # incarnation's 30 s came before the run
    awk '/"event":"start"/ { n++ } { sub(/"job_id":"-"/, n <= 2 ? "\"job_id\":\"4242\"" : "\"job_id\":\"4250\""); print }' \
        g.jsonl >g2.jsonl && mv g2.jsonl g.jsonl
    mkdir -p bin
    cat >bin/sacct <<'SACCT'
#!/bin/sh
[ "$*" = "-n -P -X --duplicates -j 4242,4250 -o JobIDRaw,Eligible,Start" ] || { echo "sacct: unexpected: $*"; exit 1; }
printf '4242|2026-12-06T10:00:00|2026-12-06T10:00:30\n4242|2026-12-06T11:00:00|2026-12-06T11:00:01\n4250|2026-12-06T11:05:00|Unknown\n4250|2026-12-06T11:06:00|2026-12-06T11:06:00\n'
SACCT
    chmod +x bin/sacct
    PATH="$PWD/bin:$PATH" "$S" ckpt list ck >g.list2 2>&1
    # (the tiny model's restarts are well under the 1 s: all of them move;
    # the arithmetic in full: tests/test_goodput)
    check "  ...with Slurm's accounting (a stand-in sacct): the incarnations read, the later ones' wait taken from the restarts" \
        awk '/^  restarts / { r[FILENAME] = $4 + 0 } /^  queue wait / { q[FILENAME] = $5 + 0 } END {
                 d = q["g.list2"] - r["g.list"]; if (d < 0) d = -d; exit !(r["g.list"] > 0 && r["g.list2"] == 0 && d <= 0.11) }' g.list g.list2 &&
        grep -q '^  queue wait .*sacct: 3 incarnations of 2 jobs; the first.s 30 s came before the run$' g.list2 ||
        diag "$(grep -E '^  (restarts|queue)' g.list g.list2)"
    printf '#!/bin/sh\necho "sacct: error: Slurm accounting storage is disabled"\nexit 1\n' >bin/sacct
    PATH="$PWD/bin:$PATH" "$S" ckpt list ck >g.list3 2>&1
    check "  ...sacct failing: the row says why, and the restarts keep the wait" \
        sh -c "grep -q '^  queue wait .*sacct failed (status 1): sacct: error: Slurm accounting storage is disabled' g.list3 &&
               [ \"\$(grep '^  restarts' g.list3)\" = \"\$(grep '^  restarts' g.list)\" ]"
    "$S" report g.jsonl -o g.html >g.rep 2>&1
    check "  shardrun report: the same goodput line in its summary, and a Goodput section (a bar per category, the table)" \
        sh -c "grep -q \"^  \$(grep '^goodput ' g.list)\$\" g.rep && grep -q '<h2>Goodput</h2>' g.html &&
               [ \$(grep -c '<rect x=.*<title>\(steps kept\|start-up: model\|restarts\):' g.html) -eq 3 ] &&
               grep -q '<tr><td>steps redone</td>' g.html" || diag "$(cat g.rep)"
}

done_testing
