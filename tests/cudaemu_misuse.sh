#!/bin/sh
# cudaemu_misuse.sh — the CUDA emulator's detectors (tests/cudaemu/README),
# each against one planted mistake of tests/cudaemu/misuse: a __syncthreads
# a thread exits before, two different __syncthreads waited at, a race on
# shared memory, shuffle masks that omit the calling lane or read outside
# the mask or an inactive lane, a kernel writing one element past its
# allocation, host code reading device memory, a kernel given pageable host
# memory, a use after cudaFree, a double cudaFree, a copy past an
# allocation's end: each reported ("cudaemu: error:"), naming the kernel,
# block and thread or the call and its site, and the process ends there.
# An event waited before it was ever recorded is a warning (CUDA makes the
# wait a no-op) and the run goes on; the correct forms of every case run
# silently.  With the emulated NCCL: an all-gather whose buffers overlap
# off NCCL's in-place offset, a collective given host memory, ranks
# disagreeing on a collective's count.  Elsewhere than an emulator tree the test skips (a failure when
# SHARDRUN_TEST_REQUIRE has cudaemu).
. "${SR_SRCDIR:-.}/tests/tap.sh"
M=${SR_BUILDDIR:-.}/tests/cudaemu/misuse
need_cudaemu
cd "$T" || exit 99
# a planted mistake's sanitizer report goes to its own stderr, not the
# suite's report folder (.ci/run counts the reports there)
[ -n "${ASAN_OPTIONS:-}" ] && ASAN_OPTIONS="$ASAN_OPTIONS:log_path=stderr" && export ASAN_OPTIONS
# planted CASE PATTERN WHAT: the case ends abnormally with a report matching PATTERN
planted() {
    "$M" "$1" >"$1.out" 2>"$1.err"
    rc=$?
    check "$3 (status $rc)" sh -c "[ $rc -ne 0 ] && [ $rc -ne 1 ] && grep -Eq -- \"$2\" $1.err" ||
        diag "$(grep -m2 'cudaemu\|misuse' "$1.err")"
}
"$M" clean >clean.out 2>clean.err
check "the correct forms run silently (status $?)" sh -c "grep -q 'clean: every correct form ran' clean.out && ! grep -q cudaemu clean.err" ||
    diag "$(head -3 clean.err)"
planted barrier_exit "error: kernel barrier_exit_k, block \(0,0,0\), thread \(0,0,0\): __syncthreads at .*misuse.cu:[0-9]+ not reached by every thread of the block: 31 of 32 wait there, thread \(5,0,0\) exited" \
    "a __syncthreads one thread exits before: reported with the kernel, block, thread and site"
planted barrier_divergent "error: kernel barrier_divergent_k, block \(0,0,0\), thread \(16,0,0\): divergent __syncthreads: this thread waits at .*misuse.cu:[0-9]+, thread \(0,0,0\) at .*misuse.cu:[0-9]+" \
    "threads waiting at two different __syncthreads: reported with both sites"
planted shared_race "error: kernel shared_k, block \(0,0,0\), thread \(1,0,0\): shared-memory race on sh .*reads it after thread \(0,0,0\) wrote it, with no __syncthreads between" \
    "a shared-memory race (a barrier missing between a write and the reads): both threads named"
planted shfl_mask_omits "error: kernel shfl_k, block \(0,0,0\), thread \(16,0,0\): __shfl_xor_sync with mask 0x0000ffff, which omits lane 16" \
    "a shuffle whose mask omits a lane that executes it"
planted shfl_outside "thread \(0,0,0\): __shfl_xor_sync \(mask 0x0000ffff, lane mask 16\): lane 0 reads lane 16, outside the mask" \
    "a shuffle reading a lane outside its mask"
planted shfl_inactive "thread \(0,0,0\): __shfl_xor_sync \(mask 0xffffffff, lane mask 16\): lane 0 reads lane 16, which is inactive" \
    "a shuffle reading an inactive lane"
planted past_end "AddressSanitizer: (heap-buffer-overflow|use-after-poison)|error: kernel past_end_k, argument 0: byte 0 past the end of a device allocation of 128 bytes was written" \
    "a kernel writing one element past its allocation (AddressSanitizer, or the guard bytes)"
planted host_reads_device "error: host code touched device memory at .*: the faulting access used device address 0x[0-9a-f]+ \([0-9]+ bytes into a device allocation of 128 bytes\)" \
    "host code reading device memory: the allocation and offset named"
planted kernel_pageable "error: kernel shared_k, argument 0: 0x[0-9a-f]+ is pageable host memory" \
    "a kernel given pageable host memory: the kernel and argument named"
planted use_after_free "error: cudaMemcpy \(source\): 0x[0-9a-f]+ is 0 bytes into a device allocation of 128 bytes that was freed \(use after cudaFree\) \(called from " \
    "a freed pointer used: the call and its site named"
planted double_free "error: cudaFree\(0x[0-9a-f]+\): a device allocation of 128 bytes freed twice \(called from " \
    "a double cudaFree"
planted copy_past_end "error: cudaMemcpy \(destination\): 128 bytes at offset 32 of a device allocation of 128 bytes run 32 bytes past its end" \
    "a copy past an allocation's end"
planted mma_lane_exit "error: kernel mma_k, block \(0,0,0\), thread \([0-9]+,0,0\): mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 of warp 0: lane 5 is not at it \(it exited" \
    "an mma.sync one lane of the warp exits before: the warp and the lane named"
planted mma_partial_warp "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 of warp 0: lane 16 does not exist \(the block has 16 threads\)" \
    "an mma.sync in a block of 16 threads (a partial warp)"
planted mma_divergent "of warp 0: lane (16|0) executes (ldmatrix.sync.aligned.m8n8.x1.shared.b16|mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32) there, this lane" \
    "half a warp at mma.sync, half at ldmatrix: the two operations named"
planted ldmatrix_misaligned "ldmatrix.sync.aligned.m8n8.x1.shared.b16 of warp 0: lane 3 gives row address 0x[0-9a-f]+, not 16-byte aligned" \
    "an ldmatrix row address that is not 16-byte aligned: the lane named"
planted ldmatrix_outside "ldmatrix.sync.aligned.m8n8.x1.shared.b16 of warp 0: lane 0 gives row address 0x[0-9a-f]+, outside the block's shared memory" \
    "an ldmatrix row address outside shared memory"
planted cp_async_early_read "error: kernel cp_async_k, block \(0,0,0\), thread \(0,0,0\): reads sh \(byte [0-9]+ of the block's shared memory\) while thread \(0,0,0\)'s cp.async to it is in flight: no cp.async.wait_group" \
    "a cp.async destination read before the wait that lands it"
planted cp_async_no_wait "thread \(0,0,0\): the thread ends with 1 cp.async copy never waited for \(1 committed group, 0 uncommitted copies\)" \
    "a cp.async committed and never waited for at the kernel's end"
planted cp_async_misaligned "cp.async.ca.shared.global of 16 bytes from 0x[0-9a-f]+ to 0x[0-9a-f]+: both addresses must be aligned to 16 bytes" \
    "a cp.async from a misaligned source"
planted dynamic_past_end "thread \(31,0,0\): shared array sh\[128\] indexed at 128, out of bounds" \
    "dynamic shared memory indexed one past the launch's bytes"
planted ballot_lane_exit "__ballot_sync \(mask 0xffffffff\) of warp 0: lane 7 of the mask is not at it" \
    "a __ballot_sync one lane of its mask never executes"
"$M" dynamic_shared_limits >dl.out 2>dl.err
check "dynamic shared memory: 64 KiB launches only after cudaFuncAttributeMaxDynamicSharedMemorySize, 228 KiB never (the runtime's cudaErrorInvalidValue, as on hardware; status $?)" \
    grep -q 'dynamic_shared_limits: 64 KiB without the attribute: cudaErrorInvalidValue; the attribute set: cudaSuccess; then: cudaSuccess; an attribute of 228 KiB: cudaErrorInvalidValue; a launch of 228 KiB: cudaErrorInvalidValue' dl.out ||
    diag "$(cat dl.out dl.err | head -3)"
if grep -q '^#define SR_HAVE_NCCL 1' "${SR_BUILDDIR:-.}/srconfig.h"; then
    "$M" nccl_clean >nc.out 2>nc.err
    check "NCCL: 2 ranks gathering in place at NCCL's offsets run silently (status $?)" \
        sh -c "grep -q 'nccl_clean: 2 ranks gathered in place' nc.out && ! grep -q cudaemu nc.err" || diag "$(head -3 nc.err)"
    planted nccl_overlap "error: NCCL: ncclAllGather \(rank 0 of 1, 4 elements of f32\): sendbuff and recvbuff overlap but the call is not in place: in place is sendbuff == recvbuff \+ rank \* sendcount \(NCCL's rule\); here sendbuff - recvbuff = 4 bytes; called from " \
        "NCCL: an all-gather whose buffers overlap off NCCL's in-place offset: the rule and the calling site"
    planted nccl_host_buffer "error: NCCL: ncclAllGather \(rank 0, 4 elements of f32\): sendbuff \[0x[0-9a-f]+, \+16 bytes\) is not device memory of device 0 .*called from " \
        "NCCL: a collective given pageable host memory"
    planted nccl_mismatch "error: NCCL: collective 0 of a communicator of 2 ranks: rank [01] \(host .* pid [0-9]+\) calls ncclAllGather of [45] f32 elements, rank [01] called ncclAllGather of [45] f32 elements" \
        "NCCL: ranks disagreeing on a collective's count: both ranks and both counts named"
fi
"$M" event_unrecorded >ev.out 2>ev.err
check "an event waited before it was ever recorded: a warning, and the run goes on (status $?)" \
    sh -c "[ $? -eq 0 ] && grep -Eq 'cudaemu: warning: cudaStreamWaitEvent \(stream #[0-9]+\) on event #[0-9]+, which was never recorded, called from .*: CUDA makes the wait a no-op' ev.err" ||
    diag "$(head -2 ev.err)"
done_testing
