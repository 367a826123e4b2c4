#!/bin/sh
# train.sh — training end to end on the embedded corpus: the loss falls,
# runs are bitwise reproducible, micro-batch accumulation equals one big
# micro-batch, the progress line and the metrics file carry their fields,
# evaluation runs, and a non-finite loss stops training with status 1.
. "${SR_SRCDIR:-.}/tests/tap.sh"
S=$SHARDRUN
cd "$T" || exit 99

# 1. 40 tiny steps: the last loss is below 0.85 x the first (the fast tier
# at 64 positions, the long tier at the preset's 256)
dims="--set model.seq_len=64"
long_tier && dims=""
"$S" train --set train.steps=40 $dims --set log.every=1 --set log.metrics=m40.jsonl >out.txt 2>err.txt
check "40 tiny steps on the default corpus finish" test $? -eq 0
first=$(field m40.jsonl loss | head -1)
last=$(field m40.jsonl loss | tail -1)
diag "loss $first -> $last"
check "the last loss ($last) is below 0.85 x the first ($first)" awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < 0.85 * a) }'
grep -v '"event"' m40.jsonl >steps.jsonl
check "one step record per step, and one start event first" sh -c "[ \$(wc -l <steps.jsonl) -eq 40 ] && [ \$(grep -c '\"event\":\"start\"' m40.jsonl) -eq 1 ] && head -1 m40.jsonl | grep -q '^{\"event\":\"start\",\"step\":0,'"
for f in step loss lr grad_norm tokens_per_s mfu mem_total mem_activations mem_param_shard; do
    check "step records carry '$f'" sh -c "[ \$(grep -c '\"$f\":' steps.jsonl) -eq 40 ]"
done
check "progress lines carry step, loss, lr, norm, tok/s, mfu, memory" \
    grep -Eq 'step +40/40 \| loss [0-9.]+ \| lr [0-9.e+-]+ \| norm [0-9.]+ \| [0-9]+ tok/s \| mfu [0-9.]+% \| mem [0-9.]+ MiB' err.txt
check "the MFU peak is stated" grep -q "mfu peak: .*GFLOP/s" err.txt
check "memory by category is printed at start" grep -q "memory at start (MiB current/peak): param_shard" err.txt
check "the validation loss is reported at the end" grep -q "step 40: val_loss" err.txt
check "  ...and in the metrics" sh -c "tail -1 m40.jsonl | grep -q '\"val_loss\":'"

# 2. bitwise reproducibility with one seed, a different order with another
short="--set train.steps=4 --set model.n_layer=2 --set log.every=1"
"$S" train $short --set log.metrics=a.jsonl 2>/dev/null
"$S" train $short --set log.metrics=b.jsonl 2>/dev/null
"$S" train $short --set train.seed=7 --set log.metrics=c.jsonl 2>/dev/null
field a.jsonl loss >a.loss; field a.jsonl grad_norm >>a.loss
field b.jsonl loss >b.loss; field b.jsonl grad_norm >>b.loss
field c.jsonl loss >c.loss; field c.jsonl grad_norm >>c.loss
check "two runs with one seed give bitwise identical losses and norms" sh -c "[ -s a.loss ] && cmp -s a.loss b.loss"
check "another seed gives other losses" sh -c "! cmp -s a.loss c.loss"

# 3. accumulation: batch 8 as 4 micro-batches of 2 equals one micro-batch of 8
"$S" train $short --set train.micro_batch=2 --set log.metrics=acc.jsonl 2>acc.err
check "micro_batch 2 runs 4 accumulation steps" grep -q "micro_batch 2 x 4 accumulation steps" acc.err
check "losses with 4 accumulation steps equal one micro-batch (relative 1e-5)" sh -c "
    field() { sed -n \"s/.*\\\"\$2\\\":\\([^,}]*\\).*/\\1/p\" \"\$1\"; }
    field a.jsonl loss >x; field acc.jsonl loss >y
    paste x y | awk '{ d = \$1 - \$2; if (d < 0) d = -d; if (d > 1e-5 * \$1) bad = 1 } END { exit bad || NR != 4 }'"

# 4. threads: 1 trains too
"$S" train --set train.steps=2 --set model.n_layer=1 --set threads=1 >out.txt 2>err.txt
check "threads: 1 trains" sh -c "[ $? -eq 0 ] && grep -q 'threads 1' err.txt"

# 5. a non-finite loss stops training with status 1
SHARDRUN_TEST_NAN_AT_STEP=2 "$S" train --set train.steps=4 --set model.n_layer=1 >out.txt 2>err.txt
st=$?
check "a non-finite loss exits with status 1 ($st)" test "$st" -eq 1
check "  ...with a clear message" grep -q "step 2: non-finite loss" err.txt
done_testing
