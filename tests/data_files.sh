#!/bin/sh
# data_files.sh — bad data files: wrong magic, bad version, truncated,
# trailing bytes, token >= vocab_size, too few tokens -> status 65; missing
# file or glob without a match -> 66; a vocabulary other than 256 with
# data.train empty (the embedded byte corpus) -> 78 unless
# data.embedded_any_vocab.  One message naming the file, and nothing
# created on disk (the metrics file is not even opened).
. "${SR_SRCDIR:-.}/tests/tap.sh"
S=$SHARDRUN
cd "$T" || exit 99

# shard FILE MAGIC VERSION COUNT TOKEN_BYTES NTOKENS_WRITTEN [TOKEN]
shard() {
    f=$1 magic=$2 version=$3 count=$4 bytes=$5 n=$6 tok=${7:-65}
    { printf '%08x%08x%08x' "$magic" "$version" "$count" | sed 's/\(..\)\(..\)\(..\)\(..\)/\4\3\2\1/g' | xxd_r
      head -c $((1024 - 12)) /dev/zero
      i=0; while [ $i -lt "$n" ]; do
          if [ "$bytes" -eq 2 ]; then printf '%04x' "$tok" | sed 's/\(..\)\(..\)/\2\1/'; else printf '%08x' "$tok" | sed 's/\(..\)\(..\)\(..\)\(..\)/\4\3\2\1/'; fi
          i=$((i + 1)); done | xxd_r
    } >"$f"
}
# hex to bytes without xxd (not always installed): printf with octal escapes
xxd_r() { sed 's/\(..\)/\1\n/g' | while read -r h; do [ -n "$h" ] && printf "\\$(printf '%03o' "0x$h")"; done; }

run_train() { # JOB-SETTINGS...
    "$S" train --set model.n_layer=1 --set model.n_embd=32 --set model.n_head=2 --set model.seq_len=8 \
        --set train.steps=1 --set log.metrics=metrics.jsonl "$@"
}

bad_data() { # STATUS SUBSTRING DESC FILE-SETTING
    want=$1 what=$2 desc=$3; shift 3
    rm -f metrics.jsonl
    run_train "$@" >out.txt 2>err.txt
    got=$?
    if [ "$got" -eq "$want" ] && grep -qF -- "$what" err.txt && [ "$(wc -l <err.txt)" -eq 1 ] && [ ! -e metrics.jsonl ]; then
        ok "$desc (status $got)"
    else
        not_ok "$desc (status $got, expected $want and '$what')"
        diag "$(cat err.txt)"
    fi
}

shard good.bin 20240520 1 50 2 50
run_train --set data.train=good.bin >out.txt 2>err.txt
check "a well-formed uint16 shard trains" test $? -eq 0
shard magic.bin 20240521 1 50 2 50
bad_data 65 "magic.bin: bad magic 20240521" "wrong magic" --set data.train=magic.bin
shard version.bin 20240520 3 50 2 50
bad_data 65 "unsupported version 3" "wrong version" --set data.train=version.bin
shard trunc.bin 20240520 1 50 2 40
bad_data 65 "(truncated)" "truncated tokens" --set data.train=trunc.bin
head -c 100 good.bin >short.bin
bad_data 65 "shorter than the 1024-byte llm.c header" "truncated header" --set data.train=short.bin
shard trail.bin 20240520 1 40 2 50
bad_data 65 "(trailing bytes)" "trailing bytes" --set data.train=trail.bin
shard bigtok.bin 20240520 1 50 2 50 300
bad_data 65 "token 300 at position 0 is >= model.vocab_size 256" "token >= vocab_size" --set data.train=bigtok.bin
shard few.bin 20240520 1 5 2 5
bad_data 65 "fewer than model.seq_len + 1" "too few tokens" --set data.train=few.bin
shard u32.bin 20240801 7 50 4 50 70000
bad_data 65 "token 70000" "uint32 token >= vocab_size" --set data.train=u32.bin
run_train --set data.train=u32.bin --set model.vocab_size=70001 >out.txt 2>err.txt
check "a uint32 shard with a large vocabulary trains" test $? -eq 0
bad_data 66 "nothing.bin: no such data file" "missing data file" --set data.train=nothing.bin
bad_data 66 "no file matches" "glob without a match" --set 'data.train=nomatch_*.bin'
bad_data 65 "magic.bin" "a bad validation shard" --set data.train=good.bin --set data.val=magic.bin
mkdir adir
bad_data 66 "not a regular file" "a directory as data" --set data.train=adir

# no silent wrong data: a vocabulary other than the embedded corpus's 256
# with data.train empty is 78 naming both vocabularies and data.train, at
# the key that set the vocabulary; nothing is created (checkpoint dir,
# metrics); data.embedded_any_vocab: true trains on the bytes anyway
rm -rf ck
bad_data 78 "--set model.vocab_size=300: the model's vocabulary is 300 tokens but data.train is empty" \
    "vocab_size 300, data.train empty: refused" --set model.vocab_size=300 --set checkpoint.dir=ck
check "  ...the message names the embedded corpus's vocabulary 256 and the way out" \
    sh -c "grep -q 'embedded byte corpus (vocabulary 256)' err.txt && grep -q 'data.embedded_any_vocab: true' err.txt"
check "  ...and creates no checkpoint directory" test ! -e ck
printf 'model:\n  preset: gpt2-124m\n' >gpt2.yaml
"$S" train gpt2.yaml --set log.metrics=metrics.jsonl >out.txt 2>err.txt
rc=$?
check "a gpt2-124m job (50257 tokens) without data.train is 78 at model.preset (status $rc)" \
    sh -c "[ $rc = 78 ] && grep -q 'gpt2.yaml:2:11: the model.s vocabulary is 50257 tokens' err.txt && [ ! -e metrics.jsonl ]"
expect_status 78 "  ...config check refuses it too" "$S" config check gpt2.yaml
expect_status 0 "  ...config show still prints it" "$S" config show gpt2.yaml
run_train --set model.vocab_size=300 --set data.embedded_any_vocab=true >out.txt 2>err.txt
check "data.embedded_any_vocab: true trains vocab_size 300 on the embedded bytes" test $? -eq 0
run_train --set model.vocab_size=300 --set data.train=good.bin >out.txt 2>err.txt
check "vocab_size 300 with data.train set trains" test $? -eq 0
done_testing
