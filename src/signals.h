/* signals.h — what each signal does to the process: the one owner of every
 * signal handler (shardrun(1) SIGNALS).
 *
 * signals owns:
 *  - SIGINT, SIGTERM and SIGHUP for every command (sr_signals_init): the
 *    temporaries the process has open are removed (every staged output of
 *    fsio.h registers its temporary here while it exists), the flight
 *    recorder, when on, writes its dump for SIGINT and SIGTERM (reason
 *    "signal SIGTERM"), and the signal is raised again with its default
 *    action, so the shell sees 130, 143 or 129 (128 + the signal); a
 *    signal the process was started with ignored stays ignored (nohup);
 *  - the preemption signals a `train` with a checkpoint directory catches
 *    (sr_signals_catch, for preempt.h): the recorder's dump first for
 *    SIGINT and SIGTERM (a rank stuck in a collective may be torn down by
 *    its launcher before it acts), then the caller's record function, and
 *    nothing else: the run saves and exits at a step the ranks agree on;
 *  - SIGQUIT with the recorder on (sr_signals_quit_dumps): a dump, and the
 *    run goes on;
 *  - SIGPIPE and SIGXFSZ ignored: a write to a closed pipe or past a
 *    file-size limit fails (EPIPE, EFBIG) and is reported with its file,
 *    after its temporary is removed.
 * Only kill -9 (or a crash) can leave a temporary behind.  A handler does
 * only async-signal-safe work: unlink(2), the recorder's dump (flight.h,
 * registered with sr_signals_set_dumper), sigaction(2), raise(3). */
#ifndef SR_SIGNALS_H
#define SR_SIGNALS_H

#include <stdbool.h>

#include "status.h"

/* Installs the handlers every command has (above).  Call once, first in
 * main(). */
void sr_signals_init(void);

/* Creating a temporary file the process writes, to be removed when a
 * terminating signal arrives (or sr_signals_remove_temporaries runs):
 * sr_signals_hold() before it is created (the calling thread holds
 * SIGINT, SIGTERM and SIGHUP blocked until the file is registered, so no
 * handler can end the process between the creation and the
 * registration), then sr_signals_track(path) once it exists, or
 * sr_signals_release() when nothing was created.  sr_signals_track
 * returns a handle for sr_signals_untrack, or -1 when it could not be
 * registered (out of memory, a path longer than PATH_MAX: the normal paths
 * still remove it).  Thread-safe. */
void sr_signals_hold(void);
void sr_signals_release(void);
int sr_signals_track(const char *path);
/* Forgets a registered temporary (renamed into place or removed by its
 * owner); -1 is ignored.  Thread-safe. */
void sr_signals_untrack(int handle);
/* Removes every registered temporary (async-signal-safe): the handlers'
 * first step, and every path that ends the process with _exit. */
void sr_signals_remove_temporaries(void);

/* For preempt.h: `sig` (SIGUSR1, SIGTERM, ...) calls record(sig) instead of
 * ending the process, after the recorder's dump for SIGINT and SIGTERM.
 * record must be async-signal-safe.  SR_ERR_INTERNAL when sigaction
 * fails. */
sr_status sr_signals_catch(int sig, void (*record)(int sig));

/* The flight recorder's dump for a signal (flight.h registers
 * sr_flight_dump_async while a recorder is on, NULL when it stops): the
 * handlers call it, so this module depends on nothing above it. */
void sr_signals_set_dumper(bool (*dump)(const char *reason, const char *detail));

/* SIGQUIT writes the flight recorder's dump (not a final one) and the run
 * goes on: only when a recorder registered its dump. */
void sr_signals_quit_dumps(void);

/* "SIGTERM" for SIGTERM, ..., "signal" for one this table does not name. */
const char *sr_signals_name(int sig);

#endif
