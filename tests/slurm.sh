#!/bin/sh
# slurm.sh — shardrun under real Slurm daemons (a private single-node
# cluster started inside the test's temporary directory, tests/slurm_cluster.sh),
# driven through the sbatch templates in slurm/:
#   a. 4 tasks, scancel --signal=USR1 mid-run -> agreed step -> checkpoint ->
#      requeue (RequeueExit=75, and preemption.requeue: scontrol) -> rerun
#      with SLURM_RESTART_COUNT=1 -> final parameters bitwise equal to an
#      uninterrupted run; the metrics file's events across the requeue and
#      `shardrun report` of it
#   b. preemption by a job in the higher-priority partition -> same
#   c. a time-limit warning (--time=1 --signal=USR1@20) -> checkpoint before
#      the kill -> resume
#   d. resume on another task count (4 tasks, then 2)
#   e. fake GPUs with --gpus-per-task=1: each task picks the GPU of its
#      CUDA_VISIBLE_DEVICES
#   f. scancel --full --signal=KILL, resubmission -> resume from the last
#      periodic checkpoint
#   g. srun without --mpi=pmix -> one error, status 78
#   i. a time limit without a signal (preemption.before_end): --time=1, no
#      --signal, a small end_margin_s: rank 0 reads the end time, the ranks
#      save and exit 75 before the kill; the requeued job resumes and ends
#      bitwise equal to an uninterrupted run
#   j. the job comment (slurm.comment_every_minutes): squeue -o %k and
#      scontrol show job read back the step/total, loss, checkpoint and ETA
#   q. the CPU template with SHARDRUN_MPI=pmi2: scancel --signal=USR1 -> 75
#      -> requeue -> resume, bitwise
#   p. srun --mpi=pmi2 (Slurm's PMI2, libpmi2 loaded at run time): 2 tasks
#      bootstrap through it and end bitwise equal to the same run under
#      --mpi=pmix
# The fast tier runs the reference, a (exit), g, j and p; the long tier all.
# Needs root and Debian's slurm-wlm, slurmctld, slurmd, slurm-client and
# munge; every wait is bounded, and a failure prints the job's output and the
# daemons' log tails.
. "${SR_SRCDIR:-.}/tests/tap.sh"
. "${SR_SRCDIR:-.}/tests/slurm_cluster.sh"
S=$SHARDRUN
CMP=${SR_BUILDDIR:-.}/tests/cmp_params
TEMPLATES=$SR_SRCDIR/slurm
[ "$(id -u)" = 0 ] || require_or_skip slurm "the private Slurm cluster needs root (its daemons run as root)"
for b in /usr/sbin/munged /usr/sbin/slurmctld /usr/sbin/slurmd sbatch srun scontrol scancel squeue sinfo python3; do
    command -v "$b" >/dev/null 2>&1 ||
        require_or_skip slurm "$b not found (apt-get install slurm-wlm slurmctld slurmd slurm-client munge python3)"
done
cd "$T" || exit 99
trap 'cluster_stop; rm -rf "$T"' EXIT
trap 'exit 1' INT TERM
mkdir -p bin && ln -s "$S" bin/shardrun
export PATH="$T/bin:$PATH"

if ! cluster_start "$T/cl"; then
    not_ok "the private Slurm cluster starts"
    cluster_logs
    done_testing
    exit 0
fi
ok "the private Slurm cluster starts (own munged, slurmctld, slurmd, SLURM_CONF=$SLURM_CONF)"

STEPS=120
# mkjob NAME [YAML lines...]: a job file NAME.yaml with its own checkpoint
# dir; $TRAIN (a flow mapping) replaces the train section, $CKPT the checkpoint one
mkjob() {
    name=$1
    shift
    {
        echo "model: {preset: tiny, n_layer: 2, n_embd: 128, n_head: 4, seq_len: 128}"
        echo "train: ${TRAIN:-{steps: $STEPS, batch_size: 8\}}"
        echo "log: {every: 1, metrics: $T/$name.jsonl}"
        echo "threads: 1"
        echo "checkpoint: ${CKPT:-{dir: $T/ck_$name, every_steps: 0\}}"
        for l in "$@"; do echo "$l"; done
    } >"$name.yaml"
    unset TRAIN CKPT # (sh may keep assignments made before a function call)
}
# submit NAME TEMPLATE [sbatch options...]: prints the job id
submit() {
    name=$1 tpl=$2
    shift 2
    sbatch --parsable -N 1 --ntasks-per-node=4 --cpus-per-task=1 -o "$T/$name.out" \
        --export="ALL,JOB=$T/$name.yaml,SHARDRUN_TEST_DUMP_PARAMS=$T/$name.params" "$@" "$TEMPLATES/$tpl"
}
# wait_for FILE REGEX SECONDS
wait_for() {
    i=0
    while [ $i -lt $(($3 * 5)) ]; do
        grep -Eq "$2" "$1" 2>/dev/null && return 0
        sleep 0.2
        i=$((i + 1))
    done
    return 1
}
failure() { # NAME: the job's output and the daemons' logs
    diag "== $1.out (last 30 lines)" "$(tail -30 "$T/$1.out" 2>/dev/null)"
    cluster_logs
}
# result NAME DESC CMD...: check, and on failure show the job
result() {
    name=$1 desc=$2
    shift 2
    if "$@"; then ok "$desc"; else not_ok "$desc"; failure "$name"; fi
}

# the reference: one uninterrupted 4-task run under srun --mpi=pmix (every
# group compares with it)
mkjob ref
timeout 300 env SHARDRUN_TEST_DUMP_PARAMS="$T/ref.params" srun --mpi=pmix -n 4 shardrun train ref.yaml >ref.out 2>&1
result ref "reference: $STEPS steps on 4 tasks under srun --mpi=pmix" test $? -eq 0
result ref "  srun gives every task its rank: 4 start lines, one per rank" \
    sh -c "[ \$(grep -c 'rank [0-3]/4 local [0-3]/4 .*restart=0 resume=fresh' ref.out) -eq 4 ]"

# a. scancel --signal=USR1 -> 75 -> RequeueExit=75 -> resume, bitwise
for mode in exit scontrol; do
    if [ $mode = exit ]; then group "a (exit)"; else group --long "a (scontrol)"; fi || continue
    n=a_$mode
    mkjob $n "preemption: {requeue: $mode}"
    J=$(submit $n shardrun-cpu.sbatch --requeue)
    wait_for $n.out "step +6/$STEPS" 120
    scancel --signal=USR1 "$J"
    st=$(job_wait "$J" "COMPLETED|FAILED|CANCELLED|TIMEOUT" 240)
    result $n "a ($mode): job $J ends COMPLETED after the requeue (state $st)" test "$st" = COMPLETED
    stop=$(sed -n 's/.*agreed to stop after step \([0-9]*\).*/\1/p' $n.out | head -1)
    result $n "  all 4 ranks agreed on a step ($stop) and saved it" \
        sh -c "[ -n '$stop' ] && grep -q 'step $stop saved' $n.out && [ \$(grep -c 'received SIGUSR1' $n.out) -ge 1 ]"
    if [ $mode = exit ]; then
        result $n "  the first run exited 75 and the template passed it to Slurm" grep -q "== shardrun exited 75" $n.out
    else
        result $n "  rank 0 ran scontrol requeue $J" grep -q "scontrol requeue $J: requested" $n.out
    fi
    result $n "  the rerun has SLURM_RESTART_COUNT=1 and resumed from step $stop on every rank" \
        sh -c "grep -q '== job $J run 1' $n.out && [ \$(grep -c 'restart=1 resume=$stop\$' $n.out) -eq 4 ]"
    result $n "  Slurm counts one restart" sh -c "scontrol show job $J | grep -q 'Restarts=1'"
    result $n "  final parameters are bitwise those of the uninterrupted run" cmp -s $n.params ref.params
    if [ $mode = exit ]; then
        # the metrics file of a preemption, a requeue and a resume, as a report
        result $n "  the metrics file has both runs' start events (restart 0 and 1), the preemption, its checkpoint and the resume" \
            python3 -c "
import json, sys
ev = [json.loads(l) for l in open('$n.jsonl') if '\"event\"' in l]
st = [e for e in ev if e['event'] == 'start']
assert [(e['restart'], e['job_id'], e['world_size']) for e in st] == [(0, '$J', 4), (1, '$J', 4)], st
pre = [e for e in ev if e['event'] == 'preempt']
assert len(pre) == 1 and pre[0]['signal'] == 'SIGUSR1' and pre[0]['step'] == $stop, pre
assert [e['resume_step'] for e in st] == [0, $stop]
assert any(e['event'] == 'checkpoint' and e['committed_step'] == $stop for e in ev)
assert [e['from'].endswith('step_%08d' % $stop) for e in ev if e['event'] == 'resume'] == [True]
"
        shardrun report $n.jsonl -o $n.html >$n.report 2>&1
        result $n "  shardrun report draws it: one point per step record" \
            python3 "$SR_SRCDIR/tests/report_check.py" points $n.jsonl $n.html
        result $n "  one event-KIND element per event" python3 "$SR_SRCDIR/tests/report_check.py" events $n.jsonl $n.html
        result $n "  the summary, time lost to the preemption included" \
            python3 "$SR_SRCDIR/tests/report_check.py" summary $n.jsonl $n.report
    fi
done

# b. preemption by a job in the urgent partition
if group --long "b: preemption"; then
n=b_preempt
mkjob $n
J=$(submit $n shardrun-cpu.sbatch --requeue --signal=USR1@600)
wait_for $n.out "step +6/$STEPS" 120
U=$(sbatch --parsable -p urgent -n 4 -o "$T/urgent.out" --wrap "sleep 3")
st=$(job_wait "$J" "COMPLETED|FAILED|CANCELLED|TIMEOUT" 300)
result $n "b: the preempted job $J ends COMPLETED after the urgent job $U (state $st)" test "$st" = COMPLETED
result $n "  it got USR1 at preemption and saved before SIGTERM" \
    sh -c "grep -q 'received SIGUSR1' $n.out && grep -q 'exiting with status 75' $n.out"
ust=$(job_state "$U")
result $n "  the urgent job ran ($ust)" test "$ust" = COMPLETED
result $n "  the rerun resumed (restart=1) and ended bitwise equal" \
    sh -c "grep -q 'restart=1 resume=[0-9]' $n.out && cmp -s $n.params ref.params"

fi

# c. a time-limit warning: --time=1 --signal=USR1@20 (Slurm sends it up to ~30 s early)
if group --long "c: time-limit warning"; then
n=c_timelimit
TRAIN="{steps: 1000000, batch_size: 8, schedule: constant}" mkjob $n
J=$(submit $n shardrun-cpu.sbatch --requeue --time=1 --signal=USR1@20)
if wait_for $n.out "exiting with status 75" 100; then
    stop=$(sed -n 's/.*agreed to stop after step \([0-9]*\).*/\1/p' $n.out | head -1)
    ok "c: the warning came before the time limit and the job saved step $stop and exited 75"
    # finish 4 steps after the checkpoint; the constant schedule keeps the learning rate of every step
    final=$((stop + 4))
    TRAIN="{steps: $final, batch_size: 8, schedule: constant}" mkjob $n
    st=$(job_wait "$J" "COMPLETED|FAILED|CANCELLED|TIMEOUT" 200)
    result $n "  the requeued job resumed and ends COMPLETED (state $st)" \
        sh -c "[ '$st' = COMPLETED ] && grep -q 'restart=1 resume=$stop' $n.out"
    result $n "  no time-limit kill came before the checkpoint" sh -c "! grep -q 'DUE TO TIME LIMIT' $n.out"
    TRAIN="{steps: $final, batch_size: 8, schedule: constant}" mkjob cref
    timeout 300 env SHARDRUN_TEST_DUMP_PARAMS="$T/cref.params" srun --mpi=pmix -n 4 shardrun train cref.yaml >cref.out 2>&1
    result $n "  final parameters equal an uninterrupted $final-step run, bitwise" cmp -s $n.params cref.params
else
    not_ok "c: the warning came before the time limit and the job saved and exited 75"
    failure $n
    scancel "$J"
fi

fi

# d. resume on another task count: 4 tasks, then 2
if group --long "d: resume on 2 tasks"; then
n=d_reshard
mkjob $n
J=$(submit $n shardrun-cpu.sbatch --no-requeue)
wait_for $n.out "step +6/$STEPS" 120
scancel --signal=USR1 "$J"
wait_for $n.out "== shardrun exited" 120
scancel "$J" 2>/dev/null # RequeueExit may have queued it again: this test resubmits instead
stop=$(sed -n 's/.*agreed to stop after step \([0-9]*\).*/\1/p' $n.out | head -1)
result $n "d: 4 tasks stop at step $stop with 75" grep -q "== shardrun exited 75" $n.out
n2=d_two
cp $n.yaml $n2.yaml
J2=$(sbatch --parsable -N 1 --ntasks-per-node=2 --cpus-per-task=1 -o "$T/$n2.out" \
    --export="ALL,JOB=$T/$n2.yaml,SHARDRUN_TEST_DUMP_PARAMS=$T/$n2.params" "$TEMPLATES/shardrun-cpu.sbatch")
st=$(job_wait "$J2" "COMPLETED|FAILED|CANCELLED|TIMEOUT" 240)
result $n2 "  2 tasks resume it (resharded 4 -> 2) and finish (state $st)" \
    sh -c "[ '$st' = COMPLETED ] && grep -q 'resharded from 4 ranks' $n2.out && [ \$(grep -c 'resume=$stop' $n2.out) -eq 2 ]"
result $n2 "  parameters within 1e-5 x max of the uninterrupted 4-task run" "$CMP" $n2.params ref.params 1e-5

fi

# e. fake GPUs: --gpus-per-task=1 gives each task its own CUDA_VISIBLE_DEVICES.
# The template asks for device=cuda, so on GPUs nobody can use the job fails
# at once (78) instead of crawling on the CPU; with SHARDRUN_DEVICE=auto it
# trains on the CPU and logs the GPU each task would have picked.
if group --long "e: fake GPUs"; then
n=e_gpu
TRAIN="{steps: 1, batch_size: 8}" mkjob $n
J=$(sbatch --parsable -N 1 --ntasks-per-node=4 --gpus-per-task=1 --cpus-per-task=1 -o "$T/$n.out" \
    --export="ALL,JOB=$T/$n.yaml" "$TEMPLATES/shardrun-gpu.sbatch")
st=$(job_wait "$J" "COMPLETED|FAILED|CANCELLED|TIMEOUT" 120)
result $n "e: the GPU template fails fast where no GPU is usable (state $st, expected FAILED)" \
    sh -c "[ '$st' = FAILED ] && grep -Eq 'device: cuda(, but no usable GPU|, but this shardrun was built without CUDA| with 4 ranks needs NCCL)' $n.out"
n=e_gpu_auto
TRAIN="{steps: 1, batch_size: 8}" mkjob $n
J=$(sbatch --parsable -N 1 --ntasks-per-node=4 --gpus-per-task=1 --cpus-per-task=1 -o "$T/$n.out" \
    --export="ALL,JOB=$T/$n.yaml,SHARDRUN_DEVICE=auto" "$TEMPLATES/shardrun-gpu.sbatch")
st=$(job_wait "$J" "COMPLETED|FAILED|CANCELLED|TIMEOUT" 120)
result $n "e: with SHARDRUN_DEVICE=auto it runs with --gpus-per-task=1 (state $st)" test "$st" = COMPLETED
picks=$(sed -n 's/.*rank \([0-3]\)\/4 .*would pick GPU \([0-9]*\), ordinal 0, from CUDA_VISIBLE_DEVICES=\([0-9]*\);.*/\1 \2 \3/p' $n.out)
result $n "  each task picks the GPU its CUDA_VISIBLE_DEVICES names, all 4 different" \
    sh -c "[ \$(echo '$picks' | awk '\$2 == \$3' | wc -l) -eq 4 ] && [ \$(echo '$picks' | awk '{ print \$2 }' | sort -u | wc -l) -eq 4 ]"
diag "$picks"

fi

# f. a hard kill without warning, then a resubmission resumes from the last periodic checkpoint
if group --long "f: hard kill"; then
n=f_kill
# (only USR1 is a preemption signal here: the SIGTERM with which slurmstepd
# ends the step after the batch shell's SIGKILL would otherwise be a warning)
CKPT="{dir: $T/ck_$n, every_steps: 5}" mkjob $n "preemption: {signals: [USR1]}"
J=$(submit $n shardrun-cpu.sbatch --no-requeue)
wait_for $n.out "step 10 saved" 120
scancel --full --signal=KILL "$J"
st=$(job_wait "$J" "FAILED|CANCELLED|COMPLETED|TIMEOUT|OUT_OF_MEMORY" 120)
result $n "f: scancel --full --signal=KILL ends job $J ($st) before it finished, without a save" \
    sh -c "! grep -q 'done: ' $n.out && ! grep -q 'preemption: .*saved\|agreed to stop' $n.out"
last=$(ls "ck_$n" | sed -n 's/^step_0*\([0-9][0-9]*\)$/\1/p' | sort -n | tail -1)
n2=f_again
cp $n.yaml $n2.yaml
J2=$(submit $n2 shardrun-cpu.sbatch)
st=$(job_wait "$J2" "COMPLETED|FAILED|CANCELLED|TIMEOUT" 240)
result $n2 "  the resubmitted job resumes from the last periodic checkpoint (step $last) and completes ($st)" \
    sh -c "[ '$st' = COMPLETED ] && [ \$(grep -c 'resume=$last\$' $n2.out) -eq 4 ] && [ \$(($last % 5)) -eq 0 ]"
result $n2 "  final parameters bitwise equal the uninterrupted run" cmp -s $n2.params ref.params

fi

# g. srun without --mpi=pmix: one clear error, status 78, not four runs
if group "g: srun without --mpi=pmix"; then
timeout 120 srun -n 4 shardrun train ref.yaml >g.out 2>&1
rc=$?
result g "g: srun -n 4 without --mpi=pmix exits 78 (srun: $rc)" test "$rc" -eq 78
result g "  with one error message, and no training" \
    sh -c "[ \$(grep -c 'launched by srun without --mpi=pmix' g.out) -eq 1 ] && ! grep -Eq 'step +[0-9]+/' g.out"

fi

# i. the save before the time limit, without a signal
if group --long "i: time limit without a signal"; then
n=i_end
TRAIN="{steps: 1000000, batch_size: 8, schedule: constant}" mkjob $n "preemption: {end_margin_s: 8}"
sed '/^#SBATCH --signal/d' "$TEMPLATES/shardrun-cpu.sbatch" >nosignal.sbatch # no --signal at all
J=$(TEMPLATES=$T submit $n nosignal.sbatch --requeue --time=1)
if wait_for $n.out "exiting with status 75" 100; then
    stop=$(sed -n 's/.*agreed to stop after step \([0-9]*\): the job.s time limit is near.*/\1/p' $n.out | head -1)
    result $n "i: rank 0 read the end time, and the ranks stopped for it at step $stop, saved and exited 75" \
        sh -c "[ -n '$stop' ] && grep -q 'preemption.before_end: job $J ends at ' $n.out && grep -q 'step $stop saved' $n.out && ! grep -q 'received SIG' $n.out"
    final=$((stop + 4))
    TRAIN="{steps: $final, batch_size: 8, schedule: constant}" mkjob $n "preemption: {end_margin_s: 8}"
    st=$(job_wait "$J" "COMPLETED|FAILED|CANCELLED|TIMEOUT" 200)
    result $n "  the requeued job re-read its end time, resumed and ends COMPLETED (state $st)" \
        sh -c "[ '$st' = COMPLETED ] && grep -q 'restart=1 resume=$stop' $n.out && [ \$(grep -c 'preemption.before_end: job $J ends at ' $n.out) -eq 2 ]"
    result $n "  no time-limit kill" sh -c "! grep -q 'DUE TO TIME LIMIT' $n.out"
    TRAIN="{steps: $final, batch_size: 8, schedule: constant}" mkjob iref
    timeout 300 env SHARDRUN_TEST_DUMP_PARAMS="$T/iref.params" srun --mpi=pmix -n 4 shardrun train iref.yaml >iref.out 2>&1
    result $n "  final parameters equal an uninterrupted $final-step run, bitwise" cmp -s $n.params iref.params
else
    not_ok "i: the ranks saved before the time limit and exited 75"
    failure $n
    scancel "$J"
fi
fi

# j. the job comment, read back from Slurm
if group "j: job comment"; then
n=j_comment
TRAIN="{steps: 1000000, batch_size: 8}" CKPT="{dir: $T/ck_$n, every_steps: 5}" mkjob $n \
    "slurm: {comment_every_minutes: 0.02}"
J=$(submit $n shardrun-cpu.sbatch --no-requeue)
got=
i=0
while [ $i -lt 300 ] && [ -z "$got" ]; do
    c=$(squeue -h -j "$J" -o %k 2>/dev/null)
    case "$c" in *"ckpt 5"* | *"ckpt 1"[05]*) got=$c ;; esac
    sleep 0.2
    i=$((i + 1))
done
result $n "j: squeue -o %k shows rank 0's comment with a checkpoint: '$got'" \
    sh -c "echo '$got' | grep -Eq '^shardrun step [0-9]+/1000000 loss [0-9]+\\.[0-9]{4} ckpt [0-9]+ eta [0-9:-]+\$'"
result $n "  scontrol show job has it too" sh -c "scontrol show job $J | grep -q 'Comment=shardrun step '"
scancel "$J"
job_wait "$J" "COMPLETED|FAILED|CANCELLED|TIMEOUT" 60 >/dev/null
result $n "  no warning about the comment" sh -c "! grep -q 'the job comment' $n.out"
fi

# p. PMI2: the same 2-task run under --mpi=pmix and --mpi=pmi2
if group "p: srun --mpi=pmi2"; then
if ! have_libpmi2; then
    skip_or_fail pmi2 "p: Slurm's libpmi2.so.0 is not installed (apt-get install libpmi2-0)"
else
for mpi in pmix pmi2; do
    TRAIN="{steps: 12, batch_size: 8}" mkjob p_$mpi
    timeout 120 env SHARDRUN_TEST_DUMP_PARAMS="$T/p_$mpi.params" srun --mpi=$mpi -n 2 shardrun train p_$mpi.yaml \
        >p_$mpi.out 2>&1
    result p_$mpi "p: 2 tasks under srun --mpi=$mpi train 12 steps (exit $?)" grep -q "done: 12 steps" p_$mpi.out
done
result p_pmi2 "  both start lines name the PMI2 bootstrap, ranks 0/2 and 1/2, local ranks 0/2 and 1/2" \
    sh -c "[ \$(grep -Ec 'rank ([01])/2 local \\1/2 node 0 .* bootstrap pmi2 transport ' p_pmi2.out) -eq 2 ]"
result p_pmix "  (and under --mpi=pmix: bootstrap pmix)" \
    sh -c "[ \$(grep -c 'rank [01]/2 local [01]/2 .* bootstrap pmix transport ' p_pmix.out) -eq 2 ]"
result p_pmi2 "  the PMI2 run's final parameters are bitwise those of the PMIx run" cmp -s p_pmi2.params p_pmix.params
fi
fi

# q. PMI2 through the template (SHARDRUN_MPI=pmi2): a real SIGUSR1 ->
# agreed step -> 75 -> requeue -> resume, bitwise
if group --long "q: PMI2 preemption"; then
if ! have_libpmi2; then
    skip_or_fail pmi2 "q: Slurm's libpmi2.so.0 is not installed (apt-get install libpmi2-0)"
else
n=q_pmi2
mkjob $n
J=$(submit $n shardrun-cpu.sbatch --requeue --export="ALL,JOB=$T/$n.yaml,SHARDRUN_TEST_DUMP_PARAMS=$T/$n.params,SHARDRUN_MPI=pmi2")
wait_for $n.out "step +6/$STEPS" 120
scancel --signal=USR1 "$J"
st=$(job_wait "$J" "COMPLETED|FAILED|CANCELLED|TIMEOUT" 240)
stop=$(sed -n 's/.*agreed to stop after step \([0-9]*\).*/\1/p' $n.out | head -1)
result $n "q: under --mpi=pmi2 the template's job got SIGUSR1, saved step $stop, exited 75 and was requeued ($st)" \
    sh -c "[ '$st' = COMPLETED ] && [ -n '$stop' ] && grep -q 'received SIGUSR1' $n.out && grep -q '== shardrun exited 75' $n.out && [ \$(grep -c 'bootstrap pmi2 .*restart=1 resume=$stop\$' $n.out) -eq 4 ]"
result $n "  final parameters are bitwise those of the uninterrupted run" cmp -s $n.params ref.params
fi
fi

# h. status 69 under the GPU template (on the CPU here): a stalled collective
# ends every rank with 69; the template resubmits the job (a new job: Slurm
# cannot change a running job's excluded nodes) under the MAX_RESTARTS
# guard, and the resubmitted job, at the guard, does not
if group --long "h: status 69 resubmits"; then
n=h_69
mkjob $n "comm: {timeout_s: 2}"
# (rank 1 blames the stalled rank 0's host, the cluster's one node: a job
# excluding it cannot be placed, so the template resubmits without it)
J=$(sbatch --parsable -N 1 --ntasks-per-node=2 --cpus-per-task=1 -o "$T/$n.out" \
    --export="ALL,JOB=$T/$n.yaml,SHARDRUN_DEVICE=auto,SHARDRUN_TEST_STALL_SEQ=40,MAX_RESTARTS=1" \
    "$TEMPLATES/shardrun-gpu.sbatch")
st=$(job_wait "$J" "COMPLETED|FAILED|CANCELLED|TIMEOUT" 120)
J2=$(sed -n 's/^Submitted batch job \([0-9]*\)$/\1/p' $n.out | head -1)
result $n "h: a job ending with status 69 ($st) is resubmitted by the GPU template (new job ${J2:-none})" \
    sh -c "grep -q 'shardrun exited 69' $n.out && [ -n '$J2' ] &&
           grep -q '^== status 69: \\(resubmitted; it resumes\\|no job excluding [^ ]* can be placed: resubmitted without the exclusion\\)' $n.out"
if [ -n "$J2" ]; then
    st2=$(job_wait "$J2" "COMPLETED|FAILED|CANCELLED|TIMEOUT" 120)
    result $n "  the resubmitted job (run 1 of MAX_RESTARTS=1, same shape, same log) also ends 69 ($st2) and is not resubmitted" \
        sh -c "grep -q '== job $J2 run 1 on' $n.out && grep -q 'rank 1/2 local 1/2 .* job $J2 ' $n.out && grep -q 'status 69 after 1 restarts (MAX_RESTARTS=1): not resubmitting' $n.out"
else
    result $n "  the resubmitted job is not resubmitted again at MAX_RESTARTS" false
fi
fi

done_testing
