/* hbcheck.h — the happens-before checker: vector clocks over the device
 * table's streams, the transport and the host, and the memory each of them
 * reads and writes.
 *
 * hbcheck owns the proof that the engine's stream ordering is complete.  On
 * the CPU tables every stream runs in program order, so a missing wait
 * never shows as a wrong number there; on a GPU it is a race.  With
 * SHARDRUN_TEST_HB=1 (`make check` sets it) the device table keeps, for
 * each *agent* (the four streams, the transport that runs collectives, and
 * the host thread that issues everything), a vector clock:
 *   - an operation issued on agent a is ordered after everything the host
 *     did before issuing it (the host's clock merges into a's), and ticks a;
 *     a collective is also ordered after the stream it is issued on;
 *   - an event snapshots its agent's clock; a wait (device side or host)
 *     merges the snapshot into the waiter's clock;
 *   - every declared access to a byte range remembers its agent and tick:
 *     a read must know the last write of every byte it reads, a write must
 *     know that write and every read since.  An access that does not is
 *     reported with both sites (what, where, which agents), and the run
 *     ends with SR_ERR_INTERNAL (70).
 * Memory is tracked as an interval map (exact byte ranges, split where
 * accesses begin and end), so a unit's slice of a shard and the shard as a
 * whole do not alias each other's history.  Freed memory is forgotten.
 * The checker also counts host waits by site, so a test can hold the
 * engine to one host wait per step.
 *
 * Not thread-safe: one checker per device table, used by the thread that
 * issues work on it. */
#ifndef SR_HBCHECK_H
#define SR_HBCHECK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "status.h"

/* Agents: the device streams (sr_stream's values 0..3), then these two. */
enum { SR_HB_TRANSPORT = 4, SR_HB_HOST = 5, SR_HB_AGENTS = 6 };

/* A vector clock: what one agent knows of every agent's ticks. */
typedef struct {
    uint64_t c[SR_HB_AGENTS];
} sr_hb_clock;

typedef struct sr_hb sr_hb;

/* A new checker (NULL when out of memory).  `fatal`: a violation is
 * logged as an error and the process exits with SR_ERR_INTERNAL (70) at
 * once, before the racing access happens; otherwise the violation is
 * counted and kept (sr_hb_violations, sr_hb_last), for unit tests. */
sr_hb *sr_hb_open(bool fatal);
void sr_hb_close(sr_hb *s);

/* The host issues one operation on `agent` (a stream): it is ordered after
 * the host's past.  A collective (agent SR_HB_TRANSPORT) passes the stream
 * it is issued on as `after` (-1: none), and is ordered after that
 * stream's past too. */
void sr_hb_issue(sr_hb *s, int agent, int after);

/* Event record: a snapshot of `agent`'s clock (after sr_hb_issue). */
void sr_hb_stamp(sr_hb *s, int agent, sr_hb_clock *out);

/* `agent` waits for a snapshot (a device-side wait, or the host's). */
void sr_hb_merge(sr_hb *s, int agent, const sr_hb_clock *c);

/* The host waits for a snapshot: merged into the host's clock and counted
 * under `site`. */
void sr_hb_host_wait(sr_hb *s, const sr_hb_clock *c, const char *site);

/* Declares that `agent` reads (write false) or writes bytes [p, p+bytes)
 * in its current operation.  SR_OK, or SR_ERR_INTERNAL after reporting a
 * violation (non-fatal checkers only; a fatal one exits). */
sr_status sr_hb_access(sr_hb *s, int agent, const void *p, size_t bytes, bool write, const char *site);

/* Tracks [p, p+bytes) (an allocation of the table, or a host buffer
 * for the length of a copy): accesses elsewhere are not checked. */
sr_status sr_hb_track(sr_hb *s, const void *p, size_t bytes);

/* Forgets the history of [p, p+bytes), tracked by sr_hb_track with the
 * same p and bytes (the memory was freed). */
void sr_hb_forget(sr_hb *s, const void *p, size_t bytes);

/* Host waits counted so far (all sites). */
long long sr_hb_host_waits(const sr_hb *s);
/* Violations found so far, and the last one's report ("" when none). */
long long sr_hb_violations(const sr_hb *s);
const char *sr_hb_last(const sr_hb *s);

#endif
