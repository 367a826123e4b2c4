#!/bin/sh
# mixture.sh — data.mixture end to end: `data prepare --name` writes the
# sources into one directory and prints the data.mixture to use; a 2-rank
# run preempted mid-mixture resumes on 3 ranks taking the same sequences
# in the same order as the uninterrupted run (SHARDRUN_TEST_DUMP_SEQS,
# compared exactly; parameters within 1e-5) and on 2 bitwise; the metrics'
# tokens_by_source and the manifest's per-source cursors agree; new
# weights on resume continue every source from its cursor (a warning, the
# history); a source added is refused without data.allow_changed and
# starts at 0 with it; a changed shard is named with its source;
# data.mixture_end stop ends with 0 and "source NAME exhausted at step S",
# wrap counts epochs; bad data.mixture values are 78 with their place.
# (tests/test_mixture.c checks the schedule itself: the proportions over
# 10,000 sequences, any slicing, a restored state.)
. "${SR_SRCDIR:-.}/tests/tap.sh"
S=$SHARDRUN
CMP=${SR_BUILDDIR:-.}/tests/cmp_params
cd "$T" || exit 99

# three byte-level sources of different sizes (small: 40 sequences of 32)
awk 'BEGIN { for (i = 0; i < 1500; i++) printf "web page %d says hello to the world wide web\n", i }' >web.txt
awk 'BEGIN { for (i = 0; i < 900; i++) printf "def f%d(x): return x * %d + 1\n", i, i }' >code.txt
awk 'BEGIN { for (i = 0; i < 81; i++) printf "small line %04d\n", i }' >small.txt # 1296 bytes
# two input groups in one command, then a third source added to the directory
"$S" data prepare -o mix/ --val-tokens 2000 --name web web.txt --name code code.txt >p1.out 2>p1.err &&
    "$S" data prepare -o mix/ --name small small.txt >p3.out 2>p3.err
rc=$?
check "data prepare --name writes two groups, then a third source, into mix/ (status $rc)" \
    sh -c "[ $rc -eq 0 ] && [ -f mix/web_train_000001.bin ] && [ -f mix/code_val_000000.bin ] && [ -f mix/small_train_000001.bin ]" ||
    diag "$(cat p1.err p3.err)"
check "  ...index.json lists each source and each shard's source" \
    sh -c "grep -q '\"sources\"' mix/index.json && [ \$(grep -c '\"source\": \"web\"' mix/index.json) -eq 2 ] && [ \$(grep -c '\"source\": \"small\"' mix/index.json) -eq 1 ]"
"$S" data prepare -o mix2/ --name a web.txt --name b >p5.out 2>p5.err
rc=$?
check "  ...a --name with no input is a usage error (64) and writes nothing" sh -c "[ $rc -eq 64 ] && [ ! -e mix2 ]"
check "  ...the summary prints the data.mixture of every source" \
    grep -q "data.mixture=\[{name: web, train: mix, weight: 1}, {name: code, train: mix, weight: 1}, {name: small, train: mix, weight: 1}\]" p3.err
"$S" data prepare -o mix/ --name web web.txt >p4.out 2>p4.err
rc=$?
check "  ...a source the index already lists is refused (73), naming it" \
    sh -c "[ $rc -eq 73 ] && grep -q 'already lists the source web' p4.err"

MIX='[{name: web, train: mix, weight: 3}, {name: code, train: mix, weight: 1}]'
tiny_job job.yaml model.n_head=2 model.seq_len=32 train.steps=8 train.batch_size=12 checkpoint.every_steps=4 \
    "data.mixture=$MIX"
# train NAME RANKS CKDIR [--set ...]: sequences NAME.seqs, params NAME.params,
# metrics NAME.jsonl, log NAME.err, status $rc
train() {
    name=$1 n=$2 d=$3
    shift 3
    if [ "$n" -eq 1 ]; then launch=""; else launch="$MPI -n $n"; fi
    SHARDRUN_TEST_DUMP_SEQS="$T/$name.seqs" SHARDRUN_TEST_DUMP_PARAMS="$T/$name.params" \
        timeout 120 $launch "$S" train job.yaml --set checkpoint.dir="$T/$d" --set log.metrics="$T/$name.jsonl" "$@" \
        >"$name.out" 2>"$name.err"
    rc=$?
}
show() { "$S" ckpt show "$1" 2>&1; }

if have_mpirun -x SHARDRUN_TEST_DUMP_SEQS -x SHARDRUN_TEST_DUMP_PARAMS -x SHARDRUN_TEST_PREEMPT_AT; then
    train ref 2 ref
    check "an uninterrupted 2-rank mixture run (status $rc)" test "$rc" -eq 0 || diag "$(tail -5 ref.err)"
    SHARDRUN_TEST_PREEMPT_AT=4 train pre 2 pre
    check "  ...preempted after step 4 (status $rc)" sh -c "[ $rc -eq 75 ] && [ -d pre/step_00000004 ]"
    cp -a pre pre3
    cp pre.seqs res3.seqs
    train res3 3 pre3
    check "  ...resumed on 3 ranks (status $rc)" sh -c "[ $rc -eq 0 ] && grep -q 'resume=4' res3.err" ||
        diag "$(tail -5 res3.err)"
    sort -n ref.seqs >ref.sorted
    sort -n res3.seqs >res3.sorted
    check "  ...takes the same 96 sequences in the same order (global index, source, index, window: $(wc -l <ref.sorted) lines, exact)" \
        sh -c "[ \$(wc -l <ref.sorted) -eq 96 ] && cmp -s ref.sorted res3.sorted" ||
        diag "$(diff ref.sorted res3.sorted | head -5)"
    check "  ...and ends within 1e-5 of the uninterrupted run's parameters" "$CMP" res3.params ref.params 1e-5
    cp -a pre pre2
    train res2 2 pre2
    check "resumed on 2 ranks: bitwise the uninterrupted run (status $rc)" \
        sh -c "[ $rc -eq 0 ] && cmp -s res2.params ref.params"
else
    skip_mpirun "a 2-rank mixture run resumed on 3 and 2 ranks"
    train ref 1 ref
fi
# what the manifest and the metrics say (of the uninterrupted run)
web=$(show ref/step_00000008 | sed -n 's/^  source web  *cursor \([0-9]*\) sequences (\([0-9]*\) tokens).*/\2/p')
code=$(show ref/step_00000008 | sed -n 's/^  source code  *cursor \([0-9]*\) sequences (\([0-9]*\) tokens).*/\2/p')
last_tbs=$(grep '"step":8,' ref.jsonl | grep -o '"tokens_by_source":{[^}]*}')
check "ckpt show prints each source's cursor; the shares are 3:1 (web $web, code $code tokens of 3072)" \
    sh -c "[ '$web' -eq 2304 ] && [ '$code' -eq 768 ]"
check "  ...the last metrics record's tokens_by_source says the same ($last_tbs)" \
    test "$last_tbs" = "\"tokens_by_source\":{\"web\":$web,\"code\":$code}"
check "  ...the manifest records each source's data fingerprint and each shard's source" \
    sh -c "grep -q '^  sources:' ref/step_00000008/manifest.yaml && grep -q 'source: code, path: mix/code_train_000001.bin' ref/step_00000008/manifest.yaml"

# new weights on resume
cp -a ref/step_00000004 w_ck_4 && mkdir w && mv w_ck_4 w/step_00000004
MIX2='data.mixture=[{name: web, train: mix, weight: 1}, {name: code, train: mix, weight: 1}]'
train wt 1 w --set "$MIX2"
check "new weights on resume: a warning naming the change (status $rc)" \
    sh -c "[ $rc -eq 0 ] && grep -q 'the weights changed since the checkpoint of step 4 (web 3 -> 1): each source continues from its cursor' wt.err"
check "  ...each source from its cursor: 4 more steps in 1:1 (web 1152 + 768, code 384 + 768 tokens), the history kept" \
    sh -c "'$S' ckpt show w/step_00000008 >wt.show && grep -q 'source web  *cursor 60 sequences (1920 tokens)' wt.show && grep -q 'source code  *cursor 36 sequences (1152 tokens)' wt.show && grep -q 'weights from step 0 (global cursor 0): web=3 code=1' wt.show && grep -q 'weights from step 4 (global cursor 48): web=1 code=1' wt.show"

# a source added: a change of data
mkdir a && cp -a ref/step_00000004 a/
MIX3='data.mixture=[{name: web, train: mix, weight: 3}, {name: code, train: mix, weight: 1}, {name: small, train: mix, weight: 1}]'
train add 1 a --set "$MIX3"
check "a source added on resume is refused (78) naming it and data.allow_changed, nothing trained" \
    sh -c "[ $rc -eq 78 ] && grep -q 'a data.mixture source was added: small' add.err && grep -q 'data.allow_changed' add.err && [ ! -d a/step_00000008 ]"
train add2 1 a --set "$MIX3" --set data.allow_changed=true
check "  ...with data.allow_changed it resumes, the new source from its start (48 sequences at 3:1:1: web 29, code 10, small 9)" \
    sh -c "[ $rc -eq 0 ] && '$S' ckpt show a/step_00000008 | grep -q 'source small  *cursor 9 sequences'" ||
    diag "$(tail -2 add2.err)" "$(show a/step_00000008 | grep source)"

train rm 1 a --set 'data.mixture=[{name: web, train: mix, weight: 1}]' --set checkpoint.resume="$T/ref/step_00000004"
check "  ...and a source removed too (78, naming it)" \
    sh -c "[ $rc -eq 78 ] && grep -q 'a data.mixture source was removed: code' rm.err"

# a source's shard changed: the refusal names the source
mkdir c && cp -a ref/step_00000004 c/ && cp -a mix mix.keep
awk 'BEGIN { for (i = 0; i < 900; i++) printf "def g%d(y): return y - %d\n", i, i }' >code2.txt
"$S" data prepare -o other/ --name code --val-tokens 2000 code2.txt >/dev/null 2>&1 &&
    cp other/code_train_000001.bin mix/code_train_000001.bin
train chg 1 c
check "a changed shard of one source is refused (78) naming the source and the shard" \
    sh -c "[ $rc -eq 78 ] && grep -q 'source code: train shard mix/code_train_000001.bin changed' chg.err"
rm -rf mix && mv mix.keep mix

# a source that runs out: stop and wrap (small: 40 sequences, a third of each batch of 12)
MIX4='data.mixture=[{name: web, train: mix, weight: 2}, {name: small, train: mix, weight: 1}]'
train stop 1 stop --set "$MIX4" --set data.mixture_end=stop --set train.steps=20 --set train.eval_every=100 --set log.every=3
check "mixture_end stop: status 0 and 'source small exhausted at step 11' (4 of each 12: 10 steps fed)" \
    sh -c "[ $rc -eq 0 ] && grep -q 'source small exhausted at step 11' stop.err && grep -q 'done: 10 steps' stop.err && [ -d stop/step_00000010 ] && [ ! -d stop/step_00000011 ]" ||
    diag "$(tail -3 stop.err)"
check "  ...its last step is the run's last: evaluated and logged (the metrics record of step 10)" \
    sh -c "grep -q 'step 10: val_loss' stop.err && grep -q '\"step\":10,\"loss\"' stop.jsonl"
train wrap 1 wrap --set "$MIX4" --set train.steps=12
check "mixture_end wrap (the default): the run goes on, small's epoch counted (48 sequences of 40: epoch 1)" \
    sh -c "[ $rc -eq 0 ] && '$S' ckpt show wrap/step_00000012 | grep -q 'source small  *cursor 48 sequences (1536 tokens), epoch 1'"

# a source in another tokenizer's ids: refused (65) naming both directories
i=0
: >ranks.tiktoken
while [ $i -lt 256 ]; do # a rank file of the 256 bytes
    printf '%b' "\\0$(printf %03o $i)" | base64 | tr -d '\n' >>ranks.tiktoken
    printf ' %d\n' $i >>ranks.tiktoken
    i=$((i + 1))
done
"$S" data prepare --tokenizer gpt2:ranks.tiktoken -o tok/ --name bpe small.txt >tok.out 2>tok.err
train tokmix 1 tokmix --set 'data.mixture=[{name: web, train: mix, weight: 1}, {name: bpe, train: tok, weight: 1}]'
check "sources prepared with different tokenizers are refused (65), naming both" \
    sh -c "[ $rc -eq 65 ] && grep -q \"tok/index.json's data is in the ids of gpt2:.*ranks.tiktoken .*mix/index.json's in those of no tokenizer\" tokmix.err" ||
    diag "$(tail -2 tok.err tokmix.err)"

# bad values: 78 naming the place
bad() { # NAME EXPECTED-TEXT YAML-DATA-BLOCK
    printf 'model: {preset: tiny}\ndata:\n%s\n' "$3" >"$1.yaml"
    "$S" config check "$1.yaml" >"$1.out" 2>"$1.err"
    rc=$?
    check "data.mixture: $1 is 78 with file:line:col ($(head -c 150 "$1.err"))" \
        sh -c "[ $rc -eq 78 ] && grep -q '$1.yaml:[0-9]*:[0-9]*: ' $1.err && grep -q '$2' $1.err"
}
bad both 'data.mixture and data.train are both set' '  train: mix
  mixture: [{name: a, train: mix, weight: 1}]'
bad weight "weight -1: expected a number > 0" '  mixture: [{name: a, train: mix, weight: -1}]'
bad twice "the name .a. is item 1.s too" '  mixture: [{name: a, train: mix, weight: 1}, {name: a, train: mix, weight: 2}]'
bad missing "expected .train." '  mixture: [{name: a, weight: 1}]'
bad unknown "unknown key .path." '  mixture: [{name: a, path: mix, weight: 1}]'
bad badname "name .a b.: expected 1 to 48 letters" '  mixture: [{name: a b, train: mix, weight: 1}]'
done_testing
