/* optim.c — AdamW, schedule, norms; see optim.h. */
#include "srconfig.h"

#include "optim.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "mem.h"
#include "vec.h"

sr_status sr_optim_init_slices(sr_optim *opt, const sr_model *model, const sr_slice *slices, int n, size_t local_size) {
    *opt = (sr_optim){.model = model, .local_size = local_size, .nslices = n};
    opt->slices = sr_malloc(sizeof *slices * (size_t)(n > 0 ? n : 1));
    opt->decay = sr_calloc((size_t)model->n_tensors, 1);
    if (!opt->slices || !opt->decay)
        return sr_error_oom("the optimizer's tables");
    opt->m = sr_mem_alloc(SR_MEM_OPTIM_SHARD, local_size * sizeof(float));
    opt->v = opt->m ? sr_mem_alloc(SR_MEM_OPTIM_SHARD, local_size * sizeof(float)) : NULL;
    if (!opt->m || !opt->v)
        return SR_ERR_INTERNAL;
    memcpy(opt->slices, slices, sizeof *slices * (size_t)n);
    for (int i = 0; i < model->n_tensors; i++)
        opt->decay[i] = model->tensors[i].ndim >= 2;
    return SR_OK;
}

sr_status sr_optim_init(sr_optim *opt, const sr_model *model, size_t begin, size_t end) {
    sr_slice one = {begin, end, 0};
    return sr_optim_init_slices(opt, model, &one, 1, end - begin);
}

void sr_optim_free(sr_optim *opt) {
    sr_mem_free(SR_MEM_OPTIM_SHARD, opt->m, opt->local_size * sizeof(float));
    sr_mem_free(SR_MEM_OPTIM_SHARD, opt->v, opt->local_size * sizeof(float));
    free(opt->decay);
    free(opt->slices);
    *opt = (sr_optim){0};
}

void sr_optim_step(sr_optim *opt, float *params, const float *grads, int64_t step, double lr, const sr_adamw_opts *o,
                   float grad_scale) {
    sr_adamw_args a = {.b1 = (float)o->beta1,
                       .b2 = (float)o->beta2,
                       .eps = (float)o->eps,
                       .bc1 = (float)(1.0 - pow(o->beta1, (double)step)),
                       .bc2 = (float)(1.0 - pow(o->beta2, (double)step)),
                       .lr = (float)lr,
                       .grad_scale = grad_scale};
    const float wd = (float)o->weight_decay;
    const sr_model *model = opt->model;
    for (int si = 0; si < opt->nslices; si++) {
        const sr_slice *sl = &opt->slices[si];
        for (int ti = 0; ti < model->n_tensors; ti++) {
            const sr_tensor *t = &model->tensors[ti];
            size_t lo = t->offset > sl->begin ? t->offset : sl->begin;
            size_t hi = t->offset + t->numel < sl->end ? t->offset + t->numel : sl->end;
            if (lo >= hi)
                continue;
            a.decay = opt->decay[ti] ? wd : 0.0f;
            size_t at = lo - sl->begin + sl->local;
            sr_vec_adamw_par(params + at, grads + at, opt->m + at, opt->v + at, hi - lo, &a);
        }
    }
}

double sr_lr_at(const sr_lr_schedule *sch, int64_t s) {
    double lr = sch->lr, min_lr = sch->min_lr;
    int64_t warm = sch->warmup_steps, total = sch->steps;
    if (s < warm)
        return lr * (double)(s + 1) / (double)warm;
    if (sch->schedule == SR_SCHED_CONSTANT)
        return lr;
    if (total - 1 <= warm)
        return lr;
    double frac = (double)(s - warm) / (double)(total - 1 - warm);
    if (frac > 1.0)
        frac = 1.0;
    if (sch->schedule == SR_SCHED_LINEAR)
        return lr + (min_lr - lr) * frac;
    return min_lr + 0.5 * (lr - min_lr) * (1.0 + cos(M_PI * frac));
}

double sr_sum_squares(const float *x, size_t n) {
    /* Fixed-size blocks summed in order: the same result for any thread
     * count.  The partial sums live on the stack in pieces of at most 4096
     * blocks, so the sum never allocates (it runs on the step path). */
    enum { BLOCK = 4096, PIECE = 4096 };
    double part[PIECE], total = 0.0;
    for (size_t base = 0; base < n; base += (size_t)BLOCK * PIECE) {
        size_t len = n - base < (size_t)BLOCK * PIECE ? n - base : (size_t)BLOCK * PIECE;
        size_t nb = (len + BLOCK - 1) / BLOCK;
#pragma omp parallel for
        for (size_t b = 0; b < nb; b++) {
            size_t lo = base + b * BLOCK, hi = lo + BLOCK < base + len ? lo + BLOCK : base + len;
            double s = 0.0;
            for (size_t i = lo; i < hi; i++)
                s += (double)x[i] * x[i];
            part[b] = s;
        }
        for (size_t b = 0; b < nb; b++)
            total += part[b];
    }
    return total;
}
