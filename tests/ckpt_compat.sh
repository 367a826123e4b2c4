#!/bin/sh
# ckpt_compat.sh — checkpoints written by earlier versions: the version-1
# checkpoint in tests/data/ckpt-v1 (written by the release before manifest
# version 2) verifies, inspects as version 1, and resumes to final
# parameters equal to the reference that release produced: bitwise until the
# classifier's contract changed (the device-table release: a per-row
# log-sum-exp instead of probabilities in place, which rounds differently),
# since then within 1e-6 of each tensor's largest value (measured 2.1e-7).
. "${SR_SRCDIR:-.}/tests/tap.sh"
S=$SHARDRUN
FIX=$SR_SRCDIR/tests/data/ckpt-v1
# The reference fixes OpenBLAS's kernels to Haswell's (AVX2), so the GEMMs
# round the same way on every machine that can run them.
grep -qw avx2 /proc/cpuinfo || {
    echo "1..0 # SKIP this CPU has no AVX2: the v1 reference was made with OpenBLAS's Haswell kernels"
    exit 0
}
export OPENBLAS_CORETYPE=Haswell
cp -r "$FIX" "$T/w" && mkdir "$T/w/ck" && mv "$T/w/step_00000003" "$T/w/ck/" && cd "$T/w" || exit 99

expect_status 0 "ckpt verify accepts the version-1 checkpoint" "$S" ckpt verify ck/step_00000003
expect_status 0 "ckpt inspect reads it" "$S" ckpt inspect ck/step_00000003
check "  ...as manifest version 1, states f32" sh -c "grep -q 'version 1,' '$T/out' && grep -q 'master parameters (f32), Adam m (f32), Adam v (f32)' '$T/out'"
SHARDRUN_TEST_DUMP_PARAMS="$T/new6.bin" "$S" train job.yaml --set checkpoint.dir=ck >out.txt 2>err.txt
rc=$?
check "training resumes from the version-1 checkpoint (status $rc)" sh -c "[ $rc -eq 0 ] && grep -q 'resume=3' err.txt"
"${SR_BUILDDIR:-.}/tests/cmp_params" ref6.bin "$T/new6.bin" 1e-6 >cmp.txt 2>&1
check "final parameters equal the reference of the release that wrote it (per tensor within 1e-6 x max)" \
    test $? -eq 0 || diag "$(tail -3 cmp.txt)"
diag "$(tail -1 cmp.txt)"
"$S" ckpt inspect ck/step_00000006 >new.txt 2>&1
check "the checkpoint it writes next is version 4" grep -q "version 4," new.txt
done_testing
