#!/bin/sh
# run_tokenizer.sh — encoding throughput (make bench): shardrun's tokenizer
# (bench/bench_tokenizer) against tiktoken's encode_ordinary, the same
# ranks and pattern (GPT-2's), in the same run.
#
# The text: tests/tok/ref.py's generator at BYTES (default 12 MB: prose,
# code, CJK, emoji, combining marks, right-to-left text, whitespace and
# digits; the pathological single-character runs left out), as documents
# separated by 0x1e.  The tokenizer: a byte-level BPE of 8,000 ids that
# PyPI's tokenizers trains on its first 2 MB, written as a tiktoken rank
# file, so both encode with the same ranks.  Each round, interleaved so
# machine noise hits all alike: tiktoken with one thread, shardrun with 1
# and 2 threads (taskset -c 0 / -c 0,1).  Reported: MB/s median
# (min..max) over ROUNDS rounds, and the ratio to tiktoken per round
# (median, min..max); whether the ids agree (count and sum).  Then the
# peak resident memory of `shardrun data prepare` (2 threads) on the text
# and on four copies of it: bounded, the same for both (prepare.h states
# the bound); and the figure shardrun(1) states per thread: a single piece
# of 16 MiB with no space or tab (cut at SR_PREPARE_MAX_PIECE), at 1 and 2
# threads, the difference being one thread's share.
#
# usage: bench/run_tokenizer.sh [BYTES [ROUNDS]]
#   env: SR_BUILDDIR (.), SHARDRUN_HF_PYTHON (the test virtual environment's
#        python, with tokenizers and tiktoken; default $SR_SRCDIR/.venv-hf/bin/python)
set -u
BYTES=${1:-${BENCH_TOKENIZER_BYTES:-12000000}}
ROUNDS=${2:-${BENCH_ROUNDS:-5}}
SRC=${SR_SRCDIR:-.}
B=${SR_BUILDDIR:-.}/bench/bench_tokenizer
S=${SHARDRUN:-${SR_BUILDDIR:-.}/shardrun}
PY=${SHARDRUN_HF_PYTHON:-$SRC/.venv-hf/bin/python}
if ! "$PY" -c 'import tokenizers, tiktoken' 2>/dev/null; then
    echo "tokenizer bench: skipped: $PY cannot import tokenizers and tiktoken (tests/hf/setup-venv.sh .venv-hf)"
    exit 0
fi
d=$(mktemp -d "${TMPDIR:-/tmp}/shardrun-tok-bench.XXXXXX")
trap 'rm -rf "$d"' EXIT
"$PY" - "$SRC/tests/tok/ref.py" "$d" "$BYTES" <<'PYEOF' || exit 1
import base64, importlib.util, os, random, sys
spec = importlib.util.spec_from_file_location("ref", sys.argv[1])
ref = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ref)
d, size = sys.argv[2], int(sys.argv[3])
r = random.Random(7)
docs, total = [], 0
while total < size:
    doc = ref.mixed(r)
    docs.append(doc)
    total += len(doc.encode())
with open(os.path.join(d, "text"), "wb") as f:
    f.write(b"\x1e".join(x.encode() for x in docs))
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
tok = Tokenizer(models.BPE())
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.decoder = decoders.ByteLevel()
tr = trainers.BpeTrainer(vocab_size=8000, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
head, n = [], 0
for x in docs:
    head.append(x)
    n += len(x)
    if n > 2_000_000:
        break
tok.train_from_iterator(head, tr)
unmap = ref.byte_maps()
with open(os.path.join(d, "ranks.tiktoken"), "w") as f:
    for s, i in sorted(tok.get_vocab().items(), key=lambda kv: kv[1]):
        f.write("%s %d\n" % (base64.b64encode(bytes(unmap[ch] for ch in s)).decode(), i))
PYEOF
cat >"$d/tt.py" <<'PYEOF'
import base64, sys, time, tiktoken
pat = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
ranks = {}
for line in open(sys.argv[1]):
    b, r = line.split()
    ranks[base64.b64decode(b)] = int(r)
e = tiktoken.Encoding("bench", pat_str=pat, mergeable_ranks=ranks, special_tokens={})
raw = open(sys.argv[2], "rb").read()
docs = [x.decode() for x in raw.split(b"\x1e")]
t = time.perf_counter()
count = total = 0
for x in docs:
    ids = e.encode_ordinary(x)
    count += len(ids)
    total += sum(ids)
dt = time.perf_counter() - t
print("mbps=%.3f ids=%d sum=%d" % (len(raw) / 1e6 / dt, count, total))
PYEOF
mb=$(($(stat -c %s "$d/text") / 1000000))
: >"$d/rows"
for r in $(seq "$ROUNDS"); do
    tt=$(RAYON_NUM_THREADS=1 taskset -c 0 "$PY" "$d/tt.py" "$d/ranks.tiktoken" "$d/text") || exit 1
    s1=$(taskset -c 0 "$B" "gpt2:$d/ranks.tiktoken" "$d/text" 1) || exit 1
    s2=$(taskset -c 0,1 "$B" "gpt2:$d/ranks.tiktoken" "$d/text" 2) || exit 1
    echo "$tt $s1 $s2" >>"$d/rows"
done
awk -v mb="$mb" -v rounds="$ROUNDS" '
function val(s,   a) { split(s, a, "="); return a[2] + 0 }
function med(x, n,   i, j, t) { for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (x[j] < x[i]) { t = x[i]; x[i] = x[j]; x[j] = t }
    return n % 2 ? x[(n + 1) / 2] : (x[n / 2] + x[n / 2 + 1]) / 2 }
function mn(x, n,   i, m) { m = x[1]; for (i = 2; i <= n; i++) if (x[i] < m) m = x[i]; return m }
function mx(x, n,   i, m) { m = x[1]; for (i = 2; i <= n; i++) if (x[i] > m) m = x[i]; return m }
{ n++; t[n] = val($1); a[n] = val($4); b[n] = val($7); ra[n] = a[n] / t[n]; rb[n] = b[n] / t[n]
  agree = agree + ($2 == $5 && $3 == $6 && $5 == $8 && $6 == $9) }
END {
  printf "tokenizer encoding, %d MB of text, GPT-2 pattern, 8000 ids, %d rounds interleaved:\n", mb, n
  printf "%-28s %10s %18s %10s %18s\n", "encoder", "MB/s med", "(min..max)", "ratio", "(min..max)"
  printf "%-28s %10.2f %8.2f..%-8.2f %10s %18s\n", "tiktoken, 1 thread", med(t, n), mn(t, n), mx(t, n), "1.00", ""
  printf "%-28s %10.2f %8.2f..%-8.2f %10.2f %8.2f..%-8.2f\n", "shardrun, 1 thread", med(a, n), mn(a, n), mx(a, n), med(ra, n), mn(ra, n), mx(ra, n)
  printf "%-28s %10.2f %8.2f..%-8.2f %10.2f %8.2f..%-8.2f\n", "shardrun, 2 threads", med(b, n), mn(b, n), mx(b, n), med(rb, n), mn(rb, n), mx(rb, n)
  printf "ids equal to tiktoken'\''s (count and sum) in %d of %d rounds\n", agree, n
}' "$d/rows"

# data prepare's peak memory: 1x and 4x the text
if [ -x /usr/bin/time ] && [ -x "$S" ]; then
    cat "$d/text" "$d/text" "$d/text" "$d/text" >"$d/text4"
    for f in text text4; do
        /usr/bin/time -f %M -o "$d/$f.rss" "$S" data prepare --threads 2 --tokenizer "gpt2:$d/ranks.tiktoken" \
            -o "$d/out.$f/" "$d/$f" >/dev/null 2>&1 || { echo "data prepare failed on $f"; exit 1; }
    done
    echo "data prepare, peak RSS (2 threads): $((mb)) MB of text $(($(cat "$d/text.rss") / 1024)) MiB," \
        "$((4 * mb)) MB $(($(cat "$d/text4.rss") / 1024)) MiB (ratio $(awk -v a="$(cat "$d/text.rss")" -v b="$(cat "$d/text4.rss")" 'BEGIN { printf "%.2f", b / a }'))"
fi

# data prepare's memory per thread: one 16 MiB piece without a space or tab
if [ -x /usr/bin/time ] && [ -x "$S" ]; then
    head -c 16777216 /dev/zero | tr '\0' 'a' >"$d/piece"
    for t in 1 2; do
        /usr/bin/time -f %M -o "$d/piece.$t" "$S" data prepare --threads $t --tokenizer "gpt2:$d/ranks.tiktoken" \
            -o "$d/out.piece$t/" "$d/piece" >/dev/null 2>&1 || { echo "data prepare failed on the piece"; exit 1; }
    done
    p1=$(($(cat "$d/piece.1") / 1024)) p2=$(($(cat "$d/piece.2") / 1024))
    echo "data prepare, peak RSS on one 16 MiB piece without a space: 1 thread $p1 MiB, 2 threads $p2 MiB" \
        "(per thread: $((p2 - p1)) MiB; shardrun(1) FILES states the figure)"
fi
