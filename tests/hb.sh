#!/bin/sh
# hb.sh — the engine's stream ordering, proven without a GPU by the
# happens-before checker (SHARDRUN_TEST_HB=1, which `make check` sets for
# every test):
#   1. SHARDRUN_TEST_SKIP_WAIT=list names every wait site; an unknown site
#      is refused (78, with the hint)
#   2. clean runs (fp32 with micro-batches, evaluation, checkpoints and the
#      parameter dump; bf16 with per-micro-batch reductions; the fake
#      device; in an emulator tree the emulated GPU too, and a skipped
#      wait there) report no race, and their steps make exactly one host
#      wait each (a host-synchronous engine would pass every other CPU test);
#      comm_exposed_ms is in every record and the progress line
#   3. every wait site, skipped, is reported as a race (70) naming both
#      accesses; the replicas' reduction under mpirun too
#   4. SHARDRUN_TEST_COMM_DELAY_US on the comm or the compute stream leaves
#      every parameter bitwise equal (1 rank, and 2 ranks under mpirun)
. "${SR_SRCDIR:-.}/tests/tap.sh"
S=$SHARDRUN
CMP=${SR_BUILDDIR:-.}/tests/cmp_params
cd "$T" || exit 99
export SHARDRUN_TEST_HB=1

# (train.eval_tasks: the task forwards' per-token losses, read by the host)
printf '{"ctx": "The cat", "endings": ["sat", "ran off"], "label": 0}\n{"ctx": "A dog", "endings": ["barks", "flies"], "label": 0}\n' >task.jsonl
tiny_job job.yaml model.seq_len=32 train.steps=4 train.batch_size=4 train.eval_every=2 train.eval_batches=1 \
    "train.eval_tasks=[$T/task.jsonl]"
# configurations that between them use every wait site (D: offload on
# the fake device)
cfgA="--set train.micro_batch=2 --set checkpoint.dir=$T/ck --set checkpoint.every_steps=2"
cfgB="--set train.micro_batch=1 --set sharding.grad_sync=per_micro_batch --set sharding.mixed_precision.param_dtype=bf16 --set sharding.mixed_precision.reduce_dtype=bf16 --set checkpoint.dir=$T/ckB --set checkpoint.every_steps=3"

cfgD="--set sharding.offload.optimizer=true --set train.micro_batch=2"
fresh() { rm -rf "$T/ck" "$T/ckB"; } # every run starts from scratch

# 1. the sites
SHARDRUN_TEST_SKIP_WAIT=list "$S" >sites.txt 2>sites.err
check "SHARDRUN_TEST_SKIP_WAIT=list prints the wait sites (status 0)" sh -c "[ $? = 0 ] && [ \$(wc -l <sites.txt) -ge 10 ]"
check "  ...each with what it orders" sh -c "! awk 'NF < 4' sites.txt | grep -q ."
sites=$(awk '{print $1}' sites.txt)
expect_status 78 "an unknown wait site is refused" env SHARDRUN_TEST_SKIP_WAIT=gather_redy "$S" train job.yaml
check "  ...with the hint" grep -q "'gather_redy' is not a wait site (hint: SHARDRUN_TEST_SKIP_WAIT=list" "$T/err"

# 2. clean runs
# hostwaits FILE: "STEPS WAITS" from the checker's last line
hostwaits() { sed -n 's/.*happens-before checker: no race found; \([0-9]*\) steps made \([0-9]*\) host waits.*/\1 \2/p' "$1"; }
for c in A B fake D; do
    fresh
    case $c in
    A) "$S" train job.yaml $cfgA --set log.metrics="$T/A.jsonl" >/dev/null 2>clean$c.err ;;
    B) "$S" train job.yaml $cfgB >/dev/null 2>clean$c.err ;;
    fake) SHARDRUN_TEST_DEVICE=fake "$S" train job.yaml $cfgA >/dev/null 2>clean$c.err ;;
    D) SHARDRUN_TEST_DEVICE=fake "$S" train job.yaml $cfgD >/dev/null 2>clean$c.err ;;
    esac
    rc=$?
    hw=$(hostwaits clean$c.err)
    check "clean run ($c): no race, status 0 ($hw)" sh -c "[ $rc = 0 ] && [ -n '$hw' ]" || diag "$(tail -3 clean$c.err)"
    check "  ...one host wait per step" sh -c "set -- $hw; [ \$1 = 4 ] && [ \$2 = 4 ]"
done

# 2b. the cuda table on the CUDA emulator (an emulator tree): the checker
# runs there as on the others (tests/mutants.sh skips every wait site there)
if emulator_tree; then
    fresh
    # shellcheck disable=SC2086
    "$S" train job.yaml $cfgA --set device=cuda >/dev/null 2>cleanE.err
    rc=$?
    hw=$(hostwaits cleanE.err)
    check "clean run on the emulated GPU: no race, status 0 ($hw)" sh -c "[ $rc = 0 ] && [ -n '$hw' ]" ||
        diag "$(tail -3 cleanE.err)"
    check "  ...one host wait per step" sh -c "set -- $hw; [ \$1 = 4 ] && [ \$2 = 4 ]"
    fresh
    # shellcheck disable=SC2086
    # (in exact mode: the gather is a copy on comm; bf16 at one rank has
    # no gather, the units being the bf16 copy: below)
    SHARDRUN_TEST_SKIP_WAIT=gather_ready "$S" train job.yaml $cfgA --set device=cuda \
        --set sharding.mixed_precision.param_dtype=fp32 >/dev/null 2>skipE.err
    check "skipping gather_ready on the emulated GPU is reported as a race (status $?)" \
        grep -q "happens-before violation: compute reads .* with no ordering after the write by comm" skipE.err
fi

# 2c. one rank in bf16 (B): the units are the shard's bf16 copy, no gather
# (issue 64), but the gather's wait still orders the backward's writes of
# a reduction slot after the comm stream's last reduction read it
fresh
# shellcheck disable=SC2086
SHARDRUN_TEST_SKIP_WAIT=gather_ready "$S" train job.yaml $cfgB >/dev/null 2>skipB.err
check "skipping gather_ready at one rank in bf16 (no gather: the units alias the bf16 copy) is reported (status $?)" \
    grep -q "happens-before violation: compute writes .* with no ordering after the read by comm" skipB.err ||
    diag "$(tail -3 skipB.err)"

check "every metrics record carries comm_exposed_ms (>= 0)" \
    sh -c "[ \$(grep -c '\"comm_exposed_ms\":[0-9.e-]*,' A.jsonl) -eq 4 ] && ! grep -q '\"comm_exposed_ms\":-' A.jsonl"
check "  ...and the progress line says it" grep -Eq 'step +4/4 \| .* \| comm exposed [0-9.]+ ms \| [0-9.]+ ms \| loss_mean [0-9.]+ \| elapsed [0-9hms]+ \| [0-9.e+-]+ step/s \| eta [0-9hms]+$' cleanA.err

# 3. every wait removed is reported (C, 4 ranks: HSDP 2x2 with reshard 2,
# for the sites only several ranks use)
hb_mpi=false
have_mpirun && hb_mpi=true
mpi() { timeout 300 $MPI -n "$@"; }
hsdp="--set sharding.mesh.replicate=2 --set train.batch_size=8"
cfgC="$cfgB $hsdp --set sharding.reshard_after_forward.blocks=2"
for site in $sites; do
    found=""
    for c in A B D C; do
        fresh
        eval "cfg=\$cfg$c"
        [ $c = C ] && ! $hb_mpi && continue
        launch=""
        [ $c = C ] && launch="$MPI -n 4"
        dev=""
        [ $c = D ] && dev=fake
        # shellcheck disable=SC2086
        SHARDRUN_TEST_DEVICE=$dev SHARDRUN_TEST_SKIP_WAIT=$site SHARDRUN_TEST_DUMP_PARAMS="$T/skip.params" timeout 120 \
            $launch "$S" train job.yaml $cfg >/dev/null 2>skip.err
        rc=$?
        [ $c = C ] && grep -q "error: happens-before violation" skip.err && rc=70
        if [ $rc = 70 ] && grep -q "happens-before violation: .* with no ordering after the .* by .*; a stream wait or host wait is missing" skip.err; then
            found="$c: $(grep -o 'happens-before violation: [a-z0-9]* [a-z]*' skip.err | head -1)"
            break
        fi
    done
    check "skipping wait '$site' is reported as a race (status 70; $found)" test -n "$found"
done

# 4. delays change no bit
fresh
SHARDRUN_TEST_DUMP_PARAMS="$T/d0.params" "$S" train job.yaml $cfgB >/dev/null 2>d0.err
for how in 200:comm 200:compute; do
    n=$(echo "$how" | tr : _)
    fresh
    SHARDRUN_TEST_COMM_DELAY_US=$how SHARDRUN_TEST_DUMP_PARAMS="$T/$n.params" "$S" train job.yaml $cfgB \
        >/dev/null 2>"$n.err"
    check "SHARDRUN_TEST_COMM_DELAY_US=$how: bitwise the undelayed parameters" "$CMP" d0.params "$n.params" 0
    check "  ...and the hook is named in the start warning" grep -q "SHARDRUN_TEST_COMM_DELAY_US=$how" "$n.err"
done
expect_status 78 "a malformed delay is refused" env SHARDRUN_TEST_COMM_DELAY_US=5:disk "$S" train job.yaml
check "  ...naming the variable and the form" grep -q "SHARDRUN_TEST_COMM_DELAY_US.*N\[:comm|compute\]" "$T/err"

if $hb_mpi; then
    fresh
    # shellcheck disable=SC2086
    SHARDRUN_TEST_DUMP_PARAMS="$T/m0.params" mpi 4 "$S" train job.yaml $cfgB $hsdp >/dev/null 2>m0.err
    rc=$?
    check "4 ranks, HSDP 2x2, bf16: no race ($(hostwaits m0.err | head -1))" sh -c "[ $rc = 0 ] && grep -q 'no race found' m0.err" ||
        diag "$(grep error: m0.err | head -3)"
    fresh
    # shellcheck disable=SC2086
    SHARDRUN_TEST_SKIP_WAIT=reduce_done mpi 4 "$S" train job.yaml $cfgB $hsdp >/dev/null 2>m1.err
    check "  ...skipping reduce_done (the replicas' all-reduce) is reported as a race" \
        grep -q "happens-before violation: .*all-reduce (replicas)" m1.err || diag "$(grep error: m1.err | head -3)"
    for how in 300:comm 300:compute; do
        n=m_$(echo "$how" | tr : _)
        fresh
        # shellcheck disable=SC2086
        SHARDRUN_TEST_COMM_DELAY_US=$how SHARDRUN_TEST_DUMP_PARAMS="$T/$n.params" mpi 4 "$S" train job.yaml $cfgB \
            $hsdp >/dev/null 2>"$n.err"
        check "  ...SHARDRUN_TEST_COMM_DELAY_US=$how on 4 ranks: bitwise the undelayed parameters" "$CMP" m0.params \
            "$n.params" 0
    done
else
    skip_mpirun "HSDP under the checker and delays on 4 ranks"
fi

done_testing
