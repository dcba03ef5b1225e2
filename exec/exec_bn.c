/* exec_bn.c — BatchNorm2d and SyncBatchNorm of one layer (see exec_bn.h). */
#include "exec_bn.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "exec_device.h"
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

static const ExecKernels *kern(const ExecBnLayer *l) { return l->k ? l->k : exec_kernels(DEVICE_HOST); }
static int on_gpu(const ExecBnLayer *l) { return l->dev && exec_device_kind(l->dev) == DEVICE_CUDA; }

static int kernel_failed(const ExecBnLayer *l, const char *what, char *err, size_t errlen)
{
    return bn_fail(err, errlen, "a %s BatchNorm kernel failed in %s (see the message above)", kern(l)->name, what);
}

/* num_batches_tracked += 1 (a float in the layer's buffers; device memory on a GPU). */
static void count_batch(const ExecBnLayer *l)
{
    if (!l->num_batches) return;
    if (!on_gpu(l)) {
        *l->num_batches += 1.0f;
        return;
    }
    float v = 0;
    exec_device_copy(l->dev, &v, l->num_batches, sizeof v);
    v += 1.0f;
    exec_device_copy(l->dev, l->num_batches, &v, sizeof v);
}

static void zero_floats(const ExecBnLayer *l, float *p, size_t n)
{
    if (on_gpu(l)) exec_device_memset(l->dev, p, 0, n * sizeof(float));
    else memset(p, 0, n * sizeof(float));
}

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
    const ExecKernels *k = kern(l);
    if (!training) {
        if (N > 0 && k->bn_forward_eval(out, inp, l->running_mean, l->running_var, l->weight, l->bias, N, C, H, W,
                                        l->stream))
            return kernel_failed(l, "the evaluation forward", err, errlen);
        return 0;
    }
    if (!exec_bn_is_synced(l)) {
        double count = (double)N * H * W;
        if (count < 2) return too_few(count, err, errlen);
        if (k->batchnorm_forward(out, sv->mean, sv->invstd, l->running_mean, l->running_var, inp, l->weight,
                                 l->bias, N, C, H, W, KERN_BN_MOMENTUM, l->stream))
            return kernel_failed(l, "the forward", err, errlen);
        count_batch(l);
        sv->count = count;
        return 0;
    }
    /* SyncBN: one row [mean | invstd | count] per rank, gathered in place, then combined */
    int R = comm_size(l->sync), r = comm_rank(l->sync);
    size_t len = kern_bn_stats_len(C);
    float *all = comm_buf(l, (size_t)R * len + (size_t)C, "syncbn statistics", err, errlen);
    if (!all) return -1;
    float *mine = all + (size_t)r * len, *var_unbiased = all + (size_t)R * len;
    if (N > 0 && k->bn_stats(mine, inp, N, C, H, W, l->stream)) {
        prof_mem_free(l->mt, all);
        return kernel_failed(l, "the statistics", err, errlen);
    }
    if (N <= 0) zero_floats(l, mine, len);   /* an empty batch: count 0, left out */
    double t0 = prof_clock_us();
    int rc = comm_all_gather(l->sync, mine, all, len, DT_F32, NULL);
    if (l->coll_s) l->coll_s[0] += (prof_clock_us() - t0) * 1e-6;
    if (rc) {
        prof_mem_free(l->mt, all);
        return bn_fail(err, errlen, "the SyncBatchNorm statistics all-gather failed on rank %d", comm_rank(l->sync));
    }
    double count = 0;
    for (int q = 0; q < R; q++) {   /* each rank's count: on a GPU one float read back per rank */
        const float *cq = all + (size_t)q * len + 2 * (size_t)C;
        float v = 0;
        if (on_gpu(l)) exec_device_copy(l->dev, &v, cq, sizeof v);
        else v = *cq;
        count += v;
    }
    if (count < 2) {
        prof_mem_free(l->mt, all);
        return too_few(count, err, errlen);
    }
    int bad = k->bn_combine_stats(sv->mean, sv->invstd, var_unbiased, all, R, C, l->stream) ||
              k->bn_update_running(l->running_mean, l->running_var, sv->mean, var_unbiased, C, KERN_BN_MOMENTUM,
                                   l->stream);
    count_batch(l);
    prof_mem_free(l->mt, all);
    if (!bad && N > 0)
        bad = k->bn_forward_apply(out, inp, sv->mean, sv->invstd, l->weight, l->bias, N, C, H, W, l->stream);
    if (bad) return kernel_failed(l, "the synchronized forward", err, errlen);
    sv->count = count;
    return 0;
}

int exec_bn_backward(const ExecBnLayer *l, float *dinp, float *dweight, float *dbias,
                     const float *dout, const float *inp, const ExecBnSaved *sv, int N, int H,
                     int W, char *err, size_t errlen)
{
    int C = l->C;
    const ExecKernels *k = kern(l);
    if (!exec_bn_is_synced(l)) {
        if (k->batchnorm_backward(dinp, dweight, dbias, dout, inp, sv->mean, sv->invstd, l->weight, N, C, H, W,
                                  l->stream))
            return kernel_failed(l, "the backward", err, errlen);
        return 0;
    }
    float *sums = comm_buf(l, 2 * (size_t)C, "syncbn gradient sums", err, errlen);   /* [sum_dy | sum_dy_xmu] */
    if (!sums) return -1;
    if (N > 0 && k->bn_backward_reduce(sums, sums + C, dweight, dbias, dout, inp, sv->mean, sv->invstd, N, C, H,
                                       W, l->stream)) {
        prof_mem_free(l->mt, sums);
        return kernel_failed(l, "the backward reduction", err, errlen);
    }
    if (N <= 0) zero_floats(l, sums, 2 * (size_t)C);
    double t0 = prof_clock_us();
    int rc = comm_all_reduce(l->sync, sums, sums, 2 * (size_t)C, DT_F32, NULL);
    if (l->coll_s) l->coll_s[1] += (prof_clock_us() - t0) * 1e-6;
    if (rc) {
        prof_mem_free(l->mt, sums);
        return bn_fail(err, errlen, "the SyncBatchNorm gradient all-reduce failed on rank %d", comm_rank(l->sync));
    }
    int bad = N > 0 && dinp &&
              k->bn_backward_apply(dinp, dout, inp, sv->mean, sv->invstd, l->weight, sums, sums + C,
                                   (long long)sv->count, N, C, H, W, l->stream);
    prof_mem_free(l->mt, sums);
    return bad ? kernel_failed(l, "the synchronized backward", err, errlen) : 0;
}
