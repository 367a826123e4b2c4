/* ckpt_save.c — a checkpoint saved: the four phases (begin: the temporary
 * directory; shards: every rank writes its file and hands rank 0 its
 * digests; manifest: rank 0 writes it; commit: fsync, rename, parent fsync,
 * `latest`), each agreed through the control plane, with the test suite's
 * crash sites between them (ckpt.c lists them).  Written by hand: no
 * library here commits a directory of files atomically.  Part of the ckpt
 * module (ckpt.h, ckpt_impl.h). */
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
/* saving */

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
    ckpt_crash_site("before_manifest", p->step);
    char path[PATH_MAX];
    FMT(path, "%s/%s", tmp, SR_MANIFEST_NAME);
    st = write_small_file(path, text, len);
    free(text);
    if (st != SR_OK)
        return st;
    ckpt_crash_site("after_manifest", p->step);
    if (sr_fsio_fsync_dir(tmp) != 0)
        return sr_fsio_write_error_ckpt(tmp, errno);
    ckpt_crash_site("before_rename", p->step);
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
    ckpt_crash_site("after_rename", p->step);
    if (replaced &&
        (replaced_dir ? ckpt_remove_step_dir(c, old_name, ckpt_written_by_save, NULL)
                      : unlinkat(c->dirfd, old_name, 0)) != 0 &&
        errno != ENOTEMPTY)
        sr_log_warn("checkpoint: cannot remove %s/%s: %s", c->dir, old_name, strerror(errno));
    ckpt_crash_site("before_latest", p->step);
    st = c->tier ? SR_OK : update_latest(c, p->step); /* the memory tier has no `latest` */
    if (st != SR_OK)
        return st;
    ckpt_crash_site("after_latest", p->step);
    ckpt_retain(c, p->step);
    return SR_OK;
}

/* Phase 1: rank 0 makes the temporary directory. */
sr_status ckpt_save_begin(sr_ckpt *c, const char *tmp) {
    sr_status st = SR_OK;
    if (ckpt_committer(c)) {
        sr_fsio_remove_dir(tmp, ckpt_written_by_save, NULL, NULL, 0);
        if (mkdir(tmp, SR_FSIO_DIR_MODE) != 0)
            st = sr_fsio_create_error_ckpt(tmp, errno);
    }
    return sr_ctl_agree(c->ctl, st, 0, 0, st == SR_OK ? NULL : sr_error_message(), NULL);
}

static sr_ctl_word *record_word(const records *r, int rank) {
    return (sr_ctl_word *)(r->all + (size_t)rank * r->bytes);
}

/* The records of a save: room for every rank's word and digests, and this
 * rank's own record (*mine, freed by the caller). */
sr_status ckpt_records_alloc(sr_ckpt *c, const sr_manifest *proto, records *rec, unsigned char **mine) {
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
                                         : (sr_shardfile_piece){NULL, n * sizeof(float), ckpt_state_get, &io[k],
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
        ckpt_crash_site("after_shard_write", p->step);
}

/* Every rank's (status, bytes, digests) gathered to every rank; the first
 * failing rank's status and message. */
sr_status ckpt_gather_records(sr_ckpt *c, records *rec, const unsigned char *mine, uint64_t *total,
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
void ckpt_traced_write(sr_ckpt *c, const sr_ckpt_progress *p, const char *tmp, const sr_manifest *proto,
                       unsigned char *mine, float *const *snap, const char *what, int64_t t0) {
    write_mine(c, p, tmp, proto, mine, snap);
    char detail[48];
    snprintf(detail, sizeof detail, "step %lld", (long long)p->step);
    sr_trace_late_end(SR_TRACE_CKPT, what, t0, detail);
}

static sr_status save_shards(sr_ckpt *c, const sr_ckpt_progress *p, const char *tmp, const sr_manifest *proto,
                             records *rec, uint64_t *total, bool *transport_failed) {
    unsigned char *mine = NULL;
    sr_status st = ckpt_records_alloc(c, proto, rec, &mine);
    if (st != SR_OK)
        return st;
    st = sr_fsdp_state_sync(c->f);
    if (st != SR_OK) {
        free(mine);
        return st;
    }
    ckpt_traced_write(c, p, tmp, proto, mine, NULL, "checkpoint write (synchronous)", sr_trace_late_begin());
    st = ckpt_gather_records(c, rec, mine, total, transport_failed);
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
    mf->mix = p->mix;
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
    sr_clock_iso(-1, mf->created, sizeof mf->created);
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
sr_status ckpt_save_commit(sr_ckpt *c, const sr_ckpt_progress *p, const char *tmp, const char *final,
                           const records *rec, sr_status st) {
    if (!ckpt_committer(c))
        return st;
    if (st == SR_OK) {
        sr_manifest mf = {.state_dtype = {SR_DT_F32, SR_DT_F32, SR_DT_F32}};
        st = build_manifest(c, p, rec, &mf);
        if (st == SR_OK)
            st = commit_rank0(c, p, tmp, final, &mf);
        drop_manifest(&mf);
    }
    if (st != SR_OK)
        sr_fsio_remove_dir(tmp, ckpt_written_by_save, NULL, NULL, 0); /* keeps the error message: records none */
    return st;
}

sr_status sr_ckpt_save(sr_ckpt *c, const sr_ckpt_progress *p, uint64_t *bytes_out) {
    if (bytes_out)
        *bytes_out = 0;
    if (!c->dir)
        return SR_OK;
    double t0 = sr_clock_mono_s();
    char tmp[PATH_MAX], final[PATH_MAX];
    FMT(tmp, "%s/.step_%08lld.tmp", c->dir, (long long)p->step);
    FMT(final, "%s/step_%08lld", c->dir, (long long)p->step);
    sr_log_info("checkpoint: saving step %lld to %s", (long long)p->step, final);

    sr_status st = ckpt_save_begin(c, tmp);
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
    st = ckpt_save_commit(c, p, tmp, final, &rec, st);
    free(rec.all);
    /* Phase 4: the final agreement: nobody exits before the commit is known */
    sr_status fin =
        sr_ctl_agree(c->ctl, ckpt_committer(c) ? st : SR_OK, 0, 0, st == SR_OK ? NULL : sr_error_message(), NULL);
    if (st == SR_OK)
        st = fin;
    if (st != SR_OK)
        return sr_error_wrap(st, "checkpoint at step %lld not saved (earlier checkpoints are untouched)",
                             (long long)p->step);
    double dt = sr_clock_mono_s() - t0;
    c->last_step = p->step;
    c->commit = (sr_ckpt_commit){p->step, p->step, dt, total, false};
    c->have_commit = true;
    if (bytes_out)
        *bytes_out = total;
    sr_log_info("checkpoint: step %lld saved: %.1f MB in %.2f s (%.0f MB/s, SHA-256 per 4 MiB chunk)",
                (long long)p->step, (double)total / 1e6, dt, (double)total / 1e6 / (dt > 0 ? dt : 1e-9));
    return SR_OK;
}
