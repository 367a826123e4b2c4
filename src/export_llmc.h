/* export_llmc.h — `shardrun ckpt export`: a checkpoint's model as an llm.c
 * model file.
 *
 * export_llmc owns llm.c's model-file format (train_gpt2.c, version 3): a
 * header of 256 int32 {20240326, 3, max_seq_len, vocab_size, num_layers,
 * num_heads, channels, padded_vocab_size}, then the fp32 tensors in llm.c's
 * order (wte, wpe, each block tensor concatenated over the layers, ln_f),
 * each one read and verified from the checkpoint's shards. */
#ifndef SR_EXPORT_LLMC_H
#define SR_EXPORT_LLMC_H

#include <stdio.h>

#include "status.h"

/* Verifies the checkpoint at `path` and writes its fp32 model to `dest`
 * atomically; one line on `out` when done.  SR_ERR_DATA / SR_ERR_NOINPUT
 * for the checkpoint, SR_ERR_CANTCREAT / SR_ERR_IO for dest. */
sr_status sr_export_llmc(const char *path, const char *dest, FILE *out);

#endif
