/* modelfile.h — pretrained weights in: a model file's tensors mapped onto the
 * model's parameter vector (`model.init`, `shardrun sample`).
 *
 * modelfile owns reading two formats: safetensors with Hugging Face names
 * (hfnames.h: GPT2LMHeadModel's `transformer.h.N.attn.c_attn.weight`, ...
 * — the `transformer.` prefix optional, as the hub's own GPT-2 file lacks
 * it; Conv1D weights stored [in, out], the model's [out, in];
 * LlamaForCausalLM's `model.layers.N.self_attn.q_proj.weight`, ..., a
 * fused tensor read from its pieces; one file or the shards of a
 * model.safetensors.index.json; the unpadded vocabulary; f32, bf16 or f16
 * widened to f32; GPT-2's causal-mask buffers `h.N.attn.bias` /
 * `h.N.attn.masked_bias` skipped; a tied model's `lm_head.weight`
 * allowed when bit-equal to the token embedding), and llm.c's model file
 * (version 3 fp32, version 5 bf16; header {20240326, version, max_seq_len,
 * vocab_size, n_layer, n_head, n_embd, padded_vocab_size}).  Opening
 * checks every tensor's presence and shape against the model (SR_ERR_DATA
 * naming the tensor and both shapes); a position embedding with at least
 * seq_len rows contributes its first seq_len.  Reading fills any range of
 * the unit-major parameter vector, touching only the file bytes of that
 * range (strided for the transposed weights), so each rank reads just its
 * shard. */
#ifndef SR_MODELFILE_H
#define SR_MODELFILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hfnames.h"
#include "model.h"
#include "status.h"

typedef enum { SR_MODELFILE_SAFETENSORS, SR_MODELFILE_LLMC } sr_modelfile_kind;

/* Where one piece of a model tensor (hfnames.h; llm.c: one per tensor)
 * is in the files. */
typedef struct {
    int file;           /* index into the files */
    uint64_t offset;    /* file offset of element [0][0] */
    int dtype;          /* SR_MF_F32, SR_MF_BF16, SR_MF_F16 */
    bool transposed;    /* stored [cols, rows] (Conv1D) for the model's [rows, cols] */
    uint64_t file_rows; /* rows stored in the model's orientation (the file's columns when transposed) */
} sr_mf_source;

enum { SR_MF_F32, SR_MF_BF16, SR_MF_F16 };

typedef struct {
    sr_modelfile_kind kind;
    int fd;        /* the first file's (every file's: fds) */
    char *path;    /* as given: a file, or a Hugging Face directory */
    uint64_t size; /* all files together */
    int nfiles;    /* 1, or the shards a model.safetensors.index.json names */
    int *fds;
    char **paths;
    uint64_t *sizes;
    const sr_model *model;
    int npieces;
    sr_hf_piece *pieces; /* the model's pieces, in tensor order */
    sr_mf_source *src;   /* npieces entries */
    int emb;             /* the piece of the token embedding */
    bool has_head;       /* a tied model with lm_head.weight: it must equal the token embedding */
    sr_mf_source head;   /* where it is */
    int64_t wpe_rows;    /* GPT-2: position-embedding rows in the file */
    char what[200];      /* one line for logs: format, tensors, dtypes */
} sr_modelfile;

/* Opens `path` and maps it onto `model`'s tensor table (`model` must
 * outlive mf).  The format is the file's: an llm.c header magic, else
 * safetensors; a directory is a Hugging Face one: its
 * model.safetensors.index.json (every shard it names) when present, else
 * its model.safetensors.  Names are hfnames.h's for the model's family
 * (the transformer. or model. prefix optional).  SR_ERR_NOINPUT when the file cannot be opened,
 * SR_ERR_DATA for anything malformed or not matching the model (the
 * message names the tensor, its shape in the file and the model's).
 * `key` prefixes messages (e.g. "model.init").  On failure nothing is
 * left. */
sr_status sr_modelfile_open(sr_modelfile *mf, const char *path, const sr_model *model, const char *key);
void sr_modelfile_close(sr_modelfile *mf);

/* Floats [begin, end) of the unit-major parameter vector into dst[0 ..
 * end-begin) (padded vocabulary rows zero).  SR_ERR_DATA when the file
 * cannot be read (truncated under us), SR_ERR_INTERNAL when out of
 * memory. */
sr_status sr_modelfile_read(const sr_modelfile *mf, size_t begin, size_t end, float *dst);

/* With lm_head.weight in the file: whether its rows in the part of the
 * token embedding that [begin, end) covers equal the embedding's bit for
 * bit (*equal true without a head).  As sr_modelfile_read. */
sr_status sr_modelfile_head_tied(const sr_modelfile *mf, size_t begin, size_t end, bool *equal);

/* Whether `dir` is a Hugging Face model directory: it has config.json and
 * no checkpoint manifest. */
bool sr_modelfile_is_hf_dir(const char *dir);
/* A Hugging Face directory's config.json into *d (recompute none): GPT-2
 * as transformers' GPT2Config reads it (model_type gpt2; n_layer, n_head,
 * n_embd, vocab_size, n_positions or n_ctx; activation_function gelu_new
 * and layer_norm_epsilon 1e-5 when given; tied embeddings), or Llama as
 * LlamaConfig reads it (model_type llama; hidden_size,
 * num_hidden_layers, num_attention_heads, num_key_value_heads,
 * intermediate_size, vocab_size, max_position_embeddings, rms_norm_eps,
 * rope_theta, rope_scaling null or llama3 (or transformers 5's
 * rope_parameters), tie_word_embeddings; hidden_act
 * silu, no attention or MLP bias, head_dim n_embd / n_head when given).
 * The weights' path, DIR itself (sr_modelfile_open reads a directory),
 * into weights.  SR_ERR_NOINPUT when config.json cannot be read,
 * SR_ERR_DATA naming the field that is missing, malformed, out of range
 * or not what the model computes. */
sr_status sr_modelfile_hf_dir(const char *dir, sr_model_dims *d, char *weights, size_t weights_len);

/* SHA-256 of the whole file as 64 hex digits (of several: of their
 * bytes in the index's file order, one stream). */
sr_status sr_modelfile_sha256(const sr_modelfile *mf, char out[65]);
/* A cheap fingerprint for ranks to compare: SHA-256 of, for each file,
 * its size (8 bytes, little-endian), its header (a safetensors header
 * however long) or first MiB, whichever is longer, and its last MiB. */
sr_status sr_modelfile_fingerprint(const sr_modelfile *mf, unsigned char out[32]);

/* IEEE half to float, exact (no library in C11 does it; F16C is an ISA
 * extension). */
float sr_f16_to_f32(uint16_t h);

#endif
