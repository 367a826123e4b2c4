/* report.c — `shardrun report`: a metrics file as one HTML page with SVG
 * charts and a plain-text summary; see report.h.
 *
 * The page is written by hand (no charting library on Debian draws SVG
 * from C, and the page must carry no scripts).  The file is streamed: one
 * line at a time (at most MAX_LINE bytes; a longer one is skipped without
 * being held), parsed by libjansson and folded into bounded state, so
 * memory and the page's size do not grow with the file:
 *  - each series keeps at most NPTS points: every record's point while it
 *    has no more than NPTS, then buckets of consecutive records (one run
 *    segment each) holding their minimum and maximum;
 *  - a run's records form a segment; a start event begins a new one, and
 *    the steps a run redoes after a crash (at or below the furthest step
 *    before it) form their own, drawn dashed, so a resume never draws a
 *    vertical spike;
 *  - the first MAX_MARKS events are markers on the loss chart (stacked
 *    where they coincide, one shape per kind) and rows of the events
 *    table; later ones are counted per step bucket;
 *  - the median step time is exact over the first MAX_EXACT steps, then
 *    read from a log-scale histogram (0.1 % bins);
 *  - the evaluation results the file names (val_loss/NAME, acc/TASK,
 *    acc_norm/TASK) are series of their own, made at a name's first value,
 *    at most MAX_SETS sets and MAX_TASKS tasks (the rest counted).
 * Every string from the file is escaped for where it lands (text or
 * attribute), cut to MAX_STR bytes, control characters replaced.
 *
 * This file reads and folds the records and prints the summary;
 * report_svg.c draws the charts, report_page.c writes the page;
 * report_impl.h is the state they share. */
#include "srconfig.h"

#include "report_impl.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "fsio.h"
#include "mem.h"

/* ------------------------------------------------------------------------ */
/* escaping */

/* s (NULL: "?") for HTML text or a double-quoted attribute: & < > " '
 * escaped, control characters as U+FFFD, cut after `max` bytes at a
 * character boundary with an ellipsis. */
void rep_esc_n(FILE *f, const char *s, size_t max) {
    if (!s)
        s = "?";
    size_t n = 0;
    for (; *s; s++, n++) {
        unsigned char c = (unsigned char)*s;
        if (n >= max && (c & 0xC0) != 0x80) {
            fputs("\xE2\x80\xA6", f);
            return;
        }
        const char *entity = c == '<'                ? "&lt;"
                             : c == '>'              ? "&gt;"
                             : c == '&'              ? "&amp;"
                             : c == '"'              ? "&quot;"
                             : c == '\''             ? "&#39;"
                             : c < 0x20 || c == 0x7f ? "\xEF\xBF\xBD" /* U+FFFD */
                                                     : NULL;
        if (entity)
            fputs(entity, f);
        else
            fputc(c, f);
    }
}

void rep_esc(FILE *f, const char *s) { rep_esc_n(f, s, (size_t)-1); }

/* ------------------------------------------------------------------------ */
/* a series: at most NPTS points in file order */

static void pts_init(series_pts *s) {
    memset(s, 0, sizeof *s);
    s->per = 1;
    s->last_seg = -1;
    s->ymin = INFINITY;
    s->ymax = -INFINITY;
}

int rep_bucket_points(const bucket *b) { return b->n == 1 || (b->x0 == b->x1 && b->y0 == b->y1) ? 1 : 2; }

/* Halves the buckets by merging neighbours of one segment (of any once
 * there are too many segments to halve otherwise). */
static void pts_merge(series_pts *s) {
    for (int pass = 0; pass < 2; pass++) {
        int out = 0;
        for (int i = 0; i < s->n; i++) {
            bucket m = s->b[i];
            if (i + 1 < s->n && (pass || s->b[i + 1].seg == m.seg)) {
                const bucket *o = &s->b[i + 1];
                if (o->y0 < m.y0 || m.n == 0)
                    m.x0 = o->x0, m.y0 = o->y0;
                if (o->y1 > m.y1)
                    m.x1 = o->x1, m.y1 = o->y1;
                m.n += o->n;
                m.seg = o->seg;
                i++;
            }
            s->b[out++] = m;
        }
        s->n = out;
        if (s->n <= NPTS / 2)
            break;
    }
    s->per *= 2;
}

static bool pts_add(series_pts *s, double x, double y, int seg) {
    if (!s->b && !(s->b = sr_malloc(sizeof *s->b * NPTS)))
        return false;
    s->count++;
    s->ymin = fmin(s->ymin, y);
    s->ymax = fmax(s->ymax, y);
    s->last_x = x;
    bucket *l = s->n ? &s->b[s->n - 1] : NULL;
    if (l && l->seg == seg && l->n < s->per) {
        if (y < l->y0)
            l->x0 = x, l->y0 = y;
        if (y > l->y1)
            l->x1 = x, l->y1 = y;
        l->n++;
        return true;
    }
    /* a new bucket: raw points up to NPTS, then at most NPTS / 2 buckets
     * (two points each) */
    if (s->n >= (s->per == 1 ? NPTS : NPTS / 2))
        while (s->n >= NPTS / 2)
            pts_merge(s);
    s->b[s->n++] = (bucket){x, y, x, y, seg, 1};
    return true;
}

/* ------------------------------------------------------------------------ */
/* an adaptive step histogram (events beyond MAX_MARKS): NHIST buckets
 * over [lo, lo + NHIST * w), the width doubling to take any finite step */

static void hist_add(step_hist *h, double x) {
    if (h->total == 0) {
        h->lo = floor(x);
        h->w = 1;
    }
    h->total++;
    while (x >= h->lo + NHIST * h->w || x < h->lo) {
        if (!isfinite(h->lo - NHIST * h->w) || h->w > 1e300)
            break; /* clamp below */
        long long c[NHIST] = {0};
        bool down = x < h->lo;
        for (int i = 0; i < NHIST; i++)
            c[(down ? NHIST + i : i) / 2] += h->c[i];
        memcpy(h->c, c, sizeof c);
        if (down)
            h->lo -= NHIST * h->w;
        h->w *= 2;
    }
    double k = floor((x - h->lo) / h->w);
    h->c[k < 0 ? 0 : k >= NHIST ? NHIST - 1 : (int)k]++;
}

/* ------------------------------------------------------------------------ */
/* the median of the step times */

static double bin_lo(int i) { return pow(10.0, -3.0 + 10.0 * i / NLOG); }

static bool median_add(median_acc *m, double v) {
    if (!m->exact && !(m->exact = sr_malloc(sizeof(double) * MAX_EXACT)))
        return false;
    m->total++;
    if (m->n < MAX_EXACT && !m->bins) {
        m->exact[m->n++] = v;
        return true;
    }
    if (!m->bins) {
        if (!(m->bins = sr_calloc(NLOG, sizeof *m->bins)))
            return false;
        long long t = m->total - 1;
        m->total = 0;
        for (int i = 0; i < m->n; i++)
            median_add(m, m->exact[i]);
        m->total = t + 1;
        m->n = 0;
    }
    double k = v > 0 ? floor((log10(v) + 3.0) * NLOG / 10.0) : -1;
    if (k < 0)
        m->below++;
    else if (k >= NLOG)
        m->above++;
    else
        m->bins[(int)k]++;
    return true;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

double rep_median_of(median_acc *m, bool *approx) {
    *approx = m->bins != NULL;
    if (!m->bins) {
        if (m->n == 0)
            return NAN;
        qsort(m->exact, (size_t)m->n, sizeof *m->exact, cmp_double);
        return m->n % 2 ? m->exact[m->n / 2] : 0.5 * (m->exact[m->n / 2 - 1] + m->exact[m->n / 2]);
    }
    long long want = m->total / 2, seen = m->below;
    if (seen > want)
        return 0.0;
    for (int i = 0; i < NLOG; i++) {
        seen += m->bins[i];
        if (seen > want)
            return sqrt(bin_lo(i) * bin_lo(i + 1));
    }
    return pow(10.0, 7.0);
}

/* ------------------------------------------------------------------------ */
/* what the stream folds into */

const char *const kind_names[NKIND] = {"start", "checkpoint", "preempt", "resume", "eval", "other"};
const char *const named_prefix[NNAMED] = {"val_loss/", "acc/", "acc_norm/"};
const char *const palette[10] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                 "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};

double rep_num(const json_t *o, const char *key) {
    const json_t *v = json_object_get(o, key);
    return json_is_number(v) ? json_number_value(v) : NAN;
}

/* Element i of array a as a number (NAN when it is none). */
double rep_nth(const json_t *a, size_t i) {
    const json_t *v = json_array_get(a, i);
    return json_is_number(v) ? json_number_value(v) : NAN;
}

const char *rep_str(const json_t *o, const char *key) {
    const json_t *v = json_object_get(o, key);
    return json_is_string(v) ? json_string_value(v) : NULL;
}

static void state_init(state *s) {
    memset(s, 0, sizeof *s);
    sr_goodput_begin(&s->gp_acc);
    const series_def base[S_MEM0] = {
        {"loss", "training loss", palette[0], "loss", 1, false, false},
        {"val_loss", "validation loss", palette[1], "loss", 1, false, false},
        {"lr", "learning rate", palette[2], "lr", 1, false, false},
        {"grad_norm", "gradient norm", palette[3], "grad-norm", 1, false, false},
        {"tokens_per_s", "tokens/s", palette[4], "tokens-per-s", 1, false, true},
        {"mfu", "MFU (%)", palette[5], "mfu", 100, false, true},
        {"comm_exposed_ms", "exposed communication (ms)", palette[6], "comm", 1, false, false},
        {"step_ms", "step time (ms)", palette[7], "comm", 1, false, false},
    };
    memcpy(s->def, base, sizeof base);
    for (int c = 0; c < SR_MEM_NCAT; c++) {
        snprintf(s->memkey[c], sizeof s->memkey[c], "mem_%s_peak", sr_mem_name(c));
        s->def[S_MEM0 + c] =
            (series_def){s->memkey[c], sr_mem_name(c), palette[c % 10], "memory", 1.0 / (1024.0 * 1024.0), true, true};
    }
    for (int i = 0; i < NSERIES; i++)
        pts_init(&s->pts[i]);
    s->xmin = INFINITY;
    s->xmax = -INFINITY;
    s->final_val = s->best_val = s->final_loss = s->tokens = s->first_time = NAN;
    s->run_max = s->run_last = s->prev_max = s->prev_last = s->max_step = NAN;
    s->max_before_run = NAN;
}

/* Drops every named series (the step records' copies, once an eval event
 * comes, or at the end). */
static void named_reset(state *s) {
    for (int i = 0; i < s->nnamed; i++) {
        free(s->named[i].key);
        free(s->named[i].pts.b);
    }
    s->nnamed = 0;
    memset(s->named_count, 0, sizeof s->named_count);
    s->named_dropped = 0;
}

static void state_free(state *s) {
    for (int i = 0; i < NSERIES; i++)
        free(s->pts[i].b);
    named_reset(s);
    free(s->named);
    for (int i = 0; i < s->nmarks; i++)
        free(s->marks[i].title);
    free(s->marks);
    free(s->step_ms.exact);
    free(s->step_ms.bins);
    json_decref(s->config);
    json_decref(s->profile);
    free(s->grid);
}

/* One record's busy_ms_ranks into the grid (false when out of memory);
 * a one-rank record has nothing to compare: no grid. */
static bool grid_add(state *s, const json_t *o, double step) {
    const json_t *a = json_object_get(o, "busy_ms_ranks");
    double med = rep_num(o, "busy_ms_median");
    if (!json_is_array(a) || json_array_size(a) < 2 || !isfinite(med))
        return true;
    if (!s->grid) {
        s->grid = sr_calloc(1, sizeof *s->grid);
        if (!s->grid)
            return false;
        s->grid->span = 1;
    }
    busy_grid *g = s->grid;
    s->world = (int)json_array_size(a);
    if (g->n_in_col == g->span) { /* the column is full: the next one */
        g->cols++;
        g->n_in_col = 0;
    }
    if (g->cols == GRID_COLS) { /* every column full: merge neighbours */
        for (int c = 0; c < GRID_COLS / 2; c++) {
            g->first_step[c] = g->first_step[2 * c];
            g->last_step[c] = g->last_step[2 * c + 1];
            g->med[c] = g->med[2 * c] + g->med[2 * c + 1];
            g->cnt[c] = g->cnt[2 * c] + g->cnt[2 * c + 1];
            for (int r = 0; r < GRID_RANKS; r++)
                g->cell[r][c] = g->cell[r][2 * c] + g->cell[r][2 * c + 1];
        }
        for (int c = GRID_COLS / 2; c < GRID_COLS; c++) {
            g->med[c] = 0;
            g->cnt[c] = 0;
            for (int r = 0; r < GRID_RANKS; r++)
                g->cell[r][c] = 0;
        }
        g->cols = GRID_COLS / 2;
        g->span *= 2;
        g->n_in_col = 0;
    }
    int c = g->cols;
    if (!g->cnt[c])
        g->first_step[c] = step;
    g->last_step[c] = step;
    g->med[c] += med;
    g->cnt[c]++;
    g->n_in_col++;
    size_t n = json_array_size(a);
    for (size_t r = 0; r < n && r < GRID_RANKS; r++) {
        double v = json_number_value(json_array_get(a, r));
        g->cell[r][c] += isfinite(v) ? v : 0;
    }
    if ((int)(n < GRID_RANKS ? n : GRID_RANKS) > g->ranks)
        g->ranks = (int)(n < GRID_RANKS ? n : GRID_RANKS);
    return true;
}

static void strag_add(state *s, const json_t *o, double step) {
    s->strag_total++;
    if (s->nstrag == MAX_STRAG)
        return;
    straggler *g = &s->strag[s->nstrag++];
    g->step = step;
    g->rank = (int)rep_num(o, "rank");
    g->busy = rep_num(o, "busy_ms");
    g->median = rep_num(o, "median_ms");
    g->over = rep_num(o, "over_pct");
    snprintf(g->host, sizeof g->host, "%.*s", MAX_STR, rep_str(o, "host") ? rep_str(o, "host") : "?");
}

/* s cut to at most max bytes at a character boundary, "..." added where
 * cut, into out (max + 4 bytes at least); returns out. */
static const char *cut_text(char *out, const char *s, size_t max) {
    size_t n = strlen(s);
    if (n <= max) {
        memcpy(out, s, n + 1);
        return out;
    }
    while (max > 0 && ((unsigned char)s[max] & 0xC0) == 0x80)
        max--;
    memcpy(out, s, max);
    memcpy(out + max, "...", 4);
    return out;
}

/* A key's named kind (N_SET, N_ACC, N_NORM; -1: none) and, through *name,
 * the set or task past its prefix (never empty). */
static int named_kind(const char *key, const char **name) {
    for (int k = 0; k < NNAMED; k++) {
        size_t n = strlen(named_prefix[k]);
        if (strncmp(key, named_prefix[k], n) == 0 && key[n]) {
            *name = key + n;
            return k;
        }
    }
    return -1;
}

static int named_cap(int kind) { return kind == N_SET ? MAX_SETS : MAX_TASKS; }

/* An eval event's detail: its val_loss (when it has one), then each
 * val_loss/NAME, acc/TASK and acc_norm/TASK key in the file's order with
 * its value (accuracies in percent), keys cut to MAX_STR; past a kind's
 * cap the rest only counted. */
static void eval_title(FILE *f, const json_t *o) {
    double val = rep_num(o, "val_loss");
    const char *sep = ": ", *key, *name;
    if (isfinite(val)) {
        fprintf(f, ": val_loss %.4f", val);
        sep = ", ";
    }
    int shown[NNAMED] = {0};
    long long more = 0;
    char cut[MAX_STR + 8];
    json_t *v;
    json_object_foreach((json_t *)o, key, v) {
        int k = named_kind(key, &name);
        if (k < 0 || !json_is_number(v))
            continue;
        if (shown[k] >= named_cap(k)) {
            more++;
            continue;
        }
        shown[k]++;
        double x = json_number_value(v);
        fprintf(f, "%s%s ", sep, cut_text(cut, key, MAX_STR));
        if (k == N_SET)
            fprintf(f, "%.4f", x);
        else
            fprintf(f, "%.2f%%", 100 * x);
        sep = ", ";
    }
    if (more)
        fprintf(f, "%s%lld more", sep, more);
}

/* A marker's title: what the event says, strings cut to MAX_STR. */
static char *event_title(const json_t *o, const char *event, double step) {
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f)
        return NULL;
    char cut[MAX_STR + 8];
#define CUT(s)                                                                                                         \
    (snprintf(cut, sizeof cut, "%.*s%s", MAX_STR, (s) ? (s) : "?", (s) && strlen(s) > MAX_STR ? "..." : ""), cut)
    fprintf(f, "%s at step %.0f", CUT(event), step);
    if (strcmp(event, "checkpoint") == 0)
        fprintf(f, ": step %.0f committed at step %.0f, %.2f s, %.1f MB%s", rep_num(o, "started_step"),
                rep_num(o, "committed_step"), rep_num(o, "duration_s"), rep_num(o, "bytes") / 1e6,
                json_is_true(json_object_get(o, "async")) ? ", asynchronous" : "");
    else if (strcmp(event, "preempt") == 0)
        fprintf(f, ": signal %s", rep_str(o, "signal") ? CUT(rep_str(o, "signal")) : "(seen by another rank)");
    else if (strcmp(event, "start") == 0)
        fprintf(f, ": restart %.0f, resume step %.0f, %.0f ranks, job %s", rep_num(o, "restart"),
                rep_num(o, "resume_step"), rep_num(o, "world_size"), CUT(rep_str(o, "job_id")));
    else if (strcmp(event, "resume") == 0)
        fprintf(f, ": from %s", CUT(rep_str(o, "from")));
    else if (strcmp(event, "eval") == 0)
        eval_title(f, o);
    else if (strcmp(event, "profile") == 0)
        fprintf(f, ": steps %.0f to %.0f, %.3f ms per step, the device busy %.3f ms (%s)",
                rep_nth(json_object_get(o, "steps"), 0), step, rep_num(o, "wall_ms"), rep_num(o, "busy_ms"),
                CUT(rep_str(o, "times")));
#undef CUT
    if (fclose(f) != 0) {
        free(text);
        return NULL;
    }
    return text;
}

static bool add_point(state *s, int i, double x, double y) {
    if (!isfinite(y))
        return true;
    return pts_add(&s->pts[i], x, y * s->def[i].scale, s->seg * 2 + (s->redoing ? 1 : 0));
}

/* A run begins: how the previous one ended decides what its lost time is
 * counted as (preempted or crashed); the start event is the run's config. */
static void fold_run_start(state *s, const json_t *o, double time) {
    s->runs++;
    s->prev_max = s->run_max;
    s->prev_last = s->run_last;
    double resume = rep_num(o, "resume_step");
    if (isfinite(s->prev_max) && isfinite(resume)) {
        double redone = s->prev_max > resume ? s->prev_max - resume : 0;
        double gap = isfinite(s->prev_last) && isfinite(time) && time > s->prev_last ? time - s->prev_last : 0;
        if (s->run_preempted) {
            s->resumes_pre++;
            s->redone_pre += redone;
            s->gap_pre += gap;
        } else {
            s->resumes_crash++;
            s->redone_crash += redone;
            s->gap_crash += gap;
        }
    }
    s->run_max = NAN;
    s->run_preempted = false;
    /* a run that resumes where the last record left off continues its
     * line; one that redoes steps (or starts over) begins a segment */
    if (!(isfinite(resume) && resume > 0 && isfinite(s->max_step) && resume >= s->max_step))
        s->seg++;
    s->max_before_run = s->max_step;
    json_decref(s->config);
    s->config = json_deep_copy(o);
}

/* The validation loss: from eval events once there is one (the step
 * records' copies are then dropped from the chart), else from the step
 * records. */
static bool fold_val(state *s, const json_t *o, int kind, const char *event, double step) {
    double val = NAN;
    if (kind == K_EVAL) {
        val = rep_num(o, "val_loss");
        if (!s->eval_events) {
            s->eval_events = true;
            free(s->pts[S_VAL].b);
            pts_init(&s->pts[S_VAL]);
            named_reset(s);
        }
    } else if (!event && !s->eval_events)
        val = rep_num(o, "val_loss");
    if (!isfinite(val))
        return true;
    s->final_val = val;
    s->final_val_step = step;
    if (!isfinite(s->best_val) || val < s->best_val) {
        s->best_val = val;
        s->best_val_step = step;
    }
    return add_point(s, S_VAL, step, val);
}

/* The named series of `key` (kind k), made at its first value (its label
 * cut to MAX_LABEL, its colour its place in its chart); NULL when new
 * and its kind is at its cap, or (*oom set) when out of memory. */
static named_series *named_get(state *s, const char *key, int k, bool *oom) {
    for (int i = 0; i < s->nnamed; i++)
        if (strcmp(s->named[i].key, key) == 0)
            return &s->named[i];
    if (s->named_count[k] >= named_cap(k))
        return NULL;
    size_t len = strlen(key);
    char *copy = sr_malloc(len + 1);
    if (!copy || (!s->named && !(s->named = sr_calloc(MAX_NAMED, sizeof *s->named)))) {
        free(copy);
        *oom = true;
        return NULL;
    }
    memcpy(copy, key, len + 1);
    int place = k == N_SET ? s->named_count[N_SET] : s->named_count[N_ACC] + s->named_count[N_NORM];
    named_series *n = &s->named[s->nnamed++];
    s->named_count[k]++;
    *n = (named_series){.key = copy, .name = copy + strlen(named_prefix[k]), .kind = k};
    char label[MAX_STR + 16];
    snprintf(label, sizeof label, "%s%.*s", k == N_SET ? "" : k == N_ACC ? "acc " : "acc_norm ", MAX_STR, n->name);
    cut_text(n->label, label, MAX_LABEL);
    n->def =
        (series_def){n->key, n->label,  palette[place % 10], k == N_SET ? "val-sets" : "accuracy", k == N_SET ? 1 : 100,
                     false,  k != N_SET};
    pts_init(&n->pts);
    n->final = n->final_step = n->best = n->best_step = NAN;
    return n;
}

/* The named series of one record: an eval event's, or a step record's
 * while no eval event came (fold_val's rule); each val_loss/NAME,
 * acc/TASK and acc_norm/TASK key with a finite number, its final and best
 * value kept; a new name past its kind's cap counted in named_dropped. */
static bool fold_named(state *s, const json_t *o, int kind, const char *event, double step) {
    if (kind != K_EVAL && (event || s->eval_events))
        return true;
    const char *key, *name;
    json_t *v;
    json_object_foreach((json_t *)o, key, v) {
        int k = named_kind(key, &name);
        if (k < 0 || !json_is_number(v) || !isfinite(json_number_value(v)))
            continue;
        bool oom = false;
        named_series *n = named_get(s, key, k, &oom);
        if (oom)
            return false;
        if (!n) {
            s->named_dropped++;
            continue;
        }
        double y = json_number_value(v) * n->def.scale;
        n->final = y;
        n->final_step = step;
        if (!isfinite(n->best) || (k == N_SET ? y < n->best : y > n->best)) {
            n->best = y;
            n->best_step = step;
        }
        if (!pts_add(&n->pts, step, y, s->seg * 2 + (s->redoing ? 1 : 0)))
            return false;
    }
    return true;
}

/* The named series of `kind` whose name is `name` (NULL: none). */
const named_series *rep_named_find(const state *s, int kind, const char *name) {
    for (int i = 0; i < s->nnamed; i++)
        if (s->named[i].kind == kind && strcmp(s->named[i].name, name) == 0)
            return &s->named[i];
    return NULL;
}

/* An event's marker (its class is the event name, made CSS-safe); past
 * MAX_MARKS it only counts in its kind's histogram. */
static bool fold_mark(state *s, const json_t *o, int kind, const char *event, double step, long long lineno) {
    if (s->nmarks >= MAX_MARKS) {
        hist_add(&s->over[kind], step);
        return true;
    }
    if (!s->marks && !(s->marks = sr_calloc(MAX_MARKS, sizeof *s->marks)))
        return false;
    mark *m = &s->marks[s->nmarks];
    *m = (mark){kind, step, lineno, event_title(o, event, step), ""};
    if (!m->title)
        return false;
    size_t j = 0;
    for (const char *c = event; *c && j + 1 < sizeof m->cls; c++, j++)
        m->cls[j] = (*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9') || *c == '-' || *c == '_' ? *c : '_';
    s->nmarks++;
    return true;
}

/* A step record's summary fields and chart series (memory stacked). */
static bool fold_step(state *s, const json_t *o, double step) {
    s->final_loss = rep_num(o, "loss");
    double t = rep_num(o, "tokens");
    if (isfinite(t)) {
        s->tokens = t;
        s->tokens_step = step;
    }
    double ms = rep_num(o, "step_ms");
    if (isfinite(ms) && !median_add(&s->step_ms, ms))
        return false;
    for (int i = 0; i < NSERIES; i++) {
        if (i == S_VAL)
            continue;
        double v = rep_num(o, s->def[i].key);
        if (i >= S_MEM0 && isfinite(v)) {
            if (v > 0)
                s->any_mem[i - S_MEM0] = true;
            /* stacked: the sum of the categories before it */
            for (int j = S_MEM0; j < i && isfinite(v); j++)
                v += rep_num(o, s->def[j].key);
        }
        if (!add_point(s, i, step, v))
            return false;
    }
    return true;
}

/* One record into the state. */
static bool fold(state *s, const json_t *o, long long lineno) {
    sr_goodput_add(&s->gp_acc, o);
    const char *event = rep_str(o, "event");
    double step = rep_num(o, "step"), time = rep_num(o, "time");
    s->xmin = fmin(s->xmin, step);
    s->xmax = fmax(s->xmax, step);
    if (isfinite(time)) {
        if (!isfinite(s->first_time))
            s->first_time = time;
        s->last_time = time;
    }
    int kind = K_OTHER;
    for (int k = 0; event && k < K_OTHER; k++)
        if (strcmp(event, kind_names[k]) == 0)
            kind = k;
    if (event) {
        s->events++;
        s->kinds[kind]++;
        if (strcmp(event, "straggler") == 0)
            strag_add(s, o, step);
        if (strcmp(event, "profile") == 0 && json_is_array(json_object_get(o, "families"))) {
            json_decref(s->profile);
            s->profile = json_deep_copy(o);
        }
    } else {
        s->steps++;
        if (!grid_add(s, o, step))
            return false;
    }
    if (kind == K_START)
        fold_run_start(s, o, time);
    if (kind == K_PREEMPT)
        s->run_preempted = true;
    if (!isfinite(s->run_max) || step > s->run_max)
        s->run_max = step;
    if (isfinite(time))
        s->run_last = time;
    /* the steps a run redoes: at or below the furthest step before it */
    if (!event)
        s->redoing = isfinite(s->max_before_run) && step <= s->max_before_run;
    if (!isfinite(s->max_step) || step > s->max_step)
        s->max_step = step;
    if (!fold_val(s, o, kind, event, step) || !fold_named(s, o, kind, event, step))
        return false;
    return event ? fold_mark(s, o, kind, event, step, lineno) : fold_step(s, o, step);
}

/* ------------------------------------------------------------------------ */
/* reading */

/* Reads the next line into buf (at most MAX_LINE bytes); a longer one is
 * read to its end and reported through *too_long.  Returns the length, or
 * -1 at the end of the file.  *complete: it ended with a newline. */
static long next_line(FILE *f, char *buf, bool *too_long, bool *complete) {
    long n = 0;
    int c;
    *too_long = false;
    *complete = false;
    while ((c = getc_unlocked(f)) != EOF) {
        if (c == '\n') {
            *complete = true;
            break;
        }
        if (n < MAX_LINE)
            buf[n++] = (char)c;
        else
            *too_long = true;
    }
    if (c == EOF && n == 0 && !*too_long)
        return -1;
    buf[n] = '\0';
    return n;
}

static sr_status read_stream(const char *path, state *s, FILE *err) {
    FILE *f;
    sr_status st =
        sr_fsio_open_input_file(path, "the metrics file", "give the file a run wrote with log.metrics: PATH", &f);
    if (st != SR_OK)
        return st;
    char *line = sr_malloc(MAX_LINE + 1);
    if (!line) {
        fclose(f);
        return sr_error_oom("the metrics line");
    }
    long len;
    bool too_long, complete;
    while ((len = next_line(f, line, &too_long, &complete)) >= 0) {
        long long lineno = ++s->lines;
        while (len > 0 && line[len - 1] == '\r')
            line[--len] = '\0';
        if (len == 0 && !too_long)
            continue;
        json_error_t je;
        json_t *o = too_long ? NULL : json_loadb(line, (size_t)len, JSON_REJECT_DUPLICATES, &je);
        const char *why = NULL;
        char detail[256];
        if (too_long) {
            snprintf(detail, sizeof detail, "longer than %d bytes", MAX_LINE);
            why = detail;
        } else if (!o) {
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
            fprintf(err, "shardrun: %s:%lld: %s; line skipped\n", path, lineno, why);
            s->skipped++;
            json_decref(o);
            continue;
        }
        bool ok = fold(s, o, lineno);
        json_decref(o);
        if (!ok) {
            st = sr_error_oom("the report");
            break;
        }
    }
    if (st == SR_OK && ferror(f))
        st = sr_error(SR_ERR_IO, "%s: read error: %s", path, strerror(errno));
    free(line);
    fclose(f);
    return st;
}

/* ------------------------------------------------------------------------ */
/* the summary */

static totals totals_of(state *s) {
    totals t = {0};
    double med = rep_median_of(&s->step_ms, &t.approx);
    t.step_s = isfinite(med) ? med / 1000.0 : 0.0;
    t.lost_pre = s->redone_pre * t.step_s + s->gap_pre;
    t.lost_crash = s->redone_crash * t.step_s + s->gap_crash;
    return t;
}

const char *rep_plural(double n) { return n == 1 ? "" : "s"; }

/* The named series' lines: each set's final and best loss, each task's
 * final accuracies (percent) with their steps, names escaped for a
 * terminal; then what was dropped. */
static void print_named(FILE *out, const state *s) {
    char esc[MAX_STR + 8];
    for (int i = 0; i < s->nnamed; i++) {
        const named_series *n = &s->named[i];
        if (n->kind == N_SET) {
            fprintf(out, "  validation loss (%s): final %.4f (step %.0f), best %.4f (step %.0f)\n",
                    sr_escape(n->name, esc, sizeof esc), n->final, n->final_step, n->best, n->best_step);
            continue;
        }
        const named_series *acc = n->kind == N_ACC ? n : rep_named_find(s, N_ACC, n->name);
        const named_series *norm = n->kind == N_NORM ? n : rep_named_find(s, N_NORM, n->name);
        if (n != acc && acc)
            continue; /* with its acc */
        fprintf(out, "  accuracy (%s):", sr_escape(n->name, esc, sizeof esc));
        if (acc)
            fprintf(out, " acc final %.2f%% (step %.0f)", acc->final, acc->final_step);
        if (norm)
            fprintf(out, "%s acc_norm final %.2f%% (step %.0f)", acc ? "," : "", norm->final, norm->final_step);
        fputc('\n', out);
    }
    if (s->named_dropped)
        fprintf(out,
                "  ...and %lld value%s of more validation sets or tasks, not charted (at most %d sets, %d tasks)\n",
                s->named_dropped, rep_plural((double)s->named_dropped), MAX_SETS, MAX_TASKS);
}

static void print_summary(FILE *out, const char *path, const state *s, const totals *t) {
    fprintf(out,
            "report: %s: %lld step record%s, %lld event%s (%lld start%s, %lld resume%s, %lld preemption%s, %lld "
            "checkpoint%s, %lld evaluation%s), %lld line%s skipped\n",
            path, s->steps, rep_plural((double)s->steps), s->events, rep_plural((double)s->events), s->kinds[K_START],
            rep_plural((double)s->kinds[K_START]), s->kinds[K_RESUME], rep_plural((double)s->kinds[K_RESUME]),
            s->kinds[K_PREEMPT], rep_plural((double)s->kinds[K_PREEMPT]), s->kinds[K_CHECKPOINT],
            rep_plural((double)s->kinds[K_CHECKPOINT]), s->kinds[K_EVAL], rep_plural((double)s->kinds[K_EVAL]),
            s->skipped, rep_plural((double)s->skipped));
    if (isfinite(s->final_val))
        fprintf(out, "  validation loss: final %.4f (step %.0f), best %.4f (step %.0f)\n", s->final_val,
                s->final_val_step, s->best_val, s->best_val_step);
    else
        fprintf(out, "  validation loss: none recorded (train.eval_every and data.val)\n");
    print_named(out, s);
    if (isfinite(s->final_loss))
        fprintf(out, "  training loss: final %.4f\n", s->final_loss);
    if (isfinite(s->tokens))
        fprintf(out, "  tokens: %.0f (step %.0f)\n", s->tokens, s->tokens_step);
    fprintf(out, "  wall time: %.1f s from the first record to the last (%d run%s)\n",
            isfinite(s->first_time) ? s->last_time - s->first_time : 0.0, s->runs, rep_plural(s->runs));
    fprintf(out,
            "  time lost to preemption: %.1f s = %.0f step%s redone x %.3f s (median step%s) + %.1f s between an "
            "exit and the next start (%d resume%s after a preemption)\n",
            t->lost_pre, s->redone_pre, rep_plural(s->redone_pre), t->step_s, t->approx ? ", to 0.1 %" : "", s->gap_pre,
            s->resumes_pre, rep_plural(s->resumes_pre));
    fprintf(out,
            "  time lost to crashes: %.1f s = %.0f step%s redone x %.3f s + %.1f s between the last record and the "
            "next start (%d restart%s without a preemption)\n",
            t->lost_crash, s->redone_crash, rep_plural(s->redone_crash), t->step_s, s->gap_crash, s->resumes_crash,
            rep_plural(s->resumes_crash));
    if (s->grid && !s->nstrag)
        fprintf(out, "  stragglers: none named (log.straggler_pct)\n");
    for (int i = 0; i < s->nstrag; i++)
        fprintf(out,
                "  straggler: rank %d (host %s) at step %.0f: busy %.1f ms per step, %.0f%% above the median %.1f ms\n",
                s->strag[i].rank, s->strag[i].host, s->strag[i].step, s->strag[i].busy, s->strag[i].over,
                s->strag[i].median);
    if (s->strag_total > s->nstrag)
        fprintf(out, "  ...and %lld more straggler warnings\n", s->strag_total - s->nstrag);
    if (s->gp_ok) {
        char line[256];
        sr_goodput_line(&s->gp, line, sizeof line);
        fprintf(out, "  %s\n", line);
    }
    if (s->profile)
        fprintf(out, "  GPU profile: step %.0f, %.3f ms per step, the device busy %.3f ms (%s)\n",
                rep_num(s->profile, "step"), rep_num(s->profile, "wall_ms"), rep_num(s->profile, "busy_ms"),
                rep_str(s->profile, "times") ? rep_str(s->profile, "times") : "?");
}

typedef struct {
    char *text;
    size_t len;
} page;

static sr_status write_page(int fd, const char *name, void *ctx) {
    const page *p = ctx;
    return sr_fsio_write_all(fd, p->text, p->len) == 0 ? SR_OK : sr_fsio_write_error(name, errno);
}

sr_status sr_report(const char *metrics, const char *out, FILE *summary_out, FILE *err) {
    state *s = sr_malloc(sizeof *s);
    if (!s)
        return sr_error_oom("the report");
    state_init(s);
    sr_status st = read_stream(metrics, s, err);
    s->gp_ok = sr_goodput_end(&s->gp_acc, &s->gp);
    if (s->gp_ok)
        sr_goodput_set_queue(&s->gp, 0, "not asked here: shardrun ckpt list asks Slurm's accounting (sacct)");
    if (st == SR_OK && s->steps + s->events == 0)
        st = sr_error(SR_ERR_DATA,
                      "%s: no records (%lld line%s skipped) (hint: give the file a run wrote with log.metrics: PATH)",
                      metrics, s->skipped, rep_plural((double)s->skipped));
    if (st == SR_OK)
        st = sr_fsio_guard_input(metrics); /* never `report run.jsonl -o run.jsonl` */
    char *dflt = NULL;
    if (st == SR_OK && !out) {
        size_t n = strlen(metrics) + 6;
        if (!(dflt = sr_malloc(n)))
            st = sr_error_oom("the report's name");
        else {
            snprintf(dflt, n, "%s.html", metrics); /* <metrics>.html: run.jsonl -> run.jsonl.html */
            out = dflt;
        }
    }
    totals t = totals_of(s);
    page p = {0};
    if (st == SR_OK) {
        FILE *f = open_memstream(&p.text, &p.len);
        if (!f)
            st = sr_error_oom("the report page");
        else {
            rep_render(f, metrics, s, &t);
            if (fclose(f) != 0)
                st = sr_error_oom("the report page");
        }
    }
    if (st == SR_OK)
        st = sr_fsio_atomic_write(out, write_page, &p);
    if (st == SR_OK) {
        print_summary(summary_out, metrics, s, &t);
        fprintf(summary_out, "  wrote %s (%zu bytes)\n", out, p.len);
    }
    free(p.text);
    free(dflt);
    state_free(s);
    free(s);
    return st;
}
