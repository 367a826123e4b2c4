/* bench_train.c — training-step throughput against the machine's own SGEMM
 * ceiling, measured in the same run.
 *
 * For each model (tiny, gpt2-124m, llama-tiny, llama-125m; seq_len 256, 4
 * sequences per micro-batch) and thread count (1, 2) it times full
 * optimizer steps
 * (forward, backward, global norm, AdamW) after one warm-up step; achieved
 * GFLOP/s counts 6N + 12LCT per token.  The ceiling is OpenBLAS's own cblas_sgemm, with OpenBLAS's own
 * threads, on exactly the GEMM shapes of one training step (forward,
 * input-gradient and weight-gradient products of every linear layer and the
 * head), each shape weighted by its FLOPs; ratio = end-to-end GFLOP/s /
 * SGEMM GFLOP/s.  Prints one RESULT line (per-step times and the
 * ceiling, the process's peak resident memory) that bench/run.sh turns
 * into the table.
 *
 * With --device cuda the same step runs on the GPU in the exact (fp32)
 * mode, the model owning its parameters and no engine: the baseline of
 * the FSDP overhead at one rank that tests/gpu/check.sh measures (the
 * SGEMM ceiling is then not measured: sgemm_gflops=0).
 *
 * usage: bench_train MODEL THREADS STEPS [--device cpu|cuda] */
#include "srconfig.h"

#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "clock.h"
#include "config.h"
#include "device.h"
#include "mem.h"
#include "model.h"
#include "ops.h"
#include "optim.h"
#include "rng.h"

static double now_s(void) { return sr_clock_mono_s(); }

/* SGEMM GFLOP/s on the step's GEMM shapes with OpenBLAS threading (the
 * family's: GPT-2's 3C and 4C projections, Llama's (NH + 2 NKV) hs and
 * SwiGLU's 2F and F). */
static double sgemm_ceiling(int BT, const sr_model_dims *d, int threads, int reps) {
    openblas_set_num_threads(threads);
    int C = d->C, Vp = d->Vp;
    int QKV = (int)sr_model_qkv_rows(d), H = (int)sr_model_mlp_rows(d), HO = d->F;
    struct {
        int oc, ic;
    } lin[] = {{QKV, C}, {C, C}, {H, C}, {C, HO}, {Vp, C}};
    int wide = H > Vp ? H : Vp;
    size_t maxa = (size_t)BT * (size_t)wide, maxw = (size_t)wide * (size_t)(C > HO ? C : HO);
    float *A = malloc(maxa * sizeof(float)), *Bm = malloc(maxa * sizeof(float)), *W = malloc(maxw * sizeof(float)),
          *O = malloc((maxa > maxw ? maxa : maxw) * sizeof(float));
    for (size_t i = 0; i < maxa; i++)
        A[i] = Bm[i] = (float)sr_rng_normal(1, 1, i);
    for (size_t i = 0; i < maxw; i++)
        W[i] = (float)sr_rng_normal(1, 2, i);
    double best = 0;
    for (int r = 0; r < reps; r++) {
        double flops = 0, t = 0;
        for (size_t k = 0; k < sizeof lin / sizeof lin[0]; k++) {
            int oc = lin[k].oc, ic = lin[k].ic;
            double f = 2.0 * BT * oc * ic;
            double t0 = now_s();
            /* forward: out[BT,oc] = in[BT,ic] W[oc,ic]^T */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, BT, oc, ic, 1.0f, A, ic, W, ic, 0.0f, O, oc);
            /* input grad: din[BT,ic] = dout[BT,oc] W */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, BT, ic, oc, 1.0f, Bm, oc, W, ic, 1.0f, O, ic);
            /* weight grad: dW[oc,ic] += dout^T in */
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, oc, ic, BT, 1.0f, Bm, oc, A, ic, 1.0f, O, ic);
            t += now_s() - t0;
            flops += 3 * f;
        }
        double g = flops / t / 1e9;
        best = g > best ? g : best; /* the ceiling: best of reps */
    }
    openblas_set_num_threads(1);
    free(A), free(Bm), free(W), free(O);
    return best;
}

static int bench(const char *preset, sr_model_dims d, int threads, int steps, bool cuda) {
    const int T = 256, B = 4;
    int V = d.V;
    sr_ops_set_threads(threads);
    sr_mem_reset();
    sr_model m;
    d.T = T;
    sr_dev *dev = NULL;
    const sr_ops *ops = &sr_ops_cpu;
    if (cuda) {
        /* the exact (fp32) mode: a model that owns its parameters computes in fp32 */
        if (sr_device_open(&dev, SR_DEVICE_CUDA, 1, 0, 1) != SR_OK) {
            fprintf(stderr, "bench: %s\n", sr_error_message());
            return 69;
        }
        ops = sr_device_ops(dev, SR_DT_F32, false);
    } else {
        dev = sr_dev_cpu_open();
    }
    if (!dev || sr_model_init(&m, d, ops, dev, B, true) != SR_OK) {
        fprintf(stderr, "bench: out of memory for %s\n", preset);
        return 70;
    }
    if (cuda) {
        float *host = malloc(m.n_params * sizeof(float));
        if (!host)
            return 70;
        sr_model_init_params(&m, 1, host, 0, m.n_params);
        sr_dev_upload(dev, m.params, host, m.n_params * sizeof(float), "upload");
        free(host);
    } else {
        sr_model_init_params(&m, 1, m.params, 0, m.n_params);
    }
    double *dsum = cuda ? dev->alloc(dev, SR_SPACE_DEVICE, SR_MEM_OTHER, sizeof(double)) : NULL;
    sr_optim opt;
    sr_optim_init(&opt, &m, dev, 0, m.n_params);
    sr_config cfg;
    sr_config_init(&cfg); /* the job file's AdamW defaults */
    sr_adamw_opts adamw = {cfg.beta1, cfg.beta2, cfg.eps, cfg.weight_decay};
    int *in = malloc(sizeof(int) * B * T), *tg = malloc(sizeof(int) * B * T);
    for (int i = 0; i < B * T; i++) {
        in[i] = (int)(sr_rng_u64(5, 1, i) % V);
        tg[i] = (int)(sr_rng_u64(5, 2, i) % V);
    }
    const int warm = 1;
    double *ms = malloc(sizeof(double) * steps);
    for (int s = 0; s < warm + steps; s++) {
        double t0 = now_s();
        double loss_sum = 0.0, norm = 0.0;
        if (cuda) {
            /* the device's own primitives, one read of the loss and one of
             * the sum of squares per step, AdamW on the device */
            dev->memset(dev, SR_STREAM_COMPUTE, m.grads, 0, m.n_params * sizeof(float));
            sr_model_forward(&m, NULL, in, tg, B);
            sr_model_take_loss_sum(&m, &loss_sum);
            sr_model_backward(&m, NULL, 1.0f / (B * T));
            dev->sum_squares(dev, SR_STREAM_COMPUTE, dsum, m.grads, m.n_params);
            double ss = 0;
            sr_dev_download(dev, &ss, dsum, sizeof ss, "download");
            norm = sqrt(ss);
            sr_optim_step(&opt, m.params, m.grads, s + 1, 1e-4, &adamw, norm > 1 ? (float)(1 / norm) : 1.0f);
            dev->sync(dev, SR_STREAM_COMPUTE);
        } else {
            memset(m.grads, 0, m.n_params * sizeof(float));
            sr_model_forward(&m, NULL, in, tg, B);
            sr_model_take_loss_sum(&m, &loss_sum);
            sr_model_backward(&m, NULL, 1.0f / (B * T));
            norm = sqrt(sr_vec_sum_squares(m.grads, m.n_params));
            sr_optim_step(&opt, m.params, m.grads, s + 1, 1e-4, &adamw, norm > 1 ? (float)(1 / norm) : 1.0f);
        }
        if (s >= warm)
            ms[s - warm] = (now_s() - t0) * 1e3;
    }
    /* the process's peak resident memory, as bench_torch.py reports its own */
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    double peak_mib = (double)ru.ru_maxrss / 1024.0;
    double ceil = cuda ? 0 : sgemm_ceiling(B * T, &m.d, threads, 5);
    printf("RESULT impl=shardrun device=%s model=%s threads=%d flops_per_step=%.6g sgemm_gflops=%.3f peak_mib=%.1f ms=",
           cuda ? "cuda" : "cpu", preset, threads, sr_model_flops_per_token(&m) * B * T, ceil, peak_mib);
    for (int s = 0; s < steps; s++)
        printf("%s%.3f", s ? "," : "", ms[s]);
    printf("\n");
    fflush(stdout);
    free(ms), free(in), free(tg);
    sr_config_free(&cfg);
    sr_optim_free(&opt);
    if (dsum)
        dev->free(dev, dsum);
    sr_model_free(&m);
    sr_device_close(dev);
    return 0;
}

int main(int argc, char **argv) {
    bool cuda = argc == 6 && strcmp(argv[4], "--device") == 0 && strcmp(argv[5], "cuda") == 0;
    if (argc != 4 && !(argc == 6 && strcmp(argv[4], "--device") == 0 && (cuda || strcmp(argv[5], "cpu") == 0))) {
        fprintf(stderr, "usage: bench_train MODEL THREADS STEPS [--device cpu|cuda]   (MODEL: tiny | gpt2-124m | "
                        "llama-tiny | llama-125m)\n");
        return 64;
    }
    /* the presets' dims (config.c), at seq_len 256 */
    const struct {
        const char *name;
        sr_model_dims d;
    } models[] = {
        {"tiny", {.L = 4, .NH = 4, .C = 256, .V = 256}},
        {"gpt2-124m", {.L = 12, .NH = 12, .C = 768, .V = 50257}},
        {"llama-tiny",
         {.L = 4,
          .NH = 4,
          .C = 256,
          .V = 256,
          .arch = SR_ARCH_LLAMA,
          .NKV = 2,
          .F = 704,
          .norm_eps = 1e-5,
          .rope_theta = 10000}},
        {"llama-125m",
         {.L = 12,
          .NH = 12,
          .C = 768,
          .V = 32000,
          .arch = SR_ARCH_LLAMA,
          .NKV = 4,
          .F = 2048,
          .untied = true,
          .norm_eps = 1e-5,
          .rope_theta = 10000}},
    };
    for (size_t k = 0; k < sizeof models / sizeof models[0]; k++)
        if (strcmp(argv[1], models[k].name) == 0)
            return bench(models[k].name, models[k].d, atoi(argv[2]), atoi(argv[3]) > 0 ? atoi(argv[3]) : 3, cuda);
    fprintf(stderr, "bench_train: unknown model '%s'\n", argv[1]);
    return 64;
}
