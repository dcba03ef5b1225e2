/* test_kern_cnn_cuda.c — specifications of the CNN CUDA kernels (kernels/kern_cnn_cuda.h) against
 * their CPU twins (kernels/kern_cnn.h), which are the reference.
 *
 * Each test builds fresh random inputs, runs the CPU kernel and the CUDA launcher on copies of the
 * same data, and compares every element: |gpu - cpu| <= ATOL + RTOL·|cpu|. Forward outputs and
 * BatchNorm statistics on the GPU start as NaN (bytes 0xFF), so an element a kernel forgets to
 * write fails; gradients start as the same random values on both sides, so a kernel that
 * overwrites instead of accumulating fails. Each comparison logs its largest difference ([----]
 * lines with --verbose), to be recorded in docs/gpu-cnn-kernels.md when run on a GPU.
 *
 * Tolerances (inputs of order 1; reasons in docs/gpu-cnn-kernels.md):
 *   EXACT      0, 0          the CPU's operations in the CPU's order: ReLU, add, maxpool (values,
 *                            argmax, the backward's gather), global average pooling.
 *   ELEMWISE   1e-6, 1e-5    BatchNorm's elementwise parts given the same per-channel inputs: written
 *                            with explicitly rounded intrinsics to be the CPU's bits, held to a
 *                            few ulps until a GPU run confirms it.
 *   REDUCE     1e-6, 1e-6    per-channel sums in double in a tree order instead of serially: equal
 *                            to ~1e-16 before the final rounding to float, so <= 1 ulp after it;
 *                            and what is computed from them (plain BatchNorm out and dinp).
 *   MATMUL     1e-4, 1e-4    convolution through cuBLAS vs OpenBLAS sgemm, K·K·C up to 147. TF32
 *                            (10-bit mantissa) would be off by ~1e-3 and fail: the check that
 *                            kern_cuda_init keeps cuBLAS in full fp32.
 *
 * With no usable device every test skips ("skipped: no CUDA device"); built without CUDA
 * (NO_CUDA=1) the same tests exist and skip, so the count never silently drops. */
#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kern_cnn.h"
#include "kern_cnn_cuda.h"
#include "kern_cuda.h"   /* kern_cuda_device_count */

#ifndef MEMPLAN_CUDA
#define MEMPLAN_CUDA 0
#endif

/* Every GPU test, by name; each has a body NAME_body below (CUDA builds only). */
#define KERN_CNN_CUDA_TESTS(X)                                                      \
    X(conv2d_forward_should_match_cpu_sgemm_for_every_shape_in_the_table)           \
    X(conv2d_backward_should_accumulate_like_the_cpu_kernel)                        \
    X(conv2d_backward_should_skip_gradients_passed_as_null)                         \
    X(bn_stats_should_match_the_cpu_mean_invstd_and_count)                          \
    X(bn_combine_stats_should_match_the_cpu_with_unequal_and_empty_ranks)           \
    X(bn_update_running_should_match_the_cpu_kernel)                                \
    X(bn_forward_apply_and_eval_should_match_the_cpu_with_and_without_affine)       \
    X(bn_backward_reduce_should_write_sums_and_accumulate_parameter_gradients)      \
    X(bn_backward_apply_should_accumulate_with_a_global_count)                      \
    X(batchnorm_forward_should_match_the_cpu_in_place_and_out_of_place)             \
    X(batchnorm_backward_should_accumulate_like_the_cpu_kernel)                     \
    X(relu_and_add_should_equal_the_cpu_kernels_bit_for_bit)                        \
    X(maxpool2d_forward_should_equal_the_cpu_with_ties_and_nans)                    \
    X(maxpool2d_backward_should_route_overlapping_windows_like_the_cpu)             \
    X(avgpool_global_should_equal_the_cpu_kernels_bit_for_bit)                      \
    X(backward_kernels_should_give_identical_bits_when_run_twice)

#if MEMPLAN_CUDA
#include <cuda_runtime.h>

#define EXACT_ATOL 0.0
#define EXACT_RTOL 0.0
#define ELEMWISE_ATOL 1e-6
#define ELEMWISE_RTOL 1e-5
#define REDUCE_ATOL 1e-6
#define REDUCE_RTOL 1e-6
#define MATMUL_ATOL 1e-4
#define MATMUL_RTOL 1e-4

/* ---- helpers: random data, device copies, comparison ---- */

#define TEST_CUDA_SEED 0x9E3779B97F4A7C15ull
#include "test_cuda.h"

/* ---- convolution: shapes as data ---- */

typedef struct {
    const char *name;
    int N, C, H, W, OC, K, stride, pad;
} ConvShape;

static const ConvShape conv_shapes[] = {
    {"7x7 stride 2 pad 3 (stem)", 2, 3, 17, 15, 8, 7, 2, 3},
    {"3x3 stride 1 pad 1", 2, 8, 9, 11, 12, 3, 1, 1},
    {"3x3 stride 2 pad 1", 3, 5, 10, 9, 7, 3, 2, 1},
    {"1x1 stride 1 (pointwise, no col)", 3, 8, 10, 10, 16, 1, 1, 0},
    {"1x1 stride 2 (downsample)", 2, 8, 9, 9, 6, 1, 2, 0},
};
#define N_CONV_SHAPES (sizeof conv_shapes / sizeof conv_shapes[0])

typedef struct {
    int OH, OW;
    size_t nin, nw, nout, ncol;
} ConvSizes;

static ConvSizes conv_sizes(const ConvShape *s)
{
    ConvSizes z;
    z.OH = kern_conv2d_out_size(s->H, s->K, s->stride, s->pad);
    z.OW = kern_conv2d_out_size(s->W, s->K, s->stride, s->pad);
    z.nin = (size_t)s->N * s->C * s->H * s->W;
    z.nw = (size_t)s->OC * s->C * s->K * s->K;
    z.nout = (size_t)s->N * s->OC * z.OH * z.OW;
    z.ncol = kern_conv2d_col_size(s->C, s->H, s->W, s->K, s->stride, s->pad);
    return z;
}

static void conv2d_forward_should_match_cpu_sgemm_for_every_shape_in_the_table_body(void)
{
    for (size_t k = 0; k < N_CONV_SHAPES; k++) {
        const ConvShape *s = &conv_shapes[k];
        ConvSizes z = conv_sizes(s);
        float *inp = frand(z.nin, 1, 0), *w = frand(z.nw, 1, 0), *out = fzeros(z.nout), *col = fzeros(z.ncol);
        kern_conv2d_forward(out, inp, w, col, s->N, s->C, s->H, s->W, s->OC, s->K, s->stride, s->pad);

        float *d_inp = dev_floats(inp, z.nin), *d_w = dev_floats(w, z.nw), *d_out = dev_nan(z.nout);
        float *d_col = z.ncol ? dev_nan(z.ncol) : NULL;   /* pointwise: no scratch at all */
        LAUNCH(kern_conv2d_forward_cuda(d_out, d_inp, d_w, d_col, s->N, s->C, s->H, s->W, s->OC, s->K, s->stride,
                                        s->pad, NULL));
        cr_log_info("conv %s:", s->name);
        expect_close("conv out", d_out, out, z.nout, MATMUL_ATOL, MATMUL_RTOL);
    }
}

static void conv2d_backward_should_accumulate_like_the_cpu_kernel_body(void)
{
    for (size_t k = 0; k < N_CONV_SHAPES; k++) {
        const ConvShape *s = &conv_shapes[k];
        ConvSizes z = conv_sizes(s);
        float *inp = frand(z.nin, 1, 0), *w = frand(z.nw, 1, 0), *dout = frand(z.nout, 1, 0), *col = fzeros(z.ncol);
        float *dinp = frand(z.nin, 1, 0), *dw = frand(z.nw, 1, 0);
        float *d_inp = dev_floats(inp, z.nin), *d_w = dev_floats(w, z.nw), *d_dout = dev_floats(dout, z.nout);
        float *d_dinp = dev_floats(dinp, z.nin), *d_dw = dev_floats(dw, z.nw);
        float *d_col = z.ncol ? dev_nan(z.ncol) : NULL;
        kern_conv2d_backward(dinp, dw, col, dout, inp, w, s->N, s->C, s->H, s->W, s->OC, s->K, s->stride, s->pad);
        LAUNCH(kern_conv2d_backward_cuda(d_dinp, d_dw, d_col, d_dout, d_inp, d_w, s->N, s->C, s->H, s->W, s->OC,
                                         s->K, s->stride, s->pad, NULL));
        cr_log_info("conv %s:", s->name);
        expect_close("conv dinp", d_dinp, dinp, z.nin, MATMUL_ATOL, MATMUL_RTOL);
        expect_close("conv dweight", d_dw, dw, z.nw, MATMUL_ATOL, MATMUL_RTOL);
    }
}

static void conv2d_backward_should_skip_gradients_passed_as_null_body(void)
{
    const ConvShape *s = &conv_shapes[2];   /* 3x3 stride 2: col2im and im2col both in play */
    ConvSizes z = conv_sizes(s);
    float *inp = frand(z.nin, 1, 0), *w = frand(z.nw, 1, 0), *dout = frand(z.nout, 1, 0), *col = fzeros(z.ncol);
    float *dinp = frand(z.nin, 1, 0), *dw = frand(z.nw, 1, 0);
    float *dinp0 = fcopy(dinp, z.nin), *dw0 = fcopy(dw, z.nw);
    float *d_inp = dev_floats(inp, z.nin), *d_w = dev_floats(w, z.nw), *d_dout = dev_floats(dout, z.nout);
    float *d_dinp = dev_floats(dinp, z.nin), *d_dw = dev_floats(dw, z.nw), *d_col = dev_nan(z.ncol);

    /* only dweight (the first convolution needs no dinp): dinp must not change */
    kern_conv2d_backward(NULL, dw, col, dout, inp, w, s->N, s->C, s->H, s->W, s->OC, s->K, s->stride, s->pad);
    LAUNCH(kern_conv2d_backward_cuda(NULL, d_dw, d_col, d_dout, d_inp, d_w, s->N, s->C, s->H, s->W, s->OC, s->K,
                                     s->stride, s->pad, NULL));
    expect_close("conv dweight alone", d_dw, dw, z.nw, MATMUL_ATOL, MATMUL_RTOL);
    expect_close("conv dinp untouched", d_dinp, dinp0, z.nin, EXACT_ATOL, EXACT_RTOL);

    /* only dinp: dweight keeps what it had (reset it to the start on both sides first) */
    CK(cudaMemcpy(d_dw, dw0, z.nw * sizeof(float), cudaMemcpyHostToDevice));
    kern_conv2d_backward(dinp, NULL, col, dout, inp, w, s->N, s->C, s->H, s->W, s->OC, s->K, s->stride, s->pad);
    LAUNCH(kern_conv2d_backward_cuda(d_dinp, NULL, d_col, d_dout, d_inp, d_w, s->N, s->C, s->H, s->W, s->OC, s->K,
                                     s->stride, s->pad, NULL));
    expect_close("conv dinp alone", d_dinp, dinp, z.nin, MATMUL_ATOL, MATMUL_RTOL);
    expect_close("conv dweight untouched", d_dw, dw0, z.nw, EXACT_ATOL, EXACT_RTOL);
}

/* ---- BatchNorm ---- */

/* A BatchNorm case: N = 3, C = 5, H·W = 7·9 = 63, so a channel's 189 values are fewer than a
 * block's 256 threads in one dimension yet span three runs; inputs off-center (mean ~3) so that a
 * one-pass variance would lose digits. */
typedef struct {
    int N, C, H, W;
    size_t n;
    float *inp, *w, *b, *mean, *invstd;
} BnCase;

static BnCase bn_case(int N, int C, int H, int W)
{
    BnCase c = {.N = N, .C = C, .H = H, .W = W};
    c.n = (size_t)N * C * H * W;
    c.inp = frand(c.n, 2, 3);
    c.w = frand(C, 0.5f, 1);
    c.b = frand(C, 1, 0);
    c.mean = fzeros(C);
    c.invstd = fzeros(C);
    float *stats = fzeros(kern_bn_stats_len(C));
    kern_bn_stats(stats, c.inp, N, C, H, W);   /* mean and invstd as the CPU forward saves them */
    memcpy(c.mean, stats, C * sizeof(float));
    memcpy(c.invstd, stats + C, C * sizeof(float));
    free(stats);
    return c;
}

static void bn_stats_should_match_the_cpu_mean_invstd_and_count_body(void)
{
    BnCase c = bn_case(3, 5, 7, 9);
    size_t len = kern_bn_stats_len(c.C);
    float *stats = fzeros(len);
    kern_bn_stats(stats, c.inp, c.N, c.C, c.H, c.W);
    float *d_inp = dev_floats(c.inp, c.n), *d_stats = dev_nan(len);
    LAUNCH(kern_bn_stats_cuda(d_stats, d_inp, c.N, c.C, c.H, c.W, NULL));
    expect_close("bn stats [mean | invstd]", d_stats, stats, 2 * (size_t)c.C, REDUCE_ATOL, REDUCE_RTOL);
    expect_bits("bn stats count", d_stats + 2 * c.C, stats + 2 * c.C, 1, sizeof(float));

    /* a channel larger than one block pass: 2·64·40 = 5120 values per channel */
    BnCase big = bn_case(2, 3, 64, 40);
    size_t lenb = kern_bn_stats_len(big.C);
    float *statsb = fzeros(lenb);
    kern_bn_stats(statsb, big.inp, big.N, big.C, big.H, big.W);
    float *d_big = dev_floats(big.inp, big.n), *d_statsb = dev_nan(lenb);
    LAUNCH(kern_bn_stats_cuda(d_statsb, d_big, big.N, big.C, big.H, big.W, NULL));
    expect_close("bn stats, large channels", d_statsb, statsb, lenb, REDUCE_ATOL, REDUCE_RTOL);
}

static void bn_combine_stats_should_match_the_cpu_with_unequal_and_empty_ranks_body(void)
{
    /* four ranks: batches of 2, 3, 0 (empty: skipped) and 1 image, different distributions */
    int C = 6, H = 5, W = 4, R = 4, Ns[4] = {2, 3, 0, 1};
    size_t len = kern_bn_stats_len(C);
    float *all = fzeros(R * len);
    for (int r = 0; r < R; r++) {
        size_t n = (size_t)Ns[r] * C * H * W;
        float *x = frand(n, 1.0f + r, (float)r - 1.0f);
        kern_bn_stats(all + r * len, x, Ns[r], C, H, W);
        free(x);
    }
    float *mean = fzeros(C), *invstd = fzeros(C), *varu = fzeros(C);
    kern_bn_combine_stats(mean, invstd, varu, all, R, C);

    float *d_all = dev_floats(all, R * len), *d_mean = dev_nan(C), *d_invstd = dev_nan(C), *d_varu = dev_nan(C);
    LAUNCH(kern_bn_combine_stats_cuda(d_mean, d_invstd, d_varu, d_all, R, C, NULL));
    expect_close("bn combined mean", d_mean, mean, C, REDUCE_ATOL, REDUCE_RTOL);
    expect_close("bn combined invstd", d_invstd, invstd, C, REDUCE_ATOL, REDUCE_RTOL);
    expect_close("bn combined unbiased var", d_varu, varu, C, REDUCE_ATOL, REDUCE_RTOL);

    /* var_unbiased NULL: mean and invstd still written */
    CK(cudaMemset(d_mean, 0xFF, C * sizeof(float)));
    CK(cudaMemset(d_invstd, 0xFF, C * sizeof(float)));
    LAUNCH(kern_bn_combine_stats_cuda(d_mean, d_invstd, NULL, d_all, R, C, NULL));
    expect_close("bn combined mean (no var)", d_mean, mean, C, REDUCE_ATOL, REDUCE_RTOL);
    expect_close("bn combined invstd (no var)", d_invstd, invstd, C, REDUCE_ATOL, REDUCE_RTOL);
}

static void bn_update_running_should_match_the_cpu_kernel_body(void)
{
    int C = 300;   /* more than one block */
    float *rm = frand(C, 1, 0), *rv = frand(C, 0.5f, 1), *mean = frand(C, 1, 0), *varu = frand(C, 0.5f, 1);
    float *d_rm = dev_floats(rm, C), *d_rv = dev_floats(rv, C), *d_mean = dev_floats(mean, C),
          *d_varu = dev_floats(varu, C);
    kern_bn_update_running(rm, rv, mean, varu, C, KERN_BN_MOMENTUM);
    LAUNCH(kern_bn_update_running_cuda(d_rm, d_rv, d_mean, d_varu, C, KERN_BN_MOMENTUM, NULL));
    expect_close("bn running_mean", d_rm, rm, C, ELEMWISE_ATOL, ELEMWISE_RTOL);
    expect_close("bn running_var", d_rv, rv, C, ELEMWISE_ATOL, ELEMWISE_RTOL);
}

static void bn_forward_apply_and_eval_should_match_the_cpu_with_and_without_affine_body(void)
{
    BnCase c = bn_case(3, 5, 7, 9);
    float *rm = frand(c.C, 1, 3), *rv = frand(c.C, 0.5f, 1.5f), *out = fzeros(c.n);
    float *d_inp = dev_floats(c.inp, c.n), *d_w = dev_floats(c.w, c.C), *d_b = dev_floats(c.b, c.C);
    float *d_mean = dev_floats(c.mean, c.C), *d_invstd = dev_floats(c.invstd, c.C);
    float *d_rm = dev_floats(rm, c.C), *d_rv = dev_floats(rv, c.C), *d_out = dev_nan(c.n);

    for (int affine = 1; affine >= 0; affine--) {
        const float *w = affine ? c.w : NULL, *b = affine ? c.b : NULL;
        const float *d_wa = affine ? d_w : NULL, *d_ba = affine ? d_b : NULL;
        kern_bn_forward_apply(out, c.inp, c.mean, c.invstd, w, b, c.N, c.C, c.H, c.W);
        CK(cudaMemset(d_out, 0xFF, c.n * sizeof(float)));
        LAUNCH(kern_bn_forward_apply_cuda(d_out, d_inp, d_mean, d_invstd, d_wa, d_ba, c.N, c.C, c.H, c.W, NULL));
        expect_close(affine ? "bn apply out" : "bn apply out (affine = False)", d_out, out, c.n, ELEMWISE_ATOL,
                     ELEMWISE_RTOL);

        kern_bn_forward_eval(out, c.inp, rm, rv, w, b, c.N, c.C, c.H, c.W);
        CK(cudaMemset(d_out, 0xFF, c.n * sizeof(float)));
        LAUNCH(kern_bn_forward_eval_cuda(d_out, d_inp, d_rm, d_rv, d_wa, d_ba, c.N, c.C, c.H, c.W, NULL));
        expect_close(affine ? "bn eval out" : "bn eval out (affine = False)", d_out, out, c.n, ELEMWISE_ATOL,
                     ELEMWISE_RTOL);
    }

    /* in place (out = inp), as the header allows */
    kern_bn_forward_apply(out, c.inp, c.mean, c.invstd, c.w, c.b, c.N, c.C, c.H, c.W);
    LAUNCH(kern_bn_forward_apply_cuda(d_inp, d_inp, d_mean, d_invstd, d_w, d_b, c.N, c.C, c.H, c.W, NULL));
    expect_close("bn apply in place", d_inp, out, c.n, ELEMWISE_ATOL, ELEMWISE_RTOL);
}

static void bn_backward_reduce_should_write_sums_and_accumulate_parameter_gradients_body(void)
{
    BnCase c = bn_case(3, 5, 7, 9);
    float *dout = frand(c.n, 1, 0), *sd = fzeros(c.C), *sdx = fzeros(c.C), *dw = frand(c.C, 1, 0),
          *db = frand(c.C, 1, 0);
    float *d_inp = dev_floats(c.inp, c.n), *d_dout = dev_floats(dout, c.n), *d_mean = dev_floats(c.mean, c.C),
          *d_invstd = dev_floats(c.invstd, c.C), *d_dw = dev_floats(dw, c.C), *d_db = dev_floats(db, c.C);
    float *d_sd = dev_nan(c.C), *d_sdx = dev_nan(c.C);
    kern_bn_backward_reduce(sd, sdx, dw, db, dout, c.inp, c.mean, c.invstd, c.N, c.C, c.H, c.W);
    LAUNCH(kern_bn_backward_reduce_cuda(d_sd, d_sdx, d_dw, d_db, d_dout, d_inp, d_mean, d_invstd, c.N, c.C, c.H, c.W,
                                        NULL));
    expect_close("bn sum_dy", d_sd, sd, c.C, REDUCE_ATOL, REDUCE_RTOL);
    expect_close("bn sum_dy_xmu", d_sdx, sdx, c.C, REDUCE_ATOL, REDUCE_RTOL);
    expect_close("bn dweight", d_dw, dw, c.C, REDUCE_ATOL, REDUCE_RTOL);
    expect_close("bn dbias", d_db, db, c.C, REDUCE_ATOL, REDUCE_RTOL);

    /* dweight and dbias NULL: the sums are still written */
    CK(cudaMemset(d_sd, 0xFF, c.C * sizeof(float)));
    CK(cudaMemset(d_sdx, 0xFF, c.C * sizeof(float)));
    LAUNCH(kern_bn_backward_reduce_cuda(d_sd, d_sdx, NULL, NULL, d_dout, d_inp, d_mean, d_invstd, c.N, c.C, c.H, c.W,
                                        NULL));
    expect_close("bn sum_dy (no parameter gradients)", d_sd, sd, c.C, REDUCE_ATOL, REDUCE_RTOL);
    expect_close("bn sum_dy_xmu (no parameter gradients)", d_sdx, sdx, c.C, REDUCE_ATOL, REDUCE_RTOL);
}

static void bn_backward_apply_should_accumulate_with_a_global_count_body(void)
{
    /* SyncBN-like: the sums and count stand for more ranks than this one (total 4·N·H·W) */
    BnCase c = bn_case(3, 5, 7, 9);
    long long total = 4LL * c.N * c.H * c.W;
    float *dout = frand(c.n, 1, 0), *dinp = frand(c.n, 1, 0), *sd = frand(c.C, 20, 0), *sdx = frand(c.C, 20, 0);
    float *d_inp = dev_floats(c.inp, c.n), *d_dout = dev_floats(dout, c.n), *d_dinp = dev_floats(dinp, c.n);
    float *d_mean = dev_floats(c.mean, c.C), *d_invstd = dev_floats(c.invstd, c.C), *d_w = dev_floats(c.w, c.C);
    float *d_sd = dev_floats(sd, c.C), *d_sdx = dev_floats(sdx, c.C);
    kern_bn_backward_apply(dinp, dout, c.inp, c.mean, c.invstd, c.w, sd, sdx, total, c.N, c.C, c.H, c.W);
    LAUNCH(kern_bn_backward_apply_cuda(d_dinp, d_dout, d_inp, d_mean, d_invstd, d_w, d_sd, d_sdx, total, c.N, c.C,
                                       c.H, c.W, NULL));
    expect_close("bn dinp", d_dinp, dinp, c.n, ELEMWISE_ATOL, ELEMWISE_RTOL);

    kern_bn_backward_apply(dinp, dout, c.inp, c.mean, c.invstd, NULL, sd, sdx, total, c.N, c.C, c.H, c.W);
    LAUNCH(kern_bn_backward_apply_cuda(d_dinp, d_dout, d_inp, d_mean, d_invstd, NULL, d_sd, d_sdx, total, c.N, c.C,
                                       c.H, c.W, NULL));
    expect_close("bn dinp (weight NULL), accumulated twice", d_dinp, dinp, c.n, ELEMWISE_ATOL, ELEMWISE_RTOL);
}

static void batchnorm_forward_should_match_the_cpu_in_place_and_out_of_place_body(void)
{
    BnCase c = bn_case(2, 6, 64, 40);   /* 5120 values per channel: many passes per thread */
    float *rm = frand(c.C, 1, 0), *rv = frand(c.C, 0.5f, 1), *out = fzeros(c.n), *mean = fzeros(c.C),
          *invstd = fzeros(c.C);
    float *d_inp = dev_floats(c.inp, c.n), *d_w = dev_floats(c.w, c.C), *d_b = dev_floats(c.b, c.C);
    float *d_rm = dev_floats(rm, c.C), *d_rv = dev_floats(rv, c.C);
    float *d_out = dev_nan(c.n), *d_mean = dev_nan(c.C), *d_invstd = dev_nan(c.C);
    kern_batchnorm_forward(out, mean, invstd, rm, rv, c.inp, c.w, c.b, c.N, c.C, c.H, c.W, KERN_BN_MOMENTUM);
    LAUNCH(kern_batchnorm_forward_cuda(d_out, d_mean, d_invstd, d_rm, d_rv, d_inp, d_w, d_b, c.N, c.C, c.H, c.W,
                                       KERN_BN_MOMENTUM, NULL));
    expect_close("batchnorm out", d_out, out, c.n, REDUCE_ATOL, ELEMWISE_RTOL);
    expect_close("batchnorm mean", d_mean, mean, c.C, REDUCE_ATOL, REDUCE_RTOL);
    expect_close("batchnorm invstd", d_invstd, invstd, c.C, REDUCE_ATOL, REDUCE_RTOL);
    expect_close("batchnorm running_mean", d_rm, rm, c.C, REDUCE_ATOL, REDUCE_RTOL);
    expect_close("batchnorm running_var", d_rv, rv, c.C, REDUCE_ATOL, REDUCE_RTOL);

    /* in place, no running statistics, affine = False */
    kern_batchnorm_forward(out, mean, invstd, NULL, NULL, c.inp, NULL, NULL, c.N, c.C, c.H, c.W, KERN_BN_MOMENTUM);
    CK(cudaMemset(d_mean, 0xFF, c.C * sizeof(float)));
    LAUNCH(kern_batchnorm_forward_cuda(d_inp, d_mean, d_invstd, NULL, NULL, d_inp, NULL, NULL, c.N, c.C, c.H, c.W,
                                       KERN_BN_MOMENTUM, NULL));
    expect_close("batchnorm out in place", d_inp, out, c.n, REDUCE_ATOL, ELEMWISE_RTOL);
    expect_close("batchnorm mean in place", d_mean, mean, c.C, REDUCE_ATOL, REDUCE_RTOL);
    expect_close("batchnorm running_mean untouched", d_rm, rm, c.C, REDUCE_ATOL, REDUCE_RTOL);
}

static void batchnorm_backward_should_accumulate_like_the_cpu_kernel_body(void)
{
    BnCase c = bn_case(2, 6, 64, 40);
    float *dout = frand(c.n, 1, 0), *dinp = frand(c.n, 1, 0), *dw = frand(c.C, 1, 0), *db = frand(c.C, 1, 0);
    float *d_inp = dev_floats(c.inp, c.n), *d_dout = dev_floats(dout, c.n), *d_dinp = dev_floats(dinp, c.n);
    float *d_mean = dev_floats(c.mean, c.C), *d_invstd = dev_floats(c.invstd, c.C), *d_w = dev_floats(c.w, c.C);
    float *d_dw = dev_floats(dw, c.C), *d_db = dev_floats(db, c.C);
    kern_batchnorm_backward(dinp, dw, db, dout, c.inp, c.mean, c.invstd, c.w, c.N, c.C, c.H, c.W);
    LAUNCH(kern_batchnorm_backward_cuda(d_dinp, d_dw, d_db, d_dout, d_inp, d_mean, d_invstd, d_w, c.N, c.C, c.H, c.W,
                                        NULL));
    expect_close("batchnorm dinp", d_dinp, dinp, c.n, REDUCE_ATOL, ELEMWISE_RTOL);
    expect_close("batchnorm dweight", d_dw, dw, c.C, REDUCE_ATOL, REDUCE_RTOL);
    expect_close("batchnorm dbias", d_db, db, c.C, REDUCE_ATOL, REDUCE_RTOL);

    /* only dinp (weight NULL): dweight and dbias keep their values */
    float *dw0 = fcopy(dw, c.C), *db0 = fcopy(db, c.C);
    kern_batchnorm_backward(dinp, NULL, NULL, dout, c.inp, c.mean, c.invstd, NULL, c.N, c.C, c.H, c.W);
    LAUNCH(kern_batchnorm_backward_cuda(d_dinp, NULL, NULL, d_dout, d_inp, d_mean, d_invstd, NULL, c.N, c.C, c.H,
                                        c.W, NULL));
    expect_close("batchnorm dinp alone", d_dinp, dinp, c.n, REDUCE_ATOL, ELEMWISE_RTOL);
    expect_bits("batchnorm dweight untouched", d_dw, dw0, c.C, sizeof(float));
    expect_bits("batchnorm dbias untouched", d_db, db0, c.C, sizeof(float));
}

/* ---- ReLU, add ---- */

static void relu_and_add_should_equal_the_cpu_kernels_bit_for_bit_body(void)
{
    size_t n = 100003;   /* not a multiple of a block */
    float *x = frand(n, 1, 0), *y = frand(n, 1, 0), *dout = frand(n, 1, 0);
    float *out = fzeros(n), *sum = fzeros(n), *dx = frand(n, 1, 0), *da = frand(n, 1, 0), *db = frand(n, 1, 0);
    for (size_t i = 0; i < n; i += 97) x[i] = 0.0f;   /* exact zeros: not > 0, no gradient */
    float *d_x = dev_floats(x, n), *d_y = dev_floats(y, n), *d_dout = dev_floats(dout, n);
    float *d_out = dev_nan(n), *d_sum = dev_nan(n), *d_dx = dev_floats(dx, n), *d_da = dev_floats(da, n),
          *d_db = dev_floats(db, n);

    kern_relu_forward(out, x, n);
    LAUNCH(kern_relu_forward_cuda(d_out, d_x, n, NULL));
    expect_bits("relu out", d_out, out, n, sizeof(float));
    kern_relu_backward(dx, out, dout, n);
    LAUNCH(kern_relu_backward_cuda(d_dx, d_out, d_dout, n, NULL));
    expect_bits("relu dinp", d_dx, dx, n, sizeof(float));
    LAUNCH(kern_relu_forward_cuda(d_x, d_x, n, NULL));   /* in place, as torchvision */
    expect_bits("relu out in place", d_x, out, n, sizeof(float));

    kern_add_forward(sum, y, dout, n);
    LAUNCH(kern_add_forward_cuda(d_sum, d_y, d_dout, n, NULL));
    expect_bits("add out", d_sum, sum, n, sizeof(float));
    kern_add_backward(da, db, dout, n);
    LAUNCH(kern_add_backward_cuda(d_da, d_db, d_dout, n, NULL));
    expect_bits("add da", d_da, da, n, sizeof(float));
    expect_bits("add db", d_db, db, n, sizeof(float));
}

/* ---- pooling ---- */

typedef struct {
    const char *name;
    int N, C, H, W, K, stride, pad;
} PoolShape;

static const PoolShape pool_shapes[] = {
    {"3x3 stride 2 pad 1 (stem)", 2, 3, 13, 14, 3, 2, 1},
    {"2x2 stride 2", 2, 3, 8, 9, 2, 2, 0},
    {"3x3 stride 1 pad 1 (overlap 9)", 1, 4, 7, 6, 3, 1, 1},
};
#define N_POOL_SHAPES (sizeof pool_shapes / sizeof pool_shapes[0])

/* Values in {-3, ..., 2} (ties in most windows) and a few NaNs. */
static float *pool_input(size_t n)
{
    float *x = frand(n, 3, 0);
    for (size_t i = 0; i < n; i++) x[i] = floorf(x[i]);
    for (size_t i = 5; i < n; i += 61) x[i] = NAN;
    return x;
}

static void maxpool2d_forward_should_equal_the_cpu_with_ties_and_nans_body(void)
{
    for (size_t k = 0; k < N_POOL_SHAPES; k++) {
        const PoolShape *s = &pool_shapes[k];
        int OH = kern_conv2d_out_size(s->H, s->K, s->stride, s->pad), OW = kern_conv2d_out_size(s->W, s->K, s->stride, s->pad);
        size_t nin = (size_t)s->N * s->C * s->H * s->W, nout = (size_t)s->N * s->C * OH * OW;
        float *x = pool_input(nin), *out = fzeros(nout);
        int *am = calloc(nout, sizeof(int));
        cr_assert_not_null(am);
        kern_maxpool2d_forward(out, am, x, s->N, s->C, s->H, s->W, s->K, s->stride, s->pad);
        float *d_x = dev_floats(x, nin), *d_out = dev_nan(nout);
        int *d_am = dev_nan_bytes(nout * sizeof(int));   /* every int -1 */
        LAUNCH(kern_maxpool2d_forward_cuda(d_out, d_am, d_x, s->N, s->C, s->H, s->W, s->K, s->stride, s->pad, NULL));
        cr_log_info("maxpool %s:", s->name);
        expect_bits("maxpool out", d_out, out, nout, sizeof(float));
        expect_bits("maxpool argmax", d_am, am, nout, sizeof(int));
    }
}

static void maxpool2d_backward_should_route_overlapping_windows_like_the_cpu_body(void)
{
    for (size_t k = 0; k < N_POOL_SHAPES; k++) {
        const PoolShape *s = &pool_shapes[k];
        int OH = kern_conv2d_out_size(s->H, s->K, s->stride, s->pad), OW = kern_conv2d_out_size(s->W, s->K, s->stride, s->pad);
        size_t nin = (size_t)s->N * s->C * s->H * s->W, nout = (size_t)s->N * s->C * OH * OW;
        float *x = pool_input(nin), *out = fzeros(nout), *dout = frand(nout, 1, 0), *dx = frand(nin, 1, 0);
        int *am = calloc(nout, sizeof(int));
        cr_assert_not_null(am);
        kern_maxpool2d_forward(out, am, x, s->N, s->C, s->H, s->W, s->K, s->stride, s->pad);   /* the CPU's argmax */
        int *d_am = dev_ints(am, nout);
        float *d_dout = dev_floats(dout, nout), *d_dx = dev_floats(dx, nin);
        kern_maxpool2d_backward(dx, dout, am, s->N, s->C, s->H, s->W, s->K, s->stride, s->pad);
        LAUNCH(kern_maxpool2d_backward_cuda(d_dx, d_dout, d_am, s->N, s->C, s->H, s->W, s->K, s->stride, s->pad, NULL));
        cr_log_info("maxpool %s:", s->name);
        expect_bits("maxpool dinp", d_dx, dx, nin, sizeof(float));
    }
}

static void avgpool_global_should_equal_the_cpu_kernels_bit_for_bit_body(void)
{
    int N = 3, C = 70, H = 7, W = 9;   /* N·C = 210 planes */
    size_t n = (size_t)N * C * H * W, planes = (size_t)N * C;
    float *x = frand(n, 2, 1), *out = fzeros(planes), *dout = frand(planes, 1, 0), *dx = frand(n, 1, 0);
    float *d_x = dev_floats(x, n), *d_out = dev_nan(planes), *d_dout = dev_floats(dout, planes), *d_dx = dev_floats(dx, n);
    kern_avgpool_global_forward(out, x, N, C, H, W);
    LAUNCH(kern_avgpool_global_forward_cuda(d_out, d_x, N, C, H, W, NULL));
    expect_bits("avgpool out", d_out, out, planes, sizeof(float));
    kern_avgpool_global_backward(dx, dout, N, C, H, W);
    LAUNCH(kern_avgpool_global_backward_cuda(d_dx, d_dout, N, C, H, W, NULL));
    expect_bits("avgpool dinp", d_dx, dx, n, sizeof(float));
}

/* ---- determinism: no float atomics, so the same launch gives the same bits ---- */

static void backward_kernels_should_give_identical_bits_when_run_twice_body(void)
{
    const ConvShape *s = &conv_shapes[0];
    ConvSizes z = conv_sizes(s);
    float *inp = frand(z.nin, 1, 0), *w = frand(z.nw, 1, 0), *dout = frand(z.nout, 1, 0);
    float *d_inp = dev_floats(inp, z.nin), *d_w = dev_floats(w, z.nw), *d_dout = dev_floats(dout, z.nout);
    float *d_col = dev_nan(z.ncol);
    BnCase c = bn_case(2, 6, 64, 40);
    float *bdout = frand(c.n, 1, 0);
    float *d_bin = dev_floats(c.inp, c.n), *d_bdout = dev_floats(bdout, c.n), *d_mean = dev_floats(c.mean, c.C),
          *d_invstd = dev_floats(c.invstd, c.C), *d_bw = dev_floats(c.w, c.C);

    enum { CONV_DINP, CONV_DW, BN_SD, BN_SDX, BN_DINP, BN_DW, BN_DB, NBUF };
    size_t sizes[NBUF] = {z.nin, z.nw, (size_t)c.C, (size_t)c.C, c.n, (size_t)c.C, (size_t)c.C};
    const char *names[NBUF] = {"conv dinp", "conv dweight", "bn sum_dy", "bn sum_dy_xmu",
                               "batchnorm dinp", "batchnorm dweight", "batchnorm dbias"};
    float *g[2][NBUF];
    for (int run = 0; run < 2; run++) {
        for (int k = 0; k < NBUF; k++) {   /* every gradient starts at zero */
            CK(cudaMalloc((void **)&g[run][k], sizes[k] * sizeof(float)));
            CK(cudaMemset(g[run][k], 0, sizes[k] * sizeof(float)));
        }
        LAUNCH(kern_conv2d_backward_cuda(g[run][CONV_DINP], g[run][CONV_DW], d_col, d_dout, d_inp, d_w, s->N, s->C,
                                         s->H, s->W, s->OC, s->K, s->stride, s->pad, NULL));
        LAUNCH(kern_bn_backward_reduce_cuda(g[run][BN_SD], g[run][BN_SDX], NULL, NULL, d_bdout, d_bin, d_mean,
                                            d_invstd, c.N, c.C, c.H, c.W, NULL));
        LAUNCH(kern_batchnorm_backward_cuda(g[run][BN_DINP], g[run][BN_DW], g[run][BN_DB], d_bdout, d_bin, d_mean,
                                            d_invstd, d_bw, c.N, c.C, c.H, c.W, NULL));
    }
    for (int k = 0; k < NBUF; k++) expect_same_bits(names[k], g[0][k], g[1][k], sizes[k]);
}

#define DEFINE_GPU_TEST(name)                                                                 \
    Test(kern_cnn_cuda, name)                                                                 \
    {                                                                                         \
        require_gpu();                                                                        \
        name##_body();                                                                        \
        kern_cuda_shutdown();                                                             \
    }
KERN_CNN_CUDA_TESTS(DEFINE_GPU_TEST)

/* ---- contract checks that need no device: errors are reported, not crashes ---- */

Test(kern_cnn_cuda, conv2d_should_fail_with_a_message_before_kern_cuda_init)
{
    cr_assert_eq(kern_conv2d_forward_cuda(NULL, NULL, NULL, NULL, 1, 1, 3, 3, 1, 3, 1, 1, NULL), -1);
    cr_assert_eq(kern_conv2d_backward_cuda(NULL, NULL, NULL, NULL, NULL, NULL, 1, 1, 3, 3, 1, 3, 1, 1, NULL), -1);
}

#else /* built without CUDA: the same tests, visibly skipped */

#define DEFINE_SKIPPED_TEST(name)                                                             \
    Test(kern_cnn_cuda, name) { cr_skip_test("skipped: no CUDA device (built with NO_CUDA=1)"); }
KERN_CNN_CUDA_TESTS(DEFINE_SKIPPED_TEST)

Test(kern_cnn_cuda, launchers_should_fail_with_a_message_when_built_without_cuda)
{
    cr_assert_eq(kern_cuda_init(), -1);
    cr_assert_eq(kern_relu_forward_cuda(NULL, NULL, 1, NULL), -1);
    cr_assert_eq(kern_bn_stats_cuda(NULL, NULL, 1, 1, 1, 1, NULL), -1);
    kern_cuda_shutdown();   /* a no-op, never a crash */
}

#endif

/* Runs everywhere: "no device" (or no driver, or no CUDA at all) is the answer 0, never an error. */
Test(kern_cnn_cuda, device_count_should_answer_zero_or_more_without_failing)
{
    int n = kern_cuda_device_count();
    cr_assert_geq(n, 0);
#if !MEMPLAN_CUDA
    cr_assert_eq(n, 0, "built without CUDA, yet %d devices reported", n);
#endif
}
