/* rope.cu — rotary position embedding (the Llama family), forward and
 * backward, in place on the query and key heads of qkv.
 *
 * Hugging Face's rotate-half layout (src/ops.h): for i < hs/2 the pair
 * (x_i, x_{i+hs/2}) of each query and key head of token t turns by the
 * angle whose cosine and sine are cs[t hs + i] and cs[t hs + hs/2 + i].
 * The table is the model's (sr_model_rope_table: float, Llama-3 frequency
 * scaling already in it), so the kernel is the same for every scaling.
 * The backward turns the gradient by the negative angle (the rotation's
 * inverse, its transpose).  One thread per pair, grid-stride over
 * B T (NH + NKV) hs/2 pairs, float arithmetic whatever the dtype; each
 * element is read and written by one thread only. */
#include "common.cuh"

template <typename T>
__global__ void rope_k(T *qkv, const float *cs, long long pairs, int T_, int heads, int W, int hs, float sign) {
    int half = hs / 2;
    for (long long p = blockIdx.x * (long long)blockDim.x + threadIdx.x; p < pairs;
         p += (long long)gridDim.x * blockDim.x) {
        int i = (int)(p % half);
        long long r = p / half;
        int h = (int)(r % heads);
        long long bt = r / heads;
        const float *c = cs + (size_t)(bt % T_) * hs;
        T *a = qkv + (size_t)bt * W + (size_t)h * hs + i, *b = a + half;
        float x1 = sr_ld(a), x2 = sr_ld(b), co = c[i], sn = sign * c[half + i];
        sr_st(a, x1 * co - x2 * sn);
        sr_st(b, x2 * co + x1 * sn);
    }
}

template <typename T>
static int rope(cudaStream_t s, void *qkv, const float *cs, int B, int T_, int NH, int NKV, int hs, float sign) {
    long long pairs = (long long)B * T_ * (NH + NKV) * (hs / 2);
    return SR_LAUNCH(rope_k<T>, sr_grid_1d((size_t)pairs, 256, 65535u * 16), 256, 0, s, (T *)qkv, cs, pairs, T_,
                     NH + NKV, (NH + 2 * NKV) * hs, hs, sign);
}

extern "C" int sr_k_rope_forward(cudaStream_t s, void *qkv, const float *cs, int B, int T, int NH, int NKV, int hs,
                                 int bf16) {
    SR_ENTER(rope_forward, sr_lc_rope(B, T, NH, NKV, hs, (bf16 ? 2 : 4)));
    return SR_DISPATCH(bf16, rope, s, qkv, cs, B, T, NH, NKV, hs, 1.0f);
}

extern "C" int sr_k_rope_backward(cudaStream_t s, void *dqkv, const float *cs, int B, int T, int NH, int NKV, int hs,
                                  int bf16) {
    SR_ENTER(rope_backward, sr_lc_rope(B, T, NH, NKV, hs, (bf16 ? 2 : 4)));
    return SR_DISPATCH(bf16, rope, s, dqkv, cs, B, T, NH, NKV, hs, -1.0f);
}
