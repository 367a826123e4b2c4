/* status.h — the one table of error statuses, their exit codes and messages.
 *
 * Library code never exits: it records a message with sr_error() and returns
 * an sr_status.  Only main() turns a status into an exit code, through
 * sr_status_exit_code(), so the mapping to sysexits.h lives here alone
 * (DESIGN §7).  Messages are kept in a per-thread buffer; the newest error
 * wins. */
#ifndef SR_STATUS_H
#define SR_STATUS_H

#include <stdarg.h>

/* X(name, exit code, short meaning) */
#define SR_STATUS_TABLE(X)                                                     \
    X(SR_OK, 0, "success")                                                     \
    X(SR_ERR_TRAIN, 1, "training failed")                                      \
    X(SR_ERR_USAGE, 64, "bad command line")                                    \
    X(SR_ERR_DATA, 65, "malformed data or checkpoint")                         \
    X(SR_ERR_NOINPUT, 66, "input missing or unreadable")                       \
    X(SR_ERR_PEER, 69, "a peer failed or timed out")                           \
    X(SR_ERR_INTERNAL, 70, "internal error")                                   \
    X(SR_ERR_CANTCREAT, 73, "cannot create output")                            \
    X(SR_ERR_IO, 74, "I/O error")                                              \
    X(SR_PREEMPTED, 75, "preempted, checkpoint saved, run again")              \
    X(SR_ERR_CONFIG, 78, "invalid job file or launch")

typedef enum {
#define SR_STATUS_ENUM(name, code, msg) name,
    SR_STATUS_TABLE(SR_STATUS_ENUM)
#undef SR_STATUS_ENUM
    SR_STATUS_COUNT
} sr_status;

/* The process exit code (sysexits.h value) for a status. */
int sr_status_exit_code(sr_status st);
/* A short constant description of a status. */
const char *sr_status_str(sr_status st);

/* Records a printf-formatted message for the caller to report and returns
 * st, so library code can write `return sr_error(SR_ERR_DATA, "...", ...)`. */
sr_status sr_error(sr_status st, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* The newest recorded message ("" when none).  Valid until the next
 * sr_error() on this thread. */
const char *sr_error_message(void);
/* Forgets the recorded message. */
void sr_error_clear(void);

/* Logging.  Every line goes to stderr.  Warnings and errors carry the rank
 * when the job has more than one rank (sr_log_set_rank).  Info lines are
 * printed by rank 0 only unless `all_ranks` is set. */
void sr_log_set_rank(int rank, int world_size);
int sr_log_rank(void);
void sr_log_info(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void sr_log_info_all(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void sr_log_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void sr_log_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
