/* test_plan_zoo.c — the zoo as a user meets it: every entry counts what transformers counts,
 * every published config of tests/data/hf is an entry and is compiled in byte for byte, names
 * are unique in any case and hub ids valid, lookups ignore case, and an unknown name gets the
 * nearest ones. Run from the repository root (tests/data/hf). */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "plan_load.h"
#include "plan_zoo.h"

static char msg[1024];

static char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "%s: run from the repository root", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    cr_assert_not_null(buf);
    cr_assert_eq(fread(buf, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    buf[n] = 0;
    return buf;
}

/* The entries with no published config of their own, counted by transformers 5.24.0 / torchvision
   0.29.2 on the meta device (sum of p.numel() over model.parameters()): GPT2LMHeadModel(GPT2Config(
   n_layer, n_embd, n_head, vocab_size, n_positions)), LlamaForCausalLM(LlamaConfig(...)),
   BertForMaskedLM(BertConfig(24, 1024, 16, 4096)), torchvision.models.resnet50(); the shapes are
   plan_zoo.c's tables. docs/models.md "Counts". */
static const struct { const char *name; double count; } BUILT[] = {
    {"gpt2-tiny", 120576},           {"gpt2-mini", 940800},           {"gpt2-medium", 354823168},
    {"gpt2-large", 774030080},       {"gpt2-xl", 1557611200},         {"llama2-13b", 13015864320.0},
    {"llama2-70b", 68976648192.0},   {"bert-large", 335174458},       {"resnet50", 25557032},
};

Test(plan_zoo, every_entry_should_count_the_parameters_transformers_counts, .timeout = 60) {
    char *text = slurp("tests/data/hf/counts.json");   /* scripts/hf_counts.py: transformers' own */
    cJSON *counts = cJSON_GetObjectItem(cJSON_Parse(text), "configs");
    cr_assert_not_null(counts);
    for (int i = 0; i < plan_zoo_count(); i++) {
        const ZooEntry *e = plan_zoo_entry(i);
        double want = -1;
        if (e->config) {
            char file[128];
            snprintf(file, sizeof file, "%s.json", e->config);
            cJSON *c = cJSON_GetObjectItem(counts, file);
            cr_assert_not_null(c, "%s: counts.json has no %s", e->name, file);
            want = cJSON_GetObjectItem(c, "total")->valuedouble;
        }
        for (size_t k = 0; k < sizeof BUILT / sizeof BUILT[0]; k++)
            if (strcmp(BUILT[k].name, e->name) == 0) {
                cr_expect_eq(want, -1, "%s has a config and a count of its own", e->name);
                want = BUILT[k].count;
            }
        cr_assert_neq(want, -1, "%s: no transformers count to hold it to", e->name);
        ModelSpec m;
        cr_assert_eq(plan_zoo_build_entry(&m, e, msg, sizeof msg), 0, "%s", msg);
        cr_expect_eq((double)plan_model_params(&m), want, "%s: %.0f, transformers %.0f", e->name,
                     (double)plan_model_params(&m), want);
        cr_expect_str_eq(m.source, "zoo");
        plan_model_free(&m);
    }
    free(text);
}

Test(plan_zoo, every_published_config_should_be_one_entry_and_compiled_in_as_it_is_on_disk) {
    DIR *d = opendir("tests/data/hf");
    cr_assert_not_null(d, "run from the repository root");
    int files = 0;
    for (struct dirent *de; (de = readdir(d));) {
        size_t n = strlen(de->d_name);
        if (n < 6 || strcmp(de->d_name + n - 5, ".json") != 0 || strcmp(de->d_name, "counts.json") == 0) continue;
        char stem[128], path[300];
        snprintf(stem, sizeof stem, "%.*s", (int)(n - 5), de->d_name);
        snprintf(path, sizeof path, "tests/data/hf/%s", de->d_name);
        const char *compiled = plan_zoo_config_text(stem);
        cr_assert_not_null(compiled, "%s is not compiled in (make rebuilds build/gen/plan_zoo_configs.c)", path);
        char *disk = slurp(path);
        cr_expect_str_eq(compiled, disk, "%s: the compiled text differs from the file", path);
        free(disk);
        int entries = 0;
        for (int i = 0; i < plan_zoo_count(); i++)
            entries += plan_zoo_entry(i)->config && strcmp(plan_zoo_entry(i)->config, stem) == 0;
        cr_expect_eq(entries, 1, "%s: %d zoo entries (every published config is exactly one)", path, entries);
        files++;
    }
    closedir(d);
    cr_expect_eq(files, plan_zoo_config_count(), "files on disk %d, compiled in %d", files, plan_zoo_config_count());
    cr_expect_geq(files, 49);
    for (int i = 0; i < plan_zoo_count(); i++) {
        const ZooEntry *e = plan_zoo_entry(i);
        cr_expect(!e->config || plan_zoo_config_text(e->config), "%s: its config %s is not compiled in", e->name, e->config);
    }
}

/* What the zoo builds from a compiled-in config is what loading the file builds: memplan's model
   JSON of both (every field but the source) is the same text, the name apart. */
Test(plan_zoo, an_entry_should_build_what_its_config_file_builds_named_by_its_hub_id) {
    int compared = 0;
    for (int i = 0; i < plan_zoo_count(); i++) {
        const ZooEntry *e = plan_zoo_entry(i);
        if (!e->config) continue;
        char path[300];
        snprintf(path, sizeof path, "tests/data/hf/%s.json", e->config);
        ModelSpec z, f;
        cr_assert_eq(plan_zoo_build_entry(&z, e, msg, sizeof msg), 0, "%s", msg);
        cr_assert_eq(plan_load_model(&f, path, msg, sizeof msg), 0, "%s", msg);
        if (!plan_zoo_from_config(e)) {   /* gpt2, llama2-7b, bert-base: shape tables (test_plan_load compares layers) */
            cr_expect_eq(plan_model_params(&z), plan_model_params(&f), "%s", e->name);
            cr_expect_eq(z.n_layers, f.n_layers, "%s", e->name);
        } else {
            cr_expect_str_eq(z.name, e->hub_id);
            snprintf(f.name, sizeof f.name, "%s", z.name);
            char *a = NULL, *b = NULL;
            cr_assert_eq(plan_model_export_json(&z, &a), 0);
            cr_assert_eq(plan_model_export_json(&f, &b), 0);
            cr_expect_str_eq(a, b, "%s: the zoo's model differs from %s's", e->name, path);
            free(a);
            free(b);
            compared++;
        }
        plan_model_free(&z);
        plan_model_free(&f);
    }
    cr_expect_geq(compared, 46);
}

Test(plan_zoo, names_should_be_unique_in_any_case_and_hub_ids_valid) {
    for (int i = 0; i < plan_zoo_count(); i++) {
        const ZooEntry *e = plan_zoo_entry(i);
        cr_expect(e->family && e->family[0] && e->source && e->source[0], "%s: a family and a source", e->name);
        for (const char *p = e->name; *p; p++) cr_expect(*p < 'A' || *p > 'Z', "%s: an alias is lower case", e->name);
        cr_expect(!strchr(e->name, '/'), "%s: an alias has no '/' (that is a hub id's)", e->name);
        cr_expect(!e->hub_id || plan_hub_id_valid(e->hub_id), "%s: hub id '%s'", e->name, e->hub_id);
        cr_expect_eq(plan_zoo_find(e->name), e, "%s", e->name);
        if (e->hub_id) cr_expect_eq(plan_zoo_find(e->hub_id), e, "%s", e->hub_id);
        for (int k = 0; k < i; k++) {
            const ZooEntry *o = plan_zoo_entry(k);
            cr_expect(strcasecmp(e->name, o->name) != 0, "alias %s twice", e->name);
            cr_expect(!e->hub_id || !o->hub_id || strcasecmp(e->hub_id, o->hub_id) != 0, "hub id %s twice", e->hub_id);
        }
    }
}

Test(plan_zoo, lookups_should_ignore_case_for_aliases_and_hub_ids) {
    cr_expect_str_eq(plan_zoo_find("QWEN3-30B-A3B")->name, "qwen3-30b-a3b");
    cr_expect_str_eq(plan_zoo_find("qwen/qwen3-30b-a3b")->name, "qwen3-30b-a3b");
    cr_expect_str_eq(plan_zoo_find("Meta-Llama/Llama-3.1-8B")->name, "llama3.1-8b");
    cr_expect_null(plan_zoo_find("llama-3.1-8b"));   /* the hub name without its organisation: suggested, not taken */
    cr_expect_null(plan_zoo_find(""));
    ModelSpec m;
    cr_assert_eq(plan_zoo_build(&m, "LLAMA3.1-8B", msg, sizeof msg), 0, "%s", msg);
    cr_expect_str_eq(m.name, "meta-llama/Llama-3.1-8B");
    cr_expect_eq(plan_model_params(&m), 8030261248LL);
    plan_model_free(&m);
}

Test(plan_zoo, an_unknown_name_should_get_the_nearest_names_first_those_containing_it) {
    static const struct { const char *name, *nearest; } CASES[] = {
        {"qwen3-30b", "qwen3-30b-a3b, qwen3-32b, qwen3-8b"},
        {"mixtral", "mixtral-8x7b, mixtral-8x22b"},
        {"Llama-3.1-8B", "meta-llama/Llama-3.1-8B, meta-llama/Llama-3.1-70B, meta-llama/Llama-3.2-1B"},
        {"meta-llama/Llama-3-8B", "meta-llama/Meta-Llama-3-8B, meta-llama/Llama-3.1-8B, meta-llama/Llama-3.2-1B"},
        {"gpt5", "gpt2"},
        {"zzzzzz", ""},
    };
    char buf[256];
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++)
        cr_expect_str_eq(plan_zoo_nearest(CASES[i].name, buf, sizeof buf), CASES[i].nearest, "%s", CASES[i].name);
    ModelSpec m;
    cr_expect_eq(plan_zoo_build(&m, "qwen3-30b", msg, sizeof msg), -1);
    cr_expect(strstr(msg, "unknown model 'qwen3-30b' (nearest: qwen3-30b-a3b,"), "%s", msg);
    cr_expect_eq(m.layers, NULL);
    cr_expect_eq(plan_zoo_build(&m, "zzzzzz", msg, sizeof msg), -1);
    cr_expect(strstr(msg, "unknown model 'zzzzzz' (`memplan models` lists all"), "%s", msg);
}

Test(plan_zoo, families_should_be_known_in_any_case_and_listed_once) {
    char buf[1024];
    cr_expect(plan_zoo_family_known("qwen3"));
    cr_expect(plan_zoo_family_known("Llama3"));
    cr_expect(!plan_zoo_family_known("qwen"));
    plan_zoo_families(buf, sizeof buf);
    cr_expect(strstr(buf, "llama3, llama4") && strstr(buf, "qwen3"), "%s", buf);
    cr_expect_null(strstr(strstr(buf, "qwen3") + 5, "qwen3,"), "%s", buf);
    int qwen3 = 0;
    for (int i = 0; i < plan_zoo_count(); i++) qwen3 += strcmp(plan_zoo_entry(i)->family, "qwen3") == 0;
    cr_expect_eq(qwen3, 7, "Qwen3's dense and MoE models");
}
