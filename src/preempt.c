/* preempt.c — preemption signal handlers; see preempt.h. */
#include "srconfig.h"

#include "preempt.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static volatile sig_atomic_t got_signal, got_count;
static struct timespec got_time;
static int installed[16], ninstalled;

static const struct {
    const char *name;
    int sig;
} sigs[] = {{"HUP", SIGHUP},   {"INT", SIGINT},   {"QUIT", SIGQUIT}, {"USR1", SIGUSR1},
            {"USR2", SIGUSR2}, {"TERM", SIGTERM}, {"ALRM", SIGALRM}, {"XCPU", SIGXCPU}};

static void on_signal(int sig) {
    /* only async-signal-safe work: record and return */
    if (!got_signal) {
        clock_gettime(CLOCK_REALTIME, &got_time);
        got_signal = sig;
    }
    if (got_count < 1000000)
        got_count++;
}

const char *sr_preempt_signame(int sig) {
    static const char *const names[] = {"SIGHUP",  "SIGINT",  "SIGQUIT", "SIGUSR1",
                                        "SIGUSR2", "SIGTERM", "SIGALRM", "SIGXCPU"};
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
        if (sigs[i].sig == sig)
            return names[i];
    return "signal";
}

sr_status sr_preempt_install(const sr_config *cfg) {
    signal(SIGXFSZ, SIG_IGN);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    for (int i = 0; i < cfg->preempt_signals.count; i++) {
        if (strcmp(cfg->preempt_signals.items[i], "CONT") == 0)
            sr_log_warn("preemption.signals: SIGCONT is ignored (Slurm sends it along with every SIGTERM; it never "
                        "means stop)");
        for (size_t j = 0; j < sizeof sigs / sizeof sigs[0]; j++)
            if (strcmp(cfg->preempt_signals.items[i], sigs[j].name) == 0 && ninstalled < 16) {
                if (sigaction(sigs[j].sig, &sa, NULL) != 0)
                    return sr_error(SR_ERR_INTERNAL, "cannot install the handler for SIG%s", sigs[j].name);
                installed[ninstalled++] = sigs[j].sig;
            }
    }
    return SR_OK;
}

bool sr_preempt_pending(void) { return got_signal != 0; }
int sr_preempt_signal(void) { return got_signal; }
int sr_preempt_count(void) { return got_count; }
double sr_preempt_time(void) { return (double)got_time.tv_sec + 1e-9 * (double)got_time.tv_nsec; }

void sr_preempt_test_hook(int64_t step, int rank) {
    const char *e = getenv("SHARDRUN_TEST_PREEMPT_AT");
    if (!e || !*e || ninstalled == 0 || strtoll(e, NULL, 10) != step)
        return;
    const char *at = strchr(e, '@');
    if (at && atoi(at + 1) != rank)
        return;
    raise(installed[0]);
}
