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
#include "tokenizer.h"

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

/* The special token ids of config.json: bos, eos and pad all the
 * document token `doc_id` of the run's tokenizer (`known`: the run
 * recorded one), null without one (transformers' defaults, GPT-2's 50256
 * and Llama's 1 and 2, are ordinary tokens of another vocabulary); with no
 * tokenizer recorded, GPT-2's and Llama 3's own ids for their own
 * vocabularies. */
static bool set_token_ids(json_t *c, const sr_model_dims *d, int64_t doc_id, bool known) {
    const sr_family *f = sr_family_get(d->arch);
    int64_t bos = doc_id, eos = doc_id;
    if (!known && d->V == f->hf_vocab)
        bos = f->hf_bos, eos = f->hf_eos;
    else if (!known)
        bos = eos = -1;
    return json_object_set_new(c, "bos_token_id", bos >= 0 ? json_integer(bos) : json_null()) == 0 &&
           json_object_set_new(c, "eos_token_id", eos >= 0 ? json_integer(eos) : json_null()) == 0 &&
           json_object_set_new(c, "pad_token_id", known && eos >= 0 ? json_integer(eos) : json_null()) == 0;
}

/* config.json as transformers' GPT2Config or LlamaConfig reads it. */
static char *render_config(const sr_manifest *mf, const char *ckpt, int64_t doc_id, bool tokenizer_known) {
    const sr_model_dims *d = &mf->dims;
    json_t *c = sr_hf_config_render(d);
    if (c && !set_token_ids(c, d, doc_id, tokenizer_known)) {
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

/* ---- the tokenizer beside the model ---------------------------------------- */

/* What AutoTokenizer reads from an export: tokenizer.json (whatever the
 * run's tokenizer file was: a tokenizer.json as it is, but for a
 * post-processor that would add tokens shardrun's data never had; a
 * vocab.json + merges.txt pair converted to GPT2TokenizerFast's form), and
 * tokenizer_config.json / special_tokens_map.json naming the document
 * token (the tokenizer's end of text, data prepare's default separator)
 * as bos, eos and pad, with nothing added to encoded text.  A tiktoken
 * rank file has no exact tokenizer.json (tiktoken merges by the rank of
 * the merged token, tokenizers' BPE by the rank of the merge; runs of a
 * repeated token split differently): it is left out with a warning. */
typedef struct {
    int64_t doc_id;        /* the document token's id (-1: none) */
    char doc[128];         /* its text */
    char *tokenizer_json;  /* what is written as DIR/tokenizer.json (NULL: none) */
    const char *left_out;  /* why no tokenizer.json is written (NULL: one is, or no tokenizer) */
    char source[PATH_MAX]; /* the run's tokenizer file */
} hf_tok;

static void hf_tok_free(hf_tok *t) { free(t->tokenizer_json); }

/* A whole file, NUL-terminated (the tokenizer the run recorded). */
static sr_status slurp(const char *path, char **out) {
    *out = NULL;
    FILE *f;
    sr_status st = sr_fsio_open_input_file(path, "the run's tokenizer", NULL, &f);
    if (st != SR_OK)
        return st;
    size_t cap = 1 << 20, n = 0;
    char *buf = sr_malloc(cap + 1);
    for (size_t got = 1; buf && got > 0;) {
        if (n == cap) {
            char *more = sr_realloc(buf, cap * 2 + 1);
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
    buf[n] = '\0';
    if (bad) {
        free(buf);
        return sr_error(SR_ERR_IO, "ckpt export: reading %s failed", path);
    }
    *out = buf;
    return SR_OK;
}

/* A post-processor that adds tokens (TemplateProcessing, Bert's,
 * RoBERTa's, or a Sequence holding one). */
static bool adds_tokens(json_t *pp) {
    const char *type = json_string_value(json_object_get(pp, "type"));
    if (!type)
        return false;
    if (strcmp(type, "Sequence") == 0) {
        size_t i;
        json_t *p;
        json_array_foreach(json_object_get(pp, "processors"), i, p) {
            if (adds_tokens(p))
                return true;
        }
        return false;
    }
    return strcmp(type, "TemplateProcessing") == 0 || strcmp(type, "BertProcessing") == 0 ||
           strcmp(type, "RobertaProcessing") == 0;
}

static char *dump_json(json_t *j) {
    char *text = j ? json_dumps(j, JSON_INDENT(2) | JSON_PRESERVE_ORDER) : NULL;
    char *out = text ? sr_malloc(strlen(text) + 2) : NULL;
    if (out)
        sprintf(out, "%s\n", text);
    free(text);
    return out;
}

/* tokenizer.json from the run's tokenizer.json: its bytes, unless its
 * post-processor adds tokens (then that is dropped). */
static sr_status from_tokenizer_json(hf_tok *ht) {
    char *text;
    sr_status st = slurp(ht->source, &text);
    if (st != SR_OK)
        return st;
    json_error_t je;
    json_t *j = json_loads(text, 0, &je);
    if (j && adds_tokens(json_object_get(j, "post_processor"))) {
        json_object_set_new(j, "post_processor", json_null());
        free(text);
        text = dump_json(j);
        if (!text)
            st = sr_error_oom("tokenizer.json");
    }
    json_decref(j);
    ht->tokenizer_json = text;
    return st;
}

/* tokenizer.json from a vocab.json + merges.txt pair, in the form
 * tokenizers' GPT2TokenizerFast converts GPT-2's files to. */
static sr_status from_vocab_merges(hf_tok *ht) {
    char merges_path[PATH_MAX], *mtext = NULL;
    const char *slash = strrchr(ht->source, '/');
    sr_fmt(merges_path, sizeof merges_path, "%.*smerges.txt", slash ? (int)(slash - ht->source + 1) : 0, ht->source);
    json_error_t je;
    json_t *vocab = json_load_file(ht->source, JSON_REJECT_DUPLICATES, &je);
    sr_status st = vocab ? slurp(merges_path, &mtext) : sr_error(SR_ERR_DATA, "%s: %s", ht->source, je.text);
    json_t *merges = json_array(), *added = json_array();
    for (char *line = mtext, *next; st == SR_OK && line && *line; line = next) {
        next = strchr(line, '\n');
        if (next)
            *next++ = '\0';
        size_t ll = strlen(line);
        if (ll && line[ll - 1] == '\r')
            line[--ll] = '\0';
        if (ll && strncmp(line, "#version", 8) != 0)
            json_array_append_new(merges, json_string(line));
    }
    if (st == SR_OK && ht->doc_id >= 0)
        json_array_append_new(added, json_pack("{s:I, s:s, s:b, s:b, s:b, s:b, s:b}", "id", (json_int_t)ht->doc_id,
                                               "content", ht->doc, "single_word", 0, "lstrip", 0, "rstrip", 0,
                                               "normalized", 0, "special", 1));
    json_t *bl = json_pack("{s:s, s:b, s:b, s:b}", "type", "ByteLevel", "add_prefix_space", 0, "trim_offsets", 1,
                           "use_regex", 1);
    json_t *root =
        st == SR_OK ? json_pack("{s:s, s:n, s:n, s:o, s:n, s:O, s:O, s:O, s:{s:s, s:n, s:n, s:s, s:s, "
                                "s:b, s:b, s:b, s:O, s:O}}",
                                "version", "1.0", "truncation", "padding", "added_tokens", added, "normalizer",
                                "pre_tokenizer", bl, "post_processor", bl, "decoder", bl, "model", "type", "BPE",
                                "dropout", "unk_token", "continuing_subword_prefix", "", "end_of_word_suffix", "",
                                "fuse_unk", 0, "byte_fallback", 0, "ignore_merges", 0, "vocab", vocab, "merges", merges)
                    : NULL;
    if (!root)
        json_decref(added);
    if (st == SR_OK && !(ht->tokenizer_json = dump_json(root)))
        st = sr_error_oom("tokenizer.json");
    json_decref(root);
    json_decref(bl);
    json_decref(vocab);
    json_decref(merges);
    free(mtext);
    return st;
}

/* The run's tokenizer (the manifest's data record), checked against the
 * SHA-256 the run recorded, and what the export writes for it. */
static sr_status prepare_tokenizer(const sr_manifest *mf, hf_tok *ht) {
    memset(ht, 0, sizeof *ht);
    ht->doc_id = -1;
    if (!mf->has_data || !mf->data.tokenizer[0])
        return SR_OK;
    sr_tokenizer *tok = NULL;
    sr_status st = sr_tokenizer_load(&tok, mf->data.tokenizer, "the run's data.tokenizer");
    if (st != SR_OK)
        return sr_error_wrap(st, "ckpt export: the checkpoint's tokenizer");
    if (mf->data.tokenizer_sha256[0] && strcmp(sr_tokenizer_fingerprint(tok), mf->data.tokenizer_sha256) != 0) {
        st = sr_error(SR_ERR_DATA,
                      "ckpt export: the tokenizer %s changed since the run (SHA-256 %.12s... now, %.12s... "
                      "recorded): its ids would not be the model's (hint: put back the file the data was prepared "
                      "with)",
                      mf->data.tokenizer, sr_tokenizer_fingerprint(tok), mf->data.tokenizer_sha256);
        sr_tokenizer_free(tok);
        return st;
    }
    int64_t eot = sr_tokenizer_eot(tok);
    size_t len = 0;
    const unsigned char *b = eot >= 0 && eot < mf->dims.V ? sr_tokenizer_bytes(tok, eot, &len) : NULL;
    if (b && len < sizeof ht->doc) {
        ht->doc_id = eot;
        memcpy(ht->doc, b, len);
        ht->doc[len] = '\0';
    }
    const char *spec = sr_tokenizer_spec(tok), *colon = strchr(spec, ':');
    sr_fmt(ht->source, sizeof ht->source, "%s", colon && spec[0] != '/' ? colon + 1 : spec);
    switch (sr_tokenizer_format(tok)) {
    case SR_TOK_HF_JSON:
        st = from_tokenizer_json(ht);
        break;
    case SR_TOK_VOCAB_MERGES:
        st = from_vocab_merges(ht);
        break;
    case SR_TOK_TIKTOKEN:
        ht->left_out = "a tiktoken rank file has no exact tokenizer.json (tiktoken merges by the rank of the merged "
                       "token, tokenizers' BPE by the rank of the merge): none written; encode with tiktoken and "
                       "the rank file";
        break;
    default:
        ht->left_out = "an llm.c tokenizer file only decodes: no tokenizer.json written";
        break;
    }
    sr_tokenizer_free(tok);
    return st;
}

/* tokenizer_config.json and special_tokens_map.json: the document token
 * as bos, eos and pad (null without one), nothing added to text. */
static sr_status write_tokenizer_files(const hf_tok *ht, const char *dir, int T) {
    char path[PATH_MAX];
    bytes_ctx x = {(const unsigned char *)ht->tokenizer_json, strlen(ht->tokenizer_json)};
    sr_fmt(path, sizeof path, "%s/tokenizer.json", dir);
    sr_status st = sr_fsio_atomic_write_own(path, write_bytes, &x);
    json_t *doc = ht->doc_id >= 0 ? json_string(ht->doc) : json_null();
    json_t *cfg =
        json_pack("{s:s, s:b, s:b, s:O, s:O, s:O, s:n, s:I, s:b}", "tokenizer_class", "PreTrainedTokenizerFast",
                  "add_bos_token", 0, "add_eos_token", 0, "bos_token", doc, "eos_token", doc, "pad_token", doc,
                  "unk_token", "model_max_length", (json_int_t)T, "clean_up_tokenization_spaces", 0);
    json_t *map = ht->doc_id >= 0 ? json_pack("{s:O, s:O, s:O}", "bos_token", doc, "eos_token", doc, "pad_token", doc)
                                  : json_object();
    char *t1 = dump_json(cfg), *t2 = dump_json(map);
    if (st == SR_OK && (!t1 || !t2))
        st = sr_error_oom("tokenizer_config.json");
    bytes_ctx x1 = {(const unsigned char *)t1, t1 ? strlen(t1) : 0},
              x2 = {(const unsigned char *)t2, t2 ? strlen(t2) : 0};
    sr_fmt(path, sizeof path, "%s/tokenizer_config.json", dir);
    if (st == SR_OK)
        st = sr_fsio_atomic_write_own(path, write_bytes, &x1);
    sr_fmt(path, sizeof path, "%s/special_tokens_map.json", dir);
    if (st == SR_OK)
        st = sr_fsio_atomic_write_own(path, write_bytes, &x2);
    free(t1);
    free(t2);
    json_decref(cfg);
    json_decref(map);
    json_decref(doc);
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
    hf_tok ht = {.doc_id = -1};
    if (fmt == SR_EXPORT_HF) /* before anything is written: a changed tokenizer is refused */
        st = prepare_tokenizer(&mf, &ht);
    bool known = mf.has_data && mf.data.tokenizer[0];
    char *cfg = st == SR_OK && fmt == SR_EXPORT_HF ? render_config(&mf, used, ht.doc_id, known) : NULL;
    if (st == SR_OK && fmt == SR_EXPORT_HF && !cfg)
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
    if (st == SR_OK && cfg && ht.tokenizer_json)
        st = write_tokenizer_files(&ht, dir, mf.dims.T);
    if (st == SR_OK && ht.left_out)
        sr_log_warn("ckpt export: %s (%s)", ht.left_out, ht.source);
    const sr_family *f = sr_family_get(mf.dims.arch);
    char dims[512], tail[600] = "";
    if (cfg && ht.tokenizer_json)
        sr_fmt(tail, sizeof tail,
               "; load it with AutoModelForCausalLM and AutoTokenizer.from_pretrained (the run's tokenizer as "
               "tokenizer.json, %s%s%s)",
               ht.doc_id >= 0 ? "its document token " : "no document token: bos and eos null",
               ht.doc_id >= 0 ? ht.doc : "", ht.doc_id >= 0 ? " as bos, eos and pad" : "");
    else if (cfg)
        snprintf(tail, sizeof tail, "; load it with %s.from_pretrained (%s)", f->hf_class,
                 ht.left_out ? "no tokenizer.json: see the warning" : "the job named no tokenizer: none is written");
    if (st == SR_OK)
        fprintf(out, "shardrun: wrote %s%s: %zu fp32 parameters under Hugging Face %s names (%s), step %lld%s\n",
                stpath, cfg ? " and config.json" : "", model.n_params_real, f->display,
                sr_model_dims_text(&mf.dims, dims, sizeof dims), (long long)mf.step, tail);
    free(cfg);
    hf_tok_free(&ht);
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
