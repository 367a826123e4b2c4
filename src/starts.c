/* starts.c — the start history and the crash-loop guard; see starts.h.
 *
 * One JSON object per line (jansson), appended with one write(2) each:
 *   {"start": 3, "time": "...", "job_id": "...", "restart": 2, "world_size": 4, "resume_step": 40,
 *    "cause": "exit_69", "blamed": "node7", "lost_s": 12.5}     (the last three: a rerun's)
 *   {"ready": 3, "time": "...", "startup": {"total": 4.1, "bootstrap": 0.3, ...}}
 *   {"end": 3, "time": "...", "how": "preempted", "step": 52}
 * A ready or end line names the start it belongs to. */
#include "srconfig.h"

#include "starts.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "fsio.h"
#include "line.h"

/* more than a lifetime of starts; a longer file keeps its newest lines */
#define MAX_FILE_BYTES (4u << 20)

static void path_of(const char *dir, char *out, size_t n) { snprintf(out, n, "%s/%s", dir, SR_STARTS_FILE); }

/* Opens the history of dir at its newest MAX_FILE_BYTES (*f NULL when
 * there is none). */
static sr_status open_history(const char *dir, FILE **fp) {
    *fp = NULL;
    char path[4096 + 32];
    path_of(dir, path, sizeof path);
    struct stat sb;
    int fd = sr_fsio_open_own(path, &sb);
    if (fd < 0 && errno == EINVAL)
        return sr_fsio_own_refused(path, sb.st_mode);
    FILE *f = fd >= 0 ? fdopen(fd, "r") : NULL;
    if (!f) {
        int err = errno;
        if (fd >= 0)
            close(fd);
        return err == ENOENT ? SR_OK
                             : sr_error(SR_ERR_NOINPUT, "%s: cannot read the start history: %s", path, strerror(err));
    }
    if (fseek(f, 0, SEEK_END) == 0) {
        long size = ftell(f);
        if (size > (long)MAX_FILE_BYTES) {
            fseek(f, size - (long)MAX_FILE_BYTES, SEEK_SET);
            int c;
            while ((c = fgetc(f)) != EOF && c != '\n') /* to the next whole line */
                ;
        } else
            fseek(f, 0, SEEK_SET);
    }
    *fp = f;
    return SR_OK;
}

sr_status sr_starts_read(const char *dir, sr_start_rec **recs, size_t *n) {
    *recs = NULL;
    *n = 0;
    char path[4096 + 32];
    path_of(dir, path, sizeof path);
    FILE *f;
    sr_status ost = open_history(dir, &f);
    if (ost != SR_OK || !f)
        return ost;
    size_t cap = 0, bad = 0;
    long long last_id = -1;
    char line[16384]; /* (a start line: a metrics path up to PATH_MAX, blamed hosts up to 255 bytes) */
    sr_start_rec *v = NULL;
    while (fgets(line, sizeof line, f)) {
        json_error_t je;
        json_t *o = json_loads(line, 0, &je);
        json_int_t id = -1;
        if (o && json_unpack(o, "{sI}", "start", &id) == 0) {
            last_id = id;
            if (*n == cap) {
                size_t nc = cap ? 2 * cap : 16;
                sr_start_rec *g = realloc(v, nc * sizeof *g);
                if (!g) {
                    json_decref(o);
                    break;
                }
                v = g, cap = nc;
            }
            sr_start_rec *r = &v[(*n)++];
            memset(r, 0, sizeof *r);
            const char *t = "", *j = "-", *cause = "", *blamed = "";
            json_int_t restart = 0, ws = 0, step = 0;
            json_unpack(o, "{s?s s?s s?I s?I s?I s?s s?s}", "time", &t, "job_id", &j, "restart", &restart, "world_size",
                        &ws, "resume_step", &step, "cause", &cause, "blamed", &blamed);
            snprintf(r->time, sizeof r->time, "%s", t);
            snprintf(r->job_id, sizeof r->job_id, "%s", j);
            snprintf(r->cause, sizeof r->cause, "%s", cause);
            snprintf(r->blamed, sizeof r->blamed, "%s", blamed);
            json_t *lost = json_object_get(o, "lost_s");
            r->lost_s = json_is_number(lost) ? json_number_value(lost) : -1;
            r->restart = restart;
            r->world_size = (int)ws;
            r->resume_step = step;
        } else if (o && json_unpack(o, "{sI}", "ready", &id) == 0 && *n > 0 && id == last_id) {
            sr_start_rec *r = &v[*n - 1];
            r->ready = sr_startup_from_json(json_object_get(o, "startup"), &r->startup);
        } else if (o && json_unpack(o, "{sI}", "end", &id) == 0 && *n > 0 && id == last_id) {
            const char *how = "";
            json_int_t step = 0;
            json_unpack(o, "{s?s s?I}", "how", &how, "step", &step);
            sr_start_rec *r = &v[*n - 1];
            snprintf(r->ended, sizeof r->ended, "%s", how);
            r->ended_step = step;
        } else
            bad++;
        json_decref(o);
    }
    fclose(f);
    if (bad)
        sr_log_warn("%s: %zu line%s of the start history do%s not parse and %s skipped", path, bad, bad == 1 ? "" : "s",
                    bad == 1 ? "es" : "", bad == 1 ? "is" : "are");
    *recs = v;
    return SR_OK;
}

int sr_starts_stalled(const sr_start_rec *recs, size_t n, int64_t resume_step) {
    int count = 0;
    for (size_t i = n; i-- > 0;) {
        if (recs[i].ended[0])
            continue; /* completed, or preempted with its checkpoint committed */
        if (recs[i].resume_step != resume_step)
            break;
        count++;
    }
    return count;
}

static void append_line(const char *dir, json_t *o) {
    char path[4096 + 32];
    path_of(dir, path, sizeof path);
    char *text = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    int fd = -1;
    sr_status st = text ? sr_fsio_open_append_own(path, "the start history", &fd) : SR_ERR_INTERNAL;
    if (st == SR_OK) {
        size_t len = strlen(text);
        text[len] = '\n'; /* json_dumps' NUL becomes the newline: one write */
        if (sr_fsio_write_all(fd, text, len + 1) != 0)
            sr_log_warn("%s: cannot append to the start history: %s (the crash-loop guard does not see this start)",
                        path, strerror(errno));
        close(fd);
    } else
        sr_log_warn("%s; this start is not recorded (the crash-loop guard does not see it)", sr_error_message());
    free(text);
}

bool sr_starts_metrics(const char *dir, char *out, size_t size) {
    out[0] = '\0';
    FILE *f;
    if (open_history(dir, &f) != SR_OK || !f)
        return false;
    char line[8192];
    while (fgets(line, sizeof line, f)) {
        json_t *o = json_loads(line, 0, NULL);
        const char *m = json_string_value(json_object_get(o, "metrics"));
        if (m && json_object_get(o, "start"))
            snprintf(out, size, "%s", m);
        json_decref(o);
    }
    fclose(f);
    return out[0] != '\0';
}

/* the start id the next start line gets (also named by its end line) */
static long long start_id;

/* The rerun's environment variable `name`, when it holds 1 to size - 1
 * characters of [A-Za-z0-9._,-] (a cause, host names); else "" (a value
 * that is set but is not that warns). */
static void restart_env(const char *name, char *out, size_t size) {
    out[0] = '\0';
    const char *v = getenv(name);
    if (!v || !v[0])
        return;
    size_t len = strlen(v), ok = strspn(v, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._,-");
    if (ok != len || len >= size) {
        char shown[64];
        sr_escape_n(v, len, shown, sizeof shown);
        sr_log_warn("%s='%s' is not recorded in the start history: expected 1 to %zu characters of letters, digits, "
                    "'.', '_', ',' and '-' (the job template sets it when it reruns a failed step)",
                    name, shown, size - 1);
        return;
    }
    memcpy(out, v, len + 1);
}

/* Seconds from SHARDRUN_RESTART_AT (the failure's wall time) to now; -1
 * when unset or not a time before now. */
static double restart_lost_s(void) {
    const char *v = getenv("SHARDRUN_RESTART_AT");
    if (!v || !v[0])
        return -1;
    char *end;
    double at = strtod(v, &end), now = sr_clock_wall_s();
    if (*end || !(at > 0) || at > now) {
        char shown[64];
        sr_escape_n(v, strlen(v), shown, sizeof shown);
        sr_log_warn("SHARDRUN_RESTART_AT='%s' is not recorded in the start history: expected the failure's time in "
                    "seconds since the epoch, not after now (date +%%s)",
                    shown);
        return -1;
    }
    return now - at;
}

sr_status sr_starts_begin(const char *dir, int64_t resume_step, int64_t max_stalled, const char *metrics,
                          const sr_world *w, sr_ctl *ctl) {
    if (!dir || !dir[0])
        return SR_OK;
    /* stalled starts (0 when it may start); the status of a history that
     * cannot be read (it is not a regular file: 73) */
    int64_t verdict[2] = {0, 0};
    char msg[2048] = "";
    if (w->rank == 0) {
        sr_start_rec *recs = NULL;
        size_t n = 0;
        sr_status rst = sr_starts_read(dir, &recs, &n);
        if (rst == SR_ERR_CANTCREAT) {
            verdict[1] = rst; /* state, not a hint: the guard cannot be off unnoticed */
            sr_fmt(msg, sizeof msg, "%s", sr_error_message());
        } else if (rst != SR_OK)
            sr_log_warn("%s: the crash-loop guard is off for this start", sr_error_message());
        int stalled = sr_starts_stalled(recs, n, resume_step);
        if (!verdict[1] && max_stalled > 0 && stalled >= max_stalled) {
            verdict[0] = stalled;
            sr_line l = SR_LINE(msg);
            int shown = 0;
            for (size_t i = n; i-- > 0 && shown < stalled && l.len < sizeof msg - 200;)
                if (!recs[i].ended[0]) {
                    sr_line_add(&l, "%sjob %s restart %lld at %s", shown ? ", " : "", recs[i].job_id, recs[i].restart,
                                recs[i].time);
                    shown++;
                }
        } else if (!verdict[1]) {
            sr_clock_iso(-1, msg, sizeof msg);
            start_id = (long long)n + 1;
            json_t *o = json_pack("{sI ss ss sI si sI}", "start", (json_int_t)start_id, "time", msg, "job_id",
                                  w->job_id, "restart", (json_int_t)w->restart, "world_size", w->size, "resume_step",
                                  (json_int_t)resume_step);
            char cause[32], blamed[256];
            restart_env("SHARDRUN_RESTART_CAUSE", cause, sizeof cause);
            restart_env("SHARDRUN_RESTART_BLAMED", blamed, sizeof blamed);
            double lost = restart_lost_s();
            if (o && cause[0])
                json_object_set_new(o, "cause", json_string(cause));
            if (o && blamed[0])
                json_object_set_new(o, "blamed", json_string(blamed));
            if (o && lost >= 0)
                json_object_set_new(o, "lost_s", json_real(lost));
            char *abs = metrics && metrics[0] ? realpath(metrics, NULL) : NULL;
            if (o && abs) /* where `ckpt list` finds the run's goodput */
                json_object_set_new(o, "metrics", json_string(abs));
            free(abs);
            append_line(dir, o);
        }
        free(recs);
    }
    sr_status st = ctl ? sr_ctl_broadcast(ctl, verdict, 2, 0) : SR_OK;
    if (st != SR_OK)
        return st;
    if (verdict[1])
        return w->rank == 0 ? sr_error((sr_status)verdict[1], "%s", msg)
                            : sr_error((sr_status)verdict[1],
                                       "%s/" SR_STARTS_FILE " is not a regular file (rank 0 says what is there)", dir);
    if (verdict[0] == 0)
        return SR_OK;
    char step[64];
    if (resume_step > 0)
        snprintf(step, sizeof step, "the checkpoint of step %lld", (long long)resume_step);
    else
        snprintf(step, sizeof step, "a fresh start (no checkpoint)");
    return sr_error(SR_ERR_STALLED,
                    "restarts stall: the last %lld starts all began from %s and none committed a newer checkpoint "
                    "(%s); not starting again (hint: the run fails the same way each time: read those starts' logs "
                    "and fix the cause, then run once with --set preemption.max_stalled_restarts=0; shardrun ckpt list "
                    "%s shows the start history)",
                    (long long)verdict[0], step, w->rank == 0 ? msg : "rank 0 names them", dir);
}

void sr_starts_ready(const char *dir, const sr_world *w, const sr_startup *s) {
    if (!dir || !dir[0] || w->rank != 0 || start_id == 0)
        return;
    char t[32];
    sr_clock_iso(-1, t, sizeof t);
    append_line(dir, json_pack("{sI ss so}", "ready", (json_int_t)start_id, "time", t, "startup", sr_startup_json(s)));
}

void sr_starts_end(const char *dir, const sr_world *w, const char *how, int64_t step) {
    if (!dir || !dir[0] || w->rank != 0 || start_id == 0)
        return;
    char t[32];
    sr_clock_iso(-1, t, sizeof t);
    append_line(
        dir, json_pack("{sI ss ss sI}", "end", (json_int_t)start_id, "time", t, "how", how, "step", (json_int_t)step));
}
