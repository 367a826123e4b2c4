/* adamw.cu — AdamW on the device, bitwise equal to the host's loop
 * (src/vec.c adamw_body): the same operations in the same order, each
 * correctly rounded (__fmul_rn, __fadd_rn, __fdiv_rn, __fsqrt_rn never fuse
 * into an FMA), and the file is compiled with -fmad=false besides
 * (Makefile.am), so no contraction can creep in.  One launch for the
 * whole shard: the segments (device memory, sr_cuda.h) laid end to end,
 * each block SR_CUDA_ADAMW_ELEMS consecutive elements of them, found by a
 * binary search of the segments' starts, each thread walking forward
 * through the segments its elements fall in (the 768-element bias and
 * norm segments no longer cost a launch each); with the bf16 copy, each
 * updated parameter's bf16 written beside it (the gathers' send buffer:
 * no separate cast).
 * With `sumsq` the gradient scale is clipping's, computed by each thread
 * from the sum of squares the stream wrote before: src/vec.c's
 * sr_vec_clip_scale(sqrt(*sumsq), clip) — correctly rounded double sqrt
 * and division, then one rounding to float — so the host needs no read of
 * the norm before it enqueues the step. */
#include "common.cuh"

__global__ void adamw_k(float *p, const float *g, float *mm, float *vv, __nv_bfloat16 *p16,
                        const sr_cuda_adamw_seg *segs, int nsegs, unsigned long long total, float b1, float b2,
                        float eps, float bc1, float bc2, float lr, float wd, float gs, const double *sumsq,
                        double clip) {
    if (sumsq) {
        double norm = sqrt(*sumsq); /* (CUDA's double sqrt and division: IEEE, round to nearest) */
        gs = clip > 0 && norm > clip ? (float)(clip / norm) : 1.0f;
    }
    unsigned long long base = (unsigned long long)blockIdx.x * SR_CUDA_ADAMW_ELEMS;
    int k = 0, hi = nsegs - 1; /* the segment holding the block's first element: the last starting at or before it */
    while (k < hi) {
        int mid = (k + hi + 1) / 2;
        if (segs[mid].start <= base)
            k = mid;
        else
            hi = mid - 1;
    }
    for (int e = threadIdx.x; e < SR_CUDA_ADAMW_ELEMS; e += blockDim.x) {
        unsigned long long j = base + e;
        if (j >= total)
            break;
        while (j >= segs[k].start + segs[k].n) /* each thread walks forward through the segments its elements span */
            k++;
        size_t i = segs[k].off + (j - segs[k].start);
        float decay = segs[k].decay ? wd : 0.0f;
        float gr = __fmul_rn(g[i], gs);
        float m = __fadd_rn(__fmul_rn(b1, mm[i]), __fmul_rn(__fsub_rn(1.0f, b1), gr));
        float v = __fadd_rn(__fmul_rn(b2, vv[i]), __fmul_rn(__fmul_rn(__fsub_rn(1.0f, b2), gr), gr));
        mm[i] = m;
        vv[i] = v;
        float mhat = __fdiv_rn(m, bc1), vhat = __fdiv_rn(v, bc2);
        float upd = __fmul_rn(lr, __fadd_rn(__fdiv_rn(mhat, __fadd_rn(__fsqrt_rn(vhat), eps)), __fmul_rn(decay, p[i])));
        float np = __fsub_rn(p[i], upd);
        p[i] = np;
        if (p16)
            ((uint16_t *)p16)[i] = sr_bf16_bits_rne(np);
    }
}

extern "C" int sr_k_adamw(cudaStream_t s, float *p, const float *g, float *m, float *v, void *p16,
                          const sr_cuda_adamw_seg *segs, int nsegs, unsigned long long total, float b1, float b2,
                          float eps, float bc1, float bc2, float lr, float decay, float grad_scale, const double *sumsq,
                          double clip) {
    SR_ENTER(adamw, sr_lc_adamw(total, p16 != NULL));
    if (total == 0 || nsegs <= 0)
        return 0;
    unsigned long long blocks = (total + SR_CUDA_ADAMW_ELEMS - 1) / SR_CUDA_ADAMW_ELEMS;
    if (blocks > 0x7fffffffULL)
        return (int)cudaErrorInvalidValue;
    return SR_LAUNCH(adamw_k, (unsigned)blocks, 256, 0, s, p, g, m, v, (__nv_bfloat16 *)p16, segs, nsegs, total, b1, b2,
                     eps, bc1, bc2, lr, decay, grad_scale, sumsq, clip);
}
