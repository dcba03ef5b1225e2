/* prof_check.h — the one check macro per vendor API family (MPI_CHECK, CUDA_CHECK,
 * CUBLAS_CHECK, NCCL_CHECK, CUPTI_CHECK) for the .c files of profiler/ and exec/ (header-only,
 * so libprofiler needs nothing from libexec). Each prints
 *   rank R: file:line: call failed: the library's message
 * to stderr and evaluates to -1 (0 on success), so library code can `goto fail`:
 *   if (CUDA_CHECK(cudaMalloc(&p, n))) goto fail;
 * Internal: include it from .c files only; it includes the vendor headers that MEMPLAN_CUDA,
 * MEMPLAN_NCCL and MEMPLAN_CUPTI switch on. */
#ifndef PROF_CHECK_H
#define PROF_CHECK_H

#include <stdio.h>

#ifndef MEMPLAN_CUDA
#define MEMPLAN_CUDA 0
#endif
#ifndef MEMPLAN_NCCL
#define MEMPLAN_NCCL 0
#endif
#ifndef MEMPLAN_CUPTI
#define MEMPLAN_CUPTI 0
#endif

#include <mpi.h>

/* MPI_COMM_WORLD's rank when MPI is running, else 0: for messages only. */
static inline int prof_log_rank(void)
{
    int init = 0, fin = 0, rank = 0;
    MPI_Initialized(&init);
    MPI_Finalized(&fin);
    if (init && !fin) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    return rank;
}

static inline int prof_mpi_check_(int err, const char *call, const char *file, int line)
{
    if (err == MPI_SUCCESS) return 0;
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(err, msg, &len) != MPI_SUCCESS) snprintf(msg, sizeof msg, "MPI error %d", err);
    fprintf(stderr, "rank %d: %s:%d: %s failed: %s\n", prof_log_rank(), file, line, call, msg);
    return -1;
}
#define MPI_CHECK(call) prof_mpi_check_((call), #call, __FILE__, __LINE__)

#if MEMPLAN_CUDA
#include <cuda_runtime.h>
#include <cublas_v2.h>
static inline int prof_cuda_check_(cudaError_t err, const char *call, const char *file, int line)
{
    if (err == cudaSuccess) return 0;
    fprintf(stderr, "rank %d: %s:%d: %s failed: %s (%s)\n", prof_log_rank(), file, line, call,
            cudaGetErrorString(err), cudaGetErrorName(err));
    return -1;
}
#define CUDA_CHECK(call) prof_cuda_check_((call), #call, __FILE__, __LINE__)

static inline int prof_cublas_check_(cublasStatus_t st, const char *call, const char *file, int line)
{
    if (st == CUBLAS_STATUS_SUCCESS) return 0;
    fprintf(stderr, "rank %d: %s:%d: %s failed: %s (%s)\n", prof_log_rank(), file, line, call,
            cublasGetStatusString(st), cublasGetStatusName(st));
    return -1;
}
#define CUBLAS_CHECK(call) prof_cublas_check_((call), #call, __FILE__, __LINE__)
#endif

#if MEMPLAN_CUDA && MEMPLAN_NCCL
#include <nccl.h>
static inline int prof_nccl_check_(ncclResult_t res, const char *call, const char *file, int line)
{
    if (res == ncclSuccess) return 0;
    const char *last = ncclGetLastError(NULL);
    fprintf(stderr, "rank %d: %s:%d: %s failed: %s%s%s\n", prof_log_rank(), file, line, call,
            ncclGetErrorString(res), last && *last ? ": " : "", last ? last : "");
    return -1;
}
#define NCCL_CHECK(call) prof_nccl_check_((call), #call, __FILE__, __LINE__)
#endif

#if MEMPLAN_CUDA && MEMPLAN_CUPTI
#include <cupti.h>
static inline int prof_cupti_check_(CUptiResult res, const char *call, const char *file, int line)
{
    if (res == CUPTI_SUCCESS) return 0;
    const char *msg = NULL;
    if (cuptiGetResultString(res, &msg) != CUPTI_SUCCESS || !msg) msg = "unknown CUPTI error";
    fprintf(stderr, "rank %d: %s:%d: %s failed: %s (%d)\n", prof_log_rank(), file, line, call, msg,
            (int)res);
    return -1;
}
#define CUPTI_CHECK(call) prof_cupti_check_((call), #call, __FILE__, __LINE__)
#endif

#endif
