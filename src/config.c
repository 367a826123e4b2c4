/* config.c — the job-file schema: the key table, the presets, a job's
 * lifecycle (defaults, free, where a key was set), `config show` and
 * `config keys`.
 *
 * The schema table `cfg_keys[]` is the single source of truth: each row
 * names a dotted key, its type, where it lives in sr_config, its default
 * (as YAML text, parsed by the same code as user input), its range,
 * and its documentation.  The module's
 * other files: config_values.c (the typed values: parsing, setting,
 * formatting, describing), config_yaml.c (the YAML document and --set
 * walked against the table; messages with file:line:col from libyaml's
 * marks, 1-based), config_model.c (the model family's finalization: the
 * presets, a pretrained model's config.json, the rules of each family);
 * config_impl.h is what they share. */
#include "srconfig.h"

#include "config_impl.h"

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

static const char *const recompute_names[] = {"none", "blocks", NULL};
/* indexed by SR_ATTENTION_* (config.h) */
static const char *const attention_names[] = {"auto", "flash", "materialized", NULL};
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
static const char *const replicas_names[] = {"auto", "0", "1", NULL};
static const char *const mixture_end_names[] = {"wrap", "stop", NULL};
static const char *const before_end_names[] = {"auto", "off", NULL};

#define OFF(field) offsetof(sr_config, field)

/* clang-format off */
const sr_key cfg_keys[] = {
 {"model.preset", T_ENUM, OFF(model_preset), "tiny", 0, 0, sr_family_preset_names,
  "architecture preset: tiny (GPT-2: n_layer 4, n_head 4, n_embd 256, seq_len 256, vocab_size 256, byte-level); GPT-2's gpt2-124m, gpt2-350m, gpt2-774m, gpt2-1.5b (vocab_size 50257, seq_len 1024); llama-tiny (Llama: n_layer 4, n_head 4, n_kv_head 2, n_embd 256, ffn_dim 704, seq_len 256, vocab_size 256, byte-level, tied); llama-125m (n_layer 12, n_head 12, n_kv_head 4, n_embd 768, ffn_dim 2048, vocab_size 32000, seq_len 1024, untied); llama-3.2-1b and llama-3.1-8b (the dimensions of Llama-3.2-1B and Llama-3.1-8B: vocab_size 128256, rope_theta 500000, Llama-3 rope_scaling, seq_len 2048); explicit keys below override it"},
 {"model.arch", T_ENUM, OFF(arch), NULL, 0, 0, sr_family_names, "the family: gpt2 (learned positions, LayerNorm, GELU MLP, biases, tied head) or llama (rotary positions, RMSNorm, SwiGLU MLP, grouped-query attention, no biases); default: from the preset (gpt2 for tiny and the gpt2-* presets)"},
 {"model.n_layer", T_INT, OFF(n_layer), NULL, 1, 1024, NULL, "transformer blocks (default: from the preset)"},
 {"model.n_head", T_INT, OFF(n_head), NULL, 1, 1024, NULL, "attention heads; must divide n_embd (default: from the preset)"},
 {"model.n_embd", T_INT, OFF(n_embd), NULL, 1, 65536, NULL, "embedding width (default: from the preset)"},
 {"model.vocab_size", T_INT, OFF(vocab_size), NULL, 2, 16777216, NULL, "vocabulary size; every data token must be below it (default: data.tokenizer's ids when it names one, padded as always, or the vocabulary of the checkpoint a resume reads when the job differs from it only there; else from the preset)"},
 {"model.seq_len", T_INT, OFF(seq_len), NULL, 1, 1048576, NULL, "sequence length in tokens (default: from the preset)"},
 {"model.n_kv_head", T_INT, OFF(n_kv_head), NULL, 1, 1024, NULL, "llama: key/value heads (grouped-query attention); must divide n_head; n_head = multi-head attention (default: from the preset)"},
 {"model.ffn_dim", T_INT, OFF(ffn_dim), NULL, 1, 1048576, NULL, "llama: the SwiGLU MLP's hidden width (default: from the preset)"},
 {"model.norm_eps", T_FLOAT, OFF(norm_eps), "1.0e-5", 1e-12, 1, NULL, "llama: RMSNorm's epsilon"},
 {"model.rope_theta", T_FLOAT, OFF(rope_theta), NULL, 1, 1e12, NULL, "llama: the rotary embedding's base (default: from the preset: 10000, Llama-3's 500000)"},
 {"model.rope_scaling.factor", T_FLOAT, OFF(rope_factor), NULL, 0, 1e6, NULL, "llama: Llama-3's rotary frequency scaling factor; 0 = no scaling (default: from the preset)"},
 {"model.rope_scaling.low_freq_factor", T_FLOAT, OFF(rope_low_freq_factor), NULL, 1e-6, 1e6, NULL, "llama: Llama-3 scaling's low_freq_factor (default: from the preset, 1)"},
 {"model.rope_scaling.high_freq_factor", T_FLOAT, OFF(rope_high_freq_factor), NULL, 1e-6, 1e6, NULL, "llama: Llama-3 scaling's high_freq_factor, above low_freq_factor (default: from the preset, 4)"},
 {"model.rope_scaling.original_max_position", T_INT, OFF(rope_original_max_position), NULL, 1, 16777216, NULL, "llama: Llama-3 scaling's original context length (original_max_position_embeddings; default: from the preset, 8192)"},
 {"model.tie_embeddings", T_BOOL, OFF(tie_embeddings), NULL, 0, 0, NULL, "llama: the LM head is the token embedding (true) or a matrix of its own (false); gpt2 is always tied (default: from the preset)"},
 {"model.recompute", T_ENUM, OFF(recompute), "none", 0, 0, recompute_names, "activation recomputation: none keeps every block's activations from forward to backward; blocks keeps only each block's input and recomputes the block's forward before its backward (about one more forward per step, activations L x B x T x n_embd x element size plus one block's and the root's; gradients bitwise equal to none)"},
 {"model.attention", T_ENUM, OFF(attention), "auto", 0, 0, attention_names, "how the GPU computes attention: flash (kernels/flash.cu: never writes the T x T score matrix, keeps each row's log-sum-exp, B x n_head x T floats, per block; bf16 on the cuda table, head dimension n_embd / n_head 64 or 128, n_head a multiple of n_kv_head; where it cannot run, 78 naming why), materialized (the scores and probabilities written, B x n_head x T x T per block, and cuBLASLt's GEMMs) or auto (flash wherever it can run, materialized otherwise: fp32 on the GPU and the CPU ops always materialize; auto prefers materialized at no shape where flash runs, as no GPU measurement has yet shown one where it is faster); with model.recompute: blocks the log-sum-exps are recomputed with the block; the start line and plan say which runs; not part of the model's shape: a checkpoint records the key and resumes under either (a change is logged)"},
 {"model.init", T_STR, OFF(model_init), "\"\"", 0, 0, NULL, "start a fresh run (one with no checkpoint to resume) from pretrained weights: a Hugging Face directory (config.json with model.safetensors or a sharded model.safetensors.index.json, GPT-2 or Llama: the model keys the job does not set come from its config.json, and one that disagrees is refused), a .safetensors file with Hugging Face GPT-2 or Llama names (transformer. or model. prefix optional; f32, bf16 or f16) or an llm.c model file (GPT-2; version 3 fp32 or 5 bf16); the model keys must match its dims (a position embedding with more rows than seq_len gives its first seq_len); each rank reads only its shard, after the ranks have compared the file (size and a fingerprint: a different file on some node is refused), and every weight must be finite; empty = initialise from train.seed"},
 {"train.steps", T_INT, OFF(steps), "1000", 1, 1e12, NULL, "optimizer steps to train"},
 {"train.batch_size", T_INT, OFF(batch_size), "8", 1, 1048576, NULL, "sequences per optimizer step, all ranks together"},
 {"train.micro_batch", T_INT, OFF(micro_batch), "0", 0, 1048576, NULL, "sequences per forward pass per rank; 0 = batch_size / data-parallel ranks; accumulation steps = batch_size / (micro_batch x ranks)"},
 {"train.lr", T_FLOAT, OFF(lr), "6.0e-4", 0, 10, NULL, "peak learning rate"},
 {"train.warmup_steps", T_INT, OFF(warmup_steps), "100", 0, 1e12, NULL, "linear warmup steps from lr/warmup_steps to lr"},
 {"train.schedule", T_ENUM, OFF(schedule), "cosine", 0, 0, schedule_names, "decay after warmup: cosine, linear (both to min_lr at the last step) or constant"},
 {"train.min_lr", T_FLOAT, OFF(min_lr), "6.0e-5", 0, 10, NULL, "learning rate at the last step; at most lr"},
 {"train.weight_decay", T_FLOAT, OFF(weight_decay), "0.1", 0, 100, NULL, "AdamW decoupled weight decay, applied to tensors with two or more dimensions (matrices and embeddings), not to biases or LayerNorm"},
 {"train.beta1", T_FLOAT, OFF(beta1), "0.9", 0, 0.999999, NULL, "AdamW first-moment decay"},
 {"train.beta2", T_FLOAT, OFF(beta2), "0.95", 0, 0.999999999, NULL, "AdamW second-moment decay"},
 {"train.eps", T_FLOAT, OFF(eps), "1.0e-8", 1e-30, 1, NULL, "AdamW epsilon"},
 {"train.grad_clip", T_FLOAT, OFF(grad_clip), "1.0", 0, 1e9, NULL, "clip the global gradient norm to this value; 0 = off"},
 {"train.seed", T_INT, OFF(seed), "1337", 0, I64MAX, NULL, "seed for initialisation and data order"},
 {"train.eval_every", T_INT, OFF(eval_every), "0", 0, 1e12, NULL, "validation loss every N steps and at the end; 0 = off"},
 {"train.eval_batches", T_INT, OFF(eval_batches), "4", 1, 1e6, NULL, "global batches of validation data per evaluation, for each data.val set"},
 {"train.eval_tasks", T_STRLIST, OFF(eval_tasks), "\"\"", 0, 0, NULL, "multiple-choice task files (HellaSwag's JSON Lines, as shardrun eval takes them: at most 32, with distinct names) scored at every evaluation (train.eval_every), each rank scoring its share of the items on the units it gathers for the forward; acc/NAME and acc_norm/NAME in the metrics, TensorBoard, log.prometheus and the report, NAME the file's name without .jsonl; the texts are encoded with data.tokenizer (the bytes for a byte-level model without one); empty = none"},
 {"data.train", T_STRLIST, OFF(data_train), "\"\"", 0, 0, NULL, "training token shards: a path, a glob, or a list of them, or the directory data prepare wrote (its index.json's training shards, and its validation shards and tokenizer for an unset data.val and data.tokenizer; the tokenizer must have the SHA-256 index.json records: 65 when it differs, 66 when it is missing); empty = the embedded corpus (bytes, vocabulary 256: a model.vocab_size other than 256 is refused unless data.embedded_any_vocab)"},
 {"data.mixture", T_MIXTURE, OFF(data_mixture), "[]", 0, 0, NULL, "weighted training sources instead of data.train: a list of {name, train, weight} (name: letters, digits, _ . -, unique; train: what data.train takes; weight: > 0); every global batch draws its sequences from the sources in proportion to the weights by a deterministic schedule (the smooth weighted round-robin: each next sequence comes from the source furthest behind its share since the weights were last set, ties to the first listed), each source in its own seeded order over its own shards with its own cursor, so a resume on any world size takes the same sequences; checkpoints record each source's cursor, tokens, epoch and data fingerprint; the weights may change on resume (a warning; the manifest keeps the history); a source added or removed is a change of data (data.allow_changed); [] = data.train"},
 {"data.mixture_end", T_ENUM, OFF(data_mixture_end), "wrap", 0, 0, mixture_end_names, "what a data.mixture source that has no sequence left does: wrap starts its next epoch (a new seeded order; the manifest counts epochs per source), stop ends the run with status 0 after the last step it could feed (\"source NAME exhausted at step S\"; its checkpoint saved)"},
 {"data.embedded_any_vocab", T_BOOL, OFF(data_embedded_any_vocab), "false", 0, 0, NULL, "with data.train empty, train on the embedded byte corpus (vocabulary 256) even when model.vocab_size is not 256 (tests, benchmarks); false: such a job is refused (78), since a model with another tokenizer would learn from bytes"},
 {"data.tokenizer", T_STR, OFF(data_tokenizer), "\"\"", 0, 0, NULL, "the tokenizer the data was prepared with (what data prepare --tokenizer takes: a tokenizer.json, a vocab.json with merges.txt beside it, or [gpt2:|llama3:]RANKS.tiktoken): log.sample_every starts from its end-of-text token and prints decoded text, shardrun sample uses it when not given --tokenizer, and checkpoints record its fingerprint (a resume with another tokenizer is refused unless data.allow_changed); unset model.vocab_size takes its ids, and more ids than an explicit model.vocab_size is refused (78); empty = none (the tokenizer data.train's data prepare directory names, if any)"},
 {"data.allow_changed", T_BOOL, OFF(data_allow_changed), "false", 0, 0, NULL, "resume even when the data differs from what the checkpoint recorded (a shard changed, added or removed, a data.mixture source added or removed, another tokenizer), with a warning naming the first difference; false: such a resume is refused (78)"},
 {"data.val", T_VALSETS, OFF(data_val), "\"\"", 0, 0, NULL, "validation token shards (or a data prepare directory: its validation shards), or named sets {NAME: shards, ...} (NAME as a data.mixture source's; at most 16), each evaluated on its own (train.eval_batches each) and logged as val_loss/NAME, val_loss being the first set's; empty = the validation shards of data.train's data prepare directory (or of the data.mixture sources' directories), the embedded corpus's held-out tail when neither data.train nor data.mixture is set, none otherwise"},
 {"log.every", T_INT, OFF(log_every), "1", 1, 1e12, NULL, "progress line and metrics record every N steps"},
 {"log.metrics", T_STR, OFF(log_metrics), "\"\"", 0, 0, NULL, "JSON-lines metrics file written by rank 0: one step record per logged step and one event record per start, resume, checkpoint, preemption and evaluation; a resumed run appends; shardrun report draws it; empty = none"},
 {"log.sample_every", T_INT, OFF(log_sample_every), "0", 0, 1e12, NULL, "every N steps rank 0 prints a sample of generated text: what shardrun sample prints for that step's checkpoint with --tokens 64 --seed S, S = train.seed + N (the start token, temperature 0.8, top-k 40): the fp32 master gathered to the host, the run's threads, the other ranks waiting; skipped with a warning when the model and its key/value cache exceed 25% of the node's memory divided by its ranks; 0 = off; printed as text: valid UTF-8 as it is, control characters and invalid bytes escaped (\\n, \\xHH)"},
 {"log.flight_recorder", T_INT, OFF(log_flight_recorder), "2048", 0, 16777216, NULL, "entries of every rank's flight recorder: a ring of its last collectives and step marks (sequence number, operation, group, bytes, plane, enqueue/start/end times, state), dumped to log.flight_dir as rank<N>.json when the run ends with 69 or 70, on preemption and on SIGQUIT (which then lets training go on); shardrun debug flight reads the dumps; 0 = off"},
 {"log.flight_dir", T_STR, OFF(log_flight_dir), "\"\"", 0, 0, NULL, "where the flight recorder's dumps go; empty = <checkpoint.dir>/flight/<job id>.<restart>/, or ./shardrun-flight.<job id or pid>/ without a checkpoint.dir"},
 {"log.straggler_pct", T_FLOAT, OFF(log_straggler_pct), "20", 0.1, 1e6, NULL, "a rank whose busy time (step time minus time waiting on collectives) exceeds the median across ranks by more than this many percent for 3 log intervals in a row is named in a warning (a straggler)"},
 {"log.trace_steps", T_STR, OFF(log_trace_steps), "\"\"", 0, 0, NULL, "A-B: every rank writes a Chrome trace-event file (rank<N>.json in log.trace_dir, for Perfetto or chrome://tracing) of steps A to B (1-based, inclusive; one step: A or A-A): host phases, the streams' waits, the blocks' forward and backward, the units' gathers and reductions, collectives with their sizes (from the flight recorder, so log.flight_recorder must not be 0), checkpoint snapshot and write; shardrun debug trace merges the ranks' files; empty = off"},
 {"log.trace_dir", T_STR, OFF(log_trace_dir), "\"\"", 0, 0, NULL, "where log.trace_steps writes; empty = beside the flight recorder's directory: <checkpoint.dir>/trace/<job id>.<restart>/, or ./shardrun-trace.<job id or pid>/ without a checkpoint.dir"},
 {"log.tensorboard", T_STR, OFF(log_tensorboard), "\"\"", 0, 0, NULL, "directory of TensorBoard event files written by rank 0 at each logged step: loss, val_loss, lr, grad_norm, tokens_per_s, mfu, memory, comm_exposed_ms and the straggler spread, with checkpoint, preempt and resume events as text; every start writes a new file with a session-start record at its first step, so a requeued or resumed run continues one curve with no redone step twice; empty = none"},
 {"log.prometheus", T_STR, OFF(log_prometheus), "\"\"", 0, 0, NULL, "a node_exporter textfile-collector file (a .prom file in the collector's directory, on a node-local path) that local rank 0 of each node rewrites (a temporary file, then a rename) at each logged step with its node's ranks: step, loss, tokens/s, MFU, memory by space, the last committed checkpoint step and its age, exposed communication, labelled with the job id, rank and host; %h and %j expand to the host name and the Slurm job id; empty = none"},
 {"threads", T_INT, OFF(threads), "0", 0, 4096, NULL, "compute threads per rank; 0 = all cores available to the rank"},
 {"comm.backend", T_ENUM, OFF(comm_backend), "auto", 0, 0, backend_names, "data plane: auto (nccl for GPU runs of more than one rank, tcp for CPU runs), tcp or nccl; the control plane is always tcp"},
 {"comm.timeout_s", T_FLOAT, OFF(comm_timeout_s), "300", 0.001, 1e7, NULL, "deadline of every blocking wait on a peer, in seconds"},
 {"comm.interface", T_STR, OFF(comm_interface), "\"\"", 0, 0, NULL, "address or interface name the TCP transport binds to, and NCCL_SOCKET_IFNAME when that is unset; empty = the address of the host name"},
 {"sharding.blocks_per_unit", T_INT, OFF(blocks_per_unit), "1", 1, 1024, NULL, "transformer blocks per sharded unit"},
 {"sharding.reshard_after_forward.blocks", T_RESHARD, OFF(reshard_blocks), "true", 2, 1048576, NULL, "free block units' full parameters after forward: true, false, or N (keep a copy sharded over N ranks)"},
 {"sharding.reshard_after_forward.root", T_RESHARD, OFF(reshard_root), "false", 2, 1048576, NULL, "the same for the root unit (embeddings, final norm, head)"},
 {"sharding.mixed_precision.param_dtype", T_ENUM, OFF(param_dtype), "auto", 0, 0, dtype_names, "dtype of gathered parameters for compute: fp32, bf16, or auto (bf16 on a GPU, fp32 on the CPU and the fake device, so a fake-device run stays bitwise a CPU run); the fp32 master shard is always kept; the start line and shardrun plan name the dtype a run uses"},
 {"sharding.mixed_precision.reduce_dtype", T_ENUM, OFF(reduce_dtype), "fp32", 0, 0, dtype_names, "dtype of gradient reduce-scatter: fp32, bf16, or auto (fp32)"},
 {"sharding.mesh.shard", T_INT, OFF(mesh_shard), "0", 0, 1048576, NULL, "ranks a unit is sharded over; 0 = ranks / replicate"},
 {"sharding.mesh.replicate", T_INT, OFF(mesh_replicate), "1", 1, 1048576, NULL, "replica groups (HSDP); shard x replicate = ranks"},
 {"sharding.prefetch.forward", T_INT, OFF(prefetch_forward), "1", 0, 16, NULL, "units gathered ahead during forward"},
 {"sharding.prefetch.backward", T_INT, OFF(prefetch_backward), "1", 0, 16, NULL, "units gathered ahead during backward"},
 {"sharding.grad_sync", T_ENUM, OFF(grad_sync), "per_step", 0, 0, gradsync_names, "per_step: accumulate full gradients, reduce-scatter once per step; per_micro_batch: reduce-scatter every micro-batch"},
 {"sharding.offload.params", T_BOOL, OFF(offload_params), "false", 0, 0, NULL, "with offload.optimizer, also drop the device copy of the parameter shard: each gather uploads this rank's part just in time (GPU runs; needs optimizer)"},
 {"sharding.offload.grads", T_BOOL, OFF(offload_grads), "false", 0, 0, NULL, "the gradient shard in host memory; implied by offload.optimizer (an explicit false beside it is refused; true alone is refused: it would only move state out and back)"},
 {"sharding.offload.optimizer", T_BOOL, OFF(offload_optimizer), "false", 0, 0, NULL, "GPU runs: the fp32 master weights, Adam m and v and the gradient shard in host memory and AdamW on the host; each unit's reduced gradients are copied to the host as its reduction ends; training is bitwise that without offload"},
 {"sharding.offload.pin_memory", T_BOOL, OFF(pin_memory), "true", 0, 0, NULL, "pin the offloaded host memory (false: pageable memory, allowed with a warning: every copy becomes synchronous)"},
 {"device", T_ENUM, OFF(device), "auto", 0, 0, device_names, "compute device: auto (a GPU when this build has CUDA and one is usable, and with several ranks NCCL too; else the CPU), cpu, or cuda (one GPU per rank, picked from the local rank; several ranks need a build with NCCL; fails with 78 when none is usable)"},
 {"checkpoint.dir", T_STR, OFF(ckpt_dir), "\"\"", 0, 0, NULL, "directory of sharded checkpoints, created with its missing parents (one notice line names them); empty = no checkpoints"},
 {"checkpoint.every_steps", T_INT, OFF(ckpt_every_steps), "0", 0, 1e12, NULL, "checkpoint every N steps; 0 = off"},
 {"checkpoint.every_minutes", T_FLOAT, OFF(ckpt_every_minutes), "0", 0, 1e7, NULL, "checkpoint every N minutes; 0 = off"},
 {"checkpoint.async", T_BOOL, OFF(ckpt_async), "true", 0, 0, NULL, "periodic saves snapshot the shard into host memory and write it in a background thread while training goes on; the commit follows at a later step boundary (false: training waits for every save)"},
 {"checkpoint.async_max_mb", T_INT, OFF(ckpt_async_max_mb), "0", 0, 1e9, NULL, "largest snapshot per rank, MiB; 0 = 25% of the node's memory divided by its ranks; a larger snapshot makes saves synchronous (with a warning)"},
 {"checkpoint.keep", T_INT, OFF(ckpt_keep), "3", 1, 1e6, NULL, "newest N checkpoints kept (the newest verified one always)"},
 {"checkpoint.keep_every", T_INT, OFF(ckpt_keep_every), "0", 0, 1e12, NULL, "also keep steps that are multiples of N; 0 = off"},
 {"checkpoint.memory.every_steps", T_INT, OFF(ckpt_mem_every_steps), "0", 0, 1e12, NULL, "the memory tier: every N steps each rank also writes its shard (same format, checksums and commit) into checkpoint.memory.dir in its node's memory, and a replica to a buddy rank on another node, in the background; a resume takes the newest step complete in memory, the buddies' replicas or checkpoint.dir; needs checkpoint.dir; 0 = off"},
 {"checkpoint.memory.dir", T_STR, OFF(ckpt_mem_dir), "/dev/shm/shardrun-%u-%j", 0, 0, NULL, "the memory tier's directory on each node (a tmpfs), created 0700 and refused when another user owns it; %u the user, %j the job id, %n the node's name, %h the host name, %% a percent sign; removed when the job's last step is done"},
 {"checkpoint.memory.replicas", T_ENUM, OFF(ckpt_mem_replicas), "auto", 0, 0, replicas_names, "copies of each memory shard on another node: 1 (a buddy rank on the next node keeps one), 0 (none: a lost node's memory is lost with it), auto (1 on more than one node)"},
 {"checkpoint.resume", T_STR, OFF(ckpt_resume), "auto", 0, 0, NULL, "auto (newest checkpoint that verifies), never, or a checkpoint path"},
 {"preemption.signals", T_SIGLIST, OFF(preempt_signals), "[USR1, USR2, TERM, INT]", 0, 0, NULL, "signals that request a checkpoint and exit"},
 {"preemption.requeue", T_ENUM, OFF(preempt_requeue), "exit", 0, 0, requeue_names, "exit: exit with exit_status (for RequeueExit); scontrol: rank 0 runs scontrol requeue, all exit 0"},
 {"preemption.exit_status", T_INT, OFF(preempt_exit_status), "75", 1, 255, NULL, "exit status after a preemption checkpoint (not 76: the crash-loop guard's)"},
 {"preemption.max_stalled_restarts", T_INT, OFF(preempt_max_stalled), "3", 0, 1000000, NULL, "crash-loop guard: when the last N starts all resumed from the same step and none committed a newer checkpoint (starts that ended with a preemption save or completed do not count), the next start refuses with status 76 naming them (shardrun ckpt list shows the start history); 0 = off, the way to start again after fixing the cause"},
 {"preemption.before_end", T_ENUM, OFF(preempt_before_end), "auto", 0, 0, before_end_names, "auto: under Slurm, rank 0 reads the job's end time (at start and every 5 minutes) and the ranks save and exit with exit_status, as for a signal, when the time left falls below the measured step and save time plus end_margin_s (no --signal needed); off: signals only"},
 {"preemption.end_margin_s", T_FLOAT, OFF(preempt_end_margin_s), "30", 0, 86400, NULL, "seconds added to the measured step and save time before the job's end time (preemption.before_end)"},
 {"slurm.comment_every_minutes", T_FLOAT, OFF(slurm_comment_every_minutes), "0", 0, 1e6, NULL, "rank 0 sets the Slurm job's comment (squeue -o %k, sacct -o Comment) to step/total, loss, last committed step and ETA every N minutes (scontrol update); a failed update warns once; 0 = off"},
};
/* clang-format on */
const int cfg_nkeys = (int)(sizeof cfg_keys / sizeof cfg_keys[0]);

/* CONT is accepted and ignored (Slurm sends it along with every SIGTERM;
 * it is never a reason to stop). */
const char *const cfg_signal_names[] = {"HUP", "INT", "QUIT", "USR1", "USR2", "TERM", "ALRM", "XCPU", "CONT", NULL};

sr_status sr_config_init(sr_config *cfg) {
    memset(cfg, 0, sizeof *cfg);
    cfg->origin = sr_calloc(NKEYS, sizeof *cfg->origin);
    if (!cfg->origin)
        return sr_error_oom("the job");
    parse_ctx ctx = {"<built-in defaults>", NULL};
    sr_status st = SR_OK;
    for (int i = 0; i < NKEYS && st == SR_OK; i++) {
        if (!cfg_keys[i].def)
            continue;
        yaml_document_t doc;
        bool has_root = false;
        st = cfg_load_document(&doc, cfg_keys[i].def, strlen(cfg_keys[i].def), &ctx, &has_root);
        if (st != SR_OK)
            break; /* out of memory: a built-in default always parses */
        if (!has_root) {
            yaml_document_delete(&doc);
            st = sr_error(SR_ERR_INTERNAL, "empty built-in default for %s", cfg_keys[i].key);
            break;
        }
        st = cfg_set_leaf(cfg, i, &doc, yaml_document_get_root_node(&doc), &ctx);
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
        const sr_key *k = &cfg_keys[i];
        if (cfg_types[k->type].release)
            cfg_types[k->type].release(cfg_field(cfg, k));
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
    int ki = cfg_key_index(name);
    const struct sr_key_origin *o = ki >= 0 ? &cfg->origin[ki] : NULL;
    if (!o || !o->file)
        snprintf(buf, n, "%s (default)", cfg->source ? cfg->source : "job");
    else if (o->setarg)
        snprintf(buf, n, "--set %s", o->setarg);
    else
        snprintf(buf, n, "%s:%d:%d", o->file, o->line, o->col);
}

bool cfg_was_set(const sr_config *cfg, const char *name) {
    int ki = cfg_key_index(name);
    return ki >= 0 && cfg->origin[ki].file != NULL;
}

bool sr_config_was_set(const sr_config *cfg, const char *name) { return cfg_was_set(cfg, name); }

const char *sr_config_enum_name(const char *key, int64_t value) {
    int ki = cfg_key_index(key);
    if (ki < 0 || cfg_keys[ki].type != T_ENUM)
        return "?";
    return cfg_keys[ki].names[value];
}

int sr_config_nkeys(void) { return NKEYS; }
const char *sr_config_key_name(int i) { return i >= 0 && i < NKEYS ? cfg_keys[i].key : NULL; }
void sr_config_value_text(const sr_config *cfg, int i, char *buf, size_t n) {
    if (i >= 0 && i < NKEYS)
        cfg_fmt_value(cfg, &cfg_keys[i], buf, n);
    else if (n)
        buf[0] = '\0';
}

void sr_config_show(const sr_config *cfg, FILE *out, const char *note) {
    fprintf(out, "# effective shardrun job (from %s); every default filled in%s%s\n", cfg->source ? cfg->source : "?",
            note ? "; " : "", note ? note : "");
    const char *prev = "";
    for (int i = 0; i < NKEYS; i++) {
        const char *k = cfg_keys[i].key;
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
        cfg_fmt_value(cfg, &cfg_keys[i], v, sizeof v);
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
        const sr_key *k = &cfg_keys[i];
        cfg_type_name(k, t, sizeof t);
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
        } else {
            fprintf(out, "%-40s %-28s default %s\n    %s\n", k->key, t, d, k->doc);
        }
    }
    if (mdoc)
        fprintf(out, ".El\n");
}
