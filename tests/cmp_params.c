/* cmp_params.c — compares two parameter dumps (SHARDRUN_TEST_DUMP_PARAMS,
 * format in src/fsdp.h) tensor by tensor: max|a-b| <= TOL * max|b|.
 * usage: cmp_params A B [TOL]   exit 0 equal, 1 different, 2 unreadable.
 * Prints the worst tensor.  With TOL 0 it demands bitwise equality. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int32_t n;
    char (*names)[64];
    int64_t *numel;
    float *data;
    size_t total;
} dump;

static void unload(dump *d) {
    free(d->names);
    free(d->numel);
    free(d->data);
    *d = (dump){0};
}

/* 0, or -1 with nothing left to free. */
static int load(const char *path, dump *d) {
    *d = (dump){0};
    FILE *f = fopen(path, "rb");
    char magic[8];
    int ok = f && fread(magic, 1, 8, f) == 8 && memcmp(magic, "SRPARAMS", 8) == 0 && fread(&d->n, 4, 1, f) == 1 &&
             d->n > 0 && d->n < 1000000;
    if (ok) {
        d->names = malloc(64 * (size_t)d->n);
        d->numel = malloc(8 * (size_t)d->n);
        ok = d->names && d->numel;
    }
    for (int i = 0; ok && i < d->n; i++) {
        ok = fread(d->names[i], 1, 64, f) == 64 && fread(&d->numel[i], 8, 1, f) == 1 && d->numel[i] >= 0;
        d->total += ok ? (size_t)d->numel[i] : 0;
    }
    if (ok) {
        d->data = malloc(4 * d->total + 4);
        ok = d->data && fread(d->data, 4, d->total, f) == d->total;
    }
    if (f)
        fclose(f);
    if (!ok)
        unload(d);
    return ok ? 0 : -1;
}

int main(int argc, char **argv) {
    if (argc < 3)
        return 2;
    double tol = argc > 3 ? atof(argv[3]) : 1e-5;
    dump a, b;
    int la = load(argv[1], &a), lb = load(argv[2], &b);
    if (la || lb || a.n != b.n || a.total != b.total) {
        fprintf(stderr, "cmp_params: cannot read or shapes differ\n");
        unload(&a);
        unload(&b);
        return 2;
    }
    size_t off = 0;
    double worst = 0;
    int bad = 0, wi = 0;
    for (int i = 0; i < a.n; i++) {
        double e = 0, m = 0;
        for (int64_t k = 0; k < a.numel[i]; k++) {
            e = fmax(e, fabs((double)a.data[off + k] - b.data[off + k]));
            m = fmax(m, fabs(b.data[off + k]));
        }
        double r = m > 0 ? e / m : e;
        if (r > worst) {
            worst = r;
            wi = i;
        }
        if (tol == 0 ? e != 0 : e > tol * m) {
            bad++;
            printf("  %s: max|a-b| %.3g > %g x max|b| %.3g\n", a.names[i], e, tol, m);
        }
        off += (size_t)a.numel[i];
    }
    printf("%d tensors, worst max|a-b|/max|b| = %.3g in %s; %d over the tolerance %g\n", a.n, worst, a.names[wi], bad,
           tol);
    unload(&a);
    unload(&b);
    return bad ? 1 : 0;
}
