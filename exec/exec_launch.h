/* exec_launch.h — which launcher started this process, and what it says about the job (rank,
 * size, ranks on this node), read from the environment it gives every rank. The one launcher
 * detection of the project: `memplan run`, `validate` and `bench` start MPI only when a launcher
 * started them (otherwise one rank runs alone, without MPI), the benches refuse to run outside
 * one, messages of code that runs before MPI (kernels/) name the rank, and the planning front
 * end sizes BLAS threads by the ranks of its node.
 *
 * One table of variables, as the launchers document them (checked under Open MPI 4.1's mpirun):
 *   Open MPI (mpirun, Open MPI 5's prterun): OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK, _LOCAL_SIZE
 *     (it also sets PMIX_RANK, so it is looked for first);
 *   PMI, MPICH's Hydra and Intel MPI's mpiexec: PMI_RANK, PMI_SIZE, MPI_LOCALRANKID,
 *     MPI_LOCALNRANKS;
 *   PMIx launchers (srun --mpi=pmix, prterun): PMIX_RANK only; the size is not in the
 *     environment (MPI_Comm_size knows it).
 * Slurm's own SLURM_PROCID is not a launcher's: a batch script has it too, without any job.
 *
 * Header-only (getenv and strtol, no MPI, no executor) so that cli/memplan.c (linked with the
 * planner only, to start fast), kernels/ and every bench can call it without a link dependency. */
#ifndef EXEC_LAUNCH_H
#define EXEC_LAUNCH_H

#include <limits.h>
#include <stddef.h>
#include <stdlib.h>

typedef struct {
    const char *name;                          /* for messages */
    const char *rank, *size;                   /* MPI_COMM_WORLD; NULL: not set by it */
    const char *local_rank, *local_size;       /* this node's ranks of the job; NULL: not set */
} ExecLauncher;

static const ExecLauncher EXEC_LAUNCHERS[] = {
    {"Open MPI", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
     "OMPI_COMM_WORLD_LOCAL_SIZE"},
    {"PMI (MPICH's Hydra, Intel MPI)", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"},
    {"PMIx", "PMIX_RANK", NULL, NULL, NULL},
};
#define EXEC_LAUNCHER_COUNT (sizeof EXEC_LAUNCHERS / sizeof EXEC_LAUNCHERS[0])

static inline int exec_launch_env_set_(const char *var)
{
    const char *v = var ? getenv(var) : NULL;
    return v && *v;
}

/* The launcher that started this process: the first row whose rank or size variable is set;
 * NULL when none is (started by hand: one rank). */
static inline const ExecLauncher *exec_launcher(void)
{
    for (size_t i = 0; i < EXEC_LAUNCHER_COUNT; i++)
        if (exec_launch_env_set_(EXEC_LAUNCHERS[i].rank) || exec_launch_env_set_(EXEC_LAUNCHERS[i].size))
            return &EXEC_LAUNCHERS[i];
    return NULL;
}

static inline int exec_launched_by_mpi(void) { return exec_launcher() != NULL; }

/* var's value as an integer in [0, INT_MAX], or def when unset or not such an integer */
static inline int exec_launch_env_int_(const char *var, int def)
{
    const char *v = var ? getenv(var) : NULL;
    if (!v || !*v) return def;
    char *end;
    long x = strtol(v, &end, 10);
    return *end || x < 0 || x > INT_MAX ? def : (int)x;
}

/* What the launcher says, or def when nothing launched this process or the launcher does not
 * set that value (PMIx: the sizes). */
static inline int exec_launch_rank(int def)
{
    const ExecLauncher *l = exec_launcher();
    return l ? exec_launch_env_int_(l->rank, def) : def;
}

static inline int exec_launch_size(int def)
{
    const ExecLauncher *l = exec_launcher();
    return l ? exec_launch_env_int_(l->size, def) : def;
}

static inline int exec_launch_local_rank(int def)
{
    const ExecLauncher *l = exec_launcher();
    return l ? exec_launch_env_int_(l->local_rank, def) : def;
}

static inline int exec_launch_local_size(int def)
{
    const ExecLauncher *l = exec_launcher();
    return l ? exec_launch_env_int_(l->local_size, def) : def;
}

#endif
