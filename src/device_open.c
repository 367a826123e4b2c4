/* device_open.c — choosing and opening the device table: the job's
 * device key against the build and the GPUs this task sees, the GPU a
 * local rank picks, the ops table for a table, the run's device line, and
 * the agreement that every rank opened the same kind; see device.h.  The
 * helpers every table uses are device.c's (no call goes back from there). */
#include "srconfig.h"

#include "device.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "cudamod.h"
#include "line.h"
#include "mem.h"
#include "ops.h"
#include "testhook.h"

int sr_device_count_visible(const char *visible) {
    if (!visible || !*visible)
        return 0;
    int n = 1;
    for (const char *p = visible; *p; p++)
        n += *p == ',';
    return n;
}

/* The i-th comma-separated entry of `list`. */
static void nth_entry(const char *list, int i, char *out, size_t n) {
    out[0] = '\0';
    if (!list)
        return;
    const char *p = list;
    for (int k = 0; k < i && p; k++) {
        p = strchr(p, ',');
        if (p)
            p++;
    }
    if (!p)
        return;
    size_t len = strcspn(p, ",");
    if (len >= n)
        len = n - 1;
    memcpy(out, p, len);
    out[len] = '\0';
}

int sr_device_pick(const char *visible, int n_visible, int local_rank, int local_size, char *physical,
                   size_t physical_len, char *err, size_t err_len) {
    int pick = -1;
    if (n_visible == 1)
        pick = 0;
    else if (n_visible >= local_size && local_rank < n_visible)
        pick = local_rank;
    if (pick < 0) {
        snprintf(err, err_len,
                 "this task sees %d GPU%s (CUDA_VISIBLE_DEVICES=%s) but is local rank %d of %d on its node; expected "
                 "exactly one GPU per task or at least one per local task (hint: srun --gpus-per-task=1)",
                 n_visible, n_visible == 1 ? "" : "s", visible ? visible : "(unset)", local_rank, local_size);
        return -1;
    }
    if (physical) {
        if (visible && *visible)
            nth_entry(visible, pick, physical, physical_len);
        else
            snprintf(physical, physical_len, "%d", pick);
    }
    return pick;
}

void sr_device_describe(char *buf, size_t n, int local_rank, int local_size) {
    const char *visible = getenv("CUDA_VISIBLE_DEVICES");
    int n_visible = sr_device_count_visible(visible);
    const char *why = "built without CUDA";
#ifdef SR_HAVE_CUDA
    /* (the detection, not the module: a CPU run maps no CUDA library) */
    char cuda_why[600], seen[512];
    int count = sr_cudamod_detect(seen, sizeof seen);
#ifdef SR_CUDA_EMULATED
    snprintf(cuda_why, sizeof cuda_why,
             "%s; in a CUDA emulator tree device: auto is the CPU, device: cuda the emulator", seen);
#else
    snprintf(cuda_why, sizeof cuda_why, "%s", seen);
#endif
    why = cuda_why;
    if (count > 0 && n_visible == 0)
        n_visible = count;
#endif
    char phys[64], err[512];
    int pick = n_visible > 0
                   ? sr_device_pick(visible, n_visible, local_rank, local_size, phys, sizeof phys, err, sizeof err)
                   : -1;
    if (pick >= 0)
        snprintf(buf, n, "cpu (would pick GPU %s, ordinal %d, from CUDA_VISIBLE_DEVICES=%s; %s)", phys, pick,
                 visible ? visible : "(unset)", why);
    else if (n_visible > 0)
        snprintf(buf, n, "cpu (would pick no GPU: %d visible for local rank %d of %d; %s)", n_visible, local_rank,
                 local_size, why);
    else
        snprintf(buf, n, "cpu (no GPU visible; %s)", why);
}

#ifdef SR_HAVE_CUDA
/* The cuda table of module m on the GPU this task's local rank picks. */
static sr_status open_cuda(sr_dev **out, const sr_cudamod *m, int local_rank, int local_size) {
    char why[256] = "cudaGetDeviceCount says 0 devices";
    int count = m->device_count(why, sizeof why);
    if (count <= 0)
        return sr_error(SR_ERR_CONFIG,
                        "device: cuda, but no usable GPU: %s (the CUDA back end: %s; hint: ask Slurm for a GPU, e.g. "
                        "--gpus-per-task=1, or set device: cpu)",
                        why, sr_cudamod_path());
    const char *visible = getenv("CUDA_VISIBLE_DEVICES");
    char phys[64], err[512];
    int pick = sr_device_pick(visible, count, local_rank, local_size, phys, sizeof phys, err, sizeof err);
    if (pick < 0)
        return sr_error(SR_ERR_CONFIG, "device: cuda: %s", err);
    return m->open(out, pick, phys);
}
#endif

sr_status sr_device_open(sr_dev **out, sr_device_want want, int world_size, int local_rank, int local_size) {
    *out = NULL;
    if (want == SR_DEVICE_CUDA) {
#ifdef SR_HAVE_CUDA
        (void)world_size;
#ifndef SR_HAVE_NCCL
        if (world_size > 1)
            return sr_error(SR_ERR_CONFIG,
                            "device: cuda with %d ranks needs NCCL, and this shardrun was built without it (hint: "
                            "configure --with-nccl, or one task, or device: cpu)",
                            world_size);
#endif
        const sr_cudamod *m;
        sr_status st = sr_cudamod_get(&m);
        if (st != SR_OK)
            return sr_error_wrap(st, "device: cuda");
        return open_cuda(out, m, local_rank, local_size);
#else
        (void)world_size;
        (void)local_rank;
        (void)local_size;
        return sr_error(SR_ERR_CONFIG, "device: cuda, but this shardrun was built without CUDA (hint: device: auto "
                                       "or cpu, or a build configured --with-cuda)");
#endif
    }
    bool fake = strcmp(sr_testhook()->device, "fake") == 0;
#if defined(SR_HAVE_CUDA) && !defined(SR_CUDA_EMULATED)
    /* (an emulator tree's auto is the CPU: only device: cuda asks for the
     * emulated GPU).  The module is loaded only when the detection saw a
     * GPU: a CPU node maps no CUDA library. */
    char seen[512];
    int detected = want == SR_DEVICE_AUTO && !fake ? sr_cudamod_detect(seen, sizeof seen) : 0;
#ifndef SR_HAVE_NCCL
    if (detected > 0 && world_size > 1) {
        sr_log_warn("device: auto sees a GPU, but %d ranks on GPUs need NCCL, and this shardrun was built without "
                    "it: training on the CPU (hint: configure --with-nccl)",
                    world_size);
        detected = 0;
    }
#endif
    if (detected > 0) {
        const sr_cudamod *m = NULL;
        char why[256] = "cudaGetDeviceCount says 0 devices";
        if (sr_cudamod_get(&m) != SR_OK)
            sr_log_warn("device: auto: %s, but %s; training on the CPU", seen, sr_error_message());
        else if (m->device_count(why, sizeof why) > 0)
            return open_cuda(out, m, local_rank, local_size);
        else
            sr_log_warn("device: auto: %s, but the CUDA runtime finds no usable one (%s); training on the CPU", seen,
                        why);
    }
#else
    (void)world_size;
    (void)local_rank;
    (void)local_size;
#endif
    *out = fake ? sr_dev_fake_open() : sr_dev_cpu_open();
    return *out ? SR_OK : sr_error_oom("the device table");
}

sr_status sr_device_open_dry(sr_dev **out) {
    *out = NULL;
#ifdef SR_HAVE_CUDA
    const sr_cudamod *m;
    sr_status st = sr_cudamod_get(&m);
    return st != SR_OK ? st : m->open_dry(out);
#else
    return sr_error(SR_ERR_CONFIG, "this shardrun was built without CUDA: its CUDA operations cannot be counted (hint: "
                                   "a build configured --with-cuda; no GPU is needed)");
#endif
}

sr_dtype sr_device_auto_dtype(bool cuda_table) { return cuda_table ? SR_DT_BF16 : SR_DT_F32; }

/* The module's table of a dtype (flash: bf16 with flash attention). */
static const sr_ops *module_ops(const sr_cudamod *m, sr_dtype param_dtype, bool flash) {
    if (param_dtype != SR_DT_BF16)
        return m->ops_f32;
    return flash ? m->ops_bf16_flash : m->ops_bf16;
}

const sr_ops *sr_device_ops(const sr_dev *d, sr_dtype param_dtype, bool flash) {
    /* (a cuda table exists only when the module opened it) */
    const sr_cudamod *m = d && d->kind == SR_DEV_CUDA ? sr_cudamod_loaded() : NULL;
    return m ? module_ops(m, param_dtype, flash) : &sr_ops_cpu;
}

const sr_ops *sr_device_plan_ops(bool gpu, sr_dtype param_dtype, bool flash) {
    if (!gpu)
        return &sr_ops_cpu;
    const sr_cudamod *m;
    if (sr_cudamod_get(&m) != SR_OK)
        return NULL;
    return module_ops(m, param_dtype, flash);
}

void sr_device_close(sr_dev *d) {
    if (!d)
        return;
    if (d->kind == SR_DEV_CUDA) {
        sr_cudamod_loaded()->close(d);
        return;
    }
    sr_hb_close(d->hb);
    free(d);
}

/* When the task was given GPUs (CUDA_VISIBLE_DEVICES non-empty) but the
 * detection sees none, describes why in `buf` and returns true; false
 * otherwise.  (The detection, not the module: a CPU run maps no CUDA
 * library; a GPU the driver sees that the runtime cannot use is the
 * open's to report.) */
static bool gpus_unusable(char *buf, size_t n) {
    const char *visible = getenv("CUDA_VISIBLE_DEVICES");
    if (!visible || !*visible)
        return false;
#if defined(SR_HAVE_CUDA) && !defined(SR_CUDA_EMULATED)
    return sr_cudamod_detect(buf, n) == 0;
#elif defined(SR_HAVE_CUDA)
    (void)buf;
    (void)n;
    return false; /* the emulated GPUs are device: cuda's */
#else
    snprintf(buf, n, "this shardrun was built without CUDA");
    return true;
#endif
}

/* The job's device key against this build, at its place in the job file. */
sr_status sr_device_check_key(const sr_config *cfg) {
#ifdef SR_HAVE_CUDA
    (void)cfg;
    return SR_OK; /* whether a GPU is usable is the open's question (sr_device_open) */
#else
    if (cfg->device != SR_DEVICE_CUDA)
        return SR_OK;
    char where[1200];
    sr_config_where(cfg, "device", where, sizeof where);
    return sr_error(SR_ERR_CONFIG,
                    "%s: device: cuda, but this shardrun was built without CUDA (hint: device: auto or cpu, or a "
                    "build configured --with-cuda)",
                    where);
#endif
}

sr_status sr_device_open_run(sr_dev **out, const sr_config *cfg, sr_world *w) {
    *out = NULL;
    char why[256];
    if (gpus_unusable(why, sizeof why))
        sr_log_warn("this task was given GPUs (CUDA_VISIBLE_DEVICES=%s) but none is usable (%s); training on the CPU",
                    getenv("CUDA_VISIBLE_DEVICES"), why);
    /* (the key was checked once, by the command's job load: sr_device_check_key) */
    sr_status st = sr_device_open(out, (sr_device_want)cfg->device, w->size, w->local_rank, w->local_size);
    if (st == SR_OK && (*out)->emulated)
        sr_log_set_tag((*out)->name); /* every line of an emulated run says so */
    const sr_cudamod *m = st == SR_OK && (*out)->kind == SR_DEV_CUDA ? sr_cudamod_loaded() : NULL;
    if (m)
        sr_log_info("CUDA back end: %s (%s; %s)", sr_cudamod_path(), m->build, m->versions);
    if (st == SR_OK)
        (*out)->timeout_s = cfg->comm_timeout_s;
    int32_t mine = *out ? (int32_t)(*out)->kind : -1, *all = sr_calloc((size_t)w->size, sizeof(int32_t));
    if (!all)
        return st != SR_OK ? st : sr_error_oom("the device list");
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", st != SR_OK ? sr_error_message() : "");
    sr_status gst = sr_world_allgather(w, "shardrun.device", &mine, sizeof mine, all, cfg->comm_timeout_s);
    bool mixed = false;
    for (int k = 1; st == SR_OK && gst == SR_OK && k < w->size; k++)
        mixed = mixed || all[k] != all[0];
    if (mixed) {
        /* "ranks 0 2 use cpu; ranks 1 3 use fake" (the first 16 of each) */
        static const char *const names[] = {"cpu", "fake", "cuda"};
        char line[1024];
        sr_line l = SR_LINE(line);
        for (int kind = SR_DEV_CPU; kind <= SR_DEV_CUDA; kind++) {
            int shown = 0, count = 0;
            for (int k = 0; k < w->size; k++)
                count += all[k] == kind;
            if (!count)
                continue;
            sr_line_item(&l, "; ", "rank%s", count > 1 ? "s" : "");
            for (int k = 0; k < w->size && shown < 16; k++)
                if (all[k] == kind) {
                    sr_line_add(&l, " %d", k);
                    shown++;
                }
            sr_line_add(&l, "%s use%s %s", count > shown ? " and more" : "", count > 1 ? "" : "s", names[kind]);
        }
        st = sr_error(SR_ERR_CONFIG,
                      "the ranks do not agree on the device: %s (hint: the same device key, build and "
                      "SHARDRUN_TEST_DEVICE on every rank)",
                      line);
    }
    free(all);
    if (st != SR_OK && msg[0])
        sr_error(st, "%s", msg);
    return st != SR_OK ? st : gst;
}
