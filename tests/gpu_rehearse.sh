#!/bin/sh
# gpu_rehearse.sh — tests/gpu/check.sh --rehearse in make check: the stages
# of the GPU check run on this machine with the fake device standing in for
# the GPU (and PyTorch on the CPU for the oracle), so the script, its
# timeouts, its resume and its OUTDIR layout are tested where there is no
# GPU.  The fast tier rehearses --quick's first stages (env, build, ops,
# step) and the oracle on one tiny step (it holds, and a planted gradient
# error fails it); the long tier the whole --quick, then a full run on the
# same OUTDIR, which must resume: run only what --quick left out (the rest
# of step, curves and nccl, the other stages) and end with every stage
# passed.  Asserts the summary line, no FAIL line, a PASS from each stage,
# the seconds on every line, and that OUTDIR holds at most 8 files.  The
# fast tier also rehearses the profile stage (the ledgers alone: the fake
# device has no per-op profile).
. "${SR_SRCDIR:-.}/tests/tap.sh"
rehearse() { # LOG ARGS...: check.sh --rehearse ARGS into $T/check
    log=$1
    shift
    SR_BUILDDIR=${SR_BUILDDIR:-.} sh "$SR_SRCDIR/tests/gpu/check.sh" --rehearse "$@" >"$T/$log" 2>&1
}
if long_tier; then
    rehearse quick.out --quick "$T/check"
else
    rehearse quick.out --quick "$T/check" env build ops step profile
fi
rc=$?
check "check.sh --rehearse --quick exits 0 (status $rc)" test $rc = 0 || diag "$(grep FAIL "$T/check/check.txt")"
check "the last line of check.txt is the summary" \
    sh -c "tail -1 '$T/check/check.txt' | grep -Eq '^[0-9]+ passed, 0 failed, [0-9]+ skipped$'"
check "no FAIL line" sh -c "! grep -q '^FAIL' '$T/check/check.txt'"
for s in env build ops step; do
    check "stage $s reported a PASS" grep -q "^PASS $s\." "$T/check/check.txt"
done
long_tier || check "the profile stage rehearsed: the ledgers in profile.md, the fake device's warning" \
    sh -c "grep -q '^PASS profile.fake' '$T/check/check.txt' && grep -q '^## tiny (8 x 64, bf16): the ledger alone' '$T/check/profile.md'"
if long_tier; then
    check "the oracle stage compared tiny and gpt2 in both modes with PyTorch" \
        test "$(grep -c '^PASS oracle\.\(tiny\|gpt2\)-\(exact\|bf16\): vs PyTorch' "$T/check/check.txt")" = 4
fi
check "every result line carries the stage's seconds" \
    sh -c "! grep -E '^(PASS|FAIL|SKIP) ' '$T/check/check.txt' | grep -qv '\[[0-9]* s\]$'"
check "the quick form of step ran tiny and llama-tiny only" sh -c "grep -q '^PASS step.tiny' '$T/check/check.txt' && grep -q '^PASS step.llama' '$T/check/check.txt' && ! grep -q '^PASS step.gpt2' '$T/check/check.txt'"
check "the logs are packed into OUTDIR/logs.tar.gz after the stages" \
    sh -c "tar -tzf '$T/check/logs.tar.gz' | grep -q 'logs/step-tiny-dev.err'"
# every train call names both dtypes (check.sh's explicit_dtypes records
# them), so no stage runs the auto default by accident
calls() {
    tar -xzOf "$T/check/logs.tar.gz" logs/train-calls.txt 2>/dev/null >"$T/calls"
    check "every train call of the check passed param_dtype and reduce_dtype ($(wc -l <"$T/calls") calls)" \
        sh -c "[ -s '$T/calls' ] && ! awk '\$2 == \"-\" || \$3 == \"-\"' '$T/calls' | grep -q ."
    diag "$(awk '$2 == "-" || $3 == "-"' "$T/calls")"
}
calls
if group --long "the full check resumes after --quick"; then
    rehearse full.out "$T/check"
    rc=$?
    check "the full run after --quick exits 0 (status $rc)" test $rc = 0 || diag "$(grep FAIL "$T/check/check.txt")"
    check "it resumed: env, build, ops and oracle were not run again" \
        sh -c "grep -q 'resuming from' '$T/full.out' && [ \$(grep -c 'passed before, not run again' '$T/full.out') = 4 ]"
    check "it ran the rest of step, curves and nccl (step.gpt2, curves.gpt2)" \
        sh -c "grep -q '^PASS step.gpt2' '$T/check/check.txt' && grep -q '^PASS curves.gpt2' '$T/check/check.txt' && grep -q '^STAGE step all pass' '$T/check/check.txt'"
    for s in curves determinism overhead memory throughput vranks gemm profile; do
        check "stage $s reported a PASS" grep -q "^PASS $s\." "$T/check/check.txt"
    done
    check "the Llama family ran in curves, throughput and memory (llama-tiny's curve, its throughput row, the Llama plans)" \
        sh -c "grep -q '^PASS curves.llama' '$T/check/check.txt' && grep -q '^PASS throughput.shardrun-llama' '$T/check/check.txt' &&
               grep -q '^PASS memory.llama-plan-run' '$T/check/check.txt' && grep -q '^PASS memory.llama-plan-8b' '$T/check/check.txt'"
    check "every stage has a passing STAGE line" \
        sh -c "[ \$(grep -c '^STAGE [a-z]* all pass' '$T/check/check.txt') -ge 14 ]"
    check "the throughput table has its header and a shardrun row for each family (tiny, llama-tiny)" \
        sh -c "grep -q '^| model | config | tok/s |' '$T/check/throughput.md' && grep -q '^| tiny | shardrun bf16 |' '$T/check/throughput.md' &&
               grep -q '^| llama-tiny | shardrun bf16 |' '$T/check/throughput.md'"
    calls
    check "the summary counts the lines of both runs, no FAIL" \
        sh -c "tail -1 '$T/check/check.txt' | grep -Eq '^[0-9]+ passed, 0 failed, [0-9]+ skipped$'"
fi
# The oracle can fail: a step whose gradient or update is off is caught.
if group "the oracle can fail"; then
    py=""
    for p in python3 /usr/bin/python3; do
        if $p -c 'import torch' 2>/dev/null; then py=$p; break; fi
    done
    if [ -z "$py" ]; then
        skip_or_fail transformers "no python3 here imports torch (the oracle's reference)"
    else
        mkdir -p "$T/or"
        env -u SHARDRUN_TEST_HB SHARDRUN_TEST_ORACLE="$T/or" SHARDRUN_TEST_DUMP_PARAMS="$T/or/after.params" \
            "$SHARDRUN" train --set model.preset=tiny --set model.n_embd=64 --set model.seq_len=32 --set train.batch_size=2 \
            --set train.steps=1 --set train.eval_every=0 --set device=cpu >"$T/or.out" 2>&1
        check "SHARDRUN_TEST_ORACLE writes the step's files" \
            sh -c "cd '$T/or' && ls init.safetensors batch.bin logits.bin grads.params step.json after.params >/dev/null"
        expect_status 0 "oracle.py: the step holds against PyTorch" $py "$SR_SRCDIR/tests/gpu/oracle.py" "$T/or"
        # one gradient value off by 1 % of its tensor's largest: the per-tensor check fails
        cp "$T/or/grads.params" "$T/or/grads.good"
        $py -c 'import sys, numpy as np
g = np.fromfile(sys.argv[1], dtype="<f4", offset=12 + 72 * int(np.fromfile(sys.argv[1], dtype="<i4", count=1, offset=8)[0]))
i = int(np.argmax(np.abs(g[:4096])))
g[i] *= 1.5
with open(sys.argv[1], "r+b") as f:
    f.seek(-4 * g.size, 2)
    f.write(g.tobytes())' "$T/or/grads.params"
        $py "$SR_SRCDIR/tests/gpu/oracle.py" "$T/or" >"$T/or.bad" 2>&1
        rc=$?
        check "a gradient off by half of one element is caught (status $rc, FAIL gradients)" \
            sh -c "[ $rc = 1 ] && grep -q '^FAIL gradients' '$T/or.bad'"
        cp "$T/or/grads.good" "$T/or/grads.params"
        expect_status 78 "SHARDRUN_TEST_ORACLE with the optimizer offloaded is refused (78)" env -u SHARDRUN_TEST_HB \
            SHARDRUN_TEST_ORACLE="$T/or2" "$SHARDRUN" train --set model.preset=tiny --set model.n_embd=64 \
            --set model.seq_len=32 --set train.batch_size=2 --set train.steps=1 --set sharding.offload.optimizer=true \
            --set device=cpu
    fi
fi
check "OUTDIR holds at most 8 files ($(ls "$T/check" | wc -l))" test "$(ls "$T/check" | wc -l)" -le 8
diag "$(cat "$T/check/check.txt")"
done_testing
