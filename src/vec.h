/* vec.h — the element-wise host loops outside the ops: bf16 casts and folds,
 * sums in a wire dtype, AdamW over a range.
 *
 * vec owns these loops so that the sharding engine, the optimizer and the
 * transport share one implementation each, compiled for every ISA level
 * (isa.h).  The plain forms are serial — they run on the caller's thread,
 * e.g. the transport's progress thread, which must not open an OpenMP
 * region of its own — and the _par forms split the range over the OpenMP
 * team.  Results never depend on the split or the ISA level: every output
 * element is computed by the same scalar expression. */
#ifndef SR_VEC_H
#define SR_VEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dtype.h"

/* dst[i] = bf16(src[i]), round to nearest even */
void sr_vec_f32_to_bf16_par(uint16_t *dst, const float *src, size_t n);
/* dst[i] = f32(src[i]) */
void sr_vec_bf16_to_f32_par(float *dst, const uint16_t *src, size_t n);
/* acc[i] += src[i] */
void sr_vec_add_f32(float *acc, const float *src, size_t n);
/* acc[i] += f32(src[i]) */
void sr_vec_add_bf16_to_f32(float *acc, const uint16_t *src, size_t n);
/* partial[i] += own[i] in dtype dt (f32, bf16 — summed in fp32 and rounded
 * once — or f64) */
void sr_vec_add(void *partial, const void *own, size_t n, sr_dtype dt);
/* dst[i] = src[i] * scale in dtype dt (dst may equal src) */
void sr_vec_scale(void *dst, const void *src, size_t n, sr_dtype dt, double scale);

/* AdamW on n elements: g = grad * grad_scale; m = b1 m + (1 - b1) g;
 * v = b2 v + (1 - b2) g^2; p -= lr (m/bc1 / (sqrt(v/bc2) + eps) + decay p). */
typedef struct {
    float b1, b2, eps, bc1, bc2, lr, decay, grad_scale;
} sr_adamw_args;
void sr_vec_adamw_par(float *params, const float *grads, float *m, float *v, size_t n, const sr_adamw_args *a);
/* The grad_scale of clipping to `clip` (0: no clipping) at gradient norm
 * `norm`: clip / norm in double, rounded to float, when norm exceeds clip,
 * else 1 (a NaN norm: 1).  The one formula: the host's step (train.c) and
 * the tables' adamw from a sum of squares (device.h; kernels/adamw.cu
 * repeats it in device code, the same IEEE operations). */
float sr_vec_clip_scale(double norm, double clip);
/* The same on the calling thread alone (the caller parallelises around it:
 * device_cpu.c splits a whole shard's segments into one contiguous range
 * per thread).  Every element is the same expression in both, so any split
 * gives the same bits. */
void sr_vec_adamw(float *params, const float *grads, float *m, float *v, size_t n, const sr_adamw_args *a);

/* memcpy of `bytes` split over the OpenMP team in 4 KiB-aligned parts
 * (one thread below 4 MiB): host copies that should run at the memory's
 * bandwidth (the asynchronous checkpoint's snapshot, bench_adamw). */
void sr_vec_copy_par(void *dst, const void *src, size_t bytes);

/* Sum of squares of n floats, in double, in a fixed order (the same for
 * any thread count). */
double sr_vec_sum_squares(const float *x, size_t n);

/* Thread `id` of `nt`'s part [lo, hi) of n elements, in 64-element blocks. */
static inline void sr_vec_split(size_t n, int id, int nt, size_t *lo, size_t *hi) {
    size_t blocks = (n + 63) / 64, per = blocks / (size_t)nt, extra = blocks % (size_t)nt;
    size_t b0 = (size_t)id * per + ((size_t)id < extra ? (size_t)id : extra);
    size_t b1 = b0 + per + ((size_t)id < extra ? 1 : 0);
    *lo = b0 * 64 < n ? b0 * 64 : n;
    *hi = b1 * 64 < n ? b1 * 64 : n;
}

#endif
