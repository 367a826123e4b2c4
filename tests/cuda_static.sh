#!/bin/sh
# cuda_static.sh — static checks of the CUDA back end that need no GPU:
#   - ptxas (nvcc -Xptxas -v) reports no register spills, no stack frame
#     (a register array indexed at run time, in local memory) and no
#     kernel above 255 registers, for every kernels/*.cu;
#   - every kernel launch goes through the one launch macro (SR_LAUNCH of
#     kernels/common.cuh: clear the last-error, launch, read it): no bare
#     triple-chevron launch outside that macro, and every CUB call inside
#     SR_LAUNCH_LIB (a launch) or SR_QUERY_LIB (a size query);
#   - inline PTX and the warp-level intrinsics (shuffles, votes, mma.sync,
#     ldmatrix, cp.async, %globaltimer) only in kernels/mma.cuh, the one
#     wrapper;
#   - the query-site rule: cudaEventQuery / cudaStreamQuery appear only in
#     sr_cuda_query (src/device_cuda.c), which clears the NotReady they
#     may leave as the thread's last error;
#   - no synchronous CUDA call (cudaMemcpy(, *Synchronize(, cudaMalloc(,
#     cudaFree() in the step-path files (src/fsdp.c src/offload.c src/plane.c
#     src/model.c src/comm_nccl.c src/comm_nccl_cuda.c
#     src/ops_cuda.c src/gemm_cuda.c kernels/*.cu): the one synchronising
#     helper is sr_cuda_sync_stream in device_cuda.c;
#   - shared memory only through SR_SHARED (common.cuh: __shared__ under
#     nvcc, a block's own array on the CUDA emulator): no bare __shared__;
#   - every launcher of kernels/sr_cuda.h is defined in libshardrun_cuda.a,
#     the CUDA module's archive (nm);
#   - the checks can fail: planted violations are reported.
# SKIP (a failure under SHARDRUN_TEST_REQUIRE=cuda) in a build without CUDA.
# An emulator tree (configure --with-cuda=emulator) builds the kernels with
# the host compiler: ptxas is asked of the toolkit's nvcc when there is one.
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
case $NVCC in
*'$(CXX)'*) NVCC=$(command -v nvcc || echo "${CUDA_HOME:-/usr/local/cuda}/bin/nvcc") ;;
esac

# bare_launches FILE...: prints each triple-chevron launch outside the
# definition of SR_LAUNCH (the one line of common.cuh that holds it)
bare_launches() {
    grep -n '<<<' "$@" /dev/null | grep -v '^[^:]*common\.cuh:[0-9]*: *((void)cudaGetLastError(), kernel<<<'
}
# bare_lib FILE...: prints each cub:: call not wrapped in SR_LAUNCH_LIB or SR_QUERY_LIB
bare_lib() {
    grep -n 'cub::Device' "$@" /dev/null | grep -v 'SR_LAUNCH_LIB([a-z_]*, cub::Device' | grep -v 'SR_QUERY_LIB(cub::Device'
}
# queries FILE...: prints each cudaEventQuery/cudaStreamQuery call outside sr_cuda_query
queries() {
    grep -nE '(cudaEventQuery|cudaStreamQuery)\(' "$@" /dev/null | grep -v '^[^:]*device_cuda\.c:[0-9]*:    cudaError_t q = cudaEventQuery(e);$'
}
# sync_calls FILE...: prints synchronous CUDA calls
sync_calls() {
    grep -nE 'cudaMemcpy\(|Synchronize\(|cudaMalloc\(|cudaFree\(' "$@" | grep -v '^\s*/\?\*'
}

# --- ptxas: spills and registers ---------------------------------------------------
bad=""
[ -x "$NVCC" ] || skip_or_fail cuda "ptxas: no nvcc here ($NVCC) for this emulator tree's kernels"
[ -x "$NVCC" ] && for f in "$K"/*.cu; do
    name=$(basename "$f" .cu)
    extra=""
    [ "$name" = adamw ] && extra=-fmad=false
    # device code only (-cubin): ptxas's report is the same as a full -c's,
    # in less than half the time (the host half is the build's)
    # shellcheck disable=SC2086
    if ! "$NVCC" -O3 -Xptxas -v $extra -gencode arch=compute_90,code=sm_90 -I"$K" -cubin "$f" -o "$T/$name.cubin" \
        >"$T/$name.ptxas" 2>&1; then
        bad="$bad $name(compile)"
        diag "$(tail -5 "$T/$name.ptxas")"
        continue
    fi
    spills=$(grep -oE '[0-9]+ bytes (spill (stores|loads)|stack frame)' "$T/$name.ptxas" | awk '$1 > 0' | head -1)
    regs=$(grep -oE 'Used [0-9]+ registers' "$T/$name.ptxas" | awk '{ if ($2 > m) m = $2 } END { print m + 0 }')
    [ -n "$spills" ] && bad="$bad $name(spill: $spills)"
    [ "$regs" -gt 255 ] && bad="$bad $name($regs registers)"
    kernels=$(grep -c 'Compiling entry function' "$T/$name.ptxas")
    diag "$name.cu: $kernels kernels, at most $regs registers, no spills, no stack${spills:+ (NOT: $spills)}"
done
if [ ! -x "$NVCC" ]; then
    :
elif [ -z "$bad" ]; then ok "ptxas: every kernel of kernels/*.cu without spills or a stack frame (a register array indexed at run time lands in local memory), within 255 registers"; else not_ok "ptxas:$bad"; fi

# --- shared memory through SR_SHARED ---------------------------------------------------
# bare_shared FILE...: prints each __shared__ outside SR_SHARED's definition
# (and comments)
bare_shared() {
    grep -n '__shared__' "$@" /dev/null | grep -v '^[^:]*:[0-9]*: *\(/\*\|\*\)' |
        grep -v '^[^:]*common\.cuh:[0-9]*:#define SR_SHARED(T, name, n) __shared__ T name\[n\]$' |
        grep -v '^[^:]*mma\.cuh:[0-9]*: *extern __shared__ __align__(16) unsigned char sr_dyn_smem_\[\]; *\\$'
}
# bare_warp FILE...: inline PTX or a warp-level intrinsic outside
# kernels/mma.cuh, the one wrapper (comments aside)
bare_warp() {
    grep -nE 'asm[[:space:]]*(volatile[[:space:]]*)?\(|__shfl_(up_|down_|xor_)?sync|__ballot_sync|__activemask|__cvta_generic_to_shared|mma\.sync|ldmatrix\.|cp\.async|%globaltimer' \
        "$@" /dev/null | grep -v '^[^:]*mma\.cuh:' | grep -v '^[^:]*:[0-9]*: *\(/\*\|\*\|//\)'
}
shared=$(grep -c 'SR_SHARED(' "$K"/*.cu | awk -F: '{ s += $2 } END { print s }')
found=$(bare_shared "$K"/*.cu "$K"/*.cuh)
check "every shared array is declared through SR_SHARED ($shared; no bare __shared__)" test -z "$found" -a "$shared" -ge 5 ||
    diag "$found"
printf '__global__ void k(float *x) {\n    __shared__ float s[32];\n}\n' >"$T/planted_shared.cu"
check "a bare __shared__ is reported (planted)" test -n "$(bare_shared "$T/planted_shared.cu")"
found=$(bare_warp "$K"/*.cu "$K"/*.cuh "$K"/*.h)
check "inline PTX and the warp-level intrinsics only in kernels/mma.cuh (the wrapper: $(grep -c '^__device__ inline\|^template' "$K/mma.cuh") primitives)" \
    test -z "$found" || diag "$found"
mkdir -p "$T/tables" && python3 "$SR_SRCDIR/tests/data/primitives.py" "$T/tables" 2>"$T/tables.err"
tdiff=$(for f in mma_m16n8k16 ldmatrix shfl bf16x2; do cmp -s "$T/tables/$f.txt" "$SR_SRCDIR/tests/data/$f.txt" || echo "$f.txt"; done)
check "tests/data's primitive tables are tests/data/primitives.py's output (from the PTX ISA; differ: ${tdiff:-none})" \
    test -z "$tdiff" -a -s "$T/tables/mma_m16n8k16.txt" || diag "$(cat "$T/tables.err")"
printf '__device__ float f(float v) {\n    return __shfl_xor_sync(0xffffffffu, v, 1);\n}\n__device__ void g(unsigned s) { asm volatile("cp.async.wait_all;\\n" ::); }\n' >"$T/planted_warp.cu"
check "a warp intrinsic and inline PTX outside the wrapper are reported (planted)" \
    test "$(bare_warp "$T/planted_warp.cu" | wc -l)" = 2

# --- launch checks -------------------------------------------------------------------
launches=$(grep -c 'SR_LAUNCH(' "$K"/*.cu | awk -F: '{ s += $2 } END { print s }')
missing=$(bare_launches "$K"/*.cu "$K"/*.cuh "$K"/*.h "$SR_SRCDIR"/src/*.c "$SR_SRCDIR"/src/*.h "$SR_SRCDIR"/tests/*.c)
check "every kernel launch goes through SR_LAUNCH ($launches launches; no bare <<<)" test -z "$missing" -a "$launches" -ge 25 ||
    diag "$missing"
check "the SR_LAUNCH macro clears the last-error, launches, then reads it" \
    grep -q '((void)cudaGetLastError(), kernel<<<(grid), (block), (shmem), (stream)>>>(__VA_ARGS__), (int)cudaGetLastError())' "$K/common.cuh"
libs=$(bare_lib "$K"/*.cu)
check "every CUB call runs inside SR_LAUNCH_LIB or SR_QUERY_LIB ($(grep -c 'SR_\(LAUNCH\|QUERY\)_LIB([a-z_]*,* *cub::' "$K/encoder.cu") calls)" \
    sh -c "[ -z '$libs' ] && [ $(grep -c 'SR_\(LAUNCH\|QUERY\)_LIB([a-z_]*,* *cub::' "$K/encoder.cu") -ge 2 ]" || diag "$libs"
q=$(queries "$SR_SRCDIR"/src/*.c "$K"/*.cu)
check "cudaEventQuery/cudaStreamQuery only in sr_cuda_query (the NotReady it leaves is cleared)" test -z "$q" || diag "$q"
check "sr_cuda_query clears a NotReady last-error" \
    grep -q 'if (q == cudaErrorNotReady && cudaPeekAtLastError() == cudaErrorNotReady)' "$SR_SRCDIR/src/device_cuda.c"
# planted violations: each rule reports them
printf 'static int f(cudaStream_t s) {\n    k<<<1, 1, 0, s>>>();\n    return SR_CHECK_LAUNCH();\n}\n' >"$T/planted.cu"
check "a bare <<< launch is reported (planted)" test -n "$(bare_launches "$T/planted.cu")"
printf '    e = (int)cub::DeviceRadixSort::SortKeys(ws, tmp, keys, n, 0, 64, s);\n' >"$T/planted_cub.cu"
check "a CUB call outside SR_LAUNCH_LIB is reported (planted)" test -n "$(bare_lib "$T/planted_cub.cu")"
printf 'static void f(cudaEvent_t e) {\n    if (cudaEventQuery(e) == cudaSuccess)\n        g();\n}\nstatic void h(cudaStream_t s) { (void)cudaStreamQuery(s); }\n' >"$T/planted_query.c"
check "raw cudaEventQuery and cudaStreamQuery calls are reported (planted)" \
    test "$(queries "$T/planted_query.c" | wc -l)" = 2

# --- synchronous calls on the step path ------------------------------------------------
step="$SR_SRCDIR/src/fsdp.c $SR_SRCDIR/src/offload.c $SR_SRCDIR/src/plane.c $SR_SRCDIR/src/model.c $SR_SRCDIR/src/ops_cuda.c $SR_SRCDIR/src/gemm_cuda.c $SR_SRCDIR/src/comm_nccl.c $SR_SRCDIR/src/comm_nccl_cuda.c $K/*.cu"
# shellcheck disable=SC2086
found=$(sync_calls $step)
check "no synchronous CUDA call (cudaMemcpy/Synchronize/cudaMalloc/cudaFree) in the step-path files" \
    test -z "$found" || diag "$found"
printf 'void f(void) { cudaStreamSynchronize(s); }\n' >"$T/planted.c"
check "a synchronous call is reported (planted)" test -n "$(sync_calls "$T/planted.c")"
check "the one synchronising helper is where the docs say (device_cuda.c: sr_cuda_sync_stream), returning the synchronisation's own status" \
    grep -q '^cudaError_t sr_cuda_sync_stream(cudaStream_t stream) { return cudaStreamSynchronize(stream); }$' "$SR_SRCDIR/src/device_cuda.c"

# --- every launcher is in the library -----------------------------------------------------
launchers=$(sed -n 's/^int \(sr_k_[a-z0-9_]*\)(.*/\1/p' "$K/sr_cuda.h")
nm -g --defined-only "$B/libshardrun_cuda.a" 2>/dev/null | awk '$2 == "T" { print $3 }' | sort -u >"$T/defined"
absent=""
n=0
for l in $launchers; do
    n=$((n + 1))
    grep -qx "$l" "$T/defined" || absent="$absent $l"
done
check "every launcher of sr_cuda.h ($n) is defined in libshardrun_cuda.a (the CUDA module's)" test -z "$absent" -a "$n" -ge 19 ||
    diag "absent:$absent"
done_testing
