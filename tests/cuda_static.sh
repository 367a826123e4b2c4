#!/bin/sh
# cuda_static.sh — static checks of the CUDA back end that need no GPU:
#   - ptxas (nvcc -Xptxas -v) reports no register spills and no kernel
#     above 255 registers, for every kernels/*.cu;
#   - every kernel launch (<<<...>>>) is followed by its check
#     (SR_CHECK_LAUNCH) within three lines;
#   - no synchronous CUDA call (cudaMemcpy(, *Synchronize(, cudaMalloc(,
#     cudaFree() in the step-path files (src/fsdp.c src/model.c src/comm_nccl.c
#     src/ops_cuda.c src/gemm_cuda.c kernels/*.cu): the one synchronising
#     helper is sr_cuda_sync_stream in device_cuda.c;
#   - every launcher of kernels/sr_cuda.h is defined in libshardrun.a (nm);
#   - the checks can fail: planted violations are reported.
# SKIP (a failure under SHARDRUN_TEST_REQUIRE=cuda) in a build without CUDA.
. "${SR_SRCDIR:-.}/tests/tap.sh"
B=${SR_BUILDDIR:-.}
K=$SR_SRCDIR/kernels
if ! grep -q '^#define SR_HAVE_CUDA 1' "$B/srconfig.h" 2>/dev/null; then
    case ",${SHARDRUN_TEST_REQUIRE:-}," in
    *,cuda,*) not_ok "SHARDRUN_TEST_REQUIRE has cuda, but this build has no CUDA back end" ;;
    *) skip "this build has no CUDA back end (configure found no nvcc or CUDA runtime)" ;;
    esac
    done_testing
    exit 0
fi
NVCC=$(sed -n 's/^NVCC = //p' "$B/Makefile")

# launch_checks FILE...: prints each <<< not followed by SR_CHECK_LAUNCH within 3 lines
launch_checks() {
    awk '/<<</ { pending = FILENAME ":" FNR; left = 4 }
         pending && /SR_CHECK_LAUNCH\(\)/ { pending = ""; next }
         pending { if (--left == 0) { print pending; pending = "" } }
         ENDFILE { if (pending) print pending; pending = "" }' "$@"
}
# sync_calls FILE...: prints synchronous CUDA calls
sync_calls() {
    grep -nE 'cudaMemcpy\(|Synchronize\(|cudaMalloc\(|cudaFree\(' "$@" | grep -v '^\s*/\?\*'
}

# --- ptxas: spills and registers ---------------------------------------------------
bad=""
for f in "$K"/*.cu; do
    name=$(basename "$f" .cu)
    extra=""
    [ "$name" = adamw ] && extra=-fmad=false
    # shellcheck disable=SC2086
    if ! "$NVCC" -O3 -Xptxas -v $extra -gencode arch=compute_90,code=sm_90 -I"$K" -c "$f" -o "$T/$name.o" \
        >"$T/$name.ptxas" 2>&1; then
        bad="$bad $name(compile)"
        diag "$(tail -5 "$T/$name.ptxas")"
        continue
    fi
    spills=$(grep -oE '[0-9]+ bytes spill (stores|loads)' "$T/$name.ptxas" | awk '$1 > 0' | head -1)
    regs=$(grep -oE 'Used [0-9]+ registers' "$T/$name.ptxas" | awk '{ if ($2 > m) m = $2 } END { print m + 0 }')
    [ -n "$spills" ] && bad="$bad $name(spill: $spills)"
    [ "$regs" -gt 255 ] && bad="$bad $name($regs registers)"
    kernels=$(grep -c 'Compiling entry function' "$T/$name.ptxas")
    diag "$name.cu: $kernels kernels, at most $regs registers, no spills${spills:+ (NOT: $spills)}"
done
if [ -z "$bad" ]; then ok "ptxas: every kernel of kernels/*.cu without spills, within 255 registers"; else not_ok "ptxas:$bad"; fi

# --- launch checks -------------------------------------------------------------------
missing=$(launch_checks "$K"/*.cu)
check "every kernel launch in kernels/*.cu is followed by SR_CHECK_LAUNCH()" test -z "$missing" || diag "$missing"
launches=$(grep -c '<<<' "$K"/*.cu | awk -F: '{ s += $2 } END { print s }')
check "the launch check saw the launches ($launches)" test "$launches" -ge 19
printf 'x<<<1, 1>>>();\nint y;\nint z;\nint w;\nreturn 0;\n' >"$T/planted.cu"
check "a launch without its check is reported (planted)" test -n "$(launch_checks "$T/planted.cu")"

# --- synchronous calls on the step path ------------------------------------------------
step="$SR_SRCDIR/src/fsdp.c $SR_SRCDIR/src/model.c $SR_SRCDIR/src/ops_cuda.c $SR_SRCDIR/src/gemm_cuda.c $SR_SRCDIR/src/comm_nccl.c $K/*.cu"
# shellcheck disable=SC2086
found=$(sync_calls $step)
check "no synchronous CUDA call (cudaMemcpy/Synchronize/cudaMalloc/cudaFree) in the step-path files" \
    test -z "$found" || diag "$found"
printf 'void f(void) { cudaStreamSynchronize(s); }\n' >"$T/planted.c"
check "a synchronous call is reported (planted)" test -n "$(sync_calls "$T/planted.c")"
check "the one synchronising helper is where the docs say (device_cuda.c: sr_cuda_sync_stream)" \
    grep -q 'cudaError_t sr_cuda_sync_stream' "$SR_SRCDIR/src/device_cuda.c"

# --- every launcher is in the library -----------------------------------------------------
launchers=$(sed -n 's/^int \(sr_k_[a-z0-9_]*\)(.*/\1/p' "$K/sr_cuda.h")
nm -g --defined-only "$B/libshardrun.a" 2>/dev/null | awk '$2 == "T" { print $3 }' | sort -u >"$T/defined"
absent=""
n=0
for l in $launchers; do
    n=$((n + 1))
    grep -qx "$l" "$T/defined" || absent="$absent $l"
done
check "every launcher of sr_cuda.h ($n) is defined in libshardrun.a" test -z "$absent" -a "$n" -ge 19 ||
    diag "absent:$absent"
done_testing
