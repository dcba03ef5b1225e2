/* cli_ranks.h — the executor's commands agree before any work. Every rank parses and checks
 * its own arguments and output paths (a model file may be missing on one node only; a path may
 * be unwritable on one), then all ranks exchange their status and message in one collective:
 * every rank learns at once that a peer failed, rank 0 prints the failing ranks' lines, and all
 * exit with the same status. Ranks started with different arguments (an MPMD mpirun of run and
 * validate) are a usage error of their own. */
#ifndef CLI_RANKS_H
#define CLI_RANKS_H

#include "exec_comm.h"

#define CLI_RANKS_HELP 3   /* status: --help was asked for (printed by rank 0 after agreeing) */

/* status: 0 to go on, 1 or 2 an exit status, CLI_RANKS_HELP; msg: this rank's one line ("" if
 * none). argc/argv: the command's arguments, compared across ranks. Returns 0 when every rank
 * goes on, CLI_RANKS_HELP when every rank asked for help, else the exit status every rank uses
 * (after rank 0 printed the lines). Collective; a failed exchange returns 1. */
int cli_ranks_agree(Comm *c, int argc, char **argv, int status, const char *msg);

#endif
