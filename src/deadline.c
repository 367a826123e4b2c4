/* deadline.c — the run's view of its Slurm job: the save before the time
 * limit without a signal (preemption.before_end), the progress comment
 * (slurm.comment_every_minutes), and the stop of a run signalled before
 * its first step.  See train_impl.h.
 *
 * Only rank 0 talks to Slurm (slurmjob.h: the controller is shared); it
 * puts the end time and its verdict "less than the lead is left" into the
 * step's agreement, so every rank stops after the same step, exactly as
 * for a signal.  The lead is sr_preempt_lead_s (the function `shardrun
 * plan` prints as the --signal lead) of the run's measured step time (the
 * wall time between two agreements, periodic saves and evaluations
 * included) and save time (the newest commit's duration; before the first
 * save, the step time stands in), plus preemption.end_margin_s. */
#include "srconfig.h"

#include "train_impl.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "preempt.h"
#include "slurmjob.h"

void sr_run_slurm_open(sr_run *r) {
    const sr_config *cfg = r->cfg;
    const char *job = getenv("SLURM_JOB_ID");
    bool want_end = cfg->preempt_before_end == 0 && cfg->ckpt_dir && cfg->ckpt_dir[0];
    bool comment = cfg->slurm_comment_every_minutes > 0;
    if (r->w->rank != 0 || !job || !*job || (!want_end && !comment))
        return;
    char why[1024];
    r->slurm = sr_slurmjob_open(job, want_end, why, sizeof why);
    r->slurm_t0 = r->slurm_tick = sr_clock_wall_s();
    r->comment_next = r->slurm_tick + cfg->slurm_comment_every_minutes * 60.0;
    if (!want_end)
        return;
    double end = sr_slurmjob_end(r->slurm);
    if (end <= 0) {
        sr_log_warn("preemption.before_end: %s: the run saves before the end only on a signal (hint: #SBATCH "
                    "--signal=USR1@LEAD; shardrun plan prints the lead)",
                    why[0] ? why : "the job's end time cannot be read");
        return;
    }
    char at[32], in[48];
    sr_clock_iso(end, at, sizeof at);
    double left = end - sr_clock_wall_s();
    if (left < 0.5) /* "0:00": the end is now; the first step's agreement stops the run */
        snprintf(in, sizeof in, "now");
    else
        snprintf(in, sizeof in, "in %.0f s", left);
    sr_log_info("preemption.before_end: job %s ends at %s (%s); the ranks save and exit with status %lld when "
                "less than the lead is left: 2 x (step + save) + %.3g s (preemption.end_margin_s), measured as it "
                "trains",
                job, at, in, (long long)cfg->preempt_exit_status, cfg->preempt_end_margin_s);
}

/* ETA as H:MM:SS (or D-HH:MM:SS), "?" before a step was timed. */
static void eta(double s, char *out, size_t n) {
    if (!(s >= 0) || s > 1e8) {
        snprintf(out, n, "?");
        return;
    }
    long t = lround(s), d = t / 86400;
    if (d)
        snprintf(out, n, "%ld-%02ld:%02ld:%02ld", d, t % 86400 / 3600, t % 3600 / 60, t % 60);
    else
        snprintf(out, n, "%ld:%02ld:%02ld", t / 3600, t % 3600 / 60, t % 60);
}

void sr_run_slurm_step(sr_run *r, int64_t s, double red[SR_RUN_AGREE_N]) {
    red[SR_AGREE_END_NEAR] = red[SR_AGREE_END_TIME] = 0.0;
    if (!r->slurm)
        return;
    const sr_config *cfg = r->cfg;
    double now = sr_clock_wall_s();
    double step_s = now - r->slurm_tick; /* the last step, all of it */
    r->slurm_tick = now;
    char warn[1024];
    sr_slurmjob_poll(r->slurm, now, warn, sizeof warn);
    if (warn[0])
        sr_log_warn("%s", warn);
    double end = sr_slurmjob_end(r->slurm);
    if (end > 0 && s > r->start.step) { /* a step was timed */
        double save_s = r->save_s > 0 ? r->save_s : step_s;
        double lead = sr_preempt_lead_s(step_s, save_s, cfg->preempt_end_margin_s);
        if (!r->end_lead_s) /* once: the first measured lead */
            sr_log_info("preemption.before_end: lead %.0f s (step %.3g s, save %.3g s%s, twice over, + %.3g s); %.0f s "
                        "left",
                        lead, step_s, save_s, r->save_s > 0 ? "" : " as the step's until a save is measured",
                        cfg->preempt_end_margin_s, end - now);
        r->end_lead_s = lead;
        red[SR_AGREE_END_TIME] = end;
        if (end - now < lead) {
            red[SR_AGREE_END_NEAR] = 1.0;
            r->end_left_s = end - now;
        }
    } else if (end > 0 && end - now <= 0) { /* the end is now (squeue's 0:00): stop after this step */
        red[SR_AGREE_END_NEAR] = 1.0;
        red[SR_AGREE_END_TIME] = end;
        r->end_left_s = 0;
    }
    if (cfg->slurm_comment_every_minutes > 0 && now >= r->comment_next && s > r->start.step) {
        r->comment_next = now + cfg->slurm_comment_every_minutes * 60.0;
        char text[256], left[32];
        double per = (now - r->slurm_t0) / (double)(s - r->start.step);
        eta(per * (double)(cfg->steps - s), left, sizeof left);
        int64_t ck = sr_ckpt_last_step(r->ck);
        char ckt[32];
        if (ck > 0)
            snprintf(ckt, sizeof ckt, "%lld", (long long)ck);
        else
            snprintf(ckt, sizeof ckt, "none");
        snprintf(text, sizeof text, "shardrun step %lld/%lld loss %.4f ckpt %s eta %s", (long long)s,
                 (long long)cfg->steps, r->last_loss, ckt, left);
        if (!sr_slurmjob_set_comment(r->slurm, text, warn, sizeof warn) || warn[0])
            sr_log_warn("%s", warn);
    }
}

void sr_run_slurm_close(sr_run *r) {
    char warn[1024];
    sr_slurmjob_close(r->slurm, warn, sizeof warn);
    if (warn[0])
        sr_log_warn("%s", warn);
    r->slurm = NULL;
}

sr_status sr_run_signalled_in_setup(sr_run *r, int *exit_code) {
    sr_preempt_test_hook(0, r->w->rank); /* SHARDRUN_TEST_PREEMPT_AT=0: a signal during set-up */
    double signalled = sr_preempt_pending() ? 1.0 : 0.0;
    sr_status st = sr_ctl_sum(r->ctl, &signalled, 1);
    if (st != SR_OK || signalled == 0)
        return st;
    /* nothing trained, nothing to save: the checkpoint this start resumed
     * from, if any, is the newest */
    const char *sig = sr_preempt_signal_name();
    sr_log_info("preemption: %s before step %lld: nothing to save", sig ? sig : "a signal on another rank",
                (long long)(r->start.step + 1));
    *exit_code = sr_preempt_exit_status(r->cfg, r->w);
    return SR_PREEMPTED;
}
