#!/bin/sh
# run_sample.sh — sampling throughput (make bench): `shardrun sample`
# against transformers' GPT2LMHeadModel.generate (key/value cache, greedy,
# eager float32) on gpt2-124m, with the same threads, in the same run.
#
# The model is a randomly initialised gpt2-124m (GPT2Config() defaults:
# 12 layers, 768 wide, vocabulary 50257, 1024 positions) that transformers
# saves with save_pretrained; shardrun samples that directory directly
# (a Hugging Face GPT-2 directory), so both generate from the same weights.
# Each round, interleaved so machine noise hits both alike, and for 1 and 2
# threads (taskset -c 0 or -c 0,1; torch.set_num_threads and --threads):
# TOKENS tokens after the start token 50256, greedy (transformers: the
# model's forward with past_key_values, token by token, as generate() does).  Reported: tokens/s
# median (min..max) over ROUNDS rounds and shardrun / transformers, the
# ratio per round (median and spread); whether the greedy tokens agree.
#
# usage: bench/run_sample.sh [TOKENS [ROUNDS]]
#   env: SHARDRUN (./shardrun), SHARDRUN_HF_PYTHON (the Python that imports
#        transformers; default $SR_SRCDIR/.venv-hf/bin/python)
set -u
TOKENS=${1:-${BENCH_SAMPLE_TOKENS:-64}}
ROUNDS=${2:-${BENCH_ROUNDS:-3}}
S=${SHARDRUN:-./shardrun}
PY=${SHARDRUN_HF_PYTHON:-${SR_SRCDIR:-.}/.venv-hf/bin/python}
if ! "$PY" -c 'import transformers, torch' 2>/dev/null; then
    echo "sampling bench: skipped: $PY cannot import transformers (tests/hf/setup-venv.sh .venv-hf)"
    exit 0
fi
d=$(mktemp -d "${TMPDIR:-/tmp}/shardrun-sample-bench.XXXXXX")
trap 'rm -rf "$d"' EXIT
"$PY" - "$d/gpt2" <<'PYEOF' || exit 1
import sys, torch, transformers
torch.manual_seed(0)
m = transformers.GPT2LMHeadModel(transformers.GPT2Config())
m.save_pretrained(sys.argv[1], safe_serialization=True)
PYEOF
cat >"$d/hf.py" <<'PYEOF'
# greedy decoding with the model's own key/value cache (past_key_values):
# what generate() does, written out, since generate() imports
# torch.distributed.fsdp, which Debian's torch 1.13 cannot on Python 3.11
import sys, time, torch, transformers
path, threads, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
torch.set_num_threads(threads)
m = transformers.GPT2LMHeadModel.from_pretrained(path).eval()
def greedy(count):
    ids, past, out = torch.tensor([[50256]]), None, []
    with torch.no_grad():
        for _ in range(count):
            o = m(input_ids=ids, past_key_values=past, use_cache=True)
            past = o.past_key_values
            ids = o.logits[:, -1, :].argmax(dim=-1, keepdim=True)
            out.append(int(ids[0, 0]))
    return out
greedy(4)  # warm up
t = time.perf_counter()
out = greedy(n)
dt = time.perf_counter() - t
print("tokens_s=%.3f ids=%s" % (n / dt, ",".join(str(x) for x in out)))
PYEOF
: >"$d/rows"
for r in $(seq "$ROUNDS"); do
    for t in 1 2; do
        cores=0
        [ "$t" = 2 ] && cores=0,1
        taskset -c $cores "$S" sample "$d/gpt2" --prompt-tokens 50256 --no-echo --tokens "$TOKENS" --top-k 1 --threads $t \
            >"$d/sr.ids" 2>"$d/sr.err" || { cat "$d/sr.err"; exit 1; }
        # shardrun's rate counts the prompt too: tokens generated / time
        srs=$(sed -n 's/.*, \([0-9.]*\) tokens\/s$/\1/p' "$d/sr.err")
        srs=$(echo "$srs" | awk -v n="$TOKENS" '{ printf "%.3f", $1 * n / (n + 1) }')
        OMP_WAIT_POLICY=PASSIVE taskset -c $cores "$PY" "$d/hf.py" "$d/gpt2" $t "$TOKENS" >"$d/hf.out" 2>"$d/hf.err" ||
            { cat "$d/hf.err"; exit 1; }
        hfs=$(sed -n 's/^tokens_s=\([0-9.]*\) .*/\1/p' "$d/hf.out")
        same=no
        [ "$(tr ' ' ',' <"$d/sr.ids")" = "$(sed -n 's/.* ids=//p' "$d/hf.out")" ] && same=yes
        echo "$t $srs $hfs $same" >>"$d/rows"
    done
done
echo "sampling gpt2-124m (random weights, transformers' save_pretrained directory), $TOKENS tokens after 50256, greedy,"
echo "key/value cache on both; median (min..max) over $ROUNDS rounds; ratio = shardrun / transformers per round"
printf '| %-7s | %-26s | %-26s | %-22s | %-11s |\n' threads "shardrun tokens/s" "transformers tokens/s" "ratio" "same tokens"
printf '|---------|----------------------------|----------------------------|------------------------|-------------|\n'
for t in 1 2; do
    awk -v t=$t '$1 == t' "$d/rows" | awk -v t=$t '
        function med(a, n,   i, j, x) { for (i = 2; i <= n; i++) { x = a[i]; for (j = i - 1; j >= 1 && a[j] > x; j--) a[j + 1] = a[j]; a[j + 1] = x }
            return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 }
        { s[NR] = $2; h[NR] = $3; q[NR] = $3 > 0 ? $2 / $3 : 0; same = same ($4 == "yes" ? "" : "no ") }
        END { n = NR; ms = med(s, n); mh = med(h, n); mq = med(q, n)
            printf "| %-7s | %8.1f (%7.1f..%7.1f) | %8.1f (%7.1f..%7.1f) | %5.2f (%5.2f..%5.2f)     | %-11s |\n",
                t, ms, s[1], s[n], mh, h[1], h[n], mq, q[1], q[n], same == "" ? "yes" : "no" }'
done
