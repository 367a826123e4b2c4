#!/bin/sh
# observe.sh — where people watch a run: the timeline trace
# (log.trace_steps, trace.h) and `shardrun debug trace` (tracecheck.h),
# TensorBoard event files (log.tensorboard, tboard.h) and the Prometheus
# textfile (log.prometheus, promfile.h):
#   a. trace: 2 ranks under mpirun trace steps 3-4 with a checkpoint in the
#      window; debug trace merges them; tests/observe/check_trace.py checks
#      the structure and that every collective appears on every rank; bad
#      log.trace_steps (78) and bad input to debug trace (64, 65, 66)
#   b. TensorBoard: a preempted run and its resume, a run killed during a
#      save and its resume: tensorboard's EventAccumulator (the test
#      virtual environment, tests/hf/setup-venv.sh) reads one curve, every
#      scalar at every logged step once, as the metrics file says
#      (tests/observe/check_tb.py)
#   c. Prometheus: 2 ranks under mpirun write one node's file (%h, %j
#      expanded) that `promtool check metrics` accepts, with both ranks'
#      samples and labels; a bad template is 78
. "${SR_SRCDIR:-.}/tests/tap.sh"
S=$SHARDRUN
OBS=$SR_SRCDIR/tests/observe
cd "$T" || exit 99

# --- a. trace ---------------------------------------------------------------
group "a: trace" && {
    tiny_job tr.yaml train.steps=6 train.batch_size=4 log.trace_steps='"3-4"' checkpoint.dir=ck \
        checkpoint.every_steps=4 checkpoint.keep=1
    if have_mpirun -x SHARDRUN_TEST_POISON; then
        $MPI -n 2 "$S" train tr.yaml >tr.out 2>tr.err
        rc=$?
        d=$(ls -d ck/trace/*.0 2>/dev/null | head -1)
        check "2 ranks trace steps 3-4 into <checkpoint.dir>/trace/<job id>.<restart>/ (status $rc)" \
            sh -c "[ $rc -eq 0 ] && [ -s '$d/rank0.json' ] && [ -s '$d/rank1.json' ] && grep -q 'trace: wrote steps 3-4' tr.err" ||
            diag "$(tail -3 tr.err)"
        expect_status 0 "debug trace merges them into one file" "$S" debug trace "$d" -o merged.json
        check "  ...saying so" grep -q "^merged 2 ranks of job .*, steps 3-4: [0-9]* events ([1-9][0-9]* collectives) into merged.json" "$T/out"
        check "  ...a process per rank; phases, layers, waits, checkpoint; every collective on every rank" \
            sh -c "python3 '$OBS/check_trace.py' merged.json 2 >ct.out 2>&1" || diag "$(cat ct.out)"
        diag "$(cat ct.out)"
        # bad input
        expect_status 64 "debug trace without -o: 64" "$S" debug trace "$d"
        expect_status 66 "debug trace of a missing directory: 66" "$S" debug trace nowhere -o x.json
        check "  ...naming it, writing nothing" sh -c "grep -q 'nowhere: No such file or directory' '$T/err' && [ ! -e x.json ]"
        mkdir junk && echo hello >junk/notes.txt
        expect_status 66 "debug trace of a directory of unrelated files: 66" "$S" debug trace junk -o x.json
        check "  ...saying it holds no trace files" grep -q "junk holds no trace files (rank<N>.json), only other files" "$T/err"
        mkdir trunc && cp "$d/rank0.json" trunc/ && head -c 900 "$d/rank1.json" >trunc/rank1.json
        expect_status 65 "a truncated trace file: 65" "$S" debug trace trunc -o x.json
        check "  ...with file:line:col, writing nothing" sh -c "grep -q 'trunc/rank1.json:[0-9]*:[0-9]*: not a shardrun trace file' '$T/err' && [ ! -e x.json ]"
        mkdir flightlike && echo '{"format": "shardrun-flight 1", "entries": []}' >flightlike/rank0.json
        expect_status 65 "a flight dump is not a trace: 65" "$S" debug trace flightlike -o x.json
        mkdir one && cp "$d/rank0.json" one/
        expect_status 66 "a rank's file missing: 66 naming it" "$S" debug trace one -o x.json
        check "  ...rank 1" grep -q "no trace of rank 1 (of 2)" "$T/err"
        mkdir two && cp "$d/rank0.json" two/ && sed 's/"first":3/"first":2/' "$d/rank1.json" >two/rank1.json
        expect_status 65 "files of two runs (another window): 65" "$S" debug trace two -o x.json
        check "  ...naming both" grep -q "traces of two different runs" "$T/err"
    else
        skip_mpirun "the 2-rank trace"
    fi
    expect_status 78 "log.trace_steps: 5-3 is refused (78)" "$S" config check tr.yaml --set log.trace_steps=5-3
    check "  ...with the key's place and the form" grep -q "log.trace_steps '5-3' is not a range of steps A-B" "$T/err"
    expect_status 78 "log.trace_steps with log.flight_recorder: 0 is refused (78)" "$S" config check tr.yaml \
        --set log.flight_recorder=0
    check "  ...naming both keys" grep -q "log.trace_steps needs the flight recorder.*log.flight_recorder is 0" "$T/err"
}

# --- b. TensorBoard ---------------------------------------------------------
group "b: tensorboard" && {
    HFPY=${SHARDRUN_HF_PYTHON:-$SR_SRCDIR/.venv-hf/bin/python}
    tiny_job tb.yaml train.steps=12 train.batch_size=4 checkpoint.every_steps=4 checkpoint.async=false \
        train.eval_every=6 log.metrics=m.jsonl log.tensorboard=tb
    # a preemption after step 6, then the resume
    SHARDRUN_TEST_PREEMPT_AT=6 "$S" train tb.yaml --set checkpoint.dir=pck >p1.out 2>p1.err
    rc1=$?
    "$S" train tb.yaml --set checkpoint.dir=pck >p2.out 2>p2.err
    rc2=$?
    check "a preempted run (75) and its resume (0) write two event files into log.tensorboard" \
        sh -c "[ $rc1 -eq 75 ] && [ $rc2 -eq 0 ] && [ \$(ls tb/events.out.tfevents.* | wc -l) -eq 2 ]" ||
        diag "$(tail -n 2 p1.err p2.err)"
    mv tb tb_preempt && mv m.jsonl m_preempt.jsonl
    # killed inside the save of step 8 (steps 5-8 are redone from step 4)
    SHARDRUN_TEST_CRASH_AT=after_shard_write:8 "$S" train tb.yaml --set checkpoint.dir=cck >c1.out 2>c1.err
    rc1=$?
    "$S" train tb.yaml --set checkpoint.dir=cck >c2.out 2>c2.err
    rc2=$?
    check "a run killed in the save of step 8 ($rc1) resumes from step 4 ($rc2), redoing steps 5-8" \
        sh -c "[ $rc1 -eq 137 ] && [ $rc2 -eq 0 ] && grep -q 'resumed at 4' c2.err && [ \$(grep -c '^{\"step\":6,' m.jsonl) -eq 2 ]" ||
        diag "$(tail -n 3 c1.err c2.err; grep -c "" m.jsonl)"
    if [ -x "$HFPY" ] && "$HFPY" -c 'import tensorboard' 2>/dev/null; then
        check "TensorBoard reads the preempted run as one curve: every scalar at every step once, as written" \
            sh -c "'$HFPY' '$OBS/check_tb.py' tb_preempt m_preempt.jsonl --events preempt resume checkpoint >tb1.out 2>&1" ||
            diag "$(cat tb1.out)"
        diag "$(cat tb1.out)"
        check "  ...and the crashed and resumed run, the redone steps once" \
            sh -c "'$HFPY' '$OBS/check_tb.py' tb m.jsonl --events resume checkpoint >tb2.out 2>&1" || diag "$(cat tb2.out)"
        diag "$(cat tb2.out)"
    else
        skip_or_fail tensorboard "TensorBoard's reader: $HFPY cannot import tensorboard (tests/hf/setup-venv.sh; SHARDRUN_HF_PYTHON)"
    fi
    mkdir ro && chmod 555 ro
    if [ "$(id -u)" -ne 0 ]; then
        expect_status 73 "log.tensorboard in a directory it cannot write: 73" "$S" train tb.yaml --set log.tensorboard=ro/tb
    fi
    echo x >notadir
    expect_status 73 "log.tensorboard naming a file: 73, before anything is written" "$S" train tb.yaml \
        --set log.tensorboard=notadir/tb --set log.metrics=m2.jsonl
    check "  ...naming it, and no metrics file" sh -c "grep -q 'notadir/tb' '$T/err' && [ ! -e m2.jsonl ]" ||
        diag "$(cat "$T/err")"
}

# --- c. Prometheus ----------------------------------------------------------
group "c: prometheus" && {
    tiny_job pr.yaml train.steps=5 train.batch_size=4 checkpoint.dir=prck checkpoint.every_steps=2 checkpoint.async=false \
        log.prometheus='"prom/%h-%j.prom"'
    mkdir prom
    if have_mpirun; then
        $MPI -n 2 "$S" train pr.yaml >pr.out 2>pr.err
        rc=$?
        f=$(ls prom/*.prom 2>/dev/null)
        check "2 ranks on one node: local rank 0 writes one file, %h and %j expanded (status $rc, $f)" \
            sh -c "[ $rc -eq 0 ] && [ \$(ls prom | wc -l) -eq 1 ] && case '$f' in prom/$(hostname)-*.prom) true ;; *) false ;; esac" ||
            diag "$(tail -3 pr.err)"
        check "  ...with both ranks' samples: step 5, memory by space, the checkpoint of step 4" \
            sh -c "grep -q '^shardrun_step{slurm_job=\"[^\"]*\",rank=\"0\",host=\"$(hostname)\"} 5\$' '$f' &&
                   grep -q '^shardrun_step{.*rank=\"1\".*} 5\$' '$f' &&
                   [ \$(grep -c '^shardrun_memory_bytes{' '$f') -eq 6 ] && grep -q '^shardrun_checkpoint_step{.*rank=\"1\".*} 4\$' '$f' &&
                   grep -q '^shardrun_checkpoint_age_seconds{' '$f' && grep -q '^shardrun_comm_exposed_seconds{' '$f'" ||
            diag "$(cat "$f")"
        if command -v promtool >/dev/null 2>&1; then
            check "  ...which promtool check metrics accepts" sh -c "promtool check metrics <'$f' >pt.out 2>&1" ||
                diag "$(cat pt.out)"
        else
            skip_or_fail prometheus "promtool not installed (apt-get install prometheus)"
        fi
    else
        skip_mpirun "the 2-rank Prometheus file"
    fi
    expect_status 78 "log.prometheus with %x is refused (78)" "$S" train pr.yaml --set log.prometheus=p/%x.prom \
        --set checkpoint.dir=prck2
    check "  ...naming the key and the substitutions, writing nothing" \
        sh -c "grep -q \"log.prometheus 'p/%x.prom': %x is not a substitution\" '$T/err' && [ ! -e prck2 ] && [ ! -e p ]" ||
        diag "$(cat "$T/err")" "$(ls)"
}
done_testing
