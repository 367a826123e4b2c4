/* trace.c — the timeline trace; see trace.h for what it owns.
 *
 * The Chrome trace-event format is JSON written here with stdio: the
 * spans are flat records, and building a jansson tree of every span would
 * double the memory of a long window for nothing. */
#include "srconfig.h"

#include "trace.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "flight.h"
#include "fsio.h"
#include "status.h"

typedef struct {
    int64_t t0, t1, bytes, seq, t_enq;
    int32_t group_size;
    uint8_t lane, collective, ok;
    char name[40];
    char detail[48];
    char group[16];
} span;

#define MAX_SPANS ((size_t)1 << 20)

static struct {
    int64_t first, last;
    int on;       /* the window is open */
    int inflight; /* late spans begun in the window and not ended (the checkpoint writer's) */
    bool closing; /* the window closed, its file waits for them */
    bool written, dropped_warned;
    pthread_mutex_t mu;
    span *s;
    size_t n, cap;
    int rank, world_size;
    long long restart;
    char host[256], job[300];
    char dir[4096];
} tr = {.mu = PTHREAD_MUTEX_INITIALIZER};

static const char *const lane_names[SR_TRACE_NLANES] = {"host phases",
                                                        "compute stream",
                                                        "comm stream",
                                                        "h2d stream",
                                                        "d2h stream",
                                                        "checkpoint",
                                                        "collectives: host transport",
                                                        "collectives: NCCL",
                                                        "collectives: copy",
                                                        "collectives: host staging"};

bool sr_trace_on(void) { return __atomic_load_n(&tr.on, __ATOMIC_RELAXED) != 0; }

void sr_trace_init(const sr_trace_opts *o) {
    tr.first = o->first;
    tr.last = o->last;
    if (o->first <= 0)
        return;
    tr.rank = o->rank;
    tr.world_size = o->world_size;
    tr.restart = o->restart;
    snprintf(tr.host, sizeof tr.host, "%s", o->host ? o->host : "");
    snprintf(tr.job, sizeof tr.job, "%s", o->job ? o->job : "");
    snprintf(tr.dir, sizeof tr.dir, "%s", o->dir ? o->dir : ".");
}

/* A slot for one more span (tr.mu held), or NULL when the buffer is full
 * or cannot grow (warned once). */
static span *slot(void) {
    if (tr.n == tr.cap) {
        size_t cap = tr.cap ? tr.cap * 2 : 4096;
        span *s = cap <= MAX_SPANS ? realloc(tr.s, cap * sizeof *s) : NULL;
        if (!s) {
            if (!tr.dropped_warned)
                sr_log_warn("trace: %s after %zu spans: later spans of the window are dropped (hint: trace fewer "
                            "steps with log.trace_steps)",
                            tr.n >= MAX_SPANS / 2 ? "the buffer is full" : "out of memory", tr.n);
            tr.dropped_warned = true;
            return NULL;
        }
        tr.s = s;
        tr.cap = cap;
    }
    span *s = &tr.s[tr.n++];
    memset(s, 0, sizeof *s);
    return s;
}

void sr_trace_span(sr_trace_lane lane, const char *name, int64_t t0, int64_t t1, int64_t bytes, const char *detail) {
    if (!sr_trace_on())
        return;
    pthread_mutex_lock(&tr.mu);
    span *s = tr.on ? slot() : NULL;
    if (s) {
        s->lane = (uint8_t)lane;
        s->t0 = t0;
        s->t1 = t1 >= t0 ? t1 : t0;
        s->bytes = bytes;
        snprintf(s->name, sizeof s->name, "%s", name);
        snprintf(s->detail, sizeof s->detail, "%s", detail ? detail : "");
    }
    pthread_mutex_unlock(&tr.mu);
}

void sr_trace_collective(int plane, const char *op, const char *group, int group_size, int64_t seq, int64_t bytes,
                         int64_t t_enq, int64_t t_start, int64_t t_end, bool ok) {
    if (!sr_trace_on())
        return;
    static const uint8_t lane_of[] = {[SR_FLIGHT_HOST] = SR_TRACE_COLL_HOST,
                                      [SR_FLIGHT_NCCL] = SR_TRACE_COLL_NCCL,
                                      [SR_FLIGHT_COPY] = SR_TRACE_COLL_COPY,
                                      [SR_FLIGHT_STAGING] = SR_TRACE_COLL_STAGING};
    pthread_mutex_lock(&tr.mu);
    span *s = tr.on ? slot() : NULL;
    if (s) {
        s->lane = plane >= 0 && plane < (int)sizeof lane_of && lane_of[plane] ? lane_of[plane] : SR_TRACE_COLL_HOST;
        s->collective = 1;
        s->ok = ok;
        s->t_enq = t_enq;
        s->t0 = t_start ? t_start : t_enq;
        s->t1 = t_end >= s->t0 ? t_end : s->t0;
        s->bytes = bytes;
        s->seq = seq;
        s->group_size = group_size;
        snprintf(s->name, sizeof s->name, "%s", op ? op : "?");
        snprintf(s->group, sizeof s->group, "%s", group ? group : "");
    }
    pthread_mutex_unlock(&tr.mu);
}

int64_t sr_trace_late_begin(void) {
    if (!sr_trace_on())
        return 0;
    __atomic_add_fetch(&tr.inflight, 1, __ATOMIC_ACQ_REL);
    return sr_clock_wall_ns();
}

void sr_trace_late_end(sr_trace_lane lane, const char *name, int64_t t0, const char *detail) {
    if (!t0)
        return;
    int64_t t1 = sr_clock_wall_ns();
    pthread_mutex_lock(&tr.mu);
    span *s = (tr.on || tr.closing) && !tr.written ? slot() : NULL;
    if (s) {
        s->lane = (uint8_t)lane;
        s->t0 = t0;
        s->t1 = t1;
        s->bytes = -1;
        snprintf(s->name, sizeof s->name, "%s", name);
        snprintf(s->detail, sizeof s->detail, "%s", detail ? detail : "");
    }
    __atomic_sub_fetch(&tr.inflight, 1, __ATOMIC_ACQ_REL);
    pthread_mutex_unlock(&tr.mu);
}

void sr_trace_late_span(sr_trace_lane lane, const char *name, int64_t t0, int64_t t1) {
    pthread_mutex_lock(&tr.mu);
    span *s = (tr.on || tr.closing) && !tr.written ? slot() : NULL;
    if (s) {
        s->lane = (uint8_t)lane;
        s->t0 = t0;
        s->t1 = t1 >= t0 ? t1 : t0;
        s->bytes = -1;
        snprintf(s->name, sizeof s->name, "%s", name);
    }
    __atomic_sub_fetch(&tr.inflight, 1, __ATOMIC_ACQ_REL);
    pthread_mutex_unlock(&tr.mu);
}

/* A JSON string of a name this program made (escaped all the same). */
static void put_str(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c < 0x20)
            fprintf(f, "\\u%04x", c);
        else
            fputc(c, f);
    }
    fputc('"', f);
}

static void put_us(FILE *f, int64_t ns) { fprintf(f, "%lld.%03lld", (long long)(ns / 1000), (long long)(ns % 1000)); }

static sr_status fill(int fd, const char *name, void *ctx) {
    (void)ctx;
    FILE *f = sr_fsio_stream(fd);
    if (!f)
        return sr_fsio_write_error(name, errno ? errno : ENOMEM);
    fputs("{\"traceEvents\":[\n", f);
    fprintf(f, "{\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"name\":\"process_name\",\"args\":{\"name\":", tr.rank);
    char pname[300];
    snprintf(pname, sizeof pname, "rank %d (%s)", tr.rank, tr.host);
    put_str(f, pname);
    fprintf(f, "}},\n{\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"name\":\"process_sort_index\",\"args\":{\"sort_index\":%d}}",
            tr.rank, tr.rank);
    for (int l = 0; l < SR_TRACE_NLANES; l++) {
        fprintf(f, ",\n{\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"name\":\"thread_name\",\"args\":{\"name\":", tr.rank, l);
        put_str(f, lane_names[l]);
        fprintf(f,
                "}},\n{\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"name\":\"thread_sort_index\",\"args\":{\"sort_index\":%d}}",
                tr.rank, l, l);
    }
    for (size_t i = 0; i < tr.n; i++) {
        const span *s = &tr.s[i];
        fprintf(f, ",\n{\"ph\":\"X\",\"pid\":%d,\"tid\":%d,\"cat\":\"%s\",\"name\":", tr.rank, s->lane,
                s->collective              ? "collective"
                : s->lane == SR_TRACE_HOST ? "phase"
                                           : "stream");
        put_str(f, s->name);
        fputs(",\"ts\":", f);
        put_us(f, s->t0);
        fputs(",\"dur\":", f);
        put_us(f, s->t1 - s->t0);
        fputs(",\"args\":{", f);
        const char *sep = "";
        if (s->collective) {
            fputs("\"group\":", f);
            put_str(f, s->group);
            fprintf(f, ",\"group_size\":%d,\"seq\":%lld,\"queued_us\":", s->group_size, (long long)s->seq);
            put_us(f, s->t0 > s->t_enq ? s->t0 - s->t_enq : 0);
            fprintf(f, ",\"ok\":%s", s->ok ? "true" : "false");
            sep = ",";
        }
        if (s->bytes >= 0) {
            fprintf(f, "%s\"bytes\":%lld", sep, (long long)s->bytes);
            sep = ",";
        }
        if (s->detail[0]) {
            fprintf(f, "%s\"detail\":", sep);
            put_str(f, s->detail);
        }
        fputs("}}", f);
    }
    fprintf(f,
            "\n],\"displayTimeUnit\":\"ms\",\"otherData\":{\"format\":\"shardrun-trace 1\",\"rank\":%d,"
            "\"world_size\":%d,\"job\":",
            tr.rank, tr.world_size);
    put_str(f, tr.job);
    fputs(",\"host\":", f);
    put_str(f, tr.host);
    fprintf(f, ",\"restart\":%lld,\"first\":%lld,\"last\":%lld}}\n", tr.restart, (long long)tr.first,
            (long long)tr.last);
    return sr_fsio_stream_close(f, name);
}

/* Closes the window and writes the file (once).  A failure warns: a trace
 * never fails the run. */
static void write_file(void) {
    pthread_mutex_lock(&tr.mu);
    __atomic_store_n(&tr.on, 0, __ATOMIC_RELAXED);
    bool first_time = !tr.written;
    tr.written = true;
    tr.closing = false;
    pthread_mutex_unlock(&tr.mu);
    if (!first_time)
        return;
    char path[4200];
    snprintf(path, sizeof path, "%s/rank%d.json", tr.dir, tr.rank);
    sr_status st = sr_fsio_mkdir_p(tr.dir) == 0 ? SR_OK : sr_fsio_create_error(tr.dir, errno);
    if (st == SR_OK)
        st = sr_fsio_atomic_write_own(path, fill, NULL);
    if (st != SR_OK)
        sr_log_warn("trace: %s; no trace from this rank", sr_error_message());
    else
        sr_log_info("trace: wrote steps %lld-%lld (%zu spans) to %s/rank<N>.json; merge the ranks with shardrun debug "
                    "trace %s -o trace.json and open it in Perfetto",
                    (long long)tr.first, (long long)tr.last, tr.n, tr.dir, tr.dir);
    free(tr.s);
    tr.s = NULL;
    tr.n = tr.cap = 0;
}

void sr_trace_step_begin(int64_t step) {
    if (tr.first <= 0 || tr.written)
        return;
    if (step > tr.last && (sr_trace_on() || tr.closing)) {
        /* the window closes; its file waits for a checkpoint write begun
         * in it (checked again at each later step) */
        pthread_mutex_lock(&tr.mu);
        __atomic_store_n(&tr.on, 0, __ATOMIC_RELAXED);
        tr.closing = true;
        bool wait = __atomic_load_n(&tr.inflight, __ATOMIC_ACQUIRE) > 0;
        pthread_mutex_unlock(&tr.mu);
        if (!wait)
            write_file();
    } else if (step >= tr.first && step <= tr.last) {
        __atomic_store_n(&tr.on, 1, __ATOMIC_RELAXED);
    }
}

void sr_trace_finish(void) {
    if (sr_trace_on() || tr.closing)
        write_file();
}
