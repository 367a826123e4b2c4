/* mem.c — accounted allocator; see mem.h. */
#include "srconfig.h"

#include "mem.h"

#include <stdlib.h>
#include <string.h>

#include "status.h"

static size_t current[SR_MEM_NCAT], peak[SR_MEM_NCAT];
static size_t total_current, total_peak;

static const char *const names[] = {
#define SR_MEM_NAME(e, n) n,
    SR_MEM_TABLE(SR_MEM_NAME)
#undef SR_MEM_NAME
};

void *sr_mem_alloc(sr_mem_cat cat, size_t bytes) {
    void *p = NULL;
    size_t rounded = (bytes + 63) & ~(size_t)63;
    if (rounded == 0)
        rounded = 64;
    if (posix_memalign(&p, 64, rounded) != 0) {
        sr_error(SR_ERR_INTERNAL, "out of memory allocating %zu bytes for %s", bytes, names[cat]);
        return NULL;
    }
    memset(p, 0, rounded);
    current[cat] += bytes;
    if (current[cat] > peak[cat])
        peak[cat] = current[cat];
    total_current += bytes;
    if (total_current > total_peak)
        total_peak = total_current;
    return p;
}

void sr_mem_free(sr_mem_cat cat, void *ptr, size_t bytes) {
    if (!ptr)
        return;
    free(ptr);
    current[cat] -= bytes;
    total_current -= bytes;
}

size_t sr_mem_current(sr_mem_cat cat) { return current[cat]; }
size_t sr_mem_peak(sr_mem_cat cat) { return peak[cat]; }
size_t sr_mem_total_current(void) { return total_current; }
size_t sr_mem_total_peak(void) { return total_peak; }
const char *sr_mem_name(sr_mem_cat cat) { return names[cat]; }

void sr_mem_reset(void) {
    memset(current, 0, sizeof current);
    memset(peak, 0, sizeof peak);
    total_current = total_peak = 0;
}
