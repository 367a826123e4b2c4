/* optim.c — AdamW, schedule, norms; see optim.h. */
#include "srconfig.h"

#include "optim.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mem.h"

sr_status sr_optim_init_slices(sr_optim *opt, const sr_model *model, const sr_slice *slices, int n,
                               size_t local_size) {
    memset(opt, 0, sizeof *opt);
    opt->model = model;
    opt->local_size = local_size;
    opt->nslices = n;
    opt->slices = malloc(sizeof *slices * (size_t)(n > 0 ? n : 1));
    opt->m = sr_mem_alloc(SR_MEM_OPTIM_SHARD, local_size * sizeof(float));
    opt->v = sr_mem_alloc(SR_MEM_OPTIM_SHARD, local_size * sizeof(float));
    opt->decay = calloc((size_t)model->n_tensors, 1);
    if (!opt->slices || !opt->m || !opt->v || !opt->decay)
        return sr_error(SR_ERR_INTERNAL, "out of memory for optimizer state");
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
    memset(opt, 0, sizeof *opt);
}

void sr_optim_step(sr_optim *opt, float *params, const float *grads, int64_t step, double lr, const sr_config *cfg,
                   float grad_scale) {
    const float b1 = (float)cfg->beta1, b2 = (float)cfg->beta2, eps = (float)cfg->eps;
    const float bc1 = (float)(1.0 - pow(cfg->beta1, (double)step));
    const float bc2 = (float)(1.0 - pow(cfg->beta2, (double)step));
    const float flr = (float)lr, wd = (float)cfg->weight_decay;
    const sr_model *model = opt->model;
    for (int si = 0; si < opt->nslices; si++) {
        const sr_slice *sl = &opt->slices[si];
        for (int ti = 0; ti < model->n_tensors; ti++) {
            const sr_tensor *t = &model->tensors[ti];
            size_t lo = t->offset > sl->begin ? t->offset : sl->begin;
            size_t hi = t->offset + t->numel < sl->end ? t->offset + t->numel : sl->end;
            if (lo >= hi)
                continue;
            float decay = opt->decay[ti] ? wd : 0.0f;
            size_t a = lo - sl->begin + sl->local, b = hi - sl->begin + sl->local;
#pragma omp parallel for
            for (size_t i = a; i < b; i++) {
                float g = grads[i] * grad_scale;
                float m = b1 * opt->m[i] + (1.0f - b1) * g;
                float v = b2 * opt->v[i] + (1.0f - b2) * g * g;
                opt->m[i] = m;
                opt->v[i] = v;
                float mhat = m / bc1, vhat = v / bc2;
                params[i] -= flr * (mhat / (sqrtf(vhat) + eps) + decay * params[i]);
            }
        }
    }
}

double sr_lr_at(const sr_config *cfg, int64_t s) {
    double lr = cfg->lr, min_lr = cfg->min_lr;
    int64_t warm = cfg->warmup_steps, total = cfg->steps;
    if (s < warm)
        return lr * (double)(s + 1) / (double)warm;
    if (cfg->schedule == SR_SCHED_CONSTANT)
        return lr;
    if (total - 1 <= warm)
        return lr;
    double frac = (double)(s - warm) / (double)(total - 1 - warm);
    if (frac > 1.0)
        frac = 1.0;
    if (cfg->schedule == SR_SCHED_LINEAR)
        return lr + (min_lr - lr) * frac;
    return min_lr + 0.5 * (lr - min_lr) * (1.0 + cos(M_PI * frac));
}

double sr_sum_squares(const float *x, size_t n) {
    /* Fixed-size blocks summed in order: the same result for any thread count. */
    const size_t block = 4096;
    size_t nb = (n + block - 1) / block;
    double total = 0.0;
    double *part = malloc((nb ? nb : 1) * sizeof(double));
    if (!part) {
        for (size_t i = 0; i < n; i++)
            total += (double)x[i] * x[i];
        return total;
    }
#pragma omp parallel for
    for (size_t b = 0; b < nb; b++) {
        size_t lo = b * block, hi = lo + block < n ? lo + block : n;
        double s = 0.0;
        for (size_t i = lo; i < hi; i++)
            s += (double)x[i] * x[i];
        part[b] = s;
    }
    for (size_t b = 0; b < nb; b++)
        total += part[b];
    free(part);
    return total;
}
