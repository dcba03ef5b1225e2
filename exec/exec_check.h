/* exec_check.h — one check macro per vendor API family, for the .c files of exec/ only (it includes vendor
 * headers; never include it from a public header). Each prints
 *   rank R: file:line: call failed: the library's message
 * to stderr and evaluates to -1 (0 on success), so library code can `goto fail`:
 *   if (CUDA_CHECK(cudaMalloc(&p, n))) goto fail;
 * The rank is MPI_COMM_WORLD's when MPI is running, else 0. */
#ifndef EXEC_CHECK_H
#define EXEC_CHECK_H

#include <stdio.h>

#ifndef MEMPLAN_CUDA
#define MEMPLAN_CUDA 0
#endif
#ifndef MEMPLAN_NCCL
#define MEMPLAN_NCCL 0
#endif

/* This process's rank for messages (MPI_COMM_WORLD rank if MPI is initialized, else 0). */
#ifdef __cplusplus
extern "C" int exec_log_rank(void);
#else
int exec_log_rank(void);
#endif

#ifndef __CUDACC__
#include <mpi.h>
static inline int exec_mpi_check_(int err, const char *call, const char *file, int line)
{
    if (err == MPI_SUCCESS) return 0;
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(err, msg, &len) != MPI_SUCCESS) snprintf(msg, sizeof msg, "MPI error %d", err);
    fprintf(stderr, "rank %d: %s:%d: %s failed: %s\n", exec_log_rank(), file, line, call, msg);
    return -1;
}
#define MPI_CHECK(call) exec_mpi_check_((call), #call, __FILE__, __LINE__)
#endif

#if MEMPLAN_CUDA
#include <cuda_runtime.h>
static inline int exec_cuda_check_(cudaError_t err, const char *call, const char *file, int line)
{
    if (err == cudaSuccess) return 0;
    fprintf(stderr, "rank %d: %s:%d: %s failed: %s (%s)\n", exec_log_rank(), file, line, call,
            cudaGetErrorString(err), cudaGetErrorName(err));
    return -1;
}
#define CUDA_CHECK(call) exec_cuda_check_((call), #call, __FILE__, __LINE__)
#endif

#if MEMPLAN_NCCL
#include <nccl.h>
static inline int exec_nccl_check_(ncclResult_t res, const char *call, const char *file, int line)
{
    if (res == ncclSuccess) return 0;
    const char *last = ncclGetLastError(NULL);
    fprintf(stderr, "rank %d: %s:%d: %s failed: %s%s%s\n", exec_log_rank(), file, line, call,
            ncclGetErrorString(res), last && *last ? ": " : "", last ? last : "");
    return -1;
}
#define NCCL_CHECK(call) exec_nccl_check_((call), #call, __FILE__, __LINE__)
#endif

#endif
