/* test_prof_overhead.c — the fixed-overhead measurement: its JSON (no GPU needed), its reason when
 * there is no device, and on a GPU the three steps giving plausible sizes, the instrument itself
 * (used memory read the same way) checked against an allocation of known size, and what the steps
 * hold given back by prof_overhead_free. Without a GPU the GPU tests report "skipped: no CUDA
 * device". */
#include <criterion/criterion.h>
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

Test(prof_overhead, json_should_hold_the_deltas_and_null_for_steps_not_measured)
{
    ProfOverhead o;
    prof_overhead_init(&o);
    cr_expect_eq(o.device, -1);
    cr_expect_lt(o.nccl, 0, "not measured yet");
    snprintf(o.gpu, sizeof o.gpu, "NVIDIA H200");
    o.device = 0;
    o.total_bytes = 143771.0 * MiB;
    o.context_from_nvml = 1;
    o.used_before = 0;
    o.used_context = 512 * MiB;
    o.cuda_context = 512 * MiB;
    o.cublas_handle = 0;
    o.cublas_gemm = 32 * MiB;
    o.cublas = 32 * MiB;
    o.gemm_n = 1024;
    snprintf(o.nccl_note, sizeof o.nccl_note, "built without NCCL (NO_NCCL=1)");
    cJSON *j = prof_overhead_json(&o);
    cr_assert(j);
    char *text = cJSON_PrintUnformatted(j);
    cJSON *b = cJSON_Parse(text);
    cr_assert(b);
    cr_expect_str_eq(cJSON_GetObjectItem(b, "gpu")->valuestring, "NVIDIA H200");
    cr_expect_eq(cJSON_GetObjectItem(b, "cuda_context_bytes")->valuedouble, 512 * MiB);
    cr_expect_eq(cJSON_GetObjectItem(b, "cublas_bytes")->valuedouble, 32 * MiB);
    cr_expect_eq(cJSON_GetObjectItem(b, "cublas_first_gemm_bytes")->valuedouble, 32 * MiB);
    cr_expect_eq(cJSON_GetObjectItem(b, "gemm_n")->valuedouble, 1024);
    cr_expect(cJSON_IsNull(cJSON_GetObjectItem(b, "nccl_bytes")), "never measured: null, not 0");
    cr_expect_str_eq(cJSON_GetObjectItem(b, "nccl_note")->valuestring, "built without NCCL (NO_NCCL=1)");
    cr_expect_str_eq(cJSON_GetObjectItem(b, "cuda_module_loading")->valuestring, "default");
    cJSON *used = cJSON_GetObjectItem(b, "used_bytes");
    cr_expect_eq(cJSON_GetObjectItem(used, "after_context")->valuedouble, 512 * MiB);
    cr_expect(cJSON_IsNull(cJSON_GetObjectItem(used, "after_nccl_init")));
    cr_expect(strstr(cJSON_GetObjectItem(b, "context_method")->valuestring, "nvml") != NULL);
    cJSON_Delete(b);
    free(text);
    cJSON_Delete(j);
    prof_overhead_free(&o);
}

Test(prof_overhead, without_a_device_every_step_should_say_why)
{
    char why[256] = "";
    int n = prof_overhead_devices(why, sizeof why);
    if (n > 0) cr_skip_test("skipped: a CUDA device is present (this checks the machines without one)");
    if (MEMPLAN_CUDA) cr_expect(strncmp(why, "no CUDA device (", 16) == 0, "got: %s", why);
    else cr_expect_str_eq(why, "built without CUDA (NO_CUDA=1)");
    ProfOverhead o;
    prof_overhead_init(&o);
    char err[256] = "";
    cr_expect_eq(prof_overhead_measure(&o, 0, 64, err, sizeof err), -1);
    cr_expect_str_eq(err, why);
    cr_expect_lt(o.cuda_context, 0);
    prof_overhead_free(&o);
}

Test(prof_overhead, on_a_gpu_the_steps_should_measure_plausible_overheads)
{
    char why[256];
    if (prof_overhead_devices(why, sizeof why) == 0) cr_skip_test("skipped: no CUDA device");
    ProfOverhead o;
    prof_overhead_init(&o);
    char err[256] = "";
    int rc = prof_overhead_measure(&o, 0, 512, err, sizeof err);
    cr_assert_eq(rc, 0, "%s", err);
    cr_expect_gt(o.total_bytes, 0);
    cr_expect_gt(o.cuda_context, 0, "a context takes device memory");
    cr_expect_lt(o.cuda_context, 4096 * MiB);
    cr_expect_geq(o.cublas_handle, 0);
    cr_expect_geq(o.cublas_gemm, 0);
    cr_expect_lt(o.cublas, 1024 * MiB);
    cr_expect_eq(o.gemm_n, 512);
    if (MEMPLAN_NCCL) {
        cr_expect_geq(o.nccl, 0);
        cr_expect_eq(o.nccl_ranks, 1);
    }
    cr_expect_geq(o.used_cublas, o.used_context);
    prof_overhead_free(&o);
}

/* The deltas are only as good as the reading they subtract: read the same way (cudaMemGetInfo
 * after a synchronize), an allocation of known size must show as that size, to the driver's
 * 2 MiB page; and prof_overhead_free must give back at least the GEMM operands it holds. */
Test(prof_overhead, on_a_gpu_used_memory_should_move_by_what_is_allocated_and_freed)
{
    char why[256];
    if (prof_overhead_devices(why, sizeof why) == 0) cr_skip_test("skipped: no CUDA device");
#if MEMPLAN_CUDA
    ProfOverhead o;
    prof_overhead_init(&o);
    char err[256] = "";
    cr_assert_eq(prof_overhead_measure(&o, 0, 512, err, sizeof err), 0, "%s", err);
    double before = prof_overhead_used_now();
    void *p = NULL;
    cr_assert_eq(cudaMalloc(&p, (size_t)(64 * MiB)), cudaSuccess);
    double after = prof_overhead_used_now();
    cr_assert(before >= 0 && after >= 0);
    cr_expect_geq(after - before, 64 * MiB, "a 64 MiB cudaMalloc read as %.0f bytes", after - before);
    cr_expect_leq(after - before, 66 * MiB, "a 64 MiB cudaMalloc read as %.0f bytes", after - before);
    cr_assert_eq(cudaFree(p), cudaSuccess);

    double held = prof_overhead_used_now();
    prof_overhead_free(&o);
    double released = held - prof_overhead_used_now();
    cr_expect_geq(released, 3 * 512.0 * 512.0 * 4, "prof_overhead_free gave back %.0f bytes", released);
#endif
}
