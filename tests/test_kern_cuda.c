/* test_kern_cuda.c — specifications of the CUDA kernels (kernels/kern_cuda.h) against their CPU
 * twins (kernels/kern_ops.h), which are the reference.
 *
 * Each test builds fresh random inputs, runs the CPU kernel and the CUDA launcher on copies of the
 * same data, and compares every element: |gpu - cpu| <= ATOL + RTOL·|cpu|. Forward outputs on the
 * GPU start as NaN (bytes 0xFF), so an element a kernel forgets to write fails; gradients start
 * as the same random values on both sides, so a kernel that overwrites instead of accumulating
 * fails. Each comparison logs its largest difference ([----] lines), to be recorded in
 * docs/gpu-kernels.md when run on a GPU.
 *
 * Tolerances (inputs of order 1; derivation in docs/gpu-kernels.md):
 *   EXACT      0, 0          same additions in the same order, nothing to round differently:
 *                            encoder forward/backward, residual forward/backward.
 *   ELEMWISE   1e-6, 1e-5    a few ulps: device expf/logf differ from glibc by <= 2 ulp, and nvcc
 *                            fuses a*b+c into one rounding where gcc (x86-64) rounds twice.
 *   GELU       1e-5, 1e-5    GELU on |x| <= 4 cancels in 1 + tanh(u) and 1 - tanh²(u) near -1,
 *                            which scales tanhf's ulp (~1.2e-7 at 1) by up to ~5 (dinp, x = -4).
 *   ROWSUM     1e-5, 1e-5    plus sums over a row of <= 1031 terms in a different order
 *                            (warp or block tree on the GPU, serial on the CPU): LayerNorm,
 *                            attention, softmax cross-entropy, AdamW.
 *   COLSUM     1e-4, 1e-5    sums over B·T rows of terms up to ~5 (LayerNorm dweight/dbias).
 *   MATMUL     1e-4, 1e-4    sgemm with K up to 192 in cuBLAS's order vs OpenBLAS's. TF32
 *                            (10-bit mantissa) would be off by ~1e-3 and fail: this is the check
 *                            that kern_cuda_init keeps cuBLAS in full fp32.
 *
 * With no usable device every test skips ("skipped: no CUDA device"); built without CUDA
 * (NO_CUDA=1) the same tests exist and skip, so the count never silently drops. Tests run in
 * forked processes (Criterion), so each one initializes CUDA afresh. */
#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kern_cuda.h"
#include "kern_ops.h"

#ifndef MEMPLAN_CUDA
#define MEMPLAN_CUDA 0
#endif

/* Every GPU test, by name; each has a body NAME_body below (CUDA builds only). */
#define KERN_CUDA_TESTS(X)                                                          \
    X(encoder_forward_should_equal_the_cpu_kernel)                                  \
    X(encoder_backward_should_accumulate_the_cpu_scatter_bit_for_bit)               \
    X(layernorm_forward_should_match_the_cpu_kernel)                                \
    X(layernorm_backward_should_accumulate_like_the_cpu_kernel)                     \
    X(matmul_forward_should_match_cpu_sgemm_with_and_without_bias)                  \
    X(matmul_backward_should_accumulate_like_cpu_sgemm)                             \
    X(matmul_backward_should_skip_gradients_passed_as_null)                         \
    X(attention_forward_should_match_the_cpu_kernel_with_zeros_where_masked)        \
    X(attention_backward_should_accumulate_like_the_cpu_kernel)                     \
    X(gelu_forward_and_backward_should_match_the_cpu_kernels)                       \
    X(residual_forward_and_backward_should_equal_the_cpu_kernels)                   \
    X(crossentropy_forward_should_match_the_cpu_kernel)                             \
    X(crossentropy_backward_should_accumulate_like_the_cpu_kernel)                  \
    X(lmhead_forward_and_backward_should_match_the_cpu_kernels)                     \
    X(adamw_should_update_only_its_shard_like_the_cpu_kernel)                       \
    X(backward_kernels_should_give_identical_bits_when_run_twice)

#if MEMPLAN_CUDA
#include <cuda_runtime.h>

#define EXACT_ATOL 0.0
#define EXACT_RTOL 0.0
#define ELEMWISE_ATOL 1e-6
#define ELEMWISE_RTOL 1e-5
#define GELU_ATOL 1e-5
#define GELU_RTOL 1e-5
#define ROWSUM_ATOL 1e-5
#define ROWSUM_RTOL 1e-5
#define COLSUM_ATOL 1e-4
#define COLSUM_RTOL 1e-5
#define MATMUL_ATOL 1e-4
#define MATMUL_RTOL 1e-4

/* ---- helpers: random data, device copies, comparison ---- */

#define TEST_CUDA_SEED 0x2545F4914F6CDD1Dull
#include "test_cuda.h"

static int *irand(size_t n, int V)   /* tokens in [0, V) */
{
    int *p = malloc(n * sizeof(int));
    cr_assert_not_null(p);
    for (size_t i = 0; i < n; i++) {
        int x = (int)((urand() + 1.0f) * 0.5f * (float)V);
        p[i] = x < V ? x : V - 1;
    }
    return p;
}

/* ---- encoder ---- */

static void encoder_forward_should_equal_the_cpu_kernel_body(void)
{
    int B = 4, T = 100, C = 80, V = 23, maxT = T + 3;
    size_t n = (size_t)B * T * C;
    int *inp = irand((size_t)B * T, V);
    float *wte = frand((size_t)V * C, 1, 0), *wpe = frand((size_t)maxT * C, 1, 0), *out = fzeros(n);
    kern_encoder_forward(out, inp, wte, wpe, B, T, C);

    int *d_inp = dev_ints(inp, (size_t)B * T);
    float *d_wte = dev_floats(wte, (size_t)V * C), *d_wpe = dev_floats(wpe, (size_t)maxT * C), *d_out = dev_nan(n);
    LAUNCH(kern_encoder_forward_cuda(d_out, d_inp, d_wte, d_wpe, B, T, C, NULL));
    expect_close("encoder out", d_out, out, n, EXACT_ATOL, EXACT_RTOL);
}

static void encoder_backward_should_accumulate_the_cpu_scatter_bit_for_bit_body(void)
{
    /* V much smaller than B·T: every token repeats, and B·T = 400 spans two chunks of the
     * kernel's 256-position scan. wpe has rows beyond T that must stay untouched. */
    int B = 4, T = 100, C = 80, V = 23, maxT = T + 3;
    size_t n = (size_t)B * T * C, nwte = (size_t)V * C, nwpe = (size_t)maxT * C;
    int *inp = irand((size_t)B * T, V);
    float *dout = frand(n, 1, 0), *dwte = frand(nwte, 1, 0), *dwpe = frand(nwpe, 1, 0);
    int *d_inp = dev_ints(inp, (size_t)B * T);
    float *d_dout = dev_floats(dout, n), *d_dwte = dev_floats(dwte, nwte), *d_dwpe = dev_floats(dwpe, nwpe);
    kern_encoder_backward(dwte, dwpe, dout, inp, B, T, C);

    LAUNCH(kern_encoder_backward_cuda(d_dwte, d_dwpe, d_dout, d_inp, B, T, C, NULL));
    expect_close("encoder dwte", d_dwte, dwte, nwte, EXACT_ATOL, EXACT_RTOL);
    expect_close("encoder dwpe", d_dwpe, dwpe, nwpe, EXACT_ATOL, EXACT_RTOL);
}

/* ---- LayerNorm ---- */

static void layernorm_forward_should_match_the_cpu_kernel_body(void)
{
    int B = 3, T = 37, C = 200;   /* C not a multiple of 32 */
    size_t n = (size_t)B * T * C, rows = (size_t)B * T;
    float *inp = frand(n, 2, 0.5f), *w = frand(C, 0.2f, 1), *b = frand(C, 1, 0);
    float *out = fzeros(n), *mean = fzeros(rows), *rstd = fzeros(rows);
    kern_layernorm_forward(out, mean, rstd, inp, w, b, B, T, C);

    float *d_inp = dev_floats(inp, n), *d_w = dev_floats(w, C), *d_b = dev_floats(b, C);
    float *d_out = dev_nan(n), *d_mean = dev_nan(rows), *d_rstd = dev_nan(rows);
    LAUNCH(kern_layernorm_forward_cuda(d_out, d_mean, d_rstd, d_inp, d_w, d_b, B, T, C, NULL));
    expect_close("layernorm out", d_out, out, n, ROWSUM_ATOL, ROWSUM_RTOL);
    expect_close("layernorm mean", d_mean, mean, rows, ROWSUM_ATOL, ROWSUM_RTOL);
    expect_close("layernorm rstd", d_rstd, rstd, rows, ROWSUM_ATOL, ROWSUM_RTOL);
}

static void layernorm_backward_should_accumulate_like_the_cpu_kernel_body(void)
{
    int B = 3, T = 37, C = 200;
    size_t n = (size_t)B * T * C, rows = (size_t)B * T;
    float *inp = frand(n, 2, 0.5f), *w = frand(C, 0.2f, 1), *b = frand(C, 1, 0);
    float *out = fzeros(n), *mean = fzeros(rows), *rstd = fzeros(rows);
    kern_layernorm_forward(out, mean, rstd, inp, w, b, B, T, C);   /* mean, rstd as saved by the CPU */
    float *dout = frand(n, 1, 0), *dinp = frand(n, 1, 0), *dw = frand(C, 1, 0), *db = frand(C, 1, 0);

    float *d_inp = dev_floats(inp, n), *d_w = dev_floats(w, C), *d_mean = dev_floats(mean, rows),
          *d_rstd = dev_floats(rstd, rows), *d_dout = dev_floats(dout, n), *d_dinp = dev_floats(dinp, n),
          *d_dw = dev_floats(dw, C), *d_db = dev_floats(db, C);
    kern_layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd, B, T, C);
    LAUNCH(kern_layernorm_backward_cuda(d_dinp, d_dw, d_db, d_dout, d_inp, d_w, d_mean, d_rstd, B, T, C, NULL));
    expect_close("layernorm dinp", d_dinp, dinp, n, ROWSUM_ATOL, ROWSUM_RTOL);
    expect_close("layernorm dweight", d_dw, dw, C, COLSUM_ATOL, COLSUM_RTOL);
    expect_close("layernorm dbias", d_db, db, C, COLSUM_ATOL, COLSUM_RTOL);
}

/* ---- matmul ---- */

static void matmul_forward_should_match_cpu_sgemm_with_and_without_bias_body(void)
{
    int B = 3, T = 37, C = 192, OC = 136;   /* M = 111: no dimension a multiple of a tile */
    size_t M = (size_t)B * T;
    float *inp = frand(M * C, 1, 0), *w = frand((size_t)OC * C, 1, 0), *bias = frand(OC, 1, 0);
    float *out = fzeros(M * OC);
    float *d_inp = dev_floats(inp, M * C), *d_w = dev_floats(w, (size_t)OC * C), *d_bias = dev_floats(bias, OC);
    float *d_out = dev_nan(M * OC);

    kern_matmul_forward(out, inp, w, bias, B, T, C, OC);
    LAUNCH(kern_matmul_forward_cuda(d_out, d_inp, d_w, d_bias, B, T, C, OC, NULL));
    expect_close("matmul out (bias)", d_out, out, M * OC, MATMUL_ATOL, MATMUL_RTOL);

    CK(cudaMemset(d_out, 0xFF, M * OC * sizeof(float)));
    kern_matmul_forward(out, inp, w, NULL, B, T, C, OC);
    LAUNCH(kern_matmul_forward_cuda(d_out, d_inp, d_w, NULL, B, T, C, OC, NULL));
    expect_close("matmul out (no bias)", d_out, out, M * OC, MATMUL_ATOL, MATMUL_RTOL);
}

static void matmul_backward_should_accumulate_like_cpu_sgemm_body(void)
{
    int B = 3, T = 37, C = 192, OC = 136;
    size_t M = (size_t)B * T, nw = (size_t)OC * C;
    float *inp = frand(M * C, 1, 0), *w = frand(nw, 1, 0), *dout = frand(M * OC, 1, 0);
    float *dinp = frand(M * C, 1, 0), *dw = frand(nw, 1, 0), *db = frand(OC, 1, 0);
    float *d_inp = dev_floats(inp, M * C), *d_w = dev_floats(w, nw), *d_dout = dev_floats(dout, M * OC);
    float *d_dinp = dev_floats(dinp, M * C), *d_dw = dev_floats(dw, nw), *d_db = dev_floats(db, OC);

    kern_matmul_backward(dinp, dw, db, dout, inp, w, B, T, C, OC);
    LAUNCH(kern_matmul_backward_cuda(d_dinp, d_dw, d_db, d_dout, d_inp, d_w, B, T, C, OC, NULL));
    expect_close("matmul dinp", d_dinp, dinp, M * C, MATMUL_ATOL, MATMUL_RTOL);
    expect_close("matmul dweight", d_dw, dw, nw, MATMUL_ATOL, MATMUL_RTOL);
    expect_close("matmul dbias", d_db, db, OC, MATMUL_ATOL, MATMUL_RTOL);
}

static void matmul_backward_should_skip_gradients_passed_as_null_body(void)
{
    int B = 2, T = 5, C = 24, OC = 40;
    size_t M = (size_t)B * T, nw = (size_t)OC * C;
    float *inp = frand(M * C, 1, 0), *w = frand(nw, 1, 0), *dout = frand(M * OC, 1, 0);
    float *dinp = frand(M * C, 1, 0), *dw = frand(nw, 1, 0), *db = frand(OC, 1, 0);
    float *d_inp = dev_floats(inp, M * C), *d_w = dev_floats(w, nw), *d_dout = dev_floats(dout, M * OC);
    float *d_dinp = dev_floats(dinp, M * C), *d_dw = dev_floats(dw, nw), *d_db = dev_floats(db, OC);
    float *dinp0 = fcopy(dinp, M * C), *dw0 = fcopy(dw, nw);

    /* only dbias: dinp and dweight must not change */
    kern_matmul_backward(NULL, NULL, db, dout, inp, w, B, T, C, OC);
    LAUNCH(kern_matmul_backward_cuda(NULL, NULL, d_db, d_dout, d_inp, d_w, B, T, C, OC, NULL));
    expect_close("matmul dbias alone", d_db, db, OC, MATMUL_ATOL, MATMUL_RTOL);
    expect_close("matmul dinp untouched", d_dinp, dinp0, M * C, EXACT_ATOL, EXACT_RTOL);
    expect_close("matmul dweight untouched", d_dw, dw0, nw, EXACT_ATOL, EXACT_RTOL);

    /* only dinp */
    kern_matmul_backward(dinp, NULL, NULL, dout, inp, w, B, T, C, OC);
    LAUNCH(kern_matmul_backward_cuda(d_dinp, NULL, NULL, d_dout, d_inp, d_w, B, T, C, OC, NULL));
    expect_close("matmul dinp alone", d_dinp, dinp, M * C, MATMUL_ATOL, MATMUL_RTOL);
    expect_close("matmul dweight still untouched", d_dw, dw0, nw, EXACT_ATOL, EXACT_RTOL);
}

/* ---- attention ---- */

typedef struct {
    int B, T, C, NH;
    size_t ninp, nout, natt;
    float *inp, *out, *preatt, *att;
} AttCase;

static AttCase att_case(void)
{
    AttCase a = {.B = 2, .T = 40, .C = 64, .NH = 4};   /* hs = 16; T > 32 rows span two warp passes */
    a.ninp = (size_t)a.B * a.T * 3 * a.C;
    a.nout = (size_t)a.B * a.T * a.C;
    a.natt = (size_t)a.B * a.NH * a.T * a.T;
    a.inp = frand(a.ninp, 1, 0);
    a.out = fzeros(a.nout);
    a.preatt = fzeros(a.natt);
    a.att = fzeros(a.natt);
    kern_attention_forward(a.out, a.preatt, a.att, a.inp, a.B, a.T, a.C, a.NH);
    return a;
}

static void attention_forward_should_match_the_cpu_kernel_with_zeros_where_masked_body(void)
{
    AttCase a = att_case();
    float *d_inp = dev_floats(a.inp, a.ninp), *d_out = dev_nan(a.nout), *d_pre = dev_nan(a.natt), *d_att = dev_nan(a.natt);
    LAUNCH(kern_attention_forward_cuda(d_out, d_pre, d_att, d_inp, a.B, a.T, a.C, a.NH, NULL));
    expect_close("attention preatt", d_pre, a.preatt, a.natt, ROWSUM_ATOL, ROWSUM_RTOL);
    expect_close("attention att", d_att, a.att, a.natt, ROWSUM_ATOL, ROWSUM_RTOL);
    expect_close("attention out", d_out, a.out, a.nout, ROWSUM_ATOL, ROWSUM_RTOL);

    /* the masked half is exactly zero, not merely small */
    float *att = to_host(d_att, a.natt), *pre = to_host(d_pre, a.natt);
    for (size_t r = 0; r < a.natt / a.T; r++) {
        int t = (int)(r % a.T);
        for (int t2 = t + 1; t2 < a.T; t2++)
            cr_assert(att[r * a.T + t2] == 0.0f && pre[r * a.T + t2] == 0.0f, "row %zu, t2 = %d is masked but not 0", r, t2);
    }
    free(att);
    free(pre);
}

static void attention_backward_should_accumulate_like_the_cpu_kernel_body(void)
{
    AttCase a = att_case();
    float *dout = frand(a.nout, 1, 0), *dinp = frand(a.ninp, 1, 0);
    float *dpre = fzeros(a.natt), *datt = fzeros(a.natt);
    float *d_inp = dev_floats(a.inp, a.ninp), *d_att = dev_floats(a.att, a.natt), *d_dout = dev_floats(dout, a.nout);
    float *d_dinp = dev_floats(dinp, a.ninp), *d_dpre = dev_nan(a.natt), *d_datt = dev_nan(a.natt);

    kern_attention_backward(dinp, dpre, datt, dout, a.inp, a.att, a.B, a.T, a.C, a.NH);
    LAUNCH(kern_attention_backward_cuda(d_dinp, d_dpre, d_datt, d_dout, d_inp, d_att, a.B, a.T, a.C, a.NH, NULL));
    expect_close("attention datt", d_datt, datt, a.natt, ROWSUM_ATOL, ROWSUM_RTOL);
    expect_close("attention dpreatt", d_dpre, dpre, a.natt, ROWSUM_ATOL, ROWSUM_RTOL);
    expect_close("attention dinp", d_dinp, dinp, a.ninp, ROWSUM_ATOL, ROWSUM_RTOL);
}

/* ---- GELU and residual ---- */

static void gelu_forward_and_backward_should_match_the_cpu_kernels_body(void)
{
    size_t N = 10007;
    float *inp = frand(N, 4, 0), *out = fzeros(N), *dout = frand(N, 1, 0), *dinp = frand(N, 1, 0);
    float *d_inp = dev_floats(inp, N), *d_out = dev_nan(N), *d_dout = dev_floats(dout, N), *d_dinp = dev_floats(dinp, N);
    kern_gelu_forward(out, inp, N);
    LAUNCH(kern_gelu_forward_cuda(d_out, d_inp, N, NULL));
    expect_close("gelu out", d_out, out, N, GELU_ATOL, GELU_RTOL);
    kern_gelu_backward(dinp, inp, dout, N);
    LAUNCH(kern_gelu_backward_cuda(d_dinp, d_inp, d_dout, N, NULL));
    expect_close("gelu dinp", d_dinp, dinp, N, GELU_ATOL, GELU_RTOL);
}

static void residual_forward_and_backward_should_equal_the_cpu_kernels_body(void)
{
    size_t N = 10007;
    float *a = frand(N, 1, 0), *b = frand(N, 1, 0), *out = fzeros(N);
    float *dout = frand(N, 1, 0), *da = frand(N, 1, 0), *db = frand(N, 1, 0);
    float *d_a = dev_floats(a, N), *d_b = dev_floats(b, N), *d_out = dev_nan(N);
    float *d_dout = dev_floats(dout, N), *d_da = dev_floats(da, N), *d_db = dev_floats(db, N);
    kern_residual_forward(out, a, b, N);
    LAUNCH(kern_residual_forward_cuda(d_out, d_a, d_b, N, NULL));
    expect_close("residual out", d_out, out, N, EXACT_ATOL, EXACT_RTOL);
    kern_residual_backward(da, db, dout, N);
    LAUNCH(kern_residual_backward_cuda(d_da, d_db, d_dout, N, NULL));
    expect_close("residual dinp1", d_da, da, N, EXACT_ATOL, EXACT_RTOL);
    expect_close("residual dinp2", d_db, db, N, EXACT_ATOL, EXACT_RTOL);
}

/* ---- softmax cross-entropy ---- */

static void crossentropy_forward_should_match_the_cpu_kernel_body(void)
{
    int B = 2, T = 19, V = 1031;   /* V not a multiple of the block size */
    size_t rows = (size_t)B * T, n = rows * V;
    float *logits = frand(n, 4, 0), *probs = fzeros(n), *losses = fzeros(rows);
    int *targets = irand(rows, V);
    float *d_logits = dev_floats(logits, n), *d_probs = dev_nan(n), *d_losses = dev_nan(rows);
    int *d_targets = dev_ints(targets, rows);
    kern_crossentropy_softmax_forward(probs, losses, logits, targets, B, T, V);
    LAUNCH(kern_crossentropy_softmax_forward_cuda(d_probs, d_losses, d_logits, d_targets, B, T, V, NULL));
    expect_close("crossentropy probs", d_probs, probs, n, ROWSUM_ATOL, ROWSUM_RTOL);
    expect_close("crossentropy losses", d_losses, losses, rows, ROWSUM_ATOL, ROWSUM_RTOL);
}

static void crossentropy_backward_should_accumulate_like_the_cpu_kernel_body(void)
{
    int B = 2, T = 19, V = 1031;
    size_t rows = (size_t)B * T, n = rows * V;
    float *logits = frand(n, 4, 0), *probs = fzeros(n), *losses = fzeros(rows), *dlogits = frand(n, 0.01f, 0);
    int *targets = irand(rows, V);
    kern_crossentropy_softmax_forward(probs, losses, logits, targets, B, T, V);
    float dloss = 1.0f / (float)rows;
    float *d_probs = dev_floats(probs, n), *d_dlogits = dev_floats(dlogits, n);
    int *d_targets = dev_ints(targets, rows);
    kern_crossentropy_softmax_backward(dlogits, probs, targets, dloss, B, T, V);
    LAUNCH(kern_crossentropy_softmax_backward_cuda(d_dlogits, d_probs, d_targets, dloss, B, T, V, NULL));
    expect_close("crossentropy dlogits", d_dlogits, dlogits, n, ELEMWISE_ATOL, ELEMWISE_RTOL);
}

/* ---- fused LM head + cross-entropy ---- */

static void lmhead_forward_and_backward_should_match_the_cpu_kernels_body(void)
{
    int B = 2, T = 19, C = 96, V = 1031;   /* V not a multiple of the block size */
    size_t rows = (size_t)B * T, n = rows * V, nw = (size_t)V * C;
    float *inp = frand(rows * C, 1, 0), *w = frand(nw, 1, 0);
    float *logits = fzeros(n), *lse = fzeros(rows), *losses = fzeros(rows);
    float *dinp = frand(rows * C, 1, 0), *dw = frand(nw, 1, 0);
    int *targets = irand(rows, V);
    float *d_inp = dev_floats(inp, rows * C), *d_w = dev_floats(w, nw), *d_logits = dev_nan(n);
    float *d_lse = dev_nan(rows), *d_losses = dev_nan(rows);
    float *d_dinp = dev_floats(dinp, rows * C), *d_dw = dev_floats(dw, nw);
    int *d_targets = dev_ints(targets, rows);
    kern_lmhead_ce_forward(logits, lse, losses, inp, w, targets, B, T, C, V);
    LAUNCH(kern_lmhead_ce_forward_cuda(d_logits, d_lse, d_losses, d_inp, d_w, d_targets, B, T, C, V, NULL));
    expect_close("lmhead logits", d_logits, logits, n, MATMUL_ATOL, MATMUL_RTOL);
    expect_close("lmhead lse", d_lse, lse, rows, MATMUL_ATOL, MATMUL_RTOL);
    expect_close("lmhead losses", d_losses, losses, rows, MATMUL_ATOL, MATMUL_RTOL);
    float dloss = 1.0f / (float)rows;
    kern_lmhead_ce_backward(dinp, dw, logits, lse, targets, inp, w, dloss, B, T, C, V);
    LAUNCH(kern_lmhead_ce_backward_cuda(d_dinp, d_dw, d_logits, d_lse, d_targets, d_inp, d_w, dloss, B, T, C, V, NULL));
    expect_close("lmhead dlogits", d_logits, logits, n, MATMUL_ATOL, MATMUL_RTOL);
    expect_close("lmhead dinp", d_dinp, dinp, rows * C, MATMUL_ATOL, MATMUL_RTOL);
    expect_close("lmhead dweight", d_dw, dw, nw, MATMUL_ATOL, MATMUL_RTOL);
}

/* ---- AdamW ---- */

static void adamw_should_update_only_its_shard_like_the_cpu_kernel_body(void)
{
    size_t N = 5000, offset = 1000, len = 2500;
    float *p = frand(N, 1, 0), *m = fzeros(len), *v = fzeros(len);
    float *d_p = dev_floats(p, N), *d_m = dev_floats(m, len), *d_v = dev_floats(v, len);
    float *p0 = fcopy(p, N);
    for (int t = 1; t <= 3; t++) {   /* fresh gradients each step, as in training */
        float *g = frand(N, 1, 0), *d_g = dev_floats(g, N);
        kern_adamw_update(p, g, m, v, offset, len, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.1f, t);
        LAUNCH(kern_adamw_update_cuda(d_p, d_g, d_m, d_v, offset, len, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.1f, t, NULL));
        CK(cudaFree(d_g));
        free(g);
    }
    expect_close("adamw params (shard)", d_p + offset, p + offset, len, ROWSUM_ATOL, ROWSUM_RTOL);
    expect_close("adamw m", d_m, m, len, ROWSUM_ATOL, ROWSUM_RTOL);
    expect_close("adamw v", d_v, v, len, ROWSUM_ATOL, ROWSUM_RTOL);
    expect_close("adamw params before the shard", d_p, p0, offset, EXACT_ATOL, EXACT_RTOL);
    expect_close("adamw params after the shard", d_p + offset + len, p0 + offset + len, N - offset - len,
                 EXACT_ATOL, EXACT_RTOL);
}

/* ---- determinism: no float atomics, so the same launch gives the same bits ---- */

static void backward_kernels_should_give_identical_bits_when_run_twice_body(void)
{
    int B = 4, T = 100, C = 80, V = 23, OC = 96, NH = 4;
    size_t BT = (size_t)B * T, n = BT * C;
    int *inp = irand(BT, V);
    float *x = frand(BT * 3 * C, 1, 0), *dout = frand(BT * OC, 1, 0), *w = frand((size_t)OC * C, 1, 0);
    float *mean = fzeros(BT), *rstd = fzeros(BT), *out = fzeros(n), *lnw = frand(C, 0.2f, 1), *lnb = frand(C, 1, 0);
    kern_layernorm_forward(out, mean, rstd, x, lnw, lnb, B, T, C);
    int *d_inp = dev_ints(inp, BT);
    float *d_x = dev_floats(x, BT * 3 * C), *d_dout = dev_floats(dout, BT * OC), *d_w = dev_floats(w, (size_t)OC * C);
    float *d_mean = dev_floats(mean, BT), *d_rstd = dev_floats(rstd, BT), *d_lnw = dev_floats(lnw, C);
    size_t natt = (size_t)B * NH * T * T;
    float *d_pre = dev_nan(natt), *d_att = dev_nan(natt), *d_aout = dev_nan(n), *d_datt = dev_nan(natt);
    LAUNCH(kern_attention_forward_cuda(d_aout, d_pre, d_att, d_x, B, T, C, NH, NULL));

    float *g[2][8];
    for (int run = 0; run < 2; run++) {
        float *z = fzeros(BT * 3 * C);   /* every gradient starts at zero */
        for (int k = 0; k < 8; k++) g[run][k] = dev_floats(z, BT * 3 * C);
        free(z);
        float *dwte = g[run][0], *dwpe = g[run][1], *dinp = g[run][2], *dlnw = g[run][3], *dlnb = g[run][4];
        float *dW = g[run][5], *db = g[run][6], *dqkv = g[run][7];
        LAUNCH(kern_encoder_backward_cuda(dwte, dwpe, d_dout, d_inp, B, T, C, NULL));   /* dout as (B,T,C) */
        LAUNCH(kern_layernorm_backward_cuda(dinp, dlnw, dlnb, d_dout, d_x, d_lnw, d_mean, d_rstd, B, T, C, NULL));
        LAUNCH(kern_matmul_backward_cuda(dinp, dW, db, d_dout, d_x, d_w, B, T, C, OC, NULL));
        LAUNCH(kern_attention_backward_cuda(dqkv, d_pre, d_datt, d_dout, d_x, d_att, B, T, C, NH, NULL));
    }
    const char *names[8] = {"encoder dwte", "encoder dwpe", "layernorm+matmul dinp", "layernorm dweight",
                            "layernorm dbias", "matmul dweight", "matmul dbias", "attention dinp"};
    size_t sizes[8] = {(size_t)V * C, (size_t)T * C, n, (size_t)C, (size_t)C, (size_t)OC * C, (size_t)OC, BT * 3 * C};
    for (int k = 0; k < 8; k++) expect_same_bits(names[k], g[0][k], g[1][k], sizes[k]);
}

#define DEFINE_GPU_TEST(name)                                                                 \
    Test(kern_cuda, name)                                                                     \
    {                                                                                         \
        require_gpu();                                                                        \
        name##_body();                                                                        \
        kern_cuda_shutdown();                                                                 \
    }
KERN_CUDA_TESTS(DEFINE_GPU_TEST)

/* ---- contract checks that need no device: errors are reported, not crashes ---- */

Test(kern_cuda, matmul_should_fail_with_a_message_before_kern_cuda_init)
{
    cr_assert_eq(kern_matmul_forward_cuda(NULL, NULL, NULL, NULL, 1, 1, 1, 1, NULL), -1);
    cr_assert_eq(kern_matmul_backward_cuda(NULL, NULL, NULL, NULL, NULL, NULL, 1, 1, 1, 1, NULL), -1);
}

Test(kern_cuda, attention_should_refuse_channels_not_divisible_by_heads)
{
    cr_assert_eq(kern_attention_forward_cuda(NULL, NULL, NULL, NULL, 1, 4, 10, 3, NULL), -1);
    cr_assert_eq(kern_attention_backward_cuda(NULL, NULL, NULL, NULL, NULL, NULL, 1, 4, 10, 3, NULL), -1);
}

#else /* built without CUDA: the same tests, visibly skipped */

#define DEFINE_SKIPPED_TEST(name)                                                             \
    Test(kern_cuda, name) { cr_skip_test("skipped: no CUDA device (built with NO_CUDA=1)"); }
KERN_CUDA_TESTS(DEFINE_SKIPPED_TEST)

Test(kern_cuda, launchers_should_fail_with_a_message_when_built_without_cuda)
{
    cr_assert_eq(kern_cuda_init(), -1);
    cr_assert_eq(kern_gelu_forward_cuda(NULL, NULL, 1, NULL), -1);
}

#endif

/* Runs everywhere: "no device" (or no driver, or no CUDA at all) is the answer 0, never an error. */
Test(kern_cuda, device_count_should_answer_zero_or_more_without_failing)
{
    int n = kern_cuda_device_count();
    cr_assert_geq(n, 0);
#if !MEMPLAN_CUDA
    cr_assert_eq(n, 0, "built without CUDA, yet %d devices reported", n);
#endif
}
