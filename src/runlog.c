/* runlog.c — what a run says: the banner at start (each line from the
 * module that owns its facts: the device's line, the data plane's, the
 * engine's units, the memory plan, the checkpoint policy), the metrics
 * file's start, resume and checkpoint events, and a step's log line and
 * record.  Part of the run: train_impl.h. */
#include "srconfig.h"

#include "train_impl.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <jansson.h>

#include "clock.h"
#include "counts.h"
#include "flight.h"
#include "fsio.h"
#include "isa.h"
#include "line.h"
#include "mem.h"
#include "preempt.h"
#include "profile.h"
#include "promfile.h"
#include "signals.h"
#include "starts.h"
#include "testhook.h"
#include "trace.h"

static double mib(size_t b) { return (double)b / (1024.0 * 1024.0); }

/* The activation prediction of model.recompute (model.h sr_act_split). */
static void log_recompute(const sr_run *r) {
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

static const char *reshard_name(int64_t v) { return v == SR_RESHARD_TRUE ? "true" : v == 0 ? "false" : "N"; }

/* "groups: shard [0 1] [2 3]; replicate [0 2] [1 3]" (world ranks; the
 * first 16 groups of each kind, the rest counted). */
static void log_groups(sr_run *r) {
    const sr_mesh *m = &r->mesh;
    char line[2048];
    sr_line l = SR_LINE(line);
    sr_line_add(&l, "groups: shard");
    for (int rep = 0; rep < m->R && rep < 16; rep++) {
        sr_line_add(&l, " [");
        for (int k = 0; k < m->S; k++)
            sr_line_add(&l, k ? " %d" : "%d", sr_mesh_world_rank(m, rep, k));
        sr_line_add(&l, "]");
    }
    if (m->R > 16)
        sr_line_add(&l, " and %d more", m->R - 16);
    sr_line_add(&l, "; replicate");
    for (int k = 0; k < m->S && k < 16; k++) {
        sr_line_add(&l, " [");
        for (int rep = 0; rep < m->R; rep++)
            sr_line_add(&l, rep ? " %d" : "%d", sr_mesh_world_rank(m, rep, k));
        sr_line_add(&l, "]");
    }
    if (m->S > 16)
        sr_line_add(&l, " and %d more", m->S - 16);
    sr_log_info("%s", line);
}

/* SHARDRUN_BENCH_COUNTS: one line of this rank's counters (counts.h),
 * appended to DIR/rank<N>.tsv: "<what> <connections> <messages> <bytes>
 * <bootstrap ops>". */
static void bench_counts(const sr_run *r, const char *what, int64_t step) {
    const char *dir = sr_testhook()->bench_counts;
    if (!dir[0])
        return;
    char path[4200];
    snprintf(path, sizeof path, "%s/rank%d.tsv", dir, r->w->rank);
    FILE *f = fopen(path, "a");
    if (!f)
        return;
    fprintf(f, "%s %lld %llu %llu %llu %llu\n", what, (long long)step,
            (unsigned long long)sr_count_get(SR_COUNT_CONNECTIONS), (unsigned long long)sr_count_get(SR_COUNT_MESSAGES),
            (unsigned long long)sr_count_get(SR_COUNT_BYTES), (unsigned long long)sr_count_get(SR_COUNT_BOOT_OPS));
    fclose(f);
}

void sr_run_banner(sr_run *r) {
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
    char transport[128];
    const char *nccl = sr_plane_nccl_version(r->plane);
    snprintf(transport, sizeof transport, "%s%s%s", w->size > 1 ? sr_transport_address(r->tp) : "none",
             nccl ? " nccl=" : "", nccl ? nccl : "");
    sr_log_info_all(
        "rank %d/%d local %d/%d node %d host %s device=%s isa=%s job %s bootstrap %s transport %s restart=%lld "
        "resume=%s",
        w->rank, w->size, w->local_rank, w->local_size, w->node_id, w->host, device, sr_isa_name(sr_isa_current()),
        w->job_id, sr_world_bootstrap(w), transport, w->restart, r->resumed);
    bench_counts(r, r->start.step > 0 ? "resume" : "startup", r->start.step);
    const sr_model_dims *d = &r->model.d;
    char model_name[1300], dims[512];
    sr_log_info("model %s: %s (vocabulary padded to %d); %.2fM parameters; weights from %s; attention %s%s",
                sr_config_model_name(cfg, model_name, sizeof model_name), sr_model_dims_text(d, dims, sizeof dims),
                d->Vp, (double)r->model.n_params_real / 1e6, r->weights, r->flash ? "flash" : "materialized",
                cfg->attention == SR_ATTENTION_AUTO ? " (auto)" : "");
    sr_log_info("batch %lld sequence%s/step = %d rank%s x micro_batch %d x %d accumulation step%s; %lld step%s; "
                "threads %d per rank (one OpenMP pool, OpenBLAS single-threaded)",
                (long long)cfg->batch_size, cfg->batch_size == 1 ? "" : "s", w->size, w->size == 1 ? "" : "s", r->mb,
                r->accum, r->accum == 1 ? "" : "s", (long long)cfg->steps, cfg->steps == 1 ? "" : "s", r->threads);
    char comm[96];
    sr_plane_describe(r->plane, w->size, comm, sizeof comm);
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
    char data[4096];
    sr_mix_describe(r->mix, data, sizeof data);
    for (char *line = data, *nl; line; line = nl ? nl + 1 : NULL) { /* one line per data.mixture source */
        nl = strchr(line, '\n');
        if (nl)
            *nl = '\0';
        sr_log_info("data %s", line);
    }
    for (int i = 0; i < r->nval; i++)
        if (r->set_name[i])
            sr_log_info("val  %s: %s", r->set_name[i], sr_data_describe(r->val[i]));
        else
            sr_log_info("val  %s", sr_data_describe(r->val[i]));
    for (int k = 0; k < r->ntasks; k++)
        sr_log_info("task %s: %s, %d items, %d sequences (%s)", r->tasks[k].name, r->tasks[k].path, r->tasks[k].n,
                    r->tenc[k].nseq, r->tok ? "encoded by data.tokenizer" : "UTF-8 bytes");
    if (cfg->eval_every > 0 && r->nval == 0 && r->ntasks == 0)
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

/* The metrics file's checkpoint events: one per save committed since the
 * last call (rank 0 only writes; the others have no file). */
void sr_run_checkpoint_events(sr_run *r) {
    sr_ckpt_commit c;
    while (sr_ckpt_take_commit(r->ck, &c)) {
        r->save_s = c.duration_s; /* the lead of preemption.before_end */
        if (r->metrics)
            sr_metrics_event(r->metrics, "checkpoint", c.committed_step,
                             json_pack("{sI sI sf sI sb}", "started_step", (json_int_t)c.started_step, "committed_step",
                                       (json_int_t)c.committed_step, "duration_s", c.duration_s, "bytes",
                                       (json_int_t)c.bytes, "async", c.async));
    }
}

/* The start event (and the resume event of a run that loaded a
 * checkpoint): what `shardrun report` splits the file's runs by. */
/* reshard_after_forward as the job file says it: true, false or N. */
static json_t *reshard_json(int64_t v) {
    return v == SR_RESHARD_TRUE ? json_true() : v == 0 ? json_false() : json_integer((json_int_t)v);
}

void sr_run_start_events(sr_run *r) {
    char split[256];
    sr_startup_format(&r->startup, split, sizeof split);
    sr_log_info("start-up: %s", split);
    sr_starts_ready(r->cfg->ckpt_dir, r->w, &r->startup);
    if (!r->metrics)
        return;
    long long restarts = r->w->restart;
    const sr_config *cfg = r->cfg;
    /* the run's configuration, as the report shows it */
    sr_metrics_event(
        r->metrics, "start", r->start.step,
        json_pack("{sI sI si ss ss sI sI sI sI sI ss ss ss si si so so sb ss ss so}", "restart", (json_int_t)restarts,
                  "resume_step", (json_int_t)r->start.step, "world_size", r->w->size, "job_id", r->w->job_id, "preset",
                  sr_config_enum_name("model.preset", cfg->model_preset), "n_layer", (json_int_t)cfg->n_layer, "n_head",
                  (json_int_t)cfg->n_head, "n_embd", (json_int_t)cfg->n_embd, "seq_len", (json_int_t)cfg->seq_len,
                  "vocab_size", (json_int_t)cfg->vocab_size, "device", r->dev->line[0] ? r->dev->line : r->dev->name,
                  "param_dtype", sr_config_enum_name("sharding.mixed_precision.param_dtype", cfg->param_dtype),
                  "reduce_dtype", sr_config_enum_name("sharding.mixed_precision.reduce_dtype", cfg->reduce_dtype),
                  "mesh_shard", r->mesh.S, "mesh_replicate", r->mesh.R, "reshard_blocks",
                  reshard_json(cfg->reshard_blocks), "reshard_root", reshard_json(cfg->reshard_root),
                  "offload_optimizer", (int)cfg->offload_optimizer, "recompute",
                  sr_config_enum_name("model.recompute", cfg->recompute), "attention",
                  r->flash ? "flash" : "materialized", "startup", sr_startup_json(&r->startup)));
    const char *from = sr_ckpt_resumed_from(r->ck);
    if (from)
        sr_metrics_event(r->metrics, "resume", r->start.step, json_pack("{ss}", "from", from));
}

/* A step's throughput and MFU (percent; NaN when no peak is known). */
static void step_rates(const sr_run *r, const sr_step_out *o, double *tps, double *mfu) {
    *tps = (double)r->cfg->batch_size * r->T / o->seconds;
    *mfu = r->peak > 0 ? 100.0 * *tps * r->flops_tok / (r->peak * r->w->size) : NAN;
}

/* Straggler streaks: a rank over the median by more than log.straggler_pct
 * for STRAGGLER_INTERVALS intervals in a row is named once per streak. */
#define STRAGGLER_INTERVALS 3

static void stragglers(sr_run *r, int64_t s) {
    const sr_rank_times *t = &r->times;
    if (t->n < 2)
        return;
    double limit = t->busy_median * (1.0 + r->cfg->log_straggler_pct / 100.0);
    for (int i = 0; i < t->n; i++) {
        if (!(t->busy_ms[i] > limit)) {
            r->streak[i] = 0;
            continue;
        }
        if (++r->streak[i] != STRAGGLER_INTERVALS)
            continue;
        const char *host = r->hosts + (size_t)i * RANK_HOST_LEN;
        double over = t->busy_median > 0 ? 100.0 * (t->busy_ms[i] / t->busy_median - 1.0) : 0.0;
        sr_log_warn("straggler: rank %d (host %s) was busy %.1f ms per step, %.0f%% above the median %.1f ms of the "
                    "%d ranks, for %d log intervals in a row up to step %lld (log.straggler_pct %g; the others waited "
                    "for it: see busy_ms_ranks in log.metrics, or shardrun report)",
                    i, host, t->busy_ms[i], over, t->busy_median, t->n, STRAGGLER_INTERVALS, (long long)(s + 1),
                    r->cfg->log_straggler_pct);
        if (r->metrics)
            sr_metrics_event(r->metrics, "straggler", s + 1,
                             json_pack("{si ss sf sf sf}", "rank", i, "host", host, "busy_ms", t->busy_ms[i],
                                       "median_ms", t->busy_median, "over_pct", over));
    }
}

/* ---- the Prometheus textfile (promfile.h) ------------------------------ */

static sr_status prometheus_init(sr_run *r) {
    const char *tmpl = r->cfg->log_prometheus;
    r->prom_path[0] = '\0';
    if (!tmpl || !tmpl[0])
        return SR_OK;
    sr_status st = sr_prom_path(tmpl, r->w->host, r->w->job_id, r->prom_path, sizeof r->prom_path);
    if (st != SR_OK) {
        char w[1200], msg[1200];
        sr_config_where(r->cfg, "log.prometheus", w, sizeof w);
        snprintf(msg, sizeof msg, "%s", sr_error_message());
        return sr_error(st, "%s: %s", w, msg);
    }
    r->ckpt_seen_step = -1;
    return SR_OK;
}

/* When the newest checkpoint was committed, as this rank saw it: a
 * resumed run's by its directory's time, a save by when it showed. */
static double checkpoint_time(sr_run *r) {
    int64_t last = sr_ckpt_last_step(r->ck);
    if (last != r->ckpt_seen_step) {
        r->ckpt_seen_step = last;
        r->ckpt_seen_time = sr_clock_wall_s();
        const char *from = sr_ckpt_resumed_from(r->ck);
        struct stat sb;
        if (last == r->start.step && from && stat(from, &sb) == 0)
            r->ckpt_seen_time = (double)sb.st_mtim.tv_sec + 1e-9 * (double)sb.st_mtim.tv_nsec;
    }
    return r->ckpt_seen_time;
}

static sr_status prometheus(sr_run *r, int64_t s, const sr_step_out *o) {
    if (!r->prom_path[0])
        return SR_OK;
    /* every rank's node, memory by space and exposed communication: one
     * all-gather; local rank 0 of each node writes its node's ranks */
    enum { W = 2 + SR_NSPACE };
    int n = r->w->size;
    double mine[W];
    mine[0] = (double)r->w->node_id;
    mine[1] = o->comm_exposed_ms / 1e3;
    for (int sp = 0; sp < SR_NSPACE; sp++)
        mine[2 + sp] = (double)sr_mem_space_current(sp);
    double *all = sr_malloc(sizeof *all * W * (size_t)n);
    sr_prom_rank *ranks = sr_calloc((size_t)n, sizeof *ranks);
    if (!all || !ranks) {
        free(all);
        free(ranks);
        return sr_error_oom("the Prometheus sample");
    }
    sr_status st = sr_ctl_allgather(r->ctl, all, mine, sizeof mine);
    double ckpt_time = checkpoint_time(r);
    if (st == SR_OK && r->w->local_rank == 0) {
        int k = 0;
        for (int i = 0; i < n; i++) {
            const double *v = all + (size_t)i * W;
            if ((int)v[0] != r->w->node_id)
                continue;
            ranks[k] = (sr_prom_rank){.rank = i, .host = r->hosts + (size_t)i * RANK_HOST_LEN, .comm_exposed_s = v[1]};
            for (int sp = 0; sp < SR_NSPACE; sp++)
                ranks[k].mem_bytes[sp] = v[2 + sp];
            k++;
        }
        double tps, mfu, now = sr_clock_wall_s();
        step_rates(r, o, &tps, &mfu);
        sr_prom_sample ps = {.job = r->w->job_id,
                             .step = s + 1,
                             .steps = r->cfg->steps,
                             .loss = o->loss,
                             .tokens_per_s = tps,
                             .mfu = mfu / 100.0,
                             .val_loss = r->last_val,
                             .evals = &r->scores,
                             .ckpt_step = sr_ckpt_last_step(r->ck),
                             .ckpt_age_s = now - ckpt_time,
                             .time_s = now,
                             .n = k,
                             .ranks = ranks};
        sr_status wst = sr_prom_write(r->prom_path, &ps);
        if (wst != SR_OK && !r->prom_warned) {
            /* a monitoring file never fails the run */
            sr_log_warn("log.prometheus: %s; training goes on (warned once)", sr_error_message());
            r->prom_warned = true;
        }
    }
    free(all);
    free(ranks);
    return st;
}

/* Steps per second since the last log line, and the estimate of the
 * rest at that rate ("eta 41m"). */
static double interval_rate(const sr_run *r, int64_t s, double now) {
    double dt = now - r->log_time;
    return dt > 0 ? (double)(s + 1 - r->log_step) / dt : 0.0;
}

static void rate_text(double rate, char *out, size_t n) {
    snprintf(out, n, rate >= 10 ? "%.0f" : rate >= 1 ? "%.1f" : "%.2g", rate);
}

void sr_run_step_done(sr_run *r, int64_t s, const sr_step_out *o) {
    r->iv_loss_sum += o->loss;
    r->iv_loss_steps++;
    if (!r->progress || sr_run_log_due(r, s))
        return;
    double now = sr_clock_mono_s();
    /* the first step after a log line, then at most four times a second */
    if (r->log_step != s && now - r->progress_time < 0.25)
        return;
    r->progress_time = now;
    double rate = interval_rate(r, s, now);
    char rs[32], eta[32];
    rate_text(rate, rs, sizeof rs);
    sr_clock_duration(rate > 0 ? (double)(r->cfg->steps - s - 1) / rate : 0.0, 0, eta, sizeof eta);
    sr_log_progress("step %lld/%lld | loss %.4f | %s step/s | eta %s", (long long)(s + 1), (long long)r->cfg->steps,
                    o->loss, rs, eta);
}

sr_status sr_run_log_step(sr_run *r, int64_t s, const sr_step_out *o, bool evaluated) {
    bench_counts(r, "step", s + 1);
    const sr_config *cfg = r->cfg;
    /* the straggler report's times are gathered on logged steps only (a
     * preemption's stop step has none) */
    bool gathered = sr_run_log_due(r, s);
    if (gathered)
        stragglers(r, s);
    double tps, mfu;
    step_rates(r, o, &tps, &mfu);
    double loss_mean = r->iv_loss_steps > 0 ? r->iv_loss_sum / (double)r->iv_loss_steps : o->loss;
    int64_t loss_steps = r->iv_loss_steps;
    r->iv_loss_sum = 0.0;
    r->iv_loss_steps = 0;
    double now = sr_clock_mono_s(), rate = interval_rate(r, s, now);
    r->log_step = s + 1;
    r->log_time = now;
    char mfu_s[32], elapsed[32], rs[32], eta[32];
    snprintf(mfu_s, sizeof mfu_s, isfinite(mfu) ? "%.1f%%" : "n/a", mfu);
    sr_clock_duration(now - r->t_start, 1, elapsed, sizeof elapsed);
    rate_text(rate, rs, sizeof rs);
    sr_clock_duration(rate > 0 ? (double)(cfg->steps - s - 1) / rate : 0.0, 0, eta, sizeof eta);
    sr_log_info("step %6lld/%lld | loss %.4f | lr %.2e | norm %.4f | %.0f tok/s | mfu %s | mem %.1f MiB | comm "
                "exposed %.1f ms | %.1f ms | loss_mean %.4f | elapsed %s | %s step/s | eta %s",
                (long long)(s + 1), (long long)cfg->steps, o->loss, o->lr, o->norm, tps, mfu_s,
                mib(sr_mem_total_peak()), o->comm_exposed_ms, o->seconds * 1e3, loss_mean, elapsed, rs, eta);
    char by_source[SR_MIX_MAX_SOURCES * (SR_MIX_NAME_MAX + 32)];
    sr_mix_tokens_json(r->mix, by_source, sizeof by_source);
    sr_step_record rec = {.step = s + 1,
                          .loss = o->loss,
                          .loss_mean = loss_mean,
                          .loss_steps = loss_steps,
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
                          .evals = &r->scores,
                          .nccl = sr_plane_nccl_version(r->plane),
                          .tokens_by_source = by_source[0] ? by_source : NULL,
                          .times = gathered && r->times.n ? &r->times : NULL};
    sr_metrics_step(r->metrics, &rec);
    return prometheus(r, s, o);
}

sr_status sr_run_log_eval(sr_run *r, int64_t s, const sr_step_out *o) { return prometheus(r, s, o); }

bool sr_run_log_due(const sr_run *r, int64_t s) {
    return (s + 1) % r->cfg->log_every == 0 || s == 0 || s + 1 == r->cfg->steps;
}

/* The flight recorder (flight.h), before the planes start.  Its ring is a
 * plain calloc, outside the accounting: a recorder that cannot have its
 * memory is off with a warning, not a failed run (and a run under
 * SHARDRUN_TEST_ALLOC_FAIL counts the same allocations with it or without). */
sr_status sr_run_start_observers(sr_run *r) {
    const sr_config *cfg = r->cfg;
    sr_flight_opts fo = {cfg->log_flight_recorder,
                         cfg->log_flight_dir,
                         cfg->ckpt_dir ? cfg->ckpt_dir : "",
                         r->w->rank,
                         r->w->size,
                         r->w->host,
                         r->w->job_id,
                         r->w->restart,
                         cfg->comm_timeout_s};
    if (!sr_flight_init(&fo))
        sr_log_warn("flight recorder: no memory for %lld entries: it is off", (long long)cfg->log_flight_recorder);
    else
        sr_signals_quit_dumps();
    if (sr_flight_on()) {
        /* the dump is state, replaced by name (never through a link): what
         * is there must be a regular file or nothing */
        char path[4200];
        struct stat sb;
        sr_fmt(path, sizeof path, "%s/rank%d.json", sr_flight_dir(), r->w->rank);
        if (lstat(path, &sb) == 0 && !S_ISREG(sb.st_mode))
            return sr_error_wrap(sr_fsio_own_refused(path, sb.st_mode), "log.flight_dir");
    }
    char dir[4096], job[300];
    sr_flight_run_dir(dir, sizeof dir, "trace", cfg->log_trace_dir, cfg->ckpt_dir, r->w->job_id, r->w->restart, job,
                      sizeof job); /* beside the flight recorder's */
    sr_trace_opts to = {.first = cfg->log_trace_first,
                        .last = cfg->log_trace_last,
                        .dir = dir,
                        .rank = r->w->rank,
                        .world_size = r->w->size,
                        .host = r->w->host,
                        .job = job,
                        .restart = r->w->restart};
    sr_trace_init(&to); /* its collectives come from the recorder's records */
    sr_flight_run_dir(dir, sizeof dir, "profile", NULL, cfg->ckpt_dir, r->w->job_id, r->w->restart, job, sizeof job);
    sr_profile_opts po = {r->w->rank, dir};
    sr_status st = sr_profile_open(&r->prof, r->dev, cfg->steps, &po);
    return st != SR_OK ? st : prometheus_init(r);
}

/* Every rank's host name, for the straggler report (one all-gather), and
 * the report's per-rank arrays. */
sr_status sr_run_gather_hosts(sr_run *r) {
    int n = r->w->size;
    r->hosts = sr_calloc((size_t)n, RANK_HOST_LEN);
    r->busy_ms = sr_calloc((size_t)n, sizeof *r->busy_ms);
    r->wait_ms = sr_calloc((size_t)n, sizeof *r->wait_ms);
    r->streak = sr_calloc((size_t)n, sizeof *r->streak);
    if (!r->hosts || !r->busy_ms || !r->wait_ms || !r->streak)
        return sr_error_oom("the straggler report's per-rank arrays");
    char mine[RANK_HOST_LEN] = {0};
    snprintf(mine, sizeof mine, "%.*s", RANK_HOST_LEN - 1, r->w->host);
    return sr_ctl_allgather(r->ctl, r->hosts, mine, RANK_HOST_LEN);
}

/* The step's agreement on a logged step: every rank's values of the
 * agreement (SR_RUN_AGREE_N), busy and waiting seconds of the interval and
 * its steps all-gathered (one small collective in place of the sum), the
 * values summed here in rank order — the same on every rank — and the
 * interval's busy and wait times per rank handed to the straggler report. */
static sr_status agree_and_gather(sr_run *r, double red[SR_RUN_AGREE_N]) {
    enum { N = SR_RUN_AGREE_N, W = N + 3 };
    int n = r->w->size;
    double mine[W] = {[N] = r->iv_busy, [N + 1] = r->iv_wait, [N + 2] = (double)r->iv_steps};
    memcpy(mine, red, sizeof *red * N);
    double *all = sr_malloc(sizeof *all * W * (size_t)n);
    if (!all)
        return sr_error_oom("the step agreement's gather");
    sr_status st = sr_ctl_allgather(r->ctl, all, mine, sizeof mine);
    if (st == SR_OK) {
        for (int k = 0; k < N; k++)
            red[k] = 0.0;
        for (int i = 0; i < n; i++) {
            const double *v = all + (size_t)i * W;
            for (int k = 0; k < N; k++)
                red[k] += v[k];
            double steps = v[N + 2] > 0 ? v[N + 2] : 1.0;
            r->busy_ms[i] = v[N] / steps * 1e3;
            r->wait_ms[i] = v[N + 1] / steps * 1e3;
        }
        r->iv_busy = r->iv_wait = 0.0;
        r->iv_steps = 0;
        r->times = (sr_rank_times){.n = n, .busy_ms = r->busy_ms, .wait_ms = r->wait_ms};
        sr_rank_times_fill(&r->times, r->hosts, RANK_HOST_LEN);
    }
    free(all);
    return st;
}

/* The step's agreement on red[0..SR_RUN_AGREE_N), summed over the ranks:
 * on a logged step (sr_run_log_due) with every rank's busy and wait times
 * of the interval gathered in the same collective into r->busy_ms,
 * r->wait_ms, r->times, else a plain sum. */
static sr_status agree(sr_run *r, int64_t s, double red[SR_RUN_AGREE_N]) {
    return sr_run_log_due(r, s) ? agree_and_gather(r, red) : sr_ctl_sum(r->ctl, red, SR_RUN_AGREE_N);
}

sr_status sr_run_step_agree(sr_run *r, int64_t s, double loss_sum, sr_step_clock *c, sr_step_out *o, sr_status st) {
    const sr_config *cfg = r->cfg;
    bool clock_due = r->w->rank == 0 && cfg->ckpt_every_minutes > 0 &&
                     sr_clock_mono_s() - r->last_save >= cfg->ckpt_every_minutes * 60.0;
    double red[SR_RUN_AGREE_N] = {[SR_AGREE_LOSS] = loss_sum,
                                  [SR_AGREE_SIGNALLED] = sr_preempt_pending() ? 1.0 : 0.0,
                                  [SR_AGREE_CLOCK_DUE] = clock_due ? 1.0 : 0.0};
    sr_run_slurm_step(r, s, red); /* rank 0: the job's end near (preemption.before_end), the comment */
    /* the straggler report: this rank's busy and waiting time so far in
     * the log interval, gathered with the step's agreement on logged steps */
    c->ta = sr_clock_mono_s();
    double waited = (double)(r->dev->comm_wait_ns - c->comm0) / 1e9;
    r->iv_busy += c->ta - c->t0 - waited;
    r->iv_wait += waited;
    r->iv_steps++;
    sr_dev_watch(r->dev, 0); /* the agreement waits on peers: the transport's deadlines */
    if (st == SR_OK)
        SR_TRACE_PHASE("agreement", st = agree(r, s, red));
    if (st != SR_OK)
        return st;
    c->tb = sr_clock_mono_s();
    c->comm1 = r->dev->comm_wait_ns;
    r->iv_wait += c->tb - c->ta;                                     /* the agreement waits for the slowest rank */
    o->loss = red[SR_AGREE_LOSS] / ((double)cfg->batch_size * r->T); /* the mean per-token loss */
    o->end_near = red[SR_AGREE_END_NEAR] > 0;
    o->end_time = red[SR_AGREE_END_TIME];
    o->stop = red[SR_AGREE_SIGNALLED] > 0 || o->end_near;
    o->signalled = (int)red[SR_AGREE_SIGNALLED];
    o->clock_due = red[SR_AGREE_CLOCK_DUE] > 0;
    if (s + 1 == sr_testhook()->nan_step)
        o->loss = NAN;
    if (!isfinite(o->loss) || !isfinite(o->norm))
        return sr_error(SR_ERR_TRAIN,
                        "step %lld: non-finite %s (loss %g, gradient norm %g); training stopped (hint: lower train.lr, "
                        "raise train.warmup_steps, or set train.grad_clip)",
                        (long long)(s + 1), isfinite(o->loss) ? "gradient norm" : "loss", o->loss, o->norm);
    return SR_OK;
}

void sr_run_first_step_memory(const sr_run *r) {
    if (!r->dev->used_bytes)
        return;
    size_t used = r->dev->used_bytes(r->dev);
    size_t grown = used > r->dev->used_at_open ? used - r->dev->used_at_open : 0;
    sr_log_info_all("device memory after the first step: %.1f MiB in use (cudaMemGetInfo) above the %.1f MiB "
                    "at start; accounted %.1f MiB (peak %.1f) + NCCL %.1f MiB",
                    mib(grown), mib(r->dev->used_at_open), mib(sr_mem_space_current(SR_SPACE_DEVICE)),
                    mib(sr_mem_space_peak(SR_SPACE_DEVICE)), mib(sr_plane_device_bytes(r->plane)));
}

/* The flight recorder's line at the end of a run: records per step and
 * the history its ring holds; for the runs that may need a dump (several
 * ranks, a device other than the CPU) or under --verbose. */
static void flight_line(const sr_run *r) {
    bool needed = r->w->size > 1 || r->dev->kind != SR_DEV_CPU || sr_log_verbose();
    if (needed && sr_flight_on() && sr_flight_steps() > 0) {
        double per = (double)sr_flight_recorded() / (double)sr_flight_steps();
        sr_log_info("flight recorder: %llu records in %lld steps (%.1f per step; its ring of %lld holds the last %.0f "
                    "steps); dumps go to %s",
                    (unsigned long long)sr_flight_recorded(), (long long)sr_flight_steps(), per,
                    (long long)r->cfg->log_flight_recorder, per > 0 ? (double)r->cfg->log_flight_recorder / per : 0.0,
                    sr_flight_dir());
    }
}

void sr_run_done_lines(const sr_run *r, int64_t end, double seconds) {
    int64_t trained = end - r->start.step;
    if (r->start.step > 0)
        sr_log_info("done: %lld steps (%lld to %lld, resumed at %lld) in %.1f s; loss %.4f -> %.4f", (long long)trained,
                    (long long)r->start.step + 1, (long long)end, (long long)r->start.step, seconds, r->first_loss,
                    r->last_loss);
    else
        sr_log_info("done: %lld steps in %.1f s; loss %.4f -> %.4f", (long long)trained, seconds, r->first_loss,
                    r->last_loss);
    sr_metrics_log_memory("at end");
    flight_line(r);
    if (r->dev->hb)
        sr_log_info(
            "happens-before checker: no race found; %lld steps made %lld host waits for the device, %lld in all "
            "(evaluations, checkpoints, set-up)",
            r->hb_steps, r->hb_step_waits, sr_dev_host_waits(r->dev));
}
