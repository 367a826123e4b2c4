/* plan.c — `shardrun plan`: a job sized without running it; see plan.h.
 *
 * Every memory figure comes from sr_memplan_job, the function the run
 * itself checks its limits with, so the persistent categories are exact;
 * the rest is arithmetic on the job (FLOPs from the model's own count,
 * checkpoint bytes from the checkpoint module's own formula) at the speeds
 * the user gives or the defaults the output names. */
#include "srconfig.h"

#include "plan.h"
#include "shardfile.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ckpt.h"
#include "device.h"
#include "ledgerplan.h"
#include "line.h"
#include "mem.h"
#include "memplan.h"
#include "metrics.h"
#include "ops.h"
#include "plane.h"
#include "preempt.h"
#include "shardplan.h"
#include "testhook.h"
#include "train.h"

#define GIB ((double)SR_GIB)
#define MIB ((double)SR_MIB)

/* Defaults, named in the output when used. */
#define DEFAULT_DISK_MBPS 1000.0 /* a modest parallel file system's share */
#define DEFAULT_UTIL 0.4         /* sustained fraction of the nominal peak */
#define add sr_size_add

/* One rank count planned. */
typedef struct {
    int ranks, per_node, threads, mb, accum;
    size_t tier_snap, tier_tmpfs; /* the memory tier's snapshot and tmpfs pages per rank (0: off) */
    sr_mesh mesh;
    bool valid;
    char why[512];                     /* when !valid */
    sr_memplan plan;                   /* what sr_memplan_job plans (device memory on a GPU) */
    sr_memplan offloaded;              /* the categories offload moves to the host */
    size_t at[SR_MEM_NCAT][SR_NSPACE]; /* per category and space, as the run allocates */
    size_t space[SR_NSPACE];
    size_t host_need, device_need; /* per rank, with overheads and reserves */
    bool fits_host, fits_device;
    double flops_tok, flops_step, tokens_s, step_s;
    char step_how[700]; /* where step_s comes from */
    uint64_t ckpt_total, ckpt_rank;
    double save_s;
    double lead_s; /* the --signal lead, s (may exceed what sbatch accepts) */
    char fix[680]; /* the cheapest change that fits, or "" */
} plan_row;

typedef struct {
    const sr_plan_opts *o;
    bool gpu, fake, separate;
    sr_dev_kind kind;                                   /* the table planned for */
    bool param_auto;                                    /* param_dtype was auto (sr_job_resolve_precision) */
    bool flash;                                         /* attention is flash attention (sr_job_attention) */
    double device_bytes, host_bytes, disk_mbps, tflops; /* resolved */
    const char *device_how, *host_how, *disk_how;
    char tflops_how[256];
    bool ledger_time; /* a GPU plan without --tflops: the step time is the ledger's (ledgerplan.h) */
    sr_ledgerplan_opts lo;
} plan_ctx;

/* Where each part of r's plan lives (r->at, r->space), with the device
 * table's own buffers, the checkpoint snapshot's `staging` bytes and the
 * memory tier's `tmpfs` pages (host memory), and
 * whether it fits the node's host memory and the device. */
static void place_memory(const plan_ctx *x, const sr_config *cfg, int ranks, size_t staging, size_t tmpfs,
                         plan_row *r) {
    size_t own[SR_NSPACE] = {0}; /* what the device table allocates for itself */
    sr_device_own_bytes(x->kind, own);
    r->plan.bytes[SR_MEM_OTHER] = add(r->plan.bytes[SR_MEM_OTHER], own[SR_SPACE_DEVICE]);
    r->plan.total = 0;
    for (int c = 0; c < SR_MEM_NCAT; c++)
        r->plan.total = add(r->plan.total, r->plan.bytes[c]);
    /* where each part lives: the plan on the device (all host memory on
     * the CPU), the TCP transport's chunks in host memory, the offloaded
     * categories in pinned memory (host without pin_memory) but Adam's m
     * and v in host memory, the snapshot in pinned memory (host memory
     * with offload) */
    sr_mem_space dev = x->separate ? SR_SPACE_DEVICE : SR_SPACE_HOST;
    sr_mem_space off = cfg->pin_memory ? SR_SPACE_PINNED : SR_SPACE_HOST;
    bool offload = x->separate && cfg->offload_optimizer;
    for (int c = 0; c < SR_MEM_NCAT; c++) {
        r->at[c][dev] = add(r->at[c][dev], r->plan.bytes[c]);
        size_t *o = &r->at[c][c == SR_MEM_OPTIM_SHARD ? SR_SPACE_HOST : off];
        *o = add(*o, r->offloaded.bytes[c]);
    }
    if (x->separate) {
        size_t *d = &r->at[SR_MEM_COMM][dev];
        *d = *d == SIZE_MAX ? SIZE_MAX : *d - r->plan.comm_transport; /* the plan counted it there */
        r->at[SR_MEM_COMM][SR_SPACE_HOST] = add(r->at[SR_MEM_COMM][SR_SPACE_HOST], r->plan.comm_transport);
    }
    size_t *g = &r->at[SR_MEM_CKPT_STAGING][offload ? SR_SPACE_HOST : SR_SPACE_PINNED];
    *g = add(*g, staging);
    r->at[SR_MEM_CKPT_STAGING][SR_SPACE_HOST] = add(r->at[SR_MEM_CKPT_STAGING][SR_SPACE_HOST], tmpfs);
    r->at[SR_MEM_OTHER][SR_SPACE_PINNED] = add(r->at[SR_MEM_OTHER][SR_SPACE_PINNED], own[SR_SPACE_PINNED]);
    if (x->gpu) /* the run's token buffers, pinned on the cuda table (sr_dev_io_alloc) */
        r->at[SR_MEM_OTHER][SR_SPACE_PINNED] =
            add(r->at[SR_MEM_OTHER][SR_SPACE_PINNED], sr_train_io_bytes(r->accum, r->mb, (int)cfg->seq_len));
    for (int c = 0; c < SR_MEM_NCAT; c++)
        for (int sp = 0; sp < SR_NSPACE; sp++)
            r->space[sp] = add(r->space[sp], r->at[c][sp]);
    if (x->separate) {
        int comms = r->mesh.R > 1 && r->mesh.S > 1 ? 3 : 1;
        size_t reserve = add(sr_device_reserve_bytes(x->kind),
                             sr_plane_reserve_bytes(x->kind, ranks, (int)cfg->comm_backend, comms));
        r->device_need = add(r->space[SR_SPACE_DEVICE], reserve);
        r->host_need = add(add(r->space[SR_SPACE_HOST], r->space[SR_SPACE_PINNED]), r->plan.overhead);
    } else
        r->host_need = add(r->space[SR_SPACE_HOST], r->plan.overhead);
    r->fits_host = (double)r->host_need * r->per_node <= x->host_bytes;
    r->fits_device = !x->separate || (double)r->device_need <= x->device_bytes;
}

/* r's compute (FLOPs per token and step, the step time from --tflops or
 * the GPU ledger) and checkpoint size, save time and preemption lead. */
static sr_status plan_compute(const plan_ctx *x, const sr_config *cfg, int ranks, const sr_ops *ops, plan_row *r) {
    sr_status st;
    /* compute: the model's FLOPs per token (as MFU counts them) */
    sr_model m;
    sr_model_dims d = sr_job_model_dims(cfg, (int)cfg->seq_len);
    st = sr_model_init(&m, d, ops ? ops : &sr_ops_cpu, NULL, 0, false);
    if (st != SR_OK)
        return st;
    r->flops_tok = sr_model_flops_per_token(&m);
    /* recompute runs the blocks' forward again: about a third more */
    double work = r->flops_tok * (cfg->recompute == SR_RECOMPUTE_BLOCKS ? 4.0 / 3.0 : 1.0);
    r->flops_step = r->flops_tok * (double)cfg->batch_size * (double)cfg->seq_len;
    r->tokens_s = x->tflops > 0 ? ranks * x->tflops * 1e12 / work : 0;
    r->step_s = r->tokens_s > 0 ? (double)cfg->batch_size * cfg->seq_len / r->tokens_s : 0;
    snprintf(r->step_how, sizeof r->step_how, "at %.4g TFLOP/s sustained per rank (%s)", x->tflops, x->tflops_how);
    if (x->ledger_time && cfg->offload_optimizer)
        /* the optimizer's step runs on the host: the ledger counts a GPU's
         * operations only, so the rate's estimate stands */
        snprintf(r->step_how, sizeof r->step_how,
                 "at %.4g TFLOP/s sustained per rank (%s; sharding.offload.optimizer: the host's optimizer step "
                 "is outside the GPU ledger)",
                 x->tflops, x->tflops_how);
    else if (x->ledger_time && ranks <= SR_LEDGER_MAX_RANKS) {
        /* a GPU step's time is its ledger's: the roofline bound, or the
         * calibration's prediction (one owner of a step's cost) */
        sr_ledgerplan lp;
        st = sr_ledgerplan_run(cfg, ranks, &x->lo, &lp);
        if (st != SR_OK)
            return st;
        r->step_s = lp.calibrated ? lp.predicted_s : lp.bound_s;
        r->tokens_s = r->step_s > 0 ? (double)cfg->batch_size * cfg->seq_len / r->step_s : 0;
        if (lp.calibrated)
            snprintf(r->step_how, sizeof r->step_how, "predicted by the GPU ledger with %.500s (plan --ledger)",
                     lp.calibration);
        else
            snprintf(r->step_how, sizeof r->step_how,
                     "the GPU ledger's roofline bound at %.500s: a lower bound; --calibration FILE predicts, "
                     "--tflops T assumes a rate (plan --ledger)",
                     lp.rates_how);
    }
    sr_shardplan pl = {0};
    st = sr_shardplan_init(&pl, m.layer_offset, d.L, (int)cfg->blocks_per_unit, r->mesh.S);
    sr_model_free(&m);
    if (st != SR_OK)
        return st;
    r->ckpt_total = sr_ckpt_planned_bytes(&pl, r->mesh.S, &r->ckpt_rank);
    sr_shardplan_free(&pl);
    r->save_s = (double)r->ckpt_total / (x->disk_mbps * 1e6);
    /* the lead (preempt.h), with the job's preemption.end_margin_s */
    r->lead_s = sr_preempt_lead_s(r->step_s, r->save_s, cfg->preempt_end_margin_s);
    return SR_OK;
}

/* Plans `ranks` ranks of cfg into *r (memory only; fit is decided by the
 * caller).  An invalid rank count sets r->valid false and r->why. */
static sr_status plan_memory(const plan_ctx *x, const sr_config *cfg, int ranks, plan_row *r) {
    memset(r, 0, sizeof *r);
    r->ranks = ranks;
    sr_status st = sr_job_check_world(cfg, ranks, 0, &r->mesh);
    if (st != SR_OK) {
        snprintf(r->why, sizeof r->why, "%s", sr_error_message());
        return SR_OK;
    }
    r->valid = true;
    r->per_node = x->gpu ? (x->o->gpus_per_node > 0 ? x->o->gpus_per_node : 1) : ranks;
    if (r->per_node > ranks)
        r->per_node = ranks;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    r->threads = cfg->threads > 0 ? (int)cfg->threads : (int)(cores > r->per_node ? cores / r->per_node : 1);
    r->mb = (int)sr_config_micro_batch(cfg, ranks);
    r->accum = (int)sr_config_accum_steps(cfg, ranks);
    const sr_ops *ops = sr_device_plan_ops(x->gpu, (sr_dtype)cfg->param_dtype, x->flash);
    sr_job job;
    st = sr_job_init(&job, cfg);
    if (st == SR_OK)
        st = sr_memplan_job(&r->plan, &r->offloaded, cfg, &job, &r->mesh, r->mb, r->threads, ops, x->kind, x->separate,
                            r->per_node, ranks);
    /* a device run's asynchronous snapshot (sr_ckpt_snapshot_fits): the
     * shard's three states in pinned buffers, or plain host memory when
     * the state is offloaded to the host already; when it fits the cap */
    uint64_t snap = 0, tmpfs = 0;
    size_t staging =
        st == SR_OK && x->separate && sr_ckpt_snapshot_fits(&job.ckpt, r->plan.state_shard, r->per_node, &snap)
            ? (size_t)snap
            : 0;
    /* the memory tier: its snapshot (a device run's is staging here, a CPU
     * run's is in the memory plan) and its tmpfs pages, host memory */
    uint64_t tier = st == SR_OK ? sr_ckpt_mem_host_bytes(&job.ckpt, r->plan.state_shard, r->per_node,
                                                         (ranks + r->per_node - 1) / r->per_node, &tmpfs)
                                : 0;
    staging = add(staging, x->separate ? (size_t)tier : 0);
    r->tier_snap = (size_t)tier;
    r->tier_tmpfs = (size_t)tmpfs;
    sr_job_free(&job);
    if (st != SR_OK)
        return st;
    place_memory(x, cfg, ranks, staging, (size_t)tmpfs, r);
    return plan_compute(x, cfg, ranks, ops, r);
}

static bool fits(const plan_row *r) { return r->valid && r->fits_host && r->fits_device; }

/* The cheapest change (in throughput) that makes a run fit: reshard the
 * blocks after the forward, a smaller micro-batch (the largest that fits),
 * recompute, offload the optimizer, offload the parameters too — alone,
 * then each added to the ones before. */
static sr_status cheapest_fix(const plan_ctx *x, const sr_config *cfg, plan_row *row) {
    sr_config c = *cfg;
    char sets[512];
    sr_line ls = SR_LINE(sets);
    plan_row t;
    for (int stage = 0; stage < 5; stage++) {
        for (int pass = 0; pass < 2; pass++) {
            /* pass 0: this change alone; pass 1: added to the earlier ones */
            sr_config k = pass ? c : *cfg;
            char what[160] = "";
            if (stage == 0) {
                if (k.reshard_blocks == SR_RESHARD_TRUE)
                    continue;
                k.reshard_blocks = SR_RESHARD_TRUE;
                snprintf(what, sizeof what, "--set sharding.reshard_after_forward.blocks=true");
            } else if (stage == 1) {
                int mb = (int)sr_config_micro_batch(&k, row->ranks), found = 0;
                for (int m = mb - 1; m >= 1 && !found; m--) {
                    if ((k.batch_size / row->ranks) % m)
                        continue;
                    sr_config y = k;
                    y.micro_batch = m;
                    sr_status st = plan_memory(x, &y, row->ranks, &t);
                    if (st != SR_OK)
                        return st;
                    if (fits(&t) || (pass && m == 1))
                        found = m;
                }
                if (!found)
                    continue;
                k.micro_batch = found;
                snprintf(what, sizeof what, "--set train.micro_batch=%d", found);
            } else if (stage == 2) {
                if (k.recompute == SR_RECOMPUTE_BLOCKS)
                    continue;
                k.recompute = SR_RECOMPUTE_BLOCKS;
                snprintf(what, sizeof what, "--set model.recompute=blocks");
            } else if (stage == 3) {
                if (!x->separate || k.offload_optimizer)
                    continue;
                k.offload_optimizer = true;
                snprintf(what, sizeof what, "--set sharding.offload.optimizer=true");
            } else {
                if (!x->separate || k.offload_params)
                    continue;
                k.offload_optimizer = k.offload_params = true;
                snprintf(what, sizeof what, "--set sharding.offload.optimizer=true --set sharding.offload.params=true");
            }
            sr_status st = plan_memory(x, &k, row->ranks, &t);
            if (st != SR_OK)
                return st;
            if (fits(&t)) {
                snprintf(row->fix, sizeof row->fix, "%s%s%s", pass ? sets : "", pass && ls.len ? " " : "", what);
                return SR_OK;
            }
            if (pass) {
                c = k;
                sr_line_item(&ls, " ", "%s", what);
            }
        }
    }
    snprintf(row->fix, sizeof row->fix,
             "none of micro_batch, reshard, recompute%s fits: run on more ranks (the shards shrink with the shard "
             "group) or a smaller model",
             x->separate ? ", offload" : "");
    return SR_OK;
}

static const char *human(double bytes, char *buf, size_t n) {
    if (bytes >= GIB)
        snprintf(buf, n, "%.2f GiB", bytes / GIB);
    else
        snprintf(buf, n, "%.1f MiB", bytes / MIB);
    return buf;
}

static void print_one(const plan_ctx *x, const sr_config *cfg, const char *job, const plan_row *r, FILE *out) {
    char a[32], b[32], c[32], name[1300], dims[512];
    sr_model_dims d = sr_job_model_dims(cfg, (int)cfg->seq_len);
    fprintf(out, "plan: %s: model %s: %s\n", job, sr_config_model_name(cfg, name, sizeof name),
            sr_model_dims_text(&d, dims, sizeof dims));
    fprintf(out,
            "  %d rank%s on %s (%d per node, %d thread%s each): mesh shard %d x replicate %d; batch %lld = %d x "
            "micro_batch %d x %d accumulation step%s; param %s%s, reduce %s; attention %s\n",
            r->ranks, r->ranks == 1 ? "" : "s",
            x->gpu    ? "GPUs"
            : x->fake ? "the fake device (test hook)"
                      : "CPUs",
            r->per_node, r->threads, r->threads == 1 ? "" : "s", r->mesh.S, r->mesh.R, (long long)cfg->batch_size,
            r->ranks, r->mb, r->accum, r->accum == 1 ? "" : "s",
            sr_config_enum_name("sharding.mixed_precision.param_dtype", cfg->param_dtype),
            x->param_auto ? " (auto)" : "",
            sr_config_enum_name("sharding.mixed_precision.reduce_dtype", cfg->reduce_dtype),
            x->flash ? "flash" : "materialized");
    fprintf(out, "memory per rank, as the run accounts it (rank 0; bytes exact for the persistent categories):\n");
    fprintf(out, "  %-14s %-7s %15s %12s\n", "category", "space", "bytes", "MiB");
    for (int k = 0; k < SR_MEM_NCAT; k++) {
        bool any = false;
        for (int sp = 0; sp < SR_NSPACE; sp++)
            if (r->at[k][sp]) {
                fprintf(out, "  %-14s %-7s %15zu %12.1f\n", sr_mem_name(k), sr_mem_space_name(sp), r->at[k][sp],
                        (double)r->at[k][sp] / MIB);
                any = true;
            }
        if (!any)
            fprintf(out, "  %-14s %-7s %15d %12.1f\n", sr_mem_name(k), "-", 0, 0.0);
    }
    size_t total = add(add(r->space[0], r->space[1]), r->space[2]);
    fprintf(out, "  %-14s %-7s %15zu %12.1f\n", "total", "", total, (double)total / MIB);
    fprintf(out, "  per space: host %s, pinned %s, device %s\n", human((double)r->space[SR_SPACE_HOST], a, sizeof a),
            human((double)r->space[SR_SPACE_PINNED], b, sizeof b),
            human((double)r->space[SR_SPACE_DEVICE], c, sizeof c));
    fprintf(out, "  outside the accounting: code, libraries and threads %s (host)",
            human((double)r->plan.overhead, a, sizeof a));
    if (x->gpu)
        fprintf(out,
                "; CUDA context ~%.0f MiB and NCCL ~%.0f MiB per communicator (device, estimates; the run logs "
                "what it finds)",
                (double)sr_device_reserve_bytes(SR_DEV_CUDA) / MIB,
                (double)sr_plane_reserve_bytes(SR_DEV_CUDA, 2, SR_BACKEND_AUTO, 1) / MIB);
    fputs("\n", out);
    fprintf(out, "fit: host %s per rank x %d per node = %s of %s (%s): %s\n", human((double)r->host_need, a, sizeof a),
            r->per_node, human((double)r->host_need * r->per_node, b, sizeof b), human(x->host_bytes, c, sizeof c),
            x->host_how, r->fits_host ? "fits" : "does NOT fit");
    if (x->separate)
        fprintf(out, "     device %s per rank of %s (%s): %s\n", human((double)r->device_need, a, sizeof a),
                human(x->device_bytes, b, sizeof b), x->device_how, r->fits_device ? "fits" : "does NOT fit");
    if (!fits(r))
        fprintf(out, "     cheapest change that fits: %s\n", r->fix);
    fprintf(out,
            "compute: %.4g GFLOP per token (6N + 12 L T C, as MFU counts it), %.4g TFLOP per step (%lld tokens)%s\n",
            r->flops_tok / 1e9, r->flops_step / 1e12, (long long)(cfg->batch_size * cfg->seq_len),
            cfg->recompute == SR_RECOMPUTE_BLOCKS ? "; recompute adds about a third" : "");
    fprintf(out, "  %s: %.0f tokens/s, %.3f s per step\n", r->step_how, r->tokens_s, r->step_s);
    fprintf(out,
            "checkpoint: %s in all (%llu bytes), %s per rank at most (%llu bytes, the largest shard file); save "
            "%.1f s at %.0f MB/s (%s)\n",
            human((double)r->ckpt_total, a, sizeof a), (unsigned long long)r->ckpt_total,
            human((double)r->ckpt_rank, b, sizeof b), (unsigned long long)r->ckpt_rank, r->save_s, x->disk_mbps,
            x->disk_how);
    if (r->tier_snap)
        fprintf(out,
                "memory tier: every %lld steps, %s per rank of host memory in ckpt_staging: its snapshot %s and its "
                "pages in checkpoint.memory.dir %s (3 steps of its shard file%s: 2 kept and the one being "
                "written; tmpfs pages count against the job's cgroup)\n",
                (long long)cfg->ckpt_mem_every_steps, human((double)(r->tier_snap + r->tier_tmpfs), a, sizeof a),
                human((double)r->tier_snap, b, sizeof b), human((double)r->tier_tmpfs, c, sizeof c),
                r->tier_tmpfs > 3 * (r->tier_snap + SR_SHARD_HEADER_BYTES) ? " and its buddy's replica" : "");
    if (r->lead_s <= SR_PLAN_SIGNAL_MAX_S)
        fprintf(out,
                "preemption: #SBATCH --signal=USR1@%.0f  (one step %.3g s + one save %.3g s, twice over, + %.3g s)\n",
                r->lead_s, r->step_s, r->save_s, cfg->preempt_end_margin_s);
    else
        fprintf(out,
                "preemption: no #SBATCH --signal line: the lead would be %.4g s (one step %.3g s + one save %.3g s, "
                "twice over, + %.3g s), above the %d s sbatch accepts (hint: a faster checkpoint file system, "
                "--disk-mbps, or more ranks)\n",
                r->lead_s, r->step_s, r->save_s, cfg->preempt_end_margin_s, SR_PLAN_SIGNAL_MAX_S);
}

static void print_table_head(const plan_ctx *x, const sr_config *cfg, const char *job, FILE *out) {
    fprintf(out,
            "plan: %s: model %s (n_layer %lld, n_embd %lld, seq_len %lld), batch %lld, on %s; param %s%s, reduce %s; "
            "attention %s\n",
            job, sr_config_enum_name("model.preset", cfg->model_preset), (long long)cfg->n_layer,
            (long long)cfg->n_embd, (long long)cfg->seq_len, (long long)cfg->batch_size,
            x->gpu    ? "GPUs"
            : x->fake ? "the fake device (test hook)"
                      : "CPUs",
            sr_config_enum_name("sharding.mixed_precision.param_dtype", cfg->param_dtype),
            x->param_auto ? " (auto)" : "",
            sr_config_enum_name("sharding.mixed_precision.reduce_dtype", cfg->reduce_dtype),
            x->flash ? "flash" : "materialized");
    fprintf(out, "%6s %4s %5s %12s %12s %12s %5s %12s %10s %12s %8s %8s\n", "ranks", "mb", "accum", "host/rank",
            "device/rank", "shards", "fits", "tokens/s", "step_s", "ckpt/rank", "save_s", "signal");
}

static void print_table_row(const plan_ctx *x, const plan_row *r, FILE *out) {
    char a[32], b[32], c[32], d[32];
    if (!r->valid) {
        fprintf(out, "%6d   invalid: %s\n", r->ranks, r->why);
        return;
    }
    size_t shards = add(add(r->plan.bytes[SR_MEM_PARAM_SHARD], r->plan.bytes[SR_MEM_GRAD_SHARD]),
                        add(r->plan.bytes[SR_MEM_OPTIM_SHARD], r->offloaded.total));
    char sig[32];
    if (r->lead_s <= SR_PLAN_SIGNAL_MAX_S)
        snprintf(sig, sizeof sig, "USR1@%.0f", r->lead_s);
    else
        snprintf(sig, sizeof sig, "over %d s", SR_PLAN_SIGNAL_MAX_S);
    fprintf(out, "%6d %4d %5d %12s %12s %12s %5s %12.0f %10.3f %12s %8.1f   %s\n", r->ranks, r->mb, r->accum,
            human((double)r->host_need, a, sizeof a), x->separate ? human((double)r->device_need, b, sizeof b) : "-",
            human((double)shards, c, sizeof c), fits(r) ? "yes" : "NO", r->tokens_s, r->step_s,
            human((double)r->ckpt_rank, d, sizeof d), r->save_s, sig);
}

/* plan --ledger: the GPU step's ledger, as text or JSON. */
static sr_status plan_ledger(const sr_config *cfg, const char *job, const sr_plan_opts *o, FILE *out) {
    sr_ledgerplan_opts lo = {o->gemm_tflops, o->hbm_tbps, o->calibration};
    sr_ledgerplan lp;
    sr_status st = sr_ledgerplan_run(cfg, o->ranks_lo > 0 ? o->ranks_lo : 1, &lo, &lp);
    if (st != SR_OK || o->json)
        return st != SR_OK ? st : sr_ledgerplan_json(&lp, out);
    char name[1300], dims[512];
    sr_model_dims d = sr_job_model_dims(cfg, (int)cfg->seq_len);
    fprintf(out, "plan: %s: model %s: %s; param %s, reduce %s; attention %s\n", job,
            sr_config_model_name(cfg, name, sizeof name), sr_model_dims_text(&d, dims, sizeof dims),
            sr_config_enum_name("sharding.mixed_precision.param_dtype", cfg->param_dtype),
            sr_config_enum_name("sharding.mixed_precision.reduce_dtype", cfg->reduce_dtype),
            lp.flash ? "flash" : "materialized");
    sr_ledgerplan_print(&lp, out);
    return SR_OK;
}

sr_status sr_plan_run(const sr_config *job_cfg, const char *job, const sr_plan_opts *o, FILE *out) {
    plan_ctx x = {.o = o, .lo = {o->gemm_tflops, o->hbm_tbps, o->calibration}};
    x.fake = strcmp(sr_testhook()->device, "fake") == 0;
    /* (--ledger counts a GPU's step: a job that may run on one is planned
     * for it) */
    x.gpu =
        o->gpus_per_node > 0 || job_cfg->device == SR_DEVICE_CUDA || (o->ledger && job_cfg->device != SR_DEVICE_CPU);
    x.separate = x.gpu || x.fake;
    x.kind = x.gpu ? SR_DEV_CUDA : x.fake ? SR_DEV_FAKE : SR_DEV_CPU;
    sr_config resolved = *job_cfg; /* the job with its auto dtypes resolved as the run would */
    x.param_auto = sr_job_resolve_precision(&resolved, x.gpu);
    const sr_config *cfg = &resolved;
    sr_status ast = sr_job_attention(cfg, x.gpu, &x.flash);
    if (ast != SR_OK)
        return ast;
    if (o->ledger)
        return plan_ledger(cfg, job, o, out);
    if (x.gpu && !sr_device_plan_ops(true, (sr_dtype)cfg->param_dtype, x.flash))
        return sr_error_wrap(SR_ERR_CONFIG, "plan: a GPU plan (%s; without it a CPU plan) needs the CUDA op table",
                             o->gpus_per_node > 0 ? "--gpus-per-node" : "device: cuda");
    x.device_bytes = o->device_mem_gib > 0 ? o->device_mem_gib * GIB : (double)SR_DEVICE_ASSUMED_BYTES;
    x.device_how = o->device_mem_gib > 0 ? "--device-mem" : "assumed 80 GiB; give --device-mem";
    size_t node = sr_mem_node_bytes();
    x.host_bytes = o->host_mem_gib > 0 ? o->host_mem_gib * GIB : (double)node;
    x.host_how = o->host_mem_gib > 0 ? "--host-mem" : "this node's memory; give --host-mem for another";
    x.disk_mbps = o->disk_mbps > 0 ? o->disk_mbps : DEFAULT_DISK_MBPS;
    x.disk_how = o->disk_mbps > 0 ? "--disk-mbps" : "assumed; give --disk-mbps";
    if (o->tflops > 0) {
        x.tflops = o->tflops;
        snprintf(x.tflops_how, sizeof x.tflops_how, "--tflops");
    } else if (x.gpu) {
        x.ledger_time = true;
        char how[256];
        double peak = sr_metrics_gpu_peak_flops("H100 SXM", cfg->param_dtype == SR_DT_BF16, how, sizeof how);
        x.tflops = DEFAULT_UTIL * peak / 1e12;
        snprintf(x.tflops_how, sizeof x.tflops_how, "assumed %.0f%% of the H100 SXM peak; give --tflops",
                 DEFAULT_UTIL * 100);
    } else {
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        int per_node = o->ranks_lo > 0 ? o->ranks_lo : 1;
        int threads = cfg->threads > 0 ? (int)cfg->threads : (int)(cores > per_node ? cores / per_node : 1);
        char how[256];
        double peak = sr_metrics_peak_flops(threads, how, sizeof how);
        x.tflops = DEFAULT_UTIL * peak / 1e12;
        snprintf(x.tflops_how, sizeof x.tflops_how,
                 "assumed %.0f%% of this node's nominal peak for %d thread%s; give "
                 "--tflops",
                 DEFAULT_UTIL * 100, threads, threads == 1 ? "" : "s");
    }
    int lo = o->ranks_lo > 0 ? o->ranks_lo : 1, hi = o->ranks_hi >= lo ? o->ranks_hi : lo;
    plan_row r;
    if (lo == hi) {
        sr_status st = plan_memory(&x, cfg, lo, &r);
        if (st == SR_OK && !r.valid)
            return sr_error(SR_ERR_CONFIG, "%s", r.why);
        if (st == SR_OK && !fits(&r))
            st = cheapest_fix(&x, cfg, &r);
        if (st == SR_OK)
            print_one(&x, cfg, job, &r, out);
        return st;
    }
    print_table_head(&x, cfg, job, out);
    int valid = 0;
    for (int n = lo; n <= hi; n++) {
        sr_status st = plan_memory(&x, cfg, n, &r);
        if (st != SR_OK)
            return st;
        valid += r.valid;
        print_table_row(&x, &r, out);
    }
    fprintf(out,
            "%d of %d rank counts are valid for this job (batch_size = ranks x micro_batch x accumulation "
            "steps; the mesh divides the ranks); `shardrun plan --ranks N` details one, with the cheapest change "
            "when it does not fit\n",
            valid, hi - lo + 1);
    return SR_OK;
}
