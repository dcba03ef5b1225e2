/* memplan_exec.c — the executor's commands (run, validate, bench), which need MPI, BLAS and
 * CUDA. `memplan` (cli/memplan.c, the planning front end) execv()s this program beside it for
 * those commands with the same arguments, so `mpirun -np N memplan validate ...` starts N of
 * these; run directly, it behaves the same. */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "cli_bench.h"
#include "cli_io.h"
#include "cli_run.h"
#include "kern_blas.h"
#include "cli_setup.h"

/* OpenBLAS takes a work buffer (BUFFER_SIZE: 128 MiB on x86-64, plus a page) at its first call
 * and, when that allocation fails, retries forever (blas_memory_alloc in OpenBLAS's memory.c):
 * under an address-space limit (ulimit -v) the run would hang. So, with a limit, the buffer is
 * proven to fit before any work, and a first small product makes OpenBLAS take it now, before
 * the model's allocations. (memplan sets OPENBLAS_NUM_THREADS before the exec, to 1 under a
 * limit, so no BLAS thread needs a buffer of its own.) 0, or 1 after one line. */
#define BLAS_BUFFER_BYTES (((size_t)128 << 20) + 4096)
static int blas_start(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_AS, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY) return 0;
    int threads = openblas_get_num_threads();
    if (threads < 1) threads = 1;
    void *probe = malloc(BLAS_BUFFER_BYTES * (size_t)threads);
    if (!probe) {
        fprintf(stderr, "memplan: the address-space limit (ulimit -v %llu KiB) leaves no room for BLAS's %zu MiB work "
                        "buffer%s: raise it (ulimit -v unlimited)\n", (unsigned long long)(rl.rlim_cur >> 10),
                BLAS_BUFFER_BYTES >> 20, threads > 1 ? "s (one per BLAS thread; OPENBLAS_NUM_THREADS=1 needs one)" : "");
        return 1;
    }
    free(probe);
    float a[4] = {1, 2, 3, 4}, c[4];
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, 2, 2, 2, 1.0f, a, 2, a, 2, 0.0f, c, 2);
    return 0;
}

static int dispatch(int argc, char **argv)
{
    const char *cmd = argc >= 2 ? argv[1] : "";
    int help = 0;
    for (int i = 1; i < argc; i++) help |= strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "help") == 0;
    if (!help && blas_start()) return 1;
    if (strcmp(cmd, "run") == 0) return cli_cmd_run(argc - 1, argv + 1);
    if (strcmp(cmd, "validate") == 0) return cli_cmd_validate(argc - 1, argv + 1);
    if (strcmp(cmd, "bench") == 0) return cli_cmd_bench(argc - 1, argv + 1);
    return cli_usage_error("memplan-exec runs 'run', 'validate' and 'bench'%s%s%s (planning: memplan)", *cmd ? "; not '" : "",
                           cmd, *cmd ? "'" : "");
}

int main(int argc, char **argv)
{
    /* the engine's commands: OpenBLAS's fast GEMM kernel on CPUs it does not know (re-exec) */
    kern_blas_select_core(argv);
    cli_io_start();
    return cli_io_finish(dispatch(argc, argv));
}
