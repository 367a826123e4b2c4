/* report.h — `shardrun report`: a run's metrics file seen as a page.
 *
 * report owns the reading of a metrics file (metrics.h's step and event
 * records, one JSON object per line; a line that does not parse is named
 * by its number and skipped) and what is made of it: one self-contained
 * HTML page with inline SVG charts against the step (training and
 * validation loss, learning rate, gradient norm, tokens/s, MFU, exposed
 * communication, memory by category stacked) with every event marked once,
 * and a plain-text summary (final and best validation loss, tokens, wall
 * time, time lost to preemption). */
#ifndef SR_REPORT_H
#define SR_REPORT_H

#include <stdio.h>

#include "status.h"

/* Reads `metrics`, writes the page to `out` (NULL: "<metrics>.html")
 * atomically, prints the summary on `summary_out` and one line per
 * skipped line on `err`.  SR_ERR_NOINPUT when the file is missing,
 * SR_ERR_DATA when no line is a record, SR_ERR_CANTCREAT / SR_ERR_IO when
 * the page cannot be written; nothing is written on failure. */
sr_status sr_report(const char *metrics, const char *out, FILE *summary_out, FILE *err);

#endif
