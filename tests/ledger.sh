#!/bin/sh
# ledger.sh — where a GPU step's time goes (issue 57): the cost ledger, the
# per-op profile and the roofline between them.
#   1. the counts are contracts: gpt2-124m, llama-125m and Llama-3.2-1B at
#      the GPU check's shapes within 1 % of bench/gpu_ledger.expected (and
#      the check bites on a file 2 % lower)
#   2. plan --ledger at the job's real shapes, against the model's own
#      arithmetic: the cuBLASLt calls (12 L + 3 linear, 6 L B attention), the
#      GEMM FLOPs (6 N tokens; 12 L T^2 C B), the saved scores (B NH T^2)
#      with model.attention: materialized; with flash attention (auto) no
#      attention GEMM, 5 kernels a layer (GPT-2: the qkv bias's finish), the causal FLOPs, the LSE saved;
#      the JSON's fields and sums, the text's totals; Llama-3.2-1B at T 2048
#      in well under 1 GiB of memory; a collective family at 4 ranks only;
#      the ops' rows: no memset but the key biases' zeros (none feeds an
#      accumulation), one classifier kernel, no gradient copy at one rank;
#      the refusals (device: cpu, offload, a range, --json alone, 2000 ranks)
#   3. calibrations: the defaults are tests/gpu/calibration/h200.json's, a
#      file's efficiencies predict (bound / efficiency), --gemm-tflops moves
#      the GEMMs' bound; a missing file 66, a broken one 65 at its place
#   4. a GPU plan's step time (and the --signal lead) is the ledger's bound,
#      or its prediction; --tflops keeps its meaning
#   5. (emulator tree) the ledger is what an emulated run issues: per family,
#      a profiled run's launches, cuBLASLt calls and GB equal plan --ledger's
#      exactly (GPT-2 and Llama; 2 ranks over the emulated NCCL with the
#      collective family), and the emulator's own count of kernels,
#      memsets, copies and matmuls in one step equals the ledger's totals
#   6. SHARDRUN_CUDA_PROFILE: profile.json named on the last line, its ms
#      per family, profile.md, calibration.json plan reads, the metrics
#      event and the report's section, the emulator's times said so; a bad
#      value 78; a CPU run warns and profiles nothing
# Items 1-4 need a build with the CUDA back end (no GPU); 5-6 an emulator
# tree (the sanitizer tree of .ci/run), the CPU case of 6 any tree.
. "${SR_SRCDIR:-.}/tests/tap.sh"
S=$SHARDRUN
SRC=${SR_SRCDIR:-.}
B=${SR_BUILDDIR:-.}
grep -q '^#define SR_HAVE_CUDA 1' "$B/srconfig.h" 2>/dev/null ||
    require_or_skip cuda "this build has no CUDA back end: plan --ledger counts its operations"
cd "$T" || exit 99
BF16="--set sharding.mixed_precision.param_dtype=bf16 --set sharding.mixed_precision.reduce_dtype=fp32"
MAT="--set model.attention=materialized" # (auto is flash in bf16 at head dimensions 64 and 128)
# ledger NAME PRESET B T [ARGS...]: plan --ledger --json into NAME.json
ledger() {
    n=$1 p=$2 b=$3 t=$4
    shift 4
    "$S" plan --ledger --json /dev/null --set device=cuda --set model.preset="$p" --set model.seq_len="$t" \
        --set train.batch_size="$b" --set train.micro_batch="$b" $BF16 "$@" >"$n.json" 2>"$n.err"
}
# py SCRIPT ARGS...: python3 on a script from stdin
py() { python3 - "$@"; }

# --- 1. contracts ---------------------------------------------------------------
group "1. the counts are contracts" && {
    sh "$SRC/bench/gpu_ledger.sh" "$S" >now.txt 2>now.err &&
        sh "$SRC/bench/gpu_ledger.sh" --compare now.txt "$SRC/bench/gpu_ledger.expected" >contract.out 2>&1
    rc=$?
    check "the three models' launches, cuBLASLt calls and GB within 1 % of bench/gpu_ledger.expected (make update-ledger)" \
        test $rc -eq 0 || diag "$(cat now.err contract.out)"
    diag "$(cat now.txt)"
    awk '/^gpt2-124m / { $3 = int($3 * 0.98) } { print }' "$SRC/bench/gpu_ledger.expected" >lower.expected
    sh "$SRC/bench/gpu_ledger.sh" --compare now.txt lower.expected >lower.out 2>&1
    rc=$?
    check "  ...and a change that raises gpt2-124m's launches by 2 % fails, naming the model and the count" \
        sh -c "[ $rc -eq 1 ] && grep -q '^gpt2-124m: launches .* above the recorded' lower.out" || diag "$(cat lower.out)"
    # issue 64's budget for a gpt2-124m step at 16 x 1024 (one rank, bf16):
    # at most 700 launches, 160 cuBLASLt calls and 45 GB of HBM traffic
    check "  ...gpt2-124m at 16 x 1024 within issue 64's budget: <= 700 launches, <= 160 cuBLASLt calls, <= 45 GB ($(grep '^gpt2-124m ' now.txt))" \
        awk '$1 == "gpt2-124m" { ok = $3 <= 700 && $4 <= 160 && $5 <= 45 } END { exit !ok }' now.txt
}

# --- 2. plan --ledger --------------------------------------------------------------
group "2. plan --ledger at the job's shapes" && {
    # shellcheck disable=SC2086
    ledger g gpt2-124m 16 1024 $MAT
    rc=$?
    check "gpt2-124m 16 x 1024: plan --ledger --json (status $rc)" test -s g.json || diag "$(cat g.err)"
    # the model's own arithmetic, independent of the ledger's table
    py g.json 12 12 768 50257 16 1024 >g.arith 2>&1 <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
L, NH, C, V, B, T = map(int, sys.argv[2:])
Vp = (V + 63) // 64 * 64
f = {x["name"]: x for x in d["families"]}
bad = []
def want(what, got, exp, rel=1e-9):
    if abs(got - exp) > rel * abs(exp):
        bad.append(f"{what}: {got} (expected {exp})")
want("linear cuBLASLt calls (12 L + 3)", f["gemm-linear"]["gemm_calls"], 12 * L + 3)
want("attention cuBLASLt calls (6 per sequence per layer)", f["gemm-attention"]["gemm_calls"], 6 * L * B)
want("linear GFLOP (6 N tokens)", f["gemm-linear"]["gflop"], 6 * (12 * L * C * C + Vp * C) * B * T / 1e9, 1e-6)
want("attention GFLOP (12 L T^2 C B)", f["gemm-attention"]["gflop"], 12 * L * T * T * C * B / 1e9, 1e-6)
want("saved scores per block (B NH T^2 bf16)", d["saved_block_bytes"], B * NH * T * T * 2)
want("held at the peak (every block's)", d["peak_saved_bytes"], L * B * NH * T * T * 2)
names = [x["name"] for x in d["families"]]
if names != ["gemm-linear", "gemm-attention", "softmax", "attention-other", "norm", "elementwise", "classifier",
             "optimizer", "fsdp-copy", "memset", "other", "collective"]:
    bad.append(f"families {names}")
for x in d["families"] + [d["total"]]:
    if set(x) != {"name", "launches", "gemm_calls", "gflop", "gb", "bound_ms"}:
        bad.append(f"fields of {x['name']}: {sorted(x)}")
for k in ("launches", "gemm_calls", "gflop", "gb", "bound_ms"):
    want(f"total {k} = the families' sum", d["total"][k], sum(x[k] for x in d["families"]), 1e-9)
if d["saved_activation"] != "att":
    bad.append(f"largest saved activation {d['saved_activation']}")
print("\n".join(bad) or "all as the model's arithmetic says")
sys.exit(1 if bad else 0)
EOF
    rc=$?
    check "  ...cuBLASLt calls, GEMM FLOPs and the saved scores as the model's arithmetic says; the JSON's fields and sums" \
        test $rc -eq 0 || diag "$(cat g.arith)"
    # shellcheck disable=SC2086
    "$S" plan --ledger /dev/null --set device=cuda --set model.preset=gpt2-124m --set model.seq_len=1024 \
        --set train.batch_size=16 --set train.micro_batch=16 $BF16 $MAT >g.txt 2>&1
    tot=$(py g.json <<'EOF'
import json, sys
t = json.load(open(sys.argv[1]))["total"]
print(t["launches"] + t["gemm_calls"], t["launches"], t["gemm_calls"])
EOF
)
    set -- $tot
    check "  ...the text says the JSON's totals: $1 GPU operations, $2 launches, $3 cuBLASLt calls" \
        grep -q "^  $1 GPU operations: $2 launches (kernels, copies, memsets, collectives) and $3 cuBLASLt calls" g.txt ||
        diag "$(cat g.txt)"
    check "  ...a row per family it uses, the roofline's rates and the largest saved activation named" \
        sh -c "grep -q '^  gemm-attention ' g.txt && grep -q 'roofline bound .* at GEMM 782 TFLOP/s' g.txt && grep -q 'largest saved activation: att' g.txt"
    # flash attention (auto in bf16 at head dimensions 64 and 128): no
    # attention GEMM, one forward and three backward kernels per layer (and
    # the finish of GPT-2's qkv bias gradient, which the backward sums), the
    # causal FLOPs, each kernel's bytes once and dqkv not zeroed, the rows'
    # log-sum-exps saved instead of the scores
    ledger gf gpt2-124m 16 1024
    py gf.json g.json 12 12 768 16 1024 >gf.arith 2>&1 <<'EOF'
import json, sys
d, m = (json.load(open(p)) for p in sys.argv[1:3])
L, NH, C, B, T = map(int, sys.argv[3:])
hs, P = C // NH, T * (T + 1) / 2
f = {x["name"]: x for x in d["families"]}
fm = {x["name"]: x for x in m["families"]}
bad = []
def want(what, got, exp, rel=1e-9):
    if abs(got - exp) > rel * max(abs(exp), 1e-30):
        bad.append(f"{what}: {got} (expected {exp})")
want("attention cuBLASLt calls (none)", f["gemm-attention"]["gemm_calls"], 0)
want("attention kernels (1 forward + 3 backward per layer, + the qkv bias's finish)", f["gemm-attention"]["launches"],
     5 * L)
want("softmax launches (none)", f["softmax"]["launches"], 0)
# GPT-2's qkv bias gradient rides along (issue 64): its column sums, one
# addition an element of dqkv
want("attention GFLOP (18 causal pairs x hs per head, and D; the qkv bias's sums)", f["gemm-attention"]["gflop"],
     L * (B * NH * (18 * P * hs + 2 * T * hs) + B * T * 3 * C) / 1e9, 1e-6)
want("linear cuBLASLt calls unchanged", f["gemm-linear"]["gemm_calls"], fm["gemm-linear"]["gemm_calls"])
# the bytes at their minimum: each kernel moves each of its tensors once
# (bf16 q = o = dO = k = v, B NH T hs; f32 LSE and D, B NH T), dqkv
# written once: not zeroed (one memset a layer fewer), not read; the qkv
# bias gradient's partial rows (one per sequence and 64-row tile, 3C
# floats) written and read, the gradient written
q, r = 2 * B * NH * T * hs, 4 * B * NH * T
fwd, bwd = 4 * q + r, (2 * q + r) + (6 * q + 2 * r) + (5 * q + 2 * r)
bias = 8 * B * ((T + 63) // 64) * 3 * C + 4 * 3 * C
want("attention GB (forward 4 q + LSE; rowdot 2 q + D, dkv 6 q + 2 rows, dq 5 q + 2 rows; the qkv bias's partials)",
     f["gemm-attention"]["gb"], L * (fwd + bwd + bias) / 1e9, 1e-6)
want("memsets: one a layer fewer (dqkv)", f["memset"]["launches"], fm["memset"]["launches"] - L)
want("memset GB: dqkv's B T 3C bf16 a layer fewer", f["memset"]["gb"], fm["memset"]["gb"] - L * B * T * 3 * C * 2 / 1e9,
     1e-6)
if d.get("attention") != "flash" or m.get("attention") != "materialized":
    bad.append(f"attention fields {d.get('attention')} / {m.get('attention')}")
if d["saved_activation"] == "att":
    bad.append(f"the log-sum-exps ({d['saved_block_bytes']} bytes) are the largest saved activation")
if not d["total"]["gb"] < m["total"]["gb"]:
    bad.append(f"HBM GB {d['total']['gb']} not below materialized's {m['total']['gb']}")
print("\n".join(bad) or f"attention {f['gemm-attention']['launches']} kernels, 0 cuBLASLt calls (materialized "
      f"{fm['gemm-attention']['gemm_calls']}); {d['total']['gb']:.1f} GB vs {m['total']['gb']:.1f}; largest saved "
      f"{d['saved_activation']}")
sys.exit(1 if bad else 0)
EOF
    rc=$?
    check "  ...with flash attention (auto): no attention GEMM, 5 kernels a layer, the causal FLOPs, the bytes at their minimum ($(tail -1 gf.arith))" \
        test $rc -eq 0 || diag "$(cat gf.arith gf.err)"
    # issue 63: the ops' rows sum to the total; nothing feeds an
    # accumulation from a memset (the key biases' exact zeros, C floats a
    # layer a micro-batch, are the only memsets), one classifier kernel, and
    # at one rank no gradient copy, fold or add (the gradient shard is the
    # model's own buffer); at 2 ranks of 2 accumulation steps the same memsets
    ledger g2 gpt2-124m 16 1024 --set train.micro_batch=4 --ranks 2
    py gf.json g2.json 12 768 >ops.arith 2>&1 <<'EOF'
import json, sys
d, d2 = (json.load(open(p)) for p in sys.argv[1:3])
L, C = map(int, sys.argv[3:])
bad = []
for j, what in ((d, "1 rank"), (d2, "2 ranks")):
    ops = {x["name"]: x for x in j["ops"]}
    for k in ("launches", "gemm_calls", "gb"):
        s = sum(x[k] for x in j["ops"])
        if abs(s - j["total"][k]) > 1e-9 * max(1, j["total"][k]):
            bad.append(f"{what}: the ops' {k} sum to {s}, the total says {j['total'][k]}")
    mb = 1 if j is d else 2
    ms = ops.get("memset", {"calls": 0, "gb": 0})
    if ms["calls"] != L * mb or abs(ms["gb"] - L * mb * C * 4 / 1e9) > 1e-12:
        bad.append(f"{what}: memsets {ms['calls']} of {ms['gb']} GB (expected the key biases': {L * mb} of C floats)")
    if "crossentropy_fused" not in ops or ops["crossentropy_fused"]["calls"] != mb or "crossentropy_backward" in ops:
        bad.append(f"{what}: the classifier is not one fused kernel a micro-batch: {sorted(ops)}")
ops = {x["name"]: x for x in d["ops"]}
if "add_f32" in ops or "fold_bf16" in ops or ops.get("copy_device", {"gb": 0})["gb"] > 16 / 1e9:
    bad.append(f"1 rank: a gradient copy or fold: {[(n, ops[n]['gb']) for n in ('add_f32', 'fold_bf16', 'copy_device') if n in ops]}")
print("\n".join(bad) or f"1 rank: {ops['memset']['calls']} memsets, copies {ops.get('copy_device', {'gb': 0})['gb'] * 1e9:.0f} bytes")
sys.exit(1 if bad else 0)
EOF
    rc=$?
    check "  ...no memset feeds an accumulation, one classifier kernel, at one rank no gradient copy ($(tail -1 ops.arith))" \
        test $rc -eq 0 || diag "$(cat ops.arith g2.err)"
    /usr/bin/time -f '%M' -o l1b.rss "$S" plan --ledger --json /dev/null --set device=cuda --set model.preset=llama-3.2-1b \
        --set model.seq_len=2048 --set train.batch_size=8 --set train.micro_batch=8 $BF16 >l1b.json 2>l1b.err
    rc=$?
    rss=$(tail -1 l1b.rss)
    check "Llama-3.2-1B at T 2048, B 8 plans (status $rc) in $rss KiB, well under 1 GiB: nothing of the model's size (about 20 GB of state) allocated" \
        sh -c "[ $rc -eq 0 ] && [ ${rss:-9999999} -lt 1048576 ]" || diag "$(cat l1b.err)"
    # shellcheck disable=SC2086
    ledger g4 gpt2-124m 16 1024 --set train.micro_batch=4 --ranks 4 $MAT
    py g.json g4.json >coll.out 2>&1 <<'EOF'
import json, sys
one, four = (json.load(open(p)) for p in sys.argv[1:3])
c1 = [x for x in one["families"] if x["name"] == "collective"][0]
c4 = [x for x in four["families"] if x["name"] == "collective"][0]
a4 = [x for x in four["families"] if x["name"] == "gemm-attention"][0]
print(f"1 rank: {c1}; 4 ranks: {c4}; attention calls at 4 ranks {a4['gemm_calls']}")
sys.exit(0 if c1["launches"] == 0 and c4["launches"] > 0 and c4["gb"] > 0 and four["ranks"] == 4 and a4["gemm_calls"] == 6 * 12 * 4 else 1)
EOF
    rc=$?
    check "  ...at 4 ranks per rank (its micro-batch of 4) with a collective family; none at 1 rank" test $rc -eq 0 ||
        diag "$(cat coll.out g4.err)"
    expect_status 78 "plan --ledger of a job with device: cpu is 78 naming why" \
        "$S" plan --ledger /dev/null --set device=cpu
    check "  ...the job trains on the CPU" grep -q 'plan --ledger: the job trains on the CPU (device: cpu)' err
    expect_status 78 "plan --ledger with sharding.offload.optimizer is 78 naming it" \
        "$S" plan --ledger /dev/null --set device=cuda --set sharding.offload.optimizer=true
    check "  ...its step runs on the host" grep -q 'sharding.offload.optimizer is true: the optimizer.s step runs on the host' err
    expect_status 64 "plan --ledger --ranks 1-4 is a usage error (one rank count)" \
        "$S" plan --ledger --ranks 1-4 /dev/null --set device=cuda
    expect_status 64 "plan --json without --ledger is a usage error" "$S" plan --json /dev/null
    expect_status 78 "plan --ledger at 2000 ranks is 78 (1 to 1024, a thread each)" \
        "$S" plan --ledger --ranks 2000 /dev/null --set device=cuda --set train.batch_size=2000
    expect_status 78 "plan --ledger at a rank count the batch does not split is 78" \
        "$S" plan --ledger --ranks 3 /dev/null --set device=cuda --set train.batch_size=8
    expect_status 78 "--hbm-tbps 0 is outside its range: 78" "$S" plan --ledger --hbm-tbps 0 /dev/null --set device=cuda
    expect_status 64 "--gemm-tflops fast is not a number: 64" "$S" plan --ledger --gemm-tflops fast /dev/null
}

# --- 3. calibrations ---------------------------------------------------------------
group "3. calibrations" && {
    [ -s g.json ] || ledger g gpt2-124m 16 1024 $MAT
    H200=$SRC/tests/gpu/calibration/h200.json
    py g.json "$H200" >rates.out 2>&1 <<'EOF'
import json, sys
d, c = (json.load(open(p)) for p in sys.argv[1:3])
print(d["gemm_tflops"], d["hbm_tbps"], c["gemm_tflops"], c["hbm_tbps"])
sys.exit(0 if (d["gemm_tflops"], d["hbm_tbps"]) == (c["gemm_tflops"], c["hbm_tbps"]) else 1)
EOF
    rc=$?
    check "the ledger's default rates are tests/gpu/calibration/h200.json's ($(cat rates.out))" test $rc -eq 0
    "$S" plan --ledger /dev/null --set device=cuda --calibration "$H200" >h200.txt 2>&1
    check "  ...that file (rates, no efficiency yet) gives no prediction and says so" \
        grep -q 'no prediction: .*h200.json (NVIDIA H200.*) gives no efficiency per family' h200.txt || diag "$(cat h200.txt)"
    py <<'EOF'
import json
fams = ["gemm-linear", "gemm-attention", "softmax", "attention-other", "norm", "elementwise", "classifier",
        "optimizer", "fsdp-copy", "memset", "other"]
json.dump({"device": "a test", "gemm_tflops": 782, "hbm_tbps": 4.0, "efficiency": {f: 0.5 for f in fams}},
          open("eff.json", "w"))
EOF
    ledger half gpt2-124m 16 1024 --calibration eff.json
    py half.json >half.out 2>&1 <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
print(f"predicted {d.get('predicted_ms')} ms, bound {d['total']['bound_ms']} ms")
sys.exit(0 if abs(d["predicted_ms"] - 2 * d["total"]["bound_ms"]) < 1e-6 * d["total"]["bound_ms"] else 1)
EOF
    rc=$?
    check "  ...efficiency 0.5 for every family predicts twice the bound ($(cat half.out))" test $rc -eq 0
    # shellcheck disable=SC2086
    ledger slow gpt2-124m 16 1024 --gemm-tflops 391 $MAT
    py g.json slow.json >slow.out 2>&1 <<'EOF'
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
fa = {x["name"]: x for x in a["families"]}
fb = {x["name"]: x for x in b["families"]}
g = fb["gemm-linear"]["bound_ms"] / fa["gemm-linear"]["bound_ms"]
s = fb["softmax"]["bound_ms"] / fa["softmax"]["bound_ms"]
print(f"gemm-linear x{g:.4f}, softmax x{s:.4f}")
sys.exit(0 if abs(g - 2) < 1e-9 and abs(s - 1) < 1e-9 else 1)
EOF
    rc=$?
    check "  ...--gemm-tflops 391 doubles the compute-bound GEMMs' bound, leaves the memory-bound ops' ($(cat slow.out))" \
        test $rc -eq 0
    expect_status 66 "a missing calibration is 66" "$S" plan --ledger --calibration nowhere.json /dev/null --set device=cuda
    printf '{"gemm_tflops": 782,\n "efficiency": {"norm": 0.5,}}\n' >broken.json
    expect_status 65 "a calibration that is not JSON is 65" "$S" plan --ledger --calibration broken.json /dev/null --set device=cuda
    check "  ...at its file:line:col" grep -q 'broken.json:2:[0-9]*: not a calibration' err
    printf '{"efficiency": {"gemm": 0.5}}\n' >family.json
    expect_status 65 "a calibration naming no family of the ledger is 65" \
        "$S" plan --ledger --calibration family.json /dev/null --set device=cuda
    check "  ...naming it" grep -q '"efficiency" names "gemm", no family of the ledger' err
}

# --- 4. plan's time ------------------------------------------------------------------
group "4. a GPU plan's step time is the ledger's" && {
    [ -s gf.json ] || ledger gf gpt2-124m 16 1024
    [ -s eff.json ] || printf '{"efficiency": {"gemm-linear": 0.5}}\n' >eff.json
    P="/dev/null --set device=cuda --set model.preset=gpt2-124m --set model.seq_len=1024 --set train.batch_size=16 --set train.micro_batch=16 $BF16"
    "$S" plan $P >gpu.plan 2>&1
    "$S" plan $P --calibration eff.json >cal.plan 2>&1
    "$S" plan $P --tflops 100 >tf.plan 2>&1
    [ -s half.json ] || ledger half gpt2-124m 16 1024 --calibration eff.json
    py gf.json half.json gpu.plan cal.plan >time.out 2>&1 <<'EOF'
import json, re, sys
g, h = (json.load(open(p)) for p in sys.argv[1:3])
def step(path):
    t = open(path).read()
    return float(re.search(r"([0-9.]+) s per step", t).group(1)), t
s1, t1 = step(sys.argv[3])
s2, t2 = step(sys.argv[4])
print(f"plan {s1} s, bound {g['total']['bound_ms']} ms; calibrated {s2} s, predicted {h['predicted_ms']} ms")
ok = abs(s1 - g["total"]["bound_ms"] / 1e3) < 6e-4 and abs(s2 - h["predicted_ms"] / 1e3) < 6e-4
ok = ok and "the GPU ledger's roofline bound" in t1 and "predicted by the GPU ledger" in t2
sys.exit(0 if ok else 1)
EOF
    rc=$?
    check "plan on a GPU: the step time is the ledger's bound, with --calibration its prediction ($(head -1 time.out))" \
        test $rc -eq 0 || diag "$(grep compute -A1 gpu.plan cal.plan)"
    check "  ...--tflops T keeps its meaning: the step at T sustained" grep -q 'at 100 TFLOP/s sustained per rank (--tflops)' tf.plan
}

# --- 5. the ledger is what the emulated GPU runs ---------------------------------------------
emu=false
emulator_tree && emu=true
tiny_job job.yaml model.seq_len=32 train.batch_size=2 train.seed=3 train.eval_every=0 log.sample_every=0
TJ="job.yaml --set device=cuda $BF16"
# same_families LEDGER PROFILE OUT: per family, launches and cuBLASLt calls
# equal, GB to profile.json's 6 digits; the families side by side in OUT
same_families() {
    py "$1" "$2" >"$3" 2>&1 <<'EOF'
import json, sys
a, p = (json.load(open(x)) for x in sys.argv[1:3])
la = {x["name"]: x for x in a["families"] if x["launches"] or x["gemm_calls"]}
lp = {x["name"]: x for x in p["families"]}
ok = set(la) == set(lp)
for n in sorted(set(la) | set(lp)):
    x, y = la.get(n), lp.get(n)
    same = bool(x and y) and (x["launches"], x["gemm_calls"]) == (y["launches"], y["gemm_calls"]) and \
        abs(x["gb"] - y["gb"]) <= 1e-5 * x["gb"]
    ok = ok and same
    show = lambda r: r and (r["launches"], r["gemm_calls"], r["gb"])
    print(f"{n}: ledger {show(x)} run {show(y)}{'' if same else '  <- differs'}")
sys.exit(0 if ok else 1)
EOF
}
group "5. the ledger is what an emulated run issues" && {
    if ! $emu; then
        skip_or_fail cudaemu "the emulated runs: not a CUDA emulator tree (configure --with-cuda=emulator)"
    else
        unset CUDAEMU_DEVICES CUDA_VISIBLE_DEVICES
        rm -f ops.txt
        CUDAEMU_OPS=$T/ops.txt "$S" train $TJ --set train.steps=2 --set checkpoint.dir=ckA >o2.out 2>o2.err
        a=$?
        CUDAEMU_OPS=$T/ops.txt SHARDRUN_CUDA_PROFILE=3:1 "$S" train $TJ --set train.steps=3 --set checkpoint.dir=ck \
            --set log.metrics=p.jsonl >p.out 2>p.err
        b=$?
        "$S" plan --ledger --json $TJ >tl.json 2>tl.err
        check "GPT-2 (tiny) on the emulated GPU: 2 and 3 steps, the third profiled (status $a, $b)" \
            sh -c "[ $a -eq 0 ] && [ $b -eq 0 ]" || diag "$(tail -3 o2.err p.err)"
        check "  ...per family its launches, cuBLASLt calls and GB are plan --ledger's, exactly" \
            same_families tl.json ck/profile/*/profile.json fam.out || diag "$(cat fam.out)"
        py tl.json ops.txt >ops.out 2>&1 <<'EOF'
import json, re, sys
t = json.load(open(sys.argv[1]))["total"]
runs = [dict((k, int(v)) for k, v in re.findall(r"(\w+)=(\d+)", l)) for l in open(sys.argv[2])]
d = {k: runs[1][k] - runs[0][k] for k in runs[0]}
print(f"the emulator counted in one step {d}; the ledger: launches {t['launches']}, cuBLASLt calls {t['gemm_calls']}")
sys.exit(0 if len(runs) == 2 and d["kernels"] + d["memsets"] + d["copies"] == t["launches"] and d["matmuls"] == t["gemm_calls"] else 1)
EOF
        rc=$?
        check "  ...the emulator's own count of one step's kernels, memsets, copies and matmuls is the ledger's" \
            test $rc -eq 0 || diag "$(cat ops.out)"
        diag "$(cat ops.out)"
        SHARDRUN_CUDA_PROFILE=2:1 "$S" train $TJ --set model.preset=llama-tiny --set train.steps=2 \
            --set checkpoint.dir=ckl >l.out 2>l.err
        a=$?
        "$S" plan --ledger --json $TJ --set model.preset=llama-tiny >ll.json 2>ll.err
        check "Llama (llama-tiny): a profiled step's families are plan --ledger's, exactly (status $a)" \
            same_families ll.json ckl/profile/*/profile.json lfam.out || diag "$(cat lfam.out; tail -3 l.err)"
        if ! grep -q '^#define SR_HAVE_NCCL 1' "$B/srconfig.h"; then
            skip_or_fail cudaemu "2 ranks: this emulator tree has no NCCL"
        elif ! have_mpirun; then
            skip_mpirun "2 ranks on emulated GPUs"
        else
            SHARDRUN_CUDA_PROFILE=2:1 timeout 300 $MPI -x SHARDRUN_CUDA_PROFILE -n 2 "$S" train $TJ --set train.steps=2 \
                --set checkpoint.dir=ck2 >m.out 2>m.err
            a=$?
            "$S" plan --ledger --json --ranks 2 $TJ >l2.json 2>l2.err
            two() { same_families l2.json ck2/profile/*/profile.json m2.out && grep -q '^collective: ledger ([1-9]' m2.out; }
            check "2 ranks over the emulated NCCL: rank 0's profiled step is plan --ledger --ranks 2's, collectives included (status $a)" \
                two || diag "$(cat m2.out; tail -3 m.err)"
        fi
    fi
}

# --- 6. the profile ------------------------------------------------------------------------
group "6. SHARDRUN_CUDA_PROFILE" && {
    if $emu; then
        last=$(grep 'profile: ' p.err | tail -1)
        file=$(printf '%s\n' "$last" | sed -n 's/.*profile: wrote \([^ ]*profile.json\) .*/\1/p')
        check "the profile's last line names profile.json, which is there" test -n "$file" -a -s "$file" ||
            diag "$last"
        dir=$(dirname "${file:-x/x}")
        py "${file:-none}" >prof.out 2>&1 <<'EOF'
import json, sys
p = json.load(open(sys.argv[1]))
bad = [f["name"] for f in p["families"] if not f["ms"] > 0 or "efficiency" not in f]
ok = not bad and p["steps"] == [3, 3] and p["emulated"] and "emulator" in p["times"] and p["wall_ms"] > 0
ok = ok and 0 < p["busy_ms"] <= p["ops_ms"] + 1e-6 and len(p["launchers"]) > 0 and p["total"]["ms"] > 0
# issue 64: the launch gap, the wall less the operations' sum, its share,
# per operation, and the CUDA-graph advice past 5 % of the step
g = p.get("launch_gap_ms")
# (the JSON's reals carry 6 significant digits)
ok = ok and g is not None and abs(g - (p["wall_ms"] - p["ops_ms"])) <= 1e-5 * max(1, p["wall_ms"])
ok = ok and abs(p["launch_gap_share"] - g / p["wall_ms"]) <= 1e-5 * max(1e-3, abs(g / p["wall_ms"]))
ok = ok and p["launch_gap_us_per_op"] != 0
ok = ok and p["cuda_graphs_advised"] == (p["launch_gap_share"] > 0.05)
print(f"families without time: {bad}; wall {p['wall_ms']} ms, busy {p['busy_ms']}, ops {p['ops_ms']}, launch gap "
      f"{g} ms ({p.get('launch_gap_share')}; graphs advised {p.get('cuda_graphs_advised')}); times: {p['times']}")
sys.exit(0 if ok else 1)
EOF
        rc=$?
        check "  ...device ms for every family and launcher, the wall, busy and gap times, the launch gap and the CUDA-graph advice, the emulator's times said so" \
            test $rc -eq 0 || diag "$(cat prof.out)"
        check "  ...the run's lines give the launch gap's share of the step" \
            grep -q "profile: the launch gap (the step's wall time less the sum of its operations' times) .* of the step" p.err
        check "  ...profile.md's tables and calibration.json beside it" \
            sh -c "grep -q '^| family | calls | ms | share | achieved | bound ms | efficiency |' '$dir/profile.md' && grep -q '\"efficiency\"' '$dir/calibration.json'"
        "$S" plan --ledger $TJ --calibration "$dir/calibration.json" >pc.txt 2>&1
        check "  ...plan --ledger --calibration reads that calibration.json and predicts" \
            grep -q '^  predicted .* ms per step: each family.s bound / its efficiency' pc.txt || diag "$(cat pc.txt)"
        check "  ...a profile event in log.metrics" grep -q '"event":"profile"' p.jsonl
        "$S" report p.jsonl -o p.html >rep.out 2>&1
        check "  ...that shardrun report draws (a GPU profile section) and sums up" \
            sh -c "grep -q '<h2>GPU profile</h2>' p.html && grep -q 'GPU profile: step 3' rep.out"
        check "  ...the run's lines say the times are the emulator's" \
            grep -q "profile: steps 3 to 3, per step, rank 0; device times are the CUDA emulator's (not a GPU's)" p.err
    else
        skip_or_fail cudaemu "the profile's outputs: not a CUDA emulator tree"
    fi
    SHARDRUN_CUDA_PROFILE=abc "$S" train job.yaml --set device=cpu --set train.steps=1 >bad.out 2>bad.err
    rc=$?
    check "SHARDRUN_CUDA_PROFILE=abc is 78 naming the variable and the form" \
        sh -c "[ $rc -eq 78 ] && grep -q 'SHARDRUN_CUDA_PROFILE=abc: expected FIRST:COUNT' bad.err"
    SHARDRUN_CUDA_PROFILE=1:1 "$S" train job.yaml --set device=cpu --set train.steps=1 --set checkpoint.dir=cpu >cpu.out 2>cpu.err
    rc=$?
    check "on the CPU it warns and profiles nothing (status $rc)" \
        sh -c "[ $rc -eq 0 ] && grep -q 'SHARDRUN_CUDA_PROFILE is set, but this run.s device table (cpu) has no per-op profile' cpu.err && [ ! -e cpu/profile ]"
}
done_testing
