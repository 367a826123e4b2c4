/* ops.h — the op interface: forward and backward of every layer of the GPT.
 *
 * A back end is a table of function pointers (`sr_ops`).  The CPU table in
 * ops_cpu.c is always built and is the oracle; the CUDA table (kernels/)
 * implements the same contracts.  Conventions (ARCHITECTURE.md §6): outputs first,
 * then inputs, then sizes; backward functions ACCUMULATE (+=) into every
 * gradient they write, so callers zero gradients they do not want summed.
 * Shape legend: B batch, T time, C channels, NH heads, hs = C/NH, V vocab,
 * Vp padded vocab, N = B*T rows, OC output channels.  All tensors are
 * row-major float32 unless stated. */
#ifndef SR_OPS_H
#define SR_OPS_H

#include <stddef.h>

#include "status.h"

typedef struct sr_ops {
    const char *name;
    /* out[B,T,C] = wte[inp[b,t]] + wpe[t] */
    void (*encoder_forward)(float *out, const int *inp, const float *wte, const float *wpe, int B, int T, int C);
    /* dwte[inp[b,t]] += dout[b,t]; dwpe[t] += sum_b dout[b,t] */
    void (*encoder_backward)(float *dwte, float *dwpe, const float *dout, const int *inp, int B, int T, int C);
    /* out[N,C] = (inp - mean) * rstd * w + b; saves mean[N], rstd[N] */
    void (*layernorm_forward)(float *out, float *mean, float *rstd, const float *inp, const float *w, const float *b,
                              int N, int C);
    void (*layernorm_backward)(float *dinp, float *dw, float *db, const float *dout, const float *inp, const float *w,
                               const float *mean, const float *rstd, int N, int C);
    /* out[N,OC] = inp[N,C] @ w[OC,C]^T + bias[OC] (bias may be NULL) */
    void (*matmul_forward)(float *out, const float *inp, const float *w, const float *bias, int N, int C, int OC);
    /* dinp[N,C] += dout @ w; dw[OC,C] += dout^T @ inp; dbias[OC] += sum_n dout (dbias may be NULL) */
    void (*matmul_backward)(float *dinp, float *dw, float *dbias, const float *dout, const float *inp, const float *w,
                            int N, int C, int OC);
    /* qkv[B,T,3C] (q, k, v each C wide, heads contiguous) -> out[B,T,C];
     * saves the causal softmax att[B,NH,T,T] (zero above the diagonal) */
    void (*attention_forward)(float *out, float *att, const float *qkv, int B, int T, int C, int NH);
    void (*attention_backward)(float *dqkv, const float *dout, const float *qkv, const float *att, int B, int T, int C,
                               int NH);
    /* GELU, tanh approximation */
    void (*gelu_forward)(float *out, const float *inp, size_t n);
    void (*gelu_backward)(float *dinp, const float *inp, const float *dout, size_t n);
    /* out = a + b */
    void (*residual_forward)(float *out, const float *a, const float *b, size_t n);
    /* Softmax cross-entropy over the first V of Vp logits, in place: on
     * return logits[N,Vp] holds the probabilities (padding zero) and
     * losses[N] the per-row loss -log p[target]. */
    void (*crossentropy_forward)(float *losses, float *logits, const int *targets, int N, int V, int Vp);
    /* probs[N,Vp] becomes dlogits = (probs - onehot(target)) * dloss in place;
     * the padded logits get zero gradient. */
    void (*crossentropy_backward)(float *probs, const int *targets, float dloss, int N, int V, int Vp);
    /* The first failure of an op on the calling thread since the last call
     * (SR_OK when none), its message recorded; clears it.  Ops return void,
     * so the model asks after every pass. */
    sr_status (*take_error)(void);
} sr_ops;

/* The CPU reference ops (OpenBLAS + OpenMP). */
extern const sr_ops sr_ops_cpu;

/* Threading policy (one pool): shardrun's OpenMP pool is the only pool.
 * OpenBLAS is pinned to one thread and every GEMM is split over the OpenMP
 * threads by shardrun itself, so two pools never busy-wait against each
 * other.  Sets the pool size; n <= 0 picks the cores this process may run
 * on.  Returns the thread count in effect. */
int sr_ops_set_threads(int n);

#endif
