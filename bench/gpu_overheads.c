/* gpu_overheads.c — measures the fixed GPU memory overheads the planner assumes (CUDA context,
 * cuBLAS handle + workspace, NCCL communicator) and prints a table (lines not data start with
 * '#'; memory in MiB = 2^20 bytes) and, with --json FILE, the same records.
 *
 *   build/bench/gpu_overheads [--json FILE] [--gemm N] [--device D] [--no-nccl]
 *   mpirun -np N build/bench/gpu_overheads [--json FILE]     one rank per GPU, NCCL over MPI
 *
 * Alone: one process, a one-rank NCCL communicator (no peers: small buffers). Under mpirun
 * (detected from the launcher's environment), rank r uses GPU local_rank % GPUs and the
 * communicator spans all ranks, bootstrapped by exec_comm as the executor does. Ranks sharing a
 * GPU (more ranks than GPUs: set a distinct NCCL_HOSTID per rank, see docs/gpu-profiling.md) run
 * the context and cuBLAS steps one at a time, and their NCCL delta is divided among them.
 * Without a GPU it prints "skipped: no CUDA device (...)" and exits 0. */
#include <cjson/cJSON.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec_comm.h"
#include "exec_launch.h"
#include "prof_overhead.h"

#ifndef MEMPLAN_CUDA
#define MEMPLAN_CUDA 0
#endif
#ifndef MEMPLAN_NCCL
#define MEMPLAN_NCCL 0
#endif
#if MEMPLAN_CUDA
#include <cuda_runtime.h>
#endif

#define MiB (1024.0 * 1024.0)
#define FIRST_BYTES ((size_t)64 << 20)   /* the large first all-reduce, bytes */

typedef struct {
    const char *json;
    int gemm_n;
    int device;          /* -1: local rank % GPUs */
    int nccl;
} Options;

static void usage(FILE *f)
{
    fprintf(f, "usage: gpu_overheads [--json FILE] [--gemm N] [--device D] [--no-nccl]\n"
               "  --json FILE   also write the records as JSON\n"
               "  --gemm N      size of the first SGEMM, N x N x N fp32 (default 1024)\n"
               "  --device D    CUDA device when run alone (default 0; under mpirun: local rank %% GPUs)\n"
               "  --no-nccl     skip the NCCL step\n");
}

static int parse_int(const char *s, const char *what, int lo, int *out)
{
    char *end;
    long v = strtol(s, &end, 10);
    if (end == s || *end || v < lo || v > 1 << 20) {
        fprintf(stderr, "gpu_overheads: %s must be an integer >= %d, got '%s'\n", what, lo, s);
        return -1;
    }
    *out = (int)v;
    return 0;
}

static int parse(int argc, char **argv, Options *o)
{
    static const struct option longs[] = {
        {"json", required_argument, 0, 'j'}, {"gemm", required_argument, 0, 'g'},
        {"device", required_argument, 0, 'd'}, {"no-nccl", no_argument, 0, 'n'},
        {"help", no_argument, 0, 'h'}, {0, 0, 0, 0},
    };
    *o = (Options){NULL, 1024, -1, 1};
    int c;
    while ((c = getopt_long(argc, argv, "", longs, NULL)) != -1) {
        switch (c) {
        case 'j': o->json = optarg; break;
        case 'g': if (parse_int(optarg, "--gemm", 1, &o->gemm_n)) return -1; break;
        case 'd': if (parse_int(optarg, "--device", 0, &o->device)) return -1; break;
        case 'n': o->nccl = 0; break;
        case 'h': usage(stdout); exit(0);
        default: usage(stderr); return -1;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "gpu_overheads: unexpected argument '%s'\n", argv[optind]);
        usage(stderr);
        return -1;
    }
    return 0;
}

static int write_json(const char *path, cJSON *root)
{
    char *text = cJSON_Print(root);
    FILE *f = text ? fopen(path, "w") : NULL;
    int bad = !f || fputs(text, f) < 0 || fputc('\n', f) == EOF;
    if (f && fclose(f)) bad = 1;
    free(text);
    if (bad) fprintf(stderr, "gpu_overheads: cannot write %s\n", path);
    return bad ? -1 : 0;
}

static int skipped(const char *why, const char *json, int rank)
{
    if (rank != 0) return 0;
    printf("skipped: %s\n", why);
    if (json) {
        cJSON *root = cJSON_CreateObject();
        cJSON_AddStringToObject(root, "skipped", why);
        write_json(json, root);
        cJSON_Delete(root);
    }
    return 0;
}

/* ---- the NCCL step over MPI: exec_comm creates the communicator as the executor does ---- */

typedef struct {
    Comm *mpi;           /* host barriers */
    Comm *nccl;
    void *buf;           /* device, FIRST_BYTES */
} NcclCtx;

static int hook_create(void *ctx, char *err, size_t errlen)
{
    NcclCtx *n = ctx;
    n->nccl = comm_create(COMM_NCCL, NULL, NULL, 120, err, errlen);
    if (!n->nccl) return -1;
    return comm_barrier(n->mpi);   /* every rank's init is done before the sample */
}

static int hook_first(void *ctx, char *err, size_t errlen)
{
    NcclCtx *n = ctx;
    if (comm_all_reduce(n->nccl, n->buf, n->buf, 1024, DT_F32, NULL) ||
        comm_all_reduce(n->nccl, n->buf, n->buf, FIRST_BYTES / 4, DT_F32, NULL) || comm_barrier(n->mpi)) {
        snprintf(err, errlen, "the first NCCL all-reduces failed (see the message above)");
        return -1;
    }
    return 0;
}

/* ---- output ---- */

static void fmt_mib(char *buf, size_t len, double bytes)
{
    if (bytes < 0) snprintf(buf, len, "-");
    else snprintf(buf, len, "%.2f", bytes / MiB);
}

static void print_table(const ProfOverhead *all, int n, int nranks)
{
    const ProfOverhead *o = &all[0];
    printf("# gpu_overheads: %s, driver %d.%d, runtime %d.%d, CUDA_MODULE_LOADING=%s, %d rank%s\n", o->gpu,
           o->driver_version / 1000, o->driver_version % 1000 / 10, o->runtime_version / 1000,
           o->runtime_version % 1000 / 10, o->module_loading[0] ? o->module_loading : "default", nranks,
           nranks == 1 ? "" : "s");
    printf("# context: %s; cuBLAS: cublasCreate + SGEMM %d^3 fp32; NCCL: init + all-reduce of 4 KiB and 64 MiB\n",
           o->context_from_nvml ? "NVML used memory before vs after cudaFree(0)"
                                : "used after cudaFree(0) (no NVML: other processes included)",
           o->gemm_n);
    printf("%-5s %-6s %12s %10s %14s %12s %10s %10s %11s %6s %7s\n", "rank", "device", "cuda_context",
           "cublas", "cublas_handle", "cublas_gemm", "nccl", "nccl_init", "nccl_first", "ranks", "sharing");
    printf("%-5s %-6s %12s %10s %14s %12s %10s %10s %11s %6s %7s\n", "-", "-", "MiB", "MiB", "MiB", "MiB",
           "MiB", "MiB", "MiB", "-", "-");
    for (int r = 0; r < n; r++) {
        const ProfOverhead *p = &all[r];
        char c[32], cb[32], ch[32], cg[32], nc[32], ni[32], nf[32];
        fmt_mib(c, sizeof c, p->cuda_context);
        fmt_mib(cb, sizeof cb, p->cublas);
        fmt_mib(ch, sizeof ch, p->cublas_handle);
        fmt_mib(cg, sizeof cg, p->cublas_gemm);
        fmt_mib(nc, sizeof nc, p->nccl);
        fmt_mib(ni, sizeof ni, p->nccl_init);
        fmt_mib(nf, sizeof nf, p->nccl_first);
        printf("%-5d %-6d %12s %10s %14s %12s %10s %10s %11s %6d %7d\n", r, p->device, c, cb, ch, cg, nc, ni, nf,
               p->nccl_ranks, p->nccl_sharing);
    }
    for (int r = 0; r < n; r++)
        if (all[r].nccl_note[0]) printf("# rank %d: nccl not measured: %s\n", r, all[r].nccl_note);
}

int main(int argc, char **argv)
{
    Options opt;
    if (parse(argc, argv, &opt)) return 2;
    int mpi = exec_launched_by_mpi();
    char err[512] = "";
    Comm *world = NULL;
    int rank = 0, size = 1, local_rank = 0, local_size = 1;
    if (mpi) {
        if (opt.device >= 0) {
            fprintf(stderr, "gpu_overheads: --device is for a single process; under mpirun each rank uses "
                            "GPU local_rank %% GPUs\n");
            return 2;
        }
        world = comm_create(COMM_MPI, &argc, &argv, 120, err, sizeof err);
        if (!world) {
            fprintf(stderr, "gpu_overheads: %s\n", err);
            return 1;
        }
        rank = comm_rank(world);
        size = comm_size(world);
        local_rank = comm_local_rank(world);
        local_size = comm_local_size(world);
    }

    char why[256] = "";
    int ndev = prof_overhead_devices(why, sizeof why);
    if (mpi) {   /* all ranks agree: if one has no GPU, all skip */
        int none_here = ndev == 0, none = 0;
        if (comm_all_reduce(world, &none_here, &none, 1, DT_I32, NULL)) comm_abort(world, "device check failed");
        if (none && ndev > 0) snprintf(why, sizeof why, "no CUDA device on %d rank(s)", none);
        if (none) ndev = 0;
    }
    if (ndev == 0) {
        int rc = skipped(why, opt.json, rank);
        comm_destroy(world);
        return rc;
    }

    int device = opt.device >= 0 ? opt.device : local_rank % ndev;
    if (device >= ndev) {
        fprintf(stderr, "gpu_overheads: --device %d, but there are %d CUDA device(s)\n", device, ndev);
        comm_destroy(world);
        return 2;
    }
    int sharing = 0;   /* local ranks on this GPU */
    for (int l = 0; l < local_size; l++) sharing += l % ndev == device;

    ProfOverhead o;
    prof_overhead_init(&o);
    int bad = 0;
    /* Context and cuBLAS one rank at a time, so no other rank's allocations land in a delta. */
    for (int r = 0; r < size; r++) {
        if (mpi && comm_barrier(world)) comm_abort(world, "barrier failed");
        if (r != rank) continue;
        if (prof_overhead_context(&o, device, err, sizeof err) || prof_overhead_cublas(&o, opt.gemm_n, err, sizeof err)) {
            fprintf(stderr, "rank %d: gpu_overheads: %s\n", rank, err);
            bad = 1;
        }
    }
    if (mpi) {   /* a failure anywhere stops every rank before the collective step */
        int any = 0;
        if (comm_all_reduce(world, &bad, &any, 1, DT_I32, NULL)) comm_abort(world, "status exchange failed");
        bad = any > 0;
    }

    NcclCtx nctx = {world, NULL, NULL};
    if (!bad && !opt.nccl) {
        snprintf(o.nccl_note, sizeof o.nccl_note, "--no-nccl");
    } else if (!bad && !MEMPLAN_NCCL) {
        snprintf(o.nccl_note, sizeof o.nccl_note, "built without NCCL (NO_NCCL=1)");
    } else if (!bad && !mpi) {
        if (prof_overhead_nccl_single(&o, err, sizeof err)) {
            fprintf(stderr, "gpu_overheads: %s\n", err);
            bad = 1;
        }
    } else if (!bad) {
#if MEMPLAN_CUDA
        if (cudaMalloc(&nctx.buf, FIRST_BYTES) != cudaSuccess || cudaMemset(nctx.buf, 0, FIRST_BYTES) != cudaSuccess ||
            cudaDeviceSynchronize() != cudaSuccess) {
            fprintf(stderr, "rank %d: gpu_overheads: cannot allocate the all-reduce buffer\n", rank);
            comm_abort(world, "allocation failed");
        }
#endif
        if (comm_barrier(world)) comm_abort(world, "barrier failed");
        ProfNcclHooks h = {hook_create, hook_first, &nctx, size, sharing};
        if (prof_overhead_nccl_with(&o, &h, err, sizeof err)) {
            fprintf(stderr, "rank %d: gpu_overheads: %s\n", rank, err);
            comm_abort(world, "the NCCL step failed");
        }
    }

    /* Rank 0 gathers every rank's record (plain data; the private pointer is not sent). */
    ProfOverhead *all = calloc((size_t)size, sizeof *all);
    if (!all) {
        fprintf(stderr, "gpu_overheads: out of host memory\n");
        return 1;
    }
    ProfOverhead mine = o;
    mine.priv_ = NULL;
    if (mpi) {
        if (comm_all_gather(world, &mine, all, sizeof mine, DT_U8, NULL)) comm_abort(world, "gather failed");
    } else {
        all[0] = mine;
    }
    if (rank == 0 && !bad) {
        print_table(all, size, size);
        if (opt.json) {
            cJSON *root = cJSON_CreateObject();
            cJSON_AddStringToObject(root, "bench", "gpu_overheads");
            cJSON_AddNumberToObject(root, "ranks", size);
            cJSON *arr = cJSON_AddArrayToObject(root, "results");
            for (int r = 0; r < size; r++) {
                cJSON *j = prof_overhead_json(&all[r]);
                cJSON_AddNumberToObject(j, "rank", r);
                cJSON_AddItemToArray(arr, j);
            }
            if (write_json(opt.json, root)) bad = 1;
            cJSON_Delete(root);
        }
    }
    free(all);
    comm_destroy(nctx.nccl);
#if MEMPLAN_CUDA
    if (nctx.buf) cudaFree(nctx.buf);
#endif
    prof_overhead_free(&o);
    comm_destroy(world);
    return bad ? 1 : 0;
}
