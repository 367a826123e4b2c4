/* pmi2.c — Slurm's libpmi2 loaded at run time; see pmi2.h.
 *
 * The dynamic loader is the well-kept library for "a library of the site's
 * version, when present": libpmi2 comes with Slurm (Debian: libpmi2-0) and
 * a program linked to one Slurm's copy must not need it on a machine
 * without Slurm.  The function types below are the PMI2 interface as
 * Slurm's pmi2.h declares it (MPICH's PMI2 API, unchanged since 2010),
 * written here so the build needs no Slurm header.  Ours are the lookup
 * order, the mapping's parser (no library parses PMI_process_mapping
 * outside an MPI implementation) and the messages. */
#include "srconfig.h"

#include "pmi2.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PMI2_SUCCESS 0

static struct {
    void *h;
    char path[512];
    bool initialized;
    int (*init)(int *spawned, int *size, int *rank, int *appnum);
    int (*finalize)(void);
    int (*job_getid)(char jobid[], int jobid_size);
    int (*kvs_put)(const char key[], const char value[]);
    int (*kvs_fence)(void);
    int (*kvs_get)(const char *jobid, int src_pmi_id, const char key[], char value[], int maxvalue, int *vallen);
    int (*info_getjobattr)(const char name[], char value[], int valuelen, int *found);
} lib;

bool sr_pmi2_environment(void) {
    const char *fd = getenv("PMI_FD");
    return fd && *fd && getenv("PMI_RANK") && getenv("PMI_SIZE");
}

static sr_status load(void) {
    if (lib.h)
        return SR_OK;
    const char *want = getenv("SHARDRUN_PMI2_LIBRARY");
    const char *names[] = {want && *want ? want : "libpmi2.so.0", want && *want ? NULL : "libpmi2.so"};
    char why[1024] = "";
    for (size_t i = 0; i < 2 && !lib.h && names[i]; i++) {
        lib.h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
        if (lib.h)
            snprintf(lib.path, sizeof lib.path, "%s", names[i]);
        else if (!why[0]) {
            const char *e = dlerror();
            snprintf(why, sizeof why, "%s", e ? e : names[i]);
        }
    }
    if (!lib.h)
        return sr_error(SR_ERR_CONFIG,
                        "started under srun --mpi=pmi2 (PMI_FD is set), but Slurm's PMI2 library does not load: %s "
                        "(hint: install Slurm's libpmi2 (Debian: libpmi2-0; it must match the site's Slurm), set "
                        "SHARDRUN_PMI2_LIBRARY to its path, or launch with srun --mpi=pmix)",
                        why);
    /* POSIX: a function pointer from dlsym's void * goes through a union-free cast */
    *(void **)&lib.init = dlsym(lib.h, "PMI2_Init");
    *(void **)&lib.finalize = dlsym(lib.h, "PMI2_Finalize");
    *(void **)&lib.job_getid = dlsym(lib.h, "PMI2_Job_GetId");
    *(void **)&lib.kvs_put = dlsym(lib.h, "PMI2_KVS_Put");
    *(void **)&lib.kvs_fence = dlsym(lib.h, "PMI2_KVS_Fence");
    *(void **)&lib.kvs_get = dlsym(lib.h, "PMI2_KVS_Get");
    *(void **)&lib.info_getjobattr = dlsym(lib.h, "PMI2_Info_GetJobAttr");
    if (!lib.init || !lib.finalize || !lib.job_getid || !lib.kvs_put || !lib.kvs_fence || !lib.kvs_get ||
        !lib.info_getjobattr) {
        dlclose(lib.h);
        lib.h = NULL;
        return sr_error(SR_ERR_CONFIG,
                        "%s loads but lacks a PMI2 function (PMI2_Init, PMI2_KVS_Put/Fence/Get, PMI2_Job_GetId, "
                        "PMI2_Info_GetJobAttr): not a PMI2 library (hint: point SHARDRUN_PMI2_LIBRARY at Slurm's "
                        "libpmi2.so.0, or launch with srun --mpi=pmix)",
                        lib.path);
    }
    return SR_OK;
}

sr_status sr_pmi2_init(int *rank, int *size, char *job_id, size_t job_id_size) {
    sr_status st = load();
    if (st != SR_OK)
        return st;
    int spawned = 0, appnum = 0;
    int rc = lib.init(&spawned, size, rank, &appnum);
    if (rc != PMI2_SUCCESS)
        return sr_error(SR_ERR_PEER, "PMI2_Init (%s) failed with PMI2 error %d (hint: is slurmstepd alive?)", lib.path,
                        rc);
    lib.initialized = true;
    char id[256] = "";
    if (lib.job_getid(id, (int)sizeof id) != PMI2_SUCCESS)
        id[0] = '\0';
    snprintf(job_id, job_id_size, "%s", id);
    return SR_OK;
}

/* Reads "(a,b,c)" at *p, advancing past it. */
static bool triple(const char **p, long v[3]) {
    const char *s = *p;
    if (*s++ != '(')
        return false;
    for (int i = 0; i < 3; i++) {
        char *end;
        v[i] = strtol(s, &end, 10);
        if (end == s || v[i] < 0 || v[i] > 1 << 24)
            return false;
        s = end;
        while (*s == ' ')
            s++;
        if (*s++ != (i < 2 ? ',' : ')'))
            return false;
        while (*s == ' ')
            s++;
    }
    *p = s;
    return true;
}

bool sr_pmi2_parse_mapping(const char *mapping, int rank, int size, int *node_id, int *local_rank, int *local_size,
                           int *num_nodes) {
    enum { MAX_BLOCKS = 256 };
    long blocks[MAX_BLOCKS][3];
    int nb = 0;
    const char *p = mapping;
    while (*p == ' ')
        p++;
    if (strncmp(p, "(vector", 7) != 0)
        return false;
    p += 7;
    while (*p == ',' || *p == ' ') {
        while (*p == ',' || *p == ' ')
            p++;
        if (*p != '(')
            break;
        if (nb == MAX_BLOCKS || !triple(&p, blocks[nb]))
            return false;
        if (blocks[nb][1] > 0 && blocks[nb][2] > 0)
            nb++;
    }
    if (*p != ')' || nb == 0 || rank < 0 || rank >= size)
        return false;
    /* place every rank in order (the mapping is small: one block per
     * distinct layout, so this is O(size)) */
    int me_node = -1, me_local = 0, same = 0, max_node = -1;
    int r = 0;
    while (r < size) {
        for (int b = 0; b < nb && r < size; b++)
            for (long n = 0; n < blocks[b][1] && r < size; n++)
                for (long k = 0; k < blocks[b][2] && r < size; k++, r++) {
                    int node = (int)(blocks[b][0] + n);
                    if (node > max_node)
                        max_node = node;
                    if (r == rank)
                        me_node = node;
                }
    }
    /* the ranks on my node, and my index among them: a second pass, now
     * that my node is known */
    r = 0;
    while (r < size) {
        for (int b = 0; b < nb && r < size; b++)
            for (long n = 0; n < blocks[b][1] && r < size; n++)
                for (long k = 0; k < blocks[b][2] && r < size; k++, r++)
                    if ((int)(blocks[b][0] + n) == me_node) {
                        if (r < rank)
                            me_local++;
                        same++;
                    }
    }
    *node_id = me_node;
    *local_rank = me_local;
    *local_size = same;
    *num_nodes = max_node + 1;
    return me_node >= 0;
}

sr_status sr_pmi2_placement(int rank, int size, int *node_id, int *local_rank, int *local_size, int *num_nodes) {
    char v[SR_PMI2_MAX_VALUE];
    int found = 0;
    int rc = lib.info_getjobattr("PMI_process_mapping", v, (int)sizeof v, &found);
    if (rc != PMI2_SUCCESS || !found)
        return sr_error(SR_ERR_PEER,
                        "PMI2 gives no PMI_process_mapping (PMI2 error %d): cannot tell the ranks per node", rc);
    v[sizeof v - 1] = '\0';
    if (!sr_pmi2_parse_mapping(v, rank, size, node_id, local_rank, local_size, num_nodes))
        return sr_error(SR_ERR_PEER, "PMI2's PMI_process_mapping '%s' does not place rank %d of %d", v, rank, size);
    return SR_OK;
}

sr_status sr_pmi2_put(const char *key, const char *value) {
    int rc = lib.kvs_put(key, value);
    return rc == PMI2_SUCCESS ? SR_OK : sr_error(SR_ERR_PEER, "PMI2_KVS_Put of '%s': PMI2 error %d", key, rc);
}

sr_status sr_pmi2_fence(void) {
    int rc = lib.kvs_fence();
    return rc == PMI2_SUCCESS
               ? SR_OK
               : sr_error(SR_ERR_PEER, "PMI2_KVS_Fence: PMI2 error %d (a peer failed during start-up?)", rc);
}

sr_status sr_pmi2_get(int r, const char *key, char *value, size_t size) {
    int len = 0;
    int rc = lib.kvs_get(NULL, r, key, value, (int)size, &len);
    return rc == PMI2_SUCCESS ? SR_OK
                              : sr_error(SR_ERR_PEER, "PMI2_KVS_Get of '%s' from rank %d: PMI2 error %d", key, r, rc);
}

void sr_pmi2_finalize(void) {
    if (lib.initialized)
        lib.finalize();
    lib.initialized = false;
}
