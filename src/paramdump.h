/* paramdump.h — the test suite's parameter and gradient dumps.
 *
 * Format: "SRPARAMS", int32 n_tensors, then per tensor {char name[64],
 * int64 numel}, then the floats of every tensor in the model's table
 * order (unit-major, padding stripped). */
#ifndef SR_PARAMDUMP_H
#define SR_PARAMDUMP_H

#include "fsdp.h"
#include "model.h"
#include "status.h"

/* The full fp32 model to `path` on world rank 0, atomically; every rank
 * must call it (it gathers).  SR_ERR_CANTCREAT / SR_ERR_IO on rank 0,
 * SR_ERR_PEER anywhere. */
sr_status sr_paramdump_params(sr_fsdp *f, const sr_model *m, const char *path);
/* The step's full gradient (mean loss, before clipping), after
 * sr_fsdp_finish_grads and before the optimizer step: one rank without
 * offload only, else SR_ERR_CONFIG. */
sr_status sr_paramdump_grads(sr_fsdp *f, const sr_model *m, const char *path);

#endif
