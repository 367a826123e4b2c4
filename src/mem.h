/* mem.h — allocation: the accounted allocator for large buffers and the
 * counted wrappers for everything else.
 *
 * Every large buffer shardrun allocates goes through sr_mem_alloc with a
 * category, so the memory figures in the log and metrics come from the
 * program's own accounting, not from guesses (ARCHITECTURE.md §3,
 * "Memory").  Buffers are 64-byte aligned and zero-filled.  Counters are
 * atomic, so any thread may allocate.
 *
 * Small allocations (tables, strings, requests) go through sr_malloc and
 * friends: plain libc underneath, but every call is counted so the test
 * hook SHARDRUN_TEST_ALLOC_FAIL=N can make the N-th allocation of the
 * process fail and prove that every out-of-memory path ends in status 70
 * with a message, never in a crash. */
#ifndef SR_MEM_H
#define SR_MEM_H

#include <stddef.h>

/* X(enum, short name used in logs and metrics) */
#define SR_MEM_TABLE(X)                                                                                                \
    X(SR_MEM_PARAM_SHARD, "param_shard")                                                                               \
    X(SR_MEM_GRAD_SHARD, "grad_shard")                                                                                 \
    X(SR_MEM_OPTIM_SHARD, "optim_shard")                                                                               \
    X(SR_MEM_ACCUM, "grad_accum")                                                                                      \
    X(SR_MEM_FULL_UNITS, "full_units")                                                                                 \
    X(SR_MEM_ACTIVATIONS, "activations")                                                                               \
    X(SR_MEM_COMM, "comm")                                                                                             \
    X(SR_MEM_OTHER, "other")

typedef enum {
#define SR_MEM_ENUM(e, n) e,
    SR_MEM_TABLE(SR_MEM_ENUM)
#undef SR_MEM_ENUM
        SR_MEM_NCAT
} sr_mem_cat;

/* Returns zeroed, 64-byte aligned memory of `bytes`, or NULL (with an
 * SR_ERR_INTERNAL message recorded) when out of memory.  Free with
 * sr_mem_free(cat, ptr, bytes) using the same category and size. */
void *sr_mem_alloc(sr_mem_cat cat, size_t bytes);
/* Frees and un-accounts; NULL is fine. */
void sr_mem_free(sr_mem_cat cat, void *ptr, size_t bytes);

size_t sr_mem_current(sr_mem_cat cat);
size_t sr_mem_peak(sr_mem_cat cat);
size_t sr_mem_total_current(void);
size_t sr_mem_total_peak(void);
const char *sr_mem_name(sr_mem_cat cat);
/* Forgets all peaks and counts (tests and benchmarks). */
void sr_mem_reset(void);

/* Counted libc allocation: NULL on failure (no message recorded: the
 * caller says what it was allocating).  Free with free(). */
void *sr_malloc(size_t bytes);
void *sr_calloc(size_t n, size_t size);
void *sr_realloc(void *p, size_t bytes);
char *sr_strdup(const char *s);
/* Page-aligned (4096) memory, counted like sr_malloc; free with free(). */
void *sr_aligned_alloc(size_t bytes);
/* Allocations counted so far in this process (for the test sweep). */
long long sr_mem_allocations(void);

#endif
