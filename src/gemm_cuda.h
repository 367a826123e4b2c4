/* gemm_cuda.h — cuBLASLt GEMMs for the CUDA back end: plans built from a
 * key, cached, and run on a stream.
 *
 * A GEMM is described in cuBLASLt's own column-major terms by an
 * sr_gemm_key: D[m,n] = alpha op(A)[m,k] op(B)[k,n] + beta C (C = D), with
 * leading dimensions, a batch count and strides, the element types (A and
 * B bf16 or f32, D the same or f32), an optional bias epilogue and the
 * pointers' alignment.  ops_cuda.c maps the model's row-major tensors onto
 * keys (doc/ARCHITECTURE.md, the CUDA back end).  Compute is always CUBLAS_COMPUTE_32F with f32
 * scales: fp32 accumulation, and no TF32 in exact (f32) mode.
 *
 * Plans are split so CI tests them without a GPU: sr_gemm_plan_build makes
 * the descriptors and layouts (no handle needed) and sr_gemm_plan_describe
 * reads them back; only choosing the algorithm (the heuristic) and running
 * need a GPU.  The cache (sr_gemm_cache) keeps one plan per key, so the
 * heuristic runs once per shape, not per call as in llm.c. */
#ifndef SR_GEMM_CUDA_H
#define SR_GEMM_CUDA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cublasLt.h>
#include <cuda_runtime.h>

#include "ledger.h"
#include "status.h"

typedef struct {
    int transa, transb;            /* 0 = N, 1 = T */
    int m, n, k;                   /* column-major: D[m,n] = op(A)[m,k] op(B)[k,n] */
    long long lda, ldb, ldd;       /* leading dimensions, in elements */
    int batch;                     /* 1 = a plain GEMM */
    long long sa, sb, sd;          /* batch strides, in elements */
    bool ab_bf16;                  /* A and B bf16 (else f32) */
    bool d_f32;                    /* D (and C) f32 even when A, B are bf16 */
    bool bias;                     /* BIAS epilogue: D += bias[m] broadcast over n (bias of D's type) */
    bool accumulate;               /* beta = 1 (D += ...) */
    int align_a, align_b, align_d; /* alignment of the pointers, bytes (16 at most) */
    int align_bias;                /* the bias pointer's (0 without bias; ops_cuda.c passes 16 only) */
} sr_gemm_key;

/* Whether two keys describe the same GEMM, field by field (the padding
 * bytes of a struct are unspecified in C11: never memcmp). */
bool sr_gemm_key_equal(const sr_gemm_key *a, const sr_gemm_key *b);

typedef struct {
    sr_gemm_key key;
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t a, b, d;
    cublasLtMatmulPreference_t pref;
    cublasLtMatmulAlgo_t algo;
    bool have_algo;
} sr_gemm_plan;

/* Builds the descriptors of `k` with a `workspace_bytes` limit.  No GPU
 * needed.  SR_ERR_INTERNAL with the failing call named on error. */
sr_status sr_gemm_plan_build(sr_gemm_plan *p, const sr_gemm_key *k, size_t workspace_bytes);
/* What the descriptors say, read back through the cuBLASLt getters:
 * "m=.. n=.. k=.. transa=N transb=T lda=.. ldb=.. ldd=.. batch=.. types
 * bf16,bf16->bf16 compute 32F epilogue BIAS beta 0". */
sr_status sr_gemm_plan_describe(const sr_gemm_plan *p, char *buf, size_t n);
void sr_gemm_plan_free(sr_gemm_plan *p);

/* The alignment in bytes (1..16) of a pointer. */
int sr_gemm_align(const void *p);

/* A cache of plans, one per key; a handle and a workspace to run them. */
typedef struct sr_gemm_cache sr_gemm_cache;
sr_gemm_cache *sr_gemm_cache_new(cublasLtHandle_t h, void *workspace, size_t workspace_bytes);
void sr_gemm_cache_free(sr_gemm_cache *c);
int sr_gemm_cache_size(const sr_gemm_cache *c);
/* D = alpha op(A) op(B) + (accumulate ? D : 0) [+ bias], on `stream`, with
 * the cached plan for `k` (built and chosen on first use; the bias pointer
 * is set before the heuristic, which reads its alignment).  The call is
 * one cuBLASLt matmul of `family` in the ledger bound to the thread
 * (ledger.h); on a dry table (sr_cuda_dry) it is counted only, no plan
 * built.  SR_OK, or SR_ERR_INTERNAL with a message naming the shape and
 * cuBLASLt's status. */
sr_status sr_gemm_run(sr_gemm_cache *c, cudaStream_t stream, const sr_gemm_key *k, const void *A, const void *B,
                      void *D, const void *bias, float alpha, sr_ledger_family family);

#endif
