/* mem.h — allocation: the accounted allocator for large buffers and the
 * counted wrappers for everything else.
 *
 * Every large buffer shardrun allocates goes through sr_mem_alloc with a
 * category, so the memory figures in the log and metrics come from the
 * program's own accounting, not from guesses (ARCHITECTURE.md §3,
 * "Memory"), by category and by space (host, pinned, device).  Buffers are
 * 64-byte aligned; a freed block needs no size from the caller.  Counters
 * are atomic, so any thread may allocate.
 *
 * Small allocations (tables, strings, requests) go through sr_malloc and
 * friends: plain libc underneath, but every call is counted so the test
 * hook SHARDRUN_TEST_ALLOC_FAIL=N can make the N-th allocation of the
 * process fail and prove that every out-of-memory path ends in status 70
 * with a message, never in a crash. */
#ifndef SR_MEM_H
#define SR_MEM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* X(enum, short name used in logs and metrics) */
#define SR_MEM_TABLE(X)                                                                                                \
    X(SR_MEM_PARAM_SHARD, "param_shard")                                                                               \
    X(SR_MEM_GRAD_SHARD, "grad_shard")                                                                                 \
    X(SR_MEM_OPTIM_SHARD, "optim_shard")                                                                               \
    X(SR_MEM_ACCUM, "grad_accum")                                                                                      \
    X(SR_MEM_FULL_UNITS, "full_units")                                                                                 \
    X(SR_MEM_ACTIVATIONS, "activations")                                                                               \
    X(SR_MEM_COMM, "comm")                                                                                             \
    X(SR_MEM_CKPT_STAGING, "ckpt_staging")                                                                             \
    X(SR_MEM_OTHER, "other")

typedef enum {
#define SR_MEM_ENUM(e, n) e,
    SR_MEM_TABLE(SR_MEM_ENUM)
#undef SR_MEM_ENUM
        SR_MEM_NCAT
} sr_mem_cat;

/* Where an accounted buffer lives (mem_<space>_total in the metrics):
 * host memory, pinned (page-locked) host memory, device memory.  A CPU run
 * has only host memory; the fake device (device.h) and CUDA add the others. */
#define SR_MEM_SPACES(X)                                                                                               \
    X(SR_SPACE_HOST, "host")                                                                                           \
    X(SR_SPACE_PINNED, "pinned")                                                                                       \
    X(SR_SPACE_DEVICE, "device")

typedef enum {
#define SR_MEM_SPACE_ENUM(e, n) e,
    SR_MEM_SPACES(SR_MEM_SPACE_ENUM)
#undef SR_MEM_SPACE_ENUM
        SR_NSPACE
} sr_mem_space;

/* Returns 64-byte aligned host memory of `bytes`, accounted in (space,
 * cat), zero-filled when `zero`, or NULL (with an SR_ERR_INTERNAL message
 * recorded) when out of memory.  The block remembers its size, space and
 * category: free it with sr_mem_free(ptr) alone.  `space` says what the
 * memory stands for (the CPU and fake device tables hand out host memory
 * for every space). */
void *sr_mem_alloc_in(sr_mem_space space, sr_mem_cat cat, size_t bytes, bool zero);
/* sr_mem_alloc_in(SR_SPACE_HOST, cat, bytes, true). */
void *sr_mem_alloc(sr_mem_cat cat, size_t bytes);
/* Frees a block of sr_mem_alloc_in and un-accounts it; NULL is fine. */
void sr_mem_free(void *ptr);
/* The size asked for when `ptr` (from sr_mem_alloc_in) was allocated. */
size_t sr_mem_block_bytes(const void *ptr);

/* Per category, summed over the spaces (today's mem_<category> keys). */
/* Accounts (add) or releases `bytes` in (space, cat) for memory another
 * allocator handed out (cudaMalloc, cudaMallocHost: device_cuda.c), in the
 * bound counters, so the figures stay the program's own accounting. */
void sr_mem_account_external(sr_mem_space space, sr_mem_cat cat, size_t bytes, bool add);
size_t sr_mem_current(sr_mem_cat cat);
size_t sr_mem_peak(sr_mem_cat cat);
/* Per space, summed over the categories; the peak of that sum. */
size_t sr_mem_space_current(sr_mem_space space);
size_t sr_mem_space_peak(sr_mem_space space);
size_t sr_mem_total_current(void);
size_t sr_mem_total_peak(void);
const char *sr_mem_name(sr_mem_cat cat);
const char *sr_mem_space_name(sr_mem_space space);
/* Forgets all peaks and counts of the calling thread's counters (tests and
 * benchmarks). */
void sr_mem_reset(void);

/* Counters per rank.  By default every thread accounts into the process's
 * counters; a virtual rank (threads of one process each running a rank,
 * tests) makes its own and binds it in each of its threads: allocations,
 * frees and every query above then use the bound counters.  A block is
 * un-accounted from the counters it was accounted in, whichever thread
 * frees it.  sr_mem_bound: this thread's (NULL: the process's). */
typedef struct sr_mem_ctx sr_mem_ctx;
sr_mem_ctx *sr_mem_ctx_new(void);
void sr_mem_ctx_free(sr_mem_ctx *c);
void sr_mem_bind(sr_mem_ctx *c);
sr_mem_ctx *sr_mem_bound(void);

/* Counted libc allocation: NULL on failure (no message recorded: the
 * caller says what it was allocating).  Free with free(). */
/* The node's physical memory in bytes (sysconf; SHARDRUN_TEST_NODE_MEM
 * pretends), 0 when unknown. */
size_t sr_mem_node_bytes(void);
/* The host memory one of `local_size` ranks may take for a copy it makes
 * on the side (an async checkpoint snapshot, a training sample's model):
 * 25% of the node's memory divided by its ranks; SIZE_MAX when unknown. */
size_t sr_mem_side_copy_cap(int local_size);

void *sr_malloc(size_t bytes);
void *sr_calloc(size_t n, size_t size);
void *sr_realloc(void *p, size_t bytes);
char *sr_strdup(const char *s);
/* Grows *buf, an array of `elem`-byte elements with capacity *cap, to hold
 * at least `need`: capacities double from `first`.  false when out of
 * memory (*buf and *cap unchanged; the caller records what it was for).
 * Inline, so each caller stays an allocation site of its own. */
static inline bool sr_grow(void **buf, size_t *cap, size_t need, size_t elem, size_t first) {
    if (need <= *cap)
        return true;
    size_t c = *cap ? *cap : first;
    while (c < need)
        c *= 2;
    void *p = sr_realloc(*buf, c * elem);
    if (!p)
        return false;
    *buf = p;
    *cap = c;
    return true;
}
/* Page-aligned (4096) memory, counted like sr_malloc; free with free(). */
void *sr_aligned_alloc(size_t bytes);
/* Allocations counted so far in this process (for the test sweep). */
long long sr_mem_allocations(void);
/* With SHARDRUN_TEST_ALLOC_FAIL set: the number of the first allocation of
 * each call site seen so far, in order, at most `max` into `first`; returns
 * how many it wrote (0 without the hook).  At most SR_MEM_MAX_SITES sites
 * are recorded. */
#define SR_MEM_MAX_SITES 4096
int sr_mem_alloc_sites(long long *first, int max);

/* Saturating size arithmetic for plans (memplan.c, plan.c): a sum or
 * product past SIZE_MAX stays SIZE_MAX, so a plan that overflows is "too
 * big", never small. */
static inline size_t sr_size_add(size_t a, size_t b) { return a + b < a ? SIZE_MAX : a + b; }
static inline size_t sr_size_mul(size_t a, size_t b) { return b && a > SIZE_MAX / b ? SIZE_MAX : a * b; }

/* Binary units, for sizes in messages and plans. */
#define SR_KIB ((size_t)1 << 10)
#define SR_MIB ((size_t)1 << 20)
#define SR_GIB ((size_t)1 << 30)
#define SR_TIB ((size_t)1 << 40)

#endif
