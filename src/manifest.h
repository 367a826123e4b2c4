/* manifest.h — a checkpoint's manifest.yaml: what it records, rendering it
 * and parsing it back.
 *
 * manifest owns the manifest format (shardrun-checkpoint(5)): progress
 * (step, tokens, data cursor, seed, LR schedule), world size and mesh, the
 * agreed CPU ISA level, model dims and their hash, every job key's value,
 * the data it trained on (shards and tokenizer, with SHA-256s; optional
 * when parsed), the tensor table, each saved state's name and dtype, and per shard file
 * its size, the slices of the global parameter vector it holds and one
 * SHA-256 per 4 MiB chunk.  The last line is the SHA-256 of every byte
 * before it.  Rendering uses libyaml's emitter, parsing its document API;
 * every refusal is SR_ERR_DATA with file:line:col.  Version 2 records each
 * state's dtype; version 1 (states implicitly f32) is read too.  Pure: no
 * I/O except sr_manifest_load reading the file. */
#ifndef SR_MANIFEST_H
#define SR_MANIFEST_H

#include <stdbool.h>
#include <stdint.h>

#include "config.h"
#include "dtype.h"
#include "mixture.h"
#include "model.h"
#include "shardplan.h"
#include "status.h"

#define SR_CKPT_FORMAT "shardrun-checkpoint"
#define SR_MANIFEST_VERSION 4 /* written; 1 to 4 are read (1 and 2: gpt2; 3 records model.arch; 4 data.mixture) */
#define SR_MANIFEST_NAME "manifest.yaml"
#define SR_NSTATE 3

typedef struct {
    char name[32]; /* shard_NNNNN.bin */
    int shard;
    uint64_t bytes, elements, nchunks;
    int nslices;
    uint64_t (*slices)[2];    /* global begin, count */
    unsigned char (*sha)[32]; /* nchunks digests */
} sr_manifest_file;

/* The data a run trained on (provenance.h computes and compares it): the
 * tokenizer (sr_tokenizer_spec, its file's SHA-256 and its pattern; ""
 * all: none), every training and validation
 * shard in the order the run reads them, and one fingerprint over all of
 * it (64 hex digits: what `ckpt list` and `ckpt inspect` show). */
typedef struct {
    char split[8];                    /* train | val */
    char source[SR_MIX_NAME_MAX + 1]; /* the data.mixture source of a train shard ("": data.train) */
    char path[1024];
    uint64_t bytes;
    char sha256[65];
} sr_data_shard_record;

typedef struct {
    char tokenizer[1024], tokenizer_sha256[65], tokenizer_pattern[16];
    char fingerprint[65];
    int n;
    sr_data_shard_record *shards;
    /* data.mixture: each source's fingerprint (its train shards' lines) */
    int nsources;
    struct {
        char name[SR_MIX_NAME_MAX + 1];
        char fingerprint[65];
    } sources[SR_MIX_MAX_SOURCES];
} sr_data_record;

typedef struct {
    int version;
    int64_t step;
    uint64_t cursor, tokens, seed;
    sr_mix_state mix; /* version 4; older manifests: n = 0 (one source) */
    /* lr_schedule as recorded (for people and inspect; the run's keys decide) */
    char schedule[16];
    double lr, min_lr, next_lr;
    uint64_t warmup_steps, steps;
    int world, mesh_shard, mesh_replicate;
    char isa[32]; /* the ISA level the run agreed on ("" in version 1) */
    sr_model_dims dims;
    uint64_t n_params;
    char model_hash[65];
    /* model.init of the run that started this lineage: the weights file's
     * path and SHA-256 ("" when it started from the seed; recorded under
     * model.init, optional when parsed) */
    char init_path[1024], init_sha256[65];
    char created[64], job[128], host[128];
    uint64_t chunk_bytes;
    sr_dtype state_dtype[SR_NSTATE];
    int nfiles;
    sr_manifest_file *files;
    int nconfig;
    char **ckeys, **cvals; /* the job's keys and their values as `config show` prints them */
    bool has_data;         /* the data record is there (not in checkpoints written before it) */
    sr_data_record data;
    uint64_t total_bytes; /* sum of the files' bytes (parse only) */
} sr_manifest;

/* Frees what parse allocated (files, slices, digests, config). */
void sr_manifest_free(sr_manifest *mf);
/* True for exactly the name a shard file has (shard_NNNNN.bin): never a
 * path, never a dot file. */
bool sr_manifest_shard_name(const char *name);

/* The model hash recorded for dims (64 hex digits + NUL). */
void sr_manifest_model_hash(const sr_model_dims *d, char out[65]);
/* Bytes of a shard file of `elements` per state, and where state k starts. */
uint64_t sr_manifest_file_bytes(const sr_manifest *mf, uint64_t elements);
uint64_t sr_manifest_section(const sr_manifest *mf, uint64_t elements, int k);

/* Renders mf (and the tensor table of `model`, each tensor's unit from
 * `plan`) as YAML ending with the manifest_sha256 line; *out is malloc'd.
 * SR_ERR_INTERNAL when out of memory. */
sr_status sr_manifest_render(const sr_manifest *mf, const sr_model *model, const sr_shardplan *plan, char **out,
                             size_t *out_len);
/* Checks the self-checksum of text[0, len), parses and validates it (names,
 * sizes, chunk counts, slices tiling [0, parameters)).  `path` names it in
 * messages.  On failure nothing is left to free. */
sr_status sr_manifest_parse(const char *text, size_t len, const char *path, sr_manifest *mf);
/* Reads manifest.yaml of the checkpoint directory dirfd (a regular file,
 * never through a symbolic link, never blocking) and parses it; `dir` names
 * the directory in messages.  SR_ERR_DATA with the reason; the message
 * says when the file is missing (not a complete checkpoint). */
sr_status sr_manifest_load(int dirfd, const char *dir, sr_manifest *mf);

#endif
