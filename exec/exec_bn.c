/* exec_bn.c — BatchNorm2d and SyncBatchNorm of one layer (see exec_bn.h). */
#include "exec_bn.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "kern_cnn.h"
#include "prof_phase.h"

static int bn_fail(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int bn_fail(char *err, size_t errlen, const char *fmt, ...)
{
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return -1;
}

int exec_bn_is_synced(const ExecBnLayer *l) { return l->sync && comm_size(l->sync) > 1; }

static float *comm_buf(const ExecBnLayer *l, size_t n, const char *what, char *err, size_t errlen)
{
    float *p = prof_mem_alloc(l->mt, MEM_COMM, n * sizeof(float), what);
    if (!p) bn_fail(err, errlen, "out of memory: %s, %zu bytes of comm", what, n * sizeof(float));
    return p;
}

static int too_few(double count, char *err, size_t errlen)
{
    return bn_fail(err, errlen, "BatchNorm in training needs more than 1 value per channel (the batch holds "
                   "%.0f per channel%s)", count, "; use a larger batch or SyncBatchNorm");
}

int exec_bn_forward(const ExecBnLayer *l, int training, float *out, ExecBnSaved *sv,
                    const float *inp, int N, int H, int W, char *err, size_t errlen)
{
    int C = l->C;
    if (!training) {
        if (N > 0) kern_bn_forward_eval(out, inp, l->running_mean, l->running_var, l->weight, l->bias, N, C, H, W);
        return 0;
    }
    if (!exec_bn_is_synced(l)) {
        double count = (double)N * H * W;
        if (count < 2) return too_few(count, err, errlen);
        kern_batchnorm_forward(out, sv->mean, sv->invstd, l->running_mean, l->running_var, inp, l->weight,
                               l->bias, N, C, H, W, KERN_BN_MOMENTUM);
        if (l->num_batches) *l->num_batches += 1.0f;
        sv->count = count;
        return 0;
    }
    /* SyncBN: one row [mean | invstd | count] per rank, gathered in place, then combined */
    int R = comm_size(l->sync), r = comm_rank(l->sync);
    size_t len = kern_bn_stats_len(C);
    float *all = comm_buf(l, (size_t)R * len + (size_t)C, "syncbn statistics", err, errlen);
    if (!all) return -1;
    float *mine = all + (size_t)r * len, *var_unbiased = all + (size_t)R * len;
    if (N > 0) kern_bn_stats(mine, inp, N, C, H, W);
    else memset(mine, 0, len * sizeof(float));   /* an empty batch: count 0, left out */
    double t0 = prof_clock_us();
    int rc = comm_all_gather(l->sync, mine, all, len, DT_F32, NULL);
    if (l->coll_s) l->coll_s[0] += (prof_clock_us() - t0) * 1e-6;
    if (rc) {
        prof_mem_free(l->mt, all);
        return bn_fail(err, errlen, "the SyncBatchNorm statistics all-gather failed on rank %d", comm_rank(l->sync));
    }
    double count = 0;
    for (int q = 0; q < R; q++) count += all[(size_t)q * len + 2 * (size_t)C];
    if (count < 2) {
        prof_mem_free(l->mt, all);
        return too_few(count, err, errlen);
    }
    kern_bn_combine_stats(sv->mean, sv->invstd, var_unbiased, all, R, C);
    kern_bn_update_running(l->running_mean, l->running_var, sv->mean, var_unbiased, C, KERN_BN_MOMENTUM);
    if (l->num_batches) *l->num_batches += 1.0f;
    prof_mem_free(l->mt, all);
    if (N > 0) kern_bn_forward_apply(out, inp, sv->mean, sv->invstd, l->weight, l->bias, N, C, H, W);
    sv->count = count;
    return 0;
}

int exec_bn_backward(const ExecBnLayer *l, float *dinp, float *dweight, float *dbias,
                     const float *dout, const float *inp, const ExecBnSaved *sv, int N, int H,
                     int W, char *err, size_t errlen)
{
    int C = l->C;
    if (!exec_bn_is_synced(l)) {
        kern_batchnorm_backward(dinp, dweight, dbias, dout, inp, sv->mean, sv->invstd, l->weight, N, C, H, W);
        return 0;
    }
    float *sums = comm_buf(l, 2 * (size_t)C, "syncbn gradient sums", err, errlen);   /* [sum_dy | sum_dy_xmu] */
    if (!sums) return -1;
    if (N > 0)
        kern_bn_backward_reduce(sums, sums + C, dweight, dbias, dout, inp, sv->mean, sv->invstd, N, C, H, W);
    else
        memset(sums, 0, 2 * (size_t)C * sizeof(float));
    double t0 = prof_clock_us();
    int rc = comm_all_reduce(l->sync, sums, sums, 2 * (size_t)C, DT_F32, NULL);
    if (l->coll_s) l->coll_s[1] += (prof_clock_us() - t0) * 1e-6;
    if (rc) {
        prof_mem_free(l->mt, sums);
        return bn_fail(err, errlen, "the SyncBatchNorm gradient all-reduce failed on rank %d", comm_rank(l->sync));
    }
    if (N > 0 && dinp)
        kern_bn_backward_apply(dinp, dout, inp, sv->mean, sv->invstd, l->weight, sums, sums + C,
                               (long long)sv->count, N, C, H, W);
    prof_mem_free(l->mt, sums);
    return 0;
}
