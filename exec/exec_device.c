/* exec_device.c — the host device (malloc, memcpy) and, when built with CUDA, the CUDA device:
 * two non-blocking streams (compute; communication for NCCL), memory from the device's default
 * memory pool with stream-ordered cudaMallocAsync/cudaFreeAsync on the compute stream (so a
 * free never synchronizes the device: it cannot stall behind a collective of the comm stream,
 * and a buffer freed while kernels still read it is reused only after them), copies and
 * memsets ordered on the compute stream. Raw memory goes through the profiler's tracker, which
 * calls the raw alloc/free/zero functions below. Without memory-pool support (old drivers,
 * some virtualized GPUs) it falls back to cudaMalloc/cudaFree.
 *
 * Errors in copy/memset/synchronize on a GPU are printed (CUDA_CHECK) and leave the device
 * marked failed (exec_device_failed): they usually mean a faulted context, and the run loop
 * then aborts the communicator rather than continuing with garbage. */
#include "exec_device.h"
#include "kern_cuda.h"
#include "prof_check.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct Device {
    DeviceKind kind;
    int local_rank;
    int index;            /* CUDA device ordinal (-1 for host) */
    int failed;           /* a CUDA call failed in a void helper */
    char name[256];
#if MEMPLAN_CUDA
    cudaStream_t stream;       /* compute: kernels, copies, memsets, allocations */
    cudaStream_t comm_stream;  /* NCCL collectives */
    int pools;                 /* stream-ordered allocation available */
#endif
};

/* ---- host ---- */

static void *host_alloc(void *ctx, size_t bytes)
{
    (void)ctx;
    return malloc(bytes);
}

static void host_free(void *ctx, void *p)
{
    (void)ctx;
    free(p);
}

/* ---- CUDA ---- */

#if MEMPLAN_CUDA
static void *cuda_alloc(void *ctx, size_t bytes)
{
    Device *d = ctx;
    void *p = NULL;
    cudaError_t e = d->pools ? cudaMallocAsync(&p, bytes, d->stream) : cudaMalloc(&p, bytes);
    if (e != cudaSuccess) {
        cudaGetLastError();   /* out of memory is reported by the tracker, not sticky here */
        return NULL;
    }
    return p;
}

static void cuda_free(void *ctx, void *p)
{
    Device *d = ctx;
    if (CUDA_CHECK(d->pools ? cudaFreeAsync(p, d->stream) : cudaFree(p))) d->failed = 1;
}

static void cuda_zero(void *ctx, void *p, size_t bytes)
{
    Device *d = ctx;
    if (CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, d->stream))) d->failed = 1;
}

/* 1 if p is host memory (pageable or pinned), 0 if device memory. */
static int is_host(const void *p)
{
    struct cudaPointerAttributes a;
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
        cudaGetLastError();
        return 1;   /* unknown to CUDA: ordinary host memory */
    }
    return a.type != cudaMemoryTypeDevice && a.type != cudaMemoryTypeManaged;
}
#endif

int exec_device_cuda_available(void)
{
#if MEMPLAN_CUDA
    int n = 0;
    /* Without a GPU this fails with "CUDA driver version is insufficient for CUDA runtime
     * version" (or "no CUDA-capable device"): both mean none here. */
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return n;
#else
    return 0;
#endif
}

Device *exec_device_create(DeviceKind kind, int local_rank, char *err, size_t errlen)
{
    char dummy[8];
    if (!err || errlen == 0) {
        err = dummy;
        errlen = sizeof dummy;
    }
    err[0] = 0;
    Device *d = calloc(1, sizeof *d);
    if (!d) {
        snprintf(err, errlen, "out of host memory");
        return NULL;
    }
    d->kind = kind;
    d->local_rank = local_rank;
    d->index = -1;
    if (kind == DEVICE_HOST) {
        snprintf(d->name, sizeof d->name, "host");
        return d;
    }
    if (kind != DEVICE_CUDA) {
        snprintf(err, errlen, "unknown device kind %d", (int)kind);
        goto fail;
    }
#if MEMPLAN_CUDA
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
        snprintf(err, errlen, "no CUDA device (%s)",
                 e != cudaSuccess ? cudaGetErrorString(e) : "the driver reports 0 devices");
        cudaGetLastError();
        goto fail;
    }
    /* Several ranks may share a GPU (tests on one GPU); otherwise local rank r uses GPU r. */
    d->index = local_rank < 0 ? 0 : local_rank % n;
    if (CUDA_CHECK(cudaSetDevice(d->index))) {
        snprintf(err, errlen, "cannot use CUDA device %d", d->index);
        goto fail;
    }
    struct cudaDeviceProp prop;
    if (CUDA_CHECK(cudaGetDeviceProperties(&prop, d->index))) {
        snprintf(err, errlen, "cannot initialize CUDA device %d", d->index);
        goto fail;
    }
    snprintf(d->name, sizeof d->name, "%s", prop.name);
    /* Non-blocking streams: no implicit ordering with the legacy default stream, so nothing
     * outside these two streams can make the compute stream wait for a collective. */
    if (CUDA_CHECK(cudaStreamCreateWithFlags(&d->stream, cudaStreamNonBlocking)) ||
        CUDA_CHECK(cudaStreamCreateWithFlags(&d->comm_stream, cudaStreamNonBlocking))) {
        snprintf(err, errlen, "cannot create the CUDA streams on device %d", d->index);
        goto fail;
    }
    int pools = 0;
    if (cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, d->index) != cudaSuccess) {
        cudaGetLastError();
        pools = 0;
    }
    if (pools) {
        /* Keep freed memory in the pool (as PyTorch's caching allocator does) instead of
         * returning it to the driver at every synchronization; trimmed at destroy. */
        cudaMemPool_t pool;
        uint64_t keep = UINT64_MAX;
        pools = cudaDeviceGetDefaultMemPool(&pool, d->index) == cudaSuccess &&
                cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep) == cudaSuccess;
        if (!pools) cudaGetLastError();
    }
    d->pools = pools;
    /* the cuBLAS handle of kernels/ (process-wide, kept until exit) on this device */
    if (kern_cuda_init()) {
        snprintf(err, errlen, "cannot create the cuBLAS handle on CUDA device %d", d->index);
        goto fail;
    }
    return d;
#else
    snprintf(err, errlen, "built without CUDA (NO_CUDA=1)");
    goto fail;
#endif
fail:
    exec_device_destroy(d);
    return NULL;
}

void exec_device_destroy(Device *d)
{
    if (!d) return;
#if MEMPLAN_CUDA
    if (d->kind == DEVICE_CUDA) {
        /* The compute stream is drained; the comm stream is not waited for: a collective still
         * queued there (a failed step, peers gone) may never end, and cudaStreamDestroy returns
         * at once, releasing the stream when its work is done. */
        if (d->stream) {
            CUDA_CHECK(cudaStreamSynchronize(d->stream));
            CUDA_CHECK(cudaStreamDestroy(d->stream));
        }
        if (d->comm_stream) CUDA_CHECK(cudaStreamDestroy(d->comm_stream));
        cudaMemPool_t pool;   /* hand the pool's memory back (the next run, other processes) */
        if (d->pools && cudaDeviceGetDefaultMemPool(&pool, d->index) == cudaSuccess) CUDA_CHECK(cudaMemPoolTrimTo(pool, 0));
    }
#endif
    free(d);
}

DeviceKind exec_device_kind(const Device *d) { return d->kind; }
const char *exec_device_name(const Device *d) { return d->name; }
int exec_device_index(const Device *d) { return d->index; }
int exec_device_failed(const Device *d) { return d->failed; }

void *exec_device_stream(Device *d)
{
#if MEMPLAN_CUDA
    if (d->kind == DEVICE_CUDA) return (void *)d->stream;
#endif
    (void)d;
    return NULL;
}

void *exec_device_comm_stream(Device *d)
{
#if MEMPLAN_CUDA
    if (d->kind == DEVICE_CUDA) return (void *)d->comm_stream;
#endif
    (void)d;
    return NULL;
}

int exec_device_sync_compute(Device *d)
{
#if MEMPLAN_CUDA
    if (d->kind == DEVICE_CUDA && CUDA_CHECK(cudaStreamSynchronize(d->stream))) {
        d->failed = 1;
        return -1;
    }
#endif
    (void)d;
    return 0;
}

int exec_device_cuda_count(char *why, size_t whylen)
{
    char dummy[8];
    if (!why || whylen == 0) {
        why = dummy;
        whylen = sizeof dummy;
    }
    why[0] = 0;
#if MEMPLAN_CUDA
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
        snprintf(why, whylen, "no CUDA device (%s)",
                 e != cudaSuccess ? cudaGetErrorString(e) : "the driver reports 0 devices");
        cudaGetLastError();
        return 0;
    }
    return n;
#else
    snprintf(why, whylen, "no CUDA device (memplan was built without CUDA: NO_CUDA=1)");
    return 0;
#endif
}

MemTracker *exec_device_tracker_create(Device *d, size_t limit_bytes)
{
#if MEMPLAN_CUDA
    if (d->kind == DEVICE_CUDA) {
        MemTracker *t = prof_mem_create(cuda_alloc, cuda_free, d, limit_bytes);
        if (t) prof_mem_set_zero_fn(t, cuda_zero);
        return t;
    }
#endif
    return prof_mem_create(host_alloc, host_free, d, limit_bytes);
}

void exec_device_copy(Device *d, void *dst, const void *src, size_t bytes)
{
    if (bytes == 0 || dst == src) return;
#if MEMPLAN_CUDA
    if (d->kind == DEVICE_CUDA) {
        /* Unified addressing: the runtime tells host from device pointers. Ordered on the
         * compute stream; waited for when the host reads or lends one side. */
        if (CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, d->stream)) ||
            ((is_host(dst) || is_host(src)) && CUDA_CHECK(cudaStreamSynchronize(d->stream))))
            d->failed = 1;
        return;
    }
#endif
    (void)d;
    memcpy(dst, src, bytes);
}

void exec_device_memset(Device *d, void *p, int value, size_t bytes)
{
    if (bytes == 0) return;
#if MEMPLAN_CUDA
    if (d->kind == DEVICE_CUDA) {
        if (CUDA_CHECK(cudaMemsetAsync(p, value, bytes, d->stream))) d->failed = 1;
        return;
    }
#endif
    (void)d;
    memset(p, value, bytes);
}

void exec_device_synchronize(Device *d)
{
#if MEMPLAN_CUDA
    if (d->kind == DEVICE_CUDA) {
        if (CUDA_CHECK(cudaStreamSynchronize(d->stream)) || CUDA_CHECK(cudaStreamSynchronize(d->comm_stream)))
            d->failed = 1;
        return;
    }
#endif
    (void)d;
}

int exec_device_mem_info(Device *d, size_t *free_bytes, size_t *total_bytes)
{
#if MEMPLAN_CUDA
    if (d->kind == DEVICE_CUDA) {
        size_t f = 0, t = 0;
        if (CUDA_CHECK(cudaMemGetInfo(&f, &t))) return -1;
        if (free_bytes) *free_bytes = f;
        if (total_bytes) *total_bytes = t;
        return 0;
    }
#endif
    (void)d;
    long page = sysconf(_SC_PAGESIZE), total = sysconf(_SC_PHYS_PAGES), avail = sysconf(_SC_AVPHYS_PAGES);
    if (page <= 0 || total <= 0) return -1;
    if (free_bytes) *free_bytes = (size_t)(avail > 0 ? avail : 0) * (size_t)page;
    if (total_bytes) *total_bytes = (size_t)total * (size_t)page;
    return 0;
}
