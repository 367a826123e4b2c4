/* config.h — the job file: one schema table, the parsed configuration, and
 * validation.
 *
 * config owns the `sr_key` schema (every key of shardrun.yaml(5) with its type,
 * default, range and documentation).  That single table drives YAML parsing,
 * defaults, `--set` overrides, `shardrun config show`, `shardrun config keys`
 * and the KEYS section of shardrun.yaml(5).  Every error names the file,
 * line and column (1-based) where there is one, what was expected, and a
 * hint, and returns SR_ERR_CONFIG. */
#ifndef SR_CONFIG_H
#define SR_CONFIG_H

/* The name the embedded default job goes by in messages and origins. */
#define SR_CONFIG_DEFAULT_JOB "<default job>"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "status.h"

enum { SR_SCHED_COSINE, SR_SCHED_LINEAR, SR_SCHED_CONSTANT };
enum { SR_BACKEND_AUTO, SR_BACKEND_TCP, SR_BACKEND_NCCL };
enum { SR_GRADSYNC_PER_STEP, SR_GRADSYNC_PER_MICRO_BATCH };
enum { SR_REQUEUE_EXIT, SR_REQUEUE_SCONTROL };

/* sharding.mixed_precision's `auto`, until a run or a plan resolves it
 * for its device table (sr_job_resolve_precision). */
#define SR_MP_DTYPE_AUTO 2

/* model.attention's values. */
enum { SR_ATTENTION_AUTO, SR_ATTENTION_FLASH, SR_ATTENTION_MATERIALIZED };

/* reshard_after_forward values: true, false, or N >= 2. */
#define SR_RESHARD_TRUE (-1)
#define SR_RESHARD_FALSE 0

/* A list of strings (data paths or globs, signal names). */
typedef struct {
    char **items;
    int count;
} sr_strlist;

/* data.mixture: the weighted training sources (mixture.h draws from them). */
#define SR_MIX_MAX_SOURCES 32
#define SR_MIX_NAME_MAX 48 /* a source name's bytes, at most */
typedef struct {
    char *name;       /* [A-Za-z0-9_.-], unique */
    sr_strlist train; /* paths, globs or data prepare directories, as data.train takes */
    double weight;    /* > 0; the sources' share is weight / the sum */
} sr_mix_source;
typedef struct {
    sr_mix_source *src;
    int count;
} sr_mixture;

/* data.val: the validation sets.  A list (or one path) is one set without
 * a name; a mapping {NAME: paths} names each (val_loss/NAME in the
 * metrics).  count 0: unset. */
#define SR_VAL_MAX_SETS 16
typedef struct {
    char *name;       /* NULL: the unnamed set of the list form */
    sr_strlist paths; /* as data.train takes them */
} sr_valset;
typedef struct {
    sr_valset *set;
    int count;
} sr_valsets;

/* Whether `s` is a valid data.mixture source name: 1 to SR_MIX_NAME_MAX
 * letters, digits, '_', '.' or '-' (data prepare --name checks the same). */
bool sr_config_mixture_name_ok(const char *s);

/* data.mixture_end's values. */
enum { SR_MIX_END_WRAP, SR_MIX_END_STOP };

typedef struct {
    /* model */
    int64_t model_preset, recompute, attention;
    int64_t n_layer, n_head, n_embd, vocab_size, seq_len;
    /* the family and the Llama keys (for gpt2: n_kv_head = n_head,
     * ffn_dim = 4 n_embd, tied; the rest unused) */
    int64_t arch, n_kv_head, ffn_dim, rope_original_max_position;
    double norm_eps, rope_theta, rope_factor, rope_low_freq_factor, rope_high_freq_factor;
    bool tie_embeddings;
    char *model_init;
    /* train */
    int64_t steps, batch_size, micro_batch;
    double lr;
    int64_t warmup_steps, schedule;
    double min_lr, weight_decay, beta1, beta2, eps, grad_clip;
    int64_t seed, eval_every, eval_batches;
    /* data */
    sr_strlist data_train;
    sr_strlist eval_tasks; /* train.eval_tasks */
    sr_valsets data_val;
    sr_mixture data_mixture;
    int64_t data_mixture_end;
    bool data_embedded_any_vocab;
    char *data_tokenizer;
    bool data_allow_changed;
    /* log */
    int64_t log_every;
    char *log_metrics;
    int64_t log_sample_every;
    int64_t log_flight_recorder; /* ring entries; 0 = off */
    char *log_flight_dir;        /* "" = the default (flight.h) */
    double log_straggler_pct;
    char *log_trace_steps;                   /* "A-B" as written; "" = off */
    int64_t log_trace_first, log_trace_last; /* parsed by sr_config_finalize; 0 = off */
    char *log_trace_dir;                     /* "" = the default (trace.h) */
    char *log_tensorboard;                   /* "" = none */
    char *log_prometheus;                    /* "" = none; %h %j expanded (promfile.h) */
    /* threads */
    int64_t threads;
    /* comm */
    int64_t comm_backend;
    double comm_timeout_s;
    char *comm_interface;
    /* sharding */
    int64_t blocks_per_unit;
    int64_t reshard_blocks, reshard_root;
    int64_t param_dtype, reduce_dtype; /* sr_dtype: SR_DT_F32 or SR_DT_BF16, or SR_MP_DTYPE_AUTO */
    int64_t mesh_shard, mesh_replicate;
    int64_t prefetch_forward, prefetch_backward;
    int64_t grad_sync;
    bool offload_params, offload_grads, offload_optimizer, pin_memory;
    /* device */
    int64_t device; /* sr_device_want (device.h) */
    /* checkpoint */
    char *ckpt_dir;
    int64_t ckpt_every_steps;
    double ckpt_every_minutes;
    int64_t ckpt_keep, ckpt_keep_every;
    bool ckpt_async;
    int64_t ckpt_async_max_mb;
    char *ckpt_resume;
    int64_t ckpt_mem_every_steps, ckpt_mem_replicas; /* replicas: 0 auto, 1 none, 2 one (replicas_names) */
    char *ckpt_mem_dir;
    /* preemption */
    sr_strlist preempt_signals;
    int64_t preempt_requeue, preempt_exit_status;
    int64_t preempt_max_stalled, preempt_before_end; /* preempt_before_end: 0 auto, 1 off */
    double preempt_end_margin_s, slurm_comment_every_minutes;

    /* Where the job came from (SR_CONFIG_DEFAULT_JOB for the embedded one). */
    char *source;
    /* The embedded default job's model.preset gave way to model.init's
     * config.json (the model line says so). */
    bool preset_yielded;
    /* model.init's Hugging Face config.json, when the caller read one
     * (sr_config_set_model_source): the model keys the job leaves unset
     * come from it; NULL: none. */
    struct sr_config_model_source *model_source;
    /* Private: where each key was last set (file, line, column). */
    struct sr_key_origin *origin;
} sr_config;

/* Fills `cfg` with every default.  Returns SR_OK or SR_ERR_INTERNAL (out of
 * memory).  Free with sr_config_free(). */
sr_status sr_config_init(sr_config *cfg);
void sr_config_free(sr_config *cfg);

/* Parses a YAML job file over the defaults in `cfg`.  `path` NULL means the
 * embedded default job.  Returns SR_ERR_NOINPUT when the file cannot be read,
 * SR_ERR_CONFIG for any syntax, key, type or range error. */
sr_status sr_config_load_file(sr_config *cfg, const char *path);
/* Parses YAML text (a job file's contents); `name` is used in messages.
 * Returns as sr_config_load_file. */
sr_status sr_config_load_text(sr_config *cfg, const char *text, size_t len, const char *name);
/* Applies one `--set key=value` override.  A missing '=' is SR_ERR_USAGE; a
 * bad key or value SR_ERR_CONFIG.  The value is parsed as YAML. */
sr_status sr_config_set(sr_config *cfg, const char *assignment);
/* A model's family and dims as another file declares them (model.init's
 * Hugging Face config.json, read by the caller: the input layer does not
 * read model files), in the job's units. */
typedef struct sr_config_model_source {
    char origin[1100]; /* the file, for messages */
    int64_t arch, n_layer, n_head, n_kv_head, n_embd, ffn_dim, vocab_size, max_seq_len;
    int64_t rope_original_max_position;
    double norm_eps, rope_theta, rope_factor, rope_low_freq_factor, rope_high_freq_factor;
    bool tie_embeddings;
} sr_config_model_source;
/* Makes src the source of every model key the job does not set, in place
 * of the preset (copied; before sr_config_finalize).  A key the job does
 * set must agree with it (seq_len at most its max_seq_len), else
 * sr_config_finalize refuses the job (SR_ERR_CONFIG naming both).
 * SR_ERR_INTERNAL when out of memory. */
sr_status sr_config_set_model_source(sr_config *cfg, const sr_config_model_source *src);

/* Resolves the model preset into explicit dimensions (explicit keys win) and
 * checks every cross-field rule that holds for any number of ranks (the
 * world-size rules are job.h's).  Returns SR_ERR_CONFIG naming the keys. */
sr_status sr_config_finalize(sr_config *cfg);
/* The model's name for the start line, after sr_config_finalize: the
 * preset's ("gpt2-124m") when every dimension is the preset's, else
 * "custom (gpt2-124m with n_layer, seq_len changed)".  Returns buf. */
const char *sr_config_model_name(const sr_config *cfg, char *buf, size_t n);

/* Checks model dimensions from outside a job file (a checkpoint's
 * manifest) as a job file's are checked: each against its key's range, and
 * n_embd divisible by n_head.  SR_ERR_CONFIG naming the key and what was
 * expected (no place: the caller adds it). */
sr_status sr_config_check_model(int64_t n_layer, int64_t n_head, int64_t n_embd, int64_t vocab_size, int64_t seq_len);

/* The schema's keys in table order, and one key's effective value as the
 * YAML text `config show` prints (checkpoint manifests record these). */
int sr_config_nkeys(void);
const char *sr_config_key_name(int i);
void sr_config_value_text(const sr_config *cfg, int i, char *buf, size_t n);
/* The string a string key's printed value stands for (`"a\"b"` -> a"b),
 * as sr_config_value_text writes it (a checkpoint's recorded keys): into
 * out[n]; false when `printed` is not such a value or does not fit. */
bool sr_config_unquote(const char *printed, char *out, size_t n);

/* Writes the effective configuration as YAML that sr_config_load_* accepts;
 * `note` (may be NULL) ends the first (comment) line. */
void sr_config_show(const sr_config *cfg, FILE *out, const char *note);
/* Writes the schema: "text" as a table, "mdoc" as a man page section. */
void sr_config_keys(FILE *out, bool mdoc);

/* The number of sequences each rank processes per forward pass and the
 * gradient-accumulation steps (valid after sr_config_finalize). */
int64_t sr_config_micro_batch(const sr_config *cfg, int dp_ranks);
int64_t sr_config_accum_steps(const sr_config *cfg, int dp_ranks);

/* "file:line:col" (or "--set KEY=VALUE") where key `name` was last set,
 * or "SOURCE (default)". */
/* Whether `name` was set by the job file or --set (not a default). */
bool sr_config_was_set(const sr_config *cfg, const char *name);
void sr_config_where(const sr_config *cfg, const char *name, char *buf, size_t n);

/* Names of enum values, for logs. */
const char *sr_config_enum_name(const char *key, int64_t value);

/* The embedded default job (etc/shardrun.yaml). */
extern const char sr_default_job[];
extern const size_t sr_default_job_len;

#endif
