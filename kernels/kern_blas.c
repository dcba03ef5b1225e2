/* kern_blas.c — OpenBLAS core choice and threads per rank (kern_blas.h). */
#include "kern_blas.h"

#include <cblas.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

/* OpenBLAS's x86-64 cores without AVX2: a CPU that has AVX2 deserves better than these */
static const char *const OLD_CORES[] = {"Prescott", "Core2", "Penryn", "Dunnington", "Nehalem", "Atom",
                                        "Sandybridge", "Katmai", "Coppermine", "Northwood", "Banias",
                                        "Barcelona", "Bobcat", "Unknown"};

void kern_blas_select_core(char **argv)
{
#if defined(__x86_64__)
    if (getenv("OPENBLAS_CORETYPE")) return;   /* the user's choice, or our re-exec already ran */
    const char *core = openblas_get_corename();
    int old = 0;
    for (size_t i = 0; core && i < sizeof OLD_CORES / sizeof *OLD_CORES; i++)
        if (strcasecmp(core, OLD_CORES[i]) == 0) old = 1;
    __builtin_cpu_init();
    const char *better = __builtin_cpu_supports("avx512f") ? "SkylakeX"
                       : __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") ? "Haswell" : NULL;
    if (!old || !better) return;
    if (setenv("OPENBLAS_CORETYPE", better, 1) != 0) return;
    execv("/proc/self/exe", argv);
    unsetenv("OPENBLAS_CORETYPE");   /* exec failed: carry on with the core we have */
#else
    (void)argv;
#endif
}

int kern_blas_set_threads(int local_ranks)
{
    if (getenv("OPENBLAS_NUM_THREADS")) return openblas_get_num_threads();
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int n = local_ranks > 0 && cores / local_ranks > 1 ? (int)(cores / local_ranks) : 1;
    openblas_set_num_threads(n);
    return n;
}
