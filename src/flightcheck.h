/* flightcheck.h — `shardrun debug flight DIR`: the cross-rank analyser of
 * the flight recorder's dumps.
 *
 * flightcheck owns reading a directory of dumps (flight.h's rank<N>.json)
 * and the verdict: the last collective every rank completed; the first one
 * some rank never entered, entered but never started, started only after
 * its peers had given up, or entered with another operation, size or group
 * (a mismatch, naming both sides); ranks whose last step mark lags.  A
 * rank is blamed only when the evidence is older than a slack (half of
 * comm.timeout_s, at most 1 s): dumps taken while the run was healthy (a
 * SIGQUIT, a preemption) differ by that much and are consistent. */
#ifndef SR_FLIGHTCHECK_H
#define SR_FLIGHTCHECK_H

#include <stdbool.h>
#include <stdio.h>

#include "status.h"

/* The exit status of `debug flight` when it names a culprit (0: the
 * dumps are consistent; 65: a malformed dump or dumps of two runs; 66: a
 * rank's dump missing, or none). */
#define SR_FLIGHT_CULPRIT_EXIT 2

/* Reads every rank<N>.json of dir and prints the verdict to out, a few
 * lines.  Returns SR_OK with *culprit set (true: something went wrong and
 * the lines say where; false: consistent); SR_ERR_DATA for a malformed
 * dump (file:line:col where jansson gives one) or dumps of different runs,
 * nothing printed to out; SR_ERR_NOINPUT for a missing or empty directory,
 * or when a rank's dump is missing (the verdict is printed first, naming
 * that rank). */
sr_status sr_flight_check(const char *dir, FILE *out, bool *culprit);

/* Reads every rank<N>.json (N a decimal without leading zeros: the flight
 * dumps' and the traces' names) of dir into a growing array of elem_size
 * items (*items, *n; zeroed before read fills one, counted even when it
 * fails, so the caller frees what it filled), stopping at the first status
 * other than SR_OK; *others counts the other entries (not dot files).
 * Each file is opened without following a link and without blocking, and
 * must be a regular file (SR_ERR_DATA naming what it is); read gets its
 * descriptor (and closes nothing); each is registered as an input
 * (sr_fsio_guard_input), so no output may replace it.
 * SR_ERR_NOINPUT "DIR: <errno> (hint: HINT)" with *items NULL when dir
 * cannot be opened. */
typedef sr_status (*sr_rank_file_reader)(int fd, const char *path, const char *name, long rank, void *elem);
sr_status sr_rank_files_read(const char *dir, const char *hint, size_t elem_size, sr_rank_file_reader read,
                             void **items, int *n, int *others);

#endif
