/* test_cuda.h — what the GPU kernel tests share: the check macros, a seeded generator, device
 * copies (outputs start as all-ones bits, a NaN per float, so an unwritten element fails), the
 * tolerance and bit comparisons, and require_gpu, which skips visibly without a device.
 * Include it inside `#if MEMPLAN_CUDA`, after <cuda_runtime.h>, <criterion/logging.h> and
 * kern_cuda.h; define TEST_CUDA_SEED first for a file's own random stream. */
#ifndef TEST_CUDA_H
#define TEST_CUDA_H

#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <cuda_runtime.h>
#include <stdlib.h>
#include <string.h>

#include "kern_cuda.h"

#ifndef TEST_CUDA_SEED
#define TEST_CUDA_SEED 0x9E3779B97F4A7C15ull
#endif

#define CK(call)                                                                              \
    do {                                                                                      \
        cudaError_t e_ = (call);                                                              \
        cr_assert(e_ == cudaSuccess, "%s failed: %s", #call, cudaGetErrorString(e_));         \
    } while (0)
/* A launcher must accept the launch (0) and the kernels must then run without a fault. */
#define LAUNCH(call)                                                                          \
    do {                                                                                      \
        cr_assert_eq((call), 0, "%s returned an error", #call);                               \
        CK(cudaDeviceSynchronize());                                                          \
    } while (0)

static unsigned long long rng_state = TEST_CUDA_SEED;
static float urand(void)   /* uniform in [-1, 1) */
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (float)((rng_state >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f;
}
static float *frand(size_t n, float scale, float shift)
{
    float *p = malloc((n ? n : 1) * sizeof(float));
    cr_assert_not_null(p);
    for (size_t i = 0; i < n; i++) p[i] = urand() * scale + shift;
    return p;
}
static float *fzeros(size_t n)
{
    float *p = calloc(n ? n : 1, sizeof(float));
    cr_assert_not_null(p);
    return p;
}
static float *fcopy(const float *src, size_t n)
{
    float *p = malloc((n ? n : 1) * sizeof(float));
    cr_assert_not_null(p);
    memcpy(p, src, n * sizeof(float));
    return p;
}

static void *dev_from(const void *host, size_t bytes)
{
    void *d = NULL;
    CK(cudaMalloc(&d, bytes ? bytes : 4));
    if (bytes) CK(cudaMemcpy(d, host, bytes, cudaMemcpyHostToDevice));
    return d;
}
static float *dev_floats(const float *host, size_t n) { return dev_from(host, n * sizeof(float)); }
static int *dev_ints(const int *host, size_t n) { return dev_from(host, n * sizeof(int)); }
static void *dev_nan_bytes(size_t bytes)   /* an output the kernel must overwrite: every bit set */
{
    void *d = NULL;
    CK(cudaMalloc(&d, bytes ? bytes : 4));
    CK(cudaMemset(d, 0xFF, bytes ? bytes : 4));
    return d;
}
static float *dev_nan(size_t n) { return dev_nan_bytes(n * sizeof(float)); }   /* a NaN per float */
static void *to_host_bytes(const void *dev, size_t bytes)
{
    void *h = malloc(bytes ? bytes : 4);
    cr_assert_not_null(h);
    CK(cudaMemcpy(h, dev, bytes, cudaMemcpyDeviceToHost));
    return h;
}
static float *to_host(const float *dev, size_t n) { return to_host_bytes(dev, n * sizeof(float)); }

/* Compares the device array gpu with the CPU result cpu, element by element. */
static void expect_close(const char *what, const float *gpu, const float *cpu, size_t n, double atol, double rtol)
{
    float *got = to_host(gpu, n);
    size_t bad = 0, worst = 0;
    double maxdiff = 0.0, worst_excess = -INFINITY;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - (double)cpu[i]);
        double tol = atol + rtol * fabs((double)cpu[i]);
        if (!(d <= tol)) bad++;   /* also catches NaN */
        if (d > maxdiff || isnan(d)) maxdiff = d;
        if (isnan(d) || d - tol > worst_excess) {
            worst_excess = isnan(d) ? INFINITY : d - tol;
            worst = i;
        }
    }
    cr_log_info("%s: %zu elements, max |gpu - cpu| = %.3g (tolerance %.0e + %.0e·|cpu|)", what, n, maxdiff, atol, rtol);
    cr_assert(bad == 0, "%s: %zu of %zu elements out of tolerance (%.0e + %.0e·|cpu|); worst [%zu]: gpu %.9g, cpu %.9g",
              what, bad, n, atol, rtol, worst, (double)got[worst], (double)cpu[worst]);
    free(got);
}

/* Bit-for-bit equality of a device array with a host array (NaNs included): elem bytes each. */
static void expect_bits(const char *what, const void *gpu, const void *cpu, size_t n, size_t elem)
{
    unsigned char *got = to_host_bytes(gpu, n * elem);
    const unsigned char *want = cpu;
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < n; i++)
        if (memcmp(got + i * elem, want + i * elem, elem) != 0 && bad++ == 0) first = i;
    cr_log_info("%s: %zu elements, %zu differ in some bit", what, n, bad);
    cr_assert(bad == 0, "%s: %zu of %zu elements differ from the CPU's bits; first at [%zu]", what, bad, n, first);
    free(got);
}

/* Two device arrays must hold the same bits (determinism). */
static void expect_same_bits(const char *what, const float *d_a, const float *d_b, size_t n)
{
    float *a = to_host(d_a, n);
    expect_bits(what, d_b, a, n, sizeof(float));
    free(a);
}

static void require_gpu(void)
{
    if (kern_cuda_device_count() == 0) cr_skip_test("skipped: no CUDA device");
    CK(cudaSetDevice(0));
    cr_assert_eq(kern_cuda_init(), 0, "kern_cuda_init failed");
}

#endif
