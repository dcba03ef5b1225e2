/* memplan_front.h — the planning front end as one call: memplan_front(argc, argv) is what
 * `memplan ARGS` does (plan, auto, models, gpus, alloc, help; run, validate and bench exec
 * memplan-exec), writing its output on stdout and stderr and returning the exit status. The
 * command line's main (cli/memplan_main.c), the Python package and the WebAssembly module
 * (cli/memplan_api.c) all go through it, so they parse, validate and write alike. */
#ifndef MEMPLAN_FRONT_H
#define MEMPLAN_FRONT_H

#include <getopt.h>

/* The tool's version: `memplan --version`, the Python package's and the web page's. */
#define MEMPLAN_VERSION "0.1.0"

/* 0, 1 (an output failed) or 2 (a usage error, one line on stderr or in cli_usage_capture's buffer). */
int memplan_front(int argc, char **argv);

/* The options a command takes beyond the shared planning ones (cli_setup_options): plan and
 * auto's, or models and gpus' (json, export, family, help); NULL for another command. */
const struct option *memplan_command_options(const char *cmd);

#endif
