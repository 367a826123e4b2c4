/* classifier.cu — softmax cross-entropy with the log-sum-exp contract of
 * ops.h: the forward leaves the logits intact and saves lse (float); the
 * backward turns logits into dlogits in place, the target's p - 1 taken as
 * minus the sum of the other probabilities (precise as p -> 1, where a
 * bf16 p would lose it), the padded columns V..Vp zeroed.
 *
 * One 256-thread block per row; sums of exponentials in double per thread,
 * then a block tree in a fixed order (bitwise reproducible). */
#include "common.cuh"

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
