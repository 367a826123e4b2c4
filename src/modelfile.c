/* modelfile.c — safetensors and llm.c model files mapped onto the model;
 * see modelfile.h. */
#include "srconfig.h"

#include "modelfile.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config.h"
#include "dtype.h"
#include "fsio.h"
#include "hfnames.h"
#include "line.h"
#include "mem.h"
#include "safetensors.h"

#define LLMC_MAGIC 20240326
#define PIECE ((size_t)1 << 20) /* floats converted at a time */

float sr_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu, bits;
    if (exp == 0x1f) {
        bits = sign | 0x7f800000u | (mant << 13); /* inf, nan */
    } else if (exp) {
        bits = sign | ((exp + 112) << 23) | (mant << 13);
    } else if (!mant) {
        bits = sign;
    } else { /* subnormal: normalise */
        int e = -1;
        do {
            e++;
            mant <<= 1;
        } while (!(mant & 0x400u));
        bits = sign | ((uint32_t)(112 - e) << 23) | ((mant & 0x3ffu) << 13);
    }
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

static size_t esize(int dt) { return dt == SR_MF_F32 ? 4 : 2; }

static void widen(const unsigned char *src, int dt, size_t n, float *dst) {
    if (dt == SR_MF_F32) {
        memcpy(dst, src, n * sizeof(float)); /* little-endian hosts, as the formats */
        return;
    }
    for (size_t i = 0; i < n; i++) {
        uint16_t h = (uint16_t)(src[2 * i] | src[2 * i + 1] << 8);
        dst[i] = dt == SR_MF_BF16 ? sr_bf16_to_f32(h) : sr_f16_to_f32(h);
    }
}

void sr_modelfile_close(sr_modelfile *mf) {
    for (int k = 0; k < mf->nfiles; k++) {
        if (mf->fds && mf->fds[k] >= 0)
            close(mf->fds[k]);
        if (mf->paths)
            free(mf->paths[k]);
    }
    free(mf->fds);
    free(mf->paths);
    free(mf->sizes);
    free(mf->path);
    free(mf->pieces);
    free(mf->src);
    memset(mf, 0, sizeof *mf);
    mf->fd = -1;
}

/* "[a, b]" of a shape. */
static void shape_str(char *buf, size_t n, const int64_t *shape, int ndim) {
    sr_line l = sr_line_on(buf, n);
    sr_line_add(&l, "[");
    for (int i = 0; i < ndim; i++)
        sr_line_add(&l, "%s%lld", i ? ", " : "", (long long)shape[i]);
    sr_line_add(&l, "]");
}

static sr_status dims_hint(const sr_modelfile *mf, const char *key, const char *what) {
    char dims[512];
    return sr_error(SR_ERR_DATA,
                    "%s: %s: %s; the job's model is %s (hint: set the model keys to the weights' dims, e.g. "
                    "model.preset: gpt2-124m for GPT-2 small, or name the Hugging Face directory in model.init)",
                    key, mf->path, what, sr_model_dims_text(&mf->model->d, dims, sizeof dims));
}

/* h.<digits>.attn.bias or h.<digits>.attn.masked_bias: the causal-mask
 * buffers older transformers releases saved (never attn.c_attn.bias). */
static bool is_mask_buffer(const char *n) {
    if (strncmp(n, "h.", 2) != 0)
        return false;
    n += 2;
    if (*n < '0' || *n > '9')
        return false;
    while (*n >= '0' && *n <= '9')
        n++;
    return strcmp(n, ".attn.bias") == 0 || strcmp(n, ".attn.masked_bias") == 0;
}

/* The piece a file's tensor name is, with or without its prefix; -1:
 * none. */
static int find_piece(const sr_modelfile *mf, const char *name, bool *prefixed) {
    for (int i = 0; i < mf->npieces; i++) {
        const sr_hf_piece *p = &mf->pieces[i];
        if (strcmp(p->name, name) == 0 || (p->prefix_len && strcmp(p->name + p->prefix_len, name) == 0)) {
            *prefixed = strcmp(p->name, name) == 0 && p->prefix_len;
            return i;
        }
    }
    return -1;
}

static int mf_dtype(sr_st_dtype dt) {
    return dt == SR_ST_F32 ? SR_MF_F32 : dt == SR_ST_BF16 ? SR_MF_BF16 : dt == SR_ST_F16 ? SR_MF_F16 : -1;
}

/* What mapping the files found, for the log line. */
typedef struct {
    char *from; /* per piece: found */
    int mapped, prefixed, skipped;
    bool seen[SR_ST_NDTYPES];
} map_state;

/* File k's tensors onto the model's pieces. */
/* A tied model's lm_head.weight, file k's tensor t (its data from
 * data_start): kept as the head's source, checked against the model's
 * unpadded embedding shape. */
static sr_status map_tied_head(sr_modelfile *mf, int k, const char *key, uint64_t data_start, const sr_st_tensor *t,
                               map_state *ms) {
    const sr_model *m = mf->model;
    int dt = mf_dtype(t->dtype);
    int64_t want[2] = {m->d.V, m->d.C};
    char fs[128], ws[128], what[400];
    shape_str(fs, sizeof fs, t->shape, t->ndim);
    shape_str(ws, sizeof ws, want, 2);
    sr_status st = SR_OK;
    if (t->ndim != 2 || t->shape[0] != want[0] || t->shape[1] != want[1]) {
        snprintf(what, sizeof what, "tensor 'lm_head.weight' is %s in the file; this model needs %s", fs, ws);
        st = dims_hint(mf, key, what);
    } else if (dt < 0) {
        st = sr_error(SR_ERR_DATA, "%s: %s: tensor 'lm_head.weight' has dtype %s; expected F32, BF16 or F16", key,
                      mf->paths[k], sr_st_dtype_name(t->dtype));
    }
    mf->has_head = true;
    mf->head = (sr_mf_source){k, data_start + t->begin, dt, false, (uint64_t)m->d.V};
    ms->seen[t->dtype] = true;
    return st;
}

static sr_status map_st_file(sr_modelfile *mf, int k, const char *key, map_state *ms) {
    sr_st_header h;
    const char *fpath = mf->paths[k];
    sr_status st = sr_st_read_header(mf->fds[k], mf->sizes[k], fpath, &h);
    if (st != SR_OK)
        return sr_error_wrap(st, "%s", key);
    const sr_model *m = mf->model;
    const sr_family *f = sr_family_get(m->d.arch);
    int wpe = f->learned_positions ? m->d.L * m->n_block + SR_WPE : -1;
    size_t pl = strlen(f->hf_prefix);
    for (int j = 0; j < h.ntensors && st == SR_OK; j++) {
        const sr_st_tensor *t = &h.t[j];
        char fs[128], ws[128], what[400];
        shape_str(fs, sizeof fs, t->shape, t->ndim);
        bool pre = false;
        int i = find_piece(mf, t->name, &pre);
        if (i < 0 && f->hf_mask_buffers &&
            is_mask_buffer(strncmp(t->name, f->hf_prefix, pl) == 0 ? t->name + pl : t->name)) {
            ms->skipped++;
            continue;
        }
        int dt = mf_dtype(t->dtype);
        if (i < 0 && strcmp(t->name, "lm_head.weight") == 0) { /* a tied model's head */
            st = map_tied_head(mf, k, key, h.data_start, t, ms);
            continue;
        }
        if (i < 0) {
            char shown[160]; /* a name from the file, control characters escaped */
            st = sr_error(SR_ERR_DATA,
                          "%s: %s: unexpected tensor '%s': not part of this model (n_layer %d; %s names, e.g. %s)", key,
                          fpath, sr_escape(t->name, shown, sizeof shown), m->d.L, f->hf_class, f->hf_example);
            break;
        }
        const sr_hf_piece *p = &mf->pieces[i];
        if (ms->from[i]) {
            st = sr_error(SR_ERR_DATA,
                          "%s: %s: tensor '%s' appears twice (with and without its prefix, or in two "
                          "files)",
                          key, fpath, p->name);
            break;
        }
        if (dt < 0) {
            st = sr_error(SR_ERR_DATA, "%s: %s: tensor '%s' has dtype %s; expected F32, BF16 or F16", key, fpath,
                          t->name, sr_st_dtype_name(t->dtype));
            break;
        }
        int nd = p->ndim;
        bool is_wpe = p->tensor == wpe;
        bool ok = t->ndim == nd && t->shape[nd - 1] == p->shape[nd - 1] &&
                  (nd == 1 || (is_wpe ? t->shape[0] >= p->shape[0] : t->shape[0] == p->shape[0]));
        if (!ok) {
            shape_str(ws, sizeof ws, p->shape, nd);
            snprintf(what, sizeof what, "tensor '%s' is %s in the file; this model needs %s%s", t->name, fs, ws,
                     is_wpe ? " (at least seq_len rows)" : "");
            st = dims_hint(mf, key, what);
            break;
        }
        if (is_wpe)
            mf->wpe_rows = t->shape[0];
        ms->from[i] = 1;
        ms->mapped++;
        ms->prefixed += pre;
        ms->seen[t->dtype] = true;
        mf->src[i] = (sr_mf_source){k, h.data_start + t->begin, dt, p->transposed,
                                    p->transposed ? (uint64_t)p->rows : (uint64_t)(nd == 1 ? 1 : t->shape[0])};
    }
    sr_st_free(&h);
    return st;
}

static sr_status map_safetensors(sr_modelfile *mf, const char *key) {
    map_state ms = {sr_calloc((size_t)mf->npieces, 1), 0, 0, 0, {false}};
    sr_status st = ms.from ? SR_OK : sr_error_oom("the model file's tensor map");
    for (int k = 0; k < mf->nfiles && st == SR_OK; k++)
        st = map_st_file(mf, k, key, &ms);
    for (int i = 0; i < mf->npieces && st == SR_OK; i++)
        if (!ms.from[i]) {
            const sr_hf_piece *p = &mf->pieces[i];
            st =
                sr_error(SR_ERR_DATA, "%s: %s: no tensor '%s'%s%s%s for the model's %s (the file%s %d tensors)", key,
                         mf->path, p->name, p->prefix_len ? " (or '" : "", p->prefix_len ? p->name + p->prefix_len : "",
                         p->prefix_len ? "')" : "", mf->model->tensors[p->tensor].name,
                         mf->nfiles > 1 ? "s have" : " has", ms.mapped + ms.skipped + (mf->has_head ? 1 : 0));
        }
    if (st == SR_OK) {
        char dts[64] = "";
        sr_line l = SR_LINE(dts);
        for (int k = 0; k < SR_ST_NDTYPES; k++)
            if (ms.seen[k])
                sr_line_item(&l, "+", "%s", sr_st_dtype_name((sr_st_dtype)k));
        char files[32] = "";
        if (mf->nfiles > 1)
            snprintf(files, sizeof files, " in %d files", mf->nfiles);
        snprintf(mf->what, sizeof mf->what, "safetensors, %d tensors%s %s%s%s%s%s%s", ms.mapped, files, dts,
                 ms.prefixed ? ", names with the " : ", names without a prefix",
                 ms.prefixed ? sr_family_get(mf->model->d.arch)->hf_prefix : "", ms.prefixed ? " prefix" : "",
                 ms.skipped ? ", causal-mask buffers skipped" : "", mf->has_head ? ", lm_head tied" : "");
    }
    free(ms.from);
    return st;
}

static sr_status map_llmc(sr_modelfile *mf, const int32_t *hd, const char *key) {
    const sr_model *m = mf->model;
    const sr_model_dims *d = &m->d;
    if (!sr_family_get(d->arch)->llmc)
        return sr_error(SR_ERR_DATA,
                        "%s: %s: an llm.c model file holds a GPT-2, and this job's model is %s (hint: a Hugging Face "
                        "directory or .safetensors file of the model)",
                        key, mf->path, sr_family_get(d->arch)->name);
    if (hd[1] != 3 && hd[1] != 5)
        return sr_error(SR_ERR_DATA, "%s: %s: llm.c model file version %d; expected 3 (fp32) or 5 (bf16)", key,
                        mf->path, hd[1]);
    int dt = hd[1] == 3 ? SR_MF_F32 : SR_MF_BF16;
    int64_t maxT = hd[2], V = hd[3], L = hd[4], NH = hd[5], C = hd[6], Vp = hd[7];
    if (L != d->L || NH != d->NH || C != d->C || V != d->V || maxT < d->T || Vp < V) {
        char what[300];
        snprintf(what, sizeof what,
                 "the llm.c header says n_layer %lld, n_head %lld, n_embd %lld, vocab_size %lld (padded %lld), "
                 "max_seq_len %lld (at least seq_len needed)",
                 (long long)L, (long long)NH, (long long)C, (long long)V, (long long)Vp, (long long)maxT);
        return dims_hint(mf, key, what);
    }
    /* GPT-2's pieces are its tensors, in order */
    int root = d->L * SR_NBLOCK_TENSORS;
    uint64_t es = esize(dt), at = 1024;
    mf->src[root + SR_WTE] = (sr_mf_source){0, at, dt, false, (uint64_t)V};
    at += (uint64_t)Vp * (uint64_t)C * es;
    mf->src[root + SR_WPE] = (sr_mf_source){0, at, dt, false, (uint64_t)maxT};
    at += (uint64_t)maxT * (uint64_t)C * es;
    for (int k = 0; k < SR_NBLOCK_TENSORS; k++)
        for (int l = 0; l < d->L; l++) {
            const sr_tensor *t = &m->tensors[l * SR_NBLOCK_TENSORS + k];
            mf->src[l * SR_NBLOCK_TENSORS + k] = (sr_mf_source){0, at, dt, false, (uint64_t)t->rows};
            at += t->numel * es;
        }
    mf->src[root + SR_LNFW] = (sr_mf_source){0, at, dt, false, 1};
    at += (uint64_t)C * es;
    mf->src[root + SR_LNFB] = (sr_mf_source){0, at, dt, false, 1};
    at += (uint64_t)C * es;
    if (at != mf->size)
        return sr_error(SR_ERR_DATA,
                        "%s: %s: an llm.c model file of these dims holds %llu bytes; this one has %llu "
                        "(truncated or not a model file)",
                        key, mf->path, (unsigned long long)at, (unsigned long long)mf->size);
    mf->wpe_rows = maxT;
    snprintf(mf->what, sizeof mf->what, "llm.c model file version %d (%s)", hd[1], hd[1] == 3 ? "fp32" : "bf16");
    return SR_OK;
}

/* Adds one file to mf (opened read-only). */
static sr_status add_file(sr_modelfile *mf, const char *path, const char *key) {
    int k = mf->nfiles;
    int *fds = realloc(mf->fds, (size_t)(k + 1) * sizeof *fds);
    if (fds)
        mf->fds = fds;
    char **paths = fds ? realloc(mf->paths, (size_t)(k + 1) * sizeof *paths) : NULL;
    if (paths)
        mf->paths = paths;
    uint64_t *sizes = paths ? realloc(mf->sizes, (size_t)(k + 1) * sizeof *sizes) : NULL;
    if (sizes)
        mf->sizes = sizes;
    if (!sizes)
        return sr_error_oom("the model files");
    mf->fds[k] = -1;
    mf->paths[k] = sr_strdup(path);
    mf->nfiles = k + 1;
    if (!mf->paths[k])
        return sr_error_oom("the model files");
    struct stat sb;
    char what[64];
    snprintf(what, sizeof what, "%s", key);
    sr_status st = sr_fsio_open_input(path, what, false,
                                      "a .safetensors file, an llm.c model file or a Hugging Face "
                                      "directory",
                                      &mf->fds[k], &sb);
    if (st != SR_OK)
        return st;
    mf->sizes[k] = (uint64_t)sb.st_size;
    mf->size += mf->sizes[k];
    return SR_OK;
}

/* DIR/model.safetensors.index.json's shards, in order of first mention
 * in its weight_map (each once), or DIR/model.safetensors. */
static sr_status add_dir(sr_modelfile *mf, const char *dir, const char *key) {
    char ip[PATH_MAX], fp[PATH_MAX];
    struct stat sb;
    sr_fmt(ip, sizeof ip, "%s/model.safetensors.index.json", dir);
    if (stat(ip, &sb) != 0) {
        sr_fmt(fp, sizeof fp, "%s/model.safetensors", dir);
        return add_file(mf, fp, key);
    }
    int fd;
    sr_status st = sr_fsio_open_input(ip, "the sharded model's index", false, NULL, &fd, &sb);
    if (st != SR_OK)
        return sr_error_wrap(st, "%s", key);
    json_error_t jerr;
    json_t *j = json_loadfd(fd, JSON_REJECT_DUPLICATES, &jerr);
    close(fd);
    if (!j)
        return sr_error(SR_ERR_DATA, "%s: %s:%d:%d: not JSON: %s", key, ip, jerr.line, jerr.column, jerr.text);
    json_t *wm = json_object_get(j, "weight_map");
    if (!wm || !json_is_object(wm)) {
        const char *is = !json_is_object(j)  ? "the file is not a JSON object"
                         : !wm               ? "it has no \"weight_map\""
                         : json_is_array(wm) ? "its \"weight_map\" is a list"
                                             : "its \"weight_map\" is not an object";
        json_decref(j);
        return sr_error(SR_ERR_DATA, "%s: %s: expected an object with a \"weight_map\" of tensor names to files; %s",
                        key, ip, is);
    }
    const char *name;
    json_t *v;
    json_object_foreach(wm, name, v) {
        const char *f = json_string_value(v);
        if (!f || !*f || strchr(f, '/') || strcmp(f, "..") == 0 || strcmp(f, ".") == 0) {
            char shown[160];
            st = sr_error(SR_ERR_DATA, "%s: %s: weight_map[\"%s\"] is not a file name in the directory", key, ip,
                          sr_escape(name, shown, sizeof shown));
            break;
        }
        sr_fmt(fp, sizeof fp, "%s/%s", dir, f);
        bool have = false;
        for (int k = 0; k < mf->nfiles && !have; k++)
            have = strcmp(mf->paths[k], fp) == 0;
        if (!have && (st = add_file(mf, fp, key)) != SR_OK)
            break;
    }
    if (st == SR_OK && mf->nfiles == 0)
        st = sr_error(SR_ERR_DATA, "%s: %s: the weight_map names no file", key, ip);
    json_decref(j);
    return st;
}

sr_status sr_modelfile_open(sr_modelfile *mf, const char *path, const sr_model *model, const char *key) {
    memset(mf, 0, sizeof *mf);
    mf->fd = -1;
    mf->model = model;
    mf->path = sr_strdup(path);
    mf->pieces = sr_calloc((size_t)model->n_tensors * SR_HF_MAX_PIECES, sizeof *mf->pieces);
    mf->src = sr_calloc((size_t)model->n_tensors * SR_HF_MAX_PIECES, sizeof *mf->src);
    if (!mf->path || !mf->pieces || !mf->src) {
        sr_modelfile_close(mf);
        return sr_error_oom("the model file's tensor map");
    }
    mf->npieces = sr_hf_pieces(model, mf->pieces);
    mf->emb = 0;
    for (int i = 0; i < mf->npieces; i++)
        if (model->tensors[mf->pieces[i].tensor].vocab) {
            mf->emb = i; /* the first vocabulary tensor is the embedding */
            break;
        }
    struct stat sb;
    bool dir = stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
    sr_status ost = dir ? add_dir(mf, path, key) : add_file(mf, path, key);
    if (ost != SR_OK) {
        sr_modelfile_close(mf);
        return ost;
    }
    mf->fd = mf->fds[0];
    int32_t hd[8] = {0};
    sr_status st;
    static const unsigned char zip[4] = {'P', 'K', 3, 4};
    bool head = mf->sizes[0] >= 4 && sr_fsio_pread_all(mf->fd, hd, mf->sizes[0] >= sizeof hd ? sizeof hd : 4, 0) == 0;
    if (head && memcmp(hd, zip, 4) == 0) {
        st = sr_error(SR_ERR_DATA,
                      "%s: %s: a zip file (PyTorch's pytorch_model.bin format), which is not read here (hint: save "
                      "the model as safetensors: model.save_pretrained(DIR, safe_serialization=True), or convert "
                      "it with the safetensors package)",
                      key, mf->paths[0]);
    } else if (!dir && head && hd[0] == LLMC_MAGIC && mf->size < 1024) {
        st = sr_error(SR_ERR_DATA,
                      "%s: %s: truncated llm.c file: %llu bytes, shorter than its 1024-byte header (hint: copy the "
                      "file again)",
                      key, path, (unsigned long long)mf->size);
    } else if (!dir && head && mf->size >= 1024 && hd[0] == LLMC_MAGIC) {
        mf->kind = SR_MODELFILE_LLMC;
        st = map_llmc(mf, hd, key);
    } else {
        mf->kind = SR_MODELFILE_SAFETENSORS;
        st = map_safetensors(mf, key);
    }
    if (st == SR_OK && mf->wpe_rows > model->d.T) {
        char more[80];
        snprintf(more, sizeof more, "; wpe has %lld rows, the first %d used", (long long)mf->wpe_rows, model->d.T);
        snprintf(mf->what + strlen(mf->what), sizeof mf->what - strlen(mf->what), "%s", more);
    }
    if (st != SR_OK)
        sr_modelfile_close(mf);
    return st;
}

/* Elements [first, first + n) of a tensor's storage, widened. */
static sr_status read_run(const sr_modelfile *mf, const sr_mf_source *s, uint64_t first, size_t n, unsigned char *buf,
                          float *dst) {
    size_t es = esize(s->dtype);
    errno = 0;
    if (sr_fsio_pread_all(mf->fds[s->file], buf, n * es, s->offset + first * es) != 0)
        return sr_error(SR_ERR_DATA, "%s: read failed at byte %llu: %s", mf->paths[s->file],
                        (unsigned long long)(s->offset + first * es),
                        errno ? strerror(errno) : "unexpected end of file");
    widen(buf, s->dtype, n, dst);
    return SR_OK;
}

/* Elements [a, b) of tensor i in the model's layout. */
static sr_status read_tensor(const sr_modelfile *mf, const sr_mf_source *s, const sr_tensor *t, uint64_t a, uint64_t b,
                             unsigned char *buf, float *tmp, float *dst) {
    uint64_t cols = (uint64_t)t->cols;
    sr_status st = SR_OK;
    if (!s->transposed) {
        uint64_t valid = s->file_rows * cols, stop = b < valid ? b : valid;
        for (uint64_t e = a; e < stop && st == SR_OK; e += PIECE) {
            size_t n = (size_t)(stop - e < PIECE ? stop - e : PIECE);
            st = read_run(mf, s, e, n, buf, dst + (e - a));
        }
        for (uint64_t e = a > valid ? a : valid; e < b; e++)
            dst[e - a] = 0.0f; /* the padded vocabulary */
        return st;
    }
    /* stored [cols][rows]: per block of model rows, one run per file row */
    uint64_t rows = (uint64_t)t->rows, rb_max = PIECE / cols ? PIECE / cols : 1;
    for (uint64_t rb = a / cols; rb * cols < b && st == SR_OK; rb += rb_max) {
        uint64_t re = rb + rb_max < rows ? rb + rb_max : rows, nr = re - rb;
        for (uint64_t c = 0; c < cols && st == SR_OK; c++)
            st = read_run(mf, s, c * rows + rb, (size_t)nr, buf, tmp + c * nr);
        uint64_t lo = a > rb * cols ? a : rb * cols, hi = b < re * cols ? b : re * cols;
        for (uint64_t e = lo; e < hi && st == SR_OK; e++)
            dst[e - a] = tmp[(e % cols) * nr + (e / cols - rb)];
    }
    return st;
}

sr_status sr_modelfile_read(const sr_modelfile *mf, size_t begin, size_t end, float *dst) {
    unsigned char *buf = sr_malloc(PIECE * sizeof(float));
    float *tmp = sr_malloc((PIECE + 65536) * sizeof(float));
    sr_status st = buf && tmp ? SR_OK : sr_error_oom("the model file's read buffer");
    const sr_model *m = mf->model;
    for (int i = 0; i < mf->npieces && st == SR_OK; i++) {
        /* the piece's elements: its rows, through the end of its tensor
         * for the last (the padded vocabulary, zero) */
        const sr_hf_piece *p = &mf->pieces[i];
        const sr_tensor *t = &m->tensors[p->tensor];
        bool last = i + 1 == mf->npieces || mf->pieces[i + 1].tensor != p->tensor;
        size_t cols = (size_t)t->cols, p0 = t->offset + (size_t)p->row0 * cols,
               p1 = last ? t->offset + t->numel : p0 + (size_t)p->rows * cols;
        size_t lo = begin > p0 ? begin : p0, hi = end < p1 ? end : p1;
        if (lo < hi)
            st = read_tensor(mf, &mf->src[i], t, lo - p0, hi - p0, buf, tmp, dst + (lo - begin));
        /* a NaN or infinity would poison every rank's first step: refused
         * here, naming where it is */
        for (size_t e = lo; e < hi && st == SR_OK; e++)
            if (!isfinite(dst[e - begin]))
                st = sr_error(SR_ERR_DATA,
                              "%s: tensor %s holds %s at element %zu; expected finite weights (hint: the file is "
                              "damaged or from a diverged run)",
                              mf->path, t->name, isnan(dst[e - begin]) ? "NaN" : "an infinity", e - t->offset);
    }
    free(buf);
    free(tmp);
    return st;
}

sr_status sr_modelfile_head_tied(const sr_modelfile *mf, size_t begin, size_t end, bool *equal) {
    *equal = true;
    if (!mf->has_head)
        return SR_OK;
    const sr_model *m = mf->model;
    const sr_tensor *t = &m->tensors[mf->pieces[mf->emb].tensor];
    size_t valid = (size_t)m->d.V * (size_t)t->cols;
    if (end <= t->offset || begin >= t->offset + valid)
        return SR_OK; /* [begin, end) holds none of the embedding's real rows */
    size_t lo = begin > t->offset ? begin - t->offset : 0, hi = end < t->offset + valid ? end - t->offset : valid;
    unsigned char *buf = sr_malloc(PIECE * sizeof(float));
    float *x = sr_malloc(PIECE * sizeof(float)), *y = sr_malloc(PIECE * sizeof(float));
    sr_status st = buf && x && y ? SR_OK : sr_error_oom("the model file's read buffer");
    for (size_t e = lo; e < hi && st == SR_OK && *equal; e += PIECE) {
        size_t n = hi - e < PIECE ? hi - e : PIECE;
        st = read_run(mf, &mf->src[mf->emb], e, n, buf, x);
        if (st == SR_OK)
            st = read_run(mf, &mf->head, e, n, buf, y);
        if (st == SR_OK && memcmp(x, y, n * sizeof(float)) != 0)
            *equal = false;
    }
    free(buf);
    free(x);
    free(y);
    return st;
}

/* Feeds file k's bytes [a, b) to the digest. */
static sr_status hash_range(const sr_modelfile *mf, int k, uint64_t a, uint64_t b, EVP_MD_CTX *ctx, unsigned char *buf,
                            size_t chunk) {
    for (uint64_t at = a; at < b; at += chunk) {
        size_t n = b - at < chunk ? (size_t)(b - at) : chunk;
        errno = 0;
        if (sr_fsio_pread_all(mf->fds[k], buf, n, at) != 0)
            return sr_error(SR_ERR_DATA, "%s: read failed at byte %llu: %s", mf->paths[k], (unsigned long long)at,
                            errno ? strerror(errno) : "unexpected end of file");
        if (EVP_DigestUpdate(ctx, buf, n) != 1)
            return sr_error(SR_ERR_INTERNAL, "SHA-256 of %s failed", mf->paths[k]);
    }
    return SR_OK;
}

/* The digest of every file in order: whole (sha256), or each file's size,
 * head and tail (fingerprint). */
static sr_status hash_files(const sr_modelfile *mf, bool whole, unsigned char md[32]) {
    enum { CHUNK = 4 << 20, MIB = 1 << 20 };
    unsigned char *buf = sr_malloc(CHUNK);
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    sr_status st =
        buf && ctx && EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) == 1 ? SR_OK : sr_error_oom("the model file's digest");
    for (int k = 0; k < mf->nfiles && st == SR_OK; k++) {
        uint64_t size = mf->sizes[k];
        if (whole) {
            st = hash_range(mf, k, 0, size, ctx, buf, CHUNK);
            continue;
        }
        uint64_t head = MIB;
        if (mf->kind == SR_MODELFILE_SAFETENSORS && size >= 8) {
            unsigned char b[8];
            uint64_t n = 0;
            if (sr_fsio_pread_all(mf->fds[k], b, 8, 0) == 0)
                for (int i = 7; i >= 0; i--)
                    n = n << 8 | b[i];
            if (n <= size - 8 && n + 8 > head)
                head = n + 8; /* the whole header, however long */
        }
        if (head > size)
            head = size;
        uint64_t tail = size > MIB ? size - MIB : 0;
        if (tail < head)
            tail = head;
        unsigned char size_le[8];
        for (int i = 0; i < 8; i++)
            size_le[i] = (unsigned char)(size >> (8 * i));
        if (EVP_DigestUpdate(ctx, size_le, sizeof size_le) != 1)
            st = sr_error(SR_ERR_INTERNAL, "SHA-256 of %s failed", mf->paths[k]);
        if (st == SR_OK)
            st = hash_range(mf, k, 0, head, ctx, buf, CHUNK);
        if (st == SR_OK)
            st = hash_range(mf, k, tail, size, ctx, buf, CHUNK);
    }
    unsigned int len = 0;
    if (st == SR_OK && EVP_DigestFinal_ex(ctx, md, &len) != 1)
        st = sr_error(SR_ERR_INTERNAL, "SHA-256 of %s failed", mf->path);
    EVP_MD_CTX_free(ctx);
    free(buf);
    return st;
}

sr_status sr_modelfile_sha256(const sr_modelfile *mf, char out[65]) {
    unsigned char md[32];
    sr_status st = hash_files(mf, true, md);
    if (st == SR_OK)
        sr_hex(md, 32, out);
    return st;
}

sr_status sr_modelfile_fingerprint(const sr_modelfile *mf, unsigned char out[32]) { return hash_files(mf, false, out); }

/* ------------------------------------------------------------------------ */
/* Hugging Face directories */

bool sr_modelfile_is_hf_dir(const char *dir) {
    char p[PATH_MAX];
    struct stat sb;
    sr_fmt(p, sizeof p, "%s/config.json", dir);
    if (lstat(p, &sb) != 0)
        return false; /* (anything of that name makes it one: reading it says what is wrong) */
    sr_fmt(p, sizeof p, "%s/manifest.yaml", dir);
    return stat(p, &sb) != 0;
}

sr_status sr_modelfile_hf_dir(const char *dir, sr_model_dims *d, char *weights, size_t weights_len) {
    char path[PATH_MAX];
    sr_fmt(path, sizeof path, "%s/config.json", dir);
    int fd;
    struct stat sb;
    sr_status st = sr_fsio_open_input(path, "the model's config.json", false, NULL, &fd, &sb);
    if (st != SR_OK)
        return st;
    json_error_t jerr;
    json_t *c = json_loadfd(fd, JSON_REJECT_DUPLICATES, &jerr);
    close(fd);
    if (!c || !json_is_object(c)) {
        json_decref(c);
        return sr_error(SR_ERR_DATA, "%s:%d:%d: not a JSON object (%s)", path, jerr.line, jerr.column,
                        c ? "another JSON value" : jerr.text);
    }
    *d = (sr_model_dims){0};
    const char *type = json_string_value(json_object_get(c, "model_type"));
    int arch = type ? sr_family_of_hf_type(type) : -1;
    if (arch >= 0) {
        st = sr_hf_config_read(arch, c, path, d);
    } else {
        char types[256], classes[256];
        sr_line lt = SR_LINE(types), lc = SR_LINE(classes);
        for (int a = 0; sr_family_names[a]; a++) {
            const sr_family *f = sr_family_get(a);
            bool last = !sr_family_names[a + 1];
            sr_line_item(&lt, last ? " and " : ", ", "%s (\"%s\")", f->display, f->hf_model_type);
            sr_line_item(&lc, last ? " or " : ", ", "%s", f->hf_class);
        }
        st = sr_error(SR_ERR_DATA,
                      "%s: model_type is %s%s%s; shardrun's families are %s (hint: a directory that "
                      "%s.save_pretrained, or shardrun ckpt export -o DIR/, wrote)",
                      path, type ? "\"" : "", type ? type : "missing", type ? "\"" : "", types, classes);
    }
    json_decref(c);
    if (st == SR_OK) {
        st = sr_config_check_model(d->L, d->NH, d->C, d->V, d->T);
        if (st != SR_OK)
            st = sr_error_wrap(SR_ERR_DATA, "%s", path);
    }
    if (st == SR_OK) {
        sr_model_dims_complete(d);
        sr_fmt(weights, weights_len, "%s", dir);
    }
    return st;
}
