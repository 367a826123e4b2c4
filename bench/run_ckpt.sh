#!/bin/sh
# run_ckpt.sh — the checkpoint benchmark (make bench-ckpt), all in one run on
# one file system (the current directory, or BENCH_DIR):
#  1. save and load MB/s of the full gpt2-124m training state (fp32 master
#     weights + Adam m and v, 1 rank), with SHA-256 per 4 MiB chunk and
#     without (SHARDRUN_BENCH_NO_SHA256=1), interleaved with the file
#     system's raw sequential write (dd conv=fsync) and read of the same
#     number of bytes, so every ratio compares neighbours in time;
#  2. SHA-256 MB/s of one core (openssl speed, 4 MiB blocks), for scale;
#  3. signal-to-exit: SIGUSR1 at a random point of a gpt2-124m run, the time
#     until the process has exited (75) against one step + the save.
# Reads come from the page cache for dd and shardrun alike (the files were
# just written).  Median (min..max) of REPS rounds.
# usage: bench/run_ckpt.sh [REPS]   (run from the build directory)
set -u
REPS=${1:-3}
S=${SHARDRUN:-./shardrun}
export OMP_WAIT_POLICY=PASSIVE
d=$(mktemp -d "${BENCH_DIR:-.}/shardrun-bench-ckpt.XXXXXX") || exit 1
trap 'rm -rf "$d"' EXIT
"$S" data prepare -o "$d/data.bin" "$(dirname "$0")/../data/corpus.txt" 2>/dev/null || exit 1
job="--set model.preset=gpt2-124m --set model.seq_len=64 --set train.batch_size=1 --set train.steps=1 \
--set train.eval_every=0 --set threads=2 --set data.train=$d/data.bin --set checkpoint.dir=$d/ck"

# median min max of the numbers on stdin
stats() { sort -g | awk '{ a[NR] = $1 } END { m = (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2; printf "%.0f %.0f %.0f", m, a[1], a[NR] }'; }
# dd's "N bytes ... copied, T s" -> MB/s
dd_mbps() { sed -n 's/^\([0-9]*\) bytes .* copied, \([0-9.]*\) s.*/\1 \2/p' | awk '{ printf "%.0f", $1 / $2 / 1e6 }'; }

: >"$d/save" && : >"$d/save0" && : >"$d/load" && : >"$d/load0" && : >"$d/raww" && : >"$d/rawr"
bytes=0
for r in $(seq "$REPS"); do
    echo "# round $r/$REPS" >&2
    for mode in sha nosha; do
        rm -rf "$d/ck"
        env_=""
        [ $mode = nosha ] && env_="SHARDRUN_BENCH_NO_SHA256=1"
        env $env_ "$S" train $job 2>"$d/s.err" || { tail -3 "$d/s.err"; exit 1; }
        suffix=""
        [ $mode = nosha ] && suffix=0
        sed -n 's/.*step 1 saved: .* (\([0-9]*\) MB\/s.*/\1/p' "$d/s.err" >>"$d/save$suffix"
        bytes=$(sed -n 's/.*step 1 saved: \([0-9.]*\) MB in.*/\1/p' "$d/s.err" | awk '{ printf "%.0f", $1 * 1e6 }')
        env $env_ "$S" train $job 2>"$d/l.err" || { tail -3 "$d/l.err"; exit 1; }
        sed -n 's/.*read and verified in .* (\([0-9]*\) MB\/s).*/\1/p' "$d/l.err" >>"$d/load$suffix"
    done
    count=$(((bytes + 4194303) / 4194304))
    dd if=/dev/zero of="$d/raw" bs=4M count="$count" conv=fsync 2>&1 | dd_mbps >>"$d/raww"
    echo >>"$d/raww"
    dd if="$d/raw" of=/dev/null bs=4M 2>&1 | dd_mbps >>"$d/rawr"
    echo >>"$d/rawr"
    rm -f "$d/raw"
done
rm -rf "$d/ck"
sha=$(openssl speed -seconds 2 -bytes 4194304 -evp sha256 2>/dev/null | awk '/^sha256/ { v = $NF; sub(/k$/, "", v); printf "%.0f", v * 1000 / 1e6 }')

echo "# signal to exit" >&2
: >"$d/sig"
sigjob="--set model.preset=gpt2-124m --set model.seq_len=256 --set train.batch_size=4 --set train.steps=1000 \
--set train.eval_every=0 --set log.every=1 --set threads=2 --set data.train=$d/data.bin"
for r in $(seq "$REPS"); do
    rm -rf "$d/sk"
    "$S" train $sigjob --set checkpoint.dir="$d/sk" 2>"$d/sig.err" &
    pid=$!
    while ! grep -q "step  *2/1000" "$d/sig.err"; do sleep 0.2; kill -0 $pid 2>/dev/null || exit 1; done
    sleep "$(awk -v s="$r" 'BEGIN { srand(s); printf "%.2f", rand() * 2 }')"
    t0=$(date +%s.%N)
    kill -USR1 $pid
    wait $pid
    rc=$?
    t1=$(date +%s.%N)
    step_ms=$(sed -n 's/.*step  *[0-9]*\/1000 |.*| \([0-9.]*\) ms$/\1/p' "$d/sig.err" | head -2 | tail -1)
    save_s=$(sed -n 's/.*save of step .* took \([0-9.]*\) s.*/\1/p' "$d/sig.err")
    echo "$t0 $t1 $step_ms $save_s $rc" | awk '{ printf "%.2f %.2f %.2f %d\n", $2 - $1, $3 / 1000, $4, $5 }' >>"$d/sig"
done

set -- $(stats <"$d/save"); s1=$1 s1lo=$2 s1hi=$3
set -- $(stats <"$d/save0"); s0=$1 s0lo=$2 s0hi=$3
set -- $(stats <"$d/load"); l1=$1 l1lo=$2 l1hi=$3
set -- $(stats <"$d/load0"); l0=$1 l0lo=$2 l0hi=$3
set -- $(grep . "$d/raww" | stats); w=$1 wlo=$2 whi=$3
set -- $(grep . "$d/rawr" | stats); rd=$1 rdlo=$2 rdhi=$3
echo
echo "gpt2-124m training state (fp32 params + Adam m, v): $(echo "$bytes" | awk '{ printf "%.0f", $1 / 1e6 }') MB, 1 rank, 2 threads;"
echo "MB/s median (min..max) of $REPS rounds; ratio = median / the raw dd median of the same rounds"
printf '| %-34s | %-24s | %s\n' "operation" "MB/s" "ratio"
printf '|------------------------------------|--------------------------|------\n'
row() { printf '| %-34s | %6s (%6s..%6s)     | %s\n' "$1" "$2" "$3" "$4" "$5"; }
row "raw write (dd bs=4M conv=fsync)" "$w" "$wlo" "$whi" "1.00"
row "save, SHA-256 per 4 MiB chunk" "$s1" "$s1lo" "$s1hi" "$(echo "$s1 $w" | awk '{ printf "%.2f", $1 / $2 }')"
row "save, no checksums" "$s0" "$s0lo" "$s0hi" "$(echo "$s0 $w" | awk '{ printf "%.2f", $1 / $2 }')"
row "raw read (dd bs=4M)" "$rd" "$rdlo" "$rdhi" "1.00"
row "load + verify every chunk" "$l1" "$l1lo" "$l1hi" "$(echo "$l1 $rd" | awk '{ printf "%.2f", $1 / $2 }')"
row "load, no verification" "$l0" "$l0lo" "$l0hi" "$(echo "$l0 $rd" | awk '{ printf "%.2f", $1 / $2 }')"
printf '| %-34s | %-24s | %s\n' "SHA-256, one core (openssl speed)" "$sha" "$(echo "$sha $w" | awk '{ printf "%.2f", $1 / $2 }') x raw write"
echo
echo "signal to exit (SIGUSR1 at a random point of a gpt2-124m run, seq_len 256, batch 4, 2 threads)"
printf '| %-5s | %-14s | %-10s | %-10s | %-16s | %s\n' round "signal->exit s" "step s" "save s" "step + save s" "exit status"
printf '|-------|----------------|------------|------------|------------------|------------\n'
n=0
while read -r el st sv rc; do
    n=$((n + 1))
    printf '| %-5s | %14s | %10s | %10s | %16s | %s\n' "$n" "$el" "$st" "$sv" "$(echo "$st $sv" | awk '{ printf "%.2f", $1 + $2 }')" "$rc"
done <"$d/sig"
echo "target: save >= 0.70 x raw write with checksums; signal->exit <= one step + save"
