/* runtime.c — the emulated CUDA runtime: devices, memory, streams that run
 * asynchronously on worker threads, events, and the per-thread last error,
 * as NVIDIA's runtime API documentation describes them; see cudaemu.h and
 * tests/cudaemu/README.
 *
 * One mutex guards every table; one condition variable is broadcast
 * whenever a stream finishes an operation, and every wait (a stream on an
 * event, the host on a stream, an event or the device) waits on it for its
 * own predicate.  Each stream has a thread that runs its operations in
 * order; streams are ordered against each other only by events
 * (cudaStreamWaitEvent) and by the legacy default stream, which waits for
 * every blocking stream of its device and is waited for by them.
 *
 * It also owns the runtime's misuse detectors (tests/cudaemu/README):
 * device memory at tagged addresses the host faults on (the SIGSEGV
 * handler names the allocation), guard bytes past every allocation,
 * freed allocations remembered for use-after-free and double-free
 * reports, copies checked against their allocations, waits on events
 * never recorded; and the test knobs CUDAEMU_DELAY_SEED and
 * CUDAEMU_MUTATE (cudaemu.h). */
#include "srconfig.h"

#include "cudaemu.h"

#include <dlfcn.h>
#include <errno.h>
#include <execinfo.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

#ifdef __SANITIZE_ADDRESS__
#include <sanitizer/asan_interface.h>
#endif

#define MAX_DEVICES 16

typedef struct op {
    void (*fn)(void *);
    void *arg;
    void (*free_arg)(void *);
    struct op *next;
} op;

struct CUstream_st {
    int id; /* the order of creation (reports name streams by it) */
    int device, priority;
    unsigned seed; /* CUDAEMU_DELAY_SEED: this stream's delay sequence */
    unsigned flags;
    pthread_t thread;
    op *head, *tail;
    uint64_t enqueued, done; /* operations */
    int stop;
    struct CUstream_st *next; /* every stream */
};

struct CUevent_st {
    int id;
    int warned; /* a wait before any record was reported */
    int device;
    unsigned flags;
    uint64_t recorded, completed; /* record count; the newest completed record */
    double t_ns;                  /* when the newest completed record ran */
};

typedef enum { MEM_DEVICE, MEM_PINNED, MEM_REGISTERED } mem_kind;
/* An allocation: `p` is the address the program holds (tagged, for
 * device memory), `real` where its bytes are, `n` the size asked for and
 * `span` what it covers (n rounded up to 256 bytes). */
typedef struct {
    char *p, *real;
    size_t n, span;
    size_t end; /* device memory: bytes allocated, guard included */
    mem_kind kind;
    int device;
    void *site; /* the allocating call's caller */
} region;

/* Device memory is host memory the program sees through a tagged address:
 * bit 62 set makes it non-canonical on x86-64, so host code that
 * dereferences it faults (the SIGSEGV handler names the allocation), while
 * every runtime call, the kernels' arguments and cuBLASLt translate it
 * (cudaemu_device_view).  Why not a second mapping: a mapping is per
 * process, and kernels run on host threads beside the host code. */
#define TAG ((uintptr_t)1 << 62)
#define TAGGED(p) (((uintptr_t)(p) & (TAG | ((uintptr_t)1 << 63))) == TAG)
#define FREED_KEPT 4096 /* freed device allocations remembered, for use-after-free reports */
/* Every device allocation ends in at least GUARD bytes past its size: under
 * AddressSanitizer they are poisoned (a read or write there is its report),
 * elsewhere filled with GUARD_BYTE and checked after every kernel that had
 * the allocation as an argument, and at cudaFree (a write there is ours). */
#define GUARD 256
#define GUARD_BYTE 0xa5

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t progress = PTHREAD_COND_INITIALIZER;
static pthread_once_t once = PTHREAD_ONCE_INIT;
static int ndev = 8, notready_records = 1; /* (ndev: a node of 8 GPUs, as HGX nodes have) */
/* the physical device (of CUDAEMU_DEVICES) behind each visible ordinal
 * (CUDA_VISIBLE_DEVICES): its bus id */
static int phys[MAX_DEVICES];
static size_t mem_bytes = (size_t)1024 << 20, used[MAX_DEVICES];
static char dev_name[256] = "NVIDIA H100 80GB HBM3";
static struct CUstream_st *streams, *legacy[MAX_DEVICES];
static region *regions;
static size_t nregions, cap_regions;
static region freed[FREED_KEPT]; /* a ring of freed device allocations */
static size_t nfreed;
static int nstreams_made, nevents_made;
static unsigned delay_seed; /* CUDAEMU_DELAY_SEED (0: off) */
static int lazy_loading;    /* CUDAEMU_LAZY_LOADING (0: off) */
static long delay_max_us = 200;
static struct {
    char kind[32], kernel[96];
    int arg;
} mutation; /* CUDAEMU_MUTATE */

static __thread cudaError_t last_error = cudaSuccess;
static __thread cudaemu_guard guards[16]; /* the kernel arguments of the launch being prepared */
static __thread int nguards;
static __thread int current = 0;

/* ------------------------------------------------------------------------ */
/* reports */

static void init(void);

void cudaemu_describe_site(const void *pc, char *buf, size_t n) {
    Dl_info di;
    if (pc && dladdr(pc, &di) && di.dli_fname) {
        const char *bin = strrchr(di.dli_fname, '/');
        bin = bin ? bin + 1 : di.dli_fname;
        if (di.dli_sname)
            snprintf(buf, n, "%s+0x%lx in %s", di.dli_sname,
                     (unsigned long)((const char *)pc - (const char *)di.dli_saddr), bin);
        else
            snprintf(buf, n, "%s+0x%lx", bin, (unsigned long)((const char *)pc - (const char *)di.dli_fbase));
    } else
        snprintf(buf, n, "%p", pc);
}

/* A misuse report: "cudaemu: error: <what> (at <site>)", the host stack,
 * then the process aborts (on a GPU each of these is undefined behaviour
 * or a fault far from its cause). */
static _Noreturn void misuse(const void *site, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static _Noreturn void misuse(const void *site, const char *fmt, ...) {
    char where[256], msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    cudaemu_describe_site(site, where, sizeof where);
    fprintf(stderr, "cudaemu: error: %s (called from %s; the emulator stops here)\n", msg, where);
    void *frames[24];
    int nf = backtrace(frames, 24);
    backtrace_symbols_fd(frames, nf, 2);
    abort();
}

const char *cudaemu_mutation(const char *kernel, int *arg) {
    init();
    if (arg)
        *arg = mutation.arg;
    size_t kl = strlen(mutation.kernel);
    if (!mutation.kind[0] ||
        (kernel && kl && !(strncmp(kernel, mutation.kernel, kl) == 0 && (kernel[kl] == 0 || kernel[kl] == '<'))))
        return "";
    return mutation.kind;
}

cudaError_t cudaemu_report(const char *fmt, ...) {
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "cudaemu: error: %s (the emulator stops here)\n", msg);
    abort();
}

/* The region holding address p (device regions by their tagged address),
 * or NULL (caller holds mu, or is the fault handler). */
static region *holding(const void *p) {
    const char *c = p;
    for (size_t i = 0; i < nregions; i++)
        if (c >= regions[i].p && c < regions[i].p + (regions[i].span ? regions[i].span : 1))
            return &regions[i];
    return NULL;
}

/* The freed device allocation that held p, newest first, or NULL. */
static region *freed_holding(const void *p) {
    const char *c = p;
    size_t n = nfreed < FREED_KEPT ? nfreed : FREED_KEPT;
    for (size_t k = 0; k < n; k++) {
        region *r = &freed[(nfreed - 1 - k) % FREED_KEPT];
        if (c >= r->p && c < r->p + (r->span ? r->span : 1))
            return r;
    }
    return NULL;
}

/* Host code dereferenced a tagged (device) address: the fault of a
 * non-canonical address carries no address, so the registers are searched
 * for a device address to name; anything else goes to the previous
 * handler. */
static struct sigaction old_segv;
static void on_segv(int sig, siginfo_t *si, void *uc_) {
    ucontext_t *uc = uc_;
    for (int i = 0; i < NGREG; i++) {
        uintptr_t v = (uintptr_t)uc->uc_mcontext.gregs[i];
        if (!TAGGED(v))
            continue;
        region *r = holding((void *)v);
        region *f = r ? NULL : freed_holding((void *)v);
        if (!r && !f)
            continue;
        char where[256];
        cudaemu_describe_site((void *)uc->uc_mcontext.gregs[REG_RIP], where, sizeof where);
        fprintf(stderr,
                "cudaemu: error: host code touched device memory at %s: the faulting access used device address %p "
                "(%zu bytes into a%s device allocation of %zu bytes); host code reaches device memory only by "
                "cudaMemcpy (on a GPU this faults or reads garbage)\n",
                where, (void *)v, (size_t)(v - (uintptr_t)(r ? r->p : f->p)), r ? "" : " freed", r ? r->n : f->n);
        void *frames[24];
        int nf = backtrace(frames, 24);
        backtrace_symbols_fd(frames, nf, 2);
        signal(SIGABRT, SIG_DFL);
        abort();
    }
    if (old_segv.sa_flags & SA_SIGINFO) {
        if (old_segv.sa_sigaction) {
            old_segv.sa_sigaction(sig, si, uc_);
            return;
        }
    } else if (old_segv.sa_handler != SIG_DFL && old_segv.sa_handler != SIG_IGN) {
        old_segv.sa_handler(sig);
        return;
    }
    signal(sig, SIG_DFL); /* the fault repeats with the default action */
}

static void install_segv(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_segv;
    sa.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, &old_segv);
}

static void configure(void) {
    const char *v;
    if ((v = getenv("CUDAEMU_DEVICES")) && atoi(v) >= 0)
        ndev = atoi(v) > MAX_DEVICES ? MAX_DEVICES : atoi(v);
    for (int d = 0; d < MAX_DEVICES; d++)
        phys[d] = d;
    if ((v = getenv("CUDA_VISIBLE_DEVICES"))) {
        /* as the driver reads it: ordinals of the machine's devices, the
         * list ending at the first entry that is not one (or repeats one);
         * "" or Slurm's NoDevFiles: none.  (GPU-... UUIDs are not modelled.) */
        int n = 0;
        for (const char *q = v; *q && n < ndev;) {
            char *end;
            long d = strtol(q, &end, 10);
            int dup = 0;
            for (int i = 0; i < n; i++)
                dup |= phys[i] == d;
            if (end == q || d < 0 || d >= ndev || dup || (*end && *end != ','))
                break;
            phys[n++] = (int)d;
            q = *end ? end + 1 : end;
        }
        ndev = n;
    }
    if ((v = getenv("CUDAEMU_MEM_MB")) && atol(v) > 0)
        mem_bytes = (size_t)atol(v) << 20;
    if ((v = getenv("CUDAEMU_NAME")) && *v)
        snprintf(dev_name, sizeof dev_name, "%s", v);
    if ((v = getenv("CUDAEMU_NOTREADY_ERROR")) && *v)
        notready_records = atoi(v) != 0;
    if ((v = getenv("CUDAEMU_DELAY_SEED")) && *v)
        delay_seed = (unsigned)strtoul(v, NULL, 10);
    if ((v = getenv("CUDAEMU_DELAY_MAX_US")) && atol(v) > 0)
        delay_max_us = atol(v);
    if ((v = getenv("CUDAEMU_LAZY_LOADING")) && *v)
        lazy_loading = atoi(v) != 0;
    if ((v = getenv("CUDAEMU_MUTATE")) && *v) {
        /* KIND[:KERNEL[:ARG]] */
        char buf[160];
        snprintf(buf, sizeof buf, "%s", v);
        char *k = strchr(buf, ':'), *a = k ? strchr(k + 1, ':') : NULL;
        if (k)
            *k++ = 0;
        if (a)
            *a++ = 0;
        snprintf(mutation.kind, sizeof mutation.kind, "%.31s", buf);
        snprintf(mutation.kernel, sizeof mutation.kernel, "%.95s", k ? k : "");
        mutation.arg = a ? atoi(a) : 0;
        fprintf(stderr, "cudaemu: warning: CUDAEMU_MUTATE=%s: the emulator applies this mutation (a test)\n", v);
    }
    install_segv();
}

static void init(void) { pthread_once(&once, configure); }

/* CUDAEMU_OPS (cudaemu.h) */
static long op_counts[CUDAEMU_NOPS];
static void write_op_counts(void) {
    const char *path = getenv("CUDAEMU_OPS");
    FILE *f = path && *path ? fopen(path, "a") : NULL;
    if (!f)
        return;
    fprintf(f, "pid %ld: kernels=%ld matmuls=%ld memsets=%ld copies=%ld\n", (long)getpid(),
            __atomic_load_n(&op_counts[CUDAEMU_OP_KERNEL], __ATOMIC_RELAXED),
            __atomic_load_n(&op_counts[CUDAEMU_OP_MATMUL], __ATOMIC_RELAXED),
            __atomic_load_n(&op_counts[CUDAEMU_OP_MEMSET], __ATOMIC_RELAXED),
            __atomic_load_n(&op_counts[CUDAEMU_OP_COPY], __ATOMIC_RELAXED));
    fclose(f);
}
static pthread_once_t ops_once = PTHREAD_ONCE_INIT;
static void ops_register(void) {
    const char *path = getenv("CUDAEMU_OPS");
    if (path && *path)
        atexit(write_op_counts);
}
void cudaemu_count(int k) {
    pthread_once(&ops_once, ops_register);
    if (k >= 0 && k < CUDAEMU_NOPS)
        __atomic_add_fetch(&op_counts[k], 1, __ATOMIC_RELAXED);
}

/* Records e as the thread's last error (cudaErrorNotReady only when that
 * switch is on) and returns it. */
static cudaError_t fail(cudaError_t e) {
    if (e != cudaSuccess && (e != cudaErrorNotReady || notready_records))
        last_error = e;
    return e;
}

cudaError_t cudaemu_fail(cudaError_t e) {
    init();
    return fail(e);
}

int cudaemu_set_notready_error(int on) {
    init();
    int old = notready_records;
    notready_records = on != 0;
    return old;
}

static double now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

/* ------------------------------------------------------------------------ */
/* memory regions */

/* The live region holding all of [p, p + n) (n 0: p), or NULL (caller
 * holds mu). */
static region *find(const void *p, size_t n) {
    region *r = holding(p);
    return r && (size_t)(r->p + r->span - (const char *)p) >= n ? r : NULL;
}

static int add_region(char *p, char *real, size_t n, size_t span, mem_kind kind, int device, void *site) {
    size_t end = kind == MEM_DEVICE ? span + GUARD : span;
    if (nregions == cap_regions) {
        size_t c = cap_regions ? 2 * cap_regions : 64;
        region *r = realloc(regions, c * sizeof *r);
        if (!r)
            return -1;
        regions = r;
        cap_regions = c;
    }
    regions[nregions++] = (region){p, real, n, span, end, kind, device, site};
    return 0;
}

static void drop_region(region *r) {
    if (r->kind == MEM_DEVICE)
        freed[nfreed++ % FREED_KEPT] = *r;
    *r = regions[--nregions];
}

/* Where [p, p + bytes) of a device pointer lies, checked: the reports of
 * use after free, of an address no allocation gave, and of a range past
 * an allocation's end (caller holds mu; `what` names the call); *held
 * (may be NULL) receives the allocation. */
static char *checked_real(const void *p, size_t bytes, const char *what, const void *site, region **held) {
    region *r = holding(p);
    if (!r) {
        region *f = freed_holding(p);
        pthread_mutex_unlock(&mu);
        if (f)
            misuse(site,
                   "%s: %p is %zu bytes into a device allocation of %zu bytes that was freed (use after cudaFree)",
                   what, p, (size_t)((const char *)p - f->p), f->n);
        misuse(site, "%s: %p is a device address no live allocation holds", what, p);
    }
    size_t off = (size_t)((const char *)p - r->p);
    if (r->kind == MEM_DEVICE && off + bytes > r->n) {
        size_t n = r->n;
        pthread_mutex_unlock(&mu);
        misuse(site, "%s: %zu bytes at offset %zu of a device allocation of %zu bytes run %zu bytes past its end", what,
               bytes, off, n, off + bytes - n);
    }
    if (held)
        *held = r;
    return r->real + off;
}

void *cudaemu_device_view(const void *p, size_t bytes, const char *what) {
    if (!p || !TAGGED(p))
        return (void *)p;
    init();
    pthread_mutex_lock(&mu);
    char *real = checked_real(p, bytes, what, __builtin_return_address(0), NULL);
    pthread_mutex_unlock(&mu);
    return real;
}

void *cudaemu_kernel_arg(const char *kernel, int index, const void *p) {
    if (!p)
        return NULL;
    init();
    char what[160];
    snprintf(what, sizeof what, "kernel %s, argument %d", kernel, index);
    pthread_mutex_lock(&mu);
    if (TAGGED(p)) {
        region *r;
        char *real = checked_real(p, 0, what, __builtin_return_address(0), &r);
        if (nguards < (int)(sizeof guards / sizeof guards[0]))
            guards[nguards++] = (cudaemu_guard){r->real, r->n, r->end, index};
        pthread_mutex_unlock(&mu);
        return real;
    }
    region *r = holding(p);
    pthread_mutex_unlock(&mu);
    if (!r)
        cudaemu_report("%s: %p is pageable host memory; a kernel reaches only device memory and pinned or registered "
                       "host memory (on a GPU this faults)",
                       what, p);
    return (void *)p;
}

int cudaemu_take_guards(cudaemu_guard *out, int max) {
    int n = nguards < max ? nguards : max;
    memcpy(out, guards, (size_t)n * sizeof *out);
    nguards = 0;
    return n;
}

void cudaemu_check_guards(const char *what, const cudaemu_guard *g, int n) {
#ifndef __SANITIZE_ADDRESS__
    for (int i = 0; i < n; i++)
        for (size_t b = g[i].n; b < g[i].end; b++)
            if ((unsigned char)g[i].real[b] != GUARD_BYTE) {
                char arg[48] = "";
                if (g[i].arg >= 0)
                    snprintf(arg, sizeof arg, ", argument %d", g[i].arg);
                cudaemu_report("%s%s: byte %zu past the end of a device allocation of %zu bytes was written (its guard "
                               "bytes changed; on a GPU this corrupts a neighbour or faults)",
                               what, arg, b - g[i].n, g[i].n);
            }
#else
    (void)what, (void)g, (void)n; /* AddressSanitizer poisons the guard: it reports the access itself */
#endif
}

int cudaemu_is_device(const void *p, size_t bytes) {
    init();
    pthread_mutex_lock(&mu);
    region *r = find(p, bytes ? bytes : 1);
    int yes = r && r->kind == MEM_DEVICE && r->device == current;
    pthread_mutex_unlock(&mu);
    return yes;
}

/* ------------------------------------------------------------------------ */
/* streams */

static void *worker(void *arg) {
    struct CUstream_st *s = arg;
    pthread_mutex_lock(&mu);
    for (;;) {
        while (!s->head && !s->stop)
            pthread_cond_wait(&progress, &mu);
        if (!s->head)
            break;
        op *o = s->head;
        pthread_mutex_unlock(&mu);
        if (delay_seed) /* CUDAEMU_DELAY_SEED: a seeded random delay before each operation */
            usleep((useconds_t)(rand_r(&s->seed) % (unsigned)(delay_max_us + 1)));
        o->fn(o->arg);
        if (o->free_arg)
            o->free_arg(o->arg);
        pthread_mutex_lock(&mu);
        s->head = o->next;
        if (!s->head)
            s->tail = NULL;
        s->done++;
        free(o);
        pthread_cond_broadcast(&progress);
    }
    pthread_mutex_unlock(&mu);
    return NULL;
}

static struct CUstream_st *new_stream(int device, unsigned flags, int priority) {
    struct CUstream_st *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->device = device;
    s->flags = flags;
    s->priority = priority;
    pthread_mutex_lock(&mu);
    s->id = nstreams_made++;
    s->seed = delay_seed * 2654435761u + (unsigned)s->id;
    pthread_mutex_unlock(&mu);
    if (pthread_create(&s->thread, NULL, worker, s) != 0) {
        free(s);
        return NULL;
    }
    pthread_mutex_lock(&mu);
    s->next = streams;
    streams = s;
    pthread_mutex_unlock(&mu);
    return s;
}

/* Appends o to s (caller holds mu). */
static void push(struct CUstream_st *s, op *o) {
    o->next = NULL;
    if (s->tail)
        s->tail->next = o;
    else
        s->head = o;
    s->tail = o;
    s->enqueued++;
    pthread_cond_broadcast(&progress);
}

/* An operation that waits until stream `s` has done `n` operations. */
typedef struct {
    struct CUstream_st *s;
    uint64_t n;
} stream_wait;

static void wait_stream_op(void *arg) {
    stream_wait *w = arg;
    pthread_mutex_lock(&mu);
    while (w->s->done < w->n)
        pthread_cond_wait(&progress, &mu);
    pthread_mutex_unlock(&mu);
}

static int push_fn(struct CUstream_st *s, void (*fn)(void *), void *arg, void (*free_arg)(void *)) {
    op *o = malloc(sizeof *o);
    if (!o)
        return -1;
    *o = (op){fn, arg, free_arg, NULL};
    push(s, o);
    return 0;
}

/* The stream work on `stream` goes to (the legacy stream of the current
 * device for 0), with the legacy stream's ordering: work on it waits for
 * every blocking stream of the device, work on a blocking stream waits for
 * the legacy stream's earlier work (caller holds mu). */
static struct CUstream_st *target(cudaStream_t stream, int *bad) {
    *bad = 0;
    if (stream == cudaStreamLegacy || stream == cudaStreamPerThread)
        stream = 0;
    struct CUstream_st *s = stream;
    if (!s) {
        if (current >= ndev) {
            *bad = 1;
            return NULL;
        }
        s = legacy[current];
        for (struct CUstream_st *o = streams; o; o = o->next)
            if (o != s && o->device == current && !(o->flags & cudaStreamNonBlocking) && o->done < o->enqueued) {
                stream_wait *w = malloc(sizeof *w);
                if (!w || push_fn(s, wait_stream_op, w, free)) {
                    free(w);
                    *bad = 2;
                    return NULL;
                }
                *w = (stream_wait){o, o->enqueued};
            }
        return s;
    }
    struct CUstream_st *l = legacy[s->device];
    if (!(s->flags & cudaStreamNonBlocking) && l && l->done < l->enqueued) {
        stream_wait *w = malloc(sizeof *w);
        if (!w || push_fn(s, wait_stream_op, w, free)) {
            free(w);
            *bad = 2;
            return NULL;
        }
        *w = (stream_wait){l, l->enqueued};
    }
    return s;
}

/* Creates the legacy streams once the configuration is read. */
static pthread_once_t legacy_once = PTHREAD_ONCE_INIT;
static void make_legacy(void) {
    for (int d = 0; d < ndev; d++)
        legacy[d] = new_stream(d, 0, 0);
}
static void ready(void) {
    init();
    pthread_once(&legacy_once, make_legacy);
}

/* Waits until s has done everything enqueued so far (caller holds mu). */
static void drain(struct CUstream_st *s) {
    uint64_t n = s->enqueued;
    while (s->done < n)
        pthread_cond_wait(&progress, &mu);
}

/* Puts fn(arg) on `stream` (target's ordering; caller holds mu); with
 * `sync` the host then waits for it.  On failure nothing was enqueued (the
 * caller still owns arg) and the error is recorded and returned. */
static cudaError_t submit(cudaStream_t stream, void (*fn)(void *), void *arg, void (*free_arg)(void *), int sync) {
    int bad;
    struct CUstream_st *s = target(stream, &bad);
    if (!s || push_fn(s, fn, arg, free_arg))
        return fail(bad == 1 ? cudaErrorInvalidDevice : cudaErrorMemoryAllocation);
    if (sync)
        drain(s);
    return cudaSuccess;
}

cudaError_t cudaemu_enqueue(cudaStream_t stream, void (*fn)(void *), void *arg, void (*free_arg)(void *)) {
    ready();
    pthread_mutex_lock(&mu);
    cudaError_t e = submit(stream, fn, arg, free_arg, 0);
    pthread_mutex_unlock(&mu);
    return e;
}

static void drain_device(int device) {
    for (struct CUstream_st *s = streams; s; s = s->next)
        if (s->device == device)
            drain(s);
}

/* The kernels launched so far (CUDAEMU_LAZY_LOADING), under mu. */
static char **loaded;
static size_t nloaded, loaded_cap;

void cudaemu_lazy_load(const char *kernel) {
    ready();
    if (!lazy_loading)
        return;
    pthread_mutex_lock(&mu);
    int seen = 0;
    for (size_t i = 0; i < nloaded && !seen; i++)
        seen = strcmp(loaded[i], kernel) == 0;
    if (!seen) {
        if (nloaded == loaded_cap) {
            loaded_cap = loaded_cap ? 2 * loaded_cap : 64;
            char **more = realloc(loaded, loaded_cap * sizeof *more);
            if (!more)
                cudaemu_report("out of memory (the lazily loaded kernels)");
            loaded = more;
        }
        loaded[nloaded++] = strdup(kernel);
        /* loading the module waits for the device: every stream drains
         * first (a kernel hung earlier keeps this thread here) */
        drain_device(current);
    }
    pthread_mutex_unlock(&mu);
}

/* ------------------------------------------------------------------------ */
/* errors and versions */

static const struct {
    cudaError_t e;
    const char *name, *text;
} errors[] = {
    {cudaSuccess, "cudaSuccess", "no error"},
    {cudaErrorInvalidValue, "cudaErrorInvalidValue", "invalid argument"},
    {cudaErrorMemoryAllocation, "cudaErrorMemoryAllocation", "out of memory"},
    {cudaErrorInitializationError, "cudaErrorInitializationError", "initialization error"},
    {cudaErrorInvalidDevicePointer, "cudaErrorInvalidDevicePointer", "invalid device pointer"},
    {cudaErrorNoDevice, "cudaErrorNoDevice", "no CUDA-capable device is detected"},
    {cudaErrorInvalidDevice, "cudaErrorInvalidDevice", "invalid device ordinal"},
    {cudaErrorInvalidResourceHandle, "cudaErrorInvalidResourceHandle", "invalid resource handle"},
    {cudaErrorNotReady, "cudaErrorNotReady", "device not ready"},
    {cudaErrorHostMemoryAlreadyRegistered, "cudaErrorHostMemoryAlreadyRegistered",
     "part or all of the requested memory range is already mapped"},
    {cudaErrorHostMemoryNotRegistered, "cudaErrorHostMemoryNotRegistered",
     "pointer does not correspond to a registered memory region"},
    {cudaErrorIllegalAddress, "cudaErrorIllegalAddress", "an illegal memory access was encountered"},
    {cudaErrorLaunchFailure, "cudaErrorLaunchFailure", "unspecified launch failure"},
    {cudaErrorInvalidConfiguration, "cudaErrorInvalidConfiguration", "invalid configuration argument"},
};

const char *cudaGetErrorName(cudaError_t e) {
    for (size_t i = 0; i < sizeof errors / sizeof errors[0]; i++)
        if (errors[i].e == e)
            return errors[i].name;
    return "cudaErrorUnknown";
}

const char *cudaGetErrorString(cudaError_t e) {
    for (size_t i = 0; i < sizeof errors / sizeof errors[0]; i++)
        if (errors[i].e == e)
            return errors[i].text;
    return "unknown error";
}

cudaError_t cudaGetLastError(void) {
    cudaError_t e = last_error;
    last_error = cudaSuccess;
    return e;
}

cudaError_t cudaPeekAtLastError(void) { return last_error; }

cudaError_t cudaRuntimeGetVersion(int *v) {
    if (!v)
        return fail(cudaErrorInvalidValue);
    *v = CUDART_VERSION;
    return cudaSuccess;
}

cudaError_t cudaDriverGetVersion(int *v) {
    if (!v)
        return fail(cudaErrorInvalidValue);
    *v = CUDART_VERSION;
    return cudaSuccess;
}

/* ------------------------------------------------------------------------ */
/* devices */

cudaError_t cudaGetDeviceCount(int *n) {
    ready();
    if (!n)
        return fail(cudaErrorInvalidValue);
    *n = ndev;
    return ndev ? cudaSuccess : fail(cudaErrorNoDevice);
}

cudaError_t cudaSetDevice(int d) {
    ready();
    if (d < 0 || d >= ndev)
        return fail(ndev ? cudaErrorInvalidDevice : cudaErrorNoDevice);
    current = d;
    return cudaSuccess;
}

cudaError_t cudaGetDevice(int *d) {
    ready();
    if (!d)
        return fail(cudaErrorInvalidValue);
    *d = current;
    return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *p, int d) {
    ready();
    if (!p)
        return fail(cudaErrorInvalidValue);
    if (d < 0 || d >= ndev)
        return fail(cudaErrorInvalidDevice);
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "%s", dev_name);
    p->totalGlobalMem = mem_bytes;
    p->sharedMemPerBlock = 48 << 10;
    p->sharedMemPerBlockOptin = 227 << 10; /* sm_90's */
    p->warpSize = 32;
    p->maxThreadsPerBlock = 1024;
    p->maxThreadsDim[0] = p->maxThreadsDim[1] = 1024;
    p->maxThreadsDim[2] = 64;
    p->maxGridSize[0] = 0x7fffffff;
    p->maxGridSize[1] = p->maxGridSize[2] = 65535;
    p->major = 9;
    p->minor = 0;
    p->multiProcessorCount = 132;
    p->pciDomainID = 0;
    p->pciBusID = 0x19 + phys[d];
    p->pciDeviceID = 0;
    p->unifiedAddressing = 1;
    return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int *value, enum cudaDeviceAttr attr, int d) {
    ready();
    if (!value)
        return fail(cudaErrorInvalidValue);
    if (d < 0 || d >= ndev)
        return fail(cudaErrorInvalidDevice);
    switch (attr) {
    case cudaDevAttrMaxSharedMemoryPerBlock:
        *value = 48 << 10;
        return cudaSuccess;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin:
        *value = 227 << 10;
        return cudaSuccess;
    case cudaDevAttrWarpSize:
        *value = 32;
        return cudaSuccess;
    case cudaDevAttrComputeCapabilityMajor:
        *value = 9;
        return cudaSuccess;
    case cudaDevAttrComputeCapabilityMinor:
        *value = 0;
        return cudaSuccess;
    case cudaDevAttrMultiProcessorCount:
        *value = 132;
        return cudaSuccess;
    default:
        return fail(cudaErrorInvalidValue); /* (an attribute kernels/ never asks) */
    }
}

/* cudaFuncAttributeMaxDynamicSharedMemorySize per kernel (a kernel's host
 * function address in the emulator), under mu. */
#define MAX_FUNC_ATTRS 256
static struct {
    const void *func;
    int max_dynamic_shared;
} func_attrs[MAX_FUNC_ATTRS];
static int nfunc_attrs;

cudaError_t cudaFuncSetAttribute(const void *func, enum cudaFuncAttribute attr, int value) {
    ready();
    if (!func)
        return fail(cudaErrorInvalidDeviceFunction);
    if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize)
        return cudaSuccess; /* (the others are hints) */
    if (value < 0 || value > (227 << 10))
        return fail(cudaErrorInvalidValue); /* above sharedMemPerBlockOptin */
    pthread_mutex_lock(&mu);
    int i = 0;
    while (i < nfunc_attrs && func_attrs[i].func != func)
        i++;
    if (i == nfunc_attrs && nfunc_attrs == MAX_FUNC_ATTRS) {
        pthread_mutex_unlock(&mu);
        return fail(cudaErrorMemoryAllocation);
    }
    func_attrs[i].func = func;
    func_attrs[i].max_dynamic_shared = value;
    nfunc_attrs += i == nfunc_attrs;
    pthread_mutex_unlock(&mu);
    return cudaSuccess;
}

size_t cudaemu_func_max_dynamic_shared(const void *func) {
    size_t v = 48 << 10; /* the default: 48 KiB */
    pthread_mutex_lock(&mu);
    for (int i = 0; i < nfunc_attrs; i++)
        if (func_attrs[i].func == func)
            v = (size_t)func_attrs[i].max_dynamic_shared;
    pthread_mutex_unlock(&mu);
    return v;
}

cudaError_t cudaDeviceGetPCIBusId(char *id, int len, int d) {
    ready();
    if (!id || len < 13)
        return fail(cudaErrorInvalidValue);
    if (d < 0 || d >= ndev)
        return fail(cudaErrorInvalidDevice);
    snprintf(id, (size_t)len, "00000000:%02X:00.0", 0x19 + phys[d]);
    return cudaSuccess;
}

cudaError_t cudaDeviceGetStreamPriorityRange(int *least, int *greatest) {
    if (least)
        *least = 0;
    if (greatest)
        *greatest = -5;
    return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void) {
    ready();
    pthread_mutex_lock(&mu);
    drain_device(current);
    pthread_mutex_unlock(&mu);
    return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total) {
    ready();
    if (!free_bytes || !total)
        return fail(cudaErrorInvalidValue);
    pthread_mutex_lock(&mu);
    *total = mem_bytes;
    *free_bytes = mem_bytes - used[current];
    pthread_mutex_unlock(&mu);
    return cudaSuccess;
}

/* ------------------------------------------------------------------------ */
/* memory */

cudaError_t cudaMalloc(void **p, size_t n) {
    ready();
    if (!p)
        return fail(cudaErrorInvalidValue);
    *p = NULL;
    if (current >= ndev)
        return fail(cudaErrorNoDevice);
    if (n == 0)
        return cudaSuccess;
    size_t rounded = (n + 255) / 256 * 256;
    pthread_mutex_lock(&mu);
    cudaError_t e = cudaSuccess;
    if (rounded > mem_bytes - used[current])
        e = cudaErrorMemoryAllocation;
    char *m = e == cudaSuccess ? aligned_alloc(256, rounded + GUARD) : NULL;
    char *tagged = (char *)((uintptr_t)m | TAG);
    if (e == cudaSuccess &&
        (!m || add_region(tagged, m, n, rounded, MEM_DEVICE, current, __builtin_return_address(0)))) {
        free(m);
        e = cudaErrorMemoryAllocation;
    }
    if (e == cudaSuccess) {
        used[current] += rounded;
        *p = tagged;
#ifdef __SANITIZE_ADDRESS__
        ASAN_POISON_MEMORY_REGION(m + n, rounded + GUARD - n); /* past the size: nobody's to touch */
#else
        memset(m + n, GUARD_BYTE, rounded + GUARD - n);
#endif
    }
    pthread_mutex_unlock(&mu);
    return e == cudaSuccess ? e : fail(e);
}

cudaError_t cudaFree(void *p) {
    ready();
    void *site = __builtin_return_address(0);
    pthread_mutex_lock(&mu);
    /* cudaFree synchronises the device */
    drain_device(current);
    if (!p) {
        pthread_mutex_unlock(&mu);
        return cudaSuccess;
    }
    region *r = holding(p);
    if (TAGGED(p) && (!r || r->p != p)) {
        region *f = r ? NULL : freed_holding(p);
        size_t fn = f ? f->n : 0, off = r ? (size_t)((char *)p - r->p) : 0;
        int was_freed = f && f->p == p;
        pthread_mutex_unlock(&mu);
        if (was_freed)
            misuse(site, "cudaFree(%p): a device allocation of %zu bytes freed twice", p, fn);
        if (r)
            misuse(site, "cudaFree(%p): %zu bytes into an allocation, not its start", p, off);
        misuse(site, "cudaFree(%p): a device address no allocation gave", p);
    }
    if (!r || r->p != p || r->kind != MEM_DEVICE) {
        pthread_mutex_unlock(&mu);
        return fail(cudaErrorInvalidDevicePointer);
    }
    cudaemu_guard g = {r->real, r->n, r->end, -1};
    char *real = r->real;
    size_t span = r->end;
    used[r->device] -= r->span;
    r->site = site;
    drop_region(r);
    pthread_mutex_unlock(&mu);
    cudaemu_check_guards("cudaFree", &g, 1);
#ifdef __SANITIZE_ADDRESS__
    ASAN_UNPOISON_MEMORY_REGION(real, span);
#else
    (void)span;
#endif
    free(real);
    return cudaSuccess;
}

cudaError_t cudaMallocHost(void **p, size_t n) {
    ready();
    if (!p)
        return fail(cudaErrorInvalidValue);
    size_t rounded = (n + 255) / 256 * 256;
    char *m = aligned_alloc(256, rounded ? rounded : 256);
    pthread_mutex_lock(&mu);
    int rc = m ? add_region(m, m, n, rounded ? rounded : 256, MEM_PINNED, current, __builtin_return_address(0)) : -1;
    pthread_mutex_unlock(&mu);
    if (rc) {
        free(m);
        *p = NULL;
        return fail(cudaErrorMemoryAllocation);
    }
    *p = m;
    return cudaSuccess;
}

cudaError_t cudaFreeHost(void *p) {
    ready();
    pthread_mutex_lock(&mu);
    drain_device(current);
    region *r = p ? find(p, 1) : NULL;
    if (p && (!r || r->p != p || r->kind != MEM_PINNED)) {
        pthread_mutex_unlock(&mu);
        return fail(cudaErrorInvalidValue);
    }
    if (r)
        drop_region(r);
    pthread_mutex_unlock(&mu);
    free(p);
    return cudaSuccess;
}

cudaError_t cudaHostRegister(void *p, size_t n, unsigned int flags) {
    (void)flags;
    ready();
    if (!p || !n)
        return fail(cudaErrorInvalidValue);
    pthread_mutex_lock(&mu);
    cudaError_t e = find(p, 1) || find((char *)p + n - 1, 1) ? cudaErrorHostMemoryAlreadyRegistered : cudaSuccess;
    if (e == cudaSuccess && add_region(p, p, n, n, MEM_REGISTERED, current, __builtin_return_address(0)))
        e = cudaErrorMemoryAllocation;
    pthread_mutex_unlock(&mu);
    return e == cudaSuccess ? e : fail(e);
}

cudaError_t cudaHostUnregister(void *p) {
    ready();
    pthread_mutex_lock(&mu);
    region *r = find(p, 1);
    cudaError_t e = r && r->p == p && r->kind == MEM_REGISTERED ? cudaSuccess : cudaErrorHostMemoryNotRegistered;
    if (e == cudaSuccess)
        drop_region(r);
    pthread_mutex_unlock(&mu);
    return e == cudaSuccess ? e : fail(e);
}

cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *a, const void *p) {
    ready();
    if (!a)
        return fail(cudaErrorInvalidValue);
    memset(a, 0, sizeof *a);
    pthread_mutex_lock(&mu);
    region *r = holding(p);
    a->type = !r ? cudaMemoryTypeUnregistered : r->kind == MEM_DEVICE ? cudaMemoryTypeDevice : cudaMemoryTypeHost;
    a->device = r ? r->device : -2;
    a->devicePointer = r ? (void *)p : NULL;
    a->hostPointer = r && r->kind != MEM_DEVICE ? (void *)p : NULL;
    pthread_mutex_unlock(&mu);
    return cudaSuccess;
}

typedef struct {
    void *dst;
    const void *src;
    size_t n;
    int value;
} copy_op;

static void do_copy(void *arg) {
    copy_op *c = arg;
    memcpy(c->dst, c->src, c->n);
}

static void do_set(void *arg) {
    copy_op *c = arg;
    memset(c->dst, c->value, c->n);
}

/* Enqueues a copy or set; with `sync` the host waits for it. */
static cudaError_t enqueue_mem(cudaStream_t stream, void (*fn)(void *), copy_op c, int sync) {
    copy_op *a = malloc(sizeof *a);
    if (!a)
        return fail(cudaErrorMemoryAllocation);
    *a = c;
    pthread_mutex_lock(&mu);
    cudaError_t e = submit(stream, fn, a, free, sync);
    pthread_mutex_unlock(&mu);
    if (e != cudaSuccess)
        free(a);
    return e;
}

/* One side of a copy or set: whether it is device memory, where its bytes
 * are (checked: cudaemu_device_view's reports) and whether host memory is
 * page-locked (caller holds mu). */
typedef struct {
    int dev, locked;
    char *real;
} side;
static side classify(const void *p, size_t n, const char *what, const void *site) {
    side x = {0, 0, (char *)p};
    if (TAGGED(p)) {
        x.real = checked_real(p, n, what, site, NULL);
        x.dev = 1;
        return x;
    }
    region *r = holding(p);
    if (r && (size_t)((const char *)p - r->p) + n > r->span) {
        size_t off = (size_t)((const char *)p - r->p), span = r->span;
        pthread_mutex_unlock(&mu);
        misuse(site, "%s: %zu bytes at offset %zu of %zu bytes of %s host memory run past its end", what, n, off, span,
               r->kind == MEM_PINNED ? "pinned" : "registered");
    }
    x.locked = r != NULL;
    return x;
}

static cudaError_t copy_async(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind, cudaStream_t stream,
                              const char *call, const void *site) {
    ready();
    if (n == 0)
        return cudaSuccess;
    if (!dst || !src)
        return fail(cudaErrorInvalidValue);
    char wd[96], ws[96];
    snprintf(wd, sizeof wd, "%s (destination)", call);
    snprintf(ws, sizeof ws, "%s (source)", call);
    pthread_mutex_lock(&mu);
    side d = classify(dst, n, wd, site), sr = classify(src, n, ws, site);
    int ok = kind == cudaMemcpyDefault || (kind == cudaMemcpyHostToDevice && d.dev && !sr.dev) ||
             (kind == cudaMemcpyDeviceToHost && sr.dev && !d.dev) ||
             (kind == cudaMemcpyDeviceToDevice && sr.dev && d.dev) ||
             (kind == cudaMemcpyHostToHost && !sr.dev && !d.dev);
    /* a copy to or from pageable host memory returns only when done */
    int pageable = (!d.dev && !d.locked) || (!sr.dev && !sr.locked);
    pthread_mutex_unlock(&mu);
    if (!ok)
        return fail(cudaErrorInvalidValue);
    return enqueue_mem(stream, do_copy, (copy_op){d.real, sr.real, n, 0}, pageable && (d.dev || sr.dev));
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind, cudaStream_t stream) {
    if (n)
        cudaemu_count(CUDAEMU_OP_COPY);
    return copy_async(dst, src, n, kind, stream, "cudaMemcpyAsync", __builtin_return_address(0));
}

static cudaError_t set(void *dst, int value, size_t n, cudaStream_t stream, int sync, const char *call,
                       const void *site) {
    ready();
    if (n == 0)
        return cudaSuccess;
    if (!TAGGED(dst))
        return fail(cudaErrorInvalidValue);
    pthread_mutex_lock(&mu);
    char *real = checked_real(dst, n, call, site, NULL);
    pthread_mutex_unlock(&mu);
    return enqueue_mem(stream, do_set, (copy_op){real, NULL, n, value}, sync);
}

cudaError_t cudaMemsetAsync(void *dst, int value, size_t n, cudaStream_t stream) {
    if (n)
        cudaemu_count(CUDAEMU_OP_MEMSET);
    return set(dst, value, n, stream, 0, "cudaMemsetAsync", __builtin_return_address(0));
}

cudaError_t cudaMemset(void *dst, int value, size_t n) {
    return set(dst, value, n, 0, 1, "cudaMemset", __builtin_return_address(0));
}

/* ------------------------------------------------------------------------ */
/* streams and events */

cudaError_t cudaStreamCreateWithPriority(cudaStream_t *s, unsigned int flags, int priority) {
    ready();
    if (!s)
        return fail(cudaErrorInvalidValue);
    if (current >= ndev)
        return fail(cudaErrorNoDevice);
    *s = new_stream(current, flags, priority < -5 ? -5 : priority > 0 ? 0 : priority);
    return *s ? cudaSuccess : fail(cudaErrorMemoryAllocation);
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned int flags) {
    return cudaStreamCreateWithPriority(s, flags, 0);
}

cudaError_t cudaStreamCreate(cudaStream_t *s) { return cudaStreamCreateWithPriority(s, 0, 0); }

cudaError_t cudaStreamDestroy(cudaStream_t s) {
    ready();
    if (!s)
        return fail(cudaErrorInvalidResourceHandle);
    pthread_mutex_lock(&mu);
    drain(s); /* its work completes first, as on a device */
    s->stop = 1;
    for (struct CUstream_st **p = &streams; *p; p = &(*p)->next)
        if (*p == s) {
            *p = s->next;
            break;
        }
    pthread_cond_broadcast(&progress);
    pthread_mutex_unlock(&mu);
    pthread_join(s->thread, NULL);
    free(s);
    return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
    ready();
    pthread_mutex_lock(&mu);
    struct CUstream_st *s = stream && stream != cudaStreamLegacy && stream != cudaStreamPerThread ? stream
                            : current < ndev                                                      ? legacy[current]
                                                                                                  : NULL;
    if (s)
        drain(s);
    pthread_mutex_unlock(&mu);
    return s ? cudaSuccess : fail(cudaErrorInvalidDevice);
}

cudaError_t cudaStreamQuery(cudaStream_t stream) {
    ready();
    pthread_mutex_lock(&mu);
    struct CUstream_st *s = stream ? stream : current < ndev ? legacy[current] : NULL;
    int idle = !s || s->done == s->enqueued;
    pthread_mutex_unlock(&mu);
    return idle ? cudaSuccess : fail(cudaErrorNotReady);
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned int flags) {
    ready();
    if (!e)
        return fail(cudaErrorInvalidValue);
    *e = calloc(1, sizeof **e);
    if (!*e)
        return fail(cudaErrorMemoryAllocation);
    (*e)->device = current;
    (*e)->flags = flags;
    pthread_mutex_lock(&mu);
    (*e)->id = nevents_made++;
    pthread_mutex_unlock(&mu);
    return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t *e) { return cudaEventCreateWithFlags(e, cudaEventDefault); }

/* Waits until every record of e so far has completed. */
static void wait_records(cudaEvent_t e) {
    pthread_mutex_lock(&mu);
    while (e->completed < e->recorded)
        pthread_cond_wait(&progress, &mu);
    pthread_mutex_unlock(&mu);
}

cudaError_t cudaEventDestroy(cudaEvent_t e) {
    if (!e)
        return fail(cudaErrorInvalidResourceHandle);
    wait_records(e); /* a record still pending completes first (its marker points here) */
    free(e);
    return cudaSuccess;
}

typedef struct {
    cudaEvent_t e;
    uint64_t n;
} event_mark;

static void mark_event(void *arg) {
    event_mark *m = arg;
    double t = now_ns();
    pthread_mutex_lock(&mu);
    if (m->n > m->e->completed) {
        m->e->completed = m->n;
        m->e->t_ns = t;
    }
    pthread_cond_broadcast(&progress);
    pthread_mutex_unlock(&mu);
}

cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t stream) {
    ready();
    if (!e)
        return fail(cudaErrorInvalidResourceHandle);
    event_mark *m = malloc(sizeof *m);
    if (!m)
        return fail(cudaErrorMemoryAllocation);
    pthread_mutex_lock(&mu);
    *m = (event_mark){e, e->recorded + 1};
    cudaError_t err = submit(stream, mark_event, m, free, 0);
    if (err == cudaSuccess)
        e->recorded++;
    pthread_mutex_unlock(&mu);
    if (err != cudaSuccess)
        free(m);
    return err;
}

cudaError_t cudaEventQuery(cudaEvent_t e) {
    if (!e)
        return fail(cudaErrorInvalidResourceHandle);
    pthread_mutex_lock(&mu);
    int done = e->completed >= e->recorded;
    pthread_mutex_unlock(&mu);
    return done ? cudaSuccess : fail(cudaErrorNotReady);
}

/* A wait on an event never recorded: CUDA documents it as a no-op (it
 * completes at once), so a missing or late record orders nothing: a
 * warning, once per event (caller holds mu). */
static void never_recorded(cudaEvent_t e, const char *call, const char *stream, const void *site) {
    if (e->recorded || e->warned)
        return;
    e->warned = 1;
    char where[256];
    cudaemu_describe_site(site, where, sizeof where);
    fprintf(stderr,
            "cudaemu: warning: %s%s on event #%d, which was never recorded, called from %s: CUDA makes the wait a "
            "no-op, so it orders nothing (a record is missing, or comes after the wait)\n",
            call, stream, e->id, where);
}

cudaError_t cudaEventSynchronize(cudaEvent_t e) {
    if (!e)
        return fail(cudaErrorInvalidResourceHandle);
    pthread_mutex_lock(&mu);
    never_recorded(e, "cudaEventSynchronize", "", __builtin_return_address(0));
    pthread_mutex_unlock(&mu);
    wait_records(e);
    return cudaSuccess;
}

typedef struct {
    cudaEvent_t e;
    uint64_t n;
} event_wait;

static void wait_event_op(void *arg) {
    event_wait *w = arg;
    pthread_mutex_lock(&mu);
    while (w->e->completed < w->n)
        pthread_cond_wait(&progress, &mu);
    pthread_mutex_unlock(&mu);
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t e, unsigned int flags) {
    (void)flags;
    ready();
    if (!e)
        return fail(cudaErrorInvalidResourceHandle);
    event_wait *w = malloc(sizeof *w);
    if (!w)
        return fail(cudaErrorMemoryAllocation);
    pthread_mutex_lock(&mu);
    if (!e->recorded) {
        char on[48];
        struct CUstream_st *t = stream && stream != cudaStreamLegacy && stream != cudaStreamPerThread ? stream : NULL;
        snprintf(on, sizeof on, " (stream #%d)",
                 t                                   ? t->id
                 : current < ndev && legacy[current] ? legacy[current]->id
                                                     : -1);
        never_recorded(e, "cudaStreamWaitEvent", on, __builtin_return_address(0));
    }
    /* the wait is for the event's newest record at the time of the call */
    *w = (event_wait){e, e->recorded};
    cudaError_t err = submit(stream, wait_event_op, w, free, 0);
    pthread_mutex_unlock(&mu);
    if (err != cudaSuccess)
        free(w);
    return err;
}

cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b) {
    if (!ms)
        return fail(cudaErrorInvalidValue);
    if (!a || !b || (a->flags & cudaEventDisableTiming) || (b->flags & cudaEventDisableTiming))
        return fail(cudaErrorInvalidResourceHandle);
    pthread_mutex_lock(&mu);
    int done = a->recorded && b->recorded && a->completed >= a->recorded && b->completed >= b->recorded;
    double d = b->t_ns - a->t_ns;
    pthread_mutex_unlock(&mu);
    if (!done)
        return fail(a->recorded && b->recorded ? cudaErrorNotReady : cudaErrorInvalidResourceHandle);
    *ms = (float)(d / 1e6);
    return cudaSuccess;
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind) {
    /* on the legacy default stream, returning when done */
    cudaError_t e = copy_async(dst, src, n, kind, 0, "cudaMemcpy", __builtin_return_address(0));
    return e == cudaSuccess ? cudaStreamSynchronize(0) : e;
}
