#!/bin/sh
# run_eval.sh — evaluation throughput (make bench): `shardrun eval`
# against transformers (tests/hf/eval_ref.py: AutoModelForCausalLM, eager
# float32, batches padded on the right) scoring the same multiple-choice
# task on the same model with the same threads, in the same run.
#
# The model is a randomly initialised byte-level GPT-2 (6 layers, 384
# wide, 6 heads, vocabulary 256, 1024 positions) that transformers saves
# with save_pretrained; shardrun reads that directory directly.  The task:
# ITEMS HellaSwag-form items of a fixed seed (contexts of 80 to 240 bytes,
# four endings of 20 to 90), scored as UTF-8 bytes by both.  Each round,
# interleaved so machine noise hits both alike, for 1 and 2 threads
# (taskset -c 0 or -c 0,1; --threads and torch.set_num_threads), both in
# batches of 16 sequences; each side's time is the scoring alone (loading
# excluded).  Reported: sequences/s median (min..max) over ROUNDS rounds,
# shardrun / transformers per round (median and spread), and whether the
# two chose the same endings.
#
# usage: bench/run_eval.sh [ITEMS [ROUNDS]]
#   env: SHARDRUN (./shardrun), SHARDRUN_HF_PYTHON (the Python that imports
#        transformers; default $SR_SRCDIR/.venv-hf/bin/python)
set -u
ITEMS=${1:-${BENCH_EVAL_ITEMS:-48}}
ROUNDS=${2:-${BENCH_ROUNDS:-3}}
S=${SHARDRUN:-./shardrun}
SRC=${SR_SRCDIR:-.}
PY=${SHARDRUN_HF_PYTHON:-$SRC/.venv-hf/bin/python}
if ! "$PY" -c 'import transformers, torch' 2>/dev/null; then
    echo "eval bench: skipped: $PY cannot import transformers (tests/hf/setup-venv.sh .venv-hf)"
    exit 0
fi
d=$(mktemp -d "${TMPDIR:-/tmp}/shardrun-eval-bench.XXXXXX")
trap 'rm -rf "$d"' EXIT
"$PY" - "$d/m" "$d/task.jsonl" "$ITEMS" <<'PYEOF' || exit 1
import json, random, sys, torch, transformers
torch.manual_seed(0)
cfg = transformers.GPT2Config(vocab_size=256, n_layer=6, n_embd=384, n_head=6, n_positions=1024)
transformers.GPT2LMHeadModel(cfg).save_pretrained(sys.argv[1], safe_serialization=True)
random.seed(1)
w = "the of and a to in is was he for it with as his on be at by had are but from or have an they which one you were".split()
def text(lo, hi):
    s = ""
    while len(s) < random.randint(lo, hi):
        s += random.choice(w) + " "
    return s.strip()
with open(sys.argv[2], "w") as f:
    for i in range(int(sys.argv[3])):
        f.write(json.dumps({"ctx": text(80, 240).capitalize() + ".", "endings": [text(20, 90) for _ in range(4)],
                            "label": random.randrange(4)}) + "\n")
PYEOF
: >"$d/rows"
for r in $(seq "$ROUNDS"); do
    for t in 1 2; do
        cores=0
        [ "$t" = 2 ] && cores=0,1
        taskset -c $cores "$S" eval "$d/m" --task "$d/task.jsonl" --json --threads $t --batch 16 \
            >"$d/sr.json" 2>"$d/sr.err" || { cat "$d/sr.err"; exit 1; }
        srs=$(sed -n 's/.* in [0-9.]* s, \([0-9.]*\) sequences\/s;.*/\1/p' "$d/sr.err")
        OMP_WAIT_POLICY=PASSIVE taskset -c $cores "$PY" "$SRC/tests/hf/eval_ref.py" "$d/m" "$d/task.jsonl" \
            --threads $t --batch 16 --bench >"$d/hf.json" 2>"$d/hf.err" || { cat "$d/hf.err"; exit 1; }
        hfs=$(python3 -c 'import json, sys; o = json.loads(open(sys.argv[1]).read().splitlines()[-1]); print("%.3f" % (o["sequences"] / o["seconds"]))' "$d/hf.err")
        same=$(python3 -c 'import json, sys; a, b = (json.load(open(p)) for p in sys.argv[1:]); print("yes" if [i["pred"] for i in a["items"]] == [i["pred"] for i in b["items"]] else "no")' "$d/sr.json" "$d/hf.json")
        echo "$t $srs $hfs $same" >>"$d/rows"
    done
done
echo "eval: $ITEMS items x 4 endings (byte-level GPT-2, 6 layers, 384 wide, random weights), batches of 16,"
echo "sequences/s median (min..max) over $ROUNDS rounds; ratio = shardrun / transformers per round"
printf '| %-7s | %-26s | %-26s | %-22s | %-12s |\n' threads "shardrun sequences/s" "transformers sequences/s" "ratio" "same choices"
printf '|---------|----------------------------|----------------------------|------------------------|--------------|\n'
for t in 1 2; do
    awk -v t=$t '$1 == t' "$d/rows" | awk -v t=$t '
        function med(a, n,   i, j, x) { for (i = 2; i <= n; i++) { x = a[i]; for (j = i - 1; j >= 1 && a[j] > x; j--) a[j + 1] = a[j]; a[j + 1] = x }
            return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 }
        { s[NR] = $2; h[NR] = $3; q[NR] = $3 > 0 ? $2 / $3 : 0; same = same ($4 == "yes" ? "" : "no ") }
        END { n = NR; ms = med(s, n); mh = med(h, n); mq = med(q, n)
            printf "| %-7s | %8.1f (%7.1f..%7.1f) | %8.1f (%7.1f..%7.1f) | %5.2f (%5.2f..%5.2f)     | %-12s |\n",
                t, ms, s[1], s[n], mh, h[1], h[n], mq, q[1], q[n], same == "" ? "yes" : "no" }'
done
