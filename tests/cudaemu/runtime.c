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
 * every blocking stream of its device and is waited for by them. */
#include "srconfig.h"

#include "cudaemu.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_DEVICES 16

typedef struct op {
    void (*fn)(void *);
    void *arg;
    void (*free_arg)(void *);
    struct op *next;
} op;

struct CUstream_st {
    int device, priority;
    unsigned flags;
    pthread_t thread;
    op *head, *tail;
    uint64_t enqueued, done; /* operations */
    int stop;
    struct CUstream_st *next; /* every stream */
};

struct CUevent_st {
    int device;
    unsigned flags;
    uint64_t recorded, completed; /* record count; the newest completed record */
    double t_ns;                  /* when the newest completed record ran */
};

typedef enum { MEM_DEVICE, MEM_PINNED, MEM_REGISTERED } mem_kind;
typedef struct {
    char *p;
    size_t n;
    mem_kind kind;
    int device;
} region;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t progress = PTHREAD_COND_INITIALIZER;
static pthread_once_t once = PTHREAD_ONCE_INIT;
static int ndev = 1, notready_records = 1;
static size_t mem_bytes = (size_t)1024 << 20, used[MAX_DEVICES];
static char dev_name[256] = "NVIDIA H100 80GB HBM3";
static struct CUstream_st *streams, *legacy[MAX_DEVICES];
static region *regions;
static size_t nregions, cap_regions;

static __thread cudaError_t last_error = cudaSuccess;
static __thread int current = 0;

static void configure(void) {
    const char *v;
    if ((v = getenv("CUDAEMU_DEVICES")) && atoi(v) >= 0)
        ndev = atoi(v) > MAX_DEVICES ? MAX_DEVICES : atoi(v);
    if ((v = getenv("CUDAEMU_MEM_MB")) && atol(v) > 0)
        mem_bytes = (size_t)atol(v) << 20;
    if ((v = getenv("CUDAEMU_NAME")) && *v)
        snprintf(dev_name, sizeof dev_name, "%s", v);
    if ((v = getenv("CUDAEMU_NOTREADY_ERROR")) && *v)
        notready_records = atoi(v) != 0;
}

static void init(void) { pthread_once(&once, configure); }

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

/* The region holding [p, p + n), or NULL (caller holds mu). */
static region *find(const void *p, size_t n) {
    const char *c = p;
    for (size_t i = 0; i < nregions; i++)
        if (c >= regions[i].p && c < regions[i].p + regions[i].n && (size_t)(regions[i].p + regions[i].n - c) >= n)
            return &regions[i];
    return NULL;
}

static int add_region(char *p, size_t n, mem_kind kind, int device) {
    if (nregions == cap_regions) {
        size_t c = cap_regions ? 2 * cap_regions : 64;
        region *r = realloc(regions, c * sizeof *r);
        if (!r)
            return -1;
        regions = r;
        cap_regions = c;
    }
    regions[nregions++] = (region){p, n, kind, device};
    return 0;
}

static void drop_region(region *r) { *r = regions[--nregions]; }

int cudaemu_is_device(const void *p, size_t bytes) {
    init();
    pthread_mutex_lock(&mu);
    region *r = find(p, bytes ? bytes : 1);
    int yes = r && r->kind == MEM_DEVICE && r->device == current;
    pthread_mutex_unlock(&mu);
    return yes;
}

/* Host memory the device can reach directly (pinned or registered). */
static int page_locked(const void *p, size_t n) {
    region *r = find(p, n ? n : 1);
    return r && r->kind != MEM_DEVICE;
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
    p->pciBusID = 0x19 + d;
    p->pciDeviceID = 0;
    p->unifiedAddressing = 1;
    return cudaSuccess;
}

cudaError_t cudaDeviceGetPCIBusId(char *id, int len, int d) {
    ready();
    if (!id || len < 13)
        return fail(cudaErrorInvalidValue);
    if (d < 0 || d >= ndev)
        return fail(cudaErrorInvalidDevice);
    snprintf(id, (size_t)len, "00000000:%02X:00.0", 0x19 + d);
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
    char *m = e == cudaSuccess ? aligned_alloc(256, rounded) : NULL;
    if (e == cudaSuccess && (!m || add_region(m, rounded, MEM_DEVICE, current))) {
        free(m);
        e = cudaErrorMemoryAllocation;
    }
    if (e == cudaSuccess) {
        used[current] += rounded;
        *p = m;
    }
    pthread_mutex_unlock(&mu);
    return e == cudaSuccess ? e : fail(e);
}

cudaError_t cudaFree(void *p) {
    ready();
    pthread_mutex_lock(&mu);
    /* cudaFree synchronises the device */
    drain_device(current);
    if (!p) {
        pthread_mutex_unlock(&mu);
        return cudaSuccess;
    }
    region *r = find(p, 1);
    if (!r || r->p != p || r->kind != MEM_DEVICE) {
        pthread_mutex_unlock(&mu);
        return fail(cudaErrorInvalidDevicePointer);
    }
    used[r->device] -= r->n;
    drop_region(r);
    pthread_mutex_unlock(&mu);
    free(p);
    return cudaSuccess;
}

cudaError_t cudaMallocHost(void **p, size_t n) {
    ready();
    if (!p)
        return fail(cudaErrorInvalidValue);
    size_t rounded = (n + 255) / 256 * 256;
    char *m = aligned_alloc(256, rounded ? rounded : 256);
    pthread_mutex_lock(&mu);
    int rc = m ? add_region(m, rounded ? rounded : 256, MEM_PINNED, current) : -1;
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
    if (e == cudaSuccess && add_region(p, n, MEM_REGISTERED, current))
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
    region *r = find(p, 1);
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

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind, cudaStream_t stream) {
    ready();
    if (n == 0)
        return cudaSuccess;
    if (!dst || !src)
        return fail(cudaErrorInvalidValue);
    pthread_mutex_lock(&mu);
    region *rd = find(dst, n), *rs = find(src, n);
    int dev_dst = rd && rd->kind == MEM_DEVICE, dev_src = rs && rs->kind == MEM_DEVICE;
    int ok = kind == cudaMemcpyDefault || (kind == cudaMemcpyHostToDevice && dev_dst && !dev_src) ||
             (kind == cudaMemcpyDeviceToHost && dev_src && !dev_dst) ||
             (kind == cudaMemcpyDeviceToDevice && dev_src && dev_dst) ||
             (kind == cudaMemcpyHostToHost && !dev_src && !dev_dst);
    /* a copy to or from pageable host memory returns only when done */
    int pageable = (!dev_dst && !page_locked(dst, n)) || (!dev_src && !page_locked(src, n));
    pthread_mutex_unlock(&mu);
    if (!ok)
        return fail(cudaErrorInvalidValue);
    return enqueue_mem(stream, do_copy, (copy_op){dst, src, n, 0}, pageable && (dev_dst || dev_src));
}

cudaError_t cudaMemsetAsync(void *dst, int value, size_t n, cudaStream_t stream) {
    ready();
    if (n == 0)
        return cudaSuccess;
    if (!cudaemu_is_device(dst, n))
        return fail(cudaErrorInvalidValue);
    return enqueue_mem(stream, do_set, (copy_op){dst, NULL, n, value}, 0);
}

cudaError_t cudaMemset(void *dst, int value, size_t n) {
    ready();
    if (n == 0)
        return cudaSuccess;
    if (!cudaemu_is_device(dst, n))
        return fail(cudaErrorInvalidValue);
    return enqueue_mem(0, do_set, (copy_op){dst, NULL, n, value}, 1);
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

cudaError_t cudaEventSynchronize(cudaEvent_t e) {
    if (!e)
        return fail(cudaErrorInvalidResourceHandle);
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
    cudaError_t e = cudaMemcpyAsync(dst, src, n, kind, 0);
    return e == cudaSuccess ? cudaStreamSynchronize(0) : e;
}
