/* hfnames.c — each family's Hugging Face forms: its tensors' names and its
 * config.json, read and written; see hfnames.h. */
#include "srconfig.h"

#include "hfnames.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static sr_hf_piece *piece(sr_hf_piece *p, const char *prefix, const char *name, int tensor, int64_t row0, int64_t rows,
                          int64_t cols, bool vector) {
    snprintf(p->name, sizeof p->name, "%s%s", prefix, name);
    p->prefix_len = (int)strlen(prefix);
    p->tensor = tensor;
    p->row0 = row0;
    p->rows = rows;
    p->transposed = false;
    p->ndim = vector ? 1 : 2;
    p->shape[0] = vector ? cols : rows;
    p->shape[1] = vector ? 0 : cols;
    return p + 1;
}

static int gpt2_pieces(const sr_model *m, sr_hf_piece *out) {
    int root = m->d.L * m->n_block;
    for (int i = 0; i < m->n_tensors; i++) {
        const sr_tensor *t = &m->tensors[i];
        sr_hf_piece *p = &out[i];
        int64_t rows = t->vocab ? m->d.V : t->rows;
        piece(p, "transformer.", t->name, i, 0, rows, t->cols, t->ndim == 1);
        if (t->ndim == 2 && i < root) { /* Conv1D: [in, out] */
            p->transposed = true;
            p->shape[0] = t->cols;
            p->shape[1] = t->rows;
        }
    }
    return m->n_tensors;
}

static int llama_pieces(const sr_model *m, sr_hf_piece *out) {
    const sr_model_dims *d = &m->d;
    int64_t C = d->C, hs = d->C / d->NH, q = (int64_t)d->NH * hs, kv = (int64_t)d->NKV * hs, F = d->F;
    sr_hf_piece *p = out;
    char n[96];
    for (int l = 0; l < d->L; l++) {
        int b = l * m->n_block;
#define NAME(s) (snprintf(n, sizeof n, "layers.%d.%s", l, s), n)
        p = piece(p, "model.", NAME("input_layernorm.weight"), b + SR_LL_ATTN_NORM, 0, 1, C, true);
        p = piece(p, "model.", NAME("self_attn.q_proj.weight"), b + SR_LL_QKV, 0, q, C, false);
        p = piece(p, "model.", NAME("self_attn.k_proj.weight"), b + SR_LL_QKV, q, kv, C, false);
        p = piece(p, "model.", NAME("self_attn.v_proj.weight"), b + SR_LL_QKV, q + kv, kv, C, false);
        p = piece(p, "model.", NAME("self_attn.o_proj.weight"), b + SR_LL_O, 0, C, C, false);
        p = piece(p, "model.", NAME("post_attention_layernorm.weight"), b + SR_LL_MLP_NORM, 0, 1, C, true);
        p = piece(p, "model.", NAME("mlp.gate_proj.weight"), b + SR_LL_GATE_UP, 0, F, C, false);
        p = piece(p, "model.", NAME("mlp.up_proj.weight"), b + SR_LL_GATE_UP, F, F, C, false);
        p = piece(p, "model.", NAME("mlp.down_proj.weight"), b + SR_LL_DOWN, 0, C, F, false);
#undef NAME
    }
    int root = d->L * m->n_block;
    p = piece(p, "model.", "embed_tokens.weight", root + SR_LL_WTE, 0, d->V, C, false);
    p = piece(p, "model.", "norm.weight", root + SR_LL_NORM, 0, 1, C, true);
    if (d->untied)
        p = piece(p, "", "lm_head.weight", root + SR_LL_HEAD, 0, d->V, C, false);
    return (int)(p - out);
}

/* ---- config.json ------------------------------------------------------- */

/* config.json's integer `name` (the first of two names present when alt
 * is not NULL) into *v. */
static sr_status hf_int(json_t *c, const char *path, const char *name, const char *alt, int *v) {
    json_t *j = json_object_get(c, name);
    if (!j && alt)
        j = json_object_get(c, alt);
    if (!j)
        return sr_error(SR_ERR_DATA, "%s: no \"%s\"%s%s%s (expected a config.json as transformers writes it)", path,
                        name, alt ? " or \"" : "", alt ? alt : "", alt ? "\"" : "");
    if (!json_is_integer(j) || json_integer_value(j) < 1 || json_integer_value(j) > 16777216)
        return sr_error(SR_ERR_DATA, "%s: \"%s\" is not a positive integer", path,
                        json_object_get(c, name) ? name : alt);
    *v = (int)json_integer_value(j);
    return SR_OK;
}

/* config.json's number `name` into *v (absent: *v unchanged, when
 * optional). */
static sr_status hf_num(json_t *c, const char *path, const char *name, bool optional, double *v) {
    json_t *j = json_object_get(c, name);
    if (!j && optional)
        return SR_OK;
    if (!j || !json_is_number(j))
        return sr_error(SR_ERR_DATA, "%s: \"%s\" is %s; expected a number (a Llama config as transformers writes it)",
                        path, name, j ? "not a number" : "missing");
    *v = json_number_value(j);
    return SR_OK;
}

/* A false-or-absent boolean field (attention_bias, mlp_bias). */
static sr_status hf_false(json_t *c, const char *path, const char *name, const char *why) {
    json_t *j = json_object_get(c, name);
    if (j && !json_is_false(j))
        return sr_error(SR_ERR_DATA, "%s: %s is not false; %s", path, name, why);
    return SR_OK;
}

static sr_status hf_llama(json_t *c, const char *path, sr_model_dims *d) {
    sr_status st = hf_int(c, path, "num_hidden_layers", NULL, &d->L);
    if (st == SR_OK)
        st = hf_int(c, path, "num_attention_heads", NULL, &d->NH);
    if (st == SR_OK)
        st = hf_int(c, path, "hidden_size", NULL, &d->C);
    if (st == SR_OK)
        st = hf_int(c, path, "intermediate_size", NULL, &d->F);
    if (st == SR_OK)
        st = hf_int(c, path, "vocab_size", NULL, &d->V);
    if (st == SR_OK)
        st = hf_int(c, path, "max_position_embeddings", NULL, &d->T);
    d->NKV = d->NH;
    if (st == SR_OK && json_object_get(c, "num_key_value_heads") &&
        !json_is_null(json_object_get(c, "num_key_value_heads")))
        st = hf_int(c, path, "num_key_value_heads", NULL, &d->NKV);
    d->norm_eps = 1e-6; /* LlamaConfig's defaults */
    d->rope_theta = 10000;
    if (st == SR_OK)
        st = hf_num(c, path, "rms_norm_eps", true, &d->norm_eps);
    if (st == SR_OK)
        st = hf_num(c, path, "rope_theta", true, &d->rope_theta);
    json_t *tie = json_object_get(c, "tie_word_embeddings");
    d->untied = !(tie && json_is_true(tie)); /* LlamaConfig's default: untied */
    const char *act = json_string_value(json_object_get(c, "hidden_act"));
    if (st == SR_OK && json_object_get(c, "hidden_act") && (!act || strcmp(act, "silu") != 0))
        st = sr_error(SR_ERR_DATA, "%s: hidden_act is %s%s%s; shardrun's Llama MLP is SwiGLU (silu)", path,
                      act ? "\"" : "", act ? act : "not a string", act ? "\"" : "");
    if (st == SR_OK)
        st = hf_false(c, path, "attention_bias", "shardrun's Llama attention has no biases");
    if (st == SR_OK)
        st = hf_false(c, path, "mlp_bias", "shardrun's Llama MLP has no biases");
    json_t *hd = json_object_get(c, "head_dim");
    if (st == SR_OK && hd && !json_is_null(hd) &&
        !(json_is_integer(hd) && d->NH > 0 && json_integer_value(hd) * d->NH == d->C))
        st = sr_error(SR_ERR_DATA,
                      "%s: head_dim is not hidden_size / num_attention_heads, the head size shardrun's "
                      "Llama has",
                      path);
    /* transformers 5 writes rope_parameters {rope_type, rope_theta, ...}
     * where 4.x wrote rope_theta and rope_scaling */
    json_t *rs = json_object_get(c, "rope_scaling"), *rp = json_object_get(c, "rope_parameters");
    if (st == SR_OK && rp && json_is_object(rp)) {
        st = hf_num(rp, path, "rope_theta", true, &d->rope_theta);
        const char *type = json_string_value(json_object_get(rp, "rope_type"));
        if (!(type && strcmp(type, "default") == 0))
            rs = rp;
    }
    if (st == SR_OK && rs && !json_is_null(rs)) {
        const char *type = json_string_value(json_object_get(rs, "rope_type"));
        if (!type)
            type = json_string_value(json_object_get(rs, "type"));
        if (!json_is_object(rs) || !type || strcmp(type, "llama3") != 0)
            st = sr_error(SR_ERR_DATA,
                          "%s: rope_scaling type %s%s%s is not supported: shardrun implements Llama-3's (\"llama3\") "
                          "or none (null)",
                          path, type ? "\"" : "", type ? type : "(missing)", type ? "\"" : "");
        double orig = 0;
        if (st == SR_OK)
            st = hf_num(rs, path, "factor", false, &d->rope.factor);
        if (st == SR_OK)
            st = hf_num(rs, path, "low_freq_factor", false, &d->rope.low_freq_factor);
        if (st == SR_OK)
            st = hf_num(rs, path, "high_freq_factor", false, &d->rope.high_freq_factor);
        if (st == SR_OK)
            st = hf_num(rs, path, "original_max_position_embeddings", false, &orig);
        if (st == SR_OK && !(d->rope.factor > 0 && d->rope.high_freq_factor > d->rope.low_freq_factor &&
                             d->rope.low_freq_factor > 0 && orig >= 1 && orig <= 16777216))
            st = sr_error(SR_ERR_DATA,
                          "%s: rope_scaling: factor, low_freq_factor < high_freq_factor and "
                          "original_max_position_embeddings must be positive",
                          path);
        d->rope.original_max_position = (int)orig;
    }
    if (st == SR_OK && (d->NKV < 1 || d->NH % d->NKV != 0))
        st = sr_error(SR_ERR_DATA, "%s: num_key_value_heads (%d) does not divide num_attention_heads (%d)", path,
                      d->NKV, d->NH);
    if (st == SR_OK && !(d->norm_eps > 0 && d->norm_eps < 1 && d->rope_theta >= 1 && d->rope_theta <= 1e12))
        st = sr_error(SR_ERR_DATA, "%s: rms_norm_eps or rope_theta is out of range", path);
    if (st == SR_OK && d->NH > 0 && d->C % d->NH == 0 && (d->C / d->NH) % 2 != 0)
        st = sr_error(SR_ERR_DATA, "%s: the head size (%d) is odd; rotary positions need an even one", path,
                      d->C / d->NH);
    return st;
}

static sr_status hf_gpt2(json_t *c, const char *path, sr_model_dims *d) {
    sr_status st = hf_int(c, path, "n_layer", NULL, &d->L);
    if (st == SR_OK)
        st = hf_int(c, path, "n_head", NULL, &d->NH);
    if (st == SR_OK)
        st = hf_int(c, path, "n_embd", NULL, &d->C);
    if (st == SR_OK)
        st = hf_int(c, path, "vocab_size", NULL, &d->V);
    if (st == SR_OK)
        st = hf_int(c, path, "n_positions", "n_ctx", &d->T);
    const char *act = json_string_value(json_object_get(c, "activation_function"));
    if (st == SR_OK && json_object_get(c, "activation_function") && (!act || strcmp(act, "gelu_new") != 0))
        st = sr_error(SR_ERR_DATA, "%s: activation_function is %s%s%s; shardrun's GELU is GPT-2's gelu_new", path,
                      act ? "\"" : "", act ? act : "not a string", act ? "\"" : "");
    json_t *eps = json_object_get(c, "layer_norm_epsilon");
    if (st == SR_OK && eps && (!json_is_number(eps) || fabs(json_number_value(eps) - 1e-5) > 1e-12))
        st = sr_error(SR_ERR_DATA, "%s: layer_norm_epsilon is not 1e-5, the epsilon of shardrun's LayerNorm", path);
    json_t *tie = json_object_get(c, "tie_word_embeddings");
    if (st == SR_OK && tie && !json_is_true(tie))
        st = sr_error(SR_ERR_DATA, "%s: tie_word_embeddings is not true; shardrun's head is the token embedding", path);
    json_t *inner = json_object_get(c, "n_inner");
    if (st == SR_OK && inner && !json_is_null(inner) &&
        !(json_is_integer(inner) && json_integer_value(inner) == 4 * (json_int_t)d->C))
        st = sr_error(SR_ERR_DATA, "%s: n_inner is not 4 x n_embd, the width of shardrun's MLP", path);
    return st;
}

/* config.json as transformers' LlamaConfig reads it. */
static json_t *llama_config(const sr_model_dims *d) {
    json_t *c = json_pack("{s:[s], s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:s, s:f, s:f, s:b, s:b, s:b, s:f, s:f, "
                          "s:s, s:i}",
                          "architectures", "LlamaForCausalLM", "model_type", "llama", "vocab_size", d->V, "hidden_size",
                          d->C, "intermediate_size", d->F, "num_hidden_layers", d->L, "num_attention_heads", d->NH,
                          "num_key_value_heads", d->NKV, "max_position_embeddings", d->T, "hidden_act", "silu",
                          "rms_norm_eps", d->norm_eps, "rope_theta", d->rope_theta, "tie_word_embeddings", !d->untied,
                          "attention_bias", 0, "mlp_bias", 0, "attention_dropout", 0.0, "initializer_range", 0.02,
                          "torch_dtype", "float32", "head_dim", d->C / d->NH);
    if (c && d->rope.factor > 0 &&
        json_object_set_new(c, "rope_scaling",
                            json_pack("{s:s, s:f, s:f, s:f, s:i}", "rope_type", "llama3", "factor", d->rope.factor,
                                      "low_freq_factor", d->rope.low_freq_factor, "high_freq_factor",
                                      d->rope.high_freq_factor, "original_max_position_embeddings",
                                      d->rope.original_max_position)) != 0) {
        json_decref(c);
        c = NULL;
    }
    return c;
}

/* config.json as transformers' GPT2Config reads it. */
static json_t *gpt2_config(const sr_model_dims *d) {
    return json_pack("{s:[s], s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:n, s:s, s:f, s:b, s:f, s:f, s:f, s:f, s:s}",
                     "architectures", "GPT2LMHeadModel", "model_type", "gpt2", "vocab_size", d->V, "n_positions", d->T,
                     "n_ctx", d->T, "n_embd", d->C, "n_layer", d->L, "n_head", d->NH, "n_inner", "activation_function",
                     "gelu_new", "layer_norm_epsilon", 1e-5, "tie_word_embeddings", 1, "resid_pdrop", 0.0, "embd_pdrop",
                     0.0, "attn_pdrop", 0.0, "initializer_range", 0.02, "torch_dtype", "float32");
}

/* Each family's three forms: its tensors' pieces, config.json read and
 * written. */
static const struct {
    int (*pieces)(const sr_model *m, sr_hf_piece *out);
    sr_status (*read)(json_t *c, const char *path, sr_model_dims *d);
    json_t *(*render)(const sr_model_dims *d);
} forms[SR_ARCH_COUNT] = {
    [SR_ARCH_GPT2] = {gpt2_pieces, hf_gpt2, gpt2_config},
    [SR_ARCH_LLAMA] = {llama_pieces, hf_llama, llama_config},
};

int sr_hf_pieces(const sr_model *m, sr_hf_piece *out) { return forms[sr_family_index(m->d.arch)].pieces(m, out); }

sr_status sr_hf_config_read(int arch, json_t *c, const char *path, sr_model_dims *d) {
    arch = sr_family_index(arch);
    d->arch = arch;
    return forms[arch].read(c, path, d);
}

json_t *sr_hf_config_render(const sr_model_dims *d) { return forms[sr_family_index(d->arch)].render(d); }
