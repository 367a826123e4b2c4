/* adamw.cu — AdamW on the device, bitwise equal to the host's loop
 * (src/vec.c adamw_body): the same operations in the same order, each
 * correctly rounded (__fmul_rn, __fadd_rn, __fdiv_rn, __fsqrt_rn never fuse
 * into an FMA), and the file is compiled with -fmad=false besides
 * (Makefile.am), so no contraction can creep in.  One thread per element,
 * grid-stride; one launch per segment of the shard (ops: device_cuda.c).
 * With `sumsq` the gradient scale is clipping's, computed by each thread
 * from the sum of squares the stream wrote before: src/vec.c's
 * sr_vec_clip_scale(sqrt(*sumsq), clip) — correctly rounded double sqrt
 * and division, then one rounding to float — so the host needs no read of
 * the norm before it enqueues the step. */
#include "common.cuh"

__global__ void adamw_k(float *p, const float *g, float *mm, float *vv, size_t n, float b1, float b2, float eps,
                        float bc1, float bc2, float lr, float decay, float gs, const double *sumsq, double clip) {
    if (sumsq) {
        double norm = sqrt(*sumsq); /* (CUDA's double sqrt and division: IEEE, round to nearest) */
        gs = clip > 0 && norm > clip ? (float)(clip / norm) : 1.0f;
    }
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float gr = __fmul_rn(g[i], gs);
        float m = __fadd_rn(__fmul_rn(b1, mm[i]), __fmul_rn(__fsub_rn(1.0f, b1), gr));
        float v = __fadd_rn(__fmul_rn(b2, vv[i]), __fmul_rn(__fmul_rn(__fsub_rn(1.0f, b2), gr), gr));
        mm[i] = m;
        vv[i] = v;
        float mhat = __fdiv_rn(m, bc1), vhat = __fdiv_rn(v, bc2);
        float upd = __fmul_rn(lr, __fadd_rn(__fdiv_rn(mhat, __fadd_rn(__fsqrt_rn(vhat), eps)), __fmul_rn(decay, p[i])));
        p[i] = __fsub_rn(p[i], upd);
    }
}

extern "C" int sr_k_adamw(cudaStream_t s, float *p, const float *g, float *m, float *v, size_t n, float b1, float b2,
                          float eps, float bc1, float bc2, float lr, float decay, float grad_scale, const double *sumsq,
                          double clip) {
    SR_ENTER(adamw, sr_lc_adamw(n));
    if (n == 0)
        return 0;
    return SR_LAUNCH(adamw_k, sr_grid_1d(n, 256, 65535u * 16), 256, 0, s, p, g, m, v, n, b1, b2, eps, bc1, bc2, lr,
                     decay, grad_scale, sumsq, clip);
}
