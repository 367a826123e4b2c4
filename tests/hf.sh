#!/bin/sh
# hf.sh — pretrained weights in and out.  model.init from tests/hf/'s tiny
# GPT-2 saved by transformers (transformer. prefix, F32) and from its
# hub-style variant (no prefix, causal-mask buffers, a tied lm_head, BF16 and
# F16) gives the logits transformers computed (<= 1e-5 relative), through a
# real training start on 1, 2 and 3 ranks and on the fake device; export ->
# model.init -> export is bitwise (safetensors and llm.c v3; a bf16 v5 file
# gives its rounded values); the manifest records the file and its SHA-256;
# ranks that see different files under one path refuse to start (78);
# every refusal (export's and model.init's) has its status and changes
# nothing on disk.  With the Python of tests/hf/setup-venv.sh
# (SHARDRUN_HF_PYTHON, default $SR_SRCDIR/.venv-hf/bin/python): the
# safetensors package reads the export with exactly GPT2LMHeadModel's names,
# shapes and values, and transformers' from_pretrained gives shardrun's
# logits (<= 1e-4).  SHARDRUN_TEST_REQUIRE=transformers makes that Python a
# requirement.
. "${SR_SRCDIR:-.}/tests/tap.sh"
S=$SHARDRUN
PROBE=${SR_BUILDDIR:-.}/tests/model_probe
HF=$(cd "$SR_SRCDIR/tests/hf" && pwd -P) # absolute and resolved, as the logs print it
cd "$T" || exit 99
TOK=$(cat "$HF/tokens.txt")
DIMS="--set model.n_layer=2 --set model.n_head=4 --set model.n_embd=48 --set model.vocab_size=300 --set model.seq_len=32 --set data.embedded_any_vocab=true"
FROZEN="--set train.steps=1 --set train.lr=0 --set train.min_lr=0 --set train.warmup_steps=0 --set train.batch_size=6"
FROZEN="$FROZEN --set threads=1 --set train.eval_every=0 --set log.every=1"

# close A B TOL: the numbers of A within TOL x max|B| of B's, same count
close() {
    python3 - "$1" "$2" "$3" <<'EOF'
import sys
a = [float(x) for x in open(sys.argv[1]).read().split()]
b = [float(x) for x in open(sys.argv[2]).read().split()]
rel = max(abs(x - y) for x, y in zip(a, b)) / max(abs(y) for y in b) if a and len(a) == len(b) else 1e9
print("# %d values, max |difference| / max |reference| = %.3g" % (len(a), rel))
sys.exit(0 if rel <= float(sys.argv[3]) else 1)
EOF
}
# init NAME FILE [extra sets]: a frozen step from FILE, checkpoint in NAME.ck
init() {
    name=$1 file=$2
    shift 2
    "$S" train $DIMS $FROZEN --set checkpoint.dir="$T/$name.ck" --set model.init="$file" "$@" >"$name.out" 2>"$name.err"
    rc=$?
}
logits_of() { "$PROBE" logits "ckpt:$T/$1.ck/step_00000001" "$TOK" >"$1.logits" 2>>"$1.err"; }

# 1. transformers' save_pretrained file, and the hub-style file
for v in tiny hub; do
    init $v "$HF/$v/model.safetensors"
    check "model.init from tests/hf/$v trains (status $rc)" test "$rc" -eq 0 || diag "$(tail -5 $v.err)"
    logits_of $v
    check "  ...its checkpoint gives transformers' logits (<= 1e-5 relative)" close $v.logits "$HF/$v/logits.txt" 1e-5
done
check "the start log says where the weights came from" grep -q "weights from model.init $HF/tiny/model.safetensors" tiny.err
check "  ...and what the file held (prefix, the first seq_len rows of wpe)" \
    grep -q "model.init: loaded .*safetensors, 28 tensors F32, names with the transformer. prefix; wpe has 48 rows, the first 32 used" tiny.err
check "the hub file: no prefix, mask buffers skipped, lm_head tied, BF16+F16 widened" \
    grep -q "28 tensors F16+BF16, names without a prefix, causal-mask buffers skipped, lm_head tied" hub.err
sha=$(sha256sum "$HF/tiny/model.safetensors" | cut -d' ' -f1)
"$S" ckpt inspect tiny.ck/step_00000001 >inspect.out 2>&1
check "the manifest records model.init's path and SHA-256 (ckpt inspect)" \
    grep -q "^init  *$HF/tiny/model.safetensors (model.init of the first run; sha256 $sha)" inspect.out
check "  ...in manifest.yaml" grep -q "sha256: $sha" tiny.ck/step_00000001/manifest.yaml

# 2. every rank reads its own shard: 2 and 3 ranks, and the fake device
# with offload, give the 1-rank checkpoint's export bitwise
"$S" ckpt export tiny.ck/step_00000001 -o one.safetensors 2>/dev/null
SHARDRUN_TEST_DEVICE=fake "$S" train $DIMS $FROZEN --set checkpoint.dir="$T/fake.ck" \
    --set model.init="$HF/tiny/model.safetensors" --set sharding.offload.optimizer=true >fake.out 2>fake.err
"$S" ckpt export fake.ck/step_00000001 -o fake.safetensors 2>/dev/null
check "model.init on the fake device with offload: the same weights bitwise" cmp -s one.safetensors fake.safetensors
if have_mpirun; then
    init hub1 "$HF/hub/model.safetensors"
    "$S" ckpt export hub1.ck/step_00000001 -o hub1.safetensors 2>/dev/null
    for n in 2 3; do
        $MPI -n $n "$S" train $DIMS $FROZEN --set checkpoint.dir="$T/r$n.ck" \
            --set model.init="$HF/hub/model.safetensors" </dev/null >r$n.out 2>r$n.err
        "$S" ckpt export r$n.ck/step_00000001 -o r$n.safetensors 2>/dev/null
        check "model.init on $n ranks (mpirun): the 1-rank weights bitwise" cmp -s r$n.safetensors hub1.safetensors
    done
    # ranks that see different files under one path (a stale node-local
    # copy): each rank runs in its own directory, init.safetensors is the
    # hub file for rank 0 and the tiny one for rank 1
    mkdir -p d0 d1
    cp "$HF/hub/model.safetensors" d0/init.safetensors
    cp "$HF/tiny/model.safetensors" d1/init.safetensors
    $MPI -n 2 sh -c 'cd "d$OMPI_COMM_WORLD_RANK" && exec "$@"' sh "$S" train $DIMS $FROZEN \
        --set checkpoint.dir="$T/mixed.ck" --set model.init=init.safetensors </dev/null >mixed.out 2>mixed.err
    rc=$?
    check "model.init differing between ranks under one path: 78 before any weight is loaded (status $rc)" \
        sh -c "[ $rc = 78 ] && [ ! -e mixed.ck/latest ]"
    check "  ...naming the ranks and hosts whose file differs" \
        grep -q "model.init: init.safetensors is not the same file on every rank: rank 1 on $(hostname) ([0-9]* bytes) differs from rank 0 on $(hostname)" mixed.err
else
    skip_mpirun "model.init on 2 and 3 ranks, and differing between ranks"
fi

# 3. export -> model.init -> export, bitwise; the directory form; llm.c v3
# and a bf16 v5 file
"$S" ckpt export tiny.ck/step_00000001 -o dir/ 2>export.err
check "ckpt export -o DIR/ writes model.safetensors and config.json" test -s dir/model.safetensors -a -s dir/config.json
check "  ...DIR/model.safetensors is the -o FILE.safetensors export byte for byte" cmp -s dir/model.safetensors one.safetensors
init again "$T/one.safetensors"
"$S" ckpt export again.ck/step_00000001 -o again.safetensors 2>/dev/null
check "export -> model.init -> export is bitwise" cmp -s again.safetensors one.safetensors
"$S" ckpt export tiny.ck/step_00000001 -o one.bin 2>/dev/null
init fromllmc "$T/one.bin"
"$S" ckpt export fromllmc.ck/step_00000001 -o fromllmc.safetensors 2>/dev/null
check "model.init from the llm.c model file (version 3): bitwise the same weights" cmp -s fromllmc.safetensors one.safetensors
python3 "$HF/mutate.py" bf16 one.bin v5.bin rounded.bin
init fromv5 "$T/v5.bin"
"$S" ckpt export fromv5.ck/step_00000001 -o fromv5.bin 2>/dev/null
check "model.init from an llm.c bf16 file (version 5): exactly its values widened" cmp -s fromv5.bin rounded.bin
check "  ...logged as such" grep -q "llm.c model file version 5 (bf16)" fromv5.err
"$S" ckpt export tiny.ck/step_00000001 --format llmc -o llmc.out 2>/dev/null
check "--format llmc writes the llm.c file whatever -o's name" cmp -s llmc.out one.bin

# config.json
j=dir/config.json
for kv in '"model_type": "gpt2"' '"GPT2LMHeadModel"' '"vocab_size": 300' '"n_positions": 32' '"n_ctx": 32' \
    '"n_embd": 48' '"n_layer": 2' '"n_head": 4' '"n_inner": null' '"activation_function": "gelu_new"' \
    '"layer_norm_epsilon": 1e-05\|"layer_norm_epsilon": 1e-5' '"tie_word_embeddings": true'; do
    check "config.json has $kv" grep -q "$kv" $j
done
check "config.json's bos/eos are null for a vocabulary other than GPT-2's (transformers' 50256 would be out of range)" \
    sh -c "grep -q '\"bos_token_id\": null' $j && grep -q '\"eos_token_id\": null' $j"
"$S" train --set model.n_layer=1 --set model.n_head=2 --set model.n_embd=32 --set model.vocab_size=50257 --set data.embedded_any_vocab=true \
    --set model.seq_len=16 --set train.steps=1 --set train.batch_size=2 --set threads=1 --set train.eval_every=0 \
    --set checkpoint.dir="$T/g.ck" >g.out 2>g.err
"$S" ckpt export g.ck/step_00000001 -o g/ 2>/dev/null
check "GPT-2's vocabulary (50257): bos_token_id and eos_token_id 50256" \
    sh -c "grep -q '\"bos_token_id\": 50256' g/config.json && grep -q '\"eos_token_id\": 50256' g/config.json"

# 4. export's refusals: status, message, nothing on disk changes
cp -r "$HF/tiny" theirs
sum0=$(cat theirs/* | md5sum)
expect_status 73 "export into a directory whose config.json shardrun did not write" \
    "$S" ckpt export tiny.ck/step_00000001 -o theirs/
check "  ...says why" grep -q "refusing to overwrite theirs/config.json: shardrun did not write it" "$T/err"
check "  ...and leaves the directory as it was" test "$(cat theirs/* | md5sum)" = "$sum0"
expect_status 0 "export again into a directory it wrote (its config.json is replaced)" \
    "$S" ckpt export tiny.ck/step_00000001 -o dir/
expect_status 64 "export -o with a name of no known format" "$S" ckpt export tiny.ck/step_00000001 -o model.pt
check "  ...names the choices" grep -q "expected DIR/ .*FILE.safetensors, or FILE.bin" "$T/err"
expect_status 64 "--format with an unknown name" "$S" ckpt export tiny.ck/step_00000001 --format onnx -o x/
expect_status 64 "--format outside ckpt export" "$S" ckpt verify tiny.ck --format hf
expect_status 66 "export of a missing checkpoint" "$S" ckpt export nowhere -o new/
check "  ...creates nothing" test ! -e new

# 5. model.init's refusals (65 for the file's content, 66 when missing),
# each before anything is written: no checkpoint.dir, no metrics file
bad() { # STATUS KIND DESC GREP: a mutated hub file
    python3 "$HF/mutate.py" "$2" "$HF/hub/model.safetensors" m.st
    expect_status "$1" "model.init: $3" "$S" train $DIMS $FROZEN --set model.init="$T/m.st" \
        --set checkpoint.dir="$T/never.ck" --set log.metrics="$T/never.jsonl"
    check "  ...says: $4" grep -q "$4" "$T/err" || diag "$(cat "$T/err")"
    check "  ...and writes nothing" test ! -e never.ck -a ! -e never.jsonl
}
bad 65 untie "an lm_head.weight that differs from the embedding" "lm_head.weight differs from the token embedding"
bad 65 hdr-huge "a header over 100,000,000 bytes" "header length is 100000001 bytes; at most 100000000"
bad 65 hdr-past "a header length past the end of the file" "runs past the end of the file"
bad 65 dtype "an unknown dtype" "unknown dtype 'Q7'"
bad 65 overlap "overlapping offsets" "overlaps tensor"
bad 65 hole "a hole in the data" "belong to no tensor"
bad 65 dup "a duplicate key in the header" "duplicate object key"
bad 65 extra "a tensor of no such layer" "unexpected tensor 'transformer.h.9.ln_1.weight'"
bad 65 f64 "a dtype it does not widen (F64)" "has dtype F64; expected F32, BF16 or F16"
bad 65 trunc "a truncated file" "run past the end of the file's data"
expect_status 65 "model.init with other dims (n_embd 64) names the tensor and both shapes" \
    "$S" train $DIMS $FROZEN --set model.n_embd=64 --set model.init="$HF/tiny/model.safetensors"
check "  ...e.g. is [48, 144] in the file; this model needs [64, 192]" \
    grep -q "is \[[0-9, ]*\] in the file; this model needs \[[0-9, ]*\]" "$T/err"
expect_status 65 "model.init with seq_len beyond the file's 48 positions" \
    "$S" train $DIMS $FROZEN --set model.seq_len=64 --set model.init="$HF/tiny/model.safetensors"
check "  ...names wpe" grep -q "wpe.weight' is \[48, 48\] in the file; this model needs \[64, 48\] (at least seq_len rows)" "$T/err"
expect_status 66 "model.init naming a missing file" "$S" train $DIMS $FROZEN --set model.init="$T/none.safetensors" \
    --set checkpoint.dir="$T/never.ck"
check "  ...writes nothing" test ! -e never.ck

# 6. a resume ignores model.init and keeps the lineage's record
"$S" train $DIMS $FROZEN --set train.steps=2 --set checkpoint.dir="$T/tiny.ck" \
    --set model.init="$HF/hub/model.safetensors" >resume.out 2>resume.err
check "a resumed run ignores model.init (logged)" grep -q "model.init: ignored .*resumes from the checkpoint of step 1" resume.err
"$S" ckpt inspect tiny.ck/step_00000002 >inspect2.out 2>&1
check "  ...and its checkpoint still records the first run's model.init" grep -q "^init  *$HF/tiny/model.safetensors" inspect2.out

# 7. the Python side: the safetensors package and transformers
HFPY=${SHARDRUN_HF_PYTHON:-$SR_SRCDIR/.venv-hf/bin/python}
if [ -x "$HFPY" ] && "$HFPY" -c 'import transformers, safetensors, torch' 2>/dev/null; then
    check "the safetensors package reads the export: names, shapes, metadata, values" \
        "$HFPY" "$HF/check_export.py" names one.safetensors one.bin 2 4 48 300 32
    "$PROBE" logits ckpt:"$T/tiny.ck/step_00000002" "$TOK" >sr2.logits
    "$S" ckpt export tiny.ck/step_00000002 -o hf2/ 2>/dev/null
    check "transformers' GPT2LMHeadModel.from_pretrained(export) gives shardrun's logits (<= 1e-4)" \
        "$HFPY" "$HF/check_export.py" transformers hf2 "$TOK" sr2.logits
    # a model trained from the seed, not from a file
    "$S" train --set train.steps=3 --set train.batch_size=4 --set threads=2 --set checkpoint.dir="$T/seed.ck" \
        >seed.out 2>seed.err
    "$S" ckpt export seed.ck/step_00000003 -o seed/ 2>/dev/null
    "$PROBE" logits ckpt:"$T/seed.ck/step_00000003" 72,101,108,108,111,44,32,119,111,114,108,100 >seed.logits
    check "  ...also for the default job's trained model" \
        "$HFPY" "$HF/check_export.py" transformers seed 72,101,108,108,111,44,32,119,111,114,108,100 seed.logits
else
    case ",${SHARDRUN_TEST_REQUIRE:-}," in
    *,transformers,*) not_ok "transformers and safetensors: $HFPY cannot import them (tests/hf/setup-venv.sh; SHARDRUN_TEST_REQUIRE requires transformers)" ;;
    *) skip "transformers and safetensors checks: $HFPY cannot import them (run tests/hf/setup-venv.sh .venv-hf)" ;;
    esac
fi
done_testing
