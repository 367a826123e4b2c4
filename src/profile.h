/* profile.h — where a GPU step's time goes, measured:
 * SHARDRUN_CUDA_PROFILE=FIRST:COUNT.
 *
 * profile owns the per-op profile of a training run on the cuda table:
 * for COUNT steps from step FIRST, a ledger (ledger.h) is bound to the
 * training thread and the table brackets every kernel launch, cuBLASLt
 * call, copy, memset and collective with a pair of timing events from a
 * pool it created at set-up (device.h profile_*); after each profiled step
 * it waits for the device and adds each operation's time to its launcher's
 * row and its family.  After the last one, rank 0 prints per family and
 * per launcher the calls per step, device ms per step, share of the step,
 * achieved TFLOP/s and GB/s from the ledger, the ledger's roofline bound
 * and the efficiency (bound / measured), and the gap between the sum of
 * the operations' times and the step's wall time (host bubbles, launch
 * gaps: profile.json's launch_gap_ms, its share of the step and per
 * operation, and past SR_PROFILE_GAP_SHARE the advice that CUDA graphs
 * would remove it); writes profile.json (the ledger's JSON fields plus `ms`, per
 * family and per launcher) and calibration.json (`plan --ledger
 * --calibration` reads it) into the run's diagnostics directory
 * (<checkpoint.dir>/profile/<job>.<restart>, else ./shardrun-profile.<job>),
 * naming it on the last line; and a `profile` event in log.metrics that
 * `shardrun report` draws.  Unset, nothing of this runs and the launch
 * path is the same.  On the CUDA emulator the times are the emulator's,
 * and every line and record says so. */
#ifndef SR_PROFILE_H
#define SR_PROFILE_H

#include <stdbool.h>
#include <stdint.h>

#include "device.h"
#include "metrics.h"
#include "status.h"

/* The environment variable (shardrun(1) ENVIRONMENT). */
#define SR_PROFILE_ENV "SHARDRUN_CUDA_PROFILE"
/* Timing-event pairs per profiled step: one step's operations (a step of
 * Llama-3.2-1B issues about 2,400); more are counted untimed. */
#define SR_PROFILE_PAIRS 16384
/* The launch gap's share of the step above which the profile advises one
 * CUDA graph per step (cuda_graphs_advised in profile.json). */
#define SR_PROFILE_GAP_SHARE 0.05

typedef struct sr_profile sr_profile;

/* Where the profile writes. */
typedef struct {
    int rank;
    const char *dir; /* the run's diagnostics directory for "profile" (flight.h sr_flight_run_dir) */
} sr_profile_opts;

/* Reads SHARDRUN_CUDA_PROFILE (unset or empty: *out NULL, SR_OK): FIRST:COUNT,
 * whole numbers, FIRST >= 1, COUNT 1 to 1000, else SR_ERR_CONFIG naming
 * the variable.  On a table without a profile (the cpu tables): one
 * warning and *out NULL.  Creates the table's timing events (set-up);
 * their failure is the status. */
sr_status sr_profile_open(sr_profile **out, sr_dev *dev, int64_t steps, const sr_profile_opts *o);
/* Step `step` (1-based) begins and ends on the training thread; nothing
 * outside the window, nothing for NULL p.  end waits for the device;
 * after the window's last step it reports: the event into `metrics` (may
 * be NULL) on every rank, the lines and files on rank 0 (its write
 * errors, SR_ERR_CANTCREAT or SR_ERR_IO, are the status). */
void sr_profile_step_begin(sr_profile *p, int64_t step);
sr_status sr_profile_step_end(sr_profile *p, int64_t step, sr_metrics *metrics);
void sr_profile_free(sr_profile *p);

#endif
