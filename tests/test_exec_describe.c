/* test_exec_describe.c — combining the device descriptions taken before and after a run. */
#include <criterion/criterion.h>

#include "exec_describe.h"

static DeviceDesc desc(double rate, double cost)
{
    DeviceDesc d = {0};
    d.gemm_flops = 80e9 * rate;
    d.gemm_calls = 50;
    d.mem_bw = 10e9 * rate;
    d.opt_bw = 40e9 * rate;
    for (int k = 0; k < DESC_NCOLL; k++) {
        d.coll_bw[k] = (k + 1) * 1e9 * rate;
        d.coll_alpha_s[k] = (k + 1) * 1e-6 * cost;
    }
    d.alpha_s = 2e-6 * cost;
    d.bw = 2e9 * rate;
    d.sync_s = 50e-6 * cost;
    d.steal = 1.0 * cost;
    d.issue_s = 100e-6 * cost;
    d.seconds = 1.0;
    return d;
}

Test(describe, combine_should_keep_each_rate_from_the_quieter_measurement_and_average_the_costs_on_own_cores)
{
    /* the run's "after" description was hit by a burst: every rate halved, every cost tripled */
    DeviceDesc a = desc(0.5, 3), b = desc(1, 1), q = desc(1, 1);
    exec_describe_combine(&a, &b);
    cr_expect_float_eq(a.gemm_flops, q.gemm_flops, 1e-3);
    cr_expect_float_eq(a.mem_bw, q.mem_bw, 1e-3);
    cr_expect_float_eq(a.opt_bw, q.opt_bw, 1e-3);
    cr_expect_float_eq(a.bw, q.bw, 1e-3);
    for (int k = 0; k < DESC_NCOLL; k++) {
        cr_expect_float_eq(a.coll_bw[k], q.coll_bw[k], 1e-3, "collective %d", k);
        cr_expect_float_eq(a.coll_alpha_s[k], 2 * q.coll_alpha_s[k], 1e-15, "collective %d", k);
    }
    cr_expect_float_eq(a.alpha_s, 2 * q.alpha_s, 1e-15);
    cr_expect_float_eq(a.sync_s, 2 * q.sync_s, 1e-15);
    cr_expect_float_eq(a.steal, 2 * q.steal, 1e-12);
    cr_expect_float_eq(a.issue_s, 2 * q.issue_s, 1e-15);
    cr_expect_float_eq(a.seconds, 2.0, 1e-12);
    cr_expect_float_eq(a.gemm_calls, 50, 1e-12);
}

Test(describe, combine_should_not_depend_on_which_measurement_came_first)
{
    DeviceDesc a = desc(1, 1), b = desc(0.7, 2), c = desc(0.7, 2), d = desc(1, 1);
    exec_describe_combine(&a, &b);
    exec_describe_combine(&c, &d);
    cr_expect_float_eq(a.gemm_flops, c.gemm_flops, 1e-3);
    cr_expect_float_eq(a.coll_bw[DESC_RS], c.coll_bw[DESC_RS], 1e-3);
    cr_expect_float_eq(a.issue_s, c.issue_s, 1e-15);
}

Test(describe, combine_should_average_the_rates_of_ranks_that_share_the_cores)
{
    /* pooled ranks: the two differ by time slicing, which the run sees too: harmonic mean */
    DeviceDesc a = desc(0.5, 3), b = desc(1, 1), q = desc(1, 1);
    a.pooled = b.pooled = 1;
    exec_describe_combine(&a, &b);
    double h = 2.0 / (1.0 / 0.5 + 1.0);   /* 2/3 of the quiet rate */
    cr_expect_float_eq(a.gemm_flops, h * q.gemm_flops, 1e-3);
    cr_expect_float_eq(a.mem_bw, h * q.mem_bw, 1e-3);
    cr_expect_float_eq(a.opt_bw, h * q.opt_bw, 1e-3);
    cr_expect_float_eq(a.coll_bw[DESC_AG], h * q.coll_bw[DESC_AG], 1e-3);
    cr_expect_float_eq(a.sync_s, 2 * q.sync_s, 1e-15);
}
