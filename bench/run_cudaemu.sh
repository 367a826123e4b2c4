#!/bin/sh
# run_cudaemu.sh — what the CUDA emulator costs (make bench-cudaemu, in an
# emulator tree: configure --with-cuda=emulator): a training step with
# device: cuda on the emulated GPU against the same step with device: cpu,
# by the same binary, with the same threads, on the same machine, in the
# same run.  Each round runs both, interleaved so machine noise hits both
# alike, STEPS steps each in exact mode (param_dtype fp32); a run's figure is
# the median step time of its steps after the second (the first steps warm
# caches and plans).  Reported per shape: the CPU's and the emulator's
# ms/step, median (min..max) over ROUNDS rounds, and emulated / CPU, the
# ratio per round (median and spread).  Issue 30 asks at most 10x at the
# dimensions tests/cudaemu.sh trains (n_embd 256, the last row); the
# emulator's cost is per CUDA thread and per shuffle, the CPU's per FLOP,
# so the ratio falls as the model widens (about 40x at n_embd 64).
#
# usage: bench/run_cudaemu.sh [STEPS [ROUNDS]]
#   env: SHARDRUN (./shardrun of an emulator tree), SR_BUILDDIR (.), THREADS
#        (the threads key of both; default 2)
set -u
STEPS=${1:-${BENCH_STEPS:-12}}
ROUNDS=${2:-${BENCH_ROUNDS:-3}}
S=${SHARDRUN:-./shardrun}
THREADS=${THREADS:-2}
if ! grep -q '^#define SR_CUDA_EMULATED 1' "${SR_BUILDDIR:-.}/srconfig.h" 2>/dev/null; then
    echo "emulator bench: not a CUDA emulator tree (configure --with-cuda=emulator)" >&2
    exit 1
fi
d=$(mktemp -d "${TMPDIR:-/tmp}/shardrun-cudaemu-bench.XXXXXX")
trap 'rm -rf "$d"' EXIT
# step_ms FILE: the median step time of steps 3.. of a metrics file
step_ms() {
    sed -n 's/.*"step":\([0-9]*\),.*"step_ms":\([0-9.e+-]*\).*/\1 \2/p' "$1" | awk '$1 > 2 { print $2 }' | sort -g |
        awk '{ v[NR] = $1 } END { if (NR) print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'
}
# stats: "median (min..max)" of the numbers on stdin
stats() {
    sort -g | awk '{ v[NR] = $1 } END { m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
        printf "%.3g (%.3g..%.3g)", m, v[1], v[NR] }'
}
printf '%-44s | %-22s | %-22s | %s\n' "shape (batch 8, seq_len 64, $THREADS threads)" "cpu ms/step" "emulated ms/step" \
    "emulated / cpu"
for shape in "2 4 64" "2 4 128" "2 4 256"; do
    set -- $shape
    dims="--set model.n_layer=$1 --set model.n_head=$2 --set model.n_embd=$3 --set model.seq_len=64"
    : >"$d/cpu" && : >"$d/emu" && : >"$d/ratio"
    r=0
    while [ $r -lt "$ROUNDS" ]; do
        r=$((r + 1))
        for dev in cpu cuda; do
            # shellcheck disable=SC2086
            "$S" train $dims --set model.vocab_size=256 --set data.embedded_any_vocab=true --set train.steps="$STEPS" \
                --set train.batch_size=8 --set threads="$THREADS" --set device=$dev \
                --set sharding.mixed_precision.param_dtype=fp32 --set log.sample_every=0 --set log.every=1 \
                --set log.metrics="$d/$dev.jsonl" >"$d/$dev.out" 2>"$d/$dev.err" ||
                { echo "emulator bench: device $dev failed: $(tail -2 "$d/$dev.err")" >&2; exit 1; }
        done
        c=$(step_ms "$d/cpu.jsonl") e=$(step_ms "$d/cuda.jsonl")
        echo "$c" >>"$d/cpu"
        echo "$e" >>"$d/emu"
        awk -v c="$c" -v e="$e" 'BEGIN { print e / c }' >>"$d/ratio"
    done
    printf '%-44s | %-22s | %-22s | %s\n' "n_layer $1, n_head $2, n_embd $3" "$(stats <"$d/cpu")" "$(stats <"$d/emu")" \
        "$(stats <"$d/ratio")x"
done
