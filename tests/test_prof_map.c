/* test_prof_map.c — the profiler's hash map: insert, lookup, replace, delete, growth, keys that
 * share a home slot (including a probe run that wraps past the table's end), delete then
 * re-insert, iteration, and a long random run checked against a plain array. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdlib.h>

#include "prof_map.h"

/* n keys (> after) whose home slot in a table of cap slots is `home`. */
static void keys_with_home(size_t cap, size_t home, uint64_t after, uint64_t *out, int n)
{
    for (uint64_t k = after + 1; n > 0; k++)
        if ((prof_map_hash(k) & (cap - 1)) == home) {
            *out++ = k;
            n--;
        }
}

Test(prof_map, an_empty_map_should_find_nothing_and_refuse_key_zero)
{
    ProfMap m = {0};
    uint64_t v = 7;
    cr_expect_eq(prof_map_get(&m, 42, &v), 0);
    cr_expect_eq(prof_map_take(&m, 42, &v), 0);
    cr_expect_eq(v, 7, "a miss leaves *val alone");
    cr_expect_eq(prof_map_put(&m, 0, 1), -1, "key 0 marks an empty slot");
    cr_expect_eq(prof_map_count(&m), 0);
    size_t pos = 0;
    cr_expect_eq(prof_map_next(&m, &pos, NULL, NULL), 0);
    prof_map_free(&m);
}

Test(prof_map, put_should_insert_or_replace_and_take_should_remove)
{
    ProfMap m = {0};
    cr_assert_eq(prof_map_put(&m, 0x7f0000001000, 4096), 0);
    cr_assert_eq(prof_map_put(&m, 0x7f0000002000, 8192), 0);
    cr_assert_eq(prof_map_put(&m, 0x7f0000001000, 1), 0, "the same key: replaced");
    cr_expect_eq(prof_map_count(&m), 2);
    uint64_t v = 0;
    cr_expect(prof_map_get(&m, 0x7f0000001000, &v));
    cr_expect_eq(v, 1);
    cr_expect(prof_map_take(&m, 0x7f0000002000, &v));
    cr_expect_eq(v, 8192);
    cr_expect_not(prof_map_get(&m, 0x7f0000002000, NULL));
    cr_expect_not(prof_map_take(&m, 0x7f0000002000, NULL), "taken once only");
    cr_expect_eq(prof_map_count(&m), 1);
    prof_map_free(&m);
    cr_expect_eq(prof_map_count(&m), 0);
    cr_expect_not(prof_map_get(&m, 0x7f0000001000, NULL));
}

Test(prof_map, growth_should_keep_every_key_and_value)
{
    ProfMap m = {0};
    enum { N = 20000 };
    for (uint64_t k = 1; k <= N; k++) cr_assert_eq(prof_map_put(&m, k * 64, k), 0);   /* aligned, like addresses */
    cr_expect_eq(prof_map_count(&m), N);
    cr_expect_geq(m.cap * 7, (size_t)N * 10, "load stays at or below 70 %%");
    cr_expect_eq(m.cap & (m.cap - 1), 0, "a power of two");
    for (uint64_t k = 1; k <= N; k++) {
        uint64_t v = 0;
        cr_assert(prof_map_get(&m, k * 64, &v), "key %llu lost", (unsigned long long)(k * 64));
        cr_assert_eq(v, k);
    }
    prof_map_free(&m);
}

Test(prof_map, deleting_inside_a_run_of_colliding_keys_should_keep_the_rest_reachable)
{
    ProfMap m = {0};
    cr_assert_eq(prof_map_put(&m, 1, 1), 0);   /* allocates the first table */
    prof_map_take(&m, 1, NULL);
    size_t cap = m.cap;
    uint64_t k[5];
    keys_with_home(cap, 10, 0, k, 5);          /* one run: slots 10..14 */
    for (int i = 0; i < 5; i++) cr_assert_eq(prof_map_put(&m, k[i], 100 + i), 0);
    cr_assert_eq(m.cap, cap, "no growth in this test");
    for (int i = 0; i < 5; i++) cr_expect_eq(m.slots[10 + i].key, k[i], "they share one probe run");
    /* the classic bug: removing the head of a run without moving the rest cuts them off */
    cr_expect(prof_map_take(&m, k[0], NULL));
    cr_expect(prof_map_take(&m, k[2], NULL));
    const int kept[] = {1, 3, 4};
    for (int j = 0; j < 3; j++) {
        uint64_t v = 0;
        cr_expect(prof_map_get(&m, k[kept[j]], &v), "k[%d] unreachable after the deletes", kept[j]);
        cr_expect_eq(v, 100 + (uint64_t)kept[j]);
    }
    cr_expect_eq(prof_map_count(&m), 3);
    /* deleted keys come back, and find their values, not stale ones */
    cr_assert_eq(prof_map_put(&m, k[0], 200), 0);
    cr_assert_eq(prof_map_put(&m, k[2], 202), 0);
    uint64_t v = 0;
    cr_expect(prof_map_get(&m, k[0], &v) && v == 200);
    cr_expect(prof_map_get(&m, k[2], &v) && v == 202);
    cr_expect_eq(prof_map_count(&m), 5);
    prof_map_free(&m);
}

Test(prof_map, a_run_that_wraps_past_the_end_should_survive_deletes)
{
    ProfMap m = {0};
    cr_assert_eq(prof_map_put(&m, 1, 1), 0);
    prof_map_take(&m, 1, NULL);
    size_t cap = m.cap;
    uint64_t last[3], first[2];
    keys_with_home(cap, cap - 2, 0, last, 3);   /* slots cap-2, cap-1, then 0 */
    keys_with_home(cap, 0, 0, first, 2);        /* home 0: pushed to slots 1, 2 */
    for (int i = 0; i < 3; i++) cr_assert_eq(prof_map_put(&m, last[i], i), 0);
    for (int i = 0; i < 2; i++) cr_assert_eq(prof_map_put(&m, first[i], 10 + i), 0);
    cr_expect_eq(m.slots[0].key, last[2], "the run wrapped to slot 0");
    cr_expect(prof_map_take(&m, last[0], NULL));   /* shifts last[1], last[2] back across the end */
    cr_expect_eq(m.slots[cap - 1].key, last[2]);
    cr_expect(prof_map_take(&m, last[1], NULL));
    uint64_t v;
    cr_expect(prof_map_get(&m, last[2], &v) && v == 2);
    cr_expect(prof_map_get(&m, first[0], &v) && v == 10);
    cr_expect(prof_map_get(&m, first[1], &v) && v == 11);
    cr_expect_eq(m.slots[2].key, 0, "the whole run moved back one slot with the first delete");
    prof_map_free(&m);
}

Test(prof_map, iteration_should_visit_every_key_once)
{
    ProfMap m = {0};
    enum { N = 300 };
    for (uint64_t k = 1; k <= N; k++) prof_map_put(&m, k, k * k);
    for (uint64_t k = 1; k <= N; k += 3) prof_map_take(&m, k, NULL);
    static int seen[N + 1];
    size_t pos = 0;
    uint64_t key, val;
    int n = 0;
    while (prof_map_next(&m, &pos, &key, &val)) {
        cr_assert(key >= 1 && key <= N && key % 3 != 1, "key %llu", (unsigned long long)key);
        cr_expect_eq(val, key * key);
        cr_expect_eq(seen[key]++, 0);
        n++;
    }
    cr_expect_eq(n, N - (N + 2) / 3);
    cr_expect_eq((size_t)n, prof_map_count(&m));
    prof_map_free(&m);
}

Test(prof_map, a_long_random_run_should_agree_with_a_plain_array)
{
    enum { KEYS = 512, OPS = 200000 };
    static uint64_t ref[KEYS];   /* value + 1 of key i + 1; 0: absent */
    ProfMap m = {0};
    srand(12345);
    for (int op = 0; op < OPS; op++) {
        int i = rand() % KEYS;
        uint64_t key = ((uint64_t)i + 1) << 12, v = (uint64_t)rand();
        switch (rand() % 3) {
        case 0:
            cr_assert_eq(prof_map_put(&m, key, v), 0);
            ref[i] = v + 1;
            break;
        case 1: {
            uint64_t got = 0;
            int had = prof_map_take(&m, key, &got);
            cr_assert_eq(had, ref[i] != 0, "take of key %d at op %d", i, op);
            if (had) cr_assert_eq(got + 1, ref[i]);
            ref[i] = 0;
            break;
        }
        default: {
            uint64_t got = 0;
            int has = prof_map_get(&m, key, &got);
            cr_assert_eq(has, ref[i] != 0, "get of key %d at op %d", i, op);
            if (has) cr_assert_eq(got + 1, ref[i]);
        }
        }
    }
    size_t live = 0;
    for (int i = 0; i < KEYS; i++) live += ref[i] != 0;
    cr_expect_eq(prof_map_count(&m), live);
    prof_map_free(&m);
}
