/* test_gemm_plan.c — the cuBLASLt side of the CUDA back end, without a GPU.
 *
 * 1. The row-major -> column-major mapping (sr_cuda_rm_key) of every GEMM
 *    the CUDA ops issue — linear forward, dinp, dW, and the five batched
 *    GEMMs of attention — run through a host emulation of cuBLASLt's
 *    column-major semantics (op(A), op(B), leading dimensions, batch
 *    strides, beta) and compared with the CPU ops (matmul) or plain
 *    row-major loops (attention): a swapped operand or a wrong stride fails
 *    here, not on the GPU.
 * 2. Every plan the model needs (GPT-2 124M and the tiny shapes, bf16 and
 *    f32, with and without the bias epilogue, fp32 D for dW) builds, and its
 *    descriptors read back what was asked (types, transposes, compute 32F,
 *    epilogue, batch).
 * Where a GPU (or the CUDA emulator of an emulator tree) is usable, every
 * GEMM of part 1 runs through the plan cache and cublasLtMatmul
 * (sr_gemm_run: the heuristic included) instead of the host emulation. */
#include "srconfig.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_backend.h"
#include "device.h"
#include "ops.h"
#include "tap.h"

/* cuBLASLt's D = alpha op(A) op(B) + beta D, column-major, on the host. */
static void host_gemm(const sr_gemm_key *k, const float *A, const float *B, float *D, float alpha) {
    for (int b = 0; b < k->batch; b++)
        for (int j = 0; j < k->n; j++)
            for (int i = 0; i < k->m; i++) {
                double s = 0.0;
                for (int p = 0; p < k->k; p++) {
                    float a =
                        k->transa ? A[b * k->sa + p + (long long)i * k->lda] : A[b * k->sa + i + (long long)p * k->lda];
                    float bb =
                        k->transb ? B[b * k->sb + j + (long long)p * k->ldb] : B[b * k->sb + p + (long long)j * k->ldb];
                    s += (double)a * bb;
                }
                float *d = &D[b * k->sd + i + (long long)j * k->ldd];
                *d = (float)(alpha * s + (k->accumulate ? *d : 0.0));
            }
}

/* The device's plan cache when cudaGetDeviceCount finds one (a GPU or the
 * emulator), and how many GEMMs ran through it. */
static sr_gemm_cache *gpu;
static cublasLtHandle_t lt;
static void *lt_ws;
static int gpu_runs, gpu_failed;

/* Elements from a matrix's first to its last, column-major with `ld`, over
 * `batch` strides */
static size_t extent(long long rows, long long cols, long long ld, int batch, long long stride) {
    return (size_t)((batch - 1) * stride + (cols - 1) * ld + rows);
}

/* One device copy of host floats [p, p + n) */
static float *up(const float *p, size_t n) {
    void *d = NULL;
    if (cudaMalloc(&d, n * sizeof(float)) != cudaSuccess || cudaMemcpy(d, p, n * 4, cudaMemcpyHostToDevice))
        return NULL;
    return d;
}

/* D = alpha op(A) op(B) (+ D): through sr_gemm_run and cublasLtMatmul on the
 * device when there is one, else the host emulation. */
static void emulate(const sr_gemm_key *k, const float *A, const float *B, float *D, float alpha) {
    if (!gpu) {
        host_gemm(k, A, B, D, alpha);
        return;
    }
    size_t na = extent(k->transa ? k->k : k->m, k->transa ? k->m : k->k, k->lda, k->batch, k->sa);
    size_t nb = extent(k->transb ? k->n : k->k, k->transb ? k->k : k->n, k->ldb, k->batch, k->sb);
    size_t nd = extent(k->m, k->n, k->ldd, k->batch, k->sd);
    float *dA = up(A, na), *dB = up(B, nb), *dD = up(D, nd);
    sr_status st =
        dA && dB && dD ? sr_gemm_run(gpu, 0, k, dA, dB, dD, NULL, alpha, SR_LF_GEMM_LINEAR) : SR_ERR_INTERNAL;
    if (st != SR_OK || cudaMemcpy(D, dD, nd * 4, cudaMemcpyDeviceToHost) != cudaSuccess) {
        gpu_failed++;
        tap_diag("sr_gemm_run m=%d n=%d k=%d: %s", k->m, k->n, k->k, st != SR_OK ? sr_error_message() : "copy failed");
    }
    gpu_runs++;
    cudaFree(dA), cudaFree(dB), cudaFree(dD);
}

static float *rnd(size_t n, unsigned seed) {
    float *x = malloc(n * sizeof *x);
    srand(seed);
    for (size_t i = 0; i < n; i++)
        x[i] = (float)rand() / RAND_MAX - 0.5f;
    return x;
}

static double maxdiff(const float *a, const float *b, size_t n) {
    double m = 0.0;
    for (size_t i = 0; i < n; i++)
        m = fmax(m, fabs((double)a[i] - b[i]));
    return m;
}

/* the linear layer's three GEMMs against the CPU op */
static void linear(int N, int C, int OC) {
    float *inp = rnd((size_t)N * C, 1), *w = rnd((size_t)OC * C, 2), *dout = rnd((size_t)N * OC, 3);
    float *out_ref = calloc((size_t)N * OC, 4), *out = calloc((size_t)N * OC, 4);
    float *dinp_ref = rnd((size_t)N * C, 4), *dinp = malloc((size_t)N * C * 4);
    float *dw_ref = rnd((size_t)OC * C, 5), *dw = malloc((size_t)OC * C * 4);
    memcpy(dinp, dinp_ref, (size_t)N * C * 4);
    memcpy(dw, dw_ref, (size_t)OC * C * 4);
    sr_ops_cpu.matmul_forward(out_ref, inp, w, NULL, N, C, OC);
    sr_ops_cpu.matmul_backward(dinp_ref, dw_ref, NULL, dout, inp, w, N, C, OC, 1.0f, 1.0f);
    /* as ops_cuda.c issues them; the key's A is the row-major B */
    sr_gemm_key f = sr_cuda_rm_key(0, 1, N, OC, C, C, 0, C, 0, OC, 0, 1, false, false, false);
    emulate(&f, w, inp, out, 1.0f);
    sr_gemm_key di = sr_cuda_rm_key(0, 0, N, C, OC, OC, 0, C, 0, C, 0, 1, false, true, false);
    emulate(&di, w, dout, dinp, 1.0f);
    sr_gemm_key dwk = sr_cuda_rm_key(1, 0, OC, C, N, OC, 0, C, 0, C, 0, 1, false, true, true);
    emulate(&dwk, inp, dout, dw, 1.0f);
    tap_ok(maxdiff(out, out_ref, (size_t)N * OC) < 1e-5, "linear forward N=%d C=%d OC=%d: the key computes the CPU op",
           N, C, OC);
    tap_ok(maxdiff(dinp, dinp_ref, (size_t)N * C) < 1e-5, "linear dinp += dout W (beta 1) matches the CPU op");
    tap_ok(maxdiff(dw, dw_ref, (size_t)OC * C) < 1e-5, "linear dW += dout^T inp (beta 1, fp32 D) matches the CPU op");
    tap_ok(f.transa == 1 && f.transb == 0 && f.m == OC && f.n == N && f.k == C && f.ldd == OC,
           "forward key: W transposed, m = OC, n = N, k = C (doc/ARCHITECTURE.md §3c)");
    tap_ok(dwk.transa == 0 && dwk.transb == 1 && dwk.m == C && dwk.n == OC && dwk.k == N && dwk.d_f32,
           "dW key: m = C, n = OC, k = N, dout transposed, D in fp32");
    free(inp), free(w), free(dout), free(out_ref), free(out), free(dinp_ref), free(dinp), free(dw_ref), free(dw);
}

/* row-major reference: D[M,N] = alpha op(A) op(B) (+ D) */
static void rm_ref(int ta, int tb, int M, int N, int K, const float *A, long long lda, const float *B, long long ldb,
                   float *D, long long ldd, float alpha, bool acc) {
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double s = 0.0;
            for (int p = 0; p < K; p++)
                s += (double)(ta ? A[p * lda + i] : A[i * lda + p]) * (tb ? B[j * ldb + p] : B[p * ldb + j]);
            D[i * ldd + j] = (float)(alpha * s + (acc ? D[i * ldd + j] : 0.0));
        }
}

/* the five batched GEMMs of attention for one sequence */
static void attention(int T, int C, int NH) {
    int hs = C / NH;
    long long C3 = 3ll * C, TT = (long long)T * T;
    float *qkv = rnd((size_t)T * C3, 7), *dy = rnd((size_t)T * C, 8), *att = rnd((size_t)NH * TT, 9);
    float *got = calloc((size_t)NH * TT + (size_t)T * C3, 4), *ref = calloc((size_t)NH * TT + (size_t)T * C3, 4);
    float scale = 0.125f;
    struct {
        const char *what;
        int ta, tb, M, N, K;
        const float *A;
        long long lda, sA;
        const float *B;
        long long ldb, sB;
        long long ldd, sD, dout;
        float alpha;
        bool acc;
    } g[] = {
        {"scores = scale q k^T", 0, 1, T, T, hs, qkv, C3, hs, qkv + C, C3, hs, T, TT, 0, scale, false},
        {"y = att v", 0, 0, T, hs, T, att, T, TT, qkv + 2 * C, C3, hs, C, hs, NH * TT, 1.0f, false},
        {"datt = dy v^T", 0, 1, T, T, hs, dy, C, hs, qkv + 2 * C, C3, hs, T, TT, 0, 1.0f, false},
        {"dv += att^T dy", 1, 0, T, hs, T, att, T, TT, dy, C, hs, C3, hs, NH * TT + 2 * C, 1.0f, true},
        {"dq += scale datt k", 0, 0, T, hs, T, att, T, TT, qkv + C, C3, hs, C3, hs, NH * TT, scale, true},
        {"dk += scale datt^T q", 1, 0, T, hs, T, att, T, TT, qkv, C3, hs, C3, hs, NH * TT + C, scale, true},
    };
    for (size_t i = 0; i < sizeof g / sizeof g[0]; i++) {
        size_t total = (size_t)NH * TT + (size_t)T * C3;
        for (size_t e = 0; e < total; e++)
            got[e] = ref[e] = (float)(e % 7) * 0.25f;
        for (int h = 0; h < NH; h++)
            rm_ref(g[i].ta, g[i].tb, g[i].M, g[i].N, g[i].K, g[i].A + h * g[i].sA, g[i].lda, g[i].B + h * g[i].sB,
                   g[i].ldb, ref + g[i].dout + h * g[i].sD, g[i].ldd, g[i].alpha, g[i].acc);
        sr_gemm_key k = sr_cuda_rm_key(g[i].ta, g[i].tb, g[i].M, g[i].N, g[i].K, g[i].lda, g[i].sA, g[i].ldb, g[i].sB,
                                       g[i].ldd, g[i].sD, NH, false, g[i].acc, false);
        emulate(&k, g[i].B, g[i].A, got + g[i].dout, g[i].alpha);
        tap_ok(maxdiff(got, ref, total) < 1e-5, "attention T=%d C=%d NH=%d: %s, batched over heads", T, C, NH,
               g[i].what);
    }
    free(qkv), free(dy), free(att), free(got), free(ref);
}

/* every plan of a model's shapes builds and reads back as asked */
static void plans(const char *name, int B, int T, int C, int NH, int Vp) {
    int N = B * T, hs = C / NH, bad = 0, built = 0;
    long long C3 = 3ll * C, TT = (long long)T * T;
    char first[512] = "";
    for (int bf16 = 0; bf16 <= 1; bf16++) {
        sr_gemm_key keys[16];
        const char *expect_types[16];
        int nk = 0;
        const int OCs[][2] = {{C, 3 * C}, {C, C}, {C, 4 * C}, {4 * C, C}, {C, Vp}};
        for (int l = 0; l < 5; l++) {
            int c = OCs[l][0], oc = OCs[l][1];
            keys[nk] = sr_cuda_rm_key(0, 1, N, oc, c, c, 0, c, 0, oc, 0, 1, bf16, false, false);
            keys[nk].bias = l < 4; /* the classifier has no bias */
            expect_types[nk++] = bf16 ? "bf16,bf16->bf16" : "f32,f32->f32";
            keys[nk] = sr_cuda_rm_key(1, 0, oc, c, N, oc, 0, c, 0, c, 0, 1, bf16, true, true);
            expect_types[nk++] = bf16 ? "bf16,bf16->f32" : "f32,f32->f32";
        }
        keys[nk] = sr_cuda_rm_key(0, 1, T, T, hs, C3, hs, C3, hs, T, TT, NH, bf16, false, false);
        expect_types[nk++] = bf16 ? "bf16,bf16->bf16" : "f32,f32->f32";
        keys[nk] = sr_cuda_rm_key(1, 0, T, hs, T, T, TT, C, hs, C3, hs, NH, bf16, true, false);
        expect_types[nk++] = bf16 ? "bf16,bf16->bf16" : "f32,f32->f32";
        for (int i = 0; i < nk; i++) {
            keys[i].align_a = keys[i].align_b = keys[i].align_d = 16;
            sr_gemm_plan p;
            char d[512];
            sr_status st = sr_gemm_plan_build(&p, &keys[i], (size_t)32 << 20);
            if (st == SR_OK)
                st = sr_gemm_plan_describe(&p, d, sizeof d);
            bool ok = st == SR_OK && strstr(d, expect_types[i]) && strstr(d, "compute 32F scale f32") &&
                      strstr(d, keys[i].bias ? "epilogue BIAS" : "epilogue DEFAULT") &&
                      strstr(d, keys[i].transa ? "transa T" : "transa N") &&
                      strstr(d, keys[i].transb ? "transb T" : "transb N");
            char want[64];
            snprintf(want, sizeof want, "batch %d,", keys[i].batch);
            ok = ok && strstr(d, want);
            if (!ok && !bad++)
                snprintf(first, sizeof first, "%s", st == SR_OK ? d : sr_error_message());
            built += st == SR_OK;
            sr_gemm_plan_free(&p);
        }
    }
    tap_ok(bad == 0,
           "%s: %d cuBLASLt plans (both dtypes, every layout, transpose and epilogue) build and read back as "
           "asked%s%s",
           name, built, bad ? ": first mismatch " : "", first);
}

int main(void) {
    int count = 0;
    if (cudaGetDeviceCount(&count) == cudaSuccess && count > 0 && cudaSetDevice(0) == cudaSuccess &&
        cublasLtCreate(&lt) == CUBLAS_STATUS_SUCCESS && cudaMalloc(&lt_ws, SR_CUDA_LT_WORKSPACE_BYTES) == cudaSuccess)
        gpu = sr_gemm_cache_new(lt, lt_ws, SR_CUDA_LT_WORKSPACE_BYTES);
    (void)cudaGetLastError();
    tap_diag("part 1's GEMMs run %s", gpu ? "through sr_gemm_run and cublasLtMatmul on device 0"
                                          : "through the host emulation of cuBLASLt (no device)");
    linear(6, 8, 12);
    linear(5, 16, 3);
    attention(5, 8, 2);
    attention(4, 12, 3);
    plans("gpt2-124m B=16 T=1024", 16, 1024, 768, 12, 50304);
    plans("tiny B=4 T=64", 4, 64, 64, 4, 320);
    sr_gemm_key k = sr_cuda_rm_key(0, 1, 8, 8, 8, 8, 0, 8, 0, 8, 0, 1, true, false, false);
    k.align_a = sr_gemm_align((void *)(uintptr_t)0x1000);
    k.align_b = sr_gemm_align((void *)(uintptr_t)0x1006);
    tap_ok(k.align_a == 16 && k.align_b == 2,
           "pointer alignment for the plan: 16 at most, else the largest power of 2");
    /* plan keys compare field by field: padding bytes do not count */
    sr_gemm_key a, b;
    memset(&a, 0x00, sizeof a);
    memset(&b, 0xa5, sizeof b); /* garbage in b's padding */
    a = sr_cuda_rm_key(0, 1, 8, 16, 32, 32, 0, 32, 0, 16, 0, 1, true, false, false);
    sr_gemm_key fields = a;
    b.transa = fields.transa, b.transb = fields.transb, b.m = fields.m, b.n = fields.n, b.k = fields.k;
    b.lda = fields.lda, b.ldb = fields.ldb, b.ldd = fields.ldd, b.batch = fields.batch, b.sa = fields.sa;
    b.sb = fields.sb, b.sd = fields.sd, b.ab_bf16 = fields.ab_bf16, b.d_f32 = fields.d_f32, b.bias = fields.bias;
    b.accumulate = fields.accumulate, b.align_a = fields.align_a, b.align_b = fields.align_b;
    b.align_d = fields.align_d, b.align_bias = fields.align_bias;
    bool same = sr_gemm_key_equal(&a, &b);
    b.align_bias = 16;
    bool differs_bias = !sr_gemm_key_equal(&a, &b);
    b.align_bias = a.align_bias, b.ldd = a.ldd + 1;
    tap_ok(same && differs_bias && !sr_gemm_key_equal(&a, &b),
           "plan keys compare field by field: equal despite different padding bytes, unequal on the bias alignment "
           "or a leading dimension");
    tap_ok(sr_cuda_sticky(cudaErrorIllegalAddress) && sr_cuda_sticky(cudaErrorLaunchFailure) &&
               sr_cuda_sticky(cudaErrorECCUncorrectable) && sr_cuda_sticky(cudaErrorUnknown) &&
               !sr_cuda_sticky(cudaErrorNotReady) && !sr_cuda_sticky(cudaErrorMemoryAllocation) &&
               !sr_cuda_sticky(cudaErrorInvalidValue),
           "sticky CUDA errors (illegal address, launch failure, ECC, unknown) end the process; NotReady, "
           "allocation failures and invalid values do not");
    tap_ok(sr_cuda_status(cudaErrorECCUncorrectable) == SR_ERR_PEER &&
               sr_cuda_status(cudaErrorNoDevice) == SR_ERR_PEER &&
               sr_cuda_status(cudaErrorIllegalAddress) == SR_ERR_INTERNAL &&
               sr_cuda_status(cudaErrorLaunchFailure) == SR_ERR_INTERNAL,
           "hardware-class CUDA errors (ECC, device lost) are 69, others (a kernel fault) 70");
    if (gpu) {
        tap_ok(gpu_runs >= 16 && gpu_failed == 0 && sr_gemm_cache_size(gpu) > 0,
               "part 1's %d GEMMs ran through sr_gemm_run and cublasLtMatmul (%d plans, %d failed)", gpu_runs,
               sr_gemm_cache_size(gpu), gpu_failed);
        sr_gemm_cache_free(gpu);
        cudaFree(lt_ws);
        cublasLtDestroy(lt);
    }
    return tap_done();
}
