/* safetensors.c — the safetensors header reader and writer; see
 * safetensors.h. */
#include "srconfig.h"

#include "safetensors.h"

#include <errno.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "fsio.h"
#include "mem.h"

static const struct {
    const char *name;
    size_t size;
} dtypes[SR_ST_NDTYPES] = {
    [SR_ST_BOOL] = {"BOOL", 1},       [SR_ST_U8] = {"U8", 1},           [SR_ST_I8] = {"I8", 1},
    [SR_ST_F8_E5M2] = {"F8_E5M2", 1}, [SR_ST_F8_E4M3] = {"F8_E4M3", 1}, [SR_ST_I16] = {"I16", 2},
    [SR_ST_U16] = {"U16", 2},         [SR_ST_F16] = {"F16", 2},         [SR_ST_BF16] = {"BF16", 2},
    [SR_ST_I32] = {"I32", 4},         [SR_ST_U32] = {"U32", 4},         [SR_ST_F32] = {"F32", 4},
    [SR_ST_F64] = {"F64", 8},         [SR_ST_I64] = {"I64", 8},         [SR_ST_U64] = {"U64", 8},
};

size_t sr_st_dtype_size(sr_st_dtype dt) { return dt < SR_ST_NDTYPES ? dtypes[dt].size : 0; }
const char *sr_st_dtype_name(sr_st_dtype dt) { return dt < SR_ST_NDTYPES ? dtypes[dt].name : "?"; }

void sr_st_free(sr_st_header *h) {
    for (int i = 0; h->t && i < h->ntensors; i++)
        free(h->t[i].name);
    free(h->t);
    memset(h, 0, sizeof *h);
}

const sr_st_tensor *sr_st_find(const sr_st_header *h, const char *name) {
    for (int i = 0; i < h->ntensors; i++)
        if (strcmp(h->t[i].name, name) == 0)
            return &h->t[i];
    return NULL;
}

/* A non-negative JSON integer, or -1. */
static int64_t json_u63(const json_t *v) {
    if (!json_is_integer(v))
        return -1;
    json_int_t x = json_integer_value(v);
    return x < 0 ? -1 : (int64_t)x;
}

static sr_status parse_tensor(const char *path, const char *name, const json_t *v, uint64_t data_len, sr_st_tensor *t) {
    if (!json_is_object(v))
        return sr_error(SR_ERR_DATA,
                        "%s: safetensors header: tensor '%s': expected an object with dtype, shape and "
                        "data_offsets",
                        path, name);
    const json_t *dt = json_object_get(v, "dtype"), *shape = json_object_get(v, "shape"),
                 *off = json_object_get(v, "data_offsets");
    if (!json_is_string(dt) || !json_is_array(shape) || !json_is_array(off) || json_array_size(off) != 2)
        return sr_error(SR_ERR_DATA,
                        "%s: safetensors header: tensor '%s': expected \"dtype\" (a string), \"shape\" (a list) and "
                        "\"data_offsets\" ([begin, end])",
                        path, name);
    int k = 0;
    while (k < SR_ST_NDTYPES && strcmp(dtypes[k].name, json_string_value(dt)) != 0)
        k++;
    char shown[48];
    if (k == SR_ST_NDTYPES)
        return sr_error(SR_ERR_DATA,
                        "%s: safetensors header: tensor '%s': unknown dtype '%s' (expected one of BOOL, U8, I8, "
                        "F8_E5M2, F8_E4M3, I16, U16, F16, BF16, I32, U32, F32, F64, I64, U64)",
                        path, name, sr_escape(json_string_value(dt), shown, sizeof shown));
    t->dtype = (sr_st_dtype)k;
    size_t nd = json_array_size(shape);
    if (nd > SR_ST_MAX_DIMS)
        return sr_error(SR_ERR_DATA, "%s: safetensors header: tensor '%s' has %zu dimensions (at most %d supported)",
                        path, name, nd, SR_ST_MAX_DIMS);
    t->ndim = (int)nd;
    uint64_t numel = 1;
    for (size_t i = 0; i < nd; i++) {
        int64_t s = json_u63(json_array_get(shape, i));
        if (s < 0)
            return sr_error(SR_ERR_DATA,
                            "%s: safetensors header: tensor '%s': shape[%zu] is not a non-negative "
                            "integer",
                            path, name, i);
        t->shape[i] = s;
        if (s != 0 && numel > UINT64_MAX / 8 / (uint64_t)s)
            return sr_error(SR_ERR_DATA, "%s: safetensors header: tensor '%s': the shape overflows", path, name);
        numel *= (uint64_t)s;
    }
    t->numel = numel;
    int64_t b = json_u63(json_array_get(off, 0)), e = json_u63(json_array_get(off, 1));
    if (b < 0 || e < 0 || b > e)
        return sr_error(SR_ERR_DATA,
                        "%s: safetensors header: tensor '%s': data_offsets must be two integers 0 <= begin <= end",
                        path, name);
    t->begin = (uint64_t)b;
    t->end = (uint64_t)e;
    if (t->end > data_len)
        return sr_error(SR_ERR_DATA,
                        "%s: safetensors header: tensor '%s': data_offsets [%llu, %llu] run past the end of the "
                        "file's data (%llu bytes; truncated file?)",
                        path, name, (unsigned long long)t->begin, (unsigned long long)t->end,
                        (unsigned long long)data_len);
    if (t->end - t->begin != numel * dtypes[k].size)
        return sr_error(SR_ERR_DATA,
                        "%s: safetensors header: tensor '%s': data_offsets hold %llu bytes but shape and dtype %s "
                        "need %llu",
                        path, name, (unsigned long long)(t->end - t->begin), dtypes[k].name,
                        (unsigned long long)(numel * dtypes[k].size));
    return SR_OK;
}

static int by_begin(const void *a, const void *b) {
    const sr_st_tensor *x = *(const sr_st_tensor *const *)a, *y = *(const sr_st_tensor *const *)b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

/* The tensors tile [0, data_len): sorted by begin, each starts where the
 * previous one ended. */
static sr_status check_tiling(const char *path, sr_st_header *h) {
    sr_st_tensor **order = sr_malloc(sizeof *order * (size_t)(h->ntensors ? h->ntensors : 1));
    if (!order)
        return sr_error_oom("the safetensors header");
    for (int i = 0; i < h->ntensors; i++)
        order[i] = &h->t[i];
    qsort(order, (size_t)h->ntensors, sizeof *order, by_begin);
    sr_status st = SR_OK;
    uint64_t at = 0;
    for (int i = 0; i < h->ntensors && st == SR_OK; i++) {
        char a[160], b[160];
        if (order[i]->begin < at)
            st = sr_error(SR_ERR_DATA, "%s: safetensors header: tensor '%s' (bytes %llu..%llu) overlaps tensor '%s'",
                          path, sr_escape(order[i]->name, a, sizeof a), (unsigned long long)order[i]->begin,
                          (unsigned long long)order[i]->end, sr_escape(order[i - 1]->name, b, sizeof b));
        else if (order[i]->begin > at)
            st = sr_error(SR_ERR_DATA,
                          "%s: safetensors header: bytes %llu..%llu of the data belong to no tensor (a hole before "
                          "'%s')",
                          path, (unsigned long long)at, (unsigned long long)order[i]->begin,
                          sr_escape(order[i]->name, a, sizeof a));
        at = order[i]->end;
    }
    if (st == SR_OK && at != h->data_len)
        st = sr_error(SR_ERR_DATA,
                      "%s: safetensors header: the tensors end at byte %llu of the data but the file holds %llu", path,
                      (unsigned long long)at, (unsigned long long)h->data_len);
    free(order);
    return st;
}

static sr_status parse_metadata(const char *path, const json_t *v, sr_st_header *h) {
    if (!json_is_object(v))
        return sr_error(SR_ERR_DATA, "%s: safetensors header: __metadata__ must be an object of strings", path);
    const char *k;
    json_t *s;
    json_object_foreach((json_t *)v, k, s) {
        char shown[96];
        if (!json_is_string(s))
            return sr_error(SR_ERR_DATA, "%s: safetensors header: __metadata__.%s is not a string", path,
                            sr_escape(k, shown, sizeof shown));
        if (strcmp(k, "format") == 0)
            snprintf(h->format, sizeof h->format, "%s", json_string_value(s));
    }
    return SR_OK;
}

/* The JSON header text[0, n) of a file whose data area holds data_len
 * bytes. */
static sr_status parse(const char *text, size_t n, uint64_t data_len, const char *path, sr_st_header *out) {
    memset(out, 0, sizeof *out);
    out->data_start = 8 + (uint64_t)n;
    out->data_len = data_len;
    json_error_t jerr;
    json_t *root = json_loadb(text, n, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        return sr_error(SR_ERR_DATA, "%s: safetensors header (JSON) line %d column %d: %s", path, jerr.line,
                        jerr.column, jerr.text);
    sr_status st = SR_OK;
    if (!json_is_object(root))
        st = sr_error(SR_ERR_DATA, "%s: safetensors header: expected a JSON object of tensors", path);
    size_t cap = st == SR_OK ? json_object_size(root) : 0;
    if (st == SR_OK && !(out->t = sr_calloc(cap ? cap : 1, sizeof *out->t)))
        st = sr_error_oom("the safetensors header");
    const char *key;
    json_t *v;
    if (st == SR_OK)
        json_object_foreach(root, key, v) {
            if (strcmp(key, "__metadata__") == 0) {
                st = parse_metadata(path, v, out);
            } else if (!key[0]) {
                st = sr_error(SR_ERR_DATA, "%s: safetensors header: a tensor with an empty name", path);
            } else {
                sr_st_tensor *t = &out->t[out->ntensors];
                if (!(t->name = sr_strdup(key)))
                    st = sr_error_oom("the safetensors header");
                else
                    out->ntensors++;
                char shown[160]; /* the name as messages print it */
                if (st == SR_OK)
                    st = parse_tensor(path, sr_escape(key, shown, sizeof shown), v, data_len, t);
            }
            if (st != SR_OK)
                break;
        }
    json_decref(root);
    if (st == SR_OK)
        st = check_tiling(path, out);
    if (st != SR_OK)
        sr_st_free(out);
    return st;
}

static uint64_t le64(const unsigned char *b) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | b[i];
    return v;
}

static sr_status check_length(uint64_t n, uint64_t file_size, const char *path) {
    if (file_size < 8)
        return sr_error(SR_ERR_DATA,
                        "%s: %llu bytes: too short for a safetensors file (an 8-byte header length, "
                        "then the header)",
                        path, (unsigned long long)file_size);
    if (n > SR_ST_MAX_HEADER)
        return sr_error(SR_ERR_DATA, "%s: the safetensors header length is %llu bytes; at most %u are accepted", path,
                        (unsigned long long)n, SR_ST_MAX_HEADER);
    if (n > file_size - 8)
        return sr_error(SR_ERR_DATA,
                        "%s: the safetensors header length (%llu bytes) runs past the end of the file (%llu bytes)",
                        path, (unsigned long long)n, (unsigned long long)file_size);
    return SR_OK;
}

sr_status sr_st_parse_image(const unsigned char *img, size_t size, const char *path, sr_st_header *out) {
    memset(out, 0, sizeof *out);
    uint64_t n = size >= 8 ? le64(img) : 0;
    sr_status st = check_length(n, size, path);
    return st != SR_OK ? st : parse((const char *)img + 8, (size_t)n, size - 8 - n, path, out);
}

sr_status sr_st_read_header(int fd, uint64_t file_size, const char *path, sr_st_header *out) {
    memset(out, 0, sizeof *out);
    unsigned char b[8] = {0};
    if (file_size >= 8 && sr_fsio_pread_all(fd, b, 8, 0) != 0)
        return sr_error(SR_ERR_NOINPUT, "%s: cannot read: %s", path, strerror(errno));
    uint64_t n = le64(b);
    sr_status st = check_length(n, file_size, path);
    if (st != SR_OK)
        return st;
    char *text = sr_malloc((size_t)n + 1);
    if (!text)
        return sr_error_oom("the safetensors header");
    if (sr_fsio_pread_all(fd, text, (size_t)n, 8) != 0) {
        st = sr_error(SR_ERR_NOINPUT, "%s: cannot read the safetensors header: %s", path, strerror(errno));
        free(text);
        return st;
    }
    st = parse(text, (size_t)n, file_size - 8 - n, path, out);
    free(text);
    return st;
}

sr_status sr_st_render_header(const sr_st_entry *e, int n, char **out, size_t *len) {
    *out = NULL;
    *len = 0;
    json_t *root = json_object(), *meta = json_object();
    bool ok = root && meta && json_object_set_new(meta, "format", json_string("pt")) == 0 &&
              json_object_set_new(root, "__metadata__", meta) == 0;
    if (!ok)
        json_decref(meta);
    uint64_t at = 0;
    for (int i = 0; i < n && ok; i++) {
        json_t *shape = json_array(), *off = json_array();
        uint64_t numel = 1;
        for (int d = 0; d < e[i].ndim && shape; d++) {
            numel *= (uint64_t)e[i].shape[d];
            if (json_array_append_new(shape, json_integer(e[i].shape[d])) != 0)
                ok = false;
        }
        uint64_t end = at + numel * sr_st_dtype_size(e[i].dtype);
        if (off && (json_array_append_new(off, json_integer((json_int_t)at)) != 0 ||
                    json_array_append_new(off, json_integer((json_int_t)end)) != 0))
            ok = false;
        /* pack steals the references ("o"), also when it fails */
        json_t *t = ok && shape && off ? json_pack("{s:s, s:o, s:o}", "dtype", sr_st_dtype_name(e[i].dtype), "shape",
                                                   shape, "data_offsets", off)
                                       : (json_decref(shape), json_decref(off), NULL);
        ok = t && json_object_set_new(root, e[i].name, t) == 0;
        at = end;
    }
    /* insertion order is kept (jansson >= 2.8): the header lists the
     * tensors in file order, as people read it */
    char *text = ok ? json_dumps(root, JSON_COMPACT) : NULL;
    json_decref(root);
    if (!text)
        return sr_error_oom("the safetensors header");
    size_t tl = strlen(text), padded = (tl + 7) / 8 * 8;
    char *buf = sr_malloc(8 + padded);
    if (!buf) {
        free(text);
        return sr_error_oom("the safetensors header");
    }
    for (int i = 0; i < 8; i++)
        buf[i] = (char)((uint64_t)padded >> (8 * i) & 0xff);
    memcpy(buf + 8, text, tl);
    memset(buf + 8 + tl, ' ', padded - tl);
    free(text);
    *out = buf;
    *len = 8 + padded;
    return SR_OK;
}
