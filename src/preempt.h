/* preempt.h — preemption signals.
 *
 * preempt owns what a preemption signal means: its handler (installed
 * through signals.h, which owns every handler) only records which signal
 * came first and when (async-signal-safe); the training loop asks
 * sr_preempt_pending() at every micro-batch and during evaluation and
 * makes the ranks agree on a stop step. */
#ifndef SR_PREEMPT_H
#define SR_PREEMPT_H

#include "config.h"
#include "world.h"

#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include "status.h"

/* Installs the handlers for the named signals (without SIG; CONT is
 * ignored with a warning); they stay until the process exits. */
sr_status sr_preempt_install(char *const *names, int n);

bool sr_preempt_pending(void);
/* The first signal this rank received ("SIGUSR1"), or NULL. */
const char *sr_preempt_signal_name(void);
/* The seconds since the first signal received (wall clock). */
double sr_preempt_since(void);

/* Logs once per process, on every rank, which signal arrived and when:
 * "preemption: rank R received SIGUSR1 at 12:00:00.000Z <context>".
 * Nothing before a signal or after the first notice. */
void sr_preempt_notice(int rank, const char *context);

/* For the test suite (SHARDRUN_TEST_PREEMPT_AT=STEP[@RANK], testhook.h):
 * sends this process the first configured signal, through the real
 * handler, when `step` (1-based, the step being trained) is STEP, on every
 * rank or only on world rank RANK (a thread with a bound view: sets that
 * view's flag instead). */
void sr_preempt_test_hook(int64_t step, int rank);

/* The flag as one rank sees it, for virtual ranks (threads of one process
 * that each run a rank, tests): a thread that binds a view sees its view's
 * signal first, else the process's (a real signal reaches every rank of
 * the process); its notice is logged once per view.  NULL unbinds.
 * sr_preempt_view_raise records `sig` in the view (the first one stays). */
typedef struct {
    int sig;
    struct timespec when;
    bool noticed;
} sr_preempt_view;
void sr_preempt_bind(sr_preempt_view *v);
void sr_preempt_view_raise(sr_preempt_view *v, int sig);

/* After the preemption checkpoint committed: the exit status per
 * preemption.requeue — exit (preemption.exit_status), or scontrol: rank 0
 * asks Slurm to requeue the job (`scontrol requeue $SLURM_JOB_ID`) and
 * every rank exits 0 when that worked, preemption.exit_status when it did
 * not or outside a Slurm job (a warning). */
int sr_preempt_exit_status(const sr_config *cfg, const sr_world *w);

/* The lead a preemption needs before the kill, in whole seconds: the step
 * in flight and the save, twice over (a slow step, a slow file system),
 * plus margin_s for the agreement, the exit and a file system's first
 * write.  `shardrun plan` prints it as the #SBATCH --signal lead (from
 * its estimates); preemption.before_end saves when less remains (from the
 * run's measured times, margin_s = preemption.end_margin_s). */
double sr_preempt_lead_s(double step_s, double save_s, double margin_s);

#endif
