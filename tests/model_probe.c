/* model_probe.c — the training forward (model.c, CPU ops) on a model from a
 * checkpoint or a weights file, for tests/hf.sh and tests/sample.sh:
 *
 *   model_probe logits SOURCE TOKENS        the logits of every position,
 *                                           one row of V numbers per line
 *   model_probe greedy SOURCE TOKENS N      N tokens by repeated full
 *                                           forwards, argmax each time
 *   model_probe grads SOURCE TOKENS OUT     T + 1 tokens: the mean loss of
 *                                           predicting tokens 1..T from
 *                                           0..T-1 (printed), and its
 *                                           gradients written to OUT (a
 *                                           .safetensors file under the
 *                                           Hugging Face names)
 *
 * SOURCE is `ckpt:DIR` (a step_* directory: the whole model read and
 * verified), `init:FILE:L,NH,C,V,T` (a GPT-2 .safetensors or llm.c file
 * mapped by modelfile.h onto those dims) or `hf:DIR` (a Hugging Face
 * directory, GPT-2 or Llama, its dims from config.json; T its context).
 * TOKENS is a comma list.  It is
 * independent of sample.c's key/value cache: the reference that sampling
 * and the importers are checked against. */
#include "srconfig.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt_tools.h"
#include "export_hf.h"
#include "model.h"
#include "modelfile.h"
#include "ops.h"

static int parse_csv(const char *s, int *out, int max) {
    int n = 0;
    while (*s && n < max) {
        char *end;
        out[n++] = (int)strtol(s, &end, 10);
        s = *end == ',' ? end + 1 : end;
        if (end == s && *s)
            return -1;
    }
    return n;
}

/* The model's tensor table and parameters from SOURCE. */
static int load(const char *source, sr_model_dims *d, float **params) {
    if (strncmp(source, "ckpt:", 5) == 0) {
        sr_manifest mf;
        sr_model m;
        if (sr_ckpt_tool_read_model(source + 5, &mf, &m, params, NULL, NULL, NULL, 0) != SR_OK) {
            fprintf(stderr, "model_probe: %s\n", sr_error_message());
            return -1;
        }
        *d = mf.dims;
        sr_model_free(&m);
        sr_manifest_free(&mf);
        return 0;
    }
    char path[4096];
    if (strncmp(source, "hf:", 3) == 0) {
        if (sr_modelfile_hf_dir(source + 3, d, path, sizeof path) != SR_OK) {
            fprintf(stderr, "model_probe: %s\n", sr_error_message());
            return -1;
        }
    } else {
        const char *colon = strncmp(source, "init:", 5) == 0 ? strrchr(source, ':') : NULL;
        int dims[5];
        if (!colon || colon == source + 4 || parse_csv(colon + 1, dims, 5) != 5) {
            fprintf(stderr, "model_probe: SOURCE: ckpt:DIR, init:FILE:L,NH,C,V,T or hf:DIR\n");
            return -1;
        }
        snprintf(path, sizeof path, "%.*s", (int)(colon - source - 5), source + 5);
        *d = (sr_model_dims){.L = dims[0], .NH = dims[1], .C = dims[2], .V = dims[3], .T = dims[4]};
    }
    sr_model m;
    sr_modelfile f;
    if (sr_model_init(&m, *d, &sr_ops_cpu, NULL, 0, false) != SR_OK)
        return -1;
    int rc = -1;
    bool tied = true;
    *params = malloc(m.n_params * sizeof(float));
    if (*params && sr_modelfile_open(&f, path, &m, "probe") == SR_OK) {
        if (sr_modelfile_read(&f, 0, m.n_params, *params) == SR_OK &&
            sr_modelfile_head_tied(&f, 0, m.n_params, &tied) == SR_OK)
            rc = tied ? 0 : -1;
        sr_modelfile_close(&f);
    }
    if (rc != 0)
        fprintf(stderr, "model_probe: %s\n", tied ? sr_error_message() : "lm_head.weight is not tied");
    sr_model_free(&m);
    return rc;
}

/* The full forward over tokens[0, n) (n <= T; the rest of the row padded
 * with token 0, which the causal mask keeps out of positions < n); the
 * logits of row 0 are left in m->logits. */
static int forward(sr_model *m, const int *tokens, int n) {
    int T = m->d.T;
    int *in = calloc((size_t)T, sizeof(int)), *tg = calloc((size_t)T, sizeof(int));
    if (!in || !tg || n > T)
        return -1;
    memcpy(in, tokens, sizeof(int) * (size_t)n);
    int rc = sr_model_forward(m, NULL, in, tg, 1) == SR_OK ? 0 : -1;
    free(in);
    free(tg);
    return rc;
}

/* One forward and backward over tokens[0, T] (inputs 0..T-1, targets
 * 1..T), the mean loss printed and the gradients written to `out`. */
static int grads(sr_model *m, const int *tokens, int n, const char *out) {
    int T = m->d.T;
    if (n != T + 1) {
        fprintf(stderr, "model_probe: grads takes T + 1 = %d tokens\n", T + 1);
        return 64;
    }
    double sum = 0;
    memset(m->grads, 0, m->n_params * sizeof(float));
    if (sr_model_forward(m, NULL, tokens, tokens + 1, 1) != SR_OK || sr_model_take_loss_sum(m, &sum) != SR_OK ||
        sr_model_backward(m, NULL, 1.0f / (float)T) != SR_OK || sr_export_safetensors(m, m->grads, out) != SR_OK) {
        fprintf(stderr, "model_probe: %s\n", sr_error_message());
        return 70;
    }
    printf("%.9g\n", sum / T);
    return 0;
}

int main(int argc, char **argv) {
    bool greedy = argc == 5 && strcmp(argv[1], "greedy") == 0, grad = argc == 5 && strcmp(argv[1], "grads") == 0;
    if (!(argc == 4 && strcmp(argv[1], "logits") == 0) && !greedy && !grad) {
        fprintf(stderr, "usage: model_probe logits SOURCE TOKENS | greedy SOURCE TOKENS N | grads SOURCE TOKENS OUT\n");
        return 64;
    }
    sr_model_dims d;
    float *params = NULL;
    if (load(argv[2], &d, &params) != 0)
        return 65;
    sr_ops_set_threads(1);
    sr_dev *dev = sr_dev_cpu_open();
    sr_model m;
    if (!dev || sr_model_init(&m, d, &sr_ops_cpu, dev, 1, true) != SR_OK)
        return 70;
    memcpy(m.params, params, m.n_params * sizeof(float));
    int *tok = calloc((size_t)d.T + 1, sizeof(int));
    int n = parse_csv(argv[3], tok, d.T + 1);
    if (grad) {
        int rc = grads(&m, tok, n, argv[4]);
        free(tok);
        free(params);
        sr_model_free(&m);
        sr_device_close(dev);
        return rc ? rc : fflush(stdout) == 0 ? 0 : 74;
    }
    int steps = greedy ? atoi(argv[4]) : 0;
    if (n <= 0 || n + steps > d.T) {
        fprintf(stderr, "model_probe: 1..T tokens (prompt + generated) expected\n");
        return 64;
    }
    const float *logits = m.logits;
    if (!greedy) {
        if (forward(&m, tok, n) != 0)
            return 70;
        for (int t = 0; t < n; t++)
            for (int v = 0; v < d.V; v++)
                printf("%.9g%c", logits[(size_t)t * m.d.Vp + v], v + 1 == d.V ? '\n' : ' ');
    } else {
        for (int i = 0; i < steps; i++) {
            if (forward(&m, tok, n) != 0)
                return 70;
            const float *row = logits + (size_t)(n - 1) * m.d.Vp;
            int best = 0;
            for (int v = 1; v < d.V; v++)
                if (row[v] > row[best])
                    best = v;
            tok[n++] = best;
            printf(i ? " %d" : "%d", best);
        }
        printf("\n");
    }
    free(tok);
    free(params);
    sr_model_free(&m);
    sr_device_close(dev);
    return fflush(stdout) == 0 ? 0 : 74;
}
