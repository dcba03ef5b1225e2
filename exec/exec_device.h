/* exec_device.h — the device interface the engine runs on: host (CPU) or CUDA. Raw memory
 * comes from here, but the engine always allocates through the profiler's tracked allocator
 * (prof_mem.h), which calls dev->raw_alloc/raw_free. No vendor types in this header. */
#ifndef EXEC_DEVICE_H
#define EXEC_DEVICE_H

#include <stddef.h>
#include "prof_mem.h"

typedef enum { DEVICE_HOST = 0, DEVICE_CUDA } DeviceKind;

typedef struct Device Device;   /* opaque */

/* Creates the device for this process. For CUDA, local_rank picks the GPU. Returns NULL with a
 * message in err: "no CUDA device (<driver's reason>)" when none is present, "built without
 * CUDA (NO_CUDA=1)" when compiled out. */
Device *exec_device_create(DeviceKind kind, int local_rank, char *err, size_t errlen);
void exec_device_destroy(Device *d);
DeviceKind exec_device_kind(const Device *d);
const char *exec_device_name(const Device *d);   /* "host" or the GPU's name */
int exec_device_cuda_available(void);             /* number of CUDA devices, 0 if none/compiled out */

/* Tracked allocation helpers: memory on the device, counted in the tracker under cat. */
MemTracker *exec_device_tracker_create(Device *d, size_t limit_bytes);
void exec_device_copy(Device *d, void *dst, const void *src, size_t bytes);   /* any direction */
void exec_device_memset(Device *d, void *p, int value, size_t bytes);
void exec_device_synchronize(Device *d);

/* ---- additions ---- */
/* CUDA ordinal in use (local_rank % number of GPUs, so ranks may share one GPU); -1 for host. */
int exec_device_index(const Device *d);
/* Non-zero once a CUDA call in copy/memset/synchronize/free failed (message already printed):
 * the context is likely faulted; the run loop should stop and abort the communicator. */
int exec_device_failed(const Device *d);
/* The device's compute stream (cudaStream_t as void*; NULL for host): kernels, memsets, copies
 * and the tracked allocator's stream-ordered allocations (cudaMallocAsync/cudaFreeAsync) go
 * there. Created non-blocking: it never waits for the legacy default stream, nor it for it. */
void *exec_device_stream(Device *d);
/* Free and total memory: cudaMemGetInfo on a GPU, physical RAM on the host. 0 or -1. */
int exec_device_mem_info(Device *d, size_t *free_bytes, size_t *total_bytes);

/* ---- the GPU engine's additions ---- */
/* Number of CUDA devices; 0 with the reason in why: "no CUDA device (<driver's reason>)" or
 * "built without CUDA (NO_CUDA=1)". Creates no context. */
int exec_device_cuda_count(char *why, size_t whylen);
/* The communication stream (non-blocking, NULL for host): NCCL collectives run there
 * (comm_set_stream), so they overlap the kernels of the compute stream; comm_set_after_stream
 * orders each collective after the compute work queued before it. */
void *exec_device_comm_stream(Device *d);
/* Waits for the compute stream only (the collectives on the comm stream are completed by
 * comm_wait, which polls with a timeout). Host: nothing. 0, or -1 (printed; device failed). */
int exec_device_sync_compute(Device *d);
/* Semantics on a GPU: exec_device_copy and exec_device_memset are ordered on the compute stream;
 * a copy returns once it is complete when either side is host memory (so host buffers may be
 * read or reused at once), a device-to-device copy and a memset return at once.
 * exec_device_synchronize waits for both streams. On the host all three are plain memcpy,
 * memset and nothing. */

#endif
