/* test_exec_device.c — the host device through the tracked allocator, and the CUDA device:
 * reported unavailable on a machine without a GPU (or a build without CUDA), checked on a GPU
 * when there is one (skipped visibly otherwise). */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "exec_device.h"
#include "prof_mem.h"

Test(device, host_should_allocate_through_the_tracker_copy_and_memset)
{
    char err[128];
    Device *d = exec_device_create(DEVICE_HOST, 0, err, sizeof err);
    cr_assert_not_null(d, "%s", err);
    cr_expect_eq(exec_device_kind(d), DEVICE_HOST);
    cr_expect_str_eq(exec_device_name(d), "host");
    cr_expect_eq(exec_device_index(d), -1);
    cr_expect_null(exec_device_stream(d));
    size_t fr = 0, tot = 0;
    cr_expect_eq(exec_device_mem_info(d, &fr, &tot), 0);
    cr_expect(tot > 0 && fr <= tot);

    MemTracker *t = exec_device_tracker_create(d, 1 << 20);
    cr_assert_not_null(t);
    unsigned char *a = prof_mem_alloc(t, MEM_PARAMS, 4096, "a");
    unsigned char *b = prof_mem_calloc(t, MEM_GRADS, 4096, "b");
    cr_assert(a && b);
    exec_device_memset(d, a, 0x5a, 4096);
    exec_device_copy(d, b, a, 4096);
    exec_device_synchronize(d);
    cr_expect_eq(b[0], 0x5a);
    cr_expect_eq(b[4095], 0x5a);
    cr_expect_null(prof_mem_alloc(t, MEM_ACTIVATIONS, 2 << 20, "too big"));
    cr_expect(prof_mem_oom(t)->happened);
    cr_expect_eq(exec_device_failed(d), 0);
    prof_mem_free(t, a);
    prof_mem_free(t, b);
    prof_mem_destroy(t);
    exec_device_destroy(d);
}

Test(device, cuda_should_be_reported_unavailable_without_a_gpu)
{
    if (exec_device_cuda_available() > 0) cr_skip_test("skipped: a CUDA device is present");
    char err[256] = "";
    Device *d = exec_device_create(DEVICE_CUDA, 0, err, sizeof err);
    cr_expect_null(d);
    cr_expect(strstr(err, "no CUDA device") || strstr(err, "built without CUDA (NO_CUDA=1)"), "err: %s", err);
}

Test(device, cuda_should_allocate_copy_and_memset_on_the_gpu)
{
    if (exec_device_cuda_available() == 0) cr_skip_test("skipped: no CUDA device");
    char err[256];
    Device *d = exec_device_create(DEVICE_CUDA, 0, err, sizeof err);
    cr_assert_not_null(d, "%s", err);
    cr_expect_eq(exec_device_kind(d), DEVICE_CUDA);
    cr_expect_neq(exec_device_index(d), -1);
    size_t fr = 0, tot = 0;
    cr_expect_eq(exec_device_mem_info(d, &fr, &tot), 0);
    cr_expect(tot > 0);
    MemTracker *t = exec_device_tracker_create(d, 64 << 20);
    enum { N = 1 << 20 };
    unsigned char *h = malloc(N);
    void *g = prof_mem_calloc(t, MEM_PARAMS, N, "g");
    void *g2 = prof_mem_alloc(t, MEM_GRADS, N, "g2");
    cr_assert(g && g2);
    exec_device_copy(d, h, g, N);
    cr_expect_eq(h[N - 1], 0, "calloc zeroes device memory");
    exec_device_memset(d, g, 0x33, N);
    exec_device_copy(d, g2, g, N);   /* device to device */
    exec_device_synchronize(d);
    exec_device_copy(d, h, g2, N);
    cr_expect_eq(h[0], 0x33);
    cr_expect_eq(h[N - 1], 0x33);
    cr_expect_null(prof_mem_alloc(t, MEM_ACTIVATIONS, 128 << 20, "over the limit"));
    cr_expect_eq(exec_device_failed(d), 0);
    prof_mem_free(t, g);
    prof_mem_free(t, g2);
    prof_mem_destroy(t);
    free(h);
    exec_device_destroy(d);
}
