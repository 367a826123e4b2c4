/* train.c — the single-process training loop, progress line and metrics.
 * See train.h. */
#include "srconfig.h"

#include "train.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "data.h"
#include "device.h"
#include "mem.h"
#include "model.h"
#include "ops.h"
#include "optim.h"

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

static double evaluate(sr_model *m, const sr_data *val, const sr_config *cfg, int mb) {
    int T = m->d.T;
    int64_t total_seq = cfg->eval_batches * cfg->batch_size;
    int *in = malloc((size_t)mb * T * sizeof(int)), *tg = malloc((size_t)mb * T * sizeof(int));
    if (!in || !tg) {
        free(in);
        free(tg);
        return NAN;
    }
    double sum = 0.0;
    int64_t done = 0;
    while (done < total_seq) {
        int n = (int)(total_seq - done < mb ? total_seq - done : mb);
        sr_data_batch(val, (uint64_t)done, n, false, 0, in, tg);
        sum += (double)sr_model_forward(m, NULL, in, tg, n) * n;
        done += n;
    }
    free(in);
    free(tg);
    return sum / (double)total_seq;
}

/* SHARDRUN_TEST_NAN_AT_STEP=N poisons the loss of step N (1-based), so the
 * test suite can prove that a non-finite loss stops training with status 1. */
static int64_t test_nan_step(void) {
    const char *e = getenv("SHARDRUN_TEST_NAN_AT_STEP");
    return e && *e ? strtoll(e, NULL, 10) : -1;
}

sr_status sr_train_run(const sr_config *cfg, sr_train_result *res) {
    sr_status st = SR_OK;
    int threads = sr_ops_set_threads((int)cfg->threads);
    const int dp = 1;
    int mb = (int)sr_config_micro_batch(cfg, dp);
    int accum = (int)sr_config_accum_steps(cfg, dp);
    int T = (int)cfg->seq_len;
    sr_model_dims dims = {(int)cfg->n_layer, (int)cfg->n_head, (int)cfg->n_embd, (int)cfg->vocab_size, 0, T};

    sr_data *train = NULL, *val = NULL;
    sr_model model;
    sr_optim opt;
    bool model_ok = false, opt_ok = false;
    FILE *metrics = NULL;
    int *in = NULL, *tg = NULL;
    memset(&opt, 0, sizeof opt);

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

    st = sr_model_init(&model, dims, &sr_ops_cpu, mb, true);
    model_ok = true;
    if (st != SR_OK)
        goto out;
    sr_model_init_params(&model, (uint64_t)cfg->seed, model.params, 0, model.n_params);
    st = sr_optim_init(&opt, &model, 0, model.n_params);
    opt_ok = true;
    if (st != SR_OK)
        goto out;
    in = malloc((size_t)mb * T * sizeof(int));
    tg = malloc((size_t)mb * T * sizeof(int));
    if (!in || !tg) {
        st = sr_error(SR_ERR_INTERNAL, "out of memory");
        goto out;
    }

    if (cfg->log_metrics && cfg->log_metrics[0]) {
        metrics = fopen(cfg->log_metrics, "w");
        if (!metrics) {
            st = sr_error(SR_ERR_CANTCREAT, "%s: cannot create metrics file (log.metrics): %s", cfg->log_metrics,
                          strerror(errno));
            goto out;
        }
    }

    char device[256];
    sr_device_describe(device, sizeof device);
    char peak_how[256];
    double peak = sr_train_peak_flops(threads, peak_how, sizeof peak_how);
    double flops_tok = sr_model_flops_per_token(&model);
    sr_log_info("model %s: n_layer %d, n_head %d, n_embd %d, vocab_size %d (padded %d), seq_len %d; %.2fM parameters",
                sr_config_enum_name("model.preset", cfg->model_preset), dims.L, dims.NH, dims.C, dims.V, model.d.Vp,
                T, (double)model.n_params_real / 1e6);
    sr_log_info("batch %lld sequences/step = 1 rank x micro_batch %d x %d accumulation step%s; %lld steps; threads %d "
                "(one OpenMP pool, OpenBLAS single-threaded); device=%s",
                (long long)cfg->batch_size, mb, accum, accum == 1 ? "" : "s", (long long)cfg->steps, threads, device);
    sr_log_info("data %s", sr_data_describe(train));
    if (val)
        sr_log_info("val  %s", sr_data_describe(val));
    else if (cfg->eval_every > 0)
        sr_log_warn("train.eval_every is %lld but data.val is empty: no evaluation (set data.val to validation "
                    "shards)", (long long)cfg->eval_every);
    sr_log_info("mfu peak: %s", peak_how);
    log_memory("at start");

    const double dloss = 1.0 / ((double)cfg->batch_size * T);
    const int64_t nan_step = test_nan_step();
    double first_loss = NAN, last_loss = NAN, last_val = NAN;
    double t_start = now_s();
    for (int64_t s = 0; s < cfg->steps; s++) {
        double t0 = now_s();
        memset(model.grads, 0, model.n_params * sizeof(float));
        double loss_sum = 0.0;
        for (int a = 0; a < accum; a++) {
            /* global cursor: step s owns sequences [s*batch, (s+1)*batch) */
            uint64_t first = (uint64_t)s * (uint64_t)cfg->batch_size + (uint64_t)a * (uint64_t)mb;
            sr_data_batch(train, first, mb, true, (uint64_t)cfg->seed, in, tg);
            loss_sum += (double)sr_model_forward(&model, NULL, in, tg, mb) * mb;
            sr_model_backward(&model, NULL, (float)dloss);
        }
        double loss = loss_sum / (double)cfg->batch_size;
        if (s + 1 == nan_step)
            loss = NAN;
        double norm = sqrt(sr_sum_squares(model.grads, model.n_params));
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
        sr_optim_step(&opt, model.params, model.grads, s + 1, lr, cfg, scale);
        double dt = now_s() - t0;
        if (s == 0)
            first_loss = loss;
        last_loss = loss;

        bool do_eval = val && cfg->eval_every > 0 && ((s + 1) % cfg->eval_every == 0 || s + 1 == cfg->steps);
        if (do_eval) {
            last_val = evaluate(&model, val, cfg, mb);
            sr_log_info("step %lld: val_loss %.4f", (long long)(s + 1), last_val);
        }
        bool do_log = (s + 1) % cfg->log_every == 0 || s == 0 || s + 1 == cfg->steps;
        if (do_log) {
            double tps = (double)cfg->batch_size * T / dt;
            double mfu = 100.0 * tps * flops_tok / peak;
            sr_log_info("step %6lld/%lld | loss %.4f | lr %.2e | norm %.4f | %.0f tok/s | mfu %.1f%% | mem %.1f MiB "
                        "| %.1f ms",
                        (long long)(s + 1), (long long)cfg->steps, loss, lr, norm, tps, mfu,
                        mib(sr_mem_total_current()), dt * 1e3);
            if (metrics) {
                fprintf(metrics,
                        "{\"step\":%lld,\"loss\":%.9g,\"lr\":%.9g,\"grad_norm\":%.9g,\"tokens_per_s\":%.6g,\"mfu\":%"
                        ".6g,\"step_ms\":%.6g,\"tokens\":%lld",
                        (long long)(s + 1), loss, lr, norm, tps, mfu / 100.0, dt * 1e3,
                        (long long)((s + 1) * cfg->batch_size * T));
                if (do_eval)
                    fprintf(metrics, ",\"val_loss\":%.9g", last_val);
                json_memory(metrics);
                fputs("}\n", metrics);
                fflush(metrics);
            }
        }
    }
    sr_log_info("done: %lld steps in %.1f s; loss %.4f -> %.4f", (long long)cfg->steps, now_s() - t_start, first_loss,
                last_loss);
    log_memory("at end");
    if (res) {
        res->steps_done = cfg->steps;
        res->first_loss = first_loss;
        res->last_loss = last_loss;
        res->last_val_loss = last_val;
    }
out:
    if (metrics && fclose(metrics) != 0 && st == SR_OK)
        st = sr_error(SR_ERR_IO, "%s: write failed: %s", cfg->log_metrics, strerror(errno));
    free(in);
    free(tg);
    if (opt_ok)
        sr_optim_free(&opt);
    if (model_ok)
        sr_model_free(&model);
    sr_data_close(train);
    sr_data_close(val);
    return st;
}
