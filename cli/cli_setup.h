/* cli_setup.h — the flags every planning subcommand shares (model, training, cluster,
 * strategies, output), parsed with getopt_long, validated, and resolved into planner specs.
 * Subcommands add their own long options through `extra`. */
#ifndef CLI_SETUP_H
#define CLI_SETUP_H

#include <getopt.h>
#include <stdio.h>

#include "cli_config.h"
#include "plan_gpu.h"
#include "plan_model.h"
#include "plan_train.h"

#define CLI_GIVEN_MAX 96   /* >= the shared options (cli_setup.c BASE_OPTIONS) */

typedef struct {
    ModelSpec model;
    int have_model;
    TrainSpec train;
    ClusterSpec cluster;
    unsigned strategies;     /* bit per StrategyKind */
    int json;
    const char *json_path;   /* --json[=FILE]: NULL = stdout */
    const char *model_arg;   /* --model as given (a zoo name or a path), NULL if none */
    const char *given[CLI_GIVEN_MAX];   /* per shared option (cli_setup_given): its value, "" for a switch */
    CliConfig *config;       /* --config: what the file amounts to, NULL if none */
    long long seq_context;   /* > 0: no --seq, and the model's context (this) is longer than the default
                                sequence memplan planned instead (CLI_DEFAULT_SEQ_MAX) */
} CliSetup;

/* The sequence planned when --seq is not given: the model's context, at most this many tokens (a
   context of 128k or 256k tokens is what a model can attend to, not what a job trains at). */
#define CLI_DEFAULT_SEQ_MAX 4096

/* Handler for subcommand options: returns 0 if consumed, 1 if not its option, -1 on error
 * (message in err). */
typedef int (*CliExtraFn)(void *ctx, int opt, const char *arg, char *err, size_t errlen);

typedef struct {
    const struct option *options;  /* terminated by {0} */
    CliExtraFn handle;
    void *ctx;
    int config_ok;                 /* the command reads --config (plan, auto); others refuse it */
} CliExtra;

/* Parses argv (after the subcommand). Returns 0, or 2 after printing a one-line error, or 1
 * when --help was printed. need_model: a model is required. With --config FILE the flags the file
 * amounts to (cli_config.h) are inserted before argv's, those argv gives excepted, so the same
 * checks apply to both; its warning line goes to stderr; an error about a flag the file gave
 * names the file's key. The handlers of `extra` see the command line's options twice then. */
int cli_parse_setup(int argc, char **argv, const char *cmd, CliSetup *s, const CliExtra *extra,
                    int need_model);
void cli_setup_free(CliSetup *s);
/* The setup's own '#' lines before a plan (the default sequence when it is not the model's
   context), and the same as fields of the report's "train" object. */
void cli_setup_notes(FILE *f, const CliSetup *s);
struct cJSON;
void cli_setup_notes_json(struct cJSON *report, const CliSetup *s);
/* The shared options cli_parse_setup takes (terminated by {0}): for callers that build a command
 * line from named settings (cli/memplan_api.c). */
const struct option *cli_setup_options(void);
/* The value of the shared option `name` ("gpus", no dashes) if it was given ("" for a switch),
 * else NULL: for commands that must refuse the planning flags they do not honour. */
const char *cli_setup_given(const CliSetup *s, const char *name);
void cli_print_setup_help(FILE *f);
/* The allocator settings from the environment as torch reads them (PYTORCH_CUDA_ALLOC_CONF,
 * else PYTORCH_ALLOC_CONF): the value and *name, or NULL. */
const char *cli_alloc_conf_env(const char **name);
/* A size flag's value without a unit ('5' would be 5 bytes, never what was meant); 0 passes. */
int cli_bare_number(const char *a);
/* Prints "memplan: <msg>" and returns 2 (usage error). While a capture buffer is set, the first
 * message goes there instead (without "memplan: "), so that ranks of an MPI job can agree on
 * who failed before anything is printed (cli_ranks.h). */
int cli_usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void cli_usage_capture(char *buf, size_t len);   /* NULL: print again */

#endif
