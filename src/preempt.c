/* preempt.c — preemption signal handlers; see preempt.h. */
#include "srconfig.h"

#include "preempt.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "signals.h"
#include "testhook.h"

extern char **environ;

static volatile sig_atomic_t got_signal;
static struct timespec got_time;
static int installed[16], ninstalled;
static bool noticed;
static _Thread_local sr_preempt_view *view; /* a virtual rank's own (tests) */

/* preemption.signals' names (without SIG) */
static const struct {
    const char *name;
    int sig;
} sigs[] = {{"HUP", SIGHUP},   {"INT", SIGINT},   {"QUIT", SIGQUIT}, {"USR1", SIGUSR1},
            {"USR2", SIGUSR2}, {"TERM", SIGTERM}, {"ALRM", SIGALRM}, {"XCPU", SIGXCPU}};

/* signals.h calls it from its handler: only async-signal-safe work */
static void on_signal(int sig) {
    if (!got_signal) {
        got_time = sr_clock_wall_ts();
        got_signal = sig;
    }
}

static const char *signame(int sig) { return sr_signals_name(sig); }

sr_status sr_preempt_install(char *const *names, int n) {
    for (int i = 0; i < n; i++) {
        if (strcmp(names[i], "CONT") == 0)
            sr_log_warn("preemption.signals: SIGCONT is ignored (Slurm sends it along with every SIGTERM; it never "
                        "means stop)");
        for (size_t j = 0; j < sizeof sigs / sizeof sigs[0]; j++)
            if (strcmp(names[i], sigs[j].name) == 0 && ninstalled < 16) {
                sr_status st = sr_signals_catch(sigs[j].sig, on_signal);
                if (st != SR_OK)
                    return st;
                installed[ninstalled++] = sigs[j].sig;
            }
    }
    return SR_OK;
}

void sr_preempt_bind(sr_preempt_view *v) { view = v; }

void sr_preempt_view_raise(sr_preempt_view *v, int sig) {
    if (!v->sig) {
        v->when = sr_clock_wall_ts();
        v->sig = sig;
    }
}

/* The signal this thread's rank sees first (its view's, else the
 * process's), and when. */
static int seen(struct timespec *when) {
    if (view && view->sig) {
        *when = view->when;
        return view->sig;
    }
    *when = got_time;
    return got_signal;
}

bool sr_preempt_pending(void) {
    struct timespec t;
    return seen(&t) != 0;
}

const char *sr_preempt_signal_name(void) {
    struct timespec t;
    int sig = seen(&t);
    return sig ? signame(sig) : NULL;
}

static double preempt_time(void) {
    struct timespec t;
    seen(&t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

double sr_preempt_since(void) { return sr_clock_wall_s() - preempt_time(); }

void sr_preempt_notice(int rank, const char *context) {
    struct timespec t;
    int sig = seen(&t);
    bool *done = view ? &view->noticed : &noticed;
    if (*done || !sig)
        return;
    *done = true;
    char when[32];
    struct tm tm;
    time_t sec = t.tv_sec;
    gmtime_r(&sec, &tm);
    size_t k = strftime(when, sizeof when, "%H:%M:%S", &tm);
    snprintf(when + k, sizeof when - k, ".%03dZ", (int)(t.tv_nsec / 1000000));
    sr_log_info_all("preemption: rank %d received %s at %s %s", rank, signame(sig), when, context);
}

void sr_preempt_test_hook(int64_t step, int rank) {
    const sr_testhooks *h = sr_testhook();
    if (h->preempt_step < 0 || ninstalled == 0 || h->preempt_step != step)
        return;
    if (h->preempt_rank >= 0 && h->preempt_rank != rank)
        return;
    if (view)
        sr_preempt_view_raise(view, installed[0]); /* a virtual rank: its own flag only */
    else
        raise(installed[0]);
}

/* ------------------------------------------------------------------------ */
/* after the preemption checkpoint */

/* preemption.requeue scontrol: rank 0 asks Slurm to requeue this job.
 * Returns true when scontrol succeeded. */
static bool scontrol_requeue(const char *job) {
    char *argv[] = {"scontrol", "requeue", (char *)job, NULL};
    pid_t pid;
    int rc = posix_spawnp(&pid, "scontrol", NULL, NULL, argv, environ);
    if (rc != 0) {
        sr_log_error("preemption: cannot run scontrol requeue %s: %s", job, strerror(rc));
        return false;
    }
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        sr_log_error("preemption: scontrol requeue %s failed (status %d)", job,
                     WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
        return false;
    }
    sr_log_info("preemption: scontrol requeue %s: requested", job);
    return true;
}

int sr_preempt_exit_status(const sr_config *cfg, const sr_world *w) {
    int code = (int)cfg->preempt_exit_status;
    if (cfg->preempt_requeue == SR_REQUEUE_SCONTROL) {
        const char *job = getenv("SLURM_JOB_ID");
        if (!job || !*job)
            sr_log_warn("preemption.requeue is scontrol but SLURM_JOB_ID is not set (not a Slurm job): exiting "
                        "with preemption.exit_status %d instead",
                        code);
        else if (w->rank != 0)
            code = 0;
        else
            code = scontrol_requeue(job) ? 0 : code;
    }
    return code;
}

double sr_preempt_lead_s(double step_s, double save_s, double margin_s) {
    return ceil(2.0 * (step_s + save_s) + margin_s);
}
