/* report_impl.h — what the report module's files share (report.c: reading
 * and folding the records, the summary; report_svg.c: the charts;
 * report_page.c: the page): the bounded state the stream folds into.
 * Internal to the module. */
#ifndef SR_REPORT_IMPL_H
#define SR_REPORT_IMPL_H

#include <stdbool.h>
#include <stdio.h>

#include <jansson.h>

#include "goodput.h"
#include "mem.h"
#include "report.h"

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
    MAX_SETS = 16,     /* named validation sets charted (val_loss/NAME) */
    MAX_TASKS = 32,    /* tasks charted (acc/TASK, acc_norm/TASK: each up to this many) */
    MAX_LABEL = 26,    /* bytes of a named series' legend label (its column is LEGEND_W wide) */
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

typedef struct {
    double lo, w;
    long long c[NHIST];
    long long total;
} step_hist;

typedef struct {
    double *exact;
    int n;
    long long *bins; /* NLOG bins over log10(ms) in [-3, 7) once exact is full */
    long long total, below, above;
} median_acc;

enum { K_START, K_CHECKPOINT, K_PREEMPT, K_RESUME, K_EVAL, K_OTHER, NKIND };

/* the event kinds' names, and the series' colours (report.c) */
extern const char *const kind_names[NKIND];
extern const char *const palette[10];

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
    bool from_zero; /* its chart's y axis starts at 0 (a rate, a share, a stack) */
} series_def;

enum { S_LOSS, S_VAL, S_LR, S_GN, S_TPS, S_MFU, S_COMM, S_STEPMS, S_MEM0 };
#define NSERIES (S_MEM0 + SR_MEM_NCAT)

/* The series the file names (evaluation results): a named validation
 * set's loss (val_loss/NAME), a task's accuracy (acc/TASK) and its
 * length-normalized accuracy (acc_norm/TASK); the accuracies charted and
 * summed up in percent. */
enum { N_SET, N_ACC, N_NORM, NNAMED };
#define MAX_NAMED (MAX_SETS + 2 * MAX_TASKS)

/* the named kinds' key prefixes ("val_loss/", "acc/", "acc_norm/") (report.c) */
extern const char *const named_prefix[NNAMED];

/* One named series: created at its key's first finite value, in the
 * order the file names them.  def's key is `key`, its label `label`. */
typedef struct {
    char *key;        /* the key as the file spells it (a line's bytes at most) */
    const char *name; /* the set or task: the key past its prefix */
    int kind;         /* N_SET, N_ACC, N_NORM */
    char label[MAX_LABEL + 8];
    series_def def;
    series_pts pts;
    double final, final_step; /* the newest value (in percent for accuracies) and its step */
    double best, best_step;   /* the lowest loss, the highest accuracy */
} named_series;

typedef struct {
    /* counts */
    long long lines, steps, events, skipped, kinds[NKIND];
    /* series */
    series_def def[NSERIES];
    char memkey[SR_MEM_NCAT][48];
    series_pts pts[NSERIES];
    bool eval_events;    /* val_loss from eval events (else from step records) */
    named_series *named; /* MAX_NAMED of them once one is seen (NULL before) */
    int nnamed, named_count[NNAMED];
    long long named_dropped; /* values of sets and tasks past the caps, not charted */
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
    sr_goodput_acc gp_acc; /* the goodput accounting, folded as the records stream by */
    sr_goodput gp;         /* its result (gp_ok: a start record came) */
    bool gp_ok;
} state;

typedef struct {
    double step_s, lost_pre, lost_crash;
    bool approx;
} totals;

void rep_esc(FILE *f, const char *s);
/* s (NULL: "?") for HTML text or a double-quoted attribute: & < > " '
 * escaped, control characters as U+FFFD, cut after `max` bytes at a
 * character boundary with an ellipsis. */
void rep_esc_n(FILE *f, const char *s, size_t max);
int rep_bucket_points(const bucket *b);
double rep_num(const json_t *o, const char *key);
/* Element i of array a as a number (NAN when it is none). */
double rep_nth(const json_t *a, size_t i);
const char *rep_str(const json_t *o, const char *key);
const char *rep_plural(double n);
/* One chart of the series whose `chart` is id (the named ones with their
 * points); `marks` draws the events. */
void rep_chart(FILE *f, const state *s, const char *id, const char *title, const char *ylabel, bool marks);
/* The named series' charts, each drawn only when it has a series: the
 * validation loss by set, the downstream accuracy (percent). */
void rep_named_charts(FILE *f, const state *s);
/* The named series' summary rows: each set's final and best loss, each
 * task's final accuracies (percent) with their steps, what was dropped. */
void rep_named_rows(FILE *f, const state *s);
/* The named series of `kind` whose name is `name` (NULL: none). */
const named_series *rep_named_find(const state *s, int kind, const char *name);
/* The newest start event's configuration as table rows. */
void rep_config_rows(FILE *f, const json_t *o);
/* The newest per-op profile (SHARDRUN_CUDA_PROFILE): the step's time per
 * op family as bars, then the families' and the costliest launchers'
 * tables. */
void rep_profile_section(FILE *f, const state *s);
/* Busy time per rank and log interval as a grid of cells (rows: ranks,
 * columns: intervals), coloured by the cell's busy time over the
 * interval's median (white at or below it, dark red at twice it and
 * above); then the stragglers named. */
void rep_busy_chart(FILE *f, const state *s);
/* Where the wall time went over the file's starts (goodput.h): one
 * stacked bar, then the table. */
void rep_goodput_section(FILE *f, const state *s);
void rep_render(FILE *f, const char *path, const state *s, const totals *t);
double rep_median_of(median_acc *m, bool *approx);

#endif
