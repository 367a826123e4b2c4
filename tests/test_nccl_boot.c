/* test_nccl_boot.c — the NCCL bootstrap without a GPU, under a PMIx
 * launcher (mpirun -n N; tests/nccl.sh runs it on 2 and 4 ranks): rank 0's
 * unique id (ncclGetUniqueId needs no GPU) arrives byte-identical on every
 * rank through the PMIx exchange; the group-declaration check passes when
 * every rank declared the same groups and refuses, on every rank, naming
 * the odd rank, when one declared a group more; the NCCL result codes map
 * to the statuses of doc/ARCHITECTURE.md §3c.  Rank 0 prints TAP; every rank's
 * verdict is gathered so a failure anywhere fails the test.
 *
 * With `busid` as its argument it runs only the duplicate-GPU check with
 * the bus ids of SHARDRUN_TEST_GPU_BUSID and exits with the check's status
 * (78 and one message for two ranks on one GPU), as a training run would
 * before NCCL init. */
#include "srconfig.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "comm_nccl.h"
#include "tap.h"
#include "world.h"

static sr_world w;

/* every rank's verdict, through PMIx: ok only when all ranks passed */
static int all_ok(int ok, const char *key) {
    int32_t mine = ok ? 0 : 1;
    int rank;
    int32_t value;
    if (sr_world_first_nonzero(&w, key, mine, &rank, &value, 60) != SR_OK)
        return 0;
    return rank < 0;
}

static int busid_mode(void) {
    char bus[64];
    sr_status st = sr_nccl_test_busid(w.local_rank, "0000:00:00.0", bus, sizeof bus);
    st = sr_nccl_check_unique_gpu(&w, st == SR_OK ? bus : NULL, 60); /* every rank takes part, as a run does */
    if (st != SR_OK)
        fprintf(stderr, "test_nccl_boot[rank %d]: error: %s\n", w.rank, sr_error_message());
    else
        printf("rank %d: bus %s is this rank's alone\n", w.rank, bus);
    sr_world_close(&w);
    return sr_status_exit_code(st);
}

static sr_status declare(sr_transport *tp, const char *name, const int *ranks, int n, sr_group **out) {
    sr_status st = sr_group_create(tp, ranks, n, out);
    if (st == SR_OK)
        sr_group_set_name(*out, name);
    return st;
}

int main(int argc, char **argv) {
    if (sr_world_init(&w) != SR_OK) {
        fprintf(stderr, "test_nccl_boot: %s\n", sr_error_message());
        return 1;
    }
    if (argc > 1 && strcmp(argv[1], "busid") == 0)
        return busid_mode();
    int me = w.rank, n = w.size;

    /* 1. the unique id */
    unsigned char id[SR_NCCL_ID_BYTES];
    memset(id, 0, sizeof id);
    sr_status st = sr_nccl_exchange_id(&w, id, 60);
    if (st != SR_OK)
        fprintf(stderr, "rank %d: %s\n", me, sr_error_message());
    unsigned char *all = calloc((size_t)n, sizeof id);
    int same = st == SR_OK && all && sr_world_allgather(&w, "test.ids", id, sizeof id, all, 60) == SR_OK;
    for (int r = 1; same && r < n; r++)
        same = memcmp(all + (size_t)r * sizeof id, all, sizeof id) == 0;
    int nonzero = 0;
    for (size_t i = 0; i < sizeof id; i++)
        nonzero |= id[i] != 0;
    same = all_ok(same && nonzero, "test.v1");
    if (me == 0) {
        tap_ok(same, "%d ranks: rank 0's NCCL unique id arrives byte-identical on every rank (PMIx exchange)", n);
        char hex[2 * 16 + 1];
        for (int i = 0; i < 16; i++)
            snprintf(hex + 2 * i, 3, "%02x", id[i]);
        tap_diag("id starts %s", hex);
    }
    free(all);

    /* 2. the group declarations */
    sr_transport *tp = NULL;
    sr_transport_opts o = {60, "127.0.0.1", NULL};
    st = sr_transport_open(&tp, &w, &o);
    int *ranks = calloc((size_t)n, sizeof(int));
    sr_group *g[4] = {NULL, NULL, NULL, NULL};
    int ok = st == SR_OK && ranks;
    for (int r = 0; ok && r < n; r++)
        ranks[r] = r;
    if (ok)
        ok = declare(tp, "shard", ranks, n, &g[0]) == SR_OK && declare(tp, "replicate", &me, 1, &g[1]) == SR_OK;
    st = ok ? sr_nccl_check_groups(&w, g, 2, 60) : SR_ERR_INTERNAL;
    if (st != SR_OK)
        fprintf(stderr, "rank %d: %s\n", me, sr_error_message());
    ok = all_ok(st == SR_OK, "test.v2");
    if (me == 0)
        tap_ok(ok, "%d ranks: the same groups on every rank pass the declaration check", n);
    /* the last rank declares a reshard group more */
    int extra = 0;
    if (ok && me == n - 1)
        extra = declare(tp, "reshard (blocks)", ranks, n, &g[2]) == SR_OK;
    st = sr_nccl_check_groups(&w, g, 2 + extra, 60);
    char want[64];
    snprintf(want, sizeof want, "rank %d has 3 groups", n - 1);
    ok = st == SR_ERR_INTERNAL && strstr(sr_error_message(), want) && strstr(sr_error_message(), "rank 0 has 2 groups");
    if (!ok)
        fprintf(stderr, "rank %d: status %d: %s\n", me, (int)st, sr_error_message());
    ok = all_ok(ok, "test.v3");
    if (me == 0) {
        tap_ok(ok, "%d ranks: a rank with a group more is refused (70) on every rank, naming it", n);
        tap_diag("%s", sr_error_message());
    }
    free(ranks);
    sr_transport_close(tp);

    /* 3. NCCL's results as statuses (doc/ARCHITECTURE.md §3c) */
    if (me == 0) {
        tap_ok(sr_nccl_status(0) == SR_OK && sr_nccl_status(7) == SR_OK,
               "ncclSuccess and ncclInProgress are not errors");
        tap_ok(sr_nccl_status(2) == SR_ERR_PEER && sr_nccl_status(3) == SR_ERR_PEER && sr_nccl_status(6) == SR_ERR_PEER,
               "system, internal and remote errors are 69 (a peer or the node)");
        tap_ok(sr_nccl_status(1) == SR_ERR_INTERNAL && sr_nccl_status(4) == SR_ERR_INTERNAL &&
                   sr_nccl_status(5) == SR_ERR_INTERNAL,
               "unhandled CUDA errors, invalid argument and invalid usage are 70");
        tap_ok(sr_nccl_version() != NULL && strchr(sr_nccl_version(), '.'), "the NCCL version is known: %s",
               sr_nccl_version() ? sr_nccl_version() : "(none)");
        /* the bus id list of the tests */
        char bus[64];
        setenv("SHARDRUN_TEST_GPU_BUSID", "0000:01:00.0,0000:41:00.0", 1);
        int a = sr_nccl_test_busid(1, "x", bus, sizeof bus) == SR_OK && strcmp(bus, "0000:41:00.0") == 0;
        int b = sr_nccl_test_busid(2, "x", bus, sizeof bus) == SR_ERR_CONFIG &&
                strstr(sr_error_message(), "no entry for local rank 2");
        unsetenv("SHARDRUN_TEST_GPU_BUSID");
        int c = sr_nccl_test_busid(0, "0000:07:00.0", bus, sizeof bus) == SR_OK && strcmp(bus, "0000:07:00.0") == 0;
        tap_ok(a && b && c, "SHARDRUN_TEST_GPU_BUSID gives each local rank its entry, refuses a short list (78), "
                            "and the GPU's own id stands when it is unset");
    }
    sr_world_close(&w);
    return me == 0 ? tap_done() : 0;
}
