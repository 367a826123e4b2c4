/* ckpt.c — the checkpoint directory of a run: lock, resume with fallback,
 * the four save phases, retention; see ckpt.h for what this file owns and
 * shardrun-checkpoint(5) for the format.
 *
 * Written by hand because no library here does it: the commit protocol
 * (temporary directory, fsync, rename, parent fsync, `latest` symlink) and
 * the resharding reader.
 *
 * Crash sites for the test suite (testhook.h): SHARDRUN_TEST_CRASH_AT=
 * SITE[:STEP][@RANK] kills the process with SIGKILL when it reaches SITE
 * (SHARDRUN_TEST_PAUSE_AT: stops it with SIGSTOP, for a test to kill the
 * whole job there)
 * (after_shard_write, before_manifest, after_manifest, before_rename,
 * after_rename, before_latest, after_latest).  In an asynchronous save
 * after_shard_write is reached on the writer thread, the others at the
 * commit, on the main thread, a step or more later. */
#include "srconfig.h"

#include "ckpt.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "fsio.h"
#include "mem.h"
#include "provenance.h"
#include "shardfile.h"
#include "testhook.h"
#include "trace.h"

#define MAX_CANDIDATES SR_CKPT_MAX_CANDIDATES

struct sr_ckpt {
    const sr_ckpt_opts *o;
    const sr_world *w;
    sr_ctl *ctl;
    const sr_model *model;
    sr_fsdp *f;
    char *dir; /* NULL: no checkpoint.dir; else the path it resolved to at open */
    int dirfd; /* that directory, opened once: entries are opened relative to it */
    int lock_fd;
    int64_t last_step;
    bool async;             /* saves are asynchronous (checkpoint.async, and the snapshot fits) */
    float *snap[SR_NSTATE]; /* the snapshot: params, m, v of this rank's slices, end to end */
    uint64_t snap_elements; /* per state (0: this rank writes no file) */
    struct pending *pend;   /* the save in flight, or NULL */
    /* model.init of this lineage (sr_ckpt_set_init, or the resumed
     * manifest's), recorded in every manifest */
    char init_path[1024], init_sha256[65];
    const sr_data_record *data; /* what this run trains on (sr_ckpt_set_data), or NULL */
    bool data_allow_changed;
    char resumed_from[PATH_MAX]; /* the checkpoint sr_ckpt_resume loaded, or "" */
    sr_ckpt_commit commit;       /* the newest commit not yet taken (sr_ckpt_take_commit) */
    bool have_commit;
};

static sr_status setup_async(sr_ckpt *c);
static uint64_t async_max_bytes(const sr_ckpt_opts *o, int local_size);
static void pending_free(sr_ckpt *c);

/* Paths are bounded by PATH_MAX, messages by their buffers. */
#define FMT(buf, ...) sr_fmt(buf, sizeof buf, __VA_ARGS__)

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void crash_site(const char *site, int64_t step) {
    sr_testhook_pause_point(site, step, sr_log_rank());
    if (!sr_testhook_crash_here(site, step, sr_log_rank()))
        return;
    fprintf(stderr, "shardrun: test: SHARDRUN_TEST_CRASH_AT: killing rank %d at %s (step %lld)\n", sr_log_rank(), site,
            (long long)step);
    kill(getpid(), SIGKILL);
}

/* ------------------------------------------------------------------------ */
/* reading state */

/* The engine's state k as shard-file bytes: `at` is the byte offset in
 * its local buffer (fsdp.h: the engine copies, stages and declares). */
typedef struct {
    sr_fsdp *f;
    int k;
} state_io;

static sr_status state_put(void *ctx, uint64_t at, const void *src, size_t bytes) {
    const state_io *io = ctx;
    return sr_fsdp_state_write(io->f, io->k, (size_t)(at / sizeof(float)), bytes / sizeof(float), src);
}

static sr_status state_get(void *ctx, uint64_t at, void *dst, size_t bytes) {
    const state_io *io = ctx;
    return sr_fsdp_state_read(io->f, io->k, (size_t)(at / sizeof(float)), bytes / sizeof(float), dst);
}

sr_status sr_ckpt_read_slices(int dirfd, const char *dir, const sr_manifest *mf, const sr_slice *slices, int nslices,
                              float *dst[SR_NSTATE], sr_fsdp *into, uint64_t *verified) {
    state_io io[SR_NSTATE];
    for (int k = 0; k < SR_NSTATE; k++)
        io[k] = (state_io){into, k};
    uint64_t dummy = 0;
    if (!verified)
        verified = &dummy;
    sr_shardfile_range *reqs = NULL;
    size_t cap = 0;
    sr_status st = SR_OK;
    for (int fi = 0; fi < mf->nfiles && st == SR_OK; fi++) {
        const sr_manifest_file *f = &mf->files[fi];
        size_t nreq = 0;
        uint64_t e = 0; /* element offset in the file's sections */
        for (int s = 0; s < f->nslices && st == SR_OK; s++) {
            uint64_t b = f->slices[s][0], c = f->slices[s][1];
            for (int q = 0; q < nslices; q++) {
                uint64_t lo = b > slices[q].begin ? b : slices[q].begin;
                uint64_t hi = b + c < slices[q].end ? b + c : slices[q].end;
                if (lo >= hi)
                    continue;
                for (int k = 0; k < SR_NSTATE; k++) {
                    if (!dst[k] && !into)
                        continue;
                    if (nreq == cap) {
                        cap = cap ? 2 * cap : 64;
                        sr_shardfile_range *nr = sr_realloc(reqs, cap * sizeof *nr);
                        if (!nr) {
                            st = sr_error_oom("the checkpoint read list");
                            break;
                        }
                        reqs = nr;
                    }
                    uint64_t local = slices[q].local + (lo - slices[q].begin);
                    reqs[nreq++] = (sr_shardfile_range){sr_manifest_section(mf, f->elements, k) + 4 * (e + lo - b),
                                                        4 * (hi - lo),
                                                        into ? NULL : dst[k] + local,
                                                        into ? state_put : NULL,
                                                        &io[k],
                                                        4 * local};
                }
            }
            e += c;
        }
        if (st != SR_OK || nreq == 0)
            continue;
        char path[PATH_MAX];
        FMT(path, "%s/%s", dir, f->name);
        sr_shardfile_expect x = {f->shard,    mf->step,   f->bytes,
                                 f->elements, f->nchunks, (const unsigned char(*)[32])f->sha};
        st = sr_shardfile_read(dirfd, f->name, path, &x, reqs, nreq, verified, NULL, NULL, NULL);
    }
    free(reqs);
    return st;
}

/* ------------------------------------------------------------------------ */
/* the directory and its lock */

bool sr_ckpt_enabled(const sr_ckpt *c) { return c && c->dir; }

void sr_ckpt_set_data(sr_ckpt *c, const sr_data_record *data, bool allow_changed) {
    c->data = data;
    c->data_allow_changed = allow_changed;
}

void sr_ckpt_set_init(sr_ckpt *c, const char *path, const char *sha256) {
    FMT(c->init_path, "%s", path);
    FMT(c->init_sha256, "%s", sha256);
}
int64_t sr_ckpt_last_step(const sr_ckpt *c) { return c ? c->last_step : -1; }

/* Takes the fcntl lock on <dir>/.lock and records the holder in it. */
static sr_status take_lock(sr_ckpt *c) {
    char path[PATH_MAX];
    FMT(path, "%s/.lock", c->dir);
    c->lock_fd = openat(c->dirfd, ".lock", O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, SR_FSIO_FILE_MODE);
    if (c->lock_fd < 0)
        return sr_error(SR_ERR_CANTCREAT, "%s: cannot create the checkpoint lock: %s%s", path,
                        errno == ELOOP ? "it is a symbolic link" : strerror(errno),
                        errno == EROFS || errno == EACCES
                            ? " (hint: checkpoint.dir must be writable by every rank: set it to a writable file system)"
                            : "");
    struct stat lsb;
    if (fstat(c->lock_fd, &lsb) != 0 || !S_ISREG(lsb.st_mode)) {
        close(c->lock_fd);
        c->lock_fd = -1;
        return sr_error(SR_ERR_CANTCREAT, "%s: %s, not a regular file (hint: remove it)", path,
                        sr_fsio_kind(lsb.st_mode));
    }
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
    if (fcntl(c->lock_fd, F_SETLK, &fl) != 0) {
        int err = errno;
        char holder[512] = {0};
        ssize_t n = pread(c->lock_fd, holder, sizeof holder - 1, 0);
        if (n > 0) {
            holder[n] = '\0';
            holder[strcspn(holder, "\n")] = '\0';
        }
        struct flock q = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
        if (fcntl(c->lock_fd, F_GETLK, &q) == 0 && q.l_type != F_UNLCK && !holder[0])
            FMT(holder, "pid %d", (int)q.l_pid);
        close(c->lock_fd);
        c->lock_fd = -1;
        if (err == EACCES || err == EAGAIN)
            return sr_error(SR_ERR_CANTCREAT,
                            "%s: checkpoint.dir is in use by another job (%s holds %s) (hint: wait for that job, "
                            "or give this one its own checkpoint.dir)",
                            c->dir, holder[0] ? holder : "unknown holder", path);
        return sr_error(SR_ERR_CANTCREAT, "%s: cannot lock: %s", path, strerror(err));
    }
    char info[768], when[64];
    time_t t = time(NULL);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
    int n =
        snprintf(info, sizeof info, "host %s pid %d job %s since %s\n", c->w->host, (int)getpid(), c->w->job_id, when);
    if (ftruncate(c->lock_fd, 0) != 0 || pwrite(c->lock_fd, info, (size_t)n, 0) != n)
        sr_log_warn("%s: cannot record the lock holder: %s", path, strerror(errno));
    return SR_OK;
}

void sr_ckpt_guard_outputs(void) { sr_fsio_guard_marker(SR_MANIFEST_NAME, "a checkpoint's step directory"); }

/* Names a save writes into a step directory (a leftover's files). */
static bool written_by_save(const char *name, void *ctx) {
    (void)ctx;
    return strcmp(name, SR_MANIFEST_NAME) == 0 || sr_manifest_shard_name(name);
}

/* Names a committed checkpoint's manifest lists, and the manifest. */
static bool named_by_manifest(const char *name, void *ctx) {
    const sr_manifest *mf = ctx;
    for (int i = 0; i < mf->nfiles; i++)
        if (strcmp(name, mf->files[i].name) == 0)
            return true;
    return strcmp(name, SR_MANIFEST_NAME) == 0;
}

/* Removes step directory `name` of the checkpoint directory: the files
 * `owned` accepts, then the directory; what else is there stays, named in a
 * warning.  Returns sr_fsio_remove_dir_at's result (0: gone). */
static int remove_step_dir(const sr_ckpt *c, const char *name, sr_fsio_owned owned, void *ctx) {
    char left[512];
    int rc = sr_fsio_remove_dir_at(c->dirfd, name, owned, ctx, left, sizeof left);
    if (rc != 0 && errno == ENOTEMPTY)
        sr_log_warn("checkpoint: %s/%s holds files no checkpoint wrote (%s); they and the directory are left in "
                    "place",
                    c->dir, name, left);
    return rc;
}

/* Removes leftovers of interrupted saves and deletions (lock holder only):
 * the files a save writes; a leftover that is not a real directory is
 * unlinked, never followed. */
static sr_status remove_leftovers(sr_ckpt *c) {
    DIR *d = sr_fsio_list_dir(c->dirfd);
    if (!d)
        return sr_error(SR_ERR_NOINPUT, "%s: cannot read checkpoint.dir: %s", c->dir, strerror(errno));
    struct dirent *de;
    while ((de = readdir(d)))
        if (strncmp(de->d_name, ".step_", 6) == 0 || strcmp(de->d_name, ".latest.tmp") == 0) {
            char path[PATH_MAX];
            FMT(path, "%s/%s", c->dir, de->d_name);
            struct stat sb;
            if (fstatat(c->dirfd, de->d_name, &sb, AT_SYMLINK_NOFOLLOW) != 0)
                continue;
            int rc = S_ISDIR(sb.st_mode) ? remove_step_dir(c, de->d_name, written_by_save, NULL)
                                         : unlinkat(c->dirfd, de->d_name, 0);
            if (rc == 0)
                sr_log_info("checkpoint: removed %s left by an interrupted save", path);
            else if (errno != ENOTEMPTY)
                sr_log_warn("checkpoint: cannot remove %s left by an interrupted save: %s", path, strerror(errno));
        }
    closedir(d);
    return SR_OK;
}

/* checkpoint.dir names a path the user chose, so it may be (or pass
 * through) a symbolic link: it is resolved once, and every later step of
 * the run works in the directory it resolved to. */
static sr_status resolve_dir(sr_ckpt *c) {
    char *real = realpath(c->dir, NULL);
    if (!real)
        return sr_error(SR_ERR_CANTCREAT, "%s: cannot resolve checkpoint.dir: %s", c->dir, strerror(errno));
    free(c->dir);
    c->dir = real;
    c->dirfd = sr_fsio_open_dir(real);
    if (c->dirfd < 0)
        return sr_error(SR_ERR_CANTCREAT, "%s: cannot open checkpoint.dir: %s", real, strerror(errno));
    return SR_OK;
}

uint64_t sr_ckpt_planned_bytes(const sr_shardplan *plan, int S, uint64_t *largest_file) {
    uint64_t total = (uint64_t)64 << 10, largest = 0;
    for (int s = 0; s < S; s++) {
        uint64_t file =
            SR_SHARD_HEADER_BYTES + (uint64_t)SR_NSTATE * sizeof(float) * sr_shardplan_shard_elements(plan, s);
        largest = file > largest ? file : largest;
        total += file + 100 * ((file + SR_SHARD_CHUNK_BYTES - 1) / SR_SHARD_CHUNK_BYTES);
    }
    if (largest_file)
        *largest_file = largest;
    return total;
}

/* The bytes one checkpoint of this job takes (sr_ckpt_planned_bytes). */
static uint64_t checkpoint_bytes(const sr_ckpt *c) {
    sr_fsdp_layout l;
    sr_fsdp_layout_get(c->f, &l);
    return sr_ckpt_planned_bytes(l.plan, l.mesh->S, NULL);
}

/* "12.3 MiB" or "4.56 GiB" into buf. */
static const char *size_str(char *buf, size_t n, double bytes) {
    if (bytes < (double)(1u << 30))
        sr_fmt(buf, n, "%.1f MiB", bytes / (double)(1u << 20));
    else
        sr_fmt(buf, n, "%.2f GiB", bytes / (double)(1u << 30));
    return buf;
}

/* Free space of the checkpoint file system against the job's checkpoints,
 * before step 1: below one checkpoint is SR_ERR_IO (the first save would
 * fail); below checkpoint.keep + 1 (the newest kept ones and the one being
 * written), less the checkpoints already there, a warning. */
static sr_status check_space(sr_ckpt *c) {
    struct statvfs fs;
    if (fstatvfs(c->dirfd, &fs) != 0)
        return SR_OK; /* nothing to compare with */
    uint64_t avail = (uint64_t)fs.f_bavail * (uint64_t)fs.f_frsize, one = checkpoint_bytes(c);
    char a[32], b[32], d[32];
    if (avail < one)
        return sr_error(SR_ERR_IO,
                        "%s: %s free, below the %s one checkpoint of this job takes: the first save would fail (hint: "
                        "free space there, or set checkpoint.dir to a larger file system)",
                        c->dir, size_str(a, sizeof a, (double)avail), size_str(b, sizeof b, (double)one));
    int64_t have[MAX_CANDIDATES];
    int64_t present = sr_ckpt_scan(c->dirfd, have, MAX_CANDIDATES, NULL, 0);
    int64_t keep = c->o->keep > 0 ? c->o->keep : 1;
    int64_t more = keep + 1 - (present < keep ? present : keep);
    double need = (double)more * (double)one;
    if ((double)avail < need)
        sr_log_warn("%s: %s free, below the %s that %lld more checkpoint%s of %s need (checkpoint.keep %lld + the one "
                    "being written, %lld already there): a later save may fail with a full disk (74)",
                    c->dir, size_str(a, sizeof a, (double)avail), size_str(b, sizeof b, need), (long long)more,
                    more == 1 ? "" : "s", size_str(d, sizeof d, (double)one), (long long)keep, (long long)present);
    return SR_OK;
}

static sr_status open_dir_rank0(sr_ckpt *c) {
    char created[1024];
    if (sr_fsio_mkdir_p_created(c->dir, created, sizeof created) != 0)
        return sr_error(SR_ERR_CANTCREAT, "%s: cannot create checkpoint.dir: %s", c->dir, strerror(errno));
    if (created[0])
        sr_log_info("checkpoint: created %s (checkpoint.dir did not exist)", created);
    sr_status st = resolve_dir(c);
    if (st == SR_OK)
        st = take_lock(c);
    if (st == SR_OK)
        st = remove_leftovers(c);
    return st == SR_OK ? check_space(c) : st;
}

sr_status sr_ckpt_open(sr_ckpt **out, const sr_ckpt_opts *o, const sr_world *w, sr_ctl *ctl, const sr_model *m,
                       sr_fsdp *f) {
    *out = NULL;
    sr_ckpt *c = sr_calloc(1, sizeof *c);
    if (!c)
        return sr_error_oom("the checkpoint object");
    *c = (sr_ckpt){.o = o, .w = w, .ctl = ctl, .model = m, .f = f, .dirfd = -1, .lock_fd = -1, .last_step = -1};
    *out = c;
    if (!o->dir || !o->dir[0])
        return SR_OK;
    c->dir = sr_strdup(o->dir);
    if (!c->dir)
        return sr_error_oom("the checkpoint directory name");
    size_t n = strlen(c->dir);
    while (n > 1 && c->dir[n - 1] == '/')
        c->dir[--n] = '\0';
    sr_status st = SR_OK;
    if (sr_ctl_rank(ctl) == 0)
        st = open_dir_rank0(c);
    st = sr_ctl_agree(ctl, st, 0, 0, st == SR_OK ? NULL : sr_error_message(), NULL);
    /* the other ranks open the directory rank 0 made (a shared file system) */
    if (st == SR_OK && sr_ctl_rank(ctl) != 0) {
        sr_status mine = resolve_dir(c);
        st = sr_ctl_agree(ctl, mine, 0, 0, mine == SR_OK ? NULL : sr_error_message(), NULL);
    } else if (st == SR_OK) {
        st = sr_ctl_agree(ctl, SR_OK, 0, 0, NULL, NULL);
    }
    if (st == SR_OK)
        st = setup_async(c);
    return st;
}

void sr_ckpt_close(sr_ckpt *c) {
    if (!c)
        return;
    pending_free(c); /* a failed run: its writer finishes; the next open removes the temporary directory */
    for (int k = 0; k < SR_NSTATE; k++)
        if (c->snap[k])
            sr_fsdp_host_free(c->f, c->snap[k]);
    if (c->lock_fd >= 0)
        close(c->lock_fd); /* releases the fcntl lock */
    if (c->dirfd >= 0)
        close(c->dirfd);
    free(c->dir);
    free(c);
}

/* ------------------------------------------------------------------------ */
/* scanning and resuming */

static int cmp_desc(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x > y ? -1 : x < y;
}

bool sr_ckpt_parse_step_name(const char *name, int64_t *step) {
    if (strlen(name) != 13 || strncmp(name, "step_", 5) != 0)
        return false;
    int64_t v = 0;
    for (int i = 5; i < 13; i++) {
        if (name[i] < '0' || name[i] > '9')
            return false;
        v = v * 10 + (name[i] - '0');
    }
    *step = v;
    return true;
}

int sr_ckpt_scan(int dirfd, int64_t *steps, int max, char *odd, size_t odd_len) {
    if (odd_len)
        odd[0] = '\0';
    DIR *d = sr_fsio_list_dir(dirfd);
    if (!d)
        return 0;
    int n = 0;
    struct dirent *de;
    int64_t s;
    while ((de = readdir(d))) {
        if (!sr_ckpt_parse_step_name(de->d_name, &s))
            continue;
        struct stat sb;
        if (fstatat(dirfd, de->d_name, &sb, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(sb.st_mode)) {
            if (n < max)
                steps[n++] = s;
        } else if (odd_len && !odd[0]) {
            sr_fmt(odd, odd_len, "%s (%s)", de->d_name, sr_fsio_kind(sb.st_mode));
        }
    }
    closedir(d);
    qsort(steps, (size_t)n, sizeof *steps, cmp_desc);
    return n;
}

static void log_config_changes(const sr_ckpt *c, const sr_manifest *mf, const char *path) {
    for (int i = 0; i < c->o->nkeys; i++) {
        const char *k = c->o->keys[i];
        if (strcmp(k, "checkpoint.resume") == 0 || strcmp(k, "model.init") == 0)
            continue; /* (a resume ignores model.init: the run says so in one line) */
        for (int j = 0; j < mf->nconfig; j++)
            if (strcmp(mf->ckeys[j], k) == 0 && strcmp(mf->cvals[j], c->o->values[i]) != 0)
                sr_log_warn("resume: %s changed since %s: %s -> %s (the new value takes effect)", k, path, mf->cvals[j],
                            c->o->values[i]);
    }
}

/* The directory of one candidate: a step_* entry of checkpoint.dir (a real
 * directory, never followed), or the user-named checkpoint.resume PATH
 * (resolved, symbolic links followed). */
static int open_candidate(sr_ckpt *c, const char *path, int64_t step, bool explicit_path) {
    if (explicit_path)
        return sr_fsio_open_dir(path);
    char name[32];
    FMT(name, "step_%08lld", (long long)step);
    return sr_fsio_open_subdir(c->dirfd, name);
}

/* One rank's attempt at loading a checkpoint.  *shape is set when the
 * model shape differs (a hard refusal, no fallback). */
static sr_status load_one(sr_ckpt *c, const char *path, int dirfd, sr_manifest *mf, bool *shape, uint64_t *verified) {
    *shape = false;
    if (dirfd < 0)
        return sr_error(SR_ERR_DATA, "%s: %s", path,
                        errno == ELOOP ? "a symbolic link, not a checkpoint directory" : strerror(errno));
    sr_status st = sr_manifest_load(dirfd, path, mf);
    if (st != SR_OK)
        return st;
    if (!sr_model_dims_same(&mf->dims, &c->model->d)) {
        *shape = true;
        char was[512], is[512];
        st = sr_error(SR_ERR_DATA,
                      "%s was written for a different model (%s); this job has %s (hint: a new checkpoint.dir, or "
                      "checkpoint.resume: never)",
                      path, sr_model_dims_text(&mf->dims, was, sizeof was),
                      sr_model_dims_text(&c->model->d, is, sizeof is));
        sr_manifest_free(mf);
        return st;
    }
    /* the data it was trained on (data provenance), before any weight is read */
    char diff[1400];
    if (c->data && mf->has_data && sr_provenance_differs(c->data, &mf->data, diff, sizeof diff)) {
        if (!c->data_allow_changed) {
            st = sr_error(SR_ERR_CONFIG,
                          "resume from %s: the data differs from what it was trained on: %s (hint: "
                          "data.allow_changed: true resumes anyway; checkpoint.resume: never starts fresh)",
                          path, diff);
            sr_manifest_free(mf);
            return st;
        }
        if (sr_ctl_rank(c->ctl) == 0)
            sr_log_warn("resume from %s: the data differs from what it was trained on: %s (data.allow_changed: "
                        "resuming anyway; the data order continues at the recorded cursor)",
                        path, diff);
    } else if (c->data && !mf->has_data && sr_ctl_rank(c->ctl) == 0) {
        sr_log_info("resume: %s records no data fingerprint (written before shardrun recorded one): the data is "
                    "not compared",
                    path);
    }
    sr_fsdp_layout l;
    sr_fsdp_layout_get(c->f, &l);
    float *none[SR_NSTATE] = {NULL, NULL, NULL};
    st = sr_ckpt_read_slices(dirfd, path, mf, l.slices, l.nslices, none, c->f, verified);
    if (st != SR_OK)
        sr_manifest_free(mf);
    return st;
}

/* The candidates: PATH alone (checked to exist), or rank 0's scan of the
 * directory shared with every rank.  steps[0] receives the count. */
static sr_status candidates(sr_ckpt *c, const char *path, int64_t *steps) {
    steps[0] = 1;
    if (path) {
        struct stat sb;
        sr_status st = SR_OK;
        if (sr_ctl_rank(c->ctl) == 0 && stat(path, &sb) != 0)
            st = sr_error(SR_ERR_NOINPUT, "checkpoint.resume: %s: %s (hint: a step_* directory, auto or never)", path,
                          strerror(errno));
        return sr_ctl_agree(c->ctl, st, 0, 0, st == SR_OK ? NULL : sr_error_message(), NULL);
    }
    sr_status st = SR_OK;
    steps[0] = 0;
    if (sr_ctl_rank(c->ctl) == 0) {
        char odd[300];
        steps[0] = sr_ckpt_scan(c->dirfd, steps + 1, MAX_CANDIDATES, odd, sizeof odd);
        if (odd[0])
            st = sr_error(SR_ERR_DATA,
                          "%s/%s is not a real checkpoint directory; a checkpoint.dir holds only step_* directories "
                          "written by shardrun (hint: to resume from what it points to, set checkpoint.resume: PATH; "
                          "otherwise remove it)",
                          c->dir, odd);
    }
    st = sr_ctl_agree(c->ctl, st, 0, 0, st == SR_OK ? NULL : sr_error_message(), NULL);
    return st == SR_OK ? sr_ctl_broadcast(c->ctl, steps, MAX_CANDIDATES + 1, 0) : st;
}

static void log_loaded(sr_ckpt *c, const char *path, const sr_manifest *mf, const sr_ctl_word *all, double dt) {
    uint64_t total = 0;
    for (int r = 0; r < sr_ctl_size(c->ctl); r++)
        total += all[r].value;
    sr_log_info("resume: loaded %s: step %lld, %llu sequence%s consumed, written by %d rank%s (mesh shard %d x "
                "replicate %d) on %s; %.1f MB read and verified in %.2f s (%.0f MB/s)",
                path, (long long)mf->step, (unsigned long long)mf->cursor, mf->cursor == 1 ? "" : "s", mf->world,
                mf->world == 1 ? "" : "s", mf->mesh_shard, mf->mesh_replicate, mf->created, (double)total / 1e6, dt,
                (double)total / 1e6 / (dt > 0 ? dt : 1e-9));
    sr_fsdp_layout s;
    sr_fsdp_layout_get(c->f, &s);
    if (mf->world != c->w->size || mf->mesh_shard != s.mesh->S)
        sr_log_info("resume: resharded from %d rank%s (shard %d x replicate %d) to %d (shard %d x replicate %d)",
                    mf->world, mf->world == 1 ? "" : "s", mf->mesh_shard, mf->mesh_replicate, c->w->size, s.mesh->S,
                    s.mesh->R);
    if (sr_ctl_rank(c->ctl) == 0)
        log_config_changes(c, mf, path);
}

const char *sr_ckpt_resumed_from(const sr_ckpt *c) { return c && c->resumed_from[0] ? c->resumed_from : NULL; }

bool sr_ckpt_take_commit(sr_ckpt *c, sr_ckpt_commit *out) {
    if (!c || !c->have_commit)
        return false;
    *out = c->commit;
    c->have_commit = false;
    return true;
}

sr_status sr_ckpt_resume(sr_ckpt *c, sr_ckpt_progress *p, char *how, size_t how_len) {
    *p = (sr_ckpt_progress){0, 0};
    snprintf(how, how_len, "fresh");
    const char *mode = c->o->resume && c->o->resume[0] ? c->o->resume : "auto";
    if (strcmp(mode, "never") == 0) {
        sr_log_info("resume: checkpoint.resume is never: starting fresh");
        return SR_OK;
    }
    const char *explicit_path = strcmp(mode, "auto") != 0 ? mode : NULL;
    if (!explicit_path && !c->dir)
        return SR_OK;
    int64_t *steps = sr_calloc(MAX_CANDIDATES + 1, sizeof *steps);
    char *report = sr_calloc(1, 16384);
    if (!steps || !report) {
        free(steps);
        free(report);
        return sr_error_oom("the list of checkpoints");
    }
    sr_status result = candidates(c, explicit_path, steps);
    int n = result == SR_OK ? (int)steps[0] : 0;
    if (result == SR_OK && n == 0)
        sr_log_info("resume: no checkpoint in %s: starting fresh", c->dir);
    size_t used = 0;
    for (int i = 0; i < n; i++) {
        char path[PATH_MAX];
        if (explicit_path)
            FMT(path, "%s", explicit_path);
        else
            FMT(path, "%s/step_%08lld", c->dir, (long long)steps[1 + i]);
        sr_manifest mf;
        bool shape = false;
        uint64_t verified = 0;
        double t0 = now_s();
        int dirfd = open_candidate(c, path, explicit_path ? 0 : steps[1 + i], explicit_path != NULL);
        sr_status mine = load_one(c, path, dirfd, &mf, &shape, &verified);
        if (dirfd >= 0)
            close(dirfd);
        sr_ctl_word *all = NULL;
        sr_status st = sr_ctl_agree(c->ctl, mine, shape, verified, mine == SR_OK ? NULL : sr_error_message(), &all);
        if (st == SR_OK) {
            log_loaded(c, path, &mf, all, now_s() - t0);
            *p = (sr_ckpt_progress){mf.step, mf.cursor};
            c->last_step = mf.step;
            snprintf(how, how_len, "%lld", (long long)mf.step);
            FMT(c->resumed_from, "%s", path);
            FMT(c->init_path, "%s", mf.init_path);
            FMT(c->init_sha256, "%s", mf.init_sha256);
            sr_manifest_free(&mf);
            free(all);
            result = sr_fsdp_state_loaded(c->f); /* offload: the device copy of the parameters */
            break;
        }
        if (mine == SR_OK)
            sr_manifest_free(&mf);
        bool any_shape = false;
        for (int r = 0; all && r < sr_ctl_size(c->ctl); r++)
            any_shape = any_shape || all[r].flag;
        free(all);
        result = st;
        if (st == SR_ERR_PEER || st == SR_ERR_INTERNAL || st == SR_ERR_CONFIG) /* CONFIG: the data differs */
            break;
        /* the first failing rank's reason, kept for the final message */
        char reason[1100];
        FMT(reason, "%s", sr_error_message());
        if (used < 16383) { /* the list of reasons, truncated at 16 KiB */
            int k = snprintf(report + used, 16384 - used, "%s  %s: %s", used ? "\n" : "", path, reason);
            used = k < 0 ? used : (used + (size_t)k < 16383 ? used + (size_t)k : 16383);
        }
        if (any_shape || explicit_path) {
            result = sr_error(SR_ERR_DATA, "checkpoint refused: %s", reason);
            break;
        }
        sr_log_warn("resume: %s is unusable: %s%s", path, reason,
                    i + 1 < n ? "; trying the next older checkpoint" : "");
        if (i + 1 == n)
            result = sr_error(SR_ERR_DATA,
                              "none of the %d checkpoint%s in %s verifies; not starting from scratch:\n%s\n(hint: "
                              "`shardrun ckpt verify %s` for details; set checkpoint.resume: never, or move them "
                              "away, to start fresh)",
                              n, n == 1 ? "" : "s", c->dir, report, c->dir);
    }
    free(report);
    free(steps);
    return result;
}

/* ------------------------------------------------------------------------ */
/* saving */

/* Retention (rank 0, after a commit): keep the newest checkpoint.keep, the
 * multiples of checkpoint.keep_every and the one just committed; delete the
 * rest by renaming each to a dot name first (a crash mid-delete leaves a
 * name the loader ignores and the next run removes). */
static void retain(sr_ckpt *c, int64_t committed) {
    int64_t *steps = sr_calloc(MAX_CANDIDATES, sizeof *steps);
    if (!steps) {
        sr_log_warn("checkpoint: out of memory for retention; older checkpoints are kept");
        return;
    }
    char odd[300];
    int n = sr_ckpt_scan(c->dirfd, steps, MAX_CANDIDATES, odd, sizeof odd);
    if (odd[0])
        sr_log_warn("checkpoint: %s/%s is not a real checkpoint directory: retention leaves it alone", c->dir, odd);
    for (int i = 0; i < n; i++) {
        bool keep =
            i < c->o->keep || steps[i] == committed || (c->o->keep_every > 0 && steps[i] % c->o->keep_every == 0);
        if (keep)
            continue;
        char from[32], to[32], path[PATH_MAX];
        FMT(from, "step_%08lld", (long long)steps[i]);
        FMT(to, ".step_%08lld.del", (long long)steps[i]);
        FMT(path, "%s/%s", c->dir, from);
        /* only the files its manifest names: read it before anything moves */
        sr_manifest mf = {0};
        int sub = sr_fsio_open_subdir(c->dirfd, from);
        sr_status ms =
            sub < 0 ? sr_error(SR_ERR_NOINPUT, "%s: %s", path, strerror(errno)) : sr_manifest_load(sub, path, &mf);
        if (sub >= 0)
            close(sub);
        if (ms != SR_OK) {
            sr_log_warn("checkpoint: retention leaves %s alone: its manifest cannot be read (%s)", path,
                        sr_error_message());
            sr_manifest_free(&mf);
            continue;
        }
        /* names only: renameat moves the entry itself, and the removal opens
         * it with O_NOFOLLOW, so nothing outside the directory is touched */
        int rc = renameat(c->dirfd, from, c->dirfd, to) != 0 ? -1 : remove_step_dir(c, to, named_by_manifest, &mf);
        sr_manifest_free(&mf);
        if (rc != 0 && errno != ENOTEMPTY)
            sr_log_warn("checkpoint: cannot remove %s/%s: %s", c->dir, from, strerror(errno));
        else if (rc == 0)
            sr_log_info("checkpoint: removed %s/%s (checkpoint.keep %lld%s)", c->dir, from, (long long)c->o->keep,
                        c->o->keep_every ? ", keep_every" : "");
    }
    sr_fsio_fsync_dir(c->dir);
    free(steps);
}

/* Writes a whole small file and fsyncs it (the manifest, inside the
 * temporary directory that is renamed into place afterwards). */
static sr_status write_small_file(const char *path, const char *text, size_t len) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, SR_FSIO_FILE_MODE);
    if (fd < 0)
        return sr_fsio_create_error_ckpt(path, errno);
    sr_status st = SR_OK;
    if (sr_fsio_write_all(fd, text, len) != 0 || fsync(fd) != 0)
        st = sr_fsio_write_error_ckpt(path, errno);
    if (close(fd) != 0 && st == SR_OK)
        st = sr_fsio_write_error_ckpt(path, errno);
    return st;
}

/* Points `latest` at step_<step> (symlink + rename: atomic). */
static sr_status update_latest(sr_ckpt *c, int64_t step) {
    char link_tmp[PATH_MAX], link[PATH_MAX], target[32];
    FMT(link_tmp, "%s/.latest.tmp", c->dir);
    FMT(link, "%s/latest", c->dir);
    FMT(target, "step_%08lld", (long long)step);
    unlink(link_tmp);
    if (symlink(target, link_tmp) != 0 || rename(link_tmp, link) != 0) {
        sr_log_warn("checkpoint: cannot update %s: %s (the checkpoint itself is committed)", link, strerror(errno));
        return SR_OK;
    }
    return sr_fsio_fsync_dir(c->dir) == 0 ? SR_OK : sr_fsio_write_error_ckpt(c->dir, errno);
}

/* Rank 0's half of the commit: manifest, rename, parent fsync, latest,
 * retention. */
static sr_status commit_rank0(sr_ckpt *c, const sr_ckpt_progress *p, const char *tmp, const char *final,
                              const sr_manifest *mf) {
    sr_fsdp_layout s;
    sr_fsdp_layout_get(c->f, &s);
    char *text = NULL;
    size_t len = 0;
    sr_status st = sr_manifest_render(mf, c->model, s.plan, &text, &len);
    if (st != SR_OK)
        return st;
    crash_site("before_manifest", p->step);
    char path[PATH_MAX];
    FMT(path, "%s/%s", tmp, SR_MANIFEST_NAME);
    st = write_small_file(path, text, len);
    free(text);
    if (st != SR_OK)
        return st;
    crash_site("after_manifest", p->step);
    if (sr_fsio_fsync_dir(tmp) != 0)
        return sr_fsio_write_error_ckpt(tmp, errno);
    crash_site("before_rename", p->step);
    /* an older run's checkpoint of the same step is replaced: its entry is
     * moved aside by name and removed without following it (a symbolic link
     * there loses the link, never what it points to) */
    char final_name[32], old_name[32];
    FMT(final_name, "step_%08lld", (long long)p->step);
    FMT(old_name, ".step_%08lld.old", (long long)p->step);
    struct stat sb;
    bool replaced = false, replaced_dir = false;
    if (fstatat(c->dirfd, final_name, &sb, AT_SYMLINK_NOFOLLOW) == 0) {
        if (renameat(c->dirfd, final_name, c->dirfd, old_name) != 0)
            return sr_error(SR_ERR_CANTCREAT, "%s: cannot move the existing checkpoint aside: %s", final,
                            strerror(errno));
        replaced = true;
        replaced_dir = S_ISDIR(sb.st_mode);
        if (!replaced_dir)
            sr_log_warn("checkpoint: %s was %s, not a checkpoint directory; the new checkpoint replaces the entry "
                        "(what it pointed to is untouched)",
                        final, sr_fsio_kind(sb.st_mode));
    }
    if (rename(tmp, final) != 0)
        return sr_error(SR_ERR_CANTCREAT, "%s: cannot rename into place: %s", final, strerror(errno));
    if (sr_fsio_fsync_dir(c->dir) != 0)
        return sr_fsio_write_error_ckpt(c->dir, errno);
    crash_site("after_rename", p->step);
    if (replaced &&
        (replaced_dir ? remove_step_dir(c, old_name, written_by_save, NULL) : unlinkat(c->dirfd, old_name, 0)) != 0 &&
        errno != ENOTEMPTY)
        sr_log_warn("checkpoint: cannot remove %s/%s: %s", c->dir, old_name, strerror(errno));
    crash_site("before_latest", p->step);
    st = update_latest(c, p->step);
    if (st != SR_OK)
        return st;
    crash_site("after_latest", p->step);
    retain(c, p->step);
    return SR_OK;
}

/* Phase 1: rank 0 makes the temporary directory. */
static sr_status save_begin(sr_ckpt *c, const char *tmp) {
    sr_status st = SR_OK;
    if (sr_ctl_rank(c->ctl) == 0) {
        sr_fsio_remove_dir(tmp, written_by_save, NULL, NULL, 0);
        if (mkdir(tmp, SR_FSIO_DIR_MODE) != 0)
            st = sr_fsio_create_error_ckpt(tmp, errno);
    }
    return sr_ctl_agree(c->ctl, st, 0, 0, st == SR_OK ? NULL : sr_error_message(), NULL);
}

/* One rank's record in the shards phase: its word, then its chunk digests. */
typedef struct {
    size_t bytes;     /* per record */
    uint64_t nchunks; /* room for digests */
    unsigned char *all;
} records;

static sr_ctl_word *record_word(const records *r, int rank) {
    return (sr_ctl_word *)(r->all + (size_t)rank * r->bytes);
}

/* The records of a save: room for every rank's word and digests, and this
 * rank's own record (*mine, freed by the caller). */
static sr_status records_alloc(sr_ckpt *c, const sr_manifest *proto, records *rec, unsigned char **mine) {
    sr_fsdp_layout s;
    sr_fsdp_layout_get(c->f, &s);
    uint64_t max_bytes = sr_manifest_file_bytes(proto, sr_shardplan_shard_elements(s.plan, 0));
    rec->nchunks = (max_bytes + SR_SHARD_CHUNK_BYTES - 1) / SR_SHARD_CHUNK_BYTES;
    rec->bytes = sizeof(sr_ctl_word) + (size_t)rec->nchunks * 32;
    *mine = sr_calloc(1, rec->bytes);
    rec->all = sr_calloc((size_t)c->w->size, rec->bytes);
    if (!*mine || !rec->all) {
        free(*mine);
        *mine = NULL;
        free(rec->all);
        rec->all = NULL;
        return sr_error_oom("the checkpoint records");
    }
    return SR_OK;
}

/* Replica 0 of a shard index writes its file from the snapshot snap[k]
 * (host memory, slices end to end) or, snap NULL, from the live state
 * through the engine (after sr_fsdp_state_sync), and fills its record
 * (status, bytes, digests). */
static void write_mine(sr_ckpt *c, const sr_ckpt_progress *p, const char *tmp, const sr_manifest *proto,
                       unsigned char *mine, float *const *snap) {
    sr_fsdp_layout s;
    sr_fsdp_layout_get(c->f, &s);
    sr_ctl_word *me = (sr_ctl_word *)mine;
    if (s.mesh->rep_idx != 0)
        return;
    uint64_t elements = 0;
    for (int i = 0; i < s.nslices; i++)
        elements += s.slices[i].end - s.slices[i].begin;
    sr_shardfile_piece pieces[SR_NSTATE * 64], *pc = pieces;
    if (SR_NSTATE * s.nslices > (int)(sizeof pieces / sizeof pieces[0]))
        pc = sr_malloc(sizeof *pc * (size_t)(SR_NSTATE * s.nslices));
    sr_status ws = pc ? SR_OK : sr_error_oom("the checkpoint piece list");
    state_io io[SR_NSTATE];
    for (int k = 0; pc && k < SR_NSTATE; k++) {
        io[k] = (state_io){c->f, k};
        size_t at = 0;
        for (int i = 0; i < s.nslices; i++) {
            size_t n = s.slices[i].end - s.slices[i].begin;
            pc[k * s.nslices + i] = snap ? (sr_shardfile_piece){snap[k] + at, n * sizeof(float), NULL, NULL, 0}
                                         : (sr_shardfile_piece){NULL, n * sizeof(float), state_get, &io[k],
                                                                s.slices[i].local * sizeof(float)};
            at += n;
        }
    }
    char path[PATH_MAX];
    FMT(path, "%s/shard_%05d.bin", tmp, s.mesh->shard_idx);
    if (ws == SR_OK)
        ws = sr_shardfile_write(path, s.mesh->shard_idx, s.mesh->S, s.nslices, p->step, elements, pc,
                                SR_NSTATE * s.nslices, (unsigned char(*)[32])(mine + sizeof(sr_ctl_word)));
    if (pc != pieces)
        free(pc);
    me->status = (int32_t)ws;
    me->value = sr_manifest_file_bytes(proto, elements);
    if (ws != SR_OK)
        FMT(me->msg, "%s", sr_error_message());
    else
        crash_site("after_shard_write", p->step);
}

/* Every rank's (status, bytes, digests) gathered to every rank; the first
 * failing rank's status and message. */
static sr_status gather_records(sr_ckpt *c, records *rec, const unsigned char *mine, uint64_t *total,
                                bool *transport_failed) {
    sr_status st = sr_ctl_allgather(c->ctl, rec->all, mine, rec->bytes);
    *transport_failed = st != SR_OK;
    for (int r = 0; st == SR_OK && r < c->w->size; r++) {
        sr_ctl_word *a = record_word(rec, r);
        *total += a->value;
        a->msg[sizeof a->msg - 1] = '\0';
        if (a->status != SR_OK)
            st = r == sr_ctl_rank(c->ctl) ? sr_error((sr_status)a->status, "%s", a->msg)
                                          : sr_error((sr_status)a->status, "rank %d: %s", r, a->msg);
    }
    return st;
}

/* Phase 2 of a synchronous save: replica 0 of every shard index writes its
 * file from the live state; the records are gathered. */
/* write_mine as a span of log.trace_steps' window (a background write
 * begun in the window may end after it: the trace file waits for it). */
static void traced_write(sr_ckpt *c, const sr_ckpt_progress *p, const char *tmp, const sr_manifest *proto,
                         unsigned char *mine, float *const *snap, const char *what, int64_t t0) {
    write_mine(c, p, tmp, proto, mine, snap);
    char detail[48];
    snprintf(detail, sizeof detail, "step %lld", (long long)p->step);
    sr_trace_late_end(SR_TRACE_CKPT, what, t0, detail);
}

static sr_status save_shards(sr_ckpt *c, const sr_ckpt_progress *p, const char *tmp, const sr_manifest *proto,
                             records *rec, uint64_t *total, bool *transport_failed) {
    unsigned char *mine = NULL;
    sr_status st = records_alloc(c, proto, rec, &mine);
    if (st != SR_OK)
        return st;
    st = sr_fsdp_state_sync(c->f);
    if (st != SR_OK) {
        free(mine);
        return st;
    }
    traced_write(c, p, tmp, proto, mine, NULL, "checkpoint write (synchronous)", sr_trace_late_begin());
    st = gather_records(c, rec, mine, total, transport_failed);
    free(mine);
    return st;
}

/* The manifest of this save: progress and job facts, and one file entry per
 * shard index (its slices from the shard plan, its digests from the
 * records of replica 0's ranks). */
static sr_status build_manifest(sr_ckpt *c, const sr_ckpt_progress *p, const records *rec, sr_manifest *mf) {
    sr_fsdp_layout s;
    sr_fsdp_layout_get(c->f, &s);
    const sr_ckpt_opts *o = c->o;
    mf->step = p->step;
    mf->cursor = p->cursor;
    mf->tokens = p->cursor * (uint64_t)c->model->d.T;
    mf->seed = o->seed;
    FMT(mf->schedule, "%s", o->schedule_name);
    mf->lr = o->schedule.lr;
    mf->min_lr = o->schedule.min_lr;
    mf->warmup_steps = (uint64_t)o->schedule.warmup_steps;
    mf->steps = (uint64_t)o->schedule.steps;
    mf->next_lr = sr_lr_at(&o->schedule, p->step);
    mf->world = c->w->size;
    mf->mesh_shard = s.mesh->S;
    mf->mesh_replicate = s.mesh->R;
    FMT(mf->isa, "%s", o->isa);
    mf->dims = c->model->d;
    mf->n_params = c->model->n_params;
    sr_manifest_model_hash(&mf->dims, mf->model_hash);
    FMT(mf->init_path, "%s", c->init_path);
    FMT(mf->init_sha256, "%s", c->init_sha256);
    mf->has_data = c->data != NULL;
    if (c->data)
        mf->data = *c->data; /* borrowed: drop_manifest leaves it */
    mf->chunk_bytes = SR_SHARD_CHUNK_BYTES;
    time_t t = time(NULL);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(mf->created, sizeof mf->created, "%Y-%m-%dT%H:%M:%SZ", &tm);
    FMT(mf->job, "%s", c->w->job_id);
    FMT(mf->host, "%s", c->w->host);
    mf->nconfig = o->nkeys;
    mf->ckeys = (char **)o->keys; /* borrowed: not freed, see sr_ckpt_save */
    mf->cvals = (char **)o->values;
    mf->nfiles = s.mesh->S;
    mf->files = sr_calloc((size_t)mf->nfiles, sizeof(sr_manifest_file));
    sr_slice *sl = sr_malloc(sizeof *sl * (size_t)(s.plan->nunits + 1));
    if (!mf->files || !sl) {
        free(sl);
        return sr_error_oom("the manifest");
    }
    for (int i = 0; i < mf->nfiles; i++) {
        sr_manifest_file *f = &mf->files[i];
        const unsigned char *r = (const unsigned char *)record_word(rec, sr_mesh_world_rank(s.mesh, 0, i));
        FMT(f->name, "shard_%05d.bin", i);
        f->shard = i;
        f->bytes = ((const sr_ctl_word *)r)->value;
        f->elements = (f->bytes - SR_SHARD_HEADER_BYTES) / (4 * SR_NSTATE);
        f->nchunks = (f->bytes + SR_SHARD_CHUNK_BYTES - 1) / SR_SHARD_CHUNK_BYTES;
        f->sha = (unsigned char(*)[32])(r + sizeof(sr_ctl_word)); /* borrowed */
        f->nslices = sr_shardplan_slices(s.plan, i, sl);
        f->slices = sr_calloc((size_t)f->nslices + 1, sizeof *f->slices);
        if (!f->slices) {
            free(sl);
            return sr_error_oom("the manifest");
        }
        for (int q = 0; q < f->nslices; q++) {
            f->slices[q][0] = sl[q].begin;
            f->slices[q][1] = sl[q].end - sl[q].begin;
        }
    }
    free(sl);
    return SR_OK;
}

/* Frees what build_manifest allocated (the borrowed parts stay). */
static void drop_manifest(sr_manifest *mf) {
    for (int i = 0; mf->files && i < mf->nfiles; i++)
        free(mf->files[i].slices);
    free(mf->files);
}

/* Phase 3: rank 0 commits; on failure the temporary directory goes. */
static sr_status save_commit(sr_ckpt *c, const sr_ckpt_progress *p, const char *tmp, const char *final,
                             const records *rec, sr_status st) {
    if (sr_ctl_rank(c->ctl) != 0)
        return st;
    if (st == SR_OK) {
        sr_manifest mf = {.state_dtype = {SR_DT_F32, SR_DT_F32, SR_DT_F32}};
        st = build_manifest(c, p, rec, &mf);
        if (st == SR_OK)
            st = commit_rank0(c, p, tmp, final, &mf);
        drop_manifest(&mf);
    }
    if (st != SR_OK)
        sr_fsio_remove_dir(tmp, written_by_save, NULL, NULL, 0); /* keeps the error message: records none */
    return st;
}

sr_status sr_ckpt_save(sr_ckpt *c, const sr_ckpt_progress *p, uint64_t *bytes_out) {
    if (bytes_out)
        *bytes_out = 0;
    if (!c->dir)
        return SR_OK;
    double t0 = now_s();
    char tmp[PATH_MAX], final[PATH_MAX];
    FMT(tmp, "%s/.step_%08lld.tmp", c->dir, (long long)p->step);
    FMT(final, "%s/step_%08lld", c->dir, (long long)p->step);
    sr_log_info("checkpoint: saving step %lld to %s", (long long)p->step, final);

    sr_status st = save_begin(c, tmp);
    if (st != SR_OK)
        return sr_error_wrap(st, "checkpoint at step %lld not saved (earlier checkpoints are untouched)",
                             (long long)p->step);
    records rec = {0};
    uint64_t total = 0;
    const sr_manifest proto = {.state_dtype = {SR_DT_F32, SR_DT_F32, SR_DT_F32}};
    bool transport_failed = false;
    st = save_shards(c, p, tmp, &proto, &rec, &total, &transport_failed);
    if (transport_failed) {
        free(rec.all);
        return st;
    }
    st = save_commit(c, p, tmp, final, &rec, st);
    free(rec.all);
    /* Phase 4: the final agreement: nobody exits before the commit is known */
    sr_status fin = sr_ctl_agree(c->ctl, sr_ctl_rank(c->ctl) == 0 ? st : SR_OK, 0, 0,
                                 st == SR_OK ? NULL : sr_error_message(), NULL);
    if (st == SR_OK)
        st = fin;
    if (st != SR_OK)
        return sr_error_wrap(st, "checkpoint at step %lld not saved (earlier checkpoints are untouched)",
                             (long long)p->step);
    double dt = now_s() - t0;
    c->last_step = p->step;
    c->commit = (sr_ckpt_commit){p->step, p->step, dt, total, false};
    c->have_commit = true;
    if (bytes_out)
        *bytes_out = total;
    sr_log_info("checkpoint: step %lld saved: %.1f MB in %.2f s (%.0f MB/s, SHA-256 per 4 MiB chunk)",
                (long long)p->step, (double)total / 1e6, dt, (double)total / 1e6 / (dt > 0 ? dt : 1e-9));
    return SR_OK;
}

/* ------------------------------------------------------------------------ */
/* asynchronous saves */

/* The save in flight: begun (temporary directory made, snapshot taken),
 * written by this rank's writer thread, committed by sr_ckpt_poll once
 * every rank's writer is done. */
struct pending {
    sr_ckpt *c;
    sr_ckpt_progress p;
    char tmp[PATH_MAX], final[PATH_MAX];
    records rec;
    unsigned char *mine;
    const sr_manifest *proto;
    pthread_t thread;
    bool thread_started;
    atomic_bool done;      /* the writer finished: mine holds its record */
    double t0, snapshot_s; /* start, and the stall of the snapshot */
    int64_t trace_t0;      /* log.trace_steps: the write's span began (0: not traced) */
    double write_s;        /* the writer's time (set before done) */
    sr_mem_ctx *mem;       /* the starting thread's accounting (virtual ranks) */
    int log_rank, log_world;
};

static const sr_manifest state_proto = {.state_dtype = {SR_DT_F32, SR_DT_F32, SR_DT_F32}};

static void *writer_main(void *arg) {
    struct pending *pd = arg;
    sr_mem_bind(pd->mem);
    sr_log_bind_rank(pd->log_rank, pd->log_world);
    int64_t delay = sr_testhook()->ckpt_write_delay_ms;
    if (delay > 0) {
        struct timespec ts = {(time_t)(delay / 1000), (long)(delay % 1000) * 1000000L};
        while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
            ;
    }
    double t0 = now_s();
    traced_write(pd->c, &pd->p, pd->tmp, pd->proto, pd->mine, pd->c->snap, "checkpoint write (background)",
                 pd->trace_t0);
    pd->write_s = now_s() - t0;
    atomic_store(&pd->done, true);
    return NULL;
}

/* The writer as a thread of its own: below the training threads (Linux: a
 * thread's own nice value), so it takes the cores they leave idle; if that
 * fails it just competes at normal priority. */
static void *writer_thread(void *arg) {
    (void)setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), 10);
    return writer_main(arg);
}

static void pending_free(sr_ckpt *c) {
    struct pending *pd = c->pend;
    if (!pd)
        return;
    if (pd->thread_started)
        pthread_join(pd->thread, NULL);
    free(pd->mine);
    free(pd->rec.all);
    free(pd);
    c->pend = NULL;
}

/* The snapshot of this rank's state (replica 0 ranks: params, m, v of its
 * slices) in host memory allocated and touched now, when every rank's fits
 * checkpoint.async_max_mb; otherwise saves stay synchronous and rank 0
 * says why.  Collective. */
static sr_status setup_async(sr_ckpt *c) {
    const sr_ckpt_opts *o = c->o;
    if (!o->async)
        return SR_OK;
    sr_fsdp_layout s;
    sr_fsdp_layout_get(c->f, &s);
    uint64_t elements = 0;
    for (int i = 0; s.mesh->rep_idx == 0 && i < s.nslices; i++)
        elements += s.slices[i].end - s.slices[i].begin;
    uint64_t bytes = 0, max = async_max_bytes(o, c->w->local_size);
    bool fits = sr_ckpt_snapshot_fits(o, sizeof(float) * elements, c->w->local_size, &bytes);
    double vals[2] = {fits ? 0.0 : 1.0, (double)bytes};
    sr_status st = sr_ctl_sum(c->ctl, vals, 2);
    if (st != SR_OK)
        return st;
    char a[32], b[32];
    if (vals[0] > 0) {
        sr_log_warn("checkpoint.async: the snapshot of %s per rank does not fit checkpoint.async_max_mb (%s%s) on %.0f "
                    "rank%s: saves are synchronous (hint: raise checkpoint.async_max_mb, or use more ranks)",
                    size_str(a, sizeof a, (double)bytes), size_str(b, sizeof b, (double)max),
                    o->async_max_mb > 0 ? "" : ": 25% of the node's memory divided by its ranks", vals[0],
                    vals[0] == 1 ? "" : "s");
        return SR_OK;
    }
    sr_status mine = SR_OK;
    for (int k = 0; k < SR_NSTATE && elements > 0 && mine == SR_OK; k++) {
        size_t n = (size_t)elements * sizeof(float);
        c->snap[k] = sr_fsdp_host_alloc(c->f, SR_MEM_CKPT_STAGING, n);
        if (!c->snap[k])
            mine = sr_error(SR_ERR_INTERNAL,
                            "out of memory for the checkpoint snapshot (%s; hint: "
                            "checkpoint.async: false)",
                            size_str(a, sizeof a, (double)bytes));
        else
            memset(c->snap[k], 0, n); /* touched now, not at the first save */
    }
    c->snap_elements = elements;
    st = sr_ctl_agree(c->ctl, mine, 0, 0, mine == SR_OK ? NULL : sr_error_message(), NULL);
    c->async = st == SR_OK;
    return st;
}

bool sr_ckpt_snapshot_fits(const sr_ckpt_opts *o, uint64_t state_bytes, int local_size, uint64_t *snapshot_bytes) {
    uint64_t snap = state_bytes <= UINT64_MAX / SR_NSTATE ? SR_NSTATE * state_bytes : UINT64_MAX;
    *snapshot_bytes = snap;
    return o->dir && o->dir[0] && o->async && snap != UINT64_MAX && snap <= async_max_bytes(o, local_size);
}

bool sr_ckpt_async(const sr_ckpt *c) { return c && c->async; }
int64_t sr_ckpt_pending_step(const sr_ckpt *c) { return c && c->pend ? c->pend->p.step : -1; }

/* Copies this rank's state into the snapshot through the engine (a
 * download where it is device memory; a copy over the OpenMP team where it
 * is host memory), ordered after the step's update by sr_fsdp_state_sync. */
static sr_status take_snapshot(sr_ckpt *c) {
    sr_fsdp_layout s;
    sr_fsdp_layout_get(c->f, &s);
    if (s.mesh->rep_idx != 0)
        return SR_OK;
    sr_status st = sr_fsdp_state_sync(c->f);
    for (int k = 0; k < SR_NSTATE && st == SR_OK; k++) {
        size_t at = 0;
        for (int i = 0; i < s.nslices && st == SR_OK; i++) {
            size_t n = s.slices[i].end - s.slices[i].begin;
            st = sr_fsdp_state_read(c->f, k, s.slices[i].local, n, c->snap[k] + at);
            at += n;
        }
    }
    return st == SR_OK ? SR_OK : SR_ERR_INTERNAL;
}

sr_status sr_ckpt_save_async(sr_ckpt *c, const sr_ckpt_progress *p, int64_t *waited_for) {
    if (waited_for)
        *waited_for = -1;
    if (!c->dir)
        return SR_OK;
    if (!c->async)
        return sr_ckpt_save(c, p, NULL);
    if (c->pend) {
        int64_t prev = c->pend->p.step;
        double t = now_s();
        sr_log_info("checkpoint: step %lld is due while step %lld is still being written: waiting for it",
                    (long long)p->step, (long long)prev);
        sr_status st = sr_ckpt_poll(c, p->step, true);
        if (st != SR_OK)
            return st;
        sr_log_info("checkpoint: waited %.2f s for the save of step %lld", now_s() - t, (long long)prev);
        if (waited_for)
            *waited_for = prev;
    }
    struct pending *pd = sr_calloc(1, sizeof *pd);
    if (!pd)
        return sr_error_oom("the checkpoint in flight");
    *pd = (struct pending){.c = c,
                           .p = *p,
                           .proto = &state_proto,
                           .t0 = now_s(),
                           .mem = sr_mem_bound(),
                           .log_rank = sr_log_rank(),
                           .log_world = c->w->size};
    atomic_init(&pd->done, false);
    FMT(pd->tmp, "%s/.step_%08lld.tmp", c->dir, (long long)p->step);
    FMT(pd->final, "%s/step_%08lld", c->dir, (long long)p->step);
    c->pend = pd;
    sr_log_info("checkpoint: saving step %lld to %s (asynchronous: a snapshot, then a background write)",
                (long long)p->step, pd->final);
    sr_status st = save_begin(c, pd->tmp);
    if (st == SR_OK)
        st = records_alloc(c, pd->proto, &pd->rec, &pd->mine);
    if (st != SR_OK) {
        pending_free(c);
        return sr_error_wrap(st, "checkpoint at step %lld not saved (earlier checkpoints are untouched)",
                             (long long)p->step);
    }
    sr_ctl_word *me = (sr_ctl_word *)pd->mine;
    int64_t ts0 = sr_trace_on() ? sr_trace_now() : 0;
    sr_status snap_st = take_snapshot(c);
    if (ts0)
        sr_trace_span(SR_TRACE_CKPT, "checkpoint snapshot", ts0, sr_trace_now(), -1, NULL);
    if (snap_st != SR_OK) {
        /* reported through the records at the commit, like a failed write */
        me->status = SR_ERR_INTERNAL;
        FMT(me->msg, "%s", sr_error_message());
        atomic_store(&pd->done, true);
    } else if (c->snap_elements == 0) {
        atomic_store(&pd->done, true); /* nothing to write on this rank */
    } else if ((pd->trace_t0 = sr_trace_late_begin()), pthread_create(&pd->thread, NULL, writer_thread, pd) == 0) {
        pd->thread_started = true;
    } else {
        writer_main(pd); /* no thread: write now (the save is then synchronous on this rank) */
    }
    pd->snapshot_s = now_s() - pd->t0;
    return SR_OK;
}

sr_status sr_ckpt_poll(sr_ckpt *c, int64_t now_step, bool wait) {
    if (!c || !c->pend)
        return SR_OK;
    struct pending *pd = c->pend;
    if (wait && pd->thread_started) {
        pthread_join(pd->thread, NULL);
        pd->thread_started = false;
    }
    double busy = atomic_load(&pd->done) ? 0.0 : 1.0;
    sr_status st = sr_ctl_sum(c->ctl, &busy, 1);
    if (st != SR_OK || busy > 0)
        return st; /* a transport failure ends the run; busy: ask again at the next step */
    if (pd->thread_started) {
        pthread_join(pd->thread, NULL);
        pd->thread_started = false;
    }
    uint64_t total = 0;
    bool transport_failed = false;
    st = gather_records(c, &pd->rec, pd->mine, &total, &transport_failed);
    sr_ckpt_progress p = pd->p;
    if (!transport_failed) {
        st = save_commit(c, &p, pd->tmp, pd->final, &pd->rec, st);
        sr_status fin = sr_ctl_agree(c->ctl, sr_ctl_rank(c->ctl) == 0 ? st : SR_OK, 0, 0,
                                     st == SR_OK ? NULL : sr_error_message(), NULL);
        if (st == SR_OK)
            st = fin;
    }
    double took = now_s() - pd->t0, snap = pd->snapshot_s, write = pd->write_s;
    pending_free(c);
    if (st != SR_OK)
        return transport_failed
                   ? st
                   : sr_error_wrap(st, "checkpoint at step %lld not saved (earlier checkpoints are untouched)",
                                   (long long)p.step);
    c->last_step = p.step;
    c->commit = (sr_ckpt_commit){p.step, now_step, took, total, true};
    c->have_commit = true;
    sr_log_info("checkpoint: step %lld saved (asynchronous: started at step %lld, committed at step %lld): %.1f MB; "
                "training stalled %.3f s for the snapshot, the background write took %.2f s (%.0f MB/s), %.2f s from "
                "start to commit",
                (long long)p.step, (long long)p.step, (long long)now_step, (double)total / 1e6, snap, write,
                write > 0 ? (double)total / c->w->size / 1e6 / write : 0.0, took);
    return SR_OK;
}

/* ------------------------------------------------------------------------ */
/* the resume policy before the directory is opened */

/* checkpoint.resume: "never", "auto" (the default) or a PATH. */
static bool resume_never(const sr_ckpt_opts *o) { return o->resume && strcmp(o->resume, "never") == 0; }
static bool resume_auto(const sr_ckpt_opts *o) { return !o->resume || !o->resume[0] || strcmp(o->resume, "auto") == 0; }
static bool has_dir(const sr_ckpt_opts *o) { return o->dir && o->dir[0]; }

bool sr_ckpt_may_resume(const sr_ckpt_opts *o) { return !resume_never(o) && (!resume_auto(o) || has_dir(o)); }

bool sr_ckpt_fresh_for_sure(const sr_ckpt_opts *o) {
    if (resume_never(o))
        return true;
    if (!resume_auto(o))
        return false;
    if (!has_dir(o))
        return true;
    DIR *d = opendir(o->dir);
    if (!d)
        return errno == ENOENT;
    bool any = false;
    for (struct dirent *e; !any && (e = readdir(d));)
        any = strncmp(e->d_name, "step_", 5) == 0;
    closedir(d);
    return !any;
}

/* checkpoint.async_max_mb in bytes: the key, or 25 % of the node's memory
 * divided by its `local_size` ranks when it is 0. */
static uint64_t async_max_bytes(const sr_ckpt_opts *o, int local_size) {
    if (o->async_max_mb > 0)
        return (uint64_t)o->async_max_mb << 20;
    size_t cap = sr_mem_side_copy_cap(local_size);
    return cap == SIZE_MAX ? UINT64_MAX : (uint64_t)cap;
}
