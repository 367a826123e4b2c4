#!/bin/sh
# run_ckpt.sh — the checkpoint benchmark (make bench-ckpt), all in one run on
# one file system (the current directory, or BENCH_DIR):
#  1. save and load MB/s of the full gpt2-124m training state (fp32 master
#     weights + Adam m and v, 1 rank), with SHA-256 per 4 MiB chunk and
#     without (SHARDRUN_BENCH_NO_SHA256=1), interleaved with the file
#     system's raw sequential write and read of the same number of bytes
#     (bench/bench_disk: fresh pseudo-random data in 4 MiB writes + fsync,
#     like dd bs=4M conv=fsync but with data a virtual disk cannot compress
#     or deduplicate: dd from /dev/zero measured 2-3x faster than any real
#     data on the development VM), so every ratio compares neighbours in
#     time; the ratio column is the median of the per-round ratios;
#  2. SHA-256 MB/s of one core (openssl speed, 4 MiB blocks), for scale;
# Before every measured save and raw write, bench_disk --touch writes to
# half the free memory (VMs that return freed pages to the host make first
# touches slow at random; see bench/bench_disk.c).
#  3. signal-to-exit: SIGUSR1 at a random point of a gpt2-124m run, the time
#     until the process has exited (75) against one step + the save.
#  4. the training stall per periodic checkpoint, asynchronous vs
#     synchronous vs no checkpoints, interleaved in each round: gpt2-124m
#     (seq_len 64, batch 2, 2 threads), 41 steps with a save every 20;
#     from the metrics' per-step wall times: the gap after a save step less
#     the run's median gap (the stall), and tokens/s over steps 21..41 (the
#     saves of steps 20 and 40 inside) against the run without checkpoints.  The ceiling for
#     the asynchronous stall is the machine's own single-threaded memcpy of
#     the snapshot bytes (bench_disk --memcpy), measured in the same round.
#     Targets: stall <= 1.5 x that memcpy, tokens/s >= 0.95 x none.
# Reads come from the page cache for the raw read and shardrun alike (the
# files were just written).  Median (min..max) of REPS rounds.
# With a baseline build (bench/baseline.sh: BASELINE=DIR|FILE|REV, default
# the previous commit; BASELINE=none to skip), each round also saves and
# loads with the baseline's shardrun (checksums on), each followed by its
# own raw measurement, and the table shows both ratios.
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
# median of per-round ratios: FILE_A FILE_B (one number per line each)
ratio() { paste "$1" "$2" | awk '$1 > 0 && $2 > 0 { print $1 / $2 }' | sort -g | awk '{ a[NR] = $1 } END { m = (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2; printf "%.2f (%.2f..%.2f)", m, a[1], a[NR] }'; }
D=${BENCH_DISK:-./bench/bench_disk}
BASE=""
[ "${BASELINE:-}" = none ] || BASE=$(SR_SRCDIR="$(dirname "$0")/.." sh "$(dirname "$0")/baseline.sh")
[ -n "$BASE" ] && echo "# baseline: $BASE" >&2
# memory touched before every measured operation (see bench/bench_disk.c):
# half of the free memory, at most 12 GB
TOUCH=${BENCH_TOUCH:-$(awk '/^MemAvailable:/ { t = $2 * 1024 / 2; if (t > 12e9) t = 12e9; printf "%.0f", t }' /proc/meminfo)}

: >"$d/save" && : >"$d/save0" && : >"$d/load" && : >"$d/load0"
: >"$d/raww1" && : >"$d/raww2" && : >"$d/rawr1" && : >"$d/rawr2"
: >"$d/saveb" && : >"$d/loadb" && : >"$d/rawwb" && : >"$d/rawrb"
bytes=0
# BENCH_CKPT_ONLY=stall: section 4 alone
IO_REPS=$REPS
[ "${BENCH_CKPT_ONLY:-}" = stall ] && IO_REPS=0
for r in $(seq "$IO_REPS"); do
    echo "# round $r/$REPS" >&2
    for mode in sha nosha; do
        rm -rf "$d/ck"
        env_="" suffix="" k=1
        [ $mode = nosha ] && env_="SHARDRUN_BENCH_NO_SHA256=1" suffix=0 k=2
        "$D" --touch "$TOUCH"
        env $env_ "$S" train $job 2>"$d/s.err" || { tail -3 "$d/s.err"; exit 1; }
        sed -n 's/.*step 1 saved: .* (\([0-9]*\) MB\/s.*/\1/p' "$d/s.err" >>"$d/save$suffix"
        bytes=$(sed -n 's/.*step 1 saved: \([0-9.]*\) MB in.*/\1/p' "$d/s.err" | awk '{ printf "%.0f", $1 * 1e6 }')
        # the raw ceiling right after the save, then the load right after that
        "$D" --touch "$TOUCH"
        "$D" "$d/raw" "$bytes" "$r$k$$" >"$d/disk.txt" || exit 1
        sed -n 's/.*write_MBps=\([0-9]*\).*/\1/p' "$d/disk.txt" >>"$d/raww$k"
        sed -n 's/.*read_MBps=\([0-9]*\).*/\1/p' "$d/disk.txt" >>"$d/rawr$k"
        rm -f "$d/raw"
        env $env_ "$S" train $job 2>"$d/l.err" || { tail -3 "$d/l.err"; exit 1; }
        sed -n 's/.*read and verified in .* (\([0-9]*\) MB\/s).*/\1/p' "$d/l.err" >>"$d/load$suffix"
    done
    [ -n "$BASE" ] || continue
    rm -rf "$d/ck"
    "$D" --touch "$TOUCH"
    "$BASE/shardrun" train $job 2>"$d/s.err" || { tail -3 "$d/s.err"; exit 1; }
    sed -n 's/.*step 1 saved: .* (\([0-9]*\) MB\/s.*/\1/p' "$d/s.err" >>"$d/saveb"
    "$D" --touch "$TOUCH"
    "$D" "$d/raw" "$bytes" "${r}3$$" >"$d/disk.txt" || exit 1
    sed -n 's/.*write_MBps=\([0-9]*\).*/\1/p' "$d/disk.txt" >>"$d/rawwb"
    sed -n 's/.*read_MBps=\([0-9]*\).*/\1/p' "$d/disk.txt" >>"$d/rawrb"
    rm -f "$d/raw"
    "$BASE/shardrun" train $job 2>"$d/l.err" || { tail -3 "$d/l.err"; exit 1; }
    sed -n 's/.*read and verified in .* (\([0-9]*\) MB\/s).*/\1/p' "$d/l.err" >>"$d/loadb"
done
rm -rf "$d/ck"
sha=$(openssl speed -seconds 2 -bytes 4194304 -evp sha256 2>/dev/null | awk '/^sha256/ { v = $NF; sub(/k$/, "", v); printf "%.0f", v * 1000 / 1e6 }')

echo "# signal to exit" >&2
: >"$d/sig"
sigjob="--set model.preset=gpt2-124m --set model.seq_len=256 --set train.batch_size=4 --set train.steps=1000 \
--set train.eval_every=0 --set log.every=1 --set threads=2 --set data.train=$d/data.bin"
for r in $(seq "$IO_REPS"); do
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
    step_ms=$(sed -n 's/.*step  *[0-9]*\/1000 |.*| \([0-9.]*\) ms | loss_mean .*/\1/p' "$d/sig.err" | head -2 | tail -1)
    save_s=$(sed -n 's/.*save of step .* took \([0-9.]*\) s.*/\1/p' "$d/sig.err")
    echo "$t0 $t1 $step_ms $save_s $rc" | awk '{ printf "%.2f %.2f %.2f %d\n", $2 - $1, $3 / 1000, $4, $5 }' >>"$d/sig"
done

echo "# stall per periodic checkpoint" >&2
stalljob="--set model.preset=gpt2-124m --set model.seq_len=64 --set train.batch_size=2 --set train.steps=41 \
--set train.eval_every=0 --set log.every=1 --set threads=2 --set data.train=$d/data.bin --set checkpoint.every_steps=20"
: >"$d/stall_async" && : >"$d/stall_sync" && : >"$d/tps_async" && : >"$d/tps_sync" && : >"$d/memcpy"
: >"$d/snap_async"
# gaps FILE: "median_gap stall tokens_per_s" from a metrics file (steps 20 and 40 saved)
gaps() {
    awk -F'"time":' '{ split($2, a, /[,}]/); t[NR] = a[1] } END {
        n = 0; for (i = 2; i <= NR; i++) g[++n] = t[i] - t[i - 1]
        for (i = 1; i <= n; i++) s[i] = g[i]
        for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (s[j] < s[i]) { x = s[i]; s[i] = s[j]; s[j] = x }
        med = s[int((n + 1) / 2)]
        # g[k] is the gap between step k and k+1
        stall = ((g[20] - med) + (g[40] - med)) / 2
        printf "%.4f %.4f %.1f\n", med, stall, 21 * 2 * 64 / (t[41] - t[20]) }' "$1"
}
for r in $(seq "$REPS"); do
    for mode in none sync async; do
        rm -rf "$d/stk"
        case $mode in
        none) set -- ;;
        sync) set -- --set checkpoint.dir="$d/stk" --set checkpoint.async=false ;;
        async) set -- --set checkpoint.dir="$d/stk" --set checkpoint.async=true ;;
        esac
        "$D" --touch "$TOUCH"
        "$S" train $stalljob --set log.metrics="$d/st_$mode.jsonl" "$@" 2>"$d/st.err" || { tail -3 "$d/st.err"; exit 1; }
        [ $mode = async ] && sed -n 's/.*training stalled \([0-9.]*\) s for the snapshot.*/\1/p' "$d/st.err" | head -1 >>"$d/snap_async"
        [ $mode = async ] && snapbytes=$(awk '/mem_ckpt_staging/ { sub(/.*"mem_ckpt_staging":/, ""); sub(/,.*/, ""); print; exit }' "$d/st_$mode.jsonl")
    done
    set -- $(gaps "$d/st_none.jsonl"); tps0=$3
    set -- $(gaps "$d/st_sync.jsonl"); echo "$2" >>"$d/stall_sync"; echo "$3 $tps0" | awk '{ print $1 / $2 }' >>"$d/tps_sync"
    set -- $(gaps "$d/st_async.jsonl"); echo "$2" >>"$d/stall_async"; echo "$3 $tps0" | awk '{ print $1 / $2 }' >>"$d/tps_async"
    "$D" --memcpy "$snapbytes" | sed -n 's/memcpy_s=//p' >>"$d/memcpy"
done

if [ "$IO_REPS" -gt 0 ]; then
set -- $(stats <"$d/save"); s1=$1 s1lo=$2 s1hi=$3
set -- $(stats <"$d/save0"); s0=$1 s0lo=$2 s0hi=$3
set -- $(stats <"$d/load"); l1=$1 l1lo=$2 l1hi=$3
set -- $(stats <"$d/load0"); l0=$1 l0lo=$2 l0hi=$3
cat "$d/raww1" "$d/raww2" >"$d/raww"
cat "$d/rawr1" "$d/rawr2" >"$d/rawr"
set -- $(stats <"$d/raww"); w=$1 wlo=$2 whi=$3
set -- $(stats <"$d/rawr"); rd=$1 rdlo=$2 rdhi=$3
echo
echo "gpt2-124m training state (fp32 params + Adam m, v): $(echo "$bytes" | awk '{ printf "%.0f", $1 / 1e6 }') MB, 1 rank, 2 threads;"
echo "MB/s median (min..max) of $REPS rounds; ratio = median (min..max) over rounds of MB/s / the raw MB/s"
echo "measured right after it in the same round"
printf '| %-34s | %-24s | %s\n' "operation" "MB/s" "ratio"
printf '|------------------------------------|--------------------------|------------------\n'
row() { printf '| %-34s | %6s (%6s..%6s)     | %s\n' "$1" "$2" "$3" "$4" "$5"; }
row "raw write (4 MiB writes + fsync)" "$w" "$wlo" "$whi" "1.00"
row "save, SHA-256 per 4 MiB chunk" "$s1" "$s1lo" "$s1hi" "$(ratio "$d/save" "$d/raww1")"
row "save, no checksums" "$s0" "$s0lo" "$s0hi" "$(ratio "$d/save0" "$d/raww2")"
row "raw read (4 MiB preads, cached)" "$rd" "$rdlo" "$rdhi" "1.00"
row "load + verify every chunk" "$l1" "$l1lo" "$l1hi" "$(ratio "$d/load" "$d/rawr1")"
row "load, no verification" "$l0" "$l0lo" "$l0hi" "$(ratio "$d/load0" "$d/rawr2")"
if [ -n "$BASE" ]; then
    set -- $(stats <"$d/saveb"); row "baseline: save, SHA-256" "$1" "$2" "$3" "$(ratio "$d/saveb" "$d/rawwb")"
    set -- $(stats <"$d/loadb"); row "baseline: load + verify" "$1" "$2" "$3" "$(ratio "$d/loadb" "$d/rawrb")"
fi
printf '| %-34s | %-24s | %s\n' "SHA-256, one core (openssl speed)" "$sha" "$(echo "$sha $w" | awk '{ printf "%.2f", $1 / $2 }') x raw write median"
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
fi
echo
# median (min..max) with 3 decimals
fstats() { sort -g | awk '{ a[NR] = $1 } END { m = (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2; printf "%.3f (%.3f..%.3f)", m, a[1], a[NR] }'; }
echo "training stall per periodic checkpoint: gpt2-124m, seq_len 64, batch 2, 2 threads, a save every 20 of 41 steps;"
echo "snapshot $(echo "$snapbytes" | awk '{ printf "%.0f", $1 / 1e6 }') MB (params + Adam m, v); median (min..max) of $REPS rounds"
printf '| %-40s | %-28s\n' "measure" "value"
printf '|------------------------------------------|------------------------------\n'
printf '| %-40s | %s s\n' "memcpy of the snapshot bytes (1 thread)" "$(fstats <"$d/memcpy")"
printf '| %-40s | %s s\n' "sync: stall per save" "$(fstats <"$d/stall_sync")"
printf '| %-40s | %s s\n' "async: stall per save (step gaps)" "$(fstats <"$d/stall_async")"
printf '| %-40s | %s s\n' "async: snapshot stall (its log line)" "$(fstats <"$d/snap_async")"
paste "$d/stall_async" "$d/memcpy" | awk '{ print $1 / $2 }' >"$d/stall_ratio"
printf '| %-40s | %s\n' "async stall / memcpy (target <= 1.5)" "$(fstats <"$d/stall_ratio")"
printf '| %-40s | %s\n' "sync: tokens/s / no checkpoints" "$(fstats <"$d/tps_sync")"
printf '| %-40s | %s\n' "async: tokens/s / no checkpoints (>= 0.95)" "$(fstats <"$d/tps_async")"
