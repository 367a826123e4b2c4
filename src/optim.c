/* optim.c — AdamW, schedule, norms; see optim.h. */
#include "srconfig.h"

#include "optim.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "mem.h"
#include "vec.h"

sr_status sr_optim_init_slices(sr_optim *opt, const sr_model *model, sr_dev *dev, const sr_slice *slices, int n,
                               size_t local_size) {
    *opt = (sr_optim){.model = model, .dev = dev, .local_size = local_size, .nslices = n};
    opt->slices = sr_malloc(sizeof *slices * (size_t)(n > 0 ? n : 1));
    /* a slice meets at most every tensor: n * n_tensors segments at most */
    opt->segs = sr_malloc(sizeof *opt->segs * (size_t)(n > 0 ? n : 1) * (size_t)model->n_tensors);
    size_t total = 0; /* the elements of the segments so far (each one's start) */
    if (!opt->slices || !opt->segs)
        return sr_error_oom("the optimizer's tables");
    opt->m = dev->alloc(dev, dev->state_space, SR_MEM_OPTIM_SHARD, local_size * sizeof(float));
    opt->v = opt->m ? dev->alloc(dev, dev->state_space, SR_MEM_OPTIM_SHARD, local_size * sizeof(float)) : NULL;
    if (!opt->m || !opt->v)
        return SR_ERR_INTERNAL;
    dev->memset(dev, SR_STREAM_COMPUTE, opt->m, 0, local_size * sizeof(float));
    dev->memset(dev, SR_STREAM_COMPUTE, opt->v, 0, local_size * sizeof(float));
    for (int si = 0; si < n; si++)
        opt->slices[si] = slices[si];
    for (int si = 0; si < n; si++) {
        const sr_slice *sl = &slices[si];
        for (int ti = 0; ti < model->n_tensors; ti++) {
            const sr_tensor *t = &model->tensors[ti];
            size_t lo = t->offset > sl->begin ? t->offset : sl->begin;
            size_t hi = t->offset + t->numel < sl->end ? t->offset + t->numel : sl->end;
            if (lo < hi) {
                opt->segs[opt->nsegs] = (sr_adamw_segment){lo - sl->begin + sl->local, hi - lo, total, t->ndim >= 2};
                opt->nsegs++;
                total += hi - lo;
            }
        }
    }
    /* the list in the table's memory, the one launch's table (its
     * capacity sr_optim_table_bytes: what the plan counts; on every table,
     * so a fake-device run's memory is the CPU run's) */
    size_t bytes = sr_optim_table_bytes(model->n_tensors, n);
    if (!(opt->dsegs = dev->alloc(dev, dev->state_space, SR_MEM_OPTIM_SHARD, bytes)))
        return SR_ERR_INTERNAL;
    return opt->nsegs ? sr_dev_upload(dev, opt->dsegs, opt->segs, sizeof *opt->segs * (size_t)opt->nsegs, "upload")
                      : SR_OK;
}

size_t sr_optim_table_bytes(int n_tensors, int nslices) {
    /* slices are disjoint and tensors are disjoint: their intersections
     * number at most one per tensor plus one per slice boundary */
    return sizeof(sr_adamw_segment) * ((size_t)n_tensors + (size_t)(nslices > 0 ? nslices : 1));
}

sr_status sr_optim_init(sr_optim *opt, const sr_model *model, sr_dev *dev, size_t begin, size_t end) {
    sr_slice one = {begin, end, 0};
    return sr_optim_init_slices(opt, model, dev, &one, 1, end - begin);
}

void sr_optim_free(sr_optim *opt) {
    if (opt->dev) {
        opt->dev->free(opt->dev, opt->m);
        opt->dev->free(opt->dev, opt->v);
        opt->dev->free(opt->dev, opt->dsegs);
    }
    free(opt->segs);
    free(opt->slices);
    *opt = (sr_optim){0};
}

void sr_optim_step(sr_optim *opt, float *params, const float *grads, int64_t step, double lr, const sr_adamw_opts *o,
                   float grad_scale) {
    sr_adamw_launch l = sr_optim_launch(opt, params, grads, step, lr, o, grad_scale);
    opt->dev->adamw(opt->dev, SR_STREAM_COMPUTE, &l);
}

void sr_optim_step_clipped(sr_optim *opt, float *params, const float *grads, int64_t step, double lr,
                           const sr_adamw_opts *o, const double *sumsq, double clip) {
    sr_adamw_launch l = sr_optim_launch(opt, params, grads, step, lr, o, 1.0f);
    l.sumsq = sumsq;
    l.clip = clip;
    opt->dev->adamw(opt->dev, SR_STREAM_COMPUTE, &l);
}

sr_adamw_launch sr_optim_launch(const sr_optim *opt, float *params, const float *grads, int64_t step, double lr,
                                const sr_adamw_opts *o, float grad_scale) {
    return (sr_adamw_launch){.params = params,
                             .grads = grads,
                             .m = opt->m,
                             .v = opt->v,
                             .segs = opt->segs,
                             .dsegs = opt->dsegs,
                             .nsegs = opt->nsegs,
                             .params16 = opt->params16,
                             .a = {.b1 = (float)o->beta1,
                                   .b2 = (float)o->beta2,
                                   .eps = (float)o->eps,
                                   .bc1 = (float)(1.0 - pow(o->beta1, (double)step)),
                                   .bc2 = (float)(1.0 - pow(o->beta2, (double)step)),
                                   .lr = (float)lr,
                                   .grad_scale = grad_scale},
                             .weight_decay = (float)o->weight_decay};
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
