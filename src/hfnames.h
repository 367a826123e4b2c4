/* hfnames.h — the Hugging Face forms of the built-in families: their
 * tensors' names and their config.json.
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
 * have the unpadded vocabulary's rows in the file.
 *
 * hfnames also owns each family's config.json as transformers' GPT2Config
 * and LlamaConfig read and write it: the keys, their defaults and what
 * shardrun's blocks require of them (gelu_new, silu, no biases, Llama-3's
 * rope scaling).  The family of a config.json is family.h's (model_type);
 * this file is where a family's Hugging Face keys live. */
#ifndef SR_HFNAMES_H
#define SR_HFNAMES_H

#include <stdbool.h>
#include <stdint.h>

#include <jansson.h>

#include "model.h"
#include "status.h"

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

/* Reads config.json `c` (the file `path`, for messages) of family `arch`
 * (family.h sr_family_of_hf_type of its model_type) into *d (zeroed by the
 * caller): the dims, the family's own keys with their transformers
 * defaults.  SR_ERR_DATA naming the key when one is missing, out of range
 * or asks for what shardrun's blocks are not. */
sr_status sr_hf_config_read(int arch, json_t *c, const char *path, sr_model_dims *d);

/* config.json of a model of dims d (the fields a manifest records) as
 * transformers reads it,
 * without the token ids (the exporter's); NULL when out of memory. */
json_t *sr_hf_config_render(const sr_model_dims *d);

#endif
