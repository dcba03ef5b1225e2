/* prof_overhead.c — fixed GPU memory overheads by cudaMemGetInfo / NVML deltas (see
 * prof_overhead.h). NVML is opened with dlopen so the build needs no NVML library (the CUDA
 * toolkit ships none; the GPU driver does). */
#include "prof_overhead.h"
#include "prof_check.h"

#include <cjson/cJSON.h>
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

void prof_overhead_init(ProfOverhead *o)
{
    memset(o, 0, sizeof *o);
    o->device = -1;
    o->used_before = -1;
    o->used_context = o->used_cublas_handle = o->used_cublas = o->used_nccl_init = o->used_nccl = -1;
    o->cuda_context = o->cublas_handle = o->cublas_gemm = o->cublas = -1;
    o->nccl_init = o->nccl_first = o->nccl = -1;
}

static void put_num(cJSON *o, const char *key, double v)
{
    if (v < 0) cJSON_AddNullToObject(o, key);   /* not measured */
    else cJSON_AddNumberToObject(o, key, v);
}

cJSON *prof_overhead_json(const ProfOverhead *o)
{
    cJSON *j = cJSON_CreateObject();
    if (!j) return NULL;
    cJSON_AddStringToObject(j, "gpu", o->gpu);
    cJSON_AddNumberToObject(j, "device", o->device);
    cJSON_AddStringToObject(j, "pci_bus_id", o->pci_bus_id);
    cJSON_AddNumberToObject(j, "driver_version", o->driver_version);
    cJSON_AddNumberToObject(j, "runtime_version", o->runtime_version);
    cJSON_AddStringToObject(j, "cuda_module_loading", o->module_loading[0] ? o->module_loading : "default");
    put_num(j, "total_bytes", o->total_bytes);
    put_num(j, "cuda_context_bytes", o->cuda_context);
    put_num(j, "cublas_bytes", o->cublas);
    put_num(j, "cublas_handle_bytes", o->cublas_handle);
    put_num(j, "cublas_first_gemm_bytes", o->cublas_gemm);
    cJSON_AddNumberToObject(j, "gemm_n", o->gemm_n);
    put_num(j, "nccl_bytes", o->nccl);
    put_num(j, "nccl_init_bytes", o->nccl_init);
    put_num(j, "nccl_first_collectives_bytes", o->nccl_first);
    cJSON_AddNumberToObject(j, "nccl_ranks", o->nccl_ranks);
    cJSON_AddNumberToObject(j, "nccl_ranks_sharing_gpu", o->nccl_sharing);
    if (o->nccl_note[0]) cJSON_AddStringToObject(j, "nccl_note", o->nccl_note);
    cJSON *used = cJSON_AddObjectToObject(j, "used_bytes");
    if (used) {
        put_num(used, "before_context", o->used_before);
        put_num(used, "after_context", o->used_context);
        put_num(used, "after_cublas_create", o->used_cublas_handle);
        put_num(used, "after_first_gemm", o->used_cublas);
        put_num(used, "after_nccl_init", o->used_nccl_init);
        put_num(used, "after_nccl_first_collectives", o->used_nccl);
    }
    cJSON_AddStringToObject(j, "context_method",
                            o->context_from_nvml ? "nvml used before vs after cudaFree(0)"
                                                 : "cudaMemGetInfo used after cudaFree(0), other processes included");
    return j;
}

#if MEMPLAN_CUDA

typedef struct {
    cublasHandle_t cublas;
    float *gemm;               /* A, B, C: 3 x (n, n) fp32 */
#if MEMPLAN_NCCL
    ncclComm_t nccl;
    void *nccl_buf;            /* 64 MiB for the first all-reduce */
#endif
} Priv;

static Priv *priv(ProfOverhead *o)
{
    if (!o->priv_) o->priv_ = calloc(1, sizeof(Priv));
    return o->priv_;
}

/* ---- NVML, opened at run time: only the four calls needed, with their documented ABI ---- */

typedef struct {
    unsigned long long total, free, used;
} NvmlMemory;

static double nvml_used(const char *pci_bus_id)
{
    static void *lib;
    static int tried;
    static int (*init)(void);
    static int (*by_pci)(const char *, void **);
    static int (*mem_info)(void *, NvmlMemory *);
    if (!tried) {
        tried = 1;
        lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
        if (lib) {
            init = (int (*)(void))dlsym(lib, "nvmlInit_v2");
            by_pci = (int (*)(const char *, void **))dlsym(lib, "nvmlDeviceGetHandleByPciBusId_v2");
            mem_info = (int (*)(void *, NvmlMemory *))dlsym(lib, "nvmlDeviceGetMemoryInfo");
            if (!init || !by_pci || !mem_info || init() != 0) init = NULL;
        }
    }
    if (!init) return -1;
    void *dev = NULL;
    NvmlMemory m;
    if (by_pci(pci_bus_id, &dev) != 0 || mem_info(dev, &m) != 0) return -1;
    return (double)m.used;
}

double prof_overhead_used_now(void)
{
    size_t free_b = 0, total_b = 0;
    if (CUDA_CHECK(cudaDeviceSynchronize()) || CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b))) return -1;
    return (double)(total_b - free_b);
}

int prof_overhead_devices(char *why, size_t whylen)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
        cudaGetLastError();
        if (why && whylen)
            snprintf(why, whylen, "no CUDA device (%s)", e != cudaSuccess ? cudaGetErrorString(e) : "none found");
        return 0;
    }
    return n;
}

int prof_overhead_context(ProfOverhead *o, int device, char *err, size_t errlen)
{
    if (!prof_overhead_devices(err, errlen)) return -1;
    o->device = device;
    const char *ml = getenv("CUDA_MODULE_LOADING");
    snprintf(o->module_loading, sizeof o->module_loading, "%s", ml ? ml : "");
    /* Device queries: no context yet. */
    struct cudaDeviceProp prop;
    if (CUDA_CHECK(cudaGetDeviceProperties(&prop, device)) ||
        CUDA_CHECK(cudaDeviceGetPCIBusId(o->pci_bus_id, (int)sizeof o->pci_bus_id, device))) {
        snprintf(err, errlen, "cannot query CUDA device %d", device);
        return -1;
    }
    snprintf(o->gpu, sizeof o->gpu, "%.95s", prop.name);
    cudaDriverGetVersion(&o->driver_version);
    cudaRuntimeGetVersion(&o->runtime_version);
    o->used_before = nvml_used(o->pci_bus_id);

    if (CUDA_CHECK(cudaSetDevice(device)) || CUDA_CHECK(cudaFree(0))) {
        snprintf(err, errlen, "cannot create a context on CUDA device %d", device);
        return -1;
    }
    size_t free_b = 0, total_b = 0;
    if (CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b))) {
        snprintf(err, errlen, "cudaMemGetInfo failed");
        return -1;
    }
    o->total_bytes = (double)total_b;
    o->used_context = (double)(total_b - free_b);
    double nvml_after = nvml_used(o->pci_bus_id);
    o->context_from_nvml = o->used_before >= 0 && nvml_after >= 0;
    o->cuda_context = o->context_from_nvml ? nvml_after - o->used_before : o->used_context;
    return 0;
}

int prof_overhead_cublas(ProfOverhead *o, int gemm_n, char *err, size_t errlen)
{
    Priv *p = priv(o);
    if (!p) {
        snprintf(err, errlen, "out of host memory");
        return -1;
    }
    int n = gemm_n > 0 ? gemm_n : 1024;
    size_t bytes = (size_t)n * (size_t)n * sizeof(float);
    o->gemm_n = n;
    /* Operands first (and a memset, which loads the runtime's memset kernels), then sample. */
    if (CUDA_CHECK(cudaMalloc((void **)&p->gemm, 3 * bytes)) || CUDA_CHECK(cudaMemset(p->gemm, 0, 3 * bytes))) {
        snprintf(err, errlen, "cannot allocate the GEMM operands (3 x %zu bytes)", bytes);
        return -1;
    }
    double before = prof_overhead_used_now();
    if (CUBLAS_CHECK(cublasCreate(&p->cublas))) {
        p->cublas = NULL;
        snprintf(err, errlen, "cublasCreate failed");
        return -1;
    }
    o->used_cublas_handle = prof_overhead_used_now();
    const float one = 1.0f, zero = 0.0f;
    const float *a = p->gemm, *b = p->gemm + (size_t)n * n;
    float *c = p->gemm + 2 * (size_t)n * n;
    if (CUBLAS_CHECK(cublasSgemm(p->cublas, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, a, n, b, n, &zero, c, n))) {
        snprintf(err, errlen, "the first cublasSgemm failed");
        return -1;
    }
    o->used_cublas = prof_overhead_used_now();
    if (before < 0 || o->used_cublas_handle < 0 || o->used_cublas < 0) {
        snprintf(err, errlen, "cudaMemGetInfo failed");
        return -1;
    }
    o->cublas_handle = o->used_cublas_handle - before;
    o->cublas_gemm = o->used_cublas - o->used_cublas_handle;
    o->cublas = o->used_cublas - before;
    return 0;
}

int prof_overhead_nccl_with(ProfOverhead *o, const ProfNcclHooks *h, char *err, size_t errlen)
{
    int sharing = h->sharing > 0 ? h->sharing : 1;
    double before = prof_overhead_used_now();
    if (h->create(h->ctx, err, errlen)) return -1;
    o->used_nccl_init = prof_overhead_used_now();
    if (h->first_collective && h->first_collective(h->ctx, err, errlen)) return -1;
    o->used_nccl = prof_overhead_used_now();
    if (before < 0 || o->used_nccl_init < 0 || o->used_nccl < 0) {
        snprintf(err, errlen, "cudaMemGetInfo failed");
        return -1;
    }
    o->nccl_ranks = h->nranks;
    o->nccl_sharing = sharing;
    o->nccl_init = (o->used_nccl_init - before) / sharing;
    o->nccl_first = (o->used_nccl - o->used_nccl_init) / sharing;
    o->nccl = (o->used_nccl - before) / sharing;
    return 0;
}

#if MEMPLAN_NCCL
#define NCCL_FIRST_BYTES ((size_t)64 << 20)

static int single_create(void *ctx, char *err, size_t errlen)
{
    ProfOverhead *o = ctx;
    Priv *p = o->priv_;
    if (NCCL_CHECK(ncclCommInitAll(&p->nccl, 1, &o->device))) {
        p->nccl = NULL;
        snprintf(err, errlen, "ncclCommInitAll failed (see the message above)");
        return -1;
    }
    return 0;
}

static int single_first(void *ctx, char *err, size_t errlen)
{
    ProfOverhead *o = ctx;
    Priv *p = o->priv_;
    /* a small (LL) and a large (SIMPLE) all-reduce, in place, fp32 */
    if (NCCL_CHECK(ncclAllReduce(p->nccl_buf, p->nccl_buf, 1024, ncclFloat32, ncclSum, p->nccl, 0)) ||
        NCCL_CHECK(ncclAllReduce(p->nccl_buf, p->nccl_buf, NCCL_FIRST_BYTES / 4, ncclFloat32, ncclSum, p->nccl, 0)) ||
        CUDA_CHECK(cudaDeviceSynchronize())) {
        snprintf(err, errlen, "the first NCCL all-reduce failed (see the message above)");
        return -1;
    }
    return 0;
}
#endif

int prof_overhead_nccl_single(ProfOverhead *o, char *err, size_t errlen)
{
#if MEMPLAN_NCCL
    Priv *p = priv(o);
    if (!p) {
        snprintf(err, errlen, "out of host memory");
        return -1;
    }
    if (CUDA_CHECK(cudaMalloc(&p->nccl_buf, NCCL_FIRST_BYTES)) ||
        CUDA_CHECK(cudaMemset(p->nccl_buf, 0, NCCL_FIRST_BYTES))) {
        p->nccl_buf = NULL;
        snprintf(err, errlen, "cannot allocate the all-reduce buffer");
        return -1;
    }
    ProfNcclHooks h = {single_create, single_first, o, 1, 1};
    return prof_overhead_nccl_with(o, &h, err, errlen);
#else
    snprintf(o->nccl_note, sizeof o->nccl_note, "built without NCCL (NO_NCCL=1)");
    snprintf(err, errlen, "%s", o->nccl_note);
    return -1;
#endif
}

void prof_overhead_free(ProfOverhead *o)
{
    Priv *p = o->priv_;
    if (!p) return;
#if MEMPLAN_NCCL
    if (p->nccl) NCCL_CHECK(ncclCommDestroy(p->nccl));
    if (p->nccl_buf) CUDA_CHECK(cudaFree(p->nccl_buf));
#endif
    if (p->cublas) CUBLAS_CHECK(cublasDestroy(p->cublas));
    if (p->gemm) CUDA_CHECK(cudaFree(p->gemm));
    free(p);
    o->priv_ = NULL;
}

#else /* built without CUDA */

#define NO_CUDA_MSG "built without CUDA (NO_CUDA=1)"

int prof_overhead_devices(char *why, size_t whylen)
{
    if (why && whylen) snprintf(why, whylen, NO_CUDA_MSG);
    return 0;
}

double prof_overhead_used_now(void) { return -1; }

int prof_overhead_context(ProfOverhead *o, int device, char *err, size_t errlen)
{
    (void)o;
    (void)device;
    snprintf(err, errlen, NO_CUDA_MSG);
    return -1;
}

int prof_overhead_cublas(ProfOverhead *o, int gemm_n, char *err, size_t errlen)
{
    (void)o;
    (void)gemm_n;
    snprintf(err, errlen, NO_CUDA_MSG);
    return -1;
}

int prof_overhead_nccl_with(ProfOverhead *o, const ProfNcclHooks *hooks, char *err, size_t errlen)
{
    (void)o;
    (void)hooks;
    snprintf(err, errlen, NO_CUDA_MSG);
    return -1;
}

int prof_overhead_nccl_single(ProfOverhead *o, char *err, size_t errlen)
{
    (void)o;
    snprintf(err, errlen, NO_CUDA_MSG);
    return -1;
}

void prof_overhead_free(ProfOverhead *o) { (void)o; }

#endif

int prof_overhead_measure(ProfOverhead *o, int device, int gemm_n, char *err, size_t errlen)
{
    if (prof_overhead_context(o, device, err, errlen) || prof_overhead_cublas(o, gemm_n, err, errlen)) return -1;
#if MEMPLAN_NCCL
    return prof_overhead_nccl_single(o, err, errlen);
#else
    snprintf(o->nccl_note, sizeof o->nccl_note, "built without NCCL (NO_NCCL=1)");
    return 0;
#endif
}
