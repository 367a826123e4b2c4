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
 *    read from a log-scale histogram (0.1 % bins).
 * Every string from the file is escaped for where it lands (text or
 * attribute), cut to MAX_STR bytes, control characters replaced. */
#include "srconfig.h"

#include "report.h"

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

enum {
    MAX_LINE = 65536,  /* bytes of one line; longer lines are skipped */
    NPTS = 4096,       /* points per series at most */
    MAX_MARKS = 1000,  /* event markers (and table rows) at most */
    NHIST = 256,       /* step buckets of the events beyond MAX_MARKS */
    MAX_EXACT = 65536, /* step times kept exactly for the median */
    NLOG = 20000,      /* log-scale bins of the median beyond that */
    MAX_STR = 64,      /* bytes of a string from the file shown */
    GRID_RANKS = 256,  /* ranks of the busy-time grid drawn (the first ones) */
    GRID_COLS = 96,    /* its columns: log intervals, merged in pairs when full */
    MAX_STRAG = 50,    /* straggler events listed */
};

/* Busy time per rank and log interval (the straggler report's records):
 * each cell sums a rank's busy_ms over the records of its column and the
 * records' busy_ms_median; a column holds `span` records; when every
 * column is full, neighbours merge and span doubles. */
typedef struct {
    int ranks, cols, span, n_in_col;
    double first_step[GRID_COLS], last_step[GRID_COLS];
    double med[GRID_COLS];
    int cnt[GRID_COLS];
    double cell[GRID_RANKS][GRID_COLS];
} busy_grid;

typedef struct {
    double step, busy, median, over;
    int rank;
    char host[MAX_STR + 1];
} straggler;

/* ------------------------------------------------------------------------ */
/* escaping */

/* s (NULL: "?") for HTML text or a double-quoted attribute: & < > " '
 * escaped, control characters as U+FFFD, cut after `max` bytes at a
 * character boundary with an ellipsis. */
static void esc_n(FILE *f, const char *s, size_t max) {
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

static void esc(FILE *f, const char *s) { esc_n(f, s, (size_t)-1); }

/* ------------------------------------------------------------------------ */
/* a series: at most NPTS points in file order */

typedef struct {
    double x0, y0, x1, y1; /* the bucket's minimum and maximum (x0 <= x1 in file order) */
    int seg;               /* the segment: runs and redone parts apart */
    int n;                 /* records in it */
} bucket;

typedef struct {
    bucket *b;
    int n;
    long long per; /* records per bucket: 1 while every record is a point */
    double last_x; /* the newest record's step */
    int last_seg;
    long long count;
    double ymin, ymax;
} series_pts;

static void pts_init(series_pts *s) {
    memset(s, 0, sizeof *s);
    s->per = 1;
    s->last_seg = -1;
    s->ymin = INFINITY;
    s->ymax = -INFINITY;
}

static int bucket_points(const bucket *b) { return b->n == 1 || (b->x0 == b->x1 && b->y0 == b->y1) ? 1 : 2; }

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

typedef struct {
    double lo, w;
    long long c[NHIST];
    long long total;
} step_hist;

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

typedef struct {
    double *exact;
    int n;
    long long *bins; /* NLOG bins over log10(ms) in [-3, 7) once exact is full */
    long long total, below, above;
} median_acc;

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

static double median_of(median_acc *m, bool *approx) {
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

enum { K_START, K_CHECKPOINT, K_PREEMPT, K_RESUME, K_EVAL, K_OTHER, NKIND };
static const char *const kind_names[NKIND] = {"start", "checkpoint", "preempt", "resume", "eval", "other"};

typedef struct {
    int kind;
    double step;
    long long line;
    char *title;  /* as text, strings from the file cut to MAX_STR */
    char cls[24]; /* the kind as a class name: letters, digits, - and _ */
} mark;

/* The charts' series, in the order drawn. */
typedef struct {
    const char *key, *label, *color, *chart;
    double scale;
    bool stacked;
} series_def;

static const char *const palette[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                      "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};

enum { S_LOSS, S_VAL, S_LR, S_GN, S_TPS, S_MFU, S_COMM, S_STEPMS, S_MEM0 };
#define NSERIES (S_MEM0 + SR_MEM_NCAT)

typedef struct {
    /* counts */
    long long lines, steps, events, skipped, kinds[NKIND];
    /* series */
    series_def def[NSERIES];
    char memkey[SR_MEM_NCAT][48];
    series_pts pts[NSERIES];
    bool eval_events; /* val_loss from eval events (else from step records) */
    bool any_mem[SR_MEM_NCAT];
    /* the x range */
    double xmin, xmax;
    /* segments */
    int seg;
    double max_step, max_before_run;
    bool redoing;
    /* events */
    mark *marks;
    int nmarks;
    step_hist over[NKIND];
    /* summary */
    double final_val, best_val, final_loss, final_val_step, best_val_step;
    double tokens, tokens_step, first_time, last_time;
    int runs;
    double run_max, run_last, prev_max, prev_last;
    bool run_preempted;
    int resumes_pre, resumes_crash;
    double redone_pre, redone_crash, gap_pre, gap_crash;
    median_acc step_ms;
    json_t *config;  /* the newest start event */
    json_t *profile; /* the newest profile event (SHARDRUN_CUDA_PROFILE, profile.h) */
    busy_grid *grid; /* NULL until a record has busy_ms_ranks */
    int world;       /* ranks of the newest such record */
    straggler strag[MAX_STRAG];
    int nstrag;
    long long strag_total;
} state;

static double num(const json_t *o, const char *key) {
    const json_t *v = json_object_get(o, key);
    return json_is_number(v) ? json_number_value(v) : NAN;
}

/* Element i of array a as a number (NAN when it is none). */
static double nth(const json_t *a, size_t i) {
    const json_t *v = json_array_get(a, i);
    return json_is_number(v) ? json_number_value(v) : NAN;
}

static const char *str(const json_t *o, const char *key) {
    const json_t *v = json_object_get(o, key);
    return json_is_string(v) ? json_string_value(v) : NULL;
}

static void state_init(state *s) {
    memset(s, 0, sizeof *s);
    const series_def base[S_MEM0] = {
        {"loss", "training loss", palette[0], "loss", 1, false},
        {"val_loss", "validation loss", palette[1], "loss", 1, false},
        {"lr", "learning rate", palette[2], "lr", 1, false},
        {"grad_norm", "gradient norm", palette[3], "grad-norm", 1, false},
        {"tokens_per_s", "tokens/s", palette[4], "tokens-per-s", 1, false},
        {"mfu", "MFU (%)", palette[5], "mfu", 100, false},
        {"comm_exposed_ms", "exposed communication (ms)", palette[6], "comm", 1, false},
        {"step_ms", "step time (ms)", palette[7], "comm", 1, false},
    };
    memcpy(s->def, base, sizeof base);
    for (int c = 0; c < SR_MEM_NCAT; c++) {
        snprintf(s->memkey[c], sizeof s->memkey[c], "mem_%s_peak", sr_mem_name(c));
        s->def[S_MEM0 + c] =
            (series_def){s->memkey[c], sr_mem_name(c), palette[c % 10], "memory", 1.0 / (1024.0 * 1024.0), true};
    }
    for (int i = 0; i < NSERIES; i++)
        pts_init(&s->pts[i]);
    s->xmin = INFINITY;
    s->xmax = -INFINITY;
    s->final_val = s->best_val = s->final_loss = s->tokens = s->first_time = NAN;
    s->run_max = s->run_last = s->prev_max = s->prev_last = s->max_step = NAN;
    s->max_before_run = NAN;
}

static void state_free(state *s) {
    for (int i = 0; i < NSERIES; i++)
        free(s->pts[i].b);
    for (int i = 0; i < s->nmarks; i++)
        free(s->marks[i].title);
    free(s->marks);
    free(s->step_ms.exact);
    free(s->step_ms.bins);
    json_decref(s->config);
    json_decref(s->profile);
    free(s->grid);
}

/* One record's busy_ms_ranks into the grid (false when out of memory). */
static bool grid_add(state *s, const json_t *o, double step) {
    const json_t *a = json_object_get(o, "busy_ms_ranks");
    double med = num(o, "busy_ms_median");
    if (!json_is_array(a) || !json_array_size(a) || !isfinite(med))
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
    g->rank = (int)num(o, "rank");
    g->busy = num(o, "busy_ms");
    g->median = num(o, "median_ms");
    g->over = num(o, "over_pct");
    snprintf(g->host, sizeof g->host, "%.*s", MAX_STR, str(o, "host") ? str(o, "host") : "?");
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
        fprintf(f, ": step %.0f committed at step %.0f, %.2f s, %.1f MB%s", num(o, "started_step"),
                num(o, "committed_step"), num(o, "duration_s"), num(o, "bytes") / 1e6,
                json_is_true(json_object_get(o, "async")) ? ", asynchronous" : "");
    else if (strcmp(event, "preempt") == 0)
        fprintf(f, ": signal %s", str(o, "signal") ? CUT(str(o, "signal")) : "(seen by another rank)");
    else if (strcmp(event, "start") == 0)
        fprintf(f, ": restart %.0f, resume step %.0f, %.0f ranks, job %s", num(o, "restart"), num(o, "resume_step"),
                num(o, "world_size"), CUT(str(o, "job_id")));
    else if (strcmp(event, "resume") == 0)
        fprintf(f, ": from %s", CUT(str(o, "from")));
    else if (strcmp(event, "eval") == 0)
        fprintf(f, ": val_loss %.4f", num(o, "val_loss"));
    else if (strcmp(event, "profile") == 0)
        fprintf(f, ": steps %.0f to %.0f, %.3f ms per step, the device busy %.3f ms (%s)",
                nth(json_object_get(o, "steps"), 0), step, num(o, "wall_ms"), num(o, "busy_ms"), CUT(str(o, "times")));
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

/* One record into the state. */
static bool fold(state *s, const json_t *o, long long lineno) {
    const char *event = str(o, "event");
    double step = num(o, "step"), time = num(o, "time");
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
    if (kind == K_START) {
        /* a run begins: how the previous one ended decides what its lost
         * time is counted as */
        s->runs++;
        s->prev_max = s->run_max;
        s->prev_last = s->run_last;
        double resume = num(o, "resume_step");
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
        s->seg++;
        s->max_before_run = s->max_step;
        json_decref(s->config);
        s->config = json_deep_copy(o);
    }
    if (kind == K_PREEMPT)
        s->run_preempted = true;
    if (!isfinite(s->run_max) || step > s->run_max)
        s->run_max = step;
    if (isfinite(time))
        s->run_last = time;
    /* the steps a run redoes: at or below the furthest step before it */
    bool redoing = !event && isfinite(s->max_before_run) && step <= s->max_before_run;
    if (!event && redoing != s->redoing)
        s->redoing = redoing;
    if (!isfinite(s->max_step) || step > s->max_step)
        s->max_step = step;
    /* the summary */
    double val = NAN;
    if (kind == K_EVAL) {
        val = num(o, "val_loss");
        if (!s->eval_events) {
            /* eval events carry the validation loss: the step records'
             * copies are dropped from the chart */
            s->eval_events = true;
            free(s->pts[S_VAL].b);
            pts_init(&s->pts[S_VAL]);
        }
    } else if (!event && !s->eval_events)
        val = num(o, "val_loss");
    if (isfinite(val)) {
        s->final_val = val;
        s->final_val_step = step;
        if (!isfinite(s->best_val) || val < s->best_val) {
            s->best_val = val;
            s->best_val_step = step;
        }
        if (!add_point(s, S_VAL, step, val))
            return false;
    }
    if (event) {
        if (s->nmarks < MAX_MARKS) {
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
        } else
            hist_add(&s->over[kind], step);
        return true;
    }
    s->final_loss = num(o, "loss");
    double t = num(o, "tokens");
    if (isfinite(t)) {
        s->tokens = t;
        s->tokens_step = step;
    }
    double ms = num(o, "step_ms");
    if (isfinite(ms) && !median_add(&s->step_ms, ms))
        return false;
    for (int i = 0; i < NSERIES; i++) {
        if (i == S_VAL)
            continue;
        double v = num(o, s->def[i].key);
        if (i >= S_MEM0 && isfinite(v)) {
            if (v > 0)
                s->any_mem[i - S_MEM0] = true;
            /* stacked: the sum of the categories before it */
            for (int j = S_MEM0; j < i && isfinite(v); j++)
                v += num(o, s->def[j].key);
        }
        if (!add_point(s, i, step, v))
            return false;
    }
    return true;
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

typedef struct {
    double step_s, lost_pre, lost_crash;
    bool approx;
} totals;

static totals totals_of(state *s) {
    totals t = {0};
    double med = median_of(&s->step_ms, &t.approx);
    t.step_s = isfinite(med) ? med / 1000.0 : 0.0;
    t.lost_pre = s->redone_pre * t.step_s + s->gap_pre;
    t.lost_crash = s->redone_crash * t.step_s + s->gap_crash;
    return t;
}

static const char *plural(double n) { return n == 1 ? "" : "s"; }

static void print_summary(FILE *out, const char *path, const state *s, const totals *t) {
    fprintf(out,
            "report: %s: %lld step record%s, %lld event%s (%lld start%s, %lld resume%s, %lld preemption%s, %lld "
            "checkpoint%s, %lld evaluation%s), %lld line%s skipped\n",
            path, s->steps, plural((double)s->steps), s->events, plural((double)s->events), s->kinds[K_START],
            plural((double)s->kinds[K_START]), s->kinds[K_RESUME], plural((double)s->kinds[K_RESUME]),
            s->kinds[K_PREEMPT], plural((double)s->kinds[K_PREEMPT]), s->kinds[K_CHECKPOINT],
            plural((double)s->kinds[K_CHECKPOINT]), s->kinds[K_EVAL], plural((double)s->kinds[K_EVAL]), s->skipped,
            plural((double)s->skipped));
    if (isfinite(s->final_val))
        fprintf(out, "  validation loss: final %.4f (step %.0f), best %.4f (step %.0f)\n", s->final_val,
                s->final_val_step, s->best_val, s->best_val_step);
    else
        fprintf(out, "  validation loss: none recorded (train.eval_every and data.val)\n");
    if (isfinite(s->final_loss))
        fprintf(out, "  training loss: final %.4f\n", s->final_loss);
    if (isfinite(s->tokens))
        fprintf(out, "  tokens: %.0f (step %.0f)\n", s->tokens, s->tokens_step);
    fprintf(out, "  wall time: %.1f s from the first record to the last (%d run%s)\n",
            isfinite(s->first_time) ? s->last_time - s->first_time : 0.0, s->runs, plural(s->runs));
    fprintf(out,
            "  time lost to preemption: %.1f s = %.0f step%s redone x %.3f s (median step%s) + %.1f s between an "
            "exit and the next start (%d resume%s after a preemption)\n",
            t->lost_pre, s->redone_pre, plural(s->redone_pre), t->step_s, t->approx ? ", to 0.1 %" : "", s->gap_pre,
            s->resumes_pre, plural(s->resumes_pre));
    fprintf(out,
            "  time lost to crashes: %.1f s = %.0f step%s redone x %.3f s + %.1f s between the last record and the "
            "next start (%d restart%s without a preemption)\n",
            t->lost_crash, s->redone_crash, plural(s->redone_crash), t->step_s, s->gap_crash, s->resumes_crash,
            plural(s->resumes_crash));
    if (s->grid && !s->nstrag)
        fprintf(out, "  stragglers: none named (log.straggler_pct)\n");
    for (int i = 0; i < s->nstrag; i++)
        fprintf(out,
                "  straggler: rank %d (host %s) at step %.0f: busy %.1f ms per step, %.0f%% above the median %.1f ms\n",
                s->strag[i].rank, s->strag[i].host, s->strag[i].step, s->strag[i].busy, s->strag[i].over,
                s->strag[i].median);
    if (s->strag_total > s->nstrag)
        fprintf(out, "  ...and %lld more straggler warnings\n", s->strag_total - s->nstrag);
    if (s->profile)
        fprintf(out, "  GPU profile: step %.0f, %.3f ms per step, the device busy %.3f ms (%s)\n",
                num(s->profile, "step"), num(s->profile, "wall_ms"), num(s->profile, "busy_ms"),
                str(s->profile, "times") ? str(s->profile, "times") : "?");
}

/* ------------------------------------------------------------------------ */
/* the page */

/* Ticks at 1, 2 or 5 x 10^k covering [lo, hi]: the first tick and the
 * step; 0 when the span has no usable step. */
static double tick_step(double lo, double hi, int want) {
    double span = hi - lo;
    if (!(span > 0) || !isfinite(span))
        return 0.0;
    double raw = span / want, mag = pow(10.0, floor(log10(raw))), f = raw / mag;
    return (f < 1.5 ? 1 : f < 3.5 ? 2 : f < 7.5 ? 5 : 10) * mag;
}

enum { W = 640, PH = 190, ML = 70, MR = 20, MB = 40, LEGEND_COLS = 3, LEGEND_W = 180, LEGEND_ROW = 14 };

typedef struct {
    double x0, x1, y0, y1;
    int mt, h; /* the plot's top (below the title and legend) and the chart's height */
} box;

static double px(const box *b, double x) { return ML + (x - b->x0) / (b->x1 - b->x0) * (W - ML - MR); }
static double py(const box *b, double y) { return b->mt + PH - (y - b->y0) / (b->y1 - b->y0) * PH; }

/* The tick values of [lo, hi], by index so any finite range ends: at most
 * 2 * want + 2 ticks. */
static int ticks(double lo, double hi, int want, double min_step, double *first, double *step) {
    double st = tick_step(lo, hi, want);
    if (st < min_step)
        st = min_step;
    if (!(st > 0) || !isfinite(st)) {
        *first = lo;
        *step = 0;
        return 1;
    }
    *first = ceil(lo / st) * st;
    *step = st;
    double n = floor((hi - *first) / st + 1e-9) + 1;
    if (!(n >= 1))
        return 1;
    return n > 2 * want + 2 ? 2 * want + 2 : (int)n;
}

static void axes(FILE *f, const box *b, const char *title, const char *ylabel) {
    fprintf(f, "<text x=\"%d\" y=\"16\" class=\"title\">", ML);
    esc(f, title);
    fprintf(f, "</text>\n<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" class=\"frame\"/>\n", ML, b->mt,
            W - ML - MR, PH);
    double y0, ys;
    int n = ticks(b->y0, b->y1, 5, 0, &y0, &ys);
    for (int i = 0; i < n; i++) {
        double y = y0 + i * ys;
        fprintf(f,
                "<line x1=\"%d\" x2=\"%d\" y1=\"%.1f\" y2=\"%.1f\" class=\"grid\"/><text x=\"%d\" y=\"%.1f\" "
                "class=\"ytick\">%.4g</text>\n",
                ML, W - MR, py(b, y), py(b, y), ML - 4, py(b, y) + 4, ys > 0 && fabs(y) < ys * 1e-9 ? 0.0 : y);
    }
    double x0, xs;
    n = ticks(b->x0, b->x1, 8, 1, &x0, &xs);
    for (int i = 0; i < n; i++)
        fprintf(f, "<text x=\"%.1f\" y=\"%d\" class=\"xtick\">%.0f</text>\n", px(b, x0 + i * xs), b->mt + PH + 16,
                x0 + i * xs);
    fprintf(f, "<text x=\"%d\" y=\"%d\" class=\"xlabel\">step</text>\n", W - MR, b->h - 6);
    int mid = b->mt + PH / 2;
    fprintf(f, "<text x=\"12\" y=\"%d\" class=\"ylabel\" transform=\"rotate(-90 12 %d)\">", mid, mid);
    esc(f, ylabel);
    fputs("</text>\n", f);
}

/* A bucket's points in step order (its minimum and maximum). */
static int bucket_xy(const bucket *k, double xy[2][2]) {
    int n = bucket_points(k);
    bool min_first = k->x0 <= k->x1;
    xy[0][0] = min_first ? k->x0 : k->x1;
    xy[0][1] = min_first ? k->y0 : k->y1;
    xy[1][0] = min_first ? k->x1 : k->x0;
    xy[1][1] = min_first ? k->y1 : k->y0;
    if (n == 1)
        xy[0][0] = k->x0, xy[0][1] = k->y0;
    return n;
}

/* The series' path: "M" at each segment's first point, then "L"; redone
 * segments (odd) in a second path drawn dashed; with `fill`, each segment
 * closed down to y = 0 instead. */
static void draw_series(FILE *f, const box *b, const series_pts *p, const series_def *d, bool fill) {
    for (int redone = 0; redone < 2; redone++) {
        bool any = false;
        for (int i = 0; i < p->n && !any; i++)
            any = (p->b[i].seg & 1) == redone;
        if (!any)
            continue;
        if (fill)
            fprintf(f, "<path class=\"fill fill-%s\" fill=\"%s\" d=\"", d->key, d->color);
        else
            fprintf(f, "<path class=\"series series-%s%s\" data-series=\"%s\" stroke=\"%s\" d=\"", d->key,
                    redone ? " redone" : "", d->key, d->color);
        int seg = -1;
        double first_x = 0, last_x = 0;
        for (int i = 0; i < p->n; i++) {
            const bucket *k = &p->b[i];
            if ((k->seg & 1) != redone)
                continue;
            double xy[2][2];
            int n = bucket_xy(k, xy);
            for (int j = 0; j < n; j++) {
                bool start = k->seg != seg;
                if (start && fill && seg >= 0)
                    fprintf(f, "L%.1f,%.1f L%.1f,%.1f Z ", px(b, last_x), py(b, 0), px(b, first_x), py(b, 0));
                if (start)
                    first_x = xy[j][0];
                fprintf(f, "%c%.1f,%.1f ", start ? 'M' : 'L', px(b, xy[j][0]), py(b, xy[j][1]));
                seg = k->seg;
                last_x = xy[j][0];
            }
        }
        if (fill && seg >= 0)
            fprintf(f, "L%.1f,%.1f L%.1f,%.1f Z", px(b, last_x), py(b, 0), px(b, first_x), py(b, 0));
        fputs("\"/>\n", f);
    }
}

/* An event's marker shape at (x, y): one per kind. */
static void shape(FILE *f, int kind, double x, double y) {
    switch (kind) {
    case K_START:
        fprintf(f, "<path class=\"mark\" d=\"M%.1f,%.1f l5,9 l-10,0 Z\"/>", x, y - 4);
        break;
    case K_RESUME:
        fprintf(f, "<path class=\"mark\" d=\"M%.1f,%.1f l5,5 l-5,5 l-5,-5 Z\"/>", x, y - 5);
        break;
    case K_CHECKPOINT:
        fprintf(f, "<rect class=\"mark\" x=\"%.1f\" y=\"%.1f\" width=\"8\" height=\"8\"/>", x - 4, y - 4);
        break;
    case K_PREEMPT:
        fprintf(f, "<circle class=\"mark\" cx=\"%.1f\" cy=\"%.1f\" r=\"5\"/>", x, y);
        break;
    case K_EVAL:
        fprintf(f, "<circle class=\"mark\" cx=\"%.1f\" cy=\"%.1f\" r=\"3\"/>", x, y);
        break;
    default:
        fprintf(f, "<path class=\"mark\" d=\"M%.1f,%.1f l8,8 M%.1f,%.1f l-8,8\"/>", x - 4, y - 4, x + 4, y - 4);
    }
}

/* The events on a chart: a dashed line each and a shape in a lane above
 * the plot's top, lanes stacking where markers coincide (within 10 px);
 * preemptions drawn last, on top; events beyond MAX_MARKS as counts. */
static void draw_marks(FILE *f, const box *b, const state *s) {
    enum { COLS = W / 10 };
    int lanes[COLS + 1] = {0};
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < s->nmarks; i++) {
            const mark *m = &s->marks[i];
            if ((m->kind == K_PREEMPT) != (pass == 1) || !isfinite(m->step))
                continue;
            double x = px(b, m->step);
            int col = (int)(x / 10);
            col = col < 0 ? 0 : col > COLS ? COLS : col;
            int lane = lanes[col]++;
            fprintf(f, "<g class=\"event event-%s\" data-step=\"%.0f\"><title>", m->cls, m->step);
            esc(f, m->title);
            fprintf(f, "</title><line x1=\"%.1f\" x2=\"%.1f\" y1=\"%d\" y2=\"%d\"/>", x, x, b->mt, b->mt + PH);
            shape(f, m->kind, x, b->mt + 8 + 11 * (lane % 8));
            fputs("</g>\n", f);
        }
    for (int k = 0; k < NKIND; k++) {
        const step_hist *h = &s->over[k];
        for (int i = 0; h->total && i < NHIST; i++)
            if (h->c[i])
                fprintf(f,
                        "<text class=\"event-count count-%s\" x=\"%.1f\" y=\"%d\"><title>%lld more %s events at steps "
                        "%.0f..%.0f</title>%lld</text>\n",
                        kind_names[k], px(b, h->lo + (i + 0.5) * h->w), b->mt + PH - 4 - 10 * k, h->c[i], kind_names[k],
                        h->lo + i * h->w, h->lo + (i + 1) * h->w, h->c[i]);
    }
}

/* One chart of the series whose `chart` is id; `marks` draws the events. */
static void chart(FILE *f, const state *s, const char *id, const char *title, const char *ylabel, bool marks) {
    int idx[NSERIES], ns = 0;
    bool stacked = false;
    for (int i = 0; i < NSERIES; i++)
        if (strcmp(s->def[i].chart, id) == 0 && (i < S_MEM0 || s->any_mem[i - S_MEM0])) {
            idx[ns++] = i;
            stacked = stacked || s->def[i].stacked;
        }
    int rows = (ns + LEGEND_COLS - 1) / LEGEND_COLS;
    box b = {s->xmin, s->xmax, INFINITY, -INFINITY, 24 + LEGEND_ROW * (rows ? rows : 1) + 6, 0};
    b.h = b.mt + PH + MB;
    long long points = 0;
    for (int k = 0; k < ns; k++) {
        const series_pts *p = &s->pts[idx[k]];
        points += p->count;
        if (p->count) {
            b.y0 = fmin(b.y0, p->ymin);
            b.y1 = fmax(b.y1, p->ymax);
        }
    }
    fprintf(f, "<section class=\"chart\" id=\"chart-%s\">\n", id);
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
    if (!(pad > 0) || !isfinite(pad))
        pad = fmax(fabs(b.y1) * 1e-6, 1e-300);
    b.y0 -= b.y0 == 0.0 ? 0.0 : pad;
    b.y1 += pad;
    if (!(b.y1 > b.y0)) /* below an ulp of the values: widen */
        b.y0 -= fmax(fabs(b.y0) * 1e-6, 1.0), b.y1 += fmax(fabs(b.y1) * 1e-6, 1.0);
    if (!(b.x1 - b.x0 >= 1)) {
        double w = fmax(0.5, fmax(fabs(b.x0), fabs(b.x1)) * 1e-6);
        b.x0 -= w, b.x1 += w;
    }
    /* inline SVG in HTML5 needs no namespace: the page names no URL at all */
    fprintf(f, "<svg width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\">\n", W, b.h, W, b.h);
    axes(f, &b, title, ylabel);
    if (stacked) /* filled bands: the top layer first, each lower one over it */
        for (int k = ns - 1; k >= 0; k--)
            draw_series(f, &b, &s->pts[idx[k]], &s->def[idx[k]], true);
    for (int k = 0; k < ns; k++)
        draw_series(f, &b, &s->pts[idx[k]], &s->def[idx[k]], false);
    if (marks)
        draw_marks(f, &b, s);
    /* the legend, in its own rows between the title and the plot */
    for (int k = 0; k < ns; k++) {
        int x = ML + LEGEND_W * (k % LEGEND_COLS), y = 24 + LEGEND_ROW * (k / LEGEND_COLS);
        fprintf(f,
                "<rect class=\"swatch\" x=\"%d\" y=\"%d\" width=\"10\" height=\"10\" fill=\"%s\"/><text x=\"%d\" "
                "y=\"%d\" class=\"legend\">",
                x, y, s->def[idx[k]].color, x + 14, y + 9);
        esc(f, s->def[idx[k]].label);
        fputs("</text>\n", f);
    }
    fputs("</svg>\n</section>\n", f);
}

/* The newest start event's configuration as table rows. */
static void config_rows(FILE *f, const json_t *o) {
    static const char *const keys[] = {"preset",       "n_layer",           "n_head",         "n_embd",
                                       "seq_len",      "vocab_size",        "device",         "param_dtype",
                                       "reduce_dtype", "mesh_shard",        "mesh_replicate", "reshard_blocks",
                                       "reshard_root", "offload_optimizer", "recompute",      "world_size"};
    fputs("<table class=\"config\"><tr><th colspan=\"2\">configuration (the newest start)</th></tr>\n", f);
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        const json_t *v = json_object_get(o, keys[i]);
        if (!v)
            continue;
        fputs("<tr><th>", f);
        esc(f, keys[i]);
        fputs("</th><td>", f);
        if (json_is_string(v))
            esc_n(f, json_string_value(v), MAX_STR);
        else if (json_is_number(v))
            fprintf(f, "%.15g", json_number_value(v));
        else if (json_is_boolean(v))
            fputs(json_is_true(v) ? "true" : "false", f);
        else
            fputs("?", f);
        fputs("</td></tr>\n", f);
    }
    fputs("</table>\n", f);
}

/* The newest per-op profile (SHARDRUN_CUDA_PROFILE): the step's time per
 * op family as bars, then the families' and the costliest launchers'
 * tables. */
static void profile_section(FILE *f, const state *s) {
    const json_t *p = s->profile;
    if (!p)
        return;
    const json_t *fams = json_object_get(p, "families"), *ls = json_object_get(p, "launchers");
    double wall = num(p, "wall_ms"), busy = num(p, "busy_ms"), top = 0;
    fprintf(f,
            "<h2>GPU profile</h2>\n<p>SHARDRUN_CUDA_PROFILE: steps %.0f to %.0f, per step, rank 0; device times are ",
            nth(json_object_get(p, "steps"), 0), nth(json_object_get(p, "steps"), 1));
    esc(f, str(p, "times"));
    fprintf(f,
            ". Step wall time %.3f ms, the device busy %.3f ms, the gap (host bubbles, launch gaps) %.3f ms. Bound: "
            "the ledger's roofline at GEMM %g TFLOP/s and HBM %g TB/s; efficiency = bound / measured.</p>\n",
            wall, busy, wall - busy, num(p, "gemm_tflops"), num(p, "hbm_tbps"));
    size_t i;
    const json_t *r;
    json_array_foreach(fams, i, r) top = fmax(top, num(r, "ms"));
    fprintf(f, "<svg class=\"profile\" width=\"760\" height=\"%zu\">\n", 14 * json_array_size(fams) + 10);
    json_array_foreach(fams, i, r) {
        double ms = num(r, "ms"), w = top > 0 && isfinite(ms) ? 560 * ms / top : 0;
        fprintf(f, "<text class=\"ytick\" x=\"136\" y=\"%zu\">", 14 * i + 15);
        esc(f, str(r, "name"));
        fprintf(f, "</text><rect x=\"140\" y=\"%zu\" width=\"%.1f\" height=\"11\" fill=\"%s\"><title>", 14 * i + 5, w,
                palette[i % 8]);
        esc(f, str(r, "name"));
        fprintf(f,
                ": %.3f ms per step</title></rect><text class=\"ytick\" x=\"%.1f\" y=\"%zu\" "
                "style=\"text-anchor:start\">%.3f ms</text>\n",
                ms, 146 + w, 14 * i + 15, ms);
    }
    fputs("</svg>\n", f);
    for (int t = 0; t < 2; t++) {
        const json_t *rows = t ? ls : fams;
        fprintf(f,
                "<table class=\"profile\"><tr><th>%s</th><th>calls</th><th>ms</th><th>share</th><th>TFLOP/s</th>"
                "<th>GB/s</th><th>bound ms</th><th>efficiency</th></tr>\n",
                t ? "launcher (the 12 costliest)" : "family");
        json_array_foreach(rows, i, r) {
            if (t && i >= 12)
                break;
            fputs("<tr><td>", f);
            esc(f, str(r, "name"));
            double e = num(r, "efficiency");
            fprintf(f, "</td><td>%.0f</td><td>%.3f</td><td>%.1f%%</td><td>%.2f</td><td>%.1f</td><td>%.3f</td><td>",
                    num(r, "calls"), num(r, "ms"), 100 * num(r, "share"), num(r, "tflops"), num(r, "gbps"),
                    num(r, "bound_ms"));
            if (isfinite(e))
                fprintf(f, "%.3g%%", 100 * e);
            else
                fputs("-", f);
            fputs("</td></tr>\n", f);
        }
        fputs("</table>\n", f);
    }
}

/* Busy time per rank and log interval as a grid of cells (rows: ranks,
 * columns: intervals), coloured by the cell's busy time over the
 * interval's median (white at or below it, dark red at twice it and
 * above); then the stragglers named. */
static void busy_chart(FILE *f, const state *s) {
    const busy_grid *g = s->grid;
    if (!g)
        return;
    int cols = g->cols + (g->cnt[g->cols] ? 1 : 0), rows = g->ranks;
    double cw = 720.0 / (cols ? cols : 1), ch = rows > 64 ? 3.0 : 10.0;
    fprintf(f,
            "<h2>Busy time per rank</h2>\n<p>Busy time = step time minus time waiting on collectives, per rank and "
            "log interval; colour: the cell over the interval's median (white: at most the median, dark red: twice "
            "it or more).%s</p>\n<svg class=\"busy\" width=\"%.0f\" height=\"%.0f\">\n",
            s->world > GRID_RANKS ? " The first 256 ranks." : "", 60 + cols * cw, 30 + rows * ch);
    for (int r = 0; r < rows; r++) {
        if (ch >= 10 || r % 16 == 0)
            fprintf(f, "<text class=\"ytick\" x=\"56\" y=\"%.1f\">rank %d</text>\n", 20 + r * ch + ch - 1, r);
        for (int c = 0; c < cols; c++) {
            if (!g->cnt[c])
                continue;
            double busy = g->cell[r][c] / g->cnt[c], med = g->med[c] / g->cnt[c];
            double x = med > 0 ? busy / med - 1.0 : 0.0;
            x = x < 0 ? 0 : x > 1 ? 1 : x;
            int gb = (int)(255 - 200 * x), rr = (int)(255 - 90 * x);
            fprintf(f,
                    "<rect class=\"cell\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" "
                    "fill=\"#%02x%02x%02x\"><title>rank %d, steps %.0f-%.0f: busy %.2f ms per step (median "
                    "%.2f)</title></rect>\n",
                    60 + c * cw, 20 + r * ch, cw, ch, rr, gb, gb, r, g->first_step[c], g->last_step[c], busy, med);
        }
    }
    fputs("</svg>\n<table class=\"stragglers\"><tr><th>step</th><th>straggler</th></tr>\n", f);
    for (int i = 0; i < s->nstrag; i++) {
        fprintf(f, "<tr><td>%.0f</td><td>rank %d (host ", s->strag[i].step, s->strag[i].rank);
        esc(f, s->strag[i].host);
        fprintf(f, "): busy %.1f ms per step, %.0f%% above the median %.1f ms</td></tr>\n", s->strag[i].busy,
                s->strag[i].over, s->strag[i].median);
    }
    if (!s->nstrag)
        fputs("<tr><td></td><td>none named</td></tr>\n", f);
    fputs("</table>\n", f);
}

static void render(FILE *f, const char *path, const state *s, const totals *t) {
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
          ".series{fill:none;stroke-width:1.5}.series.redone{stroke-dasharray:3 2;opacity:0.6}\n"
          ".fill{opacity:0.35;stroke:none}\n"
          ".event line{stroke-width:1;stroke-dasharray:4 3}.mark{stroke:#222;stroke-width:0.7}\n"
          ".event-start line{stroke:#2ca02c}.event-start .mark{fill:#2ca02c}\n"
          ".event-resume line{stroke:#17becf}.event-resume .mark{fill:#17becf}\n"
          ".event-checkpoint line{stroke:#7f7f7f}.event-checkpoint .mark{fill:#7f7f7f}\n"
          ".event-preempt line{stroke:#d62728;stroke-width:2}.event-preempt .mark{fill:#d62728}\n"
          ".event-eval line{stroke:#9467bd;stroke-dasharray:1 3}.event-eval .mark{fill:#9467bd}\n"
          ".event-count{font-size:9px;fill:#555;text-anchor:middle}\n"
          "table{border-collapse:collapse;font-size:12px;margin:4px 0}"
          "td,th{border:1px solid #ccc;padding:2px 6px;text-align:left}\n"
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
    fprintf(f, "<tr><th>wall time</th><td>%.1f s (%d run%s)</td></tr>\n",
            isfinite(s->first_time) ? s->last_time - s->first_time : 0.0, s->runs, plural(s->runs));
    fprintf(f,
            "<tr><th>time lost to preemption</th><td>%.1f s = %.0f steps redone &times; %.3f s + %.1f s between an "
            "exit and the next start (%d resume%s after a preemption)</td></tr>\n",
            t->lost_pre, s->redone_pre, t->step_s, s->gap_pre, s->resumes_pre, plural(s->resumes_pre));
    fprintf(f,
            "<tr><th>time lost to crashes</th><td>%.1f s = %.0f steps redone &times; %.3f s + %.1f s before the next "
            "start (%d restart%s without a preemption)</td></tr>\n",
            t->lost_crash, s->redone_crash, t->step_s, s->gap_crash, s->resumes_crash, plural(s->resumes_crash));
    fprintf(f, "<tr><th>records</th><td>%lld steps, %lld events, %lld lines skipped</td></tr>\n</table>\n", s->steps,
            s->events, s->skipped);
    if (s->config)
        config_rows(f, s->config);
    fputs("<p>Markers on the loss chart: green triangle start, cyan diamond resume, grey square checkpoint, red "
          "circle preemption, small purple circle evaluation (hover for details); markers at one step stack. Dashed "
          "lines: steps a run redid after a crash or preemption.</p>\n",
          f);
    chart(f, s, "loss", "Loss", "loss", true);
    chart(f, s, "lr", "Learning rate", "lr", false);
    chart(f, s, "grad-norm", "Gradient norm (before clipping)", "norm", false);
    chart(f, s, "tokens-per-s", "Throughput", "tokens/s", false);
    chart(f, s, "mfu", "Model FLOP utilization", "%", false);
    chart(f, s, "comm", "Exposed communication per step", "ms", false);
    chart(f, s, "memory", "Memory by category (peak so far, stacked)", "MiB", false);
    busy_chart(f, s);
    profile_section(f, s);

    fputs("<h2>Events</h2>\n<table class=\"events\"><tr><th>line</th><th>step</th><th>event</th></tr>\n", f);
    for (int i = 0; i < s->nmarks; i++) {
        fprintf(f, "<tr><td>%lld</td><td>%.0f</td><td>", s->marks[i].line, s->marks[i].step);
        esc(f, s->marks[i].title);
        fputs("</td></tr>\n", f);
    }
    fputs("</table>\n", f);
    if (s->events > s->nmarks)
        fprintf(f, "<p class=\"more\">%lld more events, counted per step range on the loss chart.</p>\n",
                s->events - s->nmarks);
    fputs("</body></html>\n", f);
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
    if (st == SR_OK && s->steps + s->events == 0)
        st = sr_error(SR_ERR_DATA,
                      "%s: no records (%lld line%s skipped) (hint: give the file a run wrote with log.metrics: PATH)",
                      metrics, s->skipped, plural((double)s->skipped));
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
            render(f, metrics, s, &t);
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
