/* fsdp_state.c — where the engine's persistent state lives, and its
 * traffic to and from host memory: the layout of this rank's slices, the
 * reads and writes of a slice (a download or upload where the state is
 * device memory, a copy over the OpenMP team where it is host memory —
 * the CPU tables, offload — each declared to the happens-before checker),
 * host buffers that those copies are fastest into, what derives from the
 * master after a load, and the full model or gradient gathered to every
 * rank.  Checkpoints, model.init, samples and dumps reach the state only
 * through these (fsdp.h).  Part of the engine: fsdp_impl.h. */
#include "srconfig.h"

#include "fsdp_impl.h"

#include <string.h>

#include "hbcheck.h"
#include "vec.h"

void sr_fsdp_layout_get(const sr_fsdp *f, sr_fsdp_layout *out) {
    *out = (sr_fsdp_layout){.slices = f->opt.slices,
                            .nslices = f->opt.nslices,
                            .local_size = f->local_size,
                            .plan = &f->plan,
                            .mesh = &f->mesh};
}

/* State k's local buffer: the master (the device's shard, or the host's
 * with offload), Adam's m and v (the optimizer's table). */
static float *state_buf(const sr_fsdp *f, int k) {
    return k == SR_STATE_PARAMS ? (f->off ? f->hparams : f->pshard) : k == SR_STATE_M ? f->opt.m : f->opt.v;
}

/* Whether the state is host memory the host reads directly. */
static bool state_on_host(const sr_fsdp *f) { return f->off || !f->dev->separate_memory; }

sr_status sr_fsdp_state_sync(sr_fsdp *f) {
    sr_offload_wait_all(f); /* offload: the host optimizer's update is complete */
    /* the reader (downloads) waits for the last AdamW */
    sr_dev *d = f->dev;
    sr_event updated = {0};
    d->record(d, &updated, SR_STREAM_COMPUTE);
    sr_status st = sr_dev_wait(d, SR_STREAM_D2H, &updated, "state_ready");
    if (st != SR_OK || f->off || d->separate_memory)
        return st;
    /* the CPU tables: their operations are done when issued, but the host
     * copies are ordered after the step's update through the wait above
     * and this host wait, which the checker proves */
    sr_event ev = {0};
    d->record(d, &ev, SR_STREAM_D2H);
    st = sr_dev_host_wait(d, &ev, "download");
    for (int k = 0; d->hb && k < SR_STATE_COUNT; k++)
        for (int i = 0; i < f->opt.nslices; i++)
            sr_hb_access(d->hb, SR_HB_HOST, state_buf(f, k) + f->opt.slices[i].local,
                         (f->opt.slices[i].end - f->opt.slices[i].begin) * sizeof(float), false,
                         "the host reads the engine's state (a checkpoint, a snapshot)");
    return st;
}

sr_status sr_fsdp_state_read(sr_fsdp *f, int k, size_t local, size_t n, float *host) {
    const float *src = state_buf(f, k) + local;
    if (state_on_host(f)) {
        sr_vec_copy_par(host, src, n * sizeof(float));
        return SR_OK;
    }
    /* synchronous: a step boundary, not a step */
    return sr_dev_download(f->dev, host, src, n * sizeof(float), "download");
}

sr_status sr_fsdp_state_write(sr_fsdp *f, int k, size_t local, size_t n, const float *host) {
    float *dst = state_buf(f, k) + local;
    if (f->off) {
        sr_offload_wait_all(f); /* the host optimizer is not writing the master */
        memcpy(dst, host, n * sizeof(float));
        return SR_OK;
    }
    return sr_dev_upload(f->dev, dst, host, n * sizeof(float), "upload");
}

void *sr_fsdp_host_alloc(sr_fsdp *f, sr_mem_cat cat, size_t bytes) {
    if (!state_on_host(f))
        return f->dev->alloc(f->dev, SR_SPACE_PINNED, cat, bytes);
    return sr_mem_alloc_in(SR_SPACE_HOST, cat, bytes, false);
}

void sr_fsdp_host_free(sr_fsdp *f, void *p) {
    if (!state_on_host(f))
        f->dev->free(f->dev, p);
    else
        sr_mem_free(p);
}

void sr_fsdp_refresh16(sr_fsdp *f) {
    if (!f->pshard16)
        return;
    /* on compute, after the master's uploads (each waited for by the
     * host); the gathers (comm) wait for it as for an AdamW */
    sr_dev *d = f->dev;
    d->cast_f32_bf16(d, SR_STREAM_COMPUTE, f->pshard16, f->pshard, f->local_size);
    sr_event cast = {0};
    d->record(d, &cast, SR_STREAM_COMPUTE);
    sr_dev_wait(d, SR_STREAM_COMM, &cast, "params_updated");
}

sr_status sr_fsdp_state_loaded(sr_fsdp *f) {
    if (f->off)
        return sr_offload_refresh(f);
    sr_fsdp_refresh16(f);
    return SR_OK;
}

sr_status sr_fsdp_gather_params(sr_fsdp *f, float *full) {
    sr_offload_wait_all(f);
    size_t biggest = 0;
    for (int ui = 0; ui < f->nunits; ui++)
        biggest = f->plan.units[ui].P > biggest ? f->plan.units[ui].P : biggest;
    float *unit_buf = sr_fsdp_alloc(f, f->dev->state_space, SR_MEM_OTHER, (size_t)f->S * biggest * sizeof(float));
    if (!unit_buf)
        return sr_error_oom("the parameter gather");
    sr_status st = SR_OK;
    for (int ui = 0; ui < f->nunits && st == SR_OK; ui++) {
        const sr_unit_plan *u = &f->plan.units[ui];
        sr_event gathered;
        const float *mine = f->off ? NULL : f->pshard + u->local;
        if (f->off) { /* the master is on the host: upload this rank's part in place */
            float *part = unit_buf + (size_t)sr_group_rank(f->shard_g) * u->P;
            f->dev->copy(f->dev, SR_STREAM_COMM, part, f->hparams + u->local, u->P * 4);
            mine = part;
        }
        st = sr_plane_collective(f->plane, SR_COLL_ALLGATHER, "all-gather (parameter dump)", f->shard_g, unit_buf,
                                 (size_t)f->S * u->P * 4, mine, u->P * 4, u->P, SR_DT_F32, &gathered);
        sr_status wst = sr_dev_host_wait(f->dev, &gathered, "dump_gathered");
        if (st == SR_OK)
            st = wst;
        if (st == SR_OK)
            st = sr_dev_download(f->dev, full + u->off, unit_buf, u->n * sizeof(float), "download");
    }
    sr_fsdp_release(f, (void **)&unit_buf);
    return st;
}

sr_status sr_fsdp_gather_grads(sr_fsdp *f, float *full) {
    if (f->S != 1 || f->mesh.world != 1 || !f->gshard)
        return sr_error(SR_ERR_CONFIG, "the gradient dump (SHARDRUN_TEST_ORACLE) needs one rank and no offload");
    sr_status st = SR_OK;
    for (int ui = 0; ui < f->nunits && st == SR_OK; ui++) {
        const sr_unit_plan *u = &f->plan.units[ui];
        st = sr_dev_download(f->dev, full + u->off, f->gshard + u->local, u->n * sizeof(float), "download");
    }
    return st;
}
