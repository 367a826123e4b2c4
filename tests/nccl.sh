#!/bin/sh
# nccl.sh — the NCCL bootstrap without a GPU, under OpenMPI's mpirun (a real
# PMIx server): tests/test_nccl_boot on 2 and 4 ranks (rank 0's unique id
# byte-identical everywhere, the group-declaration check, the status
# mapping), then the duplicate-GPU check as a run makes it before NCCL init,
# with the bus ids of SHARDRUN_TEST_GPU_BUSID: two ranks on one GPU are 78
# naming both ranks and the bus id; distinct GPUs pass.
. "${SR_SRCDIR:-.}/tests/tap.sh"
BOOT=${SR_BUILDDIR:-.}/tests/test_nccl_boot
[ -x "$BOOT" ] || require_or_skip nccl "this build has no NCCL (configure --with-nccl; CUDA's NCCL or libnccl-dev)"
need_mpirun
cd "$T" || exit 99

for n in 2 4; do
    timeout 300 $MPI -n "$n" "$BOOT" </dev/null >boot$n.tap 2>boot$n.err
    rc=$?
    total=$(grep -c '^ok\|^not ok' boot$n.tap)
    check "test_nccl_boot on $n ranks: $total checks, none failed (status $rc)" \
        sh -c "[ $total -ge 7 ] && [ $rc -eq 0 ] && ! grep -q '^not ok' boot$n.tap" ||
        diag "$(cat boot$n.tap)" "$(head -10 boot$n.err)"
    grep '^not ok' boot$n.tap | sed 's/^/# /'
done

# two local ranks given the same GPU
SHARDRUN_TEST_GPU_BUSID=0000:41:00.0,0000:41:00.0 timeout 300 $MPI -n 2 "$BOOT" busid </dev/null >dup.out 2>dup.err
rc=$?
check "two ranks on one GPU are refused before NCCL init (status $rc, want 78)" test "$rc" -eq 78 ||
    diag "$(cat dup.err)"
check "  ...naming both ranks and the bus id, with the hint --gpus-per-task=1 or --gpu-bind" \
    sh -c "grep -q 'ranks 0 and 1 are both on the GPU at bus 0000:41:00.0' dup.err && grep -q 'gpus-per-task=1' dup.err && grep -q 'gpu-bind' dup.err" ||
    diag "$(cat dup.err)"
# four ranks, the last two sharing one
SHARDRUN_TEST_GPU_BUSID=0000:01:00.0,0000:02:00.0,0000:03:00.0,0000:03:00.0 timeout 300 $MPI -n 4 "$BOOT" busid </dev/null >dup4.out 2>dup4.err
rc=$?
check "four ranks, ranks 2 and 3 on one GPU: 78 naming them (status $rc)" \
    sh -c "[ $rc -eq 78 ] && grep -q 'ranks 2 and 3 are both on the GPU at bus 0000:03:00.0' dup4.err" ||
    diag "$(cat dup4.err)"
SHARDRUN_TEST_GPU_BUSID=0000:01:00.0,0000:02:00.0 timeout 300 $MPI -n 2 "$BOOT" busid </dev/null >uniq.out 2>uniq.err
rc=$?
check "one GPU per rank passes the check (status $rc)" \
    sh -c "[ $rc -eq 0 ] && [ \$(grep -c 'is this rank.s alone' uniq.out) -eq 2 ]" || diag "$(cat uniq.err)"
SHARDRUN_TEST_GPU_BUSID=0000:01:00.0 timeout 300 $MPI -n 2 "$BOOT" busid </dev/null >short.out 2>short.err
rc=$?
check "a bus id list without an entry for local rank 1 is 78 on every rank, rank 1 naming the variable (status $rc)" \
    sh -c "[ $rc -eq 78 ] && grep -q 'rank 1\]: error: SHARDRUN_TEST_GPU_BUSID=0000:01:00.0 has no entry for local rank 1' short.err && grep -q 'rank 0\]: error: rank 1 could not tell its GPU.s bus id' short.err" ||
    diag "$(cat short.err)"
done_testing
