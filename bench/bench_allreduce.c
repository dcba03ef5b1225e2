/* bench_allreduce.c — the executor's all-reduce (exec_comm.h over MPI) against the machine's
 * memory bandwidth, measured in the same run, nccl-tests style:
 *   algbw = S / t, busbw = algbw · 2(n-1)/n   (decimal GB/s; S = the buffer, t = one call)
 * for fp32 buffers of 4 KiB .. 64 MiB (every rank contributes r+1, so the sum is checked
 * exactly), then single-process memcpy bandwidth (bytes copied / time, best of 5) while the
 * other ranks wait. On one host MPI moves data through shared memory, so memcpy is the ceiling
 * that the bus bandwidth is to be read against.
 * Usage: mpirun -np N build/bench/bench_allreduce [--max-mib M] [--json FILE]
 * Prints a table (lines not data start with '#') and, with --json, the same records. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "exec_comm.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

typedef struct {
    size_t bytes;
    int iters;
    double us, algbw, busbw;
    int exact;
} Row;

int main(int argc, char **argv)
{
    const char *json = NULL;
    double max_mib = 64;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0 && i + 1 < argc) json = argv[++i];
        else if (strcmp(argv[i], "--max-mib") == 0 && i + 1 < argc) max_mib = atof(argv[++i]);
        else {
            fprintf(stderr, "usage: mpirun -np N bench_allreduce [--max-mib M] [--json FILE]\n");
            return 2;
        }
    }
    char err[256];
    int under_mpirun = getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMIX_RANK");
    Comm *c = comm_create(under_mpirun ? COMM_MPI : COMM_SELF, &argc, &argv, 120, err, sizeof err);
    if (!c) {
        fprintf(stderr, "bench_allreduce: %s\n", err);
        return 1;
    }
    int rank = comm_rank(c), n = comm_size(c);
    size_t max_bytes = (size_t)(max_mib * 1024 * 1024);
    float *buf = malloc(max_bytes);
    double *times = calloc((size_t)n, sizeof *times);
    Row rows[32];
    int nrows = 0, bad = !buf || !times;
    for (size_t bytes = 4096; bytes <= max_bytes && !bad && nrows < 32; bytes *= 4) {
        size_t count = bytes / sizeof(float);
        /* iterations: about 0.2 s of traffic at 1 GB/s, at least 5 */
        int iters = (int)(2e8 / (double)bytes);
        if (iters < 5) iters = 5;
        if (iters > 2000) iters = 2000;
        for (size_t i = 0; i < count; i++) buf[i] = (float)(rank + 1);
        comm_all_reduce(c, buf, buf, count, DT_F32, NULL);   /* warm-up */
        comm_barrier(c);
        double t0 = now();
        for (int it = 0; it < iters; it++) bad |= comm_all_reduce(c, buf, buf, count, DT_F32, NULL) != 0;
        double t = (now() - t0) / iters;
        /* after 1 + iters sums of r+1 over ranks the value is (n(n+1)/2)·n^iters: check the first
           call alone, on a fresh buffer */
        for (size_t i = 0; i < count; i++) buf[i] = (float)(rank + 1);
        comm_all_reduce(c, buf, buf, count, DT_F32, NULL);
        int exact = 1;
        for (size_t i = 0; i < count; i++)
            if (buf[i] != (float)(n * (n + 1) / 2)) { exact = 0; break; }
        comm_all_gather(c, &t, times, 1, DT_F64, NULL);
        double worst = 0;
        for (int r = 0; r < n; r++) if (times[r] > worst) worst = times[r];
        Row *w = &rows[nrows++];
        w->bytes = bytes;
        w->iters = iters;
        w->us = worst * 1e6;
        w->algbw = (double)bytes / worst / 1e9;
        w->busbw = n > 1 ? w->algbw * 2.0 * (n - 1) / n : 0;
        w->exact = exact;
        bad |= !exact;
    }
    comm_barrier(c);
    double memcpy_gbps = 0;
    if (rank == 0 && !bad) {
        size_t bytes = max_bytes;
        char *a = malloc(bytes), *b = malloc(bytes);
        if (a && b) {
            memset(a, 1, bytes);
            memset(b, 2, bytes);
            double best = 1e9;
            for (int r = 0; r < 5; r++) {
                double t0 = now();
                memcpy(b, a, bytes);
                double t = now() - t0;
                if (t < best) best = t;
                a[r] ^= b[bytes - 1 - r];   /* keep the copies observable */
            }
            memcpy_gbps = (double)bytes / best / 1e9;
        }
        free(a);
        free(b);
    }
    comm_barrier(c);
    if (rank == 0) {
        printf("# all-reduce of fp32 over %d rank%s (%s), time of the slowest rank per call; busbw = algbw x 2(n-1)/n\n",
               n, n == 1 ? "" : "s", comm_kind(c) == COMM_MPI ? "MPI" : "one process");
        printf("%12s %8s %12s %10s %10s %6s\n", "size", "iters", "time", "algbw", "busbw", "exact");
        printf("%12s %8s %12s %10s %10s %6s\n", "bytes", "-", "us", "GB/s", "GB/s", "-");
        for (int i = 0; i < nrows; i++)
            printf("%12zu %8d %12.1f %10.3f %10.3f %6s\n", rows[i].bytes, rows[i].iters, rows[i].us, rows[i].algbw,
                   rows[i].busbw, rows[i].exact ? "yes" : "NO");
        printf("# memcpy bandwidth (one core, %zu MiB, best of 5): %.3f GB/s; largest all-reduce busbw is %.1f%% of it\n",
               max_bytes >> 20, memcpy_gbps, nrows && memcpy_gbps > 0 ? 100 * rows[nrows - 1].busbw / memcpy_gbps : 0);
        if (json) {
            FILE *f = fopen(json, "w");
            if (f) {
                fprintf(f, "{\"ranks\": %d, \"memcpy_gbps\": %.6g, \"rows\": [", n, memcpy_gbps);
                for (int i = 0; i < nrows; i++)
                    fprintf(f, "%s{\"bytes\": %zu, \"iters\": %d, \"time_us\": %.6g, \"algbw_gbps\": %.6g, \"busbw_gbps\": %.6g, \"exact\": %s}",
                            i ? ", " : "", rows[i].bytes, rows[i].iters, rows[i].us, rows[i].algbw, rows[i].busbw,
                            rows[i].exact ? "true" : "false");
                fprintf(f, "]}\n");
                fclose(f);
            } else {
                fprintf(stderr, "bench_allreduce: cannot write %s\n", json);
                bad = 1;
            }
        }
    }
    free(buf);
    free(times);
    comm_destroy(c);
    return bad ? 1 : 0;
}
