/* export_hf.c — the Hugging Face exporter and the export dispatcher; see
 * export_hf.h. */
#include "srconfig.h"

#include "export_hf.h"

#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt_tools.h"
#include "export_llmc.h"
#include "fsio.h"
#include "hfnames.h"
#include "mem.h"
#include "safetensors.h"

#define MARK "shardrun_export"

int sr_export_format_parse(const char *name) {
    return strcmp(name, "hf") == 0            ? SR_EXPORT_HF
           : strcmp(name, "safetensors") == 0 ? SR_EXPORT_SAFETENSORS
           : strcmp(name, "llmc") == 0        ? SR_EXPORT_LLMC
                                              : -1;
}

static bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

static sr_status resolve(const char *dest, sr_export_format *fmt) {
    struct stat sb;
    if (ends_with(dest, "/") || (stat(dest, &sb) == 0 && S_ISDIR(sb.st_mode)))
        *fmt = SR_EXPORT_HF;
    else if (ends_with(dest, ".safetensors"))
        *fmt = SR_EXPORT_SAFETENSORS;
    else if (ends_with(dest, ".bin"))
        *fmt = SR_EXPORT_LLMC;
    else
        return sr_error(SR_ERR_USAGE,
                        "ckpt export: cannot tell the format from -o %s: expected DIR/ (model.safetensors and "
                        "config.json for Hugging Face), FILE.safetensors, or FILE.bin (an llm.c model file); or "
                        "give --format hf|safetensors|llmc",
                        dest);
    return SR_OK;
}

typedef struct {
    const sr_model *model;
    const float *all;
} st_ctx;

/* The file's entries are the model's pieces (hfnames.h): Hugging Face's
 * names and shapes, GPT-2's Conv1D weights transposed, the fused Llama
 * matrices split, the embeddings without their padded rows. */
static sr_status write_safetensors(int fd, const char *tmp, void *arg) {
    const st_ctx *x = arg;
    const sr_model *m = x->model;
    sr_hf_piece *p = sr_calloc((size_t)m->n_tensors * SR_HF_MAX_PIECES, sizeof *p);
    int n = p ? sr_hf_pieces(m, p) : 0;
    sr_st_entry *e = sr_calloc((size_t)(n ? n : 1), sizeof *e);
    size_t largest = 0;
    for (int i = 0; i < n; i++)
        largest = m->tensors[p[i].tensor].numel > largest ? m->tensors[p[i].tensor].numel : largest;
    float *tr = sr_malloc((largest ? largest : 1) * sizeof(float));
    char *hdr = NULL;
    size_t hlen = 0;
    sr_status st = p && e && tr ? SR_OK : sr_error_oom("the safetensors export");
    for (int i = 0; i < n && st == SR_OK; i++) {
        e[i].name = p[i].name;
        e[i].dtype = SR_ST_F32;
        e[i].ndim = p[i].ndim;
        e[i].shape[0] = p[i].shape[0];
        e[i].shape[1] = p[i].shape[1];
    }
    if (st == SR_OK)
        st = sr_st_render_header(e, n, &hdr, &hlen);
    int rc = st == SR_OK ? sr_fsio_write_all(fd, hdr, hlen) : 0;
    for (int i = 0; i < n && st == SR_OK && rc == 0; i++) {
        const sr_tensor *t = &m->tensors[p[i].tensor];
        const float *src = x->all + t->offset + (size_t)p[i].row0 * (size_t)t->cols;
        size_t count = (size_t)p[i].rows * (size_t)t->cols;
        if (p[i].transposed) {
            /* a Conv1D weight: [rows, cols] -> [cols, rows] (also the square attn.c_proj) */
            for (size_t r = 0; r < (size_t)t->rows; r++)
                for (size_t c = 0; c < (size_t)t->cols; c++)
                    tr[c * (size_t)t->rows + r] = src[r * (size_t)t->cols + c];
            src = tr;
        }
        rc = sr_fsio_write_all(fd, src, count * sizeof(float));
    }
    if (st == SR_OK && rc != 0)
        st = sr_fsio_write_error(tmp, errno);
    free(hdr);
    free(tr);
    free(e);
    free(p);
    return st;
}

sr_status sr_export_safetensors(const sr_model *m, const float *all, const char *path) {
    st_ctx x = {m, all};
    return sr_fsio_atomic_write(path, write_safetensors, &x);
}

typedef struct {
    const char *text;
} text_ctx;

static sr_status write_text(int fd, const char *tmp, void *arg) {
    const text_ctx *x = arg;
    return sr_fsio_write_all(fd, x->text, strlen(x->text)) == 0 ? SR_OK : sr_fsio_write_error(tmp, errno);
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
    if (c && d->V == 128256 &&
        (json_object_set_new(c, "bos_token_id", json_integer(128000)) != 0 ||
         json_object_set_new(c, "eos_token_id", json_integer(128001)) != 0)) {
        json_decref(c);
        c = NULL;
    }
    return c;
}

/* config.json as transformers' GPT2Config or LlamaConfig reads it. */
static char *render_config(const sr_manifest *mf, const char *ckpt) {
    const sr_model_dims *d = &mf->dims;
    json_t *c =
        d->arch == SR_ARCH_LLAMA
            ? llama_config(d)
            : json_pack("{s:[s], s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:n, s:s, s:f, s:b, s:f, s:f, s:f, s:f, s:s}",
                        "architectures", "GPT2LMHeadModel", "model_type", "gpt2", "vocab_size", d->V, "n_positions",
                        d->T, "n_ctx", d->T, "n_embd", d->C, "n_layer", d->L, "n_head", d->NH, "n_inner",
                        "activation_function", "gelu_new", "layer_norm_epsilon", 1e-5, "tie_word_embeddings", 1,
                        "resid_pdrop", 0.0, "embd_pdrop", 0.0, "attn_pdrop", 0.0, "initializer_range", 0.02,
                        "torch_dtype", "float32");
    if (c && d->arch != SR_ARCH_LLAMA && d->V == 50257 &&
        (json_object_set_new(c, "bos_token_id", json_integer(50256)) != 0 ||
         json_object_set_new(c, "eos_token_id", json_integer(50256)) != 0)) {
        json_decref(c);
        c = NULL;
    }
    char abs[PATH_MAX];
    if (c && json_object_set_new(c, MARK,
                                 json_pack("{s:s, s:s, s:I}", "version", PACKAGE_VERSION, "checkpoint",
                                           realpath(ckpt, abs) ? abs : ckpt, "step", (json_int_t)mf->step)) != 0) {
        json_decref(c);
        c = NULL;
    }
    char *text = c ? json_dumps(c, JSON_INDENT(2) | JSON_REAL_PRECISION(9)) : NULL;
    json_decref(c);
    if (!text)
        return NULL;
    char *out = sr_malloc(strlen(text) + 2);
    if (out)
        sprintf(out, "%s\n", text);
    free(text);
    return out;
}

typedef struct {
    const unsigned char *bytes;
    size_t n;
} bytes_ctx;

static sr_status write_bytes(int fd, const char *tmp, void *arg) {
    const bytes_ctx *x = arg;
    return sr_fsio_write_all(fd, x->bytes, x->n) == 0 ? SR_OK : sr_fsio_write_error(tmp, errno);
}

/* src copied to dir/name (atomically). */
static sr_status copy_file(const char *src, const char *dir, const char *name) {
    FILE *f;
    sr_status st = sr_fsio_open_input_file(src, "the job's tokenizer", NULL, &f);
    if (st != SR_OK)
        return st;
    size_t cap = 1 << 20, n = 0;
    unsigned char *buf = sr_malloc(cap);
    for (size_t got = 1; buf && got > 0;) {
        if (n == cap) {
            unsigned char *more = realloc(buf, cap * 2);
            if (!more) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = more;
            cap *= 2;
        }
        got = fread(buf + n, 1, cap - n, f);
        n += got;
    }
    bool bad = ferror(f);
    fclose(f);
    if (!buf)
        return sr_error_oom("the tokenizer copy");
    char dst[PATH_MAX];
    sr_fmt(dst, sizeof dst, "%s/%s", dir, name);
    bytes_ctx x = {buf, n};
    st = bad ? sr_error(SR_ERR_IO, "ckpt export: reading %s failed", src)
             : sr_fsio_atomic_write_own(dst, write_bytes, &x);
    free(buf);
    return st;
}

/* The tokenizer files of the job's data.tokenizer (as the checkpoint
 * recorded it: a tokenizer.json, a vocab.json with merges.txt beside it,
 * or PATTERN:RANKS.tiktoken) copied into dir under their own names, so
 * that AutoTokenizer finds a tokenizer.json or vocab.json + merges.txt;
 * *copied counts them (none when the job named no tokenizer). */
static sr_status copy_tokenizer(const sr_manifest *mf, const char *dir, int *copied) {
    *copied = 0;
    if (!mf->has_data || !mf->data.tokenizer[0])
        return SR_OK;
    const char *spec = mf->data.tokenizer, *colon = strchr(spec, ':');
    if (colon && spec[0] != '/')
        spec = colon + 1; /* PATTERN:PATH */
    const char *base = strrchr(spec, '/') ? strrchr(spec, '/') + 1 : spec;
    sr_status st = copy_file(spec, dir, base);
    *copied += st == SR_OK;
    if (st == SR_OK && strcmp(base, "vocab.json") == 0) {
        char merges[PATH_MAX];
        sr_fmt(merges, sizeof merges, "%.*smerges.txt", (int)(base - spec), spec);
        st = copy_file(merges, dir, "merges.txt");
        *copied += st == SR_OK;
    }
    return st;
}

/* DIR/config.json may be replaced only when absent or written by us. */
static sr_status check_config_ours(const char *dir, const char *cfgpath) {
    struct stat sb;
    if (stat(dir, &sb) == 0 && !S_ISDIR(sb.st_mode))
        return sr_error(SR_ERR_CANTCREAT, "ckpt export: %s exists and is not a directory", dir);
    if (lstat(cfgpath, &sb) != 0)
        return errno == ENOENT ? SR_OK : sr_error(SR_ERR_CANTCREAT, "ckpt export: %s: %s", cfgpath, strerror(errno));
    json_error_t jerr;
    json_t *j = S_ISREG(sb.st_mode) ? json_load_file(cfgpath, 0, &jerr) : NULL;
    bool ours = j && json_is_object(j) && json_object_get(j, MARK);
    json_decref(j);
    return ours ? SR_OK
                : sr_error(SR_ERR_CANTCREAT,
                           "ckpt export: refusing to overwrite %s: shardrun did not write it (no \"" MARK
                           "\" entry) (hint: export to a new or empty directory)",
                           cfgpath);
}

static sr_status export_hf(const char *path, const char *dest, sr_export_format fmt, FILE *out) {
    char dir[PATH_MAX], stpath[PATH_MAX], cfgpath[PATH_MAX];
    size_t dl = strlen(dest);
    if (fmt == SR_EXPORT_HF) {
        while (dl > 1 && dest[dl - 1] == '/')
            dl--;
        if (dl >= sizeof dir - 32)
            return sr_error(SR_ERR_USAGE, "ckpt export: -o %s: path too long", dest);
        memcpy(dir, dest, dl);
        dir[dl] = '\0';
        sr_fmt(stpath, sizeof stpath, "%s/model.safetensors", dir);
        sr_fmt(cfgpath, sizeof cfgpath, "%s/config.json", dir);
        sr_status st = check_config_ours(dir, cfgpath);
        if (st != SR_OK)
            return st;
    } else {
        snprintf(stpath, sizeof stpath, "%s", dest);
    }
    sr_manifest mf;
    sr_model model;
    float *all;
    char used[PATH_MAX];
    sr_status st = sr_ckpt_tool_read_model(path, &mf, &model, &all, NULL, NULL, used, sizeof used);
    if (st != SR_OK)
        return st;
    char *cfg = fmt == SR_EXPORT_HF ? render_config(&mf, used) : NULL;
    if (fmt == SR_EXPORT_HF && !cfg)
        st = sr_error_oom("config.json");
    if (st == SR_OK && fmt == SR_EXPORT_HF && sr_fsio_mkdir_p(dir) != 0)
        st = sr_fsio_create_error(dir, errno);
    st_ctx x = {&model, all};
    if (st == SR_OK)
        st = cfg ? sr_fsio_atomic_write_own(stpath, write_safetensors, &x) /* DIR/model.safetensors */
                 : sr_fsio_atomic_write(stpath, write_safetensors, &x);
    text_ctx tc = {cfg};
    if (st == SR_OK && cfg)
        st = sr_fsio_atomic_write_own(cfgpath, write_text, &tc);
    int copied = 0;
    if (st == SR_OK && cfg)
        st = copy_tokenizer(&mf, dir, &copied);
    bool llama = mf.dims.arch == SR_ARCH_LLAMA;
    char dims[512], tail[200] = "";
    if (cfg)
        snprintf(tail, sizeof tail, "; load it with %s.from_pretrained (%s)",
                 llama ? "LlamaForCausalLM" : "GPT2LMHeadModel",
                 copied ? "and the job's tokenizer files, copied beside it, with AutoTokenizer"
                        : "the job named no tokenizer: none is written");
    if (st == SR_OK)
        fprintf(out, "shardrun: wrote %s%s: %zu fp32 parameters under Hugging Face %s names (%s), step %lld%s\n",
                stpath, cfg ? " and config.json" : "", model.n_params_real, llama ? "Llama" : "GPT-2",
                sr_model_dims_text(&mf.dims, dims, sizeof dims), (long long)mf.step, tail);
    free(cfg);
    free(all);
    sr_model_free(&model);
    sr_manifest_free(&mf);
    return st;
}

sr_status sr_export(const char *path, const char *dest, sr_export_format fmt, FILE *out) {
    if (fmt == SR_EXPORT_AUTO) {
        sr_status st = resolve(dest, &fmt);
        if (st != SR_OK)
            return st;
    }
    return fmt == SR_EXPORT_LLMC ? sr_export_llmc(path, dest, out) : export_hf(path, dest, fmt, out);
}
