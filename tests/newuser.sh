#!/bin/sh
# newuser.sh — from your text to Hugging Face without a wrong answer (issue
# 56): the path a new user takes, checked where it once gave a wrong
# answer.
#   1. a GPT-2 and a Llama trained on shards `data prepare` made with a BPE
#      of PyPI's tokenizers (its <|endoftext|> the document separator) export
#      a directory that AutoTokenizer and AutoModelForCausalLM load: the
#      tokenizer is tokenizer.json (PreTrainedTokenizerFast, nothing added to
#      text), config.json's bos, eos and pad are the document token, and 20
#      tokens generate() draws greedily are shardrun sample's, id for id and
#      as text; a vocab.json + merges.txt pair is exported as tokenizer.json
#      encoding as GPT2TokenizerFast does; a tokenizer changed since the run
#      is 65 with nothing written; a tiktoken rank file is left out with a
#      warning (no exact tokenizer.json)
#   2. GPT-2's own vocab.json + merges.txt (with <|endoftext|>) take data
#      prepare's default separator: the shard's ids are GPT2TokenizerFast's
#   3. config check says what train says: a tokenizer with more ids than
#      model.vocab_size is 78 in both, at the key
#   4. --set model.init=HFDIR on the embedded default job: its preset gives
#      way (the model line says so); a preset the user wrote still
#      conflicts; --set KEY= is KEY as if unset
#   5. every evaluation reaches the sinks: a val_loss scalar at its own step
#      in TensorBoard (TensorBoard's reader) with log.every 2 and eval_every
#      5, and a shardrun_val_loss gauge in the Prometheus file written at an
#      evaluation that is not a logged step
# Items 1, 2 and 5's reader need the test virtual environment
# (tests/hf/setup-venv.sh; SHARDRUN_TEST_REQUIRE=transformers makes it a
# requirement); the reference packages run in one Python process.
. "${SR_SRCDIR:-.}/tests/tap.sh"
S=$SHARDRUN
PROBE=${SR_BUILDDIR:-.}/tests/tok_probe
HFPY=${SHARDRUN_HF_PYTHON:-$SR_SRCDIR/.venv-hf/bin/python}
cd "$T" || exit 99
small="--set model.n_layer=1 --set model.n_embd=32 --set model.n_head=2 --set model.seq_len=16 --set threads=1"
small="$small --set train.batch_size=2"

# --- 3. config check and train agree ---------------------------------------------
group "3. config check says what train says" && {
    # a byte-level tokenizer.json of 258 ids (the bytes, one merge, the end of text)
    python3 "$SR_SRCDIR/tests/tok/t258.py" t258.json
    printf 'model:\n  preset: tiny\n  vocab_size: 256\ndata:\n  tokenizer: t258.json\n' >v.yaml
    "$S" config check v.yaml >cc.out 2>cc.err
    a=$?
    "$S" train v.yaml --set train.steps=1 >tr.out 2>tr.err
    b=$?
    check "a tokenizer with more ids than model.vocab_size: config check $a and train $b, both 78" \
        sh -c "[ $a -eq 78 ] && [ $b -eq 78 ]"
    check "  ...the same message, at the key's file:line:col" \
        sh -c "grep -q 'v.yaml:3:15: data.tokenizer t258.json has 258 ids, more than model.vocab_size 256' cc.err && [ \"\$(grep error: cc.err)\" = \"\$(grep error: tr.err)\" ]" ||
        diag "$(cat cc.err tr.err)"
    printf 'shard' >bad.bin
    "$S" config check /dev/null --set data.train=bad.bin >cc2.out 2>cc2.err
    a=$?
    check "a data.train file that is not a token shard: config check 65 naming it ($a)" \
        sh -c "[ $a -eq 65 ] && grep -q 'bad.bin: 5 bytes is shorter than the 1024-byte llm.c header' cc2.err"
}

# --- 4. --set model.init on the default job; --set KEY= --------------------------------
group "4. model.init on the embedded default job" && {
    "$S" train $small --set train.steps=1 --set checkpoint.dir=ck4 >/dev/null 2>&1
    "$S" ckpt export ck4 -o hf4/ >/dev/null 2>&1
    "$S" train --set model.init=hf4 --set train.steps=1 --set threads=1 --set train.batch_size=2 \
        --set log.sample_every=0 --set train.eval_every=0 >i4.out 2>i4.err
    rc=$?
    check "--set model.init=HFDIR on the embedded default job trains (status $rc)" test $rc -eq 0 || diag "$(tail -2 i4.err)"
    check "  ...the model line says the default job's preset gave way to config.json" \
        grep -q 'model gpt2 of hf4/config.json (the default job.s model.preset gives way to it): gpt2, n_layer 1' i4.err
    printf 'model:\n  preset: tiny\n' >p.yaml
    "$S" config check p.yaml --set model.init=hf4 >p.out 2>p.err
    rc=$?
    check "  ...a preset the user wrote still conflicts (78 at its line; status $rc)" \
        sh -c "[ $rc -eq 78 ] && grep -q 'p.yaml:2:11: model.preset and a Hugging Face directory in model.init' p.err"
    "$S" config check p.yaml --set model.init=hf4 --set model.preset= >p2.out 2>p2.err
    rc=$?
    check "--set model.preset= makes the key as if the job file had not named it (status $rc)" test $rc -eq 0 ||
        diag "$(cat p2.err)"
    "$S" config show --set train.lr= >show.out 2>&1
    check "  ...and --set train.lr= is the built-in default 0.0006, not the default job's 0.001" \
        grep -q '^  lr: 0.0006$' show.out
}

# --- 5 (no reader needed). the Prometheus gauge at an evaluation --------------------------
group "5. the Prometheus gauge at every evaluation" && {
    SHARDRUN_TEST_PAUSE_AT=after_shard_write:3 "$S" train $small --set train.steps=20 --set train.eval_every=2 \
        --set log.every=10 --set checkpoint.dir=ck5 --set checkpoint.every_steps=3 --set checkpoint.async=false \
        --set log.prometheus=p.prom \
        >p5.out 2>p5.err &
    pid=$!
    w=0
    until grep -q "stopped at after_shard_write" p5.err || [ $w -ge 600 ]; do sleep 0.05; w=$((w + 1)); done
    cp p.prom p5.prom 2>/dev/null
    kill -9 $pid 2>/dev/null
    wait $pid 2>/dev/null
    check "an evaluation at a step that is not logged (2) writes the Prometheus file with shardrun_val_loss" \
        sh -c "grep -q '^shardrun_step{.*} 2$' p5.prom && grep -q '^shardrun_val_loss{.*} [0-9]' p5.prom" ||
        diag "$(grep -v '^#' p5.prom 2>/dev/null | head -3)"
}

if ! [ -x "$HFPY" ] || ! "$HFPY" -c 'import transformers, tokenizers, tensorboard' 2>/dev/null; then
    skip_or_fail transformers "the reference checks: $HFPY cannot import transformers, tokenizers and tensorboard (tests/hf/setup-venv.sh .venv-hf)"
    done_testing
    exit 0
fi

# --- 1, 2, 5. against the reference packages ------------------------------------------------
"$HFPY" "$SR_SRCDIR/tests/tok/ref.py" corpus c 150000 >corpus.out 2>&1 &&
    "$HFPY" "$SR_SRCDIR/tests/tok/ref.py" train c >tok.out 2>&1 || { echo "Bail out! the reference tokenizer: $(cat tok.out)"; exit 1; }
"$S" data prepare --tokenizer c/tokenizer.json --val-tokens 3000 -o d/ c/docs/*.txt >dp.out 2>&1
common="--set data.train=d/data_train_*.bin --set data.val=d/data_val_000000.bin --set data.tokenizer=c/tokenizer.json
    --set model.vocab_size=3001 --set model.n_layer=2 --set model.n_embd=64 --set model.seq_len=64 --set threads=2
    --set train.batch_size=4 --set train.steps=20 --set train.eval_every=5 --set train.eval_batches=1
    --set log.every=2 --set log.sample_every=0"
# shellcheck disable=SC2086
"$S" train $common --set model.n_head=4 --set checkpoint.dir=ckg --set log.tensorboard=tbg --set log.metrics=mg.jsonl \
    >g.out 2>g.err
# shellcheck disable=SC2086
"$S" train $common --set model.preset=llama-tiny --set checkpoint.dir=ckl >l.out 2>l.err
"$S" ckpt export ckg -o exg/ >xg.out 2>&1
"$S" ckpt export ckl -o exl/ >xl.out 2>&1
# GPT-2's own file layout: vocab.json holds <|endoftext|>
mkdir pair && cp c/merges.txt pair/ && python3 -c '
import json
v = json.load(open("c/vocab.json"))
v["<|endoftext|>"] = len(v)
json.dump(v, open("pair/vocab.json", "w"))'
printf 'The rank of a shard is its index.' >pair.txt
"$S" data prepare --tokenizer pair -o dpair/ pair.txt >dpair.out 2>&1
rc_pair=$?
"$S" train $small --set model.vocab_size=3001 --set data.tokenizer="$T/pair" --set data.embedded_any_vocab=true \
    --set train.steps=1 --set checkpoint.dir=ckp >p.out 2>&1
"$S" ckpt export ckp -o expair/ >xp.out 2>&1
PROMPT="The gradient of the checkpoint"
"$HFPY" "$SR_SRCDIR/tests/hf/newuser.py" "$PROMPT" exg exl --tokenizer expair --pair pair "$(cat pair.txt)" --tb tbg mg.jsonl \
    >py.out 2>py.err || diag "$(tail -3 py.err)"
# js N EXPR: EXPR of the N-th JSON line of py.out (python3: j is the line)
js() { python3 -c "import json, sys; j = [json.loads(l) for l in open('py.out')][$1]; print($2)"; }

group "1. the export works with AutoTokenizer and generate()" && {
    for i in 0 1; do
        fam=$([ $i = 0 ] && echo gpt2 || echo llama)
        dir=$([ $i = 0 ] && echo exg || echo exl)
        ck=$([ $i = 0 ] && echo ckg || echo ckl)
        cls=$(js $i 'j["tokenizer"]') ids_cfg=$(js $i 'j["config"]')
        check "$fam: AutoTokenizer is PreTrainedTokenizerFast over tokenizer.json; bos, eos and pad are the document token 3000" \
            sh -c "[ '$cls' = PreTrainedTokenizerFast ] && [ \"$ids_cfg\" = \"{'bos': 3000, 'eos': 3000, 'pad': 3000}\" ] && [ -f $dir/tokenizer.json ] && [ -f $dir/tokenizer_config.json ] && [ -f $dir/special_tokens_map.json ]" ||
            diag "$cls $ids_cfg"
        printf '%s' "$PROMPT" >prompt.txt
        want=$("$PROBE" c/tokenizer.json prompt.txt | tr -s ' \n' ' ' | sed 's/ $//')
        got=$(js $i '" ".join(map(str, j["prompt_ids"]))')
        check "  ...the prompt's ids are shardrun's: nothing added" test "$got" = "$want" || diag "$got / $want"
        ids=$(js $i '",".join(map(str, j["prompt_ids"]))')
        "$S" sample $dir --prompt-tokens "$ids" --tokens 20 --temperature 0 --no-echo >s$i.out 2>s$i.err
        got=$(tr -s ' \n' ' ' <s$i.out | sed 's/ $//') want=$(js $i '" ".join(map(str, j["ids"]))')
        check "  ...generate()'s 20 greedy tokens are shardrun sample's, id for id" test "$got" = "$want" ||
            diag "shardrun: $got; transformers: $want"
        "$S" sample $ck --prompt "$PROMPT" --tokens 20 --temperature 0 --no-echo >t$i.out 2>t$i.err
        js $i 'j["text"]' >t$i.want
        check "  ...and as text: the checkpoint's continuation of the prompt is what the tokenizer decodes" \
            sh -c "cmp -s t$i.out t$i.want || [ \"\$(cat t$i.out)\" = \"\$(cat t$i.want)\" ]" ||
            diag "$(od -c t$i.out | head -2) / $(od -c t$i.want | head -2)"
    done
    a=$(js 2 'j["prompt_ids"]') b=$(js 3 'j["prompt"]') e=$(js 2 'j["config"]["eos"]')
    check "a vocab.json + merges.txt run exports tokenizer.json that encodes as GPT2TokenizerFast does ($a)" \
        sh -c "[ '$a' = '$b' ] && [ '$e' = 3000 ]" || diag "$a / $b, eos $e"
    mkdir tkc && cp c/tokenizer.json tkc/
    "$S" train $small --set model.vocab_size=3001 --set data.tokenizer="$T/tkc/tokenizer.json" \
        --set data.embedded_any_vocab=true --set train.steps=1 --set checkpoint.dir=ckc >c.out 2>&1
    printf '\n' >>tkc/tokenizer.json
    "$S" ckpt export ckc -o exc/ >xc.out 2>&1
    rc=$?
    check "a tokenizer changed since the run: 65 naming it, nothing written (status $rc)" \
        sh -c "[ $rc -eq 65 ] && grep -q 'tkc/tokenizer.json changed since the run' xc.out && [ ! -e exc ]"
    "$S" train $small --set model.vocab_size=3001 --set data.tokenizer="gpt2:$T/c/ranks.tiktoken" \
        --set data.embedded_any_vocab=true --set train.steps=1 --set checkpoint.dir=ckt >t.out 2>&1
    "$S" ckpt export ckt -o ext/ >xt.out 2>&1
    rc=$?
    check "a tiktoken rank file: exported without tokenizer.json, one warning saying why (status $rc)" \
        sh -c "[ $rc -eq 0 ] && [ ! -e ext/tokenizer.json ] && grep -q 'warning: ckpt export: a tiktoken rank file has no exact tokenizer.json' xt.out"
}

group "2. GPT-2's vocab.json + merges.txt take the default separator" && {
    check "data prepare --tokenizer DIR (vocab.json with <|endoftext|>) takes the default --doc-token (status $rc_pair)" \
        test $rc_pair -eq 0 || diag "$(cat dpair.out)"
    python3 -c "
import struct
b = open('dpair/data_train_000001.bin', 'rb').read()
print(' '.join(map(str, struct.unpack('<%dH' % ((len(b) - 1024) // 2), b[1024:]))))" >dpair.ids
    want=$(js 3 '" ".join(map(str, j["pair"]))')
    check "  ...the shard holds GPT2TokenizerFast's ids: end of text, then the document's" \
        test "$(cat dpair.ids)" = "$want" || diag "shardrun: $(cat dpair.ids); GPT2TokenizerFast: $want"
}

group "5. every evaluation reaches TensorBoard" && {
    steps=$(js 4 'j["eval_steps"]') tb=$(js 4 'j["tb_val_steps"]')
    check "with eval_every 5 and log.every 2, TensorBoard's reader has val_loss at every evaluation's step ($tb)" \
        sh -c "[ '$steps' = '[5, 10, 15, 20]' ] && [ '$tb' = '$steps' ]" || diag "eval events at $steps"
    close=$(js 4 'all(abs(a - b) <= 1e-6 * abs(b) for a, b in zip(j["tb_val"], j["eval"]))')
    check "  ...with the metrics file's values (as float32)" test "$close" = True
}
done_testing
