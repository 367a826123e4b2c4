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
#include "mem.h"
#include "safetensors.h"

#define LLMC_MAGIC 20240326
#define PREFIX "transformer."
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
    if (mf->fd >= 0)
        close(mf->fd);
    free(mf->path);
    free(mf->src);
    memset(mf, 0, sizeof *mf);
    mf->fd = -1;
}

/* "[a, b]" of a shape. */
static void shape_str(char *buf, size_t n, const int64_t *shape, int ndim) {
    size_t k = (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < ndim && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (k < n)
        snprintf(buf + k, n - k, "]");
}

static sr_status dims_hint(const sr_modelfile *mf, const char *key, const char *what) {
    const sr_model_dims *d = &mf->model->d;
    return sr_error(SR_ERR_DATA,
                    "%s: %s: %s; the job's model has n_layer %d, n_head %d, n_embd %d, vocab_size %d, seq_len %d "
                    "(hint: set the model keys to the weights' dims, e.g. model.preset: gpt2-124m for GPT-2 small)",
                    key, mf->path, what, d->L, d->NH, d->C, d->V, d->T);
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

static int find_tensor(const sr_model *m, const char *name) {
    for (int i = 0; i < m->n_tensors; i++)
        if (strcmp(m->tensors[i].name, name) == 0)
            return i;
    return -1;
}

/* The shape a tensor has in a Hugging Face file, in the file's order. */
static int hf_shape(const sr_model *m, int i, int64_t *shape, bool *transposed) {
    const sr_tensor *t = &m->tensors[i];
    int root = m->d.L * SR_NBLOCK_TENSORS;
    *transposed = false;
    if (t->ndim == 1) {
        shape[0] = t->cols;
        return 1;
    }
    if (i == root + SR_WTE) {
        shape[0] = m->d.V;
        shape[1] = t->cols;
        return 2;
    }
    if (i == root + SR_WPE) {
        shape[0] = t->rows;
        shape[1] = t->cols;
        return 2;
    }
    *transposed = true; /* Conv1D: [in, out] */
    shape[0] = t->cols;
    shape[1] = t->rows;
    return 2;
}

static int mf_dtype(sr_st_dtype dt) {
    return dt == SR_ST_F32 ? SR_MF_F32 : dt == SR_ST_BF16 ? SR_MF_BF16 : dt == SR_ST_F16 ? SR_MF_F16 : -1;
}

static sr_status map_safetensors(sr_modelfile *mf, const char *key) {
    sr_st_header h;
    sr_status st = sr_st_read_header(mf->fd, mf->size, mf->path, &h);
    if (st != SR_OK)
        return sr_error_wrap(st, "%s", key);
    const sr_model *m = mf->model;
    int root = m->d.L * SR_NBLOCK_TENSORS, mapped = 0, prefixed = 0, skipped = 0;
    bool seen[SR_ST_NDTYPES] = {false};
    char *from = sr_calloc((size_t)m->n_tensors, 1);
    if (!from)
        st = sr_error_oom("the model file's tensor map");
    for (int k = 0; k < h.ntensors && st == SR_OK; k++) {
        const sr_st_tensor *t = &h.t[k];
        bool pre = strncmp(t->name, PREFIX, strlen(PREFIX)) == 0;
        const char *name = pre ? t->name + strlen(PREFIX) : t->name;
        char fs[128], ms[128];
        shape_str(fs, sizeof fs, t->shape, t->ndim);
        if (is_mask_buffer(name)) {
            skipped++;
            continue;
        }
        int dt = mf_dtype(t->dtype);
        if (strcmp(t->name, "lm_head.weight") == 0) {
            int64_t want[2] = {m->d.V, m->d.C};
            shape_str(ms, sizeof ms, want, 2);
            if (t->ndim != 2 || t->shape[0] != want[0] || t->shape[1] != want[1]) {
                char what[400];
                snprintf(what, sizeof what, "tensor 'lm_head.weight' is %s in the file; this model needs %s", fs, ms);
                st = dims_hint(mf, key, what);
            } else if (dt < 0) {
                st = sr_error(SR_ERR_DATA, "%s: %s: tensor 'lm_head.weight' has dtype %s; expected F32, BF16 or F16",
                              key, mf->path, sr_st_dtype_name(t->dtype));
            }
            mf->has_head = true;
            mf->head = (sr_mf_source){h.data_start + t->begin, dt, false, (uint64_t)m->d.V};
            seen[t->dtype] = true;
            continue;
        }
        int i = find_tensor(m, name);
        if (i < 0) {
            char shown[160]; /* a name from the file, control characters escaped */
            st = sr_error(SR_ERR_DATA,
                          "%s: %s: unexpected tensor '%s': not part of this model (n_layer %d: h.0 .. h.%d; GPT-2 "
                          "names, e.g. transformer.h.0.attn.c_attn.weight)",
                          key, mf->path, sr_escape(t->name, shown, sizeof shown), m->d.L, m->d.L - 1);
            break;
        }
        if (from[i]) {
            st = sr_error(SR_ERR_DATA, "%s: %s: tensor '%s' appears twice (with and without the '" PREFIX "' prefix)",
                          key, mf->path, name);
            break;
        }
        if (dt < 0) {
            st = sr_error(SR_ERR_DATA, "%s: %s: tensor '%s' has dtype %s; expected F32, BF16 or F16", key, mf->path,
                          t->name, sr_st_dtype_name(t->dtype));
            break;
        }
        int64_t want[2];
        bool tr;
        int nd = hf_shape(m, i, want, &tr);
        bool wpe = i == root + SR_WPE;
        bool ok = t->ndim == nd && t->shape[nd - 1] == want[nd - 1] &&
                  (nd == 1 || (wpe ? t->shape[0] >= want[0] : t->shape[0] == want[0]));
        if (!ok) {
            shape_str(ms, sizeof ms, want, nd);
            char what[400];
            snprintf(what, sizeof what, "tensor '%s' is %s in the file; this model needs %s%s", t->name, fs, ms,
                     wpe ? " (at least seq_len rows)" : "");
            st = dims_hint(mf, key, what);
            break;
        }
        if (wpe)
            mf->wpe_rows = t->shape[0];
        from[i] = 1;
        mapped++;
        prefixed += pre;
        seen[t->dtype] = true;
        mf->src[i] = (sr_mf_source){h.data_start + t->begin, dt, tr,
                                    tr ? (uint64_t)m->tensors[i].rows : (uint64_t)(nd == 1 ? 1 : t->shape[0])};
    }
    for (int i = 0; i < m->n_tensors && st == SR_OK; i++)
        if (!from[i])
            st = sr_error(SR_ERR_DATA,
                          "%s: %s: no tensor for the model's %s (looked for '" PREFIX "%s' and '%s'; the file has %d "
                          "tensors)",
                          key, mf->path, m->tensors[i].name, m->tensors[i].name, m->tensors[i].name, h.ntensors);
    if (st == SR_OK) {
        char dts[64] = "";
        for (int k = 0; k < SR_ST_NDTYPES; k++)
            if (seen[k])
                snprintf(dts + strlen(dts), sizeof dts - strlen(dts), "%s%s", dts[0] ? "+" : "",
                         sr_st_dtype_name((sr_st_dtype)k));
        snprintf(mf->what, sizeof mf->what, "safetensors, %d tensors %s%s%s%s", mapped, dts,
                 prefixed ? ", names with the " PREFIX " prefix" : ", names without a prefix",
                 skipped ? ", causal-mask buffers skipped" : "", mf->has_head ? ", lm_head tied" : "");
    }
    free(from);
    sr_st_free(&h);
    return st;
}

static sr_status map_llmc(sr_modelfile *mf, const int32_t *hd, const char *key) {
    const sr_model *m = mf->model;
    const sr_model_dims *d = &m->d;
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
    int root = d->L * SR_NBLOCK_TENSORS;
    uint64_t es = esize(dt), at = 1024;
    mf->src[root + SR_WTE] = (sr_mf_source){at, dt, false, (uint64_t)V};
    at += (uint64_t)Vp * (uint64_t)C * es;
    mf->src[root + SR_WPE] = (sr_mf_source){at, dt, false, (uint64_t)maxT};
    at += (uint64_t)maxT * (uint64_t)C * es;
    for (int k = 0; k < SR_NBLOCK_TENSORS; k++)
        for (int l = 0; l < d->L; l++) {
            const sr_tensor *t = &m->tensors[l * SR_NBLOCK_TENSORS + k];
            mf->src[l * SR_NBLOCK_TENSORS + k] = (sr_mf_source){at, dt, false, (uint64_t)t->rows};
            at += t->numel * es;
        }
    mf->src[root + SR_LNFW] = (sr_mf_source){at, dt, false, 1};
    at += (uint64_t)C * es;
    mf->src[root + SR_LNFB] = (sr_mf_source){at, dt, false, 1};
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

sr_status sr_modelfile_open(sr_modelfile *mf, const char *path, const sr_model *model, const char *key) {
    memset(mf, 0, sizeof *mf);
    mf->model = model;
    struct stat sb;
    char what[64];
    snprintf(what, sizeof what, "%s", key);
    sr_status ost = sr_fsio_open_input(path, what, false, "a .safetensors file or an llm.c model file", &mf->fd, &sb);
    if (ost != SR_OK) {
        sr_modelfile_close(mf);
        return ost;
    }
    mf->size = (uint64_t)sb.st_size;
    mf->path = sr_strdup(path);
    mf->src = sr_calloc((size_t)model->n_tensors, sizeof *mf->src);
    if (!mf->path || !mf->src) {
        sr_modelfile_close(mf);
        return sr_error_oom("the model file's tensor map");
    }
    int32_t hd[8] = {0};
    sr_status st;
    static const unsigned char zip[4] = {'P', 'K', 3, 4};
    bool head = mf->size >= 4 && sr_fsio_pread_all(mf->fd, hd, mf->size >= sizeof hd ? sizeof hd : 4, 0) == 0;
    if (head && memcmp(hd, zip, 4) == 0) {
        st = sr_error(SR_ERR_DATA,
                      "%s: %s: a zip file (PyTorch's pytorch_model.bin format), which is not read here (hint: save "
                      "the model as safetensors: model.save_pretrained(DIR, safe_serialization=True), or convert "
                      "it with the safetensors package)",
                      key, path);
    } else if (head && hd[0] == LLMC_MAGIC && mf->size < 1024) {
        st = sr_error(SR_ERR_DATA,
                      "%s: %s: truncated llm.c file: %llu bytes, shorter than its 1024-byte header (hint: copy the "
                      "file again)",
                      key, path, (unsigned long long)mf->size);
    } else if (head && mf->size >= 1024 && hd[0] == LLMC_MAGIC) {
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
    if (sr_fsio_pread_all(mf->fd, buf, n * es, s->offset + first * es) != 0)
        return sr_error(SR_ERR_DATA, "%s: read failed at byte %llu: %s", mf->path,
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
    for (int i = 0; i < m->n_tensors && st == SR_OK; i++) {
        const sr_tensor *t = &m->tensors[i];
        size_t lo = begin > t->offset ? begin : t->offset, hi = end < t->offset + t->numel ? end : t->offset + t->numel;
        if (lo < hi)
            st = read_tensor(mf, &mf->src[i], t, lo - t->offset, hi - t->offset, buf, tmp, dst + (lo - begin));
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
    const sr_tensor *t = &m->tensors[m->d.L * SR_NBLOCK_TENSORS + SR_WTE];
    size_t valid = (size_t)m->d.V * (size_t)t->cols;
    if (end <= t->offset || begin >= t->offset + valid)
        return SR_OK; /* [begin, end) holds none of the embedding's real rows */
    size_t lo = begin > t->offset ? begin - t->offset : 0, hi = end < t->offset + valid ? end - t->offset : valid;
    unsigned char *buf = sr_malloc(PIECE * sizeof(float));
    float *x = sr_malloc(PIECE * sizeof(float)), *y = sr_malloc(PIECE * sizeof(float));
    sr_status st = buf && x && y ? SR_OK : sr_error_oom("the model file's read buffer");
    for (size_t e = lo; e < hi && st == SR_OK && *equal; e += PIECE) {
        size_t n = hi - e < PIECE ? hi - e : PIECE;
        st = read_run(mf, &mf->src[m->d.L * SR_NBLOCK_TENSORS + SR_WTE], e, n, buf, x);
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

/* SHA-256 of `prefix` (n bytes) then the file's bytes in ranges[0..nr)
 * (begin, end; in order) into md. */
static sr_status hash_ranges(const sr_modelfile *mf, const void *prefix, size_t n, const uint64_t (*ranges)[2], int nr,
                             unsigned char md[32]) {
    enum { CHUNK = 4 << 20 };
    unsigned char *buf = sr_malloc(CHUNK);
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    sr_status st =
        buf && ctx && EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) == 1 ? SR_OK : sr_error_oom("the model file's digest");
    if (st == SR_OK && n && EVP_DigestUpdate(ctx, prefix, n) != 1)
        st = sr_error(SR_ERR_INTERNAL, "SHA-256 of %s failed", mf->path);
    for (int r = 0; r < nr; r++)
        for (uint64_t at = ranges[r][0]; at < ranges[r][1] && st == SR_OK; at += CHUNK) {
            size_t k = ranges[r][1] - at < CHUNK ? (size_t)(ranges[r][1] - at) : CHUNK;
            errno = 0;
            if (sr_fsio_pread_all(mf->fd, buf, k, at) != 0)
                st = sr_error(SR_ERR_DATA, "%s: read failed at byte %llu: %s", mf->path, (unsigned long long)at,
                              errno ? strerror(errno) : "unexpected end of file");
            else if (EVP_DigestUpdate(ctx, buf, k) != 1)
                st = sr_error(SR_ERR_INTERNAL, "SHA-256 of %s failed", mf->path);
        }
    unsigned int len = 0;
    if (st == SR_OK && EVP_DigestFinal_ex(ctx, md, &len) != 1)
        st = sr_error(SR_ERR_INTERNAL, "SHA-256 of %s failed", mf->path);
    EVP_MD_CTX_free(ctx);
    free(buf);
    return st;
}

sr_status sr_modelfile_sha256(const sr_modelfile *mf, char out[65]) {
    uint64_t whole[1][2] = {{0, mf->size}};
    unsigned char md[32];
    sr_status st = hash_ranges(mf, NULL, 0, whole, 1, md);
    if (st == SR_OK)
        sr_hex(md, 32, out);
    return st;
}

sr_status sr_modelfile_fingerprint(const sr_modelfile *mf, unsigned char out[32]) {
    enum { MIB = 1 << 20 };
    uint64_t head = MIB;
    if (mf->kind == SR_MODELFILE_SAFETENSORS && mf->size >= 8) {
        unsigned char b[8];
        uint64_t n = 0;
        if (sr_fsio_pread_all(mf->fd, b, 8, 0) == 0)
            for (int i = 7; i >= 0; i--)
                n = n << 8 | b[i];
        if (n <= mf->size - 8 && n + 8 > head)
            head = n + 8; /* the whole header, however long */
    }
    if (head > mf->size)
        head = mf->size;
    uint64_t tail = mf->size > MIB ? mf->size - MIB : 0;
    if (tail < head)
        tail = head;
    uint64_t ranges[2][2] = {{0, head}, {tail, mf->size}};
    unsigned char size_le[8];
    for (int i = 0; i < 8; i++)
        size_le[i] = (unsigned char)(mf->size >> (8 * i));
    return hash_ranges(mf, size_le, sizeof size_le, ranges, 2, out);
}

/* ------------------------------------------------------------------------ */
/* Hugging Face GPT-2 directories */

bool sr_modelfile_is_hf_dir(const char *dir) {
    char p[PATH_MAX];
    struct stat sb;
    sr_fmt(p, sizeof p, "%s/config.json", dir);
    if (stat(p, &sb) != 0 || !S_ISREG(sb.st_mode))
        return false;
    sr_fmt(p, sizeof p, "%s/manifest.yaml", dir);
    return stat(p, &sb) != 0;
}

/* config.json's integer `name` (the first of two names present when alt
 * is not NULL) into *v. */
static sr_status hf_int(json_t *c, const char *path, const char *name, const char *alt, int *v) {
    json_t *j = json_object_get(c, name);
    if (!j && alt)
        j = json_object_get(c, alt);
    if (!j)
        return sr_error(SR_ERR_DATA, "%s: no \"%s\"%s%s%s (expected a GPT-2 config as transformers writes it)", path,
                        name, alt ? " or \"" : "", alt ? alt : "", alt ? "\"" : "");
    if (!json_is_integer(j) || json_integer_value(j) < 1 || json_integer_value(j) > 16777216)
        return sr_error(SR_ERR_DATA, "%s: \"%s\" is not a positive integer", path,
                        json_object_get(c, name) ? name : alt);
    *v = (int)json_integer_value(j);
    return SR_OK;
}

sr_status sr_modelfile_hf_dir(const char *dir, sr_model_dims *d, char *weights, size_t weights_len) {
    char path[PATH_MAX];
    sr_fmt(path, sizeof path, "%s/config.json", dir);
    FILE *f;
    sr_status st = sr_fsio_open_input_file(path, "the model's config.json", NULL, &f);
    if (st != SR_OK)
        return st;
    json_error_t jerr;
    json_t *c = json_loadf(f, JSON_REJECT_DUPLICATES, &jerr);
    fclose(f);
    if (!c || !json_is_object(c)) {
        json_decref(c);
        return sr_error(SR_ERR_DATA, "%s:%d:%d: not a JSON object (%s)", path, jerr.line, jerr.column,
                        c ? "another JSON value" : jerr.text);
    }
    *d = (sr_model_dims){0};
    const char *type = json_string_value(json_object_get(c, "model_type"));
    if (!type || strcmp(type, "gpt2") != 0)
        st = sr_error(SR_ERR_DATA,
                      "%s: model_type is %s%s%s, and shardrun's model is GPT-2 (hint: a directory that "
                      "GPT2LMHeadModel.save_pretrained or shardrun ckpt export -o DIR/ wrote)",
                      path, type ? "\"" : "", type ? type : "missing", type ? "\"" : "");
    if (st == SR_OK)
        st = hf_int(c, path, "n_layer", NULL, &d->L);
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
    json_decref(c);
    if (st == SR_OK) {
        st = sr_config_check_model(d->L, d->NH, d->C, d->V, d->T);
        if (st != SR_OK)
            st = sr_error_wrap(SR_ERR_DATA, "%s", path);
    }
    if (st == SR_OK)
        sr_fmt(weights, weights_len, "%s/model.safetensors", dir);
    return st;
}
