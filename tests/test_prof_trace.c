/* test_prof_trace.c — the Chrome trace writer: valid JSON (parsed back with cJSON), one event
 * per recorded span, escaping, counters, the merge of several ranks, and the export of the
 * profiler's spans as trace events. */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "prof_export.h"
#include "prof_phase.h"
#include "prof_trace.h"

/* Parses a written trace and checks its frame; the caller deletes it. */
static cJSON *parse(char *buf)
{
    cJSON *j = cJSON_Parse(buf);
    cr_assert_not_null(j, "not JSON: %s", buf);
    cr_assert(cJSON_IsArray(cJSON_GetObjectItem(j, "traceEvents")));
    cr_expect_str_eq(cJSON_GetObjectItem(j, "displayTimeUnit")->valuestring, "ms");
    return j;
}

static int count_ph(const cJSON *events, const char *ph)
{
    int n = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, events) n += strcmp(cJSON_GetObjectItem(e, "ph")->valuestring, ph) == 0;
    return n;
}

Test(prof_trace, an_empty_trace_should_be_valid_json)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    cr_assert_eq(prof_trace_end(prof_trace_begin(f)), 0);
    fclose(f);
    cJSON *j = parse(buf);
    cr_expect_eq(cJSON_GetArraySize(cJSON_GetObjectItem(j, "traceEvents")), 0);
    cJSON_Delete(j);
    free(buf);
}

Test(prof_trace, every_span_should_become_one_complete_event_with_its_fields)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    TraceWriter *w = prof_trace_begin(f);
    prof_trace_process_name(w, 1, "rank 1");
    prof_trace_thread_name(w, 1, 0, "compute");
    const char *keys[] = {"bytes"};
    double vals[] = {4096};
    for (int i = 0; i < 10; i++)
        prof_trace_complete(w, "forward", "phase", 1, 0, 100.0 * i, 50.25, NULL, NULL, 0);
    prof_trace_complete(w, "all_reduce", "comm", 1, 1, 12.5, 7.125, keys, vals, 1);
    cr_expect_eq(prof_trace_event_count(w), 13);
    cr_assert_eq(prof_trace_end(w), 0);
    fclose(f);

    cJSON *j = parse(buf);
    cJSON *ev = cJSON_GetObjectItem(j, "traceEvents");
    cr_expect_eq(count_ph(ev, "X"), 11);
    cr_expect_eq(count_ph(ev, "M"), 2);
    cJSON *last = cJSON_GetArrayItem(ev, cJSON_GetArraySize(ev) - 1);
    cr_expect_str_eq(cJSON_GetObjectItem(last, "name")->valuestring, "all_reduce");
    cr_expect_str_eq(cJSON_GetObjectItem(last, "cat")->valuestring, "comm");
    cr_expect_eq(cJSON_GetObjectItem(last, "pid")->valueint, 1);
    cr_expect_eq(cJSON_GetObjectItem(last, "tid")->valueint, 1);
    cr_expect_float_eq(cJSON_GetObjectItem(last, "ts")->valuedouble, 12.5, 1e-9);
    cr_expect_float_eq(cJSON_GetObjectItem(last, "dur")->valuedouble, 7.125, 1e-9);
    cr_expect_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(last, "args"), "bytes")->valueint, 4096);
    cJSON_Delete(j);
    free(buf);
}

Test(prof_trace, strings_should_be_escaped)
{
    const char *nasty = "say \"hi\"\nback\\slash\ttab\x01 caf\xc3\xa9 bad\xff";
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    TraceWriter *w = prof_trace_begin(f);
    prof_trace_complete(w, nasty, "c\"at", 0, 0, 0, 1, NULL, NULL, 0);
    prof_trace_end(w);
    fclose(f);
    cr_expect(strstr(buf, "say \\\"hi\\\"\\nback\\\\slash\\ttab\\u0001") != NULL, "%s", buf);
    cJSON *j = parse(buf);
    cJSON *e = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "traceEvents"), 0);
    cr_expect_str_eq(cJSON_GetObjectItem(e, "name")->valuestring,
                     "say \"hi\"\nback\\slash\ttab\x01 caf\xc3\xa9 bad?");
    cr_expect_str_eq(cJSON_GetObjectItem(e, "cat")->valuestring, "c\"at");
    cJSON_Delete(j);
    free(buf);
}

Test(prof_trace, counters_should_carry_one_series_per_key)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    TraceWriter *w = prof_trace_begin(f);
    const char *keys[] = {"params", "grads"};
    double vals[] = {1024, 1.0 / 0.0};   /* infinity is not JSON: written as 0 */
    prof_trace_counter(w, "memory", 2, 5.0, keys, vals, 2);
    prof_trace_end(w);
    fclose(f);
    cJSON *j = parse(buf);
    cJSON *e = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "traceEvents"), 0);
    cr_expect_str_eq(cJSON_GetObjectItem(e, "ph")->valuestring, "C");
    cJSON *args = cJSON_GetObjectItem(e, "args");
    cr_expect_eq(cJSON_GetObjectItem(args, "params")->valueint, 1024);
    cr_expect_eq(cJSON_GetObjectItem(args, "grads")->valueint, 0);
    cJSON_Delete(j);
    free(buf);
}

Test(prof_trace, ranks_should_merge_into_one_file_with_pid_equal_to_rank)
{
    TraceEvent r0[2], r1[3];
    prof_trace_event_complete(&r0[0], "forward", "phase", 99, 0, 0, 10);
    prof_trace_event_complete(&r0[1], "all_reduce", "comm", 99, 1, 10, 5);
    prof_trace_event_arg(&r0[1], "bytes", 64);
    for (int i = 0; i < 3; i++) prof_trace_event_complete(&r1[i], "backward", "phase", 7, 0, i * 20.0, 15);
    prof_trace_event_counter(&r1[2], "memory", 7, 40);
    prof_trace_event_arg(&r1[2], "params", 100);
    const TraceEvent *all[] = {r0, r1};
    int counts[] = {2, 3};
    const char *lanes[] = {"compute", "comm"};

    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    cr_assert_eq(prof_trace_write_ranks(f, all, counts, 2, lanes, 2), 0);
    fclose(f);
    cJSON *j = parse(buf);
    cJSON *ev = cJSON_GetObjectItem(j, "traceEvents");
    cr_expect_eq(count_ph(ev, "X"), 4);
    cr_expect_eq(count_ph(ev, "C"), 1);
    int per_rank[2] = {0, 0}, names = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, ev) {
        const char *ph = cJSON_GetObjectItem(e, "ph")->valuestring;
        int pid = cJSON_GetObjectItem(e, "pid")->valueint;
        cr_assert(pid == 0 || pid == 1, "pid %d", pid);
        if (strcmp(ph, "M") != 0) per_rank[pid]++;
        else if (strcmp(cJSON_GetObjectItem(e, "name")->valuestring, "process_name") == 0) names++;
    }
    cr_expect_eq(per_rank[0], 2);
    cr_expect_eq(per_rank[1], 3);
    cr_expect_eq(names, 2);
    cJSON_Delete(j);
    free(buf);
}

Test(prof_trace, exported_spans_and_memory_should_write_one_event_each)
{
    PhaseTimer *t = prof_phase_create(0);
    for (int i = 0; i < 5; i++) {
        prof_phase_begin(t, "forward");
        prof_phase_end(t, "forward");
    }
    int n = prof_export_spans(t, 3, prof_phase_origin_us(t), NULL, 0);
    cr_assert_eq(n, 5);
    TraceEvent ev[5];
    cr_expect_eq(prof_export_spans(t, 3, prof_phase_origin_us(t), ev, 5), 5);
    cr_expect_eq(ev[4].pid, 3);
    cr_expect_str_eq(ev[4].cat, "phase");

    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    TraceWriter *w = prof_trace_begin(f);
    for (int i = 0; i < n; i++) prof_trace_event(w, &ev[i]);
    prof_trace_end(w);
    fclose(f);
    cJSON *j = parse(buf);
    cr_expect_eq(count_ph(cJSON_GetObjectItem(j, "traceEvents"), "X"), 5);
    cJSON_Delete(j);
    free(buf);
    prof_phase_destroy(t);
}
