#!/bin/sh
# cudaemu.sh — shardrun train with device: cuda on the CUDA emulator of
# tests/cudaemu (an emulator tree: configure --with-cuda=emulator; the
# sanitizer tree of .ci/run), against the CPU, at n_layer 2, n_head 4,
# n_embd 256, seq_len 64, batch 8, within doc/ARCHITECTURE.md's GPU-vs-CPU
# tolerances: 20 steps exact mode (1e-4 per step); every line and metrics
# record says cuda-emulated; a traced run's spans from the table's timing
# events (log.trace_steps); 78 for a job the emulated GPU's memory cannot
# hold, before anything is written; a hung GPU (SHARDRUN_TEST_GPU_HANG_AT)
# ends at the host wait's deadline with 70 and its message, in bounded
# time; make install refuses the tree; a Llama job (llama-tiny, 2 layers)
# 8 steps against the CPU, its memory what `shardrun plan` says, to the
# byte, and with model.attention: flash (bf16) 2 steps, its memory the
# plan's to the byte, and so at head dim 128 with attention auto (flash);
# one rank with 2 accumulation steps per micro-batch: its gradients in the
# gradient shard itself (no accumulation buffer or reduction slot, the
# plan's memory the run's), 3 steps against the CPU.
# The long tier adds 20 steps bf16 with flash
# attention (auto) and with materialized attention (each 3e-2 absolute at
# step 20) and the exact run's checkpoint resumed on the CPU and back
# (1e-4 per step against the run that never stopped), and the Llama job in
# bf16 mode with flash attention (3e-2 absolute at step 8).
# Elsewhere the whole test skips (a failure when SHARDRUN_TEST_REQUIRE has
# cudaemu).
. "${SR_SRCDIR:-.}/tests/tap.sh"
S=$SHARDRUN
need_cudaemu
CMP=$(cd "${SR_BUILDDIR:-.}" && pwd)/tests/cmp_params
cd "$T" || exit 99
cat >job.yaml <<'YAML'
model: {n_layer: 2, n_head: 4, n_embd: 256, seq_len: 64, vocab_size: 256}
train: {steps: 20, batch_size: 8, seed: 7}
log: {every: 1, sample_every: 0}
YAML
F32="--set sharding.mixed_precision.param_dtype=fp32"
# train NAME ARGS...: a run into NAME.jsonl, its stderr in NAME.err, status in $rc
train() {
    n=$1
    shift
    "$S" train job.yaml --set log.metrics="$n.jsonl" "$@" >"$n.out" 2>"$n.err"
    rc=$?
    [ $rc -eq 0 ] || [ $rc -eq 75 ] || diag "$n: status $rc" "$(tail -3 "$n.err")"
}
# losses_close A B TOL: per-step losses of A.jsonl and B.jsonl agree within
# TOL relative, over the same number of steps
losses_close() {
    field "$1.jsonl" loss >"$1.loss"
    field "$2.jsonl" loss >"$2.loss"
    [ -s "$1.loss" ] && [ "$(wc -l <"$1.loss")" -eq "$(wc -l <"$2.loss")" ] || return 1
    paste "$1.loss" "$2.loss" | awk -v tol="$3" '
        { d = $1 - $2; if (d < 0) d = -d; s = $2 < 0 ? -$2 : $2; if (d > tol * s) bad++
          if (d / s > worst) worst = d / s }
        END { printf "worst relative difference %.3g over %d steps\n", worst, NR; exit bad > 0 }'
}

train cpu --set device=cpu $F32
train gpu --set device=cuda $F32 --set checkpoint.dir=ck --set checkpoint.every_steps=10 --set checkpoint.keep=2
check "device: cuda trains 20 steps on the emulated GPU in exact mode (status $rc)" test "$rc" -eq 0
losses_close gpu cpu 1e-4 >close.txt
check "  ...every step's loss within 1e-4 of the CPU's" test $? -eq 0
diag "$(cat close.txt)"
check "  ...the start line names the emulated device" \
    grep -q "device=cuda-emulated:0 (the CUDA emulator of tests/cudaemu, not a GPU" gpu.err
check "  ...every line it prints says cuda-emulated" sh -c '! grep -v "^shardrun: \[cuda-emulated\] " gpu.err'
check "  ...every metrics record says cuda-emulated" \
    sh -c '[ -s gpu.jsonl ] && [ "$(grep -c "\"device\":\"cuda-emulated" gpu.jsonl)" -eq "$(wc -l <gpu.jsonl)" ]'
# the Llama family on the emulated GPU (RMSNorm, RoPE, SwiGLU and grouped
# heads: 4 query heads on 2 key/value heads, an untied head): 8 steps in
# exact mode against the CPU, and the same final parameters within 1e-4
LL="--set model.preset=llama-tiny --set model.n_layer=2 --set model.n_kv_head=2 --set model.tie_embeddings=false --set train.steps=8"
# shellcheck disable=SC2086
SHARDRUN_TEST_DUMP_PARAMS=llama-cpu.params train llama-cpu --set device=cpu $F32 $LL
# shellcheck disable=SC2086
SHARDRUN_TEST_DUMP_PARAMS=llama-gpu.params train llama-gpu --set device=cuda $F32 $LL
check "a Llama job (llama-tiny, 2 layers, grouped heads, untied) trains 8 steps on the emulated GPU (status $rc)" \
    test "$rc" -eq 0
losses_close llama-gpu llama-cpu 1e-4 >lclose.txt
check "  ...every step's loss within 1e-4 of the CPU's" test $? -eq 0
diag "$(cat lclose.txt)"
"$CMP" llama-gpu.params llama-cpu.params 1e-4 >llama.cmp 2>&1
check "  ...its final parameters within 1e-4 of the CPU's per tensor ($(tail -1 llama.cmp))" test $? -eq 0
check "  ...its start line names the Llama family on the emulated device" \
    sh -c "grep -q 'device=cuda-emulated:0' llama-gpu.err && grep -qi 'llama' llama-gpu.err"
# shardrun plan of that job on the cuda device: every memory category it
# prints is the emulated run's peak, to the byte
# plan_matches NAME ARGS...: plan of job.yaml with ARGS on one GPU into
# NAME.plan, each category against the last record of NAME.jsonl's peaks
plan_matches() {
    n=$1
    shift
    "$S" config show job.yaml "$@" >"$n.yaml" 2>/dev/null && "$S" plan "$n.yaml" --gpus-per-node 1 >"$n.plan" 2>"$n.plan.err"
    awk -v metrics="$n.jsonl" '
    BEGIN { while ((getline l < metrics) > 0) if (l !~ /"event"/) last = l
            n = split(last, kv, /[,{}]/); for (i = 1; i <= n; i++) { split(kv[i], p, ":"); gsub(/"/, "", p[1]); run[p[1]] = p[2] } }
    /^  [a-z_]+ +(host|pinned|device|-) +[0-9]+ +[0-9.]+$/ && $1 != "total" { plan[$1] += $3 }
    END { for (c in plan) { m++; if (plan[c] != run["mem_" c "_peak"]) { printf "%s plan %d run %d; ", c, plan[c], run["mem_" c "_peak"]; bad = 1 } }
          if (m != 9) { printf "the plan lists %d categories", m; bad = 1 }
          exit bad }' "$n.plan" >"$n.plandiff"
}
# shellcheck disable=SC2086
plan_matches llama-gpu --set device=cuda $F32 $LL
check "  ...shardrun plan of the job on the cuda device equals the emulated run's peaks, all 9 categories to the byte" test $? -eq 0
diag "$(cat llama-gpu.plandiff llama-gpu.plan.err)"
# flash attention (kernels/flash.cu: bf16, head dimensions 64 and 128): the Llama
# job 2 steps, its memory the plan's to the byte (the saved scores
# replaced by the rows' log-sum-exps)
# shellcheck disable=SC2086
train llama-flash --set device=cuda $LL --set train.steps=2 --set model.attention=flash
check "the Llama job with model.attention: flash trains 2 steps in bf16 on the emulated GPU (status $rc)" \
    sh -c "[ $rc -eq 0 ] && grep -q 'attention flash\$' llama-flash.err"
# shellcheck disable=SC2086
plan_matches llama-flash --set device=cuda $LL --set train.steps=2 --set model.attention=flash
check "  ...shardrun plan of it (attention flash) equals its peaks, all 9 categories to the byte" \
    sh -c "[ $? -eq 0 ] && grep -q 'attention flash' llama-flash.plan"
diag "$(cat llama-flash.plandiff llama-flash.plan.err)"
# head dim 128 (Llama-3.1-8B's; issue 62): model.attention auto picks flash
# in bf16, 2 steps, the plan's memory to the byte
L128="$LL --set model.n_embd=256 --set model.n_head=2 --set model.n_kv_head=1"
# shellcheck disable=SC2086
train llama-fl128 --set device=cuda $L128 --set train.steps=2
check "the Llama job at head dim 128 trains 2 steps on the emulated GPU with flash attention (auto) (status $rc)" \
    sh -c "[ $rc -eq 0 ] && grep -q 'attention flash (auto)' llama-fl128.err"
# shellcheck disable=SC2086
plan_matches llama-fl128 --set device=cuda $L128 --set train.steps=2
check "  ...shardrun plan of it (attention flash) equals its peaks, all 9 categories to the byte" \
    sh -c "[ $? -eq 0 ] && grep -q 'attention flash' llama-fl128.plan"
diag "$(cat llama-fl128.plandiff llama-fl128.plan.err)"
# one rank writes its gradients straight into the gradient shard, the
# first micro-batch's overwriting (issue 63): 2 accumulation steps (the
# 20-step run above is per_step at one), per_micro_batch, the losses within
# 1e-4 of the CPU's, no accumulation buffer or reduction slot, and the
# plan's memory the run's to the byte
for gs in per_micro_batch; do
    ACC="--set train.steps=3 --set train.micro_batch=4 --set sharding.grad_sync=$gs"
    # shellcheck disable=SC2086
    train acc-cpu-$gs --set device=cpu $F32 $ACC
    # shellcheck disable=SC2086
    train acc-gpu-$gs --set device=cuda $F32 $ACC
    check "one rank, 2 accumulation steps, grad_sync $gs: 3 steps on the emulated GPU (status $rc)" test "$rc" -eq 0
    losses_close acc-gpu-$gs acc-cpu-$gs 1e-4 >acc-$gs.txt
    check "  ...every step's loss within 1e-4 of the CPU's" test $? -eq 0
    diag "$(cat acc-$gs.txt)"
    # shellcheck disable=SC2086
    plan_matches acc-gpu-$gs --set device=cuda $F32 $ACC
    check "  ...the gradients in the shard itself: grad_accum and comm 0, the plan the run's peaks to the byte" \
        sh -c "[ $? -eq 0 ] && grep -Eq '^  grad_accum +- +0 ' acc-gpu-$gs.plan && grep -Eq '^  comm +- +0 ' acc-gpu-$gs.plan"
    diag "$(cat acc-gpu-$gs.plandiff acc-gpu-$gs.plan.err)"
done
check "  ...and the CPU run's say nothing of it" sh -c '! grep -q "cuda-emulated" cpu.jsonl && ! grep -q "^shardrun: \[" cpu.err'

# log.trace_steps on the emulated GPU: the streams' spans (the blocks'
# forward and backward, the waits) come from the table's timing events,
# turned into host times at its host waits (device.h trace_begin)
train trace --set device=cuda $F32 --set train.steps=4 --set log.trace_steps=2-3 --set checkpoint.dir=tck \
    --set checkpoint.every_steps=3
d=$(ls -d tck/trace/*.0 2>/dev/null | head -1)
"$S" debug trace "$d" -o trace.json >trace.txt 2>&1
check "a traced run on the emulated GPU: its merged trace has the phases, the layers from events, the waits, the checkpoint" \
    sh -c "python3 '$SR_SRCDIR/tests/observe/check_trace.py' trace.json 1 >ct.out 2>&1" || diag "$(cat trace.txt ct.out)"
check "  ...the layers' spans have device durations inside the window" python3 -c '
import json, sys
d = json.load(open("trace.json"))
x = [e for e in d["traceEvents"] if e.get("ph") == "X"]
lo = min(e["ts"] for e in x if e["name"] == "forward")
hi = max(e["ts"] + e["dur"] for e in x)
layers = [e for e in x if " layer " in e["name"]]
sys.exit(not layers or any(e["dur"] <= 0 or e["ts"] < lo - 1e6 or e["ts"] > hi + 1e6 for e in layers))'

# memory: a job the emulated GPU cannot hold (CUDAEMU_MEM_MB)
CUDAEMU_MEM_MB=600 "$S" train job.yaml --set device=cuda --set model.n_layer=8 --set model.n_embd=512 \
    --set checkpoint.dir=oomck >oom.out 2>oom.err
rc=$?
check "a job the emulated GPU's memory cannot hold is refused with 78 (status $rc)" test "$rc" -eq 78
check "  ...naming the device memory it needs and has" grep -q "of device memory per rank" oom.err
check "  ...before anything is written" test ! -e oomck

# a hung GPU: at step 1 the compute stream runs a kernel that spins for an
# hour (SHARDRUN_TEST_GPU_HANG_AT; step 1, so no earlier step's host wait
# can meet the deadline on a loaded machine first); the host wait gives up
# at comm.timeout_s (4 s) and the process exits at once, freeing nothing
# that would wait
t0=$(date +%s)
SHARDRUN_TEST_GPU_HANG_AT=1 timeout 60 "$S" train job.yaml --set device=cuda $F32 --set comm.timeout_s=4 \
    >hang.out 2>hang.err
rc=$?
t1=$(date +%s)
check "a hung GPU ends the run with 70 (status $rc)" test "$rc" -eq 70
check "  ...saying it did not finish step 1 within comm.timeout_s, naming the last op" \
    grep -q "did not finish step 1 within comm.timeout_s = 4 s; the last op enqueued was" hang.err
check "  ...within comm.timeout_s + 10 s ($((t1 - t0)) s)" test $((t1 - t0)) -le 14
check "  ...and only the hang kernel held it: no step finished" sh -c '! grep -q "step  *1/20 |" hang.err'

# the same hang under CUDA's lazy module loading (CUDAEMU_LAZY_LOADING=1):
# the first launch of each kernel waits for the device, so behind the hung
# kernel the host thread is stuck inside the "driver" and no host wait's
# deadline ever runs (the first H200 run hung this way at step 1); the
# table's watchdog of the host thread must end the run all the same
t0=$(date +%s)
CUDAEMU_LAZY_LOADING=1 SHARDRUN_TEST_GPU_HANG_AT=1 timeout 60 "$S" train job.yaml --set device=cuda $F32 \
    --set comm.timeout_s=4 >lazy.out 2>lazy.err
rc=$?
t1=$(date +%s)
check "a hung GPU behind a launch that blocks in the driver (lazy loading) ends the run with 70 (status $rc)" \
    test "$rc" -eq 70 || diag "$(tail -3 lazy.err)"
check "  ...saying it did not finish step 1 within comm.timeout_s: the host thread is inside the driver" \
    grep -q "did not finish step 1 within comm.timeout_s = 4 s: the host thread has been inside the CUDA driver" lazy.err
check "  ...within comm.timeout_s + 10 s ($((t1 - t0)) s)" test $((t1 - t0)) -le 14
check "  ...the message is the last line, after the flight recorder's" \
    sh -c 'tail -1 lazy.err | grep -q "error: the GPU"'

# an emulator tree is never installed (its install steps, run alone: make
# install would also build)
make -s -C "${SR_BUILDDIR:-.}" install-exec-local install-data-local DESTDIR="$T/inst" >inst.out 2>inst.err
rc=$?
check "make install refuses a CUDA emulator tree (status $rc)" test "$rc" -ne 0
check "  ...saying why, and installs nothing" \
    sh -c 'grep -q "this is a CUDA emulator tree (configure --with-cuda=emulator), a test build that is never installed" inst.err && [ ! -e "$0/inst" ]' "$T"

# the long tier (.ci/run runs it in its emulator tree in the check-long phase)
if group --long "bf16 mode and a checkpoint across the emulated GPU and the CPU"; then
    train bf16 --set device=cuda
    check "bf16 mode (param_dtype auto on the cuda table) trains 20 steps with flash attention (auto) (status $rc)" \
        sh -c "[ $rc -eq 0 ] && grep -q 'param bf16 (auto)' bf16.err && grep -q 'attention flash (auto)' bf16.err"
    cpu20=$(last cpu.jsonl loss) bf20=$(last bf16.jsonl loss)
    check "  ...its loss at step 20 within 3e-2 of the CPU's exact-mode loss ($bf20 vs $cpu20)" \
        awk -v a="$bf20" -v b="$cpu20" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a != "" && d <= 3e-2) }'
    train bf16m --set device=cuda --set model.attention=materialized
    bm20=$(last bf16m.jsonl loss)
    check "  ...and with model.attention: materialized (status $rc) within 3e-2 of it too ($bm20)" \
        sh -c "[ $rc -eq 0 ] && grep -q 'attention materialized\$' bf16m.err && awk -v a='$bm20' -v b='$cpu20' 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a != \"\" && d <= 3e-2) }'"

    # the emulated GPU's checkpoint at step 10 resumes on the CPU, preempted at
    # 15 (the test hook's SIGUSR1 through the real handler: 75, a checkpoint),
    # and that one on the emulated GPU again, to step 20
    SHARDRUN_TEST_PREEMPT_AT=15 train r2 --set device=cpu $F32 --set checkpoint.dir=ck2 \
        --set checkpoint.resume=ck/step_00000010 --set checkpoint.every_steps=100
    check "the emulated GPU's checkpoint of step 10 resumes on the CPU (preempted at 15: status $rc)" \
        sh -c "[ $rc -eq 75 ] && grep -q 'resume=10' r2.err && [ -d ck2/step_00000015 ]"
    train r3 --set device=cuda $F32 --set checkpoint.dir=ck2 --set checkpoint.every_steps=100
    check "  ...and the CPU's of step 15 on the emulated GPU, to step 20" sh -c "[ $rc -eq 0 ] && grep -q 'resume=15' r3.err"
    { grep '^{"step"' gpu.jsonl | awk -F'[:,]' '$2 <= 10'; grep '^{"step"' r2.jsonl r3.jsonl | sed 's/^[^:]*://'; } >resumed.jsonl
    losses_close resumed cpu 1e-4 >close.txt
    check "  ...every step's loss within 1e-4 of the run that never stopped" test $? -eq 0
    diag "$(cat close.txt)"

    # the Llama job in bf16 mode (bf16 parameters and activations)
    # shellcheck disable=SC2086
    train llama-bf16 --set device=cuda $LL
    c8=$(last llama-cpu.jsonl loss) b8=$(last llama-bf16.jsonl loss)
    check "the Llama job in bf16 mode (flash attention) trains 8 steps on the emulated GPU, its loss at step 8 within 3e-2 of the CPU's exact-mode loss ($b8 vs $c8; status $rc)" \
        sh -c "[ $rc -eq 0 ] && grep -q 'param bf16 (auto)' llama-bf16.err && grep -q 'attention flash (auto)' llama-bf16.err && awk -v a='$b8' -v b='$c8' 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a != \"\" && d <= 3e-2) }'"
fi
done_testing
