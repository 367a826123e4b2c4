#!/bin/sh
# isa.sh — the portable build: the default binary uses no AVX register
# (ymm, zmm) outside the ISA clones (functions named *_v2, *_v3, *_v4 and
# their OpenMP parts), and the clones exist; the level in effect is on the
# start line, results do not depend on it (a run capped at x86-64-v2 is
# bitwise equal to one at the detected level); the ranks of a job agree on
# the lowest level any of them supports and the checkpoint records it.
. "${SR_SRCDIR:-.}/tests/tap.sh"
S=$SHARDRUN
cd "$T" || exit 99
native=no
grep -q '^#define SR_ISA_NATIVE 1' "${SR_BUILDDIR:-.}/srconfig.h" 2>/dev/null && native=yes

if [ "$(uname -m)" != x86_64 ] || [ $native = yes ] || ! command -v objdump >/dev/null 2>&1; then
    skip "objdump check: not an x86-64 default build with objdump (machine $(uname -m), native $native)"
    skip "objdump check (see above)"
elif ldd "$S" 2>/dev/null | grep -q libasan; then
    skip "objdump check: a sanitizer build (-O1 does not vectorize, so no clone uses ymm either)"
    skip "objdump check (sanitizer build)"
else
    objdump -d --no-show-raw-insn "$S" | awk '/^[0-9a-f]+ <.*>:$/ { fn = $2 } /%[yz]mm/ { c[fn]++ } END { for (f in c) print f, c[f] }' >avx.txt
    outside=$(grep -Ev '_v[234](\._omp_fn\.[0-9]+)?>' avx.txt | tr '\n' ' ')
    check "no function of the default binary uses ymm/zmm outside the ISA clones${outside:+; found: $outside}" test -z "$outside"
    check "  ...and the x86-64-v3 and v4 clones do ($(grep -c _v3 avx.txt) and $(grep -c _v4 avx.txt) functions)" \
        sh -c "[ $(grep -c '_v3' avx.txt) -ge 10 ] && [ $(grep -c '_v4' avx.txt) -ge 10 ]"
fi
check "configure --help offers --enable-native" grep -q -- "--enable-native" "$SR_SRCDIR/configure"

job="--set train.steps=6 --set model.n_layer=2 --set threads=2 --set log.every=1"
"$S" train $job --set log.metrics=auto.jsonl 2>auto.err
level=$(sed -n 's/.* isa=\([^ ]*\) .*/\1/p' auto.err)
check "the start line shows the ISA level in effect (isa=$level)" test -n "$level"
SHARDRUN_TEST_ISA=x86-64-v2 "$S" train $job --set log.metrics=v2.jsonl 2>v2.err
check "SHARDRUN_TEST_ISA=x86-64-v2 caps the level (start line)" grep -q "isa=$( [ $native = yes ] && echo native || echo x86-64-v2) " v2.err
sed -n 's/.*"loss":\([^,]*\),"lr":[^,]*,"grad_norm":\([^,]*\),.*/\1 \2/p' auto.jsonl >auto.l
sed -n 's/.*"loss":\([^,]*\),"lr":[^,]*,"grad_norm":\([^,]*\),.*/\1 \2/p' v2.jsonl >v2.l
check "losses and gradient norms at x86-64-v2 equal those at $level, bitwise" sh -c "[ -s auto.l ] && cmp -s auto.l v2.l"

if ! have_mpirun; then
    skip_mpirun "the agreement between ranks"
    done_testing
    exit 0
fi
# rank 1 alone is capped at x86-64-v2; both ranks must use it
cat >capped.sh <<EOS
[ "\$OMPI_COMM_WORLD_RANK" = 1 ] && export SHARDRUN_TEST_ISA=x86-64-v2
exec "$S" "\$@"
EOS
$MPI -n 2 sh capped.sh train $job --set threads=1 --set checkpoint.dir=ck 2>mpi.err
rc=$?
want=x86-64-v2
[ $native = yes ] && want=native
check "2 ranks, rank 1 capped at x86-64-v2: both start lines show isa=$want (status $rc)" \
    sh -c "[ $rc -eq 0 ] && [ \$(grep -c 'rank [01]/2 .* isa=$want ' mpi.err) -eq 2 ]"
check "  ...and the checkpoint records it" grep -q "isa: $want" ck/step_00000006/manifest.yaml
done_testing
