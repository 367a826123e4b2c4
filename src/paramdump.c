/* paramdump.c — the parameter and gradient dumps of the test suite
 * (SHARDRUN_TEST_DUMP_PARAMS, SHARDRUN_TEST_ORACLE): the full fp32 model
 * or gradient, gathered through the engine, written atomically in the
 * format paramdump.h states. */
#include "srconfig.h"

#include "paramdump.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "fsio.h"
#include "mem.h"

typedef struct {
    const sr_model *m;
    const float *full; /* the whole unit-major vector */
} dump_ctx;

static sr_status write_dump(int fd, const char *tmp, void *arg) {
    const dump_ctx *d = arg;
    const sr_model *m = d->m;
    int32_t n = m->n_tensors;
    if (sr_fsio_write_all(fd, "SRPARAMS", 8) != 0 || sr_fsio_write_all(fd, &n, 4) != 0)
        return sr_fsio_write_error(tmp, errno);
    for (int i = 0; i < m->n_tensors; i++) {
        char name[64] = {0};
        snprintf(name, sizeof name, "%s", m->tensors[i].name);
        int64_t numel = (int64_t)m->tensors[i].numel;
        if (sr_fsio_write_all(fd, name, 64) != 0 || sr_fsio_write_all(fd, &numel, 8) != 0)
            return sr_fsio_write_error(tmp, errno);
    }
    if (sr_fsio_write_all(fd, d->full, m->n_params * sizeof(float)) != 0)
        return sr_fsio_write_error(tmp, errno);
    return SR_OK;
}

/* Writes `full` to path. */
static sr_status write_full(const sr_model *m, const float *full, const char *path) {
    dump_ctx d = {m, full};
    return sr_fsio_atomic_write(path, write_dump, &d);
}

sr_status sr_paramdump_params(sr_fsdp *f, const sr_model *m, const char *path) {
    float *full = sr_malloc(m->n_params * sizeof(float));
    if (!full)
        return sr_error_oom("the parameter dump");
    sr_fsdp_layout l;
    sr_fsdp_layout_get(f, &l);
    sr_status st = sr_fsdp_gather_params(f, full);
    if (st == SR_OK && l.mesh->rank == 0)
        st = write_full(m, full, path);
    free(full);
    return st;
}

sr_status sr_paramdump_grads(sr_fsdp *f, const sr_model *m, const char *path) {
    float *full = sr_malloc(m->n_params * sizeof(float));
    if (!full)
        return sr_error_oom("the gradient dump");
    sr_status st = sr_fsdp_gather_grads(f, full);
    if (st == SR_OK)
        st = write_full(m, full, path);
    free(full);
    return st;
}
