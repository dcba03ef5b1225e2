/* kern_cuda_util.cuh — what every CUDA kernel file of kernels/ shares: the check macros
 * (file:line, the call, the library's message and the rank), the launch check, and the 1-D grid
 * helpers. Internal to the .cu files of kernels/. */
#ifndef KERN_CUDA_UTIL_CUH
#define KERN_CUDA_UTIL_CUH

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#include "exec_launch.h"

#define MAX_BLOCKS 65536u       /* grid-stride loops cover the rest */

/* The launcher's rank for messages (exec_launch.h: the one launcher table; kernels/ does not
 * depend on MPI, so it reads what the launcher set), 0 when started by hand. */
static inline int kern_log_rank(void) { return exec_launch_rank(0); }

static inline int kern_cuda_check_(cudaError_t err, const char *call, const char *file, int line)
{
    if (err == cudaSuccess) return 0;
    fprintf(stderr, "rank %d: %s:%d: %s failed: %s (%s)\n", kern_log_rank(), file, line, call,
            cudaGetErrorString(err), cudaGetErrorName(err));
    return -1;
}

static inline int kern_cublas_check_(cublasStatus_t st, const char *call, const char *file, int line)
{
    if (st == CUBLAS_STATUS_SUCCESS) return 0;
    fprintf(stderr, "rank %d: %s:%d: %s failed: %s (%s)\n", kern_log_rank(), file, line, call,
            cublasGetStatusString(st), cublasGetStatusName(st));
    return -1;
}

#define CUDA_CHECK(call) kern_cuda_check_((call), #call, __FILE__, __LINE__)
#define CUBLAS_CHECK(call) kern_cublas_check_((call), #call, __FILE__, __LINE__)
/* After every launch: a bad configuration (grid, shared memory) is reported here, not later. */
#define LAUNCH_CHECK(kernel) kern_cuda_check_(cudaGetLastError(), "launch of " #kernel, __FILE__, __LINE__)

static inline cudaStream_t as_stream(void *s) { return (cudaStream_t)s; }

static inline unsigned grid_for(size_t n, unsigned threads)
{
    size_t g = (n + threads - 1) / threads;
    return g > MAX_BLOCKS ? MAX_BLOCKS : (unsigned)g;
}

#define GRID_STRIDE(i, n) \
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (size_t)gridDim.x * blockDim.x)

#endif
