/* exec_describe.c — measuring the CPU device description (exec_describe.h). */
#include "exec_describe.h"

#include <cblas.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kern_blas.h"

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* the largest value over ranks (times: the slowest rank sets the pace) */
static int max_over(Comm *c, double *v)
{
    int n = comm_size(c);
    double *all = calloc((size_t)n, sizeof *all);
    if (!all) return -1;
    int rc = comm_all_gather(c, v, all, 1, DT_F64, NULL);
    for (int r = 0; rc == 0 && r < n; r++) *v = all[r] > *v ? all[r] : *v;
    free(all);
    return rc;
}

#define REPS 5
#define WINDOW_S 0.25   /* compute figures are averages over this long: sustained, not bursts */

/* mean seconds per call over a WINDOW_S window (after one warm-up call) */
static double time_gemm(int M, int N, int K, float *a, float *b, float *o)
{
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1.0f, a, K, b, K, 0.0f, o, N);   /* warm */
    int calls = 0;
    double t0 = now_s(), t;
    do {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1.0f, a, K, b, K, 0.0f, o, N);
        calls++;
    } while ((t = now_s() - t0) < WINDOW_S);
    return t / calls;
}

static double time_triad(float *a, const float *b, const float *c, size_t n)
{
    for (size_t i = 0; i < n; i++) a[i] = b[i] + 1.5f * c[i];   /* warm: pages touched */
    int calls = 0;
    double t0 = now_s(), t;
    do {
        for (size_t i = 0; i < n; i++) a[i] = b[i] + 1.5f * c[i];
        calls++;
    } while ((t = now_s() - t0) < WINDOW_S);
    return t / calls;
}

/* one collective of k over count floats per rank block (all-reduce: the whole buffer), median */
static double time_coll(Comm *c, int k, float *buf, float *out, size_t count, int reps)
{
    double t[REPS];
    for (int r = -1; r < reps; r++) {
        comm_barrier(c);
        double t0 = now_s();
        int rc = k == DESC_AR ? comm_all_reduce(c, buf, buf, count, DT_F32, NULL)
               : k == DESC_RS ? comm_reduce_scatter(c, buf, out, count, DT_F32, NULL)
                              : comm_all_gather(c, buf, out, count, DT_F32, NULL);
        if (rc) return -1;
        if (r >= 0) t[r] = now_s() - t0;
    }
    double sum = 0;   /* the mean: descheduled calls on a shared machine count, as in a run */
    for (int r = 0; r < reps; r++) sum += t[r];
    return sum / reps;
}

int exec_describe_cpu(Comm *c, int tokens, int d_model, DeviceDesc *d, char *err, size_t len)
{
    memset(d, 0, sizeof *d);
    snprintf(d->kind, sizeof d->kind, "cpu");
    int n = comm_size(c);
    d->ranks = n;
    kern_blas_set_threads(comm_local_size(c));   /* as exec_run will run */
    int M = tokens > 0 ? tokens : 512, K = d_model > 0 ? d_model : 768, N = 4 * K;
    size_t tri = (size_t)4 << 20;                      /* 16 MiB per triad array */
    size_t large = (size_t)1 << 20, small = 16384;     /* floats: 4 MiB and 64 KiB */
    size_t need = (size_t)M * K + (size_t)N * K + (size_t)M * N;
    if (need < 3 * tri) need = 3 * tri;
    if (need < 2 * large * (size_t)n) need = 2 * large * (size_t)n;
    float *mem = calloc(need, sizeof *mem);
    int bad = !mem;
    double g = 0, m = 0;
    if (!bad) {
        for (size_t i = 0; i < need; i++) mem[i] = (float)(i % 13) * 0.01f;
        comm_barrier(c);
        g = time_gemm(M, N, K, mem, mem + (size_t)M * K, mem + (size_t)M * K + (size_t)N * K);
        comm_barrier(c);
        m = time_triad(mem, mem + tri, mem + 2 * tri, tri);
        bad = max_over(c, &g) || max_over(c, &m);
    }
    if (!bad) {
        d->gemm_flops = 2.0 * M * N * K / g;
        d->mem_bw = 12.0 * (double)tri / m;
    }
    /* collectives: bus factor per collective, ring steps */
    double sum_a = 0, sum_b = 0;
    for (int k = 0; k < DESC_NCOLL && !bad; k++) {
        double fac = k == DESC_AR ? 2.0 * (n - 1) / n : (double)(n - 1) / n;
        double steps = k == DESC_AR ? 2.0 * (n - 1) : (double)(n - 1);
        size_t cl = k == DESC_AR ? large : large / (size_t)n, cs = k == DESC_AR ? small : small / (size_t)n;
        double bytes_l = 4.0 * (double)(k == DESC_AR ? cl : cl * (size_t)n);
        double bytes_s = 4.0 * (double)(k == DESC_AR ? cs : cs * (size_t)n);
        float *in = mem, *out = mem + large * (size_t)n;
        double tl = time_coll(c, k, in, out, cl, 3), ts = time_coll(c, k, in, out, cs, REPS);
        if (tl < 0 || ts < 0 || max_over(c, &tl) || max_over(c, &ts)) {
            bad = 1;
            break;
        }
        d->coll_bw[k] = bytes_l * fac / tl;
        double rest = ts - bytes_s * fac / d->coll_bw[k];
        d->coll_alpha_s[k] = rest > 0 ? rest / steps : 0;
        sum_a += d->coll_alpha_s[k];
        sum_b += d->coll_bw[k];
    }
    free(mem);
    if (bad) {
        snprintf(err, len, "measuring the device description failed (out of memory or a collective failed)");
        return -1;
    }
    d->alpha_s = sum_a / DESC_NCOLL;
    d->bw = sum_b / DESC_NCOLL;
    return 0;
}
