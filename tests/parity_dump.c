/* parity_dump.c — writes the weights and batch of the PyTorch golden test
 * (see parity.h).  Usage: parity_dump OUT.bin */
#include "srconfig.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "model.h"
#include "parity.h"
#include "rng.h"

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: parity_dump OUT.bin\n");
        return 64;
    }
    sr_model m;
    sr_model_dims d = {.L = PARITY_L, .NH = PARITY_NH, .C = PARITY_C, .V = PARITY_V, .T = PARITY_T};
    sr_dev *dev = sr_dev_cpu_open();
    if (!dev || sr_model_init(&m, d, &sr_ops_cpu, dev, PARITY_B, true) != SR_OK)
        return 70;
    sr_model_init_params(&m, PARITY_SEED, m.params, 0, m.n_params);
    int BT = PARITY_B * PARITY_T;
    int32_t *tok = malloc(sizeof(int32_t) * (BT + 1));
    for (int i = 0; i <= BT; i++)
        tok[i] = (int32_t)(sr_rng_u64(PARITY_SEED, 77, (uint64_t)i) % PARITY_V);
    FILE *f = fopen(argv[1], "wb");
    if (!f)
        return 73;
    int32_t hdr[9] = {PARITY_L, PARITY_NH, PARITY_C,    PARITY_V,           m.d.Vp,
                      PARITY_T, PARITY_B,  PARITY_SEED, (int32_t)m.n_params};
    fwrite("SRGOLD1", 1, 8, f);
    fwrite(hdr, sizeof hdr, 1, f);
    fwrite(m.params, sizeof(float), m.n_params, f);
    fwrite(tok, sizeof(int32_t), BT, f);     /* inputs */
    fwrite(tok + 1, sizeof(int32_t), BT, f); /* targets: the next token */
    int rc = fclose(f) == 0 ? 0 : 74;
    free(tok);
    sr_model_free(&m);
    sr_device_close(dev);
    return rc;
}
