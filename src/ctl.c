/* ctl.c — agreements, sums, broadcasts over the group of every rank; see
 * ctl.h. */
#include "srconfig.h"

#include "ctl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mem.h"

struct sr_ctl {
    sr_group *world;
    int rank, size;
};

sr_status sr_ctl_open(sr_ctl **out, sr_transport *tp, int world_size) {
    *out = NULL;
    sr_ctl *c = sr_calloc(1, sizeof *c);
    int *ranks = sr_malloc(sizeof(int) * (size_t)world_size);
    if (!c || !ranks) {
        free(c);
        free(ranks);
        return sr_error_oom("the control plane");
    }
    for (int i = 0; i < world_size; i++)
        ranks[i] = i;
    sr_status st = sr_group_create(tp, ranks, world_size, &c->world);
    if (st == SR_OK)
        sr_group_set_name(c->world, "world (control)");
    free(ranks);
    if (st != SR_OK) {
        free(c);
        return st;
    }
    c->rank = sr_group_rank(c->world);
    c->size = world_size;
    *out = c;
    return SR_OK;
}

void sr_ctl_close(sr_ctl *c) { free(c); } /* the group belongs to the transport */

int sr_ctl_rank(const sr_ctl *c) { return c->rank; }
int sr_ctl_size(const sr_ctl *c) { return c->size; }

sr_status sr_ctl_agree(sr_ctl *c, sr_status mine, int flag, uint64_t value, const char *msg, sr_ctl_word **all_out) {
    if (all_out)
        *all_out = NULL;
    sr_ctl_word me = {.status = (int32_t)mine, .flag = flag, .value = value};
    if (msg)
        snprintf(me.msg, sizeof me.msg, "%s", msg);
    sr_ctl_word *all = sr_calloc((size_t)c->size, sizeof *all);
    if (!all)
        return sr_error_oom("an agreement between the ranks");
    sr_status st = sr_ctl_allgather(c, all, &me, sizeof me);
    if (st != SR_OK) {
        free(all);
        return st;
    }
    for (int r = 0; r < c->size; r++)
        if (all[r].status != SR_OK) {
            all[r].msg[sizeof all[r].msg - 1] = '\0';
            st = (sr_status)all[r].status;
            if (r == c->rank)
                sr_error(st, "%s", all[r].msg);
            else
                sr_error(st, "rank %d: %s", r, all[r].msg);
            break;
        }
    if (all_out)
        *all_out = all;
    else
        free(all);
    return st;
}

sr_status sr_ctl_sum(sr_ctl *c, double *vals, int n) {
    return sr_allreduce(c->world, vals, (size_t)n, SR_DT_F64, SR_OP_SUM, NULL);
}

sr_status sr_ctl_min(sr_ctl *c, int64_t *v) {
    int64_t *all = sr_calloc((size_t)c->size, sizeof *all);
    if (!all)
        return sr_error_oom("an agreement between the ranks");
    sr_status st = sr_allgather(c->world, all, v, 1, SR_DT_I64, NULL);
    if (st == SR_OK)
        for (int r = 0; r < c->size; r++)
            *v = all[r] < *v ? all[r] : *v;
    free(all);
    return st;
}

sr_status sr_ctl_broadcast(sr_ctl *c, int64_t *vals, size_t n, int root) {
    return sr_broadcast(c->world, vals, n, SR_DT_I64, root, NULL);
}

sr_status sr_ctl_allgather(sr_ctl *c, void *recv, const void *send, size_t bytes) {
    return sr_allgather(c->world, recv, send, bytes, SR_DT_BYTE, NULL);
}
