/* fsdp_plan.c — the engine's memory, sized once: the full-unit pool, the
 * units kept gathered, the reduction slots, the widening stage and the
 * step's scalars, as fsdp.c allocates them (alloc_buffers and alloc_pools
 * call these sizing functions), and by category for the memory plan
 * (sr_fsdp_plan: the planner adds up, the engine answers for what it
 * allocates).  Part of the engine: fsdp_impl.h. */
#include "srconfig.h"

#include "fsdp_impl.h"
#include "testhook.h"

#define add sr_size_add
#define mul sr_size_mul

void sr_fsdp_pool_shape(const sr_shardplan *pl, const sr_fsdp_opts *o, size_t es, size_t *slot_bytes, int *slots,
                        size_t *kept_bytes) {
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
    *slot_bytes = largest;
    *slots = largest ? 1 + ahead : 0;
    if (kept_bytes)
        *kept_bytes = kept;
}

bool sr_fsdp_direct(const sr_shardplan *pl, const sr_fsdp_opts *o, bool offload, int R) {
    /* (offload per_step keeps no device gradient shard: its reductions go to the host) */
    return pl->S == 1 && R == 1 && o->reduce_dtype == SR_DT_F32 && !(offload && o->grad_sync_per_step) &&
           !sr_testhook()->nccl_size1;
}

bool sr_fsdp_copy16(const sr_fsdp_opts *o, bool offload) { return o->param_dtype == SR_DT_BF16 && !offload; }

bool sr_fsdp_alias(const sr_shardplan *pl, const sr_fsdp_opts *o, bool offload) {
    return pl->S == 1 && sr_fsdp_copy16(o, offload) && o->reshard_blocks < 2 && o->reshard_root < 2 &&
           !sr_testhook()->nccl_size1;
}

bool sr_fsdp_uses_rpool(const sr_fsdp_opts *o, bool offload, bool direct) {
    return !direct && (!o->grad_sync_per_step || o->reduce_dtype == SR_DT_BF16 || offload);
}

void sr_fsdp_rslot_bytes(const sr_shardplan *pl, const sr_fsdp_opts *o, int k, size_t *grad, size_t *send,
                         size_t *recv) {
    size_t Pblk = 0, Proot = 0;
    for (int ui = 0; ui < pl->nunits; ui++) {
        if (pl->units[ui].root)
            Proot = pl->units[ui].P;
        else if (pl->units[ui].P > Pblk)
            Pblk = pl->units[ui].P;
    }
    size_t P = k == 0 ? Proot : Pblk, total = mul((size_t)pl->S, P);
    *grad = o->grad_sync_per_step ? 0 : mul(total, sizeof(float));
    *send = o->reduce_dtype == SR_DT_BF16 ? mul(total, sr_dtype_size(SR_DT_BF16)) : 0;
    *recv = mul(P, sr_dtype_size(o->reduce_dtype));
}

size_t sr_fsdp_stage_elements(const sr_shardplan *pl, const sr_fsdp_opts *o, sr_dtype act) {
    size_t largest = 0;
    for (int ui = 0; o->param_dtype != act && ui < pl->nunits; ui++)
        largest = pl->units[ui].n > largest ? pl->units[ui].n : largest;
    return largest;
}

sr_status sr_fsdp_plan(const sr_shardplan *pl, const sr_fsdp_opts *o, int R, sr_dtype act, bool separate_memory,
                       sr_fsdp_bytes *out) {
    *out = (sr_fsdp_bytes){0};
    size_t *d = out->device, *h = out->host, f = sizeof(float), shard = mul(pl->local_size, f);
    bool off = o->offload_optimizer && separate_memory, per_step = o->grad_sync_per_step;
    bool direct = sr_fsdp_direct(pl, o, off, R);
    size_t slot, kept;
    int slots;
    sr_fsdp_pool_shape(pl, o, sr_dtype_size(o->param_dtype), &slot, &slots, &kept);
    /* (aliased: every unit's full buffer is its part of the bf16 copy) */
    d[SR_MEM_FULL_UNITS] = sr_fsdp_alias(pl, o, off) ? 0 : add(kept, mul((size_t)slots, slot));
    for (int k = 0; sr_fsdp_uses_rpool(o, off, direct) && k < RS_SLOTS; k++) {
        size_t g, s, r;
        sr_fsdp_rslot_bytes(pl, o, k, &g, &s, &r);
        d[SR_MEM_COMM] = add(d[SR_MEM_COMM], add(add(g, s), r));
    }
    d[SR_MEM_ACCUM] = per_step && !direct ? mul(pl->accum_size, f) : 0; /* direct: the gradient shard is it */
    d[SR_MEM_OTHER] = add(mul(sr_fsdp_stage_elements(pl, o, act), f), SR_FSDP_SCALARS * sizeof(double));
    /* the shard (the device's copy with offload, none with offload.params),
     * the gradient shard (none with offload per_step: reductions land in
     * slots), the optimizer's m and v (on the host with offload) */
    d[SR_MEM_PARAM_SHARD] = off && o->offload_params ? 0 : shard;
    if (sr_fsdp_copy16(o, off)) /* the bf16 copy AdamW writes and the gathers read */
        d[SR_MEM_PARAM_SHARD] = add(d[SR_MEM_PARAM_SHARD], mul(pl->local_size, sr_dtype_size(SR_DT_BF16)));
    d[SR_MEM_GRAD_SHARD] = off && per_step ? 0 : shard;
    d[SR_MEM_OPTIM_SHARD] = off ? 0 : mul(shard, 2);
    out->state_shard = shard;
    if (off) { /* offload.c sr_offload_start */
        size_t half = mul(pl->local_size, sr_dtype_size(SR_DT_BF16));
        h[SR_MEM_PARAM_SHARD] = add(shard, o->offload_params && o->param_dtype == SR_DT_BF16 ? half : 0);
        h[SR_MEM_GRAD_SHARD] = shard;
        h[SR_MEM_OPTIM_SHARD] = mul(shard, 2);
        h[SR_MEM_COMM] = per_step && o->reduce_dtype == SR_DT_BF16 ? half : 0;
        h[SR_MEM_OTHER] = sizeof(double); /* the host's copy of the step's loss */
    }
    return SR_OK;
}
