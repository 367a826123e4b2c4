/* export_llmc.c — the llm.c model-file exporter; see export_llmc.h. */
#include "srconfig.h"

#include "export_llmc.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#include "ckpt.h"
#include "ckpt_tools.h"
#include "fsio.h"
#include "mem.h"

typedef struct {
    const sr_model *model;
    const float *all; /* the unit-major parameter vector */
} llmc_ctx;

static int put_tensor(int fd, const llmc_ctx *x, int index) {
    const sr_tensor *t = &x->model->tensors[index];
    return sr_fsio_write_all(fd, x->all + t->offset, t->numel * sizeof(float));
}

static sr_status write_llmc(int fd, const char *tmp, void *arg) {
    const llmc_ctx *x = arg;
    const sr_model_dims *d = &x->model->d;
    int32_t header[256] = {20240326, 3, d->T, d->V, d->L, d->NH, d->C, d->Vp};
    int L = d->L, root = L * SR_NBLOCK_TENSORS;
    int rc = sr_fsio_write_all(fd, header, sizeof header);
    rc = rc ? rc : put_tensor(fd, x, root + SR_WTE);
    rc = rc ? rc : put_tensor(fd, x, root + SR_WPE);
    for (int k = 0; k < SR_NBLOCK_TENSORS && !rc; k++)
        for (int l = 0; l < L && !rc; l++)
            rc = put_tensor(fd, x, l * SR_NBLOCK_TENSORS + k);
    rc = rc ? rc : put_tensor(fd, x, root + SR_LNFW);
    rc = rc ? rc : put_tensor(fd, x, root + SR_LNFB);
    return rc ? sr_fsio_write_error(tmp, errno) : SR_OK;
}

sr_status sr_export_llmc(const char *path, const char *dest, FILE *out) {
    sr_manifest mf;
    sr_model model;
    float *all;
    sr_status st = sr_ckpt_tool_read_model(path, &mf, &model, &all, NULL, NULL, NULL, 0);
    if (st != SR_OK)
        return st;
    llmc_ctx x = {&model, all};
    if (!sr_family_get(model.d.arch)->llmc)
        st = sr_error(SR_ERR_CONFIG,
                      "ckpt export: -o %s: llm.c's model file holds a GPT-2, and %s is a %s checkpoint (hint: -o DIR/ "
                      "for a Hugging Face directory, or -o FILE.safetensors)",
                      dest, path, sr_family_get(model.d.arch)->name);
    if (st == SR_OK)
        st = sr_fsio_atomic_write(dest, write_llmc, &x);
    if (st == SR_OK)
        fprintf(out,
                "shardrun: wrote %s: llm.c model file (version 3, fp32), step %lld, %zu parameters (%d layers, "
                "%d heads, %d channels, vocab %d padded to %d, seq_len %d)\n",
                dest, (long long)mf.step, model.n_params, mf.dims.L, mf.dims.NH, mf.dims.C, mf.dims.V, mf.dims.Vp,
                mf.dims.T);
    free(all);
    sr_model_free(&model);
    sr_manifest_free(&mf);
    return st;
}
