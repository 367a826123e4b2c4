/* goodput.c — where a run's wall time went; see goodput.h. */
#include "srconfig.h"

#include "goodput.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static double num(const json_t *o, const char *key, double dflt) {
    const json_t *v = json_object_get(o, key);
    return json_is_number(v) ? json_number_value(v) : dflt;
}

/* Adds the open segment (followed by a start resuming from next_resume;
 * < 0: none) to the totals. */
static void close_segment(sr_goodput_acc *a, int64_t next_resume) {
    sr_goodput *g = &a->g;
    int64_t done = a->last_step > a->resume ? a->last_step - a->resume : 0;
    int64_t end = next_resume >= 0 && next_resume < a->last_step ? next_resume : a->last_step;
    int64_t kept = end > a->resume ? end - a->resume : 0;
    double run = a->last_t - a->first_t, stall = a->stall_s < run ? a->stall_s : run;
    double steps_s = run > stall ? run - stall : 0;
    g->stall_s += stall;
    if (done > 0) {
        g->kept_s += steps_s * (double)kept / (double)done;
        g->redone_s += steps_s * (double)(done - kept) / (double)done;
    } else if (next_resume >= 0)
        g->redone_s += steps_s; /* (a start that failed before its first step record) */
    /* (else: the last start without a step: "other") */
    g->steps_redone += done - kept;
}

void sr_goodput_begin(sr_goodput_acc *a) { memset(a, 0, sizeof *a); }

void sr_goodput_add(sr_goodput_acc *a, const json_t *o) {
    if (!json_is_object(o))
        return;
    double t = num(o, "time", NAN);
    if (!isfinite(t))
        return;
    const char *ev = json_string_value(json_object_get(o, "event"));
    if (ev && strcmp(ev, "start") == 0) {
        sr_startup su;
        sr_startup_from_json(json_object_get(o, "startup"), &su);
        int64_t resume = (int64_t)num(o, "resume_step", num(o, "step", 0));
        double process = t - su.total;
        if (a->open) {
            close_segment(a, resume);
            if (process > a->last_t)
                a->g.restart_s += process - a->last_t;
        } else {
            a->first_process_t = process;
            a->first_resume = resume;
        }
        for (int p = 0; p < SR_PHASE_COUNT; p++)
            a->g.startup_s[p] += su.s[p];
        a->g.starts++;
        const char *id = json_string_value(json_object_get(o, "job_id")); /* Slurm's: digits, _ of an array, + */
        if (id && id[0] && id[strspn(id, "0123456789_+")] == '\0' && strlen(id) < 64) {
            char key[72], have[sizeof a->g.job_ids + 2];
            snprintf(key, sizeof key, ",%s,", id);
            snprintf(have, sizeof have, ",%s,", a->g.job_ids);
            size_t len = strlen(a->g.job_ids);
            if (!strstr(have, key) && len + strlen(id) + 2 < sizeof a->g.job_ids)
                snprintf(a->g.job_ids + len, sizeof a->g.job_ids - len, "%s%s", len ? "," : "", id);
        }
        a->resume = a->last_step = resume;
        a->first_t = a->last_t = t;
        a->stall_s = 0;
        a->open = true;
    } else if (a->open) {
        if (t > a->last_t)
            a->last_t = t;
        if (json_is_integer(json_object_get(o, "step"))) { /* a step, checkpoint or evaluation record's step: done */
            int64_t s = (int64_t)json_integer_value(json_object_get(o, "step"));
            if (s > a->last_step)
                a->last_step = s;
        }
        if (ev && strcmp(ev, "checkpoint") == 0 && !json_is_true(json_object_get(o, "async")))
            a->stall_s += num(o, "duration_s", 0);
    }
    if (a->open && t > a->last_t_all)
        a->last_t_all = t;
}

int sr_goodput_end(sr_goodput_acc *a, sr_goodput *out) {
    if (!a->open) {
        memset(out, 0, sizeof *out);
        return 0;
    }
    close_segment(a, -1);
    sr_goodput *g = &a->g;
    g->steps_kept = a->last_step > a->first_resume ? a->last_step - a->first_resume : 0;
    g->wall_s = a->last_t_all > a->first_process_t ? a->last_t_all - a->first_process_t : 0;
    double known = g->kept_s + g->redone_s + g->stall_s + g->restart_s + g->queue_s;
    for (int p = 0; p < SR_PHASE_COUNT; p++)
        known += g->startup_s[p];
    g->other_s = g->wall_s - known;
    g->ratio = g->wall_s > 0 ? g->kept_s / g->wall_s : 0;
    *out = *g;
    a->open = false; /* ended: a second end reports nothing */
    return 1;
}

sr_status sr_goodput_read(const char *path, sr_goodput *g) {
    memset(g, 0, sizeof *g);
    FILE *f = fopen(path, "r");
    if (!f)
        return sr_error(SR_ERR_NOINPUT, "%s: cannot read the metrics file: %s", path, strerror(errno));
    sr_goodput_acc a;
    sr_goodput_begin(&a);
    char *line = NULL;
    size_t lcap = 0;
    while (getline(&line, &lcap, f) > 0) {
        json_t *o = json_loads(line, 0, NULL);
        sr_goodput_add(&a, o);
        json_decref(o);
    }
    free(line);
    fclose(f);
    if (!sr_goodput_end(&a, g))
        return sr_error(SR_ERR_DATA, "%s: no start record: not a metrics file of shardrun train (log.metrics)", path);
    return SR_OK;
}

void sr_goodput_set_queue(sr_goodput *g, double queue_s, const char *note) {
    snprintf(g->queue_note, sizeof g->queue_note, "%s", note);
    if (queue_s <= 0)
        return;
    double q = queue_s < g->restart_s ? queue_s : g->restart_s;
    g->queue_s += q;
    g->restart_s -= q;
}

void sr_goodput_line(const sr_goodput *g, char *out, size_t n) {
    snprintf(out, n, "goodput %.2f: %.1f s of %.1f s in steps kept (%lld step%s; %d start%s; %lld step%s redone)",
             g->ratio, g->kept_s, g->wall_s, (long long)g->steps_kept, g->steps_kept == 1 ? "" : "s", g->starts,
             g->starts == 1 ? "" : "s", (long long)g->steps_redone, g->steps_redone == 1 ? "" : "s");
}

double sr_goodput_row(const sr_goodput *g, int i, const char **name, const char **note) {
    static const char *const phase_rows[SR_PHASE_COUNT] = {"start-up: bootstrap", "start-up: device", "start-up: model",
                                                           "start-up: checkpoint", "start-up: other"};
    *note = "";
    if (i == 0) {
        *name = "steps kept";
        return g->kept_s;
    }
    if (i == 1) {
        *name = "steps redone";
        *note = "past the checkpoint the next start resumed from";
        return g->redone_s;
    }
    if (i >= 2 && i < 2 + SR_PHASE_COUNT) {
        *name = phase_rows[i - 2];
        return g->startup_s[i - 2];
    }
    i -= 2 + SR_PHASE_COUNT;
    if (i == 0) {
        *name = "checkpoint stalls";
        *note = "synchronous saves";
        return g->stall_s;
    }
    if (i == 1) {
        *name = "restarts";
        *note = "a start's last record to the next one's process start";
        return g->restart_s;
    }
    if (i == 2) {
        *name = "queue wait";
        *note = g->queue_note[0] ? g->queue_note : "not asked";
        return g->queue_s;
    }
    *name = "other";
    return g->other_s;
}

void sr_goodput_print(const sr_goodput *g, FILE *out) {
    char line[256];
    sr_goodput_line(g, line, sizeof line);
    fprintf(out, "%s\n", line);
    for (int i = 0; i < SR_GOODPUT_ROWS; i++) {
        const char *name, *note;
        double v = sr_goodput_row(g, i, &name, &note);
        if (v < 0 && v > -0.05)
            v = 0.0; /* a residue of rounding (other's) is not printed as -0.0 */
        fprintf(out, "  %-22s %10.1f s %6.1f%%%s%s\n", name, v, g->wall_s > 0 ? 100.0 * v / g->wall_s : 0.0,
                note[0] ? "  " : "", note);
    }
}
