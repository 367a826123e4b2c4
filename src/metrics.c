/* metrics.c — the metrics file, memory lines and the MFU peak; see
 * metrics.h. */
#include "srconfig.h"

#include "metrics.h"

#include "device.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "clock.h"
#include "fsio.h"
#include "line.h"
#include "mem.h"
#include "tboard.h"

struct sr_metrics {
    FILE *f;   /* log.metrics, or NULL */
    sr_tb *tb; /* log.tensorboard, or NULL */
    char *path;
    char device[32]; /* a label for every record ("" none: sr_metrics_label_device) */
    int err;         /* the first failed write's errno (0: none) */
};

/* Flushes a record; the first failure is kept for sr_metrics_close (the
 * run's status then is 74) and said at once: training goes on, so the
 * steps and checkpoints since the last save are not lost to a full disk or
 * a file-size limit on the metrics file's file system. */
static void flush_record(sr_metrics *m) {
    if ((fflush(m->f) != 0 || ferror(m->f)) && !m->err) {
        m->err = errno ? errno : EIO;
        sr_log_warn("%s: write failed: %s; training goes on without metrics and the run will end with status 74",
                    m->path, strerror(m->err));
    }
}

sr_status sr_metrics_open(sr_metrics **out, const char *path, const char *tensorboard, bool append) {
    *out = NULL;
    bool file = path && path[0], tb = tensorboard && tensorboard[0];
    if (!file && !tb)
        return SR_OK;
    sr_metrics *m = sr_calloc(1, sizeof *m);
    char *name = sr_strdup(file ? path : tensorboard);
    if (!m || !name) {
        free(m);
        free(name);
        return sr_error_oom("the metrics file");
    }
    m->path = name;
    /* the directory first: a bad one leaves the metrics file untouched */
    sr_status st = tb ? sr_tb_prepare(&m->tb, tensorboard) : SR_OK;
    if (st == SR_OK && file) {
        int fd;
        st = sr_fsio_open_append(path, "the metrics file (log.metrics)", !append, &fd);
        if (st == SR_OK && !(m->f = fdopen(fd, "a"))) {
            close(fd);
            st = sr_error_oom("the metrics file");
        }
    }
    if (st != SR_OK) {
        sr_tb_close(m->tb);
        free(m->path);
        free(m);
        return st;
    }
    *out = m;
    return SR_OK;
}

sr_status sr_metrics_begin(sr_metrics *m, int64_t start_step) {
    if (!m)
        return SR_OK;
    if (start_step == 0 && m->f) {
        struct stat sb;
        if (fflush(m->f) != 0 || fstat(fileno(m->f), &sb) != 0 ||
            (S_ISREG(sb.st_mode) && ftruncate(fileno(m->f), 0) != 0))
            return sr_error(SR_ERR_IO, "%s: cannot empty the metrics file for a fresh start (log.metrics): %s", m->path,
                            strerror(errno));
    }
    return m->tb ? sr_tb_begin(m->tb, start_step + 1) : SR_OK;
}

void sr_metrics_label_device(sr_metrics *m, const char *device) {
    if (m)
        snprintf(m->device, sizeof m->device, "%s", device ? device : "");
}

static double mib(size_t b) { return (double)b / (1024.0 * 1024.0); }

static int cmp_dbl(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The median of v[0..n) (sorted in a copy: on the stack up to 256 values,
 * else on the heap; the mean of the two middle values for even n). */
static double median_of(const double *v, int n) {
    double small[256], *c = n <= 256 ? small : malloc(sizeof *c * (size_t)n);
    if (!c)
        return NAN;
    memcpy(c, v, sizeof *c * (size_t)n);
    qsort(c, (size_t)n, sizeof *c, cmp_dbl);
    double m = n % 2 ? c[n / 2] : 0.5 * (c[n / 2 - 1] + c[n / 2]);
    if (c != small)
        free(c);
    return m;
}

void sr_rank_times_fill(sr_rank_times *t, const char *hosts, size_t host_len) {
    if (t->n <= 0)
        return;
    t->busy_min = t->busy_max = t->busy_ms[0];
    t->wait_min = t->wait_max = t->wait_ms[0];
    t->slowest_rank = 0;
    for (int i = 1; i < t->n; i++) {
        if (t->busy_ms[i] > t->busy_max) {
            t->busy_max = t->busy_ms[i];
            t->slowest_rank = i;
        }
        if (t->busy_ms[i] < t->busy_min)
            t->busy_min = t->busy_ms[i];
        if (t->wait_ms[i] > t->wait_max)
            t->wait_max = t->wait_ms[i];
        if (t->wait_ms[i] < t->wait_min)
            t->wait_min = t->wait_ms[i];
    }
    t->busy_median = median_of(t->busy_ms, t->n);
    t->wait_median = median_of(t->wait_ms, t->n);
    t->slowest_host = hosts ? hosts + (size_t)t->slowest_rank * host_len : NULL;
}

/* The record's scalars as TensorBoard tags: the metrics file's keys and
 * units (so a reading compares with the file), mfu and val_loss when
 * known, the straggler spread when gathered, and memory by space. */
static void tb_step(sr_tb *tb, const sr_step_record *r) {
    enum { MAXT = 16 + SR_NSPACE };
    const char *tags[MAXT];
    double v[MAXT];
    int n = 0;
#define TB(name, value) (tags[n] = (name), v[n++] = (value))
    TB("loss", r->loss);
    TB("loss_mean", r->loss_mean);
    TB("lr", r->lr);
    TB("grad_norm", r->grad_norm);
    TB("tokens_per_s", r->tokens_per_s);
    if (isfinite(r->mfu))
        TB("mfu", r->mfu);
    TB("step_ms", r->step_ms);
    TB("comm_exposed_ms", r->comm_exposed_ms);
    /* (val_loss: the eval event's scalar, at every evaluation's step) */
    if (r->times && r->times->n > 0) {
        TB("busy_ms_min", r->times->busy_min);
        TB("busy_ms_median", r->times->busy_median);
        TB("busy_ms_max", r->times->busy_max);
    }
    TB("mem_total", (double)sr_mem_total_current());
    TB("mem_total_peak", (double)sr_mem_total_peak());
    char space_tags[SR_NSPACE][48];
    for (int sp = 0; sp < SR_NSPACE; sp++) {
        snprintf(space_tags[sp], sizeof space_tags[sp], "mem_%s_total", sr_mem_space_name(sp));
        TB(space_tags[sp], (double)sr_mem_space_current(sp));
    }
#undef TB
    sr_tb_scalars(tb, r->step, n, tags, v);
}

/* v as a JSON number (%.17g), or null when it is not finite. */
static void json_num(FILE *f, double v) {
    if (isfinite(v))
        fprintf(f, "%.17g", v);
    else
        fputs("null", f);
}

void sr_metrics_step(sr_metrics *m, const sr_step_record *r) {
    if (!m)
        return;
    if (m->tb)
        tb_step(m->tb, r);
    FILE *f = m->f;
    if (!f)
        return;
    fprintf(f,
            "{\"step\":%lld,\"loss\":%.17g,\"lr\":%.17g,\"grad_norm\":%.17g,\"tokens_per_s\":%.6g,"
            "\"mfu\":",
            (long long)r->step, r->loss, r->lr, r->grad_norm, r->tokens_per_s);
    if (isfinite(r->mfu))
        fprintf(f, "%.6g", r->mfu);
    else
        fputs("null", f); /* no peak known for this device */
    fprintf(f, ",\"step_ms\":%.6g,\"comm_exposed_ms\":%.6g,\"tokens\":%lld,\"ranks\":%d,\"time\":%.3f", r->step_ms,
            r->comm_exposed_ms, (long long)r->tokens, r->ranks, sr_clock_wall_s());
    fprintf(f, ",\"loss_mean\":%.17g,\"loss_steps\":%lld", r->loss_mean, (long long)r->loss_steps);
    if (r->has_val && isfinite(r->val_loss))
        fprintf(f, ",\"val_loss\":%.17g", r->val_loss);
    const sr_eval_scores *e = r->has_val ? r->evals : NULL;
    /* (the names are [A-Za-z0-9_.-]: config.h, evaltask.h; a loss that
     * is not finite is null, as JSON has no NaN) */
    for (int i = 0; e && i < e->nsets; i++) {
        fprintf(f, ",\"val_loss/%s\":", e->set[i]);
        json_num(f, e->set_loss[i]);
    }
    for (int i = 0; e && i < e->ntasks; i++)
        fprintf(f, ",\"acc/%s\":%.17g,\"acc_norm/%s\":%.17g", e->task[i], e->acc[i], e->task[i], e->acc_norm[i]);
    if (r->nccl)
        fprintf(f, ",\"nccl\":\"%s\"", r->nccl);
    if (r->tokens_by_source)
        fprintf(f, ",\"tokens_by_source\":%s", r->tokens_by_source);
    const sr_rank_times *t = r->times;
    if (t && t->n > 0) {
        fprintf(f,
                ",\"busy_ms_min\":%.6g,\"busy_ms_median\":%.6g,\"busy_ms_max\":%.6g,\"wait_ms_min\":%.6g,"
                "\"wait_ms_median\":%.6g,\"wait_ms_max\":%.6g,\"slowest_rank\":%d,\"slowest_host\":",
                t->busy_min, t->busy_median, t->busy_max, t->wait_min, t->wait_median, t->wait_max, t->slowest_rank);
        json_t *h = json_string(t->slowest_host ? t->slowest_host : "");
        char *hs = h ? json_dumps(h, JSON_ENCODE_ANY) : NULL;
        fputs(hs ? hs : "null", f);
        free(hs);
        json_decref(h);
        fputs(",\"busy_ms_ranks\":[", f);
        for (int i = 0; i < t->n; i++)
            fprintf(f, "%s%.4g", i ? "," : "", t->busy_ms[i]);
        fputs("]", f);
    }
    if (m->device[0])
        fprintf(f, ",\"device\":\"%s\"", m->device);
    for (int c = 0; c < SR_MEM_NCAT; c++)
        fprintf(f, ",\"mem_%s\":%zu,\"mem_%s_peak\":%zu", sr_mem_name(c), sr_mem_current(c), sr_mem_name(c),
                sr_mem_peak(c));
    fprintf(f, ",\"mem_total\":%zu,\"mem_total_peak\":%zu", sr_mem_total_current(), sr_mem_total_peak());
    for (int sp = 0; sp < SR_NSPACE; sp++)
        fprintf(f, ",\"mem_%s_total\":%zu,\"mem_%s_total_peak\":%zu", sr_mem_space_name(sp), sr_mem_space_current(sp),
                sr_mem_space_name(sp), sr_mem_space_peak(sp));
    fputs("}\n", f);
    flush_record(m);
}

void sr_metrics_event(sr_metrics *m, const char *kind, int64_t step, json_t *fields) {
    if (!m) {
        json_decref(fields);
        return;
    }
    /* jansson writes the strings (paths, job ids) escaped; the event's
     * three keys come first */
    json_t *o = json_object();
    if (o) {
        json_object_set_new(o, "event", json_string(kind));
        json_object_set_new(o, "step", json_integer((json_int_t)step));
        json_object_set_new(o, "time", json_real(round(sr_clock_wall_s() * 1000.0) / 1000.0));
        if (m->device[0])
            json_object_set_new(o, "device", json_string(m->device)); /* the start event's line replaces it */
        if (fields)
            json_object_update(o, fields);
        char *line = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(15));
        if (line && m->f) {
            fprintf(m->f, "%s\n", line);
            flush_record(m);
        }
        if (line && m->tb) { /* the same record as the event's text */
            char tag[64];
            snprintf(tag, sizeof tag, "event/%s", kind);
            sr_tb_text(m->tb, step, tag, line);
            /* every evaluation's numbers (val_loss, val_loss/NAME,
             * acc/TASK, acc_norm/TASK) are scalars at its own step,
             * logged step or not */
            const char *key;
            json_t *vl;
            if (strcmp(kind, "eval") == 0)
                json_object_foreach(fields ? fields : o, key, vl) {
                    if (!json_is_number(vl) || strcmp(key, "step") == 0 || strcmp(key, "time") == 0)
                        continue;
                    const char *tags[1] = {key};
                    double v[1] = {json_number_value(vl)};
                    sr_tb_scalars(m->tb, step, 1, tags, v);
                }
        }
        free(line);
    }
    json_decref(o);
    json_decref(fields);
}

sr_status sr_metrics_close(sr_metrics *m) {
    if (!m)
        return SR_OK;
    sr_status st = SR_OK;
    if (m->f && fclose(m->f) != 0 && !m->err)
        m->err = errno;
    if (m->err)
        st = sr_fsio_write_error(m->path, m->err);
    sr_tb_close(m->tb); /* a failed write warned; TensorBoard's files are not the run's outcome */
    free(m->path);
    free(m);
    return st;
}

void sr_metrics_log_memory(const char *when) {
    char line[1024];
    sr_line l = SR_LINE(line);
    for (int c = 0; c < SR_MEM_NCAT; c++)
        if (sr_mem_peak(c) > 0)
            sr_line_add(&l, " %s %.1f/%.1f", sr_mem_name(c), mib(sr_mem_current(c)), mib(sr_mem_peak(c)));
    sr_line_add(&l, "; total %.1f/%.1f", mib(sr_mem_total_current()), mib(sr_mem_total_peak()));
    for (int sp = 0; sp < SR_NSPACE; sp++)
        sr_line_add(&l, "%s %s %.1f/%.1f", sp ? "," : "; spaces:", sr_mem_space_name(sp), mib(sr_mem_space_current(sp)),
                    mib(sr_mem_space_peak(sp)));
    sr_log_info("memory %s (MiB current/peak):%s", when, line);
}

/* SHARDRUN_PEAK_GFLOPS in GFLOP/s; false when it is not a number in range. */
static bool parse_peak(const char *env, double *g) {
    char *end;
    errno = 0;
    *g = strtod(env, &end);
    return end != env && *end == '\0' && !errno && isfinite(*g) && *g >= SR_PEAK_GFLOPS_MIN && *g <= SR_PEAK_GFLOPS_MAX;
}

sr_status sr_metrics_check_env(void) {
    const char *env = getenv("SHARDRUN_PEAK_GFLOPS");
    double g;
    if (env && *env && !parse_peak(env, &g))
        return sr_error(SR_ERR_CONFIG,
                        "SHARDRUN_PEAK_GFLOPS='%s' is not a peak in GFLOP/s from %g to %g (hint: unset it for the "
                        "data-sheet or nominal peak)",
                        env, SR_PEAK_GFLOPS_MIN, SR_PEAK_GFLOPS_MAX);
    return SR_OK;
}

/* SHARDRUN_PEAK_GFLOPS in FLOP/s (saying so in `how`), or 0 when unset
 * (sr_metrics_check_env has refused a bad value). */
static double env_peak(char *how, size_t how_len) {
    const char *env = getenv("SHARDRUN_PEAK_GFLOPS");
    if (env && *env) {
        double g;
        if (parse_peak(env, &g)) {
            snprintf(how, how_len, "%.1f GFLOP/s from SHARDRUN_PEAK_GFLOPS", g);
            return g * 1e9;
        }
    }
    return 0.0;
}

double sr_metrics_gpu_peak_flops(const char *device, bool bf16, char *how, size_t how_len) {
    double given = env_peak(how, how_len);
    if (given > 0)
        return given;
    /* dense peaks from the vendor's data sheets, TFLOP/s: bf16 tensor
     * cores, and fp32 without TF32 (exact mode) */
    static const struct {
        const char *match, *also, *label;
        double bf16, fp32;
    } table[] = {
        {"H100", "PCIe", "H100 PCIe", 756, 51},
        {"H100", NULL, "H100 SXM", 989, 67},
        {"H200", NULL, "H200 SXM", 989, 67},
        {"A100", NULL, "A100", 312, 19.5},
    };
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
        if (strstr(device, table[i].match) && (!table[i].also || strstr(device, table[i].also))) {
            double t = bf16 ? table[i].bf16 : table[i].fp32;
            snprintf(how, how_len, "%s %s peak %.1f TFLOP/s (data sheet, dense; SHARDRUN_PEAK_GFLOPS overrides)",
                     table[i].label, bf16 ? "bf16" : "fp32 (exact mode)", t);
            return t * 1e12;
        }
    snprintf(how, how_len,
             "no peak known for this GPU, so mfu is null (hint: set SHARDRUN_PEAK_GFLOPS to its peak in GFLOP/s)");
    return 0.0;
}

double sr_metrics_peak_flops(int threads, char *how, size_t how_len) {
    double given = env_peak(how, how_len);
    if (given > 0)
        return given;
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

double sr_metrics_device_peak(const sr_dev *d, bool bf16, int threads, char *how, size_t how_len) {
    if (d->kind != SR_DEV_CUDA)
        return sr_metrics_peak_flops(threads, how, how_len);
    double peak = sr_metrics_gpu_peak_flops(d->line, bf16, how, how_len);
    if (peak <= 0)
        sr_log_warn("mfu: %s", how);
    return peak;
}
