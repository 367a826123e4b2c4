/* train_eval.c — the run's evaluations (train.eval_every): each data.val
 * set's loss and each train.eval_tasks task's accuracies, every rank its
 * share through the engine's evaluation forward; see train_impl.h.
 *
 * Every rank runs the same number of forwards (a rank whose share of a
 * task is smaller runs one-sequence forwards whose losses it drops), so
 * the engine's gathers stay matched and no rank waits on another longer
 * than a forward: a rank that fails or stalls is caught by the
 * collectives' comm.timeout_s as in training. */
#include "srconfig.h"

#include "train_impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "line.h"
#include "mem.h"
#include "preempt.h"

sr_status sr_run_open_evals(sr_run *r) {
    const sr_config *cfg = r->cfg;
    sr_status st = SR_OK;
    for (int i = 0; st == SR_OK && i < cfg->data_val.count; i++) {
        st = sr_data_open(&r->val[i], &cfg->data_val.set[i].paths, r->T, cfg->vocab_size);
        r->set_name[i] = cfg->data_val.set[i].name;
        r->nval = i + 1;
        if (st != SR_OK && cfg->data_val.set[i].name)
            st = sr_error_wrap(st, "data.val set %s", cfg->data_val.set[i].name);
    }
    if (st == SR_OK && cfg->data_val.count == 0 && !cfg->data_train.count && !cfg->data_mixture.count) {
        st = sr_data_open_embedded(&r->val[0], SR_DATA_VAL, r->T, cfg->vocab_size);
        r->nval = 1;
    }
    int n = cfg->eval_tasks.count;
    if (st != SR_OK || n == 0)
        return st;
    r->tasks = sr_calloc((size_t)n, sizeof *r->tasks);
    r->tenc = sr_calloc((size_t)n, sizeof *r->tenc);
    /* (pinned on the cuda table: the download's host wait keeps its deadline) */
    r->task_losses = sr_dev_io_alloc(r->dev, (size_t)r->mb * (size_t)r->T * sizeof(float));
    if (!r->tasks || !r->tenc || !r->task_losses)
        return sr_error_oom("train.eval_tasks");
    if (!r->tok && cfg->vocab_size != 256)
        return sr_error(SR_ERR_CONFIG,
                        "train.eval_tasks: the model's vocabulary is %lld tokens and data.tokenizer is unset, so the "
                        "tasks' text cannot be encoded (hint: set data.tokenizer to the data's tokenizer)",
                        (long long)cfg->vocab_size);
    int most = 0;
    for (int k = 0; st == SR_OK && k < n; k++) {
        st = sr_task_load(&r->tasks[k], cfg->eval_tasks.items[k]);
        if (st == SR_OK) {
            r->ntasks = k + 1;
            st = sr_task_encode(&r->tasks[k], r->tok, (int)cfg->vocab_size, r->T, &r->tenc[k]);
            r->task_name[k] = r->tasks[k].name;
            most = st == SR_OK && r->tenc[k].nseq > most ? r->tenc[k].nseq : most;
        }
    }
    if (st != SR_OK)
        return sr_error_wrap(st, "train.eval_tasks");
    if (!(r->task_lp = sr_calloc((size_t)most + 1, sizeof(double))))
        return sr_error_oom("train.eval_tasks");
    return SR_OK;
}

sr_status sr_run_agree_evals(sr_run *r) {
    /* every rank read the same tasks (a node's stale copy would give other
     * forward counts, and the ranks would wait on each other): rank 0's
     * items, sequences and tokens of each task broadcast, each rank's
     * verdict summed, so all refuse together */
    int n = r->ntasks;
    if (n == 0)
        return SR_OK;
    int64_t *mine = sr_calloc((size_t)n * 6, sizeof(int64_t));
    if (!mine)
        return sr_error_oom("train.eval_tasks");
    int64_t *first = mine + 3 * n;
    for (int k = 0; k < n; k++) {
        mine[3 * k] = r->tasks[k].n;
        mine[3 * k + 1] = r->tenc[k].nseq;
        mine[3 * k + 2] = (int64_t)r->tenc[k].nids;
    }
    memcpy(first, mine, (size_t)n * 3 * sizeof(int64_t));
    sr_status st = sr_ctl_broadcast(r->ctl, first, (size_t)n * 3, 0);
    int bad = -1;
    for (int k = 0; st == SR_OK && k < n && bad < 0; k++)
        if (memcmp(mine + 3 * k, first + 3 * k, 3 * sizeof(int64_t)) != 0)
            bad = k;
    double differ = bad >= 0 ? 1.0 : 0.0;
    if (st == SR_OK)
        st = sr_ctl_sum(r->ctl, &differ, 1);
    if (st == SR_OK && differ > 0)
        st = bad >= 0 ? sr_error(SR_ERR_CONFIG,
                                 "train.eval_tasks: %s differs between the ranks (%lld items, %lld sequences, %lld "
                                 "tokens here; rank 0 reads %lld, %lld, %lld); every rank must read the same file "
                                 "(hint: a node-local copy out of date?)",
                                 r->tasks[bad].path, (long long)mine[3 * bad], (long long)mine[3 * bad + 1],
                                 (long long)mine[3 * bad + 2], (long long)first[3 * bad], (long long)first[3 * bad + 1],
                                 (long long)first[3 * bad + 2])
                      : sr_error(SR_ERR_CONFIG,
                                 "train.eval_tasks: %.0f rank%s read other tasks than rank 0; every rank must read the "
                                 "same files",
                                 differ, differ == 1 ? "" : "s");
    free(mine);
    return st;
}

void sr_run_close_evals(sr_run *r) {
    for (int i = 0; i < r->nval; i++)
        sr_data_close(r->val[i]);
    for (int k = 0; k < r->ntasks; k++) {
        sr_task_enc_free(&r->tenc[k]);
        sr_task_free(&r->tasks[k]);
    }
    free(r->tasks);
    free(r->tenc);
    free(r->task_lp);
    if (r->task_losses)
        sr_dev_io_free(r->dev, r->task_losses);
}

/* Whether any rank saw a preemption signal (collective). */
static sr_status preempt_seen(sr_run *r, bool *seen) {
    double flag = sr_preempt_pending() ? 1.0 : 0.0;
    sr_status st = sr_ctl_sum(r->ctl, &flag, 1);
    *seen = st == SR_OK && flag > 0;
    return st;
}

/* Set `val`'s mean per-token loss over train.eval_batches global batches
 * (the same sequences at any world size: the first eval_batches *
 * batch_size of the set in file order; each rank evaluates its slice, the
 * sums meet in the control plane).  A preemption signal is checked
 * before each micro-batch (a sum over the ranks, so they agree). */
static sr_status set_loss(sr_run *r, sr_data *val, double *out, bool *interrupted) {
    const sr_config *cfg = r->cfg;
    int64_t total = cfg->eval_batches * cfg->batch_size, per_rank = total / r->w->size;
    double sum = 0.0;
    sr_status st = SR_OK;
    for (int64_t done = 0; done < per_rank && st == SR_OK; done += r->mb) {
        if ((st = preempt_seen(r, interrupted)) != SR_OK || *interrupted)
            break;
        int n = (int)(per_rank - done < r->mb ? per_rank - done : r->mb);
        sr_data_batch(val, (uint64_t)(r->w->rank * per_rank + done), n, false, 0, r->in, r->tg);
        st = sr_fsdp_eval(r->fsdp, r->in, r->tg, n);
    }
    if (st == SR_OK)
        st = sr_fsdp_take_loss_sum(r->fsdp, &sum);
    if (st == SR_OK && !*interrupted)
        st = sr_ctl_sum(r->ctl, &sum, 1);
    *out = sum / ((double)total * r->T);
    return st;
}

/* Task k's accuracies (acc, acc_norm) into c[2]: rank q scores items
 * [n q / W, n (q+1) / W), in forwards of up to mb sequences, as many as
 * the largest share needs on every rank; the counts meet in the control
 * plane. */
static sr_status task_scores(sr_run *r, int k, double c[2], bool *interrupted) {
    const sr_task *t = &r->tasks[k];
    const sr_task_enc *e = &r->tenc[k];
    int W = r->w->size, q = r->w->rank, mb = r->mb;
    int lo = (int)((int64_t)t->n * q / W), hi = (int)((int64_t)t->n * (q + 1) / W);
    int s0 = e->first[lo], s1 = e->first[hi], batches = 0;
    for (int p = 0; p < W; p++) {
        int a = e->first[(int64_t)t->n * p / W], b = e->first[(int64_t)t->n * (p + 1) / W];
        int nb = (b - a + mb - 1) / mb;
        batches = nb > batches ? nb : batches;
    }
    double *lp = r->task_lp;
    memset(lp, 0, (size_t)e->nseq * sizeof(double));
    sr_status st = SR_OK;
    bool padding = false;
    for (int b = 0; b < batches && st == SR_OK; b++) {
        if ((st = preempt_seen(r, interrupted)) != SR_OK || *interrupted)
            break;
        int s = s0 + b * mb, n = s1 - s < mb ? s1 - s : mb;
        if (n > 0) {
            sr_task_fill(e, s, n, r->in, r->tg);
        } else if (!padding) { /* this rank's share is done: forwards the gathers need, their losses dropped
                                * (the buffers written once, after the last host wait) */
            memset(r->in, 0, (size_t)r->T * sizeof(int));
            memset(r->tg, 0, (size_t)r->T * sizeof(int));
            padding = true;
        }
        st = sr_fsdp_eval(r->fsdp, r->in, r->tg, n > 0 ? n : 1);
        if (st == SR_OK && n > 0 && (st = sr_model_read_losses(&r->model, r->task_losses, n)) == SR_OK)
            sr_task_take(e, s, n, r->task_losses, lp);
    }
    double dropped;
    if (st == SR_OK) /* (the sum the forwards added to: not a loss of anything) */
        st = sr_fsdp_take_loss_sum(r->fsdp, &dropped);
    c[0] = c[1] = 0.0;
    sr_task_count(t, e, lp, lo, hi, c);
    if (st == SR_OK && !*interrupted)
        st = sr_ctl_sum(r->ctl, c, 2);
    c[0] /= t->n;
    c[1] /= t->n;
    return st;
}

sr_status sr_run_evaluate(sr_run *r, int64_t s, bool *interrupted) {
    *interrupted = false;
    sr_status st = SR_OK;
    for (int i = 0; i < r->nval && st == SR_OK && !*interrupted; i++)
        st = set_loss(r, r->val[i], &r->set_loss[i], interrupted);
    for (int k = 0; k < r->ntasks && st == SR_OK && !*interrupted; k++) {
        double c[2];
        st = task_scores(r, k, c, interrupted);
        r->task_acc[k] = c[0];
        r->task_acc_norm[k] = c[1];
    }
    if (st != SR_OK || *interrupted)
        return st;
    r->last_val = r->nval ? r->set_loss[0] : NAN;
    bool named = r->nval && r->set_name[0];
    r->scores = (sr_eval_scores){named ? r->nval : 0, r->set_name, r->set_loss,     r->ntasks,
                                 r->task_name,        r->task_acc, r->task_acc_norm};
    /* the log line: val_loss 2.1034 (web 2.1034, code 1.8871); hellaswag acc 0.2600 acc_norm 0.2800 */
    char line[4096];
    sr_line l = sr_line_on(line, sizeof line);
    if (r->nval)
        sr_line_add(&l, "val_loss %.4f", r->last_val);
    for (int i = 0; named && i < r->nval; i++)
        sr_line_add(&l, "%s%s %.4f%s", i ? ", " : " (", r->set_name[i], r->set_loss[i], i + 1 == r->nval ? ")" : "");
    for (int k = 0; k < r->ntasks; k++)
        sr_line_add(&l, "%s%s acc %.4f acc_norm %.4f", l.len ? "; " : "", r->task_name[k], r->task_acc[k],
                    r->task_acc_norm[k]);
    sr_log_info("step %lld: %s", (long long)(s + 1), line);
    if (r->metrics) {
        json_t *o = json_object();
        if (r->nval)
            json_object_set_new(o, "val_loss", json_real(r->last_val));
        char key[96];
        for (int i = 0; named && i < r->nval; i++) {
            snprintf(key, sizeof key, "val_loss/%s", r->set_name[i]);
            json_object_set_new(o, key, json_real(r->set_loss[i]));
        }
        for (int k = 0; k < r->ntasks; k++) {
            snprintf(key, sizeof key, "acc/%s", r->task_name[k]);
            json_object_set_new(o, key, json_real(r->task_acc[k]));
            snprintf(key, sizeof key, "acc_norm/%s", r->task_name[k]);
            json_object_set_new(o, key, json_real(r->task_acc_norm[k]));
        }
        sr_metrics_event(r->metrics, "eval", s + 1, o);
    }
    return SR_OK;
}
