/* job_data.c — the data keys resolved before anything checks them: a
 * directory `data prepare` wrote, named in data.train or data.val, read
 * through its index.json (its shards of each split, its tokenizer when
 * data.tokenizer is unset, checked by SHA-256), and the vocabulary taken
 * from data.tokenizer when model.vocab_size is unset (a run that resumes
 * keeps its checkpoint's).  Part of the job module (job.h). */
#include "srconfig.h"

#include "job.h"

#include <dirent.h>
#include <errno.h>
#include <glob.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "ckpt.h"
#include "fsio.h"
#include "manifest.h"
#include "mem.h"
#include "tokenizer.h"

/* st "<where key was set>: <message>" (sr_job_key_verror). */
static sr_status at(const sr_config *cfg, sr_status st, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static sr_status at(const sr_config *cfg, sr_status st, const char *key, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    st = sr_job_key_verror(cfg, st, key, fmt, ap);
    va_end(ap);
    return st;
}

static bool is_dir(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISDIR(sb.st_mode);
}

/* A growing list of strings (what becomes an sr_strlist). */
typedef struct {
    char **items;
    int count, cap;
} list;

static bool list_add(list *l, const char *s) {
    if (l->count == l->cap) {
        int cap = l->cap ? 2 * l->cap : 8;
        char **n = sr_realloc(l->items, (size_t)cap * sizeof *n);
        if (!n)
            return false;
        l->items = n;
        l->cap = cap;
    }
    return (l->items[l->count] = sr_strdup(s)) != NULL && ++l->count;
}

static void list_free(list *l) {
    for (int i = 0; i < l->count; i++)
        free(l->items[i]);
    free(l->items);
    *l = (list){0};
}

/* DIR/index.json, parsed: SR_ERR_NOINPUT when there is none, SR_ERR_DATA
 * when it is not one `data prepare` wrote. */
static sr_status read_index(const sr_config *cfg, const char *key, const char *dir, json_t **out) {
    char path[4200];
    sr_fmt(path, sizeof path, "%s/index.json", dir);
    if (access(path, F_OK) != 0)
        return at(cfg, SR_ERR_NOINPUT, key,
                  "%s: not a regular file but a directory without index.json (hint: %s takes token shards, a glob, "
                  "or the directory `shardrun data prepare -o DIR/` wrote)",
                  dir, key);
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je);
    json_t *fmt = root ? json_object_get(root, "format") : NULL;
    json_t *shards = root ? json_object_get(root, "shards") : NULL;
    if (!root || !json_is_string(fmt) || strncmp(json_string_value(fmt), "shardrun data prepare ", 22) != 0 ||
        !json_is_array(shards)) {
        json_decref(root);
        return at(cfg, SR_ERR_DATA, key, "%s: %s (hint: the index.json `shardrun data prepare` writes)", path,
                  !root ? je.text : "expected an object with \"format\": \"shardrun data prepare N\" and \"shards\"");
    }
    *out = root;
    return SR_OK;
}

/* Whether DIR's index lists sources (`data prepare --name`), and whether
 * one is `source`. */
static bool index_has_source(json_t *root, const char *source, bool *any) {
    json_t *s;
    size_t i;
    bool found = false;
    *any = false;
    json_array_foreach(json_object_get(root, "shards"), i, s) {
        const char *src = json_string_value(json_object_get(s, "source"));
        *any = *any || src;
        found = found || (src && source && strcmp(src, source) == 0);
    }
    return found;
}

/* The shards of `split` ("train", "val") DIR's index lists, as DIR/NAME
 * onto l; of data.mixture's source `source` only when the index lists
 * sources (NULL: every shard of the split). */
static sr_status index_shards(const sr_config *cfg, const char *key, const char *dir, json_t *root, const char *split,
                              const char *source, list *l) {
    json_t *shards = json_object_get(root, "shards"), *s;
    size_t i;
    bool sources = false;
    if (source && !index_has_source(root, source, &sources) && sources)
        return at(cfg, SR_ERR_DATA, key,
                  "%s/index.json lists no source named %s (hint: the data.mixture `data prepare` printed names each "
                  "source as its --name)",
                  dir, source);
    json_array_foreach(shards, i, s) {
        const char *name = json_string_value(json_object_get(s, "name"));
        const char *sp = json_string_value(json_object_get(s, "split"));
        const char *src = json_string_value(json_object_get(s, "source"));
        if (!name || !sp || !*name || name[0] == '.' || strchr(name, '/'))
            return at(cfg, SR_ERR_DATA, key, "%s/index.json: shard %zu: expected a file name and a split", dir, i);
        if (strcmp(sp, split) != 0 || (source && sources && (!src || strcmp(src, source) != 0)))
            continue;
        char p[4400];
        sr_fmt(p, sizeof p, "%s/%s", dir, name);
        if (!list_add(l, p))
            return sr_error_oom("the data's shard list");
    }
    return SR_OK;
}

/* The first data prepare directory's tokenizer: its fingerprint ("bytes":
 * none) and what names it, and the directory. */
typedef struct {
    char dir[4096], sha[65], what[4200];
} index_tok;

/* Every training directory's data in one tokenizer's ids (a mixture's
 * sources): DIR's index against the first one's (*first, filled by it). */
static sr_status same_tokenizer(const sr_config *cfg, const char *key, const char *dir, json_t *root,
                                index_tok *first) {
    json_t *t = json_object_get(root, "tokenizer");
    const char *sha = json_string_value(json_object_get(t, "sha256"));
    const char *path = json_string_value(json_object_get(t, "path"));
    const char *mine = json_is_object(t) && sha ? sha : "bytes";
    const char *what = json_is_object(t) && path ? path : "no tokenizer";
    if (first->dir[0] && strcmp(first->sha, mine) != 0)
        return at(cfg, SR_ERR_DATA, key,
                  "%s/index.json's data is in the ids of %s (%.12s), %s/index.json's in those of %s (%.12s): one run "
                  "reads one tokenizer's ids (hint: prepare every source with the same --tokenizer)",
                  dir, what, mine, first->dir, first->what, first->sha);
    if (!first->dir[0]) {
        sr_fmt(first->dir, sizeof first->dir, "%s", dir);
        sr_fmt(first->sha, sizeof first->sha, "%s", mine);
        sr_fmt(first->what, sizeof first->what, "%s", what);
    }
    return SR_OK;
}

/* DIR's tokenizer as data.tokenizer, when it is unset: the file index.json
 * names, loaded and compared with the SHA-256 it records (not `check`ing:
 * named, not read).  A data.tokenizer the job sets is compared too: a
 * warning when it is not the one the data was prepared with. */
static sr_status index_tokenizer(sr_config *cfg, const char *key, const char *dir, json_t *root, bool check) {
    json_t *t = json_object_get(root, "tokenizer");
    if (!json_is_object(t))
        return SR_OK; /* byte-level shards */
    const char *path = json_string_value(json_object_get(t, "path"));
    const char *sha = json_string_value(json_object_get(t, "sha256"));
    if (!path || !sha)
        return at(cfg, SR_ERR_DATA, key, "%s/index.json: its tokenizer has no \"path\" and \"sha256\"", dir);
    bool user = cfg->data_tokenizer && cfg->data_tokenizer[0];
    if (!check && user)
        return SR_OK;
    sr_tokenizer *tok = NULL;
    sr_status st = check ? sr_tokenizer_load(&tok, user ? cfg->data_tokenizer : path, "the tokenizer") : SR_OK;
    if (st != SR_OK && user)
        return SR_OK; /* the data checks say why data.tokenizer does not load */
    if (st != SR_OK) {
        char why[1200];
        sr_fmt(why, sizeof why, "%s", sr_error_message());
        return at(cfg, st == SR_ERR_NOINPUT ? SR_ERR_NOINPUT : SR_ERR_DATA, key,
                  "%s/index.json names the tokenizer the data was prepared with, %s, which %s: %s (hint: set "
                  "data.tokenizer to it)",
                  dir, path, st == SR_ERR_NOINPUT ? "is missing" : "does not load", why);
    }
    char now[65] = "";
    if (tok)
        sr_fmt(now, sizeof now, "%s", sr_tokenizer_fingerprint(tok));
    sr_tokenizer_free(tok);
    bool same = !check || strcmp(now, sha) == 0;
    if (user) {
        if (!same)
            sr_log_warn("data.tokenizer %s is not the tokenizer %s/index.json says the data was prepared with (%s, "
                        "SHA-256 %s; this one's %s): the ids may stand for other text",
                        cfg->data_tokenizer, dir, path, sha, now);
        return SR_OK;
    }
    if (!same)
        return at(cfg, SR_ERR_DATA, key,
                  "%s/index.json names the tokenizer %s, which has changed since the data was prepared (SHA-256 %s, "
                  "index.json records %s) (hint: prepare the data again, or set data.tokenizer to the tokenizer it "
                  "was prepared with)",
                  dir, path, now, sha);
    free(cfg->data_tokenizer);
    cfg->data_tokenizer = sr_strdup(path);
    return cfg->data_tokenizer ? SR_OK : sr_error_oom("data.tokenizer");
}

/* Every directory among `paths` (data.train or data.val) read through its
 * index.json into its shards of `split`; data.train's directories also
 * give an unset data.val their validation shards (*val) and an unset
 * data.tokenizer their tokenizer. */
static sr_status expand(sr_config *cfg, const char *key, sr_strlist *paths, const char *split, const char *source,
                        list *val, bool check, index_tok *first) {
    bool any = false;
    for (int i = 0; i < paths->count && !any; i++)
        any = is_dir(paths->items[i]);
    if (!any)
        return SR_OK;
    list out = {0};
    sr_status st = SR_OK;
    for (int i = 0; st == SR_OK && i < paths->count; i++) {
        const char *p = paths->items[i];
        json_t *root = NULL;
        if (!is_dir(p)) {
            st = list_add(&out, p) ? SR_OK : sr_error_oom("the data's shard list");
            continue;
        }
        st = read_index(cfg, key, p, &root);
        if (st == SR_OK)
            st = index_shards(cfg, key, p, root, split, source, &out);
        if (st == SR_OK && val)
            st = index_shards(cfg, key, p, root, "val", source, val);
        if (st == SR_OK && first)
            st = same_tokenizer(cfg, key, p, root, first);
        if (st == SR_OK && val)
            st = index_tokenizer(cfg, key, p, root, check);
        json_decref(root);
    }
    if (st == SR_OK && out.count == 0)
        st = at(cfg, SR_ERR_NOINPUT, key, "the directories of %s hold no %s shards (their index.json lists none)", key,
                split);
    if (st != SR_OK) {
        list_free(&out);
        return st;
    }
    for (int i = 0; i < paths->count; i++)
        free(paths->items[i]);
    free(paths->items);
    paths->items = out.items;
    paths->count = out.count;
    return SR_OK;
}

/* The vocabulary of the checkpoint a run would resume from, when the job
 * differs from it only there (0: none, or another model).  As the resume
 * chooses (ckpt.c): checkpoint.resume's PATH, else checkpoint.dir's step_*
 * directories newest first, the first whose manifest loads (the resume
 * verifies more; a model of another shape it refuses without trying an
 * older one).  Every rank reads the same files. */
static int64_t resumed_vocab(const sr_config *cfg) {
    const char *resume = cfg->ckpt_resume && cfg->ckpt_resume[0] ? cfg->ckpt_resume : "auto";
    if (strcmp(resume, "never") == 0)
        return 0;
    bool explicit_path = strcmp(resume, "auto") != 0;
    if (!explicit_path && !(cfg->ckpt_dir && cfg->ckpt_dir[0]))
        return 0;
    int64_t *steps = explicit_path ? NULL : sr_calloc(SR_CKPT_MAX_CANDIDATES, sizeof *steps);
    int n = explicit_path ? 1 : 0;
    if (!explicit_path) {
        int dirfd = steps ? sr_fsio_open_dir(cfg->ckpt_dir) : -1;
        char odd[8];
        n = dirfd >= 0 ? sr_ckpt_scan(dirfd, steps, SR_CKPT_MAX_CANDIDATES, odd, sizeof odd) : 0;
        if (dirfd >= 0)
            close(dirfd);
    }
    int64_t v = 0;
    for (int i = 0; i < n; i++) {
        char path[4300];
        if (explicit_path)
            sr_fmt(path, sizeof path, "%s", resume);
        else
            sr_fmt(path, sizeof path, "%s/step_%08lld", cfg->ckpt_dir, (long long)steps[i]);
        int fd = sr_fsio_open_dir(path);
        sr_manifest mf;
        sr_status st = fd >= 0 ? sr_manifest_load(fd, path, &mf) : SR_ERR_NOINPUT;
        if (fd >= 0)
            close(fd);
        if (st != SR_OK)
            continue; /* the resume skips it too (and says why) */
        sr_model_dims job = sr_job_model_dims(cfg, (int)cfg->seq_len);
        job.V = mf.dims.V;
        v = sr_model_dims_same(&job, &mf.dims) ? mf.dims.V : 0;
        sr_manifest_free(&mf);
        break;
    }
    free(steps);
    return v;
}

/* model.vocab_size unset: the tokenizer's, or the checkpoint's a resume
 * keeps (a job from before the vocabulary came from the tokenizer).  Not
 * `check`ing (config show, plan): a tokenizer that cannot be read here
 * leaves the vocabulary as it is, with a warning. */
static sr_status tokenizer_vocab(sr_config *cfg, bool check) {
    if (!cfg->data_tokenizer || !cfg->data_tokenizer[0] || sr_config_was_set(cfg, "model.vocab_size") ||
        cfg->model_source)
        return SR_OK;
    sr_tokenizer *tok = NULL;
    sr_status st = sr_tokenizer_load(&tok, cfg->data_tokenizer, "data.tokenizer");
    if (st != SR_OK && !check) {
        sr_log_warn("%s: the vocabulary stays %lld (model.vocab_size unset; a run reads the tokenizer's)",
                    sr_error_message(), (long long)cfg->vocab_size);
        return SR_OK;
    }
    if (st != SR_OK)
        return sr_error_wrap(st, "data.tokenizer");
    int64_t tv = sr_tokenizer_vocab(tok);
    sr_tokenizer_free(tok);
    cfg->vocab_size = tv;
    int64_t kept = resumed_vocab(cfg);
    if (kept > 0 && kept != tv) {
        cfg->vocab_size = kept;
        sr_log_info("model.vocab_size %lld: the checkpoint's, which the run resumes (data.tokenizer has %lld ids; "
                    "model.vocab_size is unset)",
                    (long long)kept, (long long)tv);
    }
    return SR_OK;
}

/* train.eval_tasks' globs (an item with *, ? or [) into their matches,
 * sorted; one that matches nothing is SR_ERR_NOINPUT at the key. */
static sr_status expand_tasks(sr_config *cfg) {
    sr_strlist *l = &cfg->eval_tasks;
    bool any = false;
    for (int i = 0; i < l->count; i++)
        any = any || strpbrk(l->items[i], "*?[") != NULL;
    if (!any)
        return SR_OK;
    list out = {0};
    sr_status st = SR_OK;
    for (int i = 0; st == SR_OK && i < l->count; i++) {
        if (!strpbrk(l->items[i], "*?[")) {
            st = list_add(&out, l->items[i]) ? SR_OK : sr_error_oom("train.eval_tasks");
            continue;
        }
        glob_t g;
        int rc = glob(l->items[i], GLOB_ERR, NULL, &g);
        if (rc != 0)
            st = at(cfg, SR_ERR_NOINPUT, "train.eval_tasks", "%s: %s", l->items[i],
                    rc == GLOB_NOMATCH ? "no task file matches" : strerror(errno));
        for (size_t j = 0; st == SR_OK && j < g.gl_pathc; j++)
            st = list_add(&out, g.gl_pathv[j]) ? SR_OK : sr_error_oom("train.eval_tasks");
        if (rc == 0)
            globfree(&g);
    }
    if (st != SR_OK) {
        list_free(&out);
        return st;
    }
    for (int i = 0; i < l->count; i++)
        free(l->items[i]);
    free(l->items);
    l->items = out.items;
    l->count = out.count;
    return SR_OK;
}

sr_status sr_job_resolve_data(sr_config *cfg, bool check) {
    sr_status tst = check ? expand_tasks(cfg) : SR_OK;
    if (tst != SR_OK)
        return tst;
    if (cfg->data_mixture.count && cfg->data_train.count)
        return at(cfg, SR_ERR_CONFIG, "data.mixture",
                  "data.mixture and data.train are both set; expected one (hint: a run of one source sets data.train; "
                  "a mixture lists every source, with its weight, in data.mixture)");
    list val = {0};
    bool val_unset = cfg->data_val.count == 0;
    if (val_unset && !cfg->data_val.set && !(cfg->data_val.set = sr_calloc(1, sizeof *cfg->data_val.set)))
        return sr_error_oom("the data keys");
    index_tok *first = sr_calloc(1, sizeof *first);
    if (!first)
        return sr_error_oom("the data keys");
    sr_status st = expand(cfg, "data.train", &cfg->data_train, "train", NULL, val_unset ? &val : NULL, check, first);
    /* each source's directories: its shards (of its name, where the index
     * lists sources), and its validation shards for an unset data.val */
    for (int k = 0; st == SR_OK && k < cfg->data_mixture.count; k++)
        st = expand(cfg, "data.mixture", &cfg->data_mixture.src[k].train, "train", cfg->data_mixture.src[k].name,
                    val_unset ? &val : NULL, check, first);
    free(first);
    if (st == SR_OK && val_unset && val.count) { /* one set without a name */
        sr_valset *one = &cfg->data_val.set[0];
        free(one->paths.items); /* (an empty list may hold its array) */
        one->paths.items = val.items;
        one->paths.count = val.count;
        cfg->data_val.count = 1;
        val = (list){0};
    }
    list_free(&val);
    for (int i = 0; st == SR_OK && i < cfg->data_val.count; i++)
        st = expand(cfg, "data.val", &cfg->data_val.set[i].paths, "val", NULL, NULL, check, NULL);
    return st == SR_OK ? tokenizer_vocab(cfg, check) : st;
}
