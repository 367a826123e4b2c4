#!/bin/sh
# sample.sh — generation.  `shardrun sample` is deterministic for a seed;
# top-k 1 (and temperature 0) equal greedy argmax of the full training
# forward (tests/model_probe, no key/value cache) on a byte-level and a
# 300-token model, also past seq_len where the window slides; after the
# default job's 200 steps 500 sampled bytes are >= 95 % printable and hold
# at least 3 of the corpus's 10 most frequent words; a tokenizer file in
# llm.c's format made here decodes; every refusal has its status.
# log.sample_every prints samples in the training log, the same text on 1
# and 2 ranks and on the fake device, and the text shardrun sample prints
# for that step's checkpoint.  sample takes a checkpoint.dir (its newest
# checkpoint that verifies, older ones when not) and a Hugging Face GPT-2
# directory; its tokens do not depend on --threads.  The fast tier trains the default job
# 20 steps (the sampling checks need a checkpoint, not a good model); the
# long tier trains 200 and checks the sample's quality.
. "${SR_SRCDIR:-.}/tests/tap.sh"
S=$SHARDRUN
PROBE=${SR_BUILDDIR:-.}/tests/model_probe
HF=$(cd "$SR_SRCDIR/tests/hf" && pwd -P) # absolute and resolved, as the logs print it
cd "$T" || exit 99
DIMS="--set model.n_layer=2 --set model.n_head=4 --set model.n_embd=48 --set model.vocab_size=300 --set model.seq_len=32 --set data.embedded_any_vocab=true"
FROZEN="--set train.steps=1 --set train.lr=0 --set train.min_lr=0 --set train.warmup_steps=0 --set train.batch_size=6"
FROZEN="$FROZEN --set threads=1 --set train.eval_every=0"

# 1. the default job, samples in its log: 200 steps in the long tier (the
# model's quality), 20 in the fast tier and under the sanitizers (memory
# errors; their long tier would take minutes)
steps=20
long_tier && [ -z "${ASAN_OPTIONS:-}" ] && steps=200
"$S" train --set checkpoint.dir="$T/d.ck" --set log.sample_every=$((steps / 2)) --set train.steps=$steps >d.out 2>d.err
check "the default job trains with log.sample_every $((steps / 2))" test $? -eq 0 || diag "$(tail -5 d.err)"
check "  ...and logs a sample at steps $((steps / 2)) and $steps" \
    test "$(grep -c "sample at step \($((steps / 2))\|$steps\) (64 tokens, temperature 0.8, top-k 40" d.err)" -eq 2
D=d.ck/step_$(printf %08d $steps)
"$S" sample $D --tokens 500 --temperature 0.8 --seed 1 >s1.txt 2>s1.err
check "sample: 500 tokens of a byte-level model are 500 bytes on stdout, ending with a newline (added unless the last byte is one)" \
    python3 -c "import sys; s=open('s1.txt','rb').read(); sys.exit(not (s.endswith(b'\\n') and (len(s) == 501 or (len(s) == 500 and s[499] == 10))))" ||
    diag "$(cat s1.err)"
check "  ...one summary line on stderr" grep -q "sampled 500 tokens from $D (step $steps, vocab 256, bytes)" s1.err
if group --long "the sample's quality after the default job's 200 steps"; then
if [ $steps -lt 200 ]; then
    skip "the sample's quality after the default job's 200 steps: a sanitizer build trains 20"
else
check ">= 95 % of them printable, and >= 3 of the corpus's 10 most frequent words (length >= 3) appear" \
    python3 - s1.txt "$SR_SRCDIR/data/corpus.txt" <<'EOF'
import collections, re, sys
s = open(sys.argv[1], "rb").read()
printable = sum(1 for b in s if 32 <= b < 127 or b in (9, 10))
words = re.findall(r"[a-z]+", open(sys.argv[2], encoding="utf-8", errors="replace").read().lower())
top = [w for w, _ in collections.Counter(w for w in words if len(w) >= 3).most_common(10)]
text = s.decode("latin-1").lower()
found = [w for w in top if w in text]  # appears anywhere (whole words are rarer at this loss)
print("# %d/%d printable; top words %s; found %s" % (printable, len(s), top, found))
sys.exit(0 if printable >= 0.95 * len(s) and len(found) >= 3 else 1)
EOF
fi
fi
"$S" sample $D --tokens 500 --seed 1 >s1b.txt 2>/dev/null
check "the same seed gives the same text" cmp -s s1.txt s1b.txt
"$S" sample $D --tokens 500 --seed 2 >s2.txt 2>/dev/null
check "another seed another text" sh -c "! cmp -s s1.txt s2.txt"
"$S" sample $D --prompt "The " --top-k 1 --tokens 40 --no-echo >g1.txt 2>g1.err
"$PROBE" greedy ckpt:"$T/$D" 84,104,101,32 40 >g1.ids
check "top-k 1 is greedy argmax of the full forward (byte-level, prompt text)" \
    python3 -c "import sys; a=open('g1.txt','rb').read(); b=bytes(int(x) for x in open('g1.ids').read().split()); sys.exit(not (a[:len(b)] == b and a[len(b):] in (b'', b'\\n') and a.endswith(b'\\n')))"
"$S" sample $D --prompt "The " --temperature 0 --tokens 40 --no-echo >g0.txt 2>/dev/null
check "  ...and so is temperature 0" cmp -s g0.txt g1.txt

# 2. a 300-token model (tests/hf's tiny GPT-2): ids, greedy past seq_len,
# a tokenizer file
"$S" train $DIMS $FROZEN --set checkpoint.dir="$T/v.ck" --set model.init="$HF/tiny/model.safetensors" >v.out 2>v.err
V=v.ck/step_00000001
"$S" sample $V --prompt-tokens 5,299,17 --top-k 1 --tokens 25 --no-echo >v.ids 2>v.err
"$PROBE" greedy ckpt:"$T/$V" 5,299,17 25 >v.ref
check "a non-byte vocabulary prints token ids; top-k 1 equals greedy argmax of the full forward" cmp -s v.ids v.ref ||
    diag "sample: $(cat v.ids)" "greedy: $(cat v.ref)"
"$S" sample $V --prompt-tokens 5 --top-k 1 --tokens 100 --no-echo >long.ids 2>long.err
check "generation past seq_len (32): 100 ids, the window slides" \
    test "$(wc -w <long.ids)" -eq 100
"$PROBE" greedy ckpt:"$T/$V" 5 31 >long.ref
check "  ...the first 31 are greedy's" test "$(cut -d' ' -f1-31 long.ids)" = "$(cat long.ref)"
python3 - tok.bin <<'EOF'
import struct, sys
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<256I", 20240328, 2, 300, 299, *([0] * 252)))
    for i in range(300):
        piece = ("<%d>" % i).encode()
        f.write(bytes([len(piece)]) + piece)
EOF
"$S" sample $V --prompt-tokens 5,299,17 --top-k 1 --tokens 25 --no-echo --tokenizer tok.bin >tok.txt 2>tok.err
check "a tokenizer file (llm.c format) decodes the same tokens" \
    test "$(cat tok.txt)" = "$(sed 's/\([0-9]*\)/<\1>/g; s/ //g' v.ids)"
"$S" sample $V --tokens 3 --tokenizer tok.bin >/dev/null 2>tok0.err
check "  ...and without a prompt starts from its end-of-text token" grep -q "prompt (the tokenizer's end-of-text token)" tok0.err

# 3. refusals
expect_status 64 "--prompt TEXT with a 300-token vocabulary" "$S" sample $V --prompt hello
check "  ...says to use --prompt-tokens" grep -q "use --prompt-tokens" "$T/err"
expect_status 64 "--prompt-tokens outside the vocabulary" "$S" sample $V --prompt-tokens 5,300
expect_status 64 "--prompt-tokens that is not a list of ids" "$S" sample $V --prompt-tokens 1,,2
expect_status 64 "--prompt and --prompt-tokens together" "$S" sample $D --prompt a --prompt-tokens 1
expect_status 64 "--tokens 0" "$S" sample $D --tokens 0
expect_status 64 "--temperature -1" "$S" sample $D --temperature -1
expect_status 64 "--top-k -1" "$S" sample $D --top-k -1
expect_status 64 "--seed x" "$S" sample $D --seed x
expect_status 64 "sample without a checkpoint" "$S" sample
expect_status 64 "a sample option elsewhere" "$S" train --tokens 5
expect_status 66 "a missing checkpoint" "$S" sample nowhere
expect_status 66 "a missing tokenizer file" "$S" sample $V --tokenizer none.bin
head -c 1024 /dev/zero >zero.bin
expect_status 65 "a tokenizer file without llm.c's magic" "$S" sample $V --tokenizer zero.bin
python3 -c "
import struct
open('small.bin','wb').write(struct.pack('<256I', 20240328, 1, 100, *([0]*253)) + b''.join(bytes([1, 65]) for _ in range(100)))"
expect_status 65 "a tokenizer of fewer tokens than the vocabulary" "$S" sample $V --tokenizer small.bin
cp -r d.ck bad.d.ck
printf 'X' | dd of=bad.$D/shard_00000.bin bs=1 seek=5000 conv=notrunc 2>/dev/null
expect_status 65 "a checkpoint that does not verify" "$S" sample bad.$D

# 4. what users have: a checkpoint.dir (its newest checkpoint that
# verifies), a Hugging Face GPT-2 directory; the threads
"$S" sample d.ck --tokens 500 --seed 1 >dir.txt 2>dir.err
check "sample of a checkpoint.dir: its newest checkpoint's text" cmp -s s1.txt dir.txt
check "  ...with a notice naming it" grep -q "d.ck: using $D, the newest checkpoint that verifies" dir.err
"$S" train $DIMS $FROZEN --set train.steps=2 --set checkpoint.dir="$T/two.ck" --set checkpoint.every_steps=1 \
    --set model.init="$HF/tiny/model.safetensors" >two.ck.out 2>&1
"$S" sample two.ck/step_00000001 --prompt-tokens 5,299,17 --tokens 20 --no-echo >one.ref 2>/dev/null
printf 'X' | dd of=two.ck/step_00000002/shard_00000.bin bs=1 seek=3000 conv=notrunc 2>/dev/null
"$S" sample two.ck --prompt-tokens 5,299,17 --tokens 20 --no-echo >fb.ids 2>fb.err
check "a checkpoint.dir whose newest does not verify: the older one's text" sh -c "[ -s one.ref ] && cmp -s one.ref fb.ids"
check "  ...with a warning naming the one skipped" grep -q "two.ck/step_00000002 does not verify" fb.err
printf 'X' | dd of=two.ck/step_00000001/shard_00000.bin bs=1 seek=3000 conv=notrunc 2>/dev/null
expect_status 65 "a checkpoint.dir none of whose checkpoints verifies" "$S" sample two.ck
check "  ...says so" grep -q "none of its 2 checkpoints verifies" "$T/err"
mkdir empty.ck
expect_status 66 "a directory with no checkpoint" "$S" sample empty.ck
expect_status 65 "a checkpoint.dir with a bad tokenizer file" "$S" sample d.ck --tokenizer zero.bin
check "  ...is the tokenizer's error, not the checkpoints'" sh -c "grep -q 'not a tokenizer file' '$T/err' && ! grep -q 'verif' '$T/err'"
"$S" ckpt export d.ck -o dexp.safetensors 2>/dev/null && "$S" ckpt export $D -o sexp.safetensors 2>/dev/null
check "ckpt export of a checkpoint.dir writes its newest checkpoint" sh -c "[ -s dexp.safetensors ] && cmp -s dexp.safetensors sexp.safetensors"
"$S" sample "$HF/tiny" --prompt-tokens 5,299,17 --top-k 1 --tokens 25 --no-echo >hfdir.ids 2>hfdir.err
check "sample of a Hugging Face GPT-2 directory (transformers' save_pretrained): the checkpoint's tokens" \
    cmp -s hfdir.ids v.ids || diag "$(cat hfdir.err)"
check "  ...its summary names it" grep -q "sampled 25 tokens from $HF/tiny (Hugging Face GPT-2, vocab 300" hfdir.err
"$S" ckpt export $V -o exp/ 2>/dev/null
"$S" sample exp --prompt-tokens 5,299,17 --top-k 1 --tokens 25 --no-echo >exp.ids 2>/dev/null
check "  ...and of ckpt export -o DIR/'s output" cmp -s exp.ids v.ids
mkdir llama && cp "$HF/tiny/model.safetensors" llama/ && sed 's/"gpt2"/"mistral"/' "$HF/tiny/config.json" >llama/config.json
expect_status 65 "a Hugging Face directory of another architecture" "$S" sample llama
check "  ...names model_type" grep -q 'model_type is "mistral"' "$T/err"
mkdir nolayer && cp "$HF/tiny/model.safetensors" nolayer/ && grep -v '"n_layer"' "$HF/tiny/config.json" >nolayer/config.json
expect_status 65 "a config.json without n_layer" "$S" sample nolayer
mkdir noweights && cp "$HF/tiny/config.json" noweights/
expect_status 66 "a Hugging Face directory without model.safetensors" "$S" sample noweights
"$S" sample $V --prompt-tokens 5 --tokens 100 --threads 1 >t1.ids 2>t1.err
"$S" sample $V --prompt-tokens 5 --tokens 100 --threads 2 >t2.ids 2>t2.err
check "--threads 1 and --threads 2 give the same tokens (a one-token forward splits columns)" \
    sh -c "[ -s t1.ids ] && cmp -s t1.ids t2.ids"
check "  ...and the summary says where the threads came from" grep -q "2 threads (--threads)" t2.err
"$S" sample $V --prompt-tokens 5 --tokens 3 >/dev/null 2>tk.err
check "without --threads the checkpoint's threads key (1) decides" grep -q "1 thread (the checkpoint's threads key)" tk.err
expect_status 64 "--threads 0" "$S" sample $V --threads 0
expect_status 64 "--threads on train" "$S" train --threads 2

# 5. log.sample_every at step N is shardrun sample of step N's checkpoint
# with --tokens 64 --seed (train.seed + N)
"$S" train $DIMS $FROZEN --set train.steps=2 --set log.sample_every=2 --set checkpoint.dir="$T/ls.ck" \
    --set model.init="$HF/tiny/model.safetensors" --set train.seed=7 >ls.out 2>ls.err
grep 'sample at step 2' ls.err | sed 's/.*s): "//; s/"$//' >ls.sample
"$S" sample ls.ck/step_00000002 --tokens 64 --seed 9 >ls.ids 2>/dev/null
check "the training log's sample at step 2 = shardrun sample of step 2's checkpoint, --tokens 64 --seed 7+2" \
    sh -c "[ -s ls.sample ] && [ \"\$(cat ls.sample)\" = \"\$(cat ls.ids)\" ]" || diag "log: $(cat ls.sample)" "sample: $(cat ls.ids)"

# above the cap (25% of the node's memory over its ranks) the sample is
# skipped with one warning, and training goes on
SHARDRUN_TEST_NODE_MEM=1000000 "$S" train $DIMS $FROZEN --set train.steps=3 --set log.sample_every=1 \
    --set model.init="$HF/tiny/model.safetensors" >cap.out 2>cap.err
check "a sample above the host-memory cap is skipped: status 0, no sample line" \
    sh -c "[ $? = 0 ] && ! grep -q 'sample at step' cap.err"
check "  ...one warning naming the cap" test "$(grep -c 'samples skipped' cap.err)" = 1

# 6. log.sample_every on 2 ranks: the same sample as 1 rank (rank 0 prints)
"$S" train $DIMS $FROZEN --set train.steps=2 --set log.sample_every=2 --set model.init="$HF/tiny/model.safetensors" \
    >one.out 2>one.err
grep 'sample at step' one.err | sed 's/.*s): //' >one.sample
SHARDRUN_TEST_DEVICE=fake "$S" train $DIMS $FROZEN --set train.steps=2 --set log.sample_every=2 \
    --set model.init="$HF/tiny/model.safetensors" >fake.out 2>fake.err
grep 'sample at step' fake.err | sed 's/.*s): //' >fake.sample
check "log.sample_every on the fake device (logits downloaded from device memory): the CPU run's text" \
    sh -c "[ -s one.sample ] && cmp -s one.sample fake.sample"
if have_mpirun; then
    $MPI -n 2 "$S" train $DIMS $FROZEN --set train.steps=2 \
        --set log.sample_every=2 --set model.init="$HF/tiny/model.safetensors" </dev/null >two.out 2>two.err
    check "log.sample_every on 2 ranks: one sample line (rank 0)" test "$(grep -c 'sample at step 2' two.err)" -eq 1
    grep 'sample at step' two.err | sed 's/.*s): //' >two.sample
    check "  ...the 1-rank run's text (rank 0 samples the gathered model)" cmp -s one.sample two.sample
else
    skip_mpirun "log.sample_every on 2 ranks"
fi
check "the 1-rank sample of a 300-token model shows ids" grep -q '"[0-9]* [0-9]* [0-9]*' one.sample
done_testing
