/* cli_auto.h — the flags of CPU offload, host memory and auto's safety margin (plan and auto),
 * their help text, and how they apply to the resolved setup. */
#ifndef CLI_AUTO_H
#define CLI_AUTO_H

#include <getopt.h>
#include <stdio.h>

#include "cli_setup.h"
#include "plan_auto.h"

enum { CLI_OPT_OFFLOAD = 2100, CLI_OPT_HOST_MEM, CLI_OPT_HOST_BW, CLI_OPT_MIN_HEADROOM };
#define CLI_AUTO_OPTIONS                                                    \
    {"offload", required_argument, 0, CLI_OPT_OFFLOAD},                     \
    {"host-mem", required_argument, 0, CLI_OPT_HOST_MEM},                   \
    {"host-bw", required_argument, 0, CLI_OPT_HOST_BW},                     \
    {"min-headroom", required_argument, 0, CLI_OPT_MIN_HEADROOM}

typedef struct {
    int offload;             /* -1: not given */
    double host_mem;         /* bytes per node, 0: preset default */
    double host_bw;          /* GB/s, 0: preset */
    double headroom;         /* -1: default rule */
    int headroom_is_frac;
    const char *host_mem_arg, *host_bw_arg, *headroom_arg;   /* as given (for the command to paste), NULL if not */
} CliAutoOpts;

void cli_auto_opts_init(CliAutoOpts *o);
/* 0 consumed, 1 not ours, -1 error (message in err). */
int cli_auto_opt(CliAutoOpts *o, int opt, const char *arg, char *err, size_t errlen);
/* Applies the flags to the setup (and auto's spec). plan: --offload keeps the strategies that
 * offer it. auto: searches offload unless --offload is given, precision regimes unless
 * --precision is, and keeps --batch, --act-ckpt and --grad-accum when given (a --global-batch
 * must then split into whole micro-batches). Returns 0, or 2 after a one-line error. */
int cli_auto_apply(const CliAutoOpts *o, CliSetup *s, AutoSpec *a, int auto_mode);
void cli_auto_help(FILE *f);

#endif
