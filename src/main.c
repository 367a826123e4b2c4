/* main.c — the command line (getopt_long) and the only place that exits.
 *
 * main owns two tables: the options (name, letter, argument, help; the
 * getopt_long table is built from it) and the commands (name, subcommand,
 * the options it takes, handler, usage, summary).  Dispatch, --help,
 * `shardrun help [COMMAND]`, `COMMAND --help`, the subcommand lists and
 * the refusal of an option a command does not take all read them, so a
 * command is written down once.  Every failure is one message on stderr
 * and an exit status from the sysexits table in status.h
 * (ARCHITECTURE.md §6). */
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
#include "flightcheck.h"
#include "job.h"
#include "mem.h"
#include "metrics.h"
#include "ops.h"
#include "plan.h"
#include "prepare.h"
#include "report.h"
#include "sample.h"
#include "signals.h"
#include "status.h"
#include "suggest.h"
#include "testhook.h"
#include "tracecheck.h"
#include "train.h"
#include "world.h"

/* ------------------------------------------------------------------------ */
/* the option table: every option once, with its help; getopt_long's table
 * is built from it */

enum {
    X_SET,
    X_OUTPUT,
    X_FORMAT,
    X_PROMPT,
    X_PROMPT_TOKENS,
    X_TOKENS,
    X_TEMPERATURE,
    X_TOP_K,
    X_SEED,
    X_TOKENIZER,
    X_THREADS,
    X_FIELD,
    X_DOC_TOKEN,
    X_VAL_TOKENS,
    X_SHARD_TOKENS,
    X_PREFIX,
    X_RANKS,
    X_GPUS_PER_NODE,
    X_DEVICE_MEM,
    X_HOST_MEM,
    X_DISK_MBPS,
    X_TFLOPS,
    X_LEDGER,
    X_JSON,
    X_GEMM_TFLOPS,
    X_HBM_TBPS,
    X_CALIBRATION,
    X_MDOC,
    X_HELP,
    X_VERSION,
    X_COUNT
};
#define B(x) (1u << (x))
_Static_assert(X_COUNT <= 32, "the option sets are 32-bit masks");
#define OPT_LONG_BASE 1000 /* getopt_long's value of an option without a letter: base + X_* */

typedef struct {
    const char *name; /* the long name */
    char letter;      /* its short form, 0: none */
    const char *arg;  /* the argument as the help names it, NULL: takes none */
    const char *help; /* lines separated by \n */
    bool named_short; /* messages name it by its letter (-o), else by its long name */
} option_row;

static const option_row options[X_COUNT] = {
    [X_SET] = {"set", 's', "KEY=VALUE", "override a job-file key (VALUE is YAML), repeatable"},
    [X_OUTPUT] = {"output", 'o', "OUT",
                  "data prepare: the output shard (default: data.bin), or the\ndirectory of shards (OUT/, or with "
                  "--tokenizer,\n--val-tokens or --shard-tokens; default: .);\nckpt export: the directory or file to "
                  "write;\n"
                  "report: the page (default: METRICS.jsonl.html)",
                  true},
    [X_FORMAT] = {"format", 0, "F", "ckpt export: hf, safetensors or llmc (default: from -o)"},
    [X_PROMPT] = {"prompt", 0, "TEXT",
                  "sample: start from TEXT (encoded by the checkpoint's tokenizer,\nor --tokenizer; bytes for a "
                  "byte-level model)"},
    [X_PROMPT_TOKENS] = {"prompt-tokens", 0, "L", "sample: start from these token ids (comma list)"},
    [X_TOKENS] = {"tokens", 0, "N", "sample: tokens to generate (default 256)"},
    [X_TEMPERATURE] = {"temperature", 0, "T", "sample: softmax temperature, 0 = greedy (default 0.8)"},
    [X_TOP_K] = {"top-k", 0, "K", "sample: draw among the K likeliest (default 40; 0 = off)"},
    [X_SEED] = {"seed", 0, "S", "sample: the seed of the draws (default 1)"},
    [X_TOKENIZER] = {"tokenizer", 0, "PATH",
                     "data prepare: encode with this tokenizer (tokenizer.json,\nvocab.json + merges.txt, or "
                     "[gpt2:|llama3:]RANKS.tiktoken);\nsample: the tokenizer of --prompt and of the output (also "
                     "llm.c's\ntokenizer file, decoding only)"},
    [X_THREADS] = {"threads", 0, "N",
                   "sample: compute threads (default: the threads key of the\ncheckpoint's job, else OMP_NUM_THREADS "
                   "or all cores);\ndata prepare: encoding threads (default: all cores)"},
    [X_FIELD] = {"field", 0, "NAME", "data prepare: the inputs are JSON Lines; NAME is the\ndocument's text field"},
    [X_DOC_TOKEN] = {"doc-token", 0, "NAME",
                     "data prepare: the special token before each document\n(default <|endoftext|>; none: no "
                     "separator)"},
    [X_VAL_TOKENS] = {"val-tokens", 0, "N", "data prepare: the first N tokens form the validation shard"},
    [X_SHARD_TOKENS] = {"shard-tokens", 0, "N", "data prepare: tokens per training shard (default 100000000)"},
    [X_PREFIX] = {"prefix", 0, "NAME", "data prepare: the shards' name prefix (default data)"},
    [X_RANKS] = {"ranks", 0, "N",
                 "config check|show: also check the rules that depend on\nthe number of ranks (mesh, reshard N, batch "
                 "split);\nplan: the ranks to plan for (A-B: a table)"},
    [X_GPUS_PER_NODE] = {"gpus-per-node", 0, "G", "plan: a GPU plan with G ranks per node"},
    [X_DEVICE_MEM] = {"device-mem", 0, "GiB", "plan: memory per GPU (default 80)"},
    [X_HOST_MEM] = {"host-mem", 0, "GiB", "plan: memory per node (default: this node's)"},
    [X_DISK_MBPS] = {"disk-mbps", 0, "M", "plan: checkpoint write speed, MB/s, all ranks (default 1000)"},
    [X_TFLOPS] = {"tflops", 0, "T",
                  "plan: sustained TFLOP/s per rank (default: a GPU job's\nledger bound, else 40% of peak)"},
    [X_LEDGER] = {"ledger", 0, NULL,
                  "plan: the GPU step's cost ledger per op family, counted\non the cuda table without a GPU"},
    [X_JSON] = {"json", 0, NULL, "plan --ledger: print the ledger as one JSON object"},
    [X_GEMM_TFLOPS] = {"gemm-tflops", 0, "T", "plan: the roofline's GEMM rate, TFLOP/s (default 782)"},
    [X_HBM_TBPS] = {"hbm-tbps", 0, "TB", "plan: the roofline's memory rate, TB/s (default 4.0)"},
    [X_CALIBRATION] = {"calibration", 0, "FILE",
                       "plan: rates and efficiency per op family measured on a GPU\n(tests/gpu/calibration/): the "
                       "step time predicted"},
    [X_MDOC] = {"mdoc", 0, NULL, "config keys: print the list as an mdoc section"},
    [X_HELP] = {"help", 'h', NULL, "print this help (or a command's) and exit"},
    [X_VERSION] = {"version", 'V', NULL, "print the version and exit"},
};

/* "-o" or "--set": how a message names option x. */
static const char *option_brief(int x) {
    static char buf[X_COUNT][40];
    if (options[x].named_short)
        snprintf(buf[x], sizeof buf[x], "-%c", options[x].letter);
    else
        snprintf(buf[x], sizeof buf[x], "--%s", options[x].name);
    return buf[x];
}

static const char exit_text[] = "exit status: 0 done, 1 training failed, 64 usage, 65 bad data or checkpoint,\n"
                                "66 missing input, 69 peer failed, 70 internal, 73 cannot create output,\n"
                                "74 I/O error, 75 preempted (run again), 78 bad job file or launch;\n"
                                "debug flight: 0 consistent, 2 a culprit named, 65 a malformed dump,\n"
                                "66 a dump missing.\n"
                                "See shardrun(1) and shardrun.yaml(5).\n";

typedef struct {
    char **sets;
    int nsets;
    const char *output;
    bool mdoc, help;
    int ranks;    /* --ranks N; 0 = not given */
    int ranks_hi; /* --ranks A-B: B (ranks is A); else = ranks */
    sr_plan_opts plan;
    int format; /* --format: sr_export_format (SR_EXPORT_AUTO when not given) */
    sr_sample_opts sample;
    sr_prepare_opts prepare;    /* data prepare's own options (--tokenizer, --threads: in sample) */
    const char *given[X_COUNT]; /* each option given: its name for messages (option_brief), NULL: not given */
    int order[X_COUNT];         /* the argv index just after its first use */
    char **args;                /* positional arguments after the command words */
    int nargs;
} cli;

/* In a multi-rank job, errors every rank hits alike (job file, data) are
 * printed by rank 0 only; peer, I/O and internal errors by every rank. */
static bool quiet_rank = false;

/* Prints the recorded error of st as this rank reports it (the printer of
 * sr_error_emit). */
static void print_error(sr_status st) {
    if (!sr_error_final_claim())
        return; /* another thread's witness (world.c) has said why this rank ends */
    const char *msg = sr_error_message();
    char launcher[512];
    /* the launcher's death reaches sibling ranks a few milliseconds apart:
     * before naming a peer that merely exited first, ask this rank's own
     * witnesses (synchronous: by the time a sibling's exit has been seen
     * and this run torn down, the launcher's sockets are long closed; no
     * wait, so a rank whose peer on another node died reports at once) */
    bool same_everywhere = st == SR_ERR_CONFIG || st == SR_ERR_DATA || st == SR_ERR_NOINPUT || st == SR_ERR_USAGE ||
                           st == SR_ERR_TRAIN || st == SR_ERR_STALLED;
    if (st == SR_ERR_PEER && sr_world_launcher_gone(launcher, sizeof launcher, 0))
        sr_log_error("%s (then: %s)", launcher, msg[0] ? msg : sr_status_str(st));
    else if (!(quiet_rank && same_everywhere))
        sr_log_error("%s", msg[0] ? msg : sr_status_str(st));
    if (st == SR_ERR_USAGE)
        fputs("Try 'shardrun --help'.\n", stderr);
    sr_error_final_done();
}

static int fail(sr_status st) {
    if (!sr_error_emitted())
        print_error(st);
    return sr_status_exit_code(st);
}

static int usage_error(const char *fmt, const char *arg) {
    char buf[1024];
    snprintf(buf, sizeof buf, fmt, arg);
    return fail(sr_error(SR_ERR_USAGE, "%s", buf));
}

/* One of `shardrun sample`'s options into c->sample. */
static int sample_option(cli *c, int x, const char *arg) {
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
            return usage_error("--tokens %s: expected a number of tokens from 1 to 100000000", arg);
        c->sample.tokens = v;
        break;
    }
    case X_THREADS: {
        long v = strtol(arg, &end, 10);
        if (!*arg || *end || errno || v < 1 || v > 4096)
            return usage_error("--threads %s: expected a number of threads from 1 to 4096", arg);
        c->sample.threads = (int)v;
        break;
    }
    case X_TEMPERATURE: {
        double v = strtod(arg, &end);
        if (!*arg || *end || errno || !(v >= 0.0 && v <= 1e6))
            return usage_error("--temperature %s: expected a number from 0 (greedy) to 1e6", arg);
        c->sample.temperature = v;
        break;
    }
    case X_TOP_K: {
        long v = strtol(arg, &end, 10);
        if (!*arg || *end || errno || v < 0 || v > 16777216)
            return usage_error("--top-k %s: expected 0 (off) or a number of tokens up to 16777216", arg);
        c->sample.top_k = (int)v;
        break;
    }
    case X_SEED: {
        unsigned long long v = strtoull(arg, &end, 10);
        if (!*arg || *end || errno || arg[0] < '0' || arg[0] > '9') /* strtoull takes " -1" as 2^64 - 1 */
            return usage_error("--seed %s: expected a non-negative integer", arg);
        c->sample.seed = v;
        break;
    }
    }
    return 0;
}

/* One of `shardrun data prepare`'s own options into c->prepare. */
static int prepare_option(cli *c, int x, const char *arg) {
    switch (x) {
    case X_FIELD:
        if (!*arg)
            return usage_error("%s", "--field: expected the name of the JSON Lines text field (e.g. text)");
        c->prepare.field = arg;
        break;
    case X_DOC_TOKEN:
        if (!*arg)
            return usage_error("%s", "--doc-token: expected a special token's text (e.g. <|endoftext|>) or none");
        c->prepare.doc_token = arg;
        break;
    case X_PREFIX:
        c->prepare.prefix = arg;
        break;
    case X_VAL_TOKENS:
    case X_SHARD_TOKENS: {
        char *end;
        errno = 0;
        unsigned long long v = strtoull(arg, &end, 10);
        if (!*arg || *end || errno || arg[0] < '0' || arg[0] > '9' || v < 1 || v > INT32_MAX)
            return usage_error(x == X_VAL_TOKENS ? "--val-tokens %s: expected a number of tokens from 1 to 2147483647"
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
static int plan_option(cli *c, int x, const char *arg) {
    char *end;
    errno = 0;
    double v = strtod(arg, &end);
    bool ok = *arg && !*end && !errno && isfinite(v) && v > 0;
    switch (x) {
    case X_GPUS_PER_NODE:
        if (!ok || v != floor(v) || v > 1024)
            return usage_error("--gpus-per-node %s: expected a whole number of GPUs per node from 1 to 1024", arg);
        c->plan.gpus_per_node = (int)v;
        break;
    case X_DEVICE_MEM:
        if (!ok || v > 1e6)
            return usage_error("--device-mem %s: expected the memory of one GPU in GiB (a number above 0)", arg);
        c->plan.device_mem_gib = v;
        break;
    case X_HOST_MEM:
        if (!ok || v > 1e9)
            return usage_error("--host-mem %s: expected the memory of one node in GiB (a number above 0)", arg);
        c->plan.host_mem_gib = v;
        break;
    case X_GEMM_TFLOPS:
    case X_HBM_TBPS: {
        bool gemm = x == X_GEMM_TFLOPS;
        if (!*arg || *end || errno == EINVAL || isnan(v))
            return usage_error(gemm ? "--gemm-tflops %s: expected a number: a GPU's GEMM rate in TFLOP/s"
                                    : "--hbm-tbps %s: expected a number: a GPU's memory rate in TB/s",
                               arg);
        if (!(v >= (gemm ? SR_PLAN_TFLOPS_MIN : 0.01) && v <= (gemm ? SR_PLAN_TFLOPS_MAX : 1000)))
            return fail(sr_error(SR_ERR_CONFIG, "%s %s: outside the plausible range %g to %g of %s",
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

/* An option getopt_long does not know: a usage error with the closest
 * option's name when one is close. */
static int unknown_option(const char *given) {
    const char *names[X_COUNT];
    for (int x = 0; x < X_COUNT; x++)
        names[x] = options[x].name;
    const char *word = given;
    while (*word == '-')
        word++;
    char name[128];
    snprintf(name, sizeof name, "%.*s", (int)strcspn(word, "="), word);
    const char *near = name[0] && given[1] == '-' ? sr_suggest(name, names, X_COUNT) : NULL;
    char buf[400];
    if (near)
        snprintf(buf, sizeof buf, "unknown option '%.120s'; did you mean '--%s'?", given, near);
    else
        snprintf(buf, sizeof buf, "unknown option '%.120s'", given);
    return usage_error("%s", buf);
}

/* Parses options after the command words; positional arguments collected.
 * Which options the command takes is checked by the caller (the command
 * table). */
static int parse_options(int argc, char **argv, cli *c) {
    memset(c, 0, sizeof *c);
    c->sets = sr_calloc((size_t)argc + 1, sizeof *c->sets);
    c->args = sr_calloc((size_t)argc + 1, sizeof *c->args);
    if (!c->sets || !c->args)
        return fail(sr_error_oom("the command line"));
    c->sample = (sr_sample_opts){NULL, NULL, 256, 0.8, 40, 1, NULL, 0};
    struct option longopts[X_COUNT + 1];
    char shortopts[2 * X_COUNT + 2] = ":";
    size_t ns = 1;
    for (int x = 0; x < X_COUNT; x++) {
        longopts[x] = (struct option){options[x].name, options[x].arg ? required_argument : no_argument, NULL,
                                      options[x].letter ? options[x].letter : OPT_LONG_BASE + x};
        if (options[x].letter) {
            shortopts[ns++] = options[x].letter;
            if (options[x].arg)
                shortopts[ns++] = ':';
        }
    }
    shortopts[ns] = '\0';
    longopts[X_COUNT] = (struct option){NULL, 0, NULL, 0};
    optind = 1;
    opterr = 0;
    int ch;
    while ((ch = getopt_long(argc, argv, shortopts, longopts, NULL)) != -1) {
        if (ch == ':')
            return usage_error("option '%s' needs an argument", argv[optind - 1]);
        int x = -1;
        for (int k = 0; k < X_COUNT && x < 0; k++)
            if (ch == (options[k].letter ? options[k].letter : OPT_LONG_BASE + k))
                x = k;
        if (x < 0)
            return unknown_option(argv[optind - 1]);
        if (!c->given[x]) {
            c->given[x] = option_brief(x);
            c->order[x] = optind;
        }
        int rc = 0;
        switch (x) {
        case X_SET:
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
        case X_OUTPUT:
            c->output = optarg;
            break;
        case X_MDOC:
            c->mdoc = true;
            break;
        case X_HELP:
            c->help = true;
            break;
        case X_VERSION:
            printf("shardrun %s\n", PACKAGE_VERSION);
            exit(0);
        case X_RANKS: {
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
        case X_GPUS_PER_NODE:
        case X_DEVICE_MEM:
        case X_HOST_MEM:
        case X_DISK_MBPS:
        case X_TFLOPS:
        case X_GEMM_TFLOPS:
        case X_HBM_TBPS:
            rc = plan_option(c, x, optarg);
            break;
        case X_LEDGER:
            c->plan.ledger = true;
            break;
        case X_JSON:
            c->plan.json = true;
            break;
        case X_CALIBRATION:
            c->plan.calibration = optarg;
            break;
        case X_FORMAT:
            if ((c->format = sr_export_format_parse(optarg)) < 0)
                return usage_error("--format %s: expected hf, safetensors or llmc", optarg);
            break;
        case X_FIELD:
        case X_DOC_TOKEN:
        case X_VAL_TOKENS:
        case X_SHARD_TOKENS:
        case X_PREFIX:
            rc = prepare_option(c, x, optarg);
            break;
        default: /* the sample options (--tokenizer, --threads: data prepare's too) */
            rc = sample_option(c, x, optarg);
            break;
        }
        if (rc)
            return rc;
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
        st = sr_job_model_init_source(cfg);
    if (st == SR_OK)
        st = sr_config_finalize(cfg);
    if (st == SR_OK)
        st = sr_config_check_landed(cfg);
    if (st == SR_OK)
        st = sr_device_check_key(cfg);
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

static int cmd_train(const char *sub, const cli *c) {
    (void)sub;
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
    (void)sub;
    if (c->nargs < 1)
        return usage_error("%s", "data prepare: expected at least one input FILE");
    sr_prepare_opts o = c->prepare;
    o.out = c->output;
    o.tokenizer = c->sample.tokenizer;
    o.threads = c->sample.threads;
    sr_prepare_result r;
    sr_status st = sr_prepare(&o, c->args, c->nargs, &r);
    if (st != SR_OK)
        return fail(st);
    char what[200];
    if (o.tokenizer)
        snprintf(what, sizeof what, "tokenizer %s", o.tokenizer);
    else
        snprintf(what, sizeof what, "byte-level, vocabulary 256");
    if (r.directory)
        fprintf(stderr,
                "shardrun: wrote %s/: %d shard%s%s and index.json: %llu tokens from %llu document%s (%.1f MB of "
                "text; %s)\n",
                r.out, r.shards, r.shards == 1 ? "" : "s", o.val_tokens ? " (the first for validation)" : "",
                (unsigned long long)r.tokens, (unsigned long long)r.documents, r.documents == 1 ? "" : "s",
                (double)r.bytes / 1e6, what);
    else
        fprintf(stderr, "shardrun: wrote %s: %llu tokens (%s, uint16 llm.c shard)\n", r.out,
                (unsigned long long)r.tokens, what);
    return 0;
}

static int cmd_ckpt(const char *sub, const cli *c) {
    bool list = strcmp(sub, "list") == 0, verify = strcmp(sub, "verify") == 0, inspect = strcmp(sub, "inspect") == 0;
    bool export = !list && !verify && !inspect;
    if (c->nargs != 1)
        return usage_error("ckpt %s: expected exactly one checkpoint path", sub);
    if (export && !c->output)
        return usage_error("%s", "ckpt export: expected -o DIR/ (Hugging Face: model.safetensors and config.json), "
                                 "-o FILE.safetensors or -o FILE.bin (llm.c)");
    sr_testhook_warn_active();
    sr_status st = list      ? sr_ckpt_list(c->args[0], stdout)
                   : verify  ? sr_ckpt_verify(c->args[0], stdout)
                   : inspect ? sr_ckpt_inspect(c->args[0], stdout)
                             : sr_export(c->args[0], c->output, (sr_export_format)c->format, stderr);
    if (fflush(stdout) != 0 && st == SR_OK)
        st = sr_error(SR_ERR_IO, "write to standard output failed");
    return st == SR_OK ? 0 : fail(st);
}

static int cmd_sample(const char *sub, const cli *c) {
    (void)sub;
    if (c->nargs != 1)
        return usage_error("%s", "sample: expected exactly one model: a step_* directory, a checkpoint.dir or a "
                                 "Hugging Face GPT-2 or Llama directory");
    if (c->sample.prompt && c->sample.prompt_tokens)
        return usage_error("%s", "sample: give --prompt or --prompt-tokens, not both");
    sr_testhook_warn_active();
    sr_status st = sr_sample_run(c->args[0], &c->sample, stdout, stderr);
    return st == SR_OK ? 0 : fail(st);
}

static int cmd_report(const char *sub, const cli *c) {
    (void)sub;
    if (c->nargs != 1)
        return usage_error("%s", "report: expected exactly one metrics file (log.metrics of a run)");
    sr_status st = sr_report(c->args[0], c->output, stdout, stderr);
    if (st == SR_OK && fflush(stdout) != 0)
        st = sr_error(SR_ERR_IO, "standard output: %s", strerror(errno));
    return st == SR_OK ? 0 : fail(st);
}

static int cmd_plan(const char *sub, const cli *c) {
    (void)sub;
    if (c->nargs != 1)
        return usage_error("%s", "plan: expected exactly one JOB.yaml");
    sr_status est = sr_metrics_check_env();
    if (est != SR_OK)
        return fail(est);
    sr_config cfg;
    int rc = load_job(&cfg, c->args[0], c, 0, false);
    if (rc == 0) {
        sr_plan_opts o = c->plan;
        o.ranks_lo = c->ranks ? c->ranks : 1;
        o.ranks_hi = c->ranks ? c->ranks_hi : 1;
        if (o.json && !o.ledger)
            rc = usage_error("%s", "plan: --json prints the ledger: give --ledger too");
        else if (o.ledger && o.ranks_hi != o.ranks_lo)
            rc = usage_error("%s", "plan --ledger: --ranks A-B: the ledger counts one rank count (hint: --ranks N)");
    }
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
static int cmd_debug(const char *sub, const cli *c) {
    if (strcmp(sub, "trace") == 0) {
        if (c->nargs != 1 || !c->output)
            return usage_error("%s", "debug trace: expected one directory of trace files (log.trace_dir of a run) "
                                     "and -o MERGED.json");
        sr_status st = sr_trace_merge(c->args[0], c->output, stdout);
        if (fflush(stdout) != 0 && st == SR_OK)
            st = sr_error(SR_ERR_IO, "write to standard output failed");
        return st == SR_OK ? 0 : fail(st);
    }
    if (c->nargs != 1)
        return usage_error("%s", "debug flight: expected exactly one directory of flight-recorder dumps "
                                 "(log.flight_dir of a run)");
    bool culprit = false;
    sr_status st = sr_flight_check(c->args[0], stdout, &culprit);
    if (fflush(stdout) != 0 && st == SR_OK)
        st = sr_error(SR_ERR_IO, "write to standard output failed");
    if (st != SR_OK)
        return fail(st);
    return culprit ? SR_FLIGHT_CULPRIT_EXIT : 0;
}

/* ------------------------------------------------------------------------ */
/* the command table: dispatch, usage, --help and the options each command
 * takes come from here alone */

static int cmd_help(const char *sub, const cli *c);

#define SAMPLE_OPTS                                                                                                    \
    (B(X_PROMPT) | B(X_PROMPT_TOKENS) | B(X_TOKENS) | B(X_TEMPERATURE) | B(X_TOP_K) | B(X_SEED) | B(X_TOKENIZER) |     \
     B(X_THREADS))
#define PLAN_OPTS                                                                                                      \
    (B(X_SET) | B(X_RANKS) | B(X_GPUS_PER_NODE) | B(X_DEVICE_MEM) | B(X_HOST_MEM) | B(X_DISK_MBPS) | B(X_TFLOPS) |     \
     B(X_LEDGER) | B(X_JSON) | B(X_GEMM_TFLOPS) | B(X_HBM_TBPS) | B(X_CALIBRATION))

typedef struct {
    const char *name, *sub; /* "ckpt", "export"; sub NULL: a one-word command */
    unsigned opts;          /* the options it takes (B(X_*)); --help always */
    int (*run)(const char *sub, const cli *c);
    const char *args;    /* its usage after the command words; \n continues the line */
    const char *summary; /* one line for the command list; \n continues */
} command_row;

static const command_row commands[] = {
    {"train", NULL, B(X_SET), cmd_train, "[JOB.yaml] [--set KEY=VALUE]...",
     "train per JOB.yaml (without one: the embedded default job)"},
    {"config", "check", B(X_SET) | B(X_RANKS), cmd_config, "JOB.yaml [--ranks N] [--set KEY=VALUE]...",
     "validate a job file; exit 0 when it is valid"},
    {"config", "show", B(X_SET) | B(X_RANKS), cmd_config, "[JOB.yaml] [--ranks N] [--set KEY=VALUE]...",
     "print the effective job with every default filled in"},
    {"config", "keys", B(X_MDOC), cmd_config, "[--mdoc]", "list every job-file key with type, default and meaning"},
    {"data", "prepare",
     B(X_OUTPUT) | B(X_TOKENIZER) | B(X_FIELD) | B(X_DOC_TOKEN) | B(X_VAL_TOKENS) | B(X_SHARD_TOKENS) | B(X_PREFIX) |
         B(X_THREADS),
     cmd_data,
     "[-o OUT] [--tokenizer PATH] [--field NAME] [--doc-token NAME]\n[--val-tokens N] [--shard-tokens N] "
     "[--prefix NAME] [--threads N]\nFILE...",
     "turn text (files, JSON Lines; gzip or not) into llm.c token\nshards: byte-level, or with a BPE tokenizer"},
    {"ckpt", "list", 0, cmd_ckpt, "DIR", "list the checkpoints of a checkpoint.dir"},
    {"ckpt", "verify", 0, cmd_ckpt, "PATH", "check every SHA-256 of a checkpoint (or of all in a dir)"},
    {"ckpt", "inspect", 0, cmd_ckpt, "PATH", "summarize a checkpoint's manifest"},
    {"ckpt", "export", B(X_OUTPUT) | B(X_FORMAT), cmd_ckpt, "CKPT -o DIR/|FILE.safetensors|FILE.bin [--format F]",
     "write a checkpoint's model (CKPT: a step_* directory or a\ncheckpoint.dir, its newest that verifies) for Hugging "
     "Face\n(-o DIR/: model.safetensors + config.json), as a safetensors\nfile (-o FILE.safetensors) or as an llm.c "
     "model file\n(-o FILE.bin)"},
    {"sample", NULL, SAMPLE_OPTS, cmd_sample,
     "CKPT [--prompt TEXT | --prompt-tokens 1,2,3] [--tokens N]\n[--temperature T] [--top-k K] [--seed S] "
     "[--tokenizer FILE] [--threads N]",
     "generate text on the CPU from CKPT: a checkpoint, a\ncheckpoint.dir (its newest that verifies) or a Hugging "
     "Face\nGPT-2 or Llama directory (config.json + model.safetensors\nor its sharded index)"},
    {"report", NULL, B(X_OUTPUT), cmd_report, "METRICS.jsonl [-o REPORT.html]",
     "a metrics file as one HTML page with charts, and a summary"},
    {"plan", NULL, PLAN_OPTS, cmd_plan,
     "JOB.yaml [--ranks N|A-B] [--gpus-per-node G] [--device-mem GiB]\n[--host-mem GiB] [--disk-mbps M] [--tflops T] "
     "[--ledger [--json]]\n[--gemm-tflops T] [--hbm-tbps TB] [--calibration FILE] [--set KEY=VALUE]...",
     "size a job without running it: memory per rank and space,\nfit, throughput, checkpoint size and the --signal "
     "lead;\n--ledger: the GPU step's operations, FLOPs, bytes and\nroofline bound per op family"},
    {"debug", "flight", 0, cmd_debug, "DIR",
     "read every rank's flight-recorder dump in DIR and say what\nwent wrong: the last collective every rank "
     "completed, the\nrank that never entered, started or matched the next one,\nranks whose steps lag (exit 2 "
     "when it names one)"},
    {"debug", "trace", B(X_OUTPUT), cmd_debug, "DIR -o MERGED.json",
     "merge every rank's trace file in DIR (log.trace_steps) into\none Chrome trace-event file, a process per rank, "
     "for "
     "Perfetto\nor chrome://tracing"},
    {"help", NULL, 0, cmd_help, "[COMMAND [SUBCOMMAND]]", "print the usage of every command, or of one"},
};
#define NCOMMANDS ((int)(sizeof commands / sizeof commands[0]))

/* Names other tools give a command here. */
static const struct {
    const char *name, *means;
} command_aliases[] = {
    {"fit", "train"},
    {"run", "train"},
    {"pretrain", "train"},
    {"finetune", "train"},
    {"generate", "sample"},
    {"infer", "sample"},
    {"convert", "ckpt export"},
    {"validate", "config check"},
    {"tokenize", "data prepare"},
    {"size", "plan"},
    {"flight", "debug flight"},
    {"hang", "debug flight"},
    {"trace", "debug trace"},
    {"timeline", "debug trace"},
    {"estimate", "plan"},
};

/* "ckpt export" or "train" into buf. */
static const char *row_name(const command_row *r, char *buf, size_t n) {
    snprintf(buf, n, "%s%s%s", r->name, r->sub ? " " : "", r->sub ? r->sub : "");
    return buf;
}

/* Writes text whose lines after the first are indented by `indent`. */
static void put_indented(FILE *f, const char *text, int indent) {
    for (const char *p = text; *p;) {
        size_t n = strcspn(p, "\n");
        fprintf(f, "%.*s\n", (int)n, p);
        p += n;
        if (*p == '\n' && *++p)
            fprintf(f, "%*s", indent, "");
    }
}

/* Whether row r is one of `name` (NULL: any) and `sub` (NULL: any). */
static bool row_matches(const command_row *r, const char *name, const char *sub) {
    return (!name || strcmp(r->name, name) == 0) && (!sub || (r->sub && strcmp(r->sub, sub) == 0));
}

/* "train, config, ... or help": the command names, each once. */
static const char *command_list(char *buf, size_t n) {
    size_t at = 0;
    int count = 0, k = 0;
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < NCOMMANDS; i++) {
            bool seen = false;
            for (int j = 0; j < i; j++)
                seen = seen || strcmp(commands[j].name, commands[i].name) == 0;
            if (seen)
                continue;
            if (pass == 0)
                count++;
            else if (at < n)
                at += (size_t)snprintf(buf + at, n - at, "%s%s",
                                       k++ == 0     ? ""
                                       : k == count ? " or "
                                                    : ", ",
                                       commands[i].name);
        }
    return buf;
}

/* The usage of rows matching `name` (and `sub`; NULL: all of them; name
 * NULL: every command), then unless `brief` their summaries and the
 * options they take. */
static void print_usage(FILE *f, const char *name, const char *sub, bool brief) {
    unsigned takes = B(X_HELP);
    bool first = true;
    for (int i = 0; i < NCOMMANDS; i++) {
        const command_row *r = &commands[i];
        if (!row_matches(r, name, sub))
            continue;
        char words[64];
        row_name(r, words, sizeof words);
        int lead = fprintf(f, "%s shardrun %s ", first ? "usage:" : "      ", words);
        put_indented(f, r->args, lead);
        takes |= r->opts;
        first = false;
    }
    if (brief)
        return;
    if (!name) {
        fputs("       shardrun --help | --version\n\nTrain a GPT-2 or Llama-family transformer with fully sharded "
              "data parallelism.\n",
              f);
        takes |= B(X_VERSION);
    }
    fputs("\ncommands:\n", f);
    for (int i = 0; i < NCOMMANDS; i++) {
        const command_row *r = &commands[i];
        if (!row_matches(r, name, sub))
            continue;
        char words[64];
        fprintf(f, "  %-15s ", row_name(r, words, sizeof words));
        put_indented(f, r->summary, 18);
    }
    fputs("\noptions:\n", f);
    for (int x = 0; x < X_COUNT; x++) {
        if (!(takes & B(x)))
            continue;
        char head[64];
        if (options[x].letter)
            snprintf(head, sizeof head, "-%c, --%s%s%s", options[x].letter, options[x].name, options[x].arg ? " " : "",
                     options[x].arg ? options[x].arg : "");
        else
            snprintf(head, sizeof head, "    --%s%s%s", options[x].name, options[x].arg ? " " : "",
                     options[x].arg ? options[x].arg : "");
        fprintf(f, "  %-22s", head);
        if (strlen(head) > 22)
            fprintf(f, "\n  %-22s", "");
        put_indented(f, options[x].help, 24);
    }
    fputc('\n', f);
    fputs(exit_text, f);
}

/* The rows named `name` (count in *n; the first returned), or NULL. */
static const command_row *find_command(const char *name, int *n) {
    const command_row *first = NULL;
    *n = 0;
    for (int i = 0; i < NCOMMANDS; i++)
        if (strcmp(commands[i].name, name) == 0) {
            first = first ? first : &commands[i];
            (*n)++;
        }
    return first;
}

/* "list, verify, inspect or export": the subcommands of `name`. */
static const char *sub_list(const char *name, char *buf, size_t n) {
    int k = 0, count = 0;
    find_command(name, &count);
    size_t at = 0;
    buf[0] = '\0';
    for (int i = 0; i < NCOMMANDS && at < n; i++)
        if (strcmp(commands[i].name, name) == 0 && commands[i].sub) {
            k++;
            at += (size_t)snprintf(buf + at, n - at, "%s%s", k == 1 ? "" : k == count ? " or " : ", ", commands[i].sub);
        }
    return buf;
}

/* An unknown command word: 64, naming the closest command (or the one
 * another tool's word means) and the commands there are. */
static int unknown_command(const char *word) {
    const char *cand[NCOMMANDS];
    char names[64], list[256];
    int n = 0;
    for (int i = 0; i < NCOMMANDS; i++)
        if (i == 0 || strcmp(commands[i - 1].name, commands[i].name) != 0) /* rows of a command are adjacent */
            cand[n++] = commands[i].name;
    command_list(list, sizeof list);
    for (int i = 0; i < NCOMMANDS; i++) /* a subcommand typed alone: "shardrun export" */
        if (commands[i].sub && strcmp(commands[i].sub, word) == 0) {
            char buf[300];
            snprintf(buf, sizeof buf, "unknown command '%.64s'; did you mean 'shardrun %s'?", word,
                     row_name(&commands[i], names, sizeof names));
            return usage_error("%s", buf);
        }
    for (size_t i = 0; i < sizeof command_aliases / sizeof command_aliases[0]; i++)
        if (strcasecmp(word, command_aliases[i].name) == 0) {
            char buf[300];
            snprintf(buf, sizeof buf, "unknown command '%.64s'; did you mean 'shardrun %s'?", word,
                     command_aliases[i].means);
            return usage_error("%s", buf);
        }
    const char *near = sr_suggest(word, cand, n);
    char buf[600];
    if (near)
        snprintf(buf, sizeof buf, "unknown command '%.64s'; did you mean '%s'? (commands: %s)", word, near, list);
    else
        snprintf(buf, sizeof buf, "unknown command '%.64s'; expected %s", word, list);
    return usage_error("%s", buf);
}

/* The row for argv[1] (and argv[2] when the command has subcommands), or
 * an exit code in *rc: `ckpt` alone lists its subcommands (64), `ckpt
 * --help` prints their usage (0). */
static const command_row *pick_command(int argc, char **argv, int *rc) {
    int n;
    const command_row *r = find_command(argv[1], &n);
    *rc = 0;
    if (!r) {
        *rc = unknown_command(argv[1]);
        return NULL;
    }
    if (!r->sub)
        return r;
    char subs[200];
    sub_list(r->name, subs, sizeof subs);
    if (argc < 3 || argv[2][0] == '-') {
        if (argc >= 3 && (strcmp(argv[2], "--help") == 0 || strcmp(argv[2], "-h") == 0)) {
            print_usage(stdout, r->name, NULL, false);
            return NULL;
        }
        char buf[300];
        snprintf(buf, sizeof buf, "%s: expected a subcommand: %s", r->name, subs);
        *rc = fail(sr_error(SR_ERR_USAGE, "%s", buf));
        print_usage(stderr, r->name, NULL, true);
        return NULL;
    }
    const char *names[NCOMMANDS];
    int k = 0;
    for (int i = 0; i < NCOMMANDS; i++)
        if (strcmp(commands[i].name, r->name) == 0) {
            if (strcmp(commands[i].sub, argv[2]) == 0)
                return &commands[i];
            names[k++] = commands[i].sub;
        }
    const char *near = sr_suggest(argv[2], names, k);
    char buf[400];
    if (near)
        snprintf(buf, sizeof buf, "%s: unknown subcommand '%.64s'; did you mean '%s %s'? (expected %s)", r->name,
                 argv[2], r->name, near, subs);
    else
        snprintf(buf, sizeof buf, "%s: unknown subcommand '%.64s'; expected %s", r->name, argv[2], subs);
    *rc = usage_error("%s", buf);
    return NULL;
}

/* The first option given that `r` does not take: 64 naming what it
 * takes and which commands the option applies to; 0 when none. */
static int refuse_options(const command_row *r, const cli *c) {
    int bad = -1;
    for (int x = 0; x < X_COUNT; x++)
        if (c->given[x] && !(r->opts & B(x)) && x != X_HELP && (bad < 0 || c->order[x] < c->order[bad]))
            bad = x;
    if (bad < 0)
        return 0;
    char words[64], takes[400] = "", where[400] = "";
    size_t at = 0;
    int k = 0, total = __builtin_popcount(r->opts);
    for (int x = 0; x < X_COUNT; x++)
        if (r->opts & B(x)) {
            k++;
            at += (size_t)snprintf(takes + at, sizeof takes - at, "%s%s",
                                   k == 1       ? ""
                                   : k == total ? " and "
                                                : ", ",
                                   option_brief(x));
        }
    int owners = 0;
    for (int i = 0; i < NCOMMANDS; i++)
        owners += (commands[i].opts & B(bad)) != 0;
    at = 0;
    k = 0;
    for (int i = 0; i < NCOMMANDS; i++)
        if (commands[i].opts & B(bad)) {
            k++;
            at += (size_t)snprintf(where + at, sizeof where - at, "%s%s",
                                   k == 1        ? ""
                                   : k == owners ? " and "
                                                 : ", ",
                                   row_name(&commands[i], words, sizeof words));
        }
    char buf[1000];
    snprintf(buf, sizeof buf, "%s: takes %s%s; %s applies to shardrun %s only", row_name(r, words, sizeof words),
             total ? takes : "no options", total ? " only" : "", c->given[bad], where);
    return usage_error("%s", buf);
}

/* `shardrun help [COMMAND [SUBCOMMAND]]`: the usage on stdout. */
static int cmd_help(const char *sub, const cli *c) {
    (void)sub;
    if (c->nargs == 0) {
        print_usage(stdout, NULL, NULL, false);
        return 0;
    }
    if (c->nargs > 2)
        return usage_error("help: expected at most COMMAND and SUBCOMMAND, got extra argument '%s'", c->args[2]);
    int n;
    const command_row *r = find_command(c->args[0], &n);
    if (!r)
        return unknown_command(c->args[0]);
    if (c->nargs == 2) {
        bool found = false;
        for (int i = 0; i < NCOMMANDS; i++)
            found = found || (commands[i].sub && strcmp(commands[i].name, r->name) == 0 &&
                              strcmp(commands[i].sub, c->args[1]) == 0);
        if (!found) {
            char subs[200], buf[400];
            if (r->sub)
                snprintf(buf, sizeof buf, "help: %s has no subcommand '%.64s'; expected %s", r->name, c->args[1],
                         sub_list(r->name, subs, sizeof subs));
            else
                snprintf(buf, sizeof buf, "help: %s has no subcommands", r->name);
            return usage_error("%s", buf);
        }
    }
    print_usage(stdout, r->name, c->nargs == 2 ? c->args[1] : NULL, false);
    return 0;
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
    sr_signals_init(); /* SIGINT, SIGTERM, SIGHUP remove temporaries; SIGPIPE, SIGXFSZ ignored */
    sr_error_set_printer(print_error);
    sr_ckpt_guard_outputs();
    if (sr_testhook_init() != SR_OK)
        return fail(SR_ERR_CONFIG);
    int skip = check_skip_wait();
    if (skip <= 0)
        return skip == 0 ? 0 : fail(SR_ERR_CONFIG);
    if (argc < 2) {
        print_usage(stderr, NULL, NULL, false);
        return sr_status_exit_code(SR_ERR_USAGE);
    }
    /* Global options before any command. */
    const char *cmd = argv[1];
    if (cmd[0] == '-') {
        cli c;
        int rc = parse_options(argc, argv, &c);
        bool help = c.help;
        cli_free(&c);
        if (rc)
            return rc;
        if (help) {
            print_usage(stdout, NULL, NULL, false);
            return 0;
        }
        char list[256];
        return usage_error("expected a command: %s", command_list(list, sizeof list));
    }
    int rc;
    const command_row *r = pick_command(argc, argv, &rc);
    if (!r)
        return rc;
    int words = r->sub ? 2 : 1; /* command words consumed */
    cli c;
    rc = parse_options(argc - words, argv + words, &c);
    if (rc == 0 && c.help) {
        print_usage(stdout, r->name, r->sub, false);
        cli_free(&c);
        return 0;
    }
    if (rc == 0)
        rc = refuse_options(r, &c);
    if (rc == 0 && c.ranks && c.ranks_hi != c.ranks && strcmp(r->name, "plan") != 0)
        rc = usage_error("%s", "--ranks A-B (a range) applies to shardrun plan only");
    if (rc == 0)
        rc = r->run(r->sub, &c);
    cli_free(&c);
    return report_allocations(rc);
}
