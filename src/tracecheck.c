/* tracecheck.c — `shardrun debug trace`; see tracecheck.h.  The files are
 * read and the merged file built with jansson. */
#include "srconfig.h"

#include "tracecheck.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "flightcheck.h"
#include "fsio.h"
#include "mem.h"

#define TRACE_FORMAT "shardrun-trace 1"

typedef struct {
    json_t *o; /* the whole file */
    char file[300];
    const char *job, *host;
    json_int_t rank, world, restart, first, last;
} tfile;

static sr_status bad(const char *path, const char *what) {
    return sr_error(SR_ERR_DATA,
                    "%s: not a shardrun trace file: %s (hint: debug trace reads the rank<N>.json files that "
                    "log.trace_steps writes to log.trace_dir)",
                    path, what);
}

static sr_status read_one(int fd, const char *path, const char *name, long rank, void *elem) {
    tfile *t = elem;
    snprintf(t->file, sizeof t->file, "%s", name);
    json_error_t je;
    t->o = json_loadfd(fd, 0, &je);
    if (!t->o)
        return sr_error(SR_ERR_DATA, "%s:%d:%d: not a shardrun trace file: %s (a file cut short, or another file?)",
                        path, je.line, je.column, je.text);
    json_t *od = json_object_get(t->o, "otherData"), *ev = json_object_get(t->o, "traceEvents");
    const char *fmt = json_string_value(json_object_get(od, "format"));
    if (!json_is_object(t->o) || !fmt || strcmp(fmt, TRACE_FORMAT) != 0)
        return bad(path, "its otherData.format is not \"" TRACE_FORMAT "\"");
    if (!json_is_array(ev))
        return bad(path, "traceEvents is not an array");
    t->job = json_string_value(json_object_get(od, "job"));
    t->host = json_string_value(json_object_get(od, "host"));
    json_t *r = json_object_get(od, "rank"), *w = json_object_get(od, "world_size"),
           *rs = json_object_get(od, "restart"), *a = json_object_get(od, "first"), *b = json_object_get(od, "last");
    if (!t->job || !t->host || !json_is_integer(r) || !json_is_integer(w) || !json_is_integer(rs) ||
        !json_is_integer(a) || !json_is_integer(b))
        return bad(path, "otherData lacks job, host, rank, world_size, restart, first or last, or one has the wrong "
                         "type");
    t->rank = json_integer_value(r);
    t->world = json_integer_value(w);
    t->restart = json_integer_value(rs);
    t->first = json_integer_value(a);
    t->last = json_integer_value(b);
    if (t->world < 1 || t->world > 1 << 24 || t->rank != rank)
        return sr_error(SR_ERR_DATA, "%s: the file says it is rank %lld's of %lld, not rank %ld's (a renamed file?)",
                        path, (long long)t->rank, (long long)t->world, rank);
    size_t i;
    json_t *e;
    json_array_foreach(ev, i, e) {
        json_t *pid = json_object_get(e, "pid"), *ph = json_object_get(e, "ph");
        if (!json_is_object(e) || !json_is_integer(pid) || json_integer_value(pid) != rank || !json_is_string(ph)) {
            char what[96];
            snprintf(what, sizeof what, "event %zu is not an object with ph and this rank's pid", i);
            return bad(path, what);
        }
    }
    return SR_OK;
}

static sr_status write_text(int fd, const char *name, void *ctx) {
    const char *text = ctx;
    if (sr_fsio_write_all(fd, text, strlen(text)) != 0 || sr_fsio_write_all(fd, "\n", 1) != 0)
        return sr_fsio_write_error(name, errno);
    return SR_OK;
}

sr_status sr_trace_merge(const char *dir, const char *output, FILE *out) {
    if (!output || !output[0])
        return sr_error(SR_ERR_USAGE,
                        "debug trace: -o MERGED.json is required (hint: shardrun debug trace %s -o "
                        "trace.json)",
                        dir);
    int n = 0, others = 0;
    tfile *ts = NULL;
    sr_status st = sr_rank_files_read(dir,
                                      "the trace files are in log.trace_dir, by default "
                                      "<checkpoint.dir>/trace/<job id>.<restart>/",
                                      sizeof *ts, read_one, (void **)&ts, &n, &others);
    if (st != SR_OK && !ts)
        return st;
    if (st == SR_OK && n == 0)
        st = sr_error(SR_ERR_NOINPUT,
                      "%s holds no trace files (rank<N>.json)%s (hint: a run with log.trace_steps writes them to "
                      "log.trace_dir when its window of steps ends)",
                      dir, others ? ", only other files" : "");
    char ja[160], jb[160]; /* (strings read from files reach messages escaped) */
    for (int i = 1; i < n && st == SR_OK; i++)
        if (strcmp(ts[i].job, ts[0].job) != 0 || ts[i].restart != ts[0].restart || ts[i].world != ts[0].world ||
            ts[i].first != ts[0].first || ts[i].last != ts[0].last)
            st = sr_error(SR_ERR_DATA,
                          "%s/%s is of job %s.%lld (%lld ranks, steps %lld-%lld) but %s of job %s.%lld (%lld ranks, "
                          "steps %lld-%lld): traces of two different runs (hint: each run writes to its own <job "
                          "id>.<restart> directory; merge one run's)",
                          dir, ts[i].file, sr_escape(ts[i].job, ja, sizeof ja), (long long)ts[i].restart,
                          (long long)ts[i].world, (long long)ts[i].first, (long long)ts[i].last, ts[0].file,
                          sr_escape(ts[0].job, jb, sizeof jb), (long long)ts[0].restart, (long long)ts[0].world,
                          (long long)ts[0].first, (long long)ts[0].last);
    /* every rank's, in rank order */
    tfile **by = NULL;
    if (st == SR_OK) {
        by = sr_calloc((size_t)ts[0].world, sizeof *by);
        if (!by)
            st = sr_error_oom("the trace files");
    }
    for (int i = 0; i < n && st == SR_OK; i++)
        by[ts[i].rank] = &ts[i];
    for (json_int_t r = 0; st == SR_OK && r < ts[0].world; r++)
        if (!by[r])
            st = sr_error(SR_ERR_NOINPUT,
                          "%s: no trace of rank %lld (of %lld): its rank%lld.json is missing (hint: a rank that died "
                          "before the window ended writes none; merge a complete run's)",
                          dir, (long long)r, (long long)ts[0].world, (long long)r);
    json_t *merged = NULL;
    size_t events = 0, collectives = 0;
    if (st == SR_OK) {
        json_t *all = json_array();
        merged = json_pack("{so ss s{ss ss sI sI sI sI}}", "traceEvents", all, "displayTimeUnit", "ms", "otherData",
                           "format", "shardrun-trace-merged 1", "job", ts[0].job, "restart", ts[0].restart,
                           "world_size", ts[0].world, "first", ts[0].first, "last", ts[0].last);
        for (json_int_t r = 0; merged && r < ts[0].world; r++) {
            json_t *ev = json_object_get(by[r]->o, "traceEvents");
            size_t i;
            json_t *e;
            json_array_foreach(ev, i, e) {
                const char *cat = json_string_value(json_object_get(e, "cat"));
                collectives += cat && strcmp(cat, "collective") == 0;
                events++;
            }
            json_array_extend(all, ev);
        }
        if (!merged)
            st = sr_error_oom("the merged trace");
    }
    if (st == SR_OK) {
        char *text = json_dumps(merged, JSON_COMPACT | JSON_PRESERVE_ORDER);
        st = text ? sr_fsio_atomic_write(output, write_text, text) : sr_error_oom("the merged trace");
        free(text);
    }
    char job[160];
    if (st == SR_OK)
        fprintf(out, "merged %lld ranks of job %s.%lld, steps %lld-%lld: %zu events (%zu collectives) into %s\n",
                (long long)ts[0].world, sr_escape(ts[0].job, job, sizeof job), (long long)ts[0].restart,
                (long long)ts[0].first, (long long)ts[0].last, events, collectives, output);
    json_decref(merged);
    for (int i = 0; i < n; i++)
        json_decref(ts[i].o);
    free(ts);
    free(by);
    return st;
}
