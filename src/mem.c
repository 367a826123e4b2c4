/* mem.c — accounted allocator and counted wrappers; see mem.h. */
#include "srconfig.h"

#include "mem.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "status.h"
#include "testhook.h"

/* The counters of one rank: the process's, or a virtual rank's
 * (sr_mem_ctx_new), which its threads bind. */
struct sr_mem_ctx {
    size_t current[SR_MEM_NCAT], peak[SR_MEM_NCAT];
    size_t space_current[SR_NSPACE], space_peak[SR_NSPACE];
    size_t total_current, total_peak;
};
static sr_mem_ctx process_ctx;
static _Thread_local sr_mem_ctx *bound;
static long long allocations;

static sr_mem_ctx *ctx(void) { return bound ? bound : &process_ctx; }

sr_mem_ctx *sr_mem_ctx_new(void) { return calloc(1, sizeof(sr_mem_ctx)); }
void sr_mem_ctx_free(sr_mem_ctx *c) { free(c); }
void sr_mem_bind(sr_mem_ctx *c) { bound = c; }
sr_mem_ctx *sr_mem_bound(void) { return bound; }

static const char *const names[] = {
#define SR_MEM_NAME(e, n) n,
    SR_MEM_TABLE(SR_MEM_NAME)
#undef SR_MEM_NAME
};
static const char *const space_names[] = {
#define SR_MEM_SPACE_NAME(e, n) n,
    SR_MEM_SPACES(SR_MEM_SPACE_NAME)
#undef SR_MEM_SPACE_NAME
};

/* The header in front of every accounted block: what sr_mem_free needs.
 * 64 bytes, so the block after it keeps the 64-byte alignment. */
#define BLOCK_MAGIC 0x53524d454d424c4bull /* "SRMEMBLK" */
typedef union {
    struct {
        uint64_t magic;
        uint64_t bytes;
        uint32_t space, cat;
    } h;
    unsigned char pad[64];
} block_header;
/* the counters a block was accounted in (after the fields above) */
#define HEADER_CTX(h) (*(sr_mem_ctx **)((h)->pad + 32))
_Static_assert(sizeof(block_header) == 64, "the block header keeps 64-byte alignment");

/* The allocation sites of a run with SHARDRUN_TEST_ALLOC_FAIL set: each
 * call site (the return address into the caller of a counted function) with
 * the number of its first allocation, so the test sweep can fail every site
 * once (tests/alloc_fail.sh) instead of every allocation.  Only a hooked run
 * records them; a bounded table (sites past it are not recorded). */
static struct {
    pthread_mutex_t lock;
    int n;
    const void *site[SR_MEM_MAX_SITES];
    long long first[SR_MEM_MAX_SITES];
} sites = {.lock = PTHREAD_MUTEX_INITIALIZER};

static void record_site(const void *site, long long n) {
    pthread_mutex_lock(&sites.lock);
    int i = 0;
    while (i < sites.n && sites.site[i] != site)
        i++;
    if (i == sites.n && sites.n < SR_MEM_MAX_SITES) {
        sites.site[sites.n] = site;
        sites.first[sites.n++] = n;
    }
    pthread_mutex_unlock(&sites.lock);
}

/* Counts one allocation made from `site`; false when SHARDRUN_TEST_ALLOC_FAIL
 * says this one must fail. */
static int count_one(const void *site) {
    long long n = __atomic_add_fetch(&allocations, 1, __ATOMIC_RELAXED);
    const sr_testhooks *h = sr_testhook();
    if (h->alloc_fail <= 0)
        return 1;
    record_site(site, n);
    return n != h->alloc_fail || (h->alloc_fail_rank >= 0 && h->alloc_fail_rank != sr_log_rank());
}
#define CALLER __builtin_return_address(0)

static void raise_peak(size_t *pk, size_t now) {
    size_t old = __atomic_load_n(pk, __ATOMIC_RELAXED);
    while (now > old && !__atomic_compare_exchange_n(pk, &old, now, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
        ;
}

static void account(sr_mem_ctx *c, sr_mem_space space, sr_mem_cat cat, size_t bytes) {
    raise_peak(&c->peak[cat], __atomic_add_fetch(&c->current[cat], bytes, __ATOMIC_RELAXED));
    raise_peak(&c->space_peak[space], __atomic_add_fetch(&c->space_current[space], bytes, __ATOMIC_RELAXED));
    raise_peak(&c->total_peak, __atomic_add_fetch(&c->total_current, bytes, __ATOMIC_RELAXED));
}

static void unaccount(sr_mem_ctx *c, sr_mem_space space, sr_mem_cat cat, size_t bytes) {
    __atomic_sub_fetch(&c->current[cat], bytes, __ATOMIC_RELAXED);
    __atomic_sub_fetch(&c->space_current[space], bytes, __ATOMIC_RELAXED);
    __atomic_sub_fetch(&c->total_current, bytes, __ATOMIC_RELAXED);
}

static void *alloc_in(sr_mem_space space, sr_mem_cat cat, size_t bytes, bool zero, const void *site) {
    void *p = NULL;
    size_t rounded = (bytes + 63) & ~(size_t)63;
    if (rounded == 0)
        rounded = 64;
    size_t whole = rounded + sizeof(block_header);
    if (!count_one(site) || rounded < bytes || whole < rounded || posix_memalign(&p, 64, whole) != 0) {
        sr_error(SR_ERR_INTERNAL, "out of memory allocating %zu bytes for %s", bytes, names[cat]);
        return NULL;
    }
    block_header *h = p;
    *h = (block_header){.h = {BLOCK_MAGIC, bytes, (uint32_t)space, (uint32_t)cat}};
    HEADER_CTX(h) = ctx();
    if (zero)
        memset(h + 1, 0, rounded);
    account(HEADER_CTX(h), space, cat, bytes);
    return h + 1;
}

void *sr_mem_alloc_in(sr_mem_space space, sr_mem_cat cat, size_t bytes, bool zero) {
    return alloc_in(space, cat, bytes, zero, CALLER);
}

void *sr_mem_alloc(sr_mem_cat cat, size_t bytes) { return alloc_in(SR_SPACE_HOST, cat, bytes, true, CALLER); }

size_t sr_mem_block_bytes(const void *ptr) { return ptr ? (size_t)((const block_header *)ptr - 1)->h.bytes : 0; }

void sr_mem_free(void *ptr) {
    if (!ptr)
        return;
    block_header *h = (block_header *)ptr - 1;
    if (h->h.magic != BLOCK_MAGIC || h->h.space >= SR_NSPACE || h->h.cat >= SR_MEM_NCAT) {
        /* a pointer that did not come from sr_mem_alloc_in: a bug, never input */
        fprintf(stderr, "shardrun: internal error: sr_mem_free of a block it did not allocate\n");
        abort();
    }
    unaccount(HEADER_CTX(h), (sr_mem_space)h->h.space, (sr_mem_cat)h->h.cat, h->h.bytes);
    h->h.magic = 0;
    free(h);
}

void sr_mem_account_external(sr_mem_space space, sr_mem_cat cat, size_t bytes, bool add) {
    if (add)
        account(ctx(), space, cat, bytes);
    else
        unaccount(ctx(), space, cat, bytes);
}

size_t sr_mem_current(sr_mem_cat cat) { return __atomic_load_n(&ctx()->current[cat], __ATOMIC_RELAXED); }
size_t sr_mem_peak(sr_mem_cat cat) { return __atomic_load_n(&ctx()->peak[cat], __ATOMIC_RELAXED); }
size_t sr_mem_space_current(sr_mem_space s) { return __atomic_load_n(&ctx()->space_current[s], __ATOMIC_RELAXED); }
size_t sr_mem_space_peak(sr_mem_space s) { return __atomic_load_n(&ctx()->space_peak[s], __ATOMIC_RELAXED); }
size_t sr_mem_total_current(void) { return __atomic_load_n(&ctx()->total_current, __ATOMIC_RELAXED); }
size_t sr_mem_total_peak(void) { return __atomic_load_n(&ctx()->total_peak, __ATOMIC_RELAXED); }
const char *sr_mem_name(sr_mem_cat cat) { return names[cat]; }
const char *sr_mem_space_name(sr_mem_space s) { return space_names[s]; }

void sr_mem_reset(void) {
    sr_mem_ctx *c = ctx();
    for (int k = 0; k < SR_MEM_NCAT; k++) {
        __atomic_store_n(&c->current[k], 0, __ATOMIC_RELAXED);
        __atomic_store_n(&c->peak[k], 0, __ATOMIC_RELAXED);
    }
    for (int s = 0; s < SR_NSPACE; s++) {
        __atomic_store_n(&c->space_current[s], 0, __ATOMIC_RELAXED);
        __atomic_store_n(&c->space_peak[s], 0, __ATOMIC_RELAXED);
    }
    __atomic_store_n(&c->total_current, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&c->total_peak, 0, __ATOMIC_RELAXED);
}

void *sr_malloc(size_t bytes) { return count_one(CALLER) ? malloc(bytes ? bytes : 1) : NULL; }

void *sr_calloc(size_t n, size_t size) { return count_one(CALLER) ? calloc(n ? n : 1, size ? size : 1) : NULL; }

void *sr_realloc(void *p, size_t bytes) { return count_one(CALLER) ? realloc(p, bytes ? bytes : 1) : NULL; }

char *sr_strdup(const char *s) { return count_one(CALLER) ? strdup(s) : NULL; }

void *sr_aligned_alloc(size_t bytes) {
    void *p = NULL;
    size_t rounded = (bytes + 4095) & ~(size_t)4095;
    if (!count_one(CALLER) || posix_memalign(&p, 4096, rounded ? rounded : 4096) != 0)
        return NULL;
    return p;
}

long long sr_mem_allocations(void) { return __atomic_load_n(&allocations, __ATOMIC_RELAXED); }

int sr_mem_alloc_sites(long long *first, int max) {
    pthread_mutex_lock(&sites.lock);
    int n = sites.n < max ? sites.n : max;
    for (int i = 0; i < n; i++)
        first[i] = sites.first[i];
    pthread_mutex_unlock(&sites.lock);
    return n;
}

size_t sr_mem_node_bytes(void) {
    if (sr_testhook()->node_mem > 0)
        return (size_t)sr_testhook()->node_mem;
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    return pages > 0 && page > 0 ? (size_t)pages * (size_t)page : 0;
}

size_t sr_mem_side_copy_cap(int local_size) {
    size_t node = sr_mem_node_bytes();
    return node ? (size_t)((double)node * 0.25 / (local_size > 0 ? local_size : 1)) : SIZE_MAX;
}
