/* cli_setup.h — the flags every planning subcommand shares (model, training, cluster,
 * strategies, output), parsed with getopt_long, validated, and resolved into planner specs.
 * Subcommands add their own long options through `extra`. */
#ifndef CLI_SETUP_H
#define CLI_SETUP_H

#include <getopt.h>
#include <stdio.h>

#include "plan_gpu.h"
#include "plan_model.h"
#include "plan_train.h"

typedef struct {
    ModelSpec model;
    int have_model;
    TrainSpec train;
    ClusterSpec cluster;
    unsigned strategies;     /* bit per StrategyKind */
    int json;
    const char *json_path;   /* --json[=FILE]: NULL = stdout */
} CliSetup;

/* Handler for subcommand options: returns 0 if consumed, 1 if not its option, -1 on error
 * (message in err). */
typedef int (*CliExtraFn)(void *ctx, int opt, const char *arg, char *err, size_t errlen);

typedef struct {
    const struct option *options;  /* terminated by {0} */
    CliExtraFn handle;
    void *ctx;
} CliExtra;

/* Parses argv (after the subcommand). Returns 0, or 2 after printing a one-line error, or 1
 * when --help was printed. need_model: a model is required. */
int cli_parse_setup(int argc, char **argv, const char *cmd, CliSetup *s, const CliExtra *extra,
                    int need_model);
void cli_setup_free(CliSetup *s);
void cli_print_setup_help(FILE *f);
/* Prints "memplan: <msg>" and returns 2 (usage error). */
int cli_usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
