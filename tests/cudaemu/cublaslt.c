/* cublaslt.c — the emulated cuBLASLt: handles, matmul descriptors, matrix
 * layouts, preferences, the heuristic and cublasLtMatmul, from the
 * cuBLASLt documentation's definitions, with the toolkit's declarations
 * (cublasLt.h); see tests/cudaemu/README.
 *
 * The maths is the documented one, not gemm_cuda.c's: with op(X) = X or
 * its transpose (CUBLASLT_MATMUL_DESC_TRANSA/B), column-major layouts of
 * `rows` x `cols` with leading dimension `ld`, and per batch b the
 * matrices at b x CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET elements,
 *     D = alpha op(A) op(B) + beta C  (+ bias[i] in row i with
 *     CUBLASLT_EPILOGUE_BIAS),
 * A and B f32 or bf16 (widened exactly), products summed in f32 by
 * OpenBLAS's SGEMM (an independent implementation of the same maths), alpha
 * and beta f32 on the host (the default pointer mode),
 * D stored f32 or bf16 (round to nearest even).  The heuristic offers one
 * algorithm when the shapes agree; it needs no workspace and records the
 * minimum alignments the preference promised, which cublasLtMatmul then
 * holds the pointers to (CUBLAS_STATUS_INVALID_VALUE otherwise).  The
 * product runs on the stream (cudaemu_enqueue), in stream order. */
#include "srconfig.h"

#include <cblas.h>
#include <cublasLt.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cudaemu.h"

typedef struct {
    int handle_magic;
} lt_handle;

typedef struct {
    cublasComputeType_t compute;
    cudaDataType_t scale, bias_type;
    int32_t transa, transb;
    uint32_t epilogue;
    const void *bias;
    int32_t pointer_mode;
} lt_desc;

typedef struct {
    cudaDataType_t type;
    uint64_t rows, cols;
    int64_t ld, stride;
    int32_t batch, order;
} lt_layout;

typedef struct {
    uint64_t max_ws;
    uint32_t align[4]; /* A, B, C, D */
} lt_pref;

/* what an algorithm of the heuristic carries (in cublasLtMatmulAlgo_t) */
typedef struct {
    uint32_t magic;
    uint32_t align[4];
} lt_algo;
#define ALGO_MAGIC 0x4c54454du

cublasStatus_t cublasLtCreate(cublasLtHandle_t *h) {
    if (!h)
        return CUBLAS_STATUS_INVALID_VALUE;
    lt_handle *x = calloc(1, sizeof *x);
    if (!x)
        return CUBLAS_STATUS_ALLOC_FAILED;
    *h = (cublasLtHandle_t)x;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtDestroy(cublasLtHandle_t h) {
    free(h);
    return CUBLAS_STATUS_SUCCESS;
}

const char *cublasLtGetStatusString(cublasStatus_t s) {
    switch (s) {
    case CUBLAS_STATUS_SUCCESS:
        return "success";
    case CUBLAS_STATUS_NOT_INITIALIZED:
        return "the library was not initialized";
    case CUBLAS_STATUS_ALLOC_FAILED:
        return "the resource allocation failed";
    case CUBLAS_STATUS_INVALID_VALUE:
        return "an invalid numeric value was used as an argument";
    case CUBLAS_STATUS_NOT_SUPPORTED:
        return "the functionality requested is not supported";
    case CUBLAS_STATUS_EXECUTION_FAILED:
        return "the GPU program failed to execute";
    default:
        return "unknown status";
    }
}

const char *cublasLtGetStatusName(cublasStatus_t s) {
    switch (s) {
    case CUBLAS_STATUS_SUCCESS:
        return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_INVALID_VALUE:
        return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_NOT_SUPPORTED:
        return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_ALLOC_FAILED:
        return "CUBLAS_STATUS_ALLOC_FAILED";
    default:
        return "CUBLAS_STATUS_UNKNOWN";
    }
}

/* ------------------------------------------------------------------------ */
/* attributes: one table of (attribute, field, size) per object */

typedef struct {
    int attr;
    size_t off, size;
} field;

static cublasStatus_t set_field(void *obj, const field *f, int n, int attr, const void *buf, size_t size) {
    for (int i = 0; i < n; i++)
        if (f[i].attr == attr) {
            if (!buf || size != f[i].size)
                return CUBLAS_STATUS_INVALID_VALUE;
            memcpy((char *)obj + f[i].off, buf, size);
            return CUBLAS_STATUS_SUCCESS;
        }
    return CUBLAS_STATUS_INVALID_VALUE;
}

static cublasStatus_t get_field(const void *obj, const field *f, int n, int attr, void *buf, size_t size,
                                size_t *written) {
    for (int i = 0; i < n; i++)
        if (f[i].attr == attr) {
            if (written)
                *written = f[i].size;
            if (size == 0 && !buf)
                return CUBLAS_STATUS_SUCCESS;
            if (!buf || size < f[i].size)
                return CUBLAS_STATUS_INVALID_VALUE;
            memcpy(buf, (const char *)obj + f[i].off, f[i].size);
            return CUBLAS_STATUS_SUCCESS;
        }
    return CUBLAS_STATUS_INVALID_VALUE;
}

#define F(attr, type, member)                                                                                          \
    { attr, offsetof(type, member), sizeof(((type *)0)->member) }
static const field desc_fields[] = {
    F(CUBLASLT_MATMUL_DESC_COMPUTE_TYPE, lt_desc, compute),
    F(CUBLASLT_MATMUL_DESC_SCALE_TYPE, lt_desc, scale),
    F(CUBLASLT_MATMUL_DESC_POINTER_MODE, lt_desc, pointer_mode),
    F(CUBLASLT_MATMUL_DESC_TRANSA, lt_desc, transa),
    F(CUBLASLT_MATMUL_DESC_TRANSB, lt_desc, transb),
    F(CUBLASLT_MATMUL_DESC_EPILOGUE, lt_desc, epilogue),
    F(CUBLASLT_MATMUL_DESC_BIAS_POINTER, lt_desc, bias),
    F(CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, lt_desc, bias_type),
};
static const field layout_fields[] = {
    F(CUBLASLT_MATRIX_LAYOUT_TYPE, lt_layout, type),
    F(CUBLASLT_MATRIX_LAYOUT_ORDER, lt_layout, order),
    F(CUBLASLT_MATRIX_LAYOUT_ROWS, lt_layout, rows),
    F(CUBLASLT_MATRIX_LAYOUT_COLS, lt_layout, cols),
    F(CUBLASLT_MATRIX_LAYOUT_LD, lt_layout, ld),
    F(CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, lt_layout, batch),
    F(CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, lt_layout, stride),
};
static const field pref_fields[] = {
    F(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, lt_pref, max_ws),
    F(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, lt_pref, align[0]),
    F(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, lt_pref, align[1]),
    F(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, lt_pref, align[2]),
    F(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, lt_pref, align[3]),
};
#define N(a) ((int)(sizeof a / sizeof a[0]))

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *d, cublasComputeType_t compute, cudaDataType_t scale) {
    if (!d)
        return CUBLAS_STATUS_INVALID_VALUE;
    if (compute != CUBLAS_COMPUTE_32F || scale != CUDA_R_32F)
        return CUBLAS_STATUS_NOT_SUPPORTED; /* the emulator's scope: what shardrun asks for */
    lt_desc *x = calloc(1, sizeof *x);
    if (!x)
        return CUBLAS_STATUS_ALLOC_FAILED;
    x->compute = compute;
    x->scale = scale;
    x->transa = x->transb = CUBLAS_OP_N;
    x->epilogue = CUBLASLT_EPILOGUE_DEFAULT;
    x->bias_type = CUDA_R_32F;
    *d = (cublasLtMatmulDesc_t)x;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d) {
    free(d);
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t a, const void *buf,
                                              size_t size) {
    return d ? set_field(d, desc_fields, N(desc_fields), a, buf, size) : CUBLAS_STATUS_INVALID_VALUE;
}

cublasStatus_t cublasLtMatmulDescGetAttribute(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t a, void *buf,
                                              size_t size, size_t *written) {
    return d ? get_field(d, desc_fields, N(desc_fields), a, buf, size, written) : CUBLAS_STATUS_INVALID_VALUE;
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *l, cudaDataType type, uint64_t rows, uint64_t cols,
                                          int64_t ld) {
    if (!l)
        return CUBLAS_STATUS_INVALID_VALUE;
    if (type != CUDA_R_32F && type != CUDA_R_16BF)
        return CUBLAS_STATUS_NOT_SUPPORTED;
    lt_layout *x = calloc(1, sizeof *x);
    if (!x)
        return CUBLAS_STATUS_ALLOC_FAILED;
    *x = (lt_layout){type, rows, cols, ld, 0, 1, CUBLASLT_ORDER_COL};
    *l = (cublasLtMatrixLayout_t)x;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l) {
    free(l);
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t l, cublasLtMatrixLayoutAttribute_t a,
                                                const void *buf, size_t size) {
    return l ? set_field(l, layout_fields, N(layout_fields), a, buf, size) : CUBLAS_STATUS_INVALID_VALUE;
}

cublasStatus_t cublasLtMatrixLayoutGetAttribute(cublasLtMatrixLayout_t l, cublasLtMatrixLayoutAttribute_t a, void *buf,
                                                size_t size, size_t *written) {
    return l ? get_field(l, layout_fields, N(layout_fields), a, buf, size, written) : CUBLAS_STATUS_INVALID_VALUE;
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *p) {
    if (!p)
        return CUBLAS_STATUS_INVALID_VALUE;
    lt_pref *x = calloc(1, sizeof *x);
    if (!x)
        return CUBLAS_STATUS_ALLOC_FAILED;
    for (int i = 0; i < 4; i++)
        x->align[i] = 256; /* the documented default: pointers 256-byte aligned */
    *p = (cublasLtMatmulPreference_t)x;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p) {
    free(p);
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p,
                                                    cublasLtMatmulPreferenceAttributes_t a, const void *buf,
                                                    size_t size) {
    return p ? set_field(p, pref_fields, N(pref_fields), a, buf, size) : CUBLAS_STATUS_INVALID_VALUE;
}

/* ------------------------------------------------------------------------ */
/* shapes, the heuristic and the product */

/* op(X)'s rows and columns from its layout and transpose flag. */
static void op_dims(const lt_layout *l, int32_t trans, uint64_t *r, uint64_t *c) {
    *r = trans == CUBLAS_OP_N ? l->rows : l->cols;
    *c = trans == CUBLAS_OP_N ? l->cols : l->rows;
}

/* Whether the descriptor and layouts describe one product: m x k times
 * k x n into m x n, column-major, leading dimensions at least the rows,
 * batches agreeing. */
static cublasStatus_t check_shapes(const lt_desc *d, const lt_layout *a, const lt_layout *b, const lt_layout *c,
                                   const lt_layout *dd) {
    if (!d || !a || !b || !c || !dd)
        return CUBLAS_STATUS_INVALID_VALUE;
    uint64_t m, k, k2, n;
    op_dims(a, d->transa, &m, &k);
    op_dims(b, d->transb, &k2, &n);
    const lt_layout *all[4] = {a, b, c, dd};
    for (int i = 0; i < 4; i++)
        if (all[i]->order != CUBLASLT_ORDER_COL || all[i]->ld < (int64_t)all[i]->rows || all[i]->batch < 1 ||
            all[i]->batch != dd->batch)
            return CUBLAS_STATUS_INVALID_VALUE;
    if (k != k2 || c->rows != m || c->cols != n || dd->rows != m || dd->cols != n || c->type != dd->type ||
        a->type != b->type)
        return CUBLAS_STATUS_INVALID_VALUE;
    if (d->epilogue != CUBLASLT_EPILOGUE_DEFAULT && d->epilogue != CUBLASLT_EPILOGUE_BIAS)
        return CUBLAS_STATUS_NOT_SUPPORTED;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t h, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t A,
                                              cublasLtMatrixLayout_t B, cublasLtMatrixLayout_t C,
                                              cublasLtMatrixLayout_t D, cublasLtMatmulPreference_t pref, int requested,
                                              cublasLtMatmulHeuristicResult_t results[], int *returned) {
    if (!h || !pref || requested < 1 || !results || !returned)
        return CUBLAS_STATUS_INVALID_VALUE;
    *returned = 0;
    cublasStatus_t st = check_shapes((lt_desc *)desc, (lt_layout *)A, (lt_layout *)B, (lt_layout *)C, (lt_layout *)D);
    if (st != CUBLAS_STATUS_SUCCESS)
        return st;
    const lt_pref *p = (const lt_pref *)pref;
    memset(&results[0], 0, sizeof results[0]);
    lt_algo al = {ALGO_MAGIC, {p->align[0], p->align[1], p->align[2], p->align[3]}};
    memcpy(results[0].algo.data, &al, sizeof al);
    results[0].workspaceSize = 0; /* within any max workspace */
    results[0].state = CUBLAS_STATUS_SUCCESS;
    results[0].wavesCount = 1.0f;
    *returned = 1;
    return CUBLAS_STATUS_SUCCESS;
}

static float load(const void *p, cudaDataType_t t, size_t i) {
    return t == CUDA_R_16BF ? cudaemu_bf16_to_f32(((const uint16_t *)p)[i]) : ((const float *)p)[i];
}

typedef struct {
    lt_desc d;
    lt_layout a, b, c, dd;
    float alpha, beta;
    const void *A, *B, *C;
    void *D;
} product;

/* op(X) of a layout as a row-major f32 matrix of r rows and c columns
 * (bf16 widened exactly): row i of op(A) is output row i's operand, row j
 * of op(B)^T output column j's. */
static void pack(float *dst, const char *src, cudaDataType_t t, uint64_t ld, int trans_rows, uint64_t r, uint64_t c) {
    for (uint64_t i = 0; i < r; i++)
        for (uint64_t l = 0; l < c; l++)
            dst[i * c + l] = load(src, t, trans_rows ? l + i * ld : i + l * ld);
}

/* D = alpha op(A) op(B) + beta C (+ bias), one batch after another.  The
 * products are summed by OpenBLAS's SGEMM over packed f32 copies, a
 * slice of D's columns per OpenMP thread (what cuBLASLt's kernels sum in
 * what order is not documented; the documented maths is the product), and
 * the epilogue applied in f32 before D is stored (bf16: rounded to nearest
 * even). */
static void run_product(void *arg) {
    const product *x = arg;
    uint64_t m, k, k2, n;
    op_dims(&x->a, x->d.transa, &m, &k);
    op_dims(&x->b, x->d.transb, &k2, &n);
    size_t ea = x->a.type == CUDA_R_16BF ? 2 : 4, ec = x->c.type == CUDA_R_16BF ? 2 : 4;
    float *Ap = malloc((m * k + n * k + m * n) * sizeof(float) + 4);
    if (!Ap) {
        fprintf(stderr, "cudaemu: cublasLtMatmul: no host memory for a %llu x %llu x %llu product\n",
                (unsigned long long)m, (unsigned long long)n, (unsigned long long)k);
        abort();
    }
    float *Bp = Ap + m * k, *S = Bp + n * k;
    for (int32_t bt = 0; bt < x->dd.batch; bt++) {
        const char *A = (const char *)x->A + (size_t)bt * x->a.stride * ea;
        const char *B = (const char *)x->B + (size_t)bt * x->b.stride * ea;
        const char *C = (const char *)x->C + (size_t)bt * x->c.stride * ec;
        char *D = (char *)x->D + (size_t)bt * x->dd.stride * ec;
        pack(Ap, A, x->a.type, (uint64_t)x->a.ld, x->d.transa != CUBLAS_OP_N, m, k);
        pack(Bp, B, x->b.type, (uint64_t)x->b.ld, x->d.transb == CUBLAS_OP_N, n, k);
        /* S[j][i] = sum_l Bp[j][l] Ap[i][l]: column j of D is row j of S */
        int nt = n >= 64 && m * n * k >= (1u << 18) ? omp_get_max_threads() : 1;
#pragma omp parallel for num_threads(nt) schedule(static)
        for (int t = 0; t < nt; t++) {
            uint64_t lo = n * (uint64_t)t / (uint64_t)nt, hi = n * (uint64_t)(t + 1) / (uint64_t)nt;
            if (hi > lo && m && k)
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)(hi - lo), (int)m, (int)k, 1.0f, Bp + lo * k,
                            (int)k, Ap, (int)k, 0.0f, S + lo * m, (int)m);
            else if (hi > lo)
                memset(S + lo * m, 0, (hi - lo) * m * sizeof(float));
        }
        for (uint64_t j = 0; j < n; j++)
            for (uint64_t i = 0; i < m; i++) {
                float v = x->alpha * S[j * m + i];
                if (x->beta != 0.0f)
                    v += x->beta * load(C, x->c.type, i + j * (size_t)x->c.ld);
                if (x->d.epilogue == CUBLASLT_EPILOGUE_BIAS)
                    v += load(x->d.bias, x->d.bias_type, i);
                size_t id = i + j * (size_t)x->dd.ld;
                if (x->dd.type == CUDA_R_16BF)
                    ((uint16_t *)D)[id] = cudaemu_f32_to_bf16(v);
                else
                    ((float *)D)[id] = v;
            }
    }
    free(Ap);
}

/* A layout's element size and the bytes its matrices span. */
static size_t A_elem(const lt_layout *l) { return l->type == CUDA_R_16BF ? 2 : 4; }
static size_t extent(const lt_layout *l, size_t e) {
    if (!l->rows || !l->cols)
        return 0;
    return ((size_t)(l->batch > 1 ? l->batch - 1 : 0) * (size_t)l->stride + (size_t)(l->cols - 1) * (size_t)l->ld +
            (size_t)l->rows) *
           e;
}

static int aligned(const void *p, uint32_t a) { return a == 0 || (uintptr_t)p % a == 0; }

cublasStatus_t cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t desc, const void *alpha, const void *A,
                              cublasLtMatrixLayout_t Adesc, const void *B, cublasLtMatrixLayout_t Bdesc,
                              const void *beta, const void *C, cublasLtMatrixLayout_t Cdesc, void *D,
                              cublasLtMatrixLayout_t Ddesc, const cublasLtMatmulAlgo_t *algo, void *workspace,
                              size_t workspace_bytes, cudaStream_t stream) {
    (void)workspace;
    (void)workspace_bytes;
    cudaemu_count(CUDAEMU_OP_MATMUL);
    const lt_desc *d = (const lt_desc *)desc;
    if (!h || !alpha || !beta || !A || !B || !D)
        return CUBLAS_STATUS_INVALID_VALUE;
    cublasStatus_t st = check_shapes(d, (lt_layout *)Adesc, (lt_layout *)Bdesc, (lt_layout *)Cdesc, (lt_layout *)Ddesc);
    if (st != CUBLAS_STATUS_SUCCESS)
        return st;
    if (d->pointer_mode != CUBLASLT_POINTER_MODE_HOST)
        return CUBLAS_STATUS_NOT_SUPPORTED;
    float fbeta = *(const float *)beta;
    if (fbeta != 0.0f && !C)
        return CUBLAS_STATUS_INVALID_VALUE;
    if (d->epilogue == CUBLASLT_EPILOGUE_BIAS && !d->bias)
        return CUBLAS_STATUS_INVALID_VALUE;
    /* an algorithm of the heuristic holds the pointers to the alignments
     * the preference promised it */
    if (algo) {
        lt_algo al;
        memcpy(&al, algo->data, sizeof al);
        if (al.magic != ALGO_MAGIC)
            return CUBLAS_STATUS_INVALID_VALUE;
        if (!aligned(A, al.align[0]) || !aligned(B, al.align[1]) || (C && !aligned(C, al.align[2])) ||
            !aligned(D, al.align[3]))
            return CUBLAS_STATUS_INVALID_VALUE;
    }
    lt_layout la = *(lt_layout *)Adesc;
    if (strcmp(cudaemu_mutation(NULL, NULL), "lda") == 0)
        la.ld += 1; /* the mutation suite: a wrong leading dimension */
    /* every operand's extent lies in its allocation (else a report) */
    A = cudaemu_device_view(A, extent(&la, A_elem(&la)), "cublasLtMatmul: matrix A");
    B = cudaemu_device_view(B, extent((lt_layout *)Bdesc, A_elem((lt_layout *)Bdesc)), "cublasLtMatmul: matrix B");
    if (C)
        C = cudaemu_device_view(C, extent((lt_layout *)Cdesc, A_elem((lt_layout *)Cdesc)), "cublasLtMatmul: matrix C");
    D = cudaemu_device_view(D, extent((lt_layout *)Ddesc, A_elem((lt_layout *)Ddesc)), "cublasLtMatmul: matrix D");
    lt_desc dv = *d;
    if (dv.epilogue == CUBLASLT_EPILOGUE_BIAS) {
        uint64_t m, k;
        op_dims(&la, d->transa, &m, &k);
        dv.bias = cudaemu_device_view(dv.bias, m * (dv.bias_type == CUDA_R_16BF ? 2 : 4), "cublasLtMatmul: bias");
    }
    product *x = malloc(sizeof *x);
    if (!x)
        return CUBLAS_STATUS_ALLOC_FAILED;
    *x = (product){dv,
                   la,
                   *(lt_layout *)Bdesc,
                   *(lt_layout *)Cdesc,
                   *(lt_layout *)Ddesc,
                   *(const float *)alpha,
                   fbeta,
                   A,
                   B,
                   C ? C : D,
                   D};
    if (cudaemu_enqueue(stream, run_product, x, free) != cudaSuccess) {
        free(x);
        return CUBLAS_STATUS_EXECUTION_FAILED;
    }
    return CUBLAS_STATUS_SUCCESS;
}
