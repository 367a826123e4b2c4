#!/bin/sh
# mpirun.sh — multi-rank training under OpenMPI's mpirun (a real PMIx server):
# equivalence across 1/2/3/4 ranks, bf16, HSDP, micro-batches, grad_sync,
# reshard_after_forward, the memory contract from the accounting, a frozen
# (SIGSTOP) and a killed (SIGKILL) rank, and a stranger on the transport port.
# Fast tier: tiny at width 128 (but the micro-batch group), 1/2/4 ranks,
# the C tests on 3 ranks, no SIGSTOP; the long tier: tiny as it is, 3 ranks
# too, the C tests on 2 and 4 ranks, the frozen rank.
. "${SR_SRCDIR:-.}/tests/tap.sh"
S=$SHARDRUN
CMP=${SR_BUILDDIR:-.}/tests/cmp_params
need_mpirun
cd "$T" || exit 99
STEPS=20
# the model's width C and positions T (tiny: V 256, 4 blocks); the memory
# checks below derive the unit sizes from them
if long_tier; then C=256; else C=128; fi
TP=256
common="--set train.steps=$STEPS --set train.batch_size=12 --set threads=1 --set log.every=1 --set train.eval_every=0
        --set model.n_embd=$C --set model.seq_len=$TP"
# parameters of a block unit (qkv, proj, fc, fc proj: 12 C^2 + 9 C; two
# LayerNorms: 4 C) and of the root (wte V C, wpe T C, the last LayerNorm 2 C)
blk=$((12 * C * C + 13 * C)) root=$((256 * C + TP * C + 2 * C))


# train NAME RANKS [--set ...]: metrics in NAME.jsonl, params in NAME.params, log in NAME.err
train() {
    name=$1 n=$2
    shift 2
    SHARDRUN_TEST_DUMP_PARAMS="$T/$name.params" timeout 600 $MPI -n "$n" "$S" train $common \
        --set log.metrics="$T/$name.jsonl" "$@" >"$name.out" 2>"$name.err"
}
# ref N: the plain run on N ranks (r$N), trained once, for the groups that
# compare with it
ref() { [ -s "$T/r$1.params" ] || train r$1 $1; }
same_losses() { # A B TOL
    field "$1.jsonl" loss >"$1.l"
    field "$2.jsonl" loss >"$2.l"
    [ "$(wc -l <"$1.l")" -eq "$STEPS" ] && paste "$1.l" "$2.l" |
        awk -v tol="$3" '{ d = $1 - $2; if (d < 0) d = -d; if (d > tol * $2) bad = 1 } END { exit bad }'
}

# 0. every collective and the control plane on 2, 3 and 4 ranks (the C
# tests print TAP on rank 0).  A launch that printed no TAP line at all
# (mpirun, loaded by parallel tests, once started no rank) is run once more,
# with the first attempt's messages as a diagnostic; a test that printed
# anything, or fails twice, fails.
run_tap() { # N BINARY OUT
    timeout 300 $MPI -n "$1" "$2" >"$3.tap" 2>"$3.err"
    tap_rc=$?
    if ! grep -q '^ok\|^not ok' "$3.tap"; then
        diag "$3: no TAP from $1 ranks (status $tap_rc), launching again; it said:" "$(head -5 "$3.err")"
        timeout 300 $MPI -n "$1" "$2" >"$3.tap" 2>"$3.err"
    fi
}
if long_tier; then ranks="2 3 4"; else ranks=3; fi
for n in $ranks; do
    group "collectives and control plane on $n ranks" || continue
    for t in comm ctl; do
        run_tap "$n" "${SR_BUILDDIR:-.}/tests/test_$t" "$t$n"
        total=$(grep -c '^ok\|^not ok' $t$n.tap)
        what=$([ $t = comm ] && echo collectives || echo "control plane")
        min=$([ $t = comm ] && echo 15 || echo 7)
        check "$what on $n ranks: $total checks, none failed" sh -c "[ $total -ge $min ] && ! grep -q '^not ok' $t$n.tap"
        grep '^not ok' $t$n.tap | sed 's/^/# /'
        [ "$total" -ge "$min" ] || diag "$t$n:" "$(head -10 $t$n.err)"
    done
done

# 1. equivalence on 1, 2, 3, 4 ranks (every later group compares with these)
if long_tier; then ranks="1 2 3 4"; else ranks="1 2 4"; fi
if group "equivalence"; then
for n in $ranks; do
    train r$n $n
    check "tiny trains $STEPS steps on $n rank(s) under mpirun" test $? -eq 0
done
check "the start line of every rank names rank, local rank, node, host, device, job" \
    sh -c "[ \$(grep -c 'rank [0-3]/4 local [0-3]/4 node 0 host .* device=cpu.* job ' r4.err) -eq 4 ]"
check "progress lines come from rank 0 only" sh -c "! grep -q 'rank [123}]\]: step ' r4.err"
for n in $ranks; do
    [ $n = 1 ] && continue
    check "losses on $n ranks equal 1 rank (relative 1e-5)" same_losses r$n r1 1e-5
    check "final parameters on $n ranks equal 1 rank (per tensor 1e-5 x max)" "$CMP" r$n.params r1.params 1e-5
    diag "$("$CMP" r$n.params r1.params 1e-5)"
done
check "the loss falls on 4 ranks" awk -v a="$(field r4.jsonl loss | head -1)" -v b="$(last r4.jsonl loss)" 'BEGIN { exit !(b < 0.85 * a) }'

fi

# 2. the memory contract from the accounting (tiny: 4 block units, root)
if group "memory contract"; then
for n in 1 2 4; do
    ref $n
    P_blk=$(((blk + n - 1) / n)) P_root=$(((root + n - 1) / n))
    shard=$(((4 * P_blk + P_root) * 4))
    got=$(last r$n.jsonl mem_param_shard)
    check "param shard on $n rank(s) is total/$n + padding ($got = $shard bytes)" test "$got" -eq "$shard"
    # (optim_shard: Adam's m and v, and AdamW's segment list: a 32-byte
    # entry per tensor and per slice, optim.h sr_optim_table_bytes; tiny
    # GPT-2: 12 tensors a block and 4 in the root, 5 units)
    segs=$(((12 * 4 + 4 + 5) * 32))
    check "grad and Adam shards follow ($n ranks)" test "$(last r$n.jsonl mem_grad_shard)" -eq "$shard" -a "$(last r$n.jsonl mem_optim_shard)" -eq $((2 * shard + segs))
    bound=$(((n * P_root + 2 * n * P_blk) * 4))
    peak=$(last r$n.jsonl mem_full_units_peak)
    check "peak full parameters ($peak) = kept root + (1 + prefetch) x block unit ($bound) exactly: the pools, $n ranks" \
        test "$peak" -eq "$bound"
done

fi

# 3. bf16 parameters: trains, within 2 % of fp32, not bitwise fp32, half the full-unit bytes
if group "bf16"; then
ref 4
train bf16 4 --set sharding.mixed_precision.param_dtype=bf16
check "bf16 param_dtype trains on 4 ranks" test $? -eq 0
check "bf16: the loss falls" awk -v a="$(field bf16.jsonl loss | head -1)" -v b="$(last bf16.jsonl loss)" 'BEGIN { exit !(b < 0.85 * a) }'
check "bf16: the last loss is within 2 % of fp32" awk -v a="$(last bf16.jsonl loss)" -v b="$(last r4.jsonl loss)" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 0.02 * b) }'
check "bf16: losses are not bitwise fp32's" sh -c "! cmp -s bf16.l r4.l 2>/dev/null; field() { sed -n \"s/.*\\\"loss\\\":\\([^,}]*\\).*/\\1/p\" \"\$1\"; }; ! [ \"\$(field bf16.jsonl)\" = \"\$(field r4.jsonl)\" ]"
check "bf16: full-unit bytes are half of fp32's" test $(($(last bf16.jsonl mem_full_units_peak) * 2)) -eq "$(last r4.jsonl mem_full_units_peak)"

fi

# 4. HSDP 2 x 2 equals FSDP 4, and holds total/2 per rank
if group "HSDP 2x2"; then
ref 4
ref 2
train hsdp 4 --set sharding.mesh.replicate=2
check "HSDP 2x2 trains" test $? -eq 0
check "HSDP 2x2 losses equal FSDP 4" same_losses hsdp r4 1e-5
check "HSDP 2x2 final parameters equal FSDP 4" "$CMP" hsdp.params r4.params 1e-5
check "HSDP 2x2 holds total/2 per rank (as FSDP on 2 ranks)" test "$(last hsdp.jsonl mem_param_shard)" -eq "$(last r2.jsonl mem_param_shard)"

fi

# 5. micro-batches of 1 equal one micro-batch of 4 (batch 8 on 2 ranks), and
# both grad_sync policies (tiny at full width in both tiers, 10 steps in the
# fast one: at width 128 the sums' other order shows above 1e-5 in a tensor
# or two after 20 steps)
long_tier || STEPS=10
common="--set train.steps=$STEPS --set train.batch_size=8 --set threads=1 --set log.every=1 --set train.eval_every=0"
if group "micro-batches and grad_sync"; then
train mb4 2 --set train.micro_batch=4
train mb1 2 --set train.micro_batch=1
check "micro-batches of 1 (4 accumulation steps) equal one micro-batch of 4: losses" same_losses mb1 mb4 1e-5
check "  ...and final parameters" "$CMP" mb1.params mb4.params 1e-5
train pmb 2 --set train.micro_batch=1 --set sharding.grad_sync=per_micro_batch
check "grad_sync per_micro_batch equals per_step: losses" same_losses pmb mb1 1e-5
check "  ...and final parameters" "$CMP" pmb.params mb1.params 1e-5
check "per_micro_batch has no accumulation buffer" test "$(last pmb.jsonl mem_grad_accum_peak)" -eq 0 -a "$(last mb1.jsonl mem_grad_accum_peak)" -gt 0

fi

# 6. reshard_after_forward false keeps every block unit gathered; N keeps a 1/N share
common="--set train.steps=3 --set train.batch_size=8 --set threads=1 --set log.every=1 --set train.eval_every=0
        --set model.n_embd=$C --set model.seq_len=$TP"
STEPS=3
if group "reshard_after_forward"; then
train keep 2 --set sharding.reshard_after_forward.blocks=false
train rtrue 2
train rN 2 --set sharding.reshard_after_forward.blocks=2
# (2 ranks: a block unit is blk x 4 bytes gathered, the root root x 4)
B=$((blk * 4)) R=$((root * 4))
check "reshard_after_forward false keeps the block units gathered (full units = root + all four blocks, no pool)" \
    test "$(last keep.jsonl mem_full_units_peak)" -eq $((R + 4 * B))
check "reshard_after_forward true frees them (full units = root + (1 + prefetch) pool slots of a block)" \
    test "$(last rtrue.jsonl mem_full_units_peak)" -eq $((R + 2 * B))
check "reshard_after_forward 2 trains and matches true" same_losses rN rtrue 1e-6
check "  ...keeping a 1/2 share of each block on top of the pool: root + 4 x B/2 + 2 x B" \
    test "$(last rN.jsonl mem_full_units_peak)" -eq $((R + 4 * B / 2 + 2 * B))

fi

# 7. a frozen rank (SIGSTOP): the others exit 69 within comm.timeout_s + 10 s
WRAP="sh $SR_SRCDIR/tests/rank_wrap.sh"
fault() { # SIGNAL
    rm -rf w && mkdir w
    WRAPDIR=$T/w timeout 120 $MPI --enable-recovery -n 3 -x WRAPDIR=$T/w $WRAP "$S" train --set train.steps=500 \
        --set threads=1 --set train.batch_size=12 --set comm.timeout_s=5 >w/mpirun.out 2>&1 &
    mpid=$!
    i=0
    while [ $i -lt 60 ] && ! grep -q 'step .*/500' w/err.0 2>/dev/null; do sleep 1; i=$((i + 1)); done
    victim=$(cat w/pid.1)
    kill -"$1" "$victim"
    t0=$(date +%s)
    i=0
    while [ $i -lt 40 ] && ! { [ -s w/status.0 ] && [ -s w/status.2 ]; }; do sleep 1; i=$((i + 1)); done
    elapsed=$(($(date +%s) - t0))
    kill -CONT "$victim" 2>/dev/null
    kill -KILL "$victim" 2>/dev/null
    wait $mpid 2>/dev/null
}
if group --long "SIGSTOP on rank 1"; then
fault STOP
check "SIGSTOP on rank 1: rank 0 exits 69" test "$(cat w/status.0 2>/dev/null)" = 69
check "SIGSTOP on rank 1: rank 2 exits 69" test "$(cat w/status.2 2>/dev/null)" = 69
check "  ...within comm.timeout_s + 10 s ($elapsed s)" test "$elapsed" -le 15
check "  ...a rank names the silent rank 1, the other rank 1 or the reporter" \
    sh -c "cat w/err.0 w/err.2 | grep -q 'rank 1 sent nothing for comm.timeout_s' && grep -Eq 'error: .*rank [12]' w/err.0 && grep -Eq 'error: .*rank [01]' w/err.2"
fi
if group "SIGKILL on rank 1"; then
fault KILL
check "SIGKILL on rank 1: rank 0 exits 69" test "$(cat w/status.0 2>/dev/null)" = 69
check "SIGKILL on rank 1: rank 2 exits 69" test "$(cat w/status.2 2>/dev/null)" = 69
# (each finds the closed connection itself, or hears it first from the
# other's abort notice: comm_tcp.h)
lost="lost the connection to rank 1\|gave up on rank 1 (its connection was lost"
check "  ...naming the lost rank" sh -c "grep -q '$lost' w/err.0 && grep -q '$lost' w/err.2" ||
    diag "$(cat w/err.0 w/err.2 | grep error)"

fi

# 8. a stranger with a wrong secret is rejected; training goes on
if group "a stranger on the transport port"; then
rm -rf w && mkdir w
WRAPDIR=$T/w timeout 120 $MPI -n 2 -x WRAPDIR=$T/w $WRAP "$S" train --set train.steps=25 --set threads=1 \
    --set train.batch_size=12 --set model.n_embd=$C >w/mpirun.out 2>&1 &
mpid=$!
i=0
while [ $i -lt 60 ] && ! grep -q 'step .*/25' w/err.0 2>/dev/null; do sleep 1; i=$((i + 1)); done
port=$(sed -n 's/.*transport 127\.0\.0\.1:\([0-9]*\).*/\1/p' w/err.0 | head -1)
# correct magic ("SRH1" little-endian) and rank 1, but a MAC made without the secret
bash -c "exec 3<>/dev/tcp/127.0.0.1/$port && head -c 32 <&3 >/dev/null && printf '1HRS\001\000\000\000%032d' 0 >&3 && sleep 1" 2>/dev/null
wait $mpid
check "a stranger with a wrong secret is rejected and logged" grep -q 'rejected a transport connection from 127.0.0.1:[0-9]*: wrong job secret' w/err.0
check "  ...and training finishes on both ranks" sh -c "[ \$(cat w/status.0) = 0 ] && [ \$(cat w/status.1) = 0 ] && grep -q 'done: 25 steps' w/err.0"

fi

# 9. sharding keys that do not fit the world
if group "sharding keys that do not fit the world"; then
expect_status 78 "mesh shard x replicate != ranks is a config error" timeout 120 $MPI -n 2 "$S" train --set sharding.mesh.shard=3
check "  ...naming the numbers" grep -q "shard 3 x replicate 1 must equal the 2 ranks" "$T/err"
expect_status 78 "reshard_after_forward N that does not divide the shard group" timeout 120 $MPI -n 2 "$S" train --set sharding.reshard_after_forward.blocks=3
fi
done_testing
