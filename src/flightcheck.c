/* flightcheck.c — the cross-rank analyser of flight-recorder dumps; see
 * flightcheck.h.  Dumps are read with libjansson and checked key by key
 * against the format flight.c writes. */
#include "srconfig.h"

#include "flightcheck.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "flight.h"
#include "fsio.h"
#include "line.h"
#include "mem.h"

typedef struct {
    int64_t seq, step, bytes, enq, start, end;
    int gsize;
    char op[24], group[24];
    int plane, state; /* sr_flight_plane, sr_flight_state */
} fentry;

typedef struct {
    int rank;
    char file[300];
    char host[128], reason[64], detail[600], job[128];
    int64_t restart, world_size, time_ns, step, timeout_ms;
    fentry *e;
    size_t n;
} fdump;

static const char *const plane_names[] = SR_FLIGHT_PLANE_NAMES;
static const char *const state_names[] = SR_FLIGHT_STATE_NAMES;

/* ------------------------------------------------------------------------ */
/* reading */

static sr_status bad_key(const char *path, const char *key, const char *want) {
    return sr_error(SR_ERR_DATA,
                    "%s: not a flight-recorder dump: \"%s\" is missing or not %s (hint: shardrun debug flight reads "
                    "the rank<N>.json files a run writes to log.flight_dir)",
                    path, key, want);
}

static bool get_int(const json_t *o, const char *k, int64_t *v) {
    json_t *x = json_object_get(o, k);
    if (!json_is_integer(x))
        return false;
    *v = (int64_t)json_integer_value(x);
    return true;
}

/* A string of the dump, escaped (sr_escape): it reaches the verdict on a
 * terminal, and a dump is a file anyone may have written. */
static bool get_str(const json_t *o, const char *k, char *buf, size_t n) {
    json_t *x = json_object_get(o, k);
    if (!json_is_string(x))
        return false;
    sr_escape(json_string_value(x), buf, n);
    return true;
}

static int name_index(const char *s, const char *const *names, int n) {
    for (int i = 0; i < n; i++)
        if (strcmp(s, names[i]) == 0)
            return i;
    return -1;
}

static sr_status read_dump(int fd, const char *path, const char *file, int rank, fdump *d) {
    json_error_t je;
    json_t *o = json_loadfd(fd, 0, &je);
    if (!o)
        return sr_error(SR_ERR_DATA,
                        "%s:%d:%d: not a flight-recorder dump: %s (a dump cut short? a rank killed while writing "
                        "leaves only its temporary file, so this is another file, or a damaged one)",
                        path, je.line, je.column, je.text);
    sr_status st = SR_OK;
    char fmt[64];
    snprintf(d->file, sizeof d->file, "%s", file);
    if (!json_is_object(o) || !get_str(o, "format", fmt, sizeof fmt) || strcmp(fmt, SR_FLIGHT_FORMAT) != 0)
        st = bad_key(path, "format", "\"" SR_FLIGHT_FORMAT "\"");
    int64_t r = -1;
    if (st == SR_OK && !get_str(o, "job", d->job, sizeof d->job))
        st = bad_key(path, "job", "a string");
    if (st == SR_OK && !get_int(o, "restart", &d->restart))
        st = bad_key(path, "restart", "an integer");
    if (st == SR_OK && (!get_int(o, "world_size", &d->world_size) || d->world_size < 1 || d->world_size > 1 << 24))
        st = bad_key(path, "world_size", "an integer from 1 to 16777216");
    if (st == SR_OK && (!get_int(o, "rank", &r) || r < 0 || r >= d->world_size))
        st = bad_key(path, "rank", "an integer below world_size");
    if (st == SR_OK && r != rank)
        st = sr_error(SR_ERR_DATA, "%s: the dump says it is rank %lld's, not rank %d's (a renamed file?)", path,
                      (long long)r, rank);
    if (st == SR_OK && !get_str(o, "host", d->host, sizeof d->host))
        st = bad_key(path, "host", "a string");
    if (st == SR_OK && !get_str(o, "reason", d->reason, sizeof d->reason))
        st = bad_key(path, "reason", "a string");
    if (st == SR_OK && !get_str(o, "detail", d->detail, sizeof d->detail))
        st = bad_key(path, "detail", "a string");
    if (st == SR_OK && !get_int(o, "time_ns", &d->time_ns))
        st = bad_key(path, "time_ns", "an integer");
    if (st == SR_OK && !get_int(o, "step", &d->step))
        st = bad_key(path, "step", "an integer");
    if (st == SR_OK && !get_int(o, "comm_timeout_ms", &d->timeout_ms))
        st = bad_key(path, "comm_timeout_ms", "an integer");
    json_t *es = json_object_get(o, "entries");
    if (st == SR_OK && !json_is_array(es))
        st = bad_key(path, "entries", "an array");
    d->rank = rank;
    size_t n = st == SR_OK ? json_array_size(es) : 0;
    if (n) {
        d->e = sr_calloc(n, sizeof *d->e);
        if (!d->e)
            st = sr_error_oom("a flight dump's entries");
    }
    for (size_t i = 0; i < n && st == SR_OK; i++) {
        json_t *x = json_array_get(es, i);
        fentry *f = &d->e[i];
        char plane[16], state[16];
        int64_t gs = 0;
        bool ok = json_is_object(x) && get_int(x, "seq", &f->seq) && get_int(x, "step", &f->step) &&
                  get_int(x, "bytes", &f->bytes) && get_int(x, "enqueue_ns", &f->enq) &&
                  get_int(x, "start_ns", &f->start) && get_int(x, "end_ns", &f->end) && get_int(x, "group_size", &gs) &&
                  get_str(x, "op", f->op, sizeof f->op) && get_str(x, "group", f->group, sizeof f->group) &&
                  get_str(x, "plane", plane, sizeof plane) && get_str(x, "state", state, sizeof state);
        f->gsize = (int)gs;
        f->plane = ok ? name_index(plane, plane_names, 5) : -1;
        f->state = ok ? name_index(state, state_names, 5) : -1;
        if (!ok || f->plane < 0 || f->state < 0)
            st = sr_error(SR_ERR_DATA,
                          "%s: not a flight-recorder dump: entry %zu lacks one of seq, step, bytes, enqueue_ns, "
                          "start_ns, end_ns, group_size, op, group, plane (host, nccl, copy, staging, step), state "
                          "(queued, running, done, failed, issued), or has the wrong type",
                          path, i);
    }
    d->n = n;
    json_decref(o);
    return st;
}

/* "rank<N>.json" with N a decimal without leading zeros: N, else -1. */
static long rank_file_index(const char *name) {
    if (strncmp(name, "rank", 4) != 0)
        return -1;
    const char *p = name + 4;
    if (*p < '0' || *p > '9' || (*p == '0' && p[1] != '.'))
        return -1;
    char *end;
    long r = strtol(p, &end, 10);
    return strcmp(end, ".json") == 0 && r >= 0 && r < (1L << 24) ? r : -1;
}

static sr_status read_one_dump(int fd, const char *path, const char *name, long rank, void *elem) {
    return read_dump(fd, path, name, (int)rank, elem);
}

sr_status sr_rank_files_read(const char *dir, const char *hint, size_t elem_size, sr_rank_file_reader read,
                             void **items, int *n, int *others) {
    *items = NULL;
    *n = *others = 0;
    DIR *dh = opendir(dir);
    if (!dh)
        return sr_error(SR_ERR_NOINPUT, "%s: %s (hint: %s)", dir, strerror(errno), hint);
    int cap = 0;
    sr_status st = SR_OK;
    struct dirent *de;
    while (st == SR_OK && (de = readdir(dh))) {
        long r = rank_file_index(de->d_name);
        if (r < 0) {
            *others += de->d_name[0] != '.';
            continue;
        }
        if (*n == cap) {
            cap = cap ? 2 * cap : 16;
            void *grown = sr_realloc(*items, elem_size * (size_t)cap);
            if (!grown) {
                st = sr_error_oom("the per-rank files");
                break;
            }
            *items = grown;
        }
        char path[4400];
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        char *elem = (char *)*items + elem_size * (size_t)*n;
        memset(elem, 0, elem_size);
        (*n)++;
        struct stat sb;
        int fd = sr_fsio_open_own(path, &sb);
        if (fd < 0 && errno == EINVAL)
            st = sr_error(SR_ERR_DATA, "%s: %s, not a regular file: a rank's file is one (hint: %s)", path,
                          sr_fsio_kind(sb.st_mode), hint);
        else if (fd < 0)
            st = sr_error(SR_ERR_NOINPUT, "%s: %s", path, strerror(errno));
        if (st == SR_OK)
            st = sr_fsio_guard_input(path);
        if (st == SR_OK)
            st = read(fd, path, de->d_name, r, elem);
        if (fd >= 0)
            close(fd);
    }
    closedir(dh);
    return st;
}

/* ------------------------------------------------------------------------ */
/* the verdict */

/* "rank 3" or "ranks 0-2,5" of the set ranks[0..n) (ascending). */
static void rank_list(char *buf, size_t size, const int *ranks, int n) {
    sr_line l = sr_line_on(buf, size);
    sr_line_add(&l, "%s", n == 1 ? "rank " : "ranks ");
    for (int i = 0; i < n && !l.cut; i++) {
        int j = i;
        while (j + 1 < n && ranks[j + 1] == ranks[j] + 1)
            j++;
        if (j > i)
            sr_line_add(&l, "%s%d-%d", i ? "," : "", ranks[i], ranks[j]);
        else
            sr_line_add(&l, "%s%d", i ? "," : "", ranks[i]);
        i = j;
    }
}

static bool channel_of(const fentry *e, int ch) {
    if (e->seq < 0)
        return false; /* a group of one rank: nothing to match */
    return ch == 0 ? e->plane == SR_FLIGHT_HOST || e->plane == SR_FLIGHT_STAGING : e->plane == SR_FLIGHT_NCCL;
}

static const fentry *find(const fdump *d, int ch, int64_t seq) {
    for (size_t i = d->n; i-- > 0;)
        if (channel_of(&d->e[i], ch) && d->e[i].seq == seq)
            return &d->e[i];
    return NULL;
}

static void describe(char *buf, size_t n, int ch, const fentry *e) {
    snprintf(buf, n, "%s collective %" PRId64 " (%s of %" PRId64 " bytes on group %s of %d, step %" PRId64 ")",
             ch == 0 ? "host" : "NCCL", e->seq, e->op, e->bytes, e->group, e->gsize, e->step);
}

static bool same_sig(const fentry *a, const fentry *b) {
    return strcmp(a->op, b->op) == 0 && a->bytes == b->bytes && strcmp(a->group, b->group) == 0 && a->gsize == b->gsize;
}

typedef struct {
    fdump *d; /* [world] (rank r's at d[r]; n == 0 and rank -1 when missing) */
    bool *have;
    int world;
    int64_t slack_ns;
    FILE *out;
    int *tmp; /* [world] */
} ctx;

static void host_of(const ctx *c, const int *ranks, int n, char *buf, size_t size) {
    snprintf(buf, size, "%s", n ? c->d[ranks[0]].host : "?");
    for (int i = 1; i < n; i++)
        if (strcmp(c->d[ranks[i]].host, c->d[ranks[0]].host) != 0) {
            snprintf(buf, size, "hosts %s, ...", c->d[ranks[0]].host);
            return;
        }
}

/* Collective k of channel ch as the ranks saw it: the first rank's entry
 * (its signature), when the first rank enqueued and started it, and when
 * the first rank gave up on it after waiting (INT64_MAX: none). */
typedef struct {
    int ch;
    int64_t k;
    const fentry *ref;
    char what[256];
    int64_t first_enq, first_start, first_fail;
} probe;

static const fentry *entry_of(const ctx *c, int r, const probe *p) {
    return c->have[r] ? find(&c->d[r], p->ch, p->k) : NULL;
}

/* The newest seq of channel ch every rank completed (-1: none) into
 * *common, the newest any rank entered into *hi; false when no rank has
 * an entry on the channel. */
static bool channel_extent(const ctx *c, int ch, int64_t *common, int64_t *hi) {
    bool any = false;
    *common = INT64_MAX;
    *hi = -1;
    for (int r = 0; r < c->world; r++) {
        if (!c->have[r])
            continue;
        int64_t last = -1;
        for (size_t i = 0; i < c->d[r].n; i++) {
            const fentry *e = &c->d[r].e[i];
            if (!channel_of(e, ch))
                continue;
            any = true;
            if (e->state == SR_FLIGHT_DONE && e->seq > last)
                last = e->seq;
            if (e->seq > *hi)
                *hi = e->seq;
        }
        if (last < *common)
            *common = last;
    }
    return any;
}

static void print_last_common(const ctx *c, int ch, int64_t common) {
    const fentry *le = NULL;
    for (int r = 0; r < c->world && !le && common >= 0; r++)
        if (c->have[r])
            le = find(&c->d[r], ch, common);
    if (le) {
        char what[256];
        describe(what, sizeof what, ch, le);
        fprintf(c->out, "last collective every rank completed: %s\n", what);
    } else {
        fprintf(c->out, "last collective every rank completed: none on the %s plane (in the rings' window)\n",
                ch == 0 ? "host" : "NCCL");
    }
}

/* Fills p for collective k; false when no rank entered it. */
static bool probe_collective(const ctx *c, probe *p) {
    p->ref = NULL;
    p->first_enq = p->first_start = p->first_fail = INT64_MAX;
    for (int r = 0; r < c->world; r++) {
        const fentry *e = entry_of(c, r, p);
        if (!e)
            continue;
        if (!p->ref)
            p->ref = e;
        if (e->enq < p->first_enq)
            p->first_enq = e->enq;
        if (e->start && e->start < p->first_start)
            p->first_start = e->start;
        /* a rank that gave up after waiting (a deadline), not at once (a
         * lost connection): whoever came after that is late */
        if (e->state == SR_FLIGHT_FAILED && e->end && e->start && e->end - e->start >= c->slack_ns &&
            e->end < p->first_fail)
            p->first_fail = e->end;
    }
    if (p->ref)
        describe(p->what, sizeof p->what, p->ch, p->ref);
    return p->ref != NULL;
}

/* 1. a mismatch: ranks that entered k with another operation, size or group */
static bool culprit_mismatch(ctx *c, const probe *p) {
    int na = 0, nb = 0, *ra = c->tmp, rb[64];
    const fentry *other = NULL;
    for (int r = 0; r < c->world; r++) {
        const fentry *e = entry_of(c, r, p);
        if (!e)
            continue;
        if (same_sig(e, p->ref))
            ra[na++] = r;
        else if (!other || same_sig(e, other)) {
            other = e;
            if (nb < 64)
                rb[nb++] = r;
        }
    }
    if (!other)
        return false;
    /* the smaller side is the odd one */
    bool swap = nb > na;
    const fentry *odd = swap ? p->ref : other, *maj = swap ? other : p->ref;
    char ro[512], rm[512], ho[160];
    rank_list(swap ? ro : rm, 512, ra, na);
    rank_list(swap ? rm : ro, 512, rb, nb);
    host_of(c, swap ? ra : rb, swap ? na : nb, ho, sizeof ho);
    fprintf(c->out,
            "culprit: a mismatch at %s collective %" PRId64 ": %s (host %s) issued %s of %" PRId64
            " bytes on group %s of %d; %s issued %s of %" PRId64 " bytes on group %s of %d\n",
            p->ch == 0 ? "host" : "NCCL", p->k, ro, ho, odd->op, odd->bytes, odd->group, odd->gsize, rm, maj->op,
            maj->bytes, maj->group, maj->gsize);
    return true;
}

/* 2. ranks that never entered k (or entered it after a peer gave up) */
static bool culprit_absent(ctx *c, const probe *p) {
    int nl = 0, ne = 0, *late = c->tmp, entered[1024];
    bool gave_up = p->first_fail != INT64_MAX;
    for (int r = 0; r < c->world; r++) {
        if (!c->have[r])
            continue;
        const fentry *e = entry_of(c, r, p);
        if (!e) {
            if (c->d[r].time_ns - p->first_enq >= c->slack_ns || gave_up)
                late[nl++] = r;
        } else if (e->enq - p->first_enq >= c->slack_ns || (gave_up && e->enq > p->first_fail)) {
            late[nl++] = r;
        } else if (ne < 1024) {
            entered[ne++] = r;
        }
    }
    if (!nl)
        return false;
    char a[512], b[512], hosts[160];
    rank_list(a, sizeof a, late, nl);
    rank_list(b, sizeof b, entered, ne);
    host_of(c, late, nl, hosts, sizeof hosts);
    const fdump *d0 = &c->d[late[0]];
    fprintf(c->out, "culprit: %s (host %s) %s %s, which %s entered; %s last step mark: step %" PRId64 "\n", a, hosts,
            find(d0, p->ch, p->k) ? "entered only late, after its peers had given up," : "never entered", p->what,
            ne ? b : "the others", nl == 1 ? "its" : "the first one's", d0->step);
    return true;
}

/* 3. ranks that entered k but never started it, or started it late */
static bool culprit_unstarted(ctx *c, const probe *p) {
    int nl = 0, ns = 0, *late = c->tmp, started[1024];
    for (int r = 0; r < c->world; r++) {
        const fentry *e = entry_of(c, r, p);
        if (!e)
            continue; /* not entered yet when it dumped (a live dump, step 2) */
        bool never = !e->start && c->d[r].time_ns - e->enq >= c->slack_ns && p->first_start != INT64_MAX;
        bool slow = e->start && (e->start - p->first_start >= c->slack_ns ||
                                 (p->first_fail != INT64_MAX && e->start > p->first_fail));
        if (never || slow)
            late[nl++] = r;
        else if (ns < 1024)
            started[ns++] = r;
    }
    if (!nl)
        return false;
    char a[512], b[512], hosts[160];
    rank_list(a, sizeof a, late, nl);
    rank_list(b, sizeof b, started, ns);
    host_of(c, late, nl, hosts, sizeof hosts);
    const fentry *e = entry_of(c, late[0], p);
    if (e->start)
        fprintf(c->out,
                "culprit: %s (host %s) started %s %.1f s after %s (its plane was late: a slow or stalled "
                "progress thread or link)\n",
                a, hosts, p->what, (double)(e->start - p->first_start) / 1e9, b);
    else
        fprintf(c->out,
                "culprit: %s (host %s) entered %s but never started it (its plane stalled on that rank); %s "
                "started it\n",
                a, hosts, p->what, b);
    return true;
}

/* 4. every rank started it: in flight, or failed without one rank standing out */
static bool culprit_failed(ctx *c, const probe *p) {
    int nf = 0;
    for (int r = 0; r < c->world; r++) {
        const fentry *e = entry_of(c, r, p);
        if (e && e->state == SR_FLIGHT_FAILED)
            c->tmp[nf++] = r;
    }
    if (!nf)
        return false;
    char a[512];
    rank_list(a, sizeof a, c->tmp, nf);
    fprintf(c->out, "failed: %s on %s; every rank whose dump is here had started it (no rank stands out)\n", p->what,
            a);
    return true;
}

/* The first collective of channel ch that not every rank completed.
 * Returns true when a culprit (or a failure) was named; *any says whether
 * any rank has an entry on the channel. */
static bool check_channel(ctx *c, int ch, bool *any) {
    int64_t common, hi;
    *any = channel_extent(c, ch, &common, &hi);
    if (!*any)
        return false;
    print_last_common(c, ch, common);
    probe p = {.ch = ch, .k = common + 1};
    if (p.k > hi || !probe_collective(c, &p))
        return false;
    return culprit_mismatch(c, &p) || culprit_absent(c, &p) || culprit_unstarted(c, &p) || culprit_failed(c, &p);
}

/* Ranks whose last step mark lags the furthest one. */
static bool check_steps(ctx *c) {
    int64_t best = -1, best_t = 0;
    int64_t *last = sr_calloc((size_t)c->world, sizeof *last), *when = sr_calloc((size_t)c->world, sizeof *when);
    if (!last || !when) {
        free(last);
        free(when);
        return false;
    }
    for (int r = 0; r < c->world; r++) {
        last[r] = -1;
        for (size_t i = 0; c->have[r] && i < c->d[r].n; i++)
            if (c->d[r].e[i].plane == SR_FLIGHT_STEP && c->d[r].e[i].seq >= last[r]) {
                last[r] = c->d[r].e[i].seq;
                when[r] = c->d[r].e[i].enq;
            }
        if (c->have[r] && last[r] > best) {
            best = last[r];
            best_t = when[r];
        }
    }
    int nl = 0, *lag = c->tmp;
    for (int r = 0; r < c->world; r++)
        if (c->have[r] && last[r] < best && best_t - when[r] >= c->slack_ns)
            lag[nl++] = r;
    char a[512], hosts[160];
    if (best < 0)
        fprintf(c->out, "step marks: none in the rings\n");
    else if (!nl)
        fprintf(c->out, "step marks: the last is step %" PRId64 " on every rank\n", best);
    else {
        rank_list(a, sizeof a, lag, nl);
        host_of(c, lag, nl, hosts, sizeof hosts);
        fprintf(c->out,
                "lagging: %s (host %s) last began step %" PRId64 ", %.1f s before another rank began step %" PRId64
                "\n",
                a, hosts, last[lag[0]], (double)(best_t - when[lag[0]]) / 1e9, best);
    }
    free(last);
    free(when);
    return nl > 0;
}

/* SR_ERR_DATA unless the n dumps are of one run (job, restart, world). */
static sr_status one_run(const char *dir, const fdump *ds, int n) {
    for (int i = 1; i < n; i++)
        if (strcmp(ds[i].job, ds[0].job) != 0 || ds[i].restart != ds[0].restart || ds[i].world_size != ds[0].world_size)
            return sr_error(SR_ERR_DATA,
                            "%s/%s is of job %s.%lld (%lld ranks) but %s of job %s.%lld (%lld ranks): dumps of two "
                            "different runs (hint: each run dumps to its own <job id>.<restart> directory; analyse "
                            "one run's)",
                            dir, ds[i].file, ds[i].job, (long long)ds[i].restart, (long long)ds[i].world_size,
                            ds[0].file, ds[0].job, (long long)ds[0].restart, (long long)ds[0].world_size);
    return SR_OK;
}

sr_status sr_flight_check(const char *dir, FILE *out, bool *culprit) {
    *culprit = false;
    /* the dumps present, and the world size they agree on */
    int n = 0, others = 0;
    fdump *ds = NULL;
    sr_status st = sr_rank_files_read(dir,
                                      "the flight dumps are in log.flight_dir, by default "
                                      "<checkpoint.dir>/flight/<job id>.<restart>/",
                                      sizeof *ds, read_one_dump, (void **)&ds, &n, &others);
    if (st != SR_OK && !ds)
        return st;
    if (st == SR_OK && n == 0)
        st = sr_error(SR_ERR_NOINPUT,
                      "%s holds no flight-recorder dumps (rank<N>.json)%s (hint: a run writes them to log.flight_dir "
                      "when it ends with 69 or 70, on preemption and on SIGQUIT)",
                      dir, others ? ", only other files" : "");
    if (st == SR_OK)
        st = one_run(dir, ds, n);
    ctx c = {.out = out};
    if (st == SR_OK) {
        c.world = (int)ds[0].world_size;
        c.d = sr_calloc((size_t)c.world, sizeof *c.d);
        c.have = sr_calloc((size_t)c.world, sizeof *c.have);
        c.tmp = sr_calloc((size_t)c.world, sizeof *c.tmp);
        if (!c.d || !c.have || !c.tmp)
            st = sr_error_oom("the flight analysis");
    }
    if (st == SR_OK) {
        int64_t tmo = ds[0].timeout_ms;
        c.slack_ns = (tmo / 2 < 1000 ? tmo / 2 : 1000) * 1000000LL;
        for (int i = 0; i < n; i++) {
            c.d[ds[i].rank] = ds[i];
            c.have[ds[i].rank] = true;
        }
        /* what the dumps say about themselves */
        int *missing = c.tmp, nm = 0;
        for (int r = 0; r < c.world; r++)
            if (!c.have[r])
                missing[nm++] = r;
        fprintf(out, "flight dumps: %d of %d rank%s, job %s.%lld\n", n, c.world, c.world == 1 ? "" : "s", ds[0].job,
                (long long)ds[0].restart);
        for (int r = 0, shown = 0; r < c.world && shown < 8; r++)
            if (c.have[r] && c.d[r].detail[0] && strcmp(c.d[r].reason, "sigquit") != 0) {
                fprintf(out, "  rank %d (host %s): %s: %.300s\n", r, c.d[r].host, c.d[r].reason, c.d[r].detail);
                shown++;
            }
        char mlist[512] = "";
        if (nm)
            rank_list(mlist, sizeof mlist, missing, nm);
        bool any_host, any_nccl;
        bool named = check_channel(&c, 0, &any_host);
        if (!named)
            named = check_channel(&c, 1, &any_nccl);
        bool lag = check_steps(&c);
        *culprit = named || lag;
        if (nm) {
            fprintf(out,
                    "missing: %s wrote no dump: %s died without one (killed, or out of memory?): the likely "
                    "culprit; its peers' view is above\n",
                    mlist, nm == 1 ? "it" : "they");
            st = sr_error(SR_ERR_NOINPUT, "%s: no dump of %s (of %d): %s died without writing one", dir, mlist, c.world,
                          nm == 1 ? "it" : "they");
        } else if (!*culprit) {
            fprintf(out, "consistent: no rank is behind or at odds with the others\n");
        }
    }
    for (int i = 0; i < n; i++)
        free(ds[i].e);
    free(ds);
    free(c.d);
    free(c.have);
    free(c.tmp);
    return st;
}
