/* test_exec_comm.c — the comm backends. Multi-rank checks run tests/mpi/comm_check under
 * `timeout 60 mpirun -np N --oversubscribe` (Criterion forks, so MPI lives in its own
 * processes) and read its exit status and output; the single-process SELF backend is tested
 * here directly. GPU checks skip visibly when there is no CUDA device. */
#include <criterion/criterion.h>
#include <libgen.h>
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "exec_comm.h"
#include "exec_device.h"
#include "exec_launch.h"
#include "prof_comm.h"

#include "test_run.h"

/* tests/mpi/comm_check under `timeout 60 mpirun -np N --oversubscribe` */
static Run mpirun(int np, const char *args)
{
    char bin[PATH_MAX];
    test_sibling_path(bin, sizeof bin, "mpi/comm_check");
    return test_launch(bin, np, 60, args);
}

static void expect_all_ok(int np, const char *args)
{
    Run r = mpirun(np, args);
    cr_expect_eq(r.status, 0, "mpirun -np %d comm_check %s exited %d:\n%s", np, args, r.status, r.out);
    cr_expect_eq(test_count(r.out, "comm_check: rank"), np, "%s", r.out);
    cr_expect_eq(test_count(r.out, "FAIL"), 0, "%s", r.out);
    free(r.out);
}

Test(comm, every_collective_should_be_exact_and_counted_with_2_ranks, .timeout = 90)
{
    expect_all_ok(2, "collectives");
}

Test(comm, every_collective_should_be_exact_and_counted_with_4_ranks, .timeout = 90)
{
    expect_all_ok(4, "collectives");
}

Test(comm, every_collective_should_be_exact_without_the_progress_thread_too, .timeout = 90)
{
    expect_all_ok(2, "collectives --no-thread");
}

/* each backend's table on one rank: SELF's copies, MPI with and without the progress thread */
Test(comm, every_collective_through_each_backend_should_be_exact_on_1_rank, .timeout = 90)
{
    static const char *const ARGS[] = {"collectives --self", "collectives", "collectives --no-thread"};
    static const char *const WHICH[] = {"1 ranks, self)", "1 ranks, mpi with the progress thread)", "1 ranks, mpi)"};
    for (int i = 0; i < 3; i++) {
        Run r = mpirun(1, ARGS[i]);
        cr_expect_eq(r.status, 0, "comm_check %s exited %d:\n%s", ARGS[i], r.status, r.out);
        cr_expect_eq(test_count(r.out, "FAIL"), 0, "%s", r.out);
        cr_expect(strstr(r.out, WHICH[i]) != NULL, "%s ran another backend:\n%s", ARGS[i], r.out);
        free(r.out);
    }
}

Test(comm, the_progress_thread_should_run_the_reductions_on_2_ranks, .timeout = 90)
{
    Run r = mpirun(2, "collectives");
    cr_expect_eq(test_count(r.out, "mpi with the progress thread)"), 2, "%s", r.out);
    free(r.out);
    r = mpirun(2, "collectives --no-thread");
    cr_expect_eq(test_count(r.out, "mpi)"), 2, "%s", r.out);
    free(r.out);
}

Test(comm, mpi_waits_should_yield_the_core_on_2_ranks, .timeout = 90)
{
    expect_all_ok(2, "yield");
}

/* On fewer than 4 cores mpirun binds nothing for 4 ranks: comm_create pins them in blocks */
Test(comm, ranks_the_launcher_left_unbound_should_be_pinned_in_blocks_of_its_cpus, .timeout = 90)
{
    Run r = mpirun(4, "bind");
    cr_expect_eq(r.status, 0, "%s", r.out);
    cr_expect_eq(test_count(r.out, "FAIL"), 0, "%s", r.out);
    cr_expect_eq(test_count(r.out, "bind: rank "), 4, "%s", r.out);
    if (sysconf(_SC_NPROCESSORS_ONLN) < 4) cr_expect_eq(test_count(r.out, " pinned to "), 4, "%s", r.out);
    free(r.out);
}

/* comm_check bind on np ranks with MEMPLAN_BIND=value (mpirun's local ranks inherit it) */
static Run mpirun_bind(int np, const char *value)
{
    setenv("MEMPLAN_BIND", value, 1);
    Run r = mpirun(np, "bind");
    unsetenv("MEMPLAN_BIND");
    return r;
}

Test(comm, memplan_bind_none_should_leave_the_ranks_where_the_launcher_put_them, .timeout = 90)
{
    Run r = mpirun_bind(4, "none");
    cr_expect_eq(r.status, 0, "%s", r.out);
    cr_expect_eq(test_count(r.out, "FAIL"), 0, "%s", r.out);
    cr_expect_eq(test_count(r.out, " left on "), 4, "%s", r.out);
    free(r.out);
}

Test(comm, a_bad_memplan_bind_should_be_named_with_the_valid_values, .timeout = 90)
{
    Run r = mpirun_bind(2, "cores");
    cr_expect_neq(r.status, 0, "%s", r.out);
    cr_expect(strstr(r.out, "comm_check: MEMPLAN_BIND=cores: valid values are auto (the default") != NULL, "%s", r.out);
    cr_expect_eq(test_count(r.out, "ok (bind"), 0, "%s", r.out);
    free(r.out);
}

/* One rank on a core, the other on two: the sets differ, so both are left, and neither waits for
 * the other in the check (every rank of the node takes part in it whatever its set) */
Test(comm, ranks_on_different_cpu_sets_should_be_left_where_the_launcher_put_them, .timeout = 90)
{
    if (sysconf(_SC_NPROCESSORS_ONLN) < 2) cr_skip_test("needs 2 CPUs");
    char dir[64], rf[96], bin[PATH_MAX], cmd[2 * PATH_MAX];
    test_tmpdir(dir, sizeof dir, "memplan-rankfile");
    snprintf(rf, sizeof rf, "%s/ranks", dir);
    FILE *f = fopen(rf, "w");
    cr_assert_not_null(f);
    fprintf(f, "rank 0=localhost slot=0\nrank 1=localhost slot=0-1\n");
    fclose(f);
    test_sibling_path(bin, sizeof bin, "mpi/comm_check");
    test_mpi_env();
    snprintf(cmd, sizeof cmd, "timeout 60 mpirun -np 2 --rankfile %s %s bind --left 2>&1", rf, bin);
    Run r = test_run_cmd(cmd);
    cr_expect_eq(r.status, 0, "%s", r.out);
    cr_expect_eq(test_count(r.out, "FAIL"), 0, "%s", r.out);
    cr_expect_eq(test_count(r.out, " left on "), 2, "%s", r.out);
    free(r.out);
    unlink(rf);
    rmdir(dir);
}

Test(comm, check_same_should_find_the_differing_rank_with_2_ranks, .timeout = 90)
{
    expect_all_ok(2, "same");
}

Test(comm, check_same_should_find_the_differing_rank_with_4_ranks, .timeout = 90)
{
    expect_all_ok(4, "same");
}

Test(comm, a_stalled_peer_should_make_the_others_time_out_and_exit_non_zero, .timeout = 90)
{
    Run r = mpirun(3, "timeout");
    cr_expect_neq(r.status, 0, "%s", r.out);
    cr_expect_neq(r.status, 124, "mpirun hung until `timeout 60` killed it:\n%s", r.out);
    cr_expect(strstr(r.out, ": collective all_reduce timed out after 1.0 s (a peer may have died or stalled)") != NULL,
              "%s", r.out);
    cr_expect_eq(test_count(r.out, "rank 0: collective"), 0, "rank 0 was the one asleep:\n%s", r.out);
    cr_expect_lt(r.seconds, 15.0, "took %.1f s", r.seconds);
    free(r.out);
}

Test(comm, nccl_without_a_gpu_should_fail_with_a_message, .timeout = 90)
{
    if (exec_device_cuda_available() > 0) cr_skip_test("skipped: a CUDA device is present");
    Run r = mpirun(1, "collectives --nccl");
    cr_expect_eq(r.status, 2, "%s", r.out);
    cr_expect(strstr(r.out, "no CUDA device for NCCL") || strstr(r.out, "built without NCCL"), "%s", r.out);
    free(r.out);
}

Test(comm, nccl_should_pass_every_collective_check_on_the_gpu, .timeout = 120)
{
    int ngpu = exec_device_cuda_available();
    if (ngpu == 0) cr_skip_test("skipped: no CUDA device");
    expect_all_ok(1, "collectives --nccl");
    if (ngpu >= 2) expect_all_ok(2, "collectives --nccl");
}

/* ---- SELF: one process, no MPI ---- */

/* A 96 MiB block (over glibc's 32 MiB mmap threshold, over a thread arena's 64 MiB heap)
 * freed and requested again on a thread other than main, as the progress thread's MPI scratch
 * is: the second touch must not fault the pages in again. Page faults of this thread only. */
static void *refault(void *arg)
{
    size_t bytes = (size_t)96 << 20;
    long *faults = arg;
    char *volatile p = malloc(bytes);   /* volatile: the compiler may not drop malloc, memset, free */
    if (!p) return NULL;
    memset(p, 1, bytes);
    free(p);
    struct rusage u0, u1;
    getrusage(RUSAGE_THREAD, &u0);
    p = malloc(bytes);
    if (!p) return NULL;
    memset(p, 2, bytes);
    getrusage(RUSAGE_THREAD, &u1);
    if (p[bytes - 1] == 2) *faults = u1.ru_minflt - u0.ru_minflt;
    free(p);
    return NULL;
}

Test(comm, create_should_keep_freed_host_memory_for_the_next_step)
{
#ifdef __SANITIZE_ADDRESS__
    cr_skip_test("ASan's allocator maps and unmaps large blocks itself: glibc's policy does not apply");
#endif
    char err[256];
    Comm *c = comm_create(COMM_SELF, NULL, NULL, 5.0, err, sizeof err);
    cr_assert_not_null(c, "%s", err);
    long faults = -1;
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, refault, &faults), 0);
    pthread_join(th, NULL);
    cr_assert_geq(faults, 0, "the 96 MiB block could not be allocated");
    /* 24,576 pages when glibc maps the block afresh */
    cr_expect_lt(faults, 1000, "a freed 96 MiB block was faulted in again: %ld page faults", faults);
    comm_destroy(c);
}

Test(comm, self_should_copy_count_and_put_nothing_on_the_wire)
{
    char err[128];
    Comm *c = comm_create(COMM_SELF, NULL, NULL, 5.0, err, sizeof err);
    cr_assert_not_null(c, "%s", err);
    cr_expect_eq(comm_size(c), 1);
    cr_expect_eq(comm_rank(c), 0);
    cr_expect_eq(comm_local_rank(c), 0);
    CommCounters *cc = prof_comm_create(1);
    comm_set_counters(c, cc);
    float a[8] = {1, 2, 3, 4, 5, 6, 7, 8}, b[8] = {0};
    cr_expect_eq(comm_all_reduce(c, a, b, 8, DT_F32, NULL), 0);
    cr_expect_arr_eq(a, b, sizeof a);
    CommReq *req = NULL;
    memset(b, 0, sizeof b);
    cr_expect_eq(comm_reduce_scatter(c, a, b, 8, DT_F32, &req), 0);
    cr_expect_eq(comm_outstanding(c), 1);
    comm_progress(c);
    cr_expect_eq(comm_wait(c, req), 0);
    cr_expect_arr_eq(a, b, sizeof a);
    cr_expect_eq(comm_all_gather(c, a, b, 8, DT_BF16, NULL), 0);   /* 16 bytes */
    size_t counts[1] = {8}, displs[1] = {0};
    cr_expect_eq(comm_all_gather_v(c, a, b, counts, displs, DT_F32), 0);
    cr_expect_eq(comm_broadcast(c, a, 8, DT_F32, 0), 0);
    cr_expect_eq(comm_broadcast(c, a, 8, DT_F32, 1), -1, "root 1 does not exist");
    cr_expect_eq(comm_barrier(c), 0);
    int bad = 5;
    cr_expect_eq(comm_check_same(c, 42, &bad), 0);
    cr_expect_eq(bad, -1);

    cr_expect_eq(prof_comm_total(cc, COLL_ALL_REDUCE).payload_bytes, 32);
    cr_expect_eq(prof_comm_total(cc, COLL_REDUCE_SCATTER).payload_bytes, 32);
    cr_expect_eq(prof_comm_total(cc, COLL_ALL_GATHER).payload_bytes, 16);
    cr_expect_eq(prof_comm_total(cc, COLL_ALL_GATHER_V).payload_bytes, 32);
    cr_expect_eq(prof_comm_total(cc, COLL_BROADCAST).count, 1);
    cr_expect_eq(prof_comm_total(cc, COLL_BARRIER).count, 1);
    for (int op = 0; op < COLL_COUNT; op++) cr_expect_eq(prof_comm_total(cc, (CollKind)op).wire_bytes, 0);
    comm_destroy(c);
    prof_comm_destroy(cc);
}

Test(comm, dtypes_should_have_the_sizes_of_their_c_types_and_distinct_names)
{
    cr_expect_eq(exec_dtype_size(DT_F32), sizeof(float));
    cr_expect_eq(exec_dtype_size(DT_F64), sizeof(double));
    cr_expect_eq(exec_dtype_size(DT_I32), sizeof(int32_t));
    cr_expect_eq(exec_dtype_size(DT_U8), sizeof(uint8_t));
    cr_expect_eq(exec_dtype_size(DT_BF16), sizeof(uint16_t), "bf16 moves as 2-byte units");
    cr_expect_eq(exec_dtype_size(DT_F16), sizeof(uint16_t));
    cr_expect_str_eq(exec_dtype_name(DT_BF16), "bf16");
    for (int a = 0; a < DT_COUNT; a++) {
        cr_expect_str_neq(exec_dtype_name((DType)a), "unknown", "type %d has no name", a);
        for (int b = 0; b < a; b++)
            cr_expect_str_neq(exec_dtype_name((DType)a), exec_dtype_name((DType)b), "types %d and %d", a, b);
    }
    cr_expect_eq(exec_dtype_size(DT_COUNT), 0, "out of range: no size");
    cr_expect_str_eq(exec_dtype_name(DT_COUNT), "unknown");
}

/* ---- launcher detection (exec_launch.h) ---- */

/* No launcher variable left, then the given NAME=VALUE pairs set. */
static void launched_with(const char *const *vars)
{
    for (size_t i = 0; i < EXEC_LAUNCHER_COUNT; i++)
        for (int k = 0; k < EXEC_LAUNCH_VALUES; k++)
            if (EXEC_LAUNCHERS[i].var[k]) unsetenv(EXEC_LAUNCHERS[i].var[k]);
    for (; vars && vars[0]; vars += 2) setenv(vars[0], vars[1], 1);
}

Test(launch, launcher_detection_should_see_open_mpi_variables)
{
    launched_with((const char *const[]){"OMPI_COMM_WORLD_RANK", "3", "OMPI_COMM_WORLD_SIZE", "8",
                                         "OMPI_COMM_WORLD_LOCAL_RANK", "1", "OMPI_COMM_WORLD_LOCAL_SIZE", "2",
                                         "PMIX_RANK", "3", NULL});
    cr_assert(exec_launched_by_mpi());
    cr_expect_str_eq(exec_launcher()->name, "Open MPI");
    cr_expect_eq(exec_launch_rank(-1), 3);
    cr_expect_eq(exec_launch_size(-1), 8);
    cr_expect_eq(exec_launch_local_rank(-1), 1);
    cr_expect_eq(exec_launch_local_size(-1), 2);
    cr_expect_eq(comm_launch_kind(), COMM_MPI);
}

Test(launch, launcher_detection_should_see_hydras_pmi_variables)
{
    launched_with((const char *const[]){"PMI_RANK", "5", "PMI_SIZE", "6", "MPI_LOCALRANKID", "2",
                                         "MPI_LOCALNRANKS", "3", NULL});
    cr_assert(exec_launched_by_mpi());
    cr_expect_eq(exec_launch_rank(-1), 5);
    cr_expect_eq(exec_launch_size(-1), 6);
    cr_expect_eq(exec_launch_local_rank(-1), 2);
    cr_expect_eq(exec_launch_local_size(-1), 3);
    cr_expect_eq(comm_launch_kind(), COMM_MPI);
}

Test(launch, a_pmix_launcher_should_give_its_rank_and_leave_the_sizes_to_the_default)
{
    launched_with((const char *const[]){"PMIX_RANK", "7", NULL});
    cr_assert(exec_launched_by_mpi());
    cr_expect_eq(exec_launch_rank(-1), 7);
    cr_expect_eq(exec_launch_size(-1), -1);
    cr_expect_eq(exec_launch_local_size(-1), -1);
}

Test(launch, a_process_started_by_hand_should_run_alone_even_inside_a_slurm_job)
{
    launched_with(NULL);
    setenv("SLURM_PROCID", "0", 1);
    cr_expect_not(exec_launched_by_mpi());
    cr_expect_null(exec_launcher());
    cr_expect_eq(exec_launch_rank(-1), -1);
    cr_expect_eq(exec_launch_local_size(1), 1);
    cr_expect_eq(comm_launch_kind(), COMM_SELF);
}

Test(launch, values_that_are_not_counts_should_read_as_the_default)
{
    launched_with((const char *const[]){"OMPI_COMM_WORLD_RANK", "x1", "OMPI_COMM_WORLD_SIZE", "-2",
                                         "OMPI_COMM_WORLD_LOCAL_SIZE", "", NULL});
    cr_expect(exec_launched_by_mpi(), "a launcher set its variables, whatever their values");
    cr_expect_eq(exec_launch_rank(-1), -1);
    cr_expect_eq(exec_launch_size(-1), -1);
    cr_expect_eq(exec_launch_local_size(-1), -1);
}
