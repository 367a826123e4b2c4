#!/bin/sh
# recompute.sh — model.recompute: blocks.  Losses, gradient norms and final
# parameters are bitwise those of recompute none (on the CPU, in bf16, with
# accumulation, on the fake device, and on 2 and 4 ranks under mpirun); the
# activation peak the accounting reports equals L x B x T x C x element size
# for the block inputs + one block's full set + the root's, each computed
# here from the buffer list of the model (an independent statement of what
# forward and backward keep), and the start log prints the prediction.
. "${SR_SRCDIR:-.}/tests/tap.sh"
S=$SHARDRUN
CMP=${SR_BUILDDIR:-.}/tests/cmp_params
cd "$T" || exit 99

common="--set train.steps=4 --set train.batch_size=4 --set log.every=1 --set threads=2 --set train.eval_every=0"

# run NAME [ENV=V ...] -- [--set ...]: params NAME.params, metrics NAME.jsonl
run() {
    name=$1
    shift
    envs=""
    while [ "$1" != "--" ]; do envs="$envs $1" && shift; done
    shift
    env SHARDRUN_TEST_DUMP_PARAMS="$T/$name.params" $envs "$S" train $common --set log.metrics="$T/$name.jsonl" "$@" \
        >"$name.out" 2>"$name.err"
    rc=$?
}
same() { # A B: losses and norms bitwise, params bitwise
    [ -s "$1.jsonl" ] && [ "$(field "$1.jsonl" loss)$(field "$1.jsonl" grad_norm)" = \
        "$(field "$2.jsonl" loss)$(field "$2.jsonl" grad_norm)" ] && "$CMP" "$1.params" "$2.params" 0 >/dev/null
}

# 1. bitwise on the CPU: fp32, bf16, accumulation over micro-batches, and
# blocks of two per unit with reshard off
for v in "f32:" "bf16:--set sharding.mixed_precision.param_dtype=bf16" "mb:--set train.micro_batch=2" \
    "unit2:--set sharding.blocks_per_unit=2 --set sharding.reshard_after_forward.blocks=false"; do
    n=${v%%:*} sets=${v#*:}
    run none_$n -- $sets
    run blocks_$n -- $sets --set model.recompute=blocks
    check "recompute blocks ($n) trains" test "$rc" -eq 0
    check "  ...losses, norms and final parameters bitwise those of recompute none ($n)" same blocks_$n none_$n
done

# 2. the fake device (every decision of a GPU run, bitwise a CPU run)
run fake_none SHARDRUN_TEST_DEVICE=fake --
run fake_blocks SHARDRUN_TEST_DEVICE=fake -- --set model.recompute=blocks
check "recompute blocks on the fake device: bitwise recompute none" same fake_blocks fake_none
check "  ...and bitwise the CPU run" same fake_blocks none_f32

# 3. the activation peak: tiny (L 4, n_head 4, C 256, T 256, fp32), B 4
L=4 NH=4 C=256 TT=256 B=4 e=4
BT=$((B * TT)) BTC=$((B * TT * C))
att=$((B * NH * TT * TT * 4)) # the CPU attention keeps the softmax probabilities (fp32)
inputs=$((L * BTC * e))
# one block: ln1, qkv (3), attention output, residual2, ln2, fc (4), gelu (4),
# its output; two LayerNorms' mean and rstd (fp32); the attention's save
block=$(((1 + 3 + 1 + 1 + 1 + 4 + 4 + 1) * BTC * e + 4 * BT * 4 + att))
Vp=256
# root: inputs and targets (int32), lnf with mean/rstd, logits, losses, lse,
# the projection scratch, the backward scratch (dresidual, dln, dqkv 3,
# datty, dfch 4, dfch_gelu 4)
root=$((2 * BT * 4 + BTC * e + 2 * BT * 4 + BT * Vp * e + 2 * BT * 4 + BTC * e + (1 + 1 + 3 + 1 + 4 + 4) * BTC * e))
want=$((inputs + block + root))
got=$(last blocks_f32.jsonl mem_activations_peak)
diag "activation peak: predicted $want = $inputs + $block + $root; accounted $got; none $(last none_f32.jsonl mem_activations_peak)"
check "the activation peak with recompute blocks is L.B.T.C.e + one block + root within 1% ($got vs $want)" \
    awk -v a="$got" -v b="$want" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a > 0 && d <= 0.01 * b) }'
none=$(last none_f32.jsonl mem_activations_peak)
check "  ...and recompute none keeps L blocks' sets ($none = $inputs + $L x $block + $root - the last output)" \
    test "$none" -eq $((inputs + L * block + root - (L - 1) * BTC * e))
mib() { awk -v b="$1" 'BEGIN { printf "%.1f MiB", b / 1048576 }'; }
check "the start log shows the prediction" \
    grep -q "recompute blocks: activations $(mib "$want") predicted = block inputs $(mib $inputs) (L 4 x B 4 x T 256 x C 256 x 4 B) + one block $(mib $block) + root $(mib $root)" blocks_f32.err
check "  ...and a run without it says what blocks would need" grep -q "recompute none: activations .* blocks would need $(mib "$want")" none_f32.err

# 4. bad value: one message, status 78
"$S" train --set model.recompute=layers >bad.out 2>bad.err
st=$?
check "model.recompute: layers is refused with status 78 ($st)" test "$st" -eq 78
check "  ...naming the allowed values" grep -q "none.*blocks" bad.err

# 5. 2 and 4 ranks under mpirun: bitwise recompute none at the same rank count
if have_mpirun; then
    for n in 2 4; do
        for r in none blocks; do
            SHARDRUN_TEST_DUMP_PARAMS="$T/m${n}_$r.params" timeout 300 $MPI -n $n "$S" train $common \
                --set threads=1 --set train.batch_size=8 --set model.recompute=$r \
                --set log.metrics="$T/m${n}_$r.jsonl" </dev/null >m${n}_$r.out 2>m${n}_$r.err
        done
        check "recompute blocks on $n ranks: bitwise recompute none" same m${n}_blocks m${n}_none
    done
else
    skip_mpirun "recompute on 2 and 4 ranks"
fi
done_testing
