/* ckpt.c — loading and resuming a checkpoint: the state read back into
 * the engine (resharded to this run's slices), the directory scanned for
 * candidates newest first, each verified and the first that holds taken
 * (with fallback), and the resume policy before the directory opens; see
 * ckpt.h for what the module owns and shardrun-checkpoint(5) for the
 * format.  The module's other files: ckpt_dir.c (open, lock, leftovers,
 * retention), ckpt_save.c (the save phases and the commit), ckpt_async.c
 * (the asynchronous writer); ckpt_impl.h what they share.
 *
 * Written by hand because no library here does it: the resharding reader
 * and the fallback over candidates.
 *
 * Crash sites for the test suite (testhook.h): SHARDRUN_TEST_CRASH_AT=
 * SITE[:STEP][@RANK] kills the process with SIGKILL when it reaches SITE
 * (SHARDRUN_TEST_PAUSE_AT: stops it with SIGSTOP, for a test to kill the
 * whole job there)
 * (after_shard_write, before_manifest, after_manifest, before_rename,
 * after_rename, before_latest, after_latest; memory_committed: the memory
 * tier's commit, after the persistent sites a memory save passes too).  In an asynchronous save
 * after_shard_write is reached on the writer thread, the others at the
 * commit, on the main thread, a step or more later. */
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
#include "line.h"
#include "mem.h"
#include "provenance.h"
#include "shardfile.h"
#include "testhook.h"
#include "trace.h"

void ckpt_crash_site(const char *site, int64_t step) {
    sr_testhook_pause_point(site, step, sr_log_rank());
    if (!sr_testhook_crash_here(site, step, sr_log_rank()))
        return;
    fprintf(stderr, "shardrun: test: SHARDRUN_TEST_CRASH_AT: killing rank %d at %s (step %lld)\n", sr_log_rank(), site,
            (long long)step);
    kill(getpid(), SIGKILL);
}
/* ------------------------------------------------------------------------ */
/* reading state */

static sr_status state_put(void *ctx, uint64_t at, const void *src, size_t bytes) {
    const state_io *io = ctx;
    return sr_fsdp_state_write(io->f, io->k, (size_t)(at / sizeof(float)), bytes / sizeof(float), src);
}

sr_status ckpt_state_get(void *ctx, uint64_t at, void *dst, size_t bytes) {
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
    /* train.steps: the schedule is stretched over the new number of steps,
     * so the next step's learning rate moves (one warning, with both) */
    const sr_lr_schedule *now = &c->o->schedule;
    bool steps_changed = mf->steps > 0 && (int64_t)mf->steps != now->steps;
    if (steps_changed) {
        sr_lr_schedule was = *now;
        was.steps = (int64_t)mf->steps;
        int64_t next = (int64_t)mf->step; /* the next step's index (0-based) */
        char before[32], after[32];
        snprintf(before, sizeof before, "%.4g", sr_lr_at(&was, next));
        snprintf(after, sizeof after, "%.4g", sr_lr_at(now, next));
        sr_log_warn("resume: train.steps changed since %s: %llu -> %lld; the schedule (train.schedule %s) is stretched "
                    "over the new steps: the learning rate of step %lld is %s (it was to be %s)%s",
                    path, (unsigned long long)mf->steps, (long long)now->steps,
                    c->o->schedule_name ? c->o->schedule_name : "as set", (long long)next + 1, after, before,
                    strcmp(before, after) == 0 ? ""
                                               : " (hint: to extend a run without moving its learning rate, choose "
                                                 "the final train.steps at the start)");
    }
    for (int i = 0; i < c->o->nkeys; i++) {
        const char *k = c->o->keys[i];
        if (strcmp(k, "checkpoint.resume") == 0 || strcmp(k, "model.init") == 0)
            continue; /* (a resume ignores model.init: the run says so in one line) */
        if (steps_changed && strcmp(k, "train.steps") == 0)
            continue; /* said above */
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

sr_status ckpt_load_agreed(sr_ckpt *c, const char *path, int dirfd, sr_ckpt_progress *p, char *how, size_t how_len,
                           bool *any_shape) {
    sr_manifest mf;
    bool shape = false;
    uint64_t verified = 0;
    double t0 = sr_clock_mono_s();
    sr_status mine = load_one(c, path, dirfd, &mf, &shape, &verified);
    sr_ctl_word *all = NULL;
    sr_status st = sr_ctl_agree(c->ctl, mine, shape, verified, mine == SR_OK ? NULL : sr_error_message(), &all);
    *any_shape = false;
    if (st == SR_OK) {
        log_loaded(c, path, &mf, all, sr_clock_mono_s() - t0);
        p->step = mf.step;
        p->cursor = mf.cursor;
        p->mix = mf.mix;
        c->last_step = mf.step;
        snprintf(how, how_len, "%lld", (long long)mf.step);
        FMT(c->resumed_from, "%s", path);
        FMT(c->init_path, "%s", mf.init_path);
        FMT(c->init_sha256, "%s", mf.init_sha256);
        sr_manifest_free(&mf);
        free(all);
        return SR_OK;
    }
    if (mine == SR_OK)
        sr_manifest_free(&mf);
    for (int r = 0; all && r < sr_ctl_size(c->ctl); r++)
        *any_shape = *any_shape || all[r].flag;
    free(all);
    return st;
}

sr_status sr_ckpt_resume(sr_ckpt *c, sr_ckpt_progress *p, char *how, size_t how_len) {
    memset(p, 0, sizeof *p);
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
    sr_line rl = sr_line_on(report, 16384);
    for (int i = 0; i < n; i++) {
        char path[PATH_MAX];
        if (explicit_path)
            FMT(path, "%s", explicit_path);
        else
            FMT(path, "%s/step_%08lld", c->dir, (long long)steps[1 + i]);
        int dirfd = open_candidate(c, path, explicit_path ? 0 : steps[1 + i], explicit_path != NULL);
        bool any_shape = false;
        sr_status st = ckpt_load_agreed(c, path, dirfd, p, how, how_len, &any_shape);
        if (dirfd >= 0)
            close(dirfd);
        if (st == SR_OK) {
            result = sr_fsdp_state_loaded(c->f); /* offload: the device copy of the parameters */
            break;
        }
        result = st;
        if (st == SR_ERR_PEER || st == SR_ERR_INTERNAL || st == SR_ERR_CONFIG) /* CONFIG: the data differs */
            break;
        /* the first failing rank's reason, kept for the final message */
        char reason[1100];
        FMT(reason, "%s", sr_error_message());
        sr_line_add(&rl, "%s  %s: %s", rl.len ? "\n" : "", path, reason); /* the list of reasons, cut at 16 KiB */
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
