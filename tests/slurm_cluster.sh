# slurm_cluster.sh — a private single-node Slurm 22.05 cluster for the test
# suite (sourced), entirely inside one directory: its own munge daemon, key
# and socket; its own slurm.conf (SLURM_CONF) with free ports; state, spool,
# log and PID files; four fake GPUs as character devices (GRES); partitions
# debug (preemptible, requeued) and urgent.  Nothing is written to /etc and
# every daemon is stopped by the PID it recorded.  Follows a recipe
# verified on a real Debian 12 Slurm + PMIx cluster.
#
#   cluster_start DIR   starts munged, slurmctld, slurmd; waits (bounded) for
#                       the node to be idle; exports SLURM_CONF
#   cluster_stop        cancels every job, waits for them (bounded), stops
#                       slurmd, slurmctld and munged by PID
#   cluster_logs        prints the tails of the daemons' logs
#   job_wait JOBID STATES SECONDS   waits until the job's state is one of
#                       STATES (e.g. "COMPLETED|FAILED"); prints it; 1 on timeout
#   wait_line FILE PATTERN SECONDS  waits until a line of FILE matches
#
# Two nodes on one machine (cluster2_start DIR TAG): each node a network
# namespace (srnN_TAG) with its own slurmd started as `slurmd -N nodeN`
# (slurmd(8) says -N needs --enable-multiple-slurmd; Debian 12's 22.05.8
# accepts it, and each daemon has its own network namespace, so ports do
# not clash; should -N fail, the node gets a UTS namespace of its own with
# hostname nodeN instead), joined by veth pairs to
# a bridge that lives in a third namespace (srbr_TAG) with slurmctld on it;
# one /24 (192.168.77.0/24), no default route, nothing added to the root
# namespace.  munged is shared (a Unix socket: namespaces share the file
# system, as nodes share a parallel file system).  %n in SlurmdSpoolDir,
# SlurmdPidFile, SlurmdLogFile and TmpFS (the PMIx plugin's client
# directory) keeps the nodes apart.  Client commands run on the bridge
# through cl (cl sbatch ...).  cluster_stop also deletes the namespaces.
#   cluster2_start DIR TAG   as cluster_start, for node1 and node2 (node1
#                       to nodeN with CL_NODES=N, at most 9); with
#                       CL_GPUS=N each node has N fake GPUs (GRES, the
#                       same character devices: nodes share one machine)
#   cluster2_need KIND [PROGRAM...]   its prerequisites (root, iproute2,
#                       util-linux, Slurm, munge, the PROGRAMs, a network
#                       namespace made and deleted), else the script
#                       skips (require_or_skip KIND: a failure when
#                       SHARDRUN_TEST_REQUIRE names KIND)
#   cl CMD...                runs CMD where slurmctld is reachable
#   node_ns N                the network namespace of node N

# The first job id of a cluster, its own: Slurm's PMIx plugin keeps
# /tmp/spmix_appdir_<uid>_<job>.<step>, which a cluster killed earlier may
# have left behind, and a step whose job id meets one fails to launch
# ("File exists").
cluster_first_job_id() { echo $(( ($$ * 7919 + $(date +%s)) % 50000000 + 1000 )); }
cluster_free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

cluster_start() {
    CL=$1
    mkdir -p "$CL/ctld" "$CL/d" "$CL/log" "$CL/run" "$CL/munge" "$CL/gpu" || return 1
    chmod 0700 "$CL/munge"
    dd if=/dev/urandom of="$CL/munge/munge.key" bs=1024 count=1 status=none && chmod 0400 "$CL/munge/munge.key"
    /usr/sbin/munged --socket="$CL/munge/sock" --key-file="$CL/munge/munge.key" --pid-file="$CL/munge/pid" \
        --log-file="$CL/munge/log" --seed-file="$CL/munge/seed" --force || return 1
    host=$(hostname -s)
    for i in 0 1 2 3; do mknod "$CL/gpu/gpu$i" c 1 3 || return 1; done
    cat >"$CL/slurm.conf" <<EOF
ClusterName=shardruntest
SlurmctldHost=$host(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$CL/munge/sock,cred_expire=10
SlurmctldPort=$(cluster_free_port)
SlurmdPort=$(cluster_free_port)
StateSaveLocation=$CL/ctld
FirstJobId=$(cluster_first_job_id)
SlurmdSpoolDir=$CL/d
SlurmctldPidFile=$CL/run/slurmctld.pid
SlurmdPidFile=$CL/run/slurmd.pid
SlurmctldLogFile=$CL/log/slurmctld.log
SlurmdLogFile=$CL/log/slurmd.log
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerParameters=sched_interval=2,bf_interval=2
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
ReturnToService=2
MpiDefault=none
GresTypes=gpu
KillWait=5
OverTimeLimit=0
MinJobAge=300
JobRequeue=1
RequeueExit=75
PreemptType=preempt/partition_prio
PreemptMode=REQUEUE
SlurmctldParameters=preempt_send_user_signal
NodeName=$host NodeAddr=127.0.0.1 CPUs=4 Sockets=1 CoresPerSocket=4 ThreadsPerCore=1 RealMemory=4000 Gres=gpu:4 State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP PriorityTier=1 PreemptMode=REQUEUE GraceTime=10
PartitionName=urgent Nodes=ALL MaxTime=INFINITE State=UP PriorityTier=10 PreemptMode=OFF
EOF
    cat >"$CL/gres.conf" <<EOF
AutoDetect=off
NodeName=$host Name=gpu File=$CL/gpu/gpu[0-3]
EOF
    export SLURM_CONF="$CL/slurm.conf"
    /usr/sbin/slurmctld -f "$SLURM_CONF" || return 1
    /usr/sbin/slurmd -f "$SLURM_CONF" || return 1
    i=0
    while [ $i -lt 300 ]; do
        sinfo -h -N -o %T 2>/dev/null | grep -qx idle && return 0
        sleep 0.1
        i=$((i + 1))
    done
    echo "# the node did not become idle within 30 s" >&2
    return 1
}

cluster_logs() {
    for f in "$CL/log/slurmctld.log" "$CL"/log/slurmd*.log "$CL/munge/log"; do
        [ -f "$f" ] && { echo "# == tail $f"; tail -15 "$f" | sed 's/^/# /'; }
    done
}

# stops the process recorded in a PID file; waits up to 10 s
cluster_kill_pidfile() {
    [ -s "$1" ] || return 0
    p=$(cat "$1")
    kill "$p" 2>/dev/null || return 0
    i=0
    while kill -0 "$p" 2>/dev/null && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
    kill -9 "$p" 2>/dev/null
    return 0
}

cluster_stop() {
    [ -n "${CL:-}" ] || return 0
    if [ -s "$CL/run/slurmctld.pid" ]; then
        cl scancel --full -u root 2>/dev/null
        i=0
        while [ -n "$(cl squeue -h -o %i 2>/dev/null)" ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
    fi
    for f in "$CL"/run/slurmd*.pid; do cluster_kill_pidfile "$f"; done
    cluster_kill_pidfile "$CL/run/slurmctld.pid"
    cluster_kill_pidfile "$CL/munge/pid"
    for ns in ${CL_NETNS:-}; do ip netns del "$ns" 2>/dev/null; done
    CL_NETNS=""
}

# the single-node cluster runs its clients as they are; cluster2_start
# points cl at the bridge's namespace
CL_EXEC=""
cl() { $CL_EXEC "$@"; }
node_ns() { echo "srn$1_$CL_TAG"; }

cluster2_need() {
    kind=$1
    shift
    [ "$(id -u)" = 0 ] || require_or_skip "$kind" "two nodes in network namespaces need root"
    for b in ip nsenter unshare /usr/sbin/munged /usr/sbin/slurmctld /usr/sbin/slurmd sbatch srun scontrol squeue sinfo "$@"; do
        command -v "$b" >/dev/null 2>&1 ||
            require_or_skip "$kind" "$b not found (apt-get install iproute2 util-linux slurm-wlm slurmctld slurmd slurm-client munge)"
    done
    ip netns add "srprobe_$$" 2>/dev/null && ip netns del "srprobe_$$" ||
        require_or_skip "$kind" "cannot create a network namespace here (ip netns add)"
}

cluster2_start() {
    CL=$1 CL_TAG=$2
    CL_N=${CL_NODES:-2}
    nodes_seq=$(seq 1 "$CL_N")
    mkdir -p "$CL/ctld" "$CL/log" "$CL/run" "$CL/munge" || return 1
    for i in $nodes_seq; do mkdir -p "$CL/d/node$i" "$CL/tmp/node$i" || return 1; done
    chmod 0700 "$CL/munge"
    dd if=/dev/urandom of="$CL/munge/munge.key" bs=1024 count=1 status=none && chmod 0400 "$CL/munge/munge.key"
    /usr/sbin/munged --socket="$CL/munge/sock" --key-file="$CL/munge/munge.key" --pid-file="$CL/munge/pid" \
        --log-file="$CL/munge/log" --seed-file="$CL/munge/seed" --force || return 1
    br="srbr_$CL_TAG"
    CL_NETNS="$br"
    for i in $nodes_seq; do CL_NETNS="$CL_NETNS $(node_ns $i)"; done
    for ns in $CL_NETNS; do ip netns add "$ns" || return 1; done
    ip -n "$br" link add br0 type bridge &&
        ip -n "$br" addr add 192.168.77.1/24 dev br0 &&
        ip -n "$br" link set br0 up && ip -n "$br" link set lo up || return 1
    for i in $nodes_seq; do
        ns=$(node_ns $i)
        ip -n "$br" link add "h$i" type veth peer name eth0 netns "$ns" &&
            ip -n "$br" link set "h$i" master br0 up &&
            ip -n "$ns" addr add "192.168.77.1$i/24" dev eth0 &&
            ip -n "$ns" link set eth0 up && ip -n "$ns" link set lo up || return 1
    done
    CL_EXEC="nsenter --net=/run/netns/$br"
    host=$(hostname -s)
    gres="" gpus=""
    if [ "${CL_GPUS:-0}" -gt 0 ]; then
        mkdir -p "$CL/gpu" || return 1
        i=0
        while [ $i -lt "$CL_GPUS" ]; do mknod "$CL/gpu/gpu$i" c 1 3 || return 1; i=$((i + 1)); done
        gres="GresTypes=gpu" gpus="Gres=gpu:$CL_GPUS"
        printf 'AutoDetect=off\nNodeName=node[1-%d] Name=gpu File=%s/gpu/gpu[0-%d]\n' "$CL_N" "$CL" $((CL_GPUS - 1)) >"$CL/gres.conf"
    fi
    cat >"$CL/slurm.conf" <<CONF
ClusterName=shardruntwo
SlurmctldHost=$host(192.168.77.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$CL/munge/sock,cred_expire=10
SlurmctldPort=6817
SlurmdPort=6818
StateSaveLocation=$CL/ctld
FirstJobId=$(cluster_first_job_id)
SlurmdSpoolDir=$CL/d/%n
TmpFS=$CL/tmp/%n
SlurmctldPidFile=$CL/run/slurmctld.pid
SlurmdPidFile=$CL/run/slurmd.%n.pid
SlurmctldLogFile=$CL/log/slurmctld.log
SlurmdLogFile=$CL/log/slurmd.%n.log
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerParameters=sched_interval=2,bf_interval=2
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
ReturnToService=2
MpiDefault=none
$gres
KillWait=5
OverTimeLimit=0
MinJobAge=300
JobRequeue=1
RequeueExit=75
SlurmdTimeout=10
MessageTimeout=5
CONF
    for i in $nodes_seq; do
        echo "NodeName=node$i NodeAddr=192.168.77.1$i CPUs=4 Sockets=1 CoresPerSocket=4 ThreadsPerCore=1 RealMemory=4000 $gpus State=UNKNOWN"
    done >>"$CL/slurm.conf"
    echo "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP" >>"$CL/slurm.conf"
    export SLURM_CONF="$CL/slurm.conf"
    cl /usr/sbin/slurmctld -f "$SLURM_CONF" || return 1
    # nsenter, not ip netns exec: that one remounts /sys, hiding the cgroup
    # file system slurmd insists on
    for i in $nodes_seq; do
        nsenter --net="/run/netns/$(node_ns $i)" /usr/sbin/slurmd -N "node$i" -f "$SLURM_CONF" ||
            nsenter --net="/run/netns/$(node_ns $i)" unshare --uts \
                sh -c "hostname node$i && exec /usr/sbin/slurmd -f '$SLURM_CONF'" || return 1
    done
    i=0
    while [ $i -lt 300 ]; do
        [ "$(cl sinfo -h -N -o %T 2>/dev/null | grep -cx idle)" -eq "$CL_N" ] && return 0
        sleep 0.1
        i=$((i + 1))
    done
    echo "# the $CL_N nodes did not become idle within 30 s" >&2
    return 1
}

# wait_line FILE PATTERN SECONDS: waits (bounded) until a line of FILE
# matches PATTERN (grep's); 1 on timeout
wait_line() {
    w=0
    until grep -q "$2" "$1" 2>/dev/null; do
        [ $w -ge $(($3 * 10)) ] && return 1
        sleep 0.1
        w=$((w + 1))
    done
}
job_state() { cl scontrol show job "$1" 2>/dev/null | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p'; }

job_wait() {
    id=$1 want=$2 limit=$3
    start=$(date +%s)
    while [ $(($(date +%s) - start)) -lt "$limit" ]; do
        st=$(job_state "$id")
        if echo "$st" | grep -Eqx "$want"; then
            echo "$st"
            return 0
        fi
        sleep 0.5
    done
    echo "${st:-unknown}"
    return 1
}
