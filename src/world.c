/* world.c — the bootstrap (PMIx, else Slurm's PMI2) and the key-value
 * all-gather through it; see world.h. */
#include "srconfig.h"

#include "world.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <pmix.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "counts.h"
#include "flight.h"
#include "pmi2.h"
#include "signals.h"
#include "testhook.h"

static int env_int(const char *name, int fallback) {
    const char *v = getenv(name);
    if (!v || !*v)
        return fallback;
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    return *end == '\0' && !errno && x >= INT_MIN && x <= INT_MAX ? (int)x : fallback;
}

bool sr_world_in_multitask_srun(void) {
    if (!getenv("SLURM_STEP_ID"))
        return false;
    int n = env_int("SLURM_STEP_NUM_TASKS", env_int("SLURM_NTASKS", 1));
    return n > 1;
}

/* Reads an integer attribute whatever integer type the server chose
 * (Slurm and mpirun disagree: UINT32, UINT16, INT, PROC_RANK...). */
static bool get_int(const pmix_proc_t *p, const char *key, int *out) {
    pmix_value_t *v = NULL;
    if (PMIx_Get(p, key, NULL, 0, &v) != PMIX_SUCCESS || !v)
        return false;
    bool ok = true;
    switch (v->type) {
    case PMIX_UINT32:
        *out = (int)v->data.uint32;
        break;
    case PMIX_UINT16:
        *out = v->data.uint16;
        break;
    case PMIX_UINT8:
        *out = v->data.uint8;
        break;
    case PMIX_INT:
        *out = v->data.integer;
        break;
    case PMIX_INT32:
        *out = v->data.int32;
        break;
    case PMIX_UINT:
        *out = (int)v->data.uint;
        break;
    case PMIX_PROC_RANK:
        *out = (int)v->data.rank;
        break;
    case PMIX_UINT64:
        *out = (int)v->data.uint64;
        break;
    default:
        ok = false;
    }
    PMIX_VALUE_RELEASE(v);
    return ok;
}

static bool get_string(const pmix_proc_t *p, const char *key, char *out, size_t n) {
    pmix_value_t *v = NULL;
    if (PMIx_Get(p, key, NULL, 0, &v) != PMIX_SUCCESS || !v)
        return false;
    bool ok = v->type == PMIX_STRING && v->data.string;
    if (ok)
        snprintf(out, n, "%s", v->data.string);
    PMIX_VALUE_RELEASE(v);
    return ok;
}

static pmix_proc_t me;

/* The bootstrap watchdog.  PMIx_Init only connects to the local PMIx server
 * (slurmstepd, mpirun), but a server that accepted the connection and never
 * finishes the handshake leaves PMIx_Init waiting on a condition variable
 * with no timeout of its own (libpmix 4.2 has no PMIX_TIMEOUT for init;
 * seen under mpirun when a peer exits while this rank is still starting).
 * PMI2 has no timeout at all: PMI2_Init and PMI2_KVS_Fence wait for
 * slurmstepd, and a fence waits for a rank that died before it forever.
 * That would hold the allocation until the wall-clock limit, so a thread
 * ends the process with 69 if the call has not returned by the deadline.
 * Nothing is held yet at that point (no checkpoint written, the fcntl lock
 * released by the kernel), so _exit is all the cleanup there is. */
#define SR_PMIX_INIT_TIMEOUT_DEFAULT 300

typedef struct {
    pthread_mutex_t lock;
    pthread_cond_t done_cv;
    bool done;
    long seconds;
    const char *what; /* the call */
    const char *why;  /* what its not returning means, with a hint */
} watchdog;

static void *watchdog_main(void *arg) {
    watchdog *wd = arg;
    struct timespec deadline = sr_clock_mono_after((double)wd->seconds);
    pthread_mutex_lock(&wd->lock);
    int rc = 0;
    while (!wd->done && rc != ETIMEDOUT)
        rc = pthread_cond_timedwait(&wd->done_cv, &wd->lock, &deadline);
    bool expired = !wd->done;
    pthread_mutex_unlock(&wd->lock);
    if (expired) {
        if (sr_error_final_claim()) {
            sr_log_error("%s did not return within %ld s: %s", wd->what, wd->seconds, wd->why);
            sr_error_final_done();
        }
        fflush(NULL);
        sr_signals_remove_temporaries(); /* what a signal would remove */
        _exit(sr_status_exit_code(SR_ERR_PEER));
    }
    return NULL;
}

static bool watchdog_start(watchdog *wd, pthread_t *th) {
    if (wd->seconds <= 0)
        return false;
    pthread_condattr_t ca;
    pthread_mutex_init(&wd->lock, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&wd->done_cv, &ca);
    pthread_condattr_destroy(&ca);
    bool watched = pthread_create(th, NULL, watchdog_main, wd) == 0;
    if (!watched) {
        pthread_cond_destroy(&wd->done_cv);
        pthread_mutex_destroy(&wd->lock);
    }
    return watched;
}

static void watchdog_stop(watchdog *wd, pthread_t th) {
    pthread_mutex_lock(&wd->lock);
    wd->done = true;
    pthread_cond_signal(&wd->done_cv);
    pthread_mutex_unlock(&wd->lock);
    pthread_join(th, NULL);
    pthread_cond_destroy(&wd->done_cv);
    pthread_mutex_destroy(&wd->lock);
}

/* SHARDRUN_PMIX_INIT_TIMEOUT: whole seconds, 0 = wait forever; unset means
 * SR_PMIX_INIT_TIMEOUT_DEFAULT. */
static sr_status init_timeout_from_env(long *seconds) {
    *seconds = SR_PMIX_INIT_TIMEOUT_DEFAULT;
    const char *v = getenv("SHARDRUN_PMIX_INIT_TIMEOUT");
    if (!v || !*v)
        return SR_OK;
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || *end != '\0' || x < 0 || x > 86400)
        return sr_error(SR_ERR_CONFIG,
                        "SHARDRUN_PMIX_INIT_TIMEOUT='%s' is not a number of seconds from 0 to 86400 (hint: unset it "
                        "for the default %d s; 0 waits forever)",
                        v, SR_PMIX_INIT_TIMEOUT_DEFAULT);
    *seconds = x;
    return SR_OK;
}

/* PMIx_Init under the watchdog (none when the limit is 0 or a thread cannot
 * be started: then PMIx_Init runs as it would without one). */
static pmix_status_t pmix_init_watched(long seconds) {
    char why[1024];
    const char *uri = getenv("PMIX_SERVER_URI41");
    if (!uri)
        uri = getenv("PMIX_SERVER_URI4");
    if (!uri)
        uri = getenv("PMIX_SERVER_URI3");
    snprintf(why, sizeof why,
             "the launcher's PMIx server%s%s accepted this process but never finished the handshake, so "
             "the launcher is failing or gone (hint: check the launcher's own messages; SHARDRUN_PMIX_INIT_TIMEOUT "
             "sets this limit in seconds)",
             uri ? " at " : "", uri ? uri : "");
    watchdog wd = {.done = false, .seconds = seconds, .what = "PMIx_Init", .why = why};
    pthread_t th;
    bool watched = watchdog_start(&wd, &th);
    pmix_status_t rc = PMIx_Init(&me, NULL, 0);
    if (watched)
        watchdog_stop(&wd, th);
    return rc;
}

/* Launcher death.  When the launcher dies (kill -9 of mpirun, a lost
 * slurmstepd) nothing else tells the ranks: their peers are alive and the
 * collectives go on, so they would train on, orphaned, holding the
 * checkpoint lock.  PMIx reports the lost connection to its server as an
 * event (PMIX_ERR_LOST_CONNECTION, raised on libpmix's progress thread):
 * the handler ends the process with 69 at once — no save (the launcher
 * that would requeue the job is gone; the last committed checkpoint
 * stays), the fcntl lock released by the kernel, a half-written save
 * directory removed by the next start.  Deregistered before
 * PMIx_Finalize, whose own disconnect must not look like a death. */
static size_t lost_handler_id;
static bool lost_handler_registered;

static void lost_connection_handler(size_t id, pmix_status_t status, const pmix_proc_t *source, pmix_info_t info[],
                                    size_t ninfo, pmix_info_t results[], size_t nresults,
                                    pmix_event_notification_cbfunc_fn_t cbfunc, void *cbdata) {
    (void)id, (void)source, (void)info, (void)ninfo, (void)results, (void)nresults;
    const char *uri = getenv("PMIX_SERVER_URI41");
    sr_flight_dump("lost launcher", "lost the connection to the launcher's PMIx server");
    if (sr_error_final_claim()) {
        sr_log_error("lost the connection to the launcher's PMIx server%s%s (%s): the launcher (mpirun, or Slurm's "
                     "slurmstepd) died; stopping without a checkpoint, the last committed one stays (hint: see the "
                     "launcher's node and its log; resubmit to resume)",
                     uri ? " at " : "", uri ? uri : "", PMIx_Error_string(status));
        sr_error_final_done();
    }
    if (cbfunc)
        cbfunc(PMIX_EVENT_ACTION_COMPLETE, NULL, 0, NULL, NULL, cbdata);
    sr_signals_remove_temporaries(); /* what a signal would remove */
    _exit(sr_status_exit_code(SR_ERR_PEER));
}

/* The parent, when it is the launcher.  A second witness of the launcher's
 * death, for a PMIx that does not report the lost connection: when this
 * process's parent is the PMIx server itself (mpirun started it directly),
 * the parent's death is the launcher's.  A wrapper shell or a login shell
 * under nohup is not the launcher: its death says nothing, so it is never
 * watched.  The parent is the server when it holds the socket listening on
 * the port of PMIX_SERVER_URI* (found through /proc/net/tcp{,6} and
 * /proc/PPID/fd: no library here answers "which process serves this
 * port"). */
static int server_port(void) {
    const char *names[] = {"PMIX_SERVER_URI41", "PMIX_SERVER_URI4", "PMIX_SERVER_URI3", "PMIX_SERVER_URI2"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        const char *v = getenv(names[i]);
        const char *tcp = v ? strstr(v, "tcp") : NULL;
        const char *colon = tcp ? strrchr(tcp, ':') : NULL;
        if (colon) {
            char *end;
            long port = strtol(colon + 1, &end, 10);
            if (end != colon + 1 && port > 0 && port < 65536)
                return (int)port;
        }
    }
    return -1;
}

/* The inode of a socket listening on `port` ("st" 0A in /proc/net/tcp). */
static unsigned long listening_inode(int port) {
    const char *tables[] = {"/proc/net/tcp", "/proc/net/tcp6"};
    for (int t = 0; t < 2; t++) {
        FILE *f = fopen(tables[t], "r");
        if (!f)
            continue;
        char line[512], local[128];
        unsigned st;
        unsigned long inode;
        while (fgets(line, sizeof line, f)) {
            /* sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode */
            if (sscanf(line, " %*s %127s %*s %x %*s %*s %*s %*s %*s %lu", local, &st, &inode) != 3 || st != 0x0A)
                continue;
            const char *colon = strrchr(local, ':');
            if (colon && strtol(colon + 1, NULL, 16) == port) {
                fclose(f);
                return inode;
            }
        }
        fclose(f);
    }
    return 0;
}

static bool holds_socket(pid_t pid, unsigned long inode) {
    char dir[64], want[64];
    snprintf(dir, sizeof dir, "/proc/%ld/fd", (long)pid);
    snprintf(want, sizeof want, "socket:[%lu]", inode);
    DIR *d = opendir(dir);
    if (!d)
        return false;
    bool found = false;
    struct dirent *de;
    while (!found && (de = readdir(d))) {
        char path[320], target[64];
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        ssize_t n = readlink(path, target, sizeof target - 1);
        if (n > 0) {
            target[n] = '\0';
            found = strcmp(target, want) == 0;
        }
    }
    closedir(d);
    return found;
}

/* The server kind the launcher messages name ("PMI2" after pmi2_init). */
static const char *server_kind = "PMIx";

static struct {
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t stop_cv;
    bool running, stop;
    pid_t parent;
} parent_watch = {.lock = PTHREAD_MUTEX_INITIALIZER};

static void *parent_watch_main(void *arg) {
    (void)arg;
    pthread_mutex_lock(&parent_watch.lock);
    while (!parent_watch.stop) {
        struct timespec t = sr_clock_mono_after(1);
        pthread_cond_timedwait(&parent_watch.stop_cv, &parent_watch.lock, &t);
        if (!parent_watch.stop && getppid() != parent_watch.parent) {
            sr_flight_dump("lost launcher", "the launcher (this rank's parent) exited");
            if (sr_error_final_claim()) {
                sr_log_error(
                    "the launcher (process %ld, this rank's parent and its %s server) exited: stopping without a "
                    "checkpoint, the last committed one stays (hint: see the launcher's node and its log; "
                    "resubmit to resume)",
                    (long)parent_watch.parent, server_kind);
                sr_error_final_done();
            }
            sr_signals_remove_temporaries(); /* what a signal would remove */
            _exit(sr_status_exit_code(SR_ERR_PEER));
        }
    }
    pthread_mutex_unlock(&parent_watch.lock);
    return NULL;
}

/* What sr_world_launcher_gone compares against: the server's port and its
 * listening socket as found at start (0 when not found: no witness). */
static struct {
    int port;
    unsigned long inode;
} server_socket;

/* Whether `pid` is Slurm's slurmstepd, the PMI2 server of its tasks
 * (/proc/PID/comm: PMI2 names no socket to look for). */
static bool is_slurmstepd(pid_t pid) {
    char path[64], comm[64] = "";
    snprintf(path, sizeof path, "/proc/%ld/comm", (long)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return false;
    bool ok = fgets(comm, sizeof comm, f) != NULL;
    fclose(f);
    return ok && strncmp(comm, "slurmstepd", 10) == 0;
}

static void watch_parent(void) {
    pid_t parent = getppid();
    if (!strcmp(server_kind, "PMIx")) {
        int port = server_port();
        unsigned long inode = port > 0 ? listening_inode(port) : 0;
        server_socket.port = port;
        server_socket.inode = inode;
        if (parent <= 1 || !inode || !holds_socket(parent, inode))
            return;
    } else if (parent <= 1 || !is_slurmstepd(parent))
        return;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&parent_watch.stop_cv, &ca);
    pthread_condattr_destroy(&ca);
    parent_watch.parent = parent;
    parent_watch.stop = false;
    parent_watch.running = pthread_create(&parent_watch.thread, NULL, parent_watch_main, NULL) == 0;
    if (!parent_watch.running)
        pthread_cond_destroy(&parent_watch.stop_cv);
}

static void unwatch_parent(void) {
    if (!parent_watch.running)
        return;
    pthread_mutex_lock(&parent_watch.lock);
    parent_watch.stop = true;
    pthread_cond_signal(&parent_watch.stop_cv);
    pthread_mutex_unlock(&parent_watch.lock);
    pthread_join(parent_watch.thread, NULL);
    pthread_cond_destroy(&parent_watch.stop_cv);
    parent_watch.running = false;
}

bool sr_world_launcher_gone(char *msg, size_t size, double grace_s) {
    if (!parent_watch.running && !server_socket.inode)
        return false;
    bool parent_gone = false, socket_gone = false;
    for (double waited = 0;; waited += 0.05) {
        parent_gone = parent_watch.running && getppid() != parent_watch.parent;
        socket_gone = server_socket.inode && listening_inode(server_socket.port) != server_socket.inode;
        if (parent_gone || socket_gone || waited >= grace_s)
            break;
        usleep(50000);
    }
    if (!parent_gone && !socket_gone)
        return false;
    if (parent_gone)
        snprintf(msg, size,
                 "the launcher (process %ld, this rank's parent and its %s server) exited: stopping without a "
                 "checkpoint, the last committed one stays (hint: see the launcher's node and its log; resubmit to "
                 "resume)",
                 (long)parent_watch.parent, server_kind);
    else
        snprintf(msg, size,
                 "lost the connection to the launcher's PMIx server (its socket on port %d is closed): the launcher "
                 "(mpirun, or Slurm's slurmstepd) died; stopping without a checkpoint, the last committed one stays "
                 "(hint: see the launcher's node and its log; resubmit to resume)",
                 server_socket.port);
    return true;
}

/* The blocking form (no callback) returns the handler's id, or a negative
 * status. */
static void watch_launcher(void) {
    pmix_status_t code = PMIX_ERR_LOST_CONNECTION;
    pmix_status_t rc = PMIx_Register_event_handler(&code, 1, NULL, 0, lost_connection_handler, NULL, NULL);
    if (rc >= 0) {
        lost_handler_id = (size_t)rc;
        lost_handler_registered = true;
    } else {
        sr_log_warn("cannot watch the launcher (PMIx_Register_event_handler: %s): if it dies, this rank notices only "
                    "when a peer does",
                    PMIx_Error_string(rc));
    }
}

/* The PMI2 bootstrap (srun --mpi=pmi2): rank and size from PMI2_Init,
 * the placement from PMI_process_mapping, the host from SLURMD_NODENAME,
 * the job id from Slurm's environment else PMI2's.  PMI2 reports no launcher death: the parent
 * watch (slurmstepd is the tasks' parent) is the witness. */
static sr_status pmi2_init(sr_world *w, long timeout_s) {
    watchdog wd = {.done = false,
                   .seconds = timeout_s,
                   .what = "PMI2_Init",
                   .why = "slurmstepd accepted this process but never answered, so the step is failing (hint: see "
                          "the step's and slurmd's messages; SHARDRUN_PMIX_INIT_TIMEOUT sets this limit in seconds)"};
    pthread_t th;
    bool watched = watchdog_start(&wd, &th);
    char id[256];
    sr_status st = sr_pmi2_init(&w->rank, &w->size, id, sizeof id);
    if (watched)
        watchdog_stop(&wd, th);
    if (st != SR_OK)
        return st;
    w->pmi2 = true;
    server_kind = "PMI2";
    if (w->size < 1 || w->rank < 0 || w->rank >= w->size) {
        sr_world_close(w);
        return sr_error(SR_ERR_PEER, "PMI2_Init gave rank %d of %d", w->rank, w->size);
    }
    st = sr_pmi2_placement(w->rank, w->size, &w->node_id, &w->local_rank, &w->local_size, &w->num_nodes);
    if (st != SR_OK) {
        sr_world_close(w);
        return st;
    }
    snprintf(w->nspace, sizeof w->nspace, "%s", id);
    /* the node's name as Slurm knows it (PMI2 has no host attribute;
     * slurmd sets it for the tasks it starts) */
    const char *node = getenv("SLURMD_NODENAME");
    if (node && *node)
        snprintf(w->host, sizeof w->host, "%s", node);
    if (!strcmp(w->job_id, "-") && id[0])
        snprintf(w->job_id, sizeof w->job_id, "%s", id);
    watch_parent();
    return SR_OK;
}

sr_status sr_world_init(sr_world *w) {
    memset(w, 0, sizeof *w);
    w->size = 1;
    w->local_size = 1;
    w->num_nodes = 1;
    if (gethostname(w->host, sizeof w->host) != 0)
        snprintf(w->host, sizeof w->host, "unknown");
    const char *jid = getenv("SLURM_JOB_ID");
    snprintf(w->job_id, sizeof w->job_id, "%s", jid && *jid ? jid : "-");
    const char *restart = getenv("SLURM_RESTART_COUNT");
    w->restart = restart && *restart ? strtoll(restart, NULL, 10) : 0;

    long init_timeout;
    sr_status st = init_timeout_from_env(&init_timeout);
    if (st != SR_OK)
        return st;
    pmix_status_t rc = pmix_init_watched(init_timeout);
    if (rc != PMIX_SUCCESS && sr_pmi2_environment())
        return pmi2_init(w, init_timeout);
    if (rc != PMIX_SUCCESS) {
        if (sr_world_in_multitask_srun())
            return sr_error(SR_ERR_CONFIG,
                            "launched by srun without --mpi=pmix or --mpi=pmi2: this is task %s of %s in step %s, but "
                            "no PMIx server answered (%s) and PMI2's environment (PMI_FD) is not set (hint: srun "
                            "--mpi=pmix shardrun ..., or srun --mpi=pmi2 where Slurm has no PMIx plugin; or export "
                            "SLURM_MPI_TYPE=pmix)",
                            getenv("SLURM_PROCID") ? getenv("SLURM_PROCID") : "?",
                            getenv("SLURM_STEP_NUM_TASKS") ? getenv("SLURM_STEP_NUM_TASKS")
                                                           : (getenv("SLURM_NTASKS") ? getenv("SLURM_NTASKS") : "?"),
                            getenv("SLURM_STEP_ID"), PMIx_Error_string(rc));
        return SR_OK; /* one process */
    }
    w->pmix = true;
    w->rank = (int)me.rank;
    snprintf(w->nspace, sizeof w->nspace, "%s", me.nspace);
    pmix_proc_t wild;
    PMIX_LOAD_PROCID(&wild, me.nspace, PMIX_RANK_WILDCARD);
    if (!get_int(&wild, PMIX_JOB_SIZE, &w->size) || w->size < 1) {
        PMIx_Finalize(NULL, 0);
        w->pmix = false;
        return sr_error(SR_ERR_PEER, "PMIx server did not give the job size (PMIX_JOB_SIZE)");
    }
    if (!get_int(&wild, PMIX_LOCAL_SIZE, &w->local_size))
        w->local_size = 1;
    if (!get_int(&me, PMIX_LOCAL_RANK, &w->local_rank))
        w->local_rank = 0;
    if (!get_int(&me, PMIX_NODEID, &w->node_id))
        w->node_id = 0;
    if (!get_int(&wild, PMIX_NUM_NODES, &w->num_nodes) || w->num_nodes < 1)
        w->num_nodes = 1;
    char host[256];
    if (get_string(&me, PMIX_HOSTNAME, host, sizeof host))
        snprintf(w->host, sizeof w->host, "%s", host);
    if (!jid || !*jid) {
        char pj[128];
        if (get_string(&wild, PMIX_JOBID, pj, sizeof pj))
            snprintf(w->job_id, sizeof w->job_id, "%s", pj);
        else
            snprintf(w->job_id, sizeof w->job_id, "%s", me.nspace);
    }
    if (!sr_testhook()->no_pmix_events)
        watch_launcher();
    watch_parent();
    return SR_OK;
}

const char *sr_world_bootstrap(const sr_world *w) { return w->pmix ? "pmix" : w->pmi2 ? "pmi2" : "none"; }

void sr_world_close(sr_world *w) {
    if (w->pmi2) {
        unwatch_parent();
        sr_pmi2_finalize();
    }
    w->pmi2 = false;
    if (w->pmix) {
        unwatch_parent();
        if (lost_handler_registered)
            PMIx_Deregister_event_handler(lost_handler_id, NULL, NULL);
        lost_handler_registered = false;
        PMIx_Finalize(NULL, 0);
    }
    w->pmix = false;
}

/* Put + Commit + Fence (collecting data) of one blob under key. */
static sr_status put_and_fence(const char *key, const void *blob, size_t len, double timeout_s) {
    pmix_value_t val;
    PMIX_VALUE_CONSTRUCT(&val);
    val.type = PMIX_BYTE_OBJECT;
    val.data.bo.bytes = (char *)blob;
    val.data.bo.size = len;
    sr_count_add(SR_COUNT_BOOT_OPS, 2); /* put and fence (commit is local) */
    pmix_status_t rc = PMIx_Put(PMIX_GLOBAL, key, &val);
    if (rc == PMIX_SUCCESS)
        rc = PMIx_Commit();
    if (rc != PMIX_SUCCESS)
        return sr_error(SR_ERR_PEER, "PMIx_Put/Commit of '%s': %s", key, PMIx_Error_string(rc));
    pmix_info_t info[2];
    bool collect = true;
    int tmo = timeout_s < 1 ? 1 : timeout_s > 1e6 ? 1000000 : (int)(timeout_s + 0.5);
    PMIX_INFO_CONSTRUCT(&info[0]);
    PMIX_INFO_CONSTRUCT(&info[1]);
    PMIX_INFO_LOAD(&info[0], PMIX_COLLECT_DATA, &collect, PMIX_BOOL);
    PMIX_INFO_LOAD(&info[1], PMIX_TIMEOUT, &tmo, PMIX_INT);
    rc = PMIx_Fence(NULL, 0, info, 2);
    PMIX_INFO_DESTRUCT(&info[0]);
    PMIX_INFO_DESTRUCT(&info[1]);
    if (rc != PMIX_SUCCESS)
        return sr_error(SR_ERR_PEER,
                        "PMIx_Fence for '%s' (deadline comm.timeout_s = %d s): %s (a peer failed during start-up?)",
                        key, tmo, PMIx_Error_string(rc));
    return SR_OK;
}

/* Rank r's blob of len bytes under key into out. */
static sr_status get_blob(int r, const char *key, void *out, size_t len) {
    pmix_proc_t p;
    PMIX_LOAD_PROCID(&p, me.nspace, (pmix_rank_t)r);
    pmix_value_t *got = NULL;
    sr_count_add(SR_COUNT_BOOT_OPS, 1);
    pmix_status_t rc = PMIx_Get(&p, key, NULL, 0, &got);
    if (rc != PMIX_SUCCESS || !got)
        return sr_error(SR_ERR_PEER, "PMIx_Get of '%s' from rank %d: %s", key, r, PMIx_Error_string(rc));
    bool ok = got->type == PMIX_BYTE_OBJECT && got->data.bo.size == len;
    if (ok)
        memcpy(out, got->data.bo.bytes, len);
    PMIX_VALUE_RELEASE(got);
    return ok ? SR_OK : sr_error(SR_ERR_PEER, "PMIx value '%s' of rank %d has the wrong type or size", key, r);
}

/* PMI2's store holds strings (at most SR_PMI2_MAX_VALUE bytes with the
 * NUL), and a key is put once: a blob goes as hex in chunks, under keys
 * made unique by a call number every rank advances in the same order
 * (the all-gathers are collective).  Hex by hand: two lines, and
 * OpenSSL's OPENSSL_buf2hexstr puts colons between bytes.  PMI2_KVS_Fence
 * has no timeout: the watchdog ends the process with 69 after timeout_s. */
#define PMI2_CHUNK ((SR_PMI2_MAX_VALUE - 1) / 2)
static unsigned pmi2_calls;

/* Slurm's PMI2 store is one namespace per job: PMI2_KVS_Get's rank
 * argument is a hint, not part of the key, so the rank is in the key. */
static void pmi2_key(char *out, size_t n, unsigned call, int rank, const char *key, size_t chunk) {
    snprintf(out, n, "%u.%d.%s.%zu", call, rank, key, chunk);
}

static sr_status pmi2_put_and_fence(int rank, const char *key, const void *blob, size_t len, double timeout_s,
                                    unsigned call) {
    const unsigned char *b = blob;
    static const char hex[] = "0123456789abcdef";
    for (size_t off = 0, c = 0; off < len || c == 0; off += PMI2_CHUNK, c++) {
        char k[SR_PMI2_MAX_KEY], v[SR_PMI2_MAX_VALUE];
        size_t n = len - off < PMI2_CHUNK ? len - off : PMI2_CHUNK;
        for (size_t i = 0; i < n; i++) {
            v[2 * i] = hex[b[off + i] >> 4];
            v[2 * i + 1] = hex[b[off + i] & 15];
        }
        v[2 * n] = '\0';
        pmi2_key(k, sizeof k, call, rank, key, c);
        sr_count_add(SR_COUNT_BOOT_OPS, 1);
        sr_status st = sr_pmi2_put(k, v);
        if (st != SR_OK)
            return st;
        if (len == 0)
            break;
    }
    char why[512];
    snprintf(why, sizeof why,
             "a rank died or hangs before the all-gather of '%s' (deadline comm.timeout_s; hint: see the other "
             "ranks' messages and the step's log)",
             key);
    watchdog wd = {
        .done = false, .seconds = timeout_s < 1 ? 1 : (long)(timeout_s + 0.5), .what = "PMI2_KVS_Fence", .why = why};
    pthread_t th;
    bool watched = watchdog_start(&wd, &th);
    sr_count_add(SR_COUNT_BOOT_OPS, 1);
    sr_status st = sr_pmi2_fence();
    if (watched)
        watchdog_stop(&wd, th);
    return st;
}

static int hexval(char c) { return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1; }

static sr_status pmi2_get_blob(int r, const char *key, unsigned call, void *out, size_t len) {
    unsigned char *b = out;
    for (size_t off = 0, c = 0; off < len; off += PMI2_CHUNK, c++) {
        char k[SR_PMI2_MAX_KEY], v[SR_PMI2_MAX_VALUE];
        size_t n = len - off < PMI2_CHUNK ? len - off : PMI2_CHUNK;
        pmi2_key(k, sizeof k, call, r, key, c);
        sr_count_add(SR_COUNT_BOOT_OPS, 1);
        sr_status st = sr_pmi2_get(r, k, v, sizeof v);
        if (st != SR_OK)
            return st;
        if (strnlen(v, sizeof v) != 2 * n)
            return sr_error(SR_ERR_PEER, "PMI2 value '%s' of rank %d has the wrong size", k, r);
        for (size_t i = 0; i < n; i++) {
            int hi = hexval(v[2 * i]), lo = hexval(v[2 * i + 1]);
            if (hi < 0 || lo < 0)
                return sr_error(SR_ERR_PEER, "PMI2 value '%s' of rank %d is not hex", k, r);
            b[off + i] = (unsigned char)(hi << 4 | lo);
        }
    }
    return SR_OK;
}

sr_status sr_world_first_nonzero(sr_world *w, const char *key, int32_t mine, int *rank, int32_t *value,
                                 double timeout_s) {
    *rank = -1;
    *value = 0;
    if ((!w->pmix && !w->pmi2) || w->size == 1) {
        if (mine)
            *rank = w->rank, *value = mine;
        return SR_OK;
    }
    unsigned call = pmi2_calls++;
    sr_status st = w->pmi2 ? pmi2_put_and_fence(w->rank, key, &mine, sizeof mine, timeout_s, call)
                           : put_and_fence(key, &mine, sizeof mine, timeout_s);
    for (int r = 0; r < w->size && st == SR_OK && *rank < 0; r++) {
        int32_t v;
        st = w->pmi2 ? pmi2_get_blob(r, key, call, &v, sizeof v) : get_blob(r, key, &v, sizeof v);
        if (st == SR_OK && v)
            *rank = r, *value = v;
    }
    return st;
}

sr_status sr_world_allgather(sr_world *w, const char *key, const void *blob, size_t len, void *out, double timeout_s) {
    if ((!w->pmix && !w->pmi2) || w->size == 1) {
        memcpy(out, blob, len);
        return SR_OK;
    }
    unsigned call = pmi2_calls++;
    sr_status st = w->pmi2 ? pmi2_put_and_fence(w->rank, key, blob, len, timeout_s, call)
                           : put_and_fence(key, blob, len, timeout_s);
    for (int r = 0; r < w->size && st == SR_OK; r++)
        st = w->pmi2 ? pmi2_get_blob(r, key, call, (char *)out + (size_t)r * len, len)
                     : get_blob(r, key, (char *)out + (size_t)r * len, len);
    return st;
}
