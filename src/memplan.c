/* memplan.c — the planned peak of a rank and the check against the
 * process's limits; see memplan.h. */
#include "srconfig.h"

#include "memplan.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "ckpt.h"
#include "comm.h"
#include "config.h"
#include "fsdp.h"
#include "line.h"
#include "ops.h"
#include "optim.h"
#include "plane.h"
#include "shardplan.h"
#include "testhook.h"

#define add sr_size_add
#define mul sr_size_mul

const char *sr_memplan_size(size_t bytes, char *buf, size_t n) {
    if (bytes >= SR_TIB)
        snprintf(buf, n, "%.1f TiB", (double)bytes / (double)SR_TIB);
    else if (bytes >= SR_GIB)
        snprintf(buf, n, "%.1f GiB", (double)bytes / (double)SR_GIB);
    else
        snprintf(buf, n, "%.1f MiB", (double)bytes / (double)SR_MIB);
    return buf;
}

static void retotal(sr_memplan *p) {
    p->total = 0;
    for (int c = 0; c < SR_MEM_NCAT; c++)
        p->total = add(p->total, p->bytes[c]);
}

/* The largest unit's shard (elements), which the transport's ring
 * reduce-scatter holds a chunk of. */
static size_t largest_shard(const sr_shardplan *pl) {
    size_t P = 0;
    for (int ui = 0; ui < pl->nunits; ui++)
        P = pl->units[ui].P > P ? pl->units[ui].P : P;
    return P;
}

/* The owners' own figures added up: the engine's buffers (sr_fsdp_plan:
 * on the device, and on the host with offload), the model's activations
 * and loss accumulator, the host transport's chunk buffers where a shard
 * group of more than one rank reduces over it (not over NCCL), and the
 * overhead: the process's own, its threads' stacks and the attention's
 * per-thread T x T scratch (sr_ops_scratch_bytes: short-lived, so not a
 * category). */
static sr_status plan_categories(sr_memplan *p, sr_memplan *offloaded, const sr_model_dims *d, int micro_batch,
                                 const sr_mesh *mesh, const sr_fsdp_opts *o, int threads, const sr_ops *ops,
                                 bool separate_memory, bool nccl) {
    *p = (sr_memplan){0};
    sr_model m;
    if (!ops)
        ops = &sr_ops_cpu;
    sr_status st = sr_model_init(&m, *d, ops, NULL, 0, false);
    sr_shardplan pl = {0};
    if (st == SR_OK)
        st = sr_shardplan_init(&pl, m.layer_offset, d->L, o->blocks_per_unit, mesh->S);
    sr_fsdp_bytes e;
    if (st == SR_OK)
        st = sr_fsdp_plan(&pl, o, mesh->R, ops->act, separate_memory, &e);
    if (st != SR_OK) {
        sr_shardplan_free(&pl);
        sr_model_free(&m);
        return st;
    }
    for (int c = 0; c < SR_MEM_NCAT; c++) {
        p->bytes[c] = e.device[c];
        if (offloaded)
            offloaded->bytes[c] = e.host[c];
    }
    p->state_shard = e.state_shard;
    /* the optimizer's segment list (optim.h), where its moments are */
    size_t segs = sr_optim_table_bytes(m.n_tensors, pl.nunits);
    if (!(separate_memory && o->offload_optimizer))
        p->bytes[SR_MEM_OPTIM_SHARD] = add(p->bytes[SR_MEM_OPTIM_SHARD], segs);
    else if (offloaded)
        offloaded->bytes[SR_MEM_OPTIM_SHARD] = add(offloaded->bytes[SR_MEM_OPTIM_SHARD], segs);
    p->bytes[SR_MEM_ACTIVATIONS] = sr_model_activation_bytes(d, ops, micro_batch);
    p->bytes[SR_MEM_OTHER] = add(p->bytes[SR_MEM_OTHER], sr_model_other_bytes(d));
    if (mesh->S > 1 && !nccl) {
        p->comm_transport = sr_transport_scratch_bytes(largest_shard(&pl), sr_dtype_size(o->reduce_dtype));
        p->bytes[SR_MEM_COMM] = add(p->bytes[SR_MEM_COMM], p->comm_transport);
    }
    retotal(p);
    if (offloaded)
        retotal(offloaded);
    size_t scratch = mul(sr_ops_scratch_bytes(d->T), (size_t)(threads > 0 ? threads : 1));
    p->overhead = add(add(SR_MEMPLAN_OVERHEAD, mul(SR_MEMPLAN_PER_THREAD, (size_t)(threads + 3))), scratch);
    sr_shardplan_free(&pl);
    sr_model_free(&m);
    return SR_OK;
}

sr_status sr_memplan_job(sr_memplan *p, sr_memplan *offloaded, const sr_config *cfg, const sr_job *job,
                         const sr_mesh *mesh, int micro_batch, int threads, const sr_ops *ops, sr_dev_kind kind,
                         bool separate_memory, int local_size, int world_size) {
    sr_model_dims dims = sr_job_model_dims(cfg, (int)cfg->seq_len);
    if (offloaded)
        *offloaded = (sr_memplan){0};
    bool nccl = sr_plane_needs_nccl(kind, world_size, (int)cfg->comm_backend); /* NCCL reduces in its own buffers */
    sr_status st =
        plan_categories(p, offloaded, &dims, micro_batch, mesh, &job->fsdp, threads, ops, separate_memory, nccl);
    if (st != SR_OK)
        return st;
    /* the asynchronous checkpoint's snapshot is host memory: part of the
     * plan where the plan is host memory */
    uint64_t snap = 0, tmpfs = 0;
    if (!separate_memory && sr_ckpt_snapshot_fits(&job->ckpt, p->state_shard, local_size, &snap))
        p->bytes[SR_MEM_CKPT_STAGING] = (size_t)snap;
    /* the memory tier's snapshot, allocated as staging too (its tmpfs pages
     * are no allocation of the process: shardrun plan counts them) */
    uint64_t tier = sr_ckpt_mem_host_bytes(&job->ckpt, p->state_shard, local_size,
                                           local_size > 0 ? (world_size + local_size - 1) / local_size : 1, &tmpfs);
    if (!separate_memory && tier)
        p->bytes[SR_MEM_CKPT_STAGING] = add(p->bytes[SR_MEM_CKPT_STAGING], (size_t)tier);
    retotal(p);
    return SR_OK;
}

/* ------------------------------------------------------------------------ */
/* limits */

/* The memory limit of this process's cgroup (v2 memory.max, v1
 * memory.limit_in_bytes); 0 when none is found. */
static size_t cgroup_limit(void) {
    FILE *f = fopen("/proc/self/cgroup", "r");
    if (!f)
        return 0;
    char line[4096], path[4200];
    size_t limit = 0;
    while (!limit && fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = '\0';
        const char *rel = NULL, *file = NULL;
        if (strncmp(line, "0::", 3) == 0) {
            rel = line + 3;
            file = "/sys/fs/cgroup%s/memory.max";
        } else if (strstr(line, ":memory:")) {
            rel = strstr(line, ":memory:") + 8;
            file = "/sys/fs/cgroup/memory%s/memory.limit_in_bytes";
        }
        if (!rel)
            continue;
        snprintf(path, sizeof path, file, strcmp(rel, "/") == 0 ? "" : rel);
        FILE *g = fopen(path, "r");
        if (!g)
            continue;
        unsigned long long v = 0;
        if (fscanf(g, "%llu", &v) == 1 && v > 0 && v < ULLONG_MAX / 16 /* "max" reads as none */)
            limit = (size_t)v;
        fclose(g);
    }
    fclose(f);
    return limit;
}

static size_t mem_available(void) {
    if (sr_testhook()->mem_available >= 0)
        return (size_t)sr_testhook()->mem_available;
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f)
        return 0;
    char line[256];
    unsigned long long kb = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1)
            break;
    fclose(f);
    return (size_t)kb * SR_KIB;
}

/* The categories, largest first, as "activations 3.2 GiB, full_units ...". */
static void largest_categories(const sr_memplan *p, char *buf, size_t n) {
    int order[SR_MEM_NCAT];
    for (int c = 0; c < SR_MEM_NCAT; c++)
        order[c] = c;
    for (int i = 0; i < SR_MEM_NCAT; i++)
        for (int j = i + 1; j < SR_MEM_NCAT; j++)
            if (p->bytes[order[j]] > p->bytes[order[i]]) {
                int t = order[i];
                order[i] = order[j];
                order[j] = t;
            }
    sr_line l = sr_line_on(buf, n);
    for (int i = 0; i < SR_MEM_NCAT; i++) {
        if (!p->bytes[order[i]])
            continue;
        char s[32];
        sr_line_item(&l, ", ", "%s %s", sr_mem_name(order[i]), sr_memplan_size(p->bytes[order[i]], s, sizeof s));
    }
}

static const char *cheapest_fix(const sr_memplan *p) {
    size_t shards = add(add(p->bytes[SR_MEM_PARAM_SHARD], p->bytes[SR_MEM_GRAD_SHARD]),
                        add(p->bytes[SR_MEM_OPTIM_SHARD], p->bytes[SR_MEM_ACCUM]));
    if (p->bytes[SR_MEM_ACTIVATIONS] >= shards && p->bytes[SR_MEM_ACTIVATIONS] >= p->bytes[SR_MEM_FULL_UNITS])
        return "lower train.micro_batch (activations grow with it; the batch is kept by accumulation steps), or "
               "model.seq_len";
    if (p->bytes[SR_MEM_FULL_UNITS] > shards)
        return "set sharding.reshard_after_forward to true and lower sharding.prefetch, or raise "
               "sharding.blocks_per_unit no further";
    return p->bytes[SR_MEM_ACCUM]
               ? "run on more ranks (the shards shrink with the shard group), or sharding.grad_sync: per_micro_batch "
                 "(no full-size accumulation buffer)"
               : "run on more ranks (the shards shrink with the shard group)";
}

static sr_status check_host(const sr_memplan *p, int local_size) {
    size_t need = add(p->total, p->overhead);
    struct rlimit as, data;
    size_t limit = 0;
    const char *which = NULL;
    if (getrlimit(RLIMIT_AS, &as) == 0 && as.rlim_cur != RLIM_INFINITY) {
        limit = (size_t)as.rlim_cur;
        which = "RLIMIT_AS (ulimit -v)";
    }
    if (getrlimit(RLIMIT_DATA, &data) == 0 && data.rlim_cur != RLIM_INFINITY && (!which || data.rlim_cur < limit)) {
        limit = (size_t)data.rlim_cur;
        which = "RLIMIT_DATA (ulimit -d)";
    }
    size_t cg = cgroup_limit();
    int ranks = local_size > 0 ? local_size : 1;
    if (cg && (!which || cg / (size_t)ranks < limit)) {
        limit = cg / (size_t)ranks;
        which = ranks > 1 ? "the cgroup's memory.max shared by this node's ranks" : "the cgroup's memory.max";
    }
    char cats[512], a[32], b[32], c[32];
    largest_categories(p, cats, sizeof cats);
    if (which && need > limit)
        return sr_error(SR_ERR_CONFIG,
                        "this job needs about %s per rank (%s; plus %s for code, libraries and threads), more than %s "
                        "allows (%s) (hint: %s)",
                        sr_memplan_size(need, a, sizeof a), cats, sr_memplan_size(p->overhead, b, sizeof b), which,
                        sr_memplan_size(limit, c, sizeof c), cheapest_fix(p));
    size_t avail = mem_available();
    if (avail && need > avail / (size_t)ranks)
        sr_log_warn("this job plans %s per rank (%s), more than this node's available memory (%s) shares out to its %d "
                    "rank%s; it may be killed by the kernel (hint: %s)",
                    sr_memplan_size(need, a, sizeof a), cats, sr_memplan_size(avail, b, sizeof b), ranks,
                    ranks == 1 ? "" : "s", cheapest_fix(p));
    return SR_OK;
}

static sr_status check_device(const sr_memplan *p, long long free_bytes) {
    if (free_bytes < 0 || p->total <= (size_t)free_bytes)
        return SR_OK;
    char cats[512], a[32], b[32];
    largest_categories(p, cats, sizeof cats);
    return sr_error(SR_ERR_CONFIG,
                    "this job plans %s of device memory per rank (%s), more than the %s free on the "
                    "device (hint: %s)",
                    sr_memplan_size(p->total, a, sizeof a), cats, sr_memplan_size((size_t)free_bytes, b, sizeof b),
                    cheapest_fix(p));
}

sr_status sr_memplan_run(sr_memplan *p, const sr_config *cfg, const sr_job *job, const sr_mesh *mesh, int micro_batch,
                         int threads, const sr_ops *ops, const sr_dev *dev, const sr_world *w) {
    sr_status st = sr_memplan_job(p, NULL, cfg, job, mesh, micro_batch, threads, ops, dev->kind, dev->separate_memory,
                                  w->local_size, w->size);
    /* on a GPU the plan is device memory; the host keeps only staging */
    if (st == SR_OK && dev->kind != SR_DEV_CUDA)
        st = check_host(p, w->local_size);
    if (st == SR_OK && dev->separate_memory)
        st = check_device(p, dev->device_free_bytes);
    return st;
}
