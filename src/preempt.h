/* preempt.h — preemption signals.
 *
 * preempt owns the signal handlers for preemption.signals: the handler only
 * records which signal came, when and how often (async-signal-safe); the
 * training loop asks sr_preempt_pending() at every micro-batch and during
 * evaluation and makes the ranks agree on a stop step.  SIGXFSZ is ignored
 * so a file-size limit fails a write with EFBIG (an I/O error with a
 * message) instead of killing the process mid-checkpoint. */
#ifndef SR_PREEMPT_H
#define SR_PREEMPT_H

#include <stdbool.h>
#include <stdint.h>

#include "config.h"
#include "status.h"

/* Installs the handlers for cfg->preempt_signals (names without SIG); they
 * stay until the process exits. */
sr_status sr_preempt_install(const sr_config *cfg);

bool sr_preempt_pending(void);
/* The first signal received (0 when none), its wall-clock time, and how many
 * have arrived. */
int sr_preempt_signal(void);
double sr_preempt_time(void);
int sr_preempt_count(void);
/* "SIGUSR1" etc. */
const char *sr_preempt_signame(int sig);

/* For the test suite: SHARDRUN_TEST_PREEMPT_AT=STEP[@RANK] sends this
 * process the first configured signal (through the real handler) when
 * `step` (1-based, the step being trained) reaches STEP, on every rank or
 * only on world rank RANK. */
void sr_preempt_test_hook(int64_t step, int rank);

#endif
