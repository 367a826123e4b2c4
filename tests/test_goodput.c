/* test_goodput.c — the goodput accounting (goodput.h) over a metrics file
 * made by hand, whose answer is worked out below from the definitions:
 *
 *   start 1: process start 100, its start record at 102 (start-up 2 s:
 *     bootstrap 0.5, device 0.25, model 1, checkpoint 0.25), fresh; step k
 *     recorded at 102 + k up to step 10 (112); a synchronous save of 0.5 s
 *     and an asynchronous one of 2 s (not a stall); then it fails
 *   start 2: process start 120, its start record at 123 (start-up 3 s:
 *     bootstrap 1, device 0.5, model 1, checkpoint 0.5), resumed from
 *     step 8; steps 9 to 12 at 124 to 127, an evaluation at 127.2, a
 *     final synchronous save of 0.4 s recorded at 127.5
 *
 *   segment 1: 10 s of records, 0.5 s stalled, 9.5 s of steps, 10 steps
 *     of which 8 kept (start 2 resumed from 8): kept 7.6 s, redone 1.9 s
 *   restart: 120 - 112 = 8 s
 *   segment 2: 4.5 s, 0.4 s stalled, 4.1 s of steps, all 4 kept
 *   wall 127.5 - 100 = 27.5 s; kept 11.7 s: goodput 11.7 / 27.5
 *
 * Then: the categories add up to the wall time; a queue wait moves from
 * the restarts into its own row, at most all of them; a file with no start
 * record is refused (SR_ERR_DATA) and a missing one is SR_ERR_NOINPUT; a
 * line that does not parse is skipped; the start-up split's JSON reads
 * back as written. */
#include "srconfig.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "goodput.h"
#include "startup.h"
#include "tap.h"

static const char *const file_lines[] = {
    "{\"event\":\"start\",\"step\":0,\"time\":102,\"resume_step\":0,\"startup\":{\"total\":2,\"bootstrap\":0.5,"
    "\"device\":0.25,\"model\":1,\"checkpoint\":0.25,\"other\":0}}",
    "{\"step\":1,\"time\":103,\"loss\":5}",
    "{\"step\":2,\"time\":104,\"loss\":5}",
    "{\"step\":3,\"time\":105,\"loss\":5}",
    "{\"step\":4,\"time\":106,\"loss\":5}",
    "{\"event\":\"checkpoint\",\"step\":4,\"time\":106.5,\"duration_s\":0.5,\"async\":false}",
    "{\"step\":5,\"time\":107,\"loss\":5}",
    "not json: a torn line",
    "{\"step\":6,\"time\":108,\"loss\":5}",
    "{\"step\":7,\"time\":109,\"loss\":5}",
    "{\"step\":8,\"time\":110,\"loss\":5}",
    "{\"event\":\"checkpoint\",\"step\":8,\"time\":110.2,\"duration_s\":2,\"async\":true}",
    "{\"step\":9,\"time\":111,\"loss\":5}",
    "{\"step\":10,\"time\":112,\"loss\":5}",
    "{\"event\":\"start\",\"step\":8,\"time\":123,\"resume_step\":8,\"startup\":{\"total\":3,\"bootstrap\":1,"
    "\"device\":0.5,\"model\":1,\"checkpoint\":0.5,\"other\":0}}",
    "{\"event\":\"resume\",\"step\":8,\"time\":123,\"from\":\"ck/step_00000008\"}",
    "{\"step\":9,\"time\":124,\"loss\":5}",
    "{\"step\":10,\"time\":125,\"loss\":5}",
    "{\"step\":11,\"time\":126,\"loss\":5}",
    "{\"step\":12,\"time\":127,\"loss\":5}",
    "{\"event\":\"eval\",\"step\":12,\"time\":127.2,\"val_loss\":4}",
    "{\"event\":\"checkpoint\",\"step\":12,\"time\":127.5,\"duration_s\":0.4,\"async\":false}",
};

/* a checkpoint record is the furthest step of start 1 (no step record);
 * start 2 has nothing left: its second is "other", not redone */
static const char *const tail_lines[] = {
    "{\"event\":\"start\",\"step\":0,\"time\":10,\"resume_step\":0,\"job_id\":\"77\",\"startup\":{\"total\":1,"
    "\"model\":1}}",
    "{\"event\":\"checkpoint\",\"step\":3,\"time\":14,\"duration_s\":0.5,\"async\":false}",
    "{\"event\":\"start\",\"step\":3,\"time\":20,\"resume_step\":3,\"job_id\":\"78\",\"startup\":{\"total\":1,"
    "\"checkpoint\":1}}",
    "{\"event\":\"eval\",\"step\":3,\"time\":21,\"val_loss\":4}",
};

static int write_file(const char *path, const char *const *lines, size_t n) {
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    for (size_t i = 0; i < n; i++)
        fprintf(f, "%s\n", lines[i]);
    return fclose(f);
}

int main(void) {
    char dir[] = "/tmp/test_goodput.XXXXXX";
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 99;
    }
    char path[256], empty[256];
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    snprintf(empty, sizeof empty, "%s/none.jsonl", dir);
    size_t n = sizeof file_lines / sizeof *file_lines;
    if (write_file(path, file_lines, n) != 0 || write_file(empty, file_lines + 1, 4) != 0)
        return 99;

    sr_goodput g;
    sr_status st = sr_goodput_read(path, &g);
    tap_ok(st == SR_OK, "a metrics file of two starts is read (status %d)", st);
    tap_ok(g.starts == 2, "  ...2 starts (%d)", g.starts);
    tap_ok(g.steps_kept == 12 && g.steps_redone == 2, "  ...12 steps kept, 2 redone (%lld, %lld)",
           (long long)g.steps_kept, (long long)g.steps_redone);
    tap_is_close(g.wall_s, 27.5, 1e-12, 1e-9, "  ...wall 27.5 s: the first process start to the last record");
    tap_is_close(g.kept_s, 7.6 + 4.1, 1e-12, 1e-9, "  ...steps kept 11.7 s (9.5 s x 8/10 + 4.1 s)");
    tap_is_close(g.redone_s, 1.9, 1e-12, 1e-9, "  ...steps redone 1.9 s (9.5 s x 2/10)");
    tap_is_close(g.stall_s, 0.9, 1e-12, 1e-9,
                 "  ...checkpoint stalls 0.9 s: the synchronous saves, not the asynchronous");
    tap_is_close(g.restart_s, 8, 1e-12, 1e-9,
                 "  ...restarts 8 s: the last record of start 1 to start 2's process start");
    double want[SR_PHASE_COUNT] = {1.5, 0.75, 2, 0.75, 0};
    int phases_ok = 1;
    for (int p = 0; p < SR_PHASE_COUNT; p++)
        phases_ok &= fabs(g.startup_s[p] - want[p]) < 1e-9;
    tap_ok(phases_ok,
           "  ...start-up per phase summed over the starts (bootstrap %g, device %g, model %g, checkpoint %g)",
           g.startup_s[SR_PHASE_BOOTSTRAP], g.startup_s[SR_PHASE_DEVICE], g.startup_s[SR_PHASE_MODEL],
           g.startup_s[SR_PHASE_CHECKPOINT]);
    tap_is_close(g.ratio, 11.7 / 27.5, 1e-12, 1e-12, "  ...goodput %.4f = 11.7 / 27.5", g.ratio);
    double sum = g.kept_s + g.redone_s + g.stall_s + g.restart_s + g.other_s;
    for (int p = 0; p < SR_PHASE_COUNT; p++)
        sum += g.startup_s[p];
    tap_ok(fabs(g.other_s) < 1e-9 && fabs(sum - g.wall_s) < 1e-9,
           "  ...the categories hold all of the wall time: other is 0 (%.3g s)", g.other_s);

    sr_goodput q = g;
    sr_goodput_set_queue(&q, 5, "sacct");
    tap_ok(fabs(q.queue_s - 5) < 1e-12 && fabs(q.restart_s - 3) < 1e-12 && strcmp(q.queue_note, "sacct") == 0,
           "a queue wait of 5 s moves from the 8 s of restarts into its own row (queue %g, restarts %g)", q.queue_s,
           q.restart_s);
    q = g;
    sr_goodput_set_queue(&q, 20, "sacct");
    tap_ok(fabs(q.queue_s - 8) < 1e-12 && q.restart_s == 0,
           "  ...one of 20 s takes at most the restarts' 8 s (queue %g, restarts %g)", q.queue_s, q.restart_s);
    q = g;
    sr_goodput_set_queue(&q, 0, "sacct failed");
    tap_ok(q.queue_s == 0 && q.restart_s == 8 && strcmp(q.queue_note, "sacct failed") == 0,
           "  ...an unknown one changes nothing but the note");

    char out[4096] = "";
    FILE *mem = fmemopen(out, sizeof out - 1, "w");
    sr_goodput_print(&g, mem);
    fclose(mem);
    const char *head = "goodput 0.43: 11.7 s of 27.5 s in steps kept (12 steps; 2 starts; 2 steps redone)\n";
    tap_ok(strncmp(out, head, strlen(head)) == 0 && strstr(out, "\n  steps redone") &&
               strstr(out, "\n  start-up: checkpoint") && strstr(out, "\n  restarts "),
           "the goodput line, then one row per category");

    char tail[256];
    snprintf(tail, sizeof tail, "%s/tail.jsonl", dir);
    if (write_file(tail, tail_lines, sizeof tail_lines / sizeof *tail_lines) != 0)
        return 99;
    st = sr_goodput_read(tail, &g);
    tap_ok(st == SR_OK && g.steps_kept == 3 && g.steps_redone == 0 && fabs(g.kept_s - 3.5) < 1e-9 &&
               fabs(g.stall_s - 0.5) < 1e-9 && fabs(g.restart_s - 5) < 1e-9 && fabs(g.other_s - 1) < 1e-9 &&
               fabs(g.wall_s - 12) < 1e-9 && g.redone_s == 0,
           "a checkpoint record's step counts as done; the last start's second without a step is other, not redone "
           "(kept %g, stall %g, restarts %g, other %g, redone %g of %g)",
           g.kept_s, g.stall_s, g.restart_s, g.other_s, g.redone_s, g.wall_s);
    tap_ok(strcmp(g.job_ids, "77,78") == 0, "  ...the starts' Slurm jobs, each once, in order (%s)", g.job_ids);
    unlink(tail);

    st = sr_goodput_read(empty, &g);
    tap_ok(st == SR_ERR_DATA && strstr(sr_error_message(), "no start record"),
           "a file with step records and no start record is refused (status %d: %s)", st, sr_error_message());
    snprintf(empty, sizeof empty, "%s/absent.jsonl", dir);
    st = sr_goodput_read(empty, &g);
    tap_ok(st == SR_ERR_NOINPUT, "a missing file is SR_ERR_NOINPUT (status %d)", st);

    sr_startup su = {{0.5, 0.25, 1, 0.125, 0.0625}, 1.9375}, back;
    json_t *o = sr_startup_json(&su);
    int read = sr_startup_from_json(o, &back);
    json_decref(o);
    tap_ok(read && memcmp(&su, &back, sizeof su) == 0, "the start-up split's JSON reads back as written");
    char line[256];
    sr_startup_format(&su, line, sizeof line);
    tap_ok(strcmp(line, "1.94 s to the first step: bootstrap 0.50 s, device 0.25 s, model 1.00 s, checkpoint 0.12 s, "
                        "other 0.06 s") == 0,
           "the start-up line: %s", line);

    unlink(path);
    snprintf(empty, sizeof empty, "%s/none.jsonl", dir);
    unlink(empty);
    rmdir(dir);
    tap_plan(tap_n);
    return tap_failed ? 1 : 0;
}
