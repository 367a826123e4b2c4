/* train.c — the training loop of one rank, progress line and metrics.
 * See train.h. */
#include "srconfig.h"

#include "train.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ckpt.h"
#include "data.h"
#include "device.h"
#include "fsdp.h"
#include "mem.h"
#include "model.h"
#include "ops.h"
#include "optim.h"
#include "preempt.h"
#include "world.h"

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

double sr_train_peak_flops(int threads, char *how, size_t how_len) {
    const char *env = getenv("SHARDRUN_PEAK_GFLOPS");
    if (env && *env) {
        char *end;
        double g = strtod(env, &end);
        if (*end == '\0' && g > 0) {
            snprintf(how, how_len, "%.1f GFLOP/s from SHARDRUN_PEAK_GFLOPS", g);
            return g * 1e9;
        }
    }
    double mhz = 0.0;
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (f) {
        char line[512];
        while (fgets(line, sizeof line, f))
            if (strncmp(line, "cpu MHz", 7) == 0) {
                const char *colon = strchr(line, ':');
                if (colon)
                    mhz = strtod(colon + 1, NULL);
                break;
            }
        fclose(f);
    }
    if (mhz <= 0)
        mhz = 2000.0;
    int per_cycle = 8;
    const char *isa = "SSE";
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f")) {
        per_cycle = 64;
        isa = "AVX-512 FMA";
    } else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
        per_cycle = 32;
        isa = "AVX2 FMA";
    }
#endif
    double peak = threads * mhz * 1e6 * per_cycle;
    snprintf(how, how_len, "%d core%s x %.2f GHz x %d FLOP/cycle (%s fp32) = %.1f GFLOP/s", threads,
             threads == 1 ? "" : "s", mhz / 1000.0, per_cycle, isa, peak / 1e9);
    return peak;
}

static double mib(size_t b) { return (double)b / (1024.0 * 1024.0); }

static void log_memory(const char *when) {
    char line[1024];
    size_t used = 0;
    for (int c = 0; c < SR_MEM_NCAT; c++)
        if (sr_mem_peak(c) > 0)
            used += (size_t)snprintf(line + used, sizeof line - used, " %s %.1f/%.1f", sr_mem_name(c),
                                     mib(sr_mem_current(c)), mib(sr_mem_peak(c)));
    sr_log_info("memory %s (MiB current/peak):%s; total %.1f/%.1f", when, line, mib(sr_mem_total_current()),
                mib(sr_mem_total_peak()));
}

static void json_memory(FILE *f) {
    for (int c = 0; c < SR_MEM_NCAT; c++)
        fprintf(f, ",\"mem_%s\":%zu,\"mem_%s_peak\":%zu", sr_mem_name(c), sr_mem_current(c), sr_mem_name(c),
                sr_mem_peak(c));
    fprintf(f, ",\"mem_total\":%zu,\"mem_total_peak\":%zu", sr_mem_total_current(), sr_mem_total_peak());
}

/* Validation loss: eval_batches global batches of the validation set in
 * file order; each rank evaluates its slice, the sums meet in an all-reduce.
 * Before every micro-batch the ranks agree whether a preemption signal has
 * arrived anywhere (every rank runs the same number of micro-batches); if
 * so the evaluation stops on all ranks and *interrupted is set. */
static sr_status evaluate(sr_fsdp *f, const sr_data *val, const sr_config *cfg, const sr_world *w, int mb, int T,
                          double *out, bool *interrupted) {
    *interrupted = false;
    int64_t total = cfg->eval_batches * cfg->batch_size, per_rank = total / w->size;
    int *in = malloc((size_t)mb * T * sizeof(int)), *tg = malloc((size_t)mb * T * sizeof(int));
    if (!in || !tg) {
        free(in);
        free(tg);
        return sr_error(SR_ERR_INTERNAL, "out of memory");
    }
    double sum = 0.0;
    sr_status st = SR_OK;
    for (int64_t done = 0; done < per_rank && st == SR_OK; done += mb) {
        double flag = sr_preempt_pending() ? 1.0 : 0.0;
        st = sr_fsdp_sum_world(f, &flag);
        if (st != SR_OK)
            break;
        if (flag > 0) {
            *interrupted = true;
            break;
        }
        int n = (int)(per_rank - done < mb ? per_rank - done : mb);
        sr_data_batch(val, (uint64_t)(w->rank * per_rank + done), n, false, 0, in, tg);
        st = sr_fsdp_eval(f, in, tg, n, &sum);
    }
    free(in);
    free(tg);
    if (st == SR_OK && !*interrupted)
        st = sr_fsdp_sum_world(f, &sum);
    *out = sum / (double)total;
    return st;
}

static double wall_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void wall_clock(double t, char *buf, size_t n) {
    time_t sec = (time_t)t;
    struct tm tm;
    gmtime_r(&sec, &tm);
    size_t k = strftime(buf, n, "%H:%M:%S", &tm);
    snprintf(buf + k, n - k, ".%03dZ", (int)((t - (double)sec) * 1000.0));
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
        if (!job || !*job) {
            sr_log_warn("preemption.requeue is scontrol but SLURM_JOB_ID is not set (not a Slurm job): exiting "
                        "with preemption.exit_status %d instead",
                        code);
        } else if (w->rank != 0) {
            code = 0;
        } else {
            code = scontrol_requeue(job) ? 0 : code;
        }
    }
    return code;
}

/* SHARDRUN_TEST_NAN_AT_STEP=N poisons the loss of step N (1-based), so the
 * test suite can prove that a non-finite loss stops training with status 1. */
static int64_t test_nan_step(void) {
    const char *e = getenv("SHARDRUN_TEST_NAN_AT_STEP");
    return e && *e ? strtoll(e, NULL, 10) : -1;
}

sr_status sr_train_run(const sr_config *cfg, sr_world *w, sr_train_result *res) {
    sr_status st = SR_OK;
    int threads = sr_ops_set_threads((int)cfg->threads);
    const int dp = w->size;
    int mb = (int)sr_config_micro_batch(cfg, dp);
    int accum = (int)sr_config_accum_steps(cfg, dp);
    int T = (int)cfg->seq_len;
    sr_model_dims dims = {(int)cfg->n_layer, (int)cfg->n_head, (int)cfg->n_embd, (int)cfg->vocab_size, 0, T};

    sr_data *train = NULL, *val = NULL;
    sr_model model;
    bool model_ok = false;
    sr_transport *tp = NULL;
    sr_fsdp *fsdp = NULL;
    sr_ckpt *ck = NULL;
    bool preempted = false;
    FILE *metrics = NULL;
    int *in = NULL, *tg = NULL;

    if (cfg->data_train.count)
        st = sr_data_open(&train, &cfg->data_train, T, cfg->vocab_size);
    else
        st = sr_data_open_embedded(&train, SR_DATA_TRAIN, T, cfg->vocab_size);
    if (st != SR_OK)
        goto out;
    if (cfg->data_val.count)
        st = sr_data_open(&val, &cfg->data_val, T, cfg->vocab_size);
    else if (!cfg->data_train.count)
        st = sr_data_open_embedded(&val, SR_DATA_VAL, T, cfg->vocab_size);
    if (st != SR_OK)
        goto out;

    st = sr_model_init(&model, dims, &sr_ops_cpu, mb, false);
    model_ok = true;
    if (st != SR_OK)
        goto out;
    st = sr_transport_open(&tp, w, cfg);
    if (st == SR_OK)
        st = sr_fsdp_init(&fsdp, &model, cfg, w, tp);
    if (st == SR_OK)
        st = sr_transport_connect(tp);
    if (st != SR_OK)
        goto out;
    in = malloc((size_t)mb * T * sizeof(int));
    tg = malloc((size_t)mb * T * sizeof(int));
    if (!in || !tg) {
        st = sr_error(SR_ERR_INTERNAL, "out of memory");
        goto out;
    }
    if (w->rank == 0 && cfg->log_metrics && cfg->log_metrics[0]) {
        /* a resumed run appends (checkpoint.resume is decided below; the
         * file is truncated only when no checkpoint could apply) */
        bool may_resume = cfg->ckpt_resume && strcmp(cfg->ckpt_resume, "never") != 0 &&
                          (strcmp(cfg->ckpt_resume, "auto") != 0 || (cfg->ckpt_dir && cfg->ckpt_dir[0]));
        metrics = fopen(cfg->log_metrics, may_resume ? "a" : "w");
        if (!metrics) {
            st = sr_error(SR_ERR_CANTCREAT, "%s: cannot create metrics file (log.metrics): %s", cfg->log_metrics,
                          strerror(errno));
            goto out;
        }
    }

    /* preemption handlers first, so a signal during the resume is kept */
    if (cfg->ckpt_dir && cfg->ckpt_dir[0])
        st = sr_preempt_install(cfg);
    if (st == SR_OK)
        st = sr_ckpt_open(&ck, cfg, w, &model, fsdp);
    sr_ckpt_progress prog = {0, 0};
    char resumed[64] = "fresh";
    if (st == SR_OK)
        st = sr_ckpt_resume(ck, &prog, resumed, sizeof resumed);
    if (st != SR_OK)
        goto out;

    char device[512];
    sr_device_describe(device, sizeof device, w->local_rank, w->local_size);
    const char *restart = getenv("SLURM_RESTART_COUNT");
    sr_log_info_all("rank %d/%d local %d/%d node %d host %s device=%s job %s transport %s restart=%s resume=%s",
                    w->rank, w->size, w->local_rank, w->local_size, w->node_id, w->host, device, w->job_id,
                    w->size > 1 ? sr_transport_address(tp) : "none", restart && *restart ? restart : "0", resumed);
    char peak_how[256];
    double peak = sr_train_peak_flops(threads, peak_how, sizeof peak_how);
    double flops_tok = sr_model_flops_per_token(&model);
    sr_log_info("model %s: n_layer %d, n_head %d, n_embd %d, vocab_size %d (padded %d), seq_len %d; %.2fM parameters",
                sr_config_enum_name("model.preset", cfg->model_preset), dims.L, dims.NH, dims.C, dims.V, model.d.Vp, T,
                (double)model.n_params_real / 1e6);
    sr_log_info("batch %lld sequences/step = %d rank%s x micro_batch %d x %d accumulation step%s; %lld steps; "
                "threads %d per rank (one OpenMP pool, OpenBLAS single-threaded)",
                (long long)cfg->batch_size, dp, dp == 1 ? "" : "s", mb, accum, accum == 1 ? "" : "s",
                (long long)cfg->steps, threads);
    sr_log_info("sharding: mesh shard %d x replicate %d, %d units (%lld block%s each + root), reshard_after_forward "
                "blocks %s root %s, param %s, reduce %s, prefetch %lld/%lld, grad_sync %s, comm %s",
                sr_fsdp_shard_size(fsdp), sr_fsdp_replicate_size(fsdp), sr_fsdp_units(fsdp),
                (long long)cfg->blocks_per_unit, cfg->blocks_per_unit == 1 ? "" : "s",
                cfg->reshard_blocks == SR_RESHARD_TRUE ? "true"
                : cfg->reshard_blocks == 0             ? "false"
                                                       : "N",
                cfg->reshard_root == SR_RESHARD_TRUE ? "true"
                : cfg->reshard_root == 0             ? "false"
                                                     : "N",
                sr_config_enum_name("sharding.mixed_precision.param_dtype", cfg->param_dtype),
                sr_config_enum_name("sharding.mixed_precision.reduce_dtype", cfg->reduce_dtype),
                (long long)cfg->prefetch_forward, (long long)cfg->prefetch_backward,
                sr_config_enum_name("sharding.grad_sync", cfg->grad_sync), w->size > 1 ? "tcp" : "none (1 rank)");
    sr_log_info("data %s", sr_data_describe(train));
    if (val)
        sr_log_info("val  %s", sr_data_describe(val));
    else if (cfg->eval_every > 0)
        sr_log_warn("train.eval_every is %lld but data.val is empty: no evaluation (set data.val to validation shards)",
                    (long long)cfg->eval_every);
    sr_log_info("mfu peak: %s", peak_how);
    if (ck && sr_ckpt_enabled(ck))
        sr_log_info("checkpoint: dir %s, every %lld steps / %g minutes, keep %lld%s; preemption signals handled, "
                    "requeue %s",
                    cfg->ckpt_dir, (long long)cfg->ckpt_every_steps, cfg->ckpt_every_minutes, (long long)cfg->ckpt_keep,
                    cfg->ckpt_keep_every ? " (+ keep_every)" : "",
                    sr_config_enum_name("preemption.requeue", cfg->preempt_requeue));
    else
        sr_log_info("checkpoint: none (checkpoint.dir is empty); preemption signals keep their default action");
    log_memory("at start");
    if (prog.step >= cfg->steps) {
        sr_log_info("resume: the checkpoint is at step %lld and train.steps is %lld: nothing left to train",
                    (long long)prog.step, (long long)cfg->steps);
        if (res)
            *res = (sr_train_result){prog.step, NAN, NAN, NAN, 0};
        const char *dump = getenv("SHARDRUN_TEST_DUMP_PARAMS");
        if (dump && *dump)
            st = sr_fsdp_dump_params(fsdp, dump);
        goto out;
    }

    const double dloss = 1.0 / ((double)cfg->batch_size * T);
    const int64_t nan_step = test_nan_step();
    const int64_t rank_seqs = (int64_t)mb * accum; /* this rank's slice of every global batch */
    double first_loss = NAN, last_loss = NAN, last_val = NAN;
    double t_start = now_s(), last_save = t_start;
    uint64_t cursor = prog.cursor;
    bool noticed = false;
    int exit_code = 0;
    for (int64_t s = prog.step; s < cfg->steps; s++) {
        double t0 = now_s();
        sr_preempt_test_hook(s + 1, w->rank);
        sr_fsdp_begin_step(fsdp);
        double loss_sum = 0.0;
        for (int a = 0; a < accum && st == SR_OK; a++) {
            if (!noticed && sr_preempt_pending()) {
                noticed = true;
                char when[32];
                wall_clock(sr_preempt_time(), when, sizeof when);
                sr_log_info_all("preemption: rank %d received %s at %s during step %lld (micro-batch %d/%d)", w->rank,
                                sr_preempt_signame(sr_preempt_signal()), when, (long long)(s + 1), a + 1, accum);
            }
            /* global cursor: the step owns sequences [cursor, cursor+batch)
             * (cursor = s*batch in a run that never changed batch_size);
             * rank r takes the fixed slice r*mb*accum .. of it */
            uint64_t first = cursor + (uint64_t)(w->rank * rank_seqs) + (uint64_t)a * (uint64_t)mb;
            sr_data_batch(train, first, mb, true, (uint64_t)cfg->seed, in, tg);
            st = sr_fsdp_forward(fsdp, in, tg, mb, &loss_sum);
            if (st == SR_OK)
                st = sr_fsdp_backward(fsdp, (float)dloss, a == accum - 1);
        }
        double norm = 0.0;
        if (st == SR_OK)
            st = sr_fsdp_finish_grads(fsdp, &norm);
        /* one all-reduce: the loss, the ranks that saw a preemption signal,
         * and rank 0's clock for checkpoint.every_minutes */
        double red[3] = {
            loss_sum, sr_preempt_pending() ? 1.0 : 0.0,
            w->rank == 0 && cfg->ckpt_every_minutes > 0 && now_s() - last_save >= cfg->ckpt_every_minutes * 60.0 ? 1.0
                                                                                                                 : 0.0};
        if (st == SR_OK)
            st = sr_fsdp_sum_world_n(fsdp, red, 3);
        if (st != SR_OK)
            goto out;
        loss_sum = red[0];
        bool stop = red[1] > 0;
        double loss = loss_sum / (double)cfg->batch_size;
        if (s + 1 == nan_step)
            loss = NAN;
        if (!isfinite(loss) || !isfinite(norm)) {
            st = sr_error(SR_ERR_TRAIN,
                          "step %lld: non-finite %s (loss %g, gradient norm %g); training stopped (hint: lower "
                          "train.lr, raise train.warmup_steps, or set train.grad_clip)",
                          (long long)(s + 1), isfinite(loss) ? "gradient norm" : "loss", loss, norm);
            goto out;
        }
        float scale = 1.0f;
        if (cfg->grad_clip > 0 && norm > cfg->grad_clip)
            scale = (float)(cfg->grad_clip / norm);
        double lr = sr_lr_at(cfg, s);
        sr_fsdp_optimizer_step(fsdp, s + 1, lr, cfg, scale);
        cursor += (uint64_t)cfg->batch_size;
        double dt = now_s() - t0;
        if (s == 0)
            first_loss = loss;
        last_loss = loss;

        bool do_eval = !stop && val && cfg->eval_every > 0 && ((s + 1) % cfg->eval_every == 0 || s + 1 == cfg->steps);
        if (do_eval) {
            bool interrupted = false;
            st = evaluate(fsdp, val, cfg, w, mb, T, &last_val, &interrupted);
            if (st != SR_OK)
                goto out;
            if (interrupted) {
                do_eval = false;
                stop = true;
                sr_log_info("step %lld: evaluation interrupted by a preemption signal", (long long)(s + 1));
            } else {
                sr_log_info("step %lld: val_loss %.4f", (long long)(s + 1), last_val);
            }
        }
        bool do_log = (s + 1) % cfg->log_every == 0 || s == 0 || s + 1 == cfg->steps;
        if (do_log) {
            double tps = (double)cfg->batch_size * T / dt;
            double mfu = 100.0 * tps * flops_tok / (peak * w->size);
            sr_log_info("step %6lld/%lld | loss %.4f | lr %.2e | norm %.4f | %.0f tok/s | mfu %.1f%% | mem %.1f MiB "
                        "| %.1f ms",
                        (long long)(s + 1), (long long)cfg->steps, loss, lr, norm, tps, mfu, mib(sr_mem_total_peak()),
                        dt * 1e3);
            if (metrics) {
                fprintf(metrics,
                        "{\"step\":%lld,\"loss\":%.17g,\"lr\":%.17g,\"grad_norm\":%.17g,\"tokens_per_s\":%.6g,"
                        "\"mfu\":%.6g,\"step_ms\":%.6g,\"tokens\":%lld,\"ranks\":%d",
                        (long long)(s + 1), loss, lr, norm, tps, mfu / 100.0, dt * 1e3,
                        (long long)((s + 1) * cfg->batch_size * T), w->size);
                if (do_eval)
                    fprintf(metrics, ",\"val_loss\":%.17g", last_val);
                json_memory(metrics);
                fputs("}\n", metrics);
                fflush(metrics);
            }
        }
        sr_ckpt_progress now = {s + 1, cursor};
        if (stop && s + 1 < cfg->steps) {
            if (!noticed && sr_preempt_pending()) {
                noticed = true;
                char when[32];
                wall_clock(sr_preempt_time(), when, sizeof when);
                sr_log_info_all("preemption: rank %d received %s at %s after step %lld", w->rank,
                                sr_preempt_signame(sr_preempt_signal()), when, (long long)(s + 1));
            }
            sr_log_info("preemption: ranks agreed to stop after step %lld (%d of %d rank%s saw a signal)",
                        (long long)(s + 1), (int)red[1], w->size, w->size == 1 ? "" : "s");
            uint64_t bytes = 0;
            double ts = now_s();
            st = sr_ckpt_save(ck, &now, &bytes);
            if (st != SR_OK)
                goto out;
            double tdone = now_s();
            sr_log_info("preemption: save of step %lld took %.2f s (%.1f MB, %.0f MB/s); %.2f s since the signal",
                        (long long)(s + 1), tdone - ts, (double)bytes / 1e6,
                        (double)bytes / 1e6 / (tdone - ts > 0 ? tdone - ts : 1e-9),
                        sr_preempt_pending() ? wall_now() - sr_preempt_time() : 0.0);
            exit_code = preemption_exit(cfg, w);
            sr_log_info("preemption: exiting with status %d (%s)", exit_code,
                        exit_code == 0 ? "requeue requested; checkpoint committed"
                                       : "checkpoint committed; run again to resume");
            preempted = true;
            if (res)
                *res = (sr_train_result){s + 1, first_loss, last_loss, last_val, exit_code};
            goto out;
        }
        bool periodic = sr_ckpt_enabled(ck) && s + 1 < cfg->steps &&
                        ((cfg->ckpt_every_steps > 0 && (s + 1) % cfg->ckpt_every_steps == 0) || red[2] > 0);
        if (periodic) {
            st = sr_ckpt_save(ck, &now, NULL);
            if (st != SR_OK)
                goto out;
            last_save = now_s();
        }
    }
    if (sr_ckpt_enabled(ck) && sr_ckpt_last_step(ck) != cfg->steps) {
        sr_ckpt_progress fin = {cfg->steps, cursor};
        st = sr_ckpt_save(ck, &fin, NULL);
        if (st != SR_OK)
            goto out;
    }
    sr_log_info("done: %lld steps in %.1f s; loss %.4f -> %.4f", (long long)cfg->steps, now_s() - t_start, first_loss,
                last_loss);
    log_memory("at end");
    {
        /* For the test suite: the final full model, to compare world sizes. */
        const char *dump = getenv("SHARDRUN_TEST_DUMP_PARAMS");
        if (dump && *dump)
            st = sr_fsdp_dump_params(fsdp, dump);
    }
    if (res)
        *res = (sr_train_result){cfg->steps, first_loss, last_loss, last_val, 0};
out:
    if (st == SR_OK && preempted)
        st = SR_PREEMPTED;
    /* The handlers stay until the process exits: a late SIGTERM (Slurm's,
     * after GraceTime) must not turn a committed preemption into a death
     * by signal. */
    sr_ckpt_close(ck);
    if (metrics && fclose(metrics) != 0 && st == SR_OK)
        st = sr_error(SR_ERR_IO, "%s: write failed: %s", cfg->log_metrics, strerror(errno));
    free(in);
    free(tg);
    sr_fsdp_free(fsdp);
    sr_transport_close(tp);
    if (model_ok)
        sr_model_free(&model);
    sr_data_close(train);
    sr_data_close(val);
    return st;
}
