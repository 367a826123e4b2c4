#!/bin/sh
# slurm_multinode.sh — shardrun on two real Slurm nodes built inside this
# machine (tests/slurm_cluster.sh, cluster2_start: a network namespace and
# a slurmd per node, slurmctld on a bridge in a third namespace), through
# the sbatch template slurm/shardrun-cpu.sbatch:
#   a. 2 nodes x 2 tasks end bitwise equal to 4 tasks on one node; the
#      start lines show node 0/1 and local ranks 0/1 on each
#   b. HSDP, shard groups inside a node and replicas across nodes: bitwise
#      equal to the same mesh on one node; the start lines name the groups
#   c. without comm.interface the transport address is on a loopback
#      network (the host name resolves to 127.0.0.1 here, as to 127.0.1.1
#      on many clusters): 78 with
#      the hint comm.interface; (a, b and d-f set comm.interface: eth0)
#   d. a node's processes killed mid-run: the other node's ranks exit 69
#      within comm.timeout_s + 12 s naming a rank of the lost node; the
#      job resubmitted with --nodes=1 --ntasks=2 resumes, resharded 4 -> 2
#   e. a node's link cut mid-run: the same
#   f. the launcher lost: kill -9 of node 2's slurmstepd; its ranks exit 69
#      naming the lost PMIx server, the others 69 naming a peer, no save;
#      the lock is free and a resubmission resumes
#   g. the flight recorder across nodes: rank 3 (on node 2) issues collective
#      45 with another size (SHARDRUN_TEST_MISMATCH_SEQ=45@3); every rank
#      dumps to <checkpoint.dir>/flight/<job id>.0/ and shardrun debug flight
#      names the mismatch, rank 3 on host node2 (exit 2)
#   h. the same under srun --mpi=pmi2 (Slurm's PMI2, the templates'
#      SHARDRUN_MPI=pmi2): 2x2 preempted (SHARDRUN_TEST_PREEMPT_AT) -> 75 ->
#      requeued -> bitwise equal to a; a node's processes killed (as d); node 2's slurmstepd killed:
#      its ranks name the lost launcher (their parent, the PMI2 server)
# This is the one test whose traffic is not on loopback: it stays between
# the test's own namespaces, which are deleted at the end, also on failure.
# Needs root, iproute2, util-linux (nsenter, unshare) and Debian's Slurm.
. "${SR_SRCDIR:-.}/tests/tap.sh"
. "${SR_SRCDIR:-.}/tests/slurm_cluster.sh"
S=$SHARDRUN
TEMPLATES=$SR_SRCDIR/slurm
cluster2_need netns
cd "$T" || exit 99
trap 'cluster_stop; rm -rf "$T"' EXIT
trap 'exit 1' INT TERM
mkdir -p bin && ln -s "$S" bin/shardrun
export PATH="$T/bin:$PATH" OMP_WAIT_POLICY=PASSIVE

if ! cluster2_start "$T/cl" "$$"; then
    not_ok "the two-node cluster starts"
    cluster_logs
    done_testing
    exit 0
fi
ok "two nodes start (namespaces $CL_NETNS; node1 192.168.77.11, node2 192.168.77.12)"

STEPS=16
# mkjob NAME [YAML lines...]: NAME.yaml, checkpoints in ck_NAME
mkjob() {
    name=$1
    shift
    {
        echo "model: {preset: tiny, n_layer: 2, n_embd: 128, n_head: 4, seq_len: 64}"
        echo "train: {steps: ${JOB_STEPS:-$STEPS}, batch_size: 8, eval_every: 0}"
        echo "log: {every: 1}"
        echo "threads: 1"
        echo "checkpoint: {dir: $T/ck_$name, every_steps: ${JOB_EVERY:-0}}"
        for l in "$@"; do echo "$l"; done
    } >"$name.yaml"
}
# submit NAME SBATCH-OPTIONS...: the CPU template with JOB=NAME.yaml; the
# final parameters to NAME.params; prints the job id
submit() {
    name=$1
    shift
    cl sbatch --parsable "$@" --cpus-per-task=1 -o "$T/$name.out" \
        --export="ALL,JOB=$T/$name.yaml,SHARDRUN_TEST_DUMP_PARAMS=$T/$name.params,SHARDRUN_MPI=${MPI_TYPE:-pmix}" \
        "$TEMPLATES/shardrun-cpu.sbatch"
}
# run_job NAME SBATCH-OPTIONS...: submits and waits (300 s); state in $st
run_job() {
    name=$1
    J=$(submit "$@")
    st=$(job_wait "$J" "COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY" 300)
}
show() { # NAME: the job's output and the daemons' logs, as diagnostics
    diag "$(tail -20 "$1.out" 2>/dev/null)"
    cluster_logs
}
iface="comm: {interface: eth0, timeout_s: 10}"

# --- a. 2 nodes x 2 tasks = 4 tasks on one node, bitwise ----------------------
mkjob two "$iface"
run_job two --nodes=2 --ntasks-per-node=2
check "a: 2 nodes x 2 tasks complete ($st)" test "$st" = COMPLETED || show two
mkjob one "$iface"
run_job one --nodes=1 --ntasks-per-node=4
check "a: 1 node x 4 tasks complete ($st)" test "$st" = COMPLETED || show one
check "a: final parameters bitwise equal" cmp -s two.params one.params
check "a: the start lines show node 0 and 1, local ranks 0 and 1 on each, hosts node1 and node2" \
    sh -c "grep -q 'rank 0/4 local 0/2 node 0 host node1' two.out && grep -q 'rank 1/4 local 1/2 node 0 host node1' two.out &&
           grep -q 'rank 2/4 local 0/2 node 1 host node2' two.out && grep -q 'rank 3/4 local 1/2 node 1 host node2' two.out"
check "a: the transport runs on the nodes' eth0 addresses" \
    sh -c "grep -q 'host node1 .*transport 192.168.77.11:' two.out && grep -q 'host node2 .*transport 192.168.77.12:' two.out"

# --- b. HSDP: shard inside a node, replicate across nodes ---------------------
mkjob hsdp2 "$iface" "sharding: {mesh: {shard: 2, replicate: 2}}"
run_job hsdp2 --nodes=2 --ntasks-per-node=2
check "b: HSDP shard 2 x replicate 2 on 2 nodes completes ($st)" test "$st" = COMPLETED || show hsdp2
mkjob hsdp1 "$iface" "sharding: {mesh: {shard: 2, replicate: 2}}"
run_job hsdp1 --nodes=1 --ntasks-per-node=4
check "b: the same mesh on one node completes ($st)" test "$st" = COMPLETED || show hsdp1
check "b: final parameters bitwise equal" cmp -s hsdp2.params hsdp1.params
check "b: shard groups are the ranks of one node, replicas span the nodes" \
    grep -q 'groups: shard \[0 1\] \[2 3\]; replicate \[0 2\] \[1 3\]' hsdp2.out

# --- c. loopback transport in a multi-node job --------------------------------
mkjob lo
run_job lo --nodes=2 --ntasks-per-node=2
check "c: without comm.interface the job fails ($st) with 78" sh -c "[ '$st' = FAILED ] && grep -q 'exited 78' lo.out"
check "c: one message, naming the loopback address and the hint comm.interface" \
    sh -c "[ \$(grep -c 'shardrun.*error:' lo.out) -eq 1 ] &&
           grep -q 'the transport address 127.0.0.1 is on a loopback network, which the other nodes of this 2-node job cannot reach .*hint: set comm.interface' lo.out" ||
    diag "$(grep -B1 -A1 'error' lo.out | head -10)"

# --- d, e: a node lost mid-run --------------------------------------------------
# node_pids N COMM: the PIDs in node N's namespace whose command is COMM
node_pids() {
    for p in $(ip netns pids "$(node_ns "$1")"); do
        [ "$(cat /proc/"$p"/comm 2>/dev/null)" = "$2" ] && echo "$p"
    done
}
# wait_exists PATH SECONDS
wait_exists() {
    w=0
    until [ -e "$1" ]; do
        [ $w -ge $(($2 * 10)) ] && return 1
        sleep 0.1
        w=$((w + 1))
    done
}
# wait_line FILE PATTERN SECONDS
wait_line() {
    w=0
    until grep -q "$2" "$1" 2>/dev/null; do
        [ $w -ge $(($3 * 10)) ] && return 1
        sleep 0.1
        w=$((w + 1))
    done
}
# lose NAME HOW: a 2x2 job checkpointing every 4 steps loses node 2 (HOW:
# kill = its ranks SIGKILLed, link = its eth0 set down) after its first
# checkpoint; then the job goes on with --nodes=1 --ntasks=2
lose() {
    name=$1 how=$2
    JOB_STEPS=100000 JOB_EVERY=4 mkjob "$name" "$iface"
    J=$(submit "$name" --nodes=2 --ntasks-per-node=2 --no-requeue)
    wait_exists "$T/ck_$name/latest" 120
    sleep 1
    if [ "$how" = kill ]; then
        kill -9 $(node_pids 2 shardrun) 2>/dev/null
    else
        ip -n "$(node_ns 2)" link set eth0 down
    fi
    t0=$(date +%s)
    wait_line "$name.out" "rank 0\]: error:" 40
    wait_line "$name.out" "rank 1\]: error:" 40
    took=$(($(date +%s) - t0))
    check "$3: node 2 lost ($how) after step $(newest "$T/ck_$name"): ranks 0 and 1 report within comm.timeout_s + 12 s (${took} s)" \
        sh -c "[ $took -le 22 ] && grep -q 'rank 0\]: error:' $name.out && grep -q 'rank 1\]: error:' $name.out"
    check "  ...each naming rank 2 or 3 (of node 2)" \
        sh -c "grep 'rank 0\]: error:' $name.out | grep -q 'rank [23]' && grep 'rank 1\]: error:' $name.out | grep -q 'rank [23]'" ||
        diag "$(grep 'error:' $name.out | head -6)"
    st=$(job_wait "$J" "COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL" 120)
    check "  ...the job ends ($st) and node 1's tasks exited 69" sh -c "grep -q 'node1: tasks 0-1: Exited with exit code 69' $name.out ||
           { grep -q 'node1: task 0: Exited with exit code 69' $name.out && grep -q 'node1: task 1: Exited with exit code 69' $name.out; }" ||
        diag "$name.out (srun's and the ranks' last lines):" "$(grep -E 'srun|error' $name.out | tail -12)"
    [ "$how" = link ] && ip -n "$(node_ns 2)" link set eth0 up
    last=$(newest "$T/ck_$name")
    sed -i "s/steps: 100000/steps: $((last + 3))/" "$name.yaml"
    J=$(submit "$name" --nodes=1 --ntasks=2)
    st=$(job_wait "$J" "COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL" 300)
    check "  ...resubmitted with --nodes=1 --ntasks=2 it resumes from step $last and completes ($st)" \
        sh -c "[ '$st' = COMPLETED ] && grep -q 'resume=$last' $name.out && grep -q 'resume: resharded from 4 ranks (shard 4 x replicate 1) to 2 (shard 2 x replicate 1)' $name.out" ||
        show "$name"
}
lose killed kill "d"
lose cut link "e"

# --- f. the launcher lost: slurmstepd of node 2 killed ------------------------
# launcher_lost NAME LABEL: under srun --mpi=$MPI_TYPE (the PMIx or PMI2
# server is slurmstepd)
launcher_lost() {
    name=$1 label=$2 mpi=${MPI_TYPE:-pmix}
    server=$([ "$mpi" = pmi2 ] && echo PMI2 || echo PMIx)
    JOB_STEPS=100000 JOB_EVERY=4 mkjob "$name" "$iface"
    cat >"$name.sbatch" <<EOS
#!/bin/sh
# per-task error files: slurmstepd opens them for the tasks, so the tasks'
# last words survive it
srun --mpi=$mpi -e "$T/$name.err.%t" shardrun train "$T/$name.yaml"
EOS
    J=$(cl sbatch --parsable --nodes=2 --ntasks-per-node=2 --cpus-per-task=1 --no-requeue -o "$T/$name.out" "$name.sbatch")
    wait_exists "$T/ck_$name/latest" 120
    sleep 1
    for p in $(node_pids 2 slurmstepd); do
        grep -q "\[$J\.0\]" /proc/"$p"/cmdline 2>/dev/null && kill -9 "$p"
    done
    t0=$(date +%s)
    for r in 0 1 2 3; do wait_line $name.err.$r "error:" 40; done
    took=$(($(date +%s) - t0))
    check "$label: node 2's slurmstepd killed under --mpi=$mpi: every rank reports within comm.timeout_s + 12 s (${took} s)" \
        sh -c "[ $took -le 22 ] && for r in 0 1 2 3; do grep -q 'error:' $name.err.\$r || exit 1; done"
    # (slurmstepd is both their parent and their PMIx server: either
    # witness may speak first; PMI2 has only the parent)
    if [ "$mpi" = pmi2 ]; then
        lost="the launcher (process [0-9]*, this rank.s parent and its PMI2 server) exited"
    else
        lost="lost the connection to the launcher.s PMIx server\|the launcher (process [0-9]*, this rank.s parent and its PMIx server) exited"
    fi
    check "  ...ranks 2 and 3 name the lost launcher ($server)" \
        sh -c "grep -q '$lost' $name.err.2 && grep -q '$lost' $name.err.3" || diag "$(tail -n 2 $name.err.2 $name.err.3)"
    check "  ...and nothing after it: no save" \
        sh -c "for r in 0 1 2 3; do tail -1 $name.err.\$r | grep -q 'error:' || exit 1; done"
    # srun waits on for the killed slurmstepd's tasks: end the job, or it
    # holds its CPUs on both nodes
    cl scancel "$J"
    st=$(job_wait "$J" "COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL" 120)
    last=$(newest "$T/ck_$name")
    sed -i "s/steps: 100000/steps: $((last + 3))/" $name.yaml
    J=$(submit $name --nodes=2 --ntasks-per-node=2)
    st=$(job_wait "$J" "COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL" 300)
    check "  ...the lock is free: a resubmission resumes from step $last and completes ($st)" \
        sh -c "[ '$st' = COMPLETED ] && grep -q 'resume=$last' $name.out" || show $name
}
launcher_lost stepd "f"

# --- g. the flight recorder across nodes ------------------------------------------
mkjob fl "$iface"
J=$(cl sbatch --parsable --nodes=2 --ntasks-per-node=2 --cpus-per-task=1 --no-requeue -o "$T/fl.out" \
    --export="ALL,JOB=$T/fl.yaml,SHARDRUN_TEST_MISMATCH_SEQ=45@3" "$TEMPLATES/shardrun-cpu.sbatch")
st=$(job_wait "$J" "COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL" 120)
n=$(ls "$T/ck_fl/flight/$J.0" 2>/dev/null | grep -c '^rank[0-3].json$')
check "g: rank 3 mismatches collective 45: the job fails ($st), every rank dumps its flight recorder ($n of 4)" \
    sh -c "[ '$st' = FAILED ] && [ $n -eq 4 ]" || show fl
"$S" debug flight "$T/ck_fl/flight/$J.0" >fl.txt 2>&1
rc=$?
check "  ...shardrun debug flight names the mismatch: rank 3 on host node2 (status $rc)" \
    sh -c "[ $rc -eq 2 ] && grep -q '^culprit: a mismatch at host collective 45: rank 3 (host node2) issued' fl.txt" ||
    diag "$(cat fl.txt)"
# --- h. PMI2: Slurm's own PMI plugin (srun --mpi=pmi2) ---------------------------
if ! have_libpmi2; then
    skip_or_fail pmi2 "h: Slurm's libpmi2.so.0 is not installed (apt-get install libpmi2-0)"
else
    export MPI_TYPE=pmi2
    # a 2x2 job preempted after step 6 -> 75 -> requeued -> resumed, bitwise
    # equal to a's uninterrupted 2x2 run.  The preemption signal is raised
    # by the ranks themselves (SHARDRUN_TEST_PREEMPT_AT; the resumed run
    # starts after step 6 and is not preempted again): in these namespaces
    # scancel --signal does not reach the nodes' tasks.  slurm.sh q sends a
    # real signal to a PMI2 job on one node.
    mkjob pmi2 "$iface"
    export SHARDRUN_TEST_PREEMPT_AT=6
    J=$(submit pmi2 --nodes=2 --ntasks-per-node=2 --requeue)
    unset SHARDRUN_TEST_PREEMPT_AT
    st=$(job_wait "$J" "COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL" 300)
    check "h: 2 nodes x 2 tasks under --mpi=pmi2, preempted: 75, requeued, resumed, COMPLETED ($st)" \
        sh -c "[ '$st' = COMPLETED ] && grep -q '== shardrun exited 75' pmi2.out && [ \$(grep -c 'restart=1 resume=6\$' pmi2.out) -eq 4 ]" ||
        show pmi2
    check "  ...the start lines name the PMI2 bootstrap and its placement: local ranks 0 and 1 on node1 and node2" \
        sh -c "grep -q 'rank 0/4 local 0/2 node 0 host node1 .* bootstrap pmi2 ' pmi2.out && grep -q 'rank 3/4 local 1/2 node 1 host node2 .* bootstrap pmi2 ' pmi2.out" ||
        diag "$(grep ' rank [0-3]/4 ' pmi2.out | head -8)"
    check "  ...final parameters bitwise those of a's uninterrupted 2 x 2 run" cmp -s pmi2.params two.params
    lose killed2 kill "h (pmi2)"
    launcher_lost stepd2 "h (pmi2)"
    unset MPI_TYPE
fi
done_testing
