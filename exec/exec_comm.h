/* exec_comm.h — the communication interface of the executor: MPI (CPU) or NCCL (GPU), with a
 * single-process "self" backend when one rank runs alone, whose collectives are host copies (on
 * one rank the strategies train the plain replica and SyncBN skips its collectives, so device
 * buffers never reach it; a GPU job of several ranks collects over NCCL). Every call is counted
 * in the profiler's CommCounters. Reductions are SUM. Non-blocking calls return a request that must
 * be completed with comm_wait (which polls with a timeout). Under MPI, all-reduce, reduce-scatter
 * and all-gather progress on a thread of their own (comm_set_mpi_progress); the other calls are
 * MPI_I* requests that OpenMPI 4.1 progresses only inside MPI calls, so long compute loops call
 * comm_progress now and then.
 *
 * MPI also bootstraps NCCL: rank 0 creates the unique id and broadcasts it over MPI. That
 * lives in exec_comm.c only. No vendor types in this header. */
#ifndef EXEC_COMM_H
#define EXEC_COMM_H

#include <stddef.h>
#include "prof_comm.h"

typedef enum { COMM_SELF = 0, COMM_MPI, COMM_NCCL } CommKind;
typedef enum { DT_F32 = 0, DT_BF16, DT_F16, DT_I32, DT_F64, DT_U8, DT_COUNT } DType;
size_t exec_dtype_size(DType t);

typedef struct Comm Comm;           /* opaque */
typedef struct CommReq CommReq;     /* opaque; completed and freed by comm_wait */

/* Initializes MPI if needed (MPI_Init_thread), or runs alone as COMM_SELF when kind is
 * COMM_SELF. For COMM_NCCL, MPI is initialized too and bootstraps the NCCL communicator on
 * GPU local_rank % (number of GPUs), the GPU exec_device_create picks for the same local rank.
 * timeout_s bounds every wait (<= 0: 300 s). Returns NULL with a message in err on failure
 * ("built without NCCL ..." when compiled out). Sets the process's host memory policy first
 * (glibc: one arena, no mmapped blocks, no trimming), so that freed step buffers and MPI's
 * collective scratch are reused, not faulted in again every step. */
Comm *comm_create(CommKind kind, int *argc, char ***argv, double timeout_s, char *err, size_t errlen);
/* COMM_MPI when a launcher started this process (exec_launch.h), else COMM_SELF: what a command
 * that runs under mpirun or alone passes to comm_create. */
CommKind comm_launch_kind(void);
void comm_destroy(Comm *c);          /* finalizes MPI if comm_create initialized it */
CommKind comm_kind(const Comm *c);
int comm_rank(const Comm *c);
int comm_size(const Comm *c);
int comm_local_rank(const Comm *c);  /* rank within the node (picks the GPU) */
void comm_set_counters(Comm *c, CommCounters *counters);   /* NULL: do not count */
void comm_set_stream(Comm *c, void *cuda_stream);          /* NCCL: stream for collectives */
/* NCCL: every collective first waits (on the GPU, cudaStreamWaitEvent) for the work queued on
 * this stream before it was issued, e.g. the device's compute stream whose kernels wrote the
 * buffers it reads; the host program order of compute and communication is then the GPU's
 * order too. NULL (default): no such wait. Completion stays host-polled (comm_wait). */
void comm_set_after_stream(Comm *c, void *cuda_stream);

/* Collectives. count = elements. req == NULL: blocking. All return 0 or -1 (error printed,
 * with the rank, and the communicator should then be aborted). Sizes:
 *   all_reduce:     send[count] -> recv[count] (send == recv allowed: in place)
 *   reduce_scatter: send[count * size] -> recv[count]   (rank r receives block r;
 *                   in place: send == recv, the result lands in the first block)
 *   all_gather:     send[count] -> recv[count * size]   (in place allowed: send == recv + r*count)
 *   all_gather_v:   send[counts[rank]] -> recv at displs[r] for each r
 *   broadcast:      buf[count] from root */
int comm_all_reduce(Comm *c, const void *send, void *recv, size_t count, DType t, CommReq **req);
int comm_reduce_scatter(Comm *c, const void *send, void *recv, size_t count, DType t, CommReq **req);
int comm_all_gather(Comm *c, const void *send, void *recv, size_t count, DType t, CommReq **req);
int comm_all_gather_v(Comm *c, const void *send, void *recv, const size_t *counts,
                      const size_t *displs, DType t);
int comm_broadcast(Comm *c, void *buf, size_t count, DType t, int root);
/* All-to-all (expert parallelism's token dispatch and combine), payload = the send buffer:
 *   all_to_all:   send[count * size] -> recv[count * size]: block i of send goes to rank i, where
 *                 it lands in block r of recv (r the sender); send and recv must not overlap
 *                 (MPI_Ialltoall; NCCL: one ncclSend/ncclRecv pair per peer in a group, as torch's
 *                 all_to_all_single and nccl-tests alltoall.cu run it)
 *   all_to_all_v: block i is send_counts[i] elements at send_displs[i], arriving from rank i at
 *                 recv_displs[i] (recv_counts[i] elements); blocking (MPI_Ialltoallv waited for;
 *                 NCCL: the same grouped pairs) */
int comm_all_to_all(Comm *c, const void *send, void *recv, size_t count, DType t, CommReq **req);
int comm_all_to_all_v(Comm *c, const void *send, const size_t *send_counts, const size_t *send_displs, void *recv,
                      const size_t *recv_counts, const size_t *recv_displs, DType t);
int comm_barrier(Comm *c);
/* Polls outstanding requests once (call it inside long compute loops). */
void comm_progress(Comm *c);
/* Completes req (polling, bounded by the timeout); frees it. -1 on timeout or error. */
int comm_wait(Comm *c, CommReq *req);
/* Aborts every rank with a message (MPI_Abort / ncclCommAbort); does not return. */
void comm_abort(Comm *c, const char *why);

/* Checks that every rank passed the same 64-bit value (e.g. a hash of the configuration).
 * Returns 0 if equal; -1 otherwise, with the first differing rank in *bad_rank. */
int comm_check_same(Comm *c, unsigned long long value, int *bad_rank);

/* ---- additions ---- */
/* Reductions under MPI take fp32, fp64, int32, uint8; bf16/fp16 are refused with an error
 * there (they move as 2-byte units in gathers and broadcasts) and reduced natively by NCCL.
 * Blocking calls are issued non-blocking and waited for, so every call obeys the timeout;
 * on timeout the rank prints "rank R: collective X timed out after T s (a peer may have died
 * or stalled)" and aborts the job (ncclCommAbort, MPI_Abort). A blocking call counts its time
 * from issue to completion; a non-blocking one is counted when it completes, in the phase it
 * was issued in. comm_check_same is a check, not traffic: it is not counted. */
const char *exec_dtype_name(DType t);          /* "fp32", "bf16", ... */
int comm_local_size(const Comm *c);            /* ranks on this node */
/* CPUs this rank was pinned to when the launcher left the node's ranks unbound on one shared
 * set (they are spread over it in blocks; MEMPLAN_BIND=none leaves them, auto or unset is the
 * default, another value fails comm_create); 0 when not pinned. */
int comm_pinned_cpus(const Comm *c);
int comm_pinned_from(const Comm *c);           /* the CPUs of the shared set; 0 when not pinned */
double comm_timeout(const Comm *c);            /* seconds */
void comm_set_timeout(Comm *c, double timeout_s);
int comm_outstanding(const Comm *c);           /* non-blocking requests not yet waited for */

/* A communicator of the ranks of parent that pass the same color >= 0 (ordered as in parent);
 * every rank of parent calls it. A rank passing color < 0 gets NULL with err "" (not a member).
 * MPI and SELF; NULL with a message for NCCL. Counters and stream start unset; destroy it with
 * comm_destroy before the parent. */
Comm *comm_split(Comm *parent, int color, char *err, size_t errlen);
/* A barrier for ranks that have nothing to do meanwhile: it sleeps poll_s between polls, so on
 * an oversubscribed machine the waiting ranks leave the cores to the working ones (comm_wait
 * spins with sched_yield, which still competes). Obeys the timeout; counted as a barrier. */
int comm_barrier_idle(Comm *c, double poll_s);

/* MPI: all-reduce, reduce-scatter and all-gather run on a progress thread as the library's
 * blocking collectives (default, when MPI provides MPI_THREAD_MULTIPLE), or, with thread 0, as
 * non-blocking MPI_I* calls progressed by MPI_Test (comm_progress, comm_wait). Call it with no
 * request outstanding; the same on every rank. comm_mpi_progress: 1 when the thread is in use. */
void comm_set_mpi_progress(Comm *c, int thread);
int comm_mpi_progress(const Comm *c);

#endif
