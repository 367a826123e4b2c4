/* main_impl.h — what the main module's files share (main.c: the command
 * table and dispatch; main_options.c: the option table and the parse;
 * main_cmds.c: the handlers): the options' indices and rows, the parsed
 * command line.  Internal to the module. */
#ifndef SR_MAIN_IMPL_H
#define SR_MAIN_IMPL_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "evalcmd.h"
#include "plan.h"
#include "prepare.h"
#include "sample.h"
#include "status.h"

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
    X_VAL_FRACTION,
    X_NO_ECHO,
    X_SHARD_TOKENS,
    X_PREFIX,
    X_NAME,
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
    X_TASK,
    X_DEVICE,
    X_BATCH,
    X_MDOC,
    X_VERBOSE,
    X_HELP,
    X_VERSION,
    X_COUNT
};
#define B(x) ((uint64_t)1 << (x))
_Static_assert(X_COUNT <= 64, "the option sets are 64-bit masks");
#define OPT_LONG_BASE 1000 /* getopt_long's value of an option without a letter: base + X_* */

typedef struct {
    const char *name; /* the long name */
    char letter;      /* its short form, 0: none */
    const char *arg;  /* the argument as the help names it, NULL: takes none */
    const char *help; /* lines separated by \n */
    bool named_short; /* messages name it by its letter (-o), else by its long name */
} option_row;

/* The option table (main_options.c). */
extern const option_row cli_options[X_COUNT];

typedef struct {
    char **sets;
    int nsets;
    const char *output;
    bool mdoc, help, verbose;
    int ranks;    /* --ranks N; 0 = not given */
    int ranks_hi; /* --ranks A-B: B (ranks is A); else = ranks */
    sr_plan_opts plan;
    int format; /* --format: sr_export_format (SR_EXPORT_AUTO when not given) */
    sr_sample_opts sample;
    sr_prepare_opts prepare; /* data prepare's own options (--tokenizer, --threads: in sample) */
    sr_eval_opts eval;       /* eval's own (--task, --device, --batch; --json in plan, the rest in sample) */
    /* data prepare's --name groups: each name and the index in args of its
     * first input (its inputs run to the next group's) */
    const char *names[SR_MIX_MAX_SOURCES];
    int name_first[SR_MIX_MAX_SOURCES], nnames;
    const char *given[X_COUNT]; /* each option given: its name for messages (option_brief), NULL: not given */
    int order[X_COUNT];         /* the argv index just after its first use */
    char **args;                /* positional arguments after the command words */
    int nargs;
} cli;

/* In a multi-rank job, errors every rank hits alike (job file, data) are
 * printed by rank 0 only (main.c sets it). */
extern bool cli_quiet_rank;

/* "-o" or "--set": how a message names option x. */
const char *cli_option_brief(int x);
/* Prints the recorded error of st as this rank reports it (the printer of
 * sr_error_emit). */
void cli_print_error(sr_status st);
int cli_fail(sr_status st);
int cli_usage_error(const char *fmt, const char *arg);
/* One of `shardrun sample`'s options into c->sample. */
int cli_sample_option(cli *c, int x, const char *arg);
/* One of `shardrun data prepare`'s own options into c->prepare. */
int cli_prepare_option(cli *c, int x, const char *arg);
/* One of `shardrun plan`'s options into c->plan. */
int cli_plan_option(cli *c, int x, const char *arg);
/* Parses options after the command words; positional arguments collected.
 * Which options the command takes is checked by the caller (the command
 * table). */
int cli_parse_options(int argc, char **argv, cli *c);
/* SHARDRUN_TEST_ALLOC_FAIL sweeps need to know how many allocations a run
 * makes, and the first allocation of each call site: with the hook set,
 * both go to stderr at the end. */
int cli_report_allocations(int rc);
void cli_free(cli *c);
int cmd_train(const char *sub, const cli *c);
int cmd_config(const char *sub, const cli *c);
int cmd_eval(const char *sub, const cli *c);
int cmd_data(const char *sub, const cli *c);
int cmd_ckpt(const char *sub, const cli *c);
int cmd_sample(const char *sub, const cli *c);
int cmd_report(const char *sub, const cli *c);
int cmd_plan(const char *sub, const cli *c);
int cmd_debug(const char *sub, const cli *c);

#endif
