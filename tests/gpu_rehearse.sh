#!/bin/sh
# gpu_rehearse.sh — tests/gpu/check.sh --rehearse in make check: the stages
# of the GPU check run on this machine with the fake device standing in for
# the GPU, so the script, its timeouts and its OUTDIR layout are tested
# where there is no GPU.  The fast tier rehearses the short stages (env,
# build, gemm, ops, step, vranks); the long tier every stage (also
# sanitize, curves, determinism, nccl, overhead, memory, throughput).  Asserts
# the summary line, no FAIL line, a PASS from each stage, and that OUTDIR
# holds at most 8 files.
. "${SR_SRCDIR:-.}/tests/tap.sh"
fast="env build gemm ops step vranks"
long="sanitize curves determinism nccl overhead memory throughput"
stages=$fast
long_tier && stages="$fast $long"
SR_BUILDDIR=${SR_BUILDDIR:-.} sh "$SR_SRCDIR/tests/gpu/check.sh" --rehearse "$T/out" $stages >"$T/stdout" 2>&1
rc=$?
check "check.sh --rehearse exits 0 (status $rc)" test $rc = 0 || diag "$(grep FAIL "$T/out/check.txt")"
check "the last line of check.txt is the summary" \
    sh -c "tail -1 '$T/out/check.txt' | grep -Eq '^[0-9]+ passed, 0 failed, [0-9]+ skipped$'"
check "no FAIL line" sh -c "! grep -q '^FAIL' '$T/out/check.txt'"
for s in env build gemm ops step vranks; do
    check "stage $s reported a PASS" grep -q "^PASS $s\." "$T/out/check.txt"
done
if group --long "the long stages"; then
    for s in curves determinism overhead memory throughput; do
        check "stage $s reported a PASS" grep -q "^PASS $s\." "$T/out/check.txt"
    done
    check "the throughput table has its header and a shardrun row" grep -q '^| shardrun bf16 |' "$T/out/throughput.md"
fi
check "OUTDIR holds at most 8 files ($(ls "$T/out" | wc -l))" test "$(ls "$T/out" | wc -l)" -le 8
diag "$(cat "$T/out/check.txt")"
done_testing
