/* primitives.h — the checks of kernels/mma.cuh's warp-level primitives
 * (through kernels/probe.cu) against the tables of tests/data
 * (primitives.py: derived from the PTX ISA, not from the emulator), bit
 * for bit, and of tile_gemm.cu against the CPU op; shared by
 * tests/test_primitives (the emulator tree in CI) and tests/test_kernels
 * (on a GPU: the proof that the emulator's fragment layouts are the
 * hardware's).  Header-only (one TAP counter per program: tap.h), static
 * by house rule; the program includes tap.h first. */
#ifndef SR_TEST_PRIMITIVES_H
#define SR_TEST_PRIMITIVES_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "../kernels/sr_cuda.h"
#include "dtype.h"
#include "ops.h"

/* The lines of a table that are not comments, split into at most 32
 * numbers each (strtoul/strtod base 0); the count of lines. */
typedef struct {
    char kind[16];
    double v[32];
    int n;
} pr_row;

static int pr_read_table(const char *dir, const char *name, pr_row *rows, int max, int with_kind) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    char line[1024];
    int n = 0;
    while (n < max && fgets(line, sizeof line, f)) {
        if (line[0] == '#' || line[0] == '\n')
            continue;
        pr_row *r = &rows[n];
        memset(r, 0, sizeof *r);
        char *p = line, *end;
        if (with_kind) {
            int used = 0;
            if (sscanf(p, "%15s%n", r->kind, &used) != 1)
                continue;
            p += used;
        }
        while (r->n < 32) {
            double x = (double)strtoull(p, &end, 0);
            if (end == p)
                break;
            r->v[r->n++] = x;
            p = end;
        }
        n++;
    }
    fclose(f);
    return n;
}

static void *pr_dev_copy(const void *host, size_t bytes) {
    void *d = NULL;
    if (cudaMalloc(&d, bytes) != cudaSuccess)
        return NULL;
    if (host)
        cudaMemcpy(d, host, bytes, cudaMemcpyHostToDevice);
    else
        cudaMemset(d, 0, bytes);
    return d;
}

static int pr_run(int e, const char *what) {
    if (e == 0)
        e = (int)cudaDeviceSynchronize();
    if (e != 0)
        tap_diag("%s: %s", what, cudaGetErrorString((cudaError_t)e));
    return e;
}

static void pr_check_mma(const char *dir) {
    pr_row t[32];
    int n = pr_read_table(dir, "mma_m16n8k16.txt", t, 32, 0);
    if (!tap_ok(n == 32, "tests/data/mma_m16n8k16.txt: 32 lanes (%d)", n))
        return;
    uint32_t a[32][4], b[32][2], dw[32][4];
    float c[32][4], d[32][4];
    for (int l = 0; l < 32; l++) {
        for (int i = 0; i < 4; i++)
            a[l][i] = (uint32_t)t[l].v[1 + i];
        for (int i = 0; i < 2; i++)
            b[l][i] = (uint32_t)t[l].v[5 + i];
        for (int i = 0; i < 4; i++) {
            uint32_t u = (uint32_t)t[l].v[7 + i];
            memcpy(&c[l][i], &u, 4);
            dw[l][i] = (uint32_t)t[l].v[11 + i];
        }
    }
    void *da = pr_dev_copy(a, sizeof a), *db = pr_dev_copy(b, sizeof b), *dc = pr_dev_copy(c, sizeof c),
         *dd = pr_dev_copy(NULL, sizeof d);
    int e = pr_run(sr_k_probe(0, SR_PROBE_MMA, da, db, dc, dd, NULL, 0, 0, 0), "mma");
    cudaMemcpy(d, dd, sizeof d, cudaMemcpyDeviceToHost);
    int bad = 0, first = -1;
    for (int l = 0; l < 32; l++)
        for (int i = 0; i < 4; i++) {
            uint32_t u;
            memcpy(&u, &d[l][i], 4);
            if (u != dw[l][i] && bad++ == 0)
                first = l * 4 + i;
        }
    tap_ok(e == 0 && bad == 0,
           "mma.sync.m16n8k16.row.col.f32.bf16.bf16.f32: every lane's d0..d3 is the table's, bit for bit (PTX ISA "
           "9.7.14.5.8's fragments; %d of 128 differ%s)",
           bad, "");
    if (bad) {
        float want;
        memcpy(&want, &dw[first / 4][first % 4], 4);
        tap_diag("first: lane %d d%d = %g, the table %g", first / 4, first % 4, d[first / 4][first % 4], want);
    }
    cudaFree(da), cudaFree(db), cudaFree(dc), cudaFree(dd);
}

static void pr_check_ldmatrix(const char *dir) {
    pr_row t[6 * 32];
    int n = pr_read_table(dir, "ldmatrix.txt", t, 6 * 32, 0);
    if (!tap_ok(n == 6 * 32, "tests/data/ldmatrix.txt: 6 forms x 32 lanes (%d)", n))
        return;
    uint16_t mats[4 * 64];
    for (int m = 0; m < 4; m++)
        for (int r = 0; r < 8; r++)
            for (int c = 0; c < 8; c++)
                mats[m * 64 + r * 8 + c] = (uint16_t)(0x100 * m + 0x10 * r + c);
    uint32_t out[6][32][4];
    void *dm = pr_dev_copy(mats, sizeof mats), *dout = pr_dev_copy(NULL, sizeof out);
    int e = pr_run(sr_k_probe(0, SR_PROBE_LDMATRIX, dm, NULL, NULL, dout, NULL, 0, 0, 0), "ldmatrix");
    cudaMemcpy(out, dout, sizeof out, cudaMemcpyDeviceToHost);
    /* the kernel's forms, in order: (1,0) (1,1) (2,0) (2,1) (4,0) (4,1) */
    for (int v = 0; v < 6; v++) {
        int num = v < 2 ? 1 : v < 4 ? 2 : 4, trans = v & 1, bad = 0;
        for (int i = 0; i < n; i++) {
            if ((int)t[i].v[0] != num || (int)t[i].v[1] != trans)
                continue;
            int l = (int)t[i].v[2];
            for (int m = 0; m < num; m++)
                bad += out[v][l][m] != (uint32_t)t[i].v[3 + m];
        }
        tap_ok(e == 0 && bad == 0,
               "ldmatrix.sync.aligned.m8n8.x%d%s.shared.b16: every lane's registers are the table's (PTX ISA "
               "9.7.14.5.15; %d differ)",
               num, trans ? ".trans" : "", bad);
    }
    cudaFree(dm), cudaFree(dout);
}

static void pr_check_shfl(const char *dir) {
    pr_row t[256];
    int n = pr_read_table(dir, "shfl.txt", t, 256, 1);
    if (!tap_ok(n > 100, "tests/data/shfl.txt: %d lines", n))
        return;
    static const char *const kinds[] = {"xor", "idx", "up", "down", "ballot"};
    unsigned *dout = pr_dev_copy(NULL, 32 * sizeof(unsigned));
    for (int i = 0; i < n;) {
        int k = 0;
        while (k < 5 && strcmp(kinds[k], t[i].kind) != 0)
            k++;
        unsigned mask = (unsigned)t[i].v[0];
        int arg = (int)t[i].v[1], active = (int)t[i].v[2];
        unsigned out[32];
        cudaMemset(dout, 0, sizeof out);
        int e = k < 5
                    ? pr_run(sr_k_probe(0, SR_PROBE_SHFL + k, NULL, NULL, NULL, dout, NULL, active, mask, arg), "shfl")
                    : -1;
        cudaMemcpy(out, dout, sizeof out, cudaMemcpyDeviceToHost);
        int bad = 0, j = i;
        for (; j < n && strcmp(t[j].kind, t[i].kind) == 0 && (unsigned)t[j].v[0] == mask && (int)t[j].v[1] == arg; j++)
            bad += out[(int)t[j].v[3]] != (unsigned)t[j].v[4];
        tap_ok(e == 0 && bad == 0, "%s (mask 0x%08x, %d, %d lanes): every lane's value is the table's (%d differ)",
               k == 4   ? "__ballot_sync"
               : k == 0 ? "__shfl_xor_sync"
               : k == 1 ? "__shfl_sync"
               : k == 2 ? "__shfl_up_sync"
                        : "__shfl_down_sync",
               mask, arg, active, bad);
        i = j;
    }
    cudaFree(dout);
}

static void pr_check_bf16x2(const char *dir) {
    pr_row t[16];
    int n = pr_read_table(dir, "bf16x2.txt", t, 16, 0);
    if (!tap_ok(n > 0, "tests/data/bf16x2.txt: %d pairs", n))
        return;
    float in[32];
    uint32_t want[16], out[16];
    float back[32];
    for (int i = 0; i < n; i++) {
        uint32_t lo = (uint32_t)t[i].v[0], hi = (uint32_t)t[i].v[1];
        memcpy(&in[2 * i], &lo, 4);
        memcpy(&in[2 * i + 1], &hi, 4);
        want[i] = (uint32_t)t[i].v[2];
    }
    void *din = pr_dev_copy(in, sizeof in), *dout = pr_dev_copy(NULL, sizeof out),
         *dback = pr_dev_copy(NULL, sizeof back);
    int e = pr_run(sr_k_probe(0, SR_PROBE_BF16X2, din, NULL, NULL, dout, dback, n, 0, 0), "bf16x2");
    cudaMemcpy(out, dout, sizeof out, cudaMemcpyDeviceToHost);
    cudaMemcpy(back, dback, sizeof back, cudaMemcpyDeviceToHost);
    int bad = 0, badback = 0;
    for (int i = 0; i < n; i++) {
        bad += out[i] != want[i];
        for (int k = 0; k < 2; k++) {
            uint32_t u = (want[i] >> (16 * k) & 0xffffu) << 16, got;
            memcpy(&got, &back[2 * i + k], 4);
            badback += got != u;
        }
    }
    tap_ok(e == 0 && bad == 0 && badback == 0,
           "bf16x2: %d pairs packed round-to-nearest-even, the first in the low half, and unpacked exactly (%d, %d "
           "differ)",
           n, bad, badback);
    cudaFree(din), cudaFree(dout), cudaFree(dback);
}

static void pr_check_cp_async(void) {
    /* 64 KiB of dynamic shared memory: past the 48 KiB default, so the
     * kernel's attribute is what lets it launch */
    int n = 16384;
    uint32_t *src = malloc(sizeof *src * (size_t)n), *dst = malloc(sizeof *dst * (size_t)n);
    for (int i = 0; i < n; i++)
        src[i] = 0x9e3779b9u * (uint32_t)i;
    void *ds = pr_dev_copy(src, sizeof *src * (size_t)n), *dd = pr_dev_copy(NULL, sizeof *dst * (size_t)n);
    int e = pr_run(sr_k_probe(0, SR_PROBE_CP_ASYNC, ds, NULL, NULL, dd, NULL, n, 0, 0), "cp.async");
    cudaMemcpy(dst, dd, sizeof *dst * (size_t)n, cudaMemcpyDeviceToHost);
    int bad = 0;
    for (int i = 0; i < n; i++)
        bad += dst[i] != src[i];
    tap_ok(e == 0 && bad == 0,
           "cp.async .ca 4 and 8 bytes, .cg 16, in three groups through 64 KiB of dynamic shared memory, each read "
           "after the wait_group that lands it: every word arrives (%d differ)",
           bad);
    cudaFree(ds), cudaFree(dd);
    free(src), free(dst);
}

static float pr_bf16_round(float x) { return sr_bf16_to_f32(sr_f32_to_bf16(x)); }

static void pr_check_tile_gemm(void) {
    int M = 128, N = 192, K = 96;
    float *a = malloc(sizeof(float) * (size_t)M * K), *b = malloc(sizeof(float) * (size_t)N * K);
    float *c = malloc(sizeof(float) * (size_t)M * N), *ref = malloc(sizeof(float) * (size_t)M * N);
    uint16_t *ha = malloc(sizeof *ha * (size_t)M * K), *hb = malloc(sizeof *hb * (size_t)N * K);
    uint64_t x = 12345;
    for (int i = 0; i < M * K + N * K; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        float v = pr_bf16_round((float)((double)(x >> 40) / (double)(1ull << 24) * 2.0 - 1.0));
        if (i < M * K)
            a[i] = v, ha[i] = sr_f32_to_bf16(v);
        else
            b[i - M * K] = v, hb[i - M * K] = sr_f32_to_bf16(v);
    }
    /* the CPU op: out[M, N] = a[M, K] b[N, K]^T (matmul_forward's weight layout) */
    sr_ops_cpu.matmul_forward(ref, a, b, NULL, M, K, N);
    void *da = pr_dev_copy(ha, sizeof *ha * (size_t)M * K), *db = pr_dev_copy(hb, sizeof *hb * (size_t)N * K),
         *dc = pr_dev_copy(NULL, sizeof(float) * (size_t)M * N);
    int e = pr_run(sr_k_tile_gemm_bf16(0, dc, da, db, M, N, K), "tile_gemm");
    cudaMemcpy(c, dc, sizeof(float) * (size_t)M * N, cudaMemcpyDeviceToHost);
    double worst = 0, top = 0;
    for (int i = 0; i < M * N; i++) {
        worst = fmax(worst, fabs((double)c[i] - ref[i]));
        top = fmax(top, fabs((double)ref[i]));
    }
    tap_ok(e == 0 && worst <= 1e-5 * top,
           "tile_gemm (%d x %d x %d, bf16 in, f32 out): the CPU op's matmul_forward within 1e-5 of max |C| (max diff "
           "%.2e, max |C| %.2f)",
           M, N, K, worst, top);
    tap_ok(sr_k_tile_gemm_bf16(0, dc, da, db, 100, N, K) == (int)cudaErrorInvalidValue,
           "tile_gemm refuses M = 100 (not a multiple of 64)");
    cudaFree(da), cudaFree(db), cudaFree(dc);
    free(a), free(b), free(c), free(ref), free(ha), free(hb);
}

/* Every check above; srcdir: the source tree (its tests/data). */
static void sr_check_primitives(const char *srcdir) {
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/tests/data", srcdir && *srcdir ? srcdir : ".");
    pr_check_mma(dir);
    pr_check_ldmatrix(dir);
    pr_check_shfl(dir);
    pr_check_bf16x2(dir);
    pr_check_cp_async();
    pr_check_tile_gemm();
}

#endif
