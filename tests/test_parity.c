/* test_parity.c — shardrun's model against PyTorch, through the committed
 * golden file (tests/parity/golden.bin, see parity.h and make_golden.py).
 * Loss: relative error <= 1e-5; logits and every gradient tensor:
 * max|a-b| <= 1e-4 * max|b|.  Needs no PyTorch at test time. */
#include "srconfig.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"
#include "parity.h"
#include "tap.h"

static void *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    void *buf = malloc((size_t)n);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    *len = (size_t)n;
    return buf;
}

static double max_abs(const float *x, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++)
        m = fmax(m, fabs(x[i]));
    return m;
}

static double max_diff(const float *a, const float *b, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++)
        m = fmax(m, fabs((double)a[i] - b[i]));
    return m;
}

int main(void) {
    const char *src = getenv("SR_SRCDIR");
    char path[4096];
    snprintf(path, sizeof path, "%s/tests/parity/golden.bin", src ? src : ".");
    size_t len = 0;
    unsigned char *g = slurp(path, &len);
    if (!tap_ok(g && len > 44 && memcmp(g, "SRGOLD1", 8) == 0, "golden file %s is readable", path))
        return tap_done();
    int32_t h[9];
    memcpy(h, g + 8, sizeof h);
    int L = h[0], NH = h[1], C = h[2], V = h[3], T = h[5], B = h[6], seed = h[7], n = h[8];
    int BT = B * T;
    size_t want = 44 + 4 * (size_t)n + 8 * (size_t)BT + 8 + 4 * (size_t)BT * V + 4 * (size_t)n;
    if (!tap_ok(len == want, "golden file has the expected size (%zu)", want))
        return tap_done();
    const unsigned char *p = g + 44;
    const float *gparams = (const float *)p;
    p += 4 * (size_t)n;
    const int32_t *inputs = (const int32_t *)p;
    const int32_t *targets = inputs + BT;
    p += 8 * (size_t)BT;
    double gloss;
    memcpy(&gloss, p, 8);
    p += 8;
    const float *glogits = (const float *)p;
    const float *ggrads = glogits + (size_t)BT * V;

    sr_ops_set_threads(2);
    sr_dev *dev = sr_dev_cpu_open();
    sr_model m;
    sr_model_dims d = {.L = L, .NH = NH, .C = C, .V = V, .T = T};
    tap_ok(sr_model_init(&m, d, &sr_ops_cpu, dev, B, true) == SR_OK && m.n_params == (size_t)n,
           "model with the golden dimensions (L %d, NH %d, C %d, V %d, T %d) has %d parameters", L, NH, C, V, T, n);
    /* the weights PyTorch saw are the ones shardrun's initialisation makes */
    sr_model_init_params(&m, (uint64_t)seed, m.params, 0, m.n_params);
    double init_err = max_diff(m.params, gparams, (size_t)n);
    tap_ok(init_err <= 1e-6 * max_abs(gparams, (size_t)n),
           "initialisation from seed %d reproduces the exported weights (%.2g)", seed, init_err);
    memcpy(m.params, gparams, sizeof(float) * (size_t)n);

    int *in = malloc(sizeof(int) * BT), *tg = malloc(sizeof(int) * BT);
    for (int i = 0; i < BT; i++) {
        in[i] = inputs[i];
        tg[i] = targets[i];
    }
    memset(m.grads, 0, sizeof(float) * (size_t)n);
    sr_model_forward(&m, NULL, in, tg, B);
    double loss_sum = 0.0;
    sr_model_take_loss_sum(&m, &loss_sum);
    double loss = loss_sum / BT;
    /* the classifier leaves the logits intact (ops.h): they must equal the
     * head recomputed over the final LayerNorm output kept by forward */
    float *logits = malloc(sizeof(float) * (size_t)BT * m.d.Vp);
    memcpy(logits, m.logits, sizeof(float) * (size_t)BT * m.d.Vp);
    float *head = malloc(sizeof(float) * (size_t)BT * m.d.Vp);
    const sr_tensor *wte = &m.tensors[L * SR_NBLOCK_TENSORS + SR_WTE];
    sr_ops_cpu.matmul_forward(head, m.lnf, m.params + wte->offset, NULL, BT, C, m.d.Vp);
    tap_ok(memcmp(head, logits, sizeof(float) * (size_t)BT * m.d.Vp) == 0,
           "the forward leaves the logits intact (the classifier saves a log-sum-exp per row instead)");
    free(head);
    sr_model_backward(&m, NULL, 1.0f / BT);

    double lrel = fabs(loss - gloss) / fabs(gloss);
    tap_ok(lrel <= 1e-5, "loss %.7f vs PyTorch %.7f (relative error %.2g <= 1e-5)", loss, gloss, lrel);
    float *lreal = malloc(sizeof(float) * (size_t)BT * V);
    for (int r = 0; r < BT; r++)
        memcpy(lreal + (size_t)r * V, logits + (size_t)r * m.d.Vp, sizeof(float) * V);
    double le = max_diff(lreal, glogits, (size_t)BT * V), lm = max_abs(glogits, (size_t)BT * V);
    tap_ok(le <= 1e-4 * lm, "logits: max|a-b| %.3g <= 1e-4 * max|b| (%.3g)", le, lm);

    int bad = 0;
    double worst = 0;
    const char *worst_name = "";
    for (int ti = 0; ti < m.n_tensors; ti++) {
        const sr_tensor *t = &m.tensors[ti];
        double e = max_diff(m.grads + t->offset, ggrads + t->offset, t->numel);
        double s = max_abs(ggrads + t->offset, t->numel);
        double r = e / (s > 0 ? s : 1);
        if (r > worst) {
            worst = r;
            worst_name = t->name;
        }
        if (e > 1e-4 * s) {
            bad++;
            tap_diag("%s: max|a-b| %.3g > 1e-4 * %.3g", t->name, e, s);
        }
    }
    tap_ok(bad == 0, "gradients of all %d tensors within 1e-4 * max|b| of PyTorch (worst %.2g in %s)", m.n_tensors,
           worst, worst_name);
    free(in), free(tg), free(logits), free(lreal), free(g);
    sr_model_free(&m);
    sr_device_close(dev);
    return tap_done();
}
