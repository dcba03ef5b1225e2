/* comm_check.c — multi-rank check of the comm backends, launched by tests/test_exec_comm.c:
 *   mpirun -np N comm_check MODE [--nccl | --self] [--no-thread] [--fake-hosts]
 * MODE collectives: every collective, blocking and non-blocking, with exact inputs (rank r
 *        contributes r+1; all-to-all blocks tagged by sender and receiver), in place and not, and
 *        the counters' payload and wire bytes;
 *      same: comm_check_same finds the one rank that differs;
 *      timeout: rank 0 sleeps past the 1 s timeout, the others must abort with the message;
 *      yield: Open MPI's mpi_yield_when_idle is on (MPI_T);
 *      bind: ranks the launcher left unbound are pinned in blocks of its CPUs (the parent's,
 *            mpirun's, set), every thread; bound ones are left; prints "rank R pinned" or
 *            "rank R left" (--left: every rank must be left).
 * --nccl runs on the GPU (buffers in device memory through the tracked allocator); --self runs
 * one process alone (COMM_SELF, no MPI: its copies are the collectives of one rank);
 * --no-thread completes MPI collectives by MPI_Test polling instead of the progress thread;
 * --fake-hosts sets NCCL_HOSTID per rank so several ranks may share one GPU (unverified).
 * Prints "comm_check: rank R ok" and exits 0, or names each failure and exits 1. */
#include <dirent.h>
#include <math.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <mpi.h>

#include "exec_comm.h"
#include "exec_device.h"
#include "exec_launch.h"
#include "prof_comm.h"
#include "prof_mem.h"

static int g_fail, g_rank;
static int g_expect_left;   /* bind --left: the launcher placed the ranks on different sets */
static Device *g_dev;
static MemTracker *g_mem;

#define CHECK(cond, ...)                                                      \
    do {                                                                      \
        if (!(cond)) {                                                        \
            fprintf(stderr, "rank %d: FAIL %s:%d: ", g_rank, __FILE__, __LINE__); \
            fprintf(stderr, __VA_ARGS__);                                     \
            fputc('\n', stderr);                                              \
            g_fail++;                                                         \
        }                                                                     \
    } while (0)

/* Buffers live on the device (host or GPU); values are staged through host arrays. */
static void *dalloc(size_t bytes) { return prof_mem_alloc(g_mem, MEM_COMM, bytes, "comm_check"); }
static void dfree(void *p) { prof_mem_free(g_mem, p); }

static void *put_f32(const float *h, size_t n)
{
    void *d = dalloc(n * sizeof *h);
    exec_device_copy(g_dev, d, h, n * sizeof *h);
    return d;
}

static float *get_f32(const void *d, size_t n)
{
    float *h = malloc(n * sizeof *h);
    exec_device_synchronize(g_dev);
    exec_device_copy(g_dev, h, d, n * sizeof *h);
    return h;
}

/* Element i of rank r: (r+1)·(i%5+1), so sums are exact in fp32. */
static float val(int r, size_t i) { return (float)((r + 1) * (int)(i % 5 + 1)); }

typedef struct {
    int64_t count[COLL_COUNT];
    double payload[COLL_COUNT];
} Expect;

static void expect_op(Expect *e, CollKind op, double payload)
{
    e->count[op]++;
    e->payload[op] += payload;
}

static void check_all_reduce(Comm *c, Expect *e, size_t n, int in_place, int nonblocking)
{
    int p = comm_size(c), r = comm_rank(c);
    float *h = malloc(n * sizeof *h);
    for (size_t i = 0; i < n; i++) h[i] = val(r, i);
    void *s = put_f32(h, n), *d = in_place ? s : dalloc(n * sizeof(float));
    CommReq *req = NULL;
    CHECK(comm_all_reduce(c, s, d, n, DT_F32, nonblocking ? &req : NULL) == 0, "all_reduce issue");
    if (nonblocking) {
        CHECK(req != NULL && comm_outstanding(c) == 1, "one outstanding request");
        comm_progress(c);
        CHECK(comm_wait(c, req) == 0, "all_reduce wait");
    }
    float *out = get_f32(d, n);
    double sum = p * (p + 1) / 2.0;
    for (size_t i = 0; i < n; i++)
        if (out[i] != (float)(sum * (double)(i % 5 + 1))) {
            CHECK(0, "all_reduce n=%zu in_place=%d nb=%d: [%zu] = %g, want %g", n, in_place, nonblocking, i,
                  out[i], sum * (double)(i % 5 + 1));
            break;
        }
    expect_op(e, COLL_ALL_REDUCE, (double)(n * sizeof(float)));
    free(out);
    free(h);
    if (!in_place) dfree(d);
    dfree(s);
}

static void check_reduce_scatter(Comm *c, Expect *e, size_t n, int in_place, int nonblocking)
{
    int p = comm_size(c), r = comm_rank(c);
    size_t total = n * (size_t)p;
    float *h = malloc(total * sizeof *h);
    for (size_t i = 0; i < total; i++) h[i] = val(r, i);
    void *s = put_f32(h, total), *d = in_place ? s : dalloc(n * sizeof(float));
    CommReq *req = NULL;
    CHECK(comm_reduce_scatter(c, s, d, n, DT_F32, nonblocking ? &req : NULL) == 0, "reduce_scatter issue");
    if (nonblocking) CHECK(comm_wait(c, req) == 0, "reduce_scatter wait");
    float *out = get_f32(d, n);
    double sum = p * (p + 1) / 2.0;
    for (size_t i = 0; i < n; i++) {
        size_t g = (size_t)r * n + i;   /* my block of the full buffer */
        if (out[i] != (float)(sum * (double)(g % 5 + 1))) {
            CHECK(0, "reduce_scatter in_place=%d nb=%d: [%zu] = %g", in_place, nonblocking, i, out[i]);
            break;
        }
    }
    expect_op(e, COLL_REDUCE_SCATTER, (double)(total * sizeof(float)));
    free(out);
    free(h);
    if (!in_place) dfree(d);
    dfree(s);
}

static void check_all_gather(Comm *c, Expect *e, size_t n, int in_place, int nonblocking)
{
    int p = comm_size(c), r = comm_rank(c);
    size_t total = n * (size_t)p;
    float *h = malloc(total * sizeof *h);
    for (size_t i = 0; i < total; i++) h[i] = -1.0f;
    for (size_t i = 0; i < n; i++) h[(size_t)r * n + i] = val(r, i);
    void *d = put_f32(h, total);
    void *s = in_place ? (char *)d + (size_t)r * n * sizeof(float) : put_f32(h + (size_t)r * n, n);
    CommReq *req = NULL;
    CHECK(comm_all_gather(c, s, d, n, DT_F32, nonblocking ? &req : NULL) == 0, "all_gather issue");
    if (nonblocking) CHECK(comm_wait(c, req) == 0, "all_gather wait");
    float *out = get_f32(d, total);
    for (size_t i = 0; i < total; i++)
        if (out[i] != val((int)(i / n), i % n)) {
            CHECK(0, "all_gather in_place=%d nb=%d: [%zu] = %g", in_place, nonblocking, i, out[i]);
            break;
        }
    expect_op(e, COLL_ALL_GATHER, (double)(total * sizeof(float)));
    free(out);
    free(h);
    if (!in_place) dfree(s);
    dfree(d);
}

static void check_all_gather_v(Comm *c, Expect *e)
{
    int p = comm_size(c), r = comm_rank(c);
    size_t counts[64], displs[64], total = 0;
    for (int i = 0; i < p; i++) {
        counts[i] = (size_t)i + 1;   /* rank i sends i+1 copies of i+1 */
        displs[i] = total;
        total += counts[i];
    }
    float mine[64];
    for (size_t i = 0; i < counts[r]; i++) mine[i] = (float)(r + 1);
    void *s = put_f32(mine, counts[r]), *d = dalloc(total * sizeof(float));
    CHECK(comm_all_gather_v(c, s, d, counts, displs, DT_F32) == 0, "all_gather_v");
    float *out = get_f32(d, total);
    for (int i = 0; i < p; i++)
        for (size_t k = 0; k < counts[i]; k++)
            CHECK(out[displs[i] + k] == (float)(i + 1), "all_gather_v block %d [%zu] = %g", i, k, out[displs[i] + k]);
    expect_op(e, COLL_ALL_GATHER_V, (double)(total * sizeof(float)));
    free(out);
    dfree(d);
    dfree(s);
}

/* All-to-all: rank r's block i holds 100 r + i + 1 in each of its n elements, so rank i's block
   r must arrive holding the same; then the v form with uneven blocks (rank r sends i + r + 1
   elements to rank i, each 100 r + i + 1). */
static void check_all_to_all(Comm *c, Expect *e, size_t n, int nonblocking)
{
    int p = comm_size(c), r = comm_rank(c);
    size_t total = n * (size_t)p;
    float *h = malloc(total * sizeof *h);
    for (size_t i = 0; i < total; i++) h[i] = (float)(100 * r + (int)(i / n) + 1);
    void *s = put_f32(h, total), *d = dalloc(total * sizeof(float));
    CommReq *req = NULL;
    CHECK(comm_all_to_all(c, s, d, n, DT_F32, nonblocking ? &req : NULL) == 0, "all_to_all issue");
    if (nonblocking) CHECK(comm_wait(c, req) == 0, "all_to_all wait");
    float *out = get_f32(d, total);
    for (size_t i = 0; i < total; i++)
        if (out[i] != (float)(100 * (int)(i / n) + r + 1)) {
            CHECK(0, "all_to_all nb=%d: [%zu] = %g", nonblocking, i, out[i]);
            break;
        }
    expect_op(e, COLL_ALL_TO_ALL, (double)(total * sizeof(float)));
    free(out);
    free(h);
    dfree(d);
    dfree(s);
}

static void check_all_to_all_v(Comm *c, Expect *e)
{
    int p = comm_size(c), r = comm_rank(c);
    size_t sc[64], sd[64], rc[64], rd[64], st = 0, rt = 0;
    for (int i = 0; i < p; i++) {
        sc[i] = (size_t)(i + r + 1);
        sd[i] = st;
        st += sc[i];
        rc[i] = (size_t)(r + i + 1);   /* what rank i sends here */
        rd[i] = rt;
        rt += rc[i];
    }
    float *h = malloc(st * sizeof *h);
    for (int i = 0; i < p; i++)
        for (size_t k = 0; k < sc[i]; k++) h[sd[i] + k] = (float)(100 * r + i + 1);
    void *s = put_f32(h, st), *d = dalloc(rt * sizeof(float));
    CHECK(comm_all_to_all_v(c, s, sc, sd, d, rc, rd, DT_F32) == 0, "all_to_all_v");
    float *out = get_f32(d, rt);
    for (int i = 0; i < p; i++)
        for (size_t k = 0; k < rc[i]; k++)
            CHECK(out[rd[i] + k] == (float)(100 * i + r + 1), "all_to_all_v from %d [%zu] = %g", i, k, out[rd[i] + k]);
    expect_op(e, COLL_ALL_TO_ALL, (double)(st * sizeof(float)));
    free(out);
    free(h);
    dfree(d);
    dfree(s);
}

static void check_broadcast_and_16bit(Comm *c, Expect *e)
{
    int p = comm_size(c), r = comm_rank(c), root = p - 1;
    enum { N = 1000 };
    float h[N];
    for (int i = 0; i < N; i++) h[i] = (float)(r + 1);
    void *d = put_f32(h, N);
    CHECK(comm_broadcast(c, d, N, DT_F32, root) == 0, "broadcast");
    float *out = get_f32(d, N);
    for (int i = 0; i < N; i++)
        if (out[i] != (float)(root + 1)) {
            CHECK(0, "broadcast [%d] = %g, want %d", i, out[i], root + 1);
            break;
        }
    expect_op(e, COLL_BROADCAST, N * sizeof(float));
    free(out);
    dfree(d);

    /* bf16 moves as 2-byte units: every bit pattern must arrive intact. */
    uint16_t bits[N], got[N * 64];
    for (int i = 0; i < N; i++) bits[i] = (uint16_t)(0x3f80 + r * 7 + i);   /* includes NaN-ish patterns */
    void *bs = dalloc(sizeof bits), *bd = dalloc(sizeof bits * (size_t)p);
    exec_device_copy(g_dev, bs, bits, sizeof bits);
    CHECK(comm_all_gather(c, bs, bd, N, DT_BF16, NULL) == 0, "bf16 all_gather");
    exec_device_synchronize(g_dev);
    exec_device_copy(g_dev, got, bd, sizeof bits * (size_t)p);
    for (int q = 0; q < p; q++)
        for (int i = 0; i < N; i++)
            if (got[q * N + i] != (uint16_t)(0x3f80 + q * 7 + i)) {
                CHECK(0, "bf16 all_gather rank %d [%d] = %#x", q, i, got[q * N + i]);
                q = p;
                break;
            }
    expect_op(e, COLL_ALL_GATHER, (double)(sizeof bits * (size_t)p));
    dfree(bd);
    dfree(bs);
}

static void check_counters(Comm *c, CommCounters *cc, const Expect *e)
{
    int p = comm_size(c);
    for (int op = 0; op < COLL_COUNT; op++) {
        CollStats s = prof_comm_total(cc, (CollKind)op);
        const char *name = coll_name((CollKind)op);
        CHECK(s.count == e->count[op], "%s count %lld, want %lld", name, (long long)s.count, (long long)e->count[op]);
        CHECK(s.payload_bytes == e->payload[op], "%s payload %.0f, want %.0f", name, s.payload_bytes, e->payload[op]);
        /* nccl-tests factors, written out here independently of prof_comm.c; one rank sends nothing */
        double f = p == 1 ? 0.0
                 : op == COLL_ALL_REDUCE ? 2.0 * (p - 1) / p
                 : op == COLL_BROADCAST ? 1.0
                 : op == COLL_BARRIER ? 0.0 : (double)(p - 1) / p;
        CHECK(fabs(s.wire_bytes - f * e->payload[op]) <= 1e-9 * e->payload[op] + 1e-9, "%s wire %.1f, want %.1f",
              name, s.wire_bytes, f * e->payload[op]);
        CHECK(s.count == 0 || s.seconds >= 0, "%s seconds %g", name, s.seconds);
    }
}

static int run_collectives(Comm *c)
{
    CommCounters *cc = prof_comm_create(comm_size(c));
    comm_set_counters(c, cc);
    prof_comm_set_phase(cc, "backward");
    Expect e = {0};
    for (int nb = 0; nb <= 1; nb++)
        for (int ip = 0; ip <= 1; ip++) {
            check_all_reduce(c, &e, 1003, ip, nb);
            check_reduce_scatter(c, &e, 517, ip, nb);
            check_all_gather(c, &e, 333, ip, nb);
        }
    check_all_reduce(c, &e, (size_t)1 << 20, 1, 0);   /* 4 MiB */
    check_all_gather_v(c, &e);
    check_all_to_all(c, &e, 301, 0);
    check_all_to_all(c, &e, 301, 1);
    check_all_to_all_v(c, &e);
    check_broadcast_and_16bit(c, &e);
    CHECK(comm_barrier(c) == 0, "barrier");
    expect_op(&e, COLL_BARRIER, 0);

    /* Several non-blocking collectives in flight at once, issued in "backward" and completed in
     * "optimizer": they are counted in the phase they were issued in. */
    int p = comm_size(c), r = comm_rank(c);
    enum { N = 4096 };
    float h[N];
    for (int i = 0; i < N; i++) h[i] = val(r, (size_t)i);
    void *a = put_f32(h, N), *b = put_f32(h, N), *s = put_f32(h, N);
    void *g = dalloc((size_t)N * (size_t)p * sizeof(float));
    CommReq *ra = NULL, *rb = NULL, *rg = NULL;
    CHECK(comm_all_reduce(c, a, a, N, DT_F32, &ra) == 0, "nb all_reduce a");
    CHECK(comm_all_reduce(c, b, b, N, DT_F32, &rb) == 0, "nb all_reduce b");
    CHECK(comm_all_gather(c, s, g, N, DT_F32, &rg) == 0, "nb all_gather");
    CHECK(comm_outstanding(c) == 3, "three outstanding, got %d", comm_outstanding(c));
    prof_comm_set_phase(cc, "optimizer");
    for (int k = 0; k < 100; k++) comm_progress(c);
    CHECK(comm_wait(c, rb) == 0 && comm_wait(c, ra) == 0 && comm_wait(c, rg) == 0, "nb waits (out of order)");
    CHECK(comm_outstanding(c) == 0, "nothing outstanding");
    float *oa = get_f32(a, N), *ob = get_f32(b, N);
    double sum = p * (p + 1) / 2.0;
    for (int i = 0; i < N; i++)
        if (oa[i] != (float)(sum * (i % 5 + 1)) || ob[i] != oa[i]) {
            CHECK(0, "overlapped all_reduce [%d] = %g / %g", i, oa[i], ob[i]);
            break;
        }
    expect_op(&e, COLL_ALL_REDUCE, (double)N * sizeof(float));
    expect_op(&e, COLL_ALL_REDUCE, (double)N * sizeof(float));
    expect_op(&e, COLL_ALL_GATHER, (double)N * p * sizeof(float));
    CHECK(prof_comm_phase(cc, COLL_ALL_REDUCE, "optimizer").count == 0, "counted where issued");
    free(oa);
    free(ob);
    dfree(g);
    dfree(s);
    dfree(b);
    dfree(a);

    /* MPI has no 16-bit float sum: refused with an error, not silently wrong. */
    if (comm_kind(c) == COMM_MPI) {
        void *x = dalloc(64);
        fprintf(stderr, "rank %d: (expected error next)\n", r);
        CHECK(comm_all_reduce(c, x, x, 32, DT_BF16, NULL) == -1, "bf16 all_reduce under MPI must fail");
        dfree(x);
    }
    check_counters(c, cc, &e);
    int bad = -1;
    CHECK(comm_check_same(c, 7, &bad) == 0 && bad == -1, "check_same of equal values");
    check_counters(c, cc, &e);   /* the check is not traffic */
    comm_set_counters(c, NULL);
    prof_comm_destroy(cc);
    return g_fail;
}

static int run_same(Comm *c)
{
    int p = comm_size(c), r = comm_rank(c), bad = -2;
    CHECK(comm_check_same(c, 0xfeedULL, &bad) == 0 && bad == -1, "equal values");
    unsigned long long v = r == p - 1 ? 0xbeefULL : 0xfeedULL;
    CHECK(comm_check_same(c, v, &bad) == -1, "a differing rank must be detected");
    CHECK(bad == p - 1, "bad rank %d, want %d", bad, p - 1);
    return g_fail;
}

static int run_timeout(Comm *c)
{
    comm_set_timeout(c, 1.0);
    float x = 1.0f;
    if (comm_rank(c) == 0) sleep(20);   /* stalls; the others give up after 1 s */
    comm_all_reduce(c, &x, &x, 1, DT_F32, NULL);
    fprintf(stderr, "rank %d: FAIL: the all_reduce returned instead of timing out\n", comm_rank(c));
    return 1;
}

/* Open MPI's mpi_yield_when_idle as this rank's MPI sees it (MPI_T): comm_create turns it on */
static int run_yield(Comm *c)
{
    int provided, idx = -1, count = 0;
    long long v = 0;   /* a bool variable reads as an int: the high bytes stay 0 */
    CHECK(MPI_T_init_thread(MPI_THREAD_MULTIPLE, &provided) == MPI_SUCCESS, "MPI_T_init_thread failed");
    if (MPI_T_cvar_get_index("mpi_yield_when_idle", &idx) != MPI_SUCCESS) {
        CHECK(0, "no control variable mpi_yield_when_idle (not Open MPI?)");
        MPI_T_finalize();
        return 1;
    }
    MPI_T_cvar_handle h;
    CHECK(MPI_T_cvar_handle_alloc(idx, NULL, &h, &count) == MPI_SUCCESS && count == 1, "cvar handle");
    CHECK(MPI_T_cvar_read(h, &v) == MPI_SUCCESS, "cvar read");
    MPI_T_cvar_handle_free(&h);
    MPI_T_finalize();
    CHECK(v != 0, "mpi_yield_when_idle is off: a waiting progress thread busy-polls its rank's core");
    return 0;
}

/* comm_create's placement, checked against mpirun's own CPU set (the set the ranks started on
 * when mpirun bound nothing) */
static int run_bind(Comm *c)
{
    cpu_set_t launcher, mine, want;
    CHECK(sched_getaffinity(getppid(), sizeof launcher, &launcher) == 0, "cannot read mpirun's CPUs");
    CHECK(sched_getaffinity(0, sizeof mine, &mine) == 0, "cannot read this rank's CPUs");
    int n = CPU_COUNT(&launcher), l = comm_local_size(c), r = comm_local_rank(c);
    const char *env = getenv("MEMPLAN_BIND");
    int off = (env && strcmp(env, "none") == 0) || g_expect_left;
    if (comm_pinned_cpus(c) == 0) {
        /* left: the launcher bound it (a strict subset), or nothing asked for pinning */
        CHECK(off || l < 2 || n < 2 || !CPU_EQUAL(&mine, &launcher),
              "%d ranks on mpirun's %d CPUs, unbound, were not pinned", l, n);
        printf("comm_check: bind: rank %d left on %d of %d CPUs\n", g_rank, CPU_COUNT(&mine), n);
        return 0;
    }
    CHECK(!off, "pinned although MEMPLAN_BIND=none or the ranks' sets differ");
    int lo = r * n / l, hi = (r + 1) * n / l;
    if (hi <= lo) hi = lo + 1;
    CPU_ZERO(&want);
    for (int cpu = 0, k = 0; cpu < CPU_SETSIZE; cpu++) {
        if (!CPU_ISSET(cpu, &launcher)) continue;
        if (k >= lo && k < hi) CPU_SET(cpu, &want);
        k++;
    }
    CHECK(CPU_EQUAL(&mine, &want), "local rank %d of %d: not on its block [%d,%d) of mpirun's %d CPUs", r, l, lo, hi, n);
    CHECK(comm_pinned_cpus(c) == hi - lo, "comm_pinned_cpus %d, block of %d", comm_pinned_cpus(c), hi - lo);
    CHECK(comm_pinned_from(c) == n, "comm_pinned_from %d, mpirun's set %d", comm_pinned_from(c), n);
    int threads = 0;
    DIR *d = opendir("/proc/self/task");
    CHECK(d != NULL, "no /proc/self/task");
    for (struct dirent *e; d && (e = readdir(d));) {
        if (e->d_name[0] == '.') continue;
        cpu_set_t t;
        threads++;
        CHECK(sched_getaffinity(atoi(e->d_name), sizeof t, &t) == 0 && CPU_EQUAL(&t, &want),
              "thread %s is not on the rank's CPUs", e->d_name);
    }
    if (d) closedir(d);
    printf("comm_check: bind: rank %d pinned to %d of %d CPUs, %d threads\n", g_rank, hi - lo, n, threads);
    return 0;
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "collectives";
    int nccl = 0, self = 0, no_thread = 0;
    for (int i = 2; i < argc; i++) {
        if (strcmp(argv[i], "--nccl") == 0) nccl = 1;
        else if (strcmp(argv[i], "--self") == 0) self = 1;
        else if (strcmp(argv[i], "--no-thread") == 0) no_thread = 1;
        else if (strcmp(argv[i], "--left") == 0) g_expect_left = 1;
        else if (strcmp(argv[i], "--fake-hosts") == 0) {
            /* NCCL tells hosts apart by a hash that NCCL_HOSTID overrides. */
            char id[64];
            snprintf(id, sizeof id, "memplan-fake-host-%d", exec_launch_rank(0));
            setenv("NCCL_HOSTID", id, 0);
        }
    }
    char err[256];
    Comm *c = comm_create(nccl ? COMM_NCCL : self ? COMM_SELF : COMM_MPI, &argc, &argv, 30.0, err, sizeof err);
    if (!c) {
        fprintf(stderr, "comm_check: %s\n", err);
        return 2;
    }
    g_rank = comm_rank(c);
    if (no_thread) comm_set_mpi_progress(c, 0);
    g_dev = exec_device_create(nccl ? DEVICE_CUDA : DEVICE_HOST, comm_local_rank(c), err, sizeof err);
    if (!g_dev) {
        fprintf(stderr, "rank %d: comm_check: %s\n", g_rank, err);
        comm_abort(c, "no device");
    }
    comm_set_stream(c, exec_device_stream(g_dev));
    g_mem = exec_device_tracker_create(g_dev, 0);

    int rc;
    if (strcmp(mode, "collectives") == 0) rc = run_collectives(c);
    else if (strcmp(mode, "same") == 0) rc = run_same(c);
    else if (strcmp(mode, "timeout") == 0) rc = run_timeout(c);
    else if (strcmp(mode, "yield") == 0) rc = run_yield(c);
    else if (strcmp(mode, "bind") == 0) rc = run_bind(c);
    else {
        fprintf(stderr, "comm_check: unknown mode '%s'\n", mode);
        rc = 2;
    }
    CHECK(prof_mem_current_total(g_mem) == 0, "%zu bytes still tracked", prof_mem_current_total(g_mem));
    if (rc == 0 && g_fail == 0)
        printf("comm_check: rank %d ok (%s, %d ranks, %s%s)\n", g_rank, mode, comm_size(c),
               comm_kind(c) == COMM_NCCL ? "nccl" : comm_kind(c) == COMM_SELF ? "self" : "mpi",
               comm_mpi_progress(c) ? " with the progress thread" : "");
    fflush(stdout);
    prof_mem_destroy(g_mem);
    exec_device_destroy(g_dev);
    comm_destroy(c);
    return rc || g_fail ? 1 : 0;
}
