/* family.h — the model families: one row each, read by every file that
 * needs to know what a family is (llama.cpp's llama-arch.cpp).
 *
 * family owns, for each built-in family, its name (model.arch, a
 * manifest's model.arch), the form of its blocks as traits (learned or
 * rotary positions, LayerNorm or RMSNorm, a GELU or a gated MLP, biases,
 * grouped key/value heads, an LM head of its own), the model keys that
 * apply to it, the defaults of those keys, its Hugging Face names (the
 * model_type, the class, the tensors' prefix), which exports it supports,
 * the sampler's window, and the presets (model.preset) with their dims.
 * Pure data and lookups, as hfnames.c's name tables are.  Besides this
 * table, model.c names a family for its arithmetic (the tensor table, the
 * blocks' forward, backward and decode step) and hfnames.c for its Hugging
 * Face forms; everything else reads a trait here.  Adding a family: a row
 * here, its blocks in model.c, its ops, its Hugging Face forms. */
#ifndef SR_FAMILY_H
#define SR_FAMILY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The families (model.arch; manifests record it from version 3).  The
 * index of a row of the family table. */
enum { SR_ARCH_GPT2, SR_ARCH_LLAMA, SR_ARCH_COUNT };

/* The model keys a family may or may not have (sr_family.keys): each
 * applies to the families whose mask has its bit; for the others it holds
 * the value the family implies (sr_family_implied). */
enum {
    SR_FKEY_N_KV_HEAD = 1 << 0, /* model.n_kv_head (grouped key/value heads) */
    SR_FKEY_FFN_DIM = 1 << 1,   /* model.ffn_dim (a gated MLP of its own width) */
    SR_FKEY_NORM_EPS = 1 << 2,  /* model.norm_eps */
    SR_FKEY_ROPE = 1 << 3,      /* model.rope_theta and model.rope_scaling.* */
    SR_FKEY_TIE = 1 << 4,       /* model.tie_embeddings (an untied LM head) */
};

typedef struct {
    const char *name;             /* model.arch */
    const char *display;          /* in messages: "GPT-2", "Llama" */
    bool learned_positions;       /* a learned position table (wpe), else rotary positions on queries and keys */
    bool rms_norm;                /* RMSNorm without bias, else LayerNorm with bias (means kept for backward) */
    bool gated_mlp;               /* SwiGLU of width ffn_dim (gate and up fused: 2F), else GELU of width 4 n_embd */
    bool biases;                  /* the linear layers carry biases */
    unsigned keys;                /* the SR_FKEY_* that apply: all or none (manifests record them as one set) */
    int ffn_num, ffn_den;         /* the MLP width a job leaves unset: num/den n_embd rounded up to 64 (gated) */
    const char *hf_model_type;    /* config.json's model_type */
    const char *hf_class;         /* its architectures[0] */
    const char *hf_prefix;        /* the blocks' and embeddings' tensor-name prefix ("transformer.") */
    const char *hf_example;       /* one block tensor's full name, for messages */
    bool hf_mask_buffers;         /* older transformers saved causal-mask buffers (h.N.attn.bias): skipped */
    int hf_vocab, hf_bos, hf_eos; /* the family's own vocabulary and its bos and eos ids (config.json) */
    bool llmc;                    /* llm.c's model file exports it */
    int decode_window_max;        /* the sampler's cache: at most this many positions (0: seq_len) */
} sr_family;

/* The row of family `arch` (SR_ARCH_*; any other value reads as gpt2, the
 * family of manifests before version 3). */
const sr_family *sr_family_get(int arch);

/* arch when it is a family's index, else gpt2's (a zeroed dims struct,
 * manifests before version 3). */
int sr_family_index(int arch);

/* The family named `name` (model.arch, a manifest's arch); -1 when none. */
int sr_family_find(const char *name);

/* The family of a Hugging Face config.json's model_type; -1 when none. */
int sr_family_of_hf_type(const char *model_type);

/* The families' names as one list into buf ("gpt2, llama"), or those of
 * the families that have key `fkey` (SR_FKEY_*; 0: every family) for
 * messages; returns buf. */
const char *sr_family_list(unsigned fkey, char *buf, size_t n);

/* NULL-terminated names for model.arch's enum. */
extern const char *const sr_family_names[];

/* A preset (model.preset): its family and dims as the family's keys give
 * them (a GPT-2 row's grouped-head, MLP and rotary fields are what gpt2
 * implies). */
typedef struct {
    const char *name;
    int arch;
    int64_t n_layer, n_head, n_embd, vocab_size, seq_len;
    int64_t n_kv_head, ffn_dim;
    bool tie;
    double rope_theta, rope_factor, rope_low, rope_high;
    int64_t rope_orig;
} sr_family_preset;

/* The presets in model.preset's order, and their names NULL-terminated. */
extern const sr_family_preset sr_family_presets[];
extern const char *const sr_family_preset_names[];

/* The values a family without the rotary and norm_eps keys implies (and
 * the defaults of the rotary keys when a job leaves them unset). */
#define SR_FAMILY_ROPE_THETA 10000.0
#define SR_FAMILY_ROPE_LOW 1.0
#define SR_FAMILY_ROPE_HIGH 4.0
#define SR_FAMILY_ROPE_ORIG 8192
#define SR_FAMILY_NORM_EPS 1e-5

#endif
