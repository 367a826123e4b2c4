#!/bin/sh
# device.sh — the device table seen from a run: the `device` key, the memory
# spaces in the log and the metrics, and the fake device
# (SHARDRUN_TEST_DEVICE=fake), which keeps its "device" memory apart and
# takes every decision a GPU run takes: a fake run is bitwise a CPU run, a
# checkpoint written by either resumes on the other bitwise like a CPU-only
# resume, planned memory above the fake device's free memory is refused
# (78, naming the categories), and ranks that disagree on the device are
# refused (78, naming them).  param_dtype auto (the default) is fp32 on both.  NaN-poisoned allocations change nothing.
. "${SR_SRCDIR:-.}/tests/tap.sh"
S=$SHARDRUN
CMP=${SR_BUILDDIR:-.}/tests/cmp_params
cd "$T" || exit 99

# the fast tier trains tiny at width 128 and 64 positions, the long tier as
# it is; FREE_MB is below either's planned device memory
if long_tier; then dims="" FREE_MB=40; else dims="--set model.n_embd=128 --set model.seq_len=64" FREE_MB=8; fi
common="--set train.steps=12 --set train.batch_size=4 --set threads=2 --set log.every=1 --set train.eval_every=0 $dims"
# run NAME [ENV=VALUE...] -- [--set ...]: metrics NAME.jsonl, params NAME.params, log NAME.err, status in $rc
run() {
    name=$1
    shift
    envs=""
    while [ $# -gt 0 ] && [ "$1" != -- ]; do
        envs="$envs $1"
        shift
    done
    [ $# -gt 0 ] && shift
    # shellcheck disable=SC2086
    env $envs SHARDRUN_TEST_DUMP_PARAMS="$T/$name.params" "$S" train $common --set log.metrics="$T/$name.jsonl" "$@" \
        >"$name.out" 2>"$name.err"
    rc=$?
}

# 1. a CPU run: every space in the metrics, device memory zero
run cpu --
check "a CPU run finishes" test "$rc" -eq 0
for k in mem_host_total mem_host_total_peak mem_pinned_total mem_pinned_total_peak mem_device_total \
    mem_device_total_peak; do
    check "metrics records carry '$k'" sh -c "[ \$(grep -c '\"$k\":' cpu.jsonl) -eq 12 ]"
done
check "  ...a CPU run has no device memory (mem_device_total 0)" test "$(last cpu.jsonl mem_device_total_peak)" = 0
check "  ...its host total is the total" test "$(last cpu.jsonl mem_host_total)" = "$(last cpu.jsonl mem_total)"
check "the start and end logs show the spaces" sh -c \
    "grep -q 'memory at start.*spaces: host [0-9.]*/[0-9.]*, pinned 0.0/0.0, device 0.0/0.0' cpu.err &&
     grep -q 'memory at end.*spaces: host' cpu.err"
check "the start line says device=cpu" grep -q "device=cpu " cpu.err
check "param_dtype auto (the default) is fp32 on the CPU, and the start line says so" \
    grep -q "param fp32 (auto), reduce fp32" cpu.err

# 2. the fake device: bitwise a CPU run, its memory in the device space
run fake SHARDRUN_TEST_DEVICE=fake --
check "a fake-device run finishes" test "$rc" -eq 0
check "  ...the start line says device=fake" grep -q "device=fake (test hook SHARDRUN_TEST_DEVICE" fake.err
check "  ...param_dtype auto is fp32 there too (the start line)" grep -q "param fp32 (auto), reduce fp32" fake.err
check "  ...final parameters are bitwise those of the CPU run" "$CMP" cpu.params fake.params 0
check "  ...and so are the losses" sh -c "[ \"$(field cpu.jsonl loss | tr '\n' ' ')\" = \"$(field fake.jsonl loss | tr '\n' ' ')\" ]"
check "  ...its state lives in the device space (host 0, device = total)" sh -c \
    "[ $(last fake.jsonl mem_host_total_peak) = 0 ] && [ $(last fake.jsonl mem_device_total) = $(last fake.jsonl mem_total) ]"
check "  ...with the same categories as the CPU run" sh -c \
    "for c in param_shard grad_shard optim_shard grad_accum full_units activations comm other; do
        [ \$(tail -1 cpu.jsonl | sed -n \"s/.*\\\"mem_\${c}_peak\\\":\\([0-9]*\\).*/\\1/p\") = \
          \$(tail -1 fake.jsonl | sed -n \"s/.*\\\"mem_\${c}_peak\\\":\\([0-9]*\\).*/\\1/p\") ] || exit 1; done"

# bf16 parameters and reductions, per-micro-batch reductions: the casts and
# folds go through the table too
run cpu16 -- --set sharding.mixed_precision.param_dtype=bf16 --set sharding.mixed_precision.reduce_dtype=bf16 \
    --set sharding.grad_sync=per_micro_batch --set train.micro_batch=2
run fake16 SHARDRUN_TEST_DEVICE=fake -- --set sharding.mixed_precision.param_dtype=bf16 \
    --set sharding.mixed_precision.reduce_dtype=bf16 --set sharding.grad_sync=per_micro_batch --set train.micro_batch=2
check "bf16, per-micro-batch reductions: the fake run is bitwise the CPU run" "$CMP" cpu16.params fake16.params 0

# auto spelled out is the default; reduce_dtype auto is fp32: the same run
run auto SHARDRUN_TEST_DEVICE=fake -- --set sharding.mixed_precision.param_dtype=auto \
    --set sharding.mixed_precision.reduce_dtype=auto
check "param_dtype auto and reduce_dtype auto on the fake device: bitwise the CPU run" "$CMP" cpu.params auto.params 0
run f32 SHARDRUN_TEST_DEVICE=fake -- --set sharding.mixed_precision.param_dtype=fp32
check "  ...and an explicit fp32 is named without (auto)" grep -q "param fp32, reduce fp32" f32.err

# 3. NaN-poisoned allocations (make check sets SHARDRUN_TEST_POISON=1) change nothing
run nopoison SHARDRUN_TEST_POISON=0 SHARDRUN_TEST_DEVICE=fake --
run poison SHARDRUN_TEST_POISON=1 SHARDRUN_TEST_DEVICE=fake --
check "a NaN-poisoned run equals an unpoisoned one bitwise (no read before write)" "$CMP" nopoison.params poison.params 0

# 4. checkpoints across tables: written by one, resumed on the other, bitwise
# like a CPU-only resume (preempted at step 6 of 12, resumed to 12)
resume_pair() { # NAME FIRST_DEVICE SECOND_DEVICE (cpu | fake)
    e1=SHARDRUN_TEST_DEVICE=; [ "$2" = fake ] && e1=SHARDRUN_TEST_DEVICE=fake
    e2=SHARDRUN_TEST_DEVICE=; [ "$3" = fake ] && e2=SHARDRUN_TEST_DEVICE=fake
    run "$1a" "$e1" SHARDRUN_TEST_PREEMPT_AT=6 -- --set checkpoint.dir="$T/$1ck"
    rc1=$rc
    run "$1" "$e2" -- --set checkpoint.dir="$T/$1ck"
    rc2=$rc
}
resume_pair cc cpu cpu
resume_pair fc fake cpu
resume_pair cf cpu fake
check "a CPU run preempted at step 6 and resumed on the CPU finishes (status $rc1 then $rc2)" \
    sh -c "[ $rc1 = 75 ] && [ $rc2 = 0 ] && grep -q 'resum.*step 6' cc.err"
for d in cc fc; do grep -v 'created:\|checkpoint.dir:\|log.metrics:\|manifest_sha256:' "${d}ck/step_00000006/manifest.yaml" >"$d.mf"; done
check "the fake device's checkpoint is bitwise the CPU's (shard file; manifest but for time and directory)" sh -c \
    "cmp -s ccck/step_00000006/shard_00000.bin fcck/step_00000006/shard_00000.bin && cmp -s cc.mf fc.mf"
check "a fake-device checkpoint resumes on the CPU table bitwise like a CPU-only resume" "$CMP" cc.params fc.params 0
check "a CPU checkpoint resumes on the fake device bitwise like a CPU-only resume" "$CMP" cc.params cf.params 0
check "  ...and both equal the uninterrupted run" "$CMP" cpu.params cc.params 0

# 5. planned memory above the fake device's free memory: 78, naming the categories, nothing written
expect_status 78 "planned memory above SHARDRUN_TEST_DEVICE_FREE_MB is refused" env SHARDRUN_TEST_DEVICE=fake \
    SHARDRUN_TEST_DEVICE_FREE_MB=$FREE_MB "$S" train $common --set checkpoint.dir="$T/nock"
check "  ...naming the device memory and the categories" \
    grep -q "of device memory per rank (.*activations.*), more than the $FREE_MB.0 MiB free on the device (hint:" "$T/err"
check "  ...before anything is written (no checkpoint directory)" test ! -e "$T/nock"
run roomy SHARDRUN_TEST_DEVICE=fake SHARDRUN_TEST_DEVICE_FREE_MB=4096 -- --set train.steps=2
check "the same job with 4096 MiB free trains" test "$rc" -eq 0
expect_status 78 "a malformed SHARDRUN_TEST_DEVICE is refused" env SHARDRUN_TEST_DEVICE=gpu "$S" train $common
check "  ...naming the variable and what it takes" grep -q "SHARDRUN_TEST_DEVICE.*fake" "$T/err"

# 6. the device key
cat >cuda.yaml <<'EOF'
train: {steps: 2}
device: cuda
EOF
emulated=false
grep -q '^#define SR_CUDA_EMULATED 1' "${SR_BUILDDIR:-.}/srconfig.h" && emulated=true
if $emulated; then
    # a CUDA emulator tree: device: cuda is the emulated GPU (tests/cudaemu.sh)
    expect_status 0 "device: cuda in a CUDA emulator tree trains on the emulated GPU" "$S" train cuda.yaml
    check "  ...saying so on the start line" grep -q "device=cuda-emulated:0" "$T/err"
elif grep -q '^#define SR_HAVE_CUDA 1' "${SR_BUILDDIR:-.}/srconfig.h" && ! nvidia-smi -L >/dev/null 2>&1; then
    # a CUDA build on a machine without a GPU: the job file is fine, the machine is not
    expect_status 78 "device: cuda without a usable GPU fails at once" "$S" train cuda.yaml
    check "  ...saying cudaGetDeviceCount's answer, with a hint" grep -q "no usable GPU: cudaGetDeviceCount says .*hint" "$T/err"
    expect_status 0 "config check accepts device: cuda in a CUDA build (the GPU is the run's question)" \
        "$S" config check cuda.yaml
    if have_mpirun; then
        timeout 300 $MPI -n 2 "$S" train cuda.yaml </dev/null >mr.out 2>mr.err
        if grep -q '^#define SR_HAVE_NCCL 1' "${SR_BUILDDIR:-.}/srconfig.h"; then
            check "device: cuda with 2 ranks (NCCL built) fails for want of a GPU, not of multi-GPU support" \
                sh -c "grep -q 'no usable GPU' mr.err && ! grep -q 'not implemented' mr.err" || diag "$(tail -3 mr.err)"
        else
            check "device: cuda with 2 ranks without NCCL is refused naming NCCL" \
                grep -q "device: cuda with 2 ranks needs NCCL" mr.err || diag "$(tail -3 mr.err)"
        fi
    else
        skip "mpirun is not installed (the 2-rank refusal)"
    fi
elif ! grep -q '^#define SR_HAVE_CUDA 1' "${SR_BUILDDIR:-.}/srconfig.h"; then
    expect_status 78 "device: cuda is refused" "$S" train cuda.yaml
    check "  ...at its place in the job file, saying why" grep -Eq "cuda.yaml:2:[0-9]+: .*built without CUDA" "$T/err"
    expect_status 78 "config check refuses device: cuda the same way" "$S" config check cuda.yaml
    check "  ...at its place in the job file" grep -Eq "cuda.yaml:2:[0-9]+: .*built without CUDA" "$T/err"
else
    skip "device: cuda on a machine with a GPU is tests/gpu/check.sh's"
fi
expect_status 78 "device: tpu is a config error" "$S" train --set device=tpu
check "  ...naming the values it takes" grep -q "auto.*cpu.*cuda" "$T/err"
run devcpu -- --set device=cpu --set train.steps=2
check "device: cpu trains" test "$rc" -eq 0
run given CUDA_VISIBLE_DEVICES=0 -- --set train.steps=2
if $emulated; then
    check "given GPU 0 in a CUDA emulator tree, device: auto trains on the CPU, saying why" sh -c \
        "[ $rc = 0 ] && grep -q 'device=cpu (.*in a CUDA emulator tree device: auto is the CPU' given.err"
else
    # (the detection's answer: device nodes, then the driver; no module)
    check "given a GPU it cannot use, a run warns with the detection's answer and trains" sh -c \
        "[ $rc = 0 ] && grep -Eq 'warning: this task was given GPUs \(CUDA_VISIBLE_DEVICES=0\) but none is usable \((no /dev/nvidia<N> device node|.*device node.*driver.*|the driver .*|this shardrun was built without CUDA)\)' given.err"
fi

# 7. ranks that disagree on the device (mpirun)
if have_mpirun; then
    cat >mixed.sh <<'EOF'
#!/bin/sh
[ "${OMPI_COMM_WORLD_RANK:-0}" = 1 ] && export SHARDRUN_TEST_DEVICE=fake
exec "$@"
EOF
    expect_status 78 "ranks that disagree on the device are refused" timeout 120 $MPI \
        -n 2 sh "$T/mixed.sh" "$S" train $common
    check "  ...naming the ranks and their devices" grep -q "the ranks do not agree on the device: rank 0 uses cpu; rank 1 uses fake" "$T/err"
    SHARDRUN_TEST_DUMP_PARAMS="$T/m2cpu.params" timeout 300 $MPI -n 2 "$S" \
        train $common --set sharding.reshard_after_forward.blocks=2 >m2.out 2>m2cpu.err
    SHARDRUN_TEST_DEVICE=fake SHARDRUN_TEST_DUMP_PARAMS="$T/m2fake.params" timeout 300 $MPI \
        -n 2 -x SHARDRUN_TEST_DEVICE "$S" train $common --set sharding.reshard_after_forward.blocks=2 \
        >m2.out 2>m2fake.err
    check "2 ranks, reshard_after_forward 2: the fake run is bitwise the CPU run" "$CMP" m2cpu.params m2fake.params 0
else
    skip_mpirun "mixed devices and 2-rank fake runs"
fi

done_testing
