/* offload.c — sharding.offload.optimizer: the fp32 master, Adam m and v
 * and the gradient shard in host memory (pinned unless !pin_memory), the
 * reduced gradients copied to the host, and AdamW on a host optimizer
 * thread (the CPU table's, the same code as a CPU run, so results are
 * bitwise those without offload on the fake device) that updates the
 * units in forward order while the device computes; the gathers wait for
 * their unit (fsdp.c issue_gather).  Part of the engine: fsdp_impl.h. */
#include "srconfig.h"

#include "fsdp_impl.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hbcheck.h"
#include "vec.h"

static void pin_thread(sr_fsdp *f);

/* Forward order: the root, then the block units. */
static int unit_at_forward(const sr_fsdp *f, int pos) { return pos == 0 ? f->nunits - 1 : pos - 1; }
static int forward_pos(const sr_fsdp *f, int ui) { return ui == f->nunits - 1 ? 0 : ui + 1; }

/* AdamW on one unit's segments of the host master (the segments of a
 * unit are consecutive: sr_optim cuts the unit-ordered slices at tensor
 * boundaries), and the bf16 copy the gathers upload with offload.params. */
static void update_unit(sr_fsdp *f, const sr_adamw_launch *all, int ui) {
    const unit *u = &f->units[ui];
    size_t lo = u->p->local, hi = lo + u->p->P;
    int a = 0, b;
    while (a < all->nsegs && all->segs[a].off < lo)
        a++;
    for (b = a; b < all->nsegs && all->segs[b].off < hi; b++)
        ;
    sr_adamw_launch l = *all;
    l.segs = all->segs + a;
    l.nsegs = b - a;
    f->hdev->adamw(f->hdev, SR_STREAM_COMPUTE, &l);
    if (f->hparams16)
        sr_vec_f32_to_bf16_par((uint16_t *)f->hparams16 + lo, f->hparams + lo, u->p->P);
}

static void *hopt_main(void *arg) {
    sr_fsdp *f = arg;
    sr_mem_bind(f->mem);
#ifdef _OPENMP
    omp_set_num_threads(f->hopt_threads); /* the rank's threads, as a CPU run's AdamW */
#endif
    pthread_mutex_lock(&f->hopt_mu);
    for (;;) {
        while (!f->hopt_quit && f->hopt_done == f->hopt_job)
            pthread_cond_wait(&f->hopt_cv, &f->hopt_mu);
        if (f->hopt_quit)
            break;
        sr_adamw_launch l = f->hopt_launch;
        pthread_mutex_unlock(&f->hopt_mu);
        for (int pos = 0; pos < f->nunits; pos++) {
            update_unit(f, &l, unit_at_forward(f, pos));
            pthread_mutex_lock(&f->hopt_mu);
            f->hopt_updated = pos + 1;
            pthread_cond_broadcast(&f->hopt_cv);
            pthread_mutex_unlock(&f->hopt_mu);
        }
        pthread_mutex_lock(&f->hopt_mu);
        f->hopt_done = f->hopt_job;
        pthread_cond_broadcast(&f->hopt_cv);
    }
    pthread_mutex_unlock(&f->hopt_mu);
    return NULL;
}

/* Whether unit ui's master is updated for this step; `block` waits for it
 * (a prefetch does not: it skips the unit instead).  The host then owns
 * the unit's master again (declared to the checker). */
bool sr_offload_wait_unit(sr_fsdp *f, int ui, bool block) {
    unit *u = &f->units[ui];
    if (!u->update_pending)
        return true;
    int need = forward_pos(f, ui) + 1;
    pthread_mutex_lock(&f->hopt_mu);
    while (f->hopt_done != f->hopt_job && f->hopt_updated < need) {
        if (!block) {
            pthread_mutex_unlock(&f->hopt_mu);
            return false;
        }
        pthread_cond_wait(&f->hopt_cv, &f->hopt_mu);
    }
    pthread_mutex_unlock(&f->hopt_mu);
    u->update_pending = false;
    if (f->dev->hb)
        sr_hb_access(f->dev->hb, SR_HB_HOST, f->hparams + u->p->local, u->p->P * sizeof(float), true,
                     "the host optimizer's AdamW (offload) writes the unit's master");
    return true;
}

/* Waits for the whole posted job (checkpoints, the dump, the next
 * gradients' copies to the host). */
void sr_offload_wait_all(sr_fsdp *f) {
    if (!f->hopt_started)
        return;
    for (int ui = 0; ui < f->nunits; ui++)
        sr_offload_wait_unit(f, ui, true);
}

static sr_status start_thread(sr_fsdp *f) {
    if (pthread_mutex_init(&f->hopt_mu, NULL) != 0)
        return sr_error_oom("the host optimizer's mutex");
    if (pthread_cond_init(&f->hopt_cv, NULL) != 0) {
        pthread_mutex_destroy(&f->hopt_mu);
        return sr_error_oom("the host optimizer's condition");
    }
    f->mem = sr_mem_bound();
#ifdef _OPENMP
    f->hopt_threads = omp_get_max_threads();
#endif
    if (pthread_create(&f->hopt, NULL, hopt_main, f) != 0) {
        pthread_cond_destroy(&f->hopt_cv);
        pthread_mutex_destroy(&f->hopt_mu);
        return sr_error(SR_ERR_INTERNAL, "cannot start the host optimizer thread: %s", strerror(errno));
    }
    f->hopt_started = true;
    pin_thread(f);
    return SR_OK;
}

/* The optimizer thread on the cores of the GPU's NUMA node (sysfs
 * local_cpulist of its PCI device; written by hand: no library here reads
 * it), logged; unpinned, and said why, where that is unknown. */
static void pin_thread(sr_fsdp *f) {
    const char *bus = f->dev->pci_bus;
    char path[128], list[1024] = "", why[1200] = "";
    if (!bus[0]) {
        snprintf(why, sizeof why, "the %s device has no PCI bus id", f->dev->name);
    } else {
        char lower[32];
        size_t i = 0;
        for (; bus[i] && i + 1 < sizeof lower; i++)
            lower[i] = (char)(bus[i] >= 'A' && bus[i] <= 'F' ? bus[i] - 'A' + 'a' : bus[i]);
        lower[i] = '\0';
        snprintf(path, sizeof path, "/sys/bus/pci/devices/%s/local_cpulist", lower);
        FILE *fp = fopen(path, "r");
        if (!fp || !fgets(list, sizeof list, fp))
            snprintf(why, sizeof why, "%s: %s", path, fp ? "empty" : strerror(errno));
        if (fp)
            fclose(fp);
        list[strcspn(list, "\n")] = '\0';
    }
    cpu_set_t set;
    CPU_ZERO(&set);
    int n = 0;
    for (char *p = list; !why[0] && *p;) { /* "0-15,32-47" */
        char *end;
        long a = strtol(p, &end, 10), b = a;
        if (end == p || a < 0)
            break;
        if (*end == '-')
            b = strtol(end + 1, &end, 10);
        for (long c = a; c <= b && c < CPU_SETSIZE; c++, n++)
            CPU_SET((int)c, &set);
        p = *end == ',' ? end + 1 : end;
        if (*end != ',' && *end != '\0')
            break;
    }
    if (!why[0] && n == 0)
        snprintf(why, sizeof why, "cannot parse \"%s\"", list);
    if (!why[0] && pthread_setaffinity_np(f->hopt, sizeof set, &set) != 0)
        snprintf(why, sizeof why, "pthread_setaffinity_np failed");
    if (why[0])
        sr_log_info_all("offload: the host optimizer thread is unpinned (%s)", why);
    else
        sr_log_info_all("offload: the host optimizer thread runs on cores %s, the NUMA node of GPU bus %s", list, bus);
}

void sr_offload_stop(sr_fsdp *f) {
    if (!f->hopt_started)
        return;
    pthread_mutex_lock(&f->hopt_mu);
    f->hopt_quit = true;
    pthread_cond_broadcast(&f->hopt_cv);
    pthread_mutex_unlock(&f->hopt_mu);
    pthread_join(f->hopt, NULL);
    pthread_cond_destroy(&f->hopt_cv);
    pthread_mutex_destroy(&f->hopt_mu);
    f->hopt_started = false;
}

/* Offload: the gradient shard on the host once every reduction's copy is
 * there (one host wait for the comm stream), and the loss sum read back. */
sr_status sr_offload_grads(sr_fsdp *f, double *loss_sum) {
    sr_dev *d = f->dev;
    sr_event loss_ready = {0}, comm_done = {0};
    d->copy(d, SR_STREAM_COMPUTE, f->sumsq + 1, f->m->loss_acc, sizeof(double));
    f->m->loss_taken = true; /* the next forward writes it (after this copy, on the same stream) */
    d->record(d, &loss_ready, SR_STREAM_COMPUTE);
    sr_dev_wait(d, SR_STREAM_COMM, &loss_ready, "offload_scalars");
    d->copy(d, SR_STREAM_COMM, f->hscalars, f->sumsq + 1, sizeof(double));
    if (!f->per_step) /* per_micro_batch: the shard was summed on the device */
        d->copy(d, SR_STREAM_COMM, f->hgrads, f->gshard, f->local_size * sizeof(float));
    d->record(d, &comm_done, SR_STREAM_COMM);
    sr_status st = sr_dev_host_wait(d, &comm_done, "grads_on_host");
    if (d->hb) { /* what the host reads next: the checker sees a missing wait */
        sr_hb_access(d->hb, SR_HB_HOST, f->hscalars, sizeof(double), false, "the host reads the step's loss (offload)");
        sr_hb_access(d->hb, SR_HB_HOST, f->per_step && f->rdt == SR_DT_BF16 ? f->hrecv : (void *)f->hgrads,
                     f->local_size * (f->per_step && f->rdt == SR_DT_BF16 ? 2 : 4), false,
                     "the host reads the gradient shard (offload)");
    }
    *loss_sum = f->hscalars[0];
    if (st == SR_OK && f->per_step && f->rdt == SR_DT_BF16) /* exact widening, as the device's fold */
        sr_vec_bf16_to_f32_par(f->hgrads, f->hrecv, f->local_size);
    return st;
}

/* The host buffers, then the host optimizer's table and thread. */
sr_status sr_offload_start(sr_fsdp *f) {
    size_t local = f->plan.local_size;
    f->hspace = f->o.pin_memory ? SR_SPACE_PINNED : SR_SPACE_HOST;
    /* host: the master, the gradient shard (and the landing of bf16
     * reductions, or the bf16 copy the gathers upload); zeroed padding */
    f->hparams = sr_fsdp_alloc(f, f->hspace, SR_MEM_PARAM_SHARD, local * sizeof(float));
    f->hgrads = f->hparams ? sr_fsdp_alloc(f, f->hspace, SR_MEM_GRAD_SHARD, local * sizeof(float)) : NULL;
    if (!f->hgrads)
        return SR_ERR_INTERNAL;
    memset(f->hparams, 0, local * sizeof(float));
    memset(f->hgrads, 0, local * sizeof(float));
    if (!(f->hscalars = sr_fsdp_alloc(f, f->hspace, SR_MEM_OTHER, sizeof(double))))
        return SR_ERR_INTERNAL;
    if (f->per_step && f->rdt == SR_DT_BF16) {
        if (!(f->hrecv = sr_fsdp_alloc(f, f->hspace, SR_MEM_COMM, local * 2)))
            return SR_ERR_INTERNAL;
        memset(f->hrecv, 0, local * 2);
    }
    if (f->offp && f->pdt == SR_DT_BF16) {
        if (!(f->hparams16 = sr_fsdp_alloc(f, f->hspace, SR_MEM_PARAM_SHARD, local * 2)))
            return SR_ERR_INTERNAL;
        memset(f->hparams16, 0, local * 2);
    }
    if (!(f->hdev = sr_dev_cpu_open()))
        return sr_error_oom("the host optimizer's table");
    return start_thread(f);
}

/* Posted to the host optimizer thread; the next gathers wait for their
 * units (fsdp.c issue_gather) and upload them. */
void sr_offload_post(sr_fsdp *f, int64_t step, double lr, const sr_adamw_opts *o, float grad_scale) {
    /* posted to the host optimizer thread; the next gathers wait for
     * their units (issue_gather) and upload them */
    sr_offload_wait_all(f);
    f->hopt_launch = sr_optim_launch(&f->opt, f->hparams, f->hgrads, step, lr, o, grad_scale);
    for (int ui = 0; ui < f->nunits; ui++) {
        f->units[ui].update_pending = true;
        f->units[ui].copy_stale = !f->offp;
    }
    pthread_mutex_lock(&f->hopt_mu);
    f->hopt_job++;
    f->hopt_updated = 0;
    pthread_cond_broadcast(&f->hopt_cv);
    pthread_mutex_unlock(&f->hopt_mu);
}

sr_status sr_offload_refresh(sr_fsdp *f) {
    sr_offload_wait_all(f);
    if (f->offp) {
        if (f->pdt == SR_DT_BF16) /* the copy each gather uploads */
            sr_vec_f32_to_bf16_par(f->hparams16, f->hparams, f->local_size);
        return SR_OK;
    }
    /* the device copy the gathers read.  Its last readers are done: this
     * runs after the step's host wait for the comm stream (whose last
     * reduction follows every gather on the transport), or before any
     * gather (initialisation, resume); the checker proves it */
    sr_dev *d = f->dev;
    sr_event uploaded = {0};
    if (d->hb)
        sr_hb_access(d->hb, SR_HB_HOST, f->hparams, f->local_size * sizeof(float), true,
                     "the host's AdamW (offload) writes the master shard");
    d->copy(d, SR_STREAM_H2D, f->pshard, f->hparams, f->local_size * sizeof(float));
    d->record(d, &uploaded, SR_STREAM_H2D);
    return sr_dev_wait(d, SR_STREAM_COMM, &uploaded, "params_updated");
}
