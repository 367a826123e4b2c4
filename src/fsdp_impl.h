/* fsdp_impl.h — the sharding engine's private state, shared by the files
 * that implement it: fsdp.c (gather, reshard, reduce, the step),
 * offload.c (sharding.offload: the host state and its optimizer thread)
 * and fsdp_state.c (where the persistent state lives, and its traffic to
 * and from host memory).  Nothing outside the engine includes it. */
#ifndef SR_FSDP_IMPL_H
#define SR_FSDP_IMPL_H

#include <pthread.h>

#include "fsdp.h"
#include "mem.h"

/* A buffer that units take turns in: the full-unit pool's slots and the
 * reduction pool's.  Full-unit slots: `released` is recorded where the last
 * user let go (compute, after its last read), so the next gather into the
 * slot waits for it: no buffer is reused while a stream still reads it.
 * (Reduction slots need no event: see take_rslot.) */
typedef struct {
    void *buf;         /* full pool: the largest block unit in the param dtype */
    float *grad;       /* reduction pool, per_micro_batch: the full gradient (S*P fp32) */
    size_t grad_dirty; /* ...its elements past which it holds zeros (the model writes a unit's n) */
    void *send, *recv; /* reduction pool: the bf16 cast (S*P), the reduced shard (P of the reduce dtype) */
    int unit;          /* the unit in it, or -1 */
    sr_event released;
    bool ever; /* released was recorded */
} slot;

typedef struct {
    const sr_unit_plan *p;
    int64_t reshard;
    sr_group *ngroup; /* reshard N group, or NULL */
    /* parameters */
    void *own; /* the root and units kept gathered: their own full buffer; else NULL */
    sr_event own_released;
    bool own_ever;
    void *full;          /* where the gathered unit is (own, or a pool slot's), or NULL */
    int slot;            /* its full-pool slot, or -1 */
    sr_event ready;      /* the gather into full (a transport event on the cpu tables) */
    bool ag_pending;     /* `ready` not yet waited for */
    void *kept;          /* reshard N: this rank's 1/N of the full unit (own buffer) */
    sr_event kept_ready; /* ...copied on the compute stream */
    bool has_kept;       /* kept holds this step's share */
    bool update_pending; /* offload: the host optimizer has not yet updated this unit's master this step */
    bool copy_stale;     /* offload (not params): the device copy of the unit's shard awaits its upload */
    /* gradients */
    int rslot; /* its reduction-pool slot, or -1 */
    sr_event rs_done, ar_done;
    bool rs_pending;
    bool gfresh;        /* its part of the gradient shard holds nothing of this step yet */
    bool rs_into_shard; /* the pending reduction lands in the gradient shard itself (no fold) */
} unit;

/* The reduction pool: slot 0 for the root, the others for blocks. */
enum { RS_SLOTS = 3 };

struct sr_fsdp {
    sr_model *m;
    sr_dev *dev;
    sr_fsdp_opts o;
    sr_mesh mesh;
    sr_shardplan plan;
    int S, R;
    sr_group *shard_g, *rep_g;
    sr_plane *plane; /* how the collectives travel (plane.h) */
    int nunits;
    unit *units;
    float *pshard, *gshard; /* device: the parameter shard (with offload: its copy, or NULL), the gradient shard */
    size_t local_size;
    /* bf16 parameters without offload (sr_fsdp_copy16): the shard's bf16
     * copy, written by AdamW with each update (and cast from the master
     * after a load), the all-gathers' send buffer; at a shard group of one
     * (`alias`, sr_fsdp_alias) each unit's full buffer is its part of it:
     * no pool, no gather — but the unit's `ready` is still recorded on the
     * comm stream and waited for by compute, as a gather's would be: the
     * reductions there read the buffers the unit's backward writes next */
    void *pshard16;
    bool alias;
    /* sharding.offload: the fp32 master and the gradient shard in host
     * memory (hspace), AdamW on the host table hdev; hrecv lands bf16
     * reductions; hparams16 is the bf16 copy each gather uploads when the
     * device keeps no parameter shard (offload.params) */
    bool off, offp;
    sr_mem_space hspace;
    float *hparams, *hgrads;
    void *hrecv, *hparams16;
    double *hscalars; /* the step's loss sum, copied to the host */
    sr_dev *hdev;
    /* offload: the host optimizer thread.  optimizer_step posts a job (a
     * generation); the thread updates the units in forward order and
     * counts them in `updated`; a gather waits for its unit's count */
    pthread_t hopt;
    bool hopt_started, hopt_quit;
    pthread_mutex_t hopt_mu;
    pthread_cond_t hopt_cv;
    uint64_t hopt_job, hopt_done; /* posted and finished generations */
    int hopt_updated;             /* units of the posted job updated, in forward order */
    sr_adamw_launch hopt_launch;  /* the posted job's AdamW (every segment) */
    sr_mem_ctx *mem;              /* the accounting the thread binds (virtual ranks) */
    int hopt_threads;             /* its OpenMP team (the rank's threads) */
    sr_optim opt;
    bool opt_ok;
    float *accum;
    size_t accum_n;
    float *stage; /* the ops compute in another dtype than the gathered units: one unit widened */
    int staged_unit;
    uint64_t layer_span; /* log.trace_steps: the open layer span (sr_dev_trace_begin; 0: none) */
    int span_layer;      /* ...its layer */
    double *sumsq;       /* the gradient shard's sum of squares and the loss sum, in the table's memory */
    sr_dtype pdt, rdt;
    bool per_step;
    /* one rank, fp32 reductions (sr_fsdp_direct): the model writes its
     * gradients straight into the gradient shard; no reduction,
     * accumulation buffer or reduction pool */
    bool direct;
    int backwards; /* backward passes since begin_step (the first writes fresh buffers) */
    bool stepped;  /* finish_grads enqueued this step's AdamW (sr_fsdp_update) */
    slot *pool;    /* full-unit pool: 1 + max prefetch slots (none when every block is kept) */
    int npool;
    slot rpool[RS_SLOTS]; /* reduction pool (unused with fp32 per_step reductions and in direct mode) */
    bool use_rpool;
    int *order, norder, pos;
    bool backward, last_mb;
    int inflight[RS_SLOTS], ninflight; /* units holding a reduction slot with a pending reduction, oldest first */
    sr_param_source src;
    sr_sticky err;
};

/* Records the failure whose message was just recorded on this thread. */
static inline void sr_fsdp_fail(sr_fsdp *f, sr_status st) { sr_sticky_set(&f->err, st, "%s", sr_error_message()); }

static inline bool sr_fsdp_failed(sr_fsdp *f) { return sr_sticky_status(&f->err) != SR_OK; }

/* Memory of the engine in `space` of its table (the state space, or the
 * offloaded state's pinned or host memory); a failure is recorded. */
static inline void *sr_fsdp_alloc(sr_fsdp *f, sr_mem_space space, sr_mem_cat cat, size_t bytes) {
    void *p = f->dev->alloc(f->dev, space, cat, bytes);
    if (!p)
        sr_fsdp_fail(f, SR_ERR_INTERNAL);
    return p;
}

static inline void sr_fsdp_release(sr_fsdp *f, void **p) {
    f->dev->free(f->dev, *p);
    *p = NULL;
}

/* The step's scalars in the table's memory: the gradient shard's sum of
 * squares and the loss sum. */
enum { SR_FSDP_SCALARS = 2 };

/* fsdp_plan.c: the sizes alloc_buffers and alloc_pools allocate.  The
 * full-unit pool: slots of *slot_bytes (the largest block unit that is not
 * kept, in the param dtype of es bytes), *slots of them (1 + the larger
 * prefetch; none when every block is kept), and the units kept gathered
 * with the N-way shares (*kept_bytes, may be NULL).  Whether reductions go
 * through the reduction pool; its slot k's buffers (the full gradient of
 * per_micro_batch, the bf16 cast, the reduced shard; 0 when not used).
 * The widening stage's elements (0 when the ops compute in the param
 * dtype). */
void sr_fsdp_pool_shape(const sr_shardplan *pl, const sr_fsdp_opts *o, size_t es, size_t *slot_bytes, int *slots,
                        size_t *kept_bytes);
/* Whether the gradients need no reduction and land where the optimizer
 * reads them, the device's gradient shard (one rank: S and R 1; fp32
 * reductions; a gradient shard on the device: not offload per_step;
 * size-1 groups not put on NCCL by SHARDRUN_TEST_NCCL_SIZE1). */
bool sr_fsdp_direct(const sr_shardplan *pl, const sr_fsdp_opts *o, bool offload, int R);
/* Whether the engine keeps the shard's bf16 copy (bf16 parameters, no
 * offload: the offloaded optimizer keeps its own on the host); and whether
 * the full units alias it (that, a shard group of one, no N-way shares,
 * size-1 groups not put on NCCL by SHARDRUN_TEST_NCCL_SIZE1). */
bool sr_fsdp_copy16(const sr_fsdp_opts *o, bool offload);
bool sr_fsdp_alias(const sr_shardplan *pl, const sr_fsdp_opts *o, bool offload);
bool sr_fsdp_uses_rpool(const sr_fsdp_opts *o, bool offload, bool direct);
void sr_fsdp_rslot_bytes(const sr_shardplan *pl, const sr_fsdp_opts *o, int k, size_t *grad, size_t *send,
                         size_t *recv);
size_t sr_fsdp_stage_elements(const sr_shardplan *pl, const sr_fsdp_opts *o, sr_dtype act);

/* fsdp_state.c: the bf16 copy cast from the master (set-up, after a load;
 * ordered before the next gathers); nothing without one. */
void sr_fsdp_refresh16(sr_fsdp *f);

/* offload.c (sharding.offload.optimizer): the host buffers (zeroed), the
 * optimizer thread started and pinned; stopped; whether unit ui's master
 * is updated for this step (`block` waits for it); the whole posted job;
 * the reduced gradient shard on the host with the loss sum (one host
 * wait); AdamW posted to the thread; the derived copies refreshed after
 * the master changed (a load, the initialisation). */
sr_status sr_offload_start(sr_fsdp *f);
void sr_offload_stop(sr_fsdp *f);
bool sr_offload_wait_unit(sr_fsdp *f, int ui, bool block);
void sr_offload_wait_all(sr_fsdp *f);
sr_status sr_offload_grads(sr_fsdp *f, double *loss_sum);
void sr_offload_post(sr_fsdp *f, int64_t step, double lr, const sr_adamw_opts *o, float grad_scale);
sr_status sr_offload_refresh(sr_fsdp *f);

#endif
