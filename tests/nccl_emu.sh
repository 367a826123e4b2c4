#!/bin/sh
# nccl_emu.sh — multi-rank device: cuda on emulated GPUs (an emulator tree
# with the emulated NCCL of tests/cudaemu/nccl.c), under OpenMPI's mpirun:
# each rank a process with its own emulated GPU (the emulator's default 8
# GPUs per node, a bus id each), the NCCL plane of src/comm_nccl_cuda.c between
# them.  Small model
# (tiny_job: 2 blocks of width 64; 32 positions), 6 steps.
#   fast: 2 ranks in exact mode (fp32 parameters) equal 1 rank (losses
#     relative 1e-5, parameters per tensor 1e-5 x max: ARCHITECTURE.md §3);
#     1 rank with size-1 groups on communicators (two splits in a row)
#     bitwise 1 rank; two ranks on one emulated GPU: 78 naming both ranks
#     and the bus id
#   long: 4 ranks, HSDP 2x2 (the all-reduce), reshard_after_forward 2 in
#     exact mode against 1 rank; bf16 parameters on 2 and 4 ranks against 1
#     rank (1/256, test_vranks' bound for the cuda table); exact mode
#     against the CPU (1e-4 per step, the GPU-vs-CPU bound of
#     tests/cudaemu.sh); checkpoints from 2 emulated GPUs resumed on the
#     CPU and on 4 emulated GPUs, and from 2 CPU ranks on 2 emulated GPUs;
#     the failures the NCCL plane promises to handle: a rank killed
#     mid-collective, a collective that never completes
#     (SHARDRUN_TEST_STALL_SEQ), an asynchronous NCCL error
#     (CUDAEMU_NCCL_ASYNC_ERROR), an init that never completes
#     (CUDAEMU_NCCL_INIT_HANG): every rank 69 within comm.timeout_s + 12 s;
#     and every NCCL call the engine makes reached at least once (the
#     emulator's counts, CUDAEMU_NCCL_CALLS, summed over every run).
# Elsewhere the whole test skips (a failure when SHARDRUN_TEST_REQUIRE has
# cudaemu).
. "${SR_SRCDIR:-.}/tests/tap.sh"
S=$SHARDRUN
CMP=${SR_BUILDDIR:-.}/tests/cmp_params
need_cudaemu
grep -q '^#define SR_HAVE_NCCL 1' "${SR_BUILDDIR:-.}/srconfig.h" ||
    require_or_skip cudaemu "this emulator tree was configured --without-nccl"
need_mpirun
cd "$T" || exit 99
tiny_job job.yaml model.seq_len=32 train.steps=6 train.batch_size=8 train.seed=7 log.sample_every=0
EXACT="--set sharding.mixed_precision.param_dtype=fp32"
unset CUDAEMU_DEVICES CUDA_VISIBLE_DEVICES
export CUDAEMU_NCCL_CALLS="$T/calls" OMP_NUM_THREADS=1
# run NAME RANKS ARGS...: shardrun train on RANKS ranks (device: cuda unless
# ARGS say otherwise), metrics NAME.jsonl, parameters NAME.params, the
# ranks' messages NAME.err; status in $rc
run() {
    n=$1 r=$2
    shift 2
    SHARDRUN_TEST_DUMP_PARAMS="$T/$n.params" timeout 300 $MPI -n "$r" "$S" train job.yaml --set device=cuda \
        --set log.metrics="$T/$n.jsonl" "$@" >"$n.out" 2>"$n.err"
    rc=$?
}
# same NAME REF TOL [PTOL]: every step's loss within TOL relative of REF's
# (over as many steps), the final parameters per tensor within PTOL (else
# TOL) x max; NAME.REF.cmp says the worst of each
same() {
    field "$1.jsonl" loss >"$1.l"
    field "$2.jsonl" loss >"$2.l"
    [ -s "$1.l" ] && [ "$(wc -l <"$1.l")" -eq "$(wc -l <"$2.l")" ] || { echo "no losses to compare" >"$1.$2.cmp"; return 1; }
    paste "$1.l" "$2.l" | awk -v tol="$3" '{ d = $1 - $2; if (d < 0) d = -d; m = $2 < 0 ? -$2 : $2; if (d > tol * m) bad = 1
        if (d / m > w) w = d / m } END { printf "losses: worst relative difference %.3g (tolerance %g); ", w, tol; exit bad }' >"$1.$2.cmp" &&
        "$CMP" "$1.params" "$2.params" "${4:-$3}" >>"$1.$2.cmp" 2>&1
}
# trained NAME RANKS DESC REF TOL PTOL ARGS...: a run compared with REF
trained() {
    n=$1 r=$2 desc=$3 ref=$4 tol=$5 ptol=$6
    shift 6
    run "$n" "$r" "$@"
    check "$desc: $r ranks train 6 steps on emulated GPUs (status $rc)" test "$rc" -eq 0 ||
        diag "$(grep -m3 'error' "$n.err")"
    check "  ...losses within $tol and final parameters within $ptol of $ref" same "$n" "$ref" "$tol" "$ptol"
    diag "$(cat "$n.$ref.cmp" 2>/dev/null)"
}

# 1. the references (1 rank) and 2 ranks in exact mode
run e1 1 $EXACT --set comm.backend=nccl
check "1 rank on an emulated GPU over NCCL (comm.backend nccl; status $rc)" test "$rc" -eq 0 ||
    diag "$(tail -3 e1.err)"
trained e2 2 "exact mode" e1 1e-5 1e-5 $EXACT
check "  ...each rank on its own emulated GPU: buses 19 and 1A, NCCL the plane" \
    sh -c "grep -q 'rank 0/2 .*bus 00000000:19:00.0.* nccl=' e2.err && grep -q 'rank 1/2 .*bus 00000000:1A:00.0.* nccl=' e2.err"
check "  ...every kind of collective it needs ran over NCCL, split communicators included" \
    grep -q 'NCCL ran [1-9][0-9]* all-gathers, [1-9][0-9]* reduce-scatters, 0 all-reduces over 1 split' e2.err

# 1b. one rank with its size-1 groups on communicators too
# (SHARDRUN_TEST_NCCL_SIZE1, as the GPU check's nccl stage runs): two
# splits of the world in a row, the parent polled after each (NCCL refuses
# a parent used before it answered its split's ncclSuccess: the first H200
# run; the emulated NCCL refuses it too)
export SHARDRUN_TEST_NCCL_SIZE1=1
run s1 1 $EXACT --set comm.backend=nccl
unset SHARDRUN_TEST_NCCL_SIZE1
check "1 rank with its size-1 groups on NCCL communicators: two splits in a row (status $rc)" test "$rc" -eq 0 ||
    diag "$(grep -m2 'error' s1.err)"
check "  ...both split, every collective over NCCL, bitwise the 1-rank run" \
    sh -c "grep -q 'NCCL ran [1-9][0-9]* all-gathers, [1-9][0-9]* reduce-scatters, [1-9][0-9]* all-reduces over 2 split' s1.err && '$CMP' s1.params e1.params 0 >s1.cmp 2>&1" ||
    diag "$(grep -m1 'NCCL ran' s1.err) $(tail -1 s1.cmp)"

# 1c. a split NCCL refuses (CUDAEMU_NCCL_SPLIT_FAIL=RANK:K, the first H200
# run's second split): the run ends 70 with NCCL's message as its last line
# and the teardown of the half-open plane (the first communicator split,
# the world's) crashes nothing (that run ended in a segmentation fault)
for k in 1 2; do
    SHARDRUN_TEST_NCCL_SIZE1=1 CUDAEMU_NCCL_SPLIT_FAIL=0:$k timeout 120 "$S" train job.yaml --set device=cuda \
        --set comm.backend=nccl >split$k.out 2>split$k.err
    rc=$?
    check "the split $k of 2 refused: 70, no crash (status $rc)" test "$rc" -eq 70 || diag "$(tail -3 split$k.err)"
    check "  ...NCCL's refusal named in the run's last line" \
        sh -c "tail -1 split$k.err | grep -q 'error: NCCL: ncclCommSplit of group .* failed on rank 0: invalid usage'"
done

# 2. two ranks on one emulated GPU (CUDA_VISIBLE_DEVICES=0 for both):
# refused before NCCL init
CUDA_VISIBLE_DEVICES=0 run dup 2 $EXACT
check "two ranks on one emulated GPU: 78 (status $rc)" test "$rc" -eq 78
check "  ...naming both ranks and the bus id, with the hint" \
    sh -c "grep -q 'ranks 0 and 1 are both on the GPU at bus 00000000:19:00.0 of host' dup.err && grep -q 'gpus-per-task=1' dup.err" ||
    diag "$(grep -m2 error dup.err)"

if group --long "world sizes, HSDP, reshard, bf16"; then
    trained e4 4 "exact mode" e1 1e-5 1e-5 $EXACT
    trained hsdp 4 "HSDP 2x2 (replicas all-reduce)" e1 1e-5 1e-5 $EXACT --set sharding.mesh.replicate=2
    check "  ...the replicas' all-reduce ran over NCCL" grep -q 'NCCL ran .* [1-9][0-9]* all-reduces over 2 split' hsdp.err
    trained rs2 4 "reshard_after_forward 2" e1 1e-5 1e-5 $EXACT --set sharding.reshard_after_forward.blocks=2
    run b1 1 --set comm.backend=nccl
    check "bf16 parameters on 1 emulated GPU (status $rc)" test "$rc" -eq 0
    # bf16: each rank computes its part of the batch with bf16 parameters
    # and activations, so the gradient's association differs from 1 rank's
    # by f32 roundings that flip bf16 ones (2^-8 of a value) downstream;
    # after 6 AdamW steps a bias that started at 0 is a few learning rates
    # wide, so per tensor 1e-2 x max, the losses 1e-3
    trained b2 2 "bf16 parameters" b1 1e-3 1e-2
    trained b4 4 "bf16 parameters" b1 1e-3 1e-2
fi

if group --long "against the CPU"; then
    run c1 1 $EXACT --set device=cpu
    check "the CPU reference (status $rc)" test "$rc" -eq 0
    check "2 emulated GPUs in exact mode: every step's loss and the final parameters within 1e-4 of the CPU's" \
        same e2 c1 1e-4
    diag "$(cat e2.c1.cmp 2>/dev/null)"
fi

if group --long "checkpoints across emulated GPUs, the CPU and rank counts"; then
    SHARDRUN_TEST_PREEMPT_AT=3 run g2s 2 $EXACT --set checkpoint.dir="$T/ckg"
    check "2 emulated GPUs stop at step 3 with a checkpoint (status $rc)" \
        sh -c "[ $rc -eq 75 ] && test -d ckg/step_00000003"
    cp -a ckg ckg4
    run g2c 1 $EXACT --set device=cpu --set checkpoint.dir="$T/ckg"
    check "  ...the CPU (1 rank) resumes it and finishes (status $rc)" \
        sh -c "[ $rc -eq 0 ] && grep -q 'resume=3' g2c.err"
    check "  ...its final parameters within 1e-4 of the emulated run that never stopped" \
        sh -c "'$CMP' g2c.params e1.params 1e-4 >g2c.cmp"
    run g24 4 $EXACT --set checkpoint.dir="$T/ckg4"
    check "  ...4 emulated GPUs resume it, resharded 2 -> 4 (status $rc)" \
        sh -c "[ $rc -eq 0 ] && grep -q 'resharded from 2 rank' g24.err && grep -q 'resume=3' g24.err"
    check "  ...final parameters within 1e-5 of the 1-rank run that never stopped" \
        sh -c "'$CMP' g24.params e1.params 1e-5 >g24.cmp"
    diag "$(tail -1 g24.cmp)"
    SHARDRUN_TEST_PREEMPT_AT=3 run c2s 2 $EXACT --set device=cpu --set checkpoint.dir="$T/ckc"
    check "2 CPU ranks stop at step 3 with a checkpoint (status $rc)" test "$rc" -eq 75
    run c2g 2 $EXACT --set checkpoint.dir="$T/ckc"
    check "  ...2 emulated GPUs resume it and finish within 1e-4 of the emulated run that never stopped (status $rc)" \
        sh -c "[ $rc -eq 0 ] && grep -q 'resume=3' c2g.err && '$CMP' c2g.params e1.params 1e-4 >c2g.cmp"
fi

# 3. failures: every rank ends 69 in bounded time, after ncclCommAbort
# fails NAME RANKS BOUND ARGS...: a run expected to end 69; $took its seconds
fails() {
    n=$1 r=$2
    shift 2
    t0=$(date +%s)
    run "$n" "$r" "$@"
    took=$(($(date +%s) - t0))
}
# every_rank_69 NAME RANKS: each rank's own last word is an error ending the run with 69
every_rank_69() {
    [ "$rc" -eq 69 ] || return 1
    k=0
    while [ $k -lt "$2" ]; do
        grep -q "rank $k\]: .*error: " "$1.err" || return 1
        k=$((k + 1))
    done
}
if group --long "failures"; then
    # a rank killed mid-collective: SIGKILL to rank 1 of 3 once training runs
    WRAP="sh $SR_SRCDIR/tests/rank_wrap.sh"
    rm -rf w && mkdir w
    WRAPDIR=$T/w timeout 120 $MPI --enable-recovery -n 3 -x WRAPDIR=$T/w $WRAP "$S" train job.yaml --set device=cuda \
        $EXACT --set train.steps=100000 --set train.batch_size=6 --set comm.timeout_s=5 >w/mpirun.out 2>&1 &
    mpid=$!
    i=0
    while [ $i -lt 120 ] && ! grep -q 'step .*/100000' w/err.0 2>/dev/null; do sleep 0.5; i=$((i + 1)); done
    kill -KILL "$(cat w/pid.1)"
    t0=$(date +%s)
    i=0
    while [ $i -lt 60 ] && ! { [ -s w/status.0 ] && [ -s w/status.2 ]; }; do sleep 0.5; i=$((i + 1)); done
    took=$(($(date +%s) - t0))
    wait $mpid 2>/dev/null
    check "rank 1 killed mid-collective: ranks 0 and 2 exit 69 ($(cat w/status.0 2>/dev/null)/$(cat w/status.2 2>/dev/null))" \
        sh -c "[ \"\$(cat w/status.0)\" = 69 ] && [ \"\$(cat w/status.2)\" = 69 ]"
    check "  ...within comm.timeout_s + 12 s ($took s)" test "$took" -le 17
    # (a rank inside the step's device work finds the loss through the NCCL
    # watchdog's post-mortem; one already at the step's agreement, its
    # device idle, through the transport: which plane sees it first is the
    # kill's timing)
    check "  ...naming the lost rank 1 (the NCCL plane's post-mortem after aborting the communicators, or the transport's)" \
        sh -c "grep -q 'communicators aborted.*rank 1\|error: lost the connection to rank 1 ' w/err.0 &&
               grep -q 'communicators aborted.*rank 1\|error: lost the connection to rank 1 ' w/err.2" ||
        diag "$(grep -h error w/err.0 w/err.2 | head -4)"

    SHARDRUN_TEST_STALL_SEQ=20 fails stall 2 $EXACT --set train.steps=100 --set comm.timeout_s=5
    check "a collective that never completes (SHARDRUN_TEST_STALL_SEQ=20): every rank 69 (status $rc)" \
        every_rank_69 stall 2 || diag "$(grep error stall.err | head -4)"
    check "  ...within comm.timeout_s + 12 s ($took s), the watchdog naming collective 20" \
        sh -c "[ $took -le 17 ] && grep -q 'NCCL watchdog: collective 20 ' stall.err && grep -q 'communicators aborted' stall.err"

    CUDAEMU_NCCL_ASYNC_ERROR=1:25 fails async 2 $EXACT --set train.steps=100 --set comm.timeout_s=5
    check "an asynchronous NCCL error on rank 1 (CUDAEMU_NCCL_ASYNC_ERROR=1:25): every rank 69 (status $rc)" \
        every_rank_69 async 2 || diag "$(grep error async.err | head -4)"
    # (the watchdog's poll or the next collective's call finds it first)
    check "  ...rank 1 with NCCL's error string, within comm.timeout_s + 12 s ($took s)" \
        sh -c "[ $took -le 17 ] && grep -q 'rank 1\]: .*error: .*unhandled system error' async.err"

    CUDAEMU_NCCL_INIT_HANG=1 fails init 2 $EXACT --set comm.timeout_s=4
    check "an NCCL init that never completes (CUDAEMU_NCCL_INIT_HANG=1): every rank 69 (status $rc)" \
        every_rank_69 init 2 || diag "$(grep error init.err | head -4)"
    check "  ...at the deadline, comm.timeout_s + 12 s ($took s), saying a rank did not join" \
        sh -c "[ $took -le 16 ] && grep -q 'ncclCommInitRankConfig (2 ranks) did not complete within comm.timeout_s = 4 s' init.err"

    # every NCCL call src/comm_nccl_cuda.c makes, reached
    awk '{ for (i = 3; i <= NF; i++) { split($i, kv, "="); n[kv[1]] += kv[2]; if (!(kv[1] in seen)) { seen[kv[1]] = 1; order[m++] = kv[1] } } }
         END { for (i = 0; i < m; i++) printf "%-24s %d\n", order[i], n[order[i]] }' calls >calls.txt
    diag "NCCL calls over every run above (the emulator's counts, all processes):" "$(cat calls.txt)"
    check "every NCCL call the engine makes was reached (13 entry points, each at least once)" \
        sh -c "[ \$(wc -l <calls.txt) -eq 13 ] && ! awk '\$2 == 0 { bad = 1 } END { exit !bad }' calls.txt"
fi
done_testing
