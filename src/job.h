/* job.h — what each module needs from the job file, and the rules that
 * depend on the world size.
 *
 * job owns the translation from sr_config (the whole job, input layer) to
 * the small options structs of the lower modules — the transport's, the
 * engine's, the optimizer's, the schedule's, the checkpoint policy with the
 * rendered key = value list a manifest records and compares — filled once
 * in the run's setup, so following a job-file value leads from here to the
 * one module that uses it.  It also checks the rules that need the number
 * of ranks (the mesh, reshard_after_forward N, the batch split), where the
 * world size is known: at the start of a run, and for `shardrun config
 * check|show --ranks N`. */
#ifndef SR_JOB_H
#define SR_JOB_H

#include <stdarg.h>

#include "ckpt.h"
#include "comm.h"
#include "config.h"
#include "device.h"
#include "fsdp.h"
#include "mesh.h"
#include "model.h"
#include "optim.h"
#include "status.h"

typedef struct {
    sr_transport_opts transport;
    sr_fsdp_opts fsdp;
    sr_adamw_opts adamw;
    sr_lr_schedule schedule;
    sr_ckpt_opts ckpt;
    /* the rendered key = value list (ckpt.keys / ckpt.values point here) */
    int nkeys;
    const char **keys;
    char **values;
} sr_job;

/* The model's dims as the job declares them (cfg finalized): the family,
 * its dims, model.recompute; seq_len T (a run may train on shorter
 * sequences than model.seq_len: data.c decides, the caller passes it). */
sr_model_dims sr_job_model_dims(const sr_config *cfg, int T);

/* When model.init names a Hugging Face directory (config.json, no
 * manifest): its config.json read (modelfile.h) and made the source of
 * the model keys the job does not set (sr_config_set_model_source; before
 * sr_config_finalize).  SR_OK otherwise; SR_ERR_NOINPUT or SR_ERR_DATA
 * from config.json, naming the field (an unsupported rope_scaling type,
 * say). */
sr_status sr_job_model_init_source(sr_config *cfg);

/* Fills every options struct from cfg (finalized; cfg must outlive j).
 * SR_ERR_INTERNAL when out of memory.  Free with sr_job_free (also after a
 * failed init). */
sr_status sr_job_init(sr_job *j, const sr_config *cfg);
void sr_job_free(sr_job *j);

/* Resolves sharding.mixed_precision's `auto` values for a run on (or a
 * plan for) the cuda table or not: param_dtype auto becomes the device's
 * choice (sr_device_auto_dtype), reduce_dtype auto fp32.  Returns whether
 * param_dtype was auto (the start line and plan say so). */
bool sr_job_resolve_precision(sr_config *cfg, bool cuda_table);

/* The world-size rules for `ranks` ranks, seen from `rank`: the mesh
 * (shard x replicate = ranks), every reshard_after_forward N dividing the
 * shard group, batch_size = micro_batch x ranks x accumulation steps.
 * *mesh (may be NULL) receives the mesh.  SR_ERR_CONFIG with the place the
 * key was set. */
sr_status sr_job_check_world(const sr_config *cfg, int ranks, int rank, sr_mesh *mesh);

/* model.attention resolved for a run on (or a plan for) the cuda table
 * (cuda_table) or not, param_dtype resolved: *flash is whether attention
 * runs as flash attention (the cuda table in bf16, head dimension n_embd
 * / n_head = 64, n_head a multiple of n_kv_head; auto or flash there,
 * materialized elsewhere or when the job says so).  SR_ERR_CONFIG (78)
 * at the key's place naming why when the job says flash and it cannot
 * run. */
sr_status sr_job_attention(const sr_config *cfg, bool cuda_table, bool *flash);

/* model.attention: flash refused where the job file alone shows it cannot
 * run (device: cpu, param_dtype fp32, the head dimension, the heads):
 * sr_job_attention as for the table the job names, param_dtype auto as
 * that table resolves it.  `config check` and every command that loads a
 * job run it; a device found only at the run's start is sr_job_check's. */
sr_status sr_job_check_attention(const sr_config *cfg);

/* The job checks of a run, in one entry: the world-size rules above; with
 * the run's table `dev` (NULL before one is open: `config check`, `plan`)
 * also sharding.mixed_precision's auto resolved for it (*param_auto, may be
 * NULL, says whether param_dtype was auto), what a GPU run refuses
 * (comm.backend nccl in a build without NCCL, comm.backend tcp with more
 * than one rank) or a CPU run (comm.backend nccl), model.attention
 * (sr_job_attention: *flash, may be NULL, receives the choice), and
 * sharding.offload.*
 * (a table with separate memory; grads or params need optimizer; an
 * explicit grads: false beside optimizer: true is refused).  SR_ERR_CONFIG
 * with the key's file:line:col and why. */
sr_status sr_job_check(sr_config *cfg, int ranks, int rank, const sr_dev *dev, sr_mesh *mesh, bool *param_auto,
                       bool *flash);
/* The data rules, every one that needs only the job file and the files it
 * names, in the one function `train` and `config check` both call (so both
 * say the same): data.tokenizer loads (its statuses) and has no more ids
 * than model.vocab_size (SR_ERR_CONFIG at the key); the shards of
 * data.train and data.val are token shards (headers and sizes: 65/66
 * naming the file) holding a sequence; data.train empty trains on the
 * embedded byte corpus: a model.vocab_size other than its 256 is refused
 * (SR_ERR_CONFIG naming both vocabularies and data.train, at the key that
 * set the vocabulary) unless data.embedded_any_vocab is true.  The scan
 * of every token against the vocabulary is the run's (sr_data_open). */
sr_status sr_job_check_data(const sr_config *cfg);
/* st with the message "<where key was set (file:line:col, --set ...)>:
 * <fmt ...>" (the job module's errors at a key). */
sr_status sr_job_key_verror(const sr_config *cfg, sr_status st, const char *key, const char *fmt, va_list ap)
    __attribute__((format(printf, 4, 0)));
/* job_data.c: the data keys resolved (cfg finalized), before anything
 * checks them.  A directory in data.train (or data.val) is one `data
 * prepare` wrote: its index.json's shards of that split take its place
 * (SR_ERR_NOINPUT without index.json or without shards of the split,
 * SR_ERR_DATA for an index.json it did not write); data.train's also give
 * an unset data.val their validation shards and an unset data.tokenizer
 * the tokenizer index.json names, loaded and checked against the SHA-256
 * it records (SR_ERR_DATA when it differs, SR_ERR_NOINPUT when it is
 * missing).  Then with data.tokenizer and neither model.vocab_size nor a
 * model.init config.json, the vocabulary is the tokenizer's (padded as
 * always), unless the checkpoint the run would resume from (checkpoint.dir's
 * newest, or checkpoint.resume's PATH) has the job's model with another
 * vocabulary: a resume keeps the checkpoint's (an info line says so).
 * Without `check` (config show, plan: they may run where the data is
 * not) the tokenizer index.json names is taken without being read, and a
 * tokenizer that does not load leaves the vocabulary as it is, with a
 * warning; with it, a data.tokenizer the job sets that is not the one
 * index.json records is a warning. */
sr_status sr_job_resolve_data(sr_config *cfg, bool check);

#endif
