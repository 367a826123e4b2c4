#!/bin/sh
# gpu_ledger.sh — the GPU step's ledger of the three models the GPU check
# profiles, as bench/gpu_ledger.expected records it (make update-ledger
# writes that file from this output; tests/ledger.sh compares against it).
#
# usage: bench/gpu_ledger.sh SHARDRUN [--check EXPECTED]
#        bench/gpu_ledger.sh --compare NOW EXPECTED
#   prints one line per model: the model, its shapes (micro-batch x
#   sequence), then the ledger of one optimizer step of one rank in bf16
#   (shardrun plan --ledger --json): launches, cuBLASLt calls, GB moved,
#   and the roofline bound in ms (at the defaults: a record, not a contract).
#   --check: exit 1 when a model's launches, cuBLASLt calls or GB are more
#   than 1 % above EXPECTED's, naming each (a count that fell is reported,
#   not failed: rewrite the file with make update-ledger).
#   --compare: the same check of NOW, an earlier output of this script.
# The shapes are tests/gpu/check.sh's profile stage's: gpt2-124m and
# llama-125m at 16 x 1024, Llama-3.2-1B at 8 x 2048.
set -u
S=${1:?usage: gpu_ledger.sh SHARDRUN [--check EXPECTED] | --compare NOW EXPECTED}
expected=""
[ "${2:-}" = --check ] && expected=${3:?--check needs the expected file}
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
out=$tmp/now
if [ "$S" = --compare ]; then
    out=${2:?--compare NOW EXPECTED} expected=${3:?--compare NOW EXPECTED}
fi
[ "$S" = --compare ] || for row in "gpt2-124m 16 1024" "llama-125m 16 1024" "llama-3.2-1b 8 2048"; do
    set -- $row
    "$S" plan --ledger --json /dev/null --set device=cuda --set model.preset="$1" --set model.seq_len="$3" \
        --set train.batch_size="$2" --set train.micro_batch="$2" --set sharding.mixed_precision.param_dtype=bf16 \
        --set sharding.mixed_precision.reduce_dtype=fp32 >"$tmp/$1.json" 2>"$tmp/$1.err" ||
        { echo "gpu_ledger.sh: plan --ledger for $1 failed: $(tail -1 "$tmp/$1.err")" >&2; exit 2; }
    python3 - "$tmp/$1.json" "$1" "${2}x${3}" >>"$out" <<'EOF' || exit 2
import json, sys
t = json.load(open(sys.argv[1]))["total"]
print(f"{sys.argv[2]} {sys.argv[3]} {t['launches']} {t['gemm_calls']} {t['gb']:.3f} {t['bound_ms']:.3f}")
EOF
done
if [ -z "$expected" ]; then
    cat "$out"
    exit 0
fi
# --check: every model of the expected file, each count within 1 % above
awk 'NR == FNR { if ($0 !~ /^#/ && NF >= 5) { l[$1] = $3; c[$1] = $4; g[$1] = $5 }; next }
    { seen[$1] = 1
      if (!($1 in l)) { printf "%s: not in the expected file (make update-ledger)\n", $1; bad = 1; next }
      n = split("launches cuBLASLt_calls GB", what, " ")
      split(l[$1] " " c[$1] " " g[$1], was, " "); split($3 " " $4 " " $5, now, " ")
      for (i = 1; i <= n; i++) {
          if (now[i] > was[i] * 1.01) { printf "%s: %s %s, above the recorded %s by more than 1 %%\n", $1, what[i], now[i], was[i]; bad = 1 }
          else if (now[i] < was[i] * 0.99) printf "%s: %s %s, below the recorded %s (make update-ledger records it)\n", $1, what[i], now[i], was[i]
      } }
    END { for (m in l) if (!(m in seen)) { printf "%s: in the expected file, not measured\n", m; bad = 1 }; exit bad }' \
    "$expected" "$out"
