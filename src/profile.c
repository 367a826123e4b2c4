/* profile.c — SHARDRUN_CUDA_PROFILE, the per-op profile of a GPU run; see
 * profile.h.
 *
 * The window's operations accumulate in one ledger (its `ms` from the
 * table's timing events, its counts and costs from the same records plan
 * --ledger counts), divided by the window's steps when reported.  The
 * step's wall time is the host's, from the step's first operation to the
 * end of the device's work (the profile waits for the device after every
 * profiled step, so one step's tail never runs into the next). */
#include "srconfig.h"

#include "profile.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "fsio.h"
#include "ledger.h"
#include "ledgerplan.h"
#include "mem.h"

struct sr_profile {
    sr_dev *dev;
    sr_profile_opts o;
    char dir[4096];
    int64_t first, count, last; /* the window: steps first..last */
    sr_ledger l;                /* the window's operations */
    double t0, wall_s;          /* the step's start, the window's wall time */
    double busy_ms;             /* the device's busy time in the window (the union of the operations' spans) */
    long long untimed;
    bool on, done;
};

sr_status sr_profile_open(sr_profile **out, sr_dev *dev, int64_t steps, const sr_profile_opts *o) {
    *out = NULL;
    const char *v = getenv(SR_PROFILE_ENV);
    if (!v || !*v)
        return SR_OK;
    char *end;
    errno = 0;
    long long first = strtoll(v, &end, 10), count = 0;
    bool ok = end != v && *end == ':' && !errno && first >= 1;
    if (ok) {
        const char *c = end + 1;
        count = strtoll(c, &end, 10);
        ok = end != c && !*end && !errno && count >= 1 && count <= 1000;
    }
    if (!ok)
        return sr_error(SR_ERR_CONFIG,
                        "%s=%s: expected FIRST:COUNT, the first step to profile (1 or more) and how many steps (1 to "
                        "1000), e.g. 5:5",
                        SR_PROFILE_ENV, v);
    if (!dev->profile_open) {
        sr_log_warn("%s is set, but this run's device table (%s) has no per-op profile (the cuda table has): no "
                    "profile",
                    SR_PROFILE_ENV, dev->name);
        return SR_OK;
    }
    if (first > steps) {
        sr_log_warn("%s=%s: the run ends at step %lld, before the profile's first step: no profile", SR_PROFILE_ENV, v,
                    (long long)steps);
        return SR_OK;
    }
    sr_profile *p = sr_calloc(1, sizeof *p);
    if (!p)
        return sr_error_oom("the profile");
    p->dev = dev;
    p->o = *o;
    snprintf(p->dir, sizeof p->dir, "%s", o->dir ? o->dir : ".");
    p->o.dir = p->dir;
    p->first = first;
    p->last = first + count - 1 < steps ? first + count - 1 : steps;
    p->count = p->last - first + 1;
    sr_ledger_clear(&p->l);
    sr_status st = dev->profile_open(dev, SR_PROFILE_PAIRS);
    if (st != SR_OK) {
        free(p);
        return sr_error_wrap(st, "%s", SR_PROFILE_ENV);
    }
    *out = p;
    sr_log_info("profile: steps %lld to %lld (%s=%s): every launch, cuBLASLt call, copy, memset and collective timed "
                "on the device%s",
                (long long)p->first, (long long)p->last, SR_PROFILE_ENV, v,
                dev->emulated ? " (the CUDA emulator's times, not a GPU's)" : "");
    return SR_OK;
}

void sr_profile_step_begin(sr_profile *p, int64_t step) {
    if (!p || p->done || step < p->first || step > p->last)
        return;
    /* the device drained first: the step's time is its own */
    sr_ledger scratch;
    long long untimed;
    double busy;
    sr_ledger_clear(&scratch);
    (void)p->dev->profile_collect(p->dev, &scratch, &untimed, &busy);
    p->t0 = sr_clock_mono_s();
    sr_ledger_bind(&p->l);
    p->dev->profile_switch(p->dev, true);
    p->on = true;
}

/* ---- the report ------------------------------------------------------------ */

typedef struct {
    const char *name;
    const char *family; /* a launcher's; NULL for a family and the total */
    sr_ledger_row r;    /* per step */
} line;

/* The window's sums as one step's. */
static sr_ledger_row per_step(const sr_ledger_row *r, double n) {
    sr_ledger_row x = *r;
    x.launches = (long long)((double)r->launches / n + 0.5);
    x.gemm_calls = (long long)((double)r->gemm_calls / n + 0.5);
    x.calls = (long long)((double)r->calls / n + 0.5);
    x.flops /= n;
    x.bytes /= n;
    x.bound_s /= n;
    x.ms /= n;
    return x;
}

/* Achieved TFLOP/s and GB/s, and the efficiency (bound / measured; < 0:
 * none). */
static void rates(const sr_ledger_row *r, double *tflops, double *gbps, double *eff) {
    double s = r->ms / 1e3;
    *tflops = s > 0 ? r->flops / s / 1e12 : 0;
    *gbps = s > 0 ? r->bytes / s / 1e9 : 0;
    *eff = r->ms > 0 && r->bound_s > 0 ? r->bound_s * 1e3 / r->ms : -1;
}

static json_t *row_json(const line *ln, double wall_ms) {
    json_t *o = sr_ledgerplan_row_json(ln->name, &ln->r, true);
    if (!o)
        return NULL;
    double tf, gb, eff;
    rates(&ln->r, &tf, &gb, &eff);
    if (ln->family)
        json_object_set_new(o, "family", json_string(ln->family));
    json_object_set_new(o, "calls", json_integer(ln->r.calls));
    json_object_set_new(o, "share", json_real(wall_ms > 0 ? ln->r.ms / wall_ms : 0));
    json_object_set_new(o, "tflops", json_real(tf));
    json_object_set_new(o, "gbps", json_real(gb));
    json_object_set_new(o, "efficiency", eff >= 0 ? json_real(eff) : json_null());
    return o;
}

/* One row of the table: on the log (md NULL) or as a Markdown row. */
static void print_line(const line *ln, double wall_ms, FILE *md) {
    double tf, gb, eff;
    rates(&ln->r, &tf, &gb, &eff);
    char e[32] = "-";
    if (eff >= 0)
        snprintf(e, sizeof e, "%.3g%%", 100 * eff);
    double share = wall_ms > 0 ? 100 * ln->r.ms / wall_ms : 0.0;
    if (md)
        fprintf(md, "| %s | %lld | %.3f | %.1f%% | %.2f TFLOP/s, %.1f GB/s | %.3f | %s |\n", ln->name, ln->r.calls,
                ln->r.ms, share, tf, gb, ln->r.bound_s * 1e3, e);
    else
        sr_log_info("profile:   %-24s %7lld %10.3f %6.1f%% %9.2f %9.1f %10.3f %7s", ln->name, ln->r.calls, ln->r.ms,
                    share, tf, gb, ln->r.bound_s * 1e3, e);
}

typedef struct {
    const char *text;
    size_t len;
} doc;

static sr_status write_doc(int fd, const char *name, void *ctx) {
    const doc *d = ctx;
    return sr_fsio_write_all(fd, d->text, d->len) == 0 ? SR_OK : sr_fsio_write_error(name, errno);
}

/* Writes text[len] to dir/name (the program's own name: never through a
 * link); the path into path[n]. */
static sr_status write_text(const char *dir, const char *name, const char *text, size_t len, char *path, size_t n) {
    snprintf(path, n, "%s/%s", dir, name);
    doc d = {text, len};
    return sr_fsio_atomic_write_own(path, write_doc, &d);
}

static sr_status write_json(const char *dir, const char *name, json_t *o, char *path, size_t n) {
    char *text = o ? json_dumps(o, JSON_PRESERVE_ORDER | JSON_INDENT(1) | JSON_REAL_PRECISION(6)) : NULL;
    json_decref(o);
    if (!text)
        return sr_error_oom("the profile's JSON");
    size_t len = strlen(text);
    text[len] = '\n'; /* (json_dumps' terminator becomes the last newline) */
    sr_status st = write_text(dir, name, text, len + 1, path, n);
    free(text);
    return st;
}

/* The window's tables, per step: the families, the launchers (by time,
 * largest first) and their total, with the step's wall and busy time. */
typedef struct {
    line fam[SR_LF_COUNT], rows[SR_LEDGER_NROWS], total;
    int nf, nr;
    double wall_ms, busy_ms, ops_ms;
    /* the launch gap: the step's wall time less the sum of its operations'
     * times, its share of the step, per operation launched (µs); above
     * SR_PROFILE_GAP_SHARE the lines advise CUDA graphs */
    double gap_ms, gap_share, gap_us_per_op;
    const char *whose; /* whose device times these are */
} tables;

static void build_tables(sr_profile *p, tables *t) {
    double n = (double)p->count;
    (void)sr_ledger_roofline(&p->l, SR_LEDGER_GEMM_TFLOPS, SR_LEDGER_HBM_TBPS); /* each family's bound */
    t->wall_ms = p->wall_s * 1e3 / n;
    t->busy_ms = p->busy_ms / n;
    t->nf = t->nr = 0;
    t->ops_ms = 0;
    for (int f = 0; f < SR_LF_COUNT; f++) {
        if (!p->l.fam[f].calls)
            continue;
        t->fam[t->nf] = (line){sr_ledger_family_names[f], NULL, per_step(&p->l.fam[f], n)};
        t->ops_ms += t->fam[t->nf].r.ms;
        t->nf++;
    }
    /* a launcher's bound: its bytes at the HBM rate, a GEMM row's its
     * FLOPs at the GEMM rate when that takes longer (as its family's) */
    for (int i = 0; i < SR_LEDGER_NROWS; i++) {
        if (!p->l.row[i].calls)
            continue;
        sr_ledger_row r = per_step(&p->l.row[i], n);
        sr_ledger_family f = sr_ledger_row_family(i);
        double b = f == SR_LF_COLLECTIVE ? 0 : r.bytes / (SR_LEDGER_HBM_TBPS * 1e12);
        if ((f == SR_LF_GEMM_LINEAR || f == SR_LF_GEMM_ATTENTION) && r.flops / (SR_LEDGER_GEMM_TFLOPS * 1e12) > b)
            b = r.flops / (SR_LEDGER_GEMM_TFLOPS * 1e12);
        r.bound_s = b;
        t->rows[t->nr++] = (line){sr_ledger_row_name(i), sr_ledger_family_names[f], r};
    }
    for (int i = 1; i < t->nr; i++) /* the launchers by time, largest first */
        for (int j = i; j > 0 && t->rows[j].r.ms > t->rows[j - 1].r.ms; j--) {
            line x = t->rows[j];
            t->rows[j] = t->rows[j - 1];
            t->rows[j - 1] = x;
        }
    sr_ledger_row tot = {0};
    for (int i = 0; i < t->nf; i++)
        sr_ledger_row_add(&tot, &t->fam[i].r);
    t->total = (line){"total", NULL, tot};
    t->whose = p->dev->emulated ? "the CUDA emulator's (not a GPU's)" : "the GPU's";
    t->gap_ms = t->wall_ms - t->ops_ms;
    t->gap_share = t->wall_ms > 0 ? t->gap_ms / t->wall_ms : 0.0;
    t->gap_us_per_op = tot.calls > 0 ? 1e3 * t->gap_ms / (double)tot.calls : 0.0;
}

/* The launch gap's sentence (the log, profile.md): its size, and past
 * SR_PROFILE_GAP_SHARE of the step, what would remove it. */
static void gap_line(const tables *t, char *buf, size_t n) {
    int k = snprintf(buf, n,
                     "the launch gap (the step's wall time less the sum of its operations' times) %.3f ms, %.1f%% of "
                     "the step, %.2f us per operation",
                     t->gap_ms, 100 * t->gap_share, t->gap_us_per_op);
    if (k > 0 && (size_t)k < n && t->gap_share > SR_PROFILE_GAP_SHARE)
        snprintf(buf + k, n - (size_t)k,
                 "; above %.0f%%: one CUDA graph per step (captured once, replayed: no host launch between "
                 "operations) would remove it",
                 100 * SR_PROFILE_GAP_SHARE);
}

/* The tables (family, launcher) as Markdown. */
static char *markdown(const sr_profile *p, const tables *t, size_t *len) {
    char *text = NULL;
    FILE *f = open_memstream(&text, len);
    if (!f)
        return NULL;
    fprintf(f,
            "Steps %lld to %lld, per step, rank 0 (%s); device times are %s; bound and efficiency at GEMM %g TFLOP/s "
            "and HBM %g TB/s.\n\n",
            (long long)p->first, (long long)p->last, p->dev->line, t->whose, SR_LEDGER_GEMM_TFLOPS, SR_LEDGER_HBM_TBPS);
    for (int k = 0; k < 2; k++) {
        fprintf(f, "| %s | calls | ms | share | achieved | bound ms | efficiency |\n|---|---|---|---|---|---|---|\n",
                k ? "launcher" : "family");
        for (int i = 0; i < (k ? t->nr : t->nf); i++)
            print_line(k ? &t->rows[i] : &t->fam[i], t->wall_ms, f);
        if (!k)
            print_line(&t->total, t->wall_ms, f);
        fputs("\n", f);
    }
    fprintf(f,
            "Step wall time %.3f ms; the device busy %.3f ms (sum of the operations %.3f ms: streams overlap); the gap "
            "%.3f ms (%.1f%%): host bubbles and launch gaps.\n",
            t->wall_ms, t->busy_ms, t->ops_ms, t->wall_ms - t->busy_ms,
            t->wall_ms > 0 ? 100 * (t->wall_ms - t->busy_ms) / t->wall_ms : 0.0);
    char gap[400];
    gap_line(t, gap, sizeof gap);
    fprintf(f, "\nThe step's operations: %lld; %s.\n", t->total.r.calls, gap);
    if (fclose(f) != 0) {
        free(text);
        return NULL;
    }
    return text;
}

/* Rank 0's tables on stderr. */
static void log_tables(const sr_profile *p, const tables *t) {
    const char *head = "profile:   %-24s %7s %10s %7s %9s %9s %10s %7s";
    double gap = t->wall_ms - t->busy_ms;
    sr_log_info("profile: steps %lld to %lld, per step, rank 0; device times are %s; bound and efficiency at GEMM "
                "%g TFLOP/s and HBM %g TB/s (ledger.h):",
                (long long)p->first, (long long)p->last, t->whose, SR_LEDGER_GEMM_TFLOPS, SR_LEDGER_HBM_TBPS);
    sr_log_info(head, "family", "calls", "ms", "share", "TFLOP/s", "GB/s", "bound ms", "effic.");
    for (int i = 0; i < t->nf; i++)
        print_line(&t->fam[i], t->wall_ms, NULL);
    print_line(&t->total, t->wall_ms, NULL);
    sr_log_info(head, "launcher", "calls", "ms", "share", "TFLOP/s", "GB/s", "bound ms", "effic.");
    for (int i = 0; i < t->nr; i++)
        print_line(&t->rows[i], t->wall_ms, NULL);
    sr_log_info("profile: step wall time %.3f ms; the device busy %.3f ms (the sum of the operations, %.3f ms, "
                "counts overlapping streams twice); the gap, %.3f ms (%.1f%%), is host bubbles and launch gaps%s",
                t->wall_ms, t->busy_ms, t->ops_ms, gap, t->wall_ms > 0 ? 100 * gap / t->wall_ms : 0.0,
                p->untimed ? "; some operations untimed (the event pool ran out)" : "");
    char line[400];
    gap_line(t, line, sizeof line);
    sr_log_info("profile: %s", line);
}

/* Rank 0's files in the profile directory: profile.md, calibration.json
 * (the measured efficiencies `eff`) and profile.json (o); takes o and eff. */
static sr_status write_files(const sr_profile *p, const tables *t, json_t *o, json_t *eff) {
    size_t mdlen = 0;
    char *md = markdown(p, t, &mdlen);
    json_t *cal =
        json_pack("{ss ss sf ss sf ss so}", "device", p->dev->line, "source",
                  "shardrun's SHARDRUN_CUDA_PROFILE (profile.json beside this file)", "gemm_tflops",
                  SR_LEDGER_GEMM_TFLOPS, "gemm_tflops_source", "ledger.h's default (one H200's measured)", "hbm_tbps",
                  SR_LEDGER_HBM_TBPS, "hbm_tbps_source", "ledger.h's default (one H200's measured)", "efficiency", eff);
    char path[4200], other[4200];
    sr_status st = !md || !cal                    ? sr_error_oom("the profile")
                   : sr_fsio_mkdir_p(p->dir) == 0 ? SR_OK
                                                  : sr_fsio_create_error(p->dir, errno);
    if (st == SR_OK)
        st = write_text(p->dir, "profile.md", md, mdlen, other, sizeof other);
    if (st == SR_OK)
        st = write_json(p->dir, "calibration.json", cal, other, sizeof other);
    else
        json_decref(cal);
    if (st == SR_OK)
        st = write_json(p->dir, "profile.json", o, path, sizeof path);
    else
        json_decref(o);
    free(md);
    if (st != SR_OK)
        return sr_error_wrap(st, "%s: the profile", SR_PROFILE_ENV);
    sr_log_info("profile: wrote %s (with profile.md and calibration.json, for plan --ledger --calibration, beside it)",
                path);
    return SR_OK;
}

static sr_status report(sr_profile *p, sr_metrics *metrics) {
    tables t;
    build_tables(p, &t);
    if (p->o.rank == 0)
        log_tables(p, &t);
    json_t *jf = json_array(), *jl = json_array(), *eff = json_object();
    for (int i = 0; i < t.nf; i++) {
        json_array_append_new(jf, row_json(&t.fam[i], t.wall_ms));
        if (t.fam[i].r.ms > 0 && t.fam[i].r.bound_s > 0)
            json_object_set_new(eff, t.fam[i].name, json_real(t.fam[i].r.bound_s * 1e3 / t.fam[i].r.ms));
    }
    for (int i = 0; i < t.nr; i++)
        json_array_append_new(jl, row_json(&t.rows[i], t.wall_ms));
    json_t *o = json_pack(
        "{s[II] sI ss sb ss sf sf sf sf sI sf sf so so so}", "steps", (json_int_t)p->first, (json_int_t)p->last,
        "count", (json_int_t)p->count, "times", t.whose, "emulated", p->dev->emulated, "device", p->dev->line,
        "wall_ms", t.wall_ms, "busy_ms", t.busy_ms, "ops_ms", t.ops_ms, "gap_ms", t.wall_ms - t.busy_ms, "untimed",
        (json_int_t)((double)p->untimed / (double)p->count + 0.5), "gemm_tflops", SR_LEDGER_GEMM_TFLOPS, "hbm_tbps",
        SR_LEDGER_HBM_TBPS, "families", jf, "launchers", jl, "total", row_json(&t.total, t.wall_ms));
    if (o && json_object_update_new(o, json_pack("{sf sf sf sb}", "launch_gap_ms", t.gap_ms, "launch_gap_share",
                                                 t.gap_share, "launch_gap_us_per_op", t.gap_us_per_op,
                                                 "cuda_graphs_advised", t.gap_share > SR_PROFILE_GAP_SHARE)) != 0) {
        json_decref(o);
        o = NULL;
    }
    if (!o || !eff) {
        json_decref(eff);
        json_decref(o);
        return sr_error_oom("the profile's JSON");
    }
    if (metrics)
        sr_metrics_event(metrics, "profile", p->last, json_deep_copy(o));
    if (p->o.rank != 0) {
        json_decref(o);
        json_decref(eff);
        return SR_OK;
    }
    return write_files(p, &t, o, eff);
}

sr_status sr_profile_step_end(sr_profile *p, int64_t step, sr_metrics *metrics) {
    if (!p || !p->on)
        return SR_OK;
    p->dev->profile_switch(p->dev, false);
    long long untimed = 0;
    double busy = 0;
    sr_status st = p->dev->profile_collect(p->dev, &p->l, &untimed, &busy);
    sr_ledger_bind(NULL);
    p->on = false;
    p->wall_s += sr_clock_mono_s() - p->t0;
    p->untimed += untimed;
    p->busy_ms += busy;
    if (st != SR_OK || step < p->last)
        return st;
    p->done = true;
    return report(p, metrics);
}

void sr_profile_free(sr_profile *p) {
    if (p && p->on) {
        p->dev->profile_switch(p->dev, false);
        sr_ledger_bind(NULL);
    }
    free(p);
}
