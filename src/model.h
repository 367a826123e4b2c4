/* model.h — the built-in models: parameter table, layout, forward,
 * backward, and the decode step.
 *
 * model owns the blocks of the families of family.h (model.arch; their
 * traits and presets are the family table's) and, for each, the tensor table
 * (one row per tensor: name, shape, unit, initialisation, weight-decay
 * rule, offset), the unit-major parameter layout (block 0's tensors, block
 * 1's, ..., then the root unit: embeddings, final norm, LM head), the rotary
 * table, and the activations of one micro-batch.  Every tensor lives in the
 * memory of a device table (device.h), touched only through it and the
 * ops: no host loop or memcpy of a tensor here.  Forward and backward run
 * over an sr_ops back end and ask an sr_param_source for each layer's
 * parameters and gradients, so the FSDP engine can hand in gathered unit
 * buffers while a single process simply points into its one contiguous
 * buffer.
 *
 * GPT-2 (arch gpt2): token + learned position embeddings; pre-LayerNorm
 * blocks (causal multi-head self-attention, 4x GELU-tanh MLP, biases);
 * final LayerNorm; LM head tied to the token embedding.
 *
 * Llama (arch llama): token embedding; pre-RMSNorm blocks (causal
 * attention with NKV key/value heads for NH query heads and rotary
 * positions on queries and keys, Hugging Face's rotate-half layout and
 * Llama-3's frequency scaling; a SwiGLU MLP of width F); final RMSNorm; LM
 * head tied or untied; no biases.  The query, key and value projections
 * are one [(NH + 2 NKV) hs, C] matrix and the gate and up projections one
 * [2F, C] matrix (one GEMM each; the Hugging Face importer and exporter
 * split and join them).
 *
 * Both: softmax cross-entropy over the real vocabulary (the padded rows Vp
 * - V are masked out of the loss).  Each block also has its decode form
 * (sr_decoder: one token at a time over a key/value cache, on the CPU),
 * written beside its training forward in model.c so that a family's
 * arithmetic has one place. */
#ifndef SR_MODEL_H
#define SR_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "device.h"
#include "family.h"
#include "ops.h"
#include "status.h"

/* Llama-3's rotary frequency scaling (model.rope_scaling); factor 0:
 * none. */
typedef struct {
    double factor, low_freq_factor, high_freq_factor;
    int original_max_position;
} sr_rope_scaling;

typedef struct {
    int L, NH, C, V, Vp, T; /* layers, heads, channels, vocab, padded vocab, max seq len */
    /* model.recompute: SR_RECOMPUTE_BLOCKS keeps only each block's input
     * through forward and recomputes the block before its backward (the
     * activation table holds one block's set instead of L); not part of
     * the model's identity (manifests ignore it) */
    int recompute;
    /* The family and its dims.  GPT-2 ignores the rest (sr_model_init
     * sets NKV = NH, F = 4C).  Llama: NKV key/value heads (dividing NH; 0
     * reads as NH), F the SwiGLU width, untied an LM head of its own,
     * norm_eps RMSNorm's epsilon, rope_theta and rope the rotary base and
     * scaling.  A zeroed struct with L..T set is GPT-2. */
    int arch;
    int NKV, F;
    bool untied;
    double norm_eps;
    double rope_theta;
    sr_rope_scaling rope;
} sr_model_dims;

enum { SR_RECOMPUTE_NONE, SR_RECOMPUTE_BLOCKS };

/* Fills what the family implies (its traits, family.h: GPT-2: NKV = NH,
 * F = 4C, tied; Llama: NKV 0 -> NH), an arch out of range as gpt2, and
 * Vp; every function below takes dims through it. */
void sr_model_dims_complete(sr_model_dims *d);
/* Whether a and b are the same model (the family and every dim that
 * shapes or computes it; recompute and Vp aside). */
bool sr_model_dims_same(const sr_model_dims *a, const sr_model_dims *b);
/* The model's identity as one line of text ("n_layer 4, n_head 4, ..."),
 * for messages. */
const char *sr_model_dims_text(const sr_model_dims *d, char *buf, size_t n);
/* The rotary table of a Llama model, [T, hs] floats: row t holds
 * cos(t f_i) for i < hs/2, then sin(t f_i), f_i = theta^(-2i/hs) scaled as
 * Llama-3 scales it, computed in float the way Hugging Face's
 * LlamaRotaryEmbedding does (so imported models agree with it).  `out`
 * is host memory. */
void sr_model_rope_table(const sr_model_dims *d, float *out);
/* The rows of a block's fused query/key/value projection, (NH + 2 NKV) hs
 * (GPT-2: 3C), and of its MLP's input projection: 2F for a gated MLP
 * (gate and up), else F (GPT-2: 4C); of completed dims. */
size_t sr_model_qkv_rows(const sr_model_dims *d);
size_t sr_model_mlp_rows(const sr_model_dims *d);

/* The activation bytes of a micro-batch, split as model.recompute: blocks
 * predicts them (the start log prints it): `inputs` the block inputs kept
 * through forward (L x B x T x C x element size: the embedding output and
 * every block's output but the last), `block` one block's full forward set
 * (its output included), `root` the rest (inputs/targets, the final norm,
 * logits, losses, the backward scratch, the ops' workspace).  With
 * recompute none the table holds L blocks' sets plus the embedding output
 * and the root's; with blocks, inputs + block + root exactly. */
typedef struct {
    size_t inputs, block, root;
} sr_act_split;

/* Block tensors, in layout order within a block. X(enum, name, rows, cols, init, decay) */
enum { SR_INIT_ZERO, SR_INIT_ONE, SR_INIT_NORMAL, SR_INIT_NORMAL_RESID };
#define SR_BLOCK_TENSORS(X)                                                                                            \
    X(SR_LN1W, "ln_1.weight", 1, C, SR_INIT_ONE, false)                                                                \
    X(SR_LN1B, "ln_1.bias", 1, C, SR_INIT_ZERO, false)                                                                 \
    X(SR_QKVW, "attn.c_attn.weight", 3 * C, C, SR_INIT_NORMAL, true)                                                   \
    X(SR_QKVB, "attn.c_attn.bias", 1, 3 * C, SR_INIT_ZERO, false)                                                      \
    X(SR_ATTPROJW, "attn.c_proj.weight", C, C, SR_INIT_NORMAL_RESID, true)                                             \
    X(SR_ATTPROJB, "attn.c_proj.bias", 1, C, SR_INIT_ZERO, false)                                                      \
    X(SR_LN2W, "ln_2.weight", 1, C, SR_INIT_ONE, false)                                                                \
    X(SR_LN2B, "ln_2.bias", 1, C, SR_INIT_ZERO, false)                                                                 \
    X(SR_FCW, "mlp.c_fc.weight", 4 * C, C, SR_INIT_NORMAL, true)                                                       \
    X(SR_FCB, "mlp.c_fc.bias", 1, 4 * C, SR_INIT_ZERO, false)                                                          \
    X(SR_FCPROJW, "mlp.c_proj.weight", C, 4 * C, SR_INIT_NORMAL_RESID, true)                                           \
    X(SR_FCPROJB, "mlp.c_proj.bias", 1, C, SR_INIT_ZERO, false)
/* Root unit tensors. */
#define SR_ROOT_TENSORS(X)                                                                                             \
    X(SR_WTE, "wte.weight", Vp, C, SR_INIT_NORMAL, true)                                                               \
    X(SR_WPE, "wpe.weight", T, C, SR_INIT_NORMAL, true)                                                                \
    X(SR_LNFW, "ln_f.weight", 1, C, SR_INIT_ONE, false)                                                                \
    X(SR_LNFB, "ln_f.bias", 1, C, SR_INIT_ZERO, false)

/* The Llama family's block and root tensors (QKV = (NH + 2 NKV) hs; the
 * LM head only when untied), named as Hugging Face names them where one
 * tensor is one of theirs. */
#define SR_LLAMA_BLOCK_TENSORS(X)                                                                                      \
    X(SR_LL_ATTN_NORM, "input_layernorm.weight", 1, C, SR_INIT_ONE, false)                                             \
    X(SR_LL_QKV, "self_attn.qkv_proj.weight", QKV, C, SR_INIT_NORMAL, true)                                            \
    X(SR_LL_O, "self_attn.o_proj.weight", C, C, SR_INIT_NORMAL_RESID, true)                                            \
    X(SR_LL_MLP_NORM, "post_attention_layernorm.weight", 1, C, SR_INIT_ONE, false)                                     \
    X(SR_LL_GATE_UP, "mlp.gate_up_proj.weight", 2 * F, C, SR_INIT_NORMAL, true)                                        \
    X(SR_LL_DOWN, "mlp.down_proj.weight", C, F, SR_INIT_NORMAL_RESID, true)
#define SR_LLAMA_ROOT_TENSORS(X)                                                                                       \
    X(SR_LL_WTE, "embed_tokens.weight", Vp, C, SR_INIT_NORMAL, true)                                                   \
    X(SR_LL_NORM, "norm.weight", 1, C, SR_INIT_ONE, false)                                                             \
    X(SR_LL_HEAD, "lm_head.weight", Vp, C, SR_INIT_NORMAL, true)

#define SR_TENSOR_ENUM(e, name, r, c, init, decay) e,
enum { SR_BLOCK_TENSORS(SR_TENSOR_ENUM) SR_NBLOCK_TENSORS };
enum { SR_ROOT_TENSORS(SR_TENSOR_ENUM) SR_NROOT_TENSORS };
enum { SR_LLAMA_BLOCK_TENSORS(SR_TENSOR_ENUM) SR_LL_NBLOCK_TENSORS };
enum { SR_LLAMA_ROOT_TENSORS(SR_TENSOR_ENUM) SR_LL_NROOT_TENSORS_UNTIED };
#undef SR_TENSOR_ENUM
/* Room for either family's block or root (views in model.c). */
#define SR_MAX_UNIT_TENSORS 16

typedef struct {
    char name[64];  /* e.g. "h.3.attn.c_attn.weight", "wte.weight" */
    int unit;       /* layer index 0..L-1, or L for the root */
    int rows, cols; /* shape; rows == 1 for vectors */
    int ndim;       /* 1 or 2 */
    int init;       /* SR_INIT_* */
    bool decay;     /* AdamW weight decay applies (tensors with ndim >= 2) */
    size_t offset;  /* in floats from the start of the parameter buffer */
    size_t numel;
    bool vocab; /* rows are the padded vocabulary (embedding, LM head): rows V.. stay zero */
} sr_tensor;

/* A typed view of a layer's parameters: where they are and their element
 * type (the param dtype of the run; it must equal the ops' activation
 * dtype).  ptr NULL means the source failed. */
typedef struct {
    void *ptr;
    sr_dtype dt;
} sr_param_view;

/* Where forward/backward find a layer's parameters and gradients.  `layer`
 * is 0..L-1 for blocks and L for the root.  Returned pointers address the
 * layer's tensors laid out as in the table (block-relative offsets), in the
 * device table's memory; NULL means the source failed (it keeps the
 * reason) and ends the pass.  A source whose parameters are produced on
 * another stream makes the compute stream wait for them before it returns
 * (it does not block the host).  `grads` sets *fresh when the layer's
 * gradient buffer held no contribution when this backward pass began (the
 * same answer for every call of the pass): the model then writes each
 * parameter gradient's first contribution of the pass in the overwrite
 * form (ops.h gbeta 0) instead of adding to zeros, and the buffer needs
 * no zeroing; false: the pass adds to what the buffer holds.  The done_*
 * hooks (may be NULL) tell the owner a layer is finished, so it can
 * reshard parameters or reduce-scatter gradients. */
typedef struct {
    sr_param_view (*params)(void *ctx, int layer);
    float *(*grads)(void *ctx, int layer, bool *fresh);
    void (*done_forward)(void *ctx, int layer);
    void (*done_backward)(void *ctx, int layer);
    void *ctx;
} sr_param_source;

typedef struct sr_model {
    sr_model_dims d;
    const sr_ops *ops;
    sr_dev *dev; /* where every tensor below lives */
    int n_tensors;
    sr_tensor *tensors;
    int n_block, n_root;   /* tensors per block and in the root: the family's */
    size_t n_params;       /* floats in the whole buffer (with vocab padding) */
    size_t n_params_real;  /* without the padded vocabulary rows */
    size_t *layer_offset;  /* L + 2 entries: start of each layer, root, end */
    float *params, *grads; /* full fp32 buffers when owned (single process); else NULL */

    /* activations of one micro-batch of at most max_B sequences; `void *`
     * ones are of the ops' activation dtype */
    int max_B, B;
    int *inputs, *targets;
    void *encoded, *ln1, *qkv, *atty, *att, *residual2, *ln2, *fch, *fch_gelu, *residual3, *lnf, *logits, *scratch;
    float *ln1_mean, *ln1_rstd, *ln2_mean, *ln2_rstd, *lnf_mean, *lnf_rstd, *losses, *lse;
    float *rope_cs; /* Llama: the rotary table [T, hs] (sr_model_rope_table), SR_MEM_OTHER */
    /* gradient scratch, reused across layers */
    void *dresidual, *dln, *dqkv, *datty, *dfch, *dfch_gelu;
    void *op_ws;      /* the ops' workspace (ops.h workspace_bytes), or NULL */
    double *loss_acc; /* per-token losses summed since the last take (SR_MEM_OTHER) */
    bool loss_taken;  /* loss_acc was read (taken): the next forward writes it instead of adding */
    size_t act_bytes;
    /* the dloss the last forward's fused classifier (ops.h
     * crossentropy_fused) wrote dlogits with; 0: the logits are intact
     * (the two-op form) and the backward starts with the classifier's */
    float fused_dloss;
} sr_model;

/* Vocabulary padded for speed: the next multiple of 64. */
int sr_model_padded_vocab(int V);
/* Floats in the unit-major parameter vector of a model with dims d (Vp
 * computed from V). */
size_t sr_model_n_params(const sr_model_dims *d);
/* Bytes of activations sr_model_init allocates for micro-batches of max_B
 * sequences with `ops` (category SR_MEM_ACTIVATIONS), without allocating
 * them. */
size_t sr_model_activation_bytes(const sr_model_dims *d, const sr_ops *ops, int max_B);
/* Bytes sr_model_init allocates in SR_MEM_OTHER with activations: the
 * loss accumulator, and a Llama model's rotary table (sr_model_rope_bytes;
 * 0 with learned positions). */
size_t sr_model_other_bytes(const sr_model_dims *d);
size_t sr_model_rope_bytes(const sr_model_dims *d);
/* The largest activation forward saves for backward, per block (a
 * block's tensor of micro-batches of max_B sequences with `ops`: the
 * attention scores B x NH x T x T where attention materialises them), in
 * bytes, and its name in *name (the activation's field: "att", "fch",
 * ...). */
size_t sr_model_largest_saved(const sr_model_dims *d, const sr_ops *ops, int max_B, const char **name);
/* The split above for micro-batches of max_B sequences with `ops`. */
sr_act_split sr_model_activation_split(const sr_model_dims *d, const sr_ops *ops, int max_B);

/* Builds the tensor table and layout for `d` (Vp computed from V).  With
 * `own_params` the full fp32 parameter and gradient buffers are allocated
 * on `dev` (categories SR_MEM_PARAM_SHARD / SR_MEM_GRAD_SHARD; not
 * initialised, gradients zeroed; needs ops->act f32).  Activations for
 * micro-batches of up to `max_B` sequences are allocated on `dev` (none for
 * max_B 0: the tensor table alone, for the offline tools, where `dev` may
 * be NULL).  Returns SR_ERR_INTERNAL when out of memory, SR_ERR_CONFIG
 * ("not implemented yet") when activations are asked of ops that lack an
 * op the family needs (a CUDA table and a Llama model).  Free with
 * sr_model_free. */
sr_status sr_model_init(sr_model *m, sr_model_dims d, const sr_ops *ops, sr_dev *dev, int max_B, bool own_params);
void sr_model_free(sr_model *m);

/* GPT-2 initialisation of floats [begin, end) of the parameter buffer into
 * dst[0 .. end-begin): N(0, 0.02), residual projections N(0, 0.02/sqrt(2L)),
 * LayerNorm weights 1, biases and padded vocabulary rows 0.  Each element is
 * a function of (seed, its global index) only. */
void sr_model_init_params(const sr_model *m, uint64_t seed, float *dst, size_t begin, size_t end);

/* Forward over B sequences of T = d.T tokens.  `inputs` and `targets` are
 * host arrays of [B,T] token ids (all < V), copied to the device
 * asynchronously: on a table with memory of its own they must be the
 * table's pinned memory (a copy from pageable memory may wait for the
 * device inside the driver, where no deadline runs; the CUDA emulator
 * found the step doing that), and the caller leaves them unchanged until a
 * host wait ordered after this forward (the step's, an evaluation's).  The
 * per-token losses (m->losses) are added on the device to the loss sum
 * that sr_model_take_loss_sum reads.  `src` NULL uses m->params.  Returns
 * SR_OK or the first failure of an op (SR_ERR_INTERNAL when a scratch
 * allocation failed). */
sr_status sr_model_forward(sr_model *m, const sr_param_source *src, const int *inputs, const int *targets, int B);
/* The training forward: as sr_model_forward, but with dloss != 0 and a
 * table with the fused classifier (ops.h crossentropy_fused) the logits
 * become dlogits for this dloss in the same launch, and the next
 * sr_model_backward must pass the same dloss (else SR_ERR_INTERNAL).
 * dloss 0: sr_model_forward (the oracle's logits stay readable). */
sr_status sr_model_forward_train(sr_model *m, const sr_param_source *src, const int *inputs, const int *targets, int B,
                                 float dloss);
/* The sum of the per-token losses of every forward since the last take,
 * read back from the device (the one read of a step), into *sum; the
 * device sum restarts at zero. */
sr_status sr_model_take_loss_sum(sr_model *m, double *sum);
/* The per-token losses (-log p(target)) of the last forward's first B
 * sequences, [B, T] floats, downloaded into dst (the evaluation tasks'
 * read, evaltask.h): host memory of sr_dev_io_alloc (pinned on the cuda
 * table, so the host's wait keeps its deadline); waits for the forward. */
sr_status sr_model_read_losses(sr_model *m, float *dst, int B);
/* Backward of the last forward; accumulates d(loss_sum * dloss)/dparam into
 * the gradients (writes them, in a buffer the source calls fresh), where
 * loss_sum is the sum of the per-token losses (pass dloss = 1/(tokens in
 * the global batch) for the mean).  Returns as sr_model_forward. */
sr_status sr_model_backward(sr_model *m, const sr_param_source *src, float dloss);

/* FLOPs of one forward+backward per token: 6N + 12 L T NH hs, N the
 * parameters a token's matrix products touch (without the position
 * embedding; with grouped heads and SwiGLU as their shapes are; the tied
 * embedding counted once, as the LM head) and the attention scores and
 * values. */
double sr_model_flops_per_token(const sr_model *m);

/* The decode step: each block's forward for one token at a time over a
 * key/value cache, the form sampling runs (sample.c), on the CPU op table
 * with the threads set (sr_ops_set_threads; the result does not depend on
 * their number).  Over the model `m` (its tensor table) and its full
 * unit-major fp32 parameters `params` in host memory, both the caller's
 * and kept while the decoder lives.  Each token fed at the next position
 * gives the logits of the next one, [V) of the real vocabulary, valid
 * until the next feed; when the cache's window (the family's
 * decode_window_max, else seq_len) is full it restarts from the newest
 * half of its tokens.  new: SR_ERR_INTERNAL when out of memory (*out
 * NULL).  free: NULL is fine. */
typedef struct sr_decoder sr_decoder;
sr_status sr_decoder_new(sr_decoder **out, const sr_model *m, const float *params);
const float *sr_decoder_feed(sr_decoder *g, int token);
void sr_decoder_free(sr_decoder *g);
/* The host bytes of a decoder of a model of dims d (completed): its
 * cache, rotary table and buffers, not the parameters. */
size_t sr_decoder_bytes(const sr_model_dims *d);
/* The positions its cache holds: the model's context as the decoder
 * reads it (the family's decode_window_max, else seq_len). */
int sr_decoder_window(const sr_model_dims *d);

#endif
