/* family.c — the family table and the presets; see family.h. */
#include "srconfig.h"

#include "family.h"

#include <stddef.h>
#include <string.h>

#include "line.h"

/* clang-format off */
static const sr_family families[SR_ARCH_COUNT] = {
    [SR_ARCH_GPT2] = {
        .name = "gpt2", .display = "GPT-2", .learned_positions = true, .rms_norm = false, .gated_mlp = false, .biases = true,
        .keys = 0, .ffn_num = 4, .ffn_den = 1,
        .hf_model_type = "gpt2", .hf_class = "GPT2LMHeadModel", .hf_prefix = "transformer.",
        .hf_example = "transformer.h.0.attn.c_attn.weight", .hf_mask_buffers = true,
        .hf_vocab = 50257, .hf_bos = 50256, .hf_eos = 50256, .llmc = true, .decode_window_max = 0},
    [SR_ARCH_LLAMA] = {
        .name = "llama", .display = "Llama", .learned_positions = false, .rms_norm = true, .gated_mlp = true, .biases = false,
        .keys = SR_FKEY_N_KV_HEAD | SR_FKEY_FFN_DIM | SR_FKEY_NORM_EPS | SR_FKEY_ROPE | SR_FKEY_TIE,
        .ffn_num = 8, .ffn_den = 3,
        .hf_model_type = "llama", .hf_class = "LlamaForCausalLM", .hf_prefix = "model.",
        .hf_example = "model.layers.0.self_attn.q_proj.weight", .hf_mask_buffers = false,
        .hf_vocab = 128256, .hf_bos = 128000, .hf_eos = 128001, .llmc = false,
        /* a Llama config may declare 131072 positions; the sampler's cache
         * holds at most 4096 (the window restarts as GPT-2's does), so a 1B
         * or 8B model samples in 1-2 GB */
        .decode_window_max = 4096},
};

const char *const sr_family_names[] = {"gpt2", "llama", NULL};

/* The presets; Llama-3.2-1B and Llama-3.1-8B as their config.json give them. */
const sr_family_preset sr_family_presets[] = {
    {"tiny",         SR_ARCH_GPT2,  4,  4,  256,  256,    256,  4,  1024,  true,  10000,  0,  1, 4, 8192},
    {"gpt2-124m",    SR_ARCH_GPT2,  12, 12, 768,  50257,  1024, 12, 3072,  true,  10000,  0,  1, 4, 8192},
    {"gpt2-350m",    SR_ARCH_GPT2,  24, 16, 1024, 50257,  1024, 16, 4096,  true,  10000,  0,  1, 4, 8192},
    {"gpt2-774m",    SR_ARCH_GPT2,  36, 20, 1280, 50257,  1024, 20, 5120,  true,  10000,  0,  1, 4, 8192},
    {"gpt2-1.5b",    SR_ARCH_GPT2,  48, 25, 1600, 50257,  1024, 25, 6400,  true,  10000,  0,  1, 4, 8192},
    {"llama-tiny",   SR_ARCH_LLAMA, 4,  4,  256,  256,    256,  2,  704,   true,  10000,  0,  1, 4, 8192},
    {"llama-125m",   SR_ARCH_LLAMA, 12, 12, 768,  32000,  1024, 4,  2048,  false, 10000,  0,  1, 4, 8192},
    {"llama-3.2-1b", SR_ARCH_LLAMA, 16, 32, 2048, 128256, 2048, 8,  8192,  true,  500000, 32, 1, 4, 8192},
    {"llama-3.1-8b", SR_ARCH_LLAMA, 32, 32, 4096, 128256, 2048, 8,  14336, false, 500000, 8,  1, 4, 8192},
};
const char *const sr_family_preset_names[] = {"tiny", "gpt2-124m", "gpt2-350m", "gpt2-774m", "gpt2-1.5b",
                                              "llama-tiny", "llama-125m", "llama-3.2-1b", "llama-3.1-8b", NULL};
/* clang-format on */
_Static_assert(sizeof sr_family_presets / sizeof sr_family_presets[0] ==
                   sizeof sr_family_preset_names / sizeof sr_family_preset_names[0] - 1,
               "one preset row per name");
_Static_assert(sizeof sr_family_names / sizeof sr_family_names[0] == SR_ARCH_COUNT + 1, "one name per family");

int sr_family_index(int arch) { return arch >= 0 && arch < SR_ARCH_COUNT ? arch : SR_ARCH_GPT2; }

const sr_family *sr_family_get(int arch) { return &families[sr_family_index(arch)]; }

int sr_family_find(const char *name) {
    for (int i = 0; i < SR_ARCH_COUNT; i++)
        if (strcmp(families[i].name, name) == 0)
            return i;
    return -1;
}

int sr_family_of_hf_type(const char *model_type) {
    for (int i = 0; i < SR_ARCH_COUNT; i++)
        if (strcmp(families[i].hf_model_type, model_type) == 0)
            return i;
    return -1;
}

const char *sr_family_list(unsigned fkey, char *buf, size_t n) {
    sr_line l = sr_line_on(buf, n);
    for (int i = 0; i < SR_ARCH_COUNT; i++)
        if (!fkey || (families[i].keys & fkey))
            sr_line_item(&l, ", ", "%s", families[i].name);
    return buf;
}
