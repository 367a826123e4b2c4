#!/bin/sh
# slurm_multinode.sh — shardrun on three real Slurm nodes built inside this
# machine (tests/slurm_cluster.sh, cluster2_start with CL_NODES=3: a network
# namespace and a slurmd per node, slurmctld on a bridge in another), through
# the sbatch template slurm/shardrun-cpu.sbatch:
#   a. 2 nodes x 2 tasks end bitwise equal to 4 tasks on one node; the
#      start lines show node 0/1 and local ranks 0/1 on each
#   b. HSDP, shard groups inside a node and replicas across nodes: bitwise
#      equal to the same mesh on one node; the start lines name the groups
#   c. without comm.interface the transport address is on a loopback
#      network (the host name resolves to 127.0.0.1 here, as to 127.0.1.1
#      on many clusters): 78 with
#      the hint comm.interface; (a, b and d-f set comm.interface: eth0)
#   d. restarts inside the allocation (the template's --no-kill loop), on
#      three nodes: a 2 x 2 job with one spare node loses node 2 (its ranks
#      killed) right after a checkpoint: node 1's ranks exit 69 naming a rank
#      of node 2; the template reruns the step on node 1 and the spare, and
#      the run ends bitwise equal to a's uninterrupted one; starts.jsonl
#      records the cause, the blamed host and the seconds lost
#   e. the same without a spare, node 2's link cut: the step (srun waits
#      for the unreachable node's tasks) is ended SHARDRUN_STEP_GRACE after
#      the first 69 and reruns on node 1 alone, 4 -> 2 ranks, within 1e-5;
#      the paths that end the job: no healthy node left (one node), the
#      attempts spent (MAX_STEP_RESTARTS=0), a world size that cannot keep
#      the batch (78 naming batch_size, micro_batch and the ranks); a crash
#      (SIGABRT) is the step's own error and is not rerun
#   m. the memory tier (checkpoint.memory): the same 2 x 2 job with a spare
#      loses node 2 and its memory directory after the memory save of step
#      10; the rerun resumes from step 10 (node 1's files and its replicas
#      of node 2's, the spare fetching what its ranks read), bitwise a
#   f. the launcher lost: kill -9 of node 2's slurmstepd; its ranks exit 69
#      naming the lost PMIx server, the others 69 naming a peer, no save;
#      the lock is free and a resubmission resumes
#   g. the flight recorder across nodes: rank 3 (on node 2) issues collective
#      45 with another size (SHARDRUN_TEST_MISMATCH_SEQ=45@3); every rank
#      dumps to <checkpoint.dir>/flight/<job id>.0/ and shardrun debug flight
#      names the mismatch, rank 3 on host node2 (exit 2)
#   h. the same under srun --mpi=pmi2 (Slurm's PMI2, the templates'
#      SHARDRUN_MPI=pmi2): 2x2 preempted (SHARDRUN_TEST_PREEMPT_AT) -> 75 ->
#      requeued -> bitwise equal to a; a node's processes killed (as d, no spare); node 2's slurmstepd killed:
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
# bin/shardrun: LOSE_PAUSE (d, e) pauses a rank in a job's first start only
mkdir -p bin && cat >bin/shardrun <<EOF && chmod +x bin/shardrun
#!/bin/sh
[ -n "\${LOSE_PAUSE:-}" ] && [ -z "\${SHARDRUN_RESTART_CAUSE:-}" ] && export SHARDRUN_TEST_PAUSE_AT=\$LOSE_PAUSE
exec "$S" "\$@"
EOF
CMP=${SR_BUILDDIR:-.}/tests/cmp_params
export PATH="$T/bin:$PATH" OMP_WAIT_POLICY=PASSIVE

if ! CL_NODES=3 cluster2_start "$T/cl" "$$"; then
    not_ok "the three-node cluster starts"
    cluster_logs
    done_testing
    exit 0
fi
ok "three nodes start (namespaces $CL_NETNS; node1 192.168.77.11, node2 .12, node3 .13)"

STEPS=16
# mkjob NAME [YAML lines...]: NAME.yaml, checkpoints in ck_NAME
mkjob() {
    name=$1
    shift
    {
        echo "model: {preset: tiny, n_layer: 2, n_embd: 128, n_head: 4, seq_len: 64}"
        echo "train: {steps: ${JOB_STEPS:-$STEPS}, batch_size: 8, eval_every: 0}"
        echo "log: {every: 1${JOB_METRICS:+, metrics: $JOB_METRICS}}"
        echo "threads: 1"
        echo "checkpoint: {dir: $T/ck_$name, every_steps: ${JOB_EVERY:-0}${JOB_MEM:+, memory: $JOB_MEM}}"
        for l in "$@"; do echo "$l"; done
    } >"$name.yaml"
}
# submit NAME SBATCH-OPTIONS...: the CPU template with JOB=NAME.yaml; the
# final parameters to NAME.params; prints the job id
submit() {
    name=$1
    shift
    cl sbatch --parsable "$@" --cpus-per-task=1 -o "$T/$name.out" \
        --export="ALL,JOB=$T/$name.yaml,SHARDRUN_TEST_DUMP_PARAMS=$T/$name.params,SHARDRUN_MPI=${MPI_TYPE:-pmix}${XEXP:+,$XEXP}" \
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
# recovery NAME: the seconds from the loss ($t0) to the rerun's first step
# (the first step record after NAME.jsonl's second start record)
recovery() {
    awk -v t0="$t0" '/"event":"start"/ { n++; next }
        n == 2 && /^\{"step":/ { match($0, /"time":[0-9.]+/); printf "%.1f", substr($0, RSTART + 7, RLENGTH - 7) - t0; exit }' "$1.jsonl"
}
# lose NAME HOW SPARE LABEL: a job of 2 + SPARE nodes x 2 tasks (2 running,
# SPARE kept by SHARDRUN_SPARE_NODES) checkpointing every 4 of 16 steps
# loses node 2 (HOW: kill = its ranks SIGKILLed, link = its eth0 set down)
# while it saves step 12 (rank 2 pauses after writing its shard, in the
# first start only: bin/shardrun), so the newest checkpoint that verifies
# is step 8's; the template reruns the step inside the
# allocation: on node 1 and the spare (bitwise the uninterrupted 2 x 2 run
# of a), or on node 1 alone (4 -> 2 ranks, within 1e-5)
lose() {
    name=$1 how=$2 spare=$3
    JOB_STEPS=16 JOB_EVERY=4 JOB_METRICS=$T/$name.jsonl mkjob "$name" "$iface"
    XEXP="LOSE_PAUSE=after_shard_write:12@2,SHARDRUN_SPARE_NODES=$spare,SHARDRUN_STEP_GRACE=5"
    J=$(submit "$name" --nodes=$((2 + spare)) --ntasks-per-node=2 --no-requeue)
    XEXP=""
    wait_line "$name.out" "rank 2 stopped at after_shard_write" 120
    if [ "$how" = kill ]; then
        kill -9 $(node_pids 2 shardrun) 2>/dev/null
    else
        ip -n "$(node_ns 2)" link set eth0 down
    fi
    t0=$(date +%s.%N)
    st=$(job_wait "$J" "COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL" 240)
    check "$4: node 2 lost ($how) after step 8, $spare spare: node 1's ranks exit 69 naming rank 2 or 3" \
        sh -c "grep 'rank 0\]: error:' $name.out | grep -q 'rank [23]' && grep -q 'node1: tasks\{0,1\} [0-9-]*: Exited with exit code 69' $name.out" ||
        diag "$(grep -E 'srun|error' $name.out | head -8)"
    check "  ...the job goes on inside its allocation, excluding node2, and completes ($st; recovery $(recovery "$name") s)" \
        sh -c "[ '$st' = COMPLETED ] && grep -q '^== status 69 (.*, blamed node2): rerun 1 of 3 inside the allocation' $name.out &&
               grep -q '^== step on 2 of $((2 + spare)) nodes at' $name.out &&
               grep -q '^== step on $((1 + spare)) of $((2 + spare)) nodes (excluding node2) at' $name.out" ||
        show "$name"
    if [ "$how" = link ]; then
        check "  ...srun, waiting for the unreachable node's tasks, is ended SHARDRUN_STEP_GRACE (5 s) after node 1's 69" \
            grep -q '^== a task exited 69 5 s ago and srun still waits for the others: ending it$' $name.out
    fi
    if [ "$spare" = 1 ]; then
        check "  ...on node1 and the spare node3, from step 8: bitwise the uninterrupted 2 x 2 run (a)" \
            sh -c "grep -q 'rank 2/4 local 0/2 node 1 host node3 .* resume=8' $name.out && cmp -s $name.params two.params"
    else
        check "  ...on node1 alone from step 8, resharded 4 -> 2 ranks: within 1e-5 of the uninterrupted 2 x 2 run (a)" \
            sh -c "grep -q 'resume: resharded from 4 ranks (shard 4 x replicate 1) to 2 (shard 2 x replicate 1)' $name.out &&
                   '$CMP' $name.params two.params 1e-5 >/dev/null" || diag "$("$CMP" $name.params two.params 1e-5 2>&1 | tail -3)"
    fi
    check "  ...starts.jsonl: the second start records the cause, node2 and the seconds lost; ckpt list its goodput" \
        sh -c "grep -q '\"start\":2,.*\"resume_step\":8,\"cause\":\"\(exit_69\|node_fail\)\",\"blamed\":\"node2\",\"lost_s\":[0-9]' '$T/ck_$name/starts.jsonl' &&
               '$S' ckpt list '$T/ck_$name' >$name.list && grep -q '^goodput [01]\.[0-9]*: .* (16 steps; 2 starts; [0-9]* steps\{0,1\} redone)' $name.list" ||
        diag "$(cat "$T/ck_$name/starts.jsonl" "$name.list" 2>&1 | tail -8)"
    if [ "$how" = link ]; then
        ip -n "$(node_ns 2)" link set eth0 up
        w=0
        until cl sinfo -h -n node2 -o %T | grep -qx idle || [ $w -ge 60 ]; do
            sleep 1
            w=$((w + 1))
        done
    fi
}
lose killed kill 1 "d"
lose cut link 0 "e"

# --- m. the memory tier: a node lost with its memory --------------------------
# A 2 x 2 job with one spare saves to memory every 2 steps (each node's
# directory its own, $T/mem/%n: the namespace nodes share /dev/shm) and to
# checkpoint.dir every 8; node 2's ranks are killed after the memory save of
# step 10 and its memory directory removed: the rerun on node 1 and the
# spare resumes from step 10 (node 1's own files and node 2's replicas, the
# spare fetching what its ranks read), not 8, bitwise the run of a.
JOB_STEPS=16 JOB_EVERY=8 JOB_METRICS=$T/mtier.jsonl JOB_MEM="{every_steps: 2, dir: '$T/mem/%n'}" mkjob mtier "$iface"
XEXP="LOSE_PAUSE=memory_committed:10@2,SHARDRUN_SPARE_NODES=1,SHARDRUN_STEP_GRACE=5"
J=$(submit mtier --nodes=3 --ntasks-per-node=2 --no-requeue)
XEXP=""
wait_line mtier.out "rank 2 stopped at memory_committed" 120
kill -9 $(node_pids 2 shardrun) 2>/dev/null
rm -rf "$T/mem/node2"
st=$(job_wait "$J" "COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL" 240)
check "m: node 2 lost with its memory after the memory save of step 10: the job goes on inside its allocation ($st)" \
    sh -c "[ '$st' = COMPLETED ] && grep -q '^== step on 2 of 3 nodes (excluding node2) at' mtier.out" || show mtier
check "  ...from step 10 in memory, not checkpoint.dir's 8: node 2's shards from node 1's replicas, fetched by node3" \
    sh -c "grep -q 'resume: step 10 from the memory tier .*shard_00002.bin from node1, shard_00003.bin from node1; 2 files fetched' mtier.out &&
           grep -q 'rank 2/4 local 0/2 node 1 host node3 .* resume=10' mtier.out" || diag "$(grep -E 'resume|memory tier' mtier.out | tail -6)"
check "  ...bitwise the uninterrupted 2 x 2 run (a); the job's end removed the memory directories" \
    sh -c "cmp -s mtier.params two.params && [ ! -e '$T/mem/node1' ] && [ ! -e '$T/mem/node3' ]"

# --- e2. the paths that end the job: no healthy node left, the attempts
# exhausted, a world size that cannot keep the batch -------------------------
# rank_pid N R: the PID of node N's shardrun whose rank is R
rank_pid() {
    for p in $(node_pids "$1" shardrun); do
        tr '\0' '\n' </proc/"$p"/environ | grep -qx "SLURM_PROCID=$2" && echo "$p"
    done
}
# end_path NAME SHAPE [EXPORTS]: rank 1 pauses in its save of step 8 and is
# killed (SIGKILL, or SIG=ABRT: a crash); the job's state in $st
end_path() {
    name=$1
    JOB_EVERY=4 mkjob "$name" "$iface"
    [ -n "${JOB_BATCH:-}" ] && sed -i "s/batch_size: 8/batch_size: $JOB_BATCH/" "$name.yaml"
    XEXP="LOSE_PAUSE=after_shard_write:8@1${3:+,$3}"
    J=$(submit "$name" $2 --no-requeue)
    XEXP=""
    wait_line "$name.out" "rank 1 stopped at after_shard_write" 120
    node=$(sed -n "s/.*rank 1\/[0-9]* local .* host node\([0-9]\) .*/\1/p" "$name.out" | head -1)
    pid=$(rank_pid "${node:-1}" 1)
    kill -"${SIG:-KILL}" $pid 2>/dev/null
    kill -CONT $pid 2>/dev/null
    st=$(job_wait "$J" "COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL" 120)
}
end_path none "--nodes=1 --ntasks=2"
check "e2: 1 node x 2 tasks, rank 1 killed: no healthy node left, the job ends 69 ($st)" \
    sh -c "[ '$st' = FAILED ] && grep -q '^== status 69 (exit_69, blamed node1): no healthy node left in the allocation' none.out &&
           [ \$(grep -c '^== step on' none.out) = 1 ]" || show none
end_path spent "--nodes=2 --ntasks-per-node=1" "MAX_STEP_RESTARTS=0"
check "  ...2 nodes, rank 1 killed at MAX_STEP_RESTARTS=0: not rerun, the job ends 69 ($st)" \
    sh -c "[ '$st' = FAILED ] && grep -q '^== status 69 after 0 restarts inside the allocation (MAX_STEP_RESTARTS=0)' spent.out &&
           [ \$(grep -c '^== step on' spent.out) = 1 ]" || show spent
SIG=ABRT end_path crash "--nodes=2 --ntasks-per-node=1"
check "  ...2 nodes, rank 1 aborts (a crash, not a lost node): the step's own error, not rerun, the job fails ($st)" \
    sh -c "[ '$st' = FAILED ] && grep -q \"^== the step's own error (Aborted\" crash.out && [ \$(grep -c '^== step on' crash.out) = 1 ]" ||
    show crash
JOB_BATCH=3 end_path split "--nodes=3 --ntasks-per-node=1"
check "  ...3 nodes x 1 task, batch_size 3, node 2's rank killed: the rerun on 2 nodes ends 78 naming batch_size, micro_batch and the 2 ranks ($st)" \
    sh -c "[ '$st' = FAILED ] && grep -q '^== step on 2 of 3 nodes (excluding node2)' split.out && grep -q '^== shardrun exited 78' split.out &&
           grep 'error: .*train.batch_size (3) does not split evenly over the 2 data-parallel ranks' split.out | grep -q micro_batch" || show split

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
# (every rank exits 69 on the protocol error: the template knows it for the
# step's own error and does not rerun it)
mkjob fl "$iface"
J=$(cl sbatch --parsable --nodes=2 --ntasks-per-node=2 --cpus-per-task=1 --no-requeue -o "$T/fl.out" \
    --export="ALL,JOB=$T/fl.yaml,SHARDRUN_TEST_MISMATCH_SEQ=45@3" "$TEMPLATES/shardrun-cpu.sbatch")
st=$(job_wait "$J" "COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL" 120)
n=$(ls "$T/ck_fl/flight/$J.0" 2>/dev/null | grep -c '^rank[0-3].json$')
check "g: rank 3 mismatches collective 45: the job fails ($st), every rank dumps its flight recorder ($n of 4)" \
    sh -c "[ '$st' = FAILED ] && [ $n -eq 4 ]" || show fl
check "  ...the template does not rerun the step: its own error (a protocol error)" \
    sh -c "grep -q \"^== the step's own error (a protocol error): not rerun\" fl.out && [ \$(grep -c '^== step on' fl.out) = 1 ]" || show fl
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
    lose killed2 kill 0 "h (pmi2)"
    launcher_lost stepd2 "h (pmi2)"
    unset MPI_TYPE
fi
done_testing
