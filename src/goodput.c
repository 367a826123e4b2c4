/* goodput.c — where a run's wall time went; see goodput.h. */
#include "srconfig.h"

#include "goodput.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* One start's segment of the file. */
typedef struct {
    int64_t resume, last_step; /* the step it resumed from; the newest step record's */
    double first_t, last_t;    /* its start record's time; its newest record's */
    double process_t;          /* its process start (first_t - the start-up total) */
    double stall_s;            /* its synchronous saves */
} segment;

static double num(const json_t *o, const char *key, double dflt) {
    const json_t *v = json_object_get(o, key);
    return json_is_number(v) ? json_number_value(v) : dflt;
}

/* Adds segment s (followed by a start resuming from next_resume; < 0:
 * none) to g. */
static void close_segment(const segment *s, int64_t next_resume, sr_goodput *g) {
    int64_t done = s->last_step > s->resume ? s->last_step - s->resume : 0;
    int64_t end = next_resume >= 0 && next_resume < s->last_step ? next_resume : s->last_step;
    int64_t kept = end > s->resume ? end - s->resume : 0;
    double run = s->last_t - s->first_t, stall = s->stall_s < run ? s->stall_s : run;
    double steps_s = run > stall ? run - stall : 0;
    g->stall_s += stall;
    if (done > 0) {
        g->kept_s += steps_s * (double)kept / (double)done;
        g->redone_s += steps_s * (double)(done - kept) / (double)done;
    } else
        g->redone_s += steps_s; /* (a start that failed before its first step record) */
    g->steps_redone += done - kept;
}

int sr_goodput_compute(json_t *const *records, size_t n, sr_goodput *g) {
    memset(g, 0, sizeof *g);
    segment cur = {0};
    bool open = false;
    double first_process = 0, last_t = 0;
    int64_t first_resume = 0, last_step = 0;
    for (size_t i = 0; i < n; i++) {
        const json_t *o = records[i];
        if (!json_is_object(o))
            continue;
        double t = num(o, "time", NAN);
        const char *ev = json_string_value(json_object_get(o, "event"));
        if (ev && strcmp(ev, "start") == 0 && isfinite(t)) {
            sr_startup su;
            sr_startup_from_json(json_object_get(o, "startup"), &su);
            int64_t resume = (int64_t)num(o, "resume_step", num(o, "step", 0));
            double process = t - su.total;
            if (open) {
                close_segment(&cur, resume, g);
                if (process > cur.last_t)
                    g->restart_s += process - cur.last_t;
            } else {
                first_process = process;
                first_resume = resume;
            }
            for (int p = 0; p < SR_PHASE_COUNT; p++)
                g->startup_s[p] += su.s[p];
            g->starts++;
            cur = (segment){resume, resume, t, t, process, 0};
            open = true;
            last_step = resume;
        } else if (open && isfinite(t)) {
            if (t > cur.last_t)
                cur.last_t = t;
            if (!ev && json_is_integer(json_object_get(o, "step"))) {
                int64_t s = (int64_t)json_integer_value(json_object_get(o, "step"));
                if (s > cur.last_step)
                    cur.last_step = s;
            } else if (ev && strcmp(ev, "checkpoint") == 0 && !json_is_true(json_object_get(o, "async")))
                cur.stall_s += num(o, "duration_s", 0);
        }
        if (open && isfinite(t) && t > last_t)
            last_t = t;
    }
    if (!open)
        return 0;
    close_segment(&cur, -1, g);
    last_step = cur.last_step;
    g->steps_kept = last_step > first_resume ? last_step - first_resume : 0;
    g->wall_s = last_t > first_process ? last_t - first_process : 0;
    double known = g->kept_s + g->redone_s + g->stall_s + g->restart_s;
    for (int p = 0; p < SR_PHASE_COUNT; p++)
        known += g->startup_s[p];
    g->other_s = g->wall_s - known;
    g->ratio = g->wall_s > 0 ? g->kept_s / g->wall_s : 0;
    return 1;
}

sr_status sr_goodput_read(const char *path, sr_goodput *g) {
    memset(g, 0, sizeof *g);
    FILE *f = fopen(path, "r");
    if (!f)
        return sr_error(SR_ERR_NOINPUT, "%s: cannot read the metrics file: %s", path, strerror(errno));
    json_t **recs = NULL;
    size_t n = 0, cap = 0;
    char *line = NULL;
    size_t lcap = 0;
    sr_status st = SR_OK;
    while (getline(&line, &lcap, f) > 0) {
        json_t *o = json_loads(line, 0, NULL);
        if (!o)
            continue;
        if (n == cap) {
            size_t nc = cap ? 2 * cap : 256;
            json_t **v = realloc(recs, nc * sizeof *v);
            if (!v) {
                json_decref(o);
                st = sr_error_oom("the metrics file's records");
                break;
            }
            recs = v, cap = nc;
        }
        recs[n++] = o;
    }
    free(line);
    fclose(f);
    if (st == SR_OK && !sr_goodput_compute(recs, n, g))
        st = sr_error(SR_ERR_DATA, "%s: no start record: not a metrics file of shardrun train (log.metrics)", path);
    for (size_t i = 0; i < n; i++)
        json_decref(recs[i]);
    free(recs);
    return st;
}

static void row(FILE *out, const char *what, double s, double wall, const char *note) {
    fprintf(out, "  %-22s %10.1f s %6.1f%%%s%s\n", what, s, wall > 0 ? 100.0 * s / wall : 0.0, note[0] ? "  " : "",
            note);
}

void sr_goodput_print(const sr_goodput *g, FILE *out) {
    fprintf(out, "goodput %.2f: %.1f s of %.1f s in steps kept (%lld steps; %d start%s; %lld step%s redone)\n",
            g->ratio, g->kept_s, g->wall_s, (long long)g->steps_kept, g->starts, g->starts == 1 ? "" : "s",
            (long long)g->steps_redone, g->steps_redone == 1 ? "" : "s");
    row(out, "steps kept", g->kept_s, g->wall_s, "");
    row(out, "steps redone", g->redone_s, g->wall_s, "past the checkpoint the next start resumed from");
    for (int p = 0; p < SR_PHASE_COUNT; p++) {
        char what[40];
        snprintf(what, sizeof what, "start-up: %s", sr_phase_name((sr_phase)p));
        row(out, what, g->startup_s[p], g->wall_s, "");
    }
    row(out, "checkpoint stalls", g->stall_s, g->wall_s, "synchronous saves");
    row(out, "restarts", g->restart_s, g->wall_s, "a start's last record to the next one's process start");
    row(out, "other", g->other_s, g->wall_s, "");
}
