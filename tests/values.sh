#!/bin/sh
# values.sh — every value is validated and every message tells the truth,
# each once a defect a hostile probe found:
#   1. environment: SHARDRUN_TEST_CRASH_AT and PAUSE_AT name a known site (a
#      kill test with a misspelt site once passed vacuously),
#      SHARDRUN_TEST_ISA a known level, SHARDRUN_PEAK_GFLOPS a number from 1
#      to 1e9 (abc, 0, -5, nan and 1e-30 were taken or ignored): 78 with
#      the accepted form
#   2. arguments: sample --seed " -1" (strtoull's wrap) is 64; a NUL inside
#      a YAML string (--set or the job file) is 78 with its place, never a
#      silently cut value
#   3. model.init: a tensor name with control characters is printed
#      escaped; a zip file (pytorch_model.bin) is named as one with the
#      safetensors hint; an llm.c file shorter than its header is a
#      truncated llm.c file; a NaN weight is 65 naming its tensor
#   4. sample checks its prompt against the manifest before it reads any
#      shard (a bad prompt is 64 even when a shard is damaged)
. "${SR_SRCDIR:-.}/tests/tap.sh"
S=$SHARDRUN
command -v python3 >/dev/null 2>&1 || require_or_skip python3 "python3 not found"
cd "$T" || exit 99
small="--set model.n_layer=1 --set model.n_embd=32 --set model.n_head=2 --set model.seq_len=16 --set threads=1"
small="$small --set train.batch_size=2"

# --- 1. environment ------------------------------------------------------------
for v in bogus after_manifst:2 "before_connect"; do
    SHARDRUN_TEST_CRASH_AT=$v "$S" train $small --set train.steps=1 >o 2>e
    check "SHARDRUN_TEST_CRASH_AT=$v: 78 listing the sites" \
        sh -c "[ $? = 78 ] && grep -q 'SHARDRUN_TEST_CRASH_AT=$v: expected SITE\[:STEP\]\[@RANK\] with SITE one of after_shard_write, before_manifest' e"
done
SHARDRUN_TEST_PAUSE_AT=nowhere "$S" config check >o 2>e
check "SHARDRUN_TEST_PAUSE_AT=nowhere: 78 (every command)" sh -c "[ $? = 78 ] && grep -q 'before_connect' e"
SHARDRUN_TEST_CRASH_AT=after_manifest:9 "$S" config show >o 2>e
check "  ...a known site is accepted" test $? -eq 0
SHARDRUN_TEST_ISA=x86-64-v9 "$S" config check >o 2>e
check "SHARDRUN_TEST_ISA=x86-64-v9: 78 naming the levels" sh -c "[ $? = 78 ] && grep -q 'expected x86-64-v2, x86-64-v3, x86-64-v4' e"
SHARDRUN_TEST_ISA=v2 "$S" config show >o 2>e
check "  ...v2 is accepted" test $? -eq 0
for v in abc 0 -5 nan 1e-30 inf 2e9; do
    SHARDRUN_PEAK_GFLOPS=$v "$S" train $small --set train.steps=1 >o 2>e
    check "SHARDRUN_PEAK_GFLOPS=$v: train refuses it, 78 with the range" \
        sh -c "[ $? = 78 ] && grep -q \"SHARDRUN_PEAK_GFLOPS='$v' is not a peak in GFLOP/s from 1 to 1e+09\" e"
done
SHARDRUN_PEAK_GFLOPS=1e-30 "$S" plan /dev/null >o 2>e
check "  ...so does plan" test $? -eq 78
SHARDRUN_PEAK_GFLOPS=500 "$S" train $small --set train.steps=1 >o 2>e
check "SHARDRUN_PEAK_GFLOPS=500 is used" sh -c "[ $? = 0 ] && grep -q '500.0 GFLOP/s from SHARDRUN_PEAK_GFLOPS' e"

# --- 2. arguments ----------------------------------------------------------------
"$S" train $small --set train.steps=2 --set checkpoint.dir=ck --set checkpoint.every_steps=2 >o 2>e ||
    echo "Bail out! the base run failed: $(tail -2 e)"
for v in " -1" "-1" "+1" " 1"; do
    "$S" sample ck/step_00000002 --seed "$v" --tokens 1 >o 2>e
    check "sample --seed '$v': 64" sh -c "[ $? = 64 ] && grep -q -- '--seed $v: expected a non-negative integer' e"
done
"$S" config show --set 'log.metrics="a\0b"' >o 2>e
check "a NUL inside a --set string: 78" sh -c "[ $? = 78 ] && grep -q 'a NUL character (\\\\0) inside a value' e"
printf 'log:\n  metrics: "run\\0.jsonl"\n' >nul.yaml
"$S" config check nul.yaml >o 2>e
check "  ...and inside a job file's: 78 with file:line:col" sh -c "[ $? = 78 ] && grep -q 'nul.yaml:2:12: a NUL character' e"

# --- 3. model.init ----------------------------------------------------------------
cat >mk.py <<'EOF'
import json, struct, sys, zipfile
kind, out = sys.argv[1], sys.argv[2]
if kind == "ctrl":
    head = json.dumps({"evil\u001b[31m\u0007name": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}).encode()
    open(out, "wb").write(struct.pack("<Q", len(head)) + head + b"\0\0\0\0")
elif kind == "zip":
    with zipfile.ZipFile(out, "w") as z:
        z.writestr("archive/data.pkl", b"not a model")
elif kind == "llmc":
    open(out, "wb").write(struct.pack("<8i", 20240326, 3, 16, 256, 1, 2, 32, 256) + b"\0" * 68)
elif kind == "nan":
    data = bytearray(open(sys.argv[3], "rb").read())
    n = struct.unpack("<Q", data[:8])[0]
    head = json.loads(data[8:8 + n])
    name = "transformer.h.0.mlp.c_fc.weight" if "transformer.h.0.mlp.c_fc.weight" in head else "h.0.mlp.c_fc.weight"
    off = 8 + n + head[name]["data_offsets"][0] + 4 * 5
    data[off:off + 4] = struct.pack("<f", float("nan"))
    open(out, "wb").write(data)
EOF
python3 mk.py ctrl ctrl.safetensors
"$S" train $small --set model.init=ctrl.safetensors >o 2>e
check "a tensor name with control characters: 65, printed escaped" \
    sh -c "[ $? = 65 ] && grep -q \"unexpected tensor 'evil\\\\\\\\x1b\\[31m\\\\\\\\x07name'\" e && ! grep -q \"\$(printf '\\033')\" e"
python3 mk.py zip pytorch_model.bin
"$S" train $small --set model.init=pytorch_model.bin >o 2>e
check "a zip file (pytorch_model.bin): 65 naming it, with the safetensors hint" \
    sh -c "[ $? = 65 ] && grep -q \"pytorch_model.bin: a zip file (PyTorch's pytorch_model.bin format)\" e && grep -q 'safe_serialization=True' e"
python3 mk.py llmc short.bin
"$S" train $small --set model.init=short.bin >o 2>e
check "an llm.c file shorter than its header: 'truncated llm.c file' (65)" \
    sh -c "[ $? = 65 ] && grep -q 'short.bin: truncated llm.c file: 100 bytes, shorter than its 1024-byte header' e"
"$S" ckpt export ck/step_00000002 -o good.safetensors >o 2>e
python3 mk.py nan nan.safetensors good.safetensors
"$S" train $small --set train.steps=1 --set model.init=nan.safetensors --set checkpoint.dir=nanck >o 2>e
check "a NaN weight in model.init: 65 naming the tensor and element, before step 1" \
    sh -c "[ $? = 65 ] && grep -q 'nan.safetensors: tensor h.0.mlp.c_fc.weight holds NaN at element [0-9]' e && [ ! -e nanck/latest ]"
"$S" train $small --set train.steps=1 --set model.init=good.safetensors >o 2>e
check "  ...while the file it was made from loads" test $? -eq 0

# --- 4. sample's prompt before any shard ------------------------------------------
cp -r ck/step_00000002 damaged
printf 'xxxx' | dd of=damaged/shard_00000.bin bs=1 seek=200 conv=notrunc 2>/dev/null
"$S" sample damaged --prompt-tokens 999999 --tokens 1 >o 2>e
check "sample: a prompt outside the vocabulary is 64 before a damaged shard is read" \
    sh -c "[ $? = 64 ] && grep -q 'token 999999 is outside the vocabulary' e && ! grep -q 'shard_00000.bin' e"
"$S" sample damaged --prompt-tokens 1 --tokens 1 >o 2>e
check "  ...with a good prompt, the damaged shard is found (65)" sh -c "[ $? = 65 ] && grep -q 'shard_00000.bin' e"
done_testing
