/* preempt.c — preemption signal handlers; see preempt.h. */
#include "srconfig.h"

#include "preempt.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "testhook.h"

static volatile sig_atomic_t got_signal;
static struct timespec got_time;
static int installed[16], ninstalled;
static bool noticed;

static const struct {
    const char *name, *full;
    int sig;
} sigs[] = {{"HUP", "SIGHUP", SIGHUP},    {"INT", "SIGINT", SIGINT},    {"QUIT", "SIGQUIT", SIGQUIT},
            {"USR1", "SIGUSR1", SIGUSR1}, {"USR2", "SIGUSR2", SIGUSR2}, {"TERM", "SIGTERM", SIGTERM},
            {"ALRM", "SIGALRM", SIGALRM}, {"XCPU", "SIGXCPU", SIGXCPU}};

static void on_signal(int sig) {
    /* only async-signal-safe work: record and return */
    if (!got_signal) {
        clock_gettime(CLOCK_REALTIME, &got_time);
        got_signal = sig;
    }
}

/* "SIGUSR1" etc. */
static const char *signame(int sig) {
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
        if (sigs[i].sig == sig)
            return sigs[i].full;
    return "signal";
}

sr_status sr_preempt_install(char *const *names, int n) {
    signal(SIGXFSZ, SIG_IGN);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    for (int i = 0; i < n; i++) {
        if (strcmp(names[i], "CONT") == 0)
            sr_log_warn("preemption.signals: SIGCONT is ignored (Slurm sends it along with every SIGTERM; it never "
                        "means stop)");
        for (size_t j = 0; j < sizeof sigs / sizeof sigs[0]; j++)
            if (strcmp(names[i], sigs[j].name) == 0 && ninstalled < 16) {
                if (sigaction(sigs[j].sig, &sa, NULL) != 0)
                    return sr_error(SR_ERR_INTERNAL, "cannot install the handler for SIG%s", sigs[j].name);
                installed[ninstalled++] = sigs[j].sig;
            }
    }
    return SR_OK;
}

bool sr_preempt_pending(void) { return got_signal != 0; }
double sr_preempt_time(void) { return (double)got_time.tv_sec + 1e-9 * (double)got_time.tv_nsec; }

void sr_preempt_notice(int rank, const char *context) {
    if (noticed || !got_signal)
        return;
    noticed = true;
    char when[32];
    struct tm tm;
    time_t sec = got_time.tv_sec;
    gmtime_r(&sec, &tm);
    size_t k = strftime(when, sizeof when, "%H:%M:%S", &tm);
    snprintf(when + k, sizeof when - k, ".%03dZ", (int)(got_time.tv_nsec / 1000000));
    sr_log_info_all("preemption: rank %d received %s at %s %s", rank, signame(got_signal), when, context);
}

void sr_preempt_test_hook(int64_t step, int rank) {
    const sr_testhooks *h = sr_testhook();
    if (h->preempt_step < 0 || ninstalled == 0 || h->preempt_step != step)
        return;
    if (h->preempt_rank >= 0 && h->preempt_rank != rank)
        return;
    raise(installed[0]);
}
