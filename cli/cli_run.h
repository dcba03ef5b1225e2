/* cli_run.h — the executor's subcommands: `memplan run` (train K steps under one strategy over
 * MPI, with a profiler summary) and `memplan validate` (plan the same setup with the engine's
 * layout, run it, print predicted versus measured). Both are started under mpirun, or alone
 * (one rank). They return the process exit status. */
#ifndef CLI_RUN_H
#define CLI_RUN_H

int cli_cmd_run(int argc, char **argv);
int cli_cmd_validate(int argc, char **argv);

#endif
