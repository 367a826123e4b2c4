/* signals.c — the process's signal handlers and its registry of open
 * temporaries; see signals.h.
 *
 * The registry is read by a handler that may interrupt any thread, so it
 * takes no lock and never moves: fixed chunks of slots, each chunk
 * published once and kept until exit.  A slot's path is written while the
 * slot is unused and published by setting `used` (release); a handler
 * reads `used` (acquire), then the path.  A temporary cannot escape the
 * handler between its creation and its registration: the creating thread
 * holds the terminating signals blocked and counts itself in `creating`
 * (sr_signals_hold .. sr_signals_track), and a handler first marks the
 * process dying, then waits for `creating` to drain (a thread that holds
 * after that stops: the process is about to end), then removes what is
 * registered. */
#include "srconfig.h"

#include "signals.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define CHUNK_SLOTS 32
#define MAX_CHUNKS 64 /* 2,048 temporaries at once: data prepare's shards */

typedef struct {
    int used; /* 1: holds a temporary (published last) */
    char path[PATH_MAX];
} slot;

typedef struct {
    slot s[CHUNK_SLOTS];
} chunk;

static chunk *chunks[MAX_CHUNKS];
static int nchunks;
static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
static int dying;    /* a terminating handler runs: no temporary is created from now on */
static int creating; /* threads between sr_signals_hold and their registration */
static _Thread_local sigset_t held_mask;

static const struct {
    int sig;
    const char *name;
} names[] = {{SIGHUP, "SIGHUP"},   {SIGINT, "SIGINT"},   {SIGQUIT, "SIGQUIT"}, {SIGUSR1, "SIGUSR1"},
             {SIGUSR2, "SIGUSR2"}, {SIGTERM, "SIGTERM"}, {SIGALRM, "SIGALRM"}, {SIGXCPU, "SIGXCPU"}};

const char *sr_signals_name(int sig) {
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (names[i].sig == sig)
            return names[i].name;
    return "signal";
}

static void terminating_set(sigset_t *set) {
    sigemptyset(set);
    sigaddset(set, SIGINT);
    sigaddset(set, SIGTERM);
    sigaddset(set, SIGHUP);
}

void sr_signals_hold(void) {
    sigset_t set;
    terminating_set(&set);
    pthread_sigmask(SIG_BLOCK, &set, &held_mask);
    __atomic_add_fetch(&creating, 1, __ATOMIC_SEQ_CST);
    if (__atomic_load_n(&dying, __ATOMIC_SEQ_CST)) {
        /* another thread's handler is ending the process: create nothing */
        __atomic_sub_fetch(&creating, 1, __ATOMIC_SEQ_CST);
        for (;;)
            pause();
    }
}

void sr_signals_release(void) {
    __atomic_sub_fetch(&creating, 1, __ATOMIC_SEQ_CST);
    pthread_sigmask(SIG_SETMASK, &held_mask, NULL); /* a pending signal is handled now */
}

int sr_signals_track(const char *path) {
    size_t len = strlen(path);
    int h = -1;
    if (len < PATH_MAX) {
        pthread_mutex_lock(&reg_lock);
        for (int c = 0; c < nchunks && h < 0; c++)
            for (int i = 0; i < CHUNK_SLOTS && h < 0; i++)
                if (!chunks[c]->s[i].used)
                    h = c * CHUNK_SLOTS + i;
        if (h < 0 && nchunks < MAX_CHUNKS) {
            /* plain calloc: a registry that cannot grow tracks nothing more
             * (the normal paths still remove the file), not a failed
             * command */
            chunk *c = calloc(1, sizeof *c);
            if (c) {
                __atomic_store_n(&chunks[nchunks], c, __ATOMIC_RELEASE);
                h = nchunks * CHUNK_SLOTS;
                __atomic_store_n(&nchunks, nchunks + 1, __ATOMIC_RELEASE);
            }
        }
        if (h >= 0) {
            slot *s = &chunks[h / CHUNK_SLOTS]->s[h % CHUNK_SLOTS];
            memcpy(s->path, path, len + 1);
            __atomic_store_n(&s->used, 1, __ATOMIC_SEQ_CST);
        }
        pthread_mutex_unlock(&reg_lock);
    }
    sr_signals_release();
    return h;
}

void sr_signals_untrack(int h) {
    if (h < 0)
        return;
    pthread_mutex_lock(&reg_lock);
    __atomic_store_n(&chunks[h / CHUNK_SLOTS]->s[h % CHUNK_SLOTS].used, 0, __ATOMIC_SEQ_CST);
    pthread_mutex_unlock(&reg_lock);
}

void sr_signals_remove_temporaries(void) {
    int saved = errno;
    int n = __atomic_load_n(&nchunks, __ATOMIC_ACQUIRE);
    for (int c = 0; c < n; c++) {
        chunk *ch = __atomic_load_n(&chunks[c], __ATOMIC_ACQUIRE);
        for (int i = 0; ch && i < CHUNK_SLOTS; i++) {
            slot *s = &ch->s[i];
            if (!__atomic_load_n(&s->used, __ATOMIC_SEQ_CST))
                continue;
            char copy[PATH_MAX];
            memcpy(copy, s->path, sizeof copy);
            copy[sizeof copy - 1] = '\0';
            if (copy[0])
                unlink(copy);
        }
    }
    errno = saved;
}

/* ------------------------------------------------------------------------ */
/* handlers */

static void (*records[NSIG])(int);
static bool (*dumper)(const char *reason, const char *detail); /* flight.h's, while a recorder is on */

void sr_signals_set_dumper(bool (*dump)(const char *reason, const char *detail)) {
    __atomic_store_n(&dumper, dump, __ATOMIC_RELEASE);
}

static void dump_now(const char *reason, const char *detail) {
    bool (*d)(const char *, const char *) = __atomic_load_n(&dumper, __ATOMIC_ACQUIRE);
    if (d)
        d(reason, detail);
}

/* A dump of the flight recorder for SIGINT and SIGTERM (not a final one:
 * a preemption's own dump replaces it). */
static void dump_for(int sig) {
    if (sig != SIGINT && sig != SIGTERM)
        return;
    char reason[32] = "signal ";
    const char *n = sr_signals_name(sig);
    size_t k = 7;
    for (; *n && k + 1 < sizeof reason; n++)
        reason[k++] = *n; /* (no strcat: only async-signal-safe calls here) */
    reason[k] = '\0';
    dump_now(reason, "the process received a terminating signal");
}

static void on_terminate(int sig) {
    __atomic_store_n(&dying, 1, __ATOMIC_SEQ_CST);
    /* a thread creating a temporary registers it first (at most 1 s) */
    for (int i = 0; i < 1000 && __atomic_load_n(&creating, __ATOMIC_SEQ_CST) > 0; i++) {
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    sr_signals_remove_temporaries();
    dump_for(sig);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = SIG_DFL;
    sigemptyset(&sa.sa_mask);
    sigaction(sig, &sa, NULL);
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, sig);
    pthread_sigmask(SIG_UNBLOCK, &set, NULL);
    raise(sig);
}

static void on_record(int sig) {
    int saved = errno;
    dump_for(sig);
    void (*record)(int) = records[sig];
    if (record)
        record(sig);
    errno = saved;
}

static void on_quit(int sig) {
    (void)sig;
    /* never waits: the thread it interrupted may be the one dumping */
    dump_now("sigquit", "SIGQUIT: a dump on request; the run goes on");
}

static int install(int sig, void (*fn)(int)) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = fn;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    return sigaction(sig, &sa, NULL);
}

void sr_signals_init(void) {
    /* a write to a closed pipe is an I/O error to report, not a silent
     * death; a file-size limit (ulimit -f) makes a write fail with EFBIG,
     * which every writer reports (74, naming its file) after removing its
     * temporary file */
    signal(SIGPIPE, SIG_IGN);
    signal(SIGXFSZ, SIG_IGN);
    /* a signal the process was started with ignored stays ignored (nohup's
     * SIGHUP, SIGINT of a shell's background job) */
    const int terminating[] = {SIGINT, SIGTERM, SIGHUP};
    for (int i = 0; i < 3; i++) {
        struct sigaction old;
        if (sigaction(terminating[i], NULL, &old) == 0 && old.sa_handler != SIG_IGN)
            install(terminating[i], on_terminate);
    }
}

sr_status sr_signals_catch(int sig, void (*record)(int)) {
    if (sig <= 0 || sig >= NSIG)
        return sr_error(SR_ERR_INTERNAL, "cannot catch signal %d", sig);
    records[sig] = record;
    if (install(sig, on_record) != 0)
        return sr_error(SR_ERR_INTERNAL, "cannot install the handler for %s: %s", sr_signals_name(sig),
                        strerror(errno));
    return SR_OK;
}

void sr_signals_quit_dumps(void) {
    if (__atomic_load_n(&dumper, __ATOMIC_ACQUIRE))
        install(SIGQUIT, on_quit);
}
