/* mem.h — allocator with per-category accounting (current and peak bytes).
 *
 * Every large buffer shardrun allocates goes through sr_mem_alloc with a
 * category, so the memory figures in the log and metrics come from the
 * program's own accounting, not from guesses (DESIGN §3, "Memory").
 * Buffers are 64-byte aligned and zero-filled.  Not thread-safe: allocate
 * from the main thread. */
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
void sr_mem_free(sr_mem_cat cat, void *ptr, size_t bytes);

size_t sr_mem_current(sr_mem_cat cat);
size_t sr_mem_peak(sr_mem_cat cat);
size_t sr_mem_total_current(void);
size_t sr_mem_total_peak(void);
const char *sr_mem_name(sr_mem_cat cat);
/* Forgets all peaks and counts (tests). */
void sr_mem_reset(void);

#endif
