#!/bin/sh
# tokenizer.sh — BPE tokenizers and `data prepare` from text to shards:
#   1. the references: a byte-level BPE trained by PyPI's tokenizers on a
#      corpus the test writes (tests/tok/ref.py: prose and code, CJK, emoji
#      and ZWJ sequences, combining marks, right-to-left text, Unicode
#      whitespace and long runs, digits, contractions, special-token text, a
#      long run of one character); shardrun's ids equal tokenizers' (from
#      tokenizer.json and from vocab.json + merges.txt) and tiktoken's
#      (the same ranks as a rank file, GPT-2's and Llama 3's patterns) id for
#      id; the fast tier on 150 KB, the long tier on 1.1 MB and every
#      loader;
#   2. invalid UTF-8: decode(encode(x)) == x, and the documented rule (a
#      run of bytes the pattern leaves unmatched is a piece of its own);
#   3. data prepare --tokenizer: the shards hold <|endoftext|> + the
#      reference's ids per document, index.json's sizes and SHA-256 are the
#      files', any thread count writes the same bytes, JSON Lines and gzip
#      give the same tokens as text files, --val-tokens / --shard-tokens
#      cut where asked, a vocabulary above 65,535 writes uint32 shards;
#   4. bad input: hostile tokenizer files, broken gzip, JSON Lines lines
#      without the field or with a non-string, unreadable inputs, bad flags
#      — one message naming file (and line), 64/65/66, nothing left.
# The reference checks need the test virtual environment's python
# (SHARDRUN_HF_PYTHON, tests/hf/setup-venv.sh) with tokenizers and
# tiktoken; SHARDRUN_TEST_REQUIRE=transformers makes its absence a failure.
. "${SR_SRCDIR:-.}/tests/tap.sh"
S=$SHARDRUN
PROBE=${SR_BUILDDIR:-.}/tests/tok_probe
REF="$SR_SRCDIR/tests/tok/ref.py"
cd "$T" || exit 99
HFPY=${SHARDRUN_HF_PYTHON:-$SR_SRCDIR/.venv-hf/bin/python}
have_ref=false
[ -x "$HFPY" ] && "$HFPY" -c 'import tokenizers, tiktoken' 2>/dev/null && have_ref=true

# nothing_left DIR: DIR holds no shard, index.json or temporary
nothing_left() { ! ls -a "$1" 2>/dev/null | grep -qE '\.bin|index\.json|^\.data'; }

# --- 1-3. the references and data prepare ------------------------------------
if $have_ref; then
    size=150000
    long_tier && size=1100000
    "$HFPY" "$REF" corpus c $size >corpus.out 2>&1 && "$HFPY" "$REF" train c >train.out 2>&1
    check "the reference tokenizer trains on the test corpus ($(cat corpus.out | tr -d '\n'); $(cat train.out))" \
        test -s c/tokenizer.json
    kinds="hf tiktoken"
    long_tier && kinds="hf pair tiktoken llama3"
    for k in $kinds; do
        "$HFPY" "$REF" compare c "$PROBE" $k >cmp.$k 2>&1
        check "ids equal the reference's, id for id ($(tail -1 cmp.$k))" grep -q ' 0 differ$' cmp.$k ||
            diag "$(head -5 cmp.$k)"
    done
    # 2. invalid UTF-8 round trips with every loader
    for spec in c/tokenizer.json gpt2:c/ranks.tiktoken; do
        "$PROBE" --roundtrip "$spec" c/invalid/*.bin c/docs/*.txt >rt.out 2>&1
        check "decode(encode(x)) == x for every document, invalid UTF-8 included ($spec: $(grep -c '^ok' rt.out) of $(wc -l <rt.out))" \
            sh -c "! grep -qv '^ok' rt.out"
    done
    printf 'ab\377\376cd \200x' >inv.bin
    "$PROBE" c/tokenizer.json inv.bin >inv.ids
    printf 'ab' >p1 && printf '\377\376' >p2 && printf 'cd' >p3 && printf ' ' >p4 && printf '\200' >p5 && printf 'x' >p6
    "$PROBE" c/tokenizer.json p1 p2 p3 p4 p5 p6 | tr '\n' ' ' | sed 's/  */ /g; s/ $//' >inv.want
    check "invalid bytes: each unmatched run is a piece of its own (ab | \\377\\376 | cd | ' ' | \\200 | x)" \
        sh -c "[ \"\$(cat inv.ids)\" = \"\$(cat inv.want)\" ]"

    # 3. data prepare --tokenizer
    "$S" data prepare --tokenizer c/tokenizer.json --val-tokens 5000 --shard-tokens 20000 -o out1 c/docs/*.txt \
        >p1.out 2>p1.err
    rc=$?
    check "data prepare --tokenizer: status $rc, $(ls out1 | grep -c '\.bin$') shards and index.json" \
        sh -c "[ $rc -eq 0 ] && [ -s out1/index.json ] && [ -s out1/data_val_000000.bin ] && [ -s out1/data_train_000001.bin ]"
    "$HFPY" "$REF" shards c out1 hf >sh.out 2>&1
    check "  ...the shards hold <|endoftext|> + the reference's ids of each document; index.json's sizes and SHA-256 ($(tail -1 sh.out))" \
        grep -q ' 0 problems$' sh.out || diag "$(cat sh.out)"
    check "  ...the validation shard holds --val-tokens, each training shard --shard-tokens (the last fewer)" \
        "$HFPY" -c "
import json, sys
s = json.load(open('out1/index.json'))['shards']
ok = s[0]['name'] == 'data_val_000000.bin' and s[0]['tokens'] == 5000 and all(x['tokens'] == 20000 for x in s[1:-1])
ok = ok and 0 < s[-1]['tokens'] <= 20000 and [x['name'] for x in s[1:]] == ['data_train_%06d.bin' % i for i in range(1, len(s))]
sys.exit(0 if ok else 1)"
    check "  ...the summary names the shards, tokens and documents" grep -q 'wrote out1/: .* shards (the first for validation) and index.json' p1.err
    check "  ...index.json records the tokenizer file's SHA-256 (sha256sum's) and pattern" \
        sh -c "grep -q \"\\\"sha256\\\": \\\"\$(sha256sum c/tokenizer.json | cut -c1-64)\\\"\" out1/index.json && grep -q '\"pattern\": \"gpt2\"' out1/index.json"
    for n in 1 3; do
        "$S" data prepare --threads $n --tokenizer c/tokenizer.json --val-tokens 5000 --shard-tokens 20000 \
            -o out.t$n c/docs/*.txt >/dev/null 2>&1
    done
    # same_set A B: the same shards, and index.json but for the files' modification times
    same_set() {
        for f in "$1"/*.bin; do cmp -s "$f" "$2/${f##*/}" || return 1; done
        [ "$(ls "$1")" = "$(ls "$2")" ] && [ "$(grep -v mtime_ns "$1/index.json")" = "$(grep -v mtime_ns "$2/index.json")" ]
    }
    threads_same() { same_set out1 out.t1 && same_set out1 out.t3; }
    check "  ...--threads 1 and 3 write the same bytes as the default" threads_same
    # JSON Lines and gzip
    "$HFPY" -c "
import json, os, sys
names = sorted(os.listdir('c/docs'))
with open('docs.jsonl', 'w') as f:
    for n in names:
        t = open('c/docs/' + n, encoding='utf-8', newline='').read()
        f.write(json.dumps({'id': n, 'text': t}) + '\n')
"
    gzip -c docs.jsonl >docs.jsonl.gz
    "$S" data prepare --tokenizer c/tokenizer.json --field text --val-tokens 5000 --shard-tokens 20000 -o out.jl \
        docs.jsonl.gz >/dev/null 2>jl.err
    check "  ...JSON Lines (--field text), gzip-compressed, give the same shards as the text files" \
        sh -c "cmp out1/data_val_000000.bin out.jl/data_val_000000.bin && cmp out1/data_train_000002.bin out.jl/data_train_000002.bin" ||
        diag "$(cat jl.err)"
    mkdir gz && for f in c/docs/*.txt; do gzip -c "$f" >gz/"$(basename "$f")".gz; done
    "$S" data prepare --tokenizer c/tokenizer.json --val-tokens 5000 --shard-tokens 20000 -o out.gz gz/*.gz \
        >/dev/null 2>&1
    check "  ...gzip-compressed text files too" same_set out1 out.gz
    # a vocabulary above 65,535: uint32 shards
    "$HFPY" -c "
import base64
with open('big.tiktoken', 'w') as f:
    r = 0
    for b in range(256):
        f.write('%s %d\n' % (base64.b64encode(bytes([b])).decode(), r)); r += 1
    for a in range(256):
        for b in range(256):
            f.write('%s %d\n' % (base64.b64encode(bytes([a, b])).decode(), r)); r += 1
"
    "$S" data prepare --tokenizer gpt2:big.tiktoken -o out.big c/docs/0001.txt >/dev/null 2>big.err
    check "a vocabulary of 65,793 ids writes uint32 shards (magic 20240801, version 7)" \
        sh -c "od -An -tu4 -N8 out.big/data_train_000001.bin | grep -q '20240801 *7'" || diag "$(cat big.err)"
    "$S" train --set data.train="out.big/data_train_*.bin" --set data.val=null --set model.vocab_size=65793 \
        --set model.n_layer=1 --set model.n_embd=32 --set model.n_head=2 --set model.seq_len=32 \
        --set train.batch_size=2 --set train.steps=1 --set threads=1 --set log.every=1 >big.train 2>&1
    check "  ...which training reads" grep -q 'done: 1 steps' big.train || diag "$(tail -3 big.train)"
    # 5. the README's three commands ("Prepare your own text"), with the
    # test's tokenizer and corpus, the run cut to a few steps of a small model
    mkdir readme && cp c/tokenizer.json readme/ && mkdir readme/corpus && cp c/docs/00[0-2]*.txt readme/corpus/
    sed -n '/^## Prepare your own text/,/^## /p' "$SR_SRCDIR/README.md" | grep '^\./shardrun' >readme/cmds
    check "the README's \"Prepare your own text\" has its three commands" test "$(wc -l <readme/cmds)" -eq 3
    (
        cd readme || exit 1
        sed -n 1p cmds | sed "s|^\./shardrun|'$S'|; s|--val-fraction [0-9.]*|--val-tokens 2000|" >c1
        sed -n 2p cmds | sed "s|^\./shardrun|'$S'|; s|\$| --set train.steps=4 --set model.n_layer=1 --set model.n_embd=32 --set model.n_head=2 --set model.seq_len=32 --set train.batch_size=2 --set log.sample_every=4 --set log.every=1 --set threads=1 --set checkpoint.every_steps=2|" >c2
        sed -n 3p cmds | sed "s|^\./shardrun|'$S'|; s|\$| --tokens 8|" >c3
        sh c1 >o1 2>e1 && sh c2 >o2 2>e2 && sh c3 >o3 2>e3
    )
    rc=$?
    check "  ...which prepare, train and sample from the test's tokenizer and text (status $rc)" test $rc -eq 0 ||
        diag "$(tail -3 readme/e1 readme/e2 readme/e3 2>/dev/null)"
    check "  ...the training log's sample is decoded text, from the tokenizer's <|endoftext|>" \
        sh -c "grep -q 'sample at step 4' readme/e2 && ! grep 'sample at step 4' readme/e2 | grep -qE '\"[0-9]+( [0-9]+)+\"'"
    check "  ...and sample encodes the prompt with the job's data.tokenizer and prints text" \
        sh -c "grep -q 'prompt (--prompt, encoded by the tokenizer)' readme/e3 && grep -q 'decoded by the tokenizer' readme/e3"
    # --prompt TEXT gives what --prompt-tokens with the reference's ids gives
    ids=$("$HFPY" -c "
import sys
sys.path.insert(0, '$SR_SRCDIR/tests/tok')
import ref
print(','.join(str(i) for i in ref.reference('c', 'hf')('The meaning of life is')))")
    "$S" sample readme/mydata/ckpt --prompt "The meaning of life is" --tokens 6 --top-k 1 >pt.text 2>/dev/null
    "$S" sample readme/mydata/ckpt --prompt-tokens "$ids" --tokens 6 --top-k 1 >pt.ids 2>/dev/null
    check "  ...--prompt TEXT samples what --prompt-tokens with the reference's ids of TEXT samples ($ids)" \
        sh -c "[ -s pt.text ] && cmp -s pt.text pt.ids"
    # the tokenizer must fit the model
    "$S" train --set data.train='readme/mydata/data_train_*.bin' --set data.tokenizer=c/tokenizer.json \
        --set model.vocab_size=3000 --set train.steps=1 >small.o 2>small.e
    rc=$?
    check "a tokenizer with more ids than model.vocab_size: 78 at start, naming both" \
        sh -c "[ $rc -eq 78 ] && grep -q 'has 3001 ids, more than model.vocab_size 3000' small.e" || diag "status $rc: $(cat small.e)"

    # 6. data provenance: the checkpoint records the data; a resume on other data is refused or allowed
    job="--set data.train=prov/data_train_*.bin --set data.val=prov/data_val_000000.bin --set data.tokenizer=c/tokenizer.json
         --set model.vocab_size=3001 --set model.n_layer=1 --set model.n_embd=32 --set model.n_head=2 --set model.seq_len=32
         --set train.batch_size=2 --set threads=1 --set log.every=1 --set checkpoint.dir=prov.ck --set checkpoint.every_steps=2"
    "$S" data prepare --tokenizer c/tokenizer.json --val-tokens 2000 --shard-tokens 10000 -o prov c/docs/*.txt >/dev/null 2>&1
    "$S" train $job --set train.steps=2 >pv1.o 2>pv1.e
    check "the manifest records every shard's SHA-256 (index.json's: none hashed again) and the tokenizer's fingerprint" \
        sh -c "grep -q '^provenance:' prov.ck/step_00000002/manifest.yaml &&
               [ \$(grep -c '{split: train' prov.ck/step_00000002/manifest.yaml) -eq \$(ls prov/data_train_*.bin | wc -l) ] &&
               grep -q \"sha256: \$(grep -o '\"sha256\": \"[0-9a-f]*\"' prov/index.json | head -1 | cut -d'\"' -f4)\" prov.ck/step_00000002/manifest.yaml &&
               ! grep -q 'hashing' pv1.e"
    check "  ...ckpt list shows the data fingerprint, ckpt inspect the record" \
        sh -c "'$S' ckpt list prov.ck | grep -q \"step_00000002 .* \$(sed -n 's/^  fingerprint: \(.\{12\}\).*/\1/p' prov.ck/step_00000002/manifest.yaml) manifest ok\" &&
               '$S' ckpt inspect prov.ck/step_00000002 | grep -q '^tokenizer .*c/tokenizer.json'"
    "$S" train $job --set train.steps=4 >pv2.o 2>pv2.e
    check "  ...the same data resumes" sh -c "grep -q 'resume=2' pv2.e && ! grep -q 'differs' pv2.e"
    printf '\001' | dd of=prov/data_train_000002.bin bs=1 seek=3000 conv=notrunc 2>/dev/null
    "$S" train $job --set train.steps=6 >pv3.o 2>pv3.e
    rc=$?
    check "a shard changed since the checkpoint: 78 naming it and data.allow_changed, nothing trained" \
        sh -c "[ $rc -eq 78 ] && grep -q 'data_train_000002.bin changed' pv3.e && grep -q 'data.allow_changed' pv3.e && ! [ -d prov.ck/step_00000006 ]" ||
        diag "status $rc: $(tail -3 pv3.e)"
    check "  ...it was hashed again (size and time no longer match index.json) and cached beside the shards" \
        sh -c "grep -q 'hashing 1 shard' pv3.e && grep -q data_train_000002.bin prov/.shardrun-sha256.json"
    "$S" train $job --set train.steps=6 --set data.allow_changed=true >pv4.o 2>pv4.e
    rc=$?
    check "  ...data.allow_changed: true resumes with a warning" \
        sh -c "[ $rc -eq 0 ] && grep -q 'warning: resume from .*the data differs' pv4.e && [ -d prov.ck/step_00000006 ]"
    # (step 6 recorded the changed shard: it stays as it is)
    cp "$(ls prov/data_train_*.bin | tail -1)" prov/data_train_000099.bin
    "$S" train $job --set train.steps=8 >pv5.o 2>pv5.e
    rc=$?
    check "a shard added: 78 naming it" sh -c "[ $rc -eq 78 ] && grep -q 'a train shard was added: prov/data_train_000099.bin' pv5.e" ||
        diag "status $rc: $(tail -2 pv5.e)"
    rm prov/data_train_000099.bin
    rm prov/data_train_000001.bin
    "$S" train $job --set train.steps=8 --set data.train='prov/data_train_00000[2-9].bin' >pv6.o 2>pv6.e
    rc=$?
    check "a shard removed: 78" sh -c "[ $rc -eq 78 ] && grep -q 'the data differs' pv6.e" || diag "status $rc: $(tail -2 pv6.e)"
    "$HFPY" -c "
import json
t = json.load(open('c/tokenizer.json'))
t['model']['merges'] = t['model']['merges'][:-1]
json.dump(t, open('other.json', 'w'))"
    "$S" data prepare --tokenizer c/tokenizer.json --val-tokens 2000 --shard-tokens 10000 -o prov2 c/docs/*.txt >/dev/null 2>&1
    "$S" train $job --set data.train='prov2/data_train_*.bin' --set data.val=prov2/data_val_000000.bin --set train.steps=8 \
        --set data.tokenizer=other.json >pv7.o 2>pv7.e
    rc=$?
    check "another tokenizer: 78 naming it" sh -c "[ $rc -eq 78 ] && grep -q 'another tokenizer: .*/other.json' pv7.e" ||
        diag "status $rc: $(tail -2 pv7.e)"
    # two ranks split the hashing of shards no record covers
    if have_mpirun; then
        mkdir mr && cp prov2/data_train_*.bin mr/
        $MPI -n 2 "$S" train $job --set data.train='mr/*.bin' --set data.val=null --set checkpoint.dir=mr.ck \
            --set train.steps=2 >mr.o 2>mr.e
        rc=$?
        sums_ok() {
            for f in mr/*.bin; do
                grep -q "path: $f, bytes: $(stat -c %s "$f"), sha256: $(sha256sum "$f" | cut -c1-64)" mr.ck/step_00000002/manifest.yaml ||
                    return 1
            done
        }
        mr_ok() { [ $rc -eq 0 ] && grep -q 'the other ranks hash their share' mr.e && sums_ok; }
        check "2 ranks under mpirun hash the unrecorded shards between them; the manifest holds sha256sum's digests (status $rc)" \
            mr_ok || diag "$(tail -3 mr.e)"
    else
        skip_mpirun "the provenance hashing split over 2 ranks"
    fi
    # a read-only data directory: the cache goes to checkpoint.dir
    mkdir ro && cp prov2/data_train_000001.bin ro/ && chmod 555 ro
    "$S" train $job --set data.train='ro/*.bin' --set data.val=null --set checkpoint.dir=ro.ck --set train.steps=2 >pv8.o 2>pv8.e
    rc=$?
    chmod 755 ro
    if [ "$(id -u)" -eq 0 ]; then
        # root writes into a mode-555 directory: the cache lands beside the shard
        check "no index.json beside the shards: hashed, and cached (status $rc)" \
            sh -c "[ $rc -eq 0 ] && grep -q 'hashing 1 shard' pv8.e && (grep -q data_train ro/.shardrun-sha256.json || grep -q data_train ro.ck/data-sha256.json)"
    else
        check "a read-only data directory: hashed, the cache in checkpoint.dir (status $rc)" \
            sh -c "[ $rc -eq 0 ] && grep -q 'hashing 1 shard' pv8.e && grep -q data_train ro.ck/data-sha256.json"
    fi
else
    skip_or_fail transformers "no test virtual environment imports tokenizers and tiktoken (tests/hf/setup-venv.sh; SHARDRUN_HF_PYTHON)"
fi

# --- 4. bad input ------------------------------------------------------------
printf 'hello world\n' >a.txt
# tokenizer files
printf '{"model": {"type": "BPE", "vocab": {"a": 0}}, "pre_tokenizer": {"type": "ByteLevel"}}' >nomerges.json
printf '{"model": {"type": "BPE", "vocab": {"a": 0, "b": 0}, "merges": []}, "pre_tokenizer": {"type": "ByteLevel"}}' >dupid.json
printf '{"model": {"type": "BPE", "vocab": {"a": 99999999999}, "merges": []}, "pre_tokenizer": {"type": "ByteLevel"}}' >hugeid.json
printf '{"model": {"type": "BPE", "vocab": {"a": -1}, "merges": []}, "pre_tokenizer": {"type": "ByteLevel"}}' >negid.json
printf '{"model": {"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": ["a q"]}, "pre_tokenizer": {"type": "ByteLevel"}}' >badmerge.json
printf '{"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}, "pre_tokenizer": {"type": "Split", "pattern": {"Regex": "\\\\w+"}, "behavior": "Isolated"}}' >split.json
printf '{"model": {"type": "BPE", "vocab": {"a": 0,}' >broken.json
printf 'YQ== 0\nYg== x\n' >badrank.tiktoken
head -c 100000000 /dev/zero | tr '\0' ' ' >huge.json && printf '{}' >>huge.json
for c in "nomerges.json:model.merges" "dupid.json:duplicate id" "hugeid.json:expected an id from 0" \
    "negid.json:expected an id from 0" "badmerge.json:merge 0" "split.json:neither GPT-2's nor Llama 3's" \
    "broken.json:broken.json:1:" "badrank.tiktoken:badrank.tiktoken:2:" "huge.json:larger than 64 MiB"; do
    f=${c%%:*} want=${c#*:}
    rm -rf bad.out
    "$S" data prepare --tokenizer "$f" -o bad.out a.txt >bad.o 2>bad.e
    rc=$?
    check "a hostile tokenizer file ($f): 65, one message ($want), nothing written" \
        sh -c "[ $rc -eq 65 ] && [ \$(grep -c 'error:' bad.e) -eq 1 ] && grep -qF \"$want\" bad.e && ! [ -e bad.out/index.json ] && ! ls bad.out 2>/dev/null | grep -q bin" ||
        diag "status $rc: $(cat bad.e)"
done
rm -f huge.json
# inputs
printf '{"text": "one"}\n{"txt": "two"}\n' >nofield.jsonl
printf '{"text": "one"}\n\n{"text": 3}\n' >notstring.jsonl
printf '{"text": "one"}\nnot json\n' >notjson.jsonl
printf 'some text, long enough to compress, some text, some text\n' | gzip -c | head -c 30 >trunc.gz
printf 'some text\n' | gzip -c >good.gz
dd if=good.gz bs=1 count=12 2>/dev/null >corrupt.gz && printf '\377\377\377\377\377\377\377\377\377\377' >>corrupt.gz
mkdir -p adir
for c in "65:nofield.jsonl:nofield.jsonl:2: no field \"text\"" "65:notstring.jsonl:notstring.jsonl:3: the field \"text\" is a number" \
    "65:notjson.jsonl:notjson.jsonl:2:" "65:trunc.gz:trunc.gz: a broken gzip stream" "65:corrupt.gz:corrupt.gz: a broken gzip stream" \
    "66:nothere.txt:nothere.txt" "66:adir:adir"; do
    want_rc=${c%%:*} rest=${c#*:} f=${rest%%:*} want=${rest#*:}
    field=""
    case $f in *.jsonl) field="--field text" ;; esac
    rm -rf bad.out
    "$S" data prepare $field -o bad.out/ "$f" >bad.o 2>bad.e
    rc=$?
    check "bad input $f: $want_rc ($want), nothing left in the output directory" \
        sh -c "[ $rc -eq $want_rc ] && [ \$(grep -c 'error:' bad.e) -eq 1 ] && grep -qF '$want' bad.e" ||
        diag "status $rc: $(cat bad.e)"
    nothing_left bad.out || not_ok "  ...$f left $(ls -a bad.out | tr '\n' ' ')"
done
# flags
for c in "--val-tokens 0" "--shard-tokens 3000000000" "--shard-tokens x" "--doc-token <|endoftext|>" "--prefix a/b" \
    "--field="; do
    "$S" data prepare $c -o bad.flags/ a.txt >bad.o 2>bad.e
    rc=$?
    check "data prepare $c: 64, one message" sh -c "[ $rc -eq 64 ] && grep -q 'error:' bad.e" || diag "status $rc: $(cat bad.e)"
done
check "without --val-tokens the training shards are numbered from 1, as llm.c's (0 is the validation shard's)" \
    sh -c "'$S' data prepare -o nums/ --shard-tokens 5 a.txt 2>/dev/null && [ -s nums/data_train_000001.bin ] && [ -s nums/data_train_000003.bin ] && ! [ -e nums/data_train_000000.bin ]"
# an existing data set is not overwritten
"$S" data prepare -o ds/ a.txt >/dev/null 2>&1
"$S" data prepare -o ds/ a.txt >ds.o 2>ds.e
rc=$?
check "a directory that holds a prepared data set: 73 naming it, untouched" \
    sh -c "[ $rc -eq 73 ] && grep -q 'already holds a prepared data set' ds.e && [ -s ds/index.json ]"
# a FIFO and the byte-level default still work
check "data prepare without --tokenizer still writes one byte-level file" \
    sh -c "'$S' data prepare -o one.bin a.txt 2>/dev/null && [ \$(stat -c %s one.bin) -eq \$((1024 + 2 * 12)) ]"
done_testing
