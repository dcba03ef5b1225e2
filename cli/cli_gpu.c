/* cli_gpu.c — see cli_gpu.h. Order matters on a GPU: the CUDA context must be measured before
 * anything creates it, so the overhead steps come first (one rank at a time, since ranks may
 * share a GPU and the samples are device-wide), then the NCCL communicator, whose creation and
 * first collectives are the NCCL step. */
#include "cli_gpu.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "exec_device.h"
#include "plan_util.h"
#include "prof_mem.h"

#define FIRST_LARGE_BYTES ((size_t)64 << 20)   /* the NCCL step's large first all-reduce */

/* ---- the NCCL step: exec_comm creates the communicator, as the run uses it ---- */

typedef struct {
    Comm *control;
    CliGpu *g;
    double timeout_s;
    void *buf;           /* device, FIRST_LARGE_BYTES */
} NcclStep;

static int nccl_create(void *ctx, char *err, size_t errlen)
{
    NcclStep *n = ctx;
    if (!(n->g->nccl = comm_create(COMM_NCCL, NULL, NULL, n->timeout_s, err, errlen))) return -1;
    return comm_barrier(n->control);   /* every rank's init is done before the sample */
}

static int nccl_first(void *ctx, char *err, size_t errlen)
{
    NcclStep *n = ctx;
    if (comm_all_reduce(n->g->nccl, n->buf, n->buf, 1024, DT_F32, NULL) ||
        comm_all_reduce(n->g->nccl, n->buf, n->buf, FIRST_LARGE_BYTES / sizeof(float), DT_F32, NULL) ||
        comm_barrier(n->control)) {
        snprintf(err, errlen, "the first NCCL all-reduces failed (see the message above)");
        return -1;
    }
    return 0;
}

/* The communicator, created inside the overhead measurement. 0, or -1 if no communicator
 * exists (a failed measurement with a communicator is a note, not a failure). */
static int nccl_measured(CliGpu *g, Comm *c, int sharing, double timeout_s)
{
    char err[256] = "";
    Device *d = exec_device_create(DEVICE_CUDA, comm_local_rank(c), err, sizeof err);
    MemTracker *mt = d ? exec_device_tracker_create(d, 0) : NULL;
    NcclStep n = {c, g, timeout_s, mt ? prof_mem_calloc(mt, MEM_COMM, FIRST_LARGE_BYTES, "nccl step") : NULL};
    if (d) exec_device_synchronize(d);
    /* every rank's buffer exists before any rank's first sample (they may share the GPU) */
    int ok = n.buf != NULL, rc = 0;
    if (comm_barrier(c)) ok = 0;
    if (ok) {
        ProfNcclHooks h = {nccl_create, nccl_first, &n, comm_size(c), sharing};
        if (prof_overhead_nccl_with(&g->ov, &h, err, sizeof err) == 0) g->ov_nccl = 1;
        else snprintf(g->ov_note, sizeof g->ov_note, "NCCL not measured: %.200s", err);
    } else {
        snprintf(g->ov_note, sizeof g->ov_note, "NCCL not measured: no device buffer for it (%.180s)", *err ? err : "out of memory");
        if (!(g->nccl = comm_create(COMM_NCCL, NULL, NULL, timeout_s, err, sizeof err))) rc = -1;
    }
    if (!g->nccl) rc = -1;
    prof_mem_free(mt, n.buf);
    prof_mem_destroy(mt);
    exec_device_destroy(d);
    return rc;
}

int cli_gpu_start(CliGpu *g, Comm *c, int cupti, double timeout_s)
{
    memset(g, 0, sizeof *g);
    prof_overhead_init(&g->ov);
    g->cupti = cupti;
    int rank = comm_rank(c), N = comm_size(c);
    char why[256];
    g->ngpu = exec_device_cuda_count(why, sizeof why);
    /* 1. every rank has a GPU (host values over the control comm, bounded by its timeout) */
    double mine = g->ngpu, *all = calloc((size_t)N, sizeof *all);
    if (!all || comm_all_gather(c, &mine, all, 1, DT_F64, NULL)) {
        free(all);
        if (rank == 0) fprintf(stderr, "memplan: the GPU check between ranks failed\n");
        return 1;
    }
    int bad = -1;
    for (int r = 0; r < N && bad < 0; r++)
        if (all[r] < 1) bad = r;
    free(all);
    if (bad >= 0) {
        if (rank == 0 && bad == 0)
            fprintf(stderr, "memplan: %s: --device cuda needs a GPU (--device cpu runs the CPU engine)\n", why);
        else if (rank == 0)
            fprintf(stderr, "memplan: no CUDA device on rank %d of %d: --device cuda needs a GPU for every rank\n", bad, N);
        return 1;
    }
    int device = comm_local_rank(c) % g->ngpu, sharing = 0;
    for (int l = 0; l < comm_local_size(c); l++) sharing += l % g->ngpu == device;
    if (sharing < 1) sharing = 1;

    /* 2. --cupti: CUDA context and cuBLAS, one rank at a time (the samples are device-wide) */
    char err[256];
    if (cupti) {
        for (int r = 0; r < N; r++) {
            if (r == rank) {
                if (prof_overhead_context(&g->ov, device, err, sizeof err) == 0 &&
                    prof_overhead_cublas(&g->ov, 1024, err, sizeof err) == 0)
                    g->ov_context = 1;
                else
                    snprintf(g->ov_note, sizeof g->ov_note, "context/cuBLAS not measured: %.200s", err);
            }
            if (comm_barrier(c)) {
                if (rank == 0) fprintf(stderr, "memplan: the barrier between overhead measurements failed\n");
                return 1;
            }
        }
    }

    /* 3. the communicator of several ranks (with --cupti: inside the NCCL step) */
    if (N > 1) {
        int rc = 0;
        if (cupti) {
            rc = nccl_measured(g, c, sharing, timeout_s);
        } else if (!(g->nccl = comm_create(COMM_NCCL, NULL, NULL, timeout_s, err, sizeof err))) {
            fprintf(stderr, "memplan: rank %d: cannot create the NCCL communicator: %s\n", rank, err);
            rc = -1;
        }
        if (rc) {
            if (cupti) fprintf(stderr, "memplan: rank %d: cannot create the NCCL communicator (%s)\n", rank, g->ov_note);
            return 1;
        }
        comm_set_timeout(g->nccl, timeout_s);
    } else if (cupti) {
        snprintf(g->ov.nccl_note, sizeof g->ov.nccl_note, "one rank: no NCCL communicator");
    }
    /* the measurement's own handle and buffers go; its figures stay */
    if (cupti) prof_overhead_free(&g->ov);
    return 0;
}

void cli_gpu_finish(CliGpu *g)
{
    comm_destroy(g->nccl);
    g->nccl = NULL;
}

/* ---- output ---- */

static const char *mib(double bytes, char *buf, size_t len)
{
    if (bytes < 0) snprintf(buf, len, "-");
    else snprintf(buf, len, "%.2f", bytes / MIB);
    return buf;
}

static double memcpy_bytes(const ProfCuptiPhase *p)
{
    double b = 0;
    for (int d = 0; d < CUPTI_COPY_COUNT; d++) b += p->memcpy[d].bytes;
    return b;
}

static void cupti_row(FILE *f, const ProfCuptiPhase *p)
{
    char a[32], b[32];
    fprintf(f, "%-10s %8lld %12.3f %8lld %12.3f %16s %16s\n", p->name, (long long)p->kernels.count, p->kernels.us / 1e3,
            (long long)p->nccl_total.count, p->nccl_total.us / 1e3, plan_fmt_count((long long)memcpy_bytes(p), a, sizeof a),
            plan_fmt_count((long long)p->memset.bytes, b, sizeof b));
}

void cli_gpu_print_cupti(FILE *f, const ExecRunResult *r)
{
    if (!r->cupti) {
        if (r->cupti_note[0]) fprintf(f, "# CUPTI: %s\n", r->cupti_note);
        return;
    }
    fprintf(f, "# CUPTI, rank 0 (%s): what the GPU ran per phase, by GPU start time (the compute stream is drained at "
               "each boundary; collectives still in flight count where they ran)\n", r->device_name);
    fprintf(f, "%-10s %8s %12s %8s %12s %16s %16s\n", "phase", "kernels", "kernel_time", "nccl", "nccl_time", "memcpy", "memset");
    fprintf(f, "%-10s %8s %12s %8s %12s %16s %16s\n", "-", "count", "ms", "count", "ms", "bytes", "bytes");
    for (int i = 0; i < r->cupti_nphases; i++) cupti_row(f, &r->cupti_phase[i]);
    ProfCuptiPhase t = r->cupti_total;
    snprintf(t.name, sizeof t.name, "total");
    cupti_row(f, &t);
    fprintf(f, "# NCCL kernels by collective (launch bracket, else kernel name):");
    int any = 0;
    for (int op = 0; op < CUPTI_NCCL_SLOTS; op++) {
        const CuptiKernelStats *k = &t.nccl[op];
        if (k->count == 0) continue;
        fprintf(f, "%s %s %lld (%.3f ms)", any ? "," : "", op == CUPTI_NCCL_UNATTRIBUTED ? "unattributed" : coll_name((CollKind)op),
                (long long)k->count, k->us / 1e3);
        any = 1;
    }
    fprintf(f, "%s\n", any ? "" : " none");
    char a[32], b[32];
    const CuptiMemCheck *m = &r->cupti_mem_check;
    fprintf(f, "# CUPTI memory (allocation records): peak %s in phase %s; tracked allocator (steady state) %s; relative "
               "difference %+.2f%% (CUPTI also sees NCCL's and cuBLAS's own allocations made during the run)\n",
            plan_fmt_bytes(m->cupti_peak, a, sizeof a), r->cupti_memory.peak_phase,
            plan_fmt_bytes(m->tracked_peak, b, sizeof b), 100 * m->rel_diff);
    if (r->cupti_dropped) fprintf(f, "# CUPTI dropped %lld records (buffers full): the aggregates undercount\n", (long long)r->cupti_dropped);
}

void cli_gpu_print_overheads(FILE *f, const CliGpu *g, const ClusterSpec *cl, int nranks)
{
    const ProfOverhead *o = &g->ov;
    char a[32], b[32];
    fprintf(f, "# fixed GPU overheads, rank 0 (device memory no tracker counts; prof_overhead: %s) vs the planner's "
               "figures (--gpu %s; memory in MiB = 2^20 bytes)\n",
            o->context_from_nvml ? "NVML before/after the context, cudaMemGetInfo deltas after"
                                 : "cudaMemGetInfo deltas; the context as used after cudaFree(0), other processes included",
            cl->gpu.name);
    fprintf(f, "%-14s %12s %12s  %s\n", "overhead", "measured", "planner", "what");
    fprintf(f, "%-14s %12s %12s  %s\n", "-", "MiB", "MiB", "-");
    fprintf(f, "%-14s %12s %12s  %s\n", "cuda_context", mib(g->ov_context ? o->cuda_context : -1, a, sizeof a),
            mib(cl->cuda_context, b, sizeof b), "primary context (CUDA_MODULE_LOADING as set)");
    fprintf(f, "%-14s %12s %12s  %s\n", "cublas", mib(g->ov_context ? o->cublas : -1, a, sizeof a),
            mib(cl->gpu.cublas_ws_bytes, b, sizeof b), "cublasCreate + first SGEMM 1024^3 (workspace, kernels)");
    fprintf(f, "%-14s %12s %12s  %s\n", "nccl", mib(g->ov_nccl ? o->nccl : -1, a, sizeof a),
            mib(nranks > 1 ? cl->nccl_per_comm : 0, b, sizeof b), "init + first all-reduces of 4 KiB and 64 MiB, per rank");
    if (g->ov_note[0]) fprintf(f, "# %s\n", g->ov_note);
    if (o->nccl_note[0]) fprintf(f, "# nccl: %s\n", o->nccl_note);
    if (g->ov_nccl && o->nccl_sharing > 1)
        fprintf(f, "# %d ranks share this GPU: the NCCL delta was divided by %d (over sockets between fake hosts, not "
                   "NVLink: not the figure of one rank per GPU)\n", o->nccl_sharing, o->nccl_sharing);
}

cJSON *cli_gpu_cupti_json(const ExecRunResult *r)
{
    cJSON *j = r->cupti && r->cupti_json ? cJSON_Parse(r->cupti_json) : NULL;
    if (j) return j;
    j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "note", r->cupti_note[0] ? r->cupti_note : "no CUPTI session");
    return j;
}

cJSON *cli_gpu_overheads_json(const CliGpu *g, const ClusterSpec *cl, int nranks)
{
    cJSON *j = cJSON_CreateObject();
    if (g->ov_context || g->ov_nccl) cJSON_AddItemToObject(j, "measured", prof_overhead_json(&g->ov));
    else cJSON_AddNullToObject(j, "measured");
    cJSON *p = cJSON_AddObjectToObject(j, "planner");
    cJSON_AddStringToObject(p, "gpu", cl->gpu.name);
    cJSON_AddNumberToObject(p, "cuda_context_bytes", cl->cuda_context);
    cJSON_AddNumberToObject(p, "cublas_workspace_bytes", cl->gpu.cublas_ws_bytes);
    cJSON_AddNumberToObject(p, "nccl_bytes", nranks > 1 ? cl->nccl_per_comm : 0);
    if (g->ov_note[0]) cJSON_AddStringToObject(j, "note", g->ov_note);
    return j;
}
