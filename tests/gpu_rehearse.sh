#!/bin/sh
# gpu_rehearse.sh — tests/gpu/check.sh --rehearse in make check: the stages
# of the GPU check run on this machine with the fake device standing in for
# the GPU (and PyTorch on the CPU for the oracle), so the script, its
# timeouts, its resume and its OUTDIR layout are tested where there is no
# GPU.  The fast tier rehearses --quick's first stages (env, build, ops,
# step, oracle); the long tier the whole --quick, then a full run on the
# same OUTDIR, which must resume: run only what --quick left out (the rest
# of step, curves and nccl, the other stages) and end with every stage
# passed.  Asserts the summary line, no FAIL line, a PASS from each stage,
# the seconds on every line, and that OUTDIR holds at most 8 files.
. "${SR_SRCDIR:-.}/tests/tap.sh"
rehearse() { # LOG ARGS...: check.sh --rehearse ARGS into $T/out
    log=$1
    shift
    SR_BUILDDIR=${SR_BUILDDIR:-.} sh "$SR_SRCDIR/tests/gpu/check.sh" --rehearse "$@" >"$T/$log" 2>&1
}
if long_tier; then
    rehearse quick.out --quick "$T/out"
else
    rehearse quick.out --quick "$T/out" env build ops step oracle
fi
rc=$?
check "check.sh --rehearse --quick exits 0 (status $rc)" test $rc = 0 || diag "$(grep FAIL "$T/out/check.txt")"
check "the last line of check.txt is the summary" \
    sh -c "tail -1 '$T/out/check.txt' | grep -Eq '^[0-9]+ passed, 0 failed, [0-9]+ skipped$'"
check "no FAIL line" sh -c "! grep -q '^FAIL' '$T/out/check.txt'"
for s in env build ops step oracle; do
    check "stage $s reported a PASS" grep -q "^PASS $s\." "$T/out/check.txt"
done
check "the oracle compared tiny and gpt2 in both modes with PyTorch" \
    test "$(grep -c '^PASS oracle\.\(tiny\|gpt2\)-\(exact\|bf16\): vs PyTorch' "$T/out/check.txt")" = 4
check "every result line carries the stage's seconds" \
    sh -c "! grep -E '^(PASS|FAIL|SKIP) ' '$T/out/check.txt' | grep -qv '\[[0-9]* s\]$'"
check "the quick form of step ran tiny only" sh -c "grep -q '^PASS step.tiny' '$T/out/check.txt' && ! grep -q '^PASS step.gpt2' '$T/out/check.txt'"
check "the logs are packed into OUTDIR/logs.tar.gz after the stages" \
    sh -c "tar -tzf '$T/out/logs.tar.gz' | grep -q 'logs/step-tiny-dev.err'"
if group --long "the full check resumes after --quick"; then
    rehearse full.out "$T/out"
    rc=$?
    check "the full run after --quick exits 0 (status $rc)" test $rc = 0 || diag "$(grep FAIL "$T/out/check.txt")"
    check "it resumed: env, build, ops and oracle were not run again" \
        sh -c "grep -q 'resuming from' '$T/full.out' && [ \$(grep -c 'passed before, not run again' '$T/full.out') = 4 ]"
    check "it ran the rest of step, curves and nccl (step.gpt2, curves.gpt2)" \
        sh -c "grep -q '^PASS step.gpt2' '$T/out/check.txt' && grep -q '^PASS curves.gpt2' '$T/out/check.txt' && grep -q '^STAGE step all pass' '$T/out/check.txt'"
    for s in curves determinism overhead memory throughput vranks gemm; do
        check "stage $s reported a PASS" grep -q "^PASS $s\." "$T/out/check.txt"
    done
    check "every stage has a passing STAGE line" \
        sh -c "[ \$(grep -c '^STAGE [a-z]* all pass' '$T/out/check.txt') -ge 13 ]"
    check "the throughput table has its header and a shardrun row" grep -q '^| shardrun bf16 |' "$T/out/throughput.md"
    check "the summary counts the lines of both runs, no FAIL" \
        sh -c "tail -1 '$T/out/check.txt' | grep -Eq '^[0-9]+ passed, 0 failed, [0-9]+ skipped$'"
fi
check "OUTDIR holds at most 8 files ($(ls "$T/out" | wc -l))" test "$(ls "$T/out" | wc -l)" -le 8
diag "$(cat "$T/out/check.txt")"
done_testing
