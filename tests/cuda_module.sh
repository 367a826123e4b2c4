#!/bin/sh
# cuda_module.sh — the CUDA back end as a loadable module (src/cudamod.h):
# the program links no CUDA or NCCL library and a CPU run maps none; with
# the CUDA libraries hidden (a private mount namespace over their
# directories) a CUDA build trains the default job on the CPU, device: cuda
# is 78 naming the module and the missing library, and device: auto after
# a detection that saw a GPU falls back to the CPU with one warning line;
# the lookup order (SHARDRUN_CUDA_MODULE, the build tree, $(pkglibdir));
# a missing, foreign or mismatched module is 78 naming the file and the
# reason, and changes nothing on disk.  The peak RSS against a
# --with-cuda=no build is measured by bench/run_module.sh (make
# bench-module), not here.
. "${SR_SRCDIR:-.}/tests/tap.sh"
S=$SHARDRUN
B=${SR_BUILDDIR:-.}
M=$B/shardrun-cuda.so
grep -q '^#define SR_HAVE_CUDA 1' "$B/srconfig.h" 2>/dev/null ||
    require_or_skip cuda "this build has no CUDA back end (configure found no nvcc or CUDA runtime): no module"
cd "$T" || exit 99
tiny="--set model.n_layer=2 --set model.n_embd=64 --set model.n_head=4 --set model.seq_len=32 --set train.batch_size=2 \
--set train.steps=2 --set train.eval_every=0 --set threads=2 --set checkpoint.dir=$T/ck"
# libs FILE: the CUDA and NCCL libraries FILE needs (readelf's NEEDED)
libs() { readelf -d "$1" 2>/dev/null | sed -n 's/.*Shared library: \[\(.*\)\]/\1/p' | grep -E '^lib(cuda|cudart|cublas|cublasLt|nccl)\.so' | tr '\n' ' '; }

# --- the program and the module ------------------------------------------
check "the module is built beside the program ($M)" test -f "$M"
need=$(libs "$S")
check "the program needs no CUDA or NCCL library (readelf NEEDED: ${need:-none})" test -z "$need"
if emulator_tree; then
    check "the emulator tree's module needs no CUDA library either (the emulator is linked in: $(libs "$M"))" \
        test -z "$(libs "$M")"
else
    check "the module needs the CUDA runtime and cuBLASLt ($(libs "$M"))" sh -c "
        readelf -d '$M' | grep -q 'libcudart.so' && readelf -d '$M' | grep -q 'libcublasLt.so'"
fi
check "the module exports sr_cuda_module and nothing else of its own" sh -c "
    [ \"\$(nm -D --defined-only '$M' | awk '\$2 != \"A\" { print \$3 }')\" = sr_cuda_module ]"

# a CPU run maps no CUDA library: the dynamic loader's own record of every
# object it loads, dlopen included (LD_DEBUG=files)
LD_DEBUG=files LD_DEBUG_OUTPUT=$T/ld "$S" train $tiny >cpu.out 2>cpu.err
rc=$?
check "device: auto on a machine with no GPU trains on the CPU (status $rc)" sh -c "[ $rc -eq 0 ] && grep -q 'device=cpu' cpu.err"
mapped=$(cat "$T"/ld.* 2>/dev/null | grep -oE 'file=[^ ]*(shardrun-cuda|libcuda|libcudart|libcublas|libnccl)[^ ]*' | sort -u | tr '\n' ' ')
check "  ...and maps neither the module nor any CUDA or NCCL library (LD_DEBUG: ${mapped:-none})" \
    sh -c "ls '$T'/ld.* >/dev/null 2>&1 && [ -z '$mapped' ]"
rm -f "$T"/ld.*

# --- the lookup order and a bad module ------------------------------------
rm -rf "$T/ck"
SHARDRUN_CUDA_MODULE=$T/nothing-here.so "$S" train $tiny --set device=cuda >missing.out 2>missing.err
rc=$?
check "SHARDRUN_CUDA_MODULE naming a missing file: 78 naming it, the reason and a hint (status $rc)" sh -c "
    [ $rc -eq 78 ] && grep -q 'nothing-here.so' missing.err && grep -q 'No such file' missing.err &&
    grep -q 'hint:' missing.err && [ ! -e '$T/ck' ]"
cp "$M" mine.so
abi=$(sed -n 's/.*SR_ABI_HASH "\(.*\)"/\1/p' "$B/sr_abi.h")
perl -pi -e "s/$abi/0123456789abcdef/g" mine.so
SHARDRUN_CUDA_MODULE=$T/mine.so "$S" train $tiny --set device=cuda >abi.out 2>abi.err
rc=$?
check "a module of other headers (its ABI hash changed): 78 naming the file and both hashes (status $rc)" sh -c "
    [ $rc -eq 78 ] && grep -q 'mine.so does not match this shardrun' abi.err && grep -q '0123456789abcdef' abi.err &&
    grep -q '$abi' abi.err && [ ! -e '$T/ck' ]"
foreign=$(ldd "$S" | awk '/libyaml/ { print $3 }')
SHARDRUN_CUDA_MODULE=$foreign "$S" train $tiny --set device=cuda >foreign.out 2>foreign.err
rc=$?
check "a shared object that is no module ($foreign): 78 saying so (status $rc)" sh -c "
    [ $rc -eq 78 ] && grep -q 'exports no sr_cuda_module' foreign.err"
printf 'not an ELF file\n' >junk.so
SHARDRUN_CUDA_MODULE=$T/junk.so "$S" train $tiny --set device=cuda >junk.out 2>junk.err
rc=$?
check "a file that does not load: 78 with the loader's reason (status $rc)" sh -c "
    [ $rc -eq 78 ] && grep -q 'junk.so cannot be loaded: .*junk.so' junk.err"
# device: cuda from the build tree loads the build tree's module (then the
# GPU decides: the emulated one, or none on this machine)
"$S" train $tiny --set device=cuda >tree.out 2>tree.err
# (a run on a GPU logs "CUDA back end: PATH"; one without, the path in its 78)
check "the build tree's program loads the build tree's module" grep -q "CUDA back end: $B/shardrun-cuda.so" tree.err
cp "$M" copy.so
SHARDRUN_CUDA_MODULE=$T/copy.so "$S" train $tiny --set device=cuda >env.out 2>env.err
check "  ...and SHARDRUN_CUDA_MODULE comes first" grep -q "CUDA back end: $T/copy.so" env.err
mkdir -p bin && cp "$S" bin/shardrun
bin/shardrun train $tiny --set device=cuda >inst.out 2>inst.err
check "  ...and a program outside the build tree never looks there (\$(pkglibdir))" sh -c "
    ! grep -q '$B/shardrun-cuda.so' inst.err && grep -Eq '/lib(64)?/shardrun/shardrun-cuda.so' inst.err"

# --- the CUDA libraries hidden: a private mount namespace -----------------
if emulator_tree; then
    skip "CUDA libraries hidden: an emulator tree's module links no CUDA library to hide"
elif [ "$(id -u)" -ne 0 ] || ! unshare -m true 2>/dev/null; then
    skip_or_fail mount "CUDA libraries hidden: a private mount namespace needs root and unshare -m"
else
    # every directory a CUDA or NCCL library of the module resolves into
    dirs=$(ldd "$M" | awk '/lib(cudart|cublasLt|cublas|nccl)\.so/ && $3 ~ /^\// { print $3 }' |
        while read -r f; do dirname "$(readlink -f "$f")"; dirname "$f"; done | sort -u | tr '\n' ' ')
    hide=""
    for d in $dirs; do hide="$hide mount -t tmpfs -o size=1m tmpfs '$d' &&"; done
    cat >hidden.sh <<EOF
$hide true || exit 97
ldd '$M' | grep -q 'libcudart.so.* => not found' || exit 98
'$S' train --set train.steps=1 --set checkpoint.dir='$T/hck' >def.out 2>def.err; echo \$? >def.rc
'$S' train $tiny --set device=cuda >cuda.out 2>cuda.err; echo \$? >cuda.rc
SHARDRUN_TEST_GPU_DETECT=1 '$S' train $tiny --set checkpoint.dir='$T/ack' >auto.out 2>auto.err; echo \$? >auto.rc
'$S' plan '$SR_SRCDIR/etc/shardrun.yaml' --gpus-per-node 1 >plan.out 2>plan.err; echo \$? >plan.rc
EOF
    unshare -m sh hidden.sh
    hrc=$?
    check "the CUDA libraries hide in a private mount namespace (tmpfs over $dirs; status $hrc)" test "$hrc" -eq 0
    check "  ...and the CUDA build trains the default job on the CPU there (status $(cat def.rc 2>/dev/null))" sh -c "
        [ \"\$(cat def.rc)\" = 0 ] && grep -q 'device=cpu' def.err && grep -q 'done: 1 steps' def.err"
    check "  ...device: cuda is 78 naming the module and the missing library, with a hint (status $(cat cuda.rc 2>/dev/null))" sh -c "
        [ \"\$(cat cuda.rc)\" = 78 ] && grep -q 'shardrun-cuda.so cannot be loaded: lib[a-zA-Z]*\.so[.0-9]*: cannot open shared object file' cuda.err &&
        grep -q 'hint:' cuda.err"
    check "  ...device: auto that detected a GPU falls back to the CPU with one warning line (status $(cat auto.rc 2>/dev/null))" sh -c "
        [ \"\$(cat auto.rc)\" = 0 ] && grep -q 'device=cpu' auto.err &&
        [ \$(grep -c 'warning: device: auto: SHARDRUN_TEST_GPU_DETECT=1, but the CUDA back end' auto.err) -eq 1 ] &&
        [ \$(grep -c 'shardrun-cuda.so' auto.err) -eq 1 ]"
    check "  ...a GPU plan is 78: it needs the module's op tables (status $(cat plan.rc 2>/dev/null))" sh -c "
        [ \"\$(cat plan.rc)\" = 78 ] && grep -q 'needs the CUDA op table: the CUDA back end .*shardrun-cuda.so cannot be loaded' plan.err"
fi
done_testing
