/* tboard.h — TensorBoard event files (log.tensorboard).
 *
 * tboard owns the event-file format: TFRecord framing (a little-endian
 * length, its masked CRC32C, the record, its masked CRC32C) around Event
 * protocol buffers (tensorflow/core/util/event.proto): the file_version
 * record, a SessionLog START record, Summary scalars (simple_value) and
 * text summaries (a string tensor with the "text" plugin's metadata).
 *
 * Every start writes a new file, events.out.tfevents.<seconds>.<host>.
 * <pid>.shardrun, named so that the files of a directory sort in the order
 * they were written (TensorBoard reads them in name order), and opens it
 * with a session-start record at the first step it will log: TensorBoard
 * then drops every older event at that step or later — the steps a resumed
 * run redoes after a crash — so one curve spans requeues and crashes with
 * no step twice.  What it writes (the metrics record's keys as tags) is
 * decided by metrics.c; this module only encodes. */
#ifndef SR_TBOARD_H
#define SR_TBOARD_H

#include <stdbool.h>
#include <stdint.h>

#include "status.h"

typedef struct sr_tb sr_tb;

/* Creates `dir` and its missing parents and checks that a file can be
 * written there (SR_ERR_CANTCREAT naming the directory otherwise); no
 * file is written yet.  *out is NULL on failure. */
sr_status sr_tb_prepare(sr_tb **out, const char *dir);
/* Opens this start's event file and writes its file_version and a
 * SessionLog START at `first_step` (the first step this run logs).
 * SR_ERR_CANTCREAT when the file cannot be created. */
sr_status sr_tb_begin(sr_tb *tb, int64_t first_step);
/* One Event with `n` scalars at `step` (tags[i], values[i] as float). */
void sr_tb_scalars(sr_tb *tb, int64_t step, int n, const char *const *tags, const double *values);
/* One Event with a text summary at `step`.  A failed write (of either)
 * warns once; later events are dropped and the run goes on. */
void sr_tb_text(sr_tb *tb, int64_t step, const char *tag, const char *text);
/* Closes; NULL is fine.  (TensorBoard's files are not the run's outcome:
 * no status.) */
void sr_tb_close(sr_tb *tb);

#endif
