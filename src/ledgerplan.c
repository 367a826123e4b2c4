/* ledgerplan.c — a job's GPU step counted on dry cuda tables; see
 * ledgerplan.h.
 *
 * Each rank is a thread with its own dry table, memory accounting and
 * engine, as tests/test_vranks runs virtual ranks: the loop transport
 * carries what the host exchanges (the gradient norm's sum); the data
 * plane counts its collectives instead of running them (plane.c).  The
 * step is the run's own (train.c's train_step without the data, the
 * agreement and the logs): begin, forward and backward per micro-batch,
 * the gradients finished, the optimizer; the first step is run uncounted
 * (what a run does once), the second is the ledger. */
#include "srconfig.h"

#include "ledgerplan.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "device.h"
#include "fsdp.h"
#include "job.h"
#include "mem.h"
#include "model.h"
#include "plane.h"
#include "preempt.h"
#include "vec.h"

typedef struct {
    const sr_config *cfg;
    sr_loop_hub *hub;
    int rank, ranks, mb, accum, T;
    sr_ledger l;
    sr_status st;
    char msg[1024];
} rank_arg;

/* One rank: its table, engine and two steps, the second counted. */
static sr_status rank_steps(rank_arg *a, sr_dev *dev) {
    const sr_config *cfg = a->cfg;
    sr_world w = {.rank = a->rank, .size = a->ranks, .local_rank = a->rank, .local_size = a->ranks, .num_nodes = 1};
    snprintf(w.host, sizeof w.host, "ledger");
    snprintf(w.job_id, sizeof w.job_id, "-");
    sr_mesh mesh;
    sr_job job;
    sr_model m;
    bool model_ok = false;
    sr_transport *tp = NULL;
    sr_plane *plane = NULL;
    sr_fsdp *f = NULL;
    size_t io = (size_t)a->accum * (size_t)a->mb * (size_t)a->T * sizeof(int);
    int *in = NULL, *tg = NULL;
    sr_status st = sr_job_init(&job, cfg);
    if (st == SR_OK)
        st = sr_job_check_world(cfg, a->ranks, a->rank, &mesh);
    bool flash = false;
    if (st == SR_OK)
        st = sr_job_attention(cfg, true, &flash);
    const sr_ops *ops = sr_device_ops(dev, (sr_dtype)cfg->param_dtype, flash);
    if (st == SR_OK) {
        st = sr_model_init(&m, sr_job_model_dims(cfg, a->T), ops, dev, a->mb, false);
        model_ok = true;
    }
    if (st == SR_OK)
        st = sr_transport_open_loop(&tp, a->hub, &w, &job.transport);
    sr_plane_opts po = {(int)cfg->comm_backend, cfg->comm_timeout_s, job.transport.interface};
    if (st == SR_OK)
        st = sr_plane_open(&plane, dev, tp, &po);
    if (st == SR_OK)
        st = sr_fsdp_init(&f, &m, &mesh, &job.fsdp, plane);
    if (st == SR_OK)
        st = sr_transport_connect(tp);
    if (st == SR_OK)
        st = sr_plane_start(plane, &w);
    if (st == SR_OK && (!(in = sr_dev_io_alloc(dev, io)) || !(tg = sr_dev_io_alloc(dev, io))))
        st = sr_error_oom("the token buffers");
    if (st == SR_OK) {
        memset(in, 0, io);
        memset(tg, 0, io);
    }
    const double dloss = 1.0 / ((double)cfg->batch_size * a->T);
    for (int s = 0; s < 2 && st == SR_OK; s++) {
        sr_ledger_clear(&a->l);
        sr_ledger_bind(s == 1 ? &a->l : NULL);
        sr_fsdp_begin_step(f);
        for (int k = 0; k < a->accum && st == SR_OK; k++) {
            size_t at = (size_t)k * a->mb * a->T;
            st = sr_fsdp_forward(f, in + at, tg + at, a->mb, (float)dloss);
            if (st == SR_OK)
                st = sr_fsdp_backward(f, (float)dloss, k == a->accum - 1);
        }
        double loss = 0, norm = 0;
        sr_fsdp_update early = {s + 1, cfg->lr, &job.adamw, cfg->grad_clip}; /* as the run's step (train.c) */
        if (st == SR_OK)
            st = sr_fsdp_finish_grads(f, &loss, &norm, &early);
        if (st == SR_OK)
            sr_fsdp_optimizer_step(f, s + 1, cfg->lr, &job.adamw, sr_vec_clip_scale(norm, cfg->grad_clip));
        sr_ledger_bind(NULL);
    }
    if (in)
        sr_dev_io_free(dev, in);
    if (tg)
        sr_dev_io_free(dev, tg);
    sr_fsdp_free(f);
    sr_plane_close(plane);
    sr_transport_close(tp);
    if (model_ok)
        sr_model_free(&m);
    sr_job_free(&job);
    return st;
}

static void *rank_main(void *p) {
    rank_arg *a = p;
    sr_mem_ctx *mc = sr_mem_ctx_new();
    sr_mem_bind(mc);
    sr_log_bind_rank(a->rank, a->ranks);
    sr_preempt_view pv = {0};
    sr_preempt_bind(&pv);
    sr_dev *dev = NULL;
    a->st = mc ? sr_device_open_dry(&dev) : sr_error_oom("a counted rank's memory accounting");
    if (a->st == SR_OK)
        a->st = rank_steps(a, dev);
    if (a->st != SR_OK)
        snprintf(a->msg, sizeof a->msg, "%s", sr_error_message());
    sr_device_close(dev);
    sr_preempt_bind(NULL);
    sr_mem_bind(NULL);
    sr_mem_ctx_free(mc);
    return NULL;
}

/* ---- the calibration ------------------------------------------------------- */

/* A positive number at `key` of object o (absent: *out unchanged). */
static sr_status number_at(const char *path, json_t *o, const char *key, double *out) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v))
        return SR_OK;
    if (!json_is_number(v) || !(json_number_value(v) > 0) || !isfinite(json_number_value(v)))
        return sr_error(SR_ERR_DATA,
                        "%s: \"%s\" must be a positive number (a calibration written by "
                        "tests/gpu/check.sh's profile stage)",
                        path, key);
    *out = json_number_value(v);
    return SR_OK;
}

/* Reads a calibration file: its rates (when *gemm_tflops / *hbm_tbps are
 * 0 on entry) and its efficiencies per family (0 where it gives none);
 * *any: whether it gave any; its "device" into device[device_n].
 * SR_ERR_NOINPUT, SR_ERR_DATA naming the file (line:col) and field. */
static sr_status calibration(const char *path, double *gemm_tflops, double *hbm_tbps, double efficiency[SR_LF_COUNT],
                             bool *any, char *device, size_t device_n) {
    *any = false;
    for (int f = 0; f < SR_LF_COUNT; f++)
        efficiency[f] = 0;
    if (device && device_n)
        device[0] = 0;
    FILE *fp = fopen(path, "r");
    if (!fp)
        return sr_error(SR_ERR_NOINPUT, "--calibration %s: %s (hint: tests/gpu/calibration/h200.json)", path,
                        strerror(errno));
    json_error_t je;
    json_t *root = json_loadf(fp, JSON_REJECT_DUPLICATES, &je);
    fclose(fp);
    if (!root)
        return sr_error(SR_ERR_DATA, "%s:%d:%d: not a calibration: %s (expected one JSON object)", path, je.line,
                        je.column, je.text);
    sr_status st = SR_OK;
    if (!json_is_object(root))
        st = sr_error(SR_ERR_DATA, "%s: not a calibration: expected one JSON object", path);
    double g = 0, h = 0;
    if (st == SR_OK)
        st = number_at(path, root, "gemm_tflops", &g);
    if (st == SR_OK)
        st = number_at(path, root, "hbm_tbps", &h);
    json_t *eff = st == SR_OK ? json_object_get(root, "efficiency") : NULL;
    if (eff && !json_is_null(eff) && !json_is_object(eff))
        st = sr_error(SR_ERR_DATA, "%s: \"efficiency\" must be an object of family: bound / measured", path);
    if (st == SR_OK && json_is_object(eff)) {
        const char *k;
        json_t *v;
        json_object_foreach(eff, k, v) {
            int f = 0;
            while (f < SR_LF_COUNT && strcmp(sr_ledger_family_names[f], k) != 0)
                f++;
            if (f == SR_LF_COUNT) {
                st = sr_error(SR_ERR_DATA,
                              "%s: \"efficiency\" names \"%s\", no family of the ledger (shardrun(1) "
                              "plan --ledger lists them)",
                              path, k);
                break;
            }
            if (json_is_null(v))
                continue;
            if (!json_is_number(v) || !(json_number_value(v) > 0) || json_number_value(v) > 1.5) {
                st = sr_error(SR_ERR_DATA, "%s: efficiency of %s must be a number in (0, 1.5] (bound / measured)", path,
                              k);
                break;
            }
            efficiency[f] = json_number_value(v);
            *any = true;
        }
    }
    json_t *dv = json_object_get(root, "device");
    if (st == SR_OK && device && device_n && json_is_string(dv))
        snprintf(device, device_n, "%s", json_string_value(dv));
    if (st == SR_OK && *gemm_tflops <= 0)
        *gemm_tflops = g;
    if (st == SR_OK && *hbm_tbps <= 0)
        *hbm_tbps = h;
    json_decref(root);
    return st;
}

/* ---- the count ------------------------------------------------------------- */

/* The rates: given, else the calibration's, else the defaults (ledger.h);
 * the calibration's efficiencies into p; how they were chosen into
 * p->rates_how. */
static sr_status choose_rates(const sr_ledgerplan_opts *o, sr_ledgerplan *p, bool *calibrated) {
    p->gemm_tflops = o->gemm_tflops;
    p->hbm_tbps = o->hbm_tbps;
    char dev[200] = "";
    *calibrated = false;
    if (o->calibration) {
        sr_status st =
            calibration(o->calibration, &p->gemm_tflops, &p->hbm_tbps, p->efficiency, calibrated, dev, sizeof dev);
        if (st != SR_OK)
            return st;
        snprintf(p->calibration, sizeof p->calibration, "%s%s%s%s", o->calibration, dev[0] ? " (" : "", dev,
                 dev[0] ? ")" : "");
    }
    snprintf(p->rates_how, sizeof p->rates_how, "GEMM %g TFLOP/s (%s), HBM %g TB/s (%s)",
             p->gemm_tflops > 0 ? p->gemm_tflops : SR_LEDGER_GEMM_TFLOPS,
             o->gemm_tflops > 0   ? "--gemm-tflops"
             : p->gemm_tflops > 0 ? "the calibration"
                                  : "one H200's measured",
             p->hbm_tbps > 0 ? p->hbm_tbps : SR_LEDGER_HBM_TBPS,
             o->hbm_tbps > 0   ? "--hbm-tbps"
             : p->hbm_tbps > 0 ? "the calibration"
                               : "one H200's measured");
    if (p->gemm_tflops <= 0)
        p->gemm_tflops = SR_LEDGER_GEMM_TFLOPS;
    if (p->hbm_tbps <= 0)
        p->hbm_tbps = SR_LEDGER_HBM_TBPS;
    return SR_OK;
}

/* Counts one step of every rank, a thread each joined through a loopback
 * hub; rank 0's ledger into p->l (every rank runs the same operations). */
static sr_status count_ranks(const sr_config *cfg, int ranks, sr_ledgerplan *p) {
    sr_status st = SR_OK;
    sr_loop_hub *hub = NULL;
    rank_arg *args = sr_calloc((size_t)ranks, sizeof *args);
    pthread_t *th = sr_calloc((size_t)ranks, sizeof *th);
    bool *started = sr_calloc((size_t)ranks, sizeof *started);
    if (!args || !th || !started)
        st = sr_error_oom("the counted ranks");
    if (st == SR_OK)
        st = sr_loop_hub_open(&hub, ranks);
    for (int r = 0; r < ranks && st == SR_OK; r++) {
        args[r] =
            (rank_arg){.cfg = cfg, .hub = hub, .rank = r, .ranks = ranks, .mb = p->mb, .accum = p->accum, .T = p->T};
        started[r] = pthread_create(&th[r], NULL, rank_main, &args[r]) == 0;
        if (!started[r])
            st = sr_error(SR_ERR_INTERNAL, "plan --ledger: cannot start the thread of counted rank %d", r);
    }
    /* the first rank that failed on its own (not because a peer did) */
    int bad = -1;
    for (int r = 0; r < ranks; r++) {
        if (started && started[r])
            pthread_join(th[r], NULL);
        if (args && args[r].st != SR_OK && (bad < 0 || (args[bad].st == SR_ERR_PEER && args[r].st != SR_ERR_PEER)))
            bad = r;
    }
    if (st == SR_OK && bad >= 0)
        st = sr_error(args[bad].st, "plan --ledger: counted rank %d: %s", bad, args[bad].msg);
    if (st == SR_OK)
        p->l = args[0].l;
    sr_loop_hub_close(hub);
    free(args);
    free(th);
    free(started);
    return st;
}

sr_status sr_ledgerplan_run(const sr_config *cfg, int ranks, const sr_ledgerplan_opts *o, sr_ledgerplan *p) {
    memset(p, 0, sizeof *p);
    if (cfg->device == SR_DEVICE_CPU)
        return sr_error(SR_ERR_CONFIG, "plan --ledger: the job trains on the CPU (device: cpu): the ledger counts a "
                                       "GPU's operations (hint: --set device=cuda, or plan --gpus-per-node N)");
    if (cfg->offload_optimizer)
        return sr_error(SR_ERR_CONFIG,
                        "plan --ledger: sharding.offload.optimizer is true: the optimizer's step runs on "
                        "the host, outside the GPU's ledger (hint: --set "
                        "sharding.offload.optimizer=false counts the device step)");
    sr_status st = sr_job_attention(cfg, true, &p->flash);
    if (st != SR_OK)
        return st;
    if (!sr_device_plan_ops(true, (sr_dtype)cfg->param_dtype, p->flash))
        return sr_error_wrap(SR_ERR_CONFIG, "plan --ledger: the GPU's operations are counted by the CUDA back end");
    if (ranks < 1 || ranks > SR_LEDGER_MAX_RANKS)
        return sr_error(SR_ERR_CONFIG, "plan --ledger: %d ranks: the ledger counts 1 to %d (one thread each)", ranks,
                        SR_LEDGER_MAX_RANKS);
    st = sr_job_check_world(cfg, ranks, 0, NULL);
    if (st != SR_OK)
        return st;
    p->ranks = ranks;
    p->mb = (int)sr_config_micro_batch(cfg, ranks);
    p->accum = (int)sr_config_accum_steps(cfg, ranks);
    p->T = (int)cfg->seq_len;
    bool calibrated;
    if ((st = choose_rates(o, p, &calibrated)) != SR_OK || (st = count_ranks(cfg, ranks, p)) != SR_OK)
        return st;
    p->bound_s = sr_ledger_roofline(&p->l, p->gemm_tflops, p->hbm_tbps);
    p->calibrated = calibrated;
    p->predicted_s = 0;
    for (int f = 0; f < SR_LF_COUNT; f++)
        p->predicted_s += p->efficiency[f] > 0 ? p->l.fam[f].bound_s / p->efficiency[f] : p->l.fam[f].bound_s;
    sr_model_dims d = sr_job_model_dims(cfg, p->T);
    const sr_ops *ops = sr_device_plan_ops(true, (sr_dtype)cfg->param_dtype, p->flash);
    p->saved_block_bytes = ops ? sr_model_largest_saved(&d, ops, p->mb, &p->saved_name) : 0;
    p->saved_blocks = cfg->recompute == SR_RECOMPUTE_BLOCKS ? 1 : d.L;
    p->peak_saved_bytes = p->saved_block_bytes * (size_t)p->saved_blocks;
    return SR_OK;
}

/* ---- the report ------------------------------------------------------------ */

void sr_ledgerplan_print(const sr_ledgerplan *p, FILE *out) {
    sr_ledger_row t = sr_ledger_total(&p->l);
    fprintf(out,
            "ledger: one optimizer step of rank 0 (%d rank%s; micro_batch %d x %d accumulation step%s of %d "
            "tokens), counted on the cuda table without a GPU:\n",
            p->ranks, p->ranks == 1 ? "" : "s", p->mb, p->accum, p->accum == 1 ? "" : "s", p->T);
    fprintf(out, "  %-16s %9s %9s %11s %10s %10s %7s%s\n", "family", "launches", "cuBLASLt", "GFLOP", "GB", "bound ms",
            "share", p->calibrated ? "  predicted ms" : "");
    for (int f = 0; f < SR_LF_COUNT; f++) {
        const sr_ledger_row *r = &p->l.fam[f];
        if (!r->calls)
            continue;
        fprintf(out, "  %-16s %9lld %9lld %11.2f %10.3f %10.3f %6.1f%%", sr_ledger_family_names[f], r->launches,
                r->gemm_calls, r->flops / 1e9, r->bytes / 1e9, r->bound_s * 1e3,
                p->bound_s > 0 ? 100 * r->bound_s / p->bound_s : 0.0);
        if (p->calibrated)
            fprintf(out, "  %12.3f%s", (p->efficiency[f] > 0 ? r->bound_s / p->efficiency[f] : r->bound_s) * 1e3,
                    p->efficiency[f] > 0 ? "" : " (no efficiency: the bound)");
        fputs("\n", out);
    }
    fprintf(out, "  %-16s %9lld %9lld %11.2f %10.3f %10.3f %6.1f%%", "total", t.launches, t.gemm_calls, t.flops / 1e9,
            t.bytes / 1e9, p->bound_s * 1e3, 100.0);
    if (p->calibrated)
        fprintf(out, "  %12.3f", p->predicted_s * 1e3);
    fputs("\n", out);
    fprintf(out,
            "  %lld GPU operations: %lld launches (kernels, copies, memsets, collectives) and %lld cuBLASLt "
            "calls\n",
            t.launches + t.gemm_calls, t.launches, t.gemm_calls);
    fprintf(out,
            "  roofline bound %.3f ms per step at %s (a GEMM: its FLOPs or its bytes, whichever takes longer; "
            "every other operation: its bytes; collectives are not bounded here)\n",
            p->bound_s * 1e3, p->rates_how);
    if (p->calibrated)
        fprintf(out, "  predicted %.3f ms per step: each family's bound / its efficiency in %s\n", p->predicted_s * 1e3,
                p->calibration);
    else if (p->calibration[0])
        fprintf(out, "  no prediction: %s gives no efficiency per family (a GPU check's profile stage measures them)\n",
                p->calibration);
    if (p->saved_block_bytes)
        fprintf(out, "  largest saved activation: %s, %.1f MB per block; %.1f MB held at the peak (%d block%s)\n",
                p->saved_name, (double)p->saved_block_bytes / 1e6, (double)p->peak_saved_bytes / 1e6, p->saved_blocks,
                p->saved_blocks == 1 ? "" : "s");
}

json_t *sr_ledgerplan_row_json(const char *name, const sr_ledger_row *r, bool with_ms) {
    json_t *o = json_pack("{ss sI sI sf sf sf}", "name", name, "launches", (json_int_t)r->launches, "gemm_calls",
                          (json_int_t)r->gemm_calls, "gflop", r->flops / 1e9, "gb", r->bytes / 1e9, "bound_ms",
                          r->bound_s * 1e3);
    if (o && with_ms)
        json_object_set_new(o, "ms", json_real(r->ms));
    return o;
}

sr_status sr_ledgerplan_json(const sr_ledgerplan *p, FILE *out) {
    json_t *fams = json_array();
    for (int f = 0; fams && f < SR_LF_COUNT; f++)
        json_array_append_new(fams, sr_ledgerplan_row_json(sr_ledger_family_names[f], &p->l.fam[f], false));
    sr_ledger_row t = sr_ledger_total(&p->l);
    t.bound_s = p->bound_s;
    json_t *o = json_pack("{so so sI sI ss sI si si si si sf sf}", "families", fams ? fams : json_null(), "total",
                          sr_ledgerplan_row_json("total", &t, false), "peak_saved_bytes",
                          (json_int_t)p->peak_saved_bytes, "saved_block_bytes", (json_int_t)p->saved_block_bytes,
                          "saved_activation", p->saved_name ? p->saved_name : "", "saved_blocks",
                          (json_int_t)p->saved_blocks, "ranks", p->ranks, "micro_batch", p->mb, "accum_steps", p->accum,
                          "seq_len", p->T, "gemm_tflops", p->gemm_tflops, "hbm_tbps", p->hbm_tbps);
    /* every operation the step made, a row each (a launcher, a GEMM kind, the copies, the memsets) */
    json_t *ops = o ? json_array() : NULL;
    for (int i = 0; ops && i < SR_LEDGER_NROWS; i++) {
        json_t *r = p->l.row[i].calls ? sr_ledgerplan_row_json(sr_ledger_row_name(i), &p->l.row[i], false) : NULL;
        if (r) {
            json_object_set_new(r, "family", json_string(sr_ledger_family_names[sr_ledger_row_family(i)]));
            json_object_set_new(r, "calls", json_integer((json_int_t)p->l.row[i].calls));
            json_array_append_new(ops, r);
        }
    }
    if (o) {
        json_object_set_new(o, "ops", ops ? ops : json_null());
        json_object_set_new(o, "attention", json_string(p->flash ? "flash" : "materialized"));
    }
    if (o && p->calibrated)
        json_object_set_new(o, "predicted_ms", json_real(p->predicted_s * 1e3));
    char *text = o ? json_dumps(o, JSON_PRESERVE_ORDER) : NULL;
    json_decref(o);
    if (!text)
        return sr_error_oom("the ledger's JSON");
    fprintf(out, "%s\n", text);
    free(text);
    return SR_OK;
}
