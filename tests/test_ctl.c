/* test_ctl.c — the control plane on 1..4 ranks (run under mpirun -n N; alone
 * it runs the one-rank paths): agreements (all succeed; one rank fails and
 * every rank gets its status and message, prefixed with the rank; the
 * lowest failing rank wins), sums of doubles, the minimum, broadcasts of
 * int64 from every root, all-gathers of bytes that are not floats.  Rank 0
 * prints TAP; every check is every rank's verdict. */
#include "srconfig.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "ctl.h"
#include "tap.h"
#include "world.h"

static sr_ctl *ctl;
static int me, n;

static void report(int ok, const char *what) {
    double bad = ok ? 0 : 1;
    if (sr_ctl_sum(ctl, &bad, 1) != SR_OK)
        bad = 1;
    if (me == 0)
        tap_ok(bad == 0, "%d rank%s: %s", n, n == 1 ? "" : "s", what);
}

int main(void) {
    sr_world w;
    if (!tap_world_open(&w))
        return 1;
    me = w.rank;
    n = w.size;
    sr_transport_opts o = {.timeout_s = 30, .interface = ""};
    sr_transport *tp = NULL;
    if (sr_transport_open(&tp, &w, &o) != SR_OK || sr_ctl_open(&ctl, tp, n) != SR_OK ||
        sr_transport_connect(tp) != SR_OK) {
        if (me == 0)
            printf("1..1\nnot ok 1 - control plane: %s\n", sr_error_message());
        return me == 0;
    }

    sr_ctl_word *all = NULL;
    sr_status st = sr_ctl_agree(ctl, SR_OK, me, 100 + (uint64_t)me, NULL, &all);
    int ok = st == SR_OK && all;
    for (int r = 0; ok && r < n; r++)
        ok = all[r].status == SR_OK && all[r].flag == r && all[r].value == 100 + (uint64_t)r;
    free(all);
    report(ok, "everyone succeeds: SR_OK, and every rank's flag and value in rank order");

    int failing = n - 1; /* the last rank fails with 74 */
    st = sr_ctl_agree(ctl, me == failing ? SR_ERR_IO : SR_OK, 0, 0, me == failing ? "disk full here" : NULL, NULL);
    char want[64];
    snprintf(want, sizeof want, "rank %d: disk full here", failing);
    ok = st == SR_ERR_IO &&
         (me == failing ? strcmp(sr_error_message(), "disk full here") == 0 : strcmp(sr_error_message(), want) == 0);
    report(ok, "one rank fails: every rank returns its status, the others name it");

    st = sr_ctl_agree(ctl, me >= 1 ? SR_ERR_DATA : SR_OK, 0, 0, "bad", NULL);
    report(n == 1 ? st == SR_OK
                  : st == SR_ERR_DATA && (me == 1 ? strcmp(sr_error_message(), "bad") == 0
                                                  : strstr(sr_error_message(), "rank 1: bad") != NULL),
           "several fail: the lowest failing rank's status and message");

    double v[3] = {me + 0.5, 1.0, -(double)me};
    st = sr_ctl_sum(ctl, v, 3);
    report(st == SR_OK && v[0] == n * (n - 1) / 2.0 + 0.5 * n && v[1] == n && v[2] == -(n * (n - 1) / 2.0),
           "sums of doubles");

    int64_t lo = 10 - me;
    st = sr_ctl_min(ctl, &lo);
    report(st == SR_OK && lo == 10 - (n - 1), "the minimum over ranks");

    ok = 1;
    for (int root = 0; root < n; root++) {
        int64_t steps[5] = {me, me, me, me, me};
        if (me == root)
            for (int i = 0; i < 5; i++)
                steps[i] = 1000 * root + i + ((int64_t)1 << 40);
        st = sr_ctl_broadcast(ctl, steps, 5, root);
        for (int i = 0; i < 5; i++)
            ok = ok && st == SR_OK && steps[i] == 1000 * root + i + ((int64_t)1 << 40);
    }
    report(ok, "broadcasts of int64 beyond 2^40 from every root");

    /* bytes that would be NaN or denormal floats arrive unchanged */
    unsigned char mine[7], got[4 * 7];
    for (int i = 0; i < 7; i++)
        mine[i] = (unsigned char)(0xff - me * 16 - i);
    st = sr_ctl_allgather(ctl, got, mine, sizeof mine);
    ok = st == SR_OK;
    for (int r = 0; ok && r < n; r++)
        for (int i = 0; i < 7; i++)
            ok = ok && got[r * 7 + i] == (unsigned char)(0xff - r * 16 - i);
    report(ok, "an all-gather of 7 bytes per rank (NaN patterns included) arrives unchanged");

    sr_ctl_close(ctl);
    sr_transport_close(tp);
    sr_world_close(&w);
    return me == 0 ? tap_done() : 0;
}
