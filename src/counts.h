/* counts.h — what this process sent to other ranks and asked of its
 * bootstrap, as counters: connections it opened, messages and bytes it
 * sent over the host transport, and bootstrap operations (PMIx or PMI2
 * put, fence, get).  bench/scale.sh reads them per phase (start-up, a step,
 * a checkpoint commit, a resume) to show how each grows with the rank
 * count; they are deterministic for a given job and rank count.
 *
 * counts owns the counters; each module that does one of these things adds
 * to them at the one place it does it (comm_tcp, world).  Relaxed atomics:
 * a few adds per message, nothing on the engine's inner loops. */
#ifndef SR_COUNTS_H
#define SR_COUNTS_H

#include <stdint.h>

typedef enum { SR_COUNT_CONNECTIONS, SR_COUNT_MESSAGES, SR_COUNT_BYTES, SR_COUNT_BOOT_OPS, SR_COUNT_N } sr_count_kind;

void sr_count_add(sr_count_kind k, uint64_t n);
uint64_t sr_count_get(sr_count_kind k);

#endif
