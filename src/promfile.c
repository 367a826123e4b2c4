/* promfile.c — the Prometheus textfile; see promfile.h.
 *
 * Written by hand: the exposition format is lines of text, and no C
 * library here writes it (the Prometheus C clients serve HTTP, which a
 * batch job on a compute node must not). */
#include "srconfig.h"

#include "promfile.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fsio.h"

sr_status sr_prom_path(const char *tmpl, const char *host, const char *job, char *out, size_t n) {
    const sr_path_vars v = {.host = host, .job = job};
    return sr_fsio_expand("log.prometheus", tmpl, &v, out, n);
}

/* A label value as the exposition format quotes it: \, " and newline
 * escaped. */
static void put_label(FILE *f, const char *v) {
    for (; *v; v++) {
        if (*v == '\\' || *v == '"')
            fputc('\\', f), fputc(*v, f);
        else if (*v == '\n')
            fputs("\\n", f);
        else
            fputc(*v, f);
    }
}

static void labels(FILE *f, const sr_prom_sample *s, const sr_prom_rank *r, const char *extra_k, const char *extra_v) {
    fputs("{slurm_job=\"", f);
    put_label(f, s->job);
    fprintf(f, "\",rank=\"%d\",host=\"", r->rank);
    put_label(f, r->host);
    fputc('"', f);
    if (extra_k) {
        fprintf(f, ",%s=\"", extra_k);
        put_label(f, extra_v);
        fputc('"', f);
    }
    fputc('}', f);
}

static void family(FILE *f, const char *name, const char *help) {
    fprintf(f, "# HELP %s %s\n# TYPE %s gauge\n", name, help, name);
}

/* One family with one sample per rank: v for every rank, or get(rank)
 * when get is given. */
static void per_rank(FILE *f, const sr_prom_sample *s, const char *name, const char *help, double v,
                     double (*get)(const sr_prom_rank *)) {
    family(f, name, help);
    for (int i = 0; i < s->n; i++) {
        fputs(name, f);
        labels(f, s, &s->ranks[i], NULL, NULL);
        fprintf(f, " %.17g\n", get ? get(&s->ranks[i]) : v);
    }
}

static double comm_of(const sr_prom_rank *r) { return r->comm_exposed_s; }

static sr_status fill(int fd, const char *name, void *ctx) {
    const sr_prom_sample *s = ctx;
    FILE *f = sr_fsio_stream(fd);
    if (!f)
        return sr_fsio_write_error(name, errno ? errno : ENOMEM);
    per_rank(f, s, "shardrun_step", "Training steps completed.", (double)s->step, NULL);
    per_rank(f, s, "shardrun_steps_planned", "Training steps the job file plans (train.steps).", (double)s->steps,
             NULL);
    per_rank(f, s, "shardrun_loss", "Mean per-token training loss of the logged step.", s->loss, NULL);
    per_rank(f, s, "shardrun_tokens_per_second", "Training throughput of the logged step, tokens per second.",
             s->tokens_per_s, NULL);
    if (isfinite(s->mfu))
        per_rank(f, s, "shardrun_mfu_ratio", "Model FLOP utilization of the logged step (0 to 1).", s->mfu, NULL);
    if (isfinite(s->val_loss))
        per_rank(f, s, "shardrun_val_loss", "Mean per-token validation loss of the newest evaluation.", s->val_loss,
                 NULL);
    const sr_eval_scores *e = s->evals;
    static const char *const fam[3][2] = {
        {"shardrun_val_loss", NULL},
        {"shardrun_eval_acc", "Accuracy of the newest evaluation on a train.eval_tasks task (0 to 1)."},
        {"shardrun_eval_acc_norm",
         "Accuracy by log-likelihood per byte of the ending (acc_norm) of the newest evaluation on a task."}};
    for (int g = 0; e && g < 3; g++) {
        int n = g == 0 ? e->nsets : e->ntasks;
        if (n == 0)
            continue;
        if (g > 0) /* (val_loss's help and type are above) */
            family(f, fam[g][0], fam[g][1]);
        else if (!isfinite(s->val_loss))
            family(f, fam[0][0], "Mean per-token validation loss of the newest evaluation.");
        for (int j = 0; j < n; j++)
            for (int i = 0; i < s->n; i++) {
                fputs(fam[g][0], f);
                labels(f, s, &s->ranks[i], g == 0 ? "set" : "task", g == 0 ? e->set[j] : e->task[j]);
                fprintf(f, " %.17g\n", g == 0 ? e->set_loss[j] : g == 1 ? e->acc[j] : e->acc_norm[j]);
            }
    }
    family(f, "shardrun_memory_bytes", "Accounted memory of the rank by space (host, pinned, device), now.");
    for (int i = 0; i < s->n; i++)
        for (int sp = 0; sp < SR_NSPACE; sp++) {
            fputs("shardrun_memory_bytes", f);
            labels(f, s, &s->ranks[i], "space", sr_mem_space_name(sp));
            fprintf(f, " %.17g\n", s->ranks[i].mem_bytes[sp]);
        }
    if (s->ckpt_step >= 0) {
        per_rank(f, s, "shardrun_checkpoint_step", "Step of the newest committed checkpoint.", (double)s->ckpt_step,
                 NULL);
        per_rank(f, s, "shardrun_checkpoint_age_seconds", "Seconds since the newest checkpoint was committed.",
                 s->ckpt_age_s, NULL);
    }
    per_rank(f, s, "shardrun_comm_exposed_seconds",
             "Time the logged step waited on communication (exposed communication), seconds.", 0.0, comm_of);
    per_rank(f, s, "shardrun_last_update_timestamp_seconds", "When shardrun wrote this file (Unix time).", s->time_s,
             NULL);
    return sr_fsio_stream_close(f, name);
}

sr_status sr_prom_write(const char *path, const sr_prom_sample *s) {
    return sr_fsio_atomic_write(path, fill, (void *)s);
}
