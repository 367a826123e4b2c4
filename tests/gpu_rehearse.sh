#!/bin/sh
# gpu_rehearse.sh — tests/gpu/check.sh --rehearse in make check: every stage
# of the GPU check runs on this machine with the fake device standing in
# for the GPU, so the script, its timeouts and its OUTDIR layout are tested
# where there is no GPU.  Asserts the summary line, no FAIL line, and that
# OUTDIR holds at most 8 files.
. "${SR_SRCDIR:-.}/tests/tap.sh"
SR_BUILDDIR=${SR_BUILDDIR:-.} sh "$SR_SRCDIR/tests/gpu/check.sh" --rehearse "$T/out" >"$T/stdout" 2>&1
rc=$?
check "check.sh --rehearse exits 0 (status $rc)" test $rc = 0 || diag "$(grep FAIL "$T/out/check.txt")"
check "the last line of check.txt is the summary" \
    sh -c "tail -1 '$T/out/check.txt' | grep -Eq '^[0-9]+ passed, 0 failed, [0-9]+ skipped$'"
check "no FAIL line" sh -c "! grep -q '^FAIL' '$T/out/check.txt'"
for s in env build gemm ops step curves determinism vranks overhead memory throughput; do
    check "stage $s reported a PASS" grep -q "^PASS $s\." "$T/out/check.txt"
done
check "OUTDIR holds at most 8 files ($(ls "$T/out" | wc -l))" test "$(ls "$T/out" | wc -l)" -le 8
check "the throughput table has its header and a shardrun row" grep -q '^| shardrun bf16 |' "$T/out/throughput.md"
diag "$(cat "$T/out/check.txt")"
done_testing
