/* slurmjob.c — rank 0's queries and updates of its Slurm job; see
 * slurmjob.h.  posix_spawnp runs the client commands; their output comes
 * through a non-blocking pipe. */
#include "srconfig.h"

#include "slurmjob.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "mem.h"

extern char **environ;

#define CHILD_LIMIT_S 30.0

typedef struct {
    pid_t pid;      /* 0: none */
    int fd;         /* read end of its stdout and stderr */
    char out[8192]; /* (sacct's lines of a long chain of requeues; the rest is dropped) */
    size_t n;
    double started;
} child;

struct sr_slurmjob {
    char job[64];
    double end; /* CLOCK_REALTIME s; 0 unknown */
    child query, update;
    double query_began; /* when the last re-read began */
    bool warned_query, warned_update;
};

/* A field of 1 to 9 decimal digits at *s (no sign, no overflow: another
 * program's output is bounded before it is used); -1 otherwise. */
static long field(const char **s) {
    long v = 0;
    int k = 0;
    for (; **s >= '0' && **s <= '9'; (*s)++, k++) {
        if (k == 9)
            return -1;
        v = v * 10 + (**s - '0');
    }
    return k ? v : -1;
}

double sr_slurmjob_parse_left(const char *s) {
    while (*s == ' ')
        s++;
    long days = 0, f[3];
    int nf = 0;
    bool dash = strchr(s, '-') != NULL;
    if (dash) {
        days = field(&s);
        if (days < 0 || *s != '-')
            return -1;
        s++;
    }
    while (nf < 3) {
        if ((f[nf++] = field(&s)) < 0)
            return -1;
        if (*s != ':')
            break;
        s++;
    }
    while (*s == ' ' || *s == '\n')
        s++;
    if (*s || nf == 0)
        return -1;
    long h = 0, m = 0, sec = 0;
    if (dash) /* D-H, D-H:M, D-H:M:S */
        h = f[0], m = nf > 1 ? f[1] : 0, sec = nf > 2 ? f[2] : 0;
    else if (nf == 1) /* M */
        m = f[0];
    else if (nf == 2) /* M:S */
        m = f[0], sec = f[1];
    else /* H:M:S */
        h = f[0], m = f[1], sec = f[2];
    if (days > 365 || (dash && h >= 24) || m >= 60 || sec >= 60)
        return -1;
    double total = (double)days * 86400.0 + (double)h * 3600.0 + (double)m * 60.0 + (double)sec;
    return total <= 366.0 * 86400.0 ? total : -1;
}

/* Starts argv with stdout and stderr into a pipe; false with errno. */
static bool spawn(child *c, char *const argv[]) {
    int p[2];
    if (pipe(p) != 0)
        return false;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, p[1], 1);
    posix_spawn_file_actions_adddup2(&fa, p[1], 2);
    posix_spawn_file_actions_addclose(&fa, p[0]);
    posix_spawn_file_actions_addclose(&fa, p[1]);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    int rc = posix_spawnp(&c->pid, argv[0], &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(p[1]);
    if (rc != 0) {
        close(p[0]);
        c->pid = 0;
        errno = rc;
        return false;
    }
    fcntl(p[0], F_SETFL, fcntl(p[0], F_GETFL) | O_NONBLOCK);
    fcntl(p[0], F_SETFD, FD_CLOEXEC);
    c->fd = p[0];
    c->n = 0;
    c->out[0] = '\0';
    c->started = sr_clock_wall_s();
    return true;
}

/* -1 while running; else its exit status (128 + signal when killed). */
static int poll_child(child *c, bool block) {
    if (!c->pid)
        return -1;
    for (;;) {
        if (c->n + 1 < sizeof c->out) {
            ssize_t k = read(c->fd, c->out + c->n, sizeof c->out - 1 - c->n);
            if (k > 0) {
                c->n += (size_t)k;
                c->out[c->n] = '\0';
                continue;
            }
        } else {
            char sink[256];
            if (read(c->fd, sink, sizeof sink) > 0)
                continue;
        }
        break;
    }
    int ws;
    pid_t w = waitpid(c->pid, &ws, block ? 0 : WNOHANG);
    if (w == 0) {
        if (sr_clock_wall_s() - c->started < CHILD_LIMIT_S)
            return -1;
        kill(c->pid, SIGKILL); /* our own child, by its PID */
        waitpid(c->pid, &ws, 0);
    }
    close(c->fd);
    c->pid = 0;
    /* the last line of its output, for messages */
    while (c->n > 0 && (c->out[c->n - 1] == '\n' || c->out[c->n - 1] == ' '))
        c->out[--c->n] = '\0';
    if (w < 0)
        return 127;
    return WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + (WIFSIGNALED(ws) ? WTERMSIG(ws) : 0);
}

/* Waits up to 10 s for c, then kills it (by its PID); its status. */
static int wait_child(child *c) {
    int rc;
    for (int i = 0; (rc = poll_child(c, false)) < 0 && i < 1000; i++)
        usleep(10000);
    if (rc < 0) {
        kill(c->pid, SIGKILL); /* our own child */
        rc = poll_child(c, true);
    }
    return rc;
}

static bool start_query(sr_slurmjob *j) {
    char *argv[] = {"squeue", "-h", "-j", j->job, "-o", "%L", NULL};
    j->query_began = sr_clock_wall_s();
    return spawn(&j->query, argv);
}

/* The answer of a finished query: sets j->end, or describes why not. */
static void take_answer(sr_slurmjob *j, int rc, double began, char *why, size_t why_size) {
    double left = rc == 0 ? sr_slurmjob_parse_left(j->query.out) : -1;
    if (left >= 0) {
        j->end = began + left;
        if (why_size)
            why[0] = '\0';
    } else if (rc == 0 && strstr(j->query.out, "UNLIMITED")) {
        j->end = 0;
        snprintf(why, why_size, "job %s has no time limit (squeue %%L: UNLIMITED)", j->job);
    } else {
        char shown[160];
        snprintf(why, why_size, "squeue -h -j %s -o %%L %s: %s%s", j->job,
                 rc == 0     ? "answered"
                 : rc == 127 ? "could not run"
                             : "failed",
                 j->query.out[0] ? sr_escape(j->query.out, shown, sizeof shown) : "(no output)",
                 rc == 0 ? " (expected a time left of at most 366 days: [D-]H:MM:SS with D <= 365, H < 24 after a "
                           "day, minutes and seconds < 60)"
                         : "");
    }
}

sr_slurmjob *sr_slurmjob_open(const char *job_id, bool want_end, char *why, size_t why_size) {
    sr_slurmjob *j = sr_calloc(1, sizeof *j);
    if (!j)
        return NULL;
    snprintf(j->job, sizeof j->job, "%s", job_id);
    if (why_size)
        why[0] = '\0';
    if (!want_end)
        return j;
    if (!start_query(j)) {
        snprintf(why, why_size, "cannot run squeue: %s", strerror(errno));
        return j;
    }
    int rc = wait_child(&j->query);
    take_answer(j, rc, j->query_began, why, why_size);
    return j;
}

double sr_slurmjob_end(const sr_slurmjob *j) { return j ? j->end : 0; }

/* A finished comment update: its failure, once. */
static void update_done(sr_slurmjob *j, int rc, char *warn, size_t warn_size) {
    if (rc > 0 && !j->warned_update) {
        j->warned_update = true;
        snprintf(warn, warn_size,
                 "the job comment (slurm.comment_every_minutes): scontrol update JobId=%s Comment=... failed (status "
                 "%d): %s (no more warnings about the comment)",
                 j->job, rc, j->update.out[0] ? j->update.out : "(no output)");
    }
}

void sr_slurmjob_poll(sr_slurmjob *j, double now, char *warn, size_t warn_size) {
    if (warn_size)
        warn[0] = '\0';
    if (!j)
        return;
    if (j->query.pid) {
        int rc = poll_child(&j->query, false);
        if (rc >= 0) {
            char why[768];
            double keep = j->end;
            take_answer(j, rc, j->query_began, why, sizeof why);
            if (why[0] && keep > 0) {
                j->end = keep; /* a failed re-read keeps the last end time */
                if (!j->warned_query) {
                    j->warned_query = true;
                    snprintf(warn, warn_size,
                             "preemption.before_end: re-reading the job's time limit: %s (the last one read stays)",
                             why);
                }
            }
        }
    } else if (j->end > 0 && now - j->query_began >= SR_SLURMJOB_REREAD_S)
        start_query(j);
    if (j->update.pid && !warn[0])
        update_done(j, poll_child(&j->update, false), warn, warn_size);
}

bool sr_slurmjob_set_comment(sr_slurmjob *j, const char *text, char *warn, size_t warn_size) {
    if (warn_size)
        warn[0] = '\0';
    if (!j || j->update.pid)
        return j != NULL;
    char id[96], comment[512];
    snprintf(id, sizeof id, "JobId=%s", j->job);
    snprintf(comment, sizeof comment, "Comment=%s", text);
    char *argv[] = {"scontrol", "update", id, comment, NULL};
    if (spawn(&j->update, argv))
        return true;
    if (!j->warned_update) {
        j->warned_update = true;
        snprintf(warn, warn_size, "the job comment (slurm.comment_every_minutes): cannot run scontrol update: %s",
                 strerror(errno));
    }
    return false;
}

void sr_slurmjob_close(sr_slurmjob *j, char *warn, size_t warn_size) {
    if (warn_size)
        warn[0] = '\0';
    if (!j)
        return;
    for (int i = 0; i < 500 && (j->query.pid || j->update.pid); i++) {
        if (j->query.pid)
            poll_child(&j->query, false);
        if (j->update.pid)
            update_done(j, poll_child(&j->update, false), warn, warn_size);
        if (j->query.pid || j->update.pid)
            usleep(10000);
    }
    child *cs[2] = {&j->query, &j->update};
    for (int k = 0; k < 2; k++)
        if (cs[k]->pid) {
            kill(cs[k]->pid, SIGKILL); /* our own child, by its PID */
            poll_child(cs[k], true);
        }
    free(j);
}

/* "YYYY-MM-DDTHH:MM:SS", the local time sacct prints, as seconds since
 * the epoch (mktime, daylight saving time as the date has it); -1 when it
 * is not that ("Unknown", "None"). */
static double sacct_time(const char *s, size_t len) {
    char buf[32];
    if (len != 19 || len >= sizeof buf)
        return -1;
    memcpy(buf, s, len);
    buf[len] = '\0';
    struct tm tm = {0};
    const char *end = strptime(buf, "%Y-%m-%dT%H:%M:%S", &tm);
    if (!end || *end)
        return -1;
    tm.tm_isdst = -1;
    time_t t = mktime(&tm);
    return t == (time_t)-1 ? -1 : (double)t;
}

bool sr_slurmjob_queue_waits(const char *ids, double *first_s, double *rest_s, int *lines, char *why, size_t why_size) {
    *first_s = *rest_s = 0;
    *lines = 0;
    char idbuf[4096];
    snprintf(idbuf, sizeof idbuf, "%s", ids);
    char *argv[] = {"sacct", "-n", "-P", "-X", "--duplicates", "-j", idbuf, "-o", "JobIDRaw,Eligible,Start", NULL};
    child c = {0};
    if (!spawn(&c, argv)) {
        snprintf(why, why_size, "cannot run sacct: %s", strerror(errno));
        return false;
    }
    int rc = wait_child(&c);
    char shown[160];
    if (rc != 0) {
        snprintf(why, why_size, "sacct %s (status %d): %s", rc == 127 ? "could not run" : "failed", rc,
                 c.out[0] ? sr_escape(c.out, shown, sizeof shown) : "(no output)");
        return false;
    }
    /* JobIDRaw|Eligible|Start per incarnation, oldest first per job */
    for (const char *l = c.out; *l;) {
        const char *nl = strchr(l, '\n'), *e = nl ? nl : l + strlen(l);
        const char *b1 = memchr(l, '|', (size_t)(e - l)), *b2 = b1 ? memchr(b1 + 1, '|', (size_t)(e - b1 - 1)) : NULL;
        if (b2) {
            double el = sacct_time(b1 + 1, (size_t)(b2 - b1 - 1)), st = sacct_time(b2 + 1, (size_t)(e - b2 - 1));
            if (el >= 0 && st >= el) {
                if (*lines == 0)
                    *first_s = st - el;
                else
                    *rest_s += st - el;
                ++*lines;
            }
        }
        l = nl ? nl + 1 : e;
    }
    if (*lines == 0) {
        snprintf(why, why_size, "sacct -j %s answered no job with an eligible and a start time: %s", idbuf,
                 c.out[0] ? sr_escape(c.out, shown, sizeof shown) : "(no output)");
        return false;
    }
    return true;
}
