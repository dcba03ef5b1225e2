/* bench_allreduce.c — the executor's collectives (exec_comm.h over MPI) against the same MPI
 * library's blocking collectives, measured in the same run, nccl-tests style:
 *   algbw = S / t;  busbw = algbw · 2(n-1)/n (all-reduce), · (n-1)/n (reduce-scatter, all-gather,
 *   all-to-all: nccl-tests alltoall.cu)
 * (decimal GB/s; S = the full buffer, count·n elements for reduce-scatter and all-gather, a rank's
 * send buffer of count·n for all-to-all; t = one call, the slowest rank's median). For each
 * collective and each fp32 size from --min-kib to --max-mib (x4 steps) it takes, in rounds that
 * alternate the variants so that a busy machine slows all of them alike:
 *   mpi      the blocking MPI_Allreduce / MPI_Reduce_scatter_block / MPI_Allgather / MPI_Alltoall;
 *   thread   exec_comm with its progress thread (the default: blocking collectives on a thread);
 *   test     exec_comm's non-blocking MPI_I* calls completed by MPI_Test polling (the old way);
 * and prints both busbw columns and the ratio exec_comm / mpi. The overlap column: the thread
 * variant issued non-blocking, then a compute loop as long as the collective (no MPI calls in
 * it), then the wait: overlap = (t_comm + t_compute - t_both) / min(t_comm, t_compute), 1 when
 * the collective hides entirely behind compute, 0 when they run one after the other (as they
 * must when every core already runs a rank: the copies need a core). Inputs: rank r contributes
 * r+1, so results are checked exactly. Then single-process memcpy bandwidth for reference.
 * Usage: mpirun -np N build/bench/bench_allreduce [--min-kib K] [--max-mib M] [--rounds R] [--json FILE]
 * Lines that are not data start with '#'. */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "exec_comm.h"
#include "exec_launch.h"
#include "plan_util.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

typedef enum { AR = 0, RS, AG, A2A, NCOLL } Coll;
static const struct {
    const char *name;
    double bus;   /* busbw / algbw for n ranks: factor·(n-1)/n */
} COLLS[NCOLL] = {{"all_reduce", 2.0}, {"reduce_scatter", 1.0}, {"all_gather", 1.0}, {"all_to_all", 1.0}};
enum { V_MPI = 0, V_THREAD, V_TEST, NVAR };
static const char *const VARS[NVAR] = {"mpi", "thread", "test"};

typedef struct {
    Coll coll;
    size_t bytes;     /* full buffer */
    double us[NVAR];  /* median per call, slowest rank */
    double busbw[NVAR];
    double overlap;
    int exact;
} Row;

/* fills the inputs: send[count·n] for reduce-scatter, send[count] otherwise */
static void fill(float *buf, size_t n, int rank)
{
    for (size_t i = 0; i < n; i++) buf[i] = (float)(rank + 1);
}

/* one call of variant v; count = elements per rank block (all-reduce: the whole buffer) */
static int one_call(Comm *c, int v, Coll k, float *send, float *recv, size_t count, CommReq **req)
{
    if (v == V_MPI) {
        if (k == AR) return MPI_Allreduce(send, recv, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD) != MPI_SUCCESS;
        if (k == RS) return MPI_Reduce_scatter_block(send, recv, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD) != MPI_SUCCESS;
        if (k == A2A) return MPI_Alltoall(send, (int)count, MPI_FLOAT, recv, (int)count, MPI_FLOAT, MPI_COMM_WORLD) != MPI_SUCCESS;
        return MPI_Allgather(send, (int)count, MPI_FLOAT, recv, (int)count, MPI_FLOAT, MPI_COMM_WORLD) != MPI_SUCCESS;
    }
    if (k == AR) return comm_all_reduce(c, send, recv, count, DT_F32, req);
    if (k == RS) return comm_reduce_scatter(c, send, recv, count, DT_F32, req);
    if (k == A2A) return comm_all_to_all(c, send, recv, count, DT_F32, req);
    return comm_all_gather(c, send, recv, count, DT_F32, req);
}

static int check(Coll k, const float *recv, size_t count, int n)
{
    int gathers = k == AG || k == A2A;   /* block r of the result is rank r's (all r + 1) */
    size_t m = gathers ? count * (size_t)n : count;
    for (size_t i = 0; i < m; i++) {
        float want = gathers ? (float)(i / count + 1) : (float)(n * (n + 1) / 2);
        if (recv[i] != want) return 0;
    }
    return 1;
}

/* a compute loop of about sec seconds that touches no memory and calls no MPI */
static volatile double g_sink;
static void compute_for(double sec)
{
    double t0 = now(), x = 1.0;
    while (now() - t0 < sec)
        for (int i = 0; i < 1000; i++) x = x * 1.0000001 + 1e-9;
    g_sink = x;
}

/* What the rows share: the buffers, the per-round times, the job. */
typedef struct {
    Comm *c;
    int rank, n, rounds, thread_ok;   /* thread_ok: exec_comm's progress thread is available */
    float *send, *recv;
    double *t[NVAR], *tov, *all;      /* per round: each variant's time, the overlapped call's (s) */
} Bench;

/* The slowest rank's value of v */
static double slowest(Bench *b, double v)
{
    comm_all_gather(b->c, &v, b->all, 1, DT_F64, NULL);
    for (int r = 0; r < b->n; r++) v = b->all[r] > v ? b->all[r] : v;
    return v;
}

/* One round of collective k (rd -1: the warm-up, not timed): each variant, then the thread
 * variant behind a compute loop as long as the MPI call. 0 or 1 (a call failed). */
static int round_of(Bench *b, Coll k, size_t count, int rd, Row *w)
{
    size_t nsend = k == RS || k == A2A ? count * (size_t)b->n : count;
    int bad = 0;
    for (int v = 0; v < NVAR && !bad; v++) {
        if (v == V_THREAD && !b->thread_ok) continue;
        comm_set_mpi_progress(b->c, v == V_THREAD);
        fill(b->send, nsend, b->rank);
        comm_barrier(b->c);
        double t0 = now();
        bad |= one_call(b->c, v, k, b->send, b->recv, count, NULL) != 0;
        double dt = now() - t0;
        if (rd >= 0) b->t[v][rd] = dt;
        if (!check(k, b->recv, count, b->n)) w->exact = 0;
    }
    if (!b->thread_ok || bad) return bad;
    comm_set_mpi_progress(b->c, 1);
    fill(b->send, nsend, b->rank);
    double tc = rd >= 0 ? b->t[V_MPI][rd] : 1e-3;
    comm_barrier(b->c);
    double t0 = now();
    CommReq *req = NULL;
    bad |= one_call(b->c, V_THREAD, k, b->send, b->recv, count, &req) != 0;
    compute_for(tc);
    bad |= comm_wait(b->c, req) != 0;
    if (rd >= 0) b->tov[rd] = now() - t0;
    if (!check(k, b->recv, count, b->n)) w->exact = 0;
    return bad;
}

/* One row: collective k of count elements per rank block, every variant alternating over the
 * rounds, then the medians of the slowest rank. 0 or 1. */
static int measure(Bench *b, Coll k, size_t count, Row *w)
{
    int n = b->n, bad = 0;
    memset(w, 0, sizeof *w);
    w->coll = k;
    w->bytes = k == AR ? count * sizeof(float) : count * (size_t)n * sizeof(float);
    w->exact = 1;
    for (int rd = -1; rd < b->rounds && !bad; rd++) bad = round_of(b, k, count, rd, w);   /* round -1: warm-up */
    double fac = COLLS[k].bus * (n - 1) / n;
    for (int v = 0; v < NVAR && !bad; v++) {
        double worst = slowest(b, (v == V_THREAD && !b->thread_ok) ? 0 : plan_median(b->t[v], b->rounds));
        w->us[v] = worst * 1e6;
        w->busbw[v] = worst > 0 ? (double)w->bytes / worst / 1e9 * fac : 0;
    }
    if (b->thread_ok && !bad) {
        double both = slowest(b, plan_median(b->tov, b->rounds));
        double comm_t = w->us[V_THREAD] * 1e-6, comp = w->us[V_MPI] * 1e-6;
        double lo = comm_t < comp ? comm_t : comp;
        w->overlap = lo > 0 ? (comm_t + comp - both) / lo : 0;
    }
    return bad || !w->exact;
}

/* memcpy bandwidth of one core over bytes, best of 5, GB/s (0 if out of memory) */
static double memcpy_gbps(size_t bytes)
{
    char *a = malloc(bytes), *b = malloc(bytes);
    double best = 1e9, gbps = 0;
    if (a && b) {
        memset(a, 1, bytes);
        memset(b, 2, bytes);
        for (int r = 0; r < 5; r++) {
            double t0 = now();
            memcpy(b, a, bytes);
            double dt = now() - t0;
            if (dt < best) best = dt;
            a[r] ^= b[bytes - 1 - r];   /* keep the copies observable */
        }
        gbps = (double)bytes / best / 1e9;
    }
    free(a);
    free(b);
    return gbps;
}

static void print_rows(const Bench *b, const Row *rows, int nrows, size_t max_bytes, double memcpy_rate)
{
    printf("# fp32 collectives over %d ranks (MPI), median of %d alternating rounds, slowest rank; busbw = algbw x "
           "2(n-1)/n (all_reduce) or (n-1)/n (all_to_all: of the send buffer); exec_comm's progress thread %s\n",
           b->n, b->rounds, b->thread_ok ? "in use" : "unavailable (no MPI_THREAD_MULTIPLE)");
    printf("%-15s %10s %10s %10s %10s %8s %8s %10s %8s %6s\n", "collective", "size", "mpi", "thread", "test",
           "thr/mpi", "test/mpi", "mpi", "overlap", "exact");
    printf("%-15s %10s %10s %10s %10s %8s %8s %10s %8s %6s\n", "-", "bytes", "busbw GB/s", "busbw GB/s",
           "busbw GB/s", "ratio", "ratio", "us", "-", "-");
    for (int i = 0; i < nrows; i++) {
        const Row *w = &rows[i];
        double m = w->busbw[V_MPI] > 0 ? w->busbw[V_MPI] : 1e300;
        printf("%-15s %10zu %10.3f %10.3f %10.3f %8.2f %8.2f %10.1f %8.2f %6s\n", COLLS[w->coll].name, w->bytes,
               w->busbw[V_MPI], w->busbw[V_THREAD], w->busbw[V_TEST], w->busbw[V_THREAD] / m, w->busbw[V_TEST] / m,
               w->us[V_MPI], w->overlap, w->exact ? "yes" : "NO");
    }
    printf("# ratio: exec_comm (progress thread) / blocking MPI bus bandwidth; 'test' is the MPI_I* + MPI_Test path\n");
    printf("# memcpy bandwidth (one core, %zu MiB, best of 5): %.3f GB/s\n", max_bytes >> 20, memcpy_rate);
}

/* 0, or 1 when the file cannot be written */
static int write_json(const char *json, const Bench *b, const Row *rows, int nrows, double memcpy_rate)
{
    FILE *f = fopen(json, "w");
    if (!f) {
        fprintf(stderr, "bench_allreduce: cannot write %s\n", json);
        return 1;
    }
    fprintf(f, "{\"ranks\": %d, \"rounds\": %d, \"memcpy_gbps\": %.6g, \"progress_thread\": %s, \"rows\": [", b->n,
            b->rounds, memcpy_rate, b->thread_ok ? "true" : "false");
    for (int i = 0; i < nrows; i++) {
        const Row *w = &rows[i];
        fprintf(f, "%s{\"collective\": \"%s\", \"bytes\": %zu", i ? ", " : "", COLLS[w->coll].name, w->bytes);
        for (int v = 0; v < NVAR; v++)
            fprintf(f, ", \"%s_us\": %.6g, \"%s_busbw_gbps\": %.6g", VARS[v], w->us[v], VARS[v], w->busbw[v]);
        fprintf(f, ", \"ratio_thread_over_mpi\": %.6g, \"overlap\": %.4g, \"exact\": %s}",
                w->busbw[V_MPI] > 0 ? w->busbw[V_THREAD] / w->busbw[V_MPI] : 0, w->overlap, w->exact ? "true" : "false");
    }
    fprintf(f, "]}\n");
    fclose(f);
    return 0;
}

int main(int argc, char **argv)
{
    const char *json = NULL;
    double max_mib = 64, min_kib = 1024;
    int rounds = 7;
    for (int i = 1; i < argc; i++) {
        char *end = NULL;
        if (strcmp(argv[i], "--json") == 0 && i + 1 < argc) json = argv[++i];
        else if (strcmp(argv[i], "--max-mib") == 0 && i + 1 < argc) max_mib = strtod(argv[++i], &end);
        else if (strcmp(argv[i], "--min-kib") == 0 && i + 1 < argc) min_kib = strtod(argv[++i], &end);
        else if (strcmp(argv[i], "--rounds") == 0 && i + 1 < argc) rounds = (int)strtol(argv[++i], &end, 10);
        else {
            fprintf(stderr, "usage: mpirun -np N bench_allreduce [--min-kib K] [--max-mib M] [--rounds R] [--json FILE]\n");
            return 2;
        }
        if (end && (*end || max_mib <= 0 || min_kib < 4 || rounds < 1 || rounds > 1000)) {
            fprintf(stderr, "bench_allreduce: bad value '%s' for %s (sizes > 0, --min-kib >= 4, 1 <= --rounds <= 1000)\n",
                    argv[i], argv[i - 1]);
            return 2;
        }
    }
    char err[256];
    if (!exec_launched_by_mpi()) {
        fprintf(stderr, "bench_allreduce: run it under mpirun with 2 or more ranks\n");
        return 2;
    }
    Comm *c = comm_create(COMM_MPI, &argc, &argv, 120, err, sizeof err);
    if (!c) {
        fprintf(stderr, "bench_allreduce: %s\n", err);
        return 1;
    }
    Bench b = {.c = c, .rank = comm_rank(c), .n = comm_size(c), .rounds = rounds, .thread_ok = comm_mpi_progress(c)};
    size_t max_bytes = (size_t)(max_mib * 1024 * 1024);
    b.send = malloc(max_bytes);
    b.recv = malloc(max_bytes);
    b.tov = calloc((size_t)rounds, sizeof *b.tov);
    b.all = calloc((size_t)b.n, sizeof *b.all);
    for (int v = 0; v < NVAR; v++) b.t[v] = calloc((size_t)rounds, sizeof(double));
    Row rows[64];
    int nrows = 0, bad = !b.send || !b.recv || !b.tov || !b.all || !b.t[0] || !b.t[1] || !b.t[2];
    for (int k = 0; k < NCOLL && !bad; k++)
        for (size_t bytes = (size_t)(min_kib * 1024); bytes <= max_bytes && !bad && nrows < 64; bytes *= 4) {
            size_t count = k == AR ? bytes / sizeof(float) : bytes / sizeof(float) / (size_t)b.n;
            if (count > 0) bad = measure(&b, (Coll)k, count, &rows[nrows++]);
        }
    comm_set_mpi_progress(c, 1);
    comm_barrier(c);
    double memcpy_rate = b.rank == 0 && !bad ? memcpy_gbps(max_bytes) : 0;
    comm_barrier(c);
    if (b.rank == 0) {
        print_rows(&b, rows, nrows, max_bytes, memcpy_rate);
        if (json && write_json(json, &b, rows, nrows, memcpy_rate)) bad = 1;
    }
    free(b.send);
    free(b.recv);
    free(b.tov);
    free(b.all);
    for (int v = 0; v < NVAR; v++) free(b.t[v]);
    comm_destroy(c);
    return bad ? 1 : 0;
}
