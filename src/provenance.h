/* provenance.h — the data a run trains on, as a checkpoint promises it: each
 * training and validation shard's size and SHA-256 and the tokenizer's
 * fingerprint (sr_data_record, manifest.h), and the comparison a resume
 * makes against the record of the checkpoint it resumes from.
 *
 * Hashing terabytes at every start is not affordable, so a shard's SHA-256
 * comes from what recorded it before — the index.json `data prepare` wrote
 * beside it, the cache this module writes beside the shards
 * (.shardrun-sha256.json), or the cache in checkpoint.dir
 * (data-sha256.json, when the data directory is read-only) — and is
 * trusted only while the shard's size and modification time are the ones
 * recorded with it.  Otherwise the shard is hashed again (from the mapping
 * the run reads), the shards split over the ranks, with a progress line. */
#ifndef SR_PROVENANCE_H
#define SR_PROVENANCE_H

#include <stdbool.h>

#include "ctl.h"
#include "data.h"
#include "manifest.h"
#include "status.h"
#include "tokenizer.h"

/* A training source: a data.mixture source's name (NULL or "" for
 * data.train) and its shards. */
typedef struct {
    const char *name;
    const sr_data *data;
} sr_prov_source;

/* Fills *rec (collective: every rank calls it, with the same data): the
 * shards of the `ntrain` training sources, in order, then those of the
 * `nval` validation sets val[] (data.val's, in order), the tokenizer `tok` (NULL: none; recorded by sr_tokenizer_spec,
 * so it names the file from any directory), the fingerprint, and each
 * named source's own.  `ckpt_dir` (may be NULL or "") is where the cache
 * goes when the shards' directory is read-only.  Rank 0 writes the caches
 * of shards it had to hash (a failure to write one is silent: the next
 * start hashes again).  SR_ERR_PEER, SR_ERR_INTERNAL.  Free with
 * sr_provenance_free. */
sr_status sr_provenance_collect(sr_data_record *rec, const sr_prov_source *train, int ntrain, sr_data *const *val,
                                int nval, const sr_tokenizer *tok, const char *ckpt_dir, sr_ctl *ctl);
void sr_provenance_free(sr_data_record *rec);

/* Whether `now` differs from `then` (a checkpoint's record), and the first
 * difference in msg[n] ("another tokenizer: ...", "a data.mixture source
 * was added: NAME" or "removed", "[source NAME: ]train shard X changed
 * (SHA-256 ... was ...)", "a shard was added: X", "removed: X"). */
bool sr_provenance_differs(const sr_data_record *now, const sr_data_record *then, char *msg, size_t n);

#endif
