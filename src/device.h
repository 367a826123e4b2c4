/* device.h — the device table: memory, copies, streams, events and the
 * element-wise primitives of the engine, behind one interface; and which
 * device this process uses.
 *
 * device owns the seam between the engine (model, fsdp, optim, ckpt) and
 * where tensors live.  A table (`sr_dev`) is a struct of function
 * pointers; model.c, fsdp.c and optim.c touch model tensors only through
 * it and through the ops (ops.h).  Three tables implement it:
 *   - cpu:  host memory, streams are program order, events are counters —
 *           except that a wait on a *transport event* is the host wait on
 *           that transport request (sr_wait): skipping it would read a
 *           half-gathered unit.  Primitives are the host loops of vec.c.
 *   - fake: the cpu table with its "device" memory in its own accounted
 *           space (mem_device_total), behaving like a GPU run in every
 *           decision the code makes: state on the device, checkpoints
 *           staged through host buffers, the planned device memory checked
 *           against SHARDRUN_TEST_DEVICE_FREE_MB.  A test hook
 *           (SHARDRUN_TEST_DEVICE=fake) so GPU-run code paths are tested on
 *           any machine.
 *   - cuda: the CUDA back end (device_cuda.c, built when configure finds
 *           nvcc and the CUDA runtime, into the CUDA module that
 *           sr_device_open loads when a run needs a GPU, cudamod.h):
 *           cudaMalloc'd memory, four CUDA streams, CUDA events, the
 *           primitives as kernels (kernels/).
 * Allocations are never zeroed implicitly; under SHARDRUN_TEST_POISON=1
 * (which `make check` sets) the cpu and fake tables fill them with NaN, so a
 * read before a write shows on the CPU before any GPU.
 *
 * The choice of the GPU from the local rank (sr_device_pick) and the device
 * line of the log live here too (ARCHITECTURE.md §1). */
#ifndef SR_DEVICE_H
#define SR_DEVICE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "hbcheck.h"
#include "mem.h"
#include "status.h"
#include "vec.h"
#include "world.h"

typedef enum { SR_DEV_CPU, SR_DEV_FAKE, SR_DEV_CUDA } sr_dev_kind;

/* Streams: compute (the model's ops), comm (collectives and their casts and
 * folds), h2d and d2h (offload and checkpoints). */
typedef enum { SR_STREAM_COMPUTE, SR_STREAM_COMM, SR_STREAM_H2D, SR_STREAM_D2H, SR_NSTREAMS } sr_stream;

/* What the cuda table allocates for itself when it opens (device_cuda.c;
 * sr_device_own_bytes reports them): cuBLASLt's workspace and one
 * reduction scratch per stream on the device, the pinned bounce buffer of
 * step-path downloads (sr_dev_download_step) on the host. */
#define SR_CUDA_LT_WORKSPACE_BYTES ((size_t)32 << 20)
#define SR_CUDA_SCRATCH_BYTES ((size_t)256 * sizeof(double))
#define SR_CUDA_BOUNCE_BYTES ((size_t)64 << 10)

/* An event: a point in one stream's order.  Zero-initialise ({0}) before
 * first use.  A *transport event* completes with a transport request
 * instead: `req` and the function that waits for it on the host (the
 * transport sets both, sr_event_from_req in comm.h, so this layer needs
 * no knowledge of the transport). */
typedef struct {
    uint64_t tick;                    /* cpu tables: the recording stream's count (0: never recorded) */
    int stream;                       /* the stream that recorded it */
    void *req;                        /* transport event: the request it stands for, or NULL */
    sr_status (*req_wait)(void *req); /* ...and how the host waits for it */
    void *impl;                       /* a back end's own event (CUDA), or NULL */
    sr_hb_clock hb;                   /* the happens-before checker's snapshot (hbcheck.h) */
} sr_event;

/* One contiguous run of the shard that AdamW updates: elements [off, off+n)
 * of params/grads/m/v, with weight decay or not; `start` is the elements of
 * the launch's segments before it (the segments laid end to end: what one
 * launch over the whole list divides among its blocks).  The layout is
 * also the device's (kernels/sr_cuda.h sr_cuda_adamw_seg mirrors it; a
 * static assertion in device_cuda.c holds them equal). */
typedef struct {
    size_t off, n, start;
    bool decay;
} sr_adamw_segment;

/* One AdamW launch over a list of segments (sr_optim builds it).  `a`
 * carries the step's constants; a.decay is replaced per segment by
 * weight_decay (decaying segments) or 0.  `dsegs` is the same list in the
 * table's memory (sr_optim uploads it once; NULL: the table reads `segs`,
 * as the cpu tables always do): the cuda table's one launch reads it.
 * With `params16` (bf16, laid out as params) each updated element's bf16
 * (round to nearest even, as cast_f32_bf16) is written there too: the copy
 * the next forward gathers, with no separate cast.  With `sumsq` (a double in the
 * table's memory: the gradients' sum of squares, written earlier on the
 * stream) the clipping scale is computed where the launch runs, as
 * sr_vec_clip_scale(sqrt(*sumsq), clip) (vec.h), in place of a.grad_scale: the
 * host need not read the norm before it enqueues the step. */
typedef struct {
    float *params, *m, *v;
    const float *grads;
    const sr_adamw_segment *segs, *dsegs;
    int nsegs;
    void *params16;
    sr_adamw_args a;
    float weight_decay;
    const double *sumsq;
    double clip;
} sr_adamw_launch;

typedef struct sr_dev sr_dev;

/* The table.  Every pointer argument of a stream-ordered call names memory
 * of this table (any space) unless stated; `s` orders the call after
 * everything issued earlier on the same stream. */
struct sr_ledger; /* ledger.h */
struct sr_dev {
    const char *name; /* "cpu", "fake", "cuda" (logs) */
    sr_dev_kind kind;
    /* true when device memory is not host memory to the engine: model state
     * lives in SR_SPACE_DEVICE and the host reaches it only by copies
     * (fake, cuda).  false: the cpu table, where every space is host. */
    /* The CUDA emulator of tests/cudaemu runs this table, not a GPU (an
     * emulator tree): the run labels its lines and records with `name`. */
    bool emulated;
    bool separate_memory;
    /* A dry table (the cuda table opened dry: `shardrun plan --ledger`'s
     * counting executor): every operation is recorded in the ledger bound
     * to the thread (ledger.h) and none is issued; device memory is
     * addresses never dereferenced.  The data plane counts its
     * collectives instead of running them. */
    bool dry;

    /* Memory: `bytes` in (space, cat), 64-byte aligned, not zeroed (NaN
     * under SHARDRUN_TEST_POISON=1); NULL with an SR_ERR_INTERNAL message
     * when out of memory.  free needs no size; NULL is fine. */
    void *(*alloc)(sr_dev *d, sr_mem_space space, sr_mem_cat cat, size_t bytes);
    void (*free)(sr_dev *d, void *p);

    /* Stream-ordered copies and memsets (any direction). */
    void (*memset)(sr_dev *d, sr_stream s, void *dst, int byte, size_t bytes);
    void (*copy)(sr_dev *d, sr_stream s, void *dst, const void *src, size_t bytes);

    /* Events: record `ev` at the current end of stream s; make stream s
     * wait for `ev` (device side: the host does not block, except on a
     * transport event on the cpu tables); block the host until `ev` is
     * complete; block the host until stream s is drained.  The waits return
     * the transport's status for a transport event (SR_ERR_PEER when a
     * peer failed), else SR_OK (SR_ERR_INTERNAL for a failed device). */
    void (*record)(sr_dev *d, sr_event *ev, sr_stream s);
    sr_status (*wait)(sr_dev *d, sr_stream s, sr_event *ev);
    sr_status (*host_wait)(sr_dev *d, sr_event *ev);
    sr_status (*sync)(sr_dev *d, sr_stream s);

    /* Element-wise primitives (stream-ordered):
     *   cast_f32_bf16: dst[i] = bf16(src[i]), round to nearest even
     *   fold_bf16:     acc[i] = (add ? acc[i] : 0) + f32(src[i])
     *   add_f32:       acc[i] += src[i]
     *   sum_squares:   *out = sum x[i]^2 in double, in a fixed order (the
     *                  same for any thread count); out in this table's memory
     *   loss_sum:      *acc = (add ? *acc : 0) + sum losses[i] in double, i
     *                  in order; acc in this table's memory (not read when
     *                  !add)
     *   adamw:         one AdamW step over the launch's segments */
    void (*cast_f32_bf16)(sr_dev *d, sr_stream s, void *dst, const float *src, size_t n);
    void (*fold_bf16)(sr_dev *d, sr_stream s, float *acc, const void *src, size_t n, bool add);
    void (*add_f32)(sr_dev *d, sr_stream s, float *acc, const float *src, size_t n);
    void (*sum_squares)(sr_dev *d, sr_stream s, double *out, const float *x, size_t n);
    void (*loss_sum)(sr_dev *d, sr_stream s, double *acc, const float *losses, size_t n, bool add);
    void (*adamw)(sr_dev *d, sr_stream s, const sr_adamw_launch *l);

    /* The space model state lives in: SR_SPACE_DEVICE with
     * separate_memory, else SR_SPACE_HOST. */
    sr_mem_space state_space;
    bool poison;                   /* fill allocations with NaN */
    uint64_t ticks[SR_NSTREAMS];   /* cpu tables: events recorded per stream */
    long long device_free_bytes;   /* fake: SHARDRUN_TEST_DEVICE_FREE_MB, or -1 */
    sr_hb *hb;                     /* the happens-before checker (SHARDRUN_TEST_HB=1), or NULL */
    int64_t delay_us[SR_NSTREAMS]; /* SHARDRUN_TEST_COMM_DELAY_US: sleep before each call on a stream */
    /* Exposed communication: nanoseconds the compute stream spent waiting
     * for communication, summed since the table opened (the engine reads
     * differences).  cpu tables: the host's time blocked on transport
     * requests, whichever stream waited, since the host is the compute
     * stream there. */
    uint64_t comm_wait_ns;
    /* Pinned host memory of bounce_bytes for step-path downloads
     * (sr_dev_download_step), NULL where host memory is the device's; and
     * the table's refusal of a step-path download into pageable memory
     * (cuda with SHARDRUN_CUDA_SYNC=1; NULL: none). */
    void *bounce;
    size_t bounce_bytes;
    sr_status (*pageable_check)(sr_dev *d, const void *host, size_t bytes, const char *site);
    /* The device part of the start line ("cuda:0 (GPU 3, NVIDIA H200,
     * sm_90, ...)"); empty for the cpu tables (sr_device_describe). */
    char line[512];
    char pci_bus[32]; /* the GPU's PCI bus id (cudaDeviceGetPCIBusId), "" for the cpu and fake tables */
    /* The deadline of a host wait, seconds (comm.timeout_s; <= 0: none),
     * and the step the engine is in, for the message when it passes. */
    double timeout_s;
    long long step;
    void *impl; /* the back end's own state (cuda), or NULL */
    /* Called by a host wait whose deadline passed, before it fails with
     * its own message (NULL: none): the NCCL plane (comm_nccl_cuda.c) aborts
     * and exits 69 when one of its collectives is what never completed,
     * and returns otherwise. */
    void (*on_deadline)(void *arg);
    void *on_deadline_arg;
    /* The cuda table's watchdog of the host thread (NULL on the cpu
     * tables): a host wait polls with a deadline, but a launch or library
     * call can block inside the driver, where no deadline runs (CUDA's lazy
     * module loading waits for the device: behind a hung kernel the next
     * first launch never returns).  watch(d, step) arms it while the engine
     * enqueues device work of `step` (0 disarms: waits on peers have the
     * transport's own deadlines); a thread of the table then ends the
     * process (70, the message first) when the host has not come back from
     * the driver for timeout_s.  Use sr_dev_watch. */
    void (*watch)(sr_dev *d, long long step);
    /* log.trace_steps' spans in device time (trace.h), the cuda table's
     * (NULL on the cpu tables, whose spans are the host's time): begin
     * records a timing event on stream s and returns a handle (0: none
     * free); end records the closing one on the same stream.  The span
     * reaches the trace once its closing event completes (collected at
     * the table's host waits), its times from cudaEventElapsedTime against
     * an anchor event whose host time the table measured. */
    uint64_t (*trace_begin)(sr_dev *d, sr_stream s);
    void (*trace_end)(sr_dev *d, uint64_t handle, int lane, const char *name);
    /* The per-op profile (SHARDRUN_CUDA_PROFILE; the cuda table's, NULL on
     * the cpu tables): profile_open creates `pairs` timing-event pairs at
     * set-up (nothing is allocated while a step runs); profile_switch on
     * brackets every operation of the calling thread with a pair (each
     * counted to its row of the ledger bound to the thread, ledger.h),
     * off stops; profile_collect waits for the device, adds each timed
     * operation's milliseconds to its row and family of `l` and frees the
     * pairs; *untimed: operations the pool had no pair for; *busy_ms: the
     * union of their spans (the device's busy time: streams overlap). */
    sr_status (*profile_open)(sr_dev *d, int pairs);
    void (*profile_switch)(sr_dev *d, bool on);
    sr_status (*profile_collect)(sr_dev *d, struct sr_ledger *l, long long *untimed, double *busy_ms);
    /* The device memory in use by anyone (cudaMemGetInfo's total - free),
     * now; NULL for the cpu tables.  used_at_open: the same when the table
     * opened (the context, and its modules when loaded eagerly). */
    size_t (*used_bytes)(sr_dev *d);
    size_t used_at_open;
};

/* The device a job asks for (the job file's `device` key). */
typedef enum { SR_DEVICE_AUTO, SR_DEVICE_CPU, SR_DEVICE_CUDA } sr_device_want;

/* Opens the table for this process (rank `local_rank` of `local_size` on
 * its node, in a world of `world_size`): the cpu table for a CPU run, the
 * fake table under SHARDRUN_TEST_DEVICE=fake, the cuda table for `want`
 * cuda, and for `want` auto when the detection (sr_cudamod_detect) sees a
 * GPU and the CUDA runtime finds it usable; the cuda table loads the CUDA
 * module first (cudamod.h).  cuda is SR_ERR_CONFIG (78) in a build without
 * CUDA, when the module does not load or does not match, when no GPU is
 * usable, when the GPU cannot be picked from the local rank, and for a
 * world size above 1 in a build without NCCL; auto in those cases runs on
 * the CPU with one warning (none when nothing was detected).  *out is set
 * on success; free with sr_device_close. */
sr_status sr_device_open(sr_dev **out, sr_device_want want, int world_size, int local_rank, int local_size);
/* The cuda table opened dry (`dry` above: the counting executor of
 * `shardrun plan --ledger`; no GPU needed, no CUDA call made), bound to
 * the calling thread.  SR_ERR_CONFIG (78) in a build without CUDA or when
 * the CUDA module does not load, naming why. */
sr_status sr_device_open_dry(sr_dev **out);
/* The job's `device` key against this build: device: cuda in a build
 * without CUDA is SR_ERR_CONFIG at its place in the job file.  Once per
 * command, when it loads the job (main_cmds.c load_job). */
sr_status sr_device_check_key(const sr_config *cfg);
/* A run's table (every rank calls it, before the transport connects;
 * the job's key checked by sr_device_check_key before): a warning on a
 * rank that was given GPUs it cannot use, the table opened for the job's `device` (comm.timeout_s as its
 * deadline; an emulated table tags every log line), and the same kind on
 * every rank, compared through PMIx: SR_ERR_CONFIG naming the ranks of
 * each kind when they differ.  *out is set when this rank's open succeeded
 * (close it even on failure). */
sr_status sr_device_open_run(sr_dev **out, const sr_config *cfg, sr_world *w);
/* Host memory the device reads asynchronously (a run's token buffers):
 * pinned on the cuda table, plain host memory (unaccounted) on the others;
 * NULL when out of memory.  Free with sr_dev_io_free. */
void *sr_dev_io_alloc(sr_dev *d, size_t bytes);
/* What a table of `kind` allocates for itself when it opens, per space
 * (category SR_MEM_OTHER), added into own[SR_NSPACE]: the cuda table's
 * cuBLASLt workspace and per-stream reduction scratch (device) and its
 * bounce buffer (pinned); nothing on the cpu and fake tables.  And the
 * device memory a process on a table of `kind` needs outside the
 * accounting (the CUDA context and modules: an estimate; 0 elsewhere). */
void sr_device_own_bytes(sr_dev_kind kind, size_t own[SR_NSPACE]);
size_t sr_device_reserve_bytes(sr_dev_kind kind);
/* The device memory `shardrun plan` assumes without --device-mem-gib: an
 * 80 GB H100 or A100. */
#define SR_DEVICE_ASSUMED_BYTES ((size_t)80 << 30)
void sr_dev_io_free(sr_dev *d, void *p);
/* The compute dtype the job's `auto` means on a table: bf16 on the cuda
 * table (tensor-core GEMMs), fp32 on the cpu and fake tables (the CPU ops
 * compute in fp32, and a fake-device run stays bitwise a CPU run). */
sr_dtype sr_device_auto_dtype(bool cuda_table);
/* The op table that computes on `d` in `param_dtype`: the CPU ops (f32) on
 * the cpu and fake tables, the CUDA ops of that dtype on the cuda table
 * (bf16 with flash attention when `flash`: job.h sr_job_attention
 * decides; ignored elsewhere). */
const struct sr_ops *sr_device_ops(const sr_dev *d, sr_dtype param_dtype, bool flash);
/* The op table a run would use on a GPU (gpu true) or on the CPU, without
 * opening a device (`shardrun plan`; a GPU's loads the CUDA module,
 * cudamod.h); NULL with the message set for a GPU when the module does not
 * load or the build has no CUDA. */
const struct sr_ops *sr_device_plan_ops(bool gpu, sr_dtype param_dtype, bool flash);
void sr_device_close(sr_dev *d);
/* The cpu and fake tables themselves, for tests (sr_device_close frees
 * them too).  NULL when out of memory. */
sr_dev *sr_dev_cpu_open(void);
sr_dev *sr_dev_fake_open(void);

/* Host <-> table copies that return when done: copy on the d2h (h2d)
 * stream, then the host waits for it, a host wait named `site` (a name of
 * sr_dev_wait_sites).  After a download the host reads host_dst; after an
 * upload it may write host_src again (both declared to the checker).  An
 * upload is ordered after all work issued before it on every stream (set-up
 * and resume only); a download only after its own stream's past. */
sr_status sr_dev_download(sr_dev *d, void *host_dst, const void *src, size_t bytes, const char *site);
/* Arms (step > 0: also the step the engine is in, d->step) or disarms (0)
 * the table's watchdog of the host thread (the watch member; nothing on
 * the tables without one). */
void sr_dev_watch(sr_dev *d, long long step);

/* A download on the step path (the once-per-step scalars, the eval loss):
 * through the table's pinned bounce buffer when it fits, so the host's
 * wait polls up to its deadline (an async copy into pageable memory
 * returns only when done); a larger one is checked by pageable_check. */
sr_status sr_dev_download_step(sr_dev *d, void *host_dst, const void *src, size_t bytes, const char *site);
sr_status sr_dev_upload(sr_dev *d, void *dst, const void *host_src, size_t bytes, const char *site);

/* For the tables: the host waits for a transport event's request (the
 * time counts as exposed communication, comm_wait_ns) and clears it; SR_OK
 * at once for an event that is not a transport event. */
sr_status sr_dev_transport_wait(sr_dev *d, sr_event *ev);

/* Named waits.  Every wait of the engine goes through these, with a site
 * from sr_dev_wait_sites: SHARDRUN_TEST_SKIP_WAIT=SITE[,SITE...] skips
 * those (a test proves the checker then reports the race), and the
 * checker counts host waits.  sr_dev_wait: stream s waits for ev (device
 * side); sr_dev_host_wait: the host waits for ev. */
/* log.trace_steps: a span on stream s in the device's time, begun and
 * ended around the work it times (lane a trace.h lane).  Outside the
 * trace's window begin returns 0 and end does nothing; on the cpu tables
 * the span is the host's time between the two calls. */
uint64_t sr_dev_trace_begin(sr_dev *d, sr_stream s);
void sr_dev_trace_end(sr_dev *d, uint64_t handle, int lane, const char *name);
sr_status sr_dev_wait(sr_dev *d, sr_stream s, sr_event *ev, const char *site);
sr_status sr_dev_host_wait(sr_dev *d, sr_event *ev, const char *site);
/* The wait sites, NULL-terminated, each with a line saying what it orders
 * (SHARDRUN_TEST_SKIP_WAIT=list prints them). */
typedef struct {
    const char *name, *what;
} sr_wait_site;
extern const sr_wait_site sr_dev_wait_sites[];

/* Declarations for the happens-before checker (no-ops without it):
 *   sr_dev_declare: stream s reads or writes [p, p+bytes) in the model's
 *     kernels (the engine declares them per unit at the hook boundaries);
 *   sr_dev_collective: the host issues a collective on stream `on` that
 *     reads `send` and writes `recv` (the transport runs it);
 *   sr_dev_collective_event: ev completes with the last collective issued
 *     (call it after the transport request is attached to ev).
 * Host waits counted so far: sr_dev_host_waits (0 without the checker). */
void sr_dev_declare(sr_dev *d, sr_stream s, const void *p, size_t bytes, bool write, const char *site);
void sr_dev_collective(sr_dev *d, sr_stream on, const void *send, size_t sbytes, const void *recv, size_t rbytes,
                       const char *site);
void sr_dev_collective_event(sr_dev *d, sr_event *ev);
long long sr_dev_host_waits(const sr_dev *d);

/* For the tables: what each primitive tells the happens-before checker,
 * one owner for every table (device.c): its operation on stream s (after
 * the host's past) and the memory it reads and writes, the same for the
 * cpu, fake and cuda tables; no-ops without the checker.  Each is called
 * by the table's primitive of the same name before it runs or enqueues
 * the work.  alloc tracks a new allocation (SR_OK, or out of memory);
 * free forgets one; record/wait/host_wait/sync mirror the event calls
 * (host_wait and sync count a host wait). */
sr_status sr_dev_hb_alloc(sr_dev *d, const void *p, size_t bytes);
void sr_dev_hb_free(sr_dev *d, const void *p, size_t bytes);
void sr_dev_hb_memset(sr_dev *d, sr_stream s, const void *dst, size_t bytes);
void sr_dev_hb_copy(sr_dev *d, sr_stream s, const void *dst, const void *src, size_t bytes);
void sr_dev_hb_record(sr_dev *d, sr_stream s, sr_event *ev);
void sr_dev_hb_wait(sr_dev *d, sr_stream s, const sr_event *ev);
void sr_dev_hb_host_wait(sr_dev *d, const sr_event *ev);
void sr_dev_hb_sync(sr_dev *d, sr_stream s);
void sr_dev_hb_cast(sr_dev *d, sr_stream s, const void *dst, const float *src, size_t n);
void sr_dev_hb_fold(sr_dev *d, sr_stream s, const float *acc, const void *src, size_t n, bool add);
void sr_dev_hb_add(sr_dev *d, sr_stream s, const float *acc, const float *src, size_t n);
void sr_dev_hb_sum_squares(sr_dev *d, sr_stream s, const double *out, const float *x, size_t n);
void sr_dev_hb_loss_sum(sr_dev *d, sr_stream s, const double *acc, const float *losses, size_t n, bool add);
void sr_dev_hb_adamw(sr_dev *d, sr_stream s, const sr_adamw_launch *l);

/* Picks the CUDA ordinal for a task that sees `n_visible` GPUs, with
 * CUDA_VISIBLE_DEVICES = `visible` (NULL when unset): exactly one visible
 * -> 0 (Slurm's --gpus-per-task=1); at least local_size visible -> the
 * local rank; otherwise -1 with a message naming the variables in `err`.
 * `physical` (may be NULL) receives the entry of CUDA_VISIBLE_DEVICES for
 * the pick ("" when unset). */
int sr_device_pick(const char *visible, int n_visible, int local_rank, int local_size, char *physical,
                   size_t physical_len, char *err, size_t err_len);

/* Number of entries in a CUDA_VISIBLE_DEVICES value (0 for NULL or ""). */
int sr_device_count_visible(const char *visible);

/* Describes the device of this task in `buf`, e.g. "cpu (would pick GPU 1
 * from CUDA_VISIBLE_DEVICES=0,1; built without CUDA)".  Never fails: a CPU
 * run never fails device selection. */
void sr_device_describe(char *buf, size_t n, int local_rank, int local_size);

#endif
