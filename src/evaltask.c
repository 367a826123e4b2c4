/* evaltask.c — multiple-choice task files, their sequences and scores;
 * see evaltask.h.  jansson parses each line; the bounded line reader and
 * the scoring are written here (a few lines over the tokenizer: no
 * library here scores HellaSwag). */
#include "srconfig.h"

#include "evaltask.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mem.h"

void sr_task_name(const char *path, char name[SR_TASK_NAME_MAX + 1]) {
    const char *b = strrchr(path, '/');
    b = b ? b + 1 : path;
    size_t n = strlen(b);
    if (n > 6 && strcmp(b + n - 6, ".jsonl") == 0)
        n -= 6;
    else if (n > 5 && strcmp(b + n - 5, ".json") == 0)
        n -= 5;
    if (n > SR_TASK_NAME_MAX)
        n = SR_TASK_NAME_MAX;
    for (size_t i = 0; i < n; i++) {
        char c = b[i];
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '.' ||
                  c == '-';
        name[i] = ok ? c : '_';
    }
    name[n] = '\0';
    if (n == 0)
        snprintf(name, SR_TASK_NAME_MAX + 1, "task");
}

static void item_free(sr_task_item *it) {
    free(it->ctx);
    for (int k = 0; k < it->nend; k++)
        free(it->endings[k]);
    free(it->endings);
}

void sr_task_free(sr_task *t) {
    for (int i = 0; t->items && i < t->n; i++)
        item_free(&t->items[i]);
    free(t->items);
    free(t->path);
    memset(t, 0, sizeof *t);
}

#define HINT "(hint: one JSON object a line: {\"ctx\": TEXT, \"endings\": [TEXT, ...], \"label\": INDEX})"

/* One line's item into *it, or the reason (SR_ERR_DATA) naming path:line. */
static sr_status parse_item(const char *path, long line, const char *buf, size_t len, sr_task_item *it) {
    json_error_t je;
    json_t *o = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &je);
    if (!o)
        return sr_error(SR_ERR_DATA, "%s:%ld:%d: not JSON: %s %s", path, line, je.column, je.text, HINT);
    sr_status st = SR_OK;
    json_t *ctx = json_object_get(o, "ctx"), *ends = json_object_get(o, "endings"), *lab = json_object_get(o, "label");
    memset(it, 0, sizeof *it);
    it->line = line;
    if (!json_is_object(o))
        st = sr_error(SR_ERR_DATA, "%s:%ld: expected a JSON object %s", path, line, HINT);
    else if (!json_is_string(ctx))
        st = sr_error(SR_ERR_DATA, "%s:%ld: \"ctx\" %s; expected a string %s", path, line,
                      ctx ? "is not a string" : "is missing", HINT);
    else if (json_string_length(ctx) == 0)
        st =
            sr_error(SR_ERR_DATA, "%s:%ld: \"ctx\" is empty: an ending needs a context to be scored after", path, line);
    else if (!json_is_array(ends) || json_array_size(ends) < 2 || json_array_size(ends) > SR_TASK_ENDINGS_MAX)
        st = sr_error(SR_ERR_DATA, "%s:%ld: \"endings\" %s; expected a list of 2 to %d strings %s", path, line,
                      !ends                  ? "is missing"
                      : !json_is_array(ends) ? "is not a list"
                                             : "has the wrong length",
                      SR_TASK_ENDINGS_MAX, HINT);
    else if (!json_is_integer(lab) || json_integer_value(lab) < 0 ||
             json_integer_value(lab) >= (json_int_t)json_array_size(ends))
        st = sr_error(SR_ERR_DATA,
                      "%s:%ld: \"label\" %s; expected an integer from 0 to %zu (an index into \"endings\")", path, line,
                      !lab                    ? "is missing"
                      : !json_is_integer(lab) ? "is not an integer"
                                              : "is out of range",
                      json_array_size(ends) - 1);
    for (size_t k = 0; st == SR_OK && k < json_array_size(ends); k++) {
        json_t *e = json_array_get(ends, k);
        if (!json_is_string(e))
            st = sr_error(SR_ERR_DATA, "%s:%ld: \"endings\"[%zu] is not a string %s", path, line, k, HINT);
        else if (json_string_length(e) == 0)
            st =
                sr_error(SR_ERR_DATA, "%s:%ld: \"endings\"[%zu] is empty: an empty ending has no likelihood to compare",
                         path, line, k);
    }
    if (st == SR_OK) {
        it->label = (int)json_integer_value(lab);
        it->nend = 0;
        it->ctx = sr_strdup(json_string_value(ctx));
        it->endings = sr_calloc(json_array_size(ends), sizeof(char *));
        if (!it->ctx || !it->endings)
            st = sr_error_oom("a task item");
        for (size_t k = 0; st == SR_OK && k < json_array_size(ends); k++) {
            if (!(it->endings[k] = sr_strdup(json_string_value(json_array_get(ends, k)))))
                st = sr_error_oom("a task item");
            else
                it->nend++;
        }
        /* strings with a NUL inside would be cut: refused */
        if (st == SR_OK && strlen(it->ctx) != json_string_length(ctx))
            st = sr_error(SR_ERR_DATA, "%s:%ld: \"ctx\" holds a NUL character", path, line);
        for (int k = 0; st == SR_OK && k < it->nend; k++)
            if (strlen(it->endings[k]) != json_string_length(json_array_get(ends, (size_t)k)))
                st = sr_error(SR_ERR_DATA, "%s:%ld: \"endings\"[%d] holds a NUL character", path, line, k);
        if (st != SR_OK)
            item_free(it);
    }
    json_decref(o);
    return st;
}

sr_status sr_task_load(sr_task *t, const char *path) {
    memset(t, 0, sizeof *t);
    FILE *f = fopen(path, "rb");
    if (!f)
        return sr_error(SR_ERR_NOINPUT, "%s: cannot open the task file: %s", path, strerror(errno));
    sr_status st = sr_task_read(t, path, f);
    fclose(f);
    return st;
}

sr_status sr_task_read(sr_task *t, const char *path, FILE *f) {
    memset(t, 0, sizeof *t);
    sr_status st = SR_OK;
    char *buf = sr_malloc((size_t)SR_TASK_LINE_MAX + 1);
    size_t cap = 0;
    t->path = sr_strdup(path);
    if (!buf || !t->path)
        st = sr_error_oom("the task file");
    sr_task_name(path, t->name);
    long line = 0;
    int c = 0;
    while (st == SR_OK && c != EOF) {
        size_t len = 0;
        line++;
        bool over = false;
        while ((c = getc(f)) != EOF && c != '\n') {
            if (len < (size_t)SR_TASK_LINE_MAX)
                buf[len++] = (char)c;
            else {
                over = true;
                break;
            }
        }
        if (over) {
            st = sr_error(SR_ERR_DATA,
                          "%s:%ld: the line is longer than %d bytes (an item's context and endings "
                          "together; a task file holds one item a line)",
                          path, line, SR_TASK_LINE_MAX);
            break;
        }
        if (ferror(f)) {
            st = sr_error(SR_ERR_NOINPUT, "%s: read failed: %s", path, strerror(errno));
            break;
        }
        size_t a = 0;
        while (a < len && (buf[a] == ' ' || buf[a] == '\t' || buf[a] == '\r'))
            a++;
        if (a == len)
            continue; /* a blank line */
        if (t->n >= SR_TASK_ITEMS_MAX) {
            st = sr_error(SR_ERR_DATA, "%s:%ld: more than %d items", path, line, SR_TASK_ITEMS_MAX);
            break;
        }
        if (!sr_grow((void **)&t->items, &cap, (size_t)t->n + 1, sizeof *t->items, 64)) {
            st = sr_error_oom("the task file");
            break;
        }
        st = parse_item(path, line, buf, len, &t->items[t->n]);
        if (st == SR_OK)
            t->n++;
    }
    free(buf);
    if (st == SR_OK && t->n == 0)
        st = sr_error(SR_ERR_DATA, "%s: no item in the file %s", path, HINT);
    if (st != SR_OK)
        sr_task_free(t);
    return st;
}

void sr_task_enc_free(sr_task_enc *e) {
    free(e->item);
    free(e->ending);
    free(e->len);
    free(e->nend);
    free(e->first);
    free(e->off);
    free(e->bytes);
    free(e->ids);
    memset(e, 0, sizeof *e);
}

/* text's ids into *v (emptied first): the tokenizer's, or the bytes */
static sr_status encode(sr_tok_encoder *enc, const char *text, sr_tok_ids *v) {
    v->n = 0;
    size_t n = strlen(text);
    if (enc)
        return sr_tok_encode(enc, (const unsigned char *)text, n, v);
    for (size_t i = 0; i < n; i++)
        if (sr_tok_ids_push(v, (unsigned char)text[i]) != SR_OK)
            return sr_error_oom("the task's sequences");
    return SR_OK;
}

sr_status sr_task_encode(const sr_task *t, const sr_tokenizer *tok, int V, int T, sr_task_enc *e) {
    memset(e, 0, sizeof *e);
    e->T = T;
    e->nitems = t->n;
    size_t nseq = 0;
    for (int i = 0; i < t->n; i++)
        nseq += (size_t)t->items[i].nend;
    e->nseq = (int)nseq;
    e->item = sr_malloc(nseq * sizeof(int));
    e->ending = sr_malloc(nseq * sizeof(int));
    e->len = sr_malloc(nseq * sizeof(int));
    e->nend = sr_malloc(nseq * sizeof(int));
    e->first = sr_malloc(((size_t)t->n + 1) * sizeof(int));
    e->off = sr_malloc(nseq * sizeof(size_t));
    e->bytes = sr_malloc(nseq * sizeof(size_t));
    sr_tok_encoder *enc = NULL;
    sr_status st = SR_OK;
    if (!e->item || !e->ending || !e->len || !e->nend || !e->first || !e->off || !e->bytes)
        st = sr_error_oom("the task's sequences");
    if (st == SR_OK && tok)
        st = sr_tok_encoder_new(tok, &enc);
    sr_tok_ids c = {0}, x = {0};
    size_t cap = 0, s = 0;
    char *spaced = NULL;
    size_t spaced_cap = 0;
    for (int i = 0; st == SR_OK && i < t->n; i++) {
        const sr_task_item *it = &t->items[i];
        e->first[i] = (int)s;
        st = encode(enc, it->ctx, &c);
        for (int k = 0; st == SR_OK && k < it->nend; k++, s++) {
            size_t bl = strlen(it->endings[k]);
            if (!sr_grow((void **)&spaced, &spaced_cap, bl + 2, 1, 256)) {
                st = sr_error_oom("the task's sequences");
                break;
            }
            spaced[0] = ' ';
            memcpy(spaced + 1, it->endings[k], bl + 1);
            if ((st = encode(enc, spaced, &x)) != SR_OK)
                break;
            if (x.n > (size_t)T) {
                st = sr_error(SR_ERR_DATA,
                              "%s:%ld: ending %d is %zu tokens; the model's context of %d positions scores at most %d "
                              "(after one token of context)",
                              t->path, it->line, k, x.n, T, T);
                break;
            }
            size_t keep = c.n < (size_t)T + 1 - x.n ? c.n : (size_t)T + 1 - x.n; /* the context's last tokens */
            size_t len = keep + x.n;
            if (!sr_grow((void **)&e->ids, &cap, e->nids + len, sizeof(int), 4096)) {
                st = sr_error_oom("the task's sequences");
                break;
            }
            e->item[s] = i;
            e->ending[s] = k;
            e->off[s] = e->nids;
            e->len[s] = (int)len;
            e->nend[s] = (int)x.n;
            e->bytes[s] = bl;
            for (size_t j = 0; j < keep; j++)
                e->ids[e->nids++] = (int)c.ids[c.n - keep + j];
            for (size_t j = 0; j < x.n; j++)
                e->ids[e->nids++] = (int)x.ids[j];
            for (size_t j = e->off[s]; j < e->nids; j++)
                if (e->ids[j] >= V) {
                    st = sr_error(SR_ERR_DATA, "%s:%ld: token %d is outside the model's vocabulary of %d", t->path,
                                  it->line, e->ids[j], V);
                    break;
                }
        }
    }
    if (st == SR_OK)
        e->first[t->n] = (int)s;
    free(spaced);
    sr_tok_ids_free(&c);
    sr_tok_ids_free(&x);
    sr_tok_encoder_free(enc);
    if (st != SR_OK)
        sr_task_enc_free(e);
    return st;
}

void sr_task_fill(const sr_task_enc *e, int s0, int n, int *inputs, int *targets) {
    int T = e->T;
    memset(inputs, 0, (size_t)n * (size_t)T * sizeof(int));
    memset(targets, 0, (size_t)n * (size_t)T * sizeof(int));
    for (int r = 0; r < n; r++) {
        const int *w = e->ids + e->off[s0 + r];
        int len = e->len[s0 + r];
        for (int j = 0; j + 1 < len; j++) {
            inputs[(size_t)r * T + j] = w[j];
            targets[(size_t)r * T + j] = w[j + 1];
        }
    }
}

void sr_task_take(const sr_task_enc *e, int s0, int n, const float *losses, double *logprob) {
    int T = e->T;
    for (int r = 0; r < n; r++) {
        int s = s0 + r, len = e->len[s];
        /* the ending's tokens are targets at positions len-1-nend .. len-2 */
        for (int j = len - 1 - e->nend[s]; j < len - 1; j++)
            logprob[s] -= (double)losses[(size_t)r * T + j];
    }
}

/* Item i's choices from its sequences' logprobs: *pred the largest
 * logprob, *pred_norm the largest logprob per byte (ties: the first). */
static void choose(const sr_task_enc *e, int i, const double *logprob, int *pred, int *pred_norm) {
    int a = e->first[i], b = e->first[i + 1];
    *pred = *pred_norm = 0;
    for (int s = a + 1; s < b; s++) {
        if (logprob[s] > logprob[a + *pred])
            *pred = s - a;
        if (logprob[s] / (double)e->bytes[s] > logprob[a + *pred_norm] / (double)e->bytes[a + *pred_norm])
            *pred_norm = s - a;
    }
}

void sr_task_count(const sr_task *t, const sr_task_enc *e, const double *logprob, int lo, int hi, double c[2]) {
    for (int i = lo; i < hi; i++) {
        int p, pn;
        choose(e, i, logprob, &p, &pn);
        c[0] += p == t->items[i].label;
        c[1] += pn == t->items[i].label;
    }
}

int sr_task_write(FILE *out, const sr_task *t, const sr_task_enc *e, const double *logprob, bool json) {
    double c[2] = {0, 0};
    sr_task_count(t, e, logprob, 0, t->n, c);
    double acc = c[0] / t->n, accn = c[1] / t->n;
    if (!json)
        return fprintf(out, "%s: %d items, acc %.4f, acc_norm %.4f\n", t->name, t->n, acc, accn) < 0 ? -1 : 0;
    json_t *items = json_array();
    for (int i = 0; items && i < t->n; i++) {
        int p, pn;
        choose(e, i, logprob, &p, &pn);
        json_t *lp = json_array(), *tk = json_array();
        for (int s = e->first[i]; lp && tk && s < e->first[i + 1]; s++) {
            json_array_append_new(lp, json_real(logprob[s]));
            json_array_append_new(tk, json_integer(e->nend[s]));
        }
        json_array_append_new(items, json_pack("{si si si so so}", "label", t->items[i].label, "pred", p, "pred_norm",
                                               pn, "logprobs", lp, "tokens", tk));
    }
    json_t *o = json_pack("{ss ss si sf sf so}", "task", t->name, "file", t->path, "n", t->n, "acc", acc, "acc_norm",
                          accn, "items", items);
    char *s = o ? json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(17)) : NULL;
    json_decref(o);
    int rc = s && fprintf(out, "%s\n", s) >= 0 ? 0 : -1;
    free(s);
    return rc;
}
