#!/bin/sh
# mutants.sh — the mutation suite (long tier; an emulator tree): each
# mutation plants a bug the CUDA back end could have, through a test hook
# (SHARDRUN_TEST_MUTATE, SHARDRUN_TEST_KERNEL_SKIP, SHARDRUN_TEST_SKIP_WAIT
# in shardrun; CUDAEMU_MUTATE in the emulator, tests/cudaemu/cudaemu.h),
# and the emulated run must fail with a message that names the problem:
#   - cudaErrorNotReady left uncleared after a poll (sr_cuda_query's clear
#     and the launch macro's both removed: each alone is covered by the
#     other, which the suite shows too);
#   - each forward launcher skipped: tests/test_kernels against the CPU op;
#   - every named stream wait skipped, on the emulated GPU with the
#     happens-before checker: a race naming both sides (the sites only
#     several ranks use, kept_ready and reduce_done, are not on the path of
#     one emulated GPU: tests/hb.sh covers them under mpirun); then, as a
#     second check, the same runs without the checker under seeded random
#     stream delays (CUDAEMU_DELAY_SEED 1 and 2), whose parameters are
#     compared with the run without the mutation (reported, not required:
#     a delay finds a race only when the timing exposes it);
#   - a wrong leading dimension in the GEMMs (cuBLASLt's A), a
#     __syncthreads removed from the block reduction (finish_k's second), a
#     grid one block too small (the cross-entropy forward's), a shuffle
#     mask narrowed (the reductions' partial sums), a step-path download
#     into pageable memory, a kernel writing one element past its output
#     (the bf16 cast's);
#   - flash attention's planted bugs (SR_MUTANT in kernels/flash.cu,
#     CUDAEMU_MUTATE=src:NAME): the causal mask dropped, the scale wrong,
#     the rescale on a new maximum skipped, the tail tile's bound off by
#     one, a query head reading the wrong kv head, the double buffer's wait
#     removed; each caught at head dims 64 and 128 by tests/test_kernels
#     against the CPU op (the wait by the emulator's cp.async detector);
#   - the fused classifier's planted bug (SR_MUTANT in
#     kernels/classifier.cu): the target's p written for p - 1, caught by
#     tests/test_kernels against the CPU op;
#   - (fast tier) the warp-level primitives of kernels/mma.cuh: a lane's
#     mma fragment index off by one, ldmatrix's .trans dropped, a cp.async
#     wait removed (probe.cu's kernels and the tiled GEMM's), each caught
#     by tests/test_primitives or the emulator's cp.async detector.
# Clean runs under the delay seeds are bitwise the undelayed run.  The
# suite prints a table (mutation | caught by | the message) as diagnostics
# and into mutants.txt of the test's folder.
. "${SR_SRCDIR:-.}/tests/tap.sh"
S=$SHARDRUN
B=${SR_BUILDDIR:-.}
K=$B/tests/test_kernels
# (the small shapes catch every mutant: the Llama family's real ones, an
# emulator tree's default, would only lengthen each run)
export SHARDRUN_TEST_REAL_SHAPES=0
CMP=$B/tests/cmp_params
need_cudaemu
cd "$T" || exit 99
# a planted bug's sanitizer report goes to its own output, not the suite's
# report folder (.ci/run counts the reports there)
[ -n "${ASAN_OPTIONS:-}" ] && ASAN_OPTIONS="$ASAN_OPTIONS:log_path=stderr" && export ASAN_OPTIONS
export SHARDRUN_TEST_HB=1
# (train.eval_tasks: the task forwards' per-token losses, read by the host)
printf '{"ctx": "The cat", "endings": ["sat", "ran off"], "label": 0}\n{"ctx": "A dog", "endings": ["barks", "flies"], "label": 0}\n' >task.jsonl
tiny_job job.yaml model.seq_len=32 train.steps=4 train.batch_size=4 train.eval_every=2 train.eval_batches=1 \
    "train.eval_tasks=[$T/task.jsonl]"
GPU="--set device=cuda"
cfgA="--set train.micro_batch=2 --set checkpoint.dir=$T/ck --set checkpoint.every_steps=2"
cfgB="--set train.micro_batch=1 --set sharding.grad_sync=per_micro_batch --set sharding.mixed_precision.param_dtype=bf16 --set sharding.mixed_precision.reduce_dtype=bf16 --set checkpoint.dir=$T/ckB --set checkpoint.every_steps=3"
cfgD="--set sharding.offload.optimizer=true --set train.micro_batch=2"
# (E, exact mode: one rank's units are gathered (a copy on comm) from the
# shard AdamW wrote; in bf16 they are the shard's bf16 copy, no gather)
cfgE="--set sharding.mixed_precision.param_dtype=fp32 --set train.micro_batch=2"
fresh() { rm -rf "$T/ck" "$T/ckB"; }
: >mutants.txt
row() { printf '%-44s | %-50s | %s\n' "$1" "$2" "$3" >>mutants.txt; }
row "mutation" "caught by" "the message"
# caught NAME DETECTOR PATTERN CMD...: CMD fails (a status other than 0,
# or a TAP "not ok") and its output matches PATTERN
caught() {
    name=$1 det=$2 pat=$3
    shift 3
    "$@" >m.out 2>&1
    rc=$?
    ev=$(grep -m1 -E -- "$pat" m.out | cut -c1-200)
    if { [ $rc -ne 0 ] || grep -q '^not ok' m.out; } && [ -n "$ev" ]; then
        row "$name" "$det" "$ev"
        ok "$name: caught by $det (status $rc)"
    else
        row "$name" "NOT CAUGHT (status $rc)" "$(grep -m1 -i 'error' m.out | cut -c1-160)"
        not_ok "$name: caught by $det (status $rc)"
        diag "$(tail -3 m.out)"
    fi
}

if group "the warp-level primitives' mutations"; then
    P=$B/tests/test_primitives
    caught "mma.sync: a lane's A fragment index off by one" "test_primitives (the PTX ISA's mma table)" \
        "^not ok .*mma.sync.m16n8k16" env CUDAEMU_MUTATE=frag_off_by_one:probe_mma_k "$P"
    caught "ldmatrix: .trans dropped" "test_primitives (the PTX ISA's ldmatrix table)" "^not ok .*\.trans\.shared\.b16" \
        env CUDAEMU_MUTATE=drop_trans:probe_ldmatrix_k "$P"
    caught "cp.async: the waits removed" "the emulator's cp.async detector (a read in flight)" \
        "cp.async to it is in flight" env CUDAEMU_MUTATE=skip_wait:probe_cp_async_k "$P"
    caught "the tiled GEMM: its cp.async waits removed" "the emulator's cp.async detector" "cp.async to it is in flight" \
        env CUDAEMU_MUTATE=skip_wait:tile_gemm_k "$P"
    caught "the tiled GEMM: an mma fragment index off by one" "test_primitives (against the CPU op)" "^not ok .*tile_gemm" \
        env CUDAEMU_MUTATE=frag_off_by_one:tile_gemm_k "$P"
fi

if group --long "the mutation suite on the emulated GPU"; then
    # 1. NotReady left uncleared: the two clears, each alone, then both
    fresh
    SHARDRUN_TEST_MUTATE=keep_notready "$S" train job.yaml $GPU >nr1.out 2>&1
    r1=$?
    CUDAEMU_MUTATE=launch_keeps_error "$S" train job.yaml $GPU >nr2.out 2>&1
    r2=$?
    check "sr_cuda_query's clear removed alone: covered by the launch macro's clear (status $r1)" test $r1 -eq 0
    check "the launch macro's clear removed alone: covered by sr_cuda_query's (status $r2)" test $r2 -eq 0
    caught "NotReady left uncleared after a poll" "the launch check" "error: CUDA error .*cudaErrorNotReady" \
        env SHARDRUN_TEST_MUTATE=keep_notready CUDAEMU_MUTATE=launch_keeps_error "$S" train job.yaml $GPU

    # 2. each forward launcher skipped
    for l in encoder_forward layernorm_forward gelu_forward residual_forward bias_forward softmax_causal_forward \
        crossentropy_forward rmsnorm_forward rope_forward swiglu_forward flash_forward; do
        caught "launcher $l skipped" "test_kernels (vs the CPU op)" "^not ok" env SHARDRUN_TEST_KERNEL_SKIP=$l "$K"
    done

    # 3. every stream wait skipped: the checker on the emulated GPU
    sites=$(SHARDRUN_TEST_SKIP_WAIT=list "$S" | awk '{print $1}')
    fresh
    SHARDRUN_TEST_DUMP_PARAMS="$T/clean.params" "$S" train job.yaml $GPU $cfgA >clean.out 2>&1
    check "the clean run on the emulated GPU: no race ($(grep -o 'no race found; [0-9]* steps made [0-9]* host waits' clean.out))" \
        grep -q 'happens-before checker: no race found; 4 steps made 4 host waits' clean.out
    for seed in 1 2; do
        fresh
        CUDAEMU_DELAY_SEED=$seed SHARDRUN_TEST_DUMP_PARAMS="$T/d$seed.params" "$S" train job.yaml $GPU $cfgA >d$seed.out 2>&1
        check "  ...under CUDAEMU_DELAY_SEED=$seed: bitwise the undelayed parameters" "$CMP" clean.params d$seed.params 0
    done
    for site in $sites; do
        case $site in kept_ready | reduce_done) continue ;; esac
        found=""
        for c in A B D E; do
            fresh
            eval "cfg=\$cfg$c"
            # shellcheck disable=SC2086
            SHARDRUN_TEST_SKIP_WAIT=$site SHARDRUN_TEST_DUMP_PARAMS="$T/skip.params" timeout 120 "$S" train job.yaml $GPU \
                $cfg >skip.err 2>&1
            if [ $? = 70 ] && grep -q "happens-before violation: .* with no ordering after the .* by .*; a stream wait or host wait is missing" skip.err; then
                found=$c
                break
            fi
        done
        if [ -n "$found" ]; then
            ev=$(grep -m1 -o 'happens-before violation: .*' skip.err | cut -c1-150)
            # the second check: the same run without the checker, delayed
            eval "cfg=\$cfg$found"
            moved=""
            for seed in 1 2; do
                fresh
                # shellcheck disable=SC2086
                SHARDRUN_TEST_HB= CUDAEMU_DELAY_SEED=$seed SHARDRUN_TEST_SKIP_WAIT=$site \
                    SHARDRUN_TEST_DUMP_PARAMS="$T/ds.params" timeout 120 "$S" train job.yaml $GPU $cfg >ds.err 2>&1
                rd=$?
                fresh
                [ -f "$T/ref$found.params" ] || {
                    # shellcheck disable=SC2086
                    SHARDRUN_TEST_HB= SHARDRUN_TEST_DUMP_PARAMS="$T/ref$found.params" "$S" train job.yaml $GPU $cfg \
                        >/dev/null 2>&1
                }
                if [ $rd != 0 ] || ! "$CMP" "ref$found.params" ds.params 0 >/dev/null 2>&1; then moved="$moved $seed"; fi
            done
            if [ -n "$moved" ]; then delays="seed$moved"; else delays="none"; fi
            row "stream wait '$site' skipped" "happens-before checker ($found); delays alone: $delays" "$ev"
            ok "stream wait '$site' skipped: caught by the happens-before checker on the emulated GPU (config $found; delays alone: $delays)"
        else
            row "stream wait '$site' skipped" "NOT CAUGHT" "$(grep -m1 error skip.err | cut -c1-150)"
            not_ok "stream wait '$site' skipped: caught by the happens-before checker on the emulated GPU"
        fi
    done

    # 4.-9. the kernels, the GEMMs and the step path
    caught "a wrong leading dimension (cuBLASLt's A)" "the emulated cuBLASLt / test_kernels" \
        "cublasLtMatmul: matrix A|^not ok" env CUDAEMU_MUTATE=lda "$K"
    caught "a __syncthreads removed (block reduction)" "the shared-memory race detector" \
        "shared-memory race on sh" env CUDAEMU_MUTATE=drop_sync:finish_k:2 "$K"
    caught "a grid one block too small (xent forward)" "test_kernels (vs the CPU op)" "^not ok" \
        env CUDAEMU_MUTATE=grid_minus_one:xent_fwd_k "$K"
    caught "the fused classifier: the target's p taken for p - 1" "test_kernels (vs the CPU op)" \
        "^not ok .*crossentropy_fused" env CUDAEMU_MUTATE=src:xent_fused_target "$K"
    caught "a shuffle mask narrowed (partial sums)" "the shuffle mask check" \
        "__shfl_xor_sync with mask 0x0000ffff, which omits lane" env CUDAEMU_MUTATE=narrow_mask:partial_k "$K"
    caught "a step-path download into pageable memory" "the emulated GPU's pageable check" \
        "error: step-path download at .* into pageable host memory" \
        env SHARDRUN_TEST_MUTATE=pageable_step "$S" train job.yaml $GPU
    # (the bias kernel, element by element: a packed kernel's shifted
    # 16-byte stores meet UBSan's misaligned-store check first)
    caught "a kernel writing one element past its output" "AddressSanitizer / the guard bytes" \
        "AddressSanitizer: (heap-buffer-overflow|use-after-poison)|past the end of a device allocation" \
        env CUDAEMU_MUTATE=shift_out:bias_fwd_k:0 "$K"

    # 10. flash attention's planted bugs (kernels/flash.cu's SR_MUTANT), each
    # caught at head dim 64 and at 128 (the checks' names carry it)
    for m in "flash_causal:the causal mask dropped" "flash_scale:the softmax scale wrong (doubled)" \
        "flash_rescale:the running sum and output not rescaled on a new maximum" \
        "flash_kv_head:a query head reading the wrong kv head"; do
        caught "flash attention: ${m#*:}" "test_kernels (vs the CPU op)" "^not ok .*flash attention.*hs 64" \
            env CUDAEMU_MUTATE=src:${m%%:*} "$K"
        check "  ...and at head dim 128" grep -qE "^not ok .*flash attention.*hs 128" m.out
    done
    # the stop-at-first-report detectors: once per head dim
    # (SHARDRUN_TEST_FLASH_HS); the last sequence's row T is past the
    # buffer: the sanitizer tree's AddressSanitizer stops it there,
    # another tree's comparison fails
    for hs in 64 128; do
        caught "flash attention (head dim $hs): the tail tile's row bound off by one" \
            "test_kernels (vs the CPU op) / AddressSanitizer past the buffer" \
            "^not ok .*flash attention|AddressSanitizer: [a-z-]+|past the end of a device allocation" \
            env SHARDRUN_TEST_FLASH_HS=$hs CUDAEMU_MUTATE=src:flash_tail "$K"
        caught "flash attention (head dim $hs): the double buffer's wait removed (the next tile read in flight)" \
            "the emulator's cp.async detector" "cp.async to it is in flight|^not ok .*flash attention" \
            env SHARDRUN_TEST_FLASH_HS=$hs CUDAEMU_MUTATE=src:flash_pipeline "$K"
    done
    while IFS= read -r l; do diag "$l"; done <mutants.txt
fi
done_testing
