/* test_prof_comm.c — collective counters: nccl-tests wire-byte factors, per-phase sums. */
#include <criterion/criterion.h>
#include <stdio.h>

#include "prof_comm.h"

#define MB 1e6

Test(prof_comm, wire_bytes_should_use_the_nccl_tests_factors)
{
    /* all-reduce 2(n-1)/n, reduce-scatter and all-gather (n-1)/n of the full buffer,
     * broadcast 1, all_gather_v as all-gather, barrier 0. */
    cr_expect_float_eq(coll_wire_bytes(COLL_ALL_REDUCE, 100 * MB, 4), 150 * MB, 1e-6);
    cr_expect_float_eq(coll_wire_bytes(COLL_ALL_REDUCE, 100 * MB, 2), 100 * MB, 1e-6);
    cr_expect_float_eq(coll_wire_bytes(COLL_REDUCE_SCATTER, 100 * MB, 4), 75 * MB, 1e-6);
    cr_expect_float_eq(coll_wire_bytes(COLL_ALL_GATHER, 100 * MB, 8), 87.5 * MB, 1e-6);
    cr_expect_float_eq(coll_wire_bytes(COLL_ALL_GATHER_V, 100 * MB, 8), 87.5 * MB, 1e-6);
    cr_expect_float_eq(coll_wire_bytes(COLL_BROADCAST, 100 * MB, 4), 100 * MB, 1e-6);
    cr_expect_float_eq(coll_wire_bytes(COLL_BARRIER, 100 * MB, 4), 0, 1e-12);
    /* all-to-all: the rank's send buffer, of which its own block stays (nccl-tests alltoall.cu) */
    cr_expect_float_eq(coll_wire_bytes(COLL_ALL_TO_ALL, 100 * MB, 4), 75 * MB, 1e-6);
}

Test(prof_comm, a_single_rank_should_put_nothing_on_the_wire)
{
    for (int op = 0; op < COLL_COUNT; op++)
        cr_expect_eq(coll_wire_bytes((CollKind)op, 1e9, 1), 0.0, "%s", coll_name((CollKind)op));
}

Test(prof_comm, names_should_be_the_json_names)
{
    cr_expect_str_eq(coll_name(COLL_ALL_REDUCE), "all_reduce");
    cr_expect_str_eq(coll_name(COLL_REDUCE_SCATTER), "reduce_scatter");
    cr_expect_str_eq(coll_name(COLL_ALL_GATHER), "all_gather");
    cr_expect_str_eq(coll_name(COLL_BROADCAST), "broadcast");
    cr_expect_str_eq(coll_name(COLL_ALL_GATHER_V), "all_gather_v");
    cr_expect_str_eq(coll_name(COLL_BARRIER), "barrier");
    cr_expect_str_eq(coll_name(COLL_ALL_TO_ALL), "all_to_all");
}

Test(prof_comm, records_should_sum_per_phase_and_over_phases)
{
    CommCounters *c = prof_comm_create(4);
    cr_expect_str_eq(prof_comm_current_phase(c), "none");
    prof_comm_set_phase(c, "forward");
    prof_comm_record(c, COLL_ALL_GATHER, 40, 0.5);
    prof_comm_set_phase(c, "backward");
    prof_comm_record(c, COLL_ALL_GATHER, 40, 0.25);
    prof_comm_record(c, COLL_REDUCE_SCATTER, 40, 1.0);
    prof_comm_record_in(c, "forward", COLL_ALL_REDUCE, 8, 0.125);   /* issued in forward */

    CollStats f = prof_comm_phase(c, COLL_ALL_GATHER, "forward");
    cr_expect_eq(f.count, 1);
    cr_expect_float_eq(f.payload_bytes, 40, 1e-12);
    cr_expect_float_eq(f.wire_bytes, 30, 1e-12);
    CollStats t = prof_comm_total(c, COLL_ALL_GATHER);
    cr_expect_eq(t.count, 2);
    cr_expect_float_eq(t.payload_bytes, 80, 1e-12);
    cr_expect_float_eq(t.wire_bytes, 60, 1e-12);
    cr_expect_float_eq(t.seconds, 0.75, 1e-12);
    cr_expect_float_eq(prof_comm_phase(c, COLL_ALL_REDUCE, "forward").wire_bytes, 12, 1e-12);
    cr_expect_eq(prof_comm_phase(c, COLL_ALL_REDUCE, "backward").count, 0);
    cr_expect_eq(prof_comm_phase(c, COLL_ALL_REDUCE, "nowhere").count, 0);

    const char *names[PROF_MAX_PHASES];
    cr_expect_eq(prof_comm_phases(c, names, PROF_MAX_PHASES), 2);
    cr_expect_str_eq(names[0], "forward");
    cr_expect_str_eq(names[1], "backward");

    prof_comm_reset(c);
    cr_expect_eq(prof_comm_total(c, COLL_ALL_GATHER).count, 0);
    cr_expect_str_eq(prof_comm_current_phase(c), "backward");
    prof_comm_destroy(c);
}

Test(prof_comm, phases_beyond_the_table_should_be_folded_into_other)
{
    CommCounters *c = prof_comm_create(2);
    char name[16];
    for (int i = 0; i < PROF_MAX_PHASES + 3; i++) {
        snprintf(name, sizeof name, "p%d", i);
        prof_comm_set_phase(c, name);
        prof_comm_record(c, COLL_BROADCAST, 1, 0);
    }
    const char *names[PROF_MAX_PHASES];
    cr_expect_eq(prof_comm_phases(c, names, PROF_MAX_PHASES), PROF_MAX_PHASES);
    cr_expect_str_eq(names[PROF_MAX_PHASES - 1], "other");
    cr_expect_eq(prof_comm_phase(c, COLL_BROADCAST, "p0").count, 1);
    cr_expect_eq(prof_comm_phase(c, COLL_BROADCAST, "other").count, 4);
    cr_expect_eq(prof_comm_total(c, COLL_BROADCAST).count, PROF_MAX_PHASES + 3);
    prof_comm_destroy(c);
}
