/* train.c — the training run of one rank: setup and teardown, the banner,
 * one training step, and what follows a step.  See train.h.
 *
 * Every rank runs the same sequence of collectives: the engine's (gathers,
 * reductions), the control plane's (one sum per step carrying the loss, the
 * ranks that saw a preemption signal and rank 0's clock; agreements inside
 * checkpoint saves and loads), in the same order, so a decision any rank
 * makes from them is the same on every rank. */
#include "srconfig.h"

#include "train.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "ckpt.h"
#include "comm_nccl.h"
#include "ctl.h"
#include "data.h"
#include "device.h"
#include "export_hf.h"
#include "fsdp.h"
#include "fsio.h"
#include "isa.h"
#include "job.h"
#include "mem.h"
#include "memplan.h"
#include "metrics.h"
#include "model.h"
#include "modelfile.h"
#include "ops.h"
#include "optim.h"
#include "preempt.h"
#include "rlimits.h"
#include "sample.h"
#include "testhook.h"

extern char **environ;

/* Everything one run holds. */
typedef struct {
    const sr_config *cfg; /* = &resolved */
    sr_config resolved;   /* the job with sharding.mixed_precision's auto resolved for the device */
    bool param_auto;      /* param_dtype was auto */
    sr_world *w;
    sr_job job;
    sr_mesh mesh;
    sr_dev *dev;
    const sr_ops *ops; /* the op table computing on dev (sr_device_ops) */
    int threads, mb, accum, T;
    sr_data *train, *val;
    sr_model model;
    bool model_ok;
    sr_transport *tp;
    sr_ctl *ctl;
    sr_fsdp *fsdp;
    sr_nccl *nccl; /* the NCCL data plane of a GPU run that needs one, or NULL */
    sr_ckpt *ck;
    sr_metrics *metrics;
    int *in, *tg;
    sr_ckpt_progress start; /* where this run starts (a resume point or 0) */
    sr_memplan plan;
    char resumed[64];
    char weights[1400];                     /* where the weights came from, for the banner */
    bool init_loaded;                       /* model.init read into the shard */
    char init_path[PATH_MAX], init_sha[65]; /* what it was, for the manifests */
    double peak, flops_tok;
    char peak_how[256];
    bool sample_skipped; /* log.sample_every skipped once already (warned) */
    /* loop state */
    double first_loss, last_loss, last_val, t_start, last_save;
    uint64_t cursor;
    long long hb_steps, hb_step_waits; /* the happens-before checker's count of host waits in steps */
    int *oracle_in, *oracle_tg;        /* SHARDRUN_TEST_ORACLE: the first step's whole batch */
} run;

/* What one step produced, and what the ranks agreed on with it. */
typedef struct {
    double loss, norm, lr, seconds, comm_exposed_ms;
    bool stop;      /* some rank saw a preemption signal */
    int signalled;  /* how many ranks */
    bool clock_due; /* rank 0's checkpoint.every_minutes clock ran out */
} step_out;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double wall_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double mib(size_t b) { return (double)b / (1024.0 * 1024.0); }

/* ------------------------------------------------------------------------ */
/* setup and teardown */

static sr_status open_data(run *r) {
    const sr_config *cfg = r->cfg;
    sr_status st;
    if (cfg->data_train.count)
        st = sr_data_open(&r->train, &cfg->data_train, r->T, cfg->vocab_size);
    else
        st = sr_data_open_embedded(&r->train, SR_DATA_TRAIN, r->T, cfg->vocab_size);
    if (st != SR_OK)
        return st;
    if (cfg->data_val.count)
        st = sr_data_open(&r->val, &cfg->data_val, r->T, cfg->vocab_size);
    else if (!cfg->data_train.count)
        st = sr_data_open_embedded(&r->val, SR_DATA_VAL, r->T, cfg->vocab_size);
    return st;
}

/* The lowest ISA level any rank supports becomes every rank's (isa.h). */
static sr_status agree_isa(run *r) {
    int64_t level = (int64_t)sr_isa_detect();
    sr_status st = sr_ctl_min(r->ctl, &level);
    if (st != SR_OK)
        return st;
    sr_isa_set((sr_isa)level);
    r->job.ckpt.isa = sr_isa_name((sr_isa)level);
    return SR_OK;
}

/* The descriptor budget, once the groups say how many peers this rank has
 * (rlimits.h).  The ranks compare verdicts through PMIx (the transport is
 * not connected yet), so a refusal is 78 on every rank, not 78 on one and
 * a connect timeout on the others. */
static sr_status check_fds(run *r) {
    long long from, to;
    int peers = sr_transport_peer_count(r->tp);
    sr_status st = sr_rlimits_check_fds(peers, &from, &to);
    if (st == SR_OK && to)
        sr_log_info_all("raised the open-file limit (RLIMIT_NOFILE) from %lld to %lld", from, to);
    int32_t mine = st == SR_OK ? 0 : sr_rlimits_fds_needed(peers);
    /* limits differ between ranks, unlike job-file errors, which only
     * rank 0 prints: a rank over its own limit says so itself */
    if (st != SR_OK && r->w->rank != 0)
        sr_log_error("%s", sr_error_message());
    int bad_rank;
    int32_t bad_need;
    sr_status gst = sr_world_first_nonzero(r->w, "shardrun.fds", mine, &bad_rank, &bad_need, r->cfg->comm_timeout_s);
    if (gst == SR_OK && st == SR_OK && bad_rank >= 0)
        st = sr_error(SR_ERR_CONFIG,
                      "rank %d's open-file limit (RLIMIT_NOFILE) is below the %d descriptors it needs (see its "
                      "message)",
                      bad_rank, (int)bad_need);
    return st != SR_OK ? st : gst;
}

/* A GPU run moves its device collectives over NCCL when it has more than
 * one rank, when comm.backend says nccl, or under SHARDRUN_TEST_NCCL_SIZE1
 * (the one-GPU check of the NCCL calls). */
static bool needs_nccl(const run *r) {
    return r->dev->kind == SR_DEV_CUDA &&
           (r->w->size > 1 || r->cfg->comm_backend == SR_BACKEND_NCCL || sr_testhook()->nccl_size1);
}

/* Model, transport, control plane, engine; connected; the NCCL plane. */
static sr_status open_engine(run *r) {
    sr_model_dims dims = {
        (int)r->cfg->n_layer,  (int)r->cfg->n_head, (int)r->cfg->n_embd, (int)r->cfg->vocab_size, 0, r->T,
        (int)r->cfg->recompute};
    sr_status st = sr_model_init(&r->model, dims, r->ops, r->dev, r->mb, false);
    r->model_ok = true;
    if (st == SR_OK)
        st = sr_transport_open(&r->tp, r->w, &r->job.transport);
    if (st == SR_OK)
        st = sr_ctl_open(&r->ctl, r->tp, r->w->size);
    if (st == SR_OK)
        st = sr_fsdp_init(&r->fsdp, &r->model, &r->mesh, &r->job.fsdp, r->tp);
    if (st == SR_OK)
        st = check_fds(r);
    if (st == SR_OK) {
        sr_testhook_pause_point("before_connect", 0, r->w->rank);
        st = sr_transport_connect(r->tp);
    }
    if (st == SR_OK)
        st = agree_isa(r);
    if (st == SR_OK && needs_nccl(r)) {
        sr_group *groups[4];
        int n = sr_fsdp_groups(r->fsdp, groups, 4);
        sr_nccl_opts o = {r->cfg->comm_timeout_s, r->job.transport.interface, sr_testhook()->nccl_size1};
        st = sr_nccl_open(&r->nccl, r->w, r->dev, r->tp, groups, n, &o);
        if (st == SR_OK)
            sr_fsdp_set_nccl(r->fsdp, r->nccl);
    }
    return st;
}

/* One rank's view of model.init, for the ranks to compare. */
typedef struct {
    uint64_t size;
    unsigned char fp[32];
    int32_t opened;
    char host[60];
} init_view;

/* Whether every rank that opened model.init opened the same file (size
 * and fingerprint, one all-gather, every rank calls it: a rank that failed
 * to open contributes nothing to compare).  SR_ERR_CONFIG naming the ranks
 * and hosts whose file differs from the lowest opened rank's. */
static sr_status same_init_file(run *r, const sr_modelfile *mf) {
    init_view me = {0};
    sr_status st = mf->fd >= 0 ? sr_modelfile_fingerprint(mf, me.fp) : SR_OK;
    me.opened = mf->fd >= 0 && st == SR_OK;
    me.size = mf->size;
    snprintf(me.host, sizeof me.host, "%.59s", r->w->host);
    init_view *all = sr_calloc((size_t)r->w->size, sizeof *all);
    sr_status gs = all ? sr_ctl_allgather(r->ctl, all, &me, sizeof me) : sr_error_oom("the model.init comparison");
    if (gs != SR_OK) {
        free(all);
        return gs;
    }
    int ref = 0;
    while (ref < r->w->size && !all[ref].opened)
        ref++;
    char list[768] = "";
    size_t used = 0;
    int differ = 0;
    for (int k = ref + 1; k < r->w->size; k++)
        if (all[k].opened && (all[k].size != all[ref].size || memcmp(all[k].fp, all[ref].fp, 32) != 0)) {
            if (++differ <= 8 && used < sizeof list)
                used += (size_t)snprintf(list + used, sizeof list - used, "%srank %d on %.60s (%llu bytes)",
                                         differ > 1 ? ", " : "", k, all[k].host, (unsigned long long)all[k].size);
        }
    if (differ)
        st = sr_error(SR_ERR_CONFIG,
                      "model.init: %s is not the same file on every rank: %s%s differ%s from rank %d on %.60s (%llu "
                      "bytes; compared: size, header, first and last MiB) (hint: a stale node-local copy? give "
                      "every node the same file)",
                      r->cfg->model_init, list, differ > 8 ? " and more" : "", differ == 1 ? "s" : "", ref,
                      all[ref].host, (unsigned long long)all[ref].size);
    free(all);
    return st;
}

/* model.init on a fresh run (collective): every rank maps the file onto the
 * model and reads only its own slices of the parameter vector (through a
 * host piece and an upload where the shard lives in device memory); with
 * lm_head.weight in the file each rank checks its part of the tie; rank 0
 * hashes the whole file for the manifest; one agreement.  Before reading,
 * the ranks compare the file's size and fingerprint (same_init_file), so
 * ranks that see different files under one path never train a hybrid. */
static sr_status load_init(run *r) {
    const char *path = r->cfg->model_init;
    double t0 = now_s();
    sr_fsdp_shard_state s;
    sr_fsdp_shard_state_view(r->fsdp, &s);
    bool staged = s.dev && s.dev->separate_memory;
    enum { PIECE = 1 << 20 };
    float *piece = staged ? sr_malloc(PIECE * sizeof(float)) : NULL;
    sr_modelfile mf = {.fd = -1};
    bool tied = true, opened = false;
    uint64_t bytes = 0;
    char sha[65] = "";
    sr_status mine = staged && !piece ? sr_error_oom("the model.init read piece") : SR_OK;
    if (mine == SR_OK)
        mine = sr_modelfile_open(&mf, path, &r->model, "model.init");
    opened = mine == SR_OK;
    sr_status same = same_init_file(r, &mf); /* collective: every rank, opened or not */
    if (mine == SR_OK)
        mine = same;
    if (mine == SR_OK)
        sr_log_info("model.init: reading this rank's shard of %s (%.1f MB file)", path, (double)mf.size / 1e6);
    for (int i = 0; i < s.nslices && mine == SR_OK; i++)
        for (size_t b = s.slices[i].begin; b < s.slices[i].end && mine == SR_OK; b += PIECE) {
            size_t e = b + PIECE < s.slices[i].end ? b + PIECE : s.slices[i].end;
            float *dst = s.params + s.slices[i].local + (b - s.slices[i].begin);
            mine = sr_modelfile_read(&mf, b, e, staged ? piece : dst);
            if (mine == SR_OK && staged)
                mine = sr_dev_upload(s.dev, dst, piece, (e - b) * sizeof(float), "upload");
            bool eq = true;
            if (mine == SR_OK)
                mine = sr_modelfile_head_tied(&mf, b, e, &eq);
            tied = tied && eq;
            bytes += (e - b) * sizeof(float);
        }
    if (mine == SR_OK && !tied)
        mine = sr_error(SR_ERR_DATA,
                        "model.init: %s: lm_head.weight differs from the token embedding (transformer.wte.weight); "
                        "this model ties its output head to the embedding (hint: a GPT-2 with an untied head cannot "
                        "be loaded)",
                        path);
    if (mine == SR_OK && r->w->rank == 0)
        mine = sr_modelfile_sha256(&mf, sha);
    sr_ctl_word *all = NULL;
    sr_status st = sr_ctl_agree(r->ctl, mine, 0, bytes, mine == SR_OK ? NULL : sr_error_message(), &all);
    int64_t words[8] = {0};
    if (st == SR_OK) {
        memcpy(words, sha, 64);
        st = sr_ctl_broadcast(r->ctl, words, 8, 0);
    }
    if (st == SR_OK) {
        memcpy(sha, words, 64);
        sha[64] = '\0';
        uint64_t total = 0;
        for (int k = 0; k < r->w->size; k++)
            total += all[k].value;
        char abs[PATH_MAX];
        const char *where = realpath(path, abs) ? abs : path;
        sr_fmt(r->init_path, sizeof r->init_path, "%s", where);
        sr_fmt(r->init_sha, sizeof r->init_sha, "%s", sha);
        r->init_loaded = true;
        sr_log_info("model.init: loaded %s (%s); %.1f MB read by %d rank%s in %.2f s; sha256 %s", where, mf.what,
                    (double)total / 1e6, r->w->size, r->w->size == 1 ? "" : "s", now_s() - t0, sha);
        st = sr_fsdp_state_loaded(r->fsdp);
    }
    free(all);
    free(piece);
    if (opened)
        sr_modelfile_close(&mf);
    return st;
}

/* Whether this run will certainly start fresh (rank 0 looks): checkpoint.resume
 * never, or auto with no step_* in checkpoint.dir (or no dir). */
static bool fresh_for_sure(const sr_config *cfg) {
    const char *mode = cfg->ckpt_resume && cfg->ckpt_resume[0] ? cfg->ckpt_resume : "auto";
    if (strcmp(mode, "never") == 0)
        return true;
    if (strcmp(mode, "auto") != 0)
        return false;
    if (!cfg->ckpt_dir || !cfg->ckpt_dir[0])
        return true;
    DIR *d = opendir(cfg->ckpt_dir);
    if (!d)
        return errno == ENOENT;
    bool any = false;
    for (struct dirent *e; !any && (e = readdir(d));)
        any = strncmp(e->d_name, "step_", 5) == 0;
    closedir(d);
    return !any;
}

/* model.init on a run that will start fresh is read before anything is
 * written — the metrics file, the checkpoint directory — so a bad file
 * changes nothing on disk (a run that turns out fresh only after the
 * resume scan reads it then). */
static sr_status precheck_init(run *r) {
    const sr_config *cfg = r->cfg;
    if (!cfg->model_init || !cfg->model_init[0])
        return SR_OK;
    int64_t fresh = r->w->rank == 0 && fresh_for_sure(cfg);
    sr_status st = sr_ctl_broadcast(r->ctl, &fresh, 1, 0);
    return st != SR_OK || !fresh ? st : load_init(r);
}

/* Metrics file, signal handlers, checkpoint directory, resume. */
static sr_status open_run_state(run *r) {
    const sr_config *cfg = r->cfg;
    sr_status st = precheck_init(r);
    if (st != SR_OK)
        return st;
    if (r->w->rank == 0) {
        /* a resumed run appends (checkpoint.resume is decided below; the
         * file is truncated only when no checkpoint could apply) */
        bool may_resume = cfg->ckpt_resume && strcmp(cfg->ckpt_resume, "never") != 0 &&
                          (strcmp(cfg->ckpt_resume, "auto") != 0 || (cfg->ckpt_dir && cfg->ckpt_dir[0]));
        st = sr_metrics_open(&r->metrics, cfg->log_metrics, may_resume);
        if (st != SR_OK)
            return st;
        if (r->dev->emulated)
            sr_metrics_label_device(r->metrics, r->dev->name); /* and every record */
    }
    /* preemption handlers first, so a signal during the resume is kept */
    if (cfg->ckpt_dir && cfg->ckpt_dir[0])
        st = sr_preempt_install(cfg->preempt_signals.items, cfg->preempt_signals.count);
    if (st == SR_OK)
        st = sr_ckpt_open(&r->ck, &r->job.ckpt, r->w, r->ctl, &r->model, r->fsdp);
    snprintf(r->resumed, sizeof r->resumed, "fresh");
    if (st == SR_OK)
        st = sr_ckpt_resume(r->ck, &r->start, r->resumed, sizeof r->resumed);
    bool init = cfg->model_init && cfg->model_init[0];
    if (st == SR_OK && r->start.step > 0)
        snprintf(r->weights, sizeof r->weights, "checkpoint step %lld", (long long)r->start.step);
    else
        snprintf(r->weights, sizeof r->weights, "seed %lld", (long long)cfg->seed);
    if (st == SR_OK && init && r->start.step > 0)
        sr_log_info("model.init: ignored (%s): the run resumes from the checkpoint of step %lld", cfg->model_init,
                    (long long)r->start.step);
    else if (st == SR_OK && init && !r->init_loaded)
        st = load_init(r);
    if (st == SR_OK && r->init_loaded) {
        sr_ckpt_set_init(r->ck, r->init_path, r->init_sha);
        sr_fmt(r->weights, sizeof r->weights, "model.init %s", r->init_path);
    }
    /* a fresh start (no checkpoint applied) begins a new metrics file */
    if (st == SR_OK && r->start.step == 0 && r->metrics)
        st = sr_metrics_restart(r->metrics);
    return st;
}

/* The activation prediction of model.recompute (model.h sr_act_split). */
static void log_recompute(const run *r) {
    sr_model_dims d = r->model.d;
    sr_act_split sp = sr_model_activation_split(&d, r->ops, r->mb);
    d.recompute = SR_RECOMPUTE_NONE;
    size_t none = sr_model_activation_bytes(&d, r->ops, r->mb);
    char a[32], b[32], c[32], t[32], n[32];
    if (r->model.d.recompute == SR_RECOMPUTE_BLOCKS)
        sr_log_info("recompute blocks: activations %s predicted = block inputs %s (L %d x B %d x T %d x C %d x %zu B) "
                    "+ one block %s + root %s; none would need %s",
                    sr_memplan_size(sp.inputs + sp.block + sp.root, t, sizeof t),
                    sr_memplan_size(sp.inputs, a, sizeof a), d.L, r->mb, d.T, d.C, sr_dtype_size(r->ops->act),
                    sr_memplan_size(sp.block, b, sizeof b), sr_memplan_size(sp.root, c, sizeof c),
                    sr_memplan_size(none, n, sizeof n));
    else
        sr_log_info("recompute none: activations %s (model.recompute: blocks would need %s)",
                    sr_memplan_size(none, n, sizeof n), sr_memplan_size(sp.inputs + sp.block + sp.root, t, sizeof t));
}

/* The planned peak against the process's limits, before anything sized by
 * the model is allocated (memplan.h). */
static sr_status check_memory(run *r) {
    sr_status st = sr_memplan_job(&r->plan, NULL, r->cfg, &r->job, &r->mesh, r->mb, r->threads, r->ops,
                                  r->dev->separate_memory, r->w->local_size, needs_nccl(r));
    /* on a GPU the plan is device memory; the host keeps only staging */
    if (st == SR_OK && r->dev->kind != SR_DEV_CUDA)
        st = sr_memplan_check(&r->plan, r->w->local_size);
    if (st == SR_OK && r->dev->separate_memory)
        st = sr_memplan_check_device(&r->plan, r->dev->device_free_bytes);
    return st;
}

/* The device table: the job file's `device`, the same kind on every rank
 * (compared through PMIx: the transport is not connected yet), and a
 * warning on every rank that was given GPUs it cannot use. */
static sr_status open_device(run *r) {
    char why[256];
    if (sr_device_gpus_unusable(why, sizeof why))
        sr_log_warn("this task was given GPUs (CUDA_VISIBLE_DEVICES=%s) but none is usable (%s); training on the CPU",
                    getenv("CUDA_VISIBLE_DEVICES"), why);
    sr_status st = sr_job_check_device(r->cfg);
    if (st == SR_OK)
        st = sr_device_open(&r->dev, (sr_device_want)r->cfg->device, r->w->size, r->w->local_rank, r->w->local_size);
    if (st == SR_OK && r->dev->emulated)
        sr_log_set_tag(r->dev->name); /* every line of an emulated run says so */
    if (st == SR_OK) {
        r->param_auto = sr_job_resolve_precision(&r->resolved, r->dev->kind == SR_DEV_CUDA);
        r->ops = sr_device_ops(r->dev, (sr_dtype)r->cfg->param_dtype);
        r->dev->timeout_s = r->cfg->comm_timeout_s;
    }
    int32_t mine = r->dev ? (int32_t)r->dev->kind : -1, *all = sr_calloc((size_t)r->w->size, sizeof(int32_t));
    if (!all)
        return st != SR_OK ? st : sr_error_oom("the device list");
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", st != SR_OK ? sr_error_message() : "");
    sr_status gst = sr_world_allgather(r->w, "shardrun.device", &mine, sizeof mine, all, r->cfg->comm_timeout_s);
    bool mixed = false;
    for (int k = 1; st == SR_OK && gst == SR_OK && k < r->w->size; k++)
        mixed = mixed || all[k] != all[0];
    if (mixed) {
        /* "ranks 0 2 use cpu; ranks 1 3 use fake" (the first 16 of each) */
        static const char *const names[] = {"cpu", "fake", "cuda"};
        char line[1024];
        size_t used = 0;
        for (int kind = SR_DEV_CPU; kind <= SR_DEV_CUDA; kind++) {
            int shown = 0, count = 0;
            for (int k = 0; k < r->w->size; k++)
                count += all[k] == kind;
            if (!count || used >= sizeof line)
                continue;
            used +=
                (size_t)snprintf(line + used, sizeof line - used, "%srank%s", used ? "; " : "", count > 1 ? "s" : "");
            for (int k = 0; k < r->w->size && shown < 16 && used < sizeof line; k++)
                if (all[k] == kind) {
                    used += (size_t)snprintf(line + used, sizeof line - used, " %d", k);
                    shown++;
                }
            if (used < sizeof line)
                used += (size_t)snprintf(line + used, sizeof line - used, "%s use%s %s",
                                         count > shown ? " and more" : "", count > 1 ? "" : "s", names[kind]);
        }
        st = sr_error(SR_ERR_CONFIG,
                      "the ranks do not agree on the device: %s (hint: the same device key, build and "
                      "SHARDRUN_TEST_DEVICE on every rank)",
                      line);
    }
    free(all);
    if (st != SR_OK && msg[0])
        sr_error(st, "%s", msg);
    return st != SR_OK ? st : gst;
}

static sr_status setup(run *r) {
    const sr_config *cfg = r->cfg;
    r->threads = sr_ops_set_threads((int)cfg->threads);
    r->mb = (int)sr_config_micro_batch(cfg, r->w->size);
    r->accum = (int)sr_config_accum_steps(cfg, r->w->size);
    r->T = (int)cfg->seq_len;
    sr_status st = sr_job_check_world(cfg, r->w->size, r->w->rank, &r->mesh);
    if (st == SR_OK)
        st = open_device(r);
    if (st == SR_OK)
        st = r->dev->kind == SR_DEV_CUDA ? sr_job_check_gpu_run(cfg, r->w->size) : sr_job_check_cpu_run(cfg);
    if (st == SR_OK)
        st = sr_job_check_offload(cfg, r->dev->separate_memory);
    if (st == SR_OK)
        st = sr_job_init(&r->job, cfg);
    if (st == SR_OK)
        st = check_memory(r);
    if (st == SR_OK)
        st = open_data(r);
    if (st == SR_OK)
        st = open_engine(r);
    if (st != SR_OK)
        return st;
    /* every micro-batch of a step its own slot; on the cuda table in its
     * pinned memory: the forward's copies read them asynchronously until
     * the step's one host wait (sr_model_forward) */
    size_t tokens = (size_t)r->accum * (size_t)r->mb * (size_t)r->T * sizeof(int);
    bool pinned = r->dev->kind == SR_DEV_CUDA;
    r->in = pinned ? r->dev->alloc(r->dev, SR_SPACE_PINNED, SR_MEM_OTHER, tokens) : sr_malloc(tokens);
    r->tg = pinned ? r->dev->alloc(r->dev, SR_SPACE_PINNED, SR_MEM_OTHER, tokens) : sr_malloc(tokens);
    if (!r->in || !r->tg)
        return sr_error_oom("the token buffers");
    return open_run_state(r);
}

static sr_status teardown(run *r, sr_status st) {
    /* A failed run prints its error first: freeing a broken device's
     * memory can block.  The preemption handlers stay until the process
     * exits: a late SIGTERM (Slurm's, after GraceTime) must not turn a
     * committed preemption into a death by signal. */
    if (st != SR_PREEMPTED)
        sr_error_emit(st);
    sr_ckpt_close(r->ck);
    sr_status mst = sr_metrics_close(r->metrics);
    if (st == SR_OK)
        st = mst;
    if (r->dev && r->dev->kind == SR_DEV_CUDA) {
        r->dev->free(r->dev, r->in);
        r->dev->free(r->dev, r->tg);
    } else {
        free(r->in);
        free(r->tg);
    }
    free(r->oracle_in);
    free(r->oracle_tg);
    sr_nccl_close(r->nccl);
    sr_fsdp_free(r->fsdp);
    sr_ctl_close(r->ctl);
    sr_transport_close(r->tp);
    if (r->model_ok)
        sr_model_free(&r->model);
    sr_data_close(r->train);
    sr_data_close(r->val);
    sr_job_free(&r->job);
    sr_device_close(r->dev);
    return st;
}

/* ------------------------------------------------------------------------ */
/* the banner */

static const char *reshard_name(int64_t v) { return v == SR_RESHARD_TRUE ? "true" : v == 0 ? "false" : "N"; }

/* "groups: shard [0 1] [2 3]; replicate [0 2] [1 3]" (world ranks; the
 * first 16 groups of each kind, the rest counted). */
static void log_groups(run *r) {
    const sr_mesh *m = &r->mesh;
    char line[2048];
    size_t used = 0;
#define ADD(...)                                                                                                       \
    do {                                                                                                               \
        if (used < sizeof line)                                                                                        \
            used += (size_t)snprintf(line + used, sizeof line - used, __VA_ARGS__);                                    \
    } while (0)
    ADD("groups: shard");
    for (int rep = 0; rep < m->R && rep < 16; rep++) {
        ADD(" [");
        for (int k = 0; k < m->S; k++)
            ADD(k ? " %d" : "%d", sr_mesh_world_rank(m, rep, k));
        ADD("]");
    }
    if (m->R > 16)
        ADD(" and %d more", m->R - 16);
    ADD("; replicate");
    for (int k = 0; k < m->S && k < 16; k++) {
        ADD(" [");
        for (int rep = 0; rep < m->R; rep++)
            ADD(rep ? " %d" : "%d", sr_mesh_world_rank(m, rep, k));
        ADD("]");
    }
    if (m->S > 16)
        ADD(" and %d more", m->S - 16);
#undef ADD
    sr_log_info("%s", line);
}

static void banner(run *r) {
    const sr_config *cfg = r->cfg;
    const sr_world *w = r->w;
    char device[512];
    sr_device_describe(device, sizeof device, w->local_rank, w->local_size);
    if (r->dev->line[0])
        snprintf(device, sizeof device, "%s", r->dev->line);
    else if (r->dev->kind == SR_DEV_FAKE) {
        /* "fake (test hook ...; <what the cpu line says>)" */
        char cpu[512];
        snprintf(cpu, sizeof cpu, "%s", device);
        const char *paren = strchr(cpu, '(');
        snprintf(device, sizeof device, "fake (test hook SHARDRUN_TEST_DEVICE: device memory in its own space; %s",
                 paren ? paren + 1 : "cpu)");
    }
    const char *restart = getenv("SLURM_RESTART_COUNT");
    char transport[128];
    snprintf(transport, sizeof transport, "%s%s%s", w->size > 1 ? sr_transport_address(r->tp) : "none",
             r->nccl ? " nccl=" : "", r->nccl ? sr_nccl_version() : "");
    sr_log_info_all("rank %d/%d local %d/%d node %d host %s device=%s isa=%s job %s transport %s restart=%s resume=%s",
                    w->rank, w->size, w->local_rank, w->local_size, w->node_id, w->host, device,
                    sr_isa_name(sr_isa_current()), w->job_id, transport, restart && *restart ? restart : "0",
                    r->resumed);
    const sr_model_dims *d = &r->model.d;
    char model_name[256];
    sr_log_info("model %s: n_layer %d, n_head %d, n_embd %d, vocab_size %d (padded %d), seq_len %d; %.2fM parameters; "
                "weights from %s",
                sr_config_model_name(cfg, model_name, sizeof model_name), d->L, d->NH, d->C, d->V, d->Vp, d->T,
                (double)r->model.n_params_real / 1e6, r->weights);
    sr_log_info("batch %lld sequence%s/step = %d rank%s x micro_batch %d x %d accumulation step%s; %lld step%s; "
                "threads %d per rank (one OpenMP pool, OpenBLAS single-threaded)",
                (long long)cfg->batch_size, cfg->batch_size == 1 ? "" : "s", w->size, w->size == 1 ? "" : "s", r->mb,
                r->accum, r->accum == 1 ? "" : "s", (long long)cfg->steps, cfg->steps == 1 ? "" : "s", r->threads);
    char comm[96];
    if (r->nccl)
        snprintf(comm, sizeof comm, "nccl %s (control plane tcp)", sr_nccl_version());
    else
        snprintf(comm, sizeof comm, "%s", w->size > 1 ? "tcp" : "none (1 rank)");
    sr_log_info(
        "sharding: mesh shard %d x replicate %d, %d units (%lld block%s each + root), reshard_after_forward "
        "blocks %s root %s, param %s%s, reduce %s, prefetch %lld/%lld, grad_sync %s, comm %s",
        r->mesh.S, r->mesh.R, sr_fsdp_units(r->fsdp), (long long)cfg->blocks_per_unit,
        cfg->blocks_per_unit == 1 ? "" : "s", reshard_name(cfg->reshard_blocks), reshard_name(cfg->reshard_root),
        sr_config_enum_name("sharding.mixed_precision.param_dtype", cfg->param_dtype), r->param_auto ? " (auto)" : "",
        sr_config_enum_name("sharding.mixed_precision.reduce_dtype", cfg->reduce_dtype),
        (long long)cfg->prefetch_forward, (long long)cfg->prefetch_backward,
        sr_config_enum_name("sharding.grad_sync", cfg->grad_sync), comm);
    if (w->size > 1)
        log_groups(r);
    sr_log_info("data %s", sr_data_describe(r->train));
    if (r->val)
        sr_log_info("val  %s", sr_data_describe(r->val));
    else if (cfg->eval_every > 0)
        sr_log_warn("train.eval_every is %lld but data.val is empty: no evaluation (set data.val to validation shards)",
                    (long long)cfg->eval_every);
    sr_log_info("mfu peak: %s", r->peak_how);
    log_recompute(r);
    if (cfg->offload_optimizer) {
        sr_log_info("offload: fp32 master weights, Adam m and v and the gradient shard in %s host memory; AdamW on the "
                    "host (%d threads)%s; the device keeps %s",
                    cfg->pin_memory ? "pinned" : "pageable", r->threads,
                    cfg->grad_sync == SR_GRADSYNC_PER_STEP
                        ? ", each unit's reduced gradients copied to the host as its "
                          "reduction ends"
                        : "; per_micro_batch: the device sums the gradient shard "
                          "and copies it once per step",
                    cfg->offload_params ? "no parameter shard (each gather uploads its part just in time)"
                                        : "a copy of the parameter shard for the gathers");
        if (!cfg->pin_memory)
            sr_log_warn(
                "sharding.offload.pin_memory is false: the offloaded state is pageable memory, so every copy to "
                "and from the device is synchronous and slower (hint: pin_memory: true unless pinned memory is "
                "scarce)");
    }
    char t[32], o[32];
    sr_log_info("memory plan per rank: %s in accounted categories + %s for code, libraries and threads",
                sr_memplan_size(r->plan.total, t, sizeof t), sr_memplan_size(r->plan.overhead, o, sizeof o));
    if (sr_ckpt_enabled(r->ck))
        sr_log_info("checkpoint: dir %s, every %lld steps / %g minutes, keep %lld%s, %s; preemption signals handled, "
                    "requeue %s",
                    cfg->ckpt_dir, (long long)cfg->ckpt_every_steps, cfg->ckpt_every_minutes, (long long)cfg->ckpt_keep,
                    cfg->ckpt_keep_every ? " (+ keep_every)" : "",
                    sr_ckpt_async(r->ck) ? "periodic saves asynchronous" : "saves synchronous",
                    sr_config_enum_name("preemption.requeue", cfg->preempt_requeue));
    else
        sr_log_info("checkpoint: none (checkpoint.dir is empty); preemption signals keep their default action");
    sr_metrics_log_memory("at start");
}

/* ------------------------------------------------------------------------ */
/* one step */

/* The micro-batches of step s, the reductions, and one control-plane sum
 * of (loss, ranks that saw a signal, rank 0's clock); then AdamW. */
/* ---- SHARDRUN_TEST_ORACLE: the first step laid out for an independent
 * reference (tests/gpu/oracle.py, PyTorch): into DIR, init.safetensors (the
 * weights the step starts from, as `ckpt export` writes them), batch.bin (int32
 * inputs then targets, batch_size x seq_len each), logits.bin (float32: the
 * logits over the real vocabulary of the first sequence's last position,
 * after the forward), grads.params (sr_fsdp_dump_grads) and step.json (the
 * shapes, loss, gradient norm, learning rate, AdamW constants, clipping and
 * which tensors decay).  One rank without offload. */

static bool oracle_on(const run *r, int64_t s) { return sr_testhook()->oracle_dir[0] && s == r->start.step; }

static void oracle_path(char *buf, size_t n, const char *name) {
    sr_fmt(buf, n, "%s/%s", sr_testhook()->oracle_dir, name);
}

typedef struct {
    const void *p;
    size_t bytes;
} blob;

static sr_status write_blobs(int fd, const char *tmp, void *arg) {
    for (const blob *b = arg; b->p; b++)
        if (sr_fsio_write_all(fd, b->p, b->bytes) != 0)
            return sr_fsio_write_error(tmp, errno);
    return SR_OK;
}

static sr_status write_text(int fd, const char *tmp, void *arg) {
    return sr_fsio_write_all(fd, arg, strlen(arg)) == 0 ? SR_OK : sr_fsio_write_error(tmp, errno);
}

/* Before the step: the weights it starts from. */
static sr_status oracle_init(run *r) {
    if (r->w->size != 1 || r->cfg->offload_optimizer)
        return sr_error(SR_ERR_CONFIG, "SHARDRUN_TEST_ORACLE needs one rank and sharding.offload.optimizer: false");
    float *full = sr_malloc(r->model.n_params * sizeof(float));
    if (!full)
        return sr_error_oom("the oracle's initial weights");
    char path[PATH_MAX];
    oracle_path(path, sizeof path, "init.safetensors");
    sr_status st = sr_fsdp_gather_params(r->fsdp, full);
    if (st == SR_OK)
        st = sr_export_safetensors(&r->model, full, path);
    free(full);
    return st;
}

/* After micro-batch a's forward: its tokens, and for a = 0 the logits row. */
static sr_status oracle_forward(run *r, int a) {
    const sr_config *cfg = r->cfg;
    size_t n = (size_t)r->mb * (size_t)r->T, es = r->ops->act == SR_DT_BF16 ? 2 : 4;
    if (!r->oracle_in) {
        r->oracle_in = sr_malloc((size_t)cfg->batch_size * (size_t)r->T * sizeof(int));
        r->oracle_tg = sr_malloc((size_t)cfg->batch_size * (size_t)r->T * sizeof(int));
        if (!r->oracle_in || !r->oracle_tg)
            return sr_error_oom("the oracle's batch");
    }
    memcpy(r->oracle_in + (size_t)a * n, r->in + (size_t)a * n, n * sizeof(int));
    memcpy(r->oracle_tg + (size_t)a * n, r->tg + (size_t)a * n, n * sizeof(int));
    if (a != 0)
        return SR_OK;
    const sr_model_dims *d = &r->model.d;
    void *row = sr_malloc((size_t)d->V * es);
    float *f = sr_malloc((size_t)d->V * sizeof(float));
    sr_status st = row && f ? SR_OK : sr_error_oom("the oracle's logits row");
    /* the download waits for the forward on the compute stream (the
     * backward turns the logits into their gradient in place later) */
    sr_event ev = {0};
    if (st == SR_OK) {
        r->dev->record(r->dev, &ev, SR_STREAM_COMPUTE);
        st = r->dev->wait(r->dev, SR_STREAM_D2H, &ev);
    }
    if (st == SR_OK)
        st = sr_dev_download(r->dev, row, (const char *)r->model.logits + (size_t)(r->T - 1) * d->Vp * es,
                             (size_t)d->V * es, "download");
    for (int v = 0; st == SR_OK && v < d->V; v++)
        f[v] = es == 2 ? sr_bf16_to_f32(((const uint16_t *)row)[v]) : ((const float *)row)[v];
    char path[PATH_MAX];
    oracle_path(path, sizeof path, "logits.bin");
    blob b[] = {{f, (size_t)d->V * sizeof(float)}, {NULL, 0}};
    if (st == SR_OK)
        st = sr_fsio_atomic_write(path, write_blobs, b);
    free(row);
    free(f);
    return st;
}

/* After the step's gradients are final and its constants known. */
static sr_status oracle_step(run *r, const step_out *o) {
    const sr_config *cfg = r->cfg;
    const sr_model_dims *d = &r->model.d;
    char path[PATH_MAX];
    oracle_path(path, sizeof path, "grads.params");
    sr_status st = sr_fsdp_dump_grads(r->fsdp, path);
    size_t n = (size_t)cfg->batch_size * (size_t)r->T * sizeof(int);
    blob b[] = {{r->oracle_in, n}, {r->oracle_tg, n}, {NULL, 0}};
    oracle_path(path, sizeof path, "batch.bin");
    if (st == SR_OK)
        st = sr_fsio_atomic_write(path, write_blobs, b);
    json_t *decay = json_array();
    for (int i = 0; i < r->model.n_tensors; i++)
        if (r->model.tensors[i].decay)
            json_array_append_new(decay, json_string(r->model.tensors[i].name));
    json_t *j = json_pack("{s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:s, s:s, s:o}",
                          "L", d->L, "NH", d->NH, "C", d->C, "V", d->V, "Vp", d->Vp, "T", r->T, "B",
                          (int)cfg->batch_size, "loss", o->loss, "grad_norm", o->norm, "lr", o->lr, "beta1", cfg->beta1,
                          "beta2", cfg->beta2, "eps", cfg->eps, "weight_decay", cfg->weight_decay, "grad_clip",
                          cfg->grad_clip, "act", r->ops->act == SR_DT_BF16 ? "bf16" : "f32", "param_dtype",
                          cfg->param_dtype == SR_DT_BF16 ? "bf16" : "fp32", "decay", decay);
    char *text = j ? json_dumps(j, JSON_INDENT(1)) : NULL;
    oracle_path(path, sizeof path, "step.json");
    if (st == SR_OK)
        st = text ? sr_fsio_atomic_write(path, write_text, text) : sr_error_oom("the oracle's step.json");
    free(text);
    json_decref(j);
    return st;
}

static sr_status train_step(run *r, int64_t s, step_out *o) {
    const sr_config *cfg = r->cfg;
    const sr_world *w = r->w;
    double t0 = now_s();
    long long waits0 = sr_dev_host_waits(r->dev);
    uint64_t comm0 = r->dev->comm_wait_ns;
    sr_preempt_test_hook(s + 1, w->rank);
    r->dev->step = s + 1; /* for a GPU deadline's message */
    if (oracle_on(r, s)) {
        sr_status ost = oracle_init(r);
        if (ost != SR_OK)
            return ost;
    }
    sr_fsdp_begin_step(r->fsdp);
    const double dloss = 1.0 / ((double)cfg->batch_size * r->T);
    const int64_t rank_seqs = (int64_t)r->mb * r->accum; /* this rank's slice of every global batch */
    double loss_sum = 0.0;
    sr_status st = SR_OK;
    for (int a = 0; a < r->accum && st == SR_OK; a++) {
        char ctx[96];
        snprintf(ctx, sizeof ctx, "during step %lld (micro-batch %d/%d)", (long long)(s + 1), a + 1, r->accum);
        sr_preempt_notice(w->rank, ctx);
        /* global cursor: the step owns sequences [cursor, cursor+batch)
         * (cursor = s*batch in a run that never changed batch_size);
         * rank r takes the fixed slice r*mb*accum .. of it */
        uint64_t first = r->cursor + (uint64_t)(w->rank * rank_seqs) + (uint64_t)a * (uint64_t)r->mb;
        int *in = r->in + (size_t)a * r->mb * r->T, *tg = r->tg + (size_t)a * r->mb * r->T;
        sr_data_batch(r->train, first, r->mb, true, (uint64_t)cfg->seed, in, tg);
        st = sr_fsdp_forward(r->fsdp, in, tg, r->mb);
        if (st == SR_OK && oracle_on(r, s))
            st = oracle_forward(r, a);
        if (st == SR_OK)
            st = sr_fsdp_backward(r->fsdp, (float)dloss, a == r->accum - 1);
    }
    o->norm = 0.0;
    if (st == SR_OK)
        st = sr_fsdp_finish_grads(r->fsdp, &loss_sum, &o->norm); /* the step's one host wait */
    double clock_due =
        w->rank == 0 && cfg->ckpt_every_minutes > 0 && now_s() - r->last_save >= cfg->ckpt_every_minutes * 60.0;
    double red[3] = {loss_sum, sr_preempt_pending() ? 1.0 : 0.0, clock_due ? 1.0 : 0.0};
    if (st == SR_OK)
        st = sr_ctl_sum(r->ctl, red, 3);
    if (st != SR_OK)
        return st;
    o->loss = red[0] / ((double)cfg->batch_size * r->T); /* the mean per-token loss */
    o->stop = red[1] > 0;
    o->signalled = (int)red[1];
    o->clock_due = red[2] > 0;
    if (s + 1 == sr_testhook()->nan_step)
        o->loss = NAN;
    if (!isfinite(o->loss) || !isfinite(o->norm))
        return sr_error(SR_ERR_TRAIN,
                        "step %lld: non-finite %s (loss %g, gradient norm %g); training stopped (hint: lower train.lr, "
                        "raise train.warmup_steps, or set train.grad_clip)",
                        (long long)(s + 1), isfinite(o->loss) ? "gradient norm" : "loss", o->loss, o->norm);
    float scale = cfg->grad_clip > 0 && o->norm > cfg->grad_clip ? (float)(cfg->grad_clip / o->norm) : 1.0f;
    o->lr = sr_lr_at(&r->job.schedule, s);
    if (oracle_on(r, s) && (st = oracle_step(r, o)) != SR_OK)
        return st;
    sr_fsdp_optimizer_step(r->fsdp, s + 1, o->lr, &r->job.adamw, scale);
    if (r->dev->hb) {
        /* the engine's rule: the host waits for the device once per step */
        long long waits = sr_dev_host_waits(r->dev) - waits0;
        r->hb_steps++;
        r->hb_step_waits += waits;
        if (waits != 1)
            return sr_error(SR_ERR_INTERNAL,
                            "happens-before checker: step %lld made %lld host waits for the device; the engine makes "
                            "one per step (SHARDRUN_TEST_HB)",
                            (long long)(s + 1), waits);
    }
    r->cursor += (uint64_t)cfg->batch_size;
    o->seconds = now_s() - t0;
    o->comm_exposed_ms = (double)(r->dev->comm_wait_ns - comm0) / 1e6;
    if (s == r->start.step) {
        r->first_loss = o->loss;
        if (r->dev->used_bytes) {
            /* the device's own view against the accounting, after the
             * first step (CUDA loads modules lazily, cuBLASLt sizes
             * itself on first use) */
            size_t used = r->dev->used_bytes(r->dev);
            size_t grown = used > r->dev->used_at_open ? used - r->dev->used_at_open : 0;
            sr_log_info_all("device memory after the first step: %.1f MiB in use (cudaMemGetInfo) above the %.1f MiB "
                            "at start; accounted %.1f MiB (peak %.1f) + NCCL %.1f MiB",
                            mib(grown), mib(r->dev->used_at_open), mib(sr_mem_space_current(SR_SPACE_DEVICE)),
                            mib(sr_mem_space_peak(SR_SPACE_DEVICE)), mib(sr_nccl_device_bytes(r->nccl)));
        }
    }
    r->last_loss = o->loss;
    return SR_OK;
}

/* ------------------------------------------------------------------------ */
/* after a step */

/* Validation loss: eval_batches global batches of the validation set in
 * file order; each rank evaluates its slice, the sums meet in the control
 * plane.  Before every micro-batch the ranks agree whether a preemption
 * signal has arrived anywhere (every rank runs the same number of
 * micro-batches); if so the evaluation stops on all ranks and
 * *interrupted is set. */
static sr_status evaluate(run *r, double *out, bool *interrupted) {
    const sr_config *cfg = r->cfg;
    *interrupted = false;
    int64_t total = cfg->eval_batches * cfg->batch_size, per_rank = total / r->w->size;
    double sum = 0.0;
    sr_status st = SR_OK;
    for (int64_t done = 0; done < per_rank && st == SR_OK; done += r->mb) {
        double flag = sr_preempt_pending() ? 1.0 : 0.0;
        st = sr_ctl_sum(r->ctl, &flag, 1);
        if (st != SR_OK)
            break;
        if (flag > 0) {
            *interrupted = true;
            break;
        }
        int n = (int)(per_rank - done < r->mb ? per_rank - done : r->mb);
        sr_data_batch(r->val, (uint64_t)(r->w->rank * per_rank + done), n, false, 0, r->in, r->tg);
        st = sr_fsdp_eval(r->fsdp, r->in, r->tg, n);
    }
    if (st == SR_OK)
        st = sr_fsdp_take_loss_sum(r->fsdp, &sum);
    if (st == SR_OK && !*interrupted)
        st = sr_ctl_sum(r->ctl, &sum, 1);
    *out = sum / ((double)total * r->T);
    return st;
}

/* The metrics file's checkpoint events: one per save committed since the
 * last call (rank 0 only writes; the others have no file). */
static void checkpoint_events(run *r) {
    sr_ckpt_commit c;
    while (sr_ckpt_take_commit(r->ck, &c))
        if (r->metrics)
            sr_metrics_event(r->metrics, "checkpoint", c.committed_step,
                             json_pack("{sI sI sf sI sb}", "started_step", (json_int_t)c.started_step, "committed_step",
                                       (json_int_t)c.committed_step, "duration_s", c.duration_s, "bytes",
                                       (json_int_t)c.bytes, "async", c.async));
}

/* The start event (and the resume event of a run that loaded a
 * checkpoint): what `shardrun report` splits the file's runs by. */
/* reshard_after_forward as the job file says it: true, false or N. */
static json_t *reshard_json(int64_t v) {
    return v == SR_RESHARD_TRUE ? json_true() : v == 0 ? json_false() : json_integer((json_int_t)v);
}

static void start_events(run *r) {
    if (!r->metrics)
        return;
    const char *restart = getenv("SLURM_RESTART_COUNT");
    long long restarts = restart && *restart ? strtoll(restart, NULL, 10) : 0;
    const sr_config *cfg = r->cfg;
    /* the run's configuration, as the report shows it */
    sr_metrics_event(
        r->metrics, "start", r->start.step,
        json_pack("{sI sI si ss ss sI sI sI sI sI ss ss ss si si so so sb ss}", "restart", (json_int_t)restarts,
                  "resume_step", (json_int_t)r->start.step, "world_size", r->w->size, "job_id", r->w->job_id, "preset",
                  sr_config_enum_name("model.preset", cfg->model_preset), "n_layer", (json_int_t)cfg->n_layer, "n_head",
                  (json_int_t)cfg->n_head, "n_embd", (json_int_t)cfg->n_embd, "seq_len", (json_int_t)cfg->seq_len,
                  "vocab_size", (json_int_t)cfg->vocab_size, "device", r->dev->line[0] ? r->dev->line : r->dev->name,
                  "param_dtype", sr_config_enum_name("sharding.mixed_precision.param_dtype", cfg->param_dtype),
                  "reduce_dtype", sr_config_enum_name("sharding.mixed_precision.reduce_dtype", cfg->reduce_dtype),
                  "mesh_shard", r->mesh.S, "mesh_replicate", r->mesh.R, "reshard_blocks",
                  reshard_json(cfg->reshard_blocks), "reshard_root", reshard_json(cfg->reshard_root),
                  "offload_optimizer", (int)cfg->offload_optimizer, "recompute",
                  sr_config_enum_name("model.recompute", cfg->recompute)));
    const char *from = sr_ckpt_resumed_from(r->ck);
    if (from)
        sr_metrics_event(r->metrics, "resume", r->start.step, json_pack("{ss}", "from", from));
}

/* preemption.requeue scontrol: rank 0 asks Slurm to requeue this job.
 * Returns true when scontrol succeeded. */
static bool scontrol_requeue(const char *job) {
    char *argv[] = {"scontrol", "requeue", (char *)job, NULL};
    pid_t pid;
    int rc = posix_spawnp(&pid, "scontrol", NULL, NULL, argv, environ);
    if (rc != 0) {
        sr_log_error("preemption: cannot run scontrol requeue %s: %s", job, strerror(rc));
        return false;
    }
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        sr_log_error("preemption: scontrol requeue %s failed (status %d)", job,
                     WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
        return false;
    }
    sr_log_info("preemption: scontrol requeue %s: requested", job);
    return true;
}

/* After a preemption checkpoint: the exit code per preemption.requeue. */
static int preemption_exit(const sr_config *cfg, const sr_world *w) {
    int code = (int)cfg->preempt_exit_status;
    if (cfg->preempt_requeue == SR_REQUEUE_SCONTROL) {
        const char *job = getenv("SLURM_JOB_ID");
        if (!job || !*job)
            sr_log_warn("preemption.requeue is scontrol but SLURM_JOB_ID is not set (not a Slurm job): exiting "
                        "with preemption.exit_status %d instead",
                        code);
        else if (w->rank != 0)
            code = 0;
        else
            code = scontrol_requeue(job) ? 0 : code;
    }
    return code;
}

/* The agreed stop after step s: save, then the exit status to use. */
static sr_status preempt_stop(run *r, int64_t s, const step_out *o, int *exit_code) {
    char ctx[64];
    snprintf(ctx, sizeof ctx, "after step %lld", (long long)(s + 1));
    sr_preempt_notice(r->w->rank, ctx);
    sr_log_info("preemption: ranks agreed to stop after step %lld (%d of %d rank%s saw a signal)", (long long)(s + 1),
                o->signalled, r->w->size, r->w->size == 1 ? "" : "s");
    if (r->metrics) {
        const char *sig = sr_preempt_signal_name();
        sr_metrics_event(
            r->metrics, "preempt", s + 1,
            json_pack("{so si}", "signal", sig ? json_string(sig) : json_null(), "ranks_signalled", o->signalled));
    }
    uint64_t bytes = 0;
    double ts = now_s();
    /* an asynchronous save in flight finishes and commits first */
    int64_t inflight = sr_ckpt_pending_step(r->ck);
    sr_status st = sr_ckpt_poll(r->ck, s + 1, true);
    checkpoint_events(r);
    if (st != SR_OK)
        return st;
    if (inflight >= 0)
        sr_log_info("preemption: the save of step %lld in flight finished first (%.2f s)", (long long)inflight,
                    now_s() - ts);
    sr_ckpt_progress now = {s + 1, r->cursor};
    if (sr_ckpt_last_step(r->ck) == s + 1) {
        sr_log_info("preemption: step %lld is the checkpoint just committed: nothing more to save", (long long)(s + 1));
    } else {
        ts = now_s();
        st = sr_ckpt_save(r->ck, &now, &bytes);
        checkpoint_events(r);
        if (st != SR_OK)
            return st;
    }
    double tdone = now_s();
    sr_log_info("preemption: save of step %lld took %.2f s (%.1f MB, %.0f MB/s); %.2f s since the signal",
                (long long)(s + 1), tdone - ts, (double)bytes / 1e6,
                (double)bytes / 1e6 / (tdone - ts > 0 ? tdone - ts : 1e-9),
                sr_preempt_pending() ? wall_now() - sr_preempt_time() : 0.0);
    *exit_code = preemption_exit(r->cfg, r->w);
    sr_log_info("preemption: exiting with status %d (%s)", *exit_code,
                *exit_code == 0 ? "requeue requested; checkpoint committed"
                                : "checkpoint committed; run again to resume");
    return SR_PREEMPTED;
}

static void log_step(run *r, int64_t s, const step_out *o, bool evaluated) {
    const sr_config *cfg = r->cfg;
    double tps = (double)cfg->batch_size * r->T / o->seconds;
    double mfu = r->peak > 0 ? 100.0 * tps * r->flops_tok / (r->peak * r->w->size) : NAN;
    char mfu_s[32];
    snprintf(mfu_s, sizeof mfu_s, isfinite(mfu) ? "%.1f%%" : "n/a", mfu);
    sr_log_info("step %6lld/%lld | loss %.4f | lr %.2e | norm %.4f | %.0f tok/s | mfu %s | mem %.1f MiB | comm "
                "exposed %.1f ms | %.1f ms",
                (long long)(s + 1), (long long)cfg->steps, o->loss, o->lr, o->norm, tps, mfu_s,
                mib(sr_mem_total_peak()), o->comm_exposed_ms, o->seconds * 1e3);
    sr_step_record rec = {.step = s + 1,
                          .loss = o->loss,
                          .lr = o->lr,
                          .grad_norm = o->norm,
                          .tokens_per_s = tps,
                          .mfu = mfu / 100.0,
                          .step_ms = o->seconds * 1e3,
                          .comm_exposed_ms = o->comm_exposed_ms,
                          .tokens = (s + 1) * cfg->batch_size * r->T,
                          .ranks = r->w->size,
                          .has_val = evaluated,
                          .val_loss = r->last_val,
                          .nccl = r->nccl ? sr_nccl_version() : NULL};
    sr_metrics_step(r->metrics, &rec);
}

/* log.sample_every: the sample `shardrun sample` draws from that step's
 * checkpoint with --tokens 64 --seed (train.seed + step): every rank
 * all-gathers the fp32 master to the host (sr_fsdp_gather_params, as the
 * parameter dump), rank 0 runs the cached generator of `shardrun sample`
 * (sr_sample_generate: the start token, temperature 0.8, top-k 40) with
 * the run's threads while the others wait in one agreement, and logs the
 * text.  When the full model and its key/value cache do not fit
 * sr_mem_side_copy_cap on some rank, every rank skips it (a warning the
 * first time). */
enum { SAMPLE_TOKENS = 64 };

typedef struct {
    int tok[SAMPLE_TOKENS];
    int n;
} sample_buf;

static sr_status keep_token(void *ctx, int token, long i) {
    sample_buf *b = ctx;
    b->tok[i] = token;
    b->n = (int)i + 1;
    return SR_OK;
}

static sr_status log_sample(run *r, int64_t step) {
    const sr_model *m = &r->model;
    const sr_model_dims *d = &m->d;
    size_t need = sr_sample_host_bytes(m);
    size_t cap = sr_mem_side_copy_cap(r->w->local_size);
    int64_t fits = need <= cap;
    sr_status st = sr_ctl_min(r->ctl, &fits);
    if (st != SR_OK)
        return st;
    if (!fits) {
        if (!r->sample_skipped)
            sr_log_warn("log.sample_every: a sample needs %.1f MiB of host memory on every rank (the full fp32 model "
                        "and its key/value cache), above the cap of 25%% of the node's memory divided by its ranks "
                        "(%.1f MiB here) on some rank: samples skipped (hint: shardrun sample CKPT on a node of its "
                        "own)",
                        mib(need), mib(cap));
        r->sample_skipped = true;
        return SR_OK;
    }
    float *full = sr_malloc(m->n_params * sizeof(float));
    st = full ? SR_OK : sr_error_oom("the training sample's model");
    st = sr_ctl_agree(r->ctl, st, 0, 0, st == SR_OK ? NULL : sr_error_message(), NULL);
    if (st == SR_OK)
        st = sr_fsdp_gather_params(r->fsdp, full);
    sample_buf b = {.n = 0};
    double t0 = now_s();
    sr_status mine = SR_OK;
    if (st == SR_OK && r->w->rank == 0) {
        int start = sr_sample_start_token(d->V);
        sr_sample_opts o = {
            .tokens = SAMPLE_TOKENS, .temperature = 0.8, .top_k = 40, .seed = (uint64_t)r->cfg->seed + (uint64_t)step};
        mine = sr_sample_generate(m, full, &start, 1, &o, keep_token, &b);
    }
    free(full);
    if (st == SR_OK)
        st = sr_ctl_agree(r->ctl, mine, 0, 0, mine == SR_OK ? NULL : sr_error_message(), NULL);
    if (st == SR_OK && r->w->rank == 0) {
        char *text = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&text, &len);
        if (f) {
            sr_sample_write(f, b.tok, b.n, d->V, NULL, true, true);
            fclose(f);
        }
        sr_log_info("sample at step %lld (%d tokens, temperature 0.8, top-k 40, seed %llu, %d thread%s, %.2f s): "
                    "\"%s\"",
                    (long long)step, b.n, (unsigned long long)((uint64_t)r->cfg->seed + (uint64_t)step), r->threads,
                    r->threads == 1 ? "" : "s", now_s() - t0, text ? text : "?");
        free(text);
    }
    return st;
}

static sr_status after_step(run *r, int64_t s, step_out *o, int *exit_code) {
    const sr_config *cfg = r->cfg;
    bool last = s + 1 == cfg->steps;
    bool evaluated = false;
    if (!o->stop && r->val && cfg->eval_every > 0 && ((s + 1) % cfg->eval_every == 0 || last)) {
        bool interrupted = false;
        sr_status st = evaluate(r, &r->last_val, &interrupted);
        if (st != SR_OK)
            return st;
        if (interrupted) {
            o->stop = true;
            sr_log_info("step %lld: evaluation interrupted by a preemption signal", (long long)(s + 1));
        } else {
            evaluated = true;
            sr_log_info("step %lld: val_loss %.4f", (long long)(s + 1), r->last_val);
            if (r->metrics)
                sr_metrics_event(r->metrics, "eval", s + 1, json_pack("{sf}", "val_loss", r->last_val));
        }
    }
    if ((s + 1) % cfg->log_every == 0 || s == 0 || last)
        log_step(r, s, o, evaluated);
    if (!o->stop && cfg->log_sample_every > 0 && (s + 1) % cfg->log_sample_every == 0) {
        sr_status st = log_sample(r, s + 1);
        if (st != SR_OK)
            return st;
    }
    if (o->stop && !last)
        return preempt_stop(r, s, o, exit_code);
    /* an asynchronous save in flight commits once every rank has written */
    sr_status pst = sr_ckpt_poll(r->ck, s + 1, false);
    checkpoint_events(r);
    if (pst != SR_OK)
        return pst;
    bool periodic = sr_ckpt_enabled(r->ck) && !last &&
                    ((cfg->ckpt_every_steps > 0 && (s + 1) % cfg->ckpt_every_steps == 0) || o->clock_due);
    if (periodic) {
        sr_ckpt_progress now = {s + 1, r->cursor};
        sr_status st = sr_ckpt_save_async(r->ck, &now, NULL);
        checkpoint_events(r);
        if (st != SR_OK)
            return st;
        r->last_save = now_s();
    }
    return SR_OK;
}

/* The final checkpoint, the done line and (tests) the parameter dump. */
static sr_status finish(run *r) {
    const sr_config *cfg = r->cfg;
    sr_status pst = sr_ckpt_poll(r->ck, cfg->steps, true);
    checkpoint_events(r);
    if (pst != SR_OK)
        return pst;
    if (sr_ckpt_enabled(r->ck) && sr_ckpt_last_step(r->ck) != cfg->steps) {
        sr_ckpt_progress fin = {cfg->steps, r->cursor};
        sr_status st = sr_ckpt_save(r->ck, &fin, NULL);
        checkpoint_events(r);
        if (st != SR_OK)
            return st;
    }
    int64_t trained = cfg->steps - r->start.step;
    if (r->start.step > 0)
        sr_log_info("done: %lld steps (%lld to %lld, resumed at %lld) in %.1f s; loss %.4f -> %.4f", (long long)trained,
                    (long long)r->start.step + 1, (long long)cfg->steps, (long long)r->start.step, now_s() - r->t_start,
                    r->first_loss, r->last_loss);
    else
        sr_log_info("done: %lld steps in %.1f s; loss %.4f -> %.4f", (long long)trained, now_s() - r->t_start,
                    r->first_loss, r->last_loss);
    sr_metrics_log_memory("at end");
    if (r->dev->hb)
        sr_log_info(
            "happens-before checker: no race found; %lld steps made %lld host waits for the device, %lld in all "
            "(evaluations, checkpoints, set-up)",
            r->hb_steps, r->hb_step_waits, sr_dev_host_waits(r->dev));
    return SR_OK;
}

/* ------------------------------------------------------------------------ */

sr_status sr_train_run(const sr_config *cfg, sr_world *w, sr_train_result *res) {
    run r = {.resolved = *cfg, .w = w, .first_loss = NAN, .last_loss = NAN, .last_val = NAN};
    r.cfg = &r.resolved;
    sr_status st = setup(&r);
    if (st != SR_OK)
        return teardown(&r, st);
    if (r.dev->kind == SR_DEV_CUDA) {
        r.peak = sr_metrics_gpu_peak_flops(r.dev->line, r.ops->act == SR_DT_BF16, r.peak_how, sizeof r.peak_how);
        if (r.peak <= 0)
            sr_log_warn("mfu: %s", r.peak_how);
    } else
        r.peak = sr_metrics_peak_flops(r.threads, r.peak_how, sizeof r.peak_how);
    r.flops_tok = sr_model_flops_per_token(&r.model);
    banner(&r);
    start_events(&r);
    const char *dump = sr_testhook()->dump_params;
    if (r.start.step >= cfg->steps) {
        sr_log_info("resume: the checkpoint is at step %lld and train.steps is %lld: nothing left to train",
                    (long long)r.start.step, (long long)cfg->steps);
        if (res)
            *res = (sr_train_result){0, NAN, NAN, NAN, 0};
        if (dump[0])
            st = sr_fsdp_dump_params(r.fsdp, dump);
        return teardown(&r, st);
    }
    r.t_start = r.last_save = now_s();
    r.cursor = r.start.cursor;
    int exit_code = 0;
    int64_t s = r.start.step;
    for (; s < cfg->steps && st == SR_OK; s++) {
        step_out o = {0};
        st = train_step(&r, s, &o);
        if (st == SR_OK)
            st = after_step(&r, s, &o, &exit_code);
    }
    if (st == SR_OK)
        st = finish(&r);
    if (st == SR_OK && dump[0])
        st = sr_fsdp_dump_params(r.fsdp, dump);
    if (res && (st == SR_OK || st == SR_PREEMPTED))
        *res = (sr_train_result){(st == SR_OK ? cfg->steps : s) - r.start.step, r.first_loss, r.last_loss, r.last_val,
                                 exit_code};
    return teardown(&r, st);
}
