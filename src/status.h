/* status.h — the one table of error statuses, their exit codes and messages,
 * the two ways a failure carries its message, and the log lines.
 *
 * Library code never exits: it records a message with sr_error() and returns
 * an sr_status.  Only main() turns a status into an exit code, through
 * sr_status_exit_code(), so the mapping to sysexits.h lives here alone
 * (ARCHITECTURE.md §6).  Messages are kept in a per-thread buffer; the
 * newest error wins.
 *
 * Context.  A failure gains context as it rises: a caller that knows more
 * (which file, which rank, which key) calls sr_error_wrap(st, "context"),
 * which turns the recorded message into "context: message" and returns st.
 * Nobody copies messages into local buffers to rebuild them.
 *
 * Sticky errors (the one pattern for background threads).  A thread that
 * works for an owner (the transport's progress thread, the checkpoint
 * writer) cannot return a status to it.  It records its first failure in an
 * sr_sticky shared with the owner — status and message, first one wins,
 * later ones are dropped — and stops doing work.  The owner checks at its
 * next wait: sr_sticky_raise() copies the message into the owner's own
 * thread-local error and returns the status, so from there on the failure
 * rises like any other. */
#ifndef SR_STATUS_H
#define SR_STATUS_H

#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>

/* X(name, exit code, short meaning) */
#define SR_STATUS_TABLE(X)                                                                                             \
    X(SR_OK, 0, "success")                                                                                             \
    X(SR_ERR_TRAIN, 1, "training failed")                                                                              \
    X(SR_ERR_USAGE, 64, "bad command line")                                                                            \
    X(SR_ERR_DATA, 65, "malformed data or checkpoint")                                                                 \
    X(SR_ERR_NOINPUT, 66, "input missing or unreadable")                                                               \
    X(SR_ERR_PEER, 69, "a peer failed or timed out")                                                                   \
    X(SR_ERR_INTERNAL, 70, "internal error")                                                                           \
    X(SR_ERR_CANTCREAT, 73, "cannot create output")                                                                    \
    X(SR_ERR_IO, 74, "I/O error")                                                                                      \
    X(SR_PREEMPTED, 75, "preempted, checkpoint saved, run again")                                                      \
    X(SR_ERR_STALLED, 76, "restarts stall at one step: not started again")                                             \
    X(SR_ERR_CONFIG, 78, "invalid job file or launch")

typedef enum {
#define SR_STATUS_ENUM(name, code, msg) name,
    SR_STATUS_TABLE(SR_STATUS_ENUM)
#undef SR_STATUS_ENUM
        SR_STATUS_COUNT
} sr_status;

/* The process exit code (sysexits.h value) for a status; 70 for a value
 * outside the table. */
int sr_status_exit_code(sr_status st);
/* A short constant description of a status. */
const char *sr_status_str(sr_status st);

/* Records a printf-formatted message for the caller to report and returns
 * st, so library code can write `return sr_error(SR_ERR_DATA, "...", ...)`. */
sr_status sr_error(sr_status st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Prefixes the recorded message with a printf-formatted context and ": ",
 * and returns st.  With no message recorded the context alone becomes the
 * message. */
sr_status sr_error_wrap(sr_status st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Records SR_ERR_INTERNAL "out of memory (WHAT)" and returns it. */
sr_status sr_error_oom(const char *what);
/* printf into buf[n], truncating silently: for bounded buffers where a cut
 * message or name is acceptable (a function, so deliberate truncation does
 * not trip -Wformat-truncation). */
void sr_fmt(char *buf, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* bytes[0 .. n) as 2n lowercase hex digits and a NUL into out (2n + 1
 * bytes): digests in messages, manifests and index files. */
void sr_hex(const void *bytes, size_t n, char *out);

/* The newest recorded message ("" when none).  Valid until the next
 * sr_error() on this thread. */
const char *sr_error_message(void);

/* A failed run prints its error before any teardown (which may block on a
 * broken device): main registers the printer of its command's errors
 * (sr_error_set_printer); sr_error_emit(st) prints the recorded error
 * through it once, now; sr_error_emitted() tells main's own report that
 * it was printed already.  Without a printer, emit does nothing. */
void sr_error_set_printer(void (*printer)(sr_status st));
void sr_error_emit(sr_status st);
bool sr_error_emitted(void);

/* The one message a failing process ends with, when two threads witness
 * the same failure (main reporting a peer's loss while the PMIx
 * lost-connection handler or the parent watch sees the launcher die, or
 * the NCCL watchdog aborts the communicators).
 * sr_error_final_claim returns true to the first caller in the process,
 * which prints and then calls sr_error_final_done; every later caller
 * gets false after waiting (up to 20 s: the NCCL watchdog's claim covers
 * its abort and post-mortem) for that message to be out, and
 * prints nothing — so a rank's stderr ends with one error, and the
 * process never exits between a claim and its message.  From the claim
 * on, only the claiming thread's log lines are written (a step's line
 * from main while a witness ends the process would follow the error). */
bool sr_error_final_claim(void);
void sr_error_final_done(void);

/* A background thread's first failure; see the file comment. */
typedef struct {
    pthread_mutex_t mu;
    sr_status st;
    char msg[1024];
} sr_sticky;
void sr_sticky_init(sr_sticky *s);
void sr_sticky_destroy(sr_sticky *s);
/* Records (st, message) unless a failure is already recorded; returns true
 * when this call recorded it.  Thread-safe. */
bool sr_sticky_set(sr_sticky *s, sr_status st, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* The recorded status (SR_OK when none), without touching messages. */
sr_status sr_sticky_status(sr_sticky *s);
/* The recorded status, with its message made this thread's error message
 * (SR_OK and nothing recorded when none). */
sr_status sr_sticky_raise(sr_sticky *s);

/* Logging.  Every line goes to stderr.  Warnings and errors carry the rank
 * when the job has more than one rank (sr_log_set_rank).  Info lines are
 * printed by rank 0 only unless `all_ranks` is set. */
void sr_log_set_rank(int rank, int world_size);
/* Every later line of the process starts with "[tag] " after the program
 * name (an emulated device's run says so on every line); NULL or "": no
 * tag.  Set once, before threads log. */
void sr_log_set_tag(const char *tag);
/* The calling thread's own rank (a virtual rank's threads, tests; -1:
 * the process's again).  sr_log_rank answers it on that thread. */
void sr_log_bind_rank(int rank, int world_size);
int sr_log_rank(void);
/* --verbose: the lines a run seldom needs are printed too (set once, before
 * threads log); sr_log_verbose answers it. */
void sr_log_set_verbose(bool on);
bool sr_log_verbose(void);
void sr_log_info(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void sr_log_info_all(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void sr_log_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void sr_log_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* A progress line: "\rshardrun: " and the text, no newline, over the last
 * one; the next log line blanks it first.  For a terminal (the caller
 * checks isatty and that one rank writes to it). */
void sr_log_progress(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* `s` fit for a message on a terminal, into out[0..n) (NUL-terminated),
 * cut with "..." (between characters) when it does not fit: valid UTF-8
 * as it is; control characters (C0, DEL and C1), invisible characters and
 * direction marks (U+200B..U+200F, U+202A..U+202E and their kind), bytes
 * that are not valid UTF-8 and backslashes escaped (\n, \\, \xHH per
 * byte).  A name read
 * from a file or a directory, or generated text.  The one escaper:
 * sr_escape_n takes s[0 .. len) (NULs escaped). */
const char *sr_escape(const char *s, char *out, size_t n);
const char *sr_escape_n(const void *s, size_t len, char *out, size_t n);

#endif
