/* fdcheck.h — the finite-difference machinery of the op tests (test_ops.c,
 * test_ops_llama.c): random inputs, J = sum(out * R) in double, and central
 * differences over every coordinate against an op's backward.  Static
 * functions: each test program includes it once. */
#ifndef SR_TESTS_FDCHECK_H
#define SR_TESTS_FDCHECK_H

#include <math.h>
#include <stdlib.h>

#include "rng.h"
#include "tap.h"

/* x[i] = scale * N(0, 1), a function of (stream, i) */
static void fill(float *x, size_t n, uint64_t stream, float scale) {
    for (size_t i = 0; i < n; i++)
        x[i] = (float)(scale * sr_rng_normal(42, stream, i));
}

static float *fnew(size_t n) { return calloc(n ? n : 1, sizeof(float)); }

/* n NaNs: the output of an op's overwrite form (beta 0), which must not
 * read what the buffer held */
static float *fnan(size_t n) {
    float *x = fnew(n);
    for (size_t i = 0; x && i < n; i++)
        x[i] = NAN;
    return x;
}

/* n values of stream `stream`: the prior content of an op's += form (beta
 * 1) output; *copy receives a second copy, which the op then adds into */
static float *fprior(size_t n, uint64_t stream, float **copy) {
    float *x = fnew(n);
    *copy = fnew(n);
    fill(x, n, stream, 1);
    for (size_t i = 0; i < n; i++)
        (*copy)[i] = x[i];
    return x;
}

/* in place: got -= prior (the += form's own contribution) */
static float *fminus(float *got, const float *prior, size_t n) {
    for (size_t i = 0; i < n; i++)
        got[i] -= prior[i];
    return got;
}

typedef double (*objective)(void *ctx);

/* Central differences over every coordinate of x; returns the largest error
 * relative to max|analytic| (floored at 1e-3). */
static double fd_check(const char *what, float *x, size_t n, const float *analytic, objective J, void *ctx, float h) {
    double max_err = 0.0, max_an = 0.0;
    for (size_t i = 0; i < n; i++)
        max_an = fmax(max_an, fabs(analytic[i]));
    for (size_t i = 0; i < n; i++) {
        float keep = x[i];
        x[i] = keep + h;
        double jp = J(ctx);
        x[i] = keep - h;
        double jm = J(ctx);
        x[i] = keep;
        double fd = (jp - jm) / (2.0 * (double)h);
        max_err = fmax(max_err, fabs(fd - analytic[i]));
    }
    double rel = max_err / fmax(max_an, 1e-3);
    tap_diag("%s: %zu coordinates, max|fd-an| %.3g, max|an| %.3g, relative %.3g", what, n, max_err, max_an, rel);
    return rel;
}

/* sum(a * r) in double: the objective */
static double dot(const float *a, const float *r, size_t n) {
    double s = 0.0;
    for (size_t i = 0; i < n; i++)
        s += (double)a[i] * r[i];
    return s;
}

#endif
