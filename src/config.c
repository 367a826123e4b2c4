/* config.c — the job-file schema, YAML parsing (libyaml), validation,
 * `config show` and `config keys`.
 *
 * The schema table `keys[]` is the single source of truth: each row names a
 * dotted key, its type, where it lives in sr_config, its default (as YAML
 * text, parsed by the same code as user input), its range, whether its
 * feature has landed, and its documentation.  Parsing walks the libyaml
 * document tree against the table; sections are the dotted prefixes of the
 * keys.  Messages carry file:line:col from libyaml's marks (converted to
 * 1-based). */
#include "srconfig.h"

#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <yaml.h>

#include "dtype.h"
#include "fsio.h"
#include "mem.h"
#include "suggest.h"
#include "yamlload.h"

typedef enum { T_INT, T_FLOAT, T_BOOL, T_STR, T_ENUM, T_RESHARD, T_STRLIST, T_SIGLIST } key_type;

typedef struct {
    const char *key; /* dotted path */
    key_type type;
    size_t off;               /* offset in sr_config */
    const char *def;          /* default as YAML text; NULL: from model.preset */
    double min, max;          /* inclusive range for T_INT, T_FLOAT, T_RESHARD */
    const char *const *names; /* T_ENUM values */
    bool landed;              /* false: a non-default value is "not implemented yet" */
    const char *doc;
} sr_key;

struct sr_key_origin {
    char *file; /* NULL: never set */
    int line, col;
    char *setarg; /* the --set argument, when set by --set */
};

static const char *const preset_names[] = {"tiny",       "gpt2-124m",  "gpt2-350m",    "gpt2-774m",    "gpt2-1.5b",
                                           "llama-tiny", "llama-125m", "llama-3.2-1b", "llama-3.1-8b", NULL};
static const char *const arch_names[] = {"gpt2", "llama", NULL};
static const char *const recompute_names[] = {"none", "blocks", NULL};
static const char *const schedule_names[] = {"cosine", "linear", "constant", NULL};
static const char *const backend_names[] = {"auto", "tcp", "nccl", NULL};
/* indexed by sr_device_want */
static const char *const device_names[] = {"auto", "cpu", "cuda", NULL};
/* indexed by sr_dtype: the job file's names of SR_DT_F32 and SR_DT_BF16,
 * then SR_MP_DTYPE_AUTO (resolved by sr_job_resolve_precision) */
static const char *const dtype_names[] = {"fp32", "bf16", "auto", NULL};
_Static_assert(SR_DT_F32 == 0 && SR_DT_BF16 == 1 && SR_MP_DTYPE_AUTO == 2, "dtype_names is indexed by sr_dtype");
static const char *const gradsync_names[] = {"per_step", "per_micro_batch", NULL};
static const char *const requeue_names[] = {"exit", "scontrol", NULL};
static const char *const before_end_names[] = {"auto", "off", NULL};

#define OFF(field) offsetof(sr_config, field)
#define I64MAX 9.2e18

/* clang-format off */
static const sr_key keys[] = {
 {"model.preset", T_ENUM, OFF(model_preset), "tiny", 0, 0, preset_names, true,
  "architecture preset: tiny (GPT-2: n_layer 4, n_head 4, n_embd 256, seq_len 256, vocab_size 256, byte-level); GPT-2's gpt2-124m, gpt2-350m, gpt2-774m, gpt2-1.5b (vocab_size 50257, seq_len 1024); llama-tiny (Llama: n_layer 4, n_head 4, n_kv_head 2, n_embd 256, ffn_dim 704, seq_len 256, vocab_size 256, byte-level, tied); llama-125m (n_layer 12, n_head 12, n_kv_head 4, n_embd 768, ffn_dim 2048, vocab_size 32000, seq_len 1024, untied); llama-3.2-1b and llama-3.1-8b (the dimensions of Llama-3.2-1B and Llama-3.1-8B: vocab_size 128256, rope_theta 500000, Llama-3 rope_scaling, seq_len 2048); explicit keys below override it"},
 {"model.arch", T_ENUM, OFF(arch), NULL, 0, 0, arch_names, true, "the family: gpt2 (learned positions, LayerNorm, GELU MLP, biases, tied head) or llama (rotary positions, RMSNorm, SwiGLU MLP, grouped-query attention, no biases); default: from the preset (gpt2 for tiny and the gpt2-* presets)"},
 {"model.n_layer", T_INT, OFF(n_layer), NULL, 1, 1024, NULL, true, "transformer blocks (default: from the preset)"},
 {"model.n_head", T_INT, OFF(n_head), NULL, 1, 1024, NULL, true, "attention heads; must divide n_embd (default: from the preset)"},
 {"model.n_embd", T_INT, OFF(n_embd), NULL, 1, 65536, NULL, true, "embedding width (default: from the preset)"},
 {"model.vocab_size", T_INT, OFF(vocab_size), NULL, 2, 16777216, NULL, true, "vocabulary size; every data token must be below it (default: from the preset)"},
 {"model.seq_len", T_INT, OFF(seq_len), NULL, 1, 1048576, NULL, true, "sequence length in tokens (default: from the preset)"},
 {"model.n_kv_head", T_INT, OFF(n_kv_head), NULL, 1, 1024, NULL, true, "llama: key/value heads (grouped-query attention); must divide n_head; n_head = multi-head attention (default: from the preset)"},
 {"model.ffn_dim", T_INT, OFF(ffn_dim), NULL, 1, 1048576, NULL, true, "llama: the SwiGLU MLP's hidden width (default: from the preset)"},
 {"model.norm_eps", T_FLOAT, OFF(norm_eps), "1.0e-5", 1e-12, 1, NULL, true, "llama: RMSNorm's epsilon"},
 {"model.rope_theta", T_FLOAT, OFF(rope_theta), NULL, 1, 1e12, NULL, true, "llama: the rotary embedding's base (default: from the preset: 10000, Llama-3's 500000)"},
 {"model.rope_scaling.factor", T_FLOAT, OFF(rope_factor), NULL, 0, 1e6, NULL, true, "llama: Llama-3's rotary frequency scaling factor; 0 = no scaling (default: from the preset)"},
 {"model.rope_scaling.low_freq_factor", T_FLOAT, OFF(rope_low_freq_factor), NULL, 1e-6, 1e6, NULL, true, "llama: Llama-3 scaling's low_freq_factor (default: from the preset, 1)"},
 {"model.rope_scaling.high_freq_factor", T_FLOAT, OFF(rope_high_freq_factor), NULL, 1e-6, 1e6, NULL, true, "llama: Llama-3 scaling's high_freq_factor, above low_freq_factor (default: from the preset, 4)"},
 {"model.rope_scaling.original_max_position", T_INT, OFF(rope_original_max_position), NULL, 1, 16777216, NULL, true, "llama: Llama-3 scaling's original context length (original_max_position_embeddings; default: from the preset, 8192)"},
 {"model.tie_embeddings", T_BOOL, OFF(tie_embeddings), NULL, 0, 0, NULL, true, "llama: the LM head is the token embedding (true) or a matrix of its own (false); gpt2 is always tied (default: from the preset)"},
 {"model.recompute", T_ENUM, OFF(recompute), "none", 0, 0, recompute_names, true, "activation recomputation: none keeps every block's activations from forward to backward; blocks keeps only each block's input and recomputes the block's forward before its backward (about one more forward per step, activations L x B x T x n_embd x element size plus one block's and the root's; gradients bitwise equal to none)"},
 {"model.init", T_STR, OFF(model_init), "\"\"", 0, 0, NULL, true, "start a fresh run (one with no checkpoint to resume) from pretrained weights: a Hugging Face directory (config.json with model.safetensors or a sharded model.safetensors.index.json, GPT-2 or Llama: the model keys the job does not set come from its config.json, and one that disagrees is refused), a .safetensors file with Hugging Face GPT-2 or Llama names (transformer. or model. prefix optional; f32, bf16 or f16) or an llm.c model file (GPT-2; version 3 fp32 or 5 bf16); the model keys must match its dims (a position embedding with more rows than seq_len gives its first seq_len); each rank reads only its shard, after the ranks have compared the file (size and a fingerprint: a different file on some node is refused), and every weight must be finite; empty = initialise from train.seed"},
 {"train.steps", T_INT, OFF(steps), "1000", 1, 1e12, NULL, true, "optimizer steps to train"},
 {"train.batch_size", T_INT, OFF(batch_size), "8", 1, 1048576, NULL, true, "sequences per optimizer step, all ranks together"},
 {"train.micro_batch", T_INT, OFF(micro_batch), "0", 0, 1048576, NULL, true, "sequences per forward pass per rank; 0 = batch_size / data-parallel ranks; accumulation steps = batch_size / (micro_batch x ranks)"},
 {"train.lr", T_FLOAT, OFF(lr), "6.0e-4", 0, 10, NULL, true, "peak learning rate"},
 {"train.warmup_steps", T_INT, OFF(warmup_steps), "100", 0, 1e12, NULL, true, "linear warmup steps from lr/warmup_steps to lr"},
 {"train.schedule", T_ENUM, OFF(schedule), "cosine", 0, 0, schedule_names, true, "decay after warmup: cosine, linear (both to min_lr at the last step) or constant"},
 {"train.min_lr", T_FLOAT, OFF(min_lr), "6.0e-5", 0, 10, NULL, true, "learning rate at the last step; at most lr"},
 {"train.weight_decay", T_FLOAT, OFF(weight_decay), "0.1", 0, 100, NULL, true, "AdamW decoupled weight decay, applied to tensors with two or more dimensions (matrices and embeddings), not to biases or LayerNorm"},
 {"train.beta1", T_FLOAT, OFF(beta1), "0.9", 0, 0.999999, NULL, true, "AdamW first-moment decay"},
 {"train.beta2", T_FLOAT, OFF(beta2), "0.95", 0, 0.999999999, NULL, true, "AdamW second-moment decay"},
 {"train.eps", T_FLOAT, OFF(eps), "1.0e-8", 1e-30, 1, NULL, true, "AdamW epsilon"},
 {"train.grad_clip", T_FLOAT, OFF(grad_clip), "1.0", 0, 1e9, NULL, true, "clip the global gradient norm to this value; 0 = off"},
 {"train.seed", T_INT, OFF(seed), "1337", 0, I64MAX, NULL, true, "seed for initialisation and data order"},
 {"train.eval_every", T_INT, OFF(eval_every), "0", 0, 1e12, NULL, true, "validation loss every N steps and at the end; 0 = off"},
 {"train.eval_batches", T_INT, OFF(eval_batches), "4", 1, 1e6, NULL, true, "global batches of validation data per evaluation"},
 {"data.train", T_STRLIST, OFF(data_train), "\"\"", 0, 0, NULL, true, "training token shards: a path, a glob, or a list of them; empty = the embedded corpus (bytes, vocabulary 256: a model.vocab_size other than 256 is refused unless data.embedded_any_vocab)"},
 {"data.embedded_any_vocab", T_BOOL, OFF(data_embedded_any_vocab), "false", 0, 0, NULL, true, "with data.train empty, train on the embedded byte corpus (vocabulary 256) even when model.vocab_size is not 256 (tests, benchmarks); false: such a job is refused (78), since a model with another tokenizer would learn from bytes"},
 {"data.tokenizer", T_STR, OFF(data_tokenizer), "\"\"", 0, 0, NULL, true, "the tokenizer the data was prepared with (what data prepare --tokenizer takes: a tokenizer.json, a vocab.json with merges.txt beside it, or [gpt2:|llama3:]RANKS.tiktoken): log.sample_every starts from its end-of-text token and prints decoded text, shardrun sample uses it when not given --tokenizer, and checkpoints record its fingerprint (a resume with another tokenizer is refused unless data.allow_changed); more ids than model.vocab_size is refused (78); empty = none"},
 {"data.allow_changed", T_BOOL, OFF(data_allow_changed), "false", 0, 0, NULL, true, "resume even when the data differs from what the checkpoint recorded (a shard changed, added or removed, another tokenizer), with a warning naming the first difference; false: such a resume is refused (78)"},
 {"data.val", T_STRLIST, OFF(data_val), "\"\"", 0, 0, NULL, true, "validation token shards; empty = the embedded corpus's held-out tail when data.train is empty, none otherwise"},
 {"log.every", T_INT, OFF(log_every), "1", 1, 1e12, NULL, true, "progress line and metrics record every N steps"},
 {"log.metrics", T_STR, OFF(log_metrics), "\"\"", 0, 0, NULL, true, "JSON-lines metrics file written by rank 0: one step record per logged step and one event record per start, resume, checkpoint, preemption and evaluation; a resumed run appends; shardrun report draws it; empty = none"},
 {"log.sample_every", T_INT, OFF(log_sample_every), "0", 0, 1e12, NULL, true, "every N steps rank 0 prints a sample of generated text: what shardrun sample prints for that step's checkpoint with --tokens 64 --seed S, S = train.seed + N (the start token, temperature 0.8, top-k 40): the fp32 master gathered to the host, the run's threads, the other ranks waiting; skipped with a warning when the model and its key/value cache exceed 25% of the node's memory divided by its ranks; 0 = off"},
 {"log.flight_recorder", T_INT, OFF(log_flight_recorder), "2048", 0, 16777216, NULL, true, "entries of every rank's flight recorder: a ring of its last collectives and step marks (sequence number, operation, group, bytes, plane, enqueue/start/end times, state), dumped to log.flight_dir as rank<N>.json when the run ends with 69 or 70, on preemption and on SIGQUIT (which then lets training go on); shardrun debug flight reads the dumps; 0 = off"},
 {"log.flight_dir", T_STR, OFF(log_flight_dir), "\"\"", 0, 0, NULL, true, "where the flight recorder's dumps go; empty = <checkpoint.dir>/flight/<job id>.<restart>/, or ./shardrun-flight.<job id or pid>/ without a checkpoint.dir"},
 {"log.straggler_pct", T_FLOAT, OFF(log_straggler_pct), "20", 0.1, 1e6, NULL, true, "a rank whose busy time (step time minus time waiting on collectives) exceeds the median across ranks by more than this many percent for 3 log intervals in a row is named in a warning (a straggler)"},
 {"log.trace_steps", T_STR, OFF(log_trace_steps), "\"\"", 0, 0, NULL, true, "A-B: every rank writes a Chrome trace-event file (rank<N>.json in log.trace_dir, for Perfetto or chrome://tracing) of steps A to B (1-based, inclusive; one step: A or A-A): host phases, the streams' waits, the blocks' forward and backward, the units' gathers and reductions, collectives with their sizes (from the flight recorder, so log.flight_recorder must not be 0), checkpoint snapshot and write; shardrun debug trace merges the ranks' files; empty = off"},
 {"log.trace_dir", T_STR, OFF(log_trace_dir), "\"\"", 0, 0, NULL, true, "where log.trace_steps writes; empty = beside the flight recorder's directory: <checkpoint.dir>/trace/<job id>.<restart>/, or ./shardrun-trace.<job id or pid>/ without a checkpoint.dir"},
 {"log.tensorboard", T_STR, OFF(log_tensorboard), "\"\"", 0, 0, NULL, true, "directory of TensorBoard event files written by rank 0 at each logged step: loss, val_loss, lr, grad_norm, tokens_per_s, mfu, memory, comm_exposed_ms and the straggler spread, with checkpoint, preempt and resume events as text; every start writes a new file with a session-start record at its first step, so a requeued or resumed run continues one curve with no redone step twice; empty = none"},
 {"log.prometheus", T_STR, OFF(log_prometheus), "\"\"", 0, 0, NULL, true, "a node_exporter textfile-collector file (a .prom file in the collector's directory, on a node-local path) that local rank 0 of each node rewrites (a temporary file, then a rename) at each logged step with its node's ranks: step, loss, tokens/s, MFU, memory by space, the last committed checkpoint step and its age, exposed communication, labelled with the job id, rank and host; %h and %j expand to the host name and the Slurm job id; empty = none"},
 {"threads", T_INT, OFF(threads), "0", 0, 4096, NULL, true, "compute threads per rank; 0 = all cores available to the rank"},
 {"comm.backend", T_ENUM, OFF(comm_backend), "auto", 0, 0, backend_names, true, "data plane: auto (nccl for GPU runs of more than one rank, tcp for CPU runs), tcp or nccl; the control plane is always tcp"},
 {"comm.timeout_s", T_FLOAT, OFF(comm_timeout_s), "300", 0.001, 1e7, NULL, true, "deadline of every blocking wait on a peer, in seconds"},
 {"comm.interface", T_STR, OFF(comm_interface), "\"\"", 0, 0, NULL, true, "address or interface name the TCP transport binds to, and NCCL_SOCKET_IFNAME when that is unset; empty = the address of the host name"},
 {"sharding.blocks_per_unit", T_INT, OFF(blocks_per_unit), "1", 1, 1024, NULL, true, "transformer blocks per sharded unit"},
 {"sharding.reshard_after_forward.blocks", T_RESHARD, OFF(reshard_blocks), "true", 2, 1048576, NULL, true, "free block units' full parameters after forward: true, false, or N (keep a copy sharded over N ranks)"},
 {"sharding.reshard_after_forward.root", T_RESHARD, OFF(reshard_root), "false", 2, 1048576, NULL, true, "the same for the root unit (embeddings, final norm, head)"},
 {"sharding.mixed_precision.param_dtype", T_ENUM, OFF(param_dtype), "auto", 0, 0, dtype_names, true, "dtype of gathered parameters for compute: fp32, bf16, or auto (bf16 on a GPU, fp32 on the CPU and the fake device, so a fake-device run stays bitwise a CPU run); the fp32 master shard is always kept; the start line and shardrun plan name the dtype a run uses"},
 {"sharding.mixed_precision.reduce_dtype", T_ENUM, OFF(reduce_dtype), "fp32", 0, 0, dtype_names, true, "dtype of gradient reduce-scatter: fp32, bf16, or auto (fp32)"},
 {"sharding.mesh.shard", T_INT, OFF(mesh_shard), "0", 0, 1048576, NULL, true, "ranks a unit is sharded over; 0 = ranks / replicate"},
 {"sharding.mesh.replicate", T_INT, OFF(mesh_replicate), "1", 1, 1048576, NULL, true, "replica groups (HSDP); shard x replicate = ranks"},
 {"sharding.prefetch.forward", T_INT, OFF(prefetch_forward), "1", 0, 16, NULL, true, "units gathered ahead during forward"},
 {"sharding.prefetch.backward", T_INT, OFF(prefetch_backward), "1", 0, 16, NULL, true, "units gathered ahead during backward"},
 {"sharding.grad_sync", T_ENUM, OFF(grad_sync), "per_step", 0, 0, gradsync_names, true, "per_step: accumulate full gradients, reduce-scatter once per step; per_micro_batch: reduce-scatter every micro-batch"},
 {"sharding.offload.params", T_BOOL, OFF(offload_params), "false", 0, 0, NULL, true, "with offload.optimizer, also drop the device copy of the parameter shard: each gather uploads this rank's part just in time (GPU runs; needs optimizer)"},
 {"sharding.offload.grads", T_BOOL, OFF(offload_grads), "false", 0, 0, NULL, true, "the gradient shard in host memory; implied by offload.optimizer (an explicit false beside it is refused; true alone is refused: it would only move state out and back)"},
 {"sharding.offload.optimizer", T_BOOL, OFF(offload_optimizer), "false", 0, 0, NULL, true, "GPU runs: the fp32 master weights, Adam m and v and the gradient shard in host memory and AdamW on the host; each unit's reduced gradients are copied to the host as its reduction ends; training is bitwise that without offload"},
 {"sharding.offload.pin_memory", T_BOOL, OFF(pin_memory), "true", 0, 0, NULL, true, "pin the offloaded host memory (false: pageable memory, allowed with a warning: every copy becomes synchronous)"},
 {"device", T_ENUM, OFF(device), "auto", 0, 0, device_names, true, "compute device: auto (a GPU when this build has CUDA and one is usable, and with several ranks NCCL too; else the CPU), cpu, or cuda (one GPU per rank, picked from the local rank; several ranks need a build with NCCL; fails with 78 when none is usable)"},
 {"checkpoint.dir", T_STR, OFF(ckpt_dir), "\"\"", 0, 0, NULL, true, "directory of sharded checkpoints, created with its missing parents (one notice line names them); empty = no checkpoints"},
 {"checkpoint.every_steps", T_INT, OFF(ckpt_every_steps), "0", 0, 1e12, NULL, true, "checkpoint every N steps; 0 = off"},
 {"checkpoint.every_minutes", T_FLOAT, OFF(ckpt_every_minutes), "0", 0, 1e7, NULL, true, "checkpoint every N minutes; 0 = off"},
 {"checkpoint.async", T_BOOL, OFF(ckpt_async), "true", 0, 0, NULL, true, "periodic saves snapshot the shard into host memory and write it in a background thread while training goes on; the commit follows at a later step boundary (false: training waits for every save)"},
 {"checkpoint.async_max_mb", T_INT, OFF(ckpt_async_max_mb), "0", 0, 1e9, NULL, true, "largest snapshot per rank, MiB; 0 = 25% of the node's memory divided by its ranks; a larger snapshot makes saves synchronous (with a warning)"},
 {"checkpoint.keep", T_INT, OFF(ckpt_keep), "3", 1, 1e6, NULL, true, "newest N checkpoints kept (the newest verified one always)"},
 {"checkpoint.keep_every", T_INT, OFF(ckpt_keep_every), "0", 0, 1e12, NULL, true, "also keep steps that are multiples of N; 0 = off"},
 {"checkpoint.resume", T_STR, OFF(ckpt_resume), "auto", 0, 0, NULL, true, "auto (newest checkpoint that verifies), never, or a checkpoint path"},
 {"preemption.signals", T_SIGLIST, OFF(preempt_signals), "[USR1, USR2, TERM, INT]", 0, 0, NULL, true, "signals that request a checkpoint and exit"},
 {"preemption.requeue", T_ENUM, OFF(preempt_requeue), "exit", 0, 0, requeue_names, true, "exit: exit with exit_status (for RequeueExit); scontrol: rank 0 runs scontrol requeue, all exit 0"},
 {"preemption.exit_status", T_INT, OFF(preempt_exit_status), "75", 1, 255, NULL, true, "exit status after a preemption checkpoint (not 76: the crash-loop guard's)"},
 {"preemption.max_stalled_restarts", T_INT, OFF(preempt_max_stalled), "3", 0, 1000000, NULL, true, "crash-loop guard: when the last N starts all resumed from the same step and none committed a newer checkpoint (starts that ended with a preemption save or completed do not count), the next start refuses with status 76 naming them (shardrun ckpt list shows the start history); 0 = off, the way to start again after fixing the cause"},
 {"preemption.before_end", T_ENUM, OFF(preempt_before_end), "auto", 0, 0, before_end_names, true, "auto: under Slurm, rank 0 reads the job's end time (at start and every 5 minutes) and the ranks save and exit with exit_status, as for a signal, when the time left falls below the measured step and save time plus end_margin_s (no --signal needed); off: signals only"},
 {"preemption.end_margin_s", T_FLOAT, OFF(preempt_end_margin_s), "30", 0, 86400, NULL, true, "seconds added to the measured step and save time before the job's end time (preemption.before_end)"},
 {"slurm.comment_every_minutes", T_FLOAT, OFF(slurm_comment_every_minutes), "0", 0, 1e6, NULL, true, "rank 0 sets the Slurm job's comment (squeue -o %k, sacct -o Comment) to step/total, loss, last committed step and ETA every N minutes (scontrol update); a failed update warns once; 0 = off"},
};
/* clang-format on */
#define NKEYS ((int)(sizeof keys / sizeof keys[0]))

/* The presets' dims; a GPT-2 row's Llama fields are what gpt2 implies. */
static const struct {
    int64_t n_layer, n_head, n_embd, vocab_size, seq_len;
    int64_t arch, n_kv_head, ffn_dim;
    bool tie;
    double rope_theta, rope_factor, rope_low, rope_high;
    int64_t rope_orig;
} presets[] = {
    {4, 4, 256, 256, 256, SR_CFG_ARCH_GPT2, 4, 1024, true, 10000, 0, 1, 4, 8192},        /* tiny */
    {12, 12, 768, 50257, 1024, SR_CFG_ARCH_GPT2, 12, 3072, true, 10000, 0, 1, 4, 8192},  /* gpt2-124m */
    {24, 16, 1024, 50257, 1024, SR_CFG_ARCH_GPT2, 16, 4096, true, 10000, 0, 1, 4, 8192}, /* gpt2-350m */
    {36, 20, 1280, 50257, 1024, SR_CFG_ARCH_GPT2, 20, 5120, true, 10000, 0, 1, 4, 8192}, /* gpt2-774m */
    {48, 25, 1600, 50257, 1024, SR_CFG_ARCH_GPT2, 25, 6400, true, 10000, 0, 1, 4, 8192}, /* gpt2-1.5b */
    {4, 4, 256, 256, 256, SR_CFG_ARCH_LLAMA, 2, 704, true, 10000, 0, 1, 4, 8192},        /* llama-tiny */
    {12, 12, 768, 32000, 1024, SR_CFG_ARCH_LLAMA, 4, 2048, false, 10000, 0, 1, 4, 8192}, /* llama-125m */
    /* Llama-3.2-1B and Llama-3.1-8B as their config.json give them */
    {16, 32, 2048, 128256, 2048, SR_CFG_ARCH_LLAMA, 8, 8192, true, 500000, 32, 1, 4, 8192},  /* llama-3.2-1b */
    {32, 32, 4096, 128256, 2048, SR_CFG_ARCH_LLAMA, 8, 14336, false, 500000, 8, 1, 4, 8192}, /* llama-3.1-8b */
};
_Static_assert(sizeof presets / sizeof presets[0] == sizeof preset_names / sizeof preset_names[0] - 1,
               "one preset row per name");

/* CONT is accepted and ignored (Slurm sends it along with every SIGTERM;
 * it is never a reason to stop). */
static const char *const signal_names[] = {"HUP", "INT", "QUIT", "USR1", "USR2", "TERM", "ALRM", "XCPU", "CONT", NULL};

/* ------------------------------------------------------------------------ */
/* Where a value came from, for messages. */

typedef struct {
    const char *file;   /* file name, or NULL for --set */
    const char *setarg; /* the --set argument */
} parse_ctx;

static void format_where(char *buf, size_t n, const parse_ctx *ctx, yaml_mark_t mark) {
    if (ctx->file)
        snprintf(buf, n, "%s:%zu:%zu", ctx->file, mark.line + 1, mark.column + 1);
    else
        snprintf(buf, n, "--set %s", ctx->setarg);
}

static sr_status error_at(const parse_ctx *ctx, yaml_mark_t mark, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static sr_status error_at(const parse_ctx *ctx, yaml_mark_t mark, const char *fmt, ...) {
    char where[1024], msg[2048];
    format_where(where, sizeof where, ctx, mark);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return sr_error(SR_ERR_CONFIG, "%s: %s", where, msg);
}

/* ------------------------------------------------------------------------ */

static void *field(sr_config *cfg, const sr_key *k) { return (char *)cfg + k->off; }
static const void *cfield(const sr_config *cfg, const sr_key *k) { return (const char *)cfg + k->off; }

static int key_index(const char *path) {
    for (int i = 0; i < NKEYS; i++)
        if (strcmp(keys[i].key, path) == 0)
            return i;
    return -1;
}

/* True when `path` is a section: some key starts with "path.". */
static bool is_section(const char *path) {
    size_t n = strlen(path);
    for (int i = 0; i < NKEYS; i++)
        if (strncmp(keys[i].key, path, n) == 0 && keys[i].key[n] == '.')
            return true;
    return false;
}

static void strlist_free(sr_strlist *l) {
    for (int i = 0; i < l->count; i++)
        free(l->items[i]);
    free(l->items);
    l->items = NULL;
    l->count = 0;
}

static const char *scalar_text(yaml_node_t *node) { return (const char *)node->data.scalar.value; }

static bool scalar_is_plain(yaml_node_t *node) { return node->data.scalar.style == YAML_PLAIN_SCALAR_STYLE; }

static bool scalar_is_null(yaml_node_t *node) {
    if (node->type != YAML_SCALAR_NODE || !scalar_is_plain(node))
        return false;
    const char *s = scalar_text(node);
    return s[0] == '\0' || strcmp(s, "~") == 0 || strcmp(s, "null") == 0 || strcmp(s, "Null") == 0 ||
           strcmp(s, "NULL") == 0;
}

static const char *node_kind(yaml_node_t *node) {
    switch (node->type) {
    case YAML_MAPPING_NODE:
        return "a mapping";
    case YAML_SEQUENCE_NODE:
        return "a list";
    default:
        return scalar_is_null(node) ? "nothing (null)" : "a scalar";
    }
}

/* Parses a YAML boolean; returns -1 when `s` is not one. */
static int parse_bool(const char *s) {
    static const char *const t[] = {"true", "True", "TRUE", "yes", "Yes", "YES", "on", "On", "ON", NULL};
    static const char *const f[] = {"false", "False", "FALSE", "no", "No", "NO", "off", "Off", "OFF", NULL};
    for (int i = 0; t[i]; i++)
        if (strcmp(s, t[i]) == 0)
            return 1;
    for (int i = 0; f[i]; i++)
        if (strcmp(s, f[i]) == 0)
            return 0;
    return -1;
}

/* Parses a whole decimal integer.  Returns 0, or ERANGE on overflow, or
 * EINVAL when `s` is not an integer. */
static int parse_int(const char *s, int64_t *out) {
    if (!*s || isspace((unsigned char)*s))
        return EINVAL;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (*end != '\0')
        return EINVAL;
    if (errno == ERANGE)
        return ERANGE;
    *out = v;
    return 0;
}

static int parse_float(const char *s, double *out) {
    if (!*s || isspace((unsigned char)*s))
        return EINVAL;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (*end != '\0')
        return EINVAL;
    if (errno == ERANGE && fabs(v) > 1.0)
        return ERANGE;
    if (!isfinite(v))
        return EINVAL;
    *out = v;
    return 0;
}

static void fmt_range_int(char *buf, size_t n, const sr_key *k) {
    if (k->max >= I64MAX)
        snprintf(buf, n, "an integer >= %.0f", k->min);
    else
        snprintf(buf, n, "an integer in [%.0f, %.0f]", k->min, k->max);
}

static void fmt_enum(char *buf, size_t n, const char *const *names) {
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; names[i]; i++) {
        int w = snprintf(buf + used, n - used, "%s%s", i ? (names[i + 1] ? ", " : " or ") : "", names[i]);
        if (w < 0 || (size_t)w >= n - used)
            break;
        used += (size_t)w;
    }
}

/* ---- one setter per value type (the type table is below) ---- */

typedef struct {
    sr_config *cfg;
    const sr_key *k;
    yaml_document_t *doc;
    yaml_node_t *node;
    const parse_ctx *ctx;
} leaf;

#define LEAF_ERR(l, ...) error_at((l)->ctx, (l)->node->start_mark, __VA_ARGS__)

/* An explicitly tagged scalar (`!!str 3`) is never a number or a boolean. */
static sr_status refuse_tagged(const leaf *l, const char *expect) {
    return LEAF_ERR(l, "%s: expected %s, got '%s' with an explicit tag (hint: remove the tag)", l->k->key, expect,
                    scalar_text(l->node));
}

/* A plain, non-null scalar for a number key; else the error. */
static sr_status need_number(const leaf *l, const char *expect) {
    if (sr_yaml_explicit_str(l->node))
        return refuse_tagged(l, expect);
    if (l->node->type == YAML_SCALAR_NODE && !scalar_is_plain(l->node))
        return LEAF_ERR(l, "%s: expected %s, got the quoted string \"%s\" (hint: remove the quotes)", l->k->key, expect,
                        scalar_text(l->node));
    if (l->node->type != YAML_SCALAR_NODE || scalar_is_null(l->node))
        return LEAF_ERR(l, "%s: expected %s, got %s", l->k->key, expect, node_kind(l->node));
    return SR_OK;
}

static sr_status set_int(const leaf *l) {
    const sr_key *k = l->k;
    char expect[512];
    fmt_range_int(expect, sizeof expect, k);
    sr_status st = need_number(l, expect);
    if (st != SR_OK)
        return st;
    const char *text = scalar_text(l->node);
    int64_t v;
    int rc = parse_int(text, &v);
    if (rc == ERANGE)
        return LEAF_ERR(l, "%s: value '%s' overflows a 64-bit integer; expected %s", k->key, text, expect);
    if (rc) {
        double dv;
        return LEAF_ERR(l, "%s: expected %s, got '%s'%s", k->key, expect, text,
                        parse_float(text, &dv) == 0 ? " (hint: write a whole number)" : "");
    }
    if ((double)v < k->min || (double)v > k->max)
        return LEAF_ERR(l, "%s: value %s is out of range; expected %s", k->key, text, expect);
    *(int64_t *)field(l->cfg, k) = v;
    return SR_OK;
}

static sr_status set_float(const leaf *l) {
    const sr_key *k = l->k;
    char expect[512];
    snprintf(expect, sizeof expect, "a number in [%g, %g]", k->min, k->max);
    sr_status st = need_number(l, expect);
    if (st != SR_OK)
        return st;
    const char *text = scalar_text(l->node);
    double v;
    int rc = parse_float(text, &v);
    if (rc == ERANGE)
        return LEAF_ERR(l, "%s: value '%s' overflows a double; expected %s", k->key, text, expect);
    if (rc)
        return LEAF_ERR(l, "%s: expected %s, got '%s'", k->key, expect, text);
    if (v < k->min || v > k->max)
        return LEAF_ERR(l, "%s: value %s is out of range; expected %s", k->key, text, expect);
    *(double *)field(l->cfg, k) = v;
    return SR_OK;
}

static sr_status set_bool(const leaf *l) {
    yaml_node_t *node = l->node;
    if (sr_yaml_explicit_str(node))
        return refuse_tagged(l, "true or false");
    bool scalar = node->type == YAML_SCALAR_NODE;
    int b = scalar && scalar_is_plain(node) ? parse_bool(scalar_text(node)) : -1;
    if (b < 0)
        return LEAF_ERR(l, "%s: expected true or false, got %s%s%s", l->k->key, scalar ? "'" : node_kind(node),
                        scalar ? scalar_text(node) : "", scalar ? "'" : "");
    *(bool *)field(l->cfg, l->k) = b;
    return SR_OK;
}

static sr_status set_str(const leaf *l) {
    if (l->node->type != YAML_SCALAR_NODE)
        return LEAF_ERR(l, "%s: expected a string, got %s", l->k->key, node_kind(l->node));
    const char *text = scalar_is_null(l->node) ? "" : scalar_text(l->node);
    if (strlen(text) > 4095)
        return LEAF_ERR(l, "%s: expected a string of at most 4095 bytes", l->k->key);
    char *s = sr_strdup(text);
    if (!s)
        return sr_error_oom("a job-file string");
    char **dst = (char **)field(l->cfg, l->k);
    free(*dst);
    *dst = s;
    return SR_OK;
}

static sr_status set_enum(const leaf *l) {
    const sr_key *k = l->k;
    char expect[512];
    fmt_enum(expect, sizeof expect, k->names);
    if (l->node->type != YAML_SCALAR_NODE || scalar_is_null(l->node))
        return LEAF_ERR(l, "%s: expected one of %s, got %s", k->key, expect, node_kind(l->node));
    for (int i = 0; k->names[i]; i++)
        if (strcmp(k->names[i], scalar_text(l->node)) == 0) {
            *(int64_t *)field(l->cfg, k) = i;
            return SR_OK;
        }
    return LEAF_ERR(l, "%s: expected one of %s, got '%s'", k->key, expect, scalar_text(l->node));
}

static sr_status set_reshard(const leaf *l) {
    const sr_key *k = l->k;
    char expect[512];
    snprintf(expect, sizeof expect, "true, false, or an integer N in [%.0f, %.0f]", k->min, k->max);
    if (sr_yaml_explicit_str(l->node))
        return refuse_tagged(l, expect);
    if (l->node->type != YAML_SCALAR_NODE || !scalar_is_plain(l->node) || scalar_is_null(l->node))
        return LEAF_ERR(l, "%s: expected %s, got %s", k->key, expect, node_kind(l->node));
    const char *text = scalar_text(l->node);
    int b = parse_bool(text);
    int64_t v;
    if (b == 1)
        v = SR_RESHARD_TRUE;
    else if (b == 0)
        v = SR_RESHARD_FALSE;
    else if (parse_int(text, &v))
        return LEAF_ERR(l, "%s: expected %s, got '%s'", k->key, expect, text);
    else if ((double)v < k->min || (double)v > k->max)
        return LEAF_ERR(l, "%s: value %s is out of range; expected %s%s", k->key, text, expect,
                        v == 1 ? " (hint: 1 keeps a full copy on every rank: write false)" : "");
    *(int64_t *)field(l->cfg, k) = v;
    return SR_OK;
}

/* One list item: a string, or (T_SIGLIST) a signal name without SIG. */
static sr_status list_item(const leaf *l, yaml_node_t *item, int i, const char **out) {
    const sr_key *k = l->k;
    if (!item || item->type != YAML_SCALAR_NODE)
        return error_at(l->ctx, item ? item->start_mark : l->node->start_mark,
                        "%s: expected a string as list item %d, got %s", k->key, i + 1,
                        item ? node_kind(item) : "nothing");
    const char *s = scalar_is_null(item) ? "" : scalar_text(item);
    if (k->type == T_SIGLIST) {
        const char *name = strncmp(s, "SIG", 3) == 0 ? s + 3 : s;
        bool ok = false;
        for (int j = 0; signal_names[j]; j++)
            ok = ok || strcmp(signal_names[j], name) == 0;
        if (!ok) {
            char e2[256];
            fmt_enum(e2, sizeof e2, signal_names);
            return error_at(l->ctx, item->start_mark, "%s: expected signal names among %s, got '%s'%s", k->key, e2, s,
                            strcmp(name, "KILL") == 0 || strcmp(name, "STOP") == 0
                                ? " (hint: SIGKILL and SIGSTOP cannot be caught)"
                                : "");
        }
        s = name;
    }
    *out = s;
    return SR_OK;
}

static sr_status set_list(const leaf *l) {
    const sr_key *k = l->k;
    yaml_node_t *node = l->node;
    yaml_node_item_t *it = NULL, *end = NULL;
    yaml_node_t *one = NULL;
    if (node->type == YAML_SCALAR_NODE && k->type == T_STRLIST) {
        one = node;
    } else if (node->type == YAML_SEQUENCE_NODE) {
        it = node->data.sequence.items.start;
        end = node->data.sequence.items.top;
    } else {
        return LEAF_ERR(l, "%s: expected %s, got %s", k->key,
                        k->type == T_SIGLIST ? "a list of signal names, e.g. [USR1, TERM]"
                                             : "a path, a glob, or a list of them",
                        node_kind(node));
    }
    int n = one ? 1 : (int)(end - it);
    sr_strlist nl = {0};
    nl.items = sr_calloc((size_t)n + 1, sizeof *nl.items);
    if (!nl.items)
        return sr_error_oom("a job-file list");
    for (int i = 0; i < n; i++) {
        const char *s;
        sr_status st = list_item(l, one ? one : yaml_document_get_node(l->doc, it[i]), i, &s);
        if (st != SR_OK) {
            strlist_free(&nl);
            return st;
        }
        if (one && s[0] == '\0') /* "" is the empty list */
            break;
        nl.items[nl.count] = sr_strdup(s);
        if (!nl.items[nl.count]) {
            strlist_free(&nl);
            return sr_error_oom("a job-file list");
        }
        nl.count++;
    }
    sr_strlist *dst = (sr_strlist *)field(l->cfg, k);
    strlist_free(dst);
    *dst = nl;
    return SR_OK;
}

/* ---- formatting values ---- */

static void fmt_double(char *buf, size_t n, double v) {
    /* Shortest form that reads back to the same double. */
    for (int prec = 6; prec <= 17; prec++) {
        snprintf(buf, n, "%.*g", prec, v);
        if (strtod(buf, NULL) == v)
            break;
    }
    /* Keep it a YAML float-looking number. */
    if (!strpbrk(buf, ".eEn"))
        strncat(buf, ".0", n - strlen(buf) - 1);
}

static void fmt_yaml_string(char *buf, size_t n, const char *s) {
    size_t used = 0;
    buf[used++] = '"';
    for (; *s && used + 8 < n; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') {
            buf[used++] = '\\';
            buf[used++] = (char)c;
        } else if (c < 0x20) {
            used += (size_t)snprintf(buf + used, n - used, "\\x%02x", c);
        } else {
            buf[used++] = (char)c;
        }
    }
    buf[used++] = '"';
    buf[used] = '\0';
}

bool sr_config_unquote(const char *printed, char *out, size_t n) {
    size_t len = strlen(printed), used = 0;
    if (len < 2 || printed[0] != '"' || printed[len - 1] != '"' || n == 0)
        return false;
    for (size_t i = 1; i + 1 < len; i++) {
        char c = printed[i];
        if (c == '\\') {
            char e = printed[++i];
            if (e == '"' || e == '\\') {
                c = e;
            } else if (e == 'x' && i + 2 < len - 1) {
                char hex[3] = {printed[i + 1], printed[i + 2], '\0'};
                char *end;
                c = (char)strtol(hex, &end, 16);
                if (*end)
                    return false;
                i += 2;
            } else {
                return false;
            }
        }
        if (used + 1 >= n)
            return false;
        out[used++] = c;
    }
    out[used] = '\0';
    return true;
}

static void fmt_int(const void *f, const sr_key *k, char *buf, size_t n) {
    (void)k;
    snprintf(buf, n, "%lld", (long long)*(const int64_t *)f);
}

static void fmt_float(const void *f, const sr_key *k, char *buf, size_t n) {
    (void)k;
    fmt_double(buf, n, *(const double *)f);
}

static void fmt_bool(const void *f, const sr_key *k, char *buf, size_t n) {
    (void)k;
    snprintf(buf, n, "%s", *(const bool *)f ? "true" : "false");
}

static void fmt_str(const void *f, const sr_key *k, char *buf, size_t n) {
    (void)k;
    fmt_yaml_string(buf, n, *(char *const *)f ? *(char *const *)f : "");
}

static void fmt_enum_value(const void *f, const sr_key *k, char *buf, size_t n) {
    snprintf(buf, n, "%s", k->names[*(const int64_t *)f]);
}

static void fmt_reshard(const void *f, const sr_key *k, char *buf, size_t n) {
    (void)k;
    int64_t v = *(const int64_t *)f;
    if (v == SR_RESHARD_TRUE)
        snprintf(buf, n, "true");
    else if (v == SR_RESHARD_FALSE)
        snprintf(buf, n, "false");
    else
        snprintf(buf, n, "%lld", (long long)v);
}

static void fmt_list(const void *f, const sr_key *k, char *buf, size_t n) {
    const sr_strlist *l = f;
    if (k->type == T_STRLIST && l->count == 0) {
        snprintf(buf, n, "\"\"");
        return;
    }
    size_t used = (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < l->count && used < n; i++) {
        char item[4200];
        if (k->type == T_SIGLIST)
            snprintf(item, sizeof item, "%s", l->items[i]);
        else
            fmt_yaml_string(item, sizeof item, l->items[i]);
        used += (size_t)snprintf(buf + used, n - used, "%s%s", i ? ", " : "", item);
    }
    if (used < n)
        snprintf(buf + used, n - used, "]");
}

/* ---- describing types (config keys, shardrun.yaml(5)) ---- */

static void desc_int(const sr_key *k, char *buf, size_t n) {
    if (k->max >= I64MAX)
        snprintf(buf, n, "integer >= %.0f", k->min);
    else
        snprintf(buf, n, "integer %.0f..%.0f", k->min, k->max);
}

static void desc_float(const sr_key *k, char *buf, size_t n) { snprintf(buf, n, "number %g..%g", k->min, k->max); }

static void desc_enum(const sr_key *k, char *buf, size_t n) {
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; k->names[i] && used < n; i++)
        used += (size_t)snprintf(buf + used, n - used, "%s%s", i ? " | " : "", k->names[i]);
}

static void free_str(void *f) {
    free(*(char **)f);
    *(char **)f = NULL;
}

static void free_list(void *f) { strlist_free(f); }

/* ---- the type table: one row per value type ---- */

typedef struct {
    sr_status (*set)(const leaf *l);
    void (*format)(const void *field, const sr_key *k, char *buf, size_t n);
    void (*describe)(const sr_key *k, char *buf, size_t n); /* NULL: the fixed text */
    const char *text;
    void (*release)(void *field); /* NULL: nothing owned */
} value_type;

static const value_type types[] = {
    [T_INT] = {set_int, fmt_int, desc_int, NULL, NULL},
    [T_FLOAT] = {set_float, fmt_float, desc_float, NULL, NULL},
    [T_BOOL] = {set_bool, fmt_bool, NULL, "true | false", NULL},
    [T_STR] = {set_str, fmt_str, NULL, "string", free_str},
    [T_ENUM] = {set_enum, fmt_enum_value, desc_enum, NULL, NULL},
    [T_RESHARD] = {set_reshard, fmt_reshard, NULL, "true | false | N >= 2", NULL},
    [T_STRLIST] = {set_list, fmt_list, NULL, "path | glob | list", free_list},
    [T_SIGLIST] = {set_list, fmt_list, NULL, "list of signal names", free_list},
};

/* Sets one leaf key from a YAML node, validating its type and range. */
static sr_status set_leaf(sr_config *cfg, int ki, yaml_document_t *doc, yaml_node_t *node, const parse_ctx *ctx) {
    leaf l = {cfg, &keys[ki], doc, node, ctx};
    return types[keys[ki].type].set(&l);
}

static void fmt_value(const sr_config *cfg, const sr_key *k, char *buf, size_t n) {
    types[k->type].format(cfield(cfg, k), k, buf, n);
}

static const char *type_name(const sr_key *k, char *buf, size_t n) {
    if (types[k->type].describe)
        types[k->type].describe(k, buf, n);
    else
        snprintf(buf, n, "%s", types[k->type].text);
    return buf;
}

/* Names other trainers (nanoGPT, llm.c, Hugging Face, Megatron) give what
 * a key here holds: an unknown key whose last component is one of them is
 * pointed at ours. */
static const struct {
    const char *name, *key;
} aliases[] = {
    {"learning_rate", "train.lr"},
    {"max_lr", "train.lr"},
    {"min_learning_rate", "train.min_lr"},
    {"max_steps", "train.steps"},
    {"max_iters", "train.steps"},
    {"num_steps", "train.steps"},
    {"train_steps", "train.steps"},
    {"total_steps", "train.steps"},
    {"block_size", "model.seq_len"},
    {"n_positions", "model.seq_len"},
    {"n_ctx", "model.seq_len"},
    {"max_seq_len", "model.seq_len"},
    {"seq_length", "model.seq_len"},
    {"sequence_length", "model.seq_len"},
    {"context_length", "model.seq_len"},
    {"n_layers", "model.n_layer"},
    {"num_layers", "model.n_layer"},
    {"num_hidden_layers", "model.n_layer"},
    {"n_heads", "model.n_head"},
    {"num_heads", "model.n_head"},
    {"num_attention_heads", "model.n_head"},
    {"n_embed", "model.n_embd"},
    {"d_model", "model.n_embd"},
    {"hidden_size", "model.n_embd"},
    {"embed_dim", "model.n_embd"},
    {"vocab", "model.vocab_size"},
    {"init_from", "model.init"},
    {"gradient_checkpointing", "model.recompute"},
    {"activation_checkpointing", "model.recompute"},
    {"warmup_iters", "train.warmup_steps"},
    {"lr_warmup_steps", "train.warmup_steps"},
    {"lr_scheduler", "train.schedule"},
    {"lr_scheduler_type", "train.schedule"},
    {"max_grad_norm", "train.grad_clip"},
    {"gradient_clipping", "train.grad_clip"},
    {"clip_grad", "train.grad_clip"},
    {"adam_beta1", "train.beta1"},
    {"adam_beta2", "train.beta2"},
    {"adam_epsilon", "train.eps"},
    {"micro_batch_size", "train.micro_batch"},
    {"per_device_train_batch_size", "train.micro_batch"},
    {"global_batch_size", "train.batch_size"},
    {"total_batch_size", "train.batch_size"},
    {"eval_interval", "train.eval_every"},
    {"eval_steps", "train.eval_every"},
    {"eval_iters", "train.eval_batches"},
    {"dataset", "data.train"},
    {"train_data", "data.train"},
    {"train_files", "data.train"},
    {"val_data", "data.val"},
    {"log_interval", "log.every"},
    {"logging_steps", "log.every"},
    {"num_threads", "threads"},
    {"dtype", "sharding.mixed_precision.param_dtype"},
    {"save_interval", "checkpoint.every_steps"},
    {"save_steps", "checkpoint.every_steps"},
    {"checkpoint_interval", "checkpoint.every_steps"},
    {"out_dir", "checkpoint.dir"},
    {"output_dir", "checkpoint.dir"},
    {"save_dir", "checkpoint.dir"},
    {"checkpoint_dir", "checkpoint.dir"},
    {"resume_from_checkpoint", "checkpoint.resume"},
};

/* The key another trainer's `name` (any case) means, or NULL. */
static const char *alias_of(const char *name) {
    for (size_t i = 0; i < sizeof aliases / sizeof aliases[0]; i++)
        if (strcasecmp(name, aliases[i].name) == 0)
            return aliases[i].key;
    return NULL;
}

/* Suggests the closest key for an unknown `name` under section `prefix`
 * ("" for the top level): first among siblings, then among all leaf keys
 * whose last component matches. */
static void suggest(const char *prefix, const char *name, char *out, size_t n) {
    out[0] = '\0';
    const char *alias = alias_of(name);
    if (alias) {
        snprintf(out, n, "%s", alias);
        return;
    }
    size_t pl = strlen(prefix);
    int best = 99;
    char cand[256];
    for (int i = 0; i < NKEYS; i++) {
        const char *k = keys[i].key;
        if (pl && (strncmp(k, prefix, pl) != 0 || k[pl] != '.'))
            continue;
        const char *rest = pl ? k + pl + 1 : k;
        size_t cl = strcspn(rest, ".");
        if (cl >= sizeof cand)
            continue;
        memcpy(cand, rest, cl);
        cand[cl] = '\0';
        int d = sr_suggest_distance(name, cand);
        if (d < best) {
            best = d;
            snprintf(out, n, "%s%s%s", prefix, pl ? "." : "", cand);
        }
    }
    size_t nl = strlen(name);
    if (sr_suggest_close(name, best))
        return;
    out[0] = '\0';
    /* A key placed in the wrong section: match on the last component. */
    for (int i = 0; i < NKEYS; i++) {
        const char *last = strrchr(keys[i].key, '.');
        last = last ? last + 1 : keys[i].key;
        if (sr_suggest_distance(name, last) <= (nl <= 3 ? 0 : 1)) {
            snprintf(out, n, "%s", keys[i].key);
            return;
        }
    }
}

static sr_status record_origin(sr_config *cfg, int ki, const parse_ctx *ctx, yaml_mark_t mark) {
    struct sr_key_origin *o = &cfg->origin[ki];
    free(o->file);
    free(o->setarg);
    o->file = sr_strdup(ctx->file ? ctx->file : "--set");
    o->setarg = ctx->setarg ? sr_strdup(ctx->setarg) : NULL;
    o->line = (int)mark.line + 1;
    o->col = (int)mark.column + 1;
    if (!o->file || (ctx->setarg && !o->setarg))
        return sr_error_oom("where a key was set");
    return SR_OK;
}

static sr_status walk_mapping(sr_config *cfg, yaml_document_t *doc, yaml_node_t *map, const char *prefix,
                              const parse_ctx *ctx);

/* Applies `node` at dotted `path` (a leaf or a section). */
static sr_status apply_at(sr_config *cfg, yaml_document_t *doc, const char *path, yaml_node_t *node,
                          yaml_mark_t keymark, const char *prefix, const char *name, const parse_ctx *ctx) {
    int ki = key_index(path);
    if (ki >= 0) {
        sr_status st = set_leaf(cfg, ki, doc, node, ctx);
        return st == SR_OK ? record_origin(cfg, ki, ctx, node->start_mark) : st;
    }
    if (is_section(path)) {
        if (node->type != YAML_MAPPING_NODE)
            return error_at(ctx, node->start_mark, "%s: expected a mapping of keys (a section), got %s", path,
                            node_kind(node));
        return walk_mapping(cfg, doc, node, path, ctx);
    }
    char hint[300];
    suggest(prefix, name, hint, sizeof hint);
    if (hint[0])
        return error_at(ctx, keymark, "unknown key '%s'; did you mean '%s'? (see shardrun config keys)", path, hint);
    return error_at(ctx, keymark, "unknown key '%s' (see shardrun config keys for the valid keys)", path);
}

static sr_status walk_mapping(sr_config *cfg, yaml_document_t *doc, yaml_node_t *map, const char *prefix,
                              const parse_ctx *ctx) {
    yaml_node_pair_t *start = map->data.mapping.pairs.start, *top = map->data.mapping.pairs.top;
    for (yaml_node_pair_t *p = start; p < top; p++) {
        yaml_node_t *k = yaml_document_get_node(doc, p->key);
        yaml_node_t *v = yaml_document_get_node(doc, p->value);
        if (!k || !v)
            return sr_error(SR_ERR_INTERNAL, "libyaml returned a broken document");
        if (k->type != YAML_SCALAR_NODE)
            return error_at(ctx, k->start_mark, "expected a key name, got %s", node_kind(k));
        const char *name = scalar_text(k);
        for (yaml_node_pair_t *q = start; q < p; q++) {
            yaml_node_t *k2 = yaml_document_get_node(doc, q->key);
            if (k2 && k2->type == YAML_SCALAR_NODE && strcmp(scalar_text(k2), name) == 0)
                return error_at(ctx, k->start_mark, "duplicate key '%s%s%s' (first given at line %zu)", prefix,
                                prefix[0] ? "." : "", name, k2->start_mark.line + 1);
        }
        char path[512];
        if ((size_t)snprintf(path, sizeof path, "%s%s%s", prefix, prefix[0] ? "." : "", name) >= sizeof path)
            return error_at(ctx, k->start_mark, "key name too long");
        sr_status st = apply_at(cfg, doc, path, v, k->start_mark, prefix, name, ctx);
        if (st != SR_OK)
            return st;
    }
    return SR_OK;
}

/* Loads one YAML document from `text` under the limits every reader of
 * outside YAML uses (yamlload.h); a second document is refused.  On success
 * *doc is initialised (delete it) and *has_root false for an empty stream.
 * Returns SR_ERR_CONFIG with the problem and its place. */
static sr_status load_document(yaml_document_t *doc, const char *text, size_t len, const parse_ctx *ctx,
                               bool *has_root) {
    sr_yaml_limits lim = sr_yaml_default_limits;
    lim.refuse_duplicates = false; /* walk_mapping refuses them naming the dotted key */
    sr_yaml_error err;
    if (sr_yaml_load(text, len, &lim, true, doc, has_root, &err))
        return SR_OK;
    if (err.oom)
        return sr_error_oom("reading a job file");
    yaml_mark_t mark = {0, err.line, err.column};
    if (err.syntax)
        return error_at(
            ctx, mark, "%s (hint: check indentation and that every 'key: value' has a space after the colon)", err.msg);
    return error_at(ctx, mark, "%s", err.msg);
}

sr_status sr_config_load_text(sr_config *cfg, const char *text, size_t len, const char *name) {
    parse_ctx ctx = {name, NULL};
    yaml_document_t doc;
    bool has_root = false;
    sr_status st = load_document(&doc, text, len, &ctx, &has_root);
    if (st != SR_OK)
        return st;
    if (has_root) {
        yaml_node_t *root = yaml_document_get_root_node(&doc);
        if (root->type != YAML_MAPPING_NODE && !scalar_is_null(root))
            st = error_at(&ctx, root->start_mark,
                          "expected a mapping of sections (model:, train:, ...) at the top level, got %s",
                          node_kind(root));
        else if (root->type == YAML_MAPPING_NODE)
            st = walk_mapping(cfg, &doc, root, "", &ctx);
    }
    yaml_document_delete(&doc);
    if (st == SR_OK) {
        free(cfg->source);
        cfg->source = sr_strdup(name);
        if (!cfg->source)
            st = sr_error_oom("the job's name");
    }
    return st;
}

sr_status sr_config_load_file(sr_config *cfg, const char *path) {
    if (!path)
        return sr_config_load_text(cfg, sr_default_job, sr_default_job_len, SR_CONFIG_DEFAULT_JOB);
    FILE *f;
    sr_status ost = sr_fsio_open_input_file(path, "the job file", NULL, &f);
    if (ost != SR_OK)
        return ost;
    size_t cap = 1 << 16, len = 0;
    char *buf = sr_malloc(cap);
    if (!buf) {
        fclose(f);
        return sr_error_oom("the job file");
    }
    for (;;) {
        size_t n = fread(buf + len, 1, cap - len, f);
        len += n;
        if (n == 0)
            break;
        if (len == cap) {
            if (cap >= (size_t)16 << 20) {
                free(buf);
                fclose(f);
                return sr_error(SR_ERR_CONFIG, "%s: job file larger than 16 MiB; expected a small YAML file", path);
            }
            char *nb = sr_realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                fclose(f);
                return sr_error_oom("the job file");
            }
            buf = nb;
            cap *= 2;
        }
    }
    int rerr = ferror(f) ? errno : 0;
    fclose(f);
    if (rerr) {
        free(buf);
        return sr_error(SR_ERR_NOINPUT, "%s: cannot read job file: %s", path, strerror(rerr));
    }
    if (memchr(buf, '\0', len)) {
        free(buf);
        return sr_error(SR_ERR_CONFIG, "%s: contains a NUL byte; expected a YAML text file", path);
    }
    sr_status st = sr_config_load_text(cfg, buf, len, path);
    free(buf);
    return st;
}

/* Key ki back to its built-in default (or, without one, the zero its
 * rules derive from: the preset's dimensions), and "not set". */
static sr_status reset_key(sr_config *cfg, int ki) {
    const sr_key *k = &keys[ki];
    if (types[k->type].release)
        types[k->type].release(field(cfg, k));
    sr_status st = SR_OK;
    if (k->def) {
        parse_ctx ctx = {"<built-in defaults>", NULL};
        yaml_document_t doc;
        bool has_root = false;
        st = load_document(&doc, k->def, strlen(k->def), &ctx, &has_root);
        if (st == SR_OK) {
            st = has_root ? set_leaf(cfg, ki, &doc, yaml_document_get_root_node(&doc), &ctx)
                          : sr_error(SR_ERR_INTERNAL, "empty built-in default for %s", k->key);
            yaml_document_delete(&doc);
        }
    } else if (k->type == T_FLOAT) {
        *(double *)field(cfg, k) = 0;
    } else if (k->type == T_BOOL) {
        *(bool *)field(cfg, k) = false;
    } else {
        *(int64_t *)field(cfg, k) = 0; /* T_INT, T_ENUM */
    }
    struct sr_key_origin *o = &cfg->origin[ki];
    free(o->file);
    free(o->setarg);
    *o = (struct sr_key_origin){0};
    return st;
}

sr_status sr_config_set(sr_config *cfg, const char *assignment) {
    const char *eq = strchr(assignment, '=');
    if (!eq || eq == assignment)
        return sr_error(SR_ERR_USAGE, "--set %s: expected key=value, e.g. --set train.lr=3e-4", assignment);
    char path[512];
    size_t kl = (size_t)(eq - assignment);
    if (kl >= sizeof path)
        return sr_error(SR_ERR_CONFIG, "--set %s: key too long", assignment);
    memcpy(path, assignment, kl);
    path[kl] = '\0';
    parse_ctx ctx = {NULL, assignment};
    const char *value = eq + 1;
    int ki = key_index(path);
    if (!*value && ki >= 0)
        return reset_key(cfg, ki); /* "KEY=": as if the job file had not named it */
    yaml_document_t doc;
    bool has_root = false;
    sr_status st = load_document(&doc, value, strlen(value), &ctx, &has_root);
    if (st != SR_OK)
        return st;
    yaml_mark_t zero = {0, 0, 0};
    if (!has_root && !yaml_document_add_scalar(&doc, NULL, (yaml_char_t *)"", 0, YAML_PLAIN_SCALAR_STYLE)) {
        /* "key=" : an empty (null) scalar */
        yaml_document_delete(&doc);
        return sr_error_oom("a --set value");
    }
    const char *dot = strrchr(path, '.');
    char prefix[512] = "";
    if (dot) {
        memcpy(prefix, path, (size_t)(dot - path));
        prefix[dot - path] = '\0';
    }
    if (dot && prefix[0] && !is_section(prefix)) {
        /* Unknown section: another trainer's name for a key, else the
         * closest of the full key list. */
        char hint[300] = "";
        int best = 99;
        const char *alias = alias_of(dot + 1);
        for (int i = 0; i < NKEYS && !alias; i++) {
            int d = sr_suggest_distance(path, keys[i].key);
            if (d < best) {
                best = d;
                snprintf(hint, sizeof hint, "%s", keys[i].key);
            }
        }
        if (alias) {
            snprintf(hint, sizeof hint, "%s", alias);
            best = 0;
        }
        yaml_document_delete(&doc);
        if (best <= 3)
            return error_at(&ctx, zero, "unknown key '%s'; did you mean '%s'?", path, hint);
        return error_at(&ctx, zero, "unknown key '%s' (see shardrun config keys)", path);
    }
    st = apply_at(cfg, &doc, path, yaml_document_get_root_node(&doc), zero, prefix, dot ? dot + 1 : path, &ctx);
    yaml_document_delete(&doc);
    return st;
}

sr_status sr_config_init(sr_config *cfg) {
    memset(cfg, 0, sizeof *cfg);
    cfg->origin = sr_calloc(NKEYS, sizeof *cfg->origin);
    if (!cfg->origin)
        return sr_error_oom("the job");
    parse_ctx ctx = {"<built-in defaults>", NULL};
    sr_status st = SR_OK;
    for (int i = 0; i < NKEYS && st == SR_OK; i++) {
        if (!keys[i].def)
            continue;
        yaml_document_t doc;
        bool has_root = false;
        st = load_document(&doc, keys[i].def, strlen(keys[i].def), &ctx, &has_root);
        if (st != SR_OK)
            break; /* out of memory: a built-in default always parses */
        if (!has_root) {
            yaml_document_delete(&doc);
            st = sr_error(SR_ERR_INTERNAL, "empty built-in default for %s", keys[i].key);
            break;
        }
        st = set_leaf(cfg, i, &doc, yaml_document_get_root_node(&doc), &ctx);
        yaml_document_delete(&doc);
    }
    if (st == SR_OK) {
        cfg->source = sr_strdup("<built-in defaults>");
        if (!cfg->source)
            st = sr_error_oom("the job");
    }
    if (st != SR_OK)
        sr_config_free(cfg); /* what was set so far */
    return st;
}

void sr_config_free(sr_config *cfg) {
    for (int i = 0; i < NKEYS; i++) {
        const sr_key *k = &keys[i];
        if (types[k->type].release)
            types[k->type].release(field(cfg, k));
        if (cfg->origin) {
            free(cfg->origin[i].file);
            free(cfg->origin[i].setarg);
        }
    }
    free(cfg->origin);
    free(cfg->source);
    free(cfg->model_source);
    memset(cfg, 0, sizeof *cfg);
}

void sr_config_where(const sr_config *cfg, const char *name, char *buf, size_t n) {
    int ki = key_index(name);
    const struct sr_key_origin *o = ki >= 0 ? &cfg->origin[ki] : NULL;
    if (!o || !o->file)
        snprintf(buf, n, "%s (default)", cfg->source ? cfg->source : "job");
    else if (o->setarg)
        snprintf(buf, n, "--set %s", o->setarg);
    else
        snprintf(buf, n, "%s:%d:%d", o->file, o->line, o->col);
}

static bool was_set(const sr_config *cfg, const char *name) {
    int ki = key_index(name);
    return ki >= 0 && cfg->origin[ki].file != NULL;
}

bool sr_config_was_set(const sr_config *cfg, const char *name) { return was_set(cfg, name); }

int64_t sr_config_micro_batch(const sr_config *cfg, int dp_ranks) {
    if (cfg->micro_batch > 0)
        return cfg->micro_batch;
    return cfg->batch_size / (dp_ranks > 0 ? dp_ranks : 1);
}

int64_t sr_config_accum_steps(const sr_config *cfg, int dp_ranks) {
    int64_t mb = sr_config_micro_batch(cfg, dp_ranks);
    return cfg->batch_size / (mb * (dp_ranks > 0 ? dp_ranks : 1));
}

/* The divisor of n closest to want (ties: the smaller). */
static int64_t nearest_divisor(int64_t n, int64_t want) {
    int64_t best = 1;
    for (int64_t d = 1; d <= n; d++)
        if (n % d == 0 && llabs(d - want) < llabs(best - want))
            best = d;
    return best;
}

const char *sr_config_model_name(const sr_config *cfg, char *buf, size_t n) {
    int p = (int)cfg->model_preset;
    if (cfg->model_source) {
        snprintf(buf, n, "%s of %.1100s%s", arch_names[cfg->arch], cfg->model_source->origin,
                 cfg->preset_yielded ? " (the default job's model.preset gives way to it)" : "");
        return buf;
    }
    const char *name = preset_names[p];
    const struct {
        const char *key;
        int64_t have, preset;
    } dims[] = {{"arch", cfg->arch, presets[p].arch},
                {"n_layer", cfg->n_layer, presets[p].n_layer},
                {"n_head", cfg->n_head, presets[p].n_head},
                {"n_kv_head", cfg->n_kv_head, presets[p].n_kv_head},
                {"n_embd", cfg->n_embd, presets[p].n_embd},
                {"ffn_dim", cfg->ffn_dim, presets[p].ffn_dim},
                {"vocab_size", cfg->vocab_size, presets[p].vocab_size},
                {"seq_len", cfg->seq_len, presets[p].seq_len}};
    /* GPT-2's n_kv_head and ffn_dim follow n_head and n_embd: not a change of their own */
    bool gpt2 = cfg->arch == SR_CFG_ARCH_GPT2;
    char changed[160] = "";
    size_t len = 0;
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++)
        if (dims[i].have != dims[i].preset && len < sizeof changed &&
            !(gpt2 && (strcmp(dims[i].key, "n_kv_head") == 0 || strcmp(dims[i].key, "ffn_dim") == 0)))
            len += (size_t)snprintf(changed + len, sizeof changed - len, "%s%s", len ? ", " : "", dims[i].key);
    if (!changed[0])
        snprintf(buf, n, "%s", name);
    else
        snprintf(buf, n, "custom (%s with %s changed)", name, changed);
    return buf;
}

/* "A-B" or "A" with 1 <= A <= B: log.trace_steps. */
static bool parse_step_range(const char *s, int64_t *a, int64_t *b) {
    char *end;
    errno = 0;
    if (!isdigit((unsigned char)*s))
        return false;
    long long x = strtoll(s, &end, 10), y = x;
    if (*end == '-') {
        const char *t = end + 1;
        if (!isdigit((unsigned char)*t))
            return false;
        y = strtoll(t, &end, 10);
    }
    if (*end || errno || x < 1 || y < x)
        return false;
    *a = x;
    *b = y;
    return true;
}

sr_status sr_config_set_model_source(sr_config *cfg, const sr_config_model_source *src) {
    free(cfg->model_source);
    cfg->model_source = sr_malloc(sizeof *src);
    if (!cfg->model_source)
        return sr_error_oom("the model source");
    *cfg->model_source = *src;
    return SR_OK;
}

/* Every model key from cfg->model_source where the job leaves it unset;
 * one the job sets must agree (seq_len: at most the source's context). */
static sr_status finalize_from_source(sr_config *cfg) {
    const sr_config_model_source *m = cfg->model_source;
    /* seq_len when unset: the source's context, at most 4096 (a Llama-3
     * config declares 131072, which would size activations for it) */
    int64_t T = m->max_seq_len < 4096 ? m->max_seq_len : 4096;
    bool llama = m->arch == SR_CFG_ARCH_LLAMA;
    const struct {
        const char *key;
        int64_t *i;
        double *d;
        bool *b;
        int64_t iv;
        double dv;
        bool llama_only;
    } k[] = {
        {"model.arch", &cfg->arch, NULL, NULL, m->arch, 0, false},
        {"model.n_layer", &cfg->n_layer, NULL, NULL, m->n_layer, 0, false},
        {"model.n_head", &cfg->n_head, NULL, NULL, m->n_head, 0, false},
        {"model.n_embd", &cfg->n_embd, NULL, NULL, m->n_embd, 0, false},
        {"model.vocab_size", &cfg->vocab_size, NULL, NULL, m->vocab_size, 0, false},
        {"model.seq_len", &cfg->seq_len, NULL, NULL, T, 0, false},
        {"model.n_kv_head", &cfg->n_kv_head, NULL, NULL, m->n_kv_head, 0, true},
        {"model.ffn_dim", &cfg->ffn_dim, NULL, NULL, m->ffn_dim, 0, true},
        {"model.norm_eps", NULL, &cfg->norm_eps, NULL, 0, m->norm_eps, true},
        {"model.rope_theta", NULL, &cfg->rope_theta, NULL, 0, m->rope_theta, true},
        {"model.rope_scaling.factor", NULL, &cfg->rope_factor, NULL, 0, m->rope_factor, true},
        {"model.rope_scaling.low_freq_factor", NULL, &cfg->rope_low_freq_factor, NULL, 0, m->rope_low_freq_factor,
         true},
        {"model.rope_scaling.high_freq_factor", NULL, &cfg->rope_high_freq_factor, NULL, 0, m->rope_high_freq_factor,
         true},
        {"model.rope_scaling.original_max_position", &cfg->rope_original_max_position, NULL, NULL,
         m->rope_original_max_position, 0, true},
        {"model.tie_embeddings", NULL, NULL, &cfg->tie_embeddings, m->tie_embeddings, 0, true},
    };
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
        if (k[i].llama_only && !llama)
            continue; /* a GPT-2 source: finalize_family fills them as gpt2 implies */
        if (!was_set(cfg, k[i].key)) {
            if (k[i].i)
                *k[i].i = k[i].iv;
            else if (k[i].d)
                *k[i].d = k[i].dv;
            else
                *k[i].b = k[i].iv != 0;
            continue;
        }
        bool seq = strcmp(k[i].key, "model.seq_len") == 0;
        bool agree = k[i].i   ? (seq ? *k[i].i <= m->max_seq_len : *k[i].i == k[i].iv)
                     : k[i].d ? *k[i].d == k[i].dv
                              : *k[i].b == (k[i].iv != 0);
        if (agree)
            continue;
        char w[1200], have[64], want[64];
        sr_config_where(cfg, k[i].key, w, sizeof w);
        if (k[i].i && strcmp(k[i].key, "model.arch") == 0) {
            snprintf(have, sizeof have, "%s", arch_names[*k[i].i]);
            snprintf(want, sizeof want, "%s", arch_names[k[i].iv]);
        } else if (k[i].i) {
            snprintf(have, sizeof have, "%lld", (long long)*k[i].i);
            snprintf(want, sizeof want, seq ? "at most %lld" : "%lld", (long long)(seq ? m->max_seq_len : k[i].iv));
        } else if (k[i].d) {
            snprintf(have, sizeof have, "%g", *k[i].d);
            snprintf(want, sizeof want, "%g", k[i].dv);
        } else {
            snprintf(have, sizeof have, "%s", *k[i].b ? "true" : "false");
            snprintf(want, sizeof want, "%s", k[i].iv ? "true" : "false");
        }
        return sr_error(SR_ERR_CONFIG,
                        "%s: %s is %s, and model.init's %s says %s (hint: leave the model keys out: the directory's "
                        "config.json gives them)",
                        w, k[i].key, have, m->origin, want);
    }
    return SR_OK;
}

/* The Llama keys the job leaves unset: the preset's when it is of the
 * job's family; else what gpt2 implies (gpt2), or Llama-style defaults
 * (SwiGLU width 8/3 n_embd rounded up to 64, rope_theta 10000, tied). */
static void fill_family_defaults(sr_config *cfg, int p, bool llama) {
    bool same = presets[p].arch == cfg->arch && !cfg->model_source;
    if (!was_set(cfg, "model.n_kv_head"))
        cfg->n_kv_head = same && llama ? presets[p].n_kv_head : cfg->n_head;
    if (!was_set(cfg, "model.ffn_dim"))
        cfg->ffn_dim = same && llama ? presets[p].ffn_dim
                       : llama       ? (8 * cfg->n_embd / 3 + 63) / 64 * 64
                                     : 4 * cfg->n_embd;
    if (!was_set(cfg, "model.tie_embeddings"))
        cfg->tie_embeddings = same ? presets[p].tie : true;
    if (!was_set(cfg, "model.rope_theta"))
        cfg->rope_theta = same ? presets[p].rope_theta : 10000;
    if (!was_set(cfg, "model.rope_scaling.factor"))
        cfg->rope_factor = same ? presets[p].rope_factor : 0;
    if (!was_set(cfg, "model.rope_scaling.low_freq_factor"))
        cfg->rope_low_freq_factor = same ? presets[p].rope_low : 1;
    if (!was_set(cfg, "model.rope_scaling.high_freq_factor"))
        cfg->rope_high_freq_factor = same ? presets[p].rope_high : 4;
    if (!was_set(cfg, "model.rope_scaling.original_max_position"))
        cfg->rope_original_max_position = same ? presets[p].rope_orig : 8192;
}

/* The family and the Llama keys from the preset where the job does not
 * set them; a Llama-only key set for gpt2 is refused (it would be
 * ignored), as are heads that do not group and rotary heads of odd size. */
static sr_status finalize_family(sr_config *cfg, int p) {
    char w[1200];
    if (!was_set(cfg, "model.arch") && !cfg->model_source)
        cfg->arch = presets[p].arch;
    bool llama = cfg->arch == SR_CFG_ARCH_LLAMA;
    static const char *const llama_only[] = {
        "model.n_kv_head",
        "model.ffn_dim",
        "model.norm_eps",
        "model.rope_theta",
        "model.rope_scaling.factor",
        "model.rope_scaling.low_freq_factor",
        "model.rope_scaling.high_freq_factor",
        "model.rope_scaling.original_max_position",
        "model.tie_embeddings",
    };
    /* set to what gpt2 implies they are accepted: config show prints them
     * for any job, and its output must read back */
    const bool implied[] = {
        cfg->n_kv_head == cfg->n_head,
        cfg->ffn_dim == 4 * cfg->n_embd,
        cfg->norm_eps == 1e-5,
        cfg->rope_theta == 10000,
        cfg->rope_factor == 0,
        cfg->rope_low_freq_factor == 1,
        cfg->rope_high_freq_factor == 4,
        cfg->rope_original_max_position == 8192,
        cfg->tie_embeddings,
    };
    _Static_assert(sizeof implied / sizeof implied[0] == sizeof llama_only / sizeof llama_only[0], "one per key");
    for (size_t i = 0; !llama && i < sizeof llama_only / sizeof llama_only[0]; i++)
        if (was_set(cfg, llama_only[i]) && !implied[i]) {
            sr_config_where(cfg, llama_only[i], w, sizeof w);
            return sr_error(SR_ERR_CONFIG,
                            "%s: %s applies to model.arch: llama only; this job's model is gpt2 (hint: model.arch: "
                            "llama, or a llama-* model.preset; or remove the key)",
                            w, llama_only[i]);
        }
    /* a Llama source (finalize_from_source) gave every Llama key */
    if (!(cfg->model_source && llama))
        fill_family_defaults(cfg, p, llama);
    if (!llama)
        return SR_OK;
    if (cfg->n_head % cfg->n_kv_head != 0) {
        sr_config_where(cfg, was_set(cfg, "model.n_kv_head") ? "model.n_kv_head" : "model.n_head", w, sizeof w);
        return sr_error(SR_ERR_CONFIG,
                        "%s: model.n_kv_head (%lld) must divide model.n_head (%lld): each key/value head serves a "
                        "whole group of query heads (hint: n_kv_head %lld divides it)",
                        w, (long long)cfg->n_kv_head, (long long)cfg->n_head,
                        (long long)nearest_divisor(cfg->n_head, cfg->n_kv_head));
    }
    if (cfg->n_embd % cfg->n_head == 0 && (cfg->n_embd / cfg->n_head) % 2 != 0) {
        sr_config_where(cfg, was_set(cfg, "model.n_head") ? "model.n_head" : "model.n_embd", w, sizeof w);
        return sr_error(SR_ERR_CONFIG,
                        "%s: the head size n_embd / n_head (%lld) must be even for rotary positions, which rotate "
                        "pairs of channels (hint: another n_head)",
                        w, (long long)(cfg->n_embd / cfg->n_head));
    }
    if (cfg->rope_factor > 0 && !(cfg->rope_high_freq_factor > cfg->rope_low_freq_factor)) {
        sr_config_where(cfg, "model.rope_scaling.high_freq_factor", w, sizeof w);
        return sr_error(SR_ERR_CONFIG,
                        "%s: model.rope_scaling.high_freq_factor (%g) must exceed low_freq_factor (%g) (hint: "
                        "Llama-3 uses 4 and 1)",
                        w, cfg->rope_high_freq_factor, cfg->rope_low_freq_factor);
    }
    return SR_OK;
}

sr_status sr_config_finalize(sr_config *cfg) {
    char w[1200], w2[1200];
    int p = (int)cfg->model_preset;
    if (cfg->model_source && was_set(cfg, "model.preset") && cfg->origin[key_index("model.preset")].file &&
        strcmp(cfg->origin[key_index("model.preset")].file, SR_CONFIG_DEFAULT_JOB) == 0) {
        /* the embedded default job's preset yields to the directory's
         * config.json (the model line says so); one the user wrote does not */
        cfg->preset_yielded = true;
        sr_status rst = reset_key(cfg, key_index("model.preset"));
        if (rst != SR_OK)
            return rst;
        p = (int)cfg->model_preset;
    }
    if (cfg->model_source && was_set(cfg, "model.preset")) {
        sr_config_where(cfg, "model.preset", w, sizeof w);
        return sr_error(SR_ERR_CONFIG,
                        "%s: model.preset and a Hugging Face directory in model.init (%s) both declare the model "
                        "(hint: remove model.preset)",
                        w, cfg->model_source->origin);
    }
    if (!was_set(cfg, "model.n_layer"))
        cfg->n_layer = presets[p].n_layer;
    if (!was_set(cfg, "model.n_head"))
        cfg->n_head = presets[p].n_head;
    if (!was_set(cfg, "model.n_embd"))
        cfg->n_embd = presets[p].n_embd;
    if (!was_set(cfg, "model.vocab_size"))
        cfg->vocab_size = presets[p].vocab_size;
    if (!was_set(cfg, "model.seq_len"))
        cfg->seq_len = presets[p].seq_len;
    sr_status st = cfg->model_source ? finalize_from_source(cfg) : SR_OK;
    if (st == SR_OK)
        st = finalize_family(cfg, p);
    if (st != SR_OK)
        return st;

    if (cfg->n_embd % cfg->n_head != 0) {
        sr_config_where(cfg, was_set(cfg, "model.n_embd") ? "model.n_embd" : "model.n_head", w, sizeof w);
        return sr_error(
            SR_ERR_CONFIG,
            "%s: model.n_embd (%lld) must be divisible by model.n_head (%lld) (hint: n_head %lld divides it)", w,
            (long long)cfg->n_embd, (long long)cfg->n_head, (long long)nearest_divisor(cfg->n_embd, cfg->n_head));
    }
    if (cfg->min_lr > cfg->lr) {
        sr_config_where(cfg, was_set(cfg, "train.min_lr") ? "train.min_lr" : "train.lr", w, sizeof w);
        return sr_error(SR_ERR_CONFIG, "%s: train.min_lr (%g) must not exceed train.lr (%g)", w, cfg->min_lr, cfg->lr);
    }
    /* whatever the number of ranks, the batch splits into micro-batches */
    if (cfg->micro_batch > 0 && cfg->batch_size % cfg->micro_batch != 0) {
        sr_config_where(cfg, "train.batch_size", w, sizeof w);
        sr_config_where(cfg, "train.micro_batch", w2, sizeof w2);
        return sr_error(SR_ERR_CONFIG,
                        "%s: train.batch_size (%lld) is not a whole multiple of train.micro_batch (%lld); "
                        "micro_batch set at %s (hint: choose batch_size = micro_batch x ranks x accumulation steps)",
                        w, (long long)cfg->batch_size, (long long)cfg->micro_batch, w2);
    }
    cfg->log_trace_first = cfg->log_trace_last = 0;
    if (cfg->log_trace_steps && cfg->log_trace_steps[0]) {
        sr_config_where(cfg, "log.trace_steps", w, sizeof w);
        if (!parse_step_range(cfg->log_trace_steps, &cfg->log_trace_first, &cfg->log_trace_last))
            return sr_error(SR_ERR_CONFIG,
                            "%s: log.trace_steps '%s' is not a range of steps A-B with 1 <= A <= B (hint: 10-12 traces "
                            "steps 10, 11 and 12; a single step is 10)",
                            w, cfg->log_trace_steps);
        if (cfg->log_flight_recorder == 0) {
            sr_config_where(cfg, "log.flight_recorder", w2, sizeof w2);
            return sr_error(SR_ERR_CONFIG,
                            "%s: log.trace_steps needs the flight recorder, whose records are the trace's collectives, "
                            "but log.flight_recorder is 0 at %s (hint: remove log.flight_recorder: 0)",
                            w, w2);
        }
    }
    if (cfg->preempt_exit_status == sr_status_exit_code(SR_ERR_STALLED)) {
        sr_config_where(cfg, "preemption.exit_status", w, sizeof w);
        return sr_error(SR_ERR_CONFIG,
                        "%s: preemption.exit_status %lld is the crash-loop guard's status (a run that must not be "
                        "requeued) (hint: keep the default 75, and RequeueExit=75 in slurm.conf)",
                        w, (long long)cfg->preempt_exit_status);
    }
    if (cfg->blocks_per_unit > cfg->n_layer) {
        sr_config_where(cfg, "sharding.blocks_per_unit", w, sizeof w);
        return sr_error(SR_ERR_CONFIG, "%s: sharding.blocks_per_unit (%lld) exceeds model.n_layer (%lld)", w,
                        (long long)cfg->blocks_per_unit, (long long)cfg->n_layer);
    }
    return SR_OK;
}

const char *sr_config_enum_name(const char *key, int64_t value) {
    int ki = key_index(key);
    if (ki < 0 || keys[ki].type != T_ENUM)
        return "?";
    return keys[ki].names[value];
}

sr_status sr_config_check_landed(const sr_config *cfg) {
    sr_config def;
    sr_status st = sr_config_init(&def);
    if (st != SR_OK)
        return st;
    for (int i = 0; i < NKEYS; i++) {
        if (keys[i].landed || !cfg->origin[i].file)
            continue;
        char a[8192], b[8192];
        fmt_value(cfg, &keys[i], a, sizeof a);
        fmt_value(&def, &keys[i], b, sizeof b);
        if (strcmp(a, b) != 0) {
            char w[1200];
            sr_config_where(cfg, keys[i].key, w, sizeof w);
            sr_config_free(&def);
            return sr_error(SR_ERR_CONFIG,
                            "%s: %s: %s is not implemented yet in this version; only the default (%s) is accepted", w,
                            keys[i].key, a, b);
        }
    }
    sr_config_free(&def);
    return SR_OK;
}

sr_status sr_config_check_model(int64_t n_layer, int64_t n_head, int64_t n_embd, int64_t vocab_size, int64_t seq_len) {
    const struct {
        const char *key;
        int64_t v;
    } dims[] = {{"model.n_layer", n_layer},
                {"model.n_head", n_head},
                {"model.n_embd", n_embd},
                {"model.vocab_size", vocab_size},
                {"model.seq_len", seq_len}};
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++) {
        const sr_key *k = &keys[key_index(dims[i].key)];
        if ((double)dims[i].v < k->min || (double)dims[i].v > k->max) {
            char expect[128];
            fmt_range_int(expect, sizeof expect, k);
            return sr_error(SR_ERR_CONFIG, "%s: %lld is out of range; expected %s", k->key, (long long)dims[i].v,
                            expect);
        }
    }
    if (n_embd % n_head != 0)
        return sr_error(SR_ERR_CONFIG, "model.n_embd (%lld) must be divisible by model.n_head (%lld)",
                        (long long)n_embd, (long long)n_head);
    return SR_OK;
}

int sr_config_nkeys(void) { return NKEYS; }
const char *sr_config_key_name(int i) { return i >= 0 && i < NKEYS ? keys[i].key : NULL; }
void sr_config_value_text(const sr_config *cfg, int i, char *buf, size_t n) {
    if (i >= 0 && i < NKEYS)
        fmt_value(cfg, &keys[i], buf, n);
    else if (n)
        buf[0] = '\0';
}

void sr_config_show(const sr_config *cfg, FILE *out, const char *note) {
    fprintf(out, "# effective shardrun job (from %s); every default filled in%s%s\n", cfg->source ? cfg->source : "?",
            note ? "; " : "", note ? note : "");
    const char *prev = "";
    for (int i = 0; i < NKEYS; i++) {
        const char *k = keys[i].key;
        /* Open every section level that differs from the previous key. */
        int depth = 0;
        const char *a = k, *b = prev;
        /* number of common leading section components */
        for (;;) {
            const char *da = strchr(a, '.'), *db = strchr(b, '.');
            if (!da || !db || da - a != db - b || strncmp(a, b, (size_t)(da - a)) != 0)
                break;
            depth++;
            a = da + 1;
            b = db + 1;
        }
        const char *comp = a;
        for (;;) {
            const char *dot = strchr(comp, '.');
            if (!dot)
                break;
            fprintf(out, "%*s%.*s:\n", depth * 2, "", (int)(dot - comp), comp);
            depth++;
            comp = dot + 1;
        }
        char v[8192];
        fmt_value(cfg, &keys[i], v, sizeof v);
        fprintf(out, "%*s%s: %s\n", depth * 2, "", comp, v);
        prev = k;
    }
}

static void fmt_default(const sr_key *k, char *buf, size_t n) {
    if (!k->def)
        snprintf(buf, n, "from model.preset");
    else
        snprintf(buf, n, "%s", k->def);
}

/* Writes text as mdoc text lines of at most ~72 bytes, breaking at spaces,
 * escaping backslashes and a leading dot or quote (which would make a line a
 * request). */
static void mdoc_text(FILE *out, const char *s) {
    size_t col = 0;
    while (*s) {
        size_t w = strcspn(s, " ");
        if (col > 0 && col + 1 + w > 72) {
            fputc('\n', out);
            col = 0;
        } else if (col > 0) {
            fputc(' ', out);
            col++;
        }
        if (col == 0 && (s[0] == '.' || s[0] == '\''))
            fputs("\\&", out);
        for (size_t i = 0; i < w; i++) {
            if (s[i] == '\\')
                fputs("\\e", out);
            else
                fputc(s[i], out);
        }
        col += w;
        s += w;
        while (*s == ' ')
            s++;
    }
}

void sr_config_keys(FILE *out, bool mdoc) {
    char t[512], d[512];
    if (mdoc) {
        fprintf(out, ".\\\" Generated by 'shardrun config keys --mdoc' from the schema in src/config.c.\n");
        fprintf(out, ".Bl -tag -width Ds\n");
    }
    for (int i = 0; i < NKEYS; i++) {
        const sr_key *k = &keys[i];
        type_name(k, t, sizeof t);
        fmt_default(k, d, sizeof d);
        if (mdoc) {
            fprintf(out, ".It Cm %s\n", k->key);
            mdoc_text(out, k->doc);
            fputs(".\n", out);
            fputs("Type: ", out);
            mdoc_text(out, t);
            fputs(";\ndefault: ", out);
            mdoc_text(out, d);
            fputs(".\n", out);
            if (!k->landed)
                fputs("Not implemented yet: a value other than the default is refused.\n", out);
        } else {
            fprintf(out, "%-40s %-28s default %s\n    %s%s\n", k->key, t, d, k->doc,
                    k->landed ? "" : " [not implemented yet: only the default is accepted]");
        }
    }
    if (mdoc)
        fprintf(out, ".El\n");
}
