/* ckpt_dir.c — the checkpoint directory of a run: resolved, opened and
 * locked (one run at a time), its leftovers removed, the space checked
 * before the first save, closed; and retention after a commit (the newest
 * checkpoint.keep, every checkpoint.keep_every-th; the rest renamed to a
 * dot name, then deleted).  Part of the ckpt module (ckpt.h, ckpt_impl.h). */
#include "srconfig.h"

#include "ckpt_impl.h"

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

#include "clock.h"
#include "fsio.h"
#include "mem.h"
#include "provenance.h"
#include "shardfile.h"
#include "testhook.h"
#include "trace.h"

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
    sr_clock_iso(-1, when, sizeof when);
    int n =
        snprintf(info, sizeof info, "host %s pid %d job %s since %s\n", c->w->host, (int)getpid(), c->w->job_id, when);
    if (ftruncate(c->lock_fd, 0) != 0 || pwrite(c->lock_fd, info, (size_t)n, 0) != n)
        sr_log_warn("%s: cannot record the lock holder: %s", path, strerror(errno));
    return SR_OK;
}

void sr_ckpt_guard_outputs(void) { sr_fsio_guard_marker(SR_MANIFEST_NAME, "a checkpoint's step directory"); }

/* Names a save writes into a step directory (a leftover's files). */
bool ckpt_written_by_save(const char *name, void *ctx) {
    (void)ctx;
    return strcmp(name, SR_MANIFEST_NAME) == 0 || sr_manifest_shard_name(name);
}

/* Names a committed checkpoint's manifest lists, and the manifest. */
bool ckpt_named_by_manifest(const char *name, void *ctx) {
    const sr_manifest *mf = ctx;
    for (int i = 0; i < mf->nfiles; i++)
        if (strcmp(name, mf->files[i].name) == 0)
            return true;
    return strcmp(name, SR_MANIFEST_NAME) == 0;
}

/* Removes step directory `name` of the checkpoint directory: the files
 * `owned` accepts, then the directory; what else is there stays, named in a
 * warning.  Returns sr_fsio_remove_dir_at's result (0: gone). */
int ckpt_remove_step_dir(const sr_ckpt *c, const char *name, sr_fsio_owned owned, void *ctx) {
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
            int rc = S_ISDIR(sb.st_mode) ? ckpt_remove_step_dir(c, de->d_name, ckpt_written_by_save, NULL)
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
const char *ckpt_size_str(char *buf, size_t n, double bytes) {
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
                        c->dir, ckpt_size_str(a, sizeof a, (double)avail), ckpt_size_str(b, sizeof b, (double)one));
    int64_t have[MAX_CANDIDATES];
    int64_t present = sr_ckpt_scan(c->dirfd, have, MAX_CANDIDATES, NULL, 0);
    int64_t keep = c->o->keep > 0 ? c->o->keep : 1;
    int64_t more = keep + 1 - (present < keep ? present : keep);
    double need = (double)more * (double)one;
    if ((double)avail < need)
        sr_log_warn("%s: %s free, below the %s that %lld more checkpoint%s of %s need (checkpoint.keep %lld + the one "
                    "being written, %lld already there): a later save may fail with a full disk (74)",
                    c->dir, ckpt_size_str(a, sizeof a, (double)avail), ckpt_size_str(b, sizeof b, need),
                    (long long)more, more == 1 ? "" : "s", ckpt_size_str(d, sizeof d, (double)one), (long long)keep,
                    (long long)present);
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
        st = ckpt_setup_async(c);
    return st;
}

void sr_ckpt_close(sr_ckpt *c) {
    if (!c)
        return;
    sr_ckpt_close(c->memtier);
    ckpt_tier_free(c);
    ckpt_pending_free(c); /* a failed run: its writer finishes; the next open removes the temporary directory */
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
/* Retention (rank 0, after a commit): keep the newest checkpoint.keep, the
 * multiples of checkpoint.keep_every and the one just committed; delete the
 * rest by renaming each to a dot name first (a crash mid-delete leaves a
 * name the loader ignores and the next run removes). */
void ckpt_retain(sr_ckpt *c, int64_t committed) {
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
        int rc =
            renameat(c->dirfd, from, c->dirfd, to) != 0 ? -1 : ckpt_remove_step_dir(c, to, ckpt_named_by_manifest, &mf);
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
