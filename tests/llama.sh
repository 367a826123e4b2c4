#!/bin/sh
# llama.sh — the Llama family (model.arch: llama) end to end on the CPU.
#
# 1. A small llama-tiny trains (the loss falls), its checkpoint records
#    manifest version 4 with the family, samples as the full forward's
#    greedy argmax (the key/value cache), resumes bitwise, and is refused by
#    a GPT-2 job (65) naming both models; keys that would be ignored (a
#    Llama key on a gpt2 job, n_kv_head not dividing n_head) are refused
#    (78); an llm.c export is refused (78) naming the formats that work;
#    data prepare --doc-token '<|begin_of_text|>' opens each document with
#    Llama-3's token.
# 2. With mpirun (the long tier): 2 ranks train as 1 does, and their
#    checkpoint resumes on 3 (resharded) and on 1, within 1e-5 of the
#    uninterrupted 1-rank run per tensor.
# 3. Against transformers (the venv of tests/hf/setup-venv.sh, as hf.sh;
#    SHARDRUN_TEST_REQUIRE=transformers makes it a requirement), on small
#    random LlamaForCausalLM models the test makes (grouped heads, Llama-3
#    rope scaling; untied, tied, untied saved in shards, in bf16 and tied in
#    f16, which both sides widen to float32): logits and
#    the loss within 1e-4, every parameter's gradient within 1e-4 per
#    tensor, 32 greedy tokens from shardrun sample (the key/value cache)
#    identical wherever the reference's top-2 gap exceeds 1e-4; model.init
#    from the directory (its config.json gives the model; a conflicting key
#    78; another rope_scaling type 65 naming it) trains a frozen step with
#    the reference's logits; ckpt export -o DIR/ loads in
#    LlamaForCausalLM.from_pretrained with the same logits, and the job's
#    tokenizer.json is written beside it for AutoTokenizer.
. "${SR_SRCDIR:-.}/tests/tap.sh"
S=$SHARDRUN
PROBE=${SR_BUILDDIR:-.}/tests/model_probe
CMP=${SR_BUILDDIR:-.}/tests/cmp_params
REF=$SR_SRCDIR/tests/hf/llama_ref.py
cd "$T" || exit 99

# a small Llama: the llama-tiny preset at 2 layers, 64 wide, 64 tokens
tiny_job job.yaml model.preset=llama-tiny train.batch_size=6 train.steps=8 train.lr=6e-4 train.warmup_steps=4 \
    log.every=1 threads=2
# run NAME [args]: trains job.yaml; params in NAME.params, log in NAME.err, status in $rc
run() {
    name=$1
    shift
    SHARDRUN_TEST_DUMP_PARAMS="$T/$name.params" "$S" train job.yaml --set log.metrics="$T/$name.jsonl" "$@" \
        >"$T/$name.out" 2>"$T/$name.err"
    rc=$?
}

# --- 1. training, checkpoints, refusals ----------------------------------------
run ref --set checkpoint.dir="$T/refck" --set checkpoint.every_steps=4
first=$(field ref.jsonl loss | head -1)
final=$(last ref.jsonl loss)
check "llama-tiny trains 8 steps (loss $first -> $final)" \
    sh -c "[ $rc -eq 0 ] && awk 'BEGIN { exit !($final < $first) }'"
check "the start line names the family and its dims" \
    grep -q "model custom (llama-tiny with n_layer, n_embd, seq_len changed): llama, n_layer 2, n_head 4, n_embd 64, vocab_size 256, seq_len 64, n_kv_head 2, ffn_dim 704, tied" ref.err
M=refck/step_00000008/manifest.yaml
check "the manifest is version 4 and records the family and its keys" \
    sh -c "grep -q '^version: 4' $M && grep -q '  arch: llama' $M && grep -q '  n_kv_head: 2' $M && grep -q '  ffn_dim: 704' $M && grep -q '  tie_embeddings: true' $M && grep -q '  norm_eps: 1e-05' $M && grep -q '  rope_theta: 10000' $M"
"$S" ckpt inspect refck/step_00000008 >inspect.out 2>&1
check "ckpt inspect names the family" grep -q "model        llama, n_layer 2, n_head 4, n_embd 64" inspect.out
run resumed --set checkpoint.dir="$T/refck" --set checkpoint.resume="$T/refck/step_00000004" \
    --set checkpoint.dir="$T/resck"
check "a Llama checkpoint resumes bitwise (step 4 -> 8 equals the uninterrupted run)" \
    sh -c "[ $rc -eq 0 ] && grep -q 'resume=4' resumed.err && cmp -s resumed.params ref.params"
expect_status 65 "a GPT-2 job refuses the Llama checkpoint" "$S" train job.yaml --set model.preset=tiny \
    --set model.n_layer=2 --set model.n_embd=64 --set checkpoint.resume="$T/refck/step_00000008"
check "  ...naming both models" grep -q "different model (llama, n_layer 2.*this job has gpt2, n_layer 2" "$T/err"
expect_status 78 "a Llama key on a gpt2 job is refused" "$S" config check job.yaml --set model.arch=gpt2 \
    --set model.n_kv_head=2
check "  ...naming it" grep -q "model.n_kv_head applies to model.arch: llama only" "$T/err"
expect_status 78 "n_kv_head that does not divide n_head is refused" "$S" config check job.yaml --set model.n_kv_head=3
check "  ...with a divisor as the hint" grep -q "must divide model.n_head (4).*hint: n_kv_head 2 divides it" "$T/err"
expect_status 78 "ckpt export to llm.c's format refuses a Llama checkpoint" \
    "$S" ckpt export refck/step_00000008 -o x.bin
check "  ...naming the formats that work, writing nothing" \
    sh -c "grep -q 'hint: -o DIR/ for a Hugging Face directory, or -o FILE.safetensors' '$T/err' && [ ! -e x.bin ]"
"$S" sample refck --prompt-tokens 84,104,101,32 --temperature 0 --tokens 40 --no-echo >g.txt 2>g.err
"$PROBE" greedy ckpt:"$T/refck/step_00000008" 84,104,101,32 40 >g.ids 2>/dev/null
check "shardrun sample of a Llama checkpoint (key/value cache) is greedy argmax of the full forward" \
    python3 -c "import sys; a=open('g.txt','rb').read(); b=bytes(int(x) for x in open('g.ids').read().split()); sys.exit(not (len(b) == 40 and a[:40] == b and a[40:] in (b'', b'\\n')))"
"$S" config show job.yaml >shown.yaml 2>/dev/null
check "config show's output of a Llama job reads back as the same job" \
    sh -c "'$S' config show shown.yaml 2>/dev/null | tail -n +2 >shown2.yaml && tail -n +2 shown.yaml | cmp -s - shown2.yaml"

# Llama-3-style data: a llama3 rank file (the 256 bytes; its special tokens
# from id 256, <|begin_of_text|> first) and each document opened by it
awk 'BEGIN { b64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
             for (i = 0; i < 256; i++)
                 printf "%s%s==%s%d\n", substr(b64, int(i / 4) + 1, 1), substr(b64, (i % 4) * 16 + 1, 1), " ", i }' \
    >ranks.tiktoken
printf 'hello llama\n' >d1.txt
printf 'second doc\n' >d2.txt
"$S" data prepare --tokenizer llama3:ranks.tiktoken --doc-token '<|begin_of_text|>' -o l3 d1.txt d2.txt \
    >prep.out 2>prep.err
check "data prepare --doc-token '<|begin_of_text|>': each document starts with Llama-3's id (256 here)" \
    sh -c "[ \"\$(od -A n -t u2 -j 1024 -N 30 l3/data_train_000001.bin | tr -s ' \\n' ' ' | sed 's/^ //; s/ \$//')\" = '256 104 101 108 108 111 32 108 108 97 109 97 10 256 115' ]"

# --- 2. resharding resume across rank counts ------------------------------------
if ! long_tier; then
    skip "resuming a Llama checkpoint on 3 and 1 ranks: the long tier's (test_vranks checks the FSDP equivalence in the fast tier)"
elif have_mpirun -x SHARDRUN_TEST_DUMP_PARAMS; then
    SHARDRUN_TEST_DUMP_PARAMS="$T/two.params" $MPI -np 2 "$S" train job.yaml --set checkpoint.dir="$T/twock" \
        --set checkpoint.every_steps=4 >two.out 2>two.err
    check "2 ranks train the 8 steps within 1e-5 of 1 rank ($("$CMP" two.params ref.params 1e-5 2>&1 | tail -1))" \
        "$CMP" two.params ref.params 1e-5
    for np in 3 1; do
        SHARDRUN_TEST_DUMP_PARAMS="$T/r$np.params" $MPI -np $np "$S" train job.yaml \
            --set checkpoint.dir="$T/twock" --set checkpoint.resume="$T/twock/step_00000004" \
            --set checkpoint.dir="$T/r${np}ck" >r$np.out 2>r$np.err
        check "a checkpoint of 2 ranks resumes on $np, within 1e-5 of the 1-rank run ($("$CMP" r$np.params ref.params 1e-5 2>&1 | tail -1))" \
            "$CMP" r$np.params ref.params 1e-5
    done
else
    skip_mpirun "resuming a Llama checkpoint on another number of ranks"
fi

# --- 3. against transformers --------------------------------------------------------
HFPY=${SHARDRUN_HF_PYTHON:-$SR_SRCDIR/.venv-hf/bin/python}
if [ -x "$HFPY" ] && "$HFPY" -c 'import transformers, safetensors, torch, tokenizers' 2>/dev/null; then
    py() { "$HFPY" "$REF" "$@" 2>>py.err; }
    TOK=$(awk 'BEGIN { s = 3; for (i = 0; i < 65; i++) { s = (s * 1103515245 + 12345) % 2147483648; printf "%s%d", i ? "," : "", s % 300 } }')
    TOK20=$(echo "$TOK" | cut -d, -f1-20)
    py refs "$TOK20" "$TOK" 5,17,250
    check "the reference models are made (untied, tied, sharded in $(ls sharded/*.safetensors 2>/dev/null | wc -l) files)" \
        sh -c "[ -s untied/model.safetensors ] && [ -s tied/model.safetensors ] && [ -s sharded/model.safetensors.index.json ] && [ -s tied.greedy ]"
    for m in untied tied sharded bf16 f16; do
        "$PROBE" logits hf:$m "$TOK20" >$m.sr.logits 2>$m.probe.err
        check "$m: logits equal transformers' ($(py close $m.sr.logits $m.ref.logits 1e-4))" \
            py close $m.sr.logits $m.ref.logits 1e-4
        "$PROBE" grads hf:$m "$TOK" $m.sr.st >$m.sr.loss 2>>$m.probe.err
        check "$m: the loss equals transformers' ($(cat $m.sr.loss) vs $(cat $m.ref.loss))" \
            py close $m.sr.loss $m.ref.loss 1e-4
        check "$m: every parameter's gradient equals transformers' ($(py compare $m.sr.st $m.ref.st 1e-4))" \
            py compare $m.sr.st $m.ref.st 1e-4
    done
    for m in untied tied; do
        "$S" sample $m --prompt-tokens 5,17,250 --tokens 32 --temperature 0 --no-echo >$m.sample 2>$m.sample.err
        check "$m: shardrun sample's 32 greedy tokens (key/value cache, grouped heads) are transformers' where its top-2 gap exceeds 1e-4" \
            awk 'NR == FNR { if (FNR == 1) n = split($0, want); else split($0, gap); next }
                 { split($0, got) } END { if (n != 32) exit 1
                   for (i = 1; i <= n; i++) { if (got[i] != want[i]) exit !(gap[i] <= 1e-4); }
                   exit 0 }' $m.greedy $m.sample
    done
    check "  ...and its summary names a Hugging Face Llama" grep -q "(Hugging Face Llama, vocab 300" untied.sample.err

    # model.init from a Hugging Face directory: the model from its config.json
    tiny_job init.yaml model.init="$T/sharded" data.embedded_any_vocab=true train.steps=1 train.lr=0 \
        train.min_lr=0 train.warmup_steps=0 train.batch_size=2 train.eval_every=0 checkpoint.dir="$T/initck" \
        checkpoint.every_steps=1
    sed -i '/preset:/d; /n_layer:/d; /n_embd:/d; /n_head:/d; /seq_len:/d' init.yaml
    "$S" train init.yaml >init.out 2>init.err
    check "model.init of a sharded Hugging Face directory takes the model from its config.json" \
        sh -c "grep -q 'model llama of $T/sharded/config.json: llama, n_layer 2, n_head 4, n_embd 64, vocab_size 300, seq_len 64, n_kv_head 2, ffn_dim 96, untied' init.err && grep -q 'safetensors, 21 tensors in [0-9]* files F32' init.err"
    "$PROBE" logits ckpt:"$T/initck/step_00000001" "$TOK20" >init.logits 2>/dev/null
    check "  ...and its frozen step holds the reference's weights ($(py close init.logits sharded.ref.logits 1e-4))" \
        py close init.logits sharded.ref.logits 1e-4
    expect_status 78 "  ...a model key that disagrees with config.json is refused" "$S" config check init.yaml \
        --set model.n_layer=3
    check "  ...naming both" grep -q "model.n_layer is 3, and model.init's $T/sharded/config.json says 2" "$T/err"
    mkdir yarn && cp untied/model.safetensors yarn/ &&
        sed 's/"llama3"/"yarn"/' untied/config.json >yarn/config.json
    expect_status 65 "  ...a rope_scaling type shardrun lacks is a data error" "$S" config check init.yaml \
        --set model.init="$T/yarn"
    check "  ...naming it" grep -q 'rope_scaling type "yarn" is not supported' "$T/err"

    # transformers 5's config.json: rope_parameters instead of rope_theta and rope_scaling
    mkdir rp && cp untied/model.safetensors rp/ && python3 -c '
import json
c = json.load(open("untied/config.json"))
p = c.pop("rope_scaling")
p["rope_theta"] = c.pop("rope_theta")
c["rope_parameters"] = p
json.dump(c, open("rp/config.json", "w"))'
    "$PROBE" logits hf:rp "$TOK20" >rp.sr.logits 2>/dev/null
    check "  ...a config.json with rope_parameters (transformers 5) reads as the same model" \
        sh -c "[ -s rp.sr.logits ] && cmp -s rp.sr.logits untied.sr.logits"

    # export: from_pretrained gives the same logits; the job's tokenizer beside it
    py tokenizer tk
    "$S" train init.yaml --set data.tokenizer="$T/tk/tokenizer.json" --set checkpoint.dir="$T/tokck" \
        >tokck.out 2>tokck.err
    "$S" ckpt export tokck -o ex/ >ex.out 2>ex.err
    "$PROBE" logits ckpt:"$T/tokck/step_00000001" "$TOK20" >ex.sr.logits 2>/dev/null
    py export ex "$TOK20" ex.ref.logits ex.ids 'the quick brown fox'
    check "ckpt export -o DIR/: LlamaForCausalLM.from_pretrained gives shardrun's logits ($(py close ex.sr.logits ex.ref.logits 1e-4))" \
        py close ex.sr.logits ex.ref.logits 1e-4
    check "  ...config.json is a LlamaConfig with the scaling, the tokenizer.json is copied" \
        sh -c "grep -q '\"model_type\": \"llama\"' ex/config.json && grep -q '\"rope_type\": \"llama3\"' ex/config.json && cmp -s ex/tokenizer.json tk/tokenizer.json && grep -q 'the run.s tokenizer as tokenizer.json' ex.err"
    check "  ...and AutoTokenizer loads it from the export (ids $(cat ex.ids))" test -s ex.ids
else
    case ",${SHARDRUN_TEST_REQUIRE:-}," in
    *,transformers,*) not_ok "transformers: $HFPY cannot import it (tests/hf/setup-venv.sh; SHARDRUN_TEST_REQUIRE requires transformers)" ;;
    *) skip "the transformers checks: $HFPY cannot import transformers (run tests/hf/setup-venv.sh .venv-hf)" ;;
    esac
fi
done_testing
