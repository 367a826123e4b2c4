/* hfnames.h — the Hugging Face names of the built-in models' tensors.
 *
 * hfnames owns the one mapping between the model's tensor table (model.h)
 * and the tensors of a Hugging Face checkpoint, for both families, that
 * the importer (modelfile) and the exporter (export_hf) read: GPT-2's
 * GPT2LMHeadModel names (`transformer.h.N.attn.c_attn.weight`, Conv1D
 * weights stored [in, out]) and Llama's LlamaForCausalLM names
 * (`model.layers.N.self_attn.q_proj.weight`, Linear weights [out, in]).  A
 * model tensor is one or more pieces, each a run of its rows: Llama's
 * fused query/key/value matrix is q_proj, k_proj and v_proj, its fused
 * gate/up matrix gate_proj and up_proj.  The embeddings and the LM head
 * have the unpadded vocabulary's rows in the file. */
#ifndef SR_HFNAMES_H
#define SR_HFNAMES_H

#include <stdbool.h>
#include <stdint.h>

#include "model.h"

typedef struct sr_hf_piece {
    char name[160];   /* the name in the file, with its prefix (transformer. or model.; lm_head none) */
    int prefix_len;   /* bytes of that prefix, which a file may leave out (0: none) */
    int tensor;       /* the model tensor */
    int64_t row0;     /* the first model row this piece holds */
    int64_t rows;     /* model rows it holds (the file's rows, or its columns when transposed) */
    int ndim;         /* 1 or 2 */
    int64_t shape[2]; /* in the file's order */
    bool transposed;  /* stored [cols, rows] (GPT-2's Conv1D) */
} sr_hf_piece;

/* Pieces a model of this family has at most per tensor. */
#define SR_HF_MAX_PIECES 3

/* Every piece of model m in tensor order (a tensor's pieces in row order)
 * into out (room for m->n_tensors * SR_HF_MAX_PIECES); returns the count.
 * A tied Llama head has no piece (the embedding is the head). */
int sr_hf_pieces(const sr_model *m, sr_hf_piece *out);

#endif
