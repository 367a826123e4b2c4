/* flight.c — the flight recorder's ring and its async-signal-safe dump; see
 * flight.h for what it owns.
 *
 * The dump formats JSON by hand (put_* below): stdio and jansson are not
 * async-signal-safe (they lock and allocate), and the dump runs in a
 * SIGQUIT handler and in threads about to _exit while others may hold any
 * lock.  Every number is an integer (nanoseconds, bytes), so no float
 * formatting is needed. */
#include "srconfig.h"

#include "flight.h"

#include "clock.h"
#include "signals.h"
#include "trace.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* One entry.  Every field is read by a dump that may run concurrently, so
 * every access is atomic (relaxed; the id is the publication). */
typedef struct {
    uint64_t id; /* 1-based record number; 0 = being written */
    int64_t seq, step;
    uint64_t bytes;
    int64_t t_enq, t_start, t_end; /* CLOCK_REALTIME ns; 0 = not yet */
    const char *op;                /* a string literal of the recording module */
    uint64_t group[2];             /* the group name, 15 bytes and a NUL */
    int32_t group_size;
    uint8_t plane, state;
} entry;

static struct {
    entry *ring;
    uint64_t cap;
    uint64_t next; /* ids handed out */
    uint64_t base; /* ids handed out before the first step mark */
    int64_t step, steps;
    uint64_t step_id;
    int rank, world_size;
    long long restart;
    int64_t timeout_ms;
    char host[128], job[128]; /* job: as given (the dump's "job") */
    char dir[4096], path[4200], tmp[4200];
    int dumping;    /* a dump is being written */
    int final_done; /* the last dump (an exit's) is written: no other follows */
} fr;

static _Thread_local sr_flight_plane host_plane = SR_FLIGHT_HOST;

static bool dump_async(const char *reason, const char *detail);

#define LD(x) __atomic_load_n(&(x), __ATOMIC_RELAXED)
#define ST(x, v) __atomic_store_n(&(x), (v), __ATOMIC_RELAXED)

/* A name kept only in [A-Za-z0-9._-] (a job id in a directory name). */
static void safe_name(char *dst, size_t n, const char *src) {
    size_t i = 0;
    for (; src && src[i] && i + 1 < n; i++) {
        char c = src[i];
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '-' ||
                  c == '_';
        dst[i] = ok ? c : '_';
    }
    dst[i] = '\0';
}

void sr_flight_run_dir(char *out, size_t n, const char *kind, const char *dir, const char *ckpt_dir, const char *job_id,
                       long long restart, char *job_out, size_t job_n) {
    bool has_job = job_id && *job_id && strcmp(job_id, "-") != 0;
    char job[128];
    if (has_job)
        safe_name(job, sizeof job, job_id);
    else
        snprintf(job, sizeof job, "%ld", (long)getpid());
    snprintf(job_out, job_n, "%s", has_job ? job_id : job);
    if (dir && *dir)
        snprintf(out, n, "%s", dir);
    else if (ckpt_dir && *ckpt_dir)
        snprintf(out, n, "%s/%s/%s.%lld", ckpt_dir, kind, job, restart);
    else
        snprintf(out, n, "./shardrun-%s.%s", kind, job);
}

bool sr_flight_init(const sr_flight_opts *o) {
    if (o->entries <= 0)
        return true;
    if (!fr.ring) {
        /* plain calloc: outside the accounting and SHARDRUN_TEST_ALLOC_FAIL's
         * count, since a recorder without memory is off (the run warns),
         * not a failed run */
        fr.ring = calloc((size_t)o->entries, sizeof *fr.ring);
        if (!fr.ring)
            return false;
        fr.cap = (uint64_t)o->entries;
    }
    fr.rank = o->rank;
    fr.world_size = o->world_size;
    fr.restart = o->restart;
    fr.timeout_ms = (int64_t)(o->comm_timeout_s * 1000.0);
    safe_name(fr.host, sizeof fr.host, o->host);
    sr_flight_run_dir(fr.dir, sizeof fr.dir, "flight", o->dir, o->ckpt_dir, o->job_id, o->restart, fr.job,
                      sizeof fr.job);
    snprintf(fr.path, sizeof fr.path, "%s/rank%d.json", fr.dir, fr.rank);
    snprintf(fr.tmp, sizeof fr.tmp, "%s/.rank%d.json.tmp", fr.dir, fr.rank);
    sr_signals_set_dumper(dump_async); /* SIGINT, SIGTERM, SIGQUIT dump */
    return true;
}

void sr_flight_shutdown(void) {
    sr_signals_set_dumper(NULL);
    entry *r = fr.ring;
    __atomic_store_n(&fr.cap, 0, __ATOMIC_SEQ_CST);
    fr.ring = NULL;
    free(r);
}

const char *sr_flight_dir(void) { return fr.ring ? fr.dir : ""; }
bool sr_flight_on(void) { return fr.ring != NULL; }
uint64_t sr_flight_recorded(void) { return __atomic_load_n(&fr.next, __ATOMIC_RELAXED) - fr.base; }
int64_t sr_flight_steps(void) { return __atomic_load_n(&fr.steps, __ATOMIC_RELAXED); }

sr_flight_plane sr_flight_set_host_plane(sr_flight_plane p) {
    sr_flight_plane old = host_plane;
    host_plane = p;
    return old;
}
sr_flight_plane sr_flight_host_plane(void) { return host_plane; }

/* The slot of id, when it still holds it. */
static entry *slot_of(uint64_t id) {
    uint64_t cap = __atomic_load_n(&fr.cap, __ATOMIC_RELAXED);
    if (!id || !cap)
        return NULL;
    entry *e = &fr.ring[(id - 1) % cap];
    return __atomic_load_n(&e->id, __ATOMIC_ACQUIRE) == id ? e : NULL;
}

uint64_t sr_flight_enter(sr_flight_plane plane, int64_t seq, const char *op, const char *group, int group_size,
                         uint64_t bytes) {
    uint64_t cap = __atomic_load_n(&fr.cap, __ATOMIC_RELAXED);
    if (!cap)
        return 0;
    uint64_t id = __atomic_add_fetch(&fr.next, 1, __ATOMIC_RELAXED);
    entry *e = &fr.ring[(id - 1) % cap];
    __atomic_store_n(&e->id, 0, __ATOMIC_RELEASE);
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    uint64_t g[2] = {0, 0};
    if (group)
        for (size_t i = 0; i < 15 && group[i]; i++)
            ((char *)g)[i] = group[i];
    ST(e->seq, seq);
    ST(e->step, LD(fr.step));
    ST(e->bytes, bytes);
    ST(e->t_enq, sr_clock_wall_ns());
    ST(e->t_start, 0);
    ST(e->t_end, 0);
    ST(e->op, op);
    ST(e->group[0], g[0]);
    ST(e->group[1], g[1]);
    ST(e->group_size, (int32_t)group_size);
    ST(e->plane, (uint8_t)plane);
    ST(e->state, (uint8_t)SR_FLIGHT_QUEUED);
    __atomic_store_n(&e->id, id, __ATOMIC_RELEASE);
    return id;
}

void sr_flight_start(uint64_t id) {
    entry *e = slot_of(id);
    if (!e)
        return;
    ST(e->t_start, sr_clock_wall_ns());
    uint8_t p = LD(e->plane);
    ST(e->state, (uint8_t)(p == SR_FLIGHT_NCCL || p == SR_FLIGHT_COPY ? SR_FLIGHT_ISSUED : SR_FLIGHT_RUNNING));
}

void sr_flight_end(uint64_t id, bool ok) {
    entry *e = slot_of(id);
    if (!e)
        return;
    int64_t t = sr_clock_wall_ns();
    ST(e->t_end, t);
    ST(e->state, (uint8_t)(ok ? SR_FLIGHT_DONE : SR_FLIGHT_FAILED));
    uint8_t plane = LD(e->plane);
    if (plane != SR_FLIGHT_STEP && sr_trace_on()) { /* log.trace_steps' window: the collective's span */
        uint64_t g[2] = {LD(e->group[0]), LD(e->group[1])};
        sr_trace_collective(plane, LD(e->op), (const char *)g, LD(e->group_size), LD(e->seq), (int64_t)LD(e->bytes),
                            LD(e->t_enq), LD(e->t_start), t, ok);
    }
}

void sr_flight_step_begin(int64_t step) {
    sr_trace_step_begin(step); /* log.trace_steps' window follows the step marks */
    ST(fr.step, step);
    if (!__atomic_load_n(&fr.cap, __ATOMIC_RELAXED))
        return;
    if (__atomic_add_fetch(&fr.steps, 1, __ATOMIC_RELAXED) == 1)
        fr.base = __atomic_load_n(&fr.next, __ATOMIC_RELAXED);
    uint64_t id = sr_flight_enter(SR_FLIGHT_STEP, step, "step", "", 1, 0);
    sr_flight_start(id);
    fr.step_id = id;
}

void sr_flight_step_end(void) {
    sr_flight_end(fr.step_id, true);
    fr.step_id = 0;
}

/* ------------------------------------------------------------------------ */
/* the dump: async-signal-safe writers into a static buffer */

typedef struct {
    int fd;
    bool ok;
    size_t n;
    char buf[16384];
} out;

static out dump_out; /* used by one dump at a time (fr.dumping) */

static void flush_out(out *o) {
    size_t off = 0;
    while (o->ok && off < o->n) {
        ssize_t w = write(o->fd, o->buf + off, o->n - off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            o->ok = false;
        else
            off += (size_t)w;
    }
    o->n = 0;
}

static void put_raw(out *o, const char *s, size_t n) {
    for (size_t i = 0; i < n; i++) {
        if (o->n == sizeof o->buf)
            flush_out(o);
        o->buf[o->n++] = s[i];
    }
}

static void put(out *o, const char *s) { put_raw(o, s, strlen(s)); }

static void put_int(out *o, int64_t v) {
    char t[24];
    int i = (int)sizeof t;
    uint64_t u = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    do {
        t[--i] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (v < 0)
        t[--i] = '-';
    put_raw(o, t + i, sizeof t - (size_t)i);
}

/* A JSON string: quotes, backslashes and control bytes escaped; bytes of
 * 0x80 and above as they are (a message's UTF-8). */
static void put_str(out *o, const char *s) {
    static const char hex[] = "0123456789abcdef";
    put(o, "\"");
    for (; s && *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') {
            char e[2] = {'\\', (char)c};
            put_raw(o, e, 2);
        } else if (c < 0x20) {
            char e[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]};
            put_raw(o, e, 6);
        } else {
            put_raw(o, (const char *)&c, 1);
        }
    }
    put(o, "\"");
}

/* SEP "KEY": VALUE (SEP: what separates it from the previous member). */
static void kv_int(out *o, const char *sep, const char *k, int64_t v) {
    put(o, sep);
    put_str(o, k);
    put(o, ": ");
    put_int(o, v);
}

static void kv_str(out *o, const char *sep, const char *k, const char *v) {
    put(o, sep);
    put_str(o, k);
    put(o, ": ");
    put_str(o, v ? v : "");
}

/* mkdir -p of fr.dir (async-signal-safe: mkdir only). */
static bool make_dir(void) {
    char p[sizeof fr.dir];
    size_t n = strlen(fr.dir);
    memcpy(p, fr.dir, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (p[i] != '/' && p[i] != '\0')
            continue;
        char c = p[i];
        p[i] = '\0';
        if (mkdir(p, 0777) != 0 && errno != EEXIST)
            return false;
        p[i] = c;
    }
    return true;
}

/* One line on stderr by write(2). */
static void say(const char *a, const char *b, const char *c, const char *d, const char *e) {
    out *o = &dump_out;
    o->fd = 2;
    o->ok = true;
    o->n = 0;
    put(o, fr.world_size > 1 ? "shardrun[rank " : "shardrun: ");
    if (fr.world_size > 1) {
        put_int(o, fr.rank);
        put(o, "]: ");
    }
    put(o, a);
    put(o, b);
    put(o, c);
    put(o, d);
    put(o, e);
    put(o, "\n");
    flush_out(o);
}

static void put_entry(out *o, const entry *e, bool first) {
    static const char *const planes[] = SR_FLIGHT_PLANE_NAMES;
    static const char *const states[] = SR_FLIGHT_STATE_NAMES;
    char g[16];
    memcpy(g, e->group, 16);
    g[15] = '\0';
    put(o, first ? "\n  {" : ",\n  {");
    kv_int(o, "", "id", (int64_t)e->id);
    kv_int(o, ", ", "seq", e->seq);
    kv_int(o, ", ", "step", e->step);
    kv_str(o, ", ", "plane", e->plane < 5 ? planes[e->plane] : "?");
    kv_str(o, ", ", "op", e->op ? e->op : "?");
    kv_str(o, ", ", "group", g);
    kv_int(o, ", ", "group_size", e->group_size);
    kv_int(o, ", ", "bytes", (int64_t)e->bytes);
    kv_int(o, ", ", "enqueue_ns", e->t_enq);
    kv_int(o, ", ", "start_ns", e->t_start);
    kv_int(o, ", ", "end_ns", e->t_end);
    kv_str(o, ", ", "state", e->state < 5 ? states[e->state] : "?");
    put(o, "}");
}

/* The dump; `final`: the process exits after it (an error, a preemption),
 * so a later call writes nothing; `wait`: when another thread is dumping,
 * wait for it (up to 5 s, nanosleep) instead of returning at once.  Every
 * exit path dumps before it prints its last message, so with waiting no
 * dump's line can follow another thread's final message. */
static bool dump(const char *reason, const char *detail, bool final, bool wait) {
    uint64_t cap = __atomic_load_n(&fr.cap, __ATOMIC_ACQUIRE);
    if (!cap || !fr.ring || !__atomic_load_n(&fr.next, __ATOMIC_RELAXED))
        return false; /* off, or nothing recorded yet */
    for (int i = 0; __atomic_exchange_n(&fr.dumping, 1, __ATOMIC_ACQ_REL); i++) {
        if (!wait || i == 500)
            return false; /* another thread is dumping */
        struct timespec ts = {0, 10000000};
        nanosleep(&ts, NULL);
    }
    if (__atomic_load_n(&fr.final_done, __ATOMIC_ACQUIRE)) {
        __atomic_store_n(&fr.dumping, 0, __ATOMIC_RELEASE);
        return false; /* the exit's dump is written */
    }
    if (final)
        __atomic_store_n(&fr.final_done, 1, __ATOMIC_RELEASE);
    int saved_errno = errno;
    bool ok = make_dir();
    out *o = &dump_out;
    /* a name the recorder chooses: a stale temporary (a kill -9) is removed
     * by name, and the new one created, never opened through a link or
     * another process's file (0664 before the umask: fsio.h's mode) */
    if (ok)
        unlink(fr.tmp);
    *o = (out){.fd = ok ? open(fr.tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0664) : -1, .ok = true};
    ok = o->fd >= 0;
    if (ok) {
        uint64_t last = __atomic_load_n(&fr.next, __ATOMIC_ACQUIRE);
        kv_str(o, "{", "format", SR_FLIGHT_FORMAT);
        kv_str(o, ",\n ", "job", fr.job);
        kv_int(o, ", ", "restart", fr.restart);
        kv_int(o, ", ", "rank", fr.rank);
        kv_int(o, ", ", "world_size", fr.world_size);
        kv_str(o, ",\n ", "host", fr.host);
        kv_int(o, ", ", "pid", (int64_t)getpid());
        kv_int(o, ", ", "time_ns", sr_clock_wall_ns());
        kv_str(o, ",\n ", "reason", reason);
        kv_str(o, ", ", "detail", detail);
        kv_int(o, ",\n ", "step", LD(fr.step));
        kv_int(o, ", ", "capacity", (int64_t)cap);
        kv_int(o, ", ", "recorded", (int64_t)last);
        kv_int(o, ", ", "comm_timeout_ms", fr.timeout_ms);
        put(o, ",\n \"entries\": [");
        bool first = true;
        for (uint64_t id = last > cap ? last - cap + 1 : 1; id <= last; id++) {
            entry *s = &fr.ring[(id - 1) % cap];
            if (__atomic_load_n(&s->id, __ATOMIC_ACQUIRE) != id)
                continue;
            entry e = {.id = id,
                       .seq = LD(s->seq),
                       .step = LD(s->step),
                       .bytes = LD(s->bytes),
                       .t_enq = LD(s->t_enq),
                       .t_start = LD(s->t_start),
                       .t_end = LD(s->t_end),
                       .op = LD(s->op),
                       .group = {LD(s->group[0]), LD(s->group[1])},
                       .group_size = LD(s->group_size),
                       .plane = LD(s->plane),
                       .state = LD(s->state)};
            __atomic_thread_fence(__ATOMIC_ACQUIRE);
            if (__atomic_load_n(&s->id, __ATOMIC_RELAXED) != id)
                continue; /* rewritten while read */
            put_entry(o, &e, first);
            first = false;
        }
        put(o, "\n ]\n}\n");
        flush_out(o);
        /* a signal's dump (not `wait`) is written under a launcher's grace
         * before SIGKILL (mpirun's: 1 s): it survives the process without
         * fsync, and the rename keeps it whole; the others are made durable */
        ok = o->ok && (!wait || fsync(o->fd) == 0);
        ok = close(o->fd) == 0 && ok;
        ok = ok && rename(fr.tmp, fr.path) == 0;
        if (!ok)
            unlink(fr.tmp);
    }
    if (ok)
        say("flight recorder: wrote ", fr.path, " (", reason ? reason : "", ")");
    else
        say("flight recorder: could not write ", fr.path, " (check log.flight_dir: ", reason ? reason : "", ")");
    errno = saved_errno;
    __atomic_store_n(&fr.dumping, 0, __ATOMIC_RELEASE);
    return ok;
}

bool sr_flight_dump(const char *reason, const char *detail) { return dump(reason, detail, true, true); }

/* signals.h's dump (registered at init): not final, never waits. */
static bool dump_async(const char *reason, const char *detail) { return dump(reason, detail, false, false); }
