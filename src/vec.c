/* vec.c — element-wise host loops compiled per ISA level; see vec.h. */
#include "srconfig.h"

#include "vec.h"

#include <math.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "isa.h"

/* The OpenMP team splits large ranges; below this many elements one thread
 * is faster than waking the team. */
#define PAR_MIN 65536

static inline int thread_id(void) {
#ifdef _OPENMP
    return omp_get_thread_num();
#else
    return 0;
#endif
}

static inline int team_size(void) {
#ifdef _OPENMP
    return omp_get_num_threads();
#else
    return 1;
#endif
}

static inline SR_ISA_INLINE void to_bf16_body(uint16_t *dst, const float *src, size_t n) {
    for (size_t i = 0; i < n; i++)
        dst[i] = sr_f32_to_bf16(src[i]);
}
SR_ISA_KERNEL(to_bf16, (uint16_t * dst, const float *src, size_t n), (dst, src, n))

static inline SR_ISA_INLINE void to_f32_body(float *dst, const uint16_t *src, size_t n) {
    for (size_t i = 0; i < n; i++)
        dst[i] = sr_bf16_to_f32(src[i]);
}
SR_ISA_KERNEL(to_f32, (float *dst, const uint16_t *src, size_t n), (dst, src, n))

static inline SR_ISA_INLINE void add_f32_body(float *acc, const float *src, size_t n) {
    for (size_t i = 0; i < n; i++)
        acc[i] += src[i];
}
SR_ISA_KERNEL(add_f32, (float *acc, const float *src, size_t n), (acc, src, n))

static inline SR_ISA_INLINE void add_bf16_f32_body(float *acc, const uint16_t *src, size_t n) {
    for (size_t i = 0; i < n; i++)
        acc[i] += sr_bf16_to_f32(src[i]);
}
SR_ISA_KERNEL(add_bf16_f32, (float *acc, const uint16_t *src, size_t n), (acc, src, n))

static inline SR_ISA_INLINE void add_f64_body(double *acc, const double *src, size_t n) {
    for (size_t i = 0; i < n; i++)
        acc[i] += src[i];
}
SR_ISA_KERNEL(add_f64, (double *acc, const double *src, size_t n), (acc, src, n))

static inline SR_ISA_INLINE void add_bf16_body(uint16_t *acc, const uint16_t *src, size_t n) {
    for (size_t i = 0; i < n; i++)
        acc[i] = sr_f32_to_bf16(sr_bf16_to_f32(acc[i]) + sr_bf16_to_f32(src[i]));
}
SR_ISA_KERNEL(add_bf16, (uint16_t * acc, const uint16_t *src, size_t n), (acc, src, n))

/* restrict: the four arrays never overlap, which lets the compiler
 * vectorise the loop; every element is still the same scalar expression. */
static inline SR_ISA_INLINE void adamw_body(float *restrict p, const float *restrict grads, float *restrict mm,
                                            float *restrict vv, size_t n, const sr_adamw_args *a) {
    const float b1 = a->b1, b2 = a->b2, eps = a->eps, bc1 = a->bc1, bc2 = a->bc2, lr = a->lr, decay = a->decay,
                gs = a->grad_scale;
    for (size_t i = 0; i < n; i++) {
        float g = grads[i] * gs;
        float m = b1 * mm[i] + (1.0f - b1) * g;
        float v = b2 * vv[i] + (1.0f - b2) * g * g;
        mm[i] = m;
        vv[i] = v;
        float mhat = m / bc1, vhat = v / bc2;
        p[i] -= lr * (mhat / (sqrtf(vhat) + eps) + decay * p[i]);
    }
}
SR_ISA_KERNEL(adamw, (float *p, const float *g, float *m, float *v, size_t n, const sr_adamw_args *a),
              (p, g, m, v, n, a))

float sr_vec_clip_scale(double norm, double clip) { return clip > 0 && norm > clip ? (float)(clip / norm) : 1.0f; }

void sr_vec_f32_to_bf16_par(uint16_t *dst, const float *src, size_t n) {
#pragma omp parallel if (n > PAR_MIN)
    {
        size_t lo, hi;
        sr_vec_split(n, thread_id(), team_size(), &lo, &hi);
        to_bf16(dst + lo, src + lo, hi - lo);
    }
}

void sr_vec_bf16_to_f32_par(float *dst, const uint16_t *src, size_t n) {
#pragma omp parallel if (n > PAR_MIN)
    {
        size_t lo, hi;
        sr_vec_split(n, thread_id(), team_size(), &lo, &hi);
        to_f32(dst + lo, src + lo, hi - lo);
    }
}

void sr_vec_add_f32(float *acc, const float *src, size_t n) { add_f32(acc, src, n); }

void sr_vec_add_bf16_to_f32(float *acc, const uint16_t *src, size_t n) { add_bf16_f32(acc, src, n); }

void sr_vec_add(void *partial, const void *own, size_t n, sr_dtype dt) {
    if (dt == SR_DT_F32)
        add_f32(partial, own, n);
    else if (dt == SR_DT_F64)
        add_f64(partial, own, n);
    else if (dt == SR_DT_BF16)
        add_bf16(partial, own, n);
}

void sr_vec_scale(void *dst, const void *src, size_t n, sr_dtype dt, double scale) {
    for (size_t i = 0; i < n; i++) {
        if (dt == SR_DT_F32)
            ((float *)dst)[i] = ((const float *)src)[i] * (float)scale;
        else if (dt == SR_DT_F64)
            ((double *)dst)[i] = ((const double *)src)[i] * scale;
        else if (dt == SR_DT_BF16)
            ((uint16_t *)dst)[i] = sr_f32_to_bf16(sr_bf16_to_f32(((const uint16_t *)src)[i]) * (float)scale);
    }
}

void sr_vec_adamw_par(float *params, const float *grads, float *m, float *v, size_t n, const sr_adamw_args *a) {
#pragma omp parallel
    {
        size_t lo, hi;
        sr_vec_split(n, thread_id(), team_size(), &lo, &hi);
        if (hi > lo)
            adamw(params + lo, grads + lo, m + lo, v + lo, hi - lo, a);
    }
}

void sr_vec_adamw(float *params, const float *grads, float *m, float *v, size_t n, const sr_adamw_args *a) {
    adamw(params, grads, m, v, n, a);
}

void sr_vec_copy_par(void *dst, const void *src, size_t bytes) {
#pragma omp parallel if (bytes > ((size_t)4 << 20))
    {
        size_t lo, hi;
        sr_vec_split(bytes / 64, thread_id(), team_size(), &lo, &hi);
        memcpy((char *)dst + lo * 64, (const char *)src + lo * 64, (hi - lo) * 64);
    }
    size_t done = bytes / 64 * 64;
    memcpy((char *)dst + done, (const char *)src + done, bytes - done);
}

double sr_vec_sum_squares(const float *x, size_t n) {
    /* Fixed-size blocks summed in order: the same result for any thread
     * count.  The partial sums live on the stack in pieces of at most 4096
     * blocks, so the sum never allocates (it runs on the step path). */
    enum { BLOCK = 4096, PIECE = 4096 };
    double part[PIECE], total = 0.0;
    for (size_t base = 0; base < n; base += (size_t)BLOCK * PIECE) {
        size_t len = n - base < (size_t)BLOCK * PIECE ? n - base : (size_t)BLOCK * PIECE;
        size_t nb = (len + BLOCK - 1) / BLOCK;
#pragma omp parallel for
        for (size_t b = 0; b < nb; b++) {
            size_t lo = base + b * BLOCK, hi = lo + BLOCK < base + len ? lo + BLOCK : base + len;
            double s = 0.0;
            for (size_t i = lo; i < hi; i++)
                s += (double)x[i] * x[i];
            part[b] = s;
        }
        for (size_t b = 0; b < nb; b++)
            total += part[b];
    }
    return total;
}
