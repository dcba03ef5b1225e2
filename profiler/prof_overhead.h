/* prof_overhead.h — measures the fixed GPU memory overheads the planner assumes but no allocator
 * counts (its fixed-overhead terms; docs/gpu-profiling.md): the CUDA context, cuBLAS (handle,
 * workspace and the kernels a first GEMM loads), and an NCCL communicator (its buffers, set up
 * at creation and, with NCCL_RUNTIME_CONNECT (default since 2.22), at the first collectives).
 *
 * Method: device memory in use (used = total - free) before and after each step:
 *   context  NVML's used memory before this process touches the GPU vs after cudaSetDevice +
 *            cudaFree(0) (NVML is opened at run time, libnvidia-ml.so.1; without it the context
 *            is the used memory after cudaFree(0), other processes included: an upper bound);
 *   cublas   cudaMemGetInfo before cublasCreate vs after it and one SGEMM (operands allocated
 *            before the first sample, so they are not counted);
 *   nccl     cudaMemGetInfo before communicator creation vs after it, and after a first small
 *            and large all-reduce.
 * The driver maps device memory in 2 MiB pages, so deltas are multiples of 2 MiB.
 * When several ranks share one GPU, run the per-rank steps one rank at a time, and tell the NCCL
 * step how many ranks' memory its delta contains (it divides).
 *
 * Steps run in order on one device: context, cublas, nccl. Without CUDA the functions return -1
 * with "built without CUDA ..."; without a device, "no CUDA device (...)". No vendor types. */
#ifndef PROF_OVERHEAD_H
#define PROF_OVERHEAD_H

#include <stddef.h>

typedef struct cJSON cJSON;

typedef struct {
    int device;                 /* CUDA ordinal, -1 before prof_overhead_context */
    char gpu[96];               /* device name */
    char pci_bus_id[32];
    int driver_version, runtime_version;   /* 13000 = 13.0 */
    char module_loading[16];    /* CUDA_MODULE_LOADING as set; "" = the default (lazy) */
    double total_bytes;         /* cudaMemGetInfo total */

    int context_from_nvml;      /* 1: context = NVML delta; 0: used after cudaFree(0) (upper bound) */
    double used_before;         /* NVML used before the context, bytes; -1 unknown */
    double used_context, used_cublas_handle, used_cublas, used_nccl_init, used_nccl;   /* bytes */

    double cuda_context;        /* bytes, the deltas; -1 = not measured */
    double cublas_handle, cublas_gemm, cublas;   /* cublas = handle + gemm */
    int gemm_n;                 /* the SGEMM was gemm_n x gemm_n x gemm_n, fp32 */
    double nccl_init, nccl_first, nccl;          /* nccl = init + first collectives */
    int nccl_ranks;             /* communicator size, 0 if not measured */
    int nccl_sharing;           /* ranks whose NCCL memory the delta held (divided out) */
    char nccl_note[96];         /* why NCCL was not measured, or "" */

    void *priv_;                /* handles and buffers kept alive until prof_overhead_free */
} ProfOverhead;

/* Number of CUDA devices; 0 with the reason in why ("no CUDA device (<driver's reason>)",
 * "built without CUDA (NO_CUDA=1)"). */
int prof_overhead_devices(char *why, size_t whylen);

void prof_overhead_init(ProfOverhead *o);
/* Releases what the steps hold (cuBLAS handle, GEMM operands, an NCCL communicator the NCCL step
 * created itself). The CUDA context stays. */
void prof_overhead_free(ProfOverhead *o);

/* Step 1: NVML baseline, then the primary context of `device`. 0 or -1 (reason in err). */
int prof_overhead_context(ProfOverhead *o, int device, char *err, size_t errlen);
/* Step 2: cublasCreate and one SGEMM of n x n (n <= 0: 1024). The handle stays alive. */
int prof_overhead_cublas(ProfOverhead *o, int gemm_n, char *err, size_t errlen);

/* Step 3, alone: a one-rank communicator (ncclCommInitAll on this device) and a first
 * all-reduce of 4 KiB and of 64 MiB. A one-rank NCCL has no peers, so its buffers are small:
 * the real figure needs several ranks (prof_overhead_nccl_with). */
int prof_overhead_nccl_single(ProfOverhead *o, char *err, size_t errlen);

/* Step 3, with a communicator the caller creates (e.g. exec_comm's NCCL over MPI). Both hooks
 * are collective and should end with a barrier, so every rank's allocations are done when the
 * sample is taken; first_collective may be NULL. sharing = ranks on this GPU (>= 1): the
 * deltas are divided by it. Buffers the hooks use must exist before this call. */
typedef struct {
    int (*create)(void *ctx, char *err, size_t errlen);
    int (*first_collective)(void *ctx, char *err, size_t errlen);
    void *ctx;
    int nranks;
    int sharing;
} ProfNcclHooks;
int prof_overhead_nccl_with(ProfOverhead *o, const ProfNcclHooks *hooks, char *err, size_t errlen);

/* Steps 1, 2 and the one-rank step 3 on `device`. 0, or -1 at the first failing step. */
int prof_overhead_measure(ProfOverhead *o, int device, int gemm_n, char *err, size_t errlen);

/* Used device memory now (cudaMemGetInfo on the current device), bytes; -1 on error. */
double prof_overhead_used_now(void);

/* {"gpu":..., "device":..., "driver_version":..., "cuda_context_bytes":..., "cublas_bytes":...,
 *  "nccl_bytes":..., ... "method":{...}} (see docs/gpu-profiling.md). NULL if out of memory. */
cJSON *prof_overhead_json(const ProfOverhead *o);

#endif
