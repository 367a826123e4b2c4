/* main_options.c — the command line's options: the option table (every
 * option once, with its help; getopt_long's table is built from it), the
 * parse of argv into a cli (each option given, in order; the handlers'
 * own parsers called for theirs), an unknown option's suggestion, and how
 * the command line reports a failure.  Part of the main module
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

const option_row cli_options[X_COUNT] = {
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
    [X_SEED] =
        {"seed", 0, "S",
         "sample: the seed of the draws (default 1);\ndata prepare: the seed of --val-fraction's choice (default "
         "1)"},
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
    [X_VAL_TOKENS] = {"val-tokens", 0, "N",
                      "data prepare: the first N tokens form the validation shard\n(the document where they end is cut "
                      "between the sets)"},
    [X_VAL_FRACTION] = {"val-fraction", 0, "F",
                        "data prepare: each document goes to validation with\nprobability F (0 < F < 1), whole, by a "
                        "hash of --seed\nand its index"},
    [X_NO_ECHO] = {"no-echo", 0, NULL, "sample: print only the continuation, not the prompt before it"},
    [X_SHARD_TOKENS] = {"shard-tokens", 0, "N", "data prepare: tokens per shard (default 100000000)"},
    [X_PREFIX] = {"prefix", 0, "NAME", "data prepare: the shards' name prefix (default data, or --name)"},
    [X_NAME] = {"name", 0, "NAME",
                "data prepare: write these inputs as the data.mixture source NAME, added to the "
                "sources the output directory's index.json lists"},
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
    [X_JSON] = {"json", 0, NULL,
                "plan --ledger: print the ledger as one JSON object;\neval: each task's scores as one JSON object a "
                "line"},
    [X_GEMM_TFLOPS] = {"gemm-tflops", 0, "T", "plan: the roofline's GEMM rate, TFLOP/s (default 782)"},
    [X_HBM_TBPS] = {"hbm-tbps", 0, "TB", "plan: the roofline's memory rate, TB/s (default 4.0)"},
    [X_CALIBRATION] = {"calibration", 0, "FILE",
                       "plan: rates and efficiency per op family measured on a GPU\n(tests/gpu/calibration/): the "
                       "step time predicted"},
    [X_TASK] = {"task", 0, "FILE",
                "eval: a multiple-choice task file (HellaSwag's JSON Lines:\nctx, endings, label), repeatable"},
    [X_DEVICE] = {"device", 0, "D", "eval: cpu, cuda or auto (default: a GPU when one is usable,\nelse the CPU)"},
    [X_BATCH] = {"batch", 0, "N", "eval: sequences per forward (default: up to 64, as 1 GiB\nof activations allows)"},
    [X_MDOC] = {"mdoc", 0, NULL, "config keys: print the list as an mdoc section"},
    [X_VERBOSE] = {"verbose", 'v', NULL,
                   "train: also the lines a run seldom needs (a one-process CPU\nrun's flight-recorder line)"},
    [X_HELP] = {"help", 'h', NULL, "print this help (or a command's) and exit"},
    [X_VERSION] = {"version", 'V', NULL, "print the version and exit"},
};

/* "-o" or "--set": how a message names option x. */
const char *cli_option_brief(int x) {
    static char buf[X_COUNT][40];
    if (cli_options[x].named_short)
        snprintf(buf[x], sizeof buf[x], "-%c", cli_options[x].letter);
    else
        snprintf(buf[x], sizeof buf[x], "--%s", cli_options[x].name);
    return buf[x];
}

/* Prints the recorded error of st as this rank reports it (the printer of
 * sr_error_emit). */
void cli_print_error(sr_status st) {
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
    else if (!(cli_quiet_rank && same_everywhere))
        sr_log_error("%s", msg[0] ? msg : sr_status_str(st));
    if (st == SR_ERR_USAGE)
        fputs("Try 'shardrun --help'.\n", stderr);
    sr_error_final_done();
}

int cli_fail(sr_status st) {
    if (!sr_error_emitted())
        cli_print_error(st);
    return sr_status_exit_code(st);
}

int cli_usage_error(const char *fmt, const char *arg) {
    char buf[1024];
    snprintf(buf, sizeof buf, fmt, arg);
    return cli_fail(sr_error(SR_ERR_USAGE, "%s", buf));
}

/* An option getopt_long does not know: a usage error with the closest
 * option's name when one is close. */
static int unknown_option(const char *given) {
    const char *names[X_COUNT];
    for (int x = 0; x < X_COUNT; x++)
        names[x] = cli_options[x].name;
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
    return cli_usage_error("%s", buf);
}

/* getopt_long's tables from the option table. */
static void getopt_tables(struct option longopts[X_COUNT + 1], char shortopts[2 * X_COUNT + 3]) {
    size_t ns = 0;
    shortopts[ns++] = '-'; /* positional arguments in order (data prepare's --name groups) */
    shortopts[ns++] = ':';
    for (int x = 0; x < X_COUNT; x++) {
        longopts[x] = (struct option){cli_options[x].name, cli_options[x].arg ? required_argument : no_argument, NULL,
                                      cli_options[x].letter ? cli_options[x].letter : OPT_LONG_BASE + x};
        if (cli_options[x].letter) {
            shortopts[ns++] = cli_options[x].letter;
            if (cli_options[x].arg)
                shortopts[ns++] = ':';
        }
    }
    shortopts[ns] = '\0';
    longopts[X_COUNT] = (struct option){NULL, 0, NULL, 0};
}

/* --set KEY=VALUE; `--set train.lr 3e-4` (the value would become the job
 * file) is refused with the spelling that works. */
static int set_option(cli *c, char *arg, int argc, char **argv) {
    if (strchr(arg, '=')) {
        c->sets[c->nsets++] = arg;
        return 0;
    }
    char buf[800];
    const char *next = optind < argc && argv[optind][0] != '-' ? argv[optind] : NULL;
    if (next)
        snprintf(buf, sizeof buf,
                 "--set %.200s: expected key=value, with no space around '=' (hint: --set %.200s=%.200s)", arg, arg,
                 next);
    else
        snprintf(buf, sizeof buf, "--set %.200s: expected key=value (hint: --set %.200s=VALUE)", arg, arg);
    return cli_usage_error("%s", buf);
}

/* --ranks N, or A-B (plan's table). */
static int ranks_option(cli *c, const char *arg) {
    char *end;
    long v = strtol(arg, &end, 10), w = v;
    if (*end == '-' && end > arg) /* A-B: plan's table */
        w = strtol(end + 1, &end, 10);
    if (!*arg || *end || v < 1 || v > 1048576 || w < v || w > 1048576)
        return cli_usage_error("--ranks %s: expected a number of ranks from 1 to 1048576, or a range A-B "
                               "(plan)",
                               arg);
    c->ranks = (int)v;
    c->ranks_hi = (int)w;
    return 0;
}

/* Option x with its argument (optarg) into c; nonzero: the exit status. */
static int apply_option(cli *c, int x, int argc, char **argv) {
    switch (x) {
    case X_SET:
        return set_option(c, optarg, argc, argv);
    case X_OUTPUT:
        c->output = optarg;
        return 0;
    case X_MDOC:
        c->mdoc = true;
        return 0;
    case X_VERBOSE:
        c->verbose = true;
        return 0;
    case X_HELP:
        c->help = true;
        return 0;
    case X_VERSION:
        printf("shardrun %s\n", PACKAGE_VERSION);
        exit(0);
    case X_RANKS:
        return ranks_option(c, optarg);
    case X_GPUS_PER_NODE:
    case X_DEVICE_MEM:
    case X_HOST_MEM:
    case X_DISK_MBPS:
    case X_TFLOPS:
    case X_GEMM_TFLOPS:
    case X_HBM_TBPS:
        return cli_plan_option(c, x, optarg);
    case X_LEDGER:
        c->plan.ledger = true;
        return 0;
    case X_JSON:
        c->plan.json = true;
        return 0;
    case X_CALIBRATION:
        c->plan.calibration = optarg;
        return 0;
    case X_FORMAT:
        if ((c->format = sr_export_format_parse(optarg)) < 0)
            return cli_usage_error("--format %s: expected hf, safetensors or llmc", optarg);
        return 0;
    case X_FIELD:
    case X_DOC_TOKEN:
    case X_VAL_TOKENS:
    case X_VAL_FRACTION:
    case X_SHARD_TOKENS:
    case X_PREFIX:
    case X_NAME:
        return cli_prepare_option(c, x, optarg);
    case X_TASK:
        if (c->eval.ntasks == SR_EVAL_MAX_TASKS)
            return cli_usage_error("--task %s: at most 32 task files", optarg);
        c->eval.tasks[c->eval.ntasks++] = optarg;
        return 0;
    case X_DEVICE:
        if (strcmp(optarg, "auto") == 0)
            c->eval.device = SR_DEVICE_AUTO;
        else if (strcmp(optarg, "cpu") == 0)
            c->eval.device = SR_DEVICE_CPU;
        else if (strcmp(optarg, "cuda") == 0)
            c->eval.device = SR_DEVICE_CUDA;
        else
            return cli_usage_error("--device %s: expected cpu, cuda or auto", optarg);
        return 0;
    case X_BATCH: {
        char *end;
        long v = strtol(optarg, &end, 10);
        if (!*optarg || *end || v < 1 || v > 4096)
            return cli_usage_error("--batch %s: expected a number of sequences from 1 to 4096", optarg);
        c->eval.batch = (int)v;
        return 0;
    }
    case X_NO_ECHO:
        c->sample.no_echo = true;
        return 0;
    default: /* the sample options (--tokenizer, --threads: data prepare's too) */
        return cli_sample_option(c, x, optarg);
    }
}

/* Parses options after the command words; positional arguments collected.
 * Which options the command takes is checked by the caller (the command
 * table). */
int cli_parse_options(int argc, char **argv, cli *c) {
    memset(c, 0, sizeof *c);
    c->sets = sr_calloc((size_t)argc + 1, sizeof *c->sets);
    c->args = sr_calloc((size_t)argc + 1, sizeof *c->args);
    if (!c->sets || !c->args)
        return cli_fail(sr_error_oom("the command line"));
    c->sample = (sr_sample_opts){NULL, NULL, 256, 0.8, 40, 1, NULL, 0, false};
    struct option longopts[X_COUNT + 1];
    char shortopts[2 * X_COUNT + 3];
    getopt_tables(longopts, shortopts);
    optind = 1;
    opterr = 0;
    int ch;
    while ((ch = getopt_long(argc, argv, shortopts, longopts, NULL)) != -1) {
        if (ch == ':')
            return cli_usage_error("option '%s' needs an argument", argv[optind - 1]);
        if (ch == 1) { /* a positional argument, where it stands */
            c->args[c->nargs++] = optarg;
            continue;
        }
        int x = -1;
        for (int k = 0; k < X_COUNT && x < 0; k++)
            if (ch == (cli_options[k].letter ? cli_options[k].letter : OPT_LONG_BASE + k))
                x = k;
        if (x < 0)
            return unknown_option(argv[optind - 1]);
        if (!c->given[x]) {
            c->given[x] = cli_option_brief(x);
            c->order[x] = optind;
        }
        int rc = apply_option(c, x, argc, argv);
        if (rc)
            return rc;
    }
    for (int i = optind; i < argc; i++)
        c->args[c->nargs++] = argv[i];
    return 0;
}

void cli_free(cli *c) {
    free(c->sets);
    free(c->args);
}
