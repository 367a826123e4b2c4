/* counts.c — the process's traffic counters; see counts.h. */
#include "srconfig.h"

#include "counts.h"

#include <stdatomic.h>

static _Atomic uint64_t counters[SR_COUNT_N];

void sr_count_add(sr_count_kind k, uint64_t n) { atomic_fetch_add_explicit(&counters[k], n, memory_order_relaxed); }

uint64_t sr_count_get(sr_count_kind k) { return atomic_load_explicit(&counters[k], memory_order_relaxed); }
