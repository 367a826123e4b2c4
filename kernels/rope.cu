/* rope.cu — rotary position embedding (the Llama family), forward and
 * backward, in place on the query and key heads of qkv.
 *
 * Hugging Face's rotate-half layout (src/ops.h): for i < hs/2 the pair
 * (x_i, x_{i+hs/2}) of each query and key head of token t turns by the
 * angle whose cosine and sine are cs[t hs + i] and cs[t hs + hs/2 + i].
 * The table is the model's (sr_model_rope_table: float, Llama-3 frequency
 * scaling already in it), so the kernel is the same for every scaling.
 * The backward turns the gradient by the negative angle (the rotation's
 * inverse, its transpose).  A block per token row: its threads take a
 * pack of V consecutive i of one head each (16 bytes from each half: 8
 * bf16 or 4 floats, when hs/2 and the row are multiples of the pack and
 * qkv is 16-byte aligned; else V = 1), the row's position found once per
 * block (no division per element), 32-bit offsets within the row; float
 * arithmetic whatever the dtype; each element is read and written by one
 * thread only. */
#include "common.cuh"

template <typename T, int V>
__global__ void rope_k(T *qkv, const float *cs, int T_, int heads, int W, int hs, float sign) {
    int half = hs / 2, per = half / V;
    const float *c = cs + (size_t)(blockIdx.x % (unsigned)T_) * hs;
    T *row = qkv + (size_t)blockIdx.x * W;
    for (int j = threadIdx.x; j < heads * per; j += blockDim.x) {
        int h = j / per, i = (j - h * per) * V;
        T *a = row + h * hs + i, *b = a + half;
        float x1[V], x2[V];
        sr_ldv<V>(a, x1);
        sr_ldv<V>(b, x2);
        SR_UNROLL
        for (int k = 0; k < V; k++) {
            float co = c[i + k], sn = sign * c[half + i + k], y1 = x1[k] * co - x2[k] * sn;
            x2[k] = x2[k] * co + x1[k] * sn;
            x1[k] = y1;
        }
        sr_stv<V>(a, x1);
        sr_stv<V>(b, x2);
    }
}

template <typename T>
static int rope(cudaStream_t s, void *qkv, const float *cs, int B, int T_, int NH, int NKV, int hs, float sign) {
    const int P = sr_pack<T>();
    int W = (NH + 2 * NKV) * hs, heads = NH + NKV;
    long long rows = (long long)B * T_;
    if (rows <= 0)
        return 0;
    if (rows > 0x7fffffffLL)
        return (int)cudaErrorInvalidValue;
    bool vec = (hs / 2) % P == 0 && W % P == 0 && sr_aligned16(qkv);
    int per = vec ? hs / 2 / P : hs / 2, threads = sr_pack_threads(heads * per, 256);
    if (vec)
        return SR_LAUNCH((rope_k<T, P>), (unsigned)rows, threads, 0, s, (T *)qkv, cs, T_, heads, W, hs, sign);
    return SR_LAUNCH((rope_k<T, 1>), (unsigned)rows, threads, 0, s, (T *)qkv, cs, T_, heads, W, hs, sign);
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
