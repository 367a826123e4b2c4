/* main.c — the command line (getopt_long) and the only place that exits.
 *
 * Commands: train, config check|show|keys, data prepare, ckpt
 * list|verify|inspect|export, sample, report, plan; --help, --version.
 * Every failure is one message on stderr and an exit status from the
 * sysexits table in status.h (ARCHITECTURE.md §6). */
#include "srconfig.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt_tools.h"
#include "config.h"
#include "data.h"
#include "device.h"
#include "export_hf.h"
#include "job.h"
#include "mem.h"
#include "metrics.h"
#include "ops.h"
#include "plan.h"
#include "report.h"
#include "sample.h"
#include "status.h"
#include "testhook.h"
#include "train.h"
#include "world.h"

static const char usage_text[] =
    "usage: shardrun train [JOB.yaml] [--set KEY=VALUE]...\n"
    "       shardrun config check JOB.yaml [--ranks N] [--set KEY=VALUE]...\n"
    "       shardrun config show [JOB.yaml] [--ranks N] [--set KEY=VALUE]...\n"
    "       shardrun config keys [--mdoc]\n"
    "       shardrun data prepare [-o OUT] FILE...\n"
    "       shardrun ckpt list DIR | verify PATH | inspect PATH\n"
    "       shardrun ckpt export PATH -o DIR/|FILE.safetensors|FILE.bin [--format F]\n"
    "       shardrun sample CKPT [--prompt TEXT | --prompt-tokens 1,2,3] [--tokens N]\n"
    "                [--temperature T] [--top-k K] [--seed S] [--tokenizer FILE]\n"
    "       shardrun report METRICS.jsonl [-o REPORT.html]\n"
    "       shardrun plan JOB.yaml [--ranks N|A-B] [--gpus-per-node G] [--device-mem GiB]\n"
    "                [--host-mem GiB] [--disk-mbps M] [--tflops T] [--set KEY=VALUE]...\n"
    "       shardrun --help | --version\n"
    "\n"
    "Train a GPT-2 style transformer with fully sharded data parallelism.\n"
    "\n"
    "commands:\n"
    "  train           train per JOB.yaml (without one: the embedded default job)\n"
    "  config check    validate a job file; exit 0 when it is valid\n"
    "  config show     print the effective job with every default filled in\n"
    "  config keys     list every job-file key with type, default and meaning\n"
    "  data prepare    turn text files into a byte-level llm.c token shard\n"
    "  ckpt list       list the checkpoints of a checkpoint.dir\n"
    "  ckpt verify     check every SHA-256 of a checkpoint (or of all in a dir)\n"
    "  ckpt inspect    summarize a checkpoint's manifest\n"
    "  ckpt export     write a checkpoint's model for Hugging Face (-o DIR/:\n"
    "                  model.safetensors + config.json), as a safetensors file\n"
    "                  (-o FILE.safetensors) or as an llm.c model file (-o FILE.bin)\n"
    "  sample          generate text from a checkpoint on the CPU\n"
    "  report          a metrics file as one HTML page with charts, and a summary\n"
    "  plan            size a job without running it: memory per rank and space,\n"
    "                  fit, throughput, checkpoint size and the --signal lead\n"
    "\n"
    "options:\n"
    "  -s, --set KEY=VALUE   override a job-file key (VALUE is YAML), repeatable\n"
    "  -o, --output OUT      data prepare: output shard (default: data.bin);\n"
    "                        ckpt export: the directory or file to write;\n"
    "                        report: the page (default: METRICS.jsonl.html)\n"
    "      --format F        ckpt export: hf, safetensors or llmc (default: from -o)\n"
    "      --prompt TEXT     sample: start from TEXT (byte-level vocabulary only)\n"
    "      --prompt-tokens L sample: start from these token ids (comma list)\n"
    "      --tokens N        sample: tokens to generate (default 256)\n"
    "      --temperature T   sample: softmax temperature, 0 = greedy (default 0.8)\n"
    "      --top-k K         sample: draw among the K likeliest (default 40; 0 = off)\n"
    "      --seed S          sample: the seed of the draws (default 1)\n"
    "      --tokenizer FILE  sample: an llm.c tokenizer file to decode with\n"
    "      --ranks N         config check|show: also check the rules that depend on\n"
    "                        the number of ranks (mesh, reshard N, batch split);\n"
    "                        plan: the ranks to plan for (A-B: a table)\n"
    "      --gpus-per-node G plan: a GPU plan with G ranks per node\n"
    "      --device-mem GiB  plan: memory per GPU (default 80)\n"
    "      --host-mem GiB    plan: memory per node (default: this node's)\n"
    "      --disk-mbps M     plan: checkpoint write speed, MB/s, all ranks (default 1000)\n"
    "      --tflops T        plan: sustained TFLOP/s per rank (default: 40% of peak)\n"
    "      --mdoc            config keys: print the list as an mdoc section\n"
    "  -h, --help            print this help and exit\n"
    "  -V, --version         print the version and exit\n"
    "\n"
    "exit status: 0 done, 1 training failed, 64 usage, 65 bad data or checkpoint,\n"
    "66 missing input, 69 peer failed, 70 internal, 73 cannot create output,\n"
    "74 I/O error, 75 preempted (run again), 78 bad job file or launch.\n"
    "See shardrun(1) and shardrun.yaml(5).\n";

enum {
    OPT_MDOC = 1000,
    OPT_RANKS,
    OPT_FORMAT,
    OPT_PROMPT,
    OPT_PROMPT_TOKENS,
    OPT_TOKENS,
    OPT_TEMPERATURE,
    OPT_TOP_K,
    OPT_SEED,
    OPT_TOKENIZER,
    OPT_GPUS_PER_NODE,
    OPT_DEVICE_MEM,
    OPT_HOST_MEM,
    OPT_DISK_MBPS,
    OPT_TFLOPS
};

static const struct option long_options[] = {
    {"set", required_argument, NULL, 's'},
    {"output", required_argument, NULL, 'o'},
    {"mdoc", no_argument, NULL, OPT_MDOC},
    {"ranks", required_argument, NULL, OPT_RANKS},
    {"format", required_argument, NULL, OPT_FORMAT},
    {"prompt", required_argument, NULL, OPT_PROMPT},
    {"prompt-tokens", required_argument, NULL, OPT_PROMPT_TOKENS},
    {"tokens", required_argument, NULL, OPT_TOKENS},
    {"temperature", required_argument, NULL, OPT_TEMPERATURE},
    {"top-k", required_argument, NULL, OPT_TOP_K},
    {"seed", required_argument, NULL, OPT_SEED},
    {"tokenizer", required_argument, NULL, OPT_TOKENIZER},
    {"gpus-per-node", required_argument, NULL, OPT_GPUS_PER_NODE},
    {"device-mem", required_argument, NULL, OPT_DEVICE_MEM},
    {"host-mem", required_argument, NULL, OPT_HOST_MEM},
    {"disk-mbps", required_argument, NULL, OPT_DISK_MBPS},
    {"tflops", required_argument, NULL, OPT_TFLOPS},
    {"help", no_argument, NULL, 'h'},
    {"version", no_argument, NULL, 'V'},
    {NULL, 0, NULL, 0},
};

typedef struct {
    char **sets;
    int nsets;
    const char *output;
    bool mdoc;
    int ranks;    /* --ranks N; 0 = not given */
    int ranks_hi; /* --ranks A-B: B (ranks is A); else = ranks */
    sr_plan_opts plan;
    const char *plan_opt; /* the first plan-only option given, for refusals elsewhere */
    int format;           /* --format: sr_export_format (SR_EXPORT_AUTO when not given) */
    sr_sample_opts sample;
    const char *sample_opt; /* the first sample option given, for refusals elsewhere */
    char **args;            /* positional arguments after the command words */
    int nargs;
} cli;

/* In a multi-rank job, errors every rank hits alike (job file, data) are
 * printed by rank 0 only; peer, I/O and internal errors by every rank. */
static bool quiet_rank = false;

/* Prints the recorded error of st as this rank reports it (the printer of
 * sr_error_emit). */
static void print_error(sr_status st) {
    const char *msg = sr_error_message();
    char launcher[512];
    /* the launcher's death reaches sibling ranks a few milliseconds apart:
     * before naming a peer that merely exited first, ask this rank's own
     * witnesses (synchronous: by the time a sibling's exit has been seen
     * and this run torn down, the launcher's sockets are long closed; no
     * wait, so a rank whose peer on another node died reports at once) */
    if (st == SR_ERR_PEER && sr_world_launcher_gone(launcher, sizeof launcher, 0)) {
        sr_log_error("%s (then: %s)", launcher, msg[0] ? msg : sr_status_str(st));
        return;
    }
    bool same_everywhere =
        st == SR_ERR_CONFIG || st == SR_ERR_DATA || st == SR_ERR_NOINPUT || st == SR_ERR_USAGE || st == SR_ERR_TRAIN;
    if (!(quiet_rank && same_everywhere))
        sr_log_error("%s", msg[0] ? msg : sr_status_str(st));
    if (st == SR_ERR_USAGE)
        fputs("Try 'shardrun --help'.\n", stderr);
}

static int fail(sr_status st) {
    if (!sr_error_emitted())
        print_error(st);
    return sr_status_exit_code(st);
}

static int usage_error(const char *fmt, const char *arg) {
    char buf[512];
    snprintf(buf, sizeof buf, fmt, arg);
    return fail(sr_error(SR_ERR_USAGE, "%s", buf));
}

/* One of `shardrun sample`'s options into c->sample. */
static int sample_option(cli *c, int ch, const char *arg, const char *given) {
    char *end;
    errno = 0;
    if (!c->sample_opt)
        c->sample_opt = given;
    switch (ch) {
    case OPT_PROMPT:
        c->sample.prompt = arg;
        break;
    case OPT_PROMPT_TOKENS:
        c->sample.prompt_tokens = arg;
        break;
    case OPT_TOKENIZER:
        c->sample.tokenizer = arg;
        break;
    case OPT_TOKENS: {
        long v = strtol(arg, &end, 10);
        if (!*arg || *end || errno || v < 1 || v > 100000000)
            return usage_error("--tokens %s: expected a number of tokens from 1 to 100000000", arg);
        c->sample.tokens = v;
        break;
    }
    case OPT_TEMPERATURE: {
        double v = strtod(arg, &end);
        if (!*arg || *end || errno || !(v >= 0.0 && v <= 1e6))
            return usage_error("--temperature %s: expected a number from 0 (greedy) to 1e6", arg);
        c->sample.temperature = v;
        break;
    }
    case OPT_TOP_K: {
        long v = strtol(arg, &end, 10);
        if (!*arg || *end || errno || v < 0 || v > 16777216)
            return usage_error("--top-k %s: expected 0 (off) or a number of tokens up to 16777216", arg);
        c->sample.top_k = (int)v;
        break;
    }
    case OPT_SEED: {
        unsigned long long v = strtoull(arg, &end, 10);
        if (!*arg || *end || errno || arg[0] < '0' || arg[0] > '9') /* strtoull takes " -1" as 2^64 - 1 */
            return usage_error("--seed %s: expected a non-negative integer", arg);
        c->sample.seed = v;
        break;
    }
    }
    return 0;
}

/* One of `shardrun plan`'s options into c->plan. */
static int plan_option(cli *c, int ch, const char *arg, const char *given) {
    char *end;
    errno = 0;
    if (!c->plan_opt)
        c->plan_opt = given;
    double v = strtod(arg, &end);
    bool ok = *arg && !*end && !errno && isfinite(v) && v > 0;
    switch (ch) {
    case OPT_GPUS_PER_NODE:
        if (!ok || v != floor(v) || v > 1024)
            return usage_error("--gpus-per-node %s: expected a whole number of GPUs per node from 1 to 1024", arg);
        c->plan.gpus_per_node = (int)v;
        break;
    case OPT_DEVICE_MEM:
        if (!ok || v > 1e6)
            return usage_error("--device-mem %s: expected the memory of one GPU in GiB (a number above 0)", arg);
        c->plan.device_mem_gib = v;
        break;
    case OPT_HOST_MEM:
        if (!ok || v > 1e9)
            return usage_error("--host-mem %s: expected the memory of one node in GiB (a number above 0)", arg);
        c->plan.host_mem_gib = v;
        break;
    case OPT_DISK_MBPS:
    case OPT_TFLOPS: {
        bool disk = ch == OPT_DISK_MBPS;
        const char *what =
            disk ? "the checkpoint file system's write speed per rank in MB/s" : "the sustained TFLOP/s of one rank";
        double lo = disk ? SR_PLAN_DISK_MBPS_MIN : SR_PLAN_TFLOPS_MIN,
               hi = disk ? SR_PLAN_DISK_MBPS_MAX : SR_PLAN_TFLOPS_MAX;
        if (!*arg || *end || errno == EINVAL || isnan(v))
            return usage_error(disk ? "--disk-mbps %s: expected a number: the checkpoint file system's write speed "
                                      "per rank in MB/s"
                                    : "--tflops %s: expected a number: the sustained TFLOP/s of one rank",
                               arg);
        if (!(v >= lo && v <= hi))
            return fail(sr_error(SR_ERR_CONFIG, "%s %s: outside the plausible range %g to %g of %s",
                                 disk ? "--disk-mbps" : "--tflops", arg, lo, hi, what));
        *(disk ? &c->plan.disk_mbps : &c->plan.tflops) = v;
        break;
    }
    }
    return 0;
}

/* Parses options after the command words; positional arguments collected. */
static int parse_options(int argc, char **argv, cli *c) {
    memset(c, 0, sizeof *c);
    c->sets = sr_calloc((size_t)argc + 1, sizeof *c->sets);
    c->args = sr_calloc((size_t)argc + 1, sizeof *c->args);
    if (!c->sets || !c->args)
        return fail(sr_error_oom("the command line"));
    c->sample = (sr_sample_opts){NULL, NULL, 256, 0.8, 40, 1, NULL};
    optind = 1;
    opterr = 0;
    int ch;
    while ((ch = getopt_long(argc, argv, ":s:o:hV", long_options, NULL)) != -1) {
        switch (ch) {
        case 's':
            if (!strchr(optarg, '=')) {
                /* `--set train.lr 3e-4`: the value would become the job file */
                char buf[800];
                const char *next = optind < argc && argv[optind][0] != '-' ? argv[optind] : NULL;
                if (next)
                    snprintf(buf, sizeof buf,
                             "--set %.200s: expected key=value, with no space around '=' (hint: --set %.200s=%.200s)",
                             optarg, optarg, next);
                else
                    snprintf(buf, sizeof buf, "--set %.200s: expected key=value (hint: --set %.200s=VALUE)", optarg,
                             optarg);
                return usage_error("%s", buf);
            }
            c->sets[c->nsets++] = optarg;
            break;
        case 'o':
            c->output = optarg;
            break;
        case OPT_MDOC:
            c->mdoc = true;
            break;
        case OPT_RANKS: {
            char *end;
            long v = strtol(optarg, &end, 10), w = v;
            if (*end == '-' && end > optarg) /* A-B: plan's table */
                w = strtol(end + 1, &end, 10);
            if (!*optarg || *end || v < 1 || v > 1048576 || w < v || w > 1048576)
                return usage_error("--ranks %s: expected a number of ranks from 1 to 1048576, or a range A-B "
                                   "(plan)",
                                   optarg);
            c->ranks = (int)v;
            c->ranks_hi = (int)w;
            break;
        }
        case OPT_GPUS_PER_NODE:
        case OPT_DEVICE_MEM:
        case OPT_HOST_MEM:
        case OPT_DISK_MBPS:
        case OPT_TFLOPS: {
            int rc = plan_option(c, ch, optarg, argv[optind - 1]);
            if (rc)
                return rc;
            break;
        }
        case OPT_FORMAT:
            if ((c->format = sr_export_format_parse(optarg)) < 0)
                return usage_error("--format %s: expected hf, safetensors or llmc", optarg);
            break;
        case OPT_PROMPT:
        case OPT_PROMPT_TOKENS:
        case OPT_TOKENS:
        case OPT_TEMPERATURE:
        case OPT_TOP_K:
        case OPT_SEED:
        case OPT_TOKENIZER: {
            int rc = sample_option(c, ch, optarg, argv[optind - 1]);
            if (rc)
                return rc;
            break;
        }
        case 'h':
            fputs(usage_text, stdout);
            exit(0);
        case 'V':
            printf("shardrun %s\n", PACKAGE_VERSION);
            exit(0);
        case ':':
            return usage_error("option '%s' needs an argument", argv[optind - 1]);
        default:
            return usage_error("unknown option '%s'", argv[optind - 1]);
        }
    }
    for (int i = optind; i < argc; i++)
        c->args[c->nargs++] = argv[i];
    return 0;
}

static void cli_free(cli *c) {
    free(c->sets);
    free(c->args);
}

/* Loads the job (file or embedded), applies --set, finalizes, refuses
 * features that have not landed (device: cuda among them), with `data`
 * the data rules (sr_job_check_data: train and config check; config show
 * prints any job, a plan reads no data), and with ranks > 0 checks the world-size rules for that many
 * ranks.  Returns an exit code (0 on success). */
static int load_job(sr_config *cfg, const char *path, const cli *c, int ranks, bool data) {
    sr_status st = sr_config_init(cfg);
    if (st == SR_OK)
        st = sr_config_load_file(cfg, path);
    for (int i = 0; st == SR_OK && i < c->nsets; i++)
        st = sr_config_set(cfg, c->sets[i]);
    if (st == SR_OK)
        st = sr_config_finalize(cfg);
    if (st == SR_OK)
        st = sr_config_check_landed(cfg);
    if (st == SR_OK)
        st = sr_job_check_device(cfg);
    if (st == SR_OK && data)
        st = sr_job_check_data(cfg);
    if (st == SR_OK && ranks > 0)
        st = sr_job_check_world(cfg, ranks, 0, NULL);
    return st == SR_OK ? 0 : fail(st);
}

/* SHARDRUN_TEST_ALLOC_FAIL sweeps need to know how many allocations a run
 * makes, and the first allocation of each call site: with the hook set,
 * both go to stderr at the end. */
static int report_allocations(int rc) {
    if (sr_testhook()->alloc_fail <= 0)
        return rc;
    sr_log_info_all("test: %lld allocations counted", sr_mem_allocations());
    static long long first[SR_MEM_MAX_SITES];
    int n = sr_mem_alloc_sites(first, SR_MEM_MAX_SITES), shown = 0;
    char line[7000]; /* inside the log's own line */
    size_t at = 0;
    for (; shown < n && at + 24 < sizeof line; shown++)
        at += (size_t)snprintf(line + at, sizeof line - at, " %lld", first[shown]);
    line[at] = 0;
    if (shown < n)
        sr_log_warn("test: only the first %d of %d allocation sites fit the line below", shown, n);
    sr_log_info_all("test: %d allocation sites, first allocations:%s", shown, line);
    return rc;
}

static int cmd_train(const cli *c) {
    if (c->ranks)
        return usage_error(
            "%s", "train: --ranks applies to config check and config show (a run takes its ranks from the launcher)");
    if (c->nargs > 1)
        return usage_error("train: expected at most one job file, got extra argument '%s'", c->args[1]);
    sr_status st = sr_metrics_check_env();
    if (st != SR_OK)
        return fail(st);
    sr_world world;
    st = sr_world_init(&world);
    if (st != SR_OK) {
        /* srun without --mpi=pmix: every task fails alike; task 0 says why */
        const char *procid = getenv("SLURM_PROCID");
        quiet_rank = st == SR_ERR_CONFIG && procid && strcmp(procid, "0") != 0;
        return fail(st);
    }
    sr_log_set_rank(world.rank, world.size);
    quiet_rank = world.rank != 0;
    sr_testhook_warn_active();
    sr_config cfg;
    int rc = load_job(&cfg, c->nargs ? c->args[0] : NULL, c, 0, true);
    if (rc == 0) {
        sr_train_result res = {0};
        st = sr_train_run(&cfg, &world, &res);
        rc = st == SR_OK ? 0 : st == SR_PREEMPTED ? res.exit_code : fail(st);
    }
    sr_config_free(&cfg);
    sr_world_close(&world);
    return rc;
}

static int cmd_config(const char *sub, const cli *c) {
    if (strcmp(sub, "keys") == 0) {
        if (c->nargs)
            return usage_error("config keys: unexpected argument '%s'", c->args[0]);
        sr_config_keys(stdout, c->mdoc);
        return 0;
    }
    bool check = strcmp(sub, "check") == 0;
    if (!check && strcmp(sub, "show") != 0)
        return usage_error("config: unknown subcommand '%s'; expected check, show or keys", sub);
    if (check && c->nargs != 1)
        return usage_error("%s", "config check: expected exactly one JOB.yaml");
    if (c->nargs > 1)
        return usage_error("config show: expected at most one job file, got extra argument '%s'", c->args[1]);
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

static int cmd_data(const char *sub, const cli *c) {
    if (c->ranks)
        return usage_error("%s", "data: --ranks applies to config check and config show");
    if (strcmp(sub, "prepare") != 0)
        return usage_error("data: unknown subcommand '%s'; expected prepare", sub);
    if (c->nargs < 1)
        return usage_error("%s", "data prepare: expected at least one input FILE");
    const char *out = c->output ? c->output : "data.bin";
    uint64_t n = 0;
    sr_status st = sr_data_prepare(out, c->args, c->nargs, &n);
    if (st != SR_OK)
        return fail(st);
    fprintf(stderr, "shardrun: wrote %s: %llu tokens (byte-level, vocabulary 256, uint16 llm.c shard)\n", out,
            (unsigned long long)n);
    return 0;
}

static int cmd_ckpt(const char *sub, const cli *c) {
    bool list = strcmp(sub, "list") == 0, verify = strcmp(sub, "verify") == 0, inspect = strcmp(sub, "inspect") == 0,
         export = strcmp(sub, "export") == 0;
    if (!list && !verify && !inspect && !export)
        return usage_error("ckpt: unknown subcommand '%s'; expected list, verify, inspect or export", sub);
    if (c->nargs != 1)
        return usage_error("ckpt %s: expected exactly one checkpoint path", sub);
    if (export && !c->output)
        return usage_error("%s", "ckpt export: expected -o DIR/ (Hugging Face: model.safetensors and config.json), "
                                 "-o FILE.safetensors or -o FILE.bin (llm.c)");
    if (!export && c->output)
        return usage_error("ckpt %s: -o applies to ckpt export only", sub);
    if (!export && c->format)
        return usage_error("ckpt %s: --format applies to ckpt export only", sub);
    if (c->ranks)
        return usage_error("ckpt %s: --ranks applies to config check and config show", sub);
    sr_testhook_warn_active();
    sr_status st = list      ? sr_ckpt_list(c->args[0], stdout)
                   : verify  ? sr_ckpt_verify(c->args[0], stdout)
                   : inspect ? sr_ckpt_inspect(c->args[0], stdout)
                             : sr_export(c->args[0], c->output, (sr_export_format)c->format, stderr);
    if (fflush(stdout) != 0 && st == SR_OK)
        st = sr_error(SR_ERR_IO, "write to standard output failed");
    return st == SR_OK ? 0 : fail(st);
}

static int cmd_sample(const cli *c) {
    if (c->nargs != 1)
        return usage_error("%s", "sample: expected exactly one checkpoint (a step_* directory)");
    if (c->nsets || c->output || c->ranks || c->format || c->mdoc)
        return usage_error("%s", "sample: takes --prompt, --prompt-tokens, --tokens, --temperature, --top-k, --seed "
                                 "and --tokenizer only");
    if (c->sample.prompt && c->sample.prompt_tokens)
        return usage_error("%s", "sample: give --prompt or --prompt-tokens, not both");
    sr_testhook_warn_active();
    sr_ops_set_threads(0);
    sr_status st = sr_sample_run(c->args[0], &c->sample, stdout, stderr);
    return st == SR_OK ? 0 : fail(st);
}

static int cmd_report(const cli *c) {
    if (c->nargs != 1)
        return usage_error("%s", "report: expected exactly one metrics file (log.metrics of a run)");
    if (c->nsets || c->ranks || c->format || c->mdoc)
        return usage_error("%s", "report: takes -o only");
    sr_status st = sr_report(c->args[0], c->output, stdout, stderr);
    if (st == SR_OK && fflush(stdout) != 0)
        st = sr_error(SR_ERR_IO, "standard output: %s", strerror(errno));
    return st == SR_OK ? 0 : fail(st);
}

static int cmd_plan(const cli *c) {
    if (c->nargs != 1)
        return usage_error("%s", "plan: expected exactly one JOB.yaml");
    if (c->output || c->format || c->mdoc)
        return usage_error("%s", "plan: takes --ranks, --gpus-per-node, --device-mem, --host-mem, --disk-mbps, "
                                 "--tflops and --set");
    sr_status est = sr_metrics_check_env();
    if (est != SR_OK)
        return fail(est);
    sr_config cfg;
    int rc = load_job(&cfg, c->args[0], c, 0, false);
    if (rc == 0) {
        sr_plan_opts o = c->plan;
        o.ranks_lo = c->ranks ? c->ranks : 1;
        o.ranks_hi = c->ranks ? c->ranks_hi : 1;
        sr_status st = sr_plan_run(&cfg, c->args[0], &o, stdout);
        if (st == SR_OK && fflush(stdout) != 0)
            st = sr_error(SR_ERR_IO, "standard output: %s", strerror(errno));
        rc = st == SR_OK ? 0 : fail(st);
    }
    sr_config_free(&cfg);
    return rc;
}

/* SHARDRUN_TEST_SKIP_WAIT: "list" prints the wait sites (returns 0);
 * otherwise every entry must name one (else -1 after the message). */
static int check_skip_wait(void) {
    const char *list = sr_testhook()->skip_wait;
    if (strcmp(list, "list") == 0) {
        for (const sr_wait_site *w = sr_dev_wait_sites; w->name; w++)
            printf("%-18s %s\n", w->name, w->what);
        return 0;
    }
    for (const char *p = list; *p;) {
        size_t len = strcspn(p, ",");
        const sr_wait_site *w = sr_dev_wait_sites;
        while (w->name && !(strlen(w->name) == len && strncmp(w->name, p, len) == 0))
            w++;
        if (!w->name) {
            sr_error(SR_ERR_CONFIG,
                     "SHARDRUN_TEST_SKIP_WAIT: '%.*s' is not a wait site (hint: SHARDRUN_TEST_SKIP_WAIT=list "
                     "prints them)",
                     (int)len, p);
            return -1;
        }
        p += len + (p[len] == ',');
    }
    return 1;
}

int main(int argc, char **argv) {
    /* A write to a closed pipe is an I/O error to report, not a silent death. */
    signal(SIGPIPE, SIG_IGN);
    /* A file-size limit (ulimit -f) makes a write fail with EFBIG, which
     * every writer reports (74, naming its file) after removing its
     * temporary file; the default action would kill the process and leave
     * the temporary behind. */
    signal(SIGXFSZ, SIG_IGN);
    sr_error_set_printer(print_error);
    sr_ckpt_guard_outputs();
    if (sr_testhook_init() != SR_OK)
        return fail(SR_ERR_CONFIG);
    int skip = check_skip_wait();
    if (skip <= 0)
        return skip == 0 ? 0 : fail(SR_ERR_CONFIG);
    if (argc < 2) {
        fputs(usage_text, stderr);
        return sr_status_exit_code(SR_ERR_USAGE);
    }
    /* Global options before any command. */
    const char *cmd = argv[1];
    if (cmd[0] == '-') {
        cli c;
        int rc = parse_options(argc, argv, &c);
        cli_free(&c);
        if (rc)
            return rc;
        return usage_error("%s", "expected a command: train, config, data, ckpt, sample, report or plan");
    }
    int words = 1; /* command words consumed */
    const char *sub = NULL;
    if (strcmp(cmd, "config") == 0 || strcmp(cmd, "data") == 0 || strcmp(cmd, "ckpt") == 0) {
        if (argc < 3 || argv[2][0] == '-') {
            if (argc >= 3 && (strcmp(argv[2], "--help") == 0 || strcmp(argv[2], "-h") == 0)) {
                fputs(usage_text, stdout);
                return 0;
            }
            return usage_error("%s: expected a subcommand", cmd);
        }
        sub = argv[2];
        words = 2;
    } else if (strcmp(cmd, "train") != 0 && strcmp(cmd, "sample") != 0 && strcmp(cmd, "report") != 0 &&
               strcmp(cmd, "plan") != 0) {
        return usage_error("unknown command '%s'; expected train, config, data, ckpt, sample, report or plan", cmd);
    }
    cli c;
    int rc = parse_options(argc - words, argv + words, &c);
    if (rc == 0 && c.sample_opt && strcmp(cmd, "sample") != 0)
        rc = usage_error("%s applies to shardrun sample only", c.sample_opt);
    if (rc == 0 && c.format && !(sub && strcmp(cmd, "ckpt") == 0))
        rc = usage_error("%s", "--format applies to ckpt export only");
    if (rc == 0 && c.plan_opt && strcmp(cmd, "plan") != 0)
        rc = usage_error("%s applies to shardrun plan only", c.plan_opt);
    if (rc == 0 && c.ranks && c.ranks_hi != c.ranks && strcmp(cmd, "plan") != 0)
        rc = usage_error("%s", "--ranks A-B (a range) applies to shardrun plan only");
    if (rc == 0) {
        if (strcmp(cmd, "train") == 0)
            rc = cmd_train(&c);
        else if (strcmp(cmd, "sample") == 0)
            rc = cmd_sample(&c);
        else if (strcmp(cmd, "report") == 0)
            rc = cmd_report(&c);
        else if (strcmp(cmd, "plan") == 0)
            rc = cmd_plan(&c);
        else if (strcmp(cmd, "config") == 0)
            rc = cmd_config(sub, &c);
        else if (strcmp(cmd, "ckpt") == 0)
            rc = cmd_ckpt(sub, &c);
        else
            rc = cmd_data(sub, &c);
    }
    cli_free(&c);
    return report_allocations(rc);
}
