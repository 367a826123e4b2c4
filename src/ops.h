/* ops.h — the op interface: forward and backward of every layer of the
 * built-in models (GPT-2 and the Llama family).
 *
 * A back end is a table of function pointers (`sr_ops`).  The CPU table in
 * ops_cpu.c is always built and is the oracle; the CUDA table (kernels/)
 * implements the same contracts.  Conventions (ARCHITECTURE.md §6): outputs first,
 * then inputs, then sizes; backward functions ACCUMULATE (+=) into every
 * gradient they write, so callers zero gradients they do not want summed
 * (the classifier's backward alone overwrites: logits become dlogits),
 * except where an op takes a `beta` (0 or 1): the input gradient of
 * matmul_backward, layernorm_backward and rmsnorm_backward, gelu_backward
 * and swiglu_backward compute out = beta out + gradient, and with beta 0
 * never read `out` (whatever it holds, NaN included, is overwritten), so a
 * buffer with no earlier contribution needs no zeroing first; `gbeta` (0
 * or 1) is the same for the parameter gradients of matmul_backward (dw,
 * dbias), the norms' (dw, db) and encoder_backward's dwpe — dwte, a
 * scatter over token ids, always adds (ARCHITECTURE.md §3a).
 * Every pointer is memory of the device table the ops run with
 * (device.h); ops are stream-ordered on the compute stream.
 * Shape legend: B batch, T time, C channels, NH heads, hs = C/NH, V vocab,
 * Vp padded vocab, N = B*T rows, OC output channels.  All tensors are
 * row-major; `void *` tensors are of the table's activation dtype (`act`),
 * `float *` ones float32. */
#ifndef SR_OPS_H
#define SR_OPS_H

#include <stddef.h>

#include "dtype.h"
#include "status.h"

typedef struct sr_ops {
    const char *name;
    /* The activation dtype of this table instance: the element type of every
     * `void *` below (activations, their gradients, and the parameters the
     * model is handed).  SR_DT_F32 on the CPU; F32 (exact mode) or BF16 on
     * CUDA, chosen at run time.  Parameter gradients, LayerNorm statistics,
     * losses and the classifier's log-sum-exp are always float. */
    sr_dtype act;
    /* out[B,T,C] = wte[inp[b,t]] + wpe[t]; wpe NULL (a model without
     * learned positions): out = wte[inp[b,t]] */
    void (*encoder_forward)(void *out, const int *inp, const void *wte, const void *wpe, int B, int T, int C);
    /* dwte[inp[b,t]] += dout[b,t]; dwpe[t] = gbeta dwpe[t] + sum_b
     * dout[b,t] (dwpe NULL: none) */
    void (*encoder_backward)(float *dwte, float *dwpe, const void *dout, const int *inp, int B, int T, int C,
                             float gbeta);
    /* out[N,C] = (inp - mean) * rstd * w + b; saves mean[N], rstd[N] */
    void (*layernorm_forward)(void *out, float *mean, float *rstd, const void *inp, const void *w, const void *b, int N,
                              int C);
    /* The residual add and the norm after it in one op: res[N,C] = a + b
     * (rounded to the activation dtype, as residual_forward), then out,
     * mean and rstd as layernorm_forward of res writes them: the same bits
     * as the two ops.  res may be a. */
    void (*residual_layernorm_forward)(void *res, void *out, float *mean, float *rstd, const void *a, const void *b,
                                       const void *w, const void *bias, int N, int C);
    /* dinp[N,C] = beta dinp + d/dinp; dw[C] = gbeta dw + sum_n dout *
     * (inp - mean) * rstd, db[C] = gbeta db + sum_n dout (fixed order).
     * The residual stream's bias gradients, with no pass of their own
     * (each NULL: none; rows in order, each = sbeta itself + the sums):
     * sum_in = the column sums of dinp as it comes in (beta 1: the
     * gradient already there; beta 0 reads none: no rows), sum_out =
     * those of dinp as the op leaves it
     * (as stored).  GPT-2's second norm: the MLP projection's bias
     * gradient comes in, the attention projection's goes out. */
    void (*layernorm_backward)(void *dinp, float *dw, float *db, const void *dout, const void *inp, const void *w,
                               const float *mean, const float *rstd, int N, int C, float beta, float gbeta,
                               float *sum_in, float *sum_out, float sbeta);
    /* out[N,OC] = inp[N,C] @ w[OC,C]^T + bias[OC] (bias may be NULL) */
    void (*matmul_forward)(void *out, const void *inp, const void *w, const void *bias, int N, int C, int OC);
    /* dinp[N,C] = beta dinp + dout @ w; dw[OC,C] = gbeta dw + dout^T @ inp;
     * dbias[OC] = gbeta dbias + sum_n dout (dbias may be NULL) */
    void (*matmul_backward)(void *dinp, float *dw, float *dbias, const void *dout, const void *inp, const void *w,
                            int N, int C, int OC, float beta, float gbeta);
    /* qkv[B,T,3C] (q, k, v each C wide, heads contiguous) -> out[B,T,C];
     * saves what the backward needs in `att`, attention_save_bytes(B, T, NH)
     * bytes that the op owns the layout of (the CPU op and materialized
     * attention: the causal softmax [B,NH,T,T], zero above the diagonal;
     * flash attention: the log-sum-exp of each row, [B,NH,T] f32).  The
     * backward is also given `out`, the forward's output (flash attention
     * reads it for rowsum(dout o out); the others ignore it), and dbias
     * (NULL: none) = gbeta dbias + the column sums of dqkv[B T, 3C] as
     * left (as stored; the qkv projection's bias gradient, summed as dqkv
     * is written where the table can: flash attention). */
    void (*attention_forward)(void *out, void *att, const void *qkv, int B, int T, int C, int NH);
    void (*attention_backward)(void *dqkv, const void *dout, const void *out, const void *qkv, const void *att, int B,
                               int T, int C, int NH, float *dbias, float gbeta);
    /* Bytes attention_forward saves per layer for B sequences of T tokens
     * (gqa_attention_forward saves the same for its NH query heads). */
    size_t (*attention_save_bytes)(int B, int T, int NH);
    /* Whether attention_backward and gqa_attention_backward assign every
     * element of dqkv (flash attention: the caller zeroes nothing) rather
     * than add into it (false: the caller zeroes it first). */
    int attention_backward_assigns;
    /* GELU, tanh approximation */
    void (*gelu_forward)(void *out, const void *inp, size_t n);
    /* dinp = beta dinp + gelu'(inp) dout (beta 0 or 1); dbias (NULL: none)
     * = gbeta dbias + the column sums of dinp as left (as stored) viewed as
     * [n / OC, OC], rows in order: the bias gradient of the projection GELU
     * follows, with no pass of its own */
    void (*gelu_backward)(void *dinp, const void *inp, const void *dout, size_t n, float beta, float *dbias, int OC,
                          float gbeta);
    /* out = a + b */
    void (*residual_forward)(void *out, const void *a, const void *b, size_t n);
    /* Softmax cross-entropy over the first V of Vp logits.  Leaves
     * logits[N,Vp] intact; writes losses[N] (-log p[target]) and lse[N],
     * the log-sum-exp of each row's real logits (float, so that p - 1 keeps
     * its precision as p -> 1 whatever the activation dtype). */
    void (*crossentropy_forward)(float *losses, float *lse, const void *logits, const int *targets, int N, int V,
                                 int Vp);
    /* Turns the logits into dlogits in place: (softmax - onehot(target)) *
     * dloss, with softmax = exp(logit - lse) and the target's p - 1 taken as
     * minus the sum of the other probabilities (precise as p -> 1); the
     * padded logits get zero. */
    void (*crossentropy_backward)(void *logits, const float *lse, const int *targets, float dloss, int N, int V,
                                  int Vp);
    /* The two above in one op (the training forward, whose backward
     * follows): losses and lse written as crossentropy_forward writes
     * them, and the logits turned into dlogits as crossentropy_backward
     * turns them, reading the logits once where the table can (the CUDA
     * kernel: one read and one write of each row).  Evaluation and the
     * oracle's logits keep the two-op form, which leaves the logits
     * intact.  NULL: the table has no fused form (the model runs the two). */
    void (*crossentropy_fused)(float *losses, float *lse, void *logits, const int *targets, float dloss, int N, int V,
                               int Vp);
    /* ---- the Llama family (model.arch: llama).  A table without them
     * leaves them NULL, and the model refuses a Llama run on it
     * (sr_model_init). ---- */
    /* out[N,C] = inp * rstd * w with rstd = 1 / sqrt(mean(inp^2) + eps)
     * over each row (float sums); saves rstd[N] */
    void (*rmsnorm_forward)(void *out, float *rstd, const void *inp, const void *w, float eps, int N, int C);
    /* residual_layernorm_forward's RMSNorm: res = a + b, then
     * rmsnorm_forward of res, bitwise the two ops (res may be a) */
    void (*residual_rmsnorm_forward)(void *res, void *out, float *rstd, const void *a, const void *b, const void *w,
                                     float eps, int N, int C);
    /* dinp[N,C] = beta dinp + d/dinp; dw[C] = gbeta dw + sum_n dout * inp
     * * rstd (summed in a fixed order whatever the thread count) */
    void (*rmsnorm_backward)(void *dinp, float *dw, const void *dout, const void *inp, const void *w, const float *rstd,
                             int N, int C, float beta, float gbeta);
    /* Rotary position embedding, in place, on the NH query heads and the
     * NKV key heads of qkv[B,T,(NH + 2 NKV) hs] (queries, keys, values,
     * heads contiguous; values untouched), Hugging Face's rotate-half
     * layout: for i < hs/2, (x_i, x_{i+hs/2}) is rotated by the angle of
     * position t and frequency i, whose cosine and sine are
     * cs[t hs + i] and cs[t hs + hs/2 + i] (a [T, hs] float table the
     * model builds: sr_model_rope_table).  rope_backward applies the
     * inverse rotation to the gradient in place (no accumulation): the
     * gradient with respect to the unrotated queries and keys. */
    void (*rope_forward)(void *qkv, const float *cs, int B, int T, int NH, int NKV, int hs);
    void (*rope_backward)(void *dqkv, const float *cs, int B, int T, int NH, int NKV, int hs);
    /* SwiGLU: out[N,F] = silu(gu[n, f]) * gu[n, F + f] with gu[N,2F] (the
     * gate's F columns, then the up projection's); silu(a) = a sigmoid(a).
     * The backward writes dgu[N,2F] = beta dgu + the gradient (beta 0 or
     * 1). */
    void (*swiglu_forward)(void *out, const void *gu, int N, int F);
    void (*swiglu_backward)(void *dgu, const void *dout, const void *gu, int N, int F, float beta);
    /* Causal attention with grouped-query heads: qkv[B,T,(NH + 2 NKV) hs]
     * (NH query heads, then NKV key heads, then NKV value heads), query
     * head h reads key/value head h / (NH / NKV); out[B,T,NH hs].  Saves
     * attention_save_bytes(B, T, NH) in `att` as attention_forward does;
     * with NKV == NH the two ops compute the same values.  The backward
     * accumulates into dqkv (or assigns it: attention_backward_assigns),
     * each key/value head's gradient summed over its query heads in head
     * order. */
    void (*gqa_attention_forward)(void *out, void *att, const void *qkv, int B, int T, int NH, int NKV, int hs);
    void (*gqa_attention_backward)(void *dqkv, const void *dout, const void *out, const void *qkv, const void *att,
                                   int B, int T, int NH, int NKV, int hs);
    /* Scratch the ops need for micro-batches of B sequences (NULL: none):
     * workspace_bytes says how much, and bind_workspace hands the calling
     * thread's ops a buffer of at least that many bytes in the table's
     * memory (model.c allocates it with the activations, so it is planned
     * and accounted; no op allocates). */
    size_t (*workspace_bytes)(int B, int T, int C, int NH);
    void (*bind_workspace)(void *ws, size_t bytes);
    /* The first failure of an op on the calling thread since the last call
     * (SR_OK when none), its message recorded; clears it.  Ops return void,
     * so the model asks after every pass. */
    sr_status (*take_error)(void);
} sr_ops;

/* The execution context is bound per thread, not passed as an argument:
 * on the CPU it is the thread's OpenMP pool and its op-error slot (both
 * thread-local already); the CUDA table binds its stream, cuBLASLt handle
 * and workspace to the calling thread the same way.  Why: the signatures
 * stay those of the oracle, and threads that each run a rank (the
 * virtual-rank tests) bind their own context without any op knowing. */

/* The CPU reference ops (OpenBLAS + OpenMP). */
extern const sr_ops sr_ops_cpu;

/* Threading policy (one pool): shardrun's OpenMP pool is the only pool.
 * OpenBLAS is pinned to one thread and every GEMM is split over the OpenMP
 * threads by shardrun itself, so two pools never busy-wait against each
 * other.  Sets the pool size; n <= 0 picks the cores this process may run
 * on.  Returns the thread count in effect. */
int sr_ops_set_threads(int n);

/* The attention backward's per-thread scratch on the CPU (one T x T
 * matrix of floats), allocated for the call and freed after it. */
size_t sr_ops_scratch_bytes(int T);

#endif
