/* report_svg.c — the report's charts drawn as inline SVG: axes and ticks,
 * each series' points and buckets (dashed where a run redid steps), the
 * event markers, the busy-time grid of the ranks and the GPU profile's
 * bars and tables.  Written by hand: no charting library on Debian draws
 * SVG from C, and the page carries no scripts.  Part of the report module
 * (report.h, report_impl.h). */
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
    rep_esc(f, title);
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
    rep_esc(f, ylabel);
    fputs("</text>\n", f);
}

/* A bucket's points in step order (its minimum and maximum). */
static int bucket_xy(const bucket *k, double xy[2][2]) {
    int n = rep_bucket_points(k);
    bool min_first = k->x0 <= k->x1;
    xy[0][0] = min_first ? k->x0 : k->x1;
    xy[0][1] = min_first ? k->y0 : k->y1;
    xy[1][0] = min_first ? k->x1 : k->x0;
    xy[1][1] = min_first ? k->y1 : k->y0;
    if (n == 1)
        xy[0][0] = k->x0, xy[0][1] = k->y0;
    return n;
}

/* A series' key as a class name's tail: letters, digits, - and _ (any
 * other byte as _), at most MAX_STR bytes. */
static void put_class(FILE *f, const char *key) {
    for (size_t i = 0; key[i] && i < MAX_STR; i++) {
        char c = key[i];
        fputc((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_' ? c
                                                                                                                 : '_',
              f);
    }
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
        fputs(fill ? "<path class=\"fill fill-" : "<path class=\"series series-", f);
        put_class(f, d->key);
        if (fill)
            fprintf(f, "\" fill=\"%s\" d=\"", d->color);
        else {
            fprintf(f, "%s\" data-series=\"", redone ? " redone" : "");
            rep_esc_n(f, d->key, MAX_STR);
            fprintf(f, "\" stroke=\"%s\" d=\"", d->color);
        }
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
            rep_esc(f, m->title);
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

/* The series of chart id, in the order drawn, into defs and pts (room for
 * NSERIES + MAX_NAMED): the fixed ones (a memory category once it was
 * above 0), then the named ones that have points.  Returns how many. */
static int chart_series(const state *s, const char *id, const series_def **defs, const series_pts **pts) {
    int ns = 0;
    for (int i = 0; i < NSERIES + s->nnamed; i++) {
        bool named = i >= NSERIES;
        const series_def *d = named ? &s->named[i - NSERIES].def : &s->def[i];
        const series_pts *p = named ? &s->named[i - NSERIES].pts : &s->pts[i];
        if (strcmp(d->chart, id) != 0 || (named && !p->count) || (!named && i >= S_MEM0 && !s->any_mem[i - S_MEM0]))
            continue;
        defs[ns] = d;
        pts[ns++] = p;
    }
    return ns;
}

/* One chart of the series whose `chart` is id (the named ones with their
 * points); `marks` draws the events. */
void rep_chart(FILE *f, const state *s, const char *id, const char *title, const char *ylabel, bool marks) {
    const series_def *defs[NSERIES + MAX_NAMED];
    const series_pts *pts[NSERIES + MAX_NAMED];
    int ns = chart_series(s, id, defs, pts);
    bool stacked = false, zero = false;
    for (int k = 0; k < ns; k++) {
        stacked = stacked || defs[k]->stacked;
        zero = zero || defs[k]->from_zero;
    }
    int rows = (ns + LEGEND_COLS - 1) / LEGEND_COLS;
    box b = {s->xmin, s->xmax, INFINITY, -INFINITY, 24 + LEGEND_ROW * (rows ? rows : 1) + 6, 0};
    b.h = b.mt + PH + MB;
    long long points = 0;
    for (int k = 0; k < ns; k++) {
        const series_pts *p = pts[k];
        points += p->count;
        if (p->count) {
            b.y0 = fmin(b.y0, p->ymin);
            b.y1 = fmax(b.y1, p->ymax);
        }
    }
    fprintf(f, "<section class=\"chart\" id=\"chart-%s\">\n", id);
    if (!isfinite(b.x0)) {
        fprintf(f, "<h2>");
        rep_esc(f, title);
        fputs("</h2><p class=\"empty\">no records</p></section>\n", f);
        return;
    }
    if (!points)
        b.y0 = 0, b.y1 = 1;
    if (zero || (b.y0 > 0 && b.y0 < 0.2 * b.y1))
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
            draw_series(f, &b, pts[k], defs[k], true);
    for (int k = 0; k < ns; k++)
        draw_series(f, &b, pts[k], defs[k], false);
    if (marks)
        draw_marks(f, &b, s);
    /* the legend, in its own rows between the title and the plot */
    for (int k = 0; k < ns; k++) {
        int x = ML + LEGEND_W * (k % LEGEND_COLS), y = 24 + LEGEND_ROW * (k / LEGEND_COLS);
        fprintf(f,
                "<rect class=\"swatch\" x=\"%d\" y=\"%d\" width=\"10\" height=\"10\" fill=\"%s\"/><text x=\"%d\" "
                "y=\"%d\" class=\"legend\">",
                x, y, defs[k]->color, x + 14, y + 9);
        rep_esc(f, defs[k]->label);
        fputs("</text>\n", f);
    }
    fputs("</svg>\n</section>\n", f);
}

/* The named series' charts, each drawn only when it has a series: the
 * validation loss by set, the downstream accuracy (percent). */
void rep_named_charts(FILE *f, const state *s) {
    if (s->named_count[N_SET])
        rep_chart(f, s, "val-sets", "Validation loss by set", "loss", false);
    if (s->named_count[N_ACC] + s->named_count[N_NORM])
        rep_chart(f, s, "accuracy", "Downstream accuracy (acc/TASK, acc_norm/TASK)", "% correct", false);
}

/* The newest per-op profile (SHARDRUN_CUDA_PROFILE): the step's time per
 * op family as bars, then the families' and the costliest launchers'
 * tables. */
void rep_profile_section(FILE *f, const state *s) {
    const json_t *p = s->profile;
    if (!p)
        return;
    const json_t *fams = json_object_get(p, "families"), *ls = json_object_get(p, "launchers");
    double wall = rep_num(p, "wall_ms"), busy = rep_num(p, "busy_ms"), top = 0;
    fprintf(f,
            "<h2>GPU profile</h2>\n<p>SHARDRUN_CUDA_PROFILE: steps %.0f to %.0f, per step, rank 0; device times are ",
            rep_nth(json_object_get(p, "steps"), 0), rep_nth(json_object_get(p, "steps"), 1));
    rep_esc(f, rep_str(p, "times"));
    fprintf(f,
            ". Step wall time %.3f ms, the device busy %.3f ms, the gap (host bubbles, launch gaps) %.3f ms. Bound: "
            "the ledger's roofline at GEMM %g TFLOP/s and HBM %g TB/s; efficiency = bound / measured.</p>\n",
            wall, busy, wall - busy, rep_num(p, "gemm_tflops"), rep_num(p, "hbm_tbps"));
    size_t i;
    const json_t *r;
    json_array_foreach(fams, i, r) top = fmax(top, rep_num(r, "ms"));
    fprintf(f, "<svg class=\"profile\" width=\"760\" height=\"%zu\">\n", 14 * json_array_size(fams) + 10);
    json_array_foreach(fams, i, r) {
        double ms = rep_num(r, "ms"), w = top > 0 && isfinite(ms) ? 560 * ms / top : 0;
        fprintf(f, "<text class=\"ytick\" x=\"136\" y=\"%zu\">", 14 * i + 15);
        rep_esc(f, rep_str(r, "name"));
        fprintf(f, "</text><rect x=\"140\" y=\"%zu\" width=\"%.1f\" height=\"11\" fill=\"%s\"><title>", 14 * i + 5, w,
                palette[i % 8]);
        rep_esc(f, rep_str(r, "name"));
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
            rep_esc(f, rep_str(r, "name"));
            double e = rep_num(r, "efficiency");
            fprintf(f, "</td><td>%.0f</td><td>%.3f</td><td>%.1f%%</td><td>%.2f</td><td>%.1f</td><td>%.3f</td><td>",
                    rep_num(r, "calls"), rep_num(r, "ms"), 100 * rep_num(r, "share"), rep_num(r, "tflops"),
                    rep_num(r, "gbps"), rep_num(r, "bound_ms"));
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
void rep_busy_chart(FILE *f, const state *s) {
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
        rep_esc(f, s->strag[i].host);
        fprintf(f, "): busy %.1f ms per step, %.0f%% above the median %.1f ms</td></tr>\n", s->strag[i].busy,
                s->strag[i].over, s->strag[i].median);
    }
    if (!s->nstrag)
        fputs("<tr><td></td><td>none named</td></tr>\n", f);
    fputs("</table>\n", f);
}

void rep_goodput_section(FILE *f, const state *s) {
    /* kept green, redone red, the start-up phases blues, stalls grey, restarts orange, the queue purple, other pale */
    static const char *const colours[SR_GOODPUT_ROWS] = {"#2ca02c", "#d62728", "#1f77b4", "#4a90c8",
                                                         "#6baed6", "#9ecae1", "#c6dbef", "#7f7f7f",
                                                         "#ff7f0e", "#9467bd", "#dddddd"};
    if (!s->gp_ok)
        return;
    const sr_goodput *g = &s->gp;
    char line[256];
    sr_goodput_line(g, line, sizeof line);
    fputs("<h2>Goodput</h2>\n<p>", f);
    rep_esc(f, line);
    fputs(". Where the wall time went over the file's starts (the first start's process start to the last "
          "record; every time is rank 0's).</p>\n<svg class=\"goodput\" width=\"760\" height=\"34\">\n",
          f);
    double x = 0;
    for (int i = 0; i < SR_GOODPUT_ROWS; i++) {
        const char *name, *note;
        double v = sr_goodput_row(g, i, &name, &note);
        double w = g->wall_s > 0 && v > 0 ? 740 * v / g->wall_s : 0;
        if (w <= 0)
            continue;
        fprintf(f, "<rect x=\"%.1f\" y=\"4\" width=\"%.1f\" height=\"24\" fill=\"%s\"><title>", 10 + x, w, colours[i]);
        rep_esc(f, name);
        fprintf(f, ": %.1f s (%.1f%%)</title></rect>\n", v, 100.0 * v / g->wall_s);
        x += w;
    }
    fputs("</svg>\n<table class=\"goodput\"><tr><th>where</th><th>seconds</th><th>share</th><th></th></tr>\n", f);
    for (int i = 0; i < SR_GOODPUT_ROWS; i++) {
        const char *name, *note;
        double v = sr_goodput_row(g, i, &name, &note);
        fputs("<tr><td>", f);
        rep_esc(f, name);
        fprintf(f, "</td><td>%.1f</td><td>%.1f%%</td><td>", v, g->wall_s > 0 ? 100.0 * v / g->wall_s : 0.0);
        rep_esc(f, note);
        fputs("</td></tr>\n", f);
    }
    fputs("</table>\n", f);
}
