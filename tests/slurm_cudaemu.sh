#!/bin/sh
# slurm_cudaemu.sh — GPU jobs end to end under the private Slurm clusters
# (tests/slurm_cluster.sh) with emulated GPUs (an emulator tree with the
# emulated NCCL, tests/cudaemu): the fake GPUs of the clusters' GRES are
# the emulated ones (CUDAEMU_DEVICES per node; Slurm's CUDA_VISIBLE_DEVICES
# picks among them, each with its own bus id), every job through the GPU
# template slurm/shardrun-gpu.sbatch (device: cuda, exact mode, 6 steps):
#   a. one node, 4 tasks with --gpus-per-task=1 and 2 tasks with
#      --gpus-per-node=2: each task on its own emulated GPU (distinct bus
#      ids), the final parameters within 1e-5 of a 1-task run
#   b. 2 tasks given one GPU (srun --gpus=1): 78 naming both ranks and the bus
#   c. two nodes (network namespaces) x 2 emulated GPUs (--gpus-per-node=2):
#      NCCL between the nodes, bitwise the 4-task job of a; HSDP 2x2 with
#      the replicas across the nodes, within 1e-5 of 1 task
#   d. status 69 (an asynchronous NCCL error on rank 1,
#      CUDAEMU_NCCL_ASYNC_ERROR): the template resubmits the job excluding
#      the host the messages blame; the resubmitted job runs on the other
#      node, ends 69 again and, at MAX_RESTARTS=1, is not resubmitted
# The long tier only.  Needs root, iproute2, util-linux, Debian's Slurm and
# munge; every wait is bounded.
. "${SR_SRCDIR:-.}/tests/tap.sh"
. "${SR_SRCDIR:-.}/tests/slurm_cluster.sh"
S=$SHARDRUN
CMP=${SR_BUILDDIR:-.}/tests/cmp_params
TEMPLATES=$SR_SRCDIR/slurm
long_tier || { echo "1..0 # SKIP the long tier only (make check-long, tests/run --long)"; exit 0; }
need_cudaemu
grep -q '^#define SR_HAVE_NCCL 1' "${SR_BUILDDIR:-.}/srconfig.h" ||
    require_or_skip cudaemu "this emulator tree was configured --without-nccl"
cluster2_need slurm python3 # (python3: the single-node cluster's free ports)
cd "$T" || exit 99
trap 'cluster_stop; rm -rf "$T"' EXIT
trap 'exit 1' INT TERM
mkdir -p bin && ln -s "$S" bin/shardrun
export PATH="$T/bin:$PATH" OMP_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE CUDAEMU_DEVICES=4

# mkjob NAME [KEY=VALUE...]: NAME.yaml, tiny_job's model at 32 positions,
# 6 steps, exact mode (fp32 parameters), KEY=VALUE added or replaced
mkjob() {
    name=$1
    shift
    tiny_job "$name.yaml" model.seq_len=32 train.steps=6 train.batch_size=8 train.seed=7 log.sample_every=0 \
        sharding.mixed_precision.param_dtype=fp32 "$@"
}
# gpujob NAME SBATCH-OPTIONS...: the GPU template with JOB=NAME.yaml, its
# parameters to NAME.params; waits (bounded) for the job's end: $st
gpujob() {
    name=$1
    shift
    J=$(cl sbatch --parsable "$@" --cpus-per-task=1 -o "$T/$name.out" \
        --export="ALL,JOB=$T/$name.yaml,SHARDRUN_TEST_DUMP_PARAMS=$T/$name.params" "$TEMPLATES/shardrun-gpu.sbatch")
    if [ -n "$J" ]; then st=$(job_wait "$J" "COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL" 240); else st="not submitted"; fi
}
show() { diag "== $1.out (last 25 lines)" "$(tail -25 "$T/$1.out" 2>/dev/null)"; }
# buses NAME: the distinct bus ids the start lines name
buses() { sed -n 's/.* rank [0-9]*\/[0-9]* local .*, bus \([0-9A-F:.]*\),.*/\1/p' "$1.out" | sort -u | wc -l; }

# --- a, b: one node with 4 GPUs -----------------------------------------------
if cluster_start "$T/cl1"; then
    ok "the single-node cluster starts (4 fake GPUs as gres/gpu, the emulator's 4)"
    mkjob ref
    timeout 300 env SHARDRUN_TEST_DUMP_PARAMS="$T/ref.params" srun --mpi=pmix -n 1 --gpus=1 shardrun train ref.yaml \
        --set device=cuda >ref.out 2>&1
    check "reference: 1 task on 1 emulated GPU under srun (status $?)" test -s ref.params || show ref
    mkjob a4
    gpujob a4 -N 1 --ntasks-per-node=4 --gpus-per-task=1
    check "a: 4 tasks --gpus-per-task=1 through the GPU template ($st)" test "$st" = COMPLETED || show a4
    check "  ...each on its own emulated GPU: 4 distinct bus ids ($(buses a4)), NCCL the plane" \
        sh -c "[ $(buses a4) -eq 4 ] && grep -q 'NCCL ran [1-9]' a4.out"
    check "  ...final parameters within 1e-5 of 1 task" sh -c "'$CMP' a4.params ref.params 1e-5 >a4.cmp"
    diag "$(tail -1 a4.cmp)"
    mkjob a2
    gpujob a2 -N 1 --ntasks-per-node=2 --gpus-per-node=2
    check "a: 2 tasks --gpus-per-node=2 ($st): distinct GPUs ($(buses a2)), within 1e-5 of 1 task" \
        sh -c "[ '$st' = COMPLETED ] && [ $(buses a2) -eq 2 ] && '$CMP' a2.params ref.params 1e-5 >a2.cmp" || show a2
    mkjob b
    timeout 120 srun --mpi=pmix -n 2 --gpus=1 shardrun train b.yaml --set device=cuda >b.out 2>&1
    rc=$?
    check "b: 2 tasks given 1 GPU (srun -n 2 --gpus=1) exit 78 (srun: $rc)" test "$rc" -eq 78 || show b
    check "  ...naming both ranks and the bus id" grep -q 'ranks 0 and 1 are both on the GPU at bus 00000000:19:00.0 of host' b.out
    cluster_stop
else
    not_ok "the single-node cluster starts"
    cluster_logs
    cluster_stop
fi

# --- c, d: two nodes with 2 GPUs each ---------------------------------------
if CL_GPUS=2 cluster2_start "$T/cl2" "$$"; then
    ok "two nodes start, 2 fake GPUs each (namespaces $CL_NETNS)"
    export CUDAEMU_DEVICES=2
    mkjob c comm.interface=eth0
    gpujob c --nodes=2 --ntasks-per-node=2 --gpus-per-node=2
    check "c: 2 nodes x 2 emulated GPUs ($st)" test "$st" = COMPLETED || show c
    check "  ...the ranks on node1 and node2, NCCL between them" \
        sh -c "grep -q 'rank 0/4 local 0/2 node 0 host node1 ' c.out && grep -q 'rank 3/4 local 1/2 node 1 host node2 ' c.out && grep -q 'NCCL ran [1-9]' c.out"
    check "  ...bitwise the 4-task job on one node" sh -c "'$CMP' c.params a4.params 0 >c.cmp" || diag "$(tail -1 c.cmp)"
    mkjob h comm.interface=eth0 sharding.mesh.replicate=2
    gpujob h --nodes=2 --ntasks-per-node=2 --gpus-per-node=2
    check "c: HSDP 2x2 over the nodes ($st): shard groups inside a node, replicas across, within 1e-5 of 1 task" \
        sh -c "[ '$st' = COMPLETED ] && grep -q 'groups: shard \[0 1\] \[2 3\]; replicate \[0 2\] \[1 3\]' h.out && grep -q 'NCCL ran .* [1-9][0-9]* all-reduces' h.out && '$CMP' h.params ref.params 1e-5 >h.cmp" ||
        show h

    mkjob d comm.interface=eth0 comm.timeout_s=5 train.steps=100
    J=$(cl sbatch --parsable -N 1 --ntasks-per-node=2 --gpus-per-node=2 --cpus-per-task=1 -o "$T/d.out" \
        --export="ALL,JOB=$T/d.yaml,CUDAEMU_NCCL_ASYNC_ERROR=1:10,MAX_RESTARTS=1" "$TEMPLATES/shardrun-gpu.sbatch")
    st=$(job_wait "$J" "COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL" 120)
    first=$(sed -n "s/.*rank 1\/2 local .* host \(node[12]\) .* job $J .*/\1/p" d.out | head -1)
    J2=$(sed -n 's/^Submitted batch job \([0-9]*\)$/\1/p' d.out | head -1)
    check "d: an asynchronous NCCL error on rank 1 ends job $J with 69 ($st) naming NCCL's error" \
        sh -c "grep -q 'shardrun exited 69' d.out && grep -q 'rank 1\]: .*error: .*unhandled system error' d.out" ||
        show d
    check "  ...resubmitted (job ${J2:-none}) excluding the host the messages blame (${first:-none})" \
        sh -c "[ -n '$first' ] && [ -n '$J2' ] && grep -q '== status 69: resubmitted excluding $first; it resumes' d.out" ||
        show d
    if [ -n "$J2" ]; then
        st2=$(job_wait "$J2" "COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL" 120)
        exc=$(cl scontrol show job "$J2" 2>/dev/null | sed -n 's/.*ExcNodeList=\([^ ]*\).*/\1/p')
        check "  ...job $J2 excludes $exc and runs on the other node" \
            sh -c "[ '$exc' = '$first' ] && grep 'job $J2 ' d.out | grep -q 'host node' && ! grep 'job $J2 ' d.out | grep -q 'host $first '"
        check "  ...ends 69 again ($st2) and, at MAX_RESTARTS=1, is not resubmitted" \
            sh -c "grep -q '== job $J2 run 1 on' d.out && grep -q 'status 69 after 1 restarts (MAX_RESTARTS=1): not resubmitting' d.out" ||
            show d
    else
        not_ok "  ...the resubmitted job runs on the other node and stops at MAX_RESTARTS"
    fi
else
    not_ok "two nodes start"
    cluster_logs
fi
done_testing
