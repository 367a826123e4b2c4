#!/bin/sh
# offload.sh — sharding.offload on the fake device (every decision of a GPU
# run; device memory in its own space): the fp32 master, Adam m and v and
# the gradient shard in host memory, AdamW on the host, with offload.params
# no device parameter shard.  Final parameters and losses bitwise those
# without offload (fp32, bf16, per_micro_batch; 1, 2 and 4 ranks, HSDP);
# the memory categories move from the device space to the host spaces as
# declared; a checkpoint written with offload resumes bitwise, with or
# without it; the configuration errors (78, with where and why).
. "${SR_SRCDIR:-.}/tests/tap.sh"
S=$SHARDRUN
CMP=${SR_BUILDDIR:-.}/tests/cmp_params
cd "$T" || exit 99
export SHARDRUN_TEST_DEVICE=fake

common="--set train.steps=4 --set train.batch_size=4 --set model.n_layer=2 --set log.every=1 --set threads=1"
common="$common --set train.eval_every=0"
OPT="--set sharding.offload.optimizer=true"
PAR="--set sharding.offload.params=true"
run() { # NAME [--set ...]
    name=$1
    shift
    SHARDRUN_TEST_DUMP_PARAMS="$T/$name.params" "$S" train $common --set log.metrics="$T/$name.jsonl" "$@" \
        >"$name.out" 2>"$name.err"
    rc=$?
}
same() { # A B: losses and params bitwise
    [ -s "$1.jsonl" ] && [ "$(field "$1.jsonl" loss)" = "$(field "$2.jsonl" loss)" ] &&
        "$CMP" "$1.params" "$2.params" 0 >/dev/null
}

# 1. the configuration: one message with where and why, status 78
cat >bad.yaml <<'EOF2'
sharding:
  offload:
    optimizer: true
    grads: false
EOF2
SHARDRUN_TEST_DEVICE= "$S" train --set sharding.offload.optimizer=true >e1.out 2>e1.err
check "offload on a CPU run is refused (78)" sh -c "[ $? -eq 78 ] && grep -q 'offload needs a GPU run' e1.err"
"$S" train $PAR >e2.out 2>e2.err
check "offload.params without offload.optimizer is refused (78) saying why" \
    sh -c "[ $? -eq 78 ] && grep -q 'sharding.offload.params without sharding.offload.optimizer would only move state' e2.err"
"$S" train --set sharding.offload.grads=true >e3.out 2>e3.err
check "offload.grads without offload.optimizer is refused (78)" \
    sh -c "[ $? -eq 78 ] && grep -q 'sharding.offload.grads without sharding.offload.optimizer' e3.err"
"$S" train bad.yaml >e4.out 2>e4.err
check "an explicit grads: false beside optimizer: true is refused (78) at its line" \
    sh -c "[ $? -eq 78 ] && grep -q 'bad.yaml:4:12' e4.err && grep -q 'grads is implied' e4.err"
run nopin $OPT --set sharding.offload.pin_memory=false
check "pin_memory: false is allowed, with a warning" \
    sh -c "[ $rc -eq 0 ] && grep -q 'warning: sharding.offload.pin_memory is false' nopin.err"

# 2. one rank: bitwise, and the memory categories move as declared
run none
run opt $OPT
run optp $OPT $PAR
check "offload.optimizer trains" test "$rc" -eq 0
check "  ...the start log says what lives where" grep -q "offload: fp32 master weights, Adam m and v and the gradient shard in pinned host memory; AdamW on the host" opt.err
check "offload.optimizer: losses and final parameters bitwise those without offload" same opt none
check "offload.optimizer + params: bitwise too" same optp none
check "  ...with pin_memory false too" same nopin none
P=$(last none.jsonl mem_param_shard) G=$(last none.jsonl mem_grad_shard) O=$(last none.jsonl mem_optim_shard)
dev0=$(last none.jsonl mem_device_total_peak) comm0=$(last none.jsonl mem_comm_peak)
dev1=$(last opt.jsonl mem_device_total_peak) comm1=$(last opt.jsonl mem_comm_peak)
dev2=$(last optp.jsonl mem_device_total_peak) comm2=$(last optp.jsonl mem_comm_peak)
# (one rank without offload accumulates in the gradient shard itself; with
# offload per_step the shard is on the host: the accumulation buffer returns)
acc0=$(last none.jsonl mem_grad_accum_peak) acc1=$(last opt.jsonl mem_grad_accum_peak)
acc2=$(last optp.jsonl mem_grad_accum_peak)
diag "device peak: none $dev0, optimizer $dev1, +params $dev2 (param $P, grad $G, optim $O; landing slots $((comm1 - comm0)); accumulation $acc0 -> $acc1)"
check "offload.optimizer: the device drops the gradient and optimizer shards, gains the 3 landing slots and the accumulation buffer" \
    test "$acc0" -eq 0 -a "$dev1" -eq $((dev0 - G - O + comm1 - comm0 + acc1 - acc0))
check "  ...pinned host memory holds the master and the gradient shard (+ the loss scalar)" \
    test "$(last opt.jsonl mem_pinned_total)" -ge $((P + G)) -a "$(last opt.jsonl mem_pinned_total)" -le $((P + G + 64))
check "  ...host memory holds Adam m and v" test "$(last opt.jsonl mem_host_total)" -eq "$O"
check "  ...the device keeps a copy of the parameter shard (param_shard counts both)" \
    test "$(last opt.jsonl mem_param_shard)" -eq $((2 * P))
check "offload.params: the device also drops the parameter shard" \
    test "$dev2" -eq $((dev0 - P - G - O + comm2 - comm0 + acc2 - acc0))

# 3. bf16 and per_micro_batch
BF="--set sharding.mixed_precision.param_dtype=bf16 --set sharding.mixed_precision.reduce_dtype=bf16"
MB="--set sharding.grad_sync=per_micro_batch --set train.micro_batch=2"
run nbf $BF
run obf $OPT $PAR $BF
check "bf16 parameters and reductions: offload bitwise" same obf nbf
run nmb $MB
run omb $OPT $MB
check "per_micro_batch: offload bitwise" same omb nmb

# 4. checkpoints: written with offload, resumed with and without it, bitwise
run full $OPT --set train.steps=8
SHARDRUN_TEST_PREEMPT_AT=4 run pre $OPT --set train.steps=8 --set checkpoint.dir="$T/ck" --set checkpoint.every_steps=2
check "offload: a preemption at step 4 saves and exits 75" sh -c "[ $rc -eq 75 ] && '$S' ckpt verify ck >/dev/null 2>&1"
cp -a ck ck2
run res $OPT --set train.steps=8 --set checkpoint.dir="$T/ck"
check "  ...the resume with offload ends bitwise equal" sh -c "[ $rc -eq 0 ] && grep -q resume=4 res.err && cmp -s res.params full.params"
run res2 --set train.steps=8 --set checkpoint.dir="$T/ck2"
check "  ...and so does a resume without offload" sh -c "[ $rc -eq 0 ] && cmp -s res2.params full.params"

# 5. 2 and 4 ranks under mpirun (and HSDP 2 x 2): bitwise
if have_mpirun; then
    MPI="$MPI -x SHARDRUN_TEST_DEVICE"
    mrun() { # NAME N [--set ...]
        name=$1 n=$2
        shift 2
        SHARDRUN_TEST_DUMP_PARAMS="$T/$name.params" timeout 300 $MPI -x SHARDRUN_TEST_DUMP_PARAMS -n "$n" "$S" train \
            $common --set train.batch_size=8 --set log.metrics="$T/$name.jsonl" "$@" </dev/null >"$name.out" 2>"$name.err"
    }
    for n in 2 4; do
        mrun m${n}n $n
        mrun m${n}o $n $OPT $PAR
        check "$n ranks: offload bitwise no offload" same m${n}o m${n}n
    done
    mrun hn 4 --set sharding.mesh.shard=2 --set sharding.mesh.replicate=2 $BF
    mrun ho 4 --set sharding.mesh.shard=2 --set sharding.mesh.replicate=2 $BF $OPT
    check "HSDP 2 x 2 in bf16: offload bitwise no offload" same ho hn
else
    skip_mpirun "offload on 2 and 4 ranks"
fi
done_testing
