/* train.c — the training run of one rank, as a sequence of the modules
 * that own each part: setup (the device table and its agreement, the job
 * checks, the memory plan, data, the engine on its data plane, model.init
 * and the resume) and teardown, one training step, and what follows a
 * step (evaluation, the log, the sample, saves, the preemption stop).  See
 * train.h; what the run says is runlog.c's.
 *
 * Every rank runs the same sequence of collectives: the engine's (gathers,
 * reductions), the control plane's (one sum per step carrying the loss, the
 * ranks that saw a preemption signal and rank 0's clock; agreements inside
 * checkpoint saves and loads), in the same order, so a decision any rank
 * makes from them is the same on every rank. */
#include "srconfig.h"

#include "train_impl.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "clock.h"
#include "flight.h"
#include "isa.h"
#include "mem.h"
#include "paramdump.h"
#include "preempt.h"
#include "profile.h"
#include "rlimits.h"
#include "sample.h"
#include "starts.h"
#include "testhook.h"
#include "trace.h"
#include "vec.h"

/* ------------------------------------------------------------------------ */
/* setup and teardown */

static sr_status open_data(sr_run *r) {
    const sr_config *cfg = r->cfg;
    sr_status st;
    /* (its ids against the vocabulary: sr_job_check_data, before the run) */
    if (cfg->data_tokenizer && *cfg->data_tokenizer &&
        (st = sr_tokenizer_load(&r->tok, cfg->data_tokenizer, "data.tokenizer")) != SR_OK)
        return sr_error_wrap(st, "data.tokenizer");
    if ((st = sr_mix_open(&r->mix, cfg, r->T)) != SR_OK) /* data.mixture, data.train or the embedded corpus */
        return st;
    return sr_run_open_evals(r); /* data.val's sets, train.eval_tasks */
}

/* The lowest ISA level any rank supports becomes every rank's (isa.h). */
static sr_status agree_isa(sr_run *r) {
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
static sr_status check_fds(sr_run *r) {
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

/* Model, transport, control plane, data plane, engine; connected; NCCL
 * when the data plane needs it. */
static sr_status open_engine(sr_run *r) {
    sr_model_dims dims = sr_job_model_dims(r->cfg, r->T);
    double t0 = sr_clock_mono_s();
    sr_status st = sr_model_init(&r->model, dims, r->ops, r->dev, r->mb, false);
    r->model_ok = true;
    sr_startup_add(SR_PHASE_MODEL, t0);
    t0 = sr_clock_mono_s();
    if (st == SR_OK)
        st = sr_transport_open(&r->tp, r->w, &r->job.transport);
    if (st == SR_OK)
        st = sr_ctl_open(&r->ctl, r->tp, r->w->size);
    sr_plane_opts po = {(int)r->cfg->comm_backend, r->cfg->comm_timeout_s, r->job.transport.interface};
    if (st == SR_OK)
        st = sr_plane_open(&r->plane, r->dev, r->tp, &po);
    sr_startup_add(SR_PHASE_BOOTSTRAP, t0);
    t0 = sr_clock_mono_s();
    if (st == SR_OK)
        st = sr_fsdp_init(&r->fsdp, &r->model, &r->mesh, &r->job.fsdp, r->plane);
    sr_startup_add(SR_PHASE_MODEL, t0);
    t0 = sr_clock_mono_s();
    if (st == SR_OK)
        st = check_fds(r);
    if (st == SR_OK) {
        sr_testhook_pause_point("before_connect", 0, r->w->rank);
        st = sr_transport_connect(r->tp);
    }
    if (st == SR_OK)
        st = agree_isa(r);
    if (st == SR_OK)
        st = sr_plane_start(r->plane, r->w);
    sr_startup_add(SR_PHASE_BOOTSTRAP, t0);
    return st;
}

/* model.init on a run that will start fresh is read before anything is
 * written — the metrics file, the checkpoint directory — so a bad file
 * changes nothing on disk (a run that turns out fresh only after the
 * resume scan reads it then). */
static sr_status precheck_init(sr_run *r) {
    const sr_config *cfg = r->cfg;
    if (!cfg->model_init || !cfg->model_init[0])
        return SR_OK;
    int64_t fresh = r->w->rank == 0 && sr_ckpt_fresh_for_sure(&r->job.ckpt);
    sr_status st = sr_ctl_broadcast(r->ctl, &fresh, 1, 0);
    return st != SR_OK || !fresh ? st : sr_modelinit_load(&r->init, cfg->model_init, r->fsdp, &r->model, r->ctl, r->w);
}

/* Metrics file, signal handlers, checkpoint directory, resume. */
static sr_status open_run_state(sr_run *r) {
    const sr_config *cfg = r->cfg;
    double t0 = sr_clock_mono_s();
    sr_status st = precheck_init(r);
    sr_startup_add(SR_PHASE_CHECKPOINT, t0);
    if (st != SR_OK)
        return st;
    if (r->w->rank == 0) {
        /* a resumed run appends (checkpoint.resume is decided below; the
         * file is truncated only when no checkpoint could apply) */
        st = sr_metrics_open(&r->metrics, cfg->log_metrics, cfg->log_tensorboard, sr_ckpt_may_resume(&r->job.ckpt));
        if (st != SR_OK)
            return st;
        if (r->dev->emulated)
            sr_metrics_label_device(r->metrics, r->dev->name); /* and every record */
    }
    /* preemption handlers first, so a signal during the resume is kept */
    if (cfg->ckpt_dir && cfg->ckpt_dir[0])
        st = sr_preempt_install(cfg->preempt_signals.items, cfg->preempt_signals.count);
    t0 = sr_clock_mono_s();
    if (st == SR_OK && (st = sr_ckpt_open(&r->ck, &r->job.ckpt, r->w, r->ctl, &r->model, r->fsdp)) == SR_OK)
        st = sr_ckpt_mem_open(&r->mem, r->ck, &r->job.transport); /* the memory tier, closed with r->ck */
    sr_startup_add(SR_PHASE_CHECKPOINT, t0);
    /* the data it trains on, recorded in and compared with checkpoints */
    if (st == SR_OK && (sr_ckpt_enabled(r->ck) || sr_ckpt_may_resume(&r->job.ckpt))) {
        sr_prov_source src[SR_MIX_MAX_SOURCES];
        for (int k = 0; k < sr_mix_count(r->mix); k++)
            src[k].data = sr_mix_data(r->mix, k, &src[k].name);
        st = sr_provenance_collect(&r->data_rec, src, sr_mix_count(r->mix), r->val, r->nval, r->tok, cfg->ckpt_dir,
                                   r->ctl);
        if (st == SR_OK)
            sr_ckpt_set_data(r->ck, &r->data_rec, cfg->data_allow_changed);
    }
    snprintf(r->resumed, sizeof r->resumed, "fresh");
    t0 = sr_clock_mono_s();
    if (st == SR_OK)
        st = sr_ckpt_resume_tiers(r->ck, r->mem, &r->start, r->resumed, sizeof r->resumed);
    bool init = cfg->model_init && cfg->model_init[0];
    if (st == SR_OK) /* each source's cursor, the weights' changes */
        sr_mix_resume(r->mix, r->start.step, r->start.cursor, &r->start.mix);
    if (st == SR_OK && r->start.step > 0)
        snprintf(r->weights, sizeof r->weights, "checkpoint step %lld", (long long)r->start.step);
    else
        snprintf(r->weights, sizeof r->weights, "seed %lld", (long long)cfg->seed);
    if (st == SR_OK && init && r->start.step > 0)
        sr_log_info("model.init: ignored (%s): the run resumes from the checkpoint of step %lld", cfg->model_init,
                    (long long)r->start.step);
    else if (st == SR_OK && init && !r->init.loaded)
        st = sr_modelinit_load(&r->init, cfg->model_init, r->fsdp, &r->model, r->ctl, r->w);
    sr_startup_add(SR_PHASE_CHECKPOINT, t0);
    if (st == SR_OK && r->init.loaded) {
        sr_ckpt_set_init(r->ck, r->init.path, r->init.sha256);
        sr_fmt(r->weights, sizeof r->weights, "model.init %s", r->init.path);
    }
    if (st == SR_OK) /* the crash-loop guard; then a fresh start begins a new metrics file */
        st = sr_starts_begin(cfg->ckpt_dir, r->start.step, cfg->preempt_max_stalled, cfg->log_metrics, r->w, r->ctl);
    if (st == SR_OK)
        st = sr_metrics_begin(r->metrics, r->start.step);
    return st;
}

static sr_status setup(sr_run *r) {
    const sr_config *cfg = r->cfg;
    r->threads = sr_ops_set_threads((int)cfg->threads);
    r->mb = (int)sr_config_micro_batch(cfg, r->w->size);
    r->accum = (int)sr_config_accum_steps(cfg, r->w->size);
    r->T = (int)cfg->seq_len;
    double t0 = sr_clock_mono_s();
    sr_status st = sr_device_open_run(&r->dev, cfg, r->w);
    sr_startup_add(SR_PHASE_DEVICE, t0);
    if (st == SR_OK)
        st = sr_job_check(&r->resolved, r->w->size, r->w->rank, r->dev, &r->mesh, &r->param_auto, &r->flash);
    if (st == SR_OK) {
        r->ops = sr_device_ops(r->dev, (sr_dtype)cfg->param_dtype, r->flash);
        st = sr_job_init(&r->job, cfg);
    }
    t0 = sr_clock_mono_s();
    if (st == SR_OK) /* before anything sized by the model is allocated */
        st = sr_memplan_run(&r->plan, cfg, &r->job, &r->mesh, r->mb, r->threads, r->ops, r->dev, r->w);
    sr_startup_add(SR_PHASE_MODEL, t0);
    if (st == SR_OK)
        st = open_data(r);
    if (st == SR_OK)
        st = sr_run_start_observers(r);
    if (st == SR_OK)
        st = open_engine(r);
    if (st == SR_OK)
        st = sr_run_agree_evals(r);
    t0 = sr_clock_mono_s();
    if (st == SR_OK)
        st = sr_run_gather_hosts(r);
    sr_startup_add(SR_PHASE_BOOTSTRAP, t0);
    if (st != SR_OK)
        return st;
    /* every micro-batch of a step its own slot, in memory the forward's
     * copies read asynchronously until the step's one host wait */
    size_t tokens = sr_train_io_bytes(r->accum, r->mb, r->T) / 2;
    r->in = sr_dev_io_alloc(r->dev, tokens);
    r->tg = sr_dev_io_alloc(r->dev, tokens);
    if (!r->in || !r->tg)
        return sr_error_oom("the token buffers");
    return open_run_state(r);
}

static sr_status teardown(sr_run *r, sr_status st) {
    sr_dev_watch(r->dev, 0); /* a step that failed may have left it armed */
    /* A failed run prints its error first: freeing a broken device's memory
     * can block.  The preemption handlers stay until the process exits: a late
     * SIGTERM (Slurm's, after GraceTime) must not kill a committed preemption. */
    if (st == SR_ERR_PEER || st == SR_ERR_INTERNAL) /* a lost peer, a stall, a bug: what each rank last did */
        sr_flight_dump(st == SR_ERR_PEER ? "exit 69" : "exit 70", sr_error_message()); /* its line, then the error */
    if (st != SR_PREEMPTED)
        sr_error_emit(st);
    sr_trace_finish(); /* a run that ends inside log.trace_steps' window */
    sr_run_slurm_close(r);
    if (st == SR_OK || st == SR_PREEMPTED) /* for the crash-loop guard, under the directory's lock */
        sr_starts_end(r->cfg->ckpt_dir, r->w, st == SR_OK ? "done" : "preempted", sr_ckpt_last_step(r->ck));
    sr_ckpt_close(r->ck);
    sr_status mst = sr_metrics_close(r->metrics);
    if (st == SR_OK)
        st = mst;
    sr_dev_io_free(r->dev, r->in);
    sr_dev_io_free(r->dev, r->tg);
    free(r->oracle_in);
    free(r->oracle_tg);
    sr_plane_stop(r->plane); /* NCCL first: its watchdog may be ending the run */
    sr_fsdp_free(r->fsdp);
    sr_plane_close(r->plane);
    sr_ctl_close(r->ctl);
    sr_transport_close(r->tp);
    if (r->model_ok)
        sr_model_free(&r->model);
    sr_mix_close(r->mix);
    sr_run_close_evals(r);
    sr_tokenizer_free(r->tok);
    sr_provenance_free(&r->data_rec);
    sr_job_free(&r->job);
    sr_profile_free(r->prof);
    sr_device_close(r->dev);
    sr_flight_shutdown();
    free(r->hosts);
    free(r->busy_ms);
    free(r->wait_ms);
    free(r->streak);
    return st;
}

/* ------------------------------------------------------------------------ */
/* one step */

/* The micro-batches of step s: data, forward, backward (the oracle's
 * forward beside each), then the gradients' reductions and norm; the
 * loss sum into *loss_sum, the norm into o->norm. */
static sr_status micro_batches(sr_run *r, int64_t s, double *loss_sum, sr_step_out *o) {
    const sr_config *cfg = r->cfg;
    const double dloss = 1.0 / ((double)cfg->batch_size * r->T);
    const int64_t rank_seqs = (int64_t)r->mb * r->accum; /* this rank's slice of every global batch */
    sr_status st = SR_OK;
    for (int a = 0; a < r->accum && st == SR_OK; a++) {
        char ctx[96];
        snprintf(ctx, sizeof ctx, "during step %lld (micro-batch %d/%d)", (long long)(s + 1), a + 1, r->accum);
        sr_preempt_notice(r->w->rank, ctx);
        /* global cursor: the step owns sequences [cursor, cursor+batch)
         * (cursor = s*batch in a run that never changed batch_size);
         * rank r takes the fixed slice r*mb*accum .. of it */
        uint64_t off = (uint64_t)(r->w->rank * rank_seqs) + (uint64_t)a * (uint64_t)r->mb;
        int *in = r->in + (size_t)a * r->mb * r->T, *tg = r->tg + (size_t)a * r->mb * r->T;
        SR_TRACE_PHASE("data", st = sr_mix_batch(r->mix, r->cursor, (uint64_t)cfg->batch_size, off, r->mb,
                                                 (uint64_t)cfg->seed, in, tg));
        if (st != SR_OK)
            break;
        /* (the oracle reads this forward's logits: the two-op classifier) */
        SR_TRACE_PHASE("forward",
                       st = sr_fsdp_forward(r->fsdp, in, tg, r->mb, sr_oracle_on(r, s) ? 0.0f : (float)dloss));
        if (st == SR_OK && sr_oracle_on(r, s))
            st = sr_oracle_forward(r, a);
        if (st == SR_OK)
            SR_TRACE_PHASE("backward", st = sr_fsdp_backward(r->fsdp, (float)dloss, a == r->accum - 1));
    }
    o->norm = 0.0;
    /* AdamW ahead of the host wait where the engine can (one rank): the
     * loss and norm are still checked before the next forward
     * (sr_run_step_agree); not under the oracle, which reads the
     * gradients and the parameters before the update */
    sr_fsdp_update early = {s + 1, sr_lr_at(&r->job.schedule, s), &r->job.adamw, cfg->grad_clip};
    if (st == SR_OK) /* the step's one host wait */
        SR_TRACE_PHASE("gradients (reductions, norm)",
                       st = sr_fsdp_finish_grads(r->fsdp, loss_sum, &o->norm, sr_oracle_on(r, s) ? NULL : &early));
    return st;
}

/* The optimizer step (gradients clipped to train.grad_clip); under the
 * happens-before checker, the engine's rule that the host waits for the
 * device once per step. */
static sr_status optimize(sr_run *r, int64_t s, const sr_step_clock *c, sr_step_out *o) {
    const sr_config *cfg = r->cfg;
    float scale = sr_vec_clip_scale(o->norm, cfg->grad_clip);
    o->lr = sr_lr_at(&r->job.schedule, s);
    sr_status st;
    if (sr_oracle_on(r, s) && (st = sr_oracle_step(r, o)) != SR_OK)
        return st;
    sr_dev_watch(r->dev, s + 1);
    SR_TRACE_PHASE("optimizer", sr_fsdp_optimizer_step(r->fsdp, s + 1, o->lr, &r->job.adamw, scale));
    sr_dev_watch(r->dev, 0);
    if (!r->dev->hb)
        return SR_OK;
    long long waits = sr_dev_host_waits(r->dev) - c->waits0;
    r->hb_steps++;
    r->hb_step_waits += waits;
    if (waits != 1)
        return sr_error(SR_ERR_INTERNAL,
                        "happens-before checker: step %lld made %lld host waits for the device; the engine makes "
                        "one per step (SHARDRUN_TEST_HB)",
                        (long long)(s + 1), waits);
    return SR_OK;
}

static sr_status train_step(sr_run *r, int64_t s, sr_step_out *o) {
    sr_step_clock c = {.t0 = sr_clock_mono_s(), .waits0 = sr_dev_host_waits(r->dev), .comm0 = r->dev->comm_wait_ns};
    sr_flight_step_begin(s + 1); /* and log.trace_steps' window */
    sr_profile_step_begin(r->prof, s + 1);
    sr_preempt_test_hook(s + 1, r->w->rank);
    sr_dev_watch(r->dev, s + 1); /* the step a deadline names; the host thread watched while it enqueues */
    sr_status st;
    if (sr_oracle_on(r, s) && (st = sr_oracle_init(r)) != SR_OK)
        return st;
    sr_fsdp_begin_step(r->fsdp);
    double loss_sum = 0.0;
    st = micro_batches(r, s, &loss_sum, o);
    if ((st = sr_run_step_agree(r, s, loss_sum, &c, o, st)) != SR_OK || (st = optimize(r, s, &c, o)) != SR_OK)
        return st;
    if ((st = sr_mix_advance(r->mix, r->cursor, (uint64_t)r->cfg->batch_size)) != SR_OK)
        return st;
    r->cursor += (uint64_t)r->cfg->batch_size;
    double tc = sr_clock_mono_s(), waited_after = (double)(r->dev->comm_wait_ns - c.comm1) / 1e9;
    r->iv_busy += tc - c.tb - waited_after;
    r->iv_wait += waited_after;
    sr_flight_step_end();
    if ((st = sr_profile_step_end(r->prof, s + 1, r->metrics)) != SR_OK) /* SHARDRUN_CUDA_PROFILE's window */
        return st;
    o->seconds = sr_clock_mono_s() - c.t0;
    o->comm_exposed_ms = (double)(r->dev->comm_wait_ns - c.comm0) / 1e6;
    if (s == r->start.step) {
        r->first_loss = o->loss;
        sr_run_first_step_memory(r);
    }
    r->last_loss = o->loss;
    return SR_OK;
}

/* ------------------------------------------------------------------------ */
/* after a step */

static sr_status after_step(sr_run *r, int64_t s, sr_step_out *o, int *exit_code) {
    const sr_config *cfg = r->cfg;
    const char *gone; /* (the last step a data.mixture source can feed is the last too) */
    bool last = s + 1 == cfg->steps || sr_mix_exhausted(r->mix, r->cursor, (uint64_t)cfg->batch_size, &gone);
    bool evaluated = false;
    if (!o->stop && (r->nval || r->ntasks) && cfg->eval_every > 0 && ((s + 1) % cfg->eval_every == 0 || last)) {
        bool interrupted = false;
        sr_status st;
        SR_TRACE_PHASE("evaluation", st = sr_run_evaluate(r, s, &interrupted));
        if (st != SR_OK)
            return st;
        if (interrupted) {
            o->stop = true;
            sr_log_info("step %lld: evaluation interrupted by a preemption signal", (long long)(s + 1));
        } else {
            evaluated = true;
        }
    }
    /* logged steps, and the step a preemption stops at (its record ends the interval) */
    sr_status lst = sr_run_log_due(r, s) || last || o->stop ? sr_run_log_step(r, s, o, evaluated)
                    : evaluated                             ? sr_run_log_eval(r, s, o)
                                                            : SR_OK;
    if (lst != SR_OK)
        return lst;
    if (!o->stop && cfg->log_sample_every > 0 && (s + 1) % cfg->log_sample_every == 0) {
        sr_status st = sr_sample_during_training(r->fsdp, &r->model, r->ctl, r->w, s + 1, (uint64_t)cfg->seed,
                                                 r->threads, r->tok, &r->sample_skipped);
        if (st != SR_OK)
            return st;
    }
    if (o->stop && !last)
        return sr_run_preempt_stop(r, s, o, exit_code);
    /* an asynchronous save in flight commits once every rank has written */
    sr_status pst = sr_ckpt_poll(r->ck, s + 1, false);
    sr_run_checkpoint_events(r);
    if (pst != SR_OK)
        return pst;
    sr_ckpt_progress now;
    sr_run_progress(r, s + 1, &now);
    if (!last && (pst = sr_ckpt_mem_step(r->mem, &now)) != SR_OK) /* the memory tier's commit and save */
        return pst;
    bool periodic = sr_ckpt_enabled(r->ck) && !last &&
                    ((cfg->ckpt_every_steps > 0 && (s + 1) % cfg->ckpt_every_steps == 0) || o->clock_due);
    if (periodic) {
        sr_status st = sr_ckpt_save_async(r->ck, &now, NULL);
        sr_run_checkpoint_events(r);
        if (st != SR_OK)
            return st;
        r->last_save = sr_clock_mono_s();
    }
    return SR_OK;
}

/* The final checkpoint (of step `end`: train.steps, or the last a
 * data.mixture source could feed), the done line and (tests) the
 * parameter dump. */
static sr_status finish(sr_run *r, int64_t end) {
    sr_status pst = sr_ckpt_poll(r->ck, end, true);
    sr_run_checkpoint_events(r);
    if (pst != SR_OK)
        return pst;
    if (sr_ckpt_enabled(r->ck) && sr_ckpt_last_step(r->ck) != end) {
        sr_ckpt_progress fin;
        sr_run_progress(r, end, &fin);
        sr_status st = sr_ckpt_save(r->ck, &fin, NULL);
        sr_run_checkpoint_events(r);
        if (st != SR_OK)
            return st;
    }
    if ((pst = sr_ckpt_mem_remove(r->mem)) != SR_OK) /* the last step is in checkpoint.dir: the memory copies go */
        return pst;
    sr_run_done_lines(r, end, sr_clock_mono_s() - r->t_start);
    return SR_OK;
}

/* ------------------------------------------------------------------------ */

sr_status sr_train_run(const sr_config *cfg, sr_world *w, sr_train_result *res) {
    sr_run r = {.resolved = *cfg, .w = w, .first_loss = NAN, .last_loss = NAN, .last_val = NAN};
    r.cfg = &r.resolved;
    sr_status st = setup(&r);
    if (st != SR_OK)
        return teardown(&r, st);
    r.peak = sr_metrics_device_peak(r.dev, r.ops->act == SR_DT_BF16, r.threads, r.peak_how, sizeof r.peak_how);
    r.flops_tok = sr_model_flops_per_token(&r.model);
    sr_run_banner(&r);
    r.startup = sr_startup_read();
    sr_run_start_events(&r);
    sr_run_slurm_open(&r);
    const char *dump = sr_testhook()->dump_params;
    if (r.start.step >= cfg->steps) {
        sr_log_info("resume: the checkpoint is at step %lld and train.steps is %lld: nothing left to train",
                    (long long)r.start.step, (long long)cfg->steps);
        if (res)
            *res = (sr_train_result){0, NAN, NAN, NAN, 0};
        if (dump[0])
            st = sr_paramdump_params(r.fsdp, &r.model, dump);
        return teardown(&r, st);
    }
    r.t_start = r.last_save = r.log_time = sr_clock_mono_s();
    r.log_step = r.start.step;
    r.progress = w->rank == 0 && w->local_size == 1 && isatty(STDERR_FILENO);
    r.cursor = r.start.cursor;
    int exit_code = 0;
    int64_t s = r.start.step;
    st = sr_run_signalled_in_setup(&r, &exit_code);
    int64_t end = cfg->steps;
    for (; s < cfg->steps && st == SR_OK; s++) {
        if (sr_run_mixture_ends(&r, s)) { /* data.mixture_end: stop */
            end = s;
            break;
        }
        sr_step_out o = {0};
        st = train_step(&r, s, &o);
        if (st == SR_OK) {
            sr_run_step_done(&r, s, &o);
            st = after_step(&r, s, &o, &exit_code);
        }
    }
    if (st == SR_OK)
        st = finish(&r, end);
    if (st == SR_OK && dump[0])
        st = sr_paramdump_params(r.fsdp, &r.model, dump);
    if (res && (st == SR_OK || st == SR_PREEMPTED))
        *res =
            (sr_train_result){(st == SR_OK ? end : s) - r.start.step, r.first_loss, r.last_loss, r.last_val, exit_code};
    return teardown(&r, st);
}

size_t sr_train_io_bytes(int accum, int micro_batch, int T) {
    return 2 * (size_t)accum * (size_t)micro_batch * (size_t)T * sizeof(int); /* inputs and targets */
}
