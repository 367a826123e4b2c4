/* job.c — options of the lower modules and the world-size rules; see job.h. */
#include "srconfig.h"

#include "job.h"

#include "device.h"

#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data.h"
#include "evalcmd.h"
#include "evaltask.h"
#include "mem.h"
#include "modelfile.h"
#include "tokenizer.h"

sr_status sr_job_model_init_source(sr_config *cfg) {
    if (!cfg->model_init || !cfg->model_init[0] || !sr_modelfile_is_hf_dir(cfg->model_init))
        return SR_OK;
    sr_model_dims d;
    char weights[PATH_MAX];
    sr_status st = sr_modelfile_hf_dir(cfg->model_init, &d, weights, sizeof weights);
    if (st != SR_OK)
        return sr_error_wrap(st, "model.init");
    sr_config_model_source m = {
        .arch = d.arch,
        .n_layer = d.L,
        .n_head = d.NH,
        .n_kv_head = d.NKV,
        .n_embd = d.C,
        .ffn_dim = d.F,
        .vocab_size = d.V,
        .max_seq_len = d.T,
        .rope_original_max_position = d.rope.factor > 0 ? d.rope.original_max_position : 8192,
        .norm_eps = d.norm_eps,
        .rope_theta = d.rope_theta,
        .rope_factor = d.rope.factor,
        .rope_low_freq_factor = d.rope.factor > 0 ? d.rope.low_freq_factor : 1,
        .rope_high_freq_factor = d.rope.factor > 0 ? d.rope.high_freq_factor : 4,
        .tie_embeddings = !d.untied,
    };
    snprintf(m.origin, sizeof m.origin, "%.1000s/config.json", cfg->model_init);
    return sr_config_set_model_source(cfg, &m);
}

sr_model_dims sr_job_model_dims(const sr_config *cfg, int T) {
    sr_model_dims d = {
        .L = (int)cfg->n_layer,
        .NH = (int)cfg->n_head,
        .C = (int)cfg->n_embd,
        .V = (int)cfg->vocab_size,
        .T = T,
        .recompute = (int)cfg->recompute,
        .arch = (int)cfg->arch,
        .NKV = (int)cfg->n_kv_head,
        .F = (int)cfg->ffn_dim,
        .untied = !cfg->tie_embeddings,
        .norm_eps = cfg->norm_eps,
        .rope_theta = cfg->rope_theta,
        .rope = {cfg->rope_factor, cfg->rope_low_freq_factor, cfg->rope_high_freq_factor,
                 (int)cfg->rope_original_max_position},
    };
    sr_model_dims_complete(&d);
    return d;
}

sr_status sr_job_init(sr_job *j, const sr_config *cfg) {
    *j = (sr_job){0};
    j->transport = (sr_transport_opts){cfg->comm_timeout_s, cfg->comm_interface ? cfg->comm_interface : "", NULL};
    j->fsdp = (sr_fsdp_opts){.blocks_per_unit = (int)cfg->blocks_per_unit,
                             .reshard_blocks = cfg->reshard_blocks,
                             .reshard_root = cfg->reshard_root,
                             .param_dtype = (sr_dtype)cfg->param_dtype,
                             .reduce_dtype = (sr_dtype)cfg->reduce_dtype,
                             .prefetch_forward = (int)cfg->prefetch_forward,
                             .prefetch_backward = (int)cfg->prefetch_backward,
                             .grad_sync_per_step = cfg->grad_sync == SR_GRADSYNC_PER_STEP,
                             .seed = (uint64_t)cfg->seed,
                             .offload_optimizer = cfg->offload_optimizer,
                             .offload_params = cfg->offload_params,
                             .pin_memory = cfg->pin_memory};
    j->adamw = (sr_adamw_opts){cfg->beta1, cfg->beta2, cfg->eps, cfg->weight_decay};
    j->schedule = (sr_lr_schedule){(int)cfg->schedule, cfg->lr, cfg->min_lr, cfg->warmup_steps, cfg->steps};
    j->nkeys = sr_config_nkeys();
    j->keys = sr_calloc((size_t)j->nkeys, sizeof *j->keys);
    j->values = sr_calloc((size_t)j->nkeys, sizeof *j->values);
    if (!j->keys || !j->values)
        return sr_error_oom("the job's key list");
    for (int i = 0; i < j->nkeys; i++) {
        char v[8192];
        sr_config_value_text(cfg, i, v, sizeof v);
        j->keys[i] = sr_config_key_name(i);
        j->values[i] = sr_strdup(v);
        if (!j->values[i])
            return sr_error_oom("the job's key list");
    }
    j->ckpt = (sr_ckpt_opts){.dir = cfg->ckpt_dir ? cfg->ckpt_dir : "",
                             .resume = cfg->ckpt_resume ? cfg->ckpt_resume : "auto",
                             .keep = cfg->ckpt_keep,
                             .keep_every = cfg->ckpt_keep_every,
                             .async = cfg->ckpt_async,
                             .async_max_mb = cfg->ckpt_async_max_mb,
                             .mem_every = cfg->ckpt_mem_every_steps,
                             .mem_dir = cfg->ckpt_mem_dir ? cfg->ckpt_mem_dir : "",
                             .mem_replicas = cfg->ckpt_mem_replicas == 0 ? -1 : (int)cfg->ckpt_mem_replicas - 1,
                             .seed = (uint64_t)cfg->seed,
                             .schedule_name = sr_config_enum_name("train.schedule", cfg->schedule),
                             .schedule = j->schedule,
                             .isa = "",
                             .nkeys = j->nkeys,
                             .keys = j->keys,
                             .values = (const char *const *)j->values};
    return SR_OK;
}

bool sr_job_resolve_precision(sr_config *cfg, bool cuda_table) {
    bool automatic = cfg->param_dtype == SR_MP_DTYPE_AUTO;
    if (automatic)
        cfg->param_dtype = sr_device_auto_dtype(cuda_table);
    if (cfg->reduce_dtype == SR_MP_DTYPE_AUTO)
        cfg->reduce_dtype = SR_DT_F32;
    return automatic;
}

void sr_job_free(sr_job *j) {
    for (int i = 0; j->values && i < j->nkeys; i++)
        free(j->values[i]);
    free(j->values);
    free(j->keys);
    *j = (sr_job){0};
}

sr_status sr_job_key_verror(const sr_config *cfg, sr_status st, const char *key, const char *fmt, va_list ap) {
    char where[1200], msg[3000];
    sr_config_where(cfg, key, where, sizeof where);
    vsnprintf(msg, sizeof msg, fmt, ap);
    return sr_error(st, "%s: %s", where, msg);
}

/* SR_ERR_CONFIG "<where key was set>: <message>". */
static sr_status at_key(const sr_config *cfg, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static sr_status at_key(const sr_config *cfg, const char *key, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    sr_status st = sr_job_key_verror(cfg, SR_ERR_CONFIG, key, fmt, ap);
    va_end(ap);
    return st;
}

sr_status sr_job_check_world(const sr_config *cfg, int ranks, int rank, sr_mesh *mesh_out) {
    int64_t mb = sr_config_micro_batch(cfg, ranks);
    if (cfg->micro_batch == 0 && (mb < 1 || cfg->batch_size % ranks != 0)) /* the keys the user set: batch_size */
        return at_key(cfg, "train.batch_size",
                      "train.batch_size (%lld) does not split evenly over the %d data-parallel rank%s: every rank "
                      "takes the same whole number of sequences per step (train.micro_batch is unset) (hint: a "
                      "batch_size that is a multiple of %d; batch_size = micro_batch x ranks x accumulation steps)",
                      (long long)cfg->batch_size, ranks, ranks == 1 ? "" : "s", ranks);
    if (cfg->batch_size % (mb * ranks) != 0) {
        char w2[1200];
        sr_config_where(cfg, "train.micro_batch", w2, sizeof w2);
        return at_key(cfg, "train.batch_size",
                      "train.batch_size (%lld) is not a whole multiple of train.micro_batch (%lld) x data-parallel "
                      "ranks (%d); micro_batch set at %s (hint: choose batch_size = micro_batch x ranks x "
                      "accumulation steps)",
                      (long long)cfg->batch_size, (long long)mb, ranks, w2);
    }
    if (cfg->ckpt_mem_every_steps > 0 && !(cfg->ckpt_dir && cfg->ckpt_dir[0]))
        return at_key(cfg, "checkpoint.memory.every_steps",
                      "checkpoint.memory.every_steps needs checkpoint.dir: the memory tier is a faster copy beside the "
                      "persistent checkpoints, which a lost allocation still needs (hint: set checkpoint.dir)");
    sr_mesh mesh;
    sr_status st = sr_mesh_init(&mesh, ranks, rank, cfg->mesh_shard, cfg->mesh_replicate);
    if (st != SR_OK) {
        char where[1200];
        sr_config_where(cfg, cfg->mesh_shard ? "sharding.mesh.shard" : "sharding.mesh.replicate", where, sizeof where);
        return sr_error_wrap(st, "%s", where);
    }
    const char *rkeys[2] = {"sharding.reshard_after_forward.blocks", "sharding.reshard_after_forward.root"};
    int64_t rvals[2] = {cfg->reshard_blocks, cfg->reshard_root};
    for (int i = 0; i < 2; i++)
        if (sr_mesh_check_reshard(&mesh, rvals[i], rkeys[i]) != SR_OK) {
            char where[1200];
            sr_config_where(cfg, rkeys[i], where, sizeof where);
            return sr_error_wrap(SR_ERR_CONFIG, "%s", where);
        }
    if (mesh_out)
        *mesh_out = mesh;
    return SR_OK;
}

/* The first offload key set to true, or NULL. */
static const char *offload_key(const sr_config *cfg) {
    return cfg->offload_params      ? "sharding.offload.params"
           : cfg->offload_grads     ? "sharding.offload.grads"
           : cfg->offload_optimizer ? "sharding.offload.optimizer"
                                    : NULL;
}

static sr_status check_offload(const sr_config *cfg, bool separate_memory) {
    if (!offload_key(cfg))
        return SR_OK;
    if (!separate_memory)
        return at_key(cfg, offload_key(cfg),
                      "offload needs a GPU run: this is a CPU run, where everything already lives in host memory "
                      "(hint: set sharding.offload.* to false)");
    if (!cfg->offload_optimizer)
        return at_key(cfg, cfg->offload_params ? "sharding.offload.params" : "sharding.offload.grads",
                      "%s without sharding.offload.optimizer would only move state to the host and back every step: "
                      "the optimizer reads the gradients and writes the parameters (hint: also set "
                      "sharding.offload.optimizer: true, or set this key to false)",
                      cfg->offload_params ? "sharding.offload.params" : "sharding.offload.grads");
    if (!cfg->offload_grads && sr_config_was_set(cfg, "sharding.offload.grads"))
        return at_key(cfg, "sharding.offload.grads",
                      "sharding.offload.grads: false contradicts sharding.offload.optimizer: true: the optimizer on "
                      "the host reads the gradient shard there, so grads is implied (hint: remove the key, or set it "
                      "to true)");
    return SR_OK;
}

static sr_status check_gpu_run(const sr_config *cfg, int world_size) {
#ifndef SR_HAVE_NCCL
    if (cfg->comm_backend == SR_BACKEND_NCCL)
        return at_key(cfg, "comm.backend",
                      "comm.backend nccl, but this shardrun was built without NCCL (hint: auto, or a build configured "
                      "--with-nccl)");
#endif
    if (cfg->comm_backend == SR_BACKEND_TCP && world_size > 1)
        return at_key(cfg, "comm.backend",
                      "comm.backend tcp on a multi-GPU run is not implemented yet: GPU collectives run over NCCL "
                      "(hint: auto or nccl)");
    return SR_OK;
}

static sr_status check_cpu_run(const sr_config *cfg) {
    if (cfg->comm_backend == SR_BACKEND_NCCL)
        return at_key(cfg, "comm.backend",
#ifdef SR_HAVE_NCCL
                      "comm.backend nccl needs a GPU run; this is a CPU run (hint: tcp or auto)"
#else
                      "comm.backend nccl, but this shardrun was built without NCCL, and this is a CPU run (hint: tcp "
                      "or auto)"
#endif
        );
    return SR_OK;
}

sr_status sr_job_attention(const sr_config *cfg, bool cuda_table, bool *flash) {
    const char *why = NULL;
    char buf[160];
    int64_t NH = cfg->n_head, NKV = cfg->n_kv_head > 0 ? cfg->n_kv_head : NH, hs = NH > 0 ? cfg->n_embd / NH : 0;
    if (!cuda_table)
        why = "the job trains on the CPU, whose ops materialize attention (flash attention is the cuda table's)";
    else if (cfg->param_dtype != SR_DT_BF16)
        why = "sharding.mixed_precision.param_dtype is fp32: the exact mode keeps materialized attention as its "
              "reference (flash attention computes in bf16)";
    else if (hs != 64 && hs != 128)
        why =
            (snprintf(buf, sizeof buf, "the head dimension is %lld (n_embd / n_head); flash attention's are 64 and 128",
                      (long long)hs),
             buf);
    else if (NKV <= 0 || NH % NKV)
        why = (snprintf(buf, sizeof buf, "n_head %lld is not a multiple of n_kv_head %lld", (long long)NH,
                        (long long)NKV),
               buf);
    *flash = !why && cfg->attention != SR_ATTENTION_MATERIALIZED;
    if (why && cfg->attention == SR_ATTENTION_FLASH)
        return at_key(cfg, "model.attention",
                      "model.attention is flash, which cannot run here: %s (hint: model.attention: auto picks flash "
                      "where it runs and materialized elsewhere)",
                      why);
    return SR_OK;
}

sr_status sr_job_check_attention(const sr_config *cfg) {
    if (cfg->attention != SR_ATTENTION_FLASH)
        return SR_OK;
    sr_config c = *cfg; /* (scalars resolved on a copy: the job is left as it is) */
    bool cuda = cfg->device != SR_DEVICE_CPU, flash;
    sr_job_resolve_precision(&c, cuda);
    return sr_job_attention(&c, cuda, &flash);
}

sr_status sr_job_check(sr_config *cfg, int ranks, int rank, const sr_dev *dev, sr_mesh *mesh, bool *param_auto,
                       bool *flash) {
    sr_status st = sr_job_check_world(cfg, ranks, rank, mesh);
    if (st != SR_OK || !dev)
        return st;
    bool automatic = sr_job_resolve_precision(cfg, dev->kind == SR_DEV_CUDA), fl;
    if (param_auto)
        *param_auto = automatic;
    st = sr_job_attention(cfg, dev->kind == SR_DEV_CUDA, flash ? flash : &fl);
    if (st != SR_OK)
        return st;
    st = dev->kind == SR_DEV_CUDA ? check_gpu_run(cfg, ranks) : check_cpu_run(cfg);
    return st == SR_OK ? check_offload(cfg, dev->separate_memory) : st;
}

/* data.tokenizer loads, and its ids fit the model's vocabulary. */
static sr_status check_tokenizer(const sr_config *cfg) {
    if (!cfg->data_tokenizer || !cfg->data_tokenizer[0])
        return SR_OK;
    sr_tokenizer *tok = NULL;
    sr_status st = sr_tokenizer_load(&tok, cfg->data_tokenizer, "data.tokenizer");
    if (st != SR_OK)
        return sr_error_wrap(st, "data.tokenizer");
    int64_t tv = sr_tokenizer_vocab(tok);
    sr_tokenizer_free(tok);
    if (tv <= cfg->vocab_size)
        return SR_OK;
    return at_key(cfg, sr_config_was_set(cfg, "model.vocab_size") ? "model.vocab_size" : "data.tokenizer",
                  "data.tokenizer %s has %lld ids, more than model.vocab_size %lld: its tokens would index past the "
                  "embedding (hint: model.vocab_size: %lld, or the tokenizer the data was prepared with)",
                  cfg->data_tokenizer, (long long)tv, (long long)cfg->vocab_size, (long long)tv);
}

/* The shards of one split open as token shards: headers and sizes, and
 * enough tokens for one sequence (the token-range scan is the run's). */
static sr_status check_shards(const sr_config *cfg, const sr_strlist *paths) {
    if (!paths->count)
        return SR_OK;
    sr_data *d = NULL;
    sr_status st = sr_data_open(&d, paths, (int)cfg->seq_len, -1);
    sr_data_close(d);
    return st;
}

/* train.eval_tasks: at most SR_EVAL_MAX_TASKS files that read as tasks
 * (SR_ERR_DATA naming FILE:LINE), with distinct names (their metrics'). */
static sr_status check_tasks(const sr_config *cfg) {
    const sr_strlist *l = &cfg->eval_tasks;
    if (l->count > SR_EVAL_MAX_TASKS)
        return at_key(cfg, "train.eval_tasks", "%d task files; at most %d", l->count, SR_EVAL_MAX_TASKS);
    for (int i = 0; i < l->count; i++) {
        char a[SR_TASK_NAME_MAX + 1], b[SR_TASK_NAME_MAX + 1];
        sr_task_name(l->items[i], a);
        for (int j = 0; j < i; j++) {
            sr_task_name(l->items[j], b);
            if (strcmp(a, b) == 0)
                return at_key(cfg, "train.eval_tasks",
                              "%s and %s both go by the name %s (acc/%s in the metrics); expected distinct file "
                              "names (hint: rename one)",
                              l->items[j], l->items[i], a, a);
        }
        if (cfg->vocab_size != 256 && (!cfg->data_tokenizer || !*cfg->data_tokenizer))
            return at_key(cfg, "train.eval_tasks",
                          "the model's vocabulary is %lld tokens and data.tokenizer is unset, so the tasks' text "
                          "cannot be encoded (hint: set data.tokenizer to the data's tokenizer)",
                          (long long)cfg->vocab_size);
        sr_task t;
        sr_status st = sr_task_load(&t, l->items[i]);
        sr_task_free(&t);
        if (st != SR_OK)
            return sr_error_wrap(st, "train.eval_tasks");
    }
    return SR_OK;
}

sr_status sr_job_check_data(const sr_config *cfg) {
    sr_status st = check_tasks(cfg);
    if (st == SR_OK)
        st = check_tokenizer(cfg);
    if (st == SR_OK)
        st = check_shards(cfg, &cfg->data_train);
    for (int k = 0; st == SR_OK && k < cfg->data_mixture.count; k++)
        if ((st = check_shards(cfg, &cfg->data_mixture.src[k].train)) != SR_OK)
            st = sr_error_wrap(st, "data.mixture source %s", cfg->data_mixture.src[k].name);
    for (int k = 0; st == SR_OK && k < cfg->data_val.count; k++)
        if ((st = check_shards(cfg, &cfg->data_val.set[k].paths)) != SR_OK && cfg->data_val.set[k].name)
            st = sr_error_wrap(st, "data.val set %s", cfg->data_val.set[k].name);
    if (st != SR_OK || cfg->data_train.count || cfg->data_mixture.count || cfg->vocab_size == SR_DATA_EMBEDDED_VOCAB ||
        cfg->data_embedded_any_vocab)
        return st;
    return at_key(cfg, sr_config_was_set(cfg, "model.vocab_size") ? "model.vocab_size" : "model.preset",
                  "the model's vocabulary is %lld tokens but data.train is empty, so the run would train on the "
                  "embedded byte corpus (vocabulary %d): its tokens mean bytes, not your tokenizer's (hint: set "
                  "data.train to token shards made with the model's tokenizer, or data.embedded_any_vocab: true to "
                  "train on the bytes anyway)",
                  (long long)cfg->vocab_size, SR_DATA_EMBEDDED_VOCAB);
}
