/* bench_nccl.c — NCCL bus bandwidth of the executor's collectives (exec_comm.h over NCCL,
 * bootstrapped over MPI exactly as `memplan run --device cuda` does), nccl-tests style:
 *   S = the full buffer in bytes (all-reduce: the buffer; all-gather: the gathered output;
 *       reduce-scatter: the input), fp32, out of place;
 *   t = one call: host wall clock over `iters` back-to-back non-blocking calls on one stream,
 *       the last completion polled (comm_wait), divided by iters;
 *   algbw = S / t; busbw = per-rank wire bytes / t with the nccl-tests factors
 *       (doc/PERFORMANCE.md: all-reduce 2(n-1)/n, all-gather and reduce-scatter (n-1)/n),
 *       the same rule as coll_wire_bytes and the planner. GB/s = 1e9 B/s.
 * Before timing, each collective is checked once with inputs whose result is exact (rank r
 * contributes r+1). Sizes run from --min-bytes to --max-bytes by --factor (default 8 B .. 1 GiB,
 * x2); iterations adapt so each size takes about --target seconds (at most --iters).
 *
 *   mpirun -np N build/bench/bench_nccl [--ops all_reduce,all_gather,reduce_scatter]
 *       [--min-bytes 8] [--max-bytes 1GiB] [--factor 2] [--iters 20] [--target 0.05] [--json FILE]
 *
 * One rank per GPU (local rank % GPUs); more ranks than GPUs need a distinct NCCL_HOSTID per
 * rank (docs/gpu.md), and then the bytes cross sockets, not NVLink. Alone (no mpirun) it runs a
 * one-rank communicator (busbw 0). Without a GPU it prints "skipped: no CUDA device (...)" and
 * exits 0. Prints a table (lines not data start with '#'), rank 0 only, one line per size as it
 * goes (a timeout still leaves the rows so far); --json rewrites the file after every row ("complete":
 * false until the end), so a cut-short sweep keeps its rows there too. */
#include <cjson/cJSON.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "exec_comm.h"
#include "exec_device.h"
#include "exec_launch.h"
#include "plan_util.h"
#include "prof_comm.h"
#include "prof_mem.h"

#ifndef MEMPLAN_NCCL
#define MEMPLAN_NCCL 0
#endif
#if MEMPLAN_NCCL
#include <nccl.h>
#endif

static const CollKind OPS[] = {COLL_ALL_REDUCE, COLL_ALL_GATHER, COLL_REDUCE_SCATTER};
#define NOPS ((int)(sizeof OPS / sizeof OPS[0]))
#define CHECK_ELEMS ((size_t)1 << 18)   /* per-rank elements of the exactness check */

typedef struct {
    unsigned ops;        /* bit per OPS[] index */
    double min_bytes, max_bytes, factor, target;
    int iters;
    const char *json;
} Options;

typedef struct {
    CollKind op;
    double bytes, count;  /* S; elements per rank sent (all-reduce: all) */
    int iters;
    double us, algbw, busbw;
} Row;

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: [mpirun -np N] bench_nccl [--ops LIST] [--min-bytes SIZE] [--max-bytes SIZE] [--factor F]\n"
               "                                 [--iters N] [--target SECONDS] [--json FILE]\n"
               "  --ops LIST       all_reduce,all_gather,reduce_scatter (default: all three)\n"
               "  --min-bytes, --max-bytes   the full buffer S (binary units: 8, 64KiB, 1GiB; a bare M is MiB;\n"
               "                   default 8 .. 1GiB)\n"
               "  --factor F       size step (default 2)\n"
               "  --iters N        at most N timed calls per size (default 20); --target S: about S seconds per\n"
               "                   size (default 0.05)\n"
               "  --json FILE      also write the records as JSON (rank 0)\n");
}

static int parse(int argc, char **argv, Options *o)
{
    static const struct option longs[] = {
        {"ops", required_argument, 0, 'o'}, {"min-bytes", required_argument, 0, 'a'},
        {"max-bytes", required_argument, 0, 'b'}, {"factor", required_argument, 0, 'f'},
        {"iters", required_argument, 0, 'i'}, {"target", required_argument, 0, 't'},
        {"json", required_argument, 0, 'j'}, {"help", no_argument, 0, 'h'}, {0, 0, 0, 0},
    };
    *o = (Options){(1u << NOPS) - 1, 8, 1024.0 * 1024 * 1024, 2, 0.05, 20, NULL};
    int c;
    long long v;
    while ((c = getopt_long(argc, argv, "", longs, NULL)) != -1) {
        switch (c) {
        case 'o': {
            o->ops = 0;
            char buf[256];
            snprintf(buf, sizeof buf, "%s", optarg);
            for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
                int k = 0;
                while (k < NOPS && strcmp(t, coll_name(OPS[k])) != 0) k++;
                if (k == NOPS) {
                    fprintf(stderr, "bench_nccl: --ops: '%s' is not all_reduce, all_gather or reduce_scatter\n", t);
                    return -1;
                }
                o->ops |= 1u << k;
            }
            break;
        }
        case 'a':
        case 'b': {
            double *dst = c == 'a' ? &o->min_bytes : &o->max_bytes;
            if (plan_parse_size(optarg, dst) || *dst < 4 || *dst > 64.0 * 1024 * 1024 * 1024) {
                fprintf(stderr, "bench_nccl: --%s '%s' is not a size in [4 B, 64 GiB]\n", c == 'a' ? "min-bytes" : "max-bytes", optarg);
                return -1;
            }
            break;
        }
        case 'f':
            if (plan_parse_double(optarg, 1.1, 1024, &o->factor)) {
                fprintf(stderr, "bench_nccl: --factor '%s' is not a number in [1.1, 1024]\n", optarg);
                return -1;
            }
            break;
        case 'i':
            if (plan_parse_int(optarg, 1, 100000, &v)) {
                fprintf(stderr, "bench_nccl: --iters '%s' is not an integer in [1, 100000]\n", optarg);
                return -1;
            }
            o->iters = (int)v;
            break;
        case 't':
            if (plan_parse_double(optarg, 0, 3600, &o->target)) {
                fprintf(stderr, "bench_nccl: --target '%s' is not a number of seconds in [0, 3600]\n", optarg);
                return -1;
            }
            break;
        case 'j': o->json = optarg; break;
        case 'h': usage(stdout); exit(0);
        default: usage(stderr); return -1;
        }
    }
    if (optind < argc || o->min_bytes > o->max_bytes) {
        fprintf(stderr, "bench_nccl: %s\n", optind < argc ? "unexpected argument" : "--min-bytes exceeds --max-bytes");
        usage(stderr);
        return -1;
    }
    return 0;
}

/* ---- one collective ---- */

/* Elements per rank of op on a full buffer of S bytes (0: too small for n ranks). */
static size_t count_of(CollKind op, double S, int n)
{
    size_t elems = (size_t)(S / sizeof(float));
    return op == COLL_ALL_REDUCE ? elems : elems / (size_t)n;
}

static int issue(Comm *c, CollKind op, const float *send, float *recv, size_t count, CommReq **req)
{
    switch (op) {
    case COLL_ALL_REDUCE: return comm_all_reduce(c, send, recv, count, DT_F32, req);
    case COLL_ALL_GATHER: return comm_all_gather(c, send, recv, count, DT_F32, req);
    case COLL_REDUCE_SCATTER: return comm_reduce_scatter(c, send, recv, count, DT_F32, req);
    default: return -1;
    }
}

/* iters back-to-back calls; seconds per call, or -1 on failure. */
static double timed(Comm *c, CollKind op, const float *send, float *recv, size_t count, int iters, CommReq **reqs)
{
    if (comm_barrier(c)) return -1;
    double t0 = now_s();
    for (int i = 0; i < iters; i++)
        if (issue(c, op, send, recv, count, &reqs[i])) return -1;
    int bad = 0;
    for (int i = 0; i < iters; i++) bad |= comm_wait(c, reqs[i]);
    return bad ? -1 : (now_s() - t0) / iters;
}

/* Rank r contributes r+1 everywhere: all-reduce and reduce-scatter give n(n+1)/2, all-gather
 * block q gives q+1. Returns the number of wrong elements on this rank (-1: could not run). */
static long check(Comm *c, Device *d, CollKind op, float *send, float *recv)
{
    int n = comm_size(c), r = comm_rank(c);
    size_t cnt = CHECK_ELEMS, in = op == COLL_REDUCE_SCATTER ? cnt * (size_t)n : cnt,
           out = op == COLL_ALL_GATHER ? cnt * (size_t)n : cnt;
    float *h = malloc((in > out ? in : out) * sizeof *h);
    if (!h) return -1;
    for (size_t i = 0; i < in; i++) h[i] = (float)(r + 1);
    exec_device_copy(d, send, h, in * sizeof *h);
    long wrong = -1;
    if (issue(c, op, send, recv, cnt, NULL) == 0) {
        exec_device_copy(d, h, recv, out * sizeof *h);
        wrong = 0;
        for (size_t i = 0; i < out; i++) {
            float want = op == COLL_ALL_GATHER ? (float)(i / cnt + 1) : (float)(n * (n + 1) / 2);
            wrong += h[i] != want;
        }
    }
    free(h);
    return wrong;
}

/* Writes root (and frees it) to path through path.tmp and a rename: a reader never sees half. */
static int write_json(const char *path, cJSON *root)
{
    char *text = cJSON_Print(root), tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = text ? fopen(tmp, "w") : NULL;
    int bad = !f || fputs(text, f) < 0 || fputc('\n', f) == EOF;
    if (f && fclose(f)) bad = 1;
    if (!bad && rename(tmp, path)) bad = 1;
    free(text);
    cJSON_Delete(root);
    if (bad) fprintf(stderr, "bench_nccl: cannot write %s\n", path);
    return bad ? -1 : 0;
}

/* The JSON document: the rows so far (complete = 0 while the sweep goes on: the file is
 * rewritten after every row, so a run cut short keeps them) and, at the end, the peaks. */
static cJSON *doc(const Options *opt, int n, const char *gpu, int nccl_version, const char *hostid, const long *wrong,
                  const Row *rows, int nrows, const double *peak, int complete)
{
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "bench", "nccl");
    cJSON_AddNumberToObject(root, "ranks", n);
    cJSON_AddStringToObject(root, "gpu", gpu);
    cJSON_AddNumberToObject(root, "nccl_version", nccl_version);
    cJSON_AddBoolToObject(root, "fake_hosts", hostid != NULL);
    if (hostid)
        cJSON_AddStringToObject(root, "not_a_real_measurement",
                                "ranks as fake hosts (NCCL_HOSTID per rank): sockets over loopback, kernels time-sliced "
                                "on a shared GPU; no figure here is NCCL's per-GPU bandwidth");
    cJSON_AddStringToObject(root, "dtype", "fp32");
    cJSON *chk = cJSON_AddObjectToObject(root, "exact");
    for (int k = 0; k < NOPS; k++)
        if (opt->ops & (1u << k)) cJSON_AddBoolToObject(chk, coll_name(OPS[k]), wrong[k] == 0);
    cJSON *arr = cJSON_AddArrayToObject(root, "results");
    for (int i = 0; i < nrows; i++) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "op", coll_name(rows[i].op));
        cJSON_AddNumberToObject(o, "bytes", rows[i].bytes);
        cJSON_AddNumberToObject(o, "count", rows[i].count);
        cJSON_AddNumberToObject(o, "iters", rows[i].iters);
        cJSON_AddNumberToObject(o, "us", rows[i].us);
        cJSON_AddNumberToObject(o, "algbw_GBps", rows[i].algbw);
        cJSON_AddNumberToObject(o, "busbw_GBps", rows[i].busbw);
        cJSON_AddItemToArray(arr, o);
    }
    if (peak) {
        cJSON *pk = cJSON_AddObjectToObject(root, "peak_busbw_GBps");
        for (int k = 0; k < NOPS; k++)
            if (opt->ops & (1u << k)) cJSON_AddNumberToObject(pk, coll_name(OPS[k]), peak[k]);
    }
    cJSON_AddBoolToObject(root, "complete", complete);
    return root;
}

/* What the checks and the sweep share */
typedef struct {
    const Options *opt;
    Comm *c, *ctl;             /* the collectives (NCCL); host control (MPI, or one process) */
    Device *d;
    int n, rank, nccl_version;
    const char *hostid;        /* NCCL_HOSTID: ranks as fake hosts */
    float *send, *recv;        /* device buffers of the largest full buffer */
    CommReq **reqs;            /* opt->iters */
    long wrong[NOPS];          /* per op: wrong elements of the exactness check */
} Bench;

/* Exactness first, every op asked for; prints the line and the table's header on rank 0.
 * Returns 1 when a check could not run on some rank (every rank stops), else 0; *inexact: this
 * rank saw wrong results (reported; the timing goes on). */
static int check_all(Bench *b, int *inexact)
{
    int bad = 0, any_bad = 0;
    *inexact = 0;
    for (int k = 0; k < NOPS; k++) {
        if (!(b->opt->ops & (1u << k))) continue;
        b->wrong[k] = check(b->c, b->d, OPS[k], b->send, b->recv);
        if (b->wrong[k] < 0) bad = 1;
        if (b->wrong[k] > 0) {
            fprintf(stderr, "bench_nccl: rank %d: %s check: %ld wrong elements\n", b->rank, coll_name(OPS[k]),
                    b->wrong[k]);
            *inexact = 1;
        }
    }
    /* a rank that stops alone would leave the others waiting */
    if (comm_all_reduce(b->ctl, &bad, &any_bad, 1, DT_I32, NULL)) any_bad = 1;
    if (b->rank == 0) {
        printf("# exactness (rank r contributes r+1, %zu elements per rank):", CHECK_ELEMS);
        for (int k = 0; k < NOPS; k++)
            if (b->opt->ops & (1u << k)) printf(" %s %s", coll_name(OPS[k]), b->wrong[k] ? "WRONG" : "ok");
        printf("\n%-15s %14s %12s %6s %6s %12s %10s %10s\n", "op", "size", "count", "type", "iters", "time", "algbw", "busbw");
        printf("%-15s %14s %12s %6s %6s %12s %10s %10s\n", "-", "bytes", "elements", "-", "-", "us", "GB/s", "GB/s");
        fflush(stdout);
    }
    return any_bad;
}

/* One row: op on a full buffer of about S0 bytes. 0 measured, 1 skipped (fewer elements than
 * ranks), -1 a collective failed. */
static int one_row(Bench *b, CollKind op, double S0, Row *w)
{
    const Options *opt = b->opt;
    size_t count = count_of(op, S0, b->n);
    if (count == 0) return 1;
    double S = op == COLL_ALL_REDUCE ? (double)count * sizeof(float) : (double)count * sizeof(float) * b->n;
    /* warm-up, then a calibration call, then enough calls for the target time */
    double t1 = timed(b->c, op, b->send, b->recv, count, 1, b->reqs);
    if (t1 >= 0) t1 = timed(b->c, op, b->send, b->recv, count, 1, b->reqs);
    int iters = t1 > 0 ? (int)fmin(opt->iters, fmax(1, ceil(opt->target / t1))) : 1;
    /* every rank must run the same number of calls: rank 0's choice */
    double it = iters;
    if (t1 < 0 || comm_broadcast(b->ctl, &it, 1, DT_F64, 0)) return -1;
    iters = (int)it;
    double t = timed(b->c, op, b->send, b->recv, count, iters, b->reqs);
    if (t < 0) return -1;
    *w = (Row){op, S, (double)count, iters, t * 1e6, S / t / 1e9, coll_wire_bytes(op, S, b->n) / t / 1e9};
    return 0;
}

/* The sweep: every op asked for, sizes min_bytes .. max_bytes by factor; rank 0 prints each row
 * and rewrites the JSON after it. 0, or 1 when a collective failed. */
static int sweep(Bench *b, Row *rows, int *nrows)
{
    const Options *opt = b->opt;
    for (int k = 0; k < NOPS; k++) {
        if (!(opt->ops & (1u << k))) continue;
        for (double S0 = opt->min_bytes; S0 <= opt->max_bytes * (1 + 1e-9); S0 *= opt->factor) {
            Row *w = &rows[*nrows];
            int rc = one_row(b, OPS[k], S0, w);
            if (rc < 0) return 1;
            if (rc > 0) continue;
            (*nrows)++;
            if (b->rank != 0) continue;
            printf("%-15s %14.0f %12.0f %6s %6d %12.2f %10.3f %10.3f\n", coll_name(w->op), w->bytes, w->count, "fp32",
                   w->iters, w->us, w->algbw, w->busbw);
            fflush(stdout);
            if (opt->json)
                write_json(opt->json, doc(opt, b->n, exec_device_name(b->d), b->nccl_version, b->hostid, b->wrong, rows,
                                          *nrows, NULL, 0));
        }
    }
    return 0;
}

/* Rank 0: the peak bus bandwidth per op, and the final JSON. 0, or 1 when it cannot be written. */
static int report_peaks(const Bench *b, const Row *rows, int nrows)
{
    const Options *opt = b->opt;
    double peak[NOPS] = {0};
    for (int i = 0; i < nrows; i++)
        for (int k = 0; k < NOPS; k++)
            if (rows[i].op == OPS[k] && rows[i].busbw > peak[k]) peak[k] = rows[i].busbw;
    printf("# peak busbw:");
    for (int k = 0; k < NOPS; k++)
        if (opt->ops & (1u << k)) printf(" %s %.3f GB/s", coll_name(OPS[k]), peak[k]);
    printf("\n");
    return opt->json &&
           write_json(opt->json, doc(opt, b->n, exec_device_name(b->d), b->nccl_version, b->hostid, b->wrong, rows, nrows,
                                     peak, 1));
}

/* Rank 0's header lines */
static void print_header(const Bench *b)
{
    int v = b->nccl_version;
    printf("# bench_nccl: %d rank%s%s, %s, NCCL %d.%d.%d%s; fp32, out of place; t = wall clock of back-to-back "
           "non-blocking calls / iters\n",
           b->n, b->n == 1 ? "" : "s", comm_kind(b->ctl) == COMM_MPI ? " (NCCL bootstrapped over MPI)" : " (one process)",
           exec_device_name(b->d), v / 10000, v / 100 % 100, v % 100,
           b->hostid ? "; NCCL_HOSTID set per rank (fake hosts: sockets, not NVLink)" : "");
    if (b->hostid)
        printf("# NOT A REAL MEASUREMENT: ranks as fake hosts share the GPU over loopback sockets and time-slice "
               "it; these times and bandwidths are not NCCL's per-GPU figures\n");
    printf("# algbw = S/t; busbw = algbw x (all_reduce 2(n-1)/n, all_gather and reduce_scatter (n-1)/n); "
           "GB/s = 1e9 B/s\n");
}

int main(int argc, char **argv)
{
    Options opt;
    if (parse(argc, argv, &opt)) return 2;
    char why[256];
    if (exec_device_cuda_count(why, sizeof why) == 0) {
        /* every rank of a job on a machine without a GPU says nothing but rank 0 */
        if (exec_launch_rank(0) == 0) {
            printf("skipped: %s\n", why);
            if (opt.json) {
                cJSON *root = cJSON_CreateObject();
                cJSON_AddStringToObject(root, "bench", "nccl");
                cJSON_AddStringToObject(root, "skipped", why);
                write_json(opt.json, root);
            }
        }
        return 0;
    }
    char err[256];
    Bench b = {.opt = &opt, .hostid = getenv("NCCL_HOSTID")};
    /* host control (the ranks agree on iteration counts) over MPI; the collectives over NCCL */
    b.ctl = comm_create(comm_launch_kind(), &argc, &argv, 120, err, sizeof err);
    b.c = b.ctl ? comm_create(COMM_NCCL, &argc, &argv, 120, err, sizeof err) : NULL;
    if (!b.c) {
        fprintf(stderr, "bench_nccl: rank %d: %s\n", exec_launch_rank(0), err);
        comm_destroy(b.ctl);
        return 1;
    }
    b.n = comm_size(b.c), b.rank = comm_rank(b.c);
    if (!(b.d = exec_device_create(DEVICE_CUDA, comm_local_rank(b.c), err, sizeof err))) {
        fprintf(stderr, "bench_nccl: rank %d: %s\n", b.rank, err);
        comm_abort(b.c, "no device");
    }
    comm_set_stream(b.c, exec_device_stream(b.d));
    MemTracker *mt = exec_device_tracker_create(b.d, 0);
    /* send and recv of the largest full buffer (and at least the check's) */
    double big = fmax(opt.max_bytes, (double)CHECK_ELEMS * sizeof(float) * b.n);
    b.send = mt ? prof_mem_calloc(mt, MEM_COMM, (size_t)big, "send") : NULL;
    b.recv = mt ? prof_mem_calloc(mt, MEM_COMM, (size_t)big, "recv") : NULL;
    b.reqs = calloc((size_t)opt.iters, sizeof *b.reqs);
    if (!b.send || !b.recv || !b.reqs) {
        fprintf(stderr, "bench_nccl: rank %d: cannot allocate 2 x %.0f bytes on the GPU\n", b.rank, big);
        comm_abort(b.c, "out of memory");
    }
    exec_device_synchronize(b.d);
#if MEMPLAN_NCCL
    ncclGetVersion(&b.nccl_version);
#endif
    if (b.rank == 0) print_header(&b);
    int inexact = 0, bad = check_all(&b, &inexact), cap = 0, nrows = 0;
    for (double S = opt.min_bytes; S <= opt.max_bytes * (1 + 1e-9); S *= opt.factor) cap++;
    Row *rows = calloc((size_t)(cap * NOPS) + 1, sizeof *rows);
    if (rows && !bad) bad = sweep(&b, rows, &nrows);
    if (bad) fprintf(stderr, "bench_nccl: rank %d: a collective failed (see above)\n", b.rank);
    if (b.rank == 0 && !bad && nrows && report_peaks(&b, rows, nrows)) bad = 1;
    free(rows);
    free(b.reqs);
    prof_mem_free(mt, b.send);
    prof_mem_free(mt, b.recv);
    prof_mem_destroy(mt);
    exec_device_destroy(b.d);
    comm_destroy(b.c);
    comm_destroy(b.ctl);
    return bad || inexact ? 1 : 0;
}
