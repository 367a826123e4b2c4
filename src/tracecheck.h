/* tracecheck.h — `shardrun debug trace DIR -o MERGED.json`: the ranks'
 * trace files (trace.h) merged into one.
 *
 * tracecheck owns reading a directory of trace files (rank<N>.json in the
 * format trace.h owns), refusing what is not one run's complete set, and
 * the merged file: one Chrome trace-event file with a process per rank
 * (pid = rank, named "rank N (host)"), every rank's events in rank order,
 * and otherData {"format": "shardrun-trace-merged 1", job, restart,
 * world_size, first, last}. */
#ifndef SR_TRACECHECK_H
#define SR_TRACECHECK_H

#include <stdio.h>

#include "status.h"

/* Merges every rank<N>.json of dir into `output` (written atomically;
 * fsio.h) and prints one summary line to out: the ranks, steps, events
 * and collectives.  SR_ERR_DATA for a file that is not a shardrun trace
 * (file:line:col where jansson gives one) or files of different runs or
 * windows; SR_ERR_NOINPUT for a missing or empty directory or a rank's
 * file missing; SR_ERR_CANTCREAT / SR_ERR_IO for the output.  Nothing is
 * written on a failure. */
sr_status sr_trace_merge(const char *dir, const char *output, FILE *out);

#endif
