/* test_prof_phase.c — phase timers: accumulated seconds and counts, nesting, span cap. */
#include <criterion/criterion.h>

#include "prof_phase.h"

static void spin_us(double us)
{
    double end = prof_clock_us() + us;
    while (prof_clock_us() < end) {
    }
}

Test(prof_phase, phases_should_accumulate_seconds_and_counts_and_nest)
{
    PhaseTimer *t = prof_phase_create(0);
    for (int step = 0; step < 3; step++) {
        cr_assert_eq(prof_phase_begin(t, "forward"), 0);
        spin_us(2000);
        cr_assert_eq(prof_phase_end(t, "forward"), 0);
        prof_phase_begin(t, "backward");
        prof_phase_begin_on(t, "comm_wait", PHASE_LANE_COMM);
        cr_expect_str_eq(prof_phase_current(t), "comm_wait");
        spin_us(1000);
        cr_expect_eq(prof_phase_end(t, "backward"), -1, "must close the innermost first");
        prof_phase_end(t, "comm_wait");
        prof_phase_end(t, NULL);
    }
    cr_expect_eq(prof_phase_end(t, NULL), -1, "nothing open");
    cr_expect_eq(prof_phase_count(t, "forward"), 3);
    cr_expect_eq(prof_phase_count(t, "comm_wait"), 3);
    cr_expect_geq(prof_phase_seconds(t, "forward"), 0.006);
    cr_expect_lt(prof_phase_seconds(t, "forward"), 0.5);
    cr_expect_geq(prof_phase_seconds(t, "backward"), prof_phase_seconds(t, "comm_wait"));
    cr_expect_eq(prof_phase_seconds(t, "nothing"), 0.0);
    int n;
    const PhaseSpan *s = prof_phase_spans(t, &n);
    cr_expect_eq(n, 9);
    cr_expect_str_eq(s[1].name, "comm_wait");
    cr_expect_eq(s[1].lane, PHASE_LANE_COMM);
    cr_expect_geq(s[1].start_us, s[0].start_us + s[0].dur_us);
    prof_phase_destroy(t);
}

Test(prof_phase, spans_beyond_the_cap_should_be_dropped_and_counted)
{
    PhaseTimer *t = prof_phase_create(4);
    for (int i = 0; i < 10; i++) prof_phase_record_span(t, "all_reduce", "comm", PHASE_LANE_COMM, i, 1);
    int n;
    prof_phase_spans(t, &n);
    cr_expect_eq(n, 4);
    cr_expect_eq(prof_phase_dropped(t), 6);
    prof_phase_destroy(t);
}

