/* main_cmds.c — the commands' handlers (train, config, data, ckpt,
 * sample, report, plan, debug), each beside the parser of its own options
 * (sample's, data prepare's, plan's).  Part of the main module
 * (main_impl.h). */
#include "srconfig.h"

#include "main_impl.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ckpt_tools.h"
#include "clock.h"
#include "config.h"
#include "data.h"
#include "device.h"
#include "export_hf.h"
#include "flightcheck.h"
#include "job.h"
#include "line.h"
#include "mem.h"
#include "metrics.h"
#include "ops.h"
#include "plan.h"
#include "prepare.h"
#include "report.h"
#include "sample.h"
#include "signals.h"
#include "startup.h"
#include "status.h"
#include "suggest.h"
#include "testhook.h"
#include "tracecheck.h"
#include "train.h"
#include "world.h"

int cli_sample_option(cli *c, int x, const char *arg) {
    char *end;
    errno = 0;
    switch (x) {
    case X_PROMPT:
        c->sample.prompt = arg;
        break;
    case X_PROMPT_TOKENS:
        c->sample.prompt_tokens = arg;
        break;
    case X_TOKENIZER:
        c->sample.tokenizer = arg;
        break;
    case X_TOKENS: {
        long v = strtol(arg, &end, 10);
        if (!*arg || *end || errno || v < 1 || v > 100000000)
            return cli_usage_error("--tokens %s: expected a number of tokens from 1 to 100000000", arg);
        c->sample.tokens = v;
        break;
    }
    case X_THREADS: {
        long v = strtol(arg, &end, 10);
        if (!*arg || *end || errno || v < 1 || v > 4096)
            return cli_usage_error("--threads %s: expected a number of threads from 1 to 4096", arg);
        c->sample.threads = (int)v;
        break;
    }
    case X_TEMPERATURE: {
        double v = strtod(arg, &end);
        if (!*arg || *end || errno || !(v >= 0.0 && v <= 1e6))
            return cli_usage_error("--temperature %s: expected a number from 0 (greedy) to 1e6", arg);
        c->sample.temperature = v;
        break;
    }
    case X_TOP_K: {
        long v = strtol(arg, &end, 10);
        if (!*arg || *end || errno || v < 0 || v > 16777216)
            return cli_usage_error("--top-k %s: expected 0 (off) or a number of tokens up to 16777216", arg);
        c->sample.top_k = (int)v;
        break;
    }
    case X_SEED: {
        unsigned long long v = strtoull(arg, &end, 10);
        if (!*arg || *end || errno || arg[0] < '0' || arg[0] > '9') /* strtoull takes " -1" as 2^64 - 1 */
            return cli_usage_error("--seed %s: expected a non-negative integer", arg);
        c->sample.seed = v;
        break;
    }
    }
    return 0;
}

_Static_assert(SR_MIX_MAX_SOURCES == 32 && SR_MIX_NAME_MAX == 48, "data prepare --name's messages say 32 and 48");

/* One of `shardrun data prepare`'s own options into c->prepare. */
int cli_prepare_option(cli *c, int x, const char *arg) {
    switch (x) {
    case X_FIELD:
        if (!*arg)
            return cli_usage_error("%s", "--field: expected the name of the JSON Lines text field (e.g. text)");
        c->prepare.field = arg;
        break;
    case X_DOC_TOKEN:
        if (!*arg)
            return cli_usage_error("%s", "--doc-token: expected a special token's text (e.g. <|endoftext|>) or none");
        c->prepare.doc_token = arg;
        break;
    case X_PREFIX:
        c->prepare.prefix = arg;
        break;
    case X_NAME: /* (checked by sr_prepare) a group: the inputs after it, up to the next --name */
        if (c->nnames == SR_MIX_MAX_SOURCES)
            return cli_usage_error("--name %s: one more source than data.mixture takes (32)", arg);
        c->names[c->nnames] = arg;
        c->name_first[c->nnames++] = c->nargs;
        c->prepare.name = arg;
        break;
    case X_VAL_FRACTION: {
        char *end;
        errno = 0;
        double v = strtod(arg, &end);
        if (!*arg || *end || errno || !(v > 0.0 && v < 1.0))
            return cli_usage_error("--val-fraction %s: expected a fraction of the documents between 0 and 1 (e.g. "
                                   "0.01)",
                                   arg);
        c->prepare.val_fraction = v;
        break;
    }
    case X_VAL_TOKENS:
    case X_SHARD_TOKENS: {
        char *end;
        errno = 0;
        unsigned long long v = strtoull(arg, &end, 10);
        if (!*arg || *end || errno || arg[0] < '0' || arg[0] > '9' || v < 1 || v > INT32_MAX)
            return cli_usage_error(x == X_VAL_TOKENS
                                       ? "--val-tokens %s: expected a number of tokens from 1 to 2147483647"
                                       : "--shard-tokens %s: expected a number of tokens from 1 to "
                                         "2147483647 (one shard's header holds an int32 count)",
                                   arg);
        *(x == X_VAL_TOKENS ? &c->prepare.val_tokens : &c->prepare.shard_tokens) = v;
        break;
    }
    }
    return 0;
}

/* One of `shardrun plan`'s options into c->plan. */
int cli_plan_option(cli *c, int x, const char *arg) {
    char *end;
    errno = 0;
    double v = strtod(arg, &end);
    bool ok = *arg && !*end && !errno && isfinite(v) && v > 0;
    switch (x) {
    case X_GPUS_PER_NODE:
        if (!ok || v != floor(v) || v > 1024)
            return cli_usage_error("--gpus-per-node %s: expected a whole number of GPUs per node from 1 to 1024", arg);
        c->plan.gpus_per_node = (int)v;
        break;
    case X_DEVICE_MEM:
        if (!ok || v > 1e6)
            return cli_usage_error("--device-mem %s: expected the memory of one GPU in GiB (a number above 0)", arg);
        c->plan.device_mem_gib = v;
        break;
    case X_HOST_MEM:
        if (!ok || v > 1e9)
            return cli_usage_error("--host-mem %s: expected the memory of one node in GiB (a number above 0)", arg);
        c->plan.host_mem_gib = v;
        break;
    case X_GEMM_TFLOPS:
    case X_HBM_TBPS: {
        bool gemm = x == X_GEMM_TFLOPS;
        if (!*arg || *end || errno == EINVAL || isnan(v))
            return cli_usage_error(gemm ? "--gemm-tflops %s: expected a number: a GPU's GEMM rate in TFLOP/s"
                                        : "--hbm-tbps %s: expected a number: a GPU's memory rate in TB/s",
                                   arg);
        if (!(v >= (gemm ? SR_PLAN_TFLOPS_MIN : 0.01) && v <= (gemm ? SR_PLAN_TFLOPS_MAX : 1000)))
            return cli_fail(sr_error(SR_ERR_CONFIG, "%s %s: outside the plausible range %g to %g of %s",
                                     gemm ? "--gemm-tflops" : "--hbm-tbps", arg, gemm ? SR_PLAN_TFLOPS_MIN : 0.01,
                                     gemm ? SR_PLAN_TFLOPS_MAX : 1000.0,
                                     gemm ? "a GPU's GEMM rate in TFLOP/s" : "a GPU's memory rate in TB/s"));
        *(gemm ? &c->plan.gemm_tflops : &c->plan.hbm_tbps) = v;
        break;
    }
    case X_DISK_MBPS:
    case X_TFLOPS: {
        bool disk = x == X_DISK_MBPS;
        const char *what =
            disk ? "the checkpoint file system's write speed per rank in MB/s" : "the sustained TFLOP/s of one rank";
        double lo = disk ? SR_PLAN_DISK_MBPS_MIN : SR_PLAN_TFLOPS_MIN,
               hi = disk ? SR_PLAN_DISK_MBPS_MAX : SR_PLAN_TFLOPS_MAX;
        if (!*arg || *end || errno == EINVAL || isnan(v))
            return cli_usage_error(disk ? "--disk-mbps %s: expected a number: the checkpoint file system's write speed "
                                          "per rank in MB/s"
                                        : "--tflops %s: expected a number: the sustained TFLOP/s of one rank",
                                   arg);
        if (!(v >= lo && v <= hi))
            return cli_fail(sr_error(SR_ERR_CONFIG, "%s %s: outside the plausible range %g to %g of %s",
                                     disk ? "--disk-mbps" : "--tflops", arg, lo, hi, what));
        *(disk ? &c->plan.disk_mbps : &c->plan.tflops) = v;
        break;
    }
    }
    return 0;
}

/* Loads the job (file or embedded), applies --set, finalizes, refuses a
 * device the build lacks (sr_device_check_key) and flash attention where
 * the job shows it cannot run (sr_job_check_attention), with `data` the data rules
 * (sr_job_check_data: train and config check; config show prints any job,
 * a plan reads no data), and with ranks > 0 checks the world-size rules
 * for that many ranks.  Returns an exit code (0 on success). */
static int load_job(sr_config *cfg, const char *path, const cli *c, int ranks, bool data) {
    sr_status st = sr_config_init(cfg);
    if (st == SR_OK)
        st = sr_config_load_file(cfg, path);
    for (int i = 0; st == SR_OK && i < c->nsets; i++)
        st = sr_config_set(cfg, c->sets[i]);
    if (st == SR_OK)
        st = sr_job_model_init_source(cfg);
    if (st == SR_OK)
        st = sr_config_finalize(cfg);
    if (st == SR_OK)
        st = sr_job_resolve_data(cfg, data);
    if (st == SR_OK)
        st = sr_device_check_key(cfg);
    if (st == SR_OK)
        st = sr_job_check_attention(cfg);
    if (st == SR_OK && data)
        st = sr_job_check_data(cfg);
    if (st == SR_OK && ranks > 0)
        st = sr_job_check_world(cfg, ranks, 0, NULL);
    return st == SR_OK ? 0 : cli_fail(st);
}

/* SHARDRUN_TEST_ALLOC_FAIL sweeps need to know how many allocations a run
 * makes, and the first allocation of each call site: with the hook set,
 * both go to stderr at the end. */
int cli_report_allocations(int rc) {
    if (sr_testhook()->alloc_fail <= 0)
        return rc;
    sr_log_info_all("test: %lld allocations counted", sr_mem_allocations());
    static long long first[SR_MEM_MAX_SITES];
    int n = sr_mem_alloc_sites(first, SR_MEM_MAX_SITES), shown = 0;
    char line[7000]; /* inside the log's own line */
    sr_line l = SR_LINE(line);
    for (; shown < n && l.len + 24 < sizeof line; shown++)
        sr_line_add(&l, " %lld", first[shown]);
    if (shown < n)
        sr_log_warn("test: only the first %d of %d allocation sites fit the line below", shown, n);
    sr_log_info_all("test: %d allocation sites, first allocations:%s", shown, line);
    return rc;
}

int cmd_train(const char *sub, const cli *c) {
    (void)sub;
    if (c->nargs > 1)
        return cli_usage_error("train: expected at most one job file, got extra argument '%s'", c->args[1]);
    sr_status st = sr_metrics_check_env();
    if (st != SR_OK)
        return cli_fail(st);
    sr_world world;
    double t0 = sr_clock_mono_s();
    st = sr_world_init(&world);
    sr_startup_add(SR_PHASE_BOOTSTRAP, t0);
    if (st != SR_OK) {
        /* srun without --mpi=pmix: every task fails alike; task 0 says why */
        const char *procid = getenv("SLURM_PROCID");
        cli_quiet_rank = st == SR_ERR_CONFIG && procid && strcmp(procid, "0") != 0;
        return cli_fail(st);
    }
    sr_log_set_rank(world.rank, world.size);
    sr_log_set_verbose(c->verbose);
    cli_quiet_rank = world.rank != 0;
    sr_testhook_warn_active();
    sr_config cfg;
    int rc = load_job(&cfg, c->nargs ? c->args[0] : NULL, c, 0, true);
    if (rc == 0) {
        sr_train_result res = {0};
        st = sr_train_run(&cfg, &world, &res);
        rc = st == SR_OK ? 0 : st == SR_PREEMPTED ? res.exit_code : cli_fail(st);
    }
    sr_config_free(&cfg);
    sr_world_close(&world);
    return rc;
}

int cmd_config(const char *sub, const cli *c) {
    if (strcmp(sub, "keys") == 0) {
        if (c->nargs)
            return cli_usage_error("config keys: unexpected argument '%s'", c->args[0]);
        sr_config_keys(stdout, c->mdoc);
        return 0;
    }
    bool check = strcmp(sub, "check") == 0;
    if (check && c->nargs != 1)
        return cli_usage_error("%s", "config check: expected exactly one JOB.yaml");
    if (c->nargs > 1)
        return cli_usage_error("config show: expected at most one job file, got extra argument '%s'", c->args[1]);
    sr_config cfg;
    int rc = load_job(&cfg, c->nargs ? c->args[0] : NULL, c, c->ranks, check);
    if (rc == 0) {
        char ranks[160];
        if (c->ranks)
            snprintf(ranks, sizeof ranks, "world-size rules checked for %d rank%s", c->ranks, c->ranks == 1 ? "" : "s");
        else
            snprintf(ranks, sizeof ranks,
                     "world-size rules (mesh, reshard N, batch split) not checked: pass --ranks N");
        if (check) {
            printf("%s: OK (%s)\n", c->args[0], ranks);
        } else {
            sr_config_show(&cfg, stdout, ranks);
        }
    }
    sr_config_free(&cfg);
    return rc;
}

/* " --set KEY=VALUE" onto l, single-quoted for a shell when VALUE holds
 * anything but [A-Za-z0-9_./:,+@%=-]. */
static void add_set(sr_line *l, const char *key, const char *value) {
    bool plain = true;
    for (const char *p = value; *p && plain; p++)
        plain = strchr("_./:,+@%=-", *p) || (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
                (*p >= '0' && *p <= '9');
    if (plain) {
        sr_line_add(l, " --set %s=%s", key, value);
        return;
    }
    sr_line_add(l, " --set '%s=", key);
    for (const char *p = value; *p; p++)
        if (*p == '\'')
            sr_line_add(l, "'\\''");
        else
            sr_line_add(l, "%c", *p);
    sr_line_add(l, "'");
}

/* The summary of a data prepare: what it wrote, the split, and the --set
 * options that train on it. */
static void data_summary(const sr_prepare_opts *o, const sr_prepare_result *r) {
    char line[16384], path[4300], val[64];
    sr_line l = SR_LINE(line);
    if (o->val_tokens) /* one validation shard, listed first */
        sr_fmt(val, sizeof val, "the first for validation");
    else
        sr_fmt(val, sizeof val, "%d for validation", r->val_shards);
    if (!r->directory)
        sr_line_add(&l, "wrote %s: %llu tokens (%s, uint16 llm.c shard)", r->out, (unsigned long long)r->tokens,
                    "byte-level, vocabulary 256");
    else
        sr_line_add(&l,
                    "wrote %s/: %d shard%s (%s) and index.json: %llu tokens from %llu document%s (%.1f MB of text; "
                    "%s%s)",
                    r->out, r->shards, r->shards == 1 ? "" : "s", val, (unsigned long long)r->tokens,
                    (unsigned long long)r->documents, r->documents == 1 ? "" : "s", (double)r->bytes / 1e6,
                    r->tokenizer[0] ? "tokenizer " : "byte-level, vocabulary 256", r->tokenizer[0] ? o->tokenizer : "");
    if (o->val_fraction > 0)
        sr_line_add(&l, "; validation: %llu of the documents (%.2f%%; --val-fraction %g, --seed %llu), %llu tokens",
                    (unsigned long long)r->val_documents,
                    r->documents ? 100.0 * (double)r->val_documents / (double)r->documents : 0.0, o->val_fraction,
                    (unsigned long long)o->seed, (unsigned long long)r->val_tokens);
    else if (o->val_tokens)
        sr_line_add(&l, "; validation: the first %llu tokens (--val-tokens; the document where they end is cut)",
                    (unsigned long long)r->val_tokens);
    if (r->empty)
        sr_line_add(&l, "; %llu empty document%s dropped", (unsigned long long)r->empty, r->empty == 1 ? "" : "s");
    if (r->directory && r->shards == r->val_shards) {
        fprintf(stderr, "shardrun: %s; no training shard: nothing to train on\n", line);
        return;
    }
    sr_line_add(&l, "; train with");
    if (r->sources[0]) { /* --name: the mixture of every source the directory lists */
        char mix[8192], names[sizeof r->sources];
        sr_line m = SR_LINE(mix);
        sr_fmt(names, sizeof names, "%s", r->sources);
        sr_line_add(&m, "[");
        for (char *save = NULL, *n = strtok_r(names, " ", &save); n; n = strtok_r(NULL, " ", &save))
            sr_line_add(&m, "%s{name: %s, train: %s, weight: 1}", m.len > 1 ? ", " : "", n, r->out);
        sr_line_add(&m, "]");
        add_set(&l, "data.mixture", mix);
        if (r->tokenizer[0])
            add_set(&l, "data.tokenizer", r->tokenizer);
        sr_line_add(&l,
                    " (each source's shards from %s/index.json; set the weights; its validation shards serve an "
                    "unset data.val)",
                    r->out);
    } else if (!r->directory) {
        add_set(&l, "data.train", r->out);
    } else {
        const char *pre = o->prefix ? o->prefix : "data";
        sr_fmt(path, sizeof path, "%s/%s_train_*.bin", r->out, pre);
        add_set(&l, "data.train", path);
        if (r->val_shards) {
            sr_fmt(path, sizeof path, "%s/%s_val_*.bin", r->out, pre);
            add_set(&l, "data.val", path);
        }
        if (r->tokenizer[0])
            add_set(&l, "data.tokenizer", r->tokenizer);
        sr_line_add(&l, " (or");
        add_set(&l, "data.train", r->out);
        sr_line_add(&l, ": index.json names the rest)");
    }
    fprintf(stderr, "shardrun: %s\n", line);
}

int cmd_data(const char *sub, const cli *c) {
    (void)sub;
    if (c->nargs < 1)
        return cli_usage_error("%s", "data prepare: expected at least one input FILE");
    sr_prepare_opts o = c->prepare;
    o.out = c->output;
    o.tokenizer = c->sample.tokenizer;
    o.threads = c->sample.threads;
    o.seed = c->sample.seed;
    sr_prepare_result r;
    if (c->nnames <= 1) { /* one data set (one --name: every input is that source) */
        sr_status st = sr_prepare(&o, c->args, c->nargs, &r);
        if (st != SR_OK)
            return cli_fail(st);
        data_summary(&o, &r);
        return 0;
    }
    /* --name groups: each a source of its own, one after the other, into
     * the one directory; everything checked before the first is written */
    if (c->name_first[0] > 0)
        return cli_usage_error("data prepare: %s comes before the first --name (hint: each --name NAME is followed by "
                               "its inputs)",
                               c->args[0]);
    if (o.prefix)
        return cli_usage_error("data prepare: --prefix %s with several --name groups would give every source the same "
                               "shard names (hint: leave --prefix out: each source's shards take its name)",
                               o.prefix);
    for (int g = 0; g < c->nnames; g++) {
        int end = g + 1 < c->nnames ? c->name_first[g + 1] : c->nargs;
        if (end == c->name_first[g])
            return cli_usage_error("data prepare: --name %s has no input (hint: --name NAME FILE...)", c->names[g]);
        if (!sr_config_mixture_name_ok(c->names[g]))
            return cli_usage_error("--name %s: expected 1 to 48 letters, digits, '_', '.' or '-'", c->names[g]);
        for (int h = 0; h < g; h++)
            if (strcmp(c->names[h], c->names[g]) == 0)
                return cli_usage_error("data prepare: --name %s is given twice", c->names[g]);
        o.name = c->names[g];
        sr_status st = sr_prepare_check(&o, c->args + c->name_first[g], end - c->name_first[g]);
        if (st != SR_OK)
            return cli_fail(sr_error_wrap(st, "--name %s (nothing written)", o.name));
    }
    for (int g = 0; g < c->nnames; g++) {
        int end = g + 1 < c->nnames ? c->name_first[g + 1] : c->nargs;
        o.name = c->names[g];
        sr_status st = sr_prepare(&o, c->args + c->name_first[g], end - c->name_first[g], &r);
        if (st != SR_OK)
            return cli_fail(g ? sr_error_wrap(st, "--name %s (the sources before it are written)", o.name) : st);
        data_summary(&o, &r);
    }
    return 0;
}

int cmd_ckpt(const char *sub, const cli *c) {
    bool list = strcmp(sub, "list") == 0, verify = strcmp(sub, "verify") == 0,
         inspect = strcmp(sub, "inspect") == 0 || strcmp(sub, "show") == 0;
    bool export = !list && !verify && !inspect;
    if (c->nargs != 1)
        return cli_usage_error("ckpt %s: expected exactly one checkpoint path", sub);
    if (export && !c->output)
        return cli_usage_error("%s", "ckpt export: expected -o DIR/ (Hugging Face: model.safetensors and config.json), "
                                     "-o FILE.safetensors or -o FILE.bin (llm.c)");
    sr_testhook_warn_active();
    sr_status st = list      ? sr_ckpt_list(c->args[0], stdout)
                   : verify  ? sr_ckpt_verify(c->args[0], stdout)
                   : inspect ? sr_ckpt_inspect(c->args[0], stdout)
                             : sr_export(c->args[0], c->output, (sr_export_format)c->format, stderr);
    if (fflush(stdout) != 0 && st == SR_OK)
        st = sr_error(SR_ERR_IO, "write to standard output failed");
    return st == SR_OK ? 0 : cli_fail(st);
}

int cmd_sample(const char *sub, const cli *c) {
    (void)sub;
    if (c->nargs != 1)
        return cli_usage_error("%s", "sample: expected exactly one model: a step_* directory, a checkpoint.dir or a "
                                     "Hugging Face GPT-2 or Llama directory");
    if (c->sample.prompt && c->sample.prompt_tokens)
        return cli_usage_error("%s", "sample: give --prompt or --prompt-tokens, not both");
    sr_testhook_warn_active();
    sr_status st = sr_sample_run(c->args[0], &c->sample, stdout, stderr);
    return st == SR_OK ? 0 : cli_fail(st);
}

int cmd_eval(const char *sub, const cli *c) {
    (void)sub;
    if (c->nargs != 1)
        return cli_usage_error("%s", "eval: expected exactly one model: a step_* directory, a checkpoint.dir or a "
                                     "Hugging Face GPT-2 or Llama directory");
    if (c->eval.ntasks == 0)
        return cli_usage_error("%s", "eval: expected --task FILE (a multiple-choice task in HellaSwag's JSON Lines: "
                                     "{\"ctx\": ..., \"endings\": [...], \"label\": N} a line)");
    sr_eval_opts o = c->eval;
    o.json = c->plan.json;
    o.s = c->sample;
    sr_testhook_warn_active();
    sr_status st = sr_eval_run(c->args[0], &o, stdout, stderr);
    return st == SR_OK ? 0 : cli_fail(st);
}

int cmd_report(const char *sub, const cli *c) {
    (void)sub;
    if (c->nargs != 1)
        return cli_usage_error("%s", "report: expected exactly one metrics file (log.metrics of a run)");
    sr_status st = sr_report(c->args[0], c->output, stdout, stderr);
    if (st == SR_OK && fflush(stdout) != 0)
        st = sr_error(SR_ERR_IO, "standard output: %s", strerror(errno));
    return st == SR_OK ? 0 : cli_fail(st);
}

int cmd_plan(const char *sub, const cli *c) {
    (void)sub;
    if (c->nargs != 1)
        return cli_usage_error("%s", "plan: expected exactly one JOB.yaml");
    sr_status est = sr_metrics_check_env();
    if (est != SR_OK)
        return cli_fail(est);
    sr_config cfg;
    int rc = load_job(&cfg, c->args[0], c, 0, false);
    if (rc == 0) {
        sr_plan_opts o = c->plan;
        o.ranks_lo = c->ranks ? c->ranks : 1;
        o.ranks_hi = c->ranks ? c->ranks_hi : 1;
        if (o.json && !o.ledger)
            rc = cli_usage_error("%s", "plan: --json prints the ledger: give --ledger too");
        else if (o.ledger && o.ranks_hi != o.ranks_lo)
            rc =
                cli_usage_error("%s", "plan --ledger: --ranks A-B: the ledger counts one rank count (hint: --ranks N)");
    }
    if (rc == 0) {
        sr_plan_opts o = c->plan;
        o.ranks_lo = c->ranks ? c->ranks : 1;
        o.ranks_hi = c->ranks ? c->ranks_hi : 1;
        sr_status st = sr_plan_run(&cfg, c->args[0], &o, stdout);
        if (st == SR_OK && fflush(stdout) != 0)
            st = sr_error(SR_ERR_IO, "standard output: %s", strerror(errno));
        rc = st == SR_OK ? 0 : cli_fail(st);
    }
    sr_config_free(&cfg);
    return rc;
}
int cmd_debug(const char *sub, const cli *c) {
    if (strcmp(sub, "trace") == 0) {
        if (c->nargs != 1 || !c->output)
            return cli_usage_error("%s", "debug trace: expected one directory of trace files (log.trace_dir of a run) "
                                         "and -o MERGED.json");
        sr_status st = sr_trace_merge(c->args[0], c->output, stdout);
        if (fflush(stdout) != 0 && st == SR_OK)
            st = sr_error(SR_ERR_IO, "write to standard output failed");
        return st == SR_OK ? 0 : cli_fail(st);
    }
    if (c->nargs != 1)
        return cli_usage_error("%s", "debug flight: expected exactly one directory of flight-recorder dumps "
                                     "(log.flight_dir of a run)");
    bool culprit = false;
    sr_status st = sr_flight_check(c->args[0], stdout, &culprit);
    if (fflush(stdout) != 0 && st == SR_OK)
        st = sr_error(SR_ERR_IO, "write to standard output failed");
    if (st != SR_OK)
        return cli_fail(st);
    return culprit ? SR_FLIGHT_CULPRIT_EXIT : 0;
}
