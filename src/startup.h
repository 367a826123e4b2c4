/* startup.h — where a start's seconds to its first step went.
 *
 * startup owns the start-up phase clock of the process: main() marks the
 * process start (sr_startup_mark), the code of each phase adds its own
 * seconds (sr_startup_add), and the run reads the split when training
 * begins (sr_startup_read): bootstrap (the launcher's PMIx or PMI2 handshake,
 * the control plane's connections, the data plane's start: NCCL's init),
 * device (opening the device), model (the model's parameters, FSDP's
 * units, the memory plan), checkpoint (opening the directory, resuming:
 * reading and verifying the shards, or model.init), and other (what none
 * of those took: the job file, the data's index, the metrics file).  The
 * split is what `shardrun ckpt list` and `report` turn into goodput
 * (goodput.h): the start line, the metrics' start record and
 * starts.jsonl's ready record carry it.  One run per process, so the
 * clock is process state; each phase is timed on the thread that runs it
 * (the main thread). */
#ifndef SR_STARTUP_H
#define SR_STARTUP_H

#include <stddef.h>

#include <jansson.h>

typedef enum {
    SR_PHASE_BOOTSTRAP,
    SR_PHASE_DEVICE,
    SR_PHASE_MODEL,
    SR_PHASE_CHECKPOINT,
    SR_PHASE_OTHER,
    SR_PHASE_COUNT
} sr_phase;

typedef struct {
    double s[SR_PHASE_COUNT]; /* seconds per phase; other = total - the rest (>= 0) */
    double total;             /* the process start to now */
} sr_startup;

/* Marks the process start (main(), before anything else). */
void sr_startup_mark(void);

/* Adds the seconds since t0 (sr_clock_mono_s() when the phase began) to
 * phase p. */
void sr_startup_add(sr_phase p, double t0);

/* The split now. */
sr_startup sr_startup_read(void);

/* (The phases are named as records and tables spell them: "bootstrap",
 * "device", "model", "checkpoint", "other".)
 * "1.92 s to the first step: bootstrap 0.21 s, device 0.00 s, model
 * 0.30 s, checkpoint 1.20 s, other 0.21 s" into out. */
void sr_startup_format(const sr_startup *s, char *out, size_t n);

/* {"total": .., "bootstrap": .., "device": .., "model": ..,
 * "checkpoint": .., "other": ..} in seconds (a new reference). */
json_t *sr_startup_json(const sr_startup *s);

/* Reads such an object into *s (missing members 0); false when o is not
 * an object. */
int sr_startup_from_json(const json_t *o, sr_startup *s);

#endif
