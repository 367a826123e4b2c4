/* train_stop.c — where a run stands and the stops it agrees on: the
 * progress a checkpoint records (the step, the global cursor, the
 * mixture's state), a preemption's stop (the save, the exit status), and
 * a data.mixture source that has run out (data.mixture_end: stop).  Part
 * of the training run (train_impl.h). */
#include "srconfig.h"

#include "train_impl.h"

#include <jansson.h>
#include <stdio.h>

#include "clock.h"
#include "flight.h"
#include "preempt.h"

void sr_run_progress(const sr_run *r, int64_t step, sr_ckpt_progress *out) {
    out->step = step;
    out->cursor = r->cursor;
    sr_mix_state_get(r->mix, &out->mix);
}

bool sr_run_mixture_ends(sr_run *r, int64_t s) {
    const char *name = NULL;
    if (!sr_mix_exhausted(r->mix, r->cursor, (uint64_t)r->cfg->batch_size, &name))
        return false;
    /* every rank computes the same plan from the same state: no agreement needed */
    sr_log_info("source %s exhausted at step %lld: its sequences are all used (data.mixture_end: stop); the run ends "
                "after step %lld",
                name, (long long)(s + 1), (long long)s);
    if (r->metrics)
        sr_metrics_event(r->metrics, "source_exhausted", s + 1, json_pack("{ss}", "source", name));
    return true;
}

sr_status sr_run_preempt_stop(sr_run *r, int64_t s, const sr_step_out *o, int *exit_code) {
    char ctx[64];
    snprintf(ctx, sizeof ctx, "after step %lld", (long long)(s + 1));
    sr_preempt_notice(r->w->rank, ctx);
    if (o->signalled || !o->end_near)
        sr_log_info("preemption: ranks agreed to stop after step %lld (%d of %d rank%s saw a signal)",
                    (long long)(s + 1), o->signalled, r->w->size, r->w->size == 1 ? "" : "s");
    else
        sr_log_info("preemption: ranks agreed to stop after step %lld: the job's time limit is near (%.0f s left, "
                    "lead %.0f s; preemption.before_end)",
                    (long long)(s + 1), r->end_left_s, r->end_lead_s);
    if (r->metrics) {
        const char *sig = sr_preempt_signal_name();
        sr_metrics_event(r->metrics, "preempt", s + 1,
                         json_pack("{so si sb}", "signal", sig ? json_string(sig) : json_null(), "ranks_signalled",
                                   o->signalled, "time_limit", o->end_near && !o->signalled));
    }
    uint64_t bytes = 0;
    double ts = sr_clock_mono_s();
    /* an asynchronous save in flight finishes and commits first */
    int64_t inflight = sr_ckpt_pending_step(r->ck);
    sr_status st = sr_ckpt_poll(r->ck, s + 1, true);
    sr_run_checkpoint_events(r);
    if (st != SR_OK)
        return st;
    if (inflight >= 0)
        sr_log_info("preemption: the save of step %lld in flight finished first (%.2f s)", (long long)inflight,
                    sr_clock_mono_s() - ts);
    sr_ckpt_progress now;
    sr_run_progress(r, s + 1, &now);
    if (sr_ckpt_last_step(r->ck) == s + 1) {
        sr_log_info("preemption: step %lld is the checkpoint just committed: nothing more to save", (long long)(s + 1));
    } else {
        ts = sr_clock_mono_s();
        st = sr_ckpt_save(r->ck, &now, &bytes);
        sr_run_checkpoint_events(r);
        if (st != SR_OK)
            return st;
    }
    double tdone = sr_clock_mono_s();
    sr_log_info("preemption: save of step %lld took %.2f s (%.1f MB, %.0f MB/s); %.2f s since the signal",
                (long long)(s + 1), tdone - ts, (double)bytes / 1e6,
                (double)bytes / 1e6 / (tdone - ts > 0 ? tdone - ts : 1e-9),
                sr_preempt_pending() ? sr_preempt_since() : 0.0);
    *exit_code = sr_preempt_exit_status(r->cfg, r->w);
    sr_flight_dump("preempt", "preemption: the ranks agreed to stop; checkpoint committed");
    sr_log_info("preemption: exiting with status %d (%s)", *exit_code,
                *exit_code == 0 ? "requeue requested; checkpoint committed"
                                : "checkpoint committed; run again to resume");
    return SR_PREEMPTED;
}
