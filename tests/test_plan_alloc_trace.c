/* test_plan_alloc_trace.c — reading allocation sequences and replaying them through the
 * caching allocator model (planner/plan_alloc_trace.h). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "plan_alloc_trace.h"

#define MiB (1024ull * 1024ull)

static void read_text(const char *text, AllocTrace *t) {
    char err[256];
    FILE *f = fmemopen((void *)text, strlen(text), "r");
    cr_assert_not_null(f);
    int rc = plan_alloc_trace_read(f, t, err, sizeof err);
    fclose(f);
    cr_assert_eq(rc, 0, "%s", err);
}

static AllocReplay replay(const AllocTrace *t, const char *from) {
    PlanAllocConfig c;
    AllocReplay r;
    char err[256];
    plan_alloc_config_defaults(&c);
    cr_assert_eq(plan_alloc_replay(t, &c, from, &r, err, sizeof err), 0, "%s", err);
    return r;
}

/* A free belongs to the latest allocation at its address: the address handed out again is a
   new handle. */
Test(alloc_trace, a_free_should_close_the_latest_allocation_at_its_address) {
    AllocTrace t;
    read_text("# setup demo\n# peak_excl_backend 3072\na 1f00 1024\nf 1f00\na 1f00 2048\na 2f00 1024\nf 1f00\n", &t);
    cr_assert_eq(t.n, 5);
    cr_expect_eq(t.n_allocs, 3);
    cr_expect_eq(t.ev[1].kind, AEV_FREE);
    cr_expect_eq(t.ev[1].id, 0);
    cr_expect_eq(t.ev[4].id, 1);
    cr_expect_eq(t.harness_peak, 3072);
    cr_expect_str_eq(t.setup, "demo");
    AllocReplay r = replay(&t, NULL);
    cr_expect_eq(r.whole.max_requested, 3072);
    cr_expect_eq(r.whole.requested, 1024);
    plan_alloc_trace_free(&t);
}

/* x lines (gloo's in-collective buffers) and their frees are left out; a free of an address
   never allocated is dropped and counted. */
Test(alloc_trace, gloo_buffers_and_unmatched_frees_should_be_left_out) {
    AllocTrace t;
    read_text("a 10 512\nx 20 4096\nf 20\nf 30\nf 10\n", &t);
    cr_expect_eq(t.n, 2);
    cr_expect_eq(t.gloo_allocs, 1);
    cr_expect_eq(t.unmatched_frees, 1);
    AllocReplay r = replay(&t, NULL);
    cr_expect_eq(r.whole.max_requested, 512);
    plan_alloc_trace_free(&t);
}

Test(alloc_trace, a_bad_line_should_be_refused_with_its_number) {
    AllocTrace t;
    char err[256];
    const char *text = "a 10 512\nq 1 2\n";
    FILE *f = fmemopen((void *)text, strlen(text), "r");
    cr_assert_eq(plan_alloc_trace_read(f, &t, err, sizeof err), -1);
    fclose(f);
    cr_expect(strstr(err, "line 2") != NULL, "%s", err);
    text = "a 10 512 32\n";   /* streams are 0..31 */
    f = fmemopen((void *)text, strlen(text), "r");
    cr_expect_eq(plan_alloc_trace_read(f, &t, err, sizeof err), -1);
    fclose(f);
}

/* The window restarts the peaks at its marker (reset_peak_memory_stats); reserved stays a
   high-water mark of the whole trace. */
Test(alloc_trace, peaks_should_restart_at_the_window_marker) {
    AllocTrace t;
    read_text("m step1\na 10 41943040\nf 10\nm step2\na 20 1024\nf 20\n", &t);
    AllocReplay r = replay(&t, "step2");
    cr_expect(r.has_window);
    cr_expect_eq(r.window.max_requested, 1024);
    cr_expect_eq(r.whole.max_requested, 40 * MiB);
    cr_expect_eq(r.whole.max_reserved, 42 * MiB, "40 MiB cached + a 2 MiB small segment");
    plan_alloc_trace_free(&t);
}

/* r and s lines drive record_stream: the recorded block is reused only after "s 1". */
Test(alloc_trace, record_stream_lines_should_delay_reuse) {
    AllocTrace t;
    read_text("a 10 20971520\nr 10 1\nf 10\na 20 20971520\nf 20\ns 1\na 30 20971520\na 40 20971520\n", &t);
    AllocReplay r = replay(&t, NULL);
    cr_expect_eq(r.whole.max_reserved, 40 * MiB);
    plan_alloc_trace_free(&t);
}

/* A real sequence (bench/torch/harness.py --alloc-trace, gpt2-mini DDP fp32 on 2 gloo ranks):
   the replay's tensor peak over steps 2..3 is the harness's own figure to the byte, so the
   sequence is read whole and in order. The reserved figure is the model's prediction. */
Test(alloc_trace, a_harness_trace_should_replay_to_the_harness_peak) {
    AllocTrace t;
    char err[256];
    FILE *f = fopen("tests/data/alloc/gpt2-mini_ddp_fp32_none_eager_r2_b1_s128.txt", "r");
    cr_assert_not_null(f, "run from the repository root");
    cr_assert_eq(plan_alloc_trace_read(f, &t, err, sizeof err), 0, "%s", err);
    fclose(f);
    AllocReplay r = replay(&t, "step2");
    cr_expect(r.has_window);
    cr_expect_eq(r.window.max_requested, t.harness_peak);
    cr_expect_eq(t.harness_peak, 25159000);
    cr_expect_geq(r.window.max_allocated, r.window.max_requested);
    cr_expect_geq(r.whole.max_reserved, r.window.max_allocated);
    cr_expect_eq(r.whole.max_reserved, 42 * MiB);
    plan_alloc_trace_free(&t);
}

/* ZeRO-2 (gpt2-mini, 2 gloo ranks, fp32): gloo's buffers all seen freed, so the replay's tensor
   peak is the harness's to the byte (2018923672 B). DeepSpeed's 2e9 B reduce bucket is one
   large-pool segment rounded to 2 MiB (954 x 2 MiB = 2000683008 B); the reserved figure is
   the model's prediction for the trace (docs/formulas.md, the replay table: 1938 MiB). */
Test(alloc_trace, a_zero2_trace_should_replay_to_the_harness_peak) {
    AllocTrace t;
    char err[256];
    FILE *f = fopen("tests/data/alloc/gpt2-mini_zero2_fp32_none_eager_r2_b1_s128.txt", "r");
    cr_assert_not_null(f, "run from the repository root");
    cr_assert_eq(plan_alloc_trace_read(f, &t, err, sizeof err), 0, "%s", err);
    fclose(f);
    AllocReplay r = replay(&t, "step2");
    cr_expect_eq(t.harness_peak, 2018923672ull);
    cr_expect_eq(r.window.max_requested, t.harness_peak);
    cr_expect_eq(r.whole.max_reserved, 1938 * MiB);
    plan_alloc_trace_free(&t);
}
