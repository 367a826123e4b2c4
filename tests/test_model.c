/* test_model.c — the whole model: finite-difference gradients (32 random
 * coordinates per tensor, central differences with the loss summed in
 * double), the unit-major layout, initialisation, vocabulary padding, the
 * weight-decay rule, the learning-rate schedule and determinism. */
#include "srconfig.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "mem.h"
#include "model.h"
#include "optim.h"
#include "rng.h"
#include "tap.h"
#include "vec.h"

static sr_dev *dev; /* the cpu table: every buffer below is host memory */

static double loss_double(sr_model *m, const int *in, const int *tg, int B) {
    sr_model_forward(m, NULL, in, tg, B);
    double s = 0;
    sr_model_take_loss_sum(m, &s);
    return s / (B * m->d.T);
}

static void test_gradients(const char *what, sr_model_dims d) {
    sr_model m;
    int B = 3;
    tap_diag("%s", what);
    if (!tap_ok(sr_model_init(&m, d, &sr_ops_cpu, dev, B, true) == SR_OK, "%s: small model initialises", what))
        return;
    sr_model_init_params(&m, 7, m.params, 0, m.n_params);
    /* Perturb LayerNorm and bias parameters away from 1/0 so their
     * gradients are generic, and enlarge weights so the signal is strong. */
    for (size_t i = 0; i < m.n_params; i++)
        m.params[i] += (float)(0.05 * sr_rng_normal(9, 9, i));
    /* keep padded rows at zero: they are not part of the model */
    for (int ti = 0; ti < m.n_tensors; ti++)
        if (m.tensors[ti].vocab)
            for (size_t i = (size_t)d.V * d.C; i < m.tensors[ti].numel; i++)
                m.params[m.tensors[ti].offset + i] = 0.0f;
    int *in = malloc(sizeof(int) * B * d.T), *tg = malloc(sizeof(int) * B * d.T);
    for (int i = 0; i < B * d.T; i++) {
        in[i] = (int)(sr_rng_u64(3, 1, i) % d.V);
        tg[i] = (int)(sr_rng_u64(3, 2, i) % d.V);
    }
    memset(m.grads, 0, m.n_params * sizeof(float));
    double first = 0.0, again = -1.0;
    tap_ok(sr_model_forward(&m, NULL, in, tg, B) == SR_OK && sr_model_take_loss_sum(&m, &first) == SR_OK &&
               sr_model_backward(&m, NULL, 1.0f / (B * d.T)) == SR_OK,
           "%s: forward and backward succeed", what);
    sr_model_take_loss_sum(&m, &again);
    tap_ok(isfinite(first) && first > 0 && again == 0.0,
           "%s: the loss sum is read once and restarts at zero (%.6g, then %g)", what, first, again);

    double worst = 0;
    const char *worst_name = "";
    int checked = 0;
    for (int ti = 0; ti < m.n_tensors; ti++) {
        const sr_tensor *t = &m.tensors[ti];
        size_t real = t->vocab ? (size_t)d.V * d.C : t->numel;
        double gmax = 0;
        for (size_t i = 0; i < real; i++)
            gmax = fmax(gmax, fabs(m.grads[t->offset + i]));
        int ncoord = real < 32 ? (int)real : 32;
        double terr = 0;
        for (int k = 0; k < ncoord; k++) {
            size_t i = real <= 32 ? (size_t)k : sr_rng_u64(11, (uint64_t)ti, (uint64_t)k) % real;
            float *p = &m.params[t->offset + i];
            float keep = *p, h = 1e-2f;
            *p = keep + h;
            double lp = loss_double(&m, in, tg, B);
            *p = keep - h;
            double lm = loss_double(&m, in, tg, B);
            *p = keep;
            double fd = (lp - lm) / (2.0 * h);
            double err = fabs(fd - m.grads[t->offset + i]) / fmax(gmax, 1e-4);
            terr = fmax(terr, err);
            checked++;
        }
        if (terr > worst) {
            worst = terr;
            worst_name = t->name;
        }
    }
    tap_diag("checked %d coordinates over %d tensors; worst relative error %.3g in %s", checked, m.n_tensors, worst,
             worst_name);
    tap_ok(worst < 5e-3, "%s: whole-model gradients match central differences (32 coordinates per tensor)", what);
    double pad = 0;
    int vocab_tensors = 0;
    for (int ti = 0; ti < m.n_tensors; ti++)
        if (m.tensors[ti].vocab) {
            vocab_tensors++;
            for (size_t i = (size_t)d.V * d.C; i < m.tensors[ti].numel; i++)
                pad = fmax(pad, fabs(m.grads[m.tensors[ti].offset + i]));
        }
    tap_ok(pad == 0.0 && vocab_tensors == (d.untied ? 2 : 1),
           "%s: padded vocabulary rows get zero gradient (%d vocabulary tensors)", what, vocab_tensors);

    /* determinism: the same forward/backward gives bitwise the same gradients */
    float *g1 = malloc(m.n_params * sizeof(float));
    memcpy(g1, m.grads, m.n_params * sizeof(float));
    memset(m.grads, 0, m.n_params * sizeof(float));
    sr_model_forward(&m, NULL, in, tg, B);
    sr_model_backward(&m, NULL, 1.0f / (B * d.T));
    double twice = 0.0;
    sr_model_take_loss_sum(&m, &twice);
    tap_ok(twice == first, "%s: the same forward sums the same loss, bitwise", what);
    tap_ok(memcmp(g1, m.grads, m.n_params * sizeof(float)) == 0, "%s: forward+backward is bitwise reproducible", what);
    free(g1);
    free(in);
    free(tg);
    sr_model_free(&m);
}

static void test_layout(void) {
    sr_model m;
    sr_model_dims d = {.L = 4, .NH = 4, .C = 256, .V = 256, .T = 256};
    if (!tap_ok(sr_model_init(&m, d, &sr_ops_cpu, dev, 1, false) == SR_OK, "tiny model table builds"))
        return;
    int ok = 1, prev_unit = 0;
    size_t off = 0;
    for (int ti = 0; ti < m.n_tensors; ti++) {
        const sr_tensor *t = &m.tensors[ti];
        ok = ok && t->offset == off && t->unit >= prev_unit;
        off += t->numel;
        prev_unit = t->unit;
    }
    tap_ok(ok && off == m.n_params, "tensors are contiguous and unit-major (blocks, then root)");
    ok = 1;
    for (int l = 0; l <= d.L; l++)
        ok = ok && m.layer_offset[l] == m.tensors[l * SR_NBLOCK_TENSORS].offset;
    tap_ok(ok && m.layer_offset[d.L + 1] == m.n_params, "each unit is one contiguous slice");
    tap_ok(strcmp(m.tensors[m.n_tensors - SR_NROOT_TENSORS].name, "wte.weight") == 0 &&
               m.tensors[m.n_tensors - 1].unit == d.L,
           "the root unit (wte, wpe, ln_f) comes last");
    /* 12*C^2 + 13*C per block; root Vp*C + T*C + 2C */
    size_t C = 256, expect = 4 * (12 * C * C + 13 * C) + 256 * C + 256 * C + 2 * C;
    tap_ok(m.n_params == expect, "tiny has %zu parameters (expected %zu)", m.n_params, expect);
    tap_ok(sr_model_padded_vocab(50257) == 50304 && sr_model_padded_vocab(256) == 256 &&
               sr_model_padded_vocab(37) == 64,
           "vocabulary padded to a multiple of 64 (50257 -> 50304)");

    /* initialisation: statistics, and any slice equals the same slice of the whole */
    float *full = malloc(m.n_params * sizeof(float));
    sr_model_init_params(&m, 1337, full, 0, m.n_params);
    const sr_tensor *qkv = &m.tensors[SR_QKVW], *proj = &m.tensors[SR_ATTPROJW], *ln = &m.tensors[SR_LN1W];
    double s2 = 0, p2 = 0;
    for (size_t i = 0; i < qkv->numel; i++)
        s2 += (double)full[qkv->offset + i] * full[qkv->offset + i];
    for (size_t i = 0; i < proj->numel; i++)
        p2 += (double)full[proj->offset + i] * full[proj->offset + i];
    double sd = sqrt(s2 / qkv->numel), pd = sqrt(p2 / proj->numel);
    tap_is_close(sd, 0.02, 0, 0.001, "weights are N(0, 0.02) (std %.4f)", sd);
    tap_is_close(pd, 0.02 / sqrt(8.0), 0, 0.0005, "residual projections are scaled by 1/sqrt(2L) (std %.5f)", pd);
    tap_ok(full[ln->offset] == 1.0f && full[ln->offset + 255] == 1.0f && full[m.tensors[SR_LN1B].offset] == 0.0f,
           "LayerNorm weights 1, biases 0");
    size_t lo = m.n_params / 3 + 17, hi = 2 * m.n_params / 3 + 5;
    float *part = malloc((hi - lo) * sizeof(float));
    sr_model_init_params(&m, 1337, part, lo, hi);
    tap_ok(memcmp(part, full + lo, (hi - lo) * sizeof(float)) == 0,
           "initialising any slice gives the same values as the whole buffer (world-size independent)");
    float *other = malloc(m.n_params * sizeof(float));
    sr_model_init_params(&m, 1338, other, 0, m.n_params);
    tap_ok(memcmp(other, full, m.n_params * sizeof(float)) != 0, "another seed gives other weights");

    /* decay rule */
    sr_optim opt;
    sr_optim_init(&opt, &m, dev, 0, m.n_params);
    /* one slice over the whole vector: one segment per tensor, in order */
    int rule = opt.nsegs == m.n_tensors;
    for (int ti = 0; rule && ti < m.n_tensors; ti++) {
        const char *n = m.tensors[ti].name;
        int should = strstr(n, "weight") && !strstr(n, "ln_");
        rule = opt.segs[ti].decay == should && opt.segs[ti].off == m.tensors[ti].offset &&
               opt.segs[ti].n == m.tensors[ti].numel;
    }
    tap_ok(rule, "weight decay applies to matrices and embeddings, not biases or LayerNorm");
    sr_optim_free(&opt);
    free(full);
    free(part);
    free(other);
    sr_model_free(&m);
}

static void test_schedule(void) {
    sr_lr_schedule c = {.schedule = SR_SCHED_COSINE, .lr = 1e-3, .min_lr = 1e-4, .warmup_steps = 10, .steps = 111};
    tap_ok(fabs(sr_lr_at(&c, 0) - 1e-4) < 1e-12 && fabs(sr_lr_at(&c, 9) - 1e-3) < 1e-12, "warmup rises linearly to lr");
    tap_ok(fabs(sr_lr_at(&c, 110) - 1e-4) < 1e-12 && fabs(sr_lr_at(&c, 60) - 5.5e-4) < 1e-12,
           "cosine decays to min_lr at the last step through the midpoint");
    c.schedule = SR_SCHED_LINEAR;
    tap_ok(fabs(sr_lr_at(&c, 60) - 5.5e-4) < 1e-12 && fabs(sr_lr_at(&c, 110) - 1e-4) < 1e-12, "linear decay");
    c.schedule = SR_SCHED_CONSTANT;
    tap_ok(sr_lr_at(&c, 100) == 1e-3, "constant schedule");
}

static void test_adamw(void) {
    /* one AdamW step on a 2-element tensor against the formula */
    sr_model m;
    sr_model_dims d = {.L = 1, .NH = 1, .C = 4, .V = 8, .T = 2};
    sr_model_init(&m, d, &sr_ops_cpu, dev, 1, true);
    sr_config cfg;
    sr_config_init(&cfg); /* the job file's defaults */
    sr_adamw_opts c = {cfg.beta1, cfg.beta2, cfg.eps, cfg.weight_decay};
    sr_optim opt;
    sr_optim_init(&opt, &m, dev, 0, m.n_params);
    for (size_t i = 0; i < m.n_params; i++) {
        m.params[i] = 0.5f;
        m.grads[i] = 0.25f;
    }
    sr_optim_step(&opt, m.params, m.grads, 1, 0.01, &c, 1.0f);
    /* step 1: mhat = g, vhat = g^2, update = g/(|g|+eps) = 1 */
    float decayed = 0.5f - 0.01f * (1.0f + 0.1f * 0.5f), plain = 0.5f - 0.01f * 1.0f;
    size_t qkvw = m.tensors[SR_QKVW].offset, qkvb = m.tensors[SR_QKVB].offset;
    tap_ok(fabs(m.params[qkvw] - decayed) < 1e-6 && fabs(m.params[qkvb] - plain) < 1e-6,
           "AdamW step: decoupled decay on matrices only (%.7f, %.7f)", m.params[qkvw], m.params[qkvb]);
    sr_optim_free(&opt);
    sr_config_free(&cfg);
    sr_model_free(&m);
}

/* The shard-wide AdamW (one range per thread across segments) gives the
 * bits of the per-segment loop it replaced, for 1, 2 and 3 threads, on a
 * two-slice shard whose padding stays untouched. */
static void test_adamw_split(void) {
    sr_model m;
    sr_model_dims d = {.L = 3, .NH = 2, .C = 64, .V = 100, .T = 8};
    sr_model_init(&m, d, &sr_ops_cpu, dev, 0, false);
    size_t n = m.n_params, half = n / 2 + 7, pad = 13, local = n + pad;
    sr_slice sl[2] = {{0, half, 0}, {half, n, half + pad}};
    sr_adamw_opts c = {0.9, 0.95, 1e-8, 0.1};
    float *buf[2][4];
    for (int k = 0; k < 2; k++)
        for (int j = 0; j < 4; j++)
            buf[k][j] = malloc(local * sizeof(float));
    bool same = true;
    for (int threads = 1; threads <= 3; threads++) {
        sr_ops_set_threads(threads);
        sr_optim opt;
        sr_optim_init_slices(&opt, &m, dev, sl, 2, local);
        for (size_t i = 0; i < local; i++) {
            buf[0][0][i] = buf[1][0][i] = (float)sr_rng_normal(3, 1, i);
            buf[0][1][i] = buf[1][1][i] = (float)sr_rng_normal(3, 2, i) * 0.01f;
            buf[0][2][i] = buf[1][2][i] = (float)sr_rng_normal(3, 3, i) * 1e-3f;
            buf[0][3][i] = buf[1][3][i] = fabsf((float)sr_rng_normal(3, 4, i)) * 1e-5f;
        }
        /* the engine's path: the device table's adamw */
        memcpy(opt.m, buf[0][2], local * sizeof(float));
        memcpy(opt.v, buf[0][3], local * sizeof(float));
        sr_optim_step(&opt, buf[0][0], buf[0][1], 3, 6e-4, &c, 0.7f);
        /* the reference: a parallel region per segment */
        sr_adamw_args a = {0.9f, 0.95f, 1e-8f, (float)(1 - pow(0.9, 3)), (float)(1 - pow(0.95, 3)), 6e-4f, 0, 0.7f};
        for (int i = 0; i < opt.nsegs; i++) {
            const sr_adamw_segment *g = &opt.segs[i];
            a.decay = g->decay ? 0.1f : 0.0f;
            sr_vec_adamw_par(buf[1][0] + g->off, buf[1][1] + g->off, buf[1][2] + g->off, buf[1][3] + g->off, g->n, &a);
        }
        same = same && memcmp(buf[0][0], buf[1][0], local * sizeof(float)) == 0 &&
               memcmp(opt.m, buf[1][2], local * sizeof(float)) == 0 &&
               memcmp(opt.v, buf[1][3], local * sizeof(float)) == 0;
        bool pad_kept = true;
        for (size_t i = half; i < half + pad; i++)
            pad_kept = pad_kept && opt.m[i] == buf[0][2][i] && buf[0][0][i] == buf[1][0][i];
        tap_ok(pad_kept, "shard-wide AdamW leaves the padding between slices alone (%d threads)", threads);
        sr_optim_free(&opt);
    }
    tap_ok(same, "shard-wide AdamW: params, m and v bitwise the per-segment loop (1, 2, 3 threads)");
    for (int k = 0; k < 2; k++)
        for (int j = 0; j < 4; j++)
            free(buf[k][j]);
    sr_ops_set_threads(2);
    sr_model_free(&m);
}

/* model.recompute's split: block inputs are L x B x T x C x element size,
 * and the three parts are exactly what a recomputing model allocates. */
static void test_activation_split(void) {
    sr_model_dims d = {.L = 5, .NH = 2, .C = 32, .V = 50, .T = 16, .recompute = SR_RECOMPUTE_BLOCKS};
    int B = 3;
    sr_act_split sp = sr_model_activation_split(&d, &sr_ops_cpu, B);
    tap_ok(sp.inputs == (size_t)5 * B * 16 * 32 * 4, "recompute: block inputs are L.B.T.C.4 (%zu)", sp.inputs);
    sr_model m;
    sr_model_init(&m, d, &sr_ops_cpu, dev, B, false);
    tap_ok(m.act_bytes == sp.inputs + sp.block + sp.root, "recompute: allocated %zu = inputs + block + root %zu",
           m.act_bytes, sp.inputs + sp.block + sp.root);
    sr_model_free(&m);
    d.recompute = SR_RECOMPUTE_NONE;
    sr_model_init(&m, d, &sr_ops_cpu, dev, B, false);
    size_t btc = (size_t)B * 16 * 32 * 4;
    tap_ok(m.act_bytes == sp.inputs + 5 * sp.block + sp.root - 4 * btc,
           "recompute none: L blocks' sets besides the inputs and root (%zu)", m.act_bytes);
    sr_model_free(&m);
}

/* The Llama table: names, shapes, the parameter count, the rotary table
 * against the closed form in double, and a CUDA-like table without the
 * Llama ops refused with the configuration status. */
static void test_llama_layout(void) {
    sr_model m;
    sr_model_dims d = {.L = 3,
                       .NH = 8,
                       .C = 64,
                       .V = 100,
                       .T = 16,
                       .arch = SR_ARCH_LLAMA,
                       .NKV = 2,
                       .F = 96,
                       .untied = true,
                       .norm_eps = 1e-5,
                       .rope_theta = 10000};
    if (!tap_ok(sr_model_init(&m, d, &sr_ops_cpu, NULL, 0, false) == SR_OK, "llama: the table builds"))
        return;
    size_t C = 64, hs = 8, qkv = (8 + 2 * 2) * hs, F = 96, Vp = 128;
    size_t expect = 3 * (2 * C + qkv * C + C * C + 3 * F * C) + 2 * Vp * C + C;
    tap_ok(m.n_params == expect && sr_model_n_params(&d) == expect && m.n_params_real == expect - 2 * (Vp - 100) * C,
           "llama: %zu parameters, as the shapes give (untied head, padded vocabulary excluded from the real count)",
           m.n_params);
    const sr_tensor *q = &m.tensors[SR_LL_QKV], *gu = &m.tensors[SR_LL_GATE_UP], *dn = &m.tensors[SR_LL_DOWN];
    tap_ok(strcmp(q->name, "layers.0.self_attn.qkv_proj.weight") == 0 && (size_t)q->rows == qkv &&
               (size_t)gu->rows == 2 * F && (size_t)dn->cols == F,
           "llama: fused projections [(NH + 2 NKV) hs, C] and [2F, C], down [C, F] (%s)", q->name);
    tap_ok(m.n_tensors == 3 * SR_LL_NBLOCK_TENSORS + 3 &&
               strcmp(m.tensors[m.n_tensors - 1].name, "lm_head.weight") == 0 && m.tensors[m.n_tensors - 1].vocab,
           "llama: the root is embed_tokens, norm, lm_head");
    sr_model_free(&m);
    d.untied = false;
    sr_model_init(&m, d, &sr_ops_cpu, NULL, 0, false);
    tap_ok(m.n_tensors == 3 * SR_LL_NBLOCK_TENSORS + 2 && m.n_params == expect - Vp * C,
           "llama tied: no lm_head tensor, the embedding is the head");
    sr_model_free(&m);

    /* the rotary table: closed form in double, and Llama-3's scaling
     * leaves high frequencies alone and divides low ones by the factor */
    float *cs = malloc(sizeof(float) * d.T * hs), *sc = malloc(sizeof(float) * d.T * hs);
    sr_model_rope_table(&d, cs);
    double e = 0;
    for (int t = 0; t < d.T; t++)
        for (size_t i = 0; i < hs / 2; i++) {
            double f = pow(10000.0, -2.0 * (double)i / (double)hs);
            e = fmax(e, fabs(cs[t * hs + i] - cos(t * f)) + fabs(cs[t * hs + hs / 2 + i] - sin(t * f)));
        }
    tap_ok(e < 1e-5, "llama: the rotary table is cos/sin(t theta^(-2i/hs)) (err %.2g)", e);
    sr_model_dims ds = d;
    ds.rope = (sr_rope_scaling){8, 1, 4, 32};
    sr_model_rope_table(&ds, sc);
    /* wavelength 2 pi / f: i = 0 (wl 6.3 < 32/4) unscaled; i = 3 (f =
     * 1e-3, wl 6283 > 32/1) divided by 8 */
    double f3 = pow(10000.0, -6.0 / hs);
    tap_ok(sc[5 * hs + 0] == cs[5 * hs + 0] && fabs(sc[5 * hs + 3] - cos(5 * f3 / 8)) < 1e-6,
           "llama: Llama-3 scaling keeps high frequencies and divides low ones by the factor");
    free(cs);
    free(sc);

    sr_ops nollama = sr_ops_cpu;
    nollama.name = "cuda";
    nollama.rope_forward = NULL;
    sr_status st = sr_model_init(&m, d, &nollama, dev, 1, false);
    tap_ok(st == SR_ERR_CONFIG && strstr(sr_error_message(), "not implemented yet: the Llama kernels"),
           "llama: a table without the Llama ops is refused with 78 (%s)", sr_error_message());
    sr_model_free(&m);
}

int main(void) {
    sr_ops_set_threads(2);
    dev = sr_dev_cpu_open();
    test_gradients("gpt2", (sr_model_dims){.L = 2, .NH = 2, .C = 16, .V = 37, .T = 8});
    /* Llama: grouped heads (4 query heads on 2 key/value heads), rotary
     * positions with Llama-3 scaling, SwiGLU of another width than 4C, an
     * untied head; then tied, without scaling, and recomputing blocks */
    test_gradients("llama, grouped heads, untied, rope scaling", (sr_model_dims){.L = 2,
                                                                                 .NH = 4,
                                                                                 .C = 16,
                                                                                 .V = 37,
                                                                                 .T = 8,
                                                                                 .arch = SR_ARCH_LLAMA,
                                                                                 .NKV = 2,
                                                                                 .F = 24,
                                                                                 .untied = true,
                                                                                 .norm_eps = 1e-5,
                                                                                 .rope_theta = 100,
                                                                                 .rope = {4, 1, 4, 8}});
    test_gradients("llama, tied, recompute blocks", (sr_model_dims){.L = 2,
                                                                    .NH = 2,
                                                                    .C = 16,
                                                                    .V = 37,
                                                                    .T = 8,
                                                                    .recompute = SR_RECOMPUTE_BLOCKS,
                                                                    .arch = SR_ARCH_LLAMA,
                                                                    .NKV = 1,
                                                                    .F = 40,
                                                                    .norm_eps = 1e-5,
                                                                    .rope_theta = 10000});
    test_llama_layout();
    test_layout();
    test_schedule();
    test_adamw();
    test_adamw_split();
    test_activation_split();
    sr_device_close(dev);
    return tap_done();
}
