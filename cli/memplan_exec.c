/* memplan_exec.c — the executor's commands (run, validate, bench), which need MPI, BLAS and
 * CUDA. `memplan` (cli/memplan.c, the planning front end) execv()s this program beside it for
 * those commands with the same arguments, so `mpirun -np N memplan validate ...` starts N of
 * these; run directly, it behaves the same. */
#include <stdio.h>
#include <string.h>

#include "cli_bench.h"
#include "cli_io.h"
#include "cli_run.h"
#include "cli_setup.h"

static int dispatch(int argc, char **argv)
{
    const char *cmd = argc >= 2 ? argv[1] : "";
    if (strcmp(cmd, "run") == 0) return cli_cmd_run(argc - 1, argv + 1);
    if (strcmp(cmd, "validate") == 0) return cli_cmd_validate(argc - 1, argv + 1);
    if (strcmp(cmd, "bench") == 0) return cli_cmd_bench(argc - 1, argv + 1);
    return cli_usage_error("memplan-exec runs 'run', 'validate' and 'bench'%s%s%s (planning: memplan)", *cmd ? "; not '" : "",
                           cmd, *cmd ? "'" : "");
}

int main(int argc, char **argv)
{
    cli_io_start();
    return cli_io_finish(dispatch(argc, argv));
}
