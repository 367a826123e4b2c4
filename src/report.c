/* report.c — `shardrun report`: a metrics file as one HTML page with SVG
 * charts and a plain-text summary; see report.h.
 *
 * The page is written by hand (no charting library on Debian draws SVG
 * from C, and the page must carry no scripts): each chart is an <svg> with
 * axes, one <polyline> per series (class "series series-KEY", one point
 * per record that carries KEY as a number) and, on the loss chart only,
 * one element per event (class "event event-KIND" with a <title>), so the
 * page holds exactly one marker per event.  Lines are parsed by libjansson. */
#include "srconfig.h"

#include "report.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "fsio.h"
#include "mem.h"

/* One line of the file that parsed: a step record or an event. */
typedef struct {
    json_t *o;
    const char *event; /* NULL for a step record */
    double step, time;
    int line;
} rec;

typedef struct {
    rec *r;
    int n, cap;
    int steps, events, skipped;
} records;

static void records_free(records *rs) {
    for (int i = 0; i < rs->n; i++)
        json_decref(rs->r[i].o);
    free(rs->r);
}

/* A member as a number; NAN when absent, null or not a number. */
static double num(const json_t *o, const char *key) {
    const json_t *v = json_object_get(o, key);
    return json_is_number(v) ? json_number_value(v) : NAN;
}

static const char *str(const json_t *o, const char *key) {
    const json_t *v = json_object_get(o, key);
    return json_is_string(v) ? json_string_value(v) : NULL;
}

/* Reads every line; a line that is not a JSON object with a numeric step
 * (and, for a step record, a numeric loss) is reported with its number on
 * `err` and skipped. */
static sr_status read_records(const char *path, records *rs, FILE *err) {
    FILE *f = fopen(path, "r");
    if (!f)
        return sr_error(errno == ENOENT ? SR_ERR_NOINPUT : SR_ERR_IO, "%s: cannot open the metrics file: %s", path,
                        strerror(errno));
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    int lineno = 0;
    sr_status st = SR_OK;
    while (st == SR_OK && (len = getline(&line, &cap, f)) >= 0) {
        lineno++;
        bool complete = len > 0 && line[len - 1] == '\n';
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r'))
            line[--len] = '\0';
        if (len == 0)
            continue;
        json_error_t je;
        json_t *o = json_loadb(line, (size_t)len, JSON_REJECT_DUPLICATES, &je);
        const char *why = NULL;
        char detail[256];
        if (!o) {
            snprintf(detail, sizeof detail, "%s%s", complete ? "not JSON: " : "truncated (no end of line): ", je.text);
            why = detail;
        } else if (!json_is_object(o))
            why = "not a JSON object";
        else if (!json_is_number(json_object_get(o, "step")))
            why = "no numeric \"step\"";
        else if (json_object_get(o, "event") && !json_is_string(json_object_get(o, "event")))
            why = "\"event\" is not a string";
        else if (!json_object_get(o, "event") && !json_is_number(json_object_get(o, "loss")))
            why = "a step record without a numeric \"loss\"";
        if (why) {
            fprintf(err, "shardrun: %s:%d: %s; line skipped\n", path, lineno, why);
            rs->skipped++;
            json_decref(o);
            continue;
        }
        if (rs->n == rs->cap) {
            int ncap = rs->cap ? 2 * rs->cap : 256;
            rec *nr = sr_realloc(rs->r, (size_t)ncap * sizeof *nr);
            if (!nr) {
                json_decref(o);
                st = sr_error_oom("the metrics records");
                break;
            }
            rs->r = nr;
            rs->cap = ncap;
        }
        rec *r = &rs->r[rs->n++];
        *r = (rec){o, str(o, "event"), num(o, "step"), num(o, "time"), lineno};
        if (r->event)
            rs->events++;
        else
            rs->steps++;
    }
    if (st == SR_OK && ferror(f))
        st = sr_error(SR_ERR_IO, "%s: read error: %s", path, strerror(errno));
    free(line);
    fclose(f);
    return st;
}

/* ------------------------------------------------------------------------ */
/* the summary */

typedef struct {
    double final_val, best_val, final_loss;
    double final_val_step, best_val_step;
    double tokens, tokens_step;
    double wall_s, first_time, last_time;
    int runs, resumes;
    double redone_steps, step_s, gap_s, lost_s;
    int kinds[5]; /* start, checkpoint, preempt, resume, eval */
} summary;

static const char *const event_kinds[5] = {"start", "checkpoint", "preempt", "resume", "eval"};

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static sr_status summarize(const records *rs, summary *s) {
    *s = (summary){.final_val = NAN, .best_val = NAN, .final_loss = NAN, .tokens = NAN, .first_time = NAN};
    double *ms = sr_malloc(sizeof(double) * (size_t)(rs->steps + 1));
    if (!ms)
        return sr_error_oom("the step times");
    int nms = 0;
    bool eval_events = false;
    for (int i = 0; i < rs->n; i++)
        eval_events = eval_events || (rs->r[i].event && strcmp(rs->r[i].event, "eval") == 0);
    /* a run is the records from a start event to the next one */
    double prev_max_step = NAN, prev_last_time = NAN, run_max = NAN, run_last = NAN;
    for (int i = 0; i < rs->n; i++) {
        const rec *r = &rs->r[i];
        if (isfinite(r->time)) {
            if (!isfinite(s->first_time))
                s->first_time = r->time;
            s->last_time = r->time;
        }
        for (int k = 0; r->event && k < 5; k++)
            s->kinds[k] += strcmp(r->event, event_kinds[k]) == 0;
        if (r->event && strcmp(r->event, "start") == 0) {
            s->runs++;
            prev_max_step = run_max;
            prev_last_time = run_last;
            double resume = num(r->o, "resume_step");
            if (isfinite(prev_max_step) && isfinite(resume)) {
                s->resumes++;
                if (prev_max_step > resume)
                    s->redone_steps += prev_max_step - resume;
                if (isfinite(prev_last_time) && isfinite(r->time) && r->time > prev_last_time)
                    s->gap_s += r->time - prev_last_time;
            }
            run_max = NAN;
        }
        if (isfinite(r->step) && (!isfinite(run_max) || r->step > run_max))
            run_max = r->step;
        if (isfinite(r->time))
            run_last = r->time;
        double val = NAN;
        if (r->event && strcmp(r->event, "eval") == 0)
            val = num(r->o, "val_loss");
        else if (!r->event && !eval_events)
            val = num(r->o, "val_loss");
        if (isfinite(val)) {
            s->final_val = val;
            s->final_val_step = r->step;
            if (!isfinite(s->best_val) || val < s->best_val) {
                s->best_val = val;
                s->best_val_step = r->step;
            }
        }
        if (!r->event) {
            s->final_loss = num(r->o, "loss");
            double t = num(r->o, "tokens");
            if (isfinite(t)) {
                s->tokens = t;
                s->tokens_step = r->step;
            }
            double m = num(r->o, "step_ms");
            if (isfinite(m))
                ms[nms++] = m;
        }
    }
    if (nms) {
        qsort(ms, (size_t)nms, sizeof *ms, cmp_double);
        s->step_s = (nms % 2 ? ms[nms / 2] : 0.5 * (ms[nms / 2 - 1] + ms[nms / 2])) / 1000.0;
    }
    free(ms);
    s->wall_s = isfinite(s->first_time) ? s->last_time - s->first_time : 0.0;
    s->lost_s = s->redone_steps * s->step_s + s->gap_s;
    return SR_OK;
}

static void print_summary(FILE *out, const char *path, const records *rs, const summary *s) {
    fprintf(out,
            "report: %s: %d step record%s, %d event%s (%d start%s, %d resume%s, %d preemption%s, %d checkpoint%s, "
            "%d evaluation%s), %d line%s skipped\n",
            path, rs->steps, rs->steps == 1 ? "" : "s", rs->events, rs->events == 1 ? "" : "s", s->kinds[0],
            s->kinds[0] == 1 ? "" : "s", s->kinds[3], s->kinds[3] == 1 ? "" : "s", s->kinds[2],
            s->kinds[2] == 1 ? "" : "s", s->kinds[1], s->kinds[1] == 1 ? "" : "s", s->kinds[4],
            s->kinds[4] == 1 ? "" : "s", rs->skipped, rs->skipped == 1 ? "" : "s");
    if (isfinite(s->final_val))
        fprintf(out, "  validation loss: final %.4f (step %.0f), best %.4f (step %.0f)\n", s->final_val,
                s->final_val_step, s->best_val, s->best_val_step);
    else
        fprintf(out, "  validation loss: none recorded (train.eval_every and data.val)\n");
    if (isfinite(s->final_loss))
        fprintf(out, "  training loss: final %.4f\n", s->final_loss);
    if (isfinite(s->tokens))
        fprintf(out, "  tokens: %.0f (step %.0f)\n", s->tokens, s->tokens_step);
    fprintf(out, "  wall time: %.1f s from the first record to the last (%d run%s)\n", s->wall_s, s->runs,
            s->runs == 1 ? "" : "s");
    fprintf(out,
            "  time lost to preemption: %.1f s = %.0f step%s redone x %.3f s (median step) + %.1f s between an exit "
            "and the next start (%d resume%s)\n",
            s->lost_s, s->redone_steps, s->redone_steps == 1 ? "" : "s", s->step_s, s->gap_s, s->resumes,
            s->resumes == 1 ? "" : "s");
}

/* ------------------------------------------------------------------------ */
/* the page */

/* A growing text buffer (open_memstream). */
typedef struct {
    FILE *f;
    char *text;
    size_t len;
} page;

static void esc(FILE *f, const char *s) {
    for (; s && *s; s++)
        switch (*s) {
        case '<':
            fputs("&lt;", f);
            break;
        case '>':
            fputs("&gt;", f);
            break;
        case '&':
            fputs("&amp;", f);
            break;
        case '"':
            fputs("&quot;", f);
            break;
        default:
            fputc(*s, f);
        }
}

/* Ticks at 1, 2 or 5 x 10^k covering [lo, hi]. */
static double tick_step(double lo, double hi, int want) {
    double span = hi - lo;
    if (!(span > 0))
        return 1.0;
    double raw = span / want, mag = pow(10.0, floor(log10(raw))), f = raw / mag;
    return (f < 1.5 ? 1 : f < 3.5 ? 2 : f < 7.5 ? 5 : 10) * mag;
}

enum { W = 640, H = 260, ML = 70, MR = 20, MT = 30, MB = 40 };

typedef struct {
    const char *key, *label, *color;
    double scale; /* the value drawn = value x scale */
} series;

typedef struct {
    double x0, x1, y0, y1;
} box;

static double px(const box *b, double x) { return ML + (x - b->x0) / (b->x1 - b->x0) * (W - ML - MR); }
static double py(const box *b, double y) { return H - MB - (y - b->y0) / (b->y1 - b->y0) * (H - MT - MB); }

static void axes(FILE *f, const box *b, const char *title, const char *ylabel) {
    fprintf(f, "<text x=\"%d\" y=\"18\" class=\"title\">", ML);
    esc(f, title);
    fprintf(f, "</text>\n<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" class=\"frame\"/>\n", ML, MT, W - ML - MR,
            H - MT - MB);
    double ys = tick_step(b->y0, b->y1, 5);
    for (double y = ceil(b->y0 / ys) * ys; y <= b->y1 + ys * 1e-9; y += ys)
        fprintf(f,
                "<line x1=\"%d\" x2=\"%d\" y1=\"%.1f\" y2=\"%.1f\" class=\"grid\"/><text x=\"%d\" y=\"%.1f\" "
                "class=\"ytick\">%.4g</text>\n",
                ML, W - MR, py(b, y), py(b, y), ML - 4, py(b, y) + 4, fabs(y) < ys * 1e-9 ? 0.0 : y);
    double xs = tick_step(b->x0, b->x1, 8);
    if (xs < 1)
        xs = 1;
    for (double x = ceil(b->x0 / xs) * xs; x <= b->x1 + xs * 1e-9; x += xs)
        fprintf(f, "<text x=\"%.1f\" y=\"%d\" class=\"xtick\">%.0f</text>\n", px(b, x), H - MB + 16, x);
    fprintf(f, "<text x=\"%d\" y=\"%d\" class=\"xlabel\">step</text>\n", W - MR, H - 6);
    fprintf(f, "<text x=\"12\" y=\"%d\" class=\"ylabel\" transform=\"rotate(-90 12 %d)\">", H / 2, H / 2);
    esc(f, ylabel);
    fputs("</text>\n", f);
}

/* The value of `key` on record r (stacked: the sum of keys[0..k]). */
static double value_of(const rec *r, const series *sv, int k, bool stacked) {
    double v = 0.0;
    for (int j = stacked ? 0 : k; j <= k; j++) {
        double x = num(r->o, sv[j].key);
        if (!isfinite(x))
            return NAN;
        v += x * sv[j].scale;
    }
    return v;
}

/* Whether record r belongs to series sv (step records, or eval events for
 * val_loss when the file has them). */
static bool carries(const rec *r, const series *sv, bool eval_events) {
    if (strcmp(sv->key, "val_loss") == 0 && eval_events)
        return r->event && strcmp(r->event, "eval") == 0;
    return !r->event;
}

static void event_title(FILE *f, const rec *r) {
    const json_t *o = r->o;
    fprintf(f, "%s at step %.0f", r->event, r->step);
    if (strcmp(r->event, "checkpoint") == 0)
        fprintf(f, ": step %.0f committed at step %.0f, %.2f s, %.1f MB%s", num(o, "started_step"),
                num(o, "committed_step"), num(o, "duration_s"), num(o, "bytes") / 1e6,
                json_is_true(json_object_get(o, "async")) ? ", asynchronous" : "");
    else if (strcmp(r->event, "preempt") == 0) {
        const char *sig = str(o, "signal");
        fputs(": signal ", f);
        esc(f, sig ? sig : "(seen by another rank)");
    } else if (strcmp(r->event, "start") == 0) {
        fprintf(f, ": restart %.0f, resume step %.0f, %.0f ranks, job ", num(o, "restart"), num(o, "resume_step"),
                num(o, "world_size"));
        esc(f, str(o, "job_id") ? str(o, "job_id") : "?");
    } else if (strcmp(r->event, "resume") == 0) {
        fputs(": from ", f);
        esc(f, str(o, "from") ? str(o, "from") : "?");
    } else if (strcmp(r->event, "eval") == 0)
        fprintf(f, ": val_loss %.4f", num(o, "val_loss"));
}

/* One chart; `marks` draws the events on it. */
static void chart(FILE *f, const records *rs, const char *id, const char *title, const char *ylabel, const series *sv,
                  int ns, bool stacked, bool marks, bool eval_events) {
    box b = {INFINITY, -INFINITY, INFINITY, -INFINITY};
    int points = 0;
    for (int i = 0; i < rs->n; i++) {
        const rec *r = &rs->r[i];
        if (isfinite(r->step)) {
            b.x0 = fmin(b.x0, r->step);
            b.x1 = fmax(b.x1, r->step);
        }
        for (int k = 0; k < ns; k++) {
            double v = carries(r, &sv[k], eval_events) ? value_of(r, sv, k, stacked) : NAN;
            if (isfinite(v)) {
                b.y0 = fmin(b.y0, v);
                b.y1 = fmax(b.y1, v);
                points++;
            }
        }
    }
    fprintf(f, "<section class=\"chart\" id=\"%s\">\n", id);
    if (!isfinite(b.x0)) {
        fprintf(f, "<h2>");
        esc(f, title);
        fputs("</h2><p class=\"empty\">no records</p></section>\n", f);
        return;
    }
    if (!points)
        b.y0 = 0, b.y1 = 1;
    if (stacked || (b.y0 > 0 && b.y0 < 0.2 * b.y1))
        b.y0 = fmin(b.y0, 0.0);
    double pad = (b.y1 - b.y0) * 0.05;
    if (!(pad > 0))
        pad = fabs(b.y1) > 0 ? fabs(b.y1) * 0.05 : 1.0;
    b.y0 -= b.y0 == 0.0 ? 0.0 : pad;
    b.y1 += pad;
    if (!(b.x1 > b.x0))
        b.x0 -= 0.5, b.x1 += 0.5;
    /* inline SVG in HTML5 needs no namespace: the page names no URL at all */
    fprintf(f, "<svg width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\">\n", W, H, W, H);
    axes(f, &b, title, ylabel);
    if (marks)
        for (int i = 0; i < rs->n; i++) {
            const rec *r = &rs->r[i];
            if (!r->event || !isfinite(r->step))
                continue;
            fputs("<g class=\"event event-", f);
            for (const char *c = r->event; *c; c++) /* a class name: letters, digits, - and _ */
                fputc((*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9') || *c == '-' || *c == '_' ? *c : '_', f);
            fprintf(f, "\" data-step=\"%.0f\"><title>", r->step);
            event_title(f, r);
            fprintf(f, "</title><line x1=\"%.1f\" x2=\"%.1f\" y1=\"%d\" y2=\"%d\"/></g>\n", px(&b, r->step),
                    px(&b, r->step), MT, H - MB);
        }
    for (int k = 0; k < ns; k++) {
        fprintf(f, "<polyline class=\"series series-%s\" data-series=\"%s\" stroke=\"%s\" points=\"", sv[k].key,
                sv[k].key, sv[k].color);
        for (int i = 0; i < rs->n; i++) {
            const rec *r = &rs->r[i];
            double v = carries(r, &sv[k], eval_events) ? value_of(r, sv, k, stacked) : NAN;
            if (isfinite(v) && isfinite(r->step))
                fprintf(f, "%.1f,%.1f ", px(&b, r->step), py(&b, v));
        }
        fputs("\"/>\n", f);
    }
    /* the legend */
    for (int k = 0; k < ns; k++)
        fprintf(f,
                "<rect x=\"%d\" y=\"%d\" width=\"10\" height=\"10\" fill=\"%s\"/><text x=\"%d\" y=\"%d\" "
                "class=\"legend\">%s</text>\n",
                ML + 8 + 180 * (k % 3), MT + 6 + 14 * (k / 3), sv[k].color, ML + 22 + 180 * (k % 3),
                MT + 15 + 14 * (k / 3), sv[k].label);
    fputs("</svg>\n</section>\n", f);
}

static const char *const palette[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                      "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};

static void render(FILE *f, const char *path, const records *rs, const summary *s) {
    bool eval_events = s->kinds[4] > 0;
    fputs("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n<title>shardrun report: ", f);
    esc(f, path);
    fputs("</title>\n<style>\n"
          "body{font-family:sans-serif;margin:16px;background:#fff;color:#222}\n"
          "h1{font-size:18px}h2{font-size:15px}\n"
          ".chart{display:inline-block;margin:4px}\n"
          ".frame{fill:#fafafa;stroke:#999}.grid{stroke:#e4e4e4}\n"
          ".ytick{font-size:10px;text-anchor:end}.xtick{font-size:10px;text-anchor:middle}\n"
          ".xlabel{font-size:11px;text-anchor:end}.ylabel{font-size:11px;text-anchor:middle}\n"
          ".title{font-size:13px;font-weight:bold}.legend{font-size:11px}\n"
          "polyline{fill:none;stroke-width:1.5}\n"
          ".event line{stroke-width:1.5;stroke-dasharray:4 3}\n"
          ".event-start line{stroke:#2ca02c}.event-resume line{stroke:#17becf}\n"
          ".event-checkpoint line{stroke:#7f7f7f}.event-preempt line{stroke:#d62728;stroke-width:2.5}\n"
          ".event-eval line{stroke:#9467bd;stroke-dasharray:1 3}\n"
          "table{border-collapse:collapse;font-size:12px}td,th{border:1px solid #ccc;padding:2px 6px;text-align:left}\n"
          "</style></head><body>\n<h1>shardrun report: ",
          f);
    esc(f, path);
    fputs("</h1>\n<table class=\"summary\">\n", f);
    if (isfinite(s->final_val))
        fprintf(f, "<tr><th>validation loss</th><td>final %.4f (step %.0f), best %.4f (step %.0f)</td></tr>\n",
                s->final_val, s->final_val_step, s->best_val, s->best_val_step);
    if (isfinite(s->final_loss))
        fprintf(f, "<tr><th>training loss</th><td>final %.4f</td></tr>\n", s->final_loss);
    if (isfinite(s->tokens))
        fprintf(f, "<tr><th>tokens</th><td>%.0f (step %.0f)</td></tr>\n", s->tokens, s->tokens_step);
    fprintf(f, "<tr><th>wall time</th><td>%.1f s (%d run%s)</td></tr>\n", s->wall_s, s->runs, s->runs == 1 ? "" : "s");
    fprintf(f,
            "<tr><th>time lost to preemption</th><td>%.1f s = %.0f steps redone &times; %.3f s + %.1f s between an "
            "exit and the next start</td></tr>\n",
            s->lost_s, s->redone_steps, s->step_s, s->gap_s);
    fprintf(f, "<tr><th>records</th><td>%d steps, %d events, %d lines skipped</td></tr>\n</table>\n", rs->steps,
            rs->events, rs->skipped);
    fputs("<p>Dashed lines on the loss chart: green start, cyan resume, grey checkpoint, red preemption, purple "
          "evaluation (hover for details).</p>\n",
          f);

    const series loss[] = {{"loss", "training loss", palette[0], 1}, {"val_loss", "validation loss", palette[1], 1}};
    chart(f, rs, "chart-loss", "Loss", "loss", loss, 2, false, true, eval_events);
    const series lr[] = {{"lr", "learning rate", palette[2], 1}};
    chart(f, rs, "chart-lr", "Learning rate", "lr", lr, 1, false, false, eval_events);
    const series gn[] = {{"grad_norm", "gradient norm", palette[3], 1}};
    chart(f, rs, "chart-grad-norm", "Gradient norm (before clipping)", "norm", gn, 1, false, false, eval_events);
    const series tps[] = {{"tokens_per_s", "tokens/s", palette[4], 1}};
    chart(f, rs, "chart-tokens-per-s", "Throughput", "tokens/s", tps, 1, false, false, eval_events);
    const series mfu[] = {{"mfu", "MFU (%)", palette[5], 100}};
    chart(f, rs, "chart-mfu", "Model FLOP utilization", "%", mfu, 1, false, false, eval_events);
    const series comm[] = {{"comm_exposed_ms", "exposed communication (ms)", palette[6], 1},
                           {"step_ms", "step time (ms)", palette[7], 1}};
    chart(f, rs, "chart-comm", "Exposed communication per step", "ms", comm, 2, false, false, eval_events);
    /* memory: the categories any record has above zero, stacked */
    series mem[SR_MEM_NCAT];
    char keys[SR_MEM_NCAT][48];
    int nm = 0;
    for (int c = 0; c < SR_MEM_NCAT; c++) {
        snprintf(keys[c], sizeof keys[c], "mem_%s_peak", sr_mem_name(c));
        bool any = false;
        for (int i = 0; i < rs->n && !any; i++)
            any = !rs->r[i].event && num(rs->r[i].o, keys[c]) > 0;
        if (any) {
            mem[nm] = (series){keys[c], sr_mem_name(c), palette[nm % 10], 1.0 / (1024.0 * 1024.0)};
            nm++;
        }
    }
    chart(f, rs, "chart-memory", "Memory by category (peak so far, stacked)", "MiB", mem, nm, true, false, eval_events);

    fputs("<h2>Events</h2>\n<table class=\"events\"><tr><th>line</th><th>step</th><th>event</th></tr>\n", f);
    for (int i = 0; i < rs->n; i++)
        if (rs->r[i].event) {
            fprintf(f, "<tr><td>%d</td><td>%.0f</td><td>", rs->r[i].line, rs->r[i].step);
            event_title(f, &rs->r[i]);
            fputs("</td></tr>\n", f);
        }
    fputs("</table>\n</body></html>\n", f);
}

static sr_status write_page(int fd, const char *tmp, void *ctx) {
    const page *p = ctx;
    return sr_fsio_write_all(fd, p->text, p->len) == 0 ? SR_OK : sr_fsio_write_error(tmp, errno);
}

sr_status sr_report(const char *metrics, const char *out, FILE *summary_out, FILE *err) {
    records rs = {0};
    sr_status st = read_records(metrics, &rs, err);
    if (st == SR_OK && rs.n == 0)
        st = sr_error(SR_ERR_DATA,
                      "%s: no records (%d line%s skipped) (hint: give the file a run wrote with log.metrics: PATH)",
                      metrics, rs.skipped, rs.skipped == 1 ? "" : "s");
    summary s = {0};
    if (st == SR_OK)
        st = summarize(&rs, &s);
    char *dflt = NULL;
    if (st == SR_OK && !out) {
        size_t n = strlen(metrics) + 6;
        dflt = sr_malloc(n);
        if (!dflt)
            st = sr_error_oom("the report's name");
        else {
            snprintf(dflt, n, "%s.html", metrics); /* <metrics>.html: run.jsonl -> run.jsonl.html */
            out = dflt;
        }
    }
    page p = {0};
    if (st == SR_OK) {
        p.f = open_memstream(&p.text, &p.len);
        if (!p.f)
            st = sr_error_oom("the report page");
    }
    if (st == SR_OK) {
        render(p.f, metrics, &rs, &s);
        if (fclose(p.f) != 0)
            st = sr_error_oom("the report page");
        p.f = NULL;
    }
    if (st == SR_OK)
        st = sr_fsio_atomic_write(out, write_page, &p);
    if (st == SR_OK) {
        print_summary(summary_out, metrics, &rs, &s);
        fprintf(summary_out, "  wrote %s (%zu bytes)\n", out, p.len);
    }
    free(p.text);
    free(dflt);
    records_free(&rs);
    return st;
}
