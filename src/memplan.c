/* memplan.c — the planned peak of a rank and the check against the
 * process's limits; see memplan.h. */
#include "srconfig.h"

#include "memplan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "ckpt.h"
#include "config.h"
#include "ops.h"
#include "shardplan.h"
#include "testhook.h"

#define add sr_size_add
#define mul sr_size_mul

const char *sr_memplan_size(size_t bytes, char *buf, size_t n) {
    if (bytes >= (size_t)1 << 40)
        snprintf(buf, n, "%.1f TiB", (double)bytes / (double)((size_t)1 << 40));
    else if (bytes >= (size_t)1 << 30)
        snprintf(buf, n, "%.1f GiB", (double)bytes / (double)((size_t)1 << 30));
    else
        snprintf(buf, n, "%.1f MiB", (double)bytes / (double)((size_t)1 << 20));
    return buf;
}

/* Full units (the engine's fixed buffers, fsdp.c alloc_pools): the root's
 * and every kept block unit's own buffer (the root is held through each
 * pass, so it counts as kept), the N-way shares of reshard N, and 1 + the
 * larger prefetch pool slots of the largest block unit that is not kept. */
static size_t full_units(const sr_shardplan *pl, const sr_fsdp_opts *o, size_t es) {
    size_t kept = 0, largest = 0;
    for (int ui = 0; ui < pl->nunits; ui++) {
        const sr_unit_plan *u = &pl->units[ui];
        size_t full = mul(mul((size_t)pl->S, u->P), es);
        int64_t r = u->root ? o->reshard_root : o->reshard_blocks;
        if (u->root || r == SR_RESHARD_FALSE)
            kept = add(kept, full);
        else if (full > largest)
            largest = full;
        if (r >= 2)
            kept = add(kept, full / (size_t)r);
    }
    int ahead = o->prefetch_forward > o->prefetch_backward ? o->prefetch_forward : o->prefetch_backward;
    return add(kept, largest ? mul((size_t)(1 + ahead), largest) : 0);
}

/* Reduction buffers: the transport's two chunk buffers and the reduction
 * pool (fsdp.c alloc_pools): a root slot and two block slots, each the
 * full gradient (per-micro-batch reductions), the bf16 cast (bf16
 * reductions) and the reduced shard; none for fp32 per-step reductions. */
static size_t comm_buffers(const sr_shardplan *pl, const sr_fsdp_opts *o, size_t *transport) {
    *transport = 0;
    size_t P = 0, Proot = 0;
    for (int ui = 0; ui < pl->nunits; ui++) {
        if (pl->units[ui].root)
            Proot = pl->units[ui].P;
        P = pl->units[ui].P > P ? pl->units[ui].P : P;
    }
    size_t S = (size_t)pl->S, res = sr_dtype_size(o->reduce_dtype), total = 0;
    if (S > 1) /* the ring reduce-scatter's two chunk buffers (comm.c scratch_reserve): one unit's shard */
        total = *transport = mul(2, add(mul(P, res), 16));
    /* offload lands every reduction in a slot before its copy to the host */
    if (o->grad_sync_per_step && o->reduce_dtype != SR_DT_BF16 && !o->offload_optimizer)
        return total;
    size_t Pblk = 0;
    for (int ui = 0; ui < pl->nunits; ui++)
        if (!pl->units[ui].root && pl->units[ui].P > Pblk)
            Pblk = pl->units[ui].P;
    size_t sizes[3] = {Proot, Pblk, Pblk};
    for (int k = 0; k < 3; k++) {
        size_t slot = mul(sizes[k], res);
        if (!o->grad_sync_per_step)
            slot = add(slot, mul(mul(S, sizes[k]), 4));
        if (o->reduce_dtype == SR_DT_BF16)
            slot = add(slot, mul(mul(S, sizes[k]), 2));
        total = add(total, slot);
    }
    return total;
}

/* The categories of one rank from the model's dims and the engine's
 * options (sr_memplan_job adds the run's rules). */
static sr_status plan_categories(sr_memplan *p, const sr_model_dims *d, int micro_batch, const sr_mesh *mesh,
                                 const sr_fsdp_opts *o, int threads, const sr_ops *ops) {
    *p = (sr_memplan){0};
    sr_model m;
    if (!ops)
        ops = &sr_ops_cpu;
    sr_status st = sr_model_init(&m, *d, ops, NULL, 0, false);
    sr_shardplan pl = {0};
    if (st == SR_OK)
        st = sr_shardplan_init(&pl, m.layer_offset, d->L, o->blocks_per_unit, mesh->S);
    if (st != SR_OK) {
        sr_model_free(&m);
        return st;
    }
    size_t f = sizeof(float), es = sr_dtype_size(o->param_dtype);
    p->bytes[SR_MEM_PARAM_SHARD] = mul(pl.local_size, f);
    p->state_shard = p->bytes[SR_MEM_PARAM_SHARD];
    p->bytes[SR_MEM_GRAD_SHARD] = mul(pl.local_size, f);
    p->bytes[SR_MEM_OPTIM_SHARD] = mul(mul(pl.local_size, f), 2);
    p->bytes[SR_MEM_ACCUM] = o->grad_sync_per_step ? mul(pl.accum_size, f) : 0;
    p->bytes[SR_MEM_FULL_UNITS] = full_units(&pl, o, es);
    p->bytes[SR_MEM_ACTIVATIONS] = sr_model_activation_bytes(d, ops, micro_batch);
    p->bytes[SR_MEM_COMM] = comm_buffers(&pl, o, &p->comm_transport);
    if (o->param_dtype != ops->act) { /* the ops widen each gathered unit (fsdp.c's stage) */
        size_t largest = 0;
        for (int ui = 0; ui < pl.nunits; ui++)
            largest = pl.units[ui].n > largest ? pl.units[ui].n : largest;
        p->bytes[SR_MEM_OTHER] = mul(largest, f);
    }
    /* the step's scalars: the engine's sum of squares and loss sum, the
     * model's loss accumulator */
    p->bytes[SR_MEM_OTHER] = add(p->bytes[SR_MEM_OTHER], 3 * sizeof(double));
    for (int c = 0; c < SR_MEM_NCAT; c++)
        p->total = add(p->total, p->bytes[c]);
    /* the attention backward's per-thread T x T scratch is short-lived and
     * not a category: it counts as overhead */
    size_t scratch = mul(mul(mul((size_t)d->T, (size_t)d->T), f), (size_t)(threads > 0 ? threads : 1));
    p->overhead = add(add(SR_MEMPLAN_OVERHEAD, mul(SR_MEMPLAN_PER_THREAD, (size_t)(threads + 3))), scratch);
    sr_shardplan_free(&pl);
    sr_model_free(&m);
    return SR_OK;
}

static void retotal(sr_memplan *p) {
    p->total = 0;
    for (int c = 0; c < SR_MEM_NCAT; c++)
        p->total = add(p->total, p->bytes[c]);
}

sr_status sr_memplan_job(sr_memplan *p, sr_memplan *offloaded, const sr_config *cfg, const sr_job *job,
                         const sr_mesh *mesh, int micro_batch, int threads, const sr_ops *ops, bool separate_memory,
                         int local_size, bool nccl) {
    sr_model_dims dims = {(int)cfg->n_layer, (int)cfg->n_head,   (int)cfg->n_embd, (int)cfg->vocab_size, 0,
                          (int)cfg->seq_len, (int)cfg->recompute};
    if (offloaded)
        *offloaded = (sr_memplan){0};
    sr_status st = plan_categories(p, &dims, micro_batch, mesh, &job->fsdp, threads, ops);
    if (st != SR_OK)
        return st;
    if (nccl) { /* NCCL reduces in its own buffers */
        p->bytes[SR_MEM_COMM] -= p->comm_transport;
        p->comm_transport = 0;
        retotal(p);
    }
    /* the asynchronous checkpoint's snapshot (params, m, v of the shard)
     * is host memory: part of the plan where the plan is host memory */
    if (!separate_memory && cfg->ckpt_dir && cfg->ckpt_dir[0] && cfg->ckpt_async) {
        size_t snap = mul(p->bytes[SR_MEM_PARAM_SHARD], 3);
        if (snap != SIZE_MAX && snap <= sr_ckpt_async_max_bytes(&job->ckpt, local_size)) {
            p->bytes[SR_MEM_CKPT_STAGING] = snap;
            retotal(p);
        }
    }
    /* offload (fsdp.c alloc_buffers): the host keeps the fp32 master, the
     * gradient shard, Adam's m and v (and the bf16 copy the gathers
     * upload with params offloaded, the landing of bf16 reductions); the
     * device drops the optimizer state, the gradient shard of per-step
     * reductions and, with params offloaded, its parameter shard */
    if (separate_memory && cfg->offload_optimizer) {
        size_t shard = p->bytes[SR_MEM_PARAM_SHARD], half = shard / 2;
        bool per_step = cfg->grad_sync == SR_GRADSYNC_PER_STEP;
        if (offloaded) {
            offloaded->bytes[SR_MEM_PARAM_SHARD] =
                add(shard, cfg->offload_params && cfg->param_dtype == SR_DT_BF16 ? half : 0);
            offloaded->bytes[SR_MEM_GRAD_SHARD] = p->bytes[SR_MEM_GRAD_SHARD];
            offloaded->bytes[SR_MEM_OPTIM_SHARD] = p->bytes[SR_MEM_OPTIM_SHARD];
            offloaded->bytes[SR_MEM_COMM] = per_step && cfg->reduce_dtype == SR_DT_BF16 ? half : 0;
            offloaded->bytes[SR_MEM_OTHER] = sizeof(double); /* the host's copy of the step's norm */
            retotal(offloaded);
        }
        p->bytes[SR_MEM_OPTIM_SHARD] = 0;
        if (per_step)
            p->bytes[SR_MEM_GRAD_SHARD] = 0;
        if (cfg->offload_params)
            p->bytes[SR_MEM_PARAM_SHARD] = 0;
        retotal(p);
    }
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
        if (fscanf(g, "%llu", &v) == 1 && v > 0 && v < ((unsigned long long)1 << 60))
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
    return (size_t)kb * 1024;
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
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; i < SR_MEM_NCAT && used < n; i++) {
        if (!p->bytes[order[i]])
            continue;
        char s[32];
        used += (size_t)snprintf(buf + used, n - used, "%s%s %s", used ? ", " : "", sr_mem_name(order[i]),
                                 sr_memplan_size(p->bytes[order[i]], s, sizeof s));
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
    return "run on more ranks (the shards shrink with the shard group), or sharding.grad_sync: per_micro_batch "
           "(no full-size accumulation buffer)";
}

sr_status sr_memplan_check(const sr_memplan *p, int local_size) {
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

sr_status sr_memplan_check_device(const sr_memplan *p, long long free_bytes) {
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
