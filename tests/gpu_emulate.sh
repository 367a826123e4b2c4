#!/bin/sh
# gpu_emulate.sh — tests/gpu/check.sh --emulate: the GPU check's env, build,
# ops, step, oracle, curves, nccl (2 ranks under mpirun over the emulated
# NCCL), profile (SHARDRUN_CUDA_PROFILE on three small models),
# determinism and vranks stages with device: cuda on the CUDA
# emulator (an emulator tree), against the CPU and PyTorch on the CPU, at
# the small dimensions: every stage passes, every line of check.txt says
# "emulated", within 5 minutes on two cores (the
# long tier; .ci/run runs it in its emulator tree).  The fast tier checks
# that --emulate refuses a tree that is not an emulator tree (64) and
# --rehearse with --emulate.
. "${SR_SRCDIR:-.}/tests/tap.sh"
B=${SR_BUILDDIR:-.}
C=${SR_SRCDIR:-.}/tests/gpu/check.sh
cd "$T" || exit 99
# (check.sh's OUTDIR: emu/, not tap.sh's own files out and err)
expect_status 64 "--rehearse with --emulate is refused" sh "$C" --rehearse --emulate out0
if ! emulator_tree; then
    SHARDRUN_BUILD=$B sh "$C" --emulate out1 >/dev/null 2>err1
    check "--emulate refuses a tree that is not an emulator tree (64)" sh -c "[ $? = 64 ] && grep -q 'is not a CUDA emulator tree' err1"
    if required cudaemu; then
        not_ok "SHARDRUN_TEST_REQUIRE has cudaemu, but this is not a CUDA emulator tree (configure --with-cuda=emulator)"
    fi
    done_testing
    exit 0
fi
if group --long "the GPU check on the emulated GPU"; then
    t0=$(date +%s)
    SHARDRUN_BUILD=$B sh "$C" --emulate emu >check.out 2>&1
    rc=$?
    took=$(($(date +%s) - t0))
    check "check.sh --emulate passes (status $rc, $took s; $(tail -1 emu/check.txt))" \
        sh -c "[ $rc = 0 ] && tail -1 emu/check.txt | grep -q '^[1-9][0-9]* passed, 0 failed, 0 skipped (emulated)$'" ||
        diag "$(grep '^FAIL' emu/check.txt | head -5)"
    for st in env build ops step oracle curves nccl profile determinism vranks; do
        check "  ...stage $st ran and passed" grep -q "^STAGE $st all pass .* emulated$" emu/check.txt
    done
    check "  ...every line says emulated" sh -c "[ -s emu/check.txt ] && ! grep -v 'emulated' emu/check.txt | grep -q ."
    check "  ...the oracle ran against PyTorch on the CPU" grep -q '^PASS oracle.gpt2-exact: emulated: vs PyTorch (cpu)' emu/check.txt
    check "  ...the profile stage wrote profile.md (a table per model, the five costliest named) and calibration.json" \
        sh -c "grep -q '^## gpt2 (8 x 64, bf16, emulated)' emu/profile.md && grep -q '^Five costliest launchers: ' emu/profile.md && grep -q '\"efficiency\"' emu/calibration.json"
    check "  ...the nccl stage ran 2 ranks, each on its own emulated GPU, over the emulated NCCL" \
        grep -q '^PASS nccl.ranks2: emulated: 2 ranks over NCCL, 2 emulated GPUs' emu/check.txt
    while IFS= read -r l; do diag "$l"; done <emu/check.txt
    diag "check.sh --emulate took $took s (its budget: 300 s, three times that in a sanitizer tree)"
fi
done_testing
