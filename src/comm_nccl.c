/* comm_nccl.c — the parts of the NCCL data plane that link no NCCL (the
 * duplicate-GPU and group checks, the status mapping), and the functions
 * that dispatch to the CUDA module's NCCL half (comm_nccl_cuda.c, where
 * the plane's threads, its watchdog and its abort are described); see
 * comm_nccl.h. */
#include "srconfig.h"

#include "comm_nccl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cudamod.h"
#include "line.h"
#include "mem.h"

/* ---- the parts every build has --------------------------------------- */

sr_status sr_nccl_status(int result) {
    switch (result) {
    case 0: /* ncclSuccess */
    case 7: /* ncclInProgress */
        return SR_OK;
    case 1: /* ncclUnhandledCudaError */
    case 4: /* ncclInvalidArgument */
    case 5: /* ncclInvalidUsage */
        return SR_ERR_INTERNAL;
    default: /* 2 system, 3 internal, 6 remote, and anything newer */
        return SR_ERR_PEER;
    }
}

sr_status sr_nccl_test_busid(int local_rank, const char *real, char *out, size_t size) {
    const char *list = getenv("SHARDRUN_TEST_GPU_BUSID");
    if (!list || !*list) {
        snprintf(out, size, "%s", real ? real : "");
        return SR_OK;
    }
    const char *p = list;
    for (int i = 0; i < local_rank && p; i++) {
        p = strchr(p, ',');
        if (p)
            p++;
    }
    size_t n = p ? strcspn(p, ",") : 0;
    if (!p || n == 0 || n >= size)
        return sr_error(SR_ERR_CONFIG,
                        "SHARDRUN_TEST_GPU_BUSID=%s has no entry for local rank %d (expected a comma list of PCI bus "
                        "ids, one per local rank)",
                        list, local_rank);
    memcpy(out, p, n);
    out[n] = '\0';
    return SR_OK;
}

typedef struct {
    char host[256]; /* sr_world.host */
    char bus[32];
    int32_t unknown; /* this rank could not tell its bus id (its own message says why) */
} gpu_identity;

sr_status sr_nccl_check_unique_gpu(sr_world *w, const char *busid, double timeout_s) {
    gpu_identity mine, *all = sr_calloc((size_t)w->size, sizeof *all);
    if (!all)
        return busid ? sr_error_oom("the GPU list") : SR_ERR_CONFIG;
    memset(&mine, 0, sizeof mine);
    snprintf(mine.host, sizeof mine.host, "%s", w->host);
    snprintf(mine.bus, sizeof mine.bus, "%s", busid ? busid : "");
    mine.unknown = busid == NULL;
    sr_status st = sr_world_allgather(w, "shardrun.gpu", &mine, sizeof mine, all, timeout_s);
    if (!busid) { /* keep this rank's own message */
        free(all);
        return st == SR_OK ? SR_ERR_CONFIG : st;
    }
    for (int r = 0; st == SR_OK && r < w->size; r++)
        if (all[r].unknown)
            st = sr_error(SR_ERR_CONFIG, "rank %d could not tell its GPU's bus id (see its message)", r);
    for (int a = 0; st == SR_OK && a < w->size; a++)
        for (int b = a + 1; st == SR_OK && b < w->size; b++)
            if (strcmp(all[a].host, all[b].host) == 0 && strcmp(all[a].bus, all[b].bus) == 0)
                st = sr_error(SR_ERR_CONFIG,
                              "ranks %d and %d are both on the GPU at bus %s of host %s: NCCL runs one rank per GPU "
                              "(hint: srun --gpus-per-task=1, or --gpu-bind=single:1 / --gpu-bind=map_gpu:... so each "
                              "task sees its own GPU)",
                              a, b, all[a].bus, all[a].host);
    free(all);
    return st;
}

/* One rank's declaration, fixed size for the PMIx all-gather: the number of
 * groups and, per group (the first 8), its name and size. */
#define DECL_GROUPS 8
typedef struct {
    int32_t n;
    struct {
        char name[24];
        int32_t size;
    } g[DECL_GROUPS];
} group_decl;

static void describe_decl(const group_decl *d, char *out, size_t size) {
    sr_line l = sr_line_on(out, size);
    sr_line_add(&l, "%d group%s", (int)d->n, d->n == 1 ? "" : "s");
    for (int i = 0; i < d->n && i < DECL_GROUPS; i++)
        sr_line_add(&l, "%s%s of %d", i ? ", " : ": ", d->g[i].name, (int)d->g[i].size);
}

sr_status sr_nccl_check_groups(sr_world *w, sr_group *const *groups, int ngroups, double timeout_s) {
    group_decl mine;
    memset(&mine, 0, sizeof mine);
    mine.n = ngroups;
    for (int i = 0; i < ngroups && i < DECL_GROUPS; i++) {
        snprintf(mine.g[i].name, sizeof mine.g[i].name, "%s", sr_group_name(groups[i]));
        mine.g[i].size = sr_group_size(groups[i]);
    }
    group_decl *all = sr_calloc((size_t)w->size, sizeof *all);
    if (!all)
        return sr_error_oom("the group declarations");
    sr_status st = sr_world_allgather(w, "shardrun.groups", &mine, sizeof mine, all, timeout_s);
    for (int r = 1; st == SR_OK && r < w->size; r++)
        if (memcmp(&all[r], &all[0], sizeof all[0]) != 0) {
            char a[512], b[512];
            describe_decl(&all[0], a, sizeof a);
            describe_decl(&all[r], b, sizeof b);
            st = sr_error(SR_ERR_INTERNAL,
                          "the ranks declared different communication groups: rank 0 has %s; rank %d has %s (the "
                          "NCCL splits are collective over every rank and would deadlock; this is a bug, please "
                          "report it)",
                          a, r, b);
        }
    free(all);
    return st;
}

/* ---- the NCCL-calling half: the CUDA module's (comm_nccl_cuda.c) ------- */

/* The loaded module's NCCL half, or NULL with the message set: no module
 * is loaded (no cuda table was opened) or it has no NCCL. */
static const sr_nccl_impl *nccl_impl(void) {
    const sr_cudamod *m = sr_cudamod_loaded();
    if (m && m->nccl)
        return m->nccl;
#ifdef SR_HAVE_NCCL
    sr_error(SR_ERR_CONFIG, "the NCCL plane needs the CUDA back end, and it is not loaded (a GPU run opens it "
                            "with its device table: device: cuda, or auto on a node with a GPU)");
#else
    sr_error(SR_ERR_CONFIG, "this shardrun was built without NCCL, which multi-GPU runs need (hint: configure "
                            "--with-nccl, or comm.backend: auto / tcp on a CPU run)");
#endif
    return NULL;
}

const char *sr_nccl_version(void) {
    const sr_cudamod *m = sr_cudamod_loaded();
    return m && m->nccl ? ((const sr_nccl_impl *)m->nccl)->version() : NULL;
}

sr_status sr_nccl_exchange_id(sr_world *w, unsigned char id[SR_NCCL_ID_BYTES], double timeout_s) {
    const sr_nccl_impl *x = nccl_impl();
    return x ? x->exchange_id(w, id, timeout_s) : SR_ERR_CONFIG;
}

sr_status sr_nccl_open(sr_nccl **out, sr_world *w, sr_dev *d, sr_transport *tp, sr_group *const *groups, int ngroups,
                       const sr_nccl_opts *o) {
    *out = NULL;
    const sr_nccl_impl *x = nccl_impl();
    return x ? x->open(out, w, d, tp, groups, ngroups, o) : SR_ERR_CONFIG;
}

/* The NCCL half of the module that opened a plane (a plane exists only
 * when a module with NCCL opened it). */
static const sr_nccl_impl *plane_impl(void) { return sr_cudamod_loaded()->nccl; }

void sr_nccl_close(sr_nccl *n) {
    if (n)
        plane_impl()->close(n);
}

size_t sr_nccl_device_bytes(const sr_nccl *n) { return n ? plane_impl()->device_bytes(n) : 0; }

sr_status sr_nccl_collective(sr_nccl *n, sr_nccl_kind kind, sr_group *g, void *recv, size_t rbytes, const void *send,
                             size_t sbytes, size_t count, sr_dtype dt) {
    if (!n)
        return sr_error(SR_ERR_INTERNAL, "an NCCL collective without an NCCL plane");
    return plane_impl()->collective(n, kind, g, recv, rbytes, send, sbytes, count, dt);
}
