/* classifier.cu — softmax cross-entropy with the log-sum-exp contract of
 * ops.h: the forward leaves the logits intact and saves lse (float); the
 * backward turns logits into dlogits in place, the target's p - 1 taken as
 * minus the sum of the other probabilities (precise as p -> 1, where a
 * bf16 p would lose it), the padded columns V..Vp zeroed.
 *
 * The fused form (ops.h crossentropy_fused: the training forward) does
 * both in one launch: the row read from HBM once into shared memory (when
 * Vp elements fit: XENT_CACHE_BYTES; else its later passes re-read it,
 * mostly from L2), its maximum, then the sum of exponentials and the sum
 * of the others' (the target's p - 1 = -others / sum, precise as p -> 1),
 * the loss and the log-sum-exp, and the gradient written over the row:
 * one read and one write of the logits where the two-kernel form makes
 * three reads (two in the forward) and one write.
 *
 * One 256-thread block per row; sums of exponentials in double per thread,
 * then a block tree in a fixed order (bitwise reproducible). */
#include "common.cuh"
#include "mma.cuh"

#define XENT_THREADS 256

template <typename T>
__global__ void xent_fwd_k(float *losses, float *lse, const T *logits, const int *targets, int V, int Vp) {
    SR_SHARED(float, shf, 32);
    SR_SHARED(double, shd, 32);
    const T *l = logits + (size_t)blockIdx.x * Vp;
    float mx = -INFINITY;
    for (int j = threadIdx.x; j < V; j += blockDim.x)
        mx = fmaxf(mx, sr_ld(l + j));
    mx = sr_block_max(mx, shf);
    double sum = 0.0;
    for (int j = threadIdx.x; j < V; j += blockDim.x)
        sum += (double)expf(sr_ld(l + j) - mx);
    sum = sr_block_sum(sum, shd);
    if (threadIdx.x == 0) {
        double log_sum = log(sum);
        lse[blockIdx.x] = (float)((double)mx + log_sum);
        losses[blockIdx.x] = (float)(log_sum - (double)(sr_ld(l + targets[blockIdx.x]) - mx));
    }
}

template <typename T>
__global__ void xent_bwd_k(T *logits, const float *lse, const int *targets, float dloss, int V, int Vp) {
    SR_SHARED(double, shd, 32);
    T *l = logits + (size_t)blockIdx.x * Vp;
    float ls = lse[blockIdx.x];
    int target = targets[blockIdx.x];
    double others = 0.0;
    for (int j = threadIdx.x; j < V; j += blockDim.x)
        if (j != target)
            others += (double)expf(sr_ld(l + j) - ls);
    others = sr_block_sum(others, shd); /* every thread has read its logits */
    for (int j = threadIdx.x; j < Vp; j += blockDim.x) {
        float v = j >= V ? 0.0f : j == target ? (float)(-others * (double)dloss) : expf(sr_ld(l + j) - ls) * dloss;
        sr_st(l + j, v);
    }
}

/* the fused row: `cache` says whether the row lives in the dynamic shared
 * memory (Vp elements) after the first pass */
template <typename T>
__global__ void xent_fused_k(float *losses, float *lse, T *logits, const int *targets, float dloss, int V, int Vp,
                             int cache) {
    SR_SHARED(float, shf, 32);
    SR_SHARED(double, shd, 32);
    SR_SHARED_DYN(T, row);
    T *l = logits + (size_t)blockIdx.x * Vp;
    int target = targets[blockIdx.x];
    float mx = -INFINITY;
    for (int j = threadIdx.x; j < V; j += blockDim.x) {
        T v = l[j];
        if (cache)
            row[j] = v;
        mx = fmaxf(mx, sr_ld(&v));
    }
    mx = sr_block_max(mx, shf); /* (its barriers order the cached row's writes before the reads below) */
    double sum = 0.0, others = 0.0;
    for (int j = threadIdx.x; j < V; j += blockDim.x) {
        T v = cache ? (T)row[j] : l[j];
        double e = (double)expf(sr_ld(&v) - mx);
        sum += e;
        others += j != target ? e : 0.0;
    }
    sum = sr_block_sum(sum, shd);
    others = sr_block_sum(others, shd);
    double log_sum = log(sum);
    float ls = (float)((double)mx + log_sum);
    T tv = l[target];
    if (threadIdx.x == 0) {
        lse[blockIdx.x] = ls;
        losses[blockIdx.x] = (float)(log_sum - (double)(sr_ld(&tv) - mx));
    }
    __syncthreads(); /* every thread has read the target's logit before any writes the row */
    float dt = (float)(-(others / sum) * (double)dloss);
    if (SR_MUTANT(xent_fused_target)) /* tests/mutants.sh: the target's p taken for p - 1 */
        dt = expf(sr_ld(&tv) - ls) * dloss;
    for (int j = threadIdx.x; j < Vp; j += blockDim.x) {
        T v = j < V && cache ? (T)row[j] : j < V ? l[j] : T{};
        float g = j >= V ? 0.0f : j == target ? dt : expf(sr_ld(&v) - ls) * dloss;
        sr_st(l + j, g);
    }
}

template <typename T>
static int xent_fwd(cudaStream_t s, float *losses, float *lse, const void *logits, const int *targets, int N, int V,
                    int Vp) {
    return SR_LAUNCH(xent_fwd_k<T>, N, XENT_THREADS, 0, s, losses, lse, (const T *)logits, targets, V, Vp);
}
template <typename T>
static int xent_bwd(cudaStream_t s, void *logits, const float *lse, const int *targets, float dloss, int N, int V,
                    int Vp) {
    return SR_LAUNCH(xent_bwd_k<T>, N, XENT_THREADS, 0, s, (T *)logits, lse, targets, dloss, V, Vp);
}

/* the row cached in shared memory up to this many bytes (bf16 GPT-2's
 * 50,304 columns: 100.6 KB; f32, or Llama-3's 128,256 in bf16, re-read) */
#define XENT_CACHE_BYTES (160u * 1024u)

template <typename T>
static int xent_fused(cudaStream_t s, float *losses, float *lse, void *logits, const int *targets, float dloss, int N,
                      int V, int Vp) {
    size_t bytes = (size_t)Vp * sizeof(T);
    int cache = bytes <= XENT_CACHE_BYTES;
    if (!cache)
        bytes = 0;
    else if (bytes > 48 * 1024 && !sr_cuda_dry()) /* (past 48 KiB a launch needs the attribute) */
        (void)cudaFuncSetAttribute(xent_fused_k<T>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
    return SR_LAUNCH(xent_fused_k<T>, N, XENT_THREADS, bytes, s, losses, lse, (T *)logits, targets, dloss, V, Vp,
                     cache);
}

extern "C" int sr_k_crossentropy_fused(cudaStream_t s, float *losses, float *lse, void *logits, const int *targets,
                                       float dloss, int N, int V, int Vp, int bf16) {
    SR_ENTER(crossentropy_fused, sr_lc_crossentropy_fused(N, V, Vp, (bf16 ? 2 : 4)));
    return SR_DISPATCH(bf16, xent_fused, s, losses, lse, logits, targets, dloss, N, V, Vp);
}

extern "C" int sr_k_crossentropy_forward(cudaStream_t s, float *losses, float *lse, const void *logits,
                                         const int *targets, int N, int V, int Vp, int bf16) {
    SR_ENTER(crossentropy_forward, sr_lc_crossentropy(N, V, (bf16 ? 2 : 4), false));
    return SR_DISPATCH(bf16, xent_fwd, s, losses, lse, logits, targets, N, V, Vp);
}
extern "C" int sr_k_crossentropy_backward(cudaStream_t s, void *logits, const float *lse, const int *targets,
                                          float dloss, int N, int V, int Vp, int bf16) {
    SR_ENTER(crossentropy_backward, sr_lc_crossentropy(N, V, (bf16 ? 2 : 4), true));
    return SR_DISPATCH(bf16, xent_bwd, s, logits, lse, targets, dloss, N, V, Vp);
}
