/* test_cudaemu.c — the emulated CUDA runtime (tests/cudaemu) against the
 * runtime API's documented behaviour: devices and their properties,
 * cudaSetDevice per thread, allocation and out-of-memory at the configured
 * size, streams that run asynchronously and in order, ordered across
 * streams only by events (and the legacy default stream), events (query,
 * synchronize, elapsed time), the per-thread last error and the NotReady
 * switch, pageable copies that return when done, cudaFree synchronising
 * the device, pointer attributes; the emulated cuBLASLt against a
 * double-precision loop (transposes, padded leading dimensions, strided
 * batches, the bias epilogue, beta, f32 and bf16) and its refusals. */
#include "srconfig.h"

#include <pthread.h>
#include <stdatomic.h>
#include <time.h>
#include <unistd.h>

#include <cublasLt.h>

#include "cudaemu.h"
#include "tap.h"

static atomic_int flag;

static void sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* a slow operation: sleeps, then sets flag to its argument's value */
static void slow_set(void *arg) {
    sleep_ms(60);
    atomic_store(&flag, (int)(intptr_t)arg);
}

/* waits until the test opens the gate, then sets flag */
static atomic_int gate;
static void gated_set(void *arg) {
    while (!atomic_load(&gate))
        sleep_ms(1);
    atomic_store(&flag, (int)(intptr_t)arg);
}

/* records the flag it saw when it ran */
static int seen;
static void look(void *arg) {
    (void)arg;
    seen = atomic_load(&flag);
}

static void *other_thread(void *arg) {
    int *d = arg;
    cudaSetDevice(1);
    cudaGetDevice(d);
    return NULL;
}

/* ---- the emulated cuBLASLt against the documented product ---- */

static uint16_t bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    u += 0x7fffu + ((u >> 16) & 1);
    return (uint16_t)(u >> 16);
}
static float unbf16(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* D = alpha op(A) op(B) + beta C (+ bias) for m x n x k, batches of 2,
 * inputs bf16 or f32, D bf16 or f32, against a double-precision loop.
 * Returns the largest relative error (or 1e9 on a failed call). */
static double lt_case(int ta, int tb, int m, int n, int k, int in_bf16, int out_bf16, int with_bias, float beta) {
    cublasLtHandle_t h;
    cublasLtCreate(&h);
    int batch = 2;
    int ar = ta ? k : m, ac = ta ? m : k, br = tb ? n : k, bc = tb ? k : n;
    int lda = ar + 1, ldb = br + 2, ldc = m + 3;
    size_t sa = (size_t)lda * ac, sb = (size_t)ldb * bc, sc = (size_t)ldc * n, ei = in_bf16 ? 2 : 4,
           eo = out_bf16 ? 2 : 4;
    float *ha = malloc(sa * batch * 4), *hb = malloc(sb * batch * 4), *hc = malloc(sc * batch * 4), bias[64];
    void *hai = malloc(sa * batch * ei), *hbi = malloc(sb * batch * ei), *hco = malloc(sc * batch * eo);
    for (size_t i = 0; i < sa * batch; i++) {
        ha[i] = (float)((i * 37 % 101) - 50) / 50.0f;
        if (in_bf16) {
            ((uint16_t *)hai)[i] = bf16(ha[i]);
            ha[i] = unbf16(((uint16_t *)hai)[i]);
        } else
            ((float *)hai)[i] = ha[i];
    }
    for (size_t i = 0; i < sb * batch; i++) {
        hb[i] = (float)((i * 53 % 97) - 48) / 48.0f;
        if (in_bf16) {
            ((uint16_t *)hbi)[i] = bf16(hb[i]);
            hb[i] = unbf16(((uint16_t *)hbi)[i]);
        } else
            ((float *)hbi)[i] = hb[i];
    }
    for (size_t i = 0; i < sc * batch; i++) {
        hc[i] = (float)((i * 29 % 89) - 44) / 44.0f;
        if (out_bf16) {
            ((uint16_t *)hco)[i] = bf16(hc[i]);
            hc[i] = unbf16(((uint16_t *)hco)[i]);
        } else
            ((float *)hco)[i] = hc[i];
    }
    for (int i = 0; i < m; i++)
        bias[i] = (float)i / 8.0f - 1.0f;
    void *A, *B, *C, *bd;
    cudaMalloc(&A, sa * batch * ei);
    cudaMalloc(&B, sb * batch * ei);
    cudaMalloc(&C, sc * batch * eo);
    cudaMalloc(&bd, sizeof bias);
    cudaMemcpy(A, hai, sa * batch * ei, cudaMemcpyHostToDevice);
    cudaMemcpy(B, hbi, sb * batch * ei, cudaMemcpyHostToDevice);
    cudaMemcpy(C, hco, sc * batch * eo, cudaMemcpyHostToDevice);
    cudaMemcpy(bd, bias, sizeof bias, cudaMemcpyHostToDevice);
    cublasLtMatmulDesc_t op;
    cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    cublasOperation_t opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa);
    cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb);
    cublasLtEpilogue_t epi = with_bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
    cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi);
    if (with_bias)
        cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bd, sizeof bd);
    cudaDataType_t ti = in_bf16 ? CUDA_R_16BF : CUDA_R_32F, to = out_bf16 ? CUDA_R_16BF : CUDA_R_32F;
    cublasLtMatrixLayout_t la, lb, lc;
    cublasLtMatrixLayoutCreate(&la, ti, (uint64_t)ar, (uint64_t)ac, lda);
    cublasLtMatrixLayoutCreate(&lb, ti, (uint64_t)br, (uint64_t)bc, ldb);
    cublasLtMatrixLayoutCreate(&lc, to, (uint64_t)m, (uint64_t)n, ldc);
    int64_t strides[3] = {(int64_t)sa, (int64_t)sb, (int64_t)sc};
    cublasLtMatrixLayout_t ls[3] = {la, lb, lc};
    for (int i = 0; i < 3; i++) {
        cublasLtMatrixLayoutSetAttribute(ls[i], CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch, sizeof batch);
        cublasLtMatrixLayoutSetAttribute(ls[i], CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &strides[i],
                                         sizeof strides[i]);
    }
    cublasLtMatmulPreference_t pref;
    cublasLtMatmulPreferenceCreate(&pref);
    uint64_t ws = 1 << 20;
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
    cublasLtMatmulHeuristicResult_t res;
    int got = 0;
    double worst = 1e9;
    float alpha = 0.75f;
    if (cublasLtMatmulAlgoGetHeuristic(h, op, la, lb, lc, lc, pref, 1, &res, &got) == CUBLAS_STATUS_SUCCESS &&
        got == 1 && res.workspaceSize <= ws &&
        cublasLtMatmul(h, op, &alpha, A, la, B, lb, &beta, C, lc, C, lc, &res.algo, NULL, 0, 0) ==
            CUBLAS_STATUS_SUCCESS) {
        cudaMemcpy(hco, C, sc * batch * eo, cudaMemcpyDeviceToHost);
        worst = 0;
        for (int bt = 0; bt < batch; bt++)
            for (int j = 0; j < n; j++)
                for (int i = 0; i < m; i++) {
                    double want = 0;
                    for (int l = 0; l < k; l++) {
                        double x = ta ? ha[bt * sa + l + (size_t)i * lda] : ha[bt * sa + i + (size_t)l * lda];
                        double y = tb ? hb[bt * sb + j + (size_t)l * ldb] : hb[bt * sb + l + (size_t)j * ldb];
                        want += x * y;
                    }
                    size_t ic = bt * sc + i + (size_t)j * ldc;
                    want = alpha * want + beta * hc[ic] + (with_bias ? bias[i] : 0.0);
                    double v = out_bf16 ? unbf16(((uint16_t *)hco)[ic]) : ((float *)hco)[ic];
                    double e = fabs(v - want) / (fabs(want) > 1 ? fabs(want) : 1);
                    worst = e > worst ? e : worst;
                }
    }
    cublasLtMatmulPreferenceDestroy(pref);
    for (int i = 0; i < 3; i++)
        cublasLtMatrixLayoutDestroy(ls[i]);
    cublasLtMatmulDescDestroy(op);
    cublasLtDestroy(h);
    cudaFree(A), cudaFree(B), cudaFree(C), cudaFree(bd);
    free(ha), free(hb), free(hc), free(hai), free(hbi), free(hco);
    return worst;
}

static void test_cublaslt(void) {
    double e;
    e = lt_case(1, 0, 13, 7, 21, 0, 0, 1, 0.0f);
    tap_ok(e < 1e-5, "cublasLtMatmul: A transposed, f32, bias epilogue, 2 strided batches, padded ld (err %.2g)", e);
    e = lt_case(0, 1, 9, 11, 17, 0, 0, 0, 1.0f);
    tap_ok(e < 1e-5, "cublasLtMatmul: B transposed, f32, beta 1 accumulates into C in place (err %.2g)", e);
    e = lt_case(0, 0, 16, 8, 32, 1, 0, 1, 0.0f);
    tap_ok(e < 1e-5, "cublasLtMatmul: bf16 inputs, f32 output and compute (err %.2g)", e);
    e = lt_case(1, 1, 12, 10, 24, 1, 1, 1, 0.5f);
    tap_ok(e < 1e-2, "cublasLtMatmul: bf16 in and out (round to nearest even), both transposed (err %.2g)", e);

    /* misuse the heuristic and the product refuse */
    cublasLtHandle_t h;
    cublasLtCreate(&h);
    cublasLtMatmulDesc_t op;
    cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    cublasLtMatrixLayout_t la, lb, lc, bad;
    cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, 8, 4, 8);
    cublasLtMatrixLayoutCreate(&lb, CUDA_R_32F, 4, 8, 4);
    cublasLtMatrixLayoutCreate(&lc, CUDA_R_32F, 8, 8, 8);
    cublasLtMatrixLayoutCreate(&bad, CUDA_R_32F, 5, 8, 8);
    cublasLtMatmulPreference_t pref;
    cublasLtMatmulPreferenceCreate(&pref);
    uint32_t al = 16;
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al, sizeof al);
    cublasLtMatmulHeuristicResult_t res;
    int got = 0;
    tap_ok(cublasLtMatmulAlgoGetHeuristic(h, op, la, lb, lc, bad, pref, 1, &res, &got) == CUBLAS_STATUS_INVALID_VALUE &&
               got == 0,
           "cuBLASLt heuristic: a D layout that is not m x n is refused");
    tap_ok(cublasLtMatmulAlgoGetHeuristic(h, op, la, lb, lc, lc, pref, 1, &res, &got) == CUBLAS_STATUS_SUCCESS &&
               got == 1,
           "cuBLASLt heuristic: one algorithm for a consistent product");
    float *A, *B, *C, one = 1.0f, zero = 0.0f;
    cudaMalloc((void **)&A, 40 * 4);
    cudaMalloc((void **)&B, 32 * 4);
    cudaMalloc((void **)&C, 64 * 4);
    tap_ok(cublasLtMatmul(h, op, &one, A + 1, la, B, lb, &zero, C, lc, C, lc, &res.algo, NULL, 0, 0) ==
               CUBLAS_STATUS_INVALID_VALUE,
           "cublasLtMatmul: A below the 16-byte alignment the preference promised is refused");
    int32_t badattr = 0;
    tap_ok(cublasLtMatrixLayoutSetAttribute(la, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &badattr, 2) ==
               CUBLAS_STATUS_INVALID_VALUE,
           "cuBLASLt attributes: a buffer of the wrong size is refused");
    cudaFree(A), cudaFree(B), cudaFree(C);
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatrixLayoutDestroy(la), cublasLtMatrixLayoutDestroy(lb), cublasLtMatrixLayoutDestroy(lc);
    cublasLtMatrixLayoutDestroy(bad);
    cublasLtMatmulDescDestroy(op);
    cublasLtDestroy(h);
}

int main(void) {
    setenv("CUDAEMU_DEVICES", "2", 1);
    setenv("CUDAEMU_MEM_MB", "64", 1);
    setenv("CUDAEMU_NAME", "NVIDIA H200 (emulated)", 1);

    /* devices */
    int n = 0;
    cudaError_t rc = cudaGetDeviceCount(&n);
    tap_ok(rc == cudaSuccess && n == 2, "two devices as configured (%d)", n);
    struct cudaDeviceProp p;
    tap_ok(cudaGetDeviceProperties(&p, 1) == cudaSuccess && strcmp(p.name, "NVIDIA H200 (emulated)") == 0 &&
               p.major == 9 && p.minor == 0 && p.totalGlobalMem == (size_t)64 << 20,
           "properties: the configured name, sm_90, the memory size");
    char b0[32], b1[32];
    tap_ok(cudaDeviceGetPCIBusId(b0, sizeof b0, 0) == cudaSuccess && cudaDeviceGetPCIBusId(b1, sizeof b1, 1) == 0 &&
               strcmp(b0, b1) != 0,
           "each device has its own PCI bus id (%s, %s)", b0, b1);
    tap_ok(cudaSetDevice(5) == cudaErrorInvalidDevice, "cudaSetDevice(5): cudaErrorInvalidDevice");
    tap_ok(cudaPeekAtLastError() == cudaErrorInvalidDevice, "  ...kept by cudaPeekAtLastError");
    tap_ok(cudaGetLastError() == cudaErrorInvalidDevice && cudaGetLastError() == cudaSuccess,
           "  ...returned and cleared by cudaGetLastError");
    int there = -1, here = -1;
    pthread_t th;
    pthread_create(&th, NULL, other_thread, &there);
    pthread_join(th, NULL);
    cudaGetDevice(&here);
    tap_ok(there == 1 && here == 0, "cudaSetDevice is per thread (there %d, here %d)", there, here);

    /* memory */
    void *a = NULL, *b = NULL;
    size_t fr = 0, tot = 0;
    tap_ok(cudaMalloc(&a, 32 << 20) == cudaSuccess && cudaemu_is_device(a, 32 << 20), "cudaMalloc 32 MiB");
    tap_ok(cudaMemGetInfo(&fr, &tot) == cudaSuccess && tot == (size_t)64 << 20 && fr == (size_t)32 << 20,
           "cudaMemGetInfo: 32 of 64 MiB free");
    tap_ok(cudaMalloc(&b, 40 << 20) == cudaErrorMemoryAllocation && b == NULL,
           "40 MiB more: cudaErrorMemoryAllocation at the configured size");
    cudaGetLastError();
    float *pinned = NULL, *pageable = malloc(1024 * sizeof(float));
    tap_ok(cudaMallocHost((void **)&pinned, 1024 * sizeof(float)) == cudaSuccess, "cudaMallocHost");
    struct cudaPointerAttributes at;
    int kinds_ok = cudaPointerGetAttributes(&at, a) == cudaSuccess && at.type == cudaMemoryTypeDevice;
    kinds_ok = kinds_ok && cudaPointerGetAttributes(&at, pinned) == cudaSuccess && at.type == cudaMemoryTypeHost;
    kinds_ok =
        kinds_ok && cudaPointerGetAttributes(&at, pageable) == cudaSuccess && at.type == cudaMemoryTypeUnregistered;
    tap_ok(kinds_ok, "cudaPointerGetAttributes: device, pinned host, unregistered");

    /* asynchrony and order within a stream */
    cudaStream_t s1, s2;
    cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking);
    cudaStreamCreateWithPriority(&s2, cudaStreamNonBlocking, -1);
    for (int i = 0; i < 1024; i++)
        pinned[i] = (float)i;
    atomic_store(&flag, 0);
    atomic_store(&gate, 0);
    cudaemu_enqueue(s1, gated_set, (void *)(intptr_t)1, NULL);
    cudaMemcpyAsync(a, pinned, 1024 * sizeof(float), cudaMemcpyHostToDevice, s1);
    cudaMemsetAsync(pinned, 0, 16, s1); /* not device memory: refused */
    tap_ok(cudaGetLastError() == cudaErrorInvalidValue, "cudaMemsetAsync on host memory: cudaErrorInvalidValue");
    tap_ok(atomic_load(&flag) == 0 && cudaStreamQuery(s1) == cudaErrorNotReady,
           "a pinned copy returns at once, the stream's work still pending");
    cudaGetLastError();
    /* across streams: only events order (s1 is held at its gate) */
    cudaemu_enqueue(s2, look, NULL, NULL);
    cudaStreamSynchronize(s2);
    tap_ok(seen == 0, "another stream's work does not wait for this one's");
    atomic_store(&gate, 1);
    cudaStreamSynchronize(s1);
    tap_ok(atomic_load(&flag) == 1 &&
               memcmp(cudaemu_device_view(a, 1024 * sizeof(float), "the test"), pinned, 1024 * sizeof(float)) == 0,
           "cudaStreamSynchronize returns after the stream's work, in order");

    /* an event orders them */
    cudaEvent_t e, t0, t1, nt;
    cudaEventCreate(&e);
    atomic_store(&flag, 0);
    atomic_store(&gate, 0);
    cudaemu_enqueue(s1, gated_set, (void *)(intptr_t)2, NULL);
    cudaEventRecord(e, s1);
    tap_ok(cudaEventQuery(e) == cudaErrorNotReady, "cudaEventQuery before the work ran: cudaErrorNotReady");
    tap_ok(cudaGetLastError() == cudaErrorNotReady, "  ...recorded as the last error (the switch's default)");
    int old = cudaemu_set_notready_error(0);
    tap_ok(cudaEventQuery(e) == cudaErrorNotReady && cudaPeekAtLastError() == cudaSuccess,
           "  ...not recorded with the switch off");
    cudaemu_set_notready_error(old);
    cudaStreamWaitEvent(s2, e, 0);
    cudaemu_enqueue(s2, look, NULL, NULL);
    atomic_store(&gate, 1);
    cudaStreamSynchronize(s2);
    tap_ok(seen == 2, "cudaStreamWaitEvent orders the other stream after the event (saw %d)", seen);
    tap_ok(cudaEventQuery(e) == cudaSuccess, "cudaEventQuery after: cudaSuccess");

    /* timing */
    cudaEventCreate(&t0);
    cudaEventCreate(&t1);
    cudaEventCreateWithFlags(&nt, cudaEventDisableTiming);
    cudaEventRecord(t0, s1);
    cudaemu_enqueue(s1, slow_set, (void *)(intptr_t)3, NULL);
    cudaEventRecord(t1, s1);
    cudaEventRecord(nt, s1);
    float ms = 0;
    tap_ok(cudaEventElapsedTime(&ms, t0, t1) == cudaErrorNotReady, "elapsed time before the end event: NotReady");
    cudaGetLastError();
    cudaEventSynchronize(t1);
    rc = cudaEventElapsedTime(&ms, t0, t1);
    tap_ok(rc == cudaSuccess && ms >= 59.0f, "elapsed time around a 60 ms operation: at least 60 ms (%.1f ms)",
           (double)ms);
    tap_ok(cudaEventElapsedTime(&ms, t0, nt) == cudaErrorInvalidResourceHandle,
           "an event without timing: cudaErrorInvalidResourceHandle");
    cudaGetLastError();

    /* pageable copies return when done; cudaFree synchronises */
    atomic_store(&flag, 0);
    cudaemu_enqueue(s1, slow_set, (void *)(intptr_t)4, NULL);
    memset(pageable, 0, 1024 * sizeof(float));
    cudaMemcpyAsync(pageable, a, 1024 * sizeof(float), cudaMemcpyDeviceToHost, s1);
    tap_ok(atomic_load(&flag) == 4 && pageable[1023] == 1023.0f,
           "a copy to pageable memory returns only when done (and after the stream's earlier work)");
    atomic_store(&flag, 0);
    cudaemu_enqueue(s2, slow_set, (void *)(intptr_t)5, NULL);
    void *c = NULL;
    cudaMalloc(&c, 256);
    cudaFree(c);
    tap_ok(atomic_load(&flag) == 5, "cudaFree waits for the device's work");
    tap_ok(cudaFree(pageable) == cudaErrorInvalidDevicePointer, "cudaFree of host memory: InvalidDevicePointer");
    cudaGetLastError();

    /* the legacy default stream waits for blocking streams */
    cudaStream_t s3;
    cudaStreamCreate(&s3);
    atomic_store(&flag, 0);
    cudaemu_enqueue(s3, slow_set, (void *)(intptr_t)6, NULL);
    cudaemu_enqueue(0, look, NULL, NULL);
    cudaStreamSynchronize(0);
    tap_ok(seen == 6, "work on the legacy default stream waits for a blocking stream's (saw %d)", seen);

    cudaEventDestroy(e);
    cudaEventDestroy(t0);
    cudaEventDestroy(t1);
    cudaEventDestroy(nt);
    cudaStreamDestroy(s1);
    cudaStreamDestroy(s2);
    cudaStreamDestroy(s3);
    cudaFreeHost(pinned);
    cudaFree(a);
    tap_ok(cudaMemGetInfo(&fr, &tot) == cudaSuccess && fr == tot, "everything freed: all memory free again");
    free(pageable);
    test_cublaslt();
    return tap_done();
}
