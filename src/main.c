/* main.c — the command line's command table and dispatch, and the only
 * place that exits.
 *
 * main owns two tables: the options (main_options.c: name, letter,
 * argument, help; the getopt_long table is built from it) and the
 * commands (here: name, subcommand, the options it takes, handler, usage,
 * summary).  Dispatch, --help, `shardrun help [COMMAND]`, `COMMAND
 * --help`, the subcommand lists and the refusal of an option a command
 * does not take all read them, so a command is written down once.  The
 * handlers and their own option parsers are main_cmds.c's.  Every failure
 * is one message on stderr and an exit status from the sysexits table in
 * status.h (ARCHITECTURE.md §6). */
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

static const char exit_text[] = "exit status: 0 done, 1 training failed, 64 usage, 65 bad data or checkpoint,\n"
                                "66 missing input, 69 peer failed, 70 internal, 73 cannot create output,\n"
                                "74 I/O error, 75 preempted (run again), 78 bad job file or launch;\n"
                                "debug flight: 0 consistent, 2 a culprit named, 65 a malformed dump,\n"
                                "66 a dump missing.\n"
                                "See shardrun(1) and shardrun.yaml(5).\n";

/* In a multi-rank job, errors every rank hits alike (job file, data) are
 * printed by rank 0 only; peer, I/O and internal errors by every rank. */
bool cli_quiet_rank = false;

/* ------------------------------------------------------------------------ */
/* the command table: dispatch, usage, --help and the options each command
 * takes come from here alone */

static int cmd_help(const char *sub, const cli *c);

#define SAMPLE_OPTS                                                                                                    \
    (B(X_PROMPT) | B(X_PROMPT_TOKENS) | B(X_TOKENS) | B(X_TEMPERATURE) | B(X_TOP_K) | B(X_SEED) | B(X_TOKENIZER) |     \
     B(X_THREADS) | B(X_NO_ECHO))
#define PLAN_OPTS                                                                                                      \
    (B(X_SET) | B(X_RANKS) | B(X_GPUS_PER_NODE) | B(X_DEVICE_MEM) | B(X_HOST_MEM) | B(X_DISK_MBPS) | B(X_TFLOPS) |     \
     B(X_LEDGER) | B(X_JSON) | B(X_GEMM_TFLOPS) | B(X_HBM_TBPS) | B(X_CALIBRATION))

typedef struct {
    const char *name, *sub; /* "ckpt", "export"; sub NULL: a one-word command */
    uint64_t opts;          /* the options it takes (B(X_*)); --help always */
    int (*run)(const char *sub, const cli *c);
    const char *args;    /* its usage after the command words; \n continues the line */
    const char *summary; /* one line for the command list; \n continues */
} command_row;

static const command_row commands[] = {
    {"train", NULL, B(X_SET) | B(X_VERBOSE), cmd_train, "[JOB.yaml] [--set KEY=VALUE]... [-v]",
     "train per JOB.yaml (without one: the embedded default job)"},
    {"config", "check", B(X_SET) | B(X_RANKS), cmd_config, "JOB.yaml [--ranks N] [--set KEY=VALUE]...",
     "validate a job file; exit 0 when it is valid"},
    {"config", "show", B(X_SET) | B(X_RANKS), cmd_config, "[JOB.yaml] [--ranks N] [--set KEY=VALUE]...",
     "print the effective job with every default filled in"},
    {"config", "keys", B(X_MDOC), cmd_config, "[--mdoc]", "list every job-file key with type, default and meaning"},
    {"data", "prepare",
     B(X_OUTPUT) | B(X_TOKENIZER) | B(X_FIELD) | B(X_DOC_TOKEN) | B(X_VAL_TOKENS) | B(X_VAL_FRACTION) | B(X_SEED) |
         B(X_SHARD_TOKENS) | B(X_PREFIX) | B(X_NAME) | B(X_THREADS),
     cmd_data,
     "[-o OUT] [--tokenizer PATH] [--field NAME] [--doc-token NAME]\n[--val-fraction F [--seed S] | --val-tokens N] "
     "[--shard-tokens N]\n[--prefix NAME] [--name SOURCE] [--threads N] FILE...",
     "turn text (files, JSON Lines; gzip or not) into llm.c token\nshards: byte-level, or with a BPE tokenizer"},
    {"ckpt", "list", 0, cmd_ckpt, "DIR", "list the checkpoints of a checkpoint.dir"},
    {"ckpt", "verify", 0, cmd_ckpt, "PATH", "check every SHA-256 of a checkpoint (or of all in a dir)"},
    {"ckpt", "inspect", 0, cmd_ckpt, "PATH", "summarize a checkpoint's manifest"},
    {"ckpt", "show", 0, cmd_ckpt, "PATH", "the same as inspect (a data.mixture's per-source cursors\namong the rest)"},
    {"ckpt", "export", B(X_OUTPUT) | B(X_FORMAT), cmd_ckpt, "CKPT -o DIR/|FILE.safetensors|FILE.bin [--format F]",
     "write a checkpoint's model (CKPT: a step_* directory or a\ncheckpoint.dir, its newest that verifies) for Hugging "
     "Face\n(-o DIR/: model.safetensors + config.json), as a safetensors\nfile (-o FILE.safetensors) or as an llm.c "
     "model file\n(-o FILE.bin)"},
    {"sample", NULL, SAMPLE_OPTS, cmd_sample,
     "CKPT [--prompt TEXT | --prompt-tokens 1,2,3] [--tokens N]\n[--temperature T] [--top-k K] [--seed S] "
     "[--tokenizer FILE] [--threads N] [--no-echo]",
     "generate text on the CPU from CKPT: a checkpoint, a\ncheckpoint.dir (its newest that verifies) or a Hugging "
     "Face\nGPT-2 or Llama directory (config.json + model.safetensors\nor its sharded index)"},
    {"eval", NULL, B(X_TASK) | B(X_JSON) | B(X_TOKENIZER) | B(X_THREADS) | B(X_DEVICE) | B(X_BATCH), cmd_eval,
     "CKPT --task FILE [--task FILE]... [--json] [--tokenizer FILE]\n[--threads N] [--device cpu|cuda|auto] [--batch "
     "N]",
     "score multiple-choice tasks (HellaSwag's JSON Lines) by the\nlog-likelihood CKPT gives each ending: acc and "
     "acc_norm;\nCKPT: a checkpoint, a checkpoint.dir (its newest that\nverifies) or a Hugging Face directory"},
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
    sr_line l = sr_line_on(buf, n);
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
            else
                sr_line_add(&l, "%s%s", k++ == 0 ? "" : k == count ? " or " : ", ", commands[i].name);
        }
    return buf;
}

/* The usage of rows matching `name` (and `sub`; NULL: all of them; name
 * NULL: every command), then unless `brief` their summaries and the
 * options they take. */
static void print_usage(FILE *f, const char *name, const char *sub, bool brief) {
    uint64_t takes = B(X_HELP);
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
        if (cli_options[x].letter)
            snprintf(head, sizeof head, "-%c, --%s%s%s", cli_options[x].letter, cli_options[x].name,
                     cli_options[x].arg ? " " : "", cli_options[x].arg ? cli_options[x].arg : "");
        else
            snprintf(head, sizeof head, "    --%s%s%s", cli_options[x].name, cli_options[x].arg ? " " : "",
                     cli_options[x].arg ? cli_options[x].arg : "");
        fprintf(f, "  %-22s", head);
        if (strlen(head) >= 22) /* a head of the column's width would touch its text */
            fprintf(f, "\n  %-22s", "");
        put_indented(f, cli_options[x].help, 24);
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
    sr_line l = sr_line_on(buf, n);
    for (int i = 0; i < NCOMMANDS; i++)
        if (strcmp(commands[i].name, name) == 0 && commands[i].sub) {
            k++;
            sr_line_add(&l, "%s%s", k == 1 ? "" : k == count ? " or " : ", ", commands[i].sub);
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
            return cli_usage_error("%s", buf);
        }
    for (size_t i = 0; i < sizeof command_aliases / sizeof command_aliases[0]; i++)
        if (strcasecmp(word, command_aliases[i].name) == 0) {
            char buf[300];
            snprintf(buf, sizeof buf, "unknown command '%.64s'; did you mean 'shardrun %s'?", word,
                     command_aliases[i].means);
            return cli_usage_error("%s", buf);
        }
    const char *near = sr_suggest(word, cand, n);
    char buf[600];
    if (near)
        snprintf(buf, sizeof buf, "unknown command '%.64s'; did you mean '%s'? (commands: %s)", word, near, list);
    else
        snprintf(buf, sizeof buf, "unknown command '%.64s'; expected %s", word, list);
    return cli_usage_error("%s", buf);
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
        *rc = cli_fail(sr_error(SR_ERR_USAGE, "%s", buf));
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
    *rc = cli_usage_error("%s", buf);
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
    char words[64], takes[400], where[400];
    sr_line lt = SR_LINE(takes), lw = SR_LINE(where);
    int k = 0, total = __builtin_popcountll(r->opts);
    for (int x = 0; x < X_COUNT; x++)
        if (r->opts & B(x)) {
            k++;
            sr_line_add(&lt, "%s%s", k == 1 ? "" : k == total ? " and " : ", ", cli_option_brief(x));
        }
    int owners = 0;
    for (int i = 0; i < NCOMMANDS; i++)
        owners += (commands[i].opts & B(bad)) != 0;
    k = 0;
    for (int i = 0; i < NCOMMANDS; i++)
        if (commands[i].opts & B(bad)) {
            k++;
            sr_line_add(&lw, "%s%s",
                        k == 1        ? ""
                        : k == owners ? " and "
                                      : ", ",
                        row_name(&commands[i], words, sizeof words));
        }
    char buf[1000];
    snprintf(buf, sizeof buf, "%s: takes %s%s; %s applies to shardrun %s only", row_name(r, words, sizeof words),
             total ? takes : "no options", total ? " only" : "", c->given[bad], where);
    return cli_usage_error("%s", buf);
}

/* `shardrun help [COMMAND [SUBCOMMAND]]`: the usage on stdout. */
static int cmd_help(const char *sub, const cli *c) {
    (void)sub;
    if (c->nargs == 0) {
        print_usage(stdout, NULL, NULL, false);
        return 0;
    }
    if (c->nargs > 2)
        return cli_usage_error("help: expected at most COMMAND and SUBCOMMAND, got extra argument '%s'", c->args[2]);
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
            return cli_usage_error("%s", buf);
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
    sr_startup_mark(); /* the start-up split's zero (startup.h) */
    sr_signals_init(); /* SIGINT, SIGTERM, SIGHUP remove temporaries; SIGPIPE, SIGXFSZ ignored */
    sr_error_set_printer(cli_print_error);
    sr_ckpt_guard_outputs();
    if (sr_testhook_init() != SR_OK)
        return cli_fail(SR_ERR_CONFIG);
    int skip = check_skip_wait();
    if (skip <= 0)
        return skip == 0 ? 0 : cli_fail(SR_ERR_CONFIG);
    if (argc < 2) {
        print_usage(stderr, NULL, NULL, false);
        return sr_status_exit_code(SR_ERR_USAGE);
    }
    /* Global options before any command. */
    const char *cmd = argv[1];
    if (cmd[0] == '-') {
        cli c;
        int rc = cli_parse_options(argc, argv, &c);
        bool help = c.help;
        cli_free(&c);
        if (rc)
            return rc;
        if (help) {
            print_usage(stdout, NULL, NULL, false);
            return 0;
        }
        char list[256];
        return cli_usage_error("expected a command: %s", command_list(list, sizeof list));
    }
    int rc;
    const command_row *r = pick_command(argc, argv, &rc);
    if (!r)
        return rc;
    int words = r->sub ? 2 : 1; /* command words consumed */
    cli c;
    rc = cli_parse_options(argc - words, argv + words, &c);
    if (rc == 0 && c.help) {
        print_usage(stdout, r->name, r->sub, false);
        cli_free(&c);
        return 0;
    }
    if (rc == 0)
        rc = refuse_options(r, &c);
    if (rc == 0 && c.ranks && c.ranks_hi != c.ranks && strcmp(r->name, "plan") != 0)
        rc = cli_usage_error("%s", "--ranks A-B (a range) applies to shardrun plan only");
    if (rc == 0)
        rc = r->run(r->sub, &c);
    cli_free(&c);
    return cli_report_allocations(rc);
}
