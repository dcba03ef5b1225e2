/* test_prof_mem.c — the tracked allocator: categories, the breakdown at the moment of the total
 * peak, per-phase peaks, the limit (NULL + OOM record), the capped timeline, free(NULL). */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "prof_mem.h"

#define MiB ((size_t)1 << 20)

typedef struct {
    int allocs, frees;
    int fail_next;       /* the raw allocation refuses once */
} HostCtx;

static void *host_alloc(void *ctx, size_t bytes)
{
    HostCtx *h = ctx;
    if (h->fail_next) {
        h->fail_next = 0;
        return NULL;
    }
    h->allocs++;
    return malloc(bytes);
}

static void host_free(void *ctx, void *p)
{
    ((HostCtx *)ctx)->frees++;
    free(p);
}

static HostCtx ctx;
static MemTracker *new_tracker(size_t limit)
{
    memset(&ctx, 0, sizeof ctx);
    MemTracker *t = prof_mem_create(host_alloc, host_free, &ctx, limit);
    cr_assert_not_null(t);
    return t;
}

Test(prof_mem, categories_should_have_their_json_names)
{
    cr_expect_str_eq(prof_mem_category_name(MEM_PARAMS), "params");
    cr_expect_str_eq(prof_mem_category_name(MEM_GRADS), "grads");
    cr_expect_str_eq(prof_mem_category_name(MEM_OPTIMIZER), "optimizer");
    cr_expect_str_eq(prof_mem_category_name(MEM_ACTIVATIONS), "activations");
    cr_expect_str_eq(prof_mem_category_name(MEM_COMM), "comm");
    cr_expect_str_eq(prof_mem_category_name(MEM_WORKSPACE), "workspace");
}

Test(prof_mem, should_count_current_bytes_per_category_and_return_them_on_free)
{
    MemTracker *t = new_tracker(0);
    void *p = prof_mem_alloc(t, MEM_PARAMS, 3 * MiB, "wte");
    void *g = prof_mem_alloc(t, MEM_GRADS, 2 * MiB, "grad wte");
    void *o = prof_mem_calloc(t, MEM_OPTIMIZER, 5 * MiB, "adam m");
    cr_assert(p && g && o);
    cr_expect_eq(((unsigned char *)o)[5 * MiB - 1], 0);
    cr_expect_eq(prof_mem_current(t, MEM_PARAMS), 3 * MiB);
    cr_expect_eq(prof_mem_current(t, MEM_GRADS), 2 * MiB);
    cr_expect_eq(prof_mem_current(t, MEM_OPTIMIZER), 5 * MiB);
    cr_expect_eq(prof_mem_current_total(t), 10 * MiB);
    MemCategory c;
    cr_expect_eq(prof_mem_size_of(t, g, &c), 2 * MiB);
    cr_expect_eq(c, MEM_GRADS);
    prof_mem_free(t, g);
    cr_expect_eq(prof_mem_current(t, MEM_GRADS), 0);
    cr_expect_eq(prof_mem_peak(t, MEM_GRADS), 2 * MiB);
    cr_expect_eq(prof_mem_current_total(t), 8 * MiB);
    cr_expect_eq(prof_mem_size_of(t, g, NULL), 0);
    cr_expect_eq(prof_mem_live_count(t), 2);
    prof_mem_destroy(t);
    cr_expect_eq(ctx.frees, ctx.allocs, "destroy returns what is still live");
}

Test(prof_mem, free_of_null_and_zero_byte_requests_should_be_harmless)
{
    MemTracker *t = new_tracker(0);
    prof_mem_free(t, NULL);
    cr_expect_null(prof_mem_alloc(t, MEM_WORKSPACE, 0, "nothing"));
    cr_expect_eq(prof_mem_oom(t)->happened, 0);
    cr_expect_eq(prof_mem_current_total(t), 0);
    cr_expect_eq(ctx.allocs, 0);
    prof_mem_destroy(t);
}

Test(prof_mem, peak_breakdown_should_be_the_categories_at_the_total_peak_not_each_maximum)
{
    MemTracker *t = new_tracker(0);
    prof_mem_set_phase(t, "forward");
    void *p = prof_mem_alloc(t, MEM_PARAMS, 4 * MiB, "params");
    void *a = prof_mem_alloc(t, MEM_ACTIVATIONS, 10 * MiB, "acts");     /* total 14 */
    prof_mem_set_phase(t, "backward");
    prof_mem_free(t, a);                                                /* total 4 */
    void *g = prof_mem_alloc(t, MEM_GRADS, 8 * MiB, "grads");          /* total 12 */
    void *w = prof_mem_alloc(t, MEM_WORKSPACE, 1 * MiB, "ws");         /* total 13 */
    cr_expect_eq(prof_mem_peak_total(t), 14 * MiB);
    size_t b[MEM_CATEGORY_COUNT];
    prof_mem_peak_breakdown(t, b);
    cr_expect_eq(b[MEM_PARAMS], 4 * MiB);
    cr_expect_eq(b[MEM_ACTIVATIONS], 10 * MiB);
    cr_expect_eq(b[MEM_GRADS], 0, "grads peaked later, below the total peak");
    cr_expect_eq(b[MEM_WORKSPACE], 0);
    cr_expect_eq(prof_mem_peak(t, MEM_GRADS), 8 * MiB);
    cr_expect_str_eq(prof_mem_peak_phase(t), "forward");
    prof_mem_free(t, p);
    prof_mem_free(t, g);
    prof_mem_free(t, w);
    prof_mem_destroy(t);
}

Test(prof_mem, phase_peaks_should_be_the_highest_total_while_in_each_phase)
{
    MemTracker *t = new_tracker(0);
    void *p = prof_mem_alloc(t, MEM_PARAMS, 2 * MiB, "params");         /* init: 2 */
    prof_mem_set_phase(t, "forward");
    void *a = prof_mem_alloc(t, MEM_ACTIVATIONS, 6 * MiB, "acts");      /* forward: 8 */
    prof_mem_set_phase(t, "backward");
    void *g = prof_mem_alloc(t, MEM_GRADS, 2 * MiB, "grads");           /* backward: 10 */
    prof_mem_free(t, a);                                                /* 4 */
    prof_mem_set_phase(t, "optimizer");                                 /* enters at 4 */
    void *w = prof_mem_alloc(t, MEM_WORKSPACE, 1 * MiB, "tmp");         /* optimizer: 5 */
    prof_mem_free(t, w);
    prof_mem_set_phase(t, "forward");                                   /* second step */
    void *a2 = prof_mem_alloc(t, MEM_ACTIVATIONS, 7 * MiB, "acts");     /* forward: 11 */
    cr_expect_eq(prof_mem_phase_peak(t, "init"), 2 * MiB);
    cr_expect_eq(prof_mem_phase_peak(t, "forward"), 11 * MiB);
    cr_expect_eq(prof_mem_phase_peak(t, "backward"), 10 * MiB);
    cr_expect_eq(prof_mem_phase_peak(t, "optimizer"), 5 * MiB);
    cr_expect_eq(prof_mem_phase_peak(t, "never"), 0);
    cr_expect_str_eq(prof_mem_phase(t), "forward");
    const char *names[8];
    cr_expect_eq(prof_mem_phases(t, names, 8), 4);
    cr_expect_str_eq(names[0], "init");
    cr_expect_str_eq(names[3], "optimizer");

    prof_mem_free(t, a2);
    prof_mem_reset_peaks(t);                                            /* total 4 */
    cr_expect_eq(prof_mem_peak_total(t), 4 * MiB);
    cr_expect_eq(prof_mem_peak(t, MEM_ACTIVATIONS), 0);
    cr_expect_eq(prof_mem_phase_peak(t, "forward"), 4 * MiB);
    cr_expect_eq(prof_mem_phase_peak(t, "backward"), 0);
    prof_mem_free(t, p);
    prof_mem_free(t, g);
    prof_mem_destroy(t);
}

Test(prof_mem, crossing_the_limit_should_return_null_and_record_the_first_oom)
{
    MemTracker *t = new_tracker(16 * MiB);
    cr_expect_eq(prof_mem_limit(t), 16 * MiB);
    prof_mem_set_phase(t, "forward");
    void *p = prof_mem_alloc(t, MEM_PARAMS, 6 * MiB, "params");
    void *a = prof_mem_alloc(t, MEM_ACTIVATIONS, 8 * MiB, "h.0.attn");
    cr_assert(p && a);
    prof_mem_set_phase(t, "backward");
    cr_expect_null(prof_mem_alloc(t, MEM_GRADS, 3 * MiB, "grad h.0.mlp"));
    cr_expect_eq(ctx.allocs, 2, "the refused request never reaches the device");
    cr_expect_null(prof_mem_alloc(t, MEM_COMM, 100 * MiB, "second"));   /* only the first is kept */
    cr_expect_not_null(prof_mem_alloc(t, MEM_WORKSPACE, 2 * MiB, "fits exactly"));
    cr_expect_eq(prof_mem_current_total(t), 16 * MiB);

    const MemOom *o = prof_mem_oom(t);
    cr_assert(o->happened);
    cr_expect_str_eq(o->phase, "backward");
    cr_expect_str_eq(o->what, "grad h.0.mlp");
    cr_expect_eq(o->category, MEM_GRADS);
    cr_expect_eq(o->request, 3 * MiB);
    cr_expect_eq(o->limit, 16 * MiB);
    cr_expect_eq(o->current_total, 14 * MiB);
    cr_expect_eq(o->current[MEM_ACTIVATIONS], 8 * MiB);

    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    prof_mem_print_oom(t, f, 3);
    fclose(f);
    cr_expect(strstr(buf, "rank 3: out of memory in phase backward: request 3.00 MiB for 'grad h.0.mlp' "
                          "(grads) with 14.00 MiB of 16.00 MiB in use") != NULL, "%s", buf);
    cr_expect(strstr(buf, "activations") && strstr(buf, "8.00 MiB"), "%s", buf);
    free(buf);
    prof_mem_destroy(t);
}

Test(prof_mem, a_refusing_device_should_be_recorded_as_oom_without_a_limit)
{
    MemTracker *t = new_tracker(0);
    ctx.fail_next = 1;
    cr_expect_null(prof_mem_alloc(t, MEM_OPTIMIZER, 1 * MiB, "adam v"));
    const MemOom *o = prof_mem_oom(t);
    cr_expect(o->happened);
    cr_expect_eq(o->limit, 0);
    cr_expect_str_eq(o->phase, "init");
    cr_expect_eq(prof_mem_current_total(t), 0);
    prof_mem_destroy(t);
}

Test(prof_mem, bytes_should_format_in_binary_units)
{
    char b[32];
    prof_mem_format_bytes(b, sizeof b, 512);
    cr_expect_str_eq(b, "512 B");
    prof_mem_format_bytes(b, sizeof b, 1536);
    cr_expect_str_eq(b, "1.50 KiB");
    prof_mem_format_bytes(b, sizeof b, 24.0 * (1 << 30));
    cr_expect_str_eq(b, "24.00 GiB");
}

Test(prof_mem, timeline_should_stay_within_its_cap_and_keep_the_peak)
{
    MemTracker *t = new_tracker(0);
    cr_assert_eq(prof_mem_set_timeline_cap(t, 64), 0);
    void *hold[16] = {0};
    /* 20000 events; one tall spike in the middle. */
    for (int i = 0; i < 10000; i++) {
        void *p = prof_mem_alloc(t, MEM_WORKSPACE, 1024 + (size_t)(i % 7) * 64, "w");
        if (i == 5000)
            for (int k = 0; k < 16; k++) hold[k] = prof_mem_alloc(t, MEM_COMM, 1 * MiB, "spike");
        if (i == 5001)
            for (int k = 0; k < 16; k++) prof_mem_free(t, hold[k]);
        prof_mem_free(t, p);
    }
    int n;
    const MemSample *s = prof_mem_timeline(t, &n);
    cr_expect(n > 16 && n <= 64 + 1, "n = %d", n);
    size_t hi = 0;
    for (int i = 0; i < n; i++) {
        if (s[i].total > hi) hi = s[i].total;
        if (i) cr_expect(s[i].t_us >= s[i - 1].t_us);
        size_t sum = 0;
        for (int c = 0; c < MEM_CATEGORY_COUNT; c++) sum += s[i].by_cat[c];
        cr_expect_eq(sum, s[i].total);
    }
    cr_expect_eq(hi, prof_mem_peak_total(t), "the coalesced timeline still shows the peak");
    cr_expect_eq(prof_mem_current_total(t), 0);
    prof_mem_destroy(t);
}

Test(prof_mem, many_live_pointers_should_be_tracked_through_map_growth_and_removal)
{
    MemTracker *t = new_tracker(0);
    enum { N = 5000 };
    void **p = malloc(N * sizeof *p);
    size_t expect = 0;
    for (int i = 0; i < N; i++) {
        p[i] = prof_mem_alloc(t, (MemCategory)(i % MEM_CATEGORY_COUNT), (size_t)i + 1, "x");
        expect += (size_t)i + 1;
    }
    for (int i = 0; i < N; i += 2) {   /* free every other one, then check the rest by lookup */
        prof_mem_free(t, p[i]);
        expect -= (size_t)i + 1;
    }
    cr_expect_eq(prof_mem_current_total(t), expect);
    for (int i = 1; i < N; i += 2) cr_expect_eq(prof_mem_size_of(t, p[i], NULL), (size_t)i + 1);
    for (int i = 1; i < N; i += 2) prof_mem_free(t, p[i]);
    cr_expect_eq(prof_mem_current_total(t), 0);
    cr_expect_eq(prof_mem_live_count(t), 0);
    cr_expect_eq(ctx.frees, N);
    free(p);
    prof_mem_destroy(t);
}
