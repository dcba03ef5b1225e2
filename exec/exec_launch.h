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

/* What a launcher says about the job, each in a variable of its own. */
typedef enum {
    EXEC_LAUNCH_RANK = 0,
    EXEC_LAUNCH_SIZE,
    EXEC_LAUNCH_LOCAL_RANK,
    EXEC_LAUNCH_LOCAL_SIZE,
    EXEC_LAUNCH_VALUES
} ExecLaunchValue;

typedef struct {
    const char *name;                       /* for messages */
    const char *var[EXEC_LAUNCH_VALUES];    /* the variable of each value; NULL: not set by it.
                                               RANK, SIZE: of MPI_COMM_WORLD; LOCAL_*: this node's */
} ExecLauncher;

static const ExecLauncher EXEC_LAUNCHERS[] = {
    {"Open MPI",
     {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"}},
    {"PMI (MPICH's Hydra, Intel MPI)", {"PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"}},
    {"PMIx", {"PMIX_RANK", NULL, NULL, NULL}},
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
        if (exec_launch_env_set_(EXEC_LAUNCHERS[i].var[EXEC_LAUNCH_RANK]) ||
            exec_launch_env_set_(EXEC_LAUNCHERS[i].var[EXEC_LAUNCH_SIZE]))
            return &EXEC_LAUNCHERS[i];
    return NULL;
}

static inline int exec_launched_by_mpi(void) { return exec_launcher() != NULL; }

/* What the launcher says, an integer in [0, INT_MAX]; def when nothing launched this process,
 * the launcher does not set that value (PMIx: the sizes) or it is not such an integer. */
static inline int exec_launch_value(ExecLaunchValue which, int def)
{
    const ExecLauncher *l = exec_launcher();
    const char *v = l && (unsigned)which < EXEC_LAUNCH_VALUES && l->var[which] ? getenv(l->var[which]) : NULL;
    if (!v || !*v) return def;
    char *end;
    long x = strtol(v, &end, 10);
    return *end || x < 0 || x > INT_MAX ? def : (int)x;
}

static inline int exec_launch_rank(int def) { return exec_launch_value(EXEC_LAUNCH_RANK, def); }
static inline int exec_launch_size(int def) { return exec_launch_value(EXEC_LAUNCH_SIZE, def); }
static inline int exec_launch_local_rank(int def) { return exec_launch_value(EXEC_LAUNCH_LOCAL_RANK, def); }
static inline int exec_launch_local_size(int def) { return exec_launch_value(EXEC_LAUNCH_LOCAL_SIZE, def); }

#endif
