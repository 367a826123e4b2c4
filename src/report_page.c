/* report_page.c — the report's HTML page: the head and its style, the
 * run's configuration as a table, the charts in order, the events table.
 * Part of the report module (report.h, report_impl.h). */
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

/* The newest start event's configuration as table rows. */
void rep_config_rows(FILE *f, const json_t *o) {
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
        rep_esc(f, keys[i]);
        fputs("</th><td>", f);
        if (json_is_string(v))
            rep_esc_n(f, json_string_value(v), MAX_STR);
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
/* The named series' summary rows: each set's final and best loss, each
 * task's final accuracies (percent) with their steps, what was dropped. */
void rep_named_rows(FILE *f, const state *s) {
    for (int i = 0; i < s->nnamed; i++) {
        const named_series *n = &s->named[i];
        const named_series *acc = n->kind == N_ACC ? n : rep_named_find(s, N_ACC, n->name);
        const named_series *norm = n->kind == N_NORM ? n : rep_named_find(s, N_NORM, n->name);
        if (n->kind != N_SET && n != acc && acc)
            continue; /* in its acc's row */
        fputs(n->kind == N_SET ? "<tr><th>validation loss (" : "<tr><th>accuracy (", f);
        rep_esc_n(f, n->name, MAX_STR);
        fputs(")</th><td>", f);
        if (n->kind == N_SET)
            fprintf(f, "final %.4f (step %.0f), best %.4f (step %.0f)", n->final, n->final_step, n->best, n->best_step);
        if (n->kind != N_SET && acc)
            fprintf(f, "acc final %.2f%% (step %.0f)", acc->final, acc->final_step);
        if (n->kind != N_SET && norm)
            fprintf(f, "%sacc_norm final %.2f%% (step %.0f)", acc ? ", " : "", norm->final, norm->final_step);
        fputs("</td></tr>\n", f);
    }
    if (s->named_dropped)
        fprintf(f,
                "<tr><th>not charted</th><td>%lld value%s of more validation sets or tasks (at most %d sets, %d "
                "tasks)</td></tr>\n",
                s->named_dropped, rep_plural((double)s->named_dropped), MAX_SETS, MAX_TASKS);
}

void rep_render(FILE *f, const char *path, const state *s, const totals *t) {
    fputs("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n<title>shardrun report: ", f);
    rep_esc(f, path);
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
    rep_esc(f, path);
    fputs("</h1>\n<table class=\"summary\">\n", f);
    if (isfinite(s->final_val))
        fprintf(f, "<tr><th>validation loss</th><td>final %.4f (step %.0f), best %.4f (step %.0f)</td></tr>\n",
                s->final_val, s->final_val_step, s->best_val, s->best_val_step);
    rep_named_rows(f, s);
    if (isfinite(s->final_loss))
        fprintf(f, "<tr><th>training loss</th><td>final %.4f</td></tr>\n", s->final_loss);
    if (isfinite(s->tokens))
        fprintf(f, "<tr><th>tokens</th><td>%.0f (step %.0f)</td></tr>\n", s->tokens, s->tokens_step);
    fprintf(f, "<tr><th>wall time</th><td>%.1f s (%d run%s)</td></tr>\n",
            isfinite(s->first_time) ? s->last_time - s->first_time : 0.0, s->runs, rep_plural(s->runs));
    fprintf(f,
            "<tr><th>time lost to preemption</th><td>%.1f s = %.0f steps redone &times; %.3f s + %.1f s between an "
            "exit and the next start (%d resume%s after a preemption)</td></tr>\n",
            t->lost_pre, s->redone_pre, t->step_s, s->gap_pre, s->resumes_pre, rep_plural(s->resumes_pre));
    fprintf(f,
            "<tr><th>time lost to crashes</th><td>%.1f s = %.0f steps redone &times; %.3f s + %.1f s before the next "
            "start (%d restart%s without a preemption)</td></tr>\n",
            t->lost_crash, s->redone_crash, t->step_s, s->gap_crash, s->resumes_crash, rep_plural(s->resumes_crash));
    if (s->gp_ok)
        fprintf(f, "<tr><th>goodput</th><td>%.2f of the wall time in steps kept (see Goodput)</td></tr>\n",
                s->gp.ratio);
    fprintf(f, "<tr><th>records</th><td>%lld steps, %lld events, %lld lines skipped</td></tr>\n</table>\n", s->steps,
            s->events, s->skipped);
    if (s->config)
        rep_config_rows(f, s->config);
    fputs("<p>Markers on the loss chart: green triangle start, cyan diamond resume, grey square checkpoint, red "
          "circle preemption, small purple circle evaluation (hover for details); markers at one step stack. Dashed "
          "lines: steps a run redid after a crash or preemption.</p>\n",
          f);
    rep_chart(f, s, "loss", "Loss", "loss", true);
    rep_named_charts(f, s);
    rep_chart(f, s, "lr", "Learning rate", "lr", false);
    rep_chart(f, s, "grad-norm", "Gradient norm (before clipping)", "norm", false);
    rep_chart(f, s, "tokens-per-s", "Throughput", "tokens/s", false);
    rep_chart(f, s, "mfu", "Model FLOP utilization", "%", false);
    rep_chart(f, s, "comm", "Exposed communication per step", "ms", false);
    rep_chart(f, s, "memory", "Memory by category (peak so far, stacked)", "MiB", false);
    rep_busy_chart(f, s);
    rep_goodput_section(f, s);
    rep_profile_section(f, s);

    fputs("<h2>Events</h2>\n<table class=\"events\"><tr><th>line</th><th>step</th><th>event</th></tr>\n", f);
    for (int i = 0; i < s->nmarks; i++) {
        fprintf(f, "<tr><td>%lld</td><td>%.0f</td><td>", s->marks[i].line, s->marks[i].step);
        rep_esc(f, s->marks[i].title);
        fputs("</td></tr>\n", f);
    }
    fputs("</table>\n", f);
    if (s->events > s->nmarks)
        fprintf(f, "<p class=\"more\">%lld more events, counted per step range on the loss chart.</p>\n",
                s->events - s->nmarks);
    fputs("</body></html>\n", f);
}
