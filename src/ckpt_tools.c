/* ckpt_tools.c — `shardrun ckpt list | verify | inspect`; see ckpt_tools.h. */
#include "srconfig.h"

#include "ckpt_tools.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ckpt.h"
#include "clock.h"
#include "fsio.h"
#include "goodput.h"
#include "line.h"
#include "mem.h"
#include "ops.h"
#include "shardfile.h"
#include "slurmjob.h"
#include "starts.h"

/* step_* directories of dirfd, newest first, in *out (free() it); returns
 * the count, or -1 when out of memory.  odd: see sr_ckpt_scan. */
static int scan_steps(int dirfd, int64_t **out, char *odd, size_t odd_len) {
    *out = sr_calloc(SR_CKPT_MAX_CANDIDATES, sizeof **out);
    return *out ? sr_ckpt_scan(dirfd, *out, SR_CKPT_MAX_CANDIDATES, odd, odd_len) : -1;
}

/* The user-named PATH, resolved once (symbolic links followed): a
 * directory descriptor, or SR_ERR_NOINPUT. */
static sr_status need_dir(const char *path, int *fd) {
    *fd = sr_fsio_open_dir(path);
    if (*fd >= 0)
        return SR_OK;
    if (errno == ENOTDIR)
        return sr_error(SR_ERR_NOINPUT, "%s: not a directory (hint: a checkpoint.dir or one of its step_* directories)",
                        path);
    return sr_error(SR_ERR_NOINPUT, "%s: %s", path, strerror(errno));
}

/* A checkpoint directory (as opposed to a checkpoint.dir): it has a
 * manifest, or is named step_<8 digits>. */
static bool is_checkpoint(int dirfd, const char *path) {
    struct stat sb;
    if (fstatat(dirfd, SR_MANIFEST_NAME, &sb, AT_SYMLINK_NOFOLLOW) == 0)
        return true;
    size_t n = strlen(path);
    while (n > 1 && path[n - 1] == '/')
        n--;
    size_t b = n;
    while (b > 0 && path[b - 1] != '/')
        b--;
    char base[64];
    int64_t step;
    if (n - b >= sizeof base)
        return false;
    memcpy(base, path + b, n - b);
    base[n - b] = '\0';
    return sr_ckpt_parse_step_name(base, &step);
}

/* PATH is a directory (resolved once into *dirfd, symbolic links
 * followed) whose manifest parses, and the model's tensor table for its
 * dims.  On success close *dirfd and free both; on failure nothing is
 * left. */
static sr_status tool_open(const char *path, int *dirfd, sr_manifest *mf, sr_model *model) {
    sr_status st = need_dir(path, dirfd);
    if (st != SR_OK)
        return st;
    st = sr_manifest_load(*dirfd, path, mf);
    if (st != SR_OK) {
        st = is_checkpoint(*dirfd, path) ? st : SR_ERR_NOINPUT;
        close(*dirfd);
        return st;
    }
    st = sr_model_init(model, mf->dims, &sr_ops_cpu, NULL, 0, false);
    if (st != SR_OK) {
        sr_model_free(model);
        sr_manifest_free(mf);
        close(*dirfd);
    }
    return st;
}

/* One checkpoint directory into the outputs of sr_ckpt_tool_read_model;
 * *caller_failed: `before` ran and failed (the caller's check, not the
 * checkpoint, is at fault). */
static sr_status read_one(const char *path, sr_manifest *mf, sr_model *model, float **all, sr_ckpt_tool_check before,
                          void *ctx, bool *caller_failed) {
    int dirfd;
    *all = NULL;
    *caller_failed = false;
    sr_status st = tool_open(path, &dirfd, mf, model);
    if (st != SR_OK)
        return st;
    if (before)
        st = before(mf, ctx);
    *caller_failed = st != SR_OK;
    if (st == SR_OK && !(*all = sr_malloc(model->n_params * sizeof(float))))
        st = sr_error_oom("the checkpoint's model");
    if (st == SR_OK) {
        sr_slice whole = {0, model->n_params, 0};
        float *dst[SR_NSTATE] = {*all, NULL, NULL};
        /* the padded vocabulary rows are in no slice: zero */
        memset(*all, 0, model->n_params * sizeof(float));
        st = sr_ckpt_read_slices(dirfd, path, mf, &whole, 1, dst, NULL, NULL);
    }
    close(dirfd);
    if (st != SR_OK) {
        free(*all);
        *all = NULL;
        sr_model_free(model);
        sr_manifest_free(mf);
    }
    return st;
}

sr_status sr_ckpt_tool_read_model(const char *path, sr_manifest *mf, sr_model *model, float **all,
                                  sr_ckpt_tool_check before, void *ctx, char *used, size_t used_len) {
    int dirfd;
    bool caller_failed;
    *all = NULL;
    if (used && used_len)
        snprintf(used, used_len, "%s", path);
    sr_status st = need_dir(path, &dirfd);
    if (st != SR_OK)
        return st;
    if (is_checkpoint(dirfd, path)) {
        close(dirfd);
        return read_one(path, mf, model, all, before, ctx, &caller_failed);
    }
    /* a checkpoint.dir: its newest checkpoint whose manifest and model
     * verify, older ones tried in turn when one does not */
    int64_t *steps;
    char odd[512] = "";
    int n = scan_steps(dirfd, &steps, odd, sizeof odd);
    close(dirfd);
    if (n < 0)
        return sr_error_oom("the checkpoint list");
    if (odd[0])
        sr_log_warn("%s/%s is not a real checkpoint directory: skipped (never followed)", path, odd);
    if (n == 0) {
        free(steps);
        return sr_error(SR_ERR_NOINPUT,
                        "%s: no manifest.yaml and no step_* checkpoints (hint: a step_* directory, or the "
                        "checkpoint.dir of a run that saved one)",
                        path);
    }
    char step_path[PATH_MAX], newest_why[1024] = "";
    st = SR_ERR_DATA;
    for (int i = 0; i < n; i++) {
        sr_fmt(step_path, sizeof step_path, "%s/step_%08lld", path, (long long)steps[i]);
        st = read_one(step_path, mf, model, all, before, ctx, &caller_failed);
        if (st == SR_OK) {
            fprintf(stderr, "shardrun: %s: using %s, the newest checkpoint that verifies%s\n", path, step_path,
                    i ? " (newer ones do not)" : "");
            if (used && used_len)
                snprintf(used, used_len, "%s", step_path);
            break;
        }
        /* the caller's check failing, or no memory, is not the checkpoint's fault */
        if (caller_failed || st == SR_ERR_INTERNAL)
            break;
        if (!newest_why[0])
            sr_fmt(newest_why, sizeof newest_why, "%s", sr_error_message());
        sr_log_warn("%s does not verify (%s); trying an older checkpoint", step_path, sr_error_message());
    }
    free(steps);
    if (!caller_failed && (st == SR_ERR_DATA || st == SR_ERR_NOINPUT))
        return sr_error(SR_ERR_DATA, "%s: none of its %d checkpoint%s verifies (the newest: %s)", path, n,
                        n == 1 ? "" : "s", newest_why);
    return st;
}

/* ------------------------------------------------------------------------ */
/* verify */

/* Failures of a verification: each printed, the first kept for the error. */
typedef struct {
    FILE *out;
    char first[1200];
    int count;
} failures;

static void failed(failures *fl, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void failed(failures *fl, const char *fmt, ...) {
    char line[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    fprintf(fl->out, "%s\n", line);
    if (!fl->first[0])
        sr_fmt(fl->first, sizeof fl->first, "%s", line);
    fl->count++;
}

static void on_problem(void *ctx, const char *path, const char *what) { failed(ctx, "%s: FAILED: %s", path, what); }

/* Verifies every chunk of every file of the checkpoint directory dirfd; a
 * line per file and per failure.  Returns false when anything failed. */
static bool verify_one(int dirfd, const char *path, failures *fl, uint64_t *bytes) {
    sr_manifest mf;
    int before = fl->count;
    if (sr_manifest_load(dirfd, path, &mf) != SR_OK) {
        failed(fl, "%s: FAILED: %s", path, sr_error_message());
        return false;
    }
    for (int fi = 0; fi < mf.nfiles; fi++) {
        const sr_manifest_file *f = &mf.files[fi];
        char fp[PATH_MAX];
        snprintf(fp, sizeof fp, "%s/%s", path, f->name);
        sr_shardfile_expect x = {f->shard,    mf.step,    f->bytes,
                                 f->elements, f->nchunks, (const unsigned char(*)[32])f->sha};
        int problems = 0;
        sr_status st = sr_shardfile_read(dirfd, f->name, fp, &x, NULL, 0, bytes, on_problem, fl, &problems);
        if (st != SR_OK)
            failed(fl, "%s: FAILED: %s", fp, sr_error_message());
        else if (!problems)
            fprintf(fl->out, "%s: OK (%" PRIu64 " bytes, %" PRIu64 " chunk%s)\n", fp, f->bytes, f->nchunks,
                    f->nchunks == 1 ? "" : "s");
    }
    sr_manifest_free(&mf);
    return fl->count == before;
}

sr_status sr_ckpt_verify(const char *path, FILE *out) {
    int dirfd;
    sr_status st = need_dir(path, &dirfd);
    if (st != SR_OK)
        return st;
    uint64_t bytes = 0;
    int bad = 0, n = 1;
    failures fl = {.out = out};
    double t0 = sr_clock_mono_s();
    if (is_checkpoint(dirfd, path)) {
        verify_one(dirfd, path, &fl, &bytes);
        bad = fl.count;
    } else {
        int64_t *steps;
        char odd[300];
        n = scan_steps(dirfd, &steps, odd, sizeof odd);
        if (n < 0) {
            close(dirfd);
            return sr_error_oom("the list of checkpoints");
        }
        if (odd[0]) { /* resume: auto refuses such a directory: say so here too */
            failed(&fl, "%s/%s: FAILED: not a real checkpoint directory (never followed)", path, odd);
            bad++;
        }
        if (n == 0 && !bad) {
            free(steps);
            close(dirfd);
            return sr_error(SR_ERR_NOINPUT,
                            "%s: no manifest.yaml and no step_* checkpoints (hint: shardrun ckpt list DIR)", path);
        }
        for (int i = 0; i < n; i++) {
            char p[PATH_MAX], name[32];
            snprintf(name, sizeof name, "step_%08lld", (long long)steps[i]);
            snprintf(p, sizeof p, "%s/%s", path, name);
            int fd = sr_fsio_open_subdir(dirfd, name);
            if (fd < 0) {
                failed(&fl, "%s: FAILED: %s", p, strerror(errno));
                bad++;
                continue;
            }
            bad += verify_one(fd, p, &fl, &bytes) ? 0 : 1;
            close(fd);
        }
        free(steps);
    }
    close(dirfd);
    double dt = sr_clock_mono_s() - t0;
    if (bad)
        return sr_error(SR_ERR_DATA, "%s: verification failed, %d problem%s; the first: %s", path, bad,
                        bad == 1 ? "" : "s", fl.first);
    fprintf(out, "%s: OK: %d checkpoint%s, %.1f MB verified in %.2f s\n", path, n, n == 1 ? "" : "s",
            (double)bytes / 1e6, dt);
    return SR_OK;
}

/* ------------------------------------------------------------------------ */
/* list, inspect */

/* The start history (starts.h), newest last, with the crash-loop
 * guard's count for `next`, the step the next start would resume from. */
static void list_starts(const char *dir, int64_t next, FILE *out) {
    sr_start_rec *recs;
    size_t n;
    if (sr_starts_read(dir, &recs, &n) != SR_OK) {
        sr_log_warn("%s", sr_error_message());
        return;
    }
    if (n == 0) {
        free(recs);
        return;
    }
    fprintf(out, "\nstarts (%s, newest last):\n%-6s %-20s %-14s %8s %6s %12s %10s %-16s %s\n", SR_STARTS_FILE, "start",
            "time", "job", "restart", "ranks", "resumed from", "start-up", "cause", "ended");
    size_t first = n > 20 ? n - 20 : 0;
    if (first)
        fprintf(out, "(%zu older starts not shown)\n", first);
    for (size_t i = first; i < n; i++) {
        char ended[48];
        if (recs[i].ended[0])
            snprintf(ended, sizeof ended, "%s at step %lld", recs[i].ended, (long long)recs[i].ended_step);
        else
            snprintf(ended, sizeof ended, "%s", i + 1 == n ? "running, or failed" : "failed");
        char up[24] = "-", cause[300] = "-";
        if (recs[i].ready)
            snprintf(up, sizeof up, "%.1f s", recs[i].startup.total);
        if (recs[i].cause[0])
            snprintf(cause, sizeof cause, "%s%s%s", recs[i].cause, recs[i].blamed[0] ? " " : "", recs[i].blamed);
        fprintf(out, "%-6zu %-20s %-14s %8lld %6d %12lld %10s %-16s %s\n", i + 1, recs[i].time, recs[i].job_id,
                recs[i].restart, recs[i].world_size, (long long)recs[i].resume_step, up, cause, ended);
    }
    int stalled = sr_starts_stalled(recs, n, next);
    if (stalled > 0)
        fprintf(out,
                "the newest %d start%s began from step %lld, the newest checkpoint, and failed (the next start is "
                "refused when preemption.max_stalled_restarts is at most %d)\n",
                stalled, stalled == 1 ? "" : "s", (long long)next, stalled);
    char metrics[4096];
    sr_goodput g;
    if (!sr_starts_metrics(dir, metrics, sizeof metrics))
        fprintf(out, "goodput: no start named a metrics file (log.metrics): nothing to account the wall time with\n");
    else if (sr_goodput_read(metrics, &g) != SR_OK)
        fprintf(out, "goodput: %s\n", sr_error_message());
    else {
        char why[512];
        const char *ids = g.job_ids; /* the jobs of the metrics file's own starts */
        double first, rest;
        int lines;
        if (!ids[0])
            sr_goodput_set_queue(&g, 0, "not asked: no start ran under Slurm");
        else if (!sr_slurmjob_queue_waits(ids, &first, &rest, &lines, why, sizeof why))
            sr_goodput_set_queue(&g, 0, why);
        else {
            int jobs = 1;
            for (const char *c = ids; *c; c++)
                jobs += *c == ',';
            snprintf(why, sizeof why, "sacct: %d incarnation%s of %d job%s; the first's %.0f s came before the run",
                     lines, lines == 1 ? "" : "s", jobs, jobs == 1 ? "" : "s", first);
            sr_goodput_set_queue(&g, rest, why);
        }
        fputc('\n', out);
        sr_goodput_print(&g, out);
        fprintf(out, "(from the metrics file %s)\n", metrics);
    }
    free(recs);
}

sr_status sr_ckpt_list(const char *dir, FILE *out) {
    int dirfd;
    sr_status st = need_dir(dir, &dirfd);
    if (st != SR_OK)
        return st;
    char latest[64] = "";
    ssize_t ln = readlinkat(dirfd, "latest", latest, sizeof latest - 1);
    latest[ln > 0 ? ln : 0] = '\0';
    int64_t *steps;
    char odd[300];
    int n = scan_steps(dirfd, &steps, odd, sizeof odd);
    if (n < 0) {
        close(dirfd);
        return sr_error_oom("the list of checkpoints");
    }
    if (odd[0])
        sr_log_warn("%s/%s is not a real checkpoint directory: skipped (never followed)", dir, odd);
    fprintf(out, "%-15s %10s %6s %12s %-20s %-12s %s\n", "checkpoint", "step", "ranks", "MB", "created", "data",
            "state");
    for (int i = 0; i < n; i++) {
        char p[PATH_MAX], name[32];
        snprintf(name, sizeof name, "step_%08lld", (long long)steps[i]);
        snprintf(p, sizeof p, "%s/%s", dir, name);
        sr_manifest mf;
        int fd = sr_fsio_open_subdir(dirfd, name);
        if (fd >= 0 && sr_manifest_load(fd, p, &mf) == SR_OK) {
            fprintf(out, "%-15s %10lld %6d %12.1f %-20s %-12.12s manifest ok%s\n", name, (long long)mf.step, mf.world,
                    (double)mf.total_bytes / 1e6, mf.created, mf.has_data ? mf.data.fingerprint : "-",
                    strcmp(latest, name) == 0 ? ", latest" : "");
            sr_manifest_free(&mf);
        } else {
            fprintf(out, "%-15s %10lld %6s %12s %-20s %-12s unusable: %s\n", name, (long long)steps[i], "-", "-", "-",
                    "-", fd < 0 ? strerror(errno) : sr_error_message());
        }
        if (fd >= 0)
            close(fd);
    }
    close(dirfd);
    DIR *d = opendir(dir);
    struct dirent *de;
    while (d && (de = readdir(d)))
        if (strncmp(de->d_name, ".step_", 6) == 0)
            fprintf(out,
                    "%-15s %10s %6s %12s %-20s %-12s incomplete (interrupted save; ignored, removed by the next run)\n",
                    de->d_name, "-", "-", "-", "-", "-");
    if (d)
        closedir(d);
    if (n == 0)
        fprintf(out, "(no checkpoints in %s)\n", dir);
    list_starts(dir, n > 0 ? steps[0] : 0, out);
    free(steps);
    return SR_OK;
}

/* data.mixture's state: each source's cursor, tokens, epoch, weight and
 * data fingerprint, and the weights' history. */
static void inspect_mixture(const sr_manifest *mf, FILE *out) {
    if (mf->mix.n > 0) {
        fprintf(out, "mixture      %d sources (data.mixture); the weights set at global cursor %llu\n", mf->mix.n,
                (unsigned long long)mf->mix.origin);
        for (int k = 0; k < mf->mix.n; k++) {
            const char *fp = "";
            for (int j = 0; j < mf->data.nsources; j++)
                if (strcmp(mf->data.sources[j].name, mf->mix.src[k].name) == 0)
                    fp = mf->data.sources[j].fingerprint;
            fprintf(out, "  source %-12s cursor %llu sequences (%llu tokens), epoch %llu, weight %g%s%.16s\n",
                    mf->mix.src[k].name, (unsigned long long)mf->mix.src[k].cursor,
                    (unsigned long long)(mf->mix.src[k].cursor * (uint64_t)mf->dims.T),
                    (unsigned long long)mf->mix.src[k].epoch, mf->mix.src[k].weight, fp[0] ? ", data fingerprint " : "",
                    fp);
        }
        for (int i = 0; i < mf->mix.nhistory; i++)
            fprintf(out, "  weights from step %lld (global cursor %llu): %s\n", (long long)mf->mix.history[i].step,
                    (unsigned long long)mf->mix.history[i].cursor, mf->mix.history[i].weights);
    }
}

sr_status sr_ckpt_inspect(const char *path, FILE *out) {
    sr_manifest mf;
    sr_model model;
    int dirfd;
    sr_status st = tool_open(path, &dirfd, &mf, &model);
    if (st != SR_OK)
        return st;
    close(dirfd);
    fprintf(out, "checkpoint   %s\n", path);
    fprintf(out, "format       %s version %d, created %s on %s (job %s)\n", SR_CKPT_FORMAT, mf.version, mf.created,
            mf.host, mf.job);
    fprintf(out, "step         %lld\n", (long long)mf.step);
    fprintf(out, "tokens       %llu (data cursor %llu sequences, seed %llu)\n", (unsigned long long)mf.tokens,
            (unsigned long long)mf.cursor, (unsigned long long)mf.seed);
    inspect_mixture(&mf, out);
    fprintf(out, "world size   %d (mesh shard %d x replicate %d)%s%s\n", mf.world, mf.mesh_shard, mf.mesh_replicate,
            mf.isa[0] ? ", CPU ISA " : "", mf.isa);
    char dims[512];
    fprintf(out, "model        %s (vocabulary padded to %d); %llu parameters; hash %.16s\n",
            sr_model_dims_text(&mf.dims, dims, sizeof dims), mf.dims.Vp, (unsigned long long)mf.n_params,
            mf.model_hash);
    fprintf(out,
            "state        master parameters (%s), Adam m (%s), Adam v (%s): %.1f MB in %d file%s, SHA-256 per %llu "
            "MiB chunk\n",
            sr_dtype_name(mf.state_dtype[0]), sr_dtype_name(mf.state_dtype[1]), sr_dtype_name(mf.state_dtype[2]),
            (double)mf.total_bytes / 1e6, mf.nfiles, mf.nfiles == 1 ? "" : "s",
            (unsigned long long)(SR_SHARD_CHUNK_BYTES >> 20));
    if (mf.init_path[0])
        fprintf(out, "init         %s (model.init of the first run; sha256 %s)\n", mf.init_path, mf.init_sha256);
    if (mf.has_data) {
        int nval = 0;
        uint64_t bytes = 0;
        for (int i = 0; i < mf.data.n; i++) {
            nval += strcmp(mf.data.shards[i].split, "val") == 0;
            bytes += mf.data.shards[i].bytes;
        }
        fprintf(out, "data         fingerprint %s: %d training and %d validation shard%s, %.1f MB\n",
                mf.data.fingerprint, mf.data.n - nval, nval, nval == 1 ? "" : "s", (double)bytes / 1e6);
        if (mf.data.tokenizer_sha256[0])
            fprintf(out, "tokenizer    %s (sha256 %s, pattern %s)\n", mf.data.tokenizer, mf.data.tokenizer_sha256,
                    mf.data.tokenizer_pattern[0] ? mf.data.tokenizer_pattern : "none");
        for (int i = 0; i < mf.data.n; i++) {
            char src[SR_MIX_NAME_MAX + 16] = "";
            if (mf.data.shards[i].source[0])
                sr_fmt(src, sizeof src, " (source %s)", mf.data.shards[i].source);
            fprintf(out, "  %-5s %s%s, %llu bytes, sha256 %s\n", mf.data.shards[i].split, mf.data.shards[i].path, src,
                    (unsigned long long)mf.data.shards[i].bytes, mf.data.shards[i].sha256);
        }
    } else {
        fprintf(out, "data         not recorded (a checkpoint written before shardrun recorded its data)\n");
    }
    fprintf(out, "files:\n");
    for (int i = 0; i < mf.nfiles; i++)
        fprintf(out, "  %-16s shard %d, %llu bytes, %llu elements in %d slice%s, %llu chunk%s\n", mf.files[i].name,
                mf.files[i].shard, (unsigned long long)mf.files[i].bytes, (unsigned long long)mf.files[i].elements,
                mf.files[i].nslices, mf.files[i].nslices == 1 ? "" : "s", (unsigned long long)mf.files[i].nchunks,
                mf.files[i].nchunks == 1 ? "" : "s");
    fprintf(out, "tensors (%d):\n", model.n_tensors);
    for (int i = 0; i < model.n_tensors; i++) {
        const sr_tensor *t = &model.tensors[i];
        char shape[64];
        if (t->ndim == 2)
            snprintf(shape, sizeof shape, "[%d, %d]", t->rows, t->cols);
        else
            snprintf(shape, sizeof shape, "[%d]", t->cols);
        fprintf(out, "  %-28s %-14s f32  offset %zu\n", t->name, shape, t->offset);
    }
    sr_model_free(&model);
    sr_manifest_free(&mf);
    return SR_OK;
}
