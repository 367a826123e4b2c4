/* test_comm.c — every collective of the CPU transport against values each
 * rank can compute on its own: all-gather, reduce-scatter and all-reduce
 * (sum and average), broadcast from every root, barrier; fp32, bf16 (summed
 * in fp32) and fp64; counts that do not divide by the group size; several
 * asynchronous operations in flight at once.  Run under a PMIx launcher
 * (mpirun -n N); rank 0 prints TAP, and every rank's verdict is gathered so
 * a failure anywhere fails the test.  Alone it runs the one-rank paths. */
#include "srconfig.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "tap.h"
#include "world.h"

static sr_group *g;
static sr_world w;
static int me, n;

/* every rank's verdict: ok only when all ranks passed */
static int all_ok(int ok) {
    double bad = ok ? 0 : 1;
    if (sr_allreduce(g, &bad, 1, SR_DT_F64, SR_OP_SUM, NULL) != SR_OK)
        return 0;
    return bad == 0;
}

static void report(int ok, const char *what) {
    ok = all_ok(ok);
    if (me == 0)
        tap_ok(ok, "%d rank%s: %s", n, n == 1 ? "" : "s", what);
}

static float val(int rank, size_t i) { return (float)((rank + 1) * 1000 + (int)(i % 97)) * 0.25f; }

static void test_f32(size_t per) {
    size_t total = per * (size_t)n;
    float *full = calloc(total, sizeof(float)), *part = calloc(per, sizeof(float));
    /* all-gather */
    for (size_t i = 0; i < per; i++)
        full[(size_t)me * per + i] = val(me, i);
    int ok = sr_allgather(g, full, full + (size_t)me * per, per, SR_DT_F32, NULL) == SR_OK;
    for (int r = 0; r < n; r++)
        for (size_t i = 0; i < per; i++)
            ok = ok && full[(size_t)r * per + i] == val(r, i);
    char what[128];
    snprintf(what, sizeof what, "fp32 all-gather of %zu per rank", per);
    report(ok, what);
    /* reduce-scatter sum and average: rank r contributes val(r, i) everywhere */
    for (int op = 0; op < 2; op++) {
        for (size_t i = 0; i < total; i++)
            full[i] = val(me, i);
        ok = sr_reduce_scatter(g, part, full, per, SR_DT_F32, op ? SR_OP_AVG : SR_OP_SUM, NULL) == SR_OK;
        for (size_t i = 0; i < per; i++) {
            double want = 0;
            for (int r = 0; r < n; r++)
                want += val(r, (size_t)me * per + i);
            if (op)
                want /= n;
            ok = ok && fabs(part[i] - want) <= 1e-6 * fabs(want);
        }
        snprintf(what, sizeof what, "fp32 reduce-scatter (%s) of %zu per rank", op ? "average" : "sum", per);
        report(ok, what);
    }
    /* all-reduce in place, a count that does not divide by n */
    size_t cnt = total + 1;
    float *buf = calloc(cnt, sizeof(float));
    for (size_t i = 0; i < cnt; i++)
        buf[i] = val(me, i);
    ok = sr_allreduce(g, buf, cnt, SR_DT_F32, SR_OP_SUM, NULL) == SR_OK;
    for (size_t i = 0; i < cnt; i++) {
        double want = 0;
        for (int r = 0; r < n; r++)
            want += val(r, i);
        ok = ok && fabs(buf[i] - want) <= 1e-6 * fabs(want);
    }
    snprintf(what, sizeof what, "fp32 all-reduce of %zu (not a multiple of %d)", cnt, n);
    report(ok, what);
    /* broadcast from every root */
    ok = 1;
    for (int root = 0; root < n; root++) {
        for (size_t i = 0; i < cnt; i++)
            buf[i] = me == root ? val(root, i) : -1.0f;
        ok = ok && sr_broadcast(g, buf, cnt, SR_DT_F32, root, NULL) == SR_OK;
        for (size_t i = 0; i < cnt; i++)
            ok = ok && buf[i] == val(root, i);
    }
    report(ok, "fp32 broadcast from every root");
    free(full), free(part), free(buf);
}

static void test_bf16(size_t per) {
    size_t total = per * (size_t)n;
    uint16_t *full = calloc(total, 2), *part = calloc(per, 2);
    for (size_t i = 0; i < total; i++)
        full[i] = sr_f32_to_bf16(1.0f + (float)(i % 7) / 8.0f); /* exact in bf16 */
    int ok = sr_reduce_scatter(g, part, full, per, SR_DT_BF16, SR_OP_SUM, NULL) == SR_OK;
    for (size_t i = 0; i < per; i++) {
        float want = (float)n * (1.0f + (float)(((size_t)me * per + i) % 7) / 8.0f);
        ok = ok && fabsf(sr_bf16_to_f32(part[i]) - want) <= 0.01f * want;
    }
    report(ok, "bf16 reduce-scatter sums (in fp32, rounded per hop)");
    for (size_t i = 0; i < per; i++)
        full[(size_t)me * per + i] = sr_f32_to_bf16((float)(me + 1));
    ok = sr_allgather(g, full, full + (size_t)me * per, per, SR_DT_BF16, NULL) == SR_OK;
    for (int r = 0; r < n; r++)
        ok = ok && sr_bf16_to_f32(full[(size_t)r * per]) == (float)(r + 1);
    report(ok, "bf16 all-gather");
    uint16_t x = sr_f32_to_bf16(0.5f);
    ok = sr_allreduce(g, &x, 1, SR_DT_BF16, SR_OP_AVG, NULL) == SR_OK && sr_bf16_to_f32(x) == 0.5f;
    report(ok, "bf16 all-reduce average");
    free(full), free(part);
}

static void test_async(void) {
    /* three operations in flight, waited in reverse order */
    size_t per = 1000;
    float *a = calloc(per * (size_t)n, 4), *b = calloc(per * (size_t)n, 4);
    double c = me + 1;
    for (size_t i = 0; i < per; i++)
        a[(size_t)me * per + i] = (float)me;
    sr_req *r1, *r2, *r3;
    int ok = sr_allgather(g, a, a + (size_t)me * per, per, SR_DT_F32, &r1) == SR_OK && sr_barrier(g, &r2) == SR_OK &&
             sr_allreduce(g, &c, 1, SR_DT_F64, SR_OP_SUM, &r3) == SR_OK;
    ok = ok && sr_wait(r3) == SR_OK && sr_wait(r2) == SR_OK && sr_wait(r1) == SR_OK;
    ok = ok && c == (double)n * (n + 1) / 2;
    for (int r = 0; r < n; r++)
        ok = ok && a[(size_t)r * per + per - 1] == (float)r;
    report(ok, "asynchronous all-gather, barrier and fp64 all-reduce in flight together");
    free(a), free(b);
}

int main(void) {
    if (!tap_world_open(&w))
        return 1;
    me = w.rank;
    n = w.size;
    sr_transport_opts opts = {.timeout_s = 30, .interface = ""};
    sr_transport *tp;
    int *ranks = malloc(sizeof(int) * (size_t)n);
    for (int i = 0; i < n; i++)
        ranks[i] = i;
    if (sr_transport_open(&tp, &w, &opts) != SR_OK || sr_group_create(tp, ranks, n, &g) != SR_OK ||
        sr_transport_connect(tp) != SR_OK) {
        if (me == 0)
            printf("1..1\nnot ok 1 - transport: %s\n", sr_error_message());
        return me == 0;
    }
    test_f32(1);
    test_f32(3001);
    test_f32(1 << 19); /* 2 MiB per rank: several pieces per ring step */
    test_bf16(513);
    test_async();
    sr_transport_close(tp);
    sr_world_close(&w);
    free(ranks);
    return me == 0 ? tap_done() : 0;
}
