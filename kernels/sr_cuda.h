/* sr_cuda.h — the C launchers of the CUDA kernels (the .cu files of kernels/).
 *
 * This header is the whole interface between the C host code (ops_cuda.c,
 * device_cuda.c, compiled by gcc -std=c11) and the kernels (compiled by
 * nvcc): plain C declarations, no C++.  Every launcher enqueues its
 * kernel(s) on `stream` through SR_LAUNCH (common.cuh) and returns the
 * launch's own error as an int (0 = cudaSuccess), never a stale one left
 * by an earlier call: a launch that could not be enqueued is reported at once,
 * an error inside a kernel at the next synchronisation.  Launchers assert
 * nothing: their preconditions are checked by the caller (ops_cuda.c,
 * sr_cuda_launch_ok), so a bad shape is a message, never an abort.
 *
 * `bf16` selects the element type of every activation argument (`void *`):
 * 0 float, 1 __nv_bfloat16.  Gradients of parameters, LayerNorm statistics,
 * losses and log-sum-exps are float, as in the op contract (src/ops.h).
 * `ws` is the op workspace (sr_cuda_ws_bytes); kernels that need scratch
 * take it explicitly, so no launcher allocates.
 *
 * sr_cuda_calls[] counts the launches of each launcher (tests prove every
 * launcher is reached by the back-end op test). */
#ifndef SR_CUDA_H
#define SR_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime.h>

#include "../src/ledger.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The launchers, X(name, family): ledger.h's one list (the call-count
 * table, the static check and the ledger's rows use it). */
#define SR_CUDA_LAUNCHERS(X) SR_LEDGER_LAUNCHERS(X)

enum {
#define SR_CUDA_ENUM(n, f) SR_CUDA_L_##n,
    SR_CUDA_LAUNCHERS(SR_CUDA_ENUM)
#undef SR_CUDA_ENUM
        SR_CUDA_NLAUNCHERS
};
extern long long sr_cuda_calls[SR_CUDA_NLAUNCHERS];
extern const char *const sr_cuda_launcher_names[SR_CUDA_NLAUNCHERS];
/* Whether launcher `l` (SR_CUDA_L_*) returns without launching: the one
 * SHARDRUN_TEST_KERNEL_SKIP names (a test hook; read once). */
int sr_cuda_skipped(int l);
/* Whether the calling thread's table is dry (device.h: counted, never
 * issued; device_cuda.c answers from the bound context). */
int sr_cuda_dry(void);
/* The launch hooks (common.cuh's SR_LAUNCH; launch_cuda.c): before a
 * launch on `stream`, counts one kernel in the bound ledger, starts its
 * timing under SHARDRUN_CUDA_PROFILE and answers whether the launch is
 * skipped (a dry table); after it, ends the timing and returns `rc`, the
 * launch's status. */
int sr_cuda_launch_begin(cudaStream_t stream);
int sr_cuda_launch_end(cudaStream_t stream, int rc);

/* Workspace bytes the launchers below need for B sequences of T tokens of
 * C channels with NH heads (the maximum over every op; one op runs at a
 * time on a stream, so they share it); `flash`: attention is flash.cu's
 * (no score gradient: sr_cuda_flash_ws_bytes).  `sort_bytes` is what the encoder's
 * radix sort asked for (sr_cuda_sort_bytes; 0 before it is known). */
size_t sr_cuda_ws_bytes(int B, int T, int C, int NH, size_t sort_bytes, int flash);
/* The row chunks of the fixed-order column sums for N rows (common.cuh
 * sr_colsum_chunks): each chunk's partial row is in the workspace. */
int sr_cuda_colsum_chunks(int N);
/* The attention backward's part of the workspace: one sequence's score
 * gradient [NH, T, T] at its start, this many bytes (rounded up to 256);
 * grouped-query attention's two [T, C] buffers (expanded heads, per-head
 * gradients; each rounded up to 256 bytes) follow it. */
size_t sr_cuda_ws_att_bytes(int T, int NH);
/* The radix sort's temporary storage for n keys (asks CUB; needs a GPU).
 * Returns 0 and sets *bytes, or a CUDA error. */
int sr_cuda_sort_bytes(size_t n, size_t *bytes);

/* encoder.cu: out[B,T,C] = wte[inp] + wpe[t]; dwte[inp] += dout, dwpe[t]
 * (add_wpe ? += : =) sum_b dout, deterministic (the positions of each token summed in order,
 * after a radix sort of (token, position) keys in ws).  wpe and dwpe may be
 * NULL (rotary positions: the token embedding alone). */
int sr_k_encoder_forward(cudaStream_t s, void *out, const int *inp, const void *wte, const void *wpe, int B, int T,
                         int C, int bf16);
int sr_k_encoder_backward(cudaStream_t s, float *dwte, float *dwpe, const void *dout, const int *inp, int B, int T,
                          int C, int bf16, void *ws, size_t ws_bytes, int add_wpe);

/* layernorm.cu: one warp per row; the residual form writes res = a + b
 * and normalises it (bitwise residual_forward then layernorm_forward; res
 * may be a); backward adds (add_dinp) or writes dinp and, through fixed
 * row chunks in ws, adds (add_dw) or writes dw and db, and the column sums
 * of dinp as it comes in (sum_in) and as stored (sum_out), added (add_sum)
 * or written. */
int sr_k_layernorm_forward(cudaStream_t s, void *out, float *mean, float *rstd, const void *inp, const void *w,
                           const void *b, int N, int C, int bf16);
int sr_k_residual_layernorm_forward(cudaStream_t s, void *res, void *out, float *mean, float *rstd, const void *a,
                                    const void *b, const void *w, const void *bias, int N, int C, int bf16);
int sr_k_layernorm_backward(cudaStream_t s, void *dinp, float *dw, float *db, float *sum_in, float *sum_out,
                            const void *dout, const void *inp, const void *w, const float *mean, const float *rstd,
                            int N, int C, int bf16, void *ws, int add_dinp, int add_dw, int add_sum);

/* gelu.cu: GELU (tanh) forward, backward (acc: +=; with dbias, its column
 * sums of dinp as stored over rows of OC (n a multiple of OC), added
 * (add_bias) or written, through fixed row chunks in ws), residual out =
 * a + b. */
int sr_k_gelu_forward(cudaStream_t s, void *out, const void *inp, size_t n, int bf16);
int sr_k_gelu_backward(cudaStream_t s, void *dinp, const void *inp, const void *dout, size_t n, int acc, int bf16,
                       float *dbias, int OC, int add_bias, void *ws);
int sr_k_residual_forward(cudaStream_t s, void *out, const void *a, const void *b, size_t n, int bf16);

/* bias.cu: dbias[OC] (add ? += : =) sum_n dout[n, OC], in fixed row chunks through ws;
 * out[n, c] += bias[c] (the forward add for a bias cuBLASLt cannot take). */
int sr_k_bias_backward(cudaStream_t s, float *dbias, const void *dout, int N, int OC, int bf16, void *ws, int add);
int sr_k_bias_forward(cudaStream_t s, void *out, const void *bias, int N, int OC, int bf16);

/* attention.cu: causal softmax over `rows` rows of T (row r is query t = r
 * % T), in place, the scores already scaled; zeros above the diagonal.
 * Backward in place on datt: datt = att * (datt - sum(att * datt)). */
int sr_k_softmax_causal_forward(cudaStream_t s, void *att, long long rows, int T, int bf16);
int sr_k_softmax_causal_backward(cudaStream_t s, void *datt, const void *att, long long rows, int T, int bf16);

/* attention.cu: grouped-query attention's key (or value) heads of one
 * sequence expanded for the query heads: dst[t, h hs + j] = src[t W + (h /
 * R) hs + j] for h < NKV R = C / hs; src's rows are W wide (the qkv row).
 * And its key/value gradient of one
 * sequence: dst[t, g hs + j] += sum over r < R (in order, in float) of
 * src[t, (g R + r) hs + j], for T rows of NKV heads of hs; dst's rows are
 * W wide (the qkv row), src's C = NKV R hs (one gradient per query head). */
int sr_k_gqa_expand(cudaStream_t s, void *dst, const void *src, int T, int NKV, int R, int hs, int W, int C, int bf16);
int sr_k_gqa_reduce(cudaStream_t s, void *dst, const void *src, int T, int NKV, int R, int hs, int W, int C, int bf16);

/* classifier.cu: the log-sum-exp contract of ops.h. */
int sr_k_crossentropy_forward(cudaStream_t s, float *losses, float *lse, const void *logits, const int *targets, int N,
                              int V, int Vp, int bf16);
int sr_k_crossentropy_backward(cudaStream_t s, void *logits, const float *lse, const int *targets, float dloss, int N,
                               int V, int Vp, int bf16);
int sr_k_crossentropy_fused(cudaStream_t s, float *losses, float *lse, void *logits, const int *targets, float dloss,
                            int N, int V, int Vp, int bf16);

/* rmsnorm.cu: one warp per row, float rstd[N] (eps from the model); the
 * backward adds (add_dinp) or writes dinp and, through fixed row chunks in
 * ws, adds (add_dw) or writes dw. */
int sr_k_rmsnorm_forward(cudaStream_t s, void *out, float *rstd, const void *inp, const void *w, float eps, int N,
                         int C, int bf16);
int sr_k_residual_rmsnorm_forward(cudaStream_t s, void *res, void *out, float *rstd, const void *a, const void *b,
                                  const void *w, float eps, int N, int C, int bf16);
int sr_k_rmsnorm_backward(cudaStream_t s, void *dinp, float *dw, const void *dout, const void *inp, const void *w,
                          const float *rstd, int N, int C, int bf16, void *ws, int add_dinp, int add_dw);

/* rope.cu: the rotary embedding of ops.h in place on the NH query and NKV
 * key heads of qkv[B,T,(NH + 2 NKV) hs] with the model's float table
 * cs[T, hs]; the backward turns by the negative angle (no accumulation). */
int sr_k_rope_forward(cudaStream_t s, void *qkv, const float *cs, int B, int T, int NH, int NKV, int hs, int bf16);
int sr_k_rope_backward(cudaStream_t s, void *dqkv, const float *cs, int B, int T, int NH, int NKV, int hs, int bf16);

/* swiglu.cu: out[N,F] = silu(gu[:, :F]) * gu[:, F:]; the backward adds
 * into dgu[N,2F]. */
int sr_k_swiglu_forward(cudaStream_t s, void *out, const void *gu, int N, int F, int bf16);
int sr_k_swiglu_backward(cudaStream_t s, void *dgu, const void *dout, const void *gu, int N, int F, int acc, int bf16);

/* adamw.cu (compiled with -fmad=false): the host's AdamW, bitwise, over
 * a list of segments in one launch: segment k updates elements [off, off +
 * n) of p, g, m, v (64-bit offsets), with weight decay `decay` when its
 * flag is set (else 0); `start` is the elements of the segments before it
 * (the list laid end to end: block b takes elements [b E, b E + E) of that
 * sequence, E = SR_CUDA_ADAMW_ELEMS; `total` the sum of the n).  The
 * layout mirrors device.h's sr_adamw_segment (device_cuda.c asserts it);
 * the list is in device memory.  With p16 (bf16) each updated element's
 * bf16, rounded to nearest even, is written there too.  With sumsq (device
 * memory) the scale is clipping's to `clip` from it (vec.h
 * sr_vec_clip_scale), grad_scale unused. */
typedef struct {
    unsigned long long off, n, start;
    unsigned char decay;
} sr_cuda_adamw_seg;
#define SR_CUDA_ADAMW_ELEMS 2048
int sr_k_adamw(cudaStream_t s, float *p, const float *g, float *m, float *v, void *p16, const sr_cuda_adamw_seg *segs,
               int nsegs, unsigned long long total, float b1, float b2, float eps, float bc1, float bc2, float lr,
               float decay, float grad_scale, const double *sumsq, double clip);

/* reduce.cu: casts, folds and fixed-order reductions.  `partial` holds
 * SR_CUDA_REDUCE_BLOCKS doubles. */
#define SR_CUDA_REDUCE_BLOCKS 256
int sr_k_cast_f32_bf16(cudaStream_t s, void *dst, const float *src, size_t n);
int sr_k_fold_bf16(cudaStream_t s, float *acc, const void *src, size_t n, int add);
int sr_k_add_f32(cudaStream_t s, float *acc, const float *src, size_t n);
int sr_k_sum_squares(cudaStream_t s, double *out, const float *x, size_t n, double *partial);
int sr_k_loss_sum(cudaStream_t s, double *acc, const float *losses, size_t n, double *partial, int add);

/* testing.cu: a kernel that spins for `ns` nanoseconds (delay injection). */
int sr_k_spin(cudaStream_t s, long long ns);

/* The warp-level primitives alone (probe.cu: tests/test_primitives and
 * test_kernels compare their outputs with tests/data's tables): `what`
 * SR_PROBE_MMA (a[32][4], b[32][2], c[32][4] -> d[32][4]), _LDMATRIX
 * (4 matrices of 8 x 8 16-bit values -> [6 forms][32][4]), _BF16X2 (n
 * pairs of floats -> n packed, and the 2n unpacked back), _CP_ASYNC (n
 * words, a multiple of 64, through n * 4 bytes of dynamic shared memory
 * -> n words), _SHFL + kind (0 xor, 1 idx, 2 up, 3 down, 4 ballot: mask,
 * arg, n lanes executing -> [32]). */
enum { SR_PROBE_MMA, SR_PROBE_LDMATRIX, SR_PROBE_BF16X2, SR_PROBE_CP_ASYNC, SR_PROBE_SHFL };
int sr_k_probe(cudaStream_t s, int what, const void *in0, const void *in1, const void *in2, void *out0, void *out1,
               int n, unsigned mask, int arg);
/* tile_gemm.cu: C[M, N] (f32) = A[M, K] B[N, K]^T, A and B bf16 row-major,
 * on the tensor cores; M and N multiples of 64, K of 32 (else
 * cudaErrorInvalidValue). */
int sr_k_tile_gemm_bf16(cudaStream_t s, float *C, const void *A, const void *B, int M, int N, int K);

/* flash.cu: causal attention of ops.h's grouped-query layout, bf16, head
 * dim hs = 64 and NH a multiple of NKV (else cudaErrorInvalidValue),
 * never writing a T x T matrix.  Forward: out[B, T, NH hs] and lse[B, NH,
 * T] (f32, the log-sum-exp of each row's scaled scores: what the backward
 * keeps).  Backward: dqkv += the gradient, from dout, the forward's out
 * and lse and qkv, deterministic (no atomics); ws holds
 * sr_cuda_flash_ws_bytes(B, T, NH, NKV, hs) (the row statistic D, then
 * the bias gradient's partial rows).  With dbias (float, (NH + 2 NKV) hs):
 * the column sums of dqkv as stored, added (add_bias) or written — the qkv
 * projection's bias gradient, summed as the kernels write dqkv (per block
 * of 64 rows, then those rows in order: no atomics). */
int sr_k_flash_forward(cudaStream_t s, void *out, float *lse, const void *qkv, int B, int T, int NH, int NKV, int hs);
int sr_k_flash_backward(cudaStream_t s, void *dqkv, const void *dout, const void *out, const void *qkv,
                        const float *lse, int B, int T, int NH, int NKV, int hs, float *ws, float *dbias, int add_bias);
size_t sr_cuda_flash_ws_bytes(int B, int T, int NH, int NKV, int hs);

#ifdef __cplusplus
}
#endif

#endif
