/* gemm_cuda.c — cuBLASLt plans, their cache and the GEMM call; see
 * gemm_cuda.h.  Written by hand only where cuBLASLt leaves it to the
 * caller: the key -> descriptor mapping and the cache. */
#include "srconfig.h"

#include "gemm_cuda.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../kernels/sr_cuda.h"
#include "cuda_backend.h"
#include "mem.h"

#define LT(call)                                                                                                       \
    do {                                                                                                               \
        cublasStatus_t st_ = (call);                                                                                   \
        if (st_ != CUBLAS_STATUS_SUCCESS)                                                                              \
            return sr_error(SR_ERR_INTERNAL, "cuBLASLt: %s failed: %s", #call, cublasLtGetStatusString(st_));          \
    } while (0)

static cudaDataType_t ab_type(const sr_gemm_key *k) { return k->ab_bf16 ? CUDA_R_16BF : CUDA_R_32F; }
static cudaDataType_t d_type(const sr_gemm_key *k) { return k->ab_bf16 && !k->d_f32 ? CUDA_R_16BF : CUDA_R_32F; }

static sr_status layout(cublasLtMatrixLayout_t *l, cudaDataType_t t, int rows, int cols, long long ld, int batch,
                        long long stride) {
    LT(cublasLtMatrixLayoutCreate(l, t, (uint64_t)rows, (uint64_t)cols, ld));
    if (batch > 1) {
        int32_t b = batch;
        int64_t s = stride;
        LT(cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &b, sizeof b));
        LT(cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &s, sizeof s));
    }
    return SR_OK;
}

sr_status sr_gemm_plan_build(sr_gemm_plan *p, const sr_gemm_key *k, size_t workspace_bytes) {
    memset(p, 0, sizeof *p);
    p->key = *k;
    LT(cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasOperation_t ta = k->transa ? CUBLAS_OP_T : CUBLAS_OP_N, tb = k->transb ? CUBLAS_OP_T : CUBLAS_OP_N;
    LT(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    LT(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    cublasLtEpilogue_t epi = k->bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
    LT(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
    if (k->bias) {
        int32_t bt = d_type(k);
        LT(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt));
    }
    sr_status st = layout(&p->a, ab_type(k), k->transa ? k->k : k->m, k->transa ? k->m : k->k, k->lda, k->batch, k->sa);
    if (st == SR_OK)
        st = layout(&p->b, ab_type(k), k->transb ? k->n : k->k, k->transb ? k->k : k->n, k->ldb, k->batch, k->sb);
    if (st == SR_OK)
        st = layout(&p->d, d_type(k), k->m, k->n, k->ldd, k->batch, k->sd);
    if (st != SR_OK)
        return st;
    LT(cublasLtMatmulPreferenceCreate(&p->pref));
    uint64_t ws = workspace_bytes;
    LT(cublasLtMatmulPreferenceSetAttribute(p->pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
    uint32_t al[4] = {(uint32_t)k->align_a, (uint32_t)k->align_b, (uint32_t)k->align_d, (uint32_t)k->align_d};
    LT(cublasLtMatmulPreferenceSetAttribute(p->pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al[0], 4));
    LT(cublasLtMatmulPreferenceSetAttribute(p->pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al[1], 4));
    LT(cublasLtMatmulPreferenceSetAttribute(p->pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al[2], 4));
    LT(cublasLtMatmulPreferenceSetAttribute(p->pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al[3], 4));
    return SR_OK;
}

static const char *type_name(int32_t t) {
    return t == CUDA_R_16BF ? "bf16" : t == CUDA_R_32F ? "f32" : t == CUDA_R_16F ? "f16" : "?";
}

static sr_status layout_get(cublasLtMatrixLayout_t l, int32_t *type, uint64_t *rows, uint64_t *cols, int64_t *ld,
                            int32_t *batch) {
    size_t w;
    *batch = 1;
    LT(cublasLtMatrixLayoutGetAttribute(l, CUBLASLT_MATRIX_LAYOUT_TYPE, type, sizeof *type, &w));
    LT(cublasLtMatrixLayoutGetAttribute(l, CUBLASLT_MATRIX_LAYOUT_ROWS, rows, sizeof *rows, &w));
    LT(cublasLtMatrixLayoutGetAttribute(l, CUBLASLT_MATRIX_LAYOUT_COLS, cols, sizeof *cols, &w));
    LT(cublasLtMatrixLayoutGetAttribute(l, CUBLASLT_MATRIX_LAYOUT_LD, ld, sizeof *ld, &w));
    LT(cublasLtMatrixLayoutGetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, batch, sizeof *batch, &w));
    return SR_OK;
}

sr_status sr_gemm_plan_describe(const sr_gemm_plan *p, char *buf, size_t n) {
    size_t w;
    int32_t compute, scale, ta, tb, epi, ty[3], batch[3];
    uint64_t rows[3], cols[3];
    int64_t ld[3];
    LT(cublasLtMatmulDescGetAttribute(p->op, CUBLASLT_MATMUL_DESC_COMPUTE_TYPE, &compute, sizeof compute, &w));
    LT(cublasLtMatmulDescGetAttribute(p->op, CUBLASLT_MATMUL_DESC_SCALE_TYPE, &scale, sizeof scale, &w));
    LT(cublasLtMatmulDescGetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta, &w));
    LT(cublasLtMatmulDescGetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb, &w));
    LT(cublasLtMatmulDescGetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi, &w));
    cublasLtMatrixLayout_t ls[3] = {p->a, p->b, p->d};
    for (int i = 0; i < 3; i++) {
        sr_status st = layout_get(ls[i], &ty[i], &rows[i], &cols[i], &ld[i], &batch[i]);
        if (st != SR_OK)
            return st;
    }
    snprintf(buf, n,
             "A %llux%llu ld %lld, B %llux%llu ld %lld, D %llux%llu ld %lld, batch %d, transa %s transb %s, types "
             "%s,%s->%s, compute %s scale %s, epilogue %s",
             (unsigned long long)rows[0], (unsigned long long)cols[0], (long long)ld[0], (unsigned long long)rows[1],
             (unsigned long long)cols[1], (long long)ld[1], (unsigned long long)rows[2], (unsigned long long)cols[2],
             (long long)ld[2], (int)batch[2], ta == CUBLAS_OP_T ? "T" : "N", tb == CUBLAS_OP_T ? "T" : "N",
             type_name(ty[0]), type_name(ty[1]), type_name(ty[2]), compute == CUBLAS_COMPUTE_32F ? "32F" : "other",
             type_name(scale),
             epi == CUBLASLT_EPILOGUE_BIAS      ? "BIAS"
             : epi == CUBLASLT_EPILOGUE_DEFAULT ? "DEFAULT"
                                                : "?");
    return SR_OK;
}

static void key_shape(const sr_gemm_key *k, char *buf, size_t n) {
    snprintf(buf, n, "m %d n %d k %d trans %c%c ld %lld/%lld/%lld batch %d %s%s%s", k->m, k->n, k->k,
             k->transa ? 'T' : 'N', k->transb ? 'T' : 'N', k->lda, k->ldb, k->ldd, k->batch,
             k->ab_bf16 ? "bf16" : "f32", k->d_f32 && k->ab_bf16 ? "->f32" : "", k->bias ? " +bias" : "");
}

/* Chooses the algorithm (cublasLtMatmulAlgoGetHeuristic; needs a GPU).
 * SR_ERR_INTERNAL naming the shape when cuBLASLt offers none. */
static sr_status plan_choose(sr_gemm_plan *p, cublasLtHandle_t h) {
    cublasLtMatmulHeuristicResult_t r;
    int found = 0;
    cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(h, p->op, p->a, p->b, p->d, p->d, p->pref, 1, &r, &found);
    if (st != CUBLAS_STATUS_SUCCESS || found == 0) {
        char shape[256];
        key_shape(&p->key, shape, sizeof shape);
        return sr_error(SR_ERR_INTERNAL, "cuBLASLt offers no algorithm for the GEMM %s (%s)", shape,
                        st != CUBLAS_STATUS_SUCCESS ? cublasLtGetStatusString(st) : "no result");
    }
    p->algo = r.algo;
    p->have_algo = true;
    return SR_OK;
}

void sr_gemm_plan_free(sr_gemm_plan *p) {
    if (p->pref)
        cublasLtMatmulPreferenceDestroy(p->pref);
    if (p->a)
        cublasLtMatrixLayoutDestroy(p->a);
    if (p->b)
        cublasLtMatrixLayoutDestroy(p->b);
    if (p->d)
        cublasLtMatrixLayoutDestroy(p->d);
    if (p->op)
        cublasLtMatmulDescDestroy(p->op);
    memset(p, 0, sizeof *p);
}

int sr_gemm_align(const void *p) {
    uintptr_t a = (uintptr_t)p;
    int al = 16;
    while (al > 1 && a % (uintptr_t)al)
        al /= 2;
    return al;
}

struct sr_gemm_cache {
    cublasLtHandle_t h;
    void *ws;
    size_t ws_bytes;
    int n, cap;
    sr_gemm_plan *plans;
};

sr_gemm_cache *sr_gemm_cache_new(cublasLtHandle_t h, void *workspace, size_t workspace_bytes) {
    sr_gemm_cache *c = sr_calloc(1, sizeof *c);
    if (c) {
        c->h = h;
        c->ws = workspace;
        c->ws_bytes = workspace_bytes;
    }
    return c;
}

void sr_gemm_cache_free(sr_gemm_cache *c) {
    if (!c)
        return;
    for (int i = 0; i < c->n; i++)
        sr_gemm_plan_free(&c->plans[i]);
    free(c->plans);
    free(c);
}

int sr_gemm_cache_size(const sr_gemm_cache *c) { return c ? c->n : 0; }

bool sr_gemm_key_equal(const sr_gemm_key *a, const sr_gemm_key *b) {
    return a->transa == b->transa && a->transb == b->transb && a->m == b->m && a->n == b->n && a->k == b->k &&
           a->lda == b->lda && a->ldb == b->ldb && a->ldd == b->ldd && a->batch == b->batch && a->sa == b->sa &&
           a->sb == b->sb && a->sd == b->sd && a->ab_bf16 == b->ab_bf16 && a->d_f32 == b->d_f32 && a->bias == b->bias &&
           a->accumulate == b->accumulate && a->align_a == b->align_a && a->align_b == b->align_b &&
           a->align_d == b->align_d && a->align_bias == b->align_bias;
}

static sr_status set_bias(sr_gemm_plan *p, const void *bias) {
    LT(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
    return SR_OK;
}

sr_status sr_gemm_run(sr_gemm_cache *c, cudaStream_t stream, const sr_gemm_key *k, const void *A, const void *B,
                      void *D, const void *bias, float alpha, sr_ledger_family family) {
    if (sr_ledger_bound())
        sr_ledger_gemm(family, k->m, k->n, k->k, k->batch, k->ab_bf16 ? 2 : 4, d_type(k) == CUDA_R_16BF ? 2 : 4,
                       k->accumulate);
    if (sr_cuda_dry())
        return SR_OK;
    sr_gemm_plan *p = NULL;
    for (int i = 0; i < c->n && !p; i++)
        if (sr_gemm_key_equal(&c->plans[i].key, k))
            p = &c->plans[i];
    if (!p) {
        if (c->n == c->cap) {
            int cap = c->cap ? 2 * c->cap : 32;
            sr_gemm_plan *np = sr_realloc(c->plans, (size_t)cap * sizeof *np);
            if (!np)
                return sr_error_oom("the GEMM plan cache");
            c->plans = np;
            c->cap = cap;
        }
        p = &c->plans[c->n];
        sr_status st = sr_gemm_plan_build(p, k, c->ws_bytes);
        if (st == SR_OK && k->bias) /* the heuristic reads the bias pointer's alignment */
            st = set_bias(p, bias);
        if (st == SR_OK)
            st = plan_choose(p, c->h);
        if (st != SR_OK) {
            sr_gemm_plan_free(p);
            return st;
        }
        c->n++;
    }
    if (k->bias) {
        sr_status st = set_bias(p, bias);
        if (st != SR_OK)
            return st;
    }
    float beta = k->accumulate ? 1.0f : 0.0f;
    sr_cuda_prof_begin(sr_cuda_bound(), stream, sr_ledger_gemm_row(family));
    cublasStatus_t st = cublasLtMatmul(c->h, p->op, &alpha, A, p->a, B, p->b, &beta, D, p->d, D, p->d, &p->algo, c->ws,
                                       c->ws_bytes, stream);
    sr_cuda_prof_end(sr_cuda_bound(), stream);
    if (st != CUBLAS_STATUS_SUCCESS) {
        char shape[256];
        key_shape(k, shape, sizeof shape);
        return sr_error(SR_ERR_INTERNAL, "cuBLASLt matmul %s failed: %s", shape, cublasLtGetStatusString(st));
    }
    return SR_OK;
}
