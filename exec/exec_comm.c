/* exec_comm.c — the communication backends behind exec_comm.h. Each backend is a table of
 * operations (CommBackend), chosen once, when the communicator is created: every public
 * collective checks its arguments, makes a request holding them, and makes one call through the
 * table; each request is completed by the backend that issued it (tested, waited for with a
 * wall-clock timeout, so nothing blocks forever).
 *   SELF        one process, no MPI calls: the collectives are host copies;
 *   MPI         MPI_COMM_WORLD (duplicated): every call issued non-blocking (MPI_I*) and completed
 *               by polling MPI_Test;
 *   MPI_THREAD  the same, except that all-reduce, reduce-scatter, all-gather and all-to-all (of
 *               equal blocks) go to a progress
 *               thread per communicator, which runs them one after another, in issue order, as
 *               the library's blocking collectives on a communicator of its own
 *               (MPI_THREAD_MULTIPLE): they move data at the blocking collective's bandwidth and
 *               progress while the caller computes; one the caller waits for before the thread
 *               took it, the caller runs itself (the thread then keeps its timeout). OpenMPI
 *               4.1's non-blocking collectives (libnbc) progress only inside MPI calls and are
 *               slower (docs/validation.md, "Collectives"). An MPI communicator uses it unless
 *               the library lacks MPI_THREAD_MULTIPLE or it is switched off
 *               (comm_set_mpi_progress);
 *   NCCL        bootstrapped over MPI (rank 0 creates the unique id, MPI_Bcast, ncclCommInitRank
 *               on GPU local_rank % GPUs), collectives on the caller's stream (the device's comm
 *               stream), each ordered after the compute stream's work queued before it
 *               (comm_set_after_stream: an event recorded there, waited for on the comm stream),
 *               and bracketed for CUPTI (prof_cupti_collective_begin/end: NCCL 2.28 runs most
 *               sizes in ncclDevKernel_Generic, whose name says nothing); completion polled
 *               through a CUDA event with ncclCommGetAsyncError checked while waiting. All of it,
 *               the MPI -> NCCL bootstrap included, is in one #if MEMPLAN_NCCL block, whose #else
 *               is a table that says "built without NCCL".
 *
 * Every collective is counted in the CommCounters when it completes, with the payload = the
 * full buffer in bytes (all-reduce count·size, reduce-scatter and all-gather count·n·size,
 * broadcast count·size, all-to-all the rank's send buffer), the time from issue to completion as this rank saw it, and the phase
 * in which it was issued. */
#include "exec_comm.h"
#include "exec_launch.h"
#include "prof_check.h"
#include "prof_cupti.h"

#include <dirent.h>
#include <limits.h>
#include <malloc.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* MPI counts are int: all-reduce and broadcast of longer buffers go out in chunks. */
#define MPI_CHUNK_ELEMS ((size_t)1 << 30)

typedef struct {
    const char *name;
    size_t size;
    MPI_Datatype mpi;        /* how MPI moves it (bf16/f16: opaque 2-byte units) */
    int mpi_sum;             /* MPI can sum it */
} DTypeInfo;

static const DTypeInfo DTYPES[DT_COUNT] = {
    [DT_F32] = {"fp32", 4, MPI_FLOAT, 1},
    [DT_BF16] = {"bf16", 2, MPI_UINT16_T, 0},
    [DT_F16] = {"fp16", 2, MPI_UINT16_T, 0},
    [DT_I32] = {"int32", 4, MPI_INT32_T, 1},
    [DT_F64] = {"fp64", 8, MPI_DOUBLE, 1},
    [DT_U8] = {"uint8", 1, MPI_UINT8_T, 1},
};

size_t exec_dtype_size(DType t) { return (unsigned)t < DT_COUNT ? DTYPES[t].size : 0; }
const char *exec_dtype_name(DType t) { return (unsigned)t < DT_COUNT ? DTYPES[t].name : "unknown"; }

typedef struct CommBackend CommBackend;
struct NcclComm;   /* the NCCL backend's state (its section below) */

struct CommReq {
    CommReq *prev, *next;    /* the communicator's outstanding list */
    const CommBackend *be;   /* the backend that issued it, which tests it and waits for it */
    CollKind op;
    int counted;             /* record in the counters (not for comm_check_same) */
    int blocking;            /* the caller waits for it right after the issue */
    double payload;          /* bytes */
    double t_issue, t_done;  /* s, monotonic */
    int done;
    char phase[32];          /* counters' phase at issue */
    /* the call, as every backend reads it */
    const void *send;
    void *recv;
    size_t count;            /* elements: all-reduce and broadcast the buffer, reduce-scatter the
                                block a rank receives, all-gather the piece a rank sends */
    DType dtype;
    int in_place;
    int root;                        /* broadcast */
    const size_t *counts, *displs;   /* all_gather_v: read during the issue only; all_to_all_v:
                                        the send side */
    const size_t *rcounts, *rdispls; /* all_to_all_v: the receive side */
    /* MPI: the requests of its non-blocking calls */
    int nmpi;
    MPI_Request *mpi;        /* points at mpi_one or an allocation */
    MPI_Request mpi_one;
    int *scratch;            /* all_gather_v's int counts and displacements: alive until completion */
    /* the progress thread: run there (or by the waiting caller) as the blocking collective */
    int bg;                  /* queued for the thread (else an MPI_I* request of that backend) */
    CommReq *bg_next;        /* the thread's queue */
    int bg_done, bg_rc;      /* written by the thread under its mutex; bg_done read atomically */
    double t_bg_done;
    /* NCCL */
    void *event;             /* the cudaEvent_t recorded behind the collective on the comm stream */
};

/* A backend: its operations, filled per backend. */
struct CommBackend {
    const char *name;
    int mpi_limits;          /* moves MPI datatypes: int counts, sums only of what MPI can sum */
    /* joins the job (comm_create); 0, or -1 with err. May pick another table of the same kind. */
    int (*open)(Comm *c, int *argc, char ***argv, char *err, size_t errlen);
    /* releases what open made; 1: c's memory must stay (a thread left behind still reads it) */
    int (*close)(Comm *c);
    /* starts r's collective, its arguments in r: 0, or -1 (printed) */
    int (*issue[COLL_COUNT])(Comm *c, CommReq *r);
    int (*test)(Comm *c, CommReq *r);                     /* 1 complete (counted), 0 not yet, -1 failed */
    void (*claim)(Comm *c, CommReq *r);                   /* the caller waits for r from now on; NULL: - */
    void (*pause)(Comm *c, CommReq *r, double waited_s);  /* between two tests while the caller waits */
    void (*release)(CommReq *r);                          /* frees what issue attached to r; NULL: - */
    void (*abort)(Comm *c);                               /* stops every rank's collectives (returns) */
};

struct Comm {
    CommKind kind;
    const CommBackend *be;
    int rank, size, local_rank, local_size;
    int pinned_cpus;         /* CPUs spread_ranks pinned this rank to; 0: placed by the launcher */
    int pinned_from;         /* ... out of the set the node's ranks shared */
    double timeout_s;
    int uses_mpi;            /* counted in g_live_comms */
    MPI_Comm mpi;            /* duplicate of MPI_COMM_WORLD (MPI and NCCL) */
    CommCounters *counters;
    CommReq *outstanding;
    void *stream;            /* NCCL: the cudaStream_t its collectives run on */
    void *after;             /* NCCL: the stream whose queued work they wait for (NULL: none) */
    struct NcclComm *nccl;
    /* the MPI progress thread (started at the first collective it runs) */
    int bg_off;              /* comm_set_mpi_progress(c, 0), or the thread could not start */
    int bg_started;
    pthread_t bg_thread;
    pthread_mutex_t bg_mu;
    pthread_cond_t bg_work, bg_done;
    CommReq *bg_head, *bg_tail;
    int bg_quit;
    int bg_busy;             /* the thread is running a collective */
    CommReq *bg_inline;      /* the caller is running this one itself; the thread watches the clock */
    double bg_deadline;      /* ... and aborts the job when it is not done by then */
    MPI_Comm bg_mpi;         /* the thread's duplicate of mpi */
};

static int g_live_comms;     /* comms using MPI; the last one out finalizes */
static int g_we_initialized; /* MPI_Init_thread was ours, so MPI_Finalize is ours too */
static int g_thread_multiple; /* the library provides MPI_THREAD_MULTIPLE: progress threads */

static const CommBackend SELF_BACKEND, MPI_BACKEND, MPI_THREAD_BACKEND, NCCL_BACKEND;

static void timeout_abort(Comm *c, CommReq *r);

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* ---- requests ---- */

static CommReq *req_new(Comm *c, CollKind op, double payload)
{
    CommReq *r = calloc(1, sizeof *r);
    if (!r) {
        fprintf(stderr, "rank %d: %s: out of host memory\n", c->rank, coll_name(op));
        return NULL;
    }
    r->be = c->be;
    r->op = op;
    r->counted = 1;
    r->payload = payload;
    r->t_issue = now_s();
    snprintf(r->phase, sizeof r->phase, "%s", prof_comm_current_phase(c->counters));
    r->mpi = &r->mpi_one;
    return r;
}

static void req_free(CommReq *r)
{
    if (!r) return;
    if (r->be->release) r->be->release(r);
    if (r->mpi != &r->mpi_one) free(r->mpi);
    free(r->scratch);
    free(r);
}

static void req_unlink(Comm *c, CommReq *r)
{
    if (r->prev) r->prev->next = r->next;
    else if (c->outstanding == r) c->outstanding = r->next;
    if (r->next) r->next->prev = r->prev;
    r->prev = r->next = NULL;
}

/* r completed at t_done (s): counted in the phase it was issued in */
static void mark_done(Comm *c, CommReq *r, double t_done)
{
    r->done = 1;
    r->t_done = t_done;
    if (r->counted)
        prof_comm_record_in(c->counters, r->phase, r->op, r->payload, r->t_done - r->t_issue);
}

/* One non-blocking test of r: 1 done, 0 not yet, -1 error (printed). */
static int req_test(Comm *c, CommReq *r) { return r->done ? 1 : r->be->test(c, r); }

static void yield_core(Comm *c, CommReq *r, double waited_s) { sched_yield(); }

/* ---- SELF: one process. Its "collectives" are host copies: on one rank the strategies train
 * the plain replica and SyncBN skips its collectives, so device buffers never come here. ---- */

static void host_copy(void *dst, const void *src, size_t bytes)
{
    if (dst != src && bytes) memcpy(dst, src, bytes);
}

/* all-reduce, reduce-scatter and all-gather of one rank: recv = send (count elements) */
static int self_copy(Comm *c, CommReq *r)
{
    host_copy(r->recv, r->send, r->count * DTYPES[r->dtype].size);
    return 0;
}

static int self_all_gather_v(Comm *c, CommReq *r)
{
    size_t es = DTYPES[r->dtype].size;
    host_copy((char *)r->recv + r->displs[0] * es, r->send, r->counts[0] * es);
    return 0;
}

static int self_nothing(Comm *c, CommReq *r) { return 0; }   /* broadcast, barrier */

/* all-to-all of one rank: its one block to itself */
static int self_all_to_all(Comm *c, CommReq *r)
{
    size_t es = DTYPES[r->dtype].size;
    if (!r->counts) host_copy(r->recv, r->send, r->count * es);
    else host_copy((char *)r->recv + r->rdispls[0] * es, (const char *)r->send + r->displs[0] * es, r->counts[0] * es);
    return 0;
}

static int self_test(Comm *c, CommReq *r)
{
    mark_done(c, r, now_s());
    return 1;
}

static const CommBackend SELF_BACKEND = {
    .name = "self",
    .issue = {[COLL_ALL_REDUCE] = self_copy, [COLL_REDUCE_SCATTER] = self_copy, [COLL_ALL_GATHER] = self_copy,
              [COLL_BROADCAST] = self_nothing, [COLL_ALL_GATHER_V] = self_all_gather_v, [COLL_BARRIER] = self_nothing,
              [COLL_ALL_TO_ALL] = self_all_to_all},
    .test = self_test,
    .pause = yield_core,
};

/* ---- MPI: joining the job ---- */

/* The progress thread's communicator, duplicated when the communicator is created (a collective
 * call every rank makes at the same point; done lazily, at the first all-reduce, it would be a
 * blocking call outside the timeout). */
static void bg_dup(Comm *c)
{
    c->bg_mpi = MPI_COMM_NULL;
    if (!g_thread_multiple || MPI_CHECK(MPI_Comm_dup(c->mpi, &c->bg_mpi))) {
        c->bg_mpi = MPI_COMM_NULL;
        return;
    }
    MPI_Comm_set_errhandler(c->bg_mpi, MPI_ERRORS_RETURN);
}

/* Ranks that the launcher left on one shared set of CPUs (Open MPI binds nothing once a node
 * has more ranks than cores) are spread over it in blocks: local rank i of n gets the set's
 * CPUs [i*C/n, (i+1)*C/n), at least one, for every thread of the process (the ones MPI and
 * OpenBLAS started are already running; later ones inherit it). Left free, the kernel moves
 * the ranks between the cores as it likes, and the same step took two different times:
 * gpt2-mini ZeRO-3 on 4 ranks over 2 cores measured 46-63 ms in some runs and 72-91 ms in
 * others, so the device description, measured around the run, missed it by up to +44 %
 * (3 of 12 runs beyond 15 %); pinned in blocks, 12 runs were all within 15 % of their
 * predictions (docs/validation.md "Time rows" item 10). Ranks the launcher bound (their sets
 * differ), a rank alone on its node, and MEMPLAN_BIND=none are left as they are. */
static void spread_ranks(Comm *c, MPI_Comm node)
{
    const char *env = getenv("MEMPLAN_BIND");   /* checked by mpi_setup */
    if (c->local_size < 2 || (env && strcmp(env, "none") == 0)) return;
    cpu_set_t mine;
    if (sched_getaffinity(0, sizeof mine, &mine) != 0) CPU_ZERO(&mine);
    /* Every rank of the node takes part, whatever its set: the sets are all equal exactly when
       the AND over ranks of each set and of its complement gives back one's own, and then every
       rank finds so. */
    unsigned char own[2 * sizeof mine], all[2 * sizeof mine];
    memcpy(own, &mine, sizeof mine);
    for (size_t i = 0; i < sizeof mine; i++) own[sizeof mine + i] = (unsigned char)~own[i];
    if (MPI_Allreduce(own, all, (int)sizeof own, MPI_UNSIGNED_CHAR, MPI_BAND, node) != MPI_SUCCESS ||
        memcmp(own, all, sizeof own) != 0)
        return;
    int n = CPU_COUNT(&mine);
    if (n < 2) return;
    int lo = (int)((long)c->local_rank * n / c->local_size);
    int hi = (int)((long)(c->local_rank + 1) * n / c->local_size);
    if (hi <= lo) hi = lo + 1;
    cpu_set_t pin;
    CPU_ZERO(&pin);
    for (int cpu = 0, k = 0; cpu < CPU_SETSIZE && k < hi; cpu++) {
        if (!CPU_ISSET(cpu, &mine)) continue;
        if (k >= lo) CPU_SET(cpu, &pin);
        k++;
    }
    DIR *d = opendir("/proc/self/task");
    if (d) {
        struct dirent *e;
        while ((e = readdir(d)))
            if (e->d_name[0] != '.') sched_setaffinity((pid_t)atoi(e->d_name), sizeof pin, &pin);
        closedir(d);
    }
    if (sched_setaffinity(0, sizeof pin, &pin) == 0) c->pinned_cpus = CPU_COUNT(&pin), c->pinned_from = n;
}

static int mpi_setup(Comm *c, int *argc, char ***argv, char *err, size_t errlen)
{
    const char *bind = getenv("MEMPLAN_BIND");
    if (bind && *bind && strcmp(bind, "auto") != 0 && strcmp(bind, "none") != 0) {
        snprintf(err, errlen, "MEMPLAN_BIND=%.40s: valid values are auto (the default: ranks the launcher left "
                              "unbound are pinned in blocks of the CPUs) and none (left as they are)", bind);
        return -1;
    }
    int init = 0, fin = 0;
    MPI_Finalized(&fin);
    if (fin) {
        snprintf(err, errlen, "MPI was already finalized in this process");
        return -1;
    }
    MPI_Initialized(&init);
    if (!init) {
        /* A wait inside Open MPI yields the core between polls (its default only when it sees
           the node oversubscribed): the progress thread shares its rank's core with the
           rank's compute, and a collective issued behind compute waits there for peers that
           issue later; busy-polling, it took half the core for that wait (gpt2-mini ZeRO-3 on
           2 ranks, 15 such collectives a step: 53-66 ms a step against DDP's 46-51; yielding:
           48-51 against 48-50; docs/validation.md "Time rows" item 8). A value the user set
           is kept. */
        setenv("OMPI_MCA_mpi_yield_when_idle", "1", 0);
        int provided;
        if (MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS) {
            snprintf(err, errlen, "MPI_Init_thread failed");
            return -1;
        }
        g_we_initialized = 1;
    }
    int level = MPI_THREAD_SINGLE;
    MPI_Query_thread(&level);
    g_thread_multiple = level == MPI_THREAD_MULTIPLE;
    c->uses_mpi = 1;
    g_live_comms++;
    if (MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &c->mpi))) goto fail;
    /* Errors come back to MPI_CHECK instead of aborting inside MPI. */
    if (MPI_CHECK(MPI_Comm_set_errhandler(c->mpi, MPI_ERRORS_RETURN))) goto fail;
    if (MPI_CHECK(MPI_Comm_rank(c->mpi, &c->rank)) || MPI_CHECK(MPI_Comm_size(c->mpi, &c->size)))
        goto fail;
    bg_dup(c);
    MPI_Comm node;
    if (MPI_CHECK(MPI_Comm_split_type(c->mpi, MPI_COMM_TYPE_SHARED, c->rank, MPI_INFO_NULL, &node)))
        goto fail;
    MPI_Comm_rank(node, &c->local_rank);
    MPI_Comm_size(node, &c->local_size);
    spread_ranks(c, node);
    MPI_Comm_free(&node);
    return 0;
fail:
    snprintf(err, errlen, "MPI setup failed (see the message above)");
    return -1;
}

/* An MPI communicator's table: the progress thread's when the library is MPI_THREAD_MULTIPLE,
 * the thread's communicator exists and the thread is not switched off; plain MPI otherwise. */
static void mpi_pick(Comm *c)
{
    c->be = !c->bg_off && g_thread_multiple && c->bg_mpi != MPI_COMM_NULL ? &MPI_THREAD_BACKEND : &MPI_BACKEND;
}

static int mpi_open(Comm *c, int *argc, char ***argv, char *err, size_t errlen)
{
    if (mpi_setup(c, argc, argv, err, errlen)) return -1;
    mpi_pick(c);
    return 0;
}

static int bg_stop(Comm *c);

static int mpi_close(Comm *c)
{
    int left_behind = bg_stop(c);   /* then c stays allocated: the thread may still read it */
    if (c->bg_mpi != MPI_COMM_NULL && !left_behind) MPI_Comm_free(&c->bg_mpi);
    if (c->mpi != MPI_COMM_NULL) MPI_Comm_free(&c->mpi);
    if (c->uses_mpi && --g_live_comms == 0 && g_we_initialized) {
        /* MPI cannot be initialized twice in a process: a later comm_create then fails. */
        int fin = 0;
        MPI_Finalized(&fin);
        if (!fin && !left_behind) MPI_Finalize();
    }
    return left_behind;
}

static void mpi_abort(Comm *c)
{
    int init = 0, fin = 0;
    MPI_Initialized(&init);
    MPI_Finalized(&fin);
    if (init && !fin) MPI_Abort(c->mpi != MPI_COMM_NULL ? c->mpi : MPI_COMM_WORLD, 1);
}

/* ---- MPI: the collectives ---- */

/* r gets n MPI requests, all MPI_REQUEST_NULL. 0 or -1. */
static int mpi_reqs(Comm *c, CommReq *r, int n)
{
    if (n > 1 && !(r->mpi = malloc((size_t)n * sizeof *r->mpi))) {
        r->mpi = &r->mpi_one;
        fprintf(stderr, "rank %d: %s: out of host memory\n", c->rank, coll_name(r->op));
        return -1;
    }
    r->nmpi = n;
    for (int i = 0; i < n; i++) r->mpi[i] = MPI_REQUEST_NULL;
    return 0;
}

/* The chunks of an all-reduce or a broadcast of count elements: at least one (count 0 too). */
static int nchunks(size_t count)
{
    return count == 0 ? 1 : (int)((count + MPI_CHUNK_ELEMS - 1) / MPI_CHUNK_ELEMS);
}

static size_t chunk_len(size_t count, int i)
{
    size_t off = (size_t)i * MPI_CHUNK_ELEMS;
    return count - off < MPI_CHUNK_ELEMS ? count - off : MPI_CHUNK_ELEMS;
}

/* The reductions and the gather on comm: blocking (req NULL, the progress thread's) or
 * non-blocking (req[i]: where each call's request goes), with the same arguments. */
static int mpi_all_reduce_on(CommReq *r, MPI_Comm comm, MPI_Request *req)
{
    size_t es = DTYPES[r->dtype].size;
    MPI_Datatype t = DTYPES[r->dtype].mpi;
    for (int i = 0; i < nchunks(r->count); i++) {
        size_t off = (size_t)i * MPI_CHUNK_ELEMS;
        const void *s = r->in_place ? MPI_IN_PLACE : (const char *)r->send + off * es;
        void *d = (char *)r->recv + off * es;
        int n = (int)chunk_len(r->count, i);
        if (req ? MPI_CHECK(MPI_Iallreduce(s, d, n, t, MPI_SUM, comm, &req[i]))
                : MPI_CHECK(MPI_Allreduce(s, d, n, t, MPI_SUM, comm)))
            return -1;
    }
    return 0;
}

static int mpi_reduce_scatter_on(CommReq *r, MPI_Comm comm, MPI_Request *req)
{
    const void *s = r->in_place ? MPI_IN_PLACE : r->send;
    MPI_Datatype t = DTYPES[r->dtype].mpi;
    return req ? MPI_CHECK(MPI_Ireduce_scatter_block(s, r->recv, (int)r->count, t, MPI_SUM, comm, req))
               : MPI_CHECK(MPI_Reduce_scatter_block(s, r->recv, (int)r->count, t, MPI_SUM, comm));
}

static int mpi_all_gather_on(CommReq *r, MPI_Comm comm, MPI_Request *req)
{
    const void *s = r->in_place ? MPI_IN_PLACE : r->send;
    MPI_Datatype t = DTYPES[r->dtype].mpi;
    int n = (int)r->count;
    return req ? MPI_CHECK(MPI_Iallgather(s, n, t, r->recv, n, t, comm, req))
               : MPI_CHECK(MPI_Allgather(s, n, t, r->recv, n, t, comm));
}

static int mpi_all_reduce(Comm *c, CommReq *r)
{
    return mpi_reqs(c, r, nchunks(r->count)) || mpi_all_reduce_on(r, c->mpi, r->mpi) ? -1 : 0;
}

static int mpi_reduce_scatter(Comm *c, CommReq *r)
{
    return mpi_reqs(c, r, 1) || mpi_reduce_scatter_on(r, c->mpi, r->mpi) ? -1 : 0;
}

static int mpi_all_gather(Comm *c, CommReq *r)
{
    return mpi_reqs(c, r, 1) || mpi_all_gather_on(r, c->mpi, r->mpi) ? -1 : 0;
}

static int mpi_all_gather_v(Comm *c, CommReq *r)
{
    /* The int arrays must stay alive until the request completes. */
    if (mpi_reqs(c, r, 1)) return -1;
    if (!(r->scratch = malloc(2 * (size_t)c->size * sizeof(int)))) {
        fprintf(stderr, "rank %d: all_gather_v: out of host memory\n", c->rank);
        return -1;
    }
    int *ic = r->scratch, *id = r->scratch + c->size;
    for (int i = 0; i < c->size; i++) {
        ic[i] = (int)r->counts[i];
        id[i] = (int)r->displs[i];
    }
    MPI_Datatype t = DTYPES[r->dtype].mpi;
    return MPI_CHECK(MPI_Iallgatherv(r->in_place ? MPI_IN_PLACE : r->send, ic[c->rank], t, r->recv, ic, id, t, c->mpi,
                                     &r->mpi[0]));
}

static int mpi_broadcast(Comm *c, CommReq *r)
{
    size_t es = DTYPES[r->dtype].size;
    if (mpi_reqs(c, r, nchunks(r->count))) return -1;
    for (int i = 0; i < r->nmpi; i++) {
        size_t off = (size_t)i * MPI_CHUNK_ELEMS;
        if (MPI_CHECK(MPI_Ibcast((char *)r->recv + off * es, (int)chunk_len(r->count, i), DTYPES[r->dtype].mpi, r->root,
                                 c->mpi, &r->mpi[i])))
            return -1;
    }
    return 0;
}

/* all-to-all: MPI_Ialltoall of equal blocks, or MPI_Ialltoallv with int counts and displacements
   (kept in r->scratch until the request completes) */
static int mpi_all_to_all(Comm *c, CommReq *r)
{
    MPI_Datatype t = DTYPES[r->dtype].mpi;
    if (mpi_reqs(c, r, 1)) return -1;
    if (!r->counts)
        return MPI_CHECK(MPI_Ialltoall(r->send, (int)r->count, t, r->recv, (int)r->count, t, c->mpi, &r->mpi[0]));
    if (!(r->scratch = malloc(4 * (size_t)c->size * sizeof(int)))) {
        fprintf(stderr, "rank %d: all_to_all_v: out of host memory\n", c->rank);
        return -1;
    }
    int *sc = r->scratch, *sd = sc + c->size, *rc = sd + c->size, *rd = rc + c->size;
    for (int i = 0; i < c->size; i++) {
        sc[i] = (int)r->counts[i];
        sd[i] = (int)r->displs[i];
        rc[i] = (int)r->rcounts[i];
        rd[i] = (int)r->rdispls[i];
    }
    return MPI_CHECK(MPI_Ialltoallv(r->send, sc, sd, t, r->recv, rc, rd, t, c->mpi, &r->mpi[0]));
}

static int mpi_barrier(Comm *c, CommReq *r)
{
    return mpi_reqs(c, r, 1) || MPI_CHECK(MPI_Ibarrier(c->mpi, &r->mpi[0])) ? -1 : 0;
}

static int mpi_test(Comm *c, CommReq *r)
{
    int flag = 0;
    if (MPI_CHECK(MPI_Testall(r->nmpi, r->mpi, &flag, MPI_STATUSES_IGNORE))) return -1;
    if (flag) mark_done(c, r, now_s());
    return flag;
}

static const CommBackend MPI_BACKEND = {
    .name = "mpi",
    .mpi_limits = 1,
    .open = mpi_open,
    .close = mpi_close,
    .issue = {[COLL_ALL_REDUCE] = mpi_all_reduce, [COLL_REDUCE_SCATTER] = mpi_reduce_scatter,
              [COLL_ALL_GATHER] = mpi_all_gather, [COLL_BROADCAST] = mpi_broadcast,
              [COLL_ALL_GATHER_V] = mpi_all_gather_v, [COLL_BARRIER] = mpi_barrier,
              [COLL_ALL_TO_ALL] = mpi_all_to_all},
    .test = mpi_test,
    .pause = yield_core,
    .abort = mpi_abort,
};

/* ---- the MPI progress thread ----
 * One per communicator, started at its first all-reduce / reduce-scatter / all-gather. It pops
 * requests in issue order and runs each as the blocking collective on bg_mpi (a duplicate of
 * the communicator: the caller's own MPI calls on mpi do not interleave with its traffic).
 * Every rank issues the same collectives in the same order, so the threads match. A caller that
 * waits for a collective the thread has not started (a blocking call, or a wait right after the
 * issue) runs it itself, with the thread as the watchdog of its timeout (bg_run_inline);
 * otherwise the caller spins BG_SPIN_S (short collectives finish without a sleep and a wake-up),
 * then sleeps on bg_done so that the thread has the core. A blocking call wakes nobody: it is
 * queued without a signal and run inline, and the idle thread looks every BG_TICK_S for an
 * inline collective to watch (on 2 ranks on 2 cores, the three wake-ups a blocking call made
 * cost 10-20 % of a 1 MiB all-gather's time; bench_allreduce). */
#define BG_SPIN_S 200e-6
#define BG_TICK_S 0.1

/* until = now + s on the realtime clock, as pthread_cond_timedwait wants it */
static void deadline_in(struct timespec *until, double s)
{
    clock_gettime(CLOCK_REALTIME, until);
    long ns = until->tv_nsec + (long)(s * 1e9);
    until->tv_sec += ns / 1000000000L;
    until->tv_nsec = ns % 1000000000L;
}

/* The blocking collective r, on the thread's communicator */
static int bg_run(Comm *c, CommReq *r)
{
    switch (r->op) {
    case COLL_ALL_REDUCE: return mpi_all_reduce_on(r, c->bg_mpi, NULL);
    case COLL_REDUCE_SCATTER: return mpi_reduce_scatter_on(r, c->bg_mpi, NULL);
    case COLL_ALL_GATHER: return mpi_all_gather_on(r, c->bg_mpi, NULL);
    case COLL_ALL_TO_ALL: {
        MPI_Datatype t = DTYPES[r->dtype].mpi;
        return MPI_CHECK(MPI_Alltoall(r->send, (int)r->count, t, r->recv, (int)r->count, t, c->bg_mpi));
    }
    default: return -1;
    }
}

static void bg_finish(Comm *c, CommReq *r, int rc)   /* under bg_mu */
{
    r->bg_rc = rc;
    r->t_bg_done = now_s();
    __atomic_store_n(&r->bg_done, 1, __ATOMIC_RELEASE);
    pthread_cond_broadcast(&c->bg_done);
}

static void *bg_main(void *arg)
{
    Comm *c = arg;
    pthread_mutex_lock(&c->bg_mu);
    for (;;) {
        if (c->bg_inline) {   /* the watchdog of the caller's own blocking collective */
            struct timespec until;
            double left = c->bg_deadline - now_s();
            if (left <= 0) {
                CommReq *r = c->bg_inline;
                pthread_mutex_unlock(&c->bg_mu);
                timeout_abort(c, r);   /* does not return */
            }
            deadline_in(&until, left);
            pthread_cond_timedwait(&c->bg_work, &c->bg_mu, &until);
            continue;
        }
        if (c->bg_head) {
            CommReq *r = c->bg_head;
            c->bg_head = r->bg_next;
            if (!c->bg_head) c->bg_tail = NULL;
            c->bg_busy = 1;
            pthread_mutex_unlock(&c->bg_mu);
            int rc = bg_run(c, r);
            pthread_mutex_lock(&c->bg_mu);
            c->bg_busy = 0;
            bg_finish(c, r, rc);
            continue;
        }
        if (c->bg_quit) break;
        struct timespec tick;   /* a blocking call starts its inline run without a signal */
        deadline_in(&tick, BG_TICK_S);
        pthread_cond_timedwait(&c->bg_work, &c->bg_mu, &tick);
    }
    pthread_mutex_unlock(&c->bg_mu);
    return NULL;
}

/* The caller waits for r: when the thread has not started it and nothing is ahead of it, the
 * caller runs it itself (no hand-over and wake-up, which a busy machine makes milliseconds
 * long) while the thread keeps the timeout. 1 when it ran here (done, or failed: bg_rc). */
static int bg_run_inline(Comm *c, CommReq *r)
{
    pthread_mutex_lock(&c->bg_mu);
    if (c->bg_head != r || c->bg_busy || r->bg_done) {
        pthread_mutex_unlock(&c->bg_mu);
        return 0;
    }
    c->bg_head = r->bg_next;
    if (!c->bg_head) c->bg_tail = NULL;
    c->bg_inline = r;   /* the thread sees it within BG_TICK_S: no wake-up */
    c->bg_deadline = now_s() + c->timeout_s;
    pthread_mutex_unlock(&c->bg_mu);
    int rc = bg_run(c, r);
    pthread_mutex_lock(&c->bg_mu);
    c->bg_inline = NULL;
    bg_finish(c, r, rc);
    if (c->bg_head) pthread_cond_signal(&c->bg_work);   /* the thread goes back to its queue */
    pthread_mutex_unlock(&c->bg_mu);
    return 1;
}

/* Starts the thread (the first collective it runs). 0, or -1 when it cannot be started. */
static int bg_start(Comm *c)
{
    c->bg_quit = 0;
    MPI_Comm_set_errhandler(c->bg_mpi, MPI_ERRORS_RETURN);
    pthread_mutex_init(&c->bg_mu, NULL);
    pthread_cond_init(&c->bg_work, NULL);
    pthread_cond_init(&c->bg_done, NULL);
    if (pthread_create(&c->bg_thread, NULL, bg_main, c) != 0) return -1;
    c->bg_started = 1;
    return 0;
}

/* Queues r; wakes the thread only for a non-blocking issue (wake): a blocking one is run by
 * its caller's wait right after, or, with work ahead of it, by the thread that is running that
 * work and pops r next without sleeping. */
static void bg_push(Comm *c, CommReq *r, int wake)
{
    r->bg = 1;
    pthread_mutex_lock(&c->bg_mu);
    if (c->bg_tail) c->bg_tail->bg_next = r;
    else c->bg_head = r;
    c->bg_tail = r;
    if (wake) pthread_cond_signal(&c->bg_work);
    pthread_mutex_unlock(&c->bg_mu);
}

/* Sleeps until r is done or about left_s (capped at 0.1 s, so the caller rechecks the timeout). */
static void bg_sleep(Comm *c, CommReq *r, double left_s)
{
    if (left_s > 0.1) left_s = 0.1;
    if (left_s < 0) left_s = 0;
    struct timespec until;
    deadline_in(&until, left_s);
    pthread_mutex_lock(&c->bg_mu);
    if (!r->bg_done) pthread_cond_timedwait(&c->bg_done, &c->bg_mu, &until);
    pthread_mutex_unlock(&c->bg_mu);
}

/* Joins the thread when its queue is empty and returns 0; a thread still busy (a collective
 * that failed or never completed: the process is on its way out) is left behind, detached, and
 * 1 tells the caller to leave the communicator's memory to it. */
static int bg_stop(Comm *c)
{
    if (!c->bg_started) return 0;
    pthread_mutex_lock(&c->bg_mu);
    c->bg_quit = 1;
    int busy = c->bg_head != NULL || c->outstanding != NULL;
    pthread_cond_signal(&c->bg_work);
    pthread_mutex_unlock(&c->bg_mu);
    if (busy) {
        pthread_detach(c->bg_thread);
        return 1;
    }
    pthread_join(c->bg_thread, NULL);
    pthread_mutex_destroy(&c->bg_mu);
    pthread_cond_destroy(&c->bg_work);
    pthread_cond_destroy(&c->bg_done);
    c->bg_started = 0;
    return 0;
}

/* all-reduce, reduce-scatter, all-gather: queued for the thread */
static int bg_issue(Comm *c, CommReq *r)
{
    if (!c->bg_started && bg_start(c)) {   /* no thread: plain MPI from now on */
        c->bg_off = 1;
        c->be = r->be = &MPI_BACKEND;
        return MPI_BACKEND.issue[r->op](c, r);
    }
    bg_push(c, r, !r->blocking);
    return 0;
}

/* all-to-all: equal blocks go to the thread as the blocking MPI_Alltoall; the v form stays an
   MPI_Ialltoallv request */
static int bg_issue_a2a(Comm *c, CommReq *r)
{
    return r->counts ? mpi_all_to_all(c, r) : bg_issue(c, r);
}

static int bg_test(Comm *c, CommReq *r)
{
    if (!r->bg) return mpi_test(c, r);   /* broadcast, all-gather-v, barrier: MPI_I* requests */
    if (!__atomic_load_n(&r->bg_done, __ATOMIC_ACQUIRE)) return 0;
    if (r->bg_rc) return -1;
    mark_done(c, r, r->t_bg_done);   /* timed to when the thread finished it, not when we looked */
    return 1;
}

static void bg_claim(Comm *c, CommReq *r)
{
    if (r->bg) bg_run_inline(c, r);
}

/* Spin without sleeping for BG_SPIN_S (short collectives finish without a sleep and a wake-up),
 * then sleep on bg_done so that the thread has the core. */
static void bg_pause(Comm *c, CommReq *r, double waited_s)
{
    if (r->bg && waited_s > BG_SPIN_S) bg_sleep(c, r, c->timeout_s - waited_s);
    else sched_yield();
}

static const CommBackend MPI_THREAD_BACKEND = {
    .name = "mpi (progress thread)",
    .mpi_limits = 1,
    .open = mpi_open,
    .close = mpi_close,
    .issue = {[COLL_ALL_REDUCE] = bg_issue, [COLL_REDUCE_SCATTER] = bg_issue, [COLL_ALL_GATHER] = bg_issue,
              [COLL_BROADCAST] = mpi_broadcast, [COLL_ALL_GATHER_V] = mpi_all_gather_v, [COLL_BARRIER] = mpi_barrier,
              [COLL_ALL_TO_ALL] = bg_issue_a2a},
    .test = bg_test,
    .claim = bg_claim,
    .pause = bg_pause,
    .abort = mpi_abort,
};

void comm_set_mpi_progress(Comm *c, int thread)   /* an idle thread stays */
{
    c->bg_off = !thread;
    if (c->kind == COMM_MPI) mpi_pick(c);
}

int comm_mpi_progress(const Comm *c) { return c->be == &MPI_THREAD_BACKEND; }

/* ---- NCCL ---- */

#if MEMPLAN_NCCL
struct NcclComm {
    ncclComm_t comm;         /* NULL once aborted */
    cudaEvent_t order_ev;    /* recorded on the after stream, waited for on the comm stream */
    float *scratch;          /* one device float for the barrier (zeroed) */
    int failed;              /* a call or request failed, or the async error was set: close
                                aborts (ncclCommAbort) instead of the blocking finalize */
};

static const ncclDataType_t NCCL_DTYPES[DT_COUNT] = {
    [DT_F32] = ncclFloat32, [DT_BF16] = ncclBfloat16, [DT_F16] = ncclFloat16,
    [DT_I32] = ncclInt32,   [DT_F64] = ncclFloat64,   [DT_U8] = ncclUint8,
};

/* NCCL's own error and its last message ("Duplicate GPU detected ...", "Call to connect ...").
 * Static storage: for one message at a time. */
static const char *nccl_last_error(ncclResult_t res)
{
    static char buf[400];
    const char *last = ncclGetLastError(NULL);
    snprintf(buf, sizeof buf, "%s%s%s", ncclGetErrorString(res), last && *last ? ": " : "", last ? last : "");
    return buf;
}

/* The communicator is non-blocking (config.blocking = 0): any call on it may return
 * ncclInProgress, and the operation (an init, a collective's enqueue, a finalize) is complete
 * only once ncclCommGetAsyncError stops saying so. Polls until then, at most the timeout;
 * *final gets the outcome. On timeout: prints, aborts the communicator (c->nccl->comm = NULL) and
 * returns -1. */
static int nccl_settle(Comm *c, ncclResult_t res, const char *what, ncclResult_t *final)
{
    double start = now_s();
    while (res == ncclInProgress) {
        if (now_s() - start > c->timeout_s) {
            fprintf(stderr, "rank %d: %s did not complete within %.1f s; aborting the NCCL communicator\n",
                    c->rank, what, c->timeout_s);
            fflush(stderr);
            ncclCommAbort(c->nccl->comm);
            c->nccl->comm = NULL;
            c->nccl->failed = 1;
            return -1;
        }
        sched_yield();
        if (ncclCommGetAsyncError(c->nccl->comm, &res) != ncclSuccess) break;
    }
    *final = res;
    return 0;
}

/* One NCCL call on c's communicator: settled (above), checked (printed on failure), and a
 * failure marks the communicator failed. 0 or -1. */
static int nccl_call_(Comm *c, ncclResult_t res, const char *call, const char *file, int line)
{
    if (!c->nccl->comm) {
        fprintf(stderr, "rank %d: %s:%d: %s: the NCCL communicator was aborted\n", c->rank, file, line, call);
        return -1;
    }
    if (res == ncclInProgress && nccl_settle(c, res, call, &res)) return -1;
    if (prof_nccl_check_(res, call, file, line) == 0) return 0;
    c->nccl->failed = 1;
    return -1;
}
#define NCCL_CALL(c, call) nccl_call_((c), (call), #call, __FILE__, __LINE__)

/* The bootstrap: every rank picks its GPU, they agree that all could, rank 0 creates the unique
 * id and broadcasts it (with a flag, so a failure there cannot leave the others waiting), then
 * every rank joins the communicator. */
static int nccl_setup(Comm *c, char *err, size_t errlen)
{
    int ok = 1, all_ok = 0, ngpu = 0;
    if (!(c->nccl = calloc(1, sizeof *c->nccl))) {
        snprintf(err, errlen, "out of host memory");
        return -1;
    }
    if (cudaGetDeviceCount(&ngpu) != cudaSuccess || ngpu == 0) {
        cudaGetLastError();
        snprintf(err, errlen, "no CUDA device for NCCL");
        ok = 0;
    } else if (CUDA_CHECK(cudaSetDevice(c->local_rank % ngpu)) ||
               CUDA_CHECK(cudaMalloc((void **)&c->nccl->scratch, sizeof(float))) ||
               CUDA_CHECK(cudaMemset(c->nccl->scratch, 0, sizeof(float)))) {
        snprintf(err, errlen, "cannot use CUDA device %d for NCCL", c->local_rank % ngpu);
        ok = 0;
    }
    if (MPI_CHECK(MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, c->mpi))) return -1;
    if (!all_ok) {
        if (ok) snprintf(err, errlen, "another rank has no usable CUDA device for NCCL");
        return -1;
    }
    struct {
        int ok;
        ncclUniqueId id;
    } boot;
    memset(&boot, 0, sizeof boot);
    if (c->rank == 0) boot.ok = NCCL_CHECK(ncclGetUniqueId(&boot.id)) == 0;
    if (MPI_CHECK(MPI_Bcast(&boot, (int)sizeof boot, MPI_BYTE, 0, c->mpi))) return -1;
    if (!boot.ok) {
        snprintf(err, errlen, "rank 0 could not create the NCCL unique id");
        return -1;
    }
    /* Non-blocking init, polled against the timeout: a blocking ncclCommInitRank has none, and
     * a peer that never joins (or a transport that never connects) would hang every rank. */
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclResult_t res = ncclCommInitRankConfig(&c->nccl->comm, c->size, boot.id, c->rank, &config);
    if (res != ncclSuccess && res != ncclInProgress) {
        NCCL_CHECK(res);
        if (c->nccl->comm) ncclCommAbort(c->nccl->comm);
        c->nccl->comm = NULL;
        snprintf(err, errlen, "ncclCommInitRank failed: %s", nccl_last_error(res));
        return -1;
    }
    if (nccl_settle(c, res, "ncclCommInitRank", &res)) {   /* timed out: printed, aborted */
        snprintf(err, errlen, "ncclCommInitRank did not complete within %.0f s (a peer may have died, or NCCL "
                 "cannot connect its ranks: NCCL_DEBUG=INFO says why)", c->timeout_s);
        return -1;
    }
    if (res != ncclSuccess) {
        NCCL_CHECK(res);
        snprintf(err, errlen, "ncclCommInitRank failed: %s", nccl_last_error(res));
        ncclCommAbort(c->nccl->comm);
        c->nccl->comm = NULL;
        return -1;
    }
    return 0;
}

static int nccl_open(Comm *c, int *argc, char ***argv, char *err, size_t errlen)
{
    return mpi_setup(c, argc, argv, err, errlen) || nccl_setup(c, err, errlen) ? -1 : 0;
}

static int nccl_close(Comm *c)
{
    struct NcclComm *n = c->nccl;
    if (n && n->comm) {
        /* ncclCommFinalize waits for the peers' outstanding operations: after an error (a
         * failed call or request, or the asynchronous error set) it could wait forever, so the
         * communicator is aborted instead. Finalize is non-blocking here and settled against
         * the timeout; it aborts on expiry. */
        ncclResult_t async = ncclSuccess;
        if (ncclCommGetAsyncError(n->comm, &async) != ncclSuccess || (async != ncclSuccess && async != ncclInProgress))
            n->failed = 1;
        if (n->failed) {
            ncclCommAbort(n->comm);
        } else {
            /* destroy after a completed finalize only frees (it is not settled: the handle goes) */
            if (NCCL_CALL(c, ncclCommFinalize(n->comm)) == 0) NCCL_CHECK(ncclCommDestroy(n->comm));
            else if (n->comm) ncclCommAbort(n->comm);
        }
        n->comm = NULL;
    }
    if (n && n->scratch) CUDA_CHECK(cudaFree(n->scratch));
    if (n && n->order_ev) CUDA_CHECK(cudaEventDestroy(n->order_ev));
    free(n);
    c->nccl = NULL;
    return mpi_close(c);
}

static void nccl_abort(Comm *c)
{
    if (c->nccl && c->nccl->comm) {
        ncclCommAbort(c->nccl->comm);
        c->nccl->comm = NULL;
    }
    mpi_abort(c);
}

/* The next collective starts after the work queued on the after stream so far (the buffers it
 * reads were written there). One event suffices: cudaStreamWaitEvent takes its state now. */
static int nccl_order(Comm *c)
{
    cudaStream_t after = (cudaStream_t)c->after, stream = (cudaStream_t)c->stream;
    struct NcclComm *n = c->nccl;
    if (!after || after == stream) return 0;
    if (!n->order_ev && CUDA_CHECK(cudaEventCreateWithFlags(&n->order_ev, cudaEventDisableTiming))) return -1;
    if (CUDA_CHECK(cudaEventRecord(n->order_ev, after)) || CUDA_CHECK(cudaStreamWaitEvent(stream, n->order_ev, 0)))
        return -1;
    return 0;
}

/* r's completion: an event recorded behind it on the comm stream */
static int nccl_event(Comm *c, CommReq *r)
{
    cudaEvent_t ev = NULL;
    int bad = CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    r->event = ev;
    if (bad || CUDA_CHECK(cudaEventRecord(ev, (cudaStream_t)c->stream))) {
        c->nccl->failed = 1;
        return -1;
    }
    return 0;
}

/* Every NCCL collective is entered ordered after the compute work queued before it and inside
 * CUPTI's bracket (1 when the ordering failed: the call is then skipped), and left with the
 * bracket closed and, when it was enqueued (bad 0), its completion event recorded. */
static int nccl_enter(Comm *c, CollKind op)
{
    int bad = nccl_order(c);
    prof_cupti_collective_begin(op);
    return bad;
}

static int nccl_leave(Comm *c, CommReq *r, int bad)
{
    prof_cupti_collective_end();
    return bad || nccl_event(c, r) ? -1 : 0;
}

static int nccl_all_reduce(Comm *c, CommReq *r)
{
    int bad = nccl_enter(c, r->op) || NCCL_CALL(c, ncclAllReduce(r->send, r->recv, r->count, NCCL_DTYPES[r->dtype],
                                                                  ncclSum, c->nccl->comm, (cudaStream_t)c->stream));
    return nccl_leave(c, r, bad);
}

static int nccl_reduce_scatter(Comm *c, CommReq *r)
{
    /* NCCL's own in-place form is recv == send + rank·block; the block moves down after */
    size_t block = r->count * DTYPES[r->dtype].size;
    cudaStream_t stream = (cudaStream_t)c->stream;
    char *dst = r->in_place ? (char *)r->recv + (size_t)c->rank * block : r->recv;
    int bad = nccl_enter(c, r->op) || NCCL_CALL(c, ncclReduceScatter(r->send, dst, r->count, NCCL_DTYPES[r->dtype],
                                                                      ncclSum, c->nccl->comm, stream));
    prof_cupti_collective_end();   /* the move is a copy, not the collective */
    if (bad || (r->in_place && c->rank && CUDA_CHECK(cudaMemcpyAsync(r->recv, dst, block, cudaMemcpyDeviceToDevice, stream))))
        return -1;
    return nccl_event(c, r);
}

static int nccl_all_gather(Comm *c, CommReq *r)
{
    int bad = nccl_enter(c, r->op) || NCCL_CALL(c, ncclAllGather(r->send, r->recv, r->count, NCCL_DTYPES[r->dtype],
                                                                  c->nccl->comm, (cudaStream_t)c->stream));
    return nccl_leave(c, r, bad);
}

/* NCCL has no all-gather-v: one broadcast per rank in a group (ncclGroupEnd only after a
 * successful ncclGroupStart) */
static int nccl_all_gather_v(Comm *c, CommReq *r)
{
    size_t es = DTYPES[r->dtype].size;
    int bad = nccl_enter(c, r->op);
    if (!bad && !(bad = NCCL_CALL(c, ncclGroupStart()))) {
        for (int i = 0; i < c->size && !bad; i++) {
            char *block = (char *)r->recv + r->displs[i] * es;
            bad = NCCL_CALL(c, ncclBroadcast(i == c->rank ? r->send : block, block, r->counts[i], NCCL_DTYPES[r->dtype],
                                             i, c->nccl->comm, (cudaStream_t)c->stream));
        }
        bad |= NCCL_CALL(c, ncclGroupEnd());
    }
    return nccl_leave(c, r, bad);
}

/* NCCL has no all-to-all call: one ncclSend and one ncclRecv per peer in a group (nccl-tests
   alltoall.cu, torch's ProcessGroupNCCL alltoall_base) */
static int nccl_all_to_all(Comm *c, CommReq *r)
{
    size_t es = DTYPES[r->dtype].size;
    cudaStream_t stream = (cudaStream_t)c->stream;
    int bad = nccl_enter(c, r->op);
    if (!bad && !(bad = NCCL_CALL(c, ncclGroupStart()))) {
        for (int i = 0; i < c->size && !bad; i++) {
            size_t sn = r->counts ? r->counts[i] : r->count, so = r->counts ? r->displs[i] : (size_t)i * r->count;
            size_t rn = r->counts ? r->rcounts[i] : r->count, ro = r->counts ? r->rdispls[i] : (size_t)i * r->count;
            bad = NCCL_CALL(c, ncclSend((const char *)r->send + so * es, sn, NCCL_DTYPES[r->dtype], i, c->nccl->comm,
                                        stream)) ||
                  NCCL_CALL(c, ncclRecv((char *)r->recv + ro * es, rn, NCCL_DTYPES[r->dtype], i, c->nccl->comm, stream));
        }
        bad |= NCCL_CALL(c, ncclGroupEnd());
    }
    return nccl_leave(c, r, bad);
}

static int nccl_broadcast(Comm *c, CommReq *r)
{
    int bad = nccl_enter(c, r->op) || NCCL_CALL(c, ncclBroadcast(r->recv, r->recv, r->count, NCCL_DTYPES[r->dtype],
                                                                  r->root, c->nccl->comm, (cudaStream_t)c->stream));
    return nccl_leave(c, r, bad);
}

/* a sum of one zero float over every rank */
static int nccl_barrier(Comm *c, CommReq *r)
{
    float *x = c->nccl->scratch;
    int bad = nccl_enter(c, r->op) ||
              NCCL_CALL(c, ncclAllReduce(x, x, 1, ncclFloat32, ncclSum, c->nccl->comm, (cudaStream_t)c->stream));
    return nccl_leave(c, r, bad);
}

static int nccl_test(Comm *c, CommReq *r)
{
    cudaError_t e = cudaEventQuery((cudaEvent_t)r->event);
    if (e == cudaSuccess) {
        mark_done(c, r, now_s());
        return 1;
    }
    if (e != cudaErrorNotReady) {
        CUDA_CHECK(e);
        c->nccl->failed = 1;
        return -1;
    }
    ncclResult_t async = ncclSuccess;
    if (!c->nccl->comm || NCCL_CHECK(ncclCommGetAsyncError(c->nccl->comm, &async))) {
        c->nccl->failed = 1;
        return -1;
    }
    if (async != ncclSuccess && async != ncclInProgress) {
        fprintf(stderr, "rank %d: NCCL error during %s: %s\n", c->rank, coll_name(r->op), nccl_last_error(async));
        c->nccl->failed = 1;
        return -1;
    }
    return 0;
}

static void nccl_release(CommReq *r)
{
    if (r->event) cudaEventDestroy((cudaEvent_t)r->event);
}

static const CommBackend NCCL_BACKEND = {
    .name = "nccl",
    .open = nccl_open,
    .close = nccl_close,
    .issue = {[COLL_ALL_REDUCE] = nccl_all_reduce, [COLL_REDUCE_SCATTER] = nccl_reduce_scatter,
              [COLL_ALL_GATHER] = nccl_all_gather, [COLL_BROADCAST] = nccl_broadcast,
              [COLL_ALL_GATHER_V] = nccl_all_gather_v, [COLL_BARRIER] = nccl_barrier,
              [COLL_ALL_TO_ALL] = nccl_all_to_all},
    .test = nccl_test,
    .pause = yield_core,
    .release = nccl_release,
    .abort = nccl_abort,
};
#else
/* Built without NCCL: creating an NCCL communicator says so; nothing else is reachable. */
static int nccl_missing(Comm *c, int *argc, char ***argv, char *err, size_t errlen)
{
    snprintf(err, errlen, "built without NCCL (NO_NCCL=1 or NO_CUDA=1)");
    return -1;
}

static const CommBackend NCCL_BACKEND = {.name = "nccl", .open = nccl_missing};
#endif

/* ---- creation ---- */

/* The engine's host memory policy, set before MPI starts its threads: freed memory stays in
 * the process for the next step. glibc would otherwise give every block over its mmap
 * threshold (32 MiB at most: gpt2's logits, 103 MB at B 4, T 128; Open MPI's reduce-scatter
 * scratch, the whole buffer plus two blocks, 745 MB for gpt2's 500 MB ZeRO-1/2 gradients on 4
 * ranks) back to the kernel at free, and the next step faults it in again, zeroed page by page
 * (243,048 faults per call for that reduce-scatter: 2-4.5 s on 4 ranks over 2 cores where the
 * same call on kept memory takes 0.4-0.7 s; docs/validation.md "Collectives"). One arena: a
 * block that a thread's own arena cannot hold (64 MiB heaps) is mmapped whatever M_MMAP_MAX
 * says, and the progress thread runs the collectives issued behind compute. The tracker's
 * accounting is unaffected (it counts requests). */
static void keep_host_memory(void)
{
    mallopt(M_ARENA_MAX, 1);
    mallopt(M_MMAP_MAX, 0);
    mallopt(M_TRIM_THRESHOLD, INT_MAX);
}

static const CommBackend *const BACKENDS[] = {[COMM_SELF] = &SELF_BACKEND, [COMM_MPI] = &MPI_BACKEND,
                                              [COMM_NCCL] = &NCCL_BACKEND};

CommKind comm_launch_kind(void) { return exec_launched_by_mpi() ? COMM_MPI : COMM_SELF; }

Comm *comm_create(CommKind kind, int *argc, char ***argv, double timeout_s, char *err, size_t errlen)
{
    char dummy[8];
    if (!err || errlen == 0) {
        err = dummy;
        errlen = sizeof dummy;
    }
    err[0] = 0;
    keep_host_memory();
    if ((unsigned)kind >= sizeof BACKENDS / sizeof BACKENDS[0]) {
        snprintf(err, errlen, "unknown communicator kind %d", (int)kind);
        return NULL;
    }
    Comm *c = calloc(1, sizeof *c);
    if (!c) {
        snprintf(err, errlen, "out of host memory");
        return NULL;
    }
    c->kind = kind;
    c->be = BACKENDS[kind];
    c->size = 1;
    c->local_size = 1;
    c->mpi = MPI_COMM_NULL;
    c->bg_mpi = MPI_COMM_NULL;
    c->timeout_s = timeout_s > 0 ? timeout_s : 300.0;
    if (c->be->open && c->be->open(c, argc, argv, err, errlen)) {
        comm_destroy(c);
        return NULL;
    }
    return c;
}

void comm_destroy(Comm *c)
{
    if (!c) return;
    while (c->outstanding) {
        fprintf(stderr, "rank %d: comm_destroy: %s still outstanding; waiting for it\n", c->rank,
                coll_name(c->outstanding->op));
        if (comm_wait(c, c->outstanding) != 0) break;
    }
    if (c->be->close && c->be->close(c)) return;   /* a thread left behind keeps c */
    free(c);
}

CommKind comm_kind(const Comm *c) { return c->kind; }
int comm_rank(const Comm *c) { return c->rank; }
int comm_size(const Comm *c) { return c->size; }
int comm_local_rank(const Comm *c) { return c->local_rank; }
int comm_local_size(const Comm *c) { return c->local_size; }
int comm_pinned_cpus(const Comm *c) { return c->pinned_cpus; }
int comm_pinned_from(const Comm *c) { return c->pinned_from; }
double comm_timeout(const Comm *c) { return c->timeout_s; }
void comm_set_timeout(Comm *c, double timeout_s) { c->timeout_s = timeout_s > 0 ? timeout_s : 300.0; }
void comm_set_counters(Comm *c, CommCounters *counters) { c->counters = counters; }
void comm_set_stream(Comm *c, void *cuda_stream) { c->stream = cuda_stream; }
void comm_set_after_stream(Comm *c, void *cuda_stream) { c->after = cuda_stream; }
int comm_outstanding(const Comm *c)
{
    int n = 0;
    for (const CommReq *r = c->outstanding; r; r = r->next) n++;
    return n;
}

/* ---- the collectives: arguments checked, one call through the backend's table ---- */

static int check_dtype(const Comm *c, const char *what, DType t, int reduce)
{
    if ((unsigned)t >= DT_COUNT) {
        fprintf(stderr, "rank %d: %s: unknown data type %d\n", c->rank, what, (int)t);
        return -1;
    }
    if (reduce && c->be->mpi_limits && !DTYPES[t].mpi_sum) {
        fprintf(stderr, "rank %d: %s of %s is not supported by the MPI backend (MPI has no 16-bit "
                        "float sum); the CPU engine reduces in fp32\n", c->rank, what, DTYPES[t].name);
        return -1;
    }
    return 0;
}

static int check_int_count(const Comm *c, const char *what, size_t count)
{
    if (c->be->mpi_limits && count > (size_t)INT_MAX) {
        fprintf(stderr, "rank %d: %s: %zu elements per rank exceed one MPI call (2^31-1)\n", c->rank,
                what, count);
        return -1;
    }
    return 0;
}

/* Hands r to the caller (non-blocking) or completes it here (blocking). */
static int finish(Comm *c, CommReq *r, CommReq **out)
{
    r->next = c->outstanding;
    if (c->outstanding) c->outstanding->prev = r;
    c->outstanding = r;
    if (out) {
        *out = r;
        return 0;
    }
    return comm_wait(c, r);
}

/* Starts r through c's table. An issue that failed drops r (nothing is outstanding on this rank
 * that we could still complete; the caller aborts the communicator). */
static int start(Comm *c, CommReq *r, CommReq **out)
{
    r->blocking = out == NULL;
    if (c->be->issue[r->op](c, r)) {
        req_free(r);
        if (out) *out = NULL;
        return -1;
    }
    return finish(c, r, out);
}

/* A request for op on buf: the arguments every backend reads. */
static CommReq *req_for(Comm *c, CollKind op, double payload, const void *send, void *recv, size_t count, DType t,
                        int in_place)
{
    CommReq *r = req_new(c, op, payload);
    if (!r) return NULL;
    r->send = send;
    r->recv = recv;
    r->count = count;
    r->dtype = t;
    r->in_place = in_place;
    return r;
}

int comm_all_reduce(Comm *c, const void *send, void *recv, size_t count, DType t, CommReq **out)
{
    if (check_dtype(c, "all_reduce", t, 1)) return -1;
    CommReq *r = req_for(c, COLL_ALL_REDUCE, (double)(count * DTYPES[t].size), send, recv, count, t, send == recv);
    return r ? start(c, r, out) : -1;
}

int comm_reduce_scatter(Comm *c, const void *send, void *recv, size_t count, DType t, CommReq **out)
{
    if (check_dtype(c, "reduce_scatter", t, 1) || check_int_count(c, "reduce_scatter", count)) return -1;
    size_t block = count * DTYPES[t].size;
    /* In place is send == recv: the result lands in the first block on every backend. */
    int in_place = send == recv;
    uintptr_t s0 = (uintptr_t)send, r0 = (uintptr_t)recv;
    if (!in_place && block && r0 < s0 + block * (size_t)c->size && s0 < r0 + block) {
        fprintf(stderr, "rank %d: reduce_scatter: send and recv overlap (in place is send == recv)\n", c->rank);
        return -1;
    }
    CommReq *r = req_for(c, COLL_REDUCE_SCATTER, (double)(block * (size_t)c->size), send, recv, count, t, in_place);
    return r ? start(c, r, out) : -1;
}

int comm_all_gather(Comm *c, const void *send, void *recv, size_t count, DType t, CommReq **out)
{
    if (check_dtype(c, "all_gather", t, 0) || check_int_count(c, "all_gather", count)) return -1;
    size_t es = DTYPES[t].size;
    int in_place = send == (const char *)recv + (size_t)c->rank * count * es;
    CommReq *r = req_for(c, COLL_ALL_GATHER, (double)(count * es * (size_t)c->size), send, recv, count, t, in_place);
    return r ? start(c, r, out) : -1;
}

int comm_all_gather_v(Comm *c, const void *send, void *recv, const size_t *counts, const size_t *displs, DType t)
{
    if (check_dtype(c, "all_gather_v", t, 0)) return -1;
    size_t es = DTYPES[t].size, total = 0;
    for (int i = 0; i < c->size; i++) {
        if (check_int_count(c, "all_gather_v", counts[i]) || check_int_count(c, "all_gather_v", displs[i]))
            return -1;
        total += counts[i];
    }
    int in_place = send == (const char *)recv + displs[c->rank] * es;
    CommReq *r = req_for(c, COLL_ALL_GATHER_V, (double)(total * es), send, recv, counts[c->rank], t, in_place);
    if (!r) return -1;
    r->counts = counts;
    r->displs = displs;
    return start(c, r, NULL);
}

int comm_all_to_all(Comm *c, const void *send, void *recv, size_t count, DType t, CommReq **out)
{
    if (check_dtype(c, "all_to_all", t, 0) || check_int_count(c, "all_to_all", count)) return -1;
    size_t bytes = count * DTYPES[t].size * (size_t)c->size;
    uintptr_t s0 = (uintptr_t)send, r0 = (uintptr_t)recv;
    if (bytes && r0 < s0 + bytes && s0 < r0 + bytes) {
        fprintf(stderr, "rank %d: all_to_all: send and recv overlap (all-to-all has no in-place form here)\n", c->rank);
        return -1;
    }
    CommReq *r = req_for(c, COLL_ALL_TO_ALL, (double)bytes, send, recv, count, t, 0);
    return r ? start(c, r, out) : -1;
}

int comm_all_to_all_v(Comm *c, const void *send, const size_t *send_counts, const size_t *send_displs, void *recv,
                      const size_t *recv_counts, const size_t *recv_displs, DType t)
{
    if (check_dtype(c, "all_to_all_v", t, 0)) return -1;
    size_t total = 0;
    for (int i = 0; i < c->size; i++) {
        if (check_int_count(c, "all_to_all_v", send_counts[i]) || check_int_count(c, "all_to_all_v", send_displs[i]) ||
            check_int_count(c, "all_to_all_v", recv_counts[i]) || check_int_count(c, "all_to_all_v", recv_displs[i]))
            return -1;
        total += send_counts[i];
    }
    CommReq *r = req_for(c, COLL_ALL_TO_ALL, (double)(total * DTYPES[t].size), send, recv, 0, t, 0);
    if (!r) return -1;
    r->counts = send_counts;
    r->displs = send_displs;
    r->rcounts = recv_counts;
    r->rdispls = recv_displs;
    return start(c, r, NULL);
}

int comm_broadcast(Comm *c, void *buf, size_t count, DType t, int root)
{
    if (check_dtype(c, "broadcast", t, 0)) return -1;
    if (root < 0 || root >= c->size) {
        fprintf(stderr, "rank %d: broadcast: root %d is not a rank (size %d)\n", c->rank, root, c->size);
        return -1;
    }
    CommReq *r = req_for(c, COLL_BROADCAST, (double)(count * DTYPES[t].size), buf, buf, count, t, 1);
    if (!r) return -1;
    r->root = root;
    return start(c, r, NULL);
}

int comm_barrier(Comm *c)
{
    CommReq *r = req_new(c, COLL_BARRIER, 0);
    return r ? start(c, r, NULL) : -1;
}

/* ---- completion ---- */

static void timeout_abort(Comm *c, CommReq *r)
{
    fprintf(stderr, "rank %d: collective %s timed out after %.1f s (a peer may have died or stalled)\n",
            c->rank, coll_name(r->op), c->timeout_s);
    fflush(stderr);
    if (c->be->abort) c->be->abort(c);
    exit(EXIT_FAILURE);   /* not reached under MPI */
}

int comm_wait(Comm *c, CommReq *r)
{
    if (!r) return 0;
    double start_s = now_s();
    int rc;
    if (r->be->claim) r->be->claim(c, r);
    /* a sleep would add its granularity to every collective: the backends spin, yielding the
       core so that oversubscribed ranks on it make progress (the progress thread's sleep once
       its collective has had BG_SPIN_S) */
    while ((rc = req_test(c, r)) == 0) {
        double waited = now_s() - start_s;
        if (waited > c->timeout_s) timeout_abort(c, r);
        r->be->pause(c, r, waited);
    }
    req_unlink(c, r);
    req_free(r);
    return rc == 1 ? 0 : -1;
}

void comm_progress(Comm *c)
{
    for (CommReq *r = c->outstanding; r; r = r->next)
        if (!r->done && req_test(c, r) < 0) return;   /* reported; comm_wait returns -1 later */
}

void comm_abort(Comm *c, const char *why)
{
    fprintf(stderr, "rank %d: aborting: %s\n", c ? c->rank : prof_log_rank(), why ? why : "(no reason given)");
    fflush(stderr);
    if (c && c->be->abort) c->be->abort(c);
    exit(EXIT_FAILURE);
}

int comm_check_same(Comm *c, unsigned long long value, int *bad_rank)
{
    if (bad_rank) *bad_rank = -1;
    if (c->kind == COMM_SELF) return 0;
    /* Host values over MPI whatever the backend (NCCL too): a check, not counted as traffic. */
    unsigned long long *all = malloc((size_t)c->size * sizeof *all);
    CommReq *r = req_new(c, COLL_ALL_GATHER, 0);
    if (r) r->be = &MPI_BACKEND;
    if (!all || !r || mpi_reqs(c, r, 1)) {
        free(all);
        req_free(r);
        return -1;
    }
    r->counted = 0;
    if (MPI_CHECK(MPI_Iallgather(&value, 1, MPI_UNSIGNED_LONG_LONG, all, 1, MPI_UNSIGNED_LONG_LONG,
                                 c->mpi, &r->mpi[0]))) {
        free(all);
        req_free(r);
        return -1;
    }
    int rc = finish(c, r, NULL);
    for (int i = 0; rc == 0 && i < c->size; i++)
        if (all[i] != all[0]) {
            if (bad_rank) *bad_rank = i;
            rc = -1;
            break;
        }
    free(all);
    return rc;
}

/* ---- sub-communicators and idle waits (benchmarks that sweep the number of ranks) ---- */

Comm *comm_split(Comm *parent, int color, char *err, size_t errlen)
{
    char dummy[8];
    if (!err || errlen == 0) {
        err = dummy;
        errlen = sizeof dummy;
    }
    err[0] = 0;
    if (parent->kind == COMM_NCCL) {
        snprintf(err, errlen, "comm_split: NCCL communicators cannot be split yet (MPI only)");
        return NULL;
    }
    Comm *c = calloc(1, sizeof *c);
    if (!c) {
        snprintf(err, errlen, "out of host memory");
        return NULL;
    }
    c->kind = parent->kind;
    c->be = BACKENDS[parent->kind];
    c->size = c->local_size = 1;
    c->mpi = MPI_COMM_NULL;
    c->bg_mpi = MPI_COMM_NULL;
    c->timeout_s = parent->timeout_s;
    if (parent->kind == COMM_SELF) {
        if (color >= 0) return c;
        free(c);
        return NULL;
    }
    c->uses_mpi = 1;
    g_live_comms++;
    MPI_Comm node;
    if (MPI_CHECK(MPI_Comm_split(parent->mpi, color >= 0 ? color : MPI_UNDEFINED, parent->rank, &c->mpi)))
        goto fail;
    if (c->mpi == MPI_COMM_NULL) {   /* not a member: nothing to wait for, no error */
        comm_destroy(c);
        return NULL;
    }
    if (MPI_CHECK(MPI_Comm_set_errhandler(c->mpi, MPI_ERRORS_RETURN)) ||
        MPI_CHECK(MPI_Comm_rank(c->mpi, &c->rank)) || MPI_CHECK(MPI_Comm_size(c->mpi, &c->size)) ||
        MPI_CHECK(MPI_Comm_split_type(c->mpi, MPI_COMM_TYPE_SHARED, c->rank, MPI_INFO_NULL, &node)))
        goto fail;
    MPI_Comm_rank(node, &c->local_rank);
    MPI_Comm_size(node, &c->local_size);
    MPI_Comm_free(&node);
    bg_dup(c);
    mpi_pick(c);
    return c;
fail:
    snprintf(err, errlen, "comm_split failed (see the message above)");
    comm_destroy(c);
    return NULL;
}

int comm_barrier_idle(Comm *c, double poll_s)
{
    if (c->kind != COMM_MPI) return comm_barrier(c);
    CommReq *r = req_new(c, COLL_BARRIER, 0);
    if (!r) return -1;
    r->be = &MPI_BACKEND;
    if (mpi_barrier(c, r)) {
        req_free(r);
        return -1;
    }
    r->next = c->outstanding;
    if (c->outstanding) c->outstanding->prev = r;
    c->outstanding = r;
    struct timespec nap = {(time_t)poll_s, (long)((poll_s - (double)(time_t)poll_s) * 1e9)};
    double start_s = now_s();
    int rc;
    while ((rc = req_test(c, r)) == 0) {
        if (now_s() - start_s > c->timeout_s) timeout_abort(c, r);
        nanosleep(&nap, NULL);
    }
    req_unlink(c, r);
    req_free(r);
    return rc == 1 ? 0 : -1;
}
