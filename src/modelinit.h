/* modelinit.h — model.init: a fresh run's weights from a pretrained file.
 *
 * modelinit owns the collective load: the ranks compare the file they
 * opened (size and fingerprint), each reads only its own slices of the
 * parameter vector (modelfile.h maps the file onto the model) and hands
 * them to the engine (fsdp.h sr_fsdp_state_write), checks its part of a
 * tied head, and rank 0 hashes the file for the manifests. */
#ifndef SR_MODELINIT_H
#define SR_MODELINIT_H

#include <limits.h>
#include <stdbool.h>

#include "ctl.h"
#include "fsdp.h"
#include "model.h"
#include "status.h"
#include "world.h"

/* What was loaded, for the manifests and the banner. */
typedef struct {
    bool loaded;
    char path[PATH_MAX]; /* the file's absolute path */
    char sha256[65];
} sr_modelinit;

/* Loads `path` into the master shard of f (collective: every rank calls it,
 * once, before training).  SR_ERR_CONFIG when the ranks see different
 * files (naming ranks and hosts), SR_ERR_DATA for a file that does not fit
 * the model or an untied head, SR_ERR_NOINPUT / SR_ERR_IO for an unreadable
 * one (modelfile.h), SR_ERR_PEER.  On success *out is filled. */
sr_status sr_modelinit_load(sr_modelinit *out, const char *path, sr_fsdp *f, const sr_model *model, sr_ctl *ctl,
                            const sr_world *w);

#endif
