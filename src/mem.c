/* mem.c — accounted allocator and counted wrappers; see mem.h. */
#include "srconfig.h"

#include "mem.h"

#include <stdlib.h>
#include <string.h>

#include "status.h"
#include "testhook.h"

static size_t current[SR_MEM_NCAT], peak[SR_MEM_NCAT];
static size_t total_current, total_peak;
static long long allocations;

static const char *const names[] = {
#define SR_MEM_NAME(e, n) n,
    SR_MEM_TABLE(SR_MEM_NAME)
#undef SR_MEM_NAME
};

/* Counts one allocation; false when SHARDRUN_TEST_ALLOC_FAIL says this one
 * must fail. */
static int count_one(void) {
    long long n = __atomic_add_fetch(&allocations, 1, __ATOMIC_RELAXED);
    const sr_testhooks *h = sr_testhook();
    return h->alloc_fail <= 0 || n != h->alloc_fail || (h->alloc_fail_rank >= 0 && h->alloc_fail_rank != sr_log_rank());
}

static void raise_peak(size_t *pk, size_t now) {
    size_t old = __atomic_load_n(pk, __ATOMIC_RELAXED);
    while (now > old && !__atomic_compare_exchange_n(pk, &old, now, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
        ;
}

void *sr_mem_alloc(sr_mem_cat cat, size_t bytes) {
    void *p = NULL;
    size_t rounded = (bytes + 63) & ~(size_t)63;
    if (rounded == 0)
        rounded = 64;
    if (!count_one() || rounded < bytes || posix_memalign(&p, 64, rounded) != 0) {
        sr_error(SR_ERR_INTERNAL, "out of memory allocating %zu bytes for %s", bytes, names[cat]);
        return NULL;
    }
    memset(p, 0, rounded);
    raise_peak(&peak[cat], __atomic_add_fetch(&current[cat], bytes, __ATOMIC_RELAXED));
    raise_peak(&total_peak, __atomic_add_fetch(&total_current, bytes, __ATOMIC_RELAXED));
    return p;
}

void sr_mem_free(sr_mem_cat cat, void *ptr, size_t bytes) {
    if (!ptr)
        return;
    free(ptr);
    __atomic_sub_fetch(&current[cat], bytes, __ATOMIC_RELAXED);
    __atomic_sub_fetch(&total_current, bytes, __ATOMIC_RELAXED);
}

size_t sr_mem_current(sr_mem_cat cat) { return __atomic_load_n(&current[cat], __ATOMIC_RELAXED); }
size_t sr_mem_peak(sr_mem_cat cat) { return __atomic_load_n(&peak[cat], __ATOMIC_RELAXED); }
size_t sr_mem_total_current(void) { return __atomic_load_n(&total_current, __ATOMIC_RELAXED); }
size_t sr_mem_total_peak(void) { return __atomic_load_n(&total_peak, __ATOMIC_RELAXED); }
const char *sr_mem_name(sr_mem_cat cat) { return names[cat]; }

void sr_mem_reset(void) {
    for (int c = 0; c < SR_MEM_NCAT; c++) {
        __atomic_store_n(&current[c], 0, __ATOMIC_RELAXED);
        __atomic_store_n(&peak[c], 0, __ATOMIC_RELAXED);
    }
    __atomic_store_n(&total_current, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&total_peak, 0, __ATOMIC_RELAXED);
}

void *sr_malloc(size_t bytes) { return count_one() ? malloc(bytes ? bytes : 1) : NULL; }

void *sr_calloc(size_t n, size_t size) { return count_one() ? calloc(n ? n : 1, size ? size : 1) : NULL; }

void *sr_realloc(void *p, size_t bytes) { return count_one() ? realloc(p, bytes ? bytes : 1) : NULL; }

char *sr_strdup(const char *s) { return count_one() ? strdup(s) : NULL; }

void *sr_aligned_alloc(size_t bytes) {
    void *p = NULL;
    size_t rounded = (bytes + 4095) & ~(size_t)4095;
    if (!count_one() || posix_memalign(&p, 4096, rounded ? rounded : 4096) != 0)
        return NULL;
    return p;
}

long long sr_mem_allocations(void) { return __atomic_load_n(&allocations, __ATOMIC_RELAXED); }
