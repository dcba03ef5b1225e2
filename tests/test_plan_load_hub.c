/* test_plan_load_hub.c — `--model ORG/NAME` from the local Hugging Face cache, on a fake cache
 * folder laid out as huggingface_hub writes it (models--ORG--NAME/refs/main, snapshots/<commit>/
 * config.json -> ../../blobs/<etag>): where the cache is (HF_HUB_CACHE, HF_HOME, XDG_CACHE_HOME,
 * HOME, in huggingface_hub's order), revisions by branch and by commit, what is refused, and the
 * order zoo -> path -> cache. Criterion runs each test in its own process: the environment changes
 * stay there. Run from the repository root. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "plan_load.h"
#include "plan_zoo.h"

static char msg[1024];

/* path's text, its folders made first */
static void put(const char *path, const char *text) {
    char cmd[1100];
    snprintf(cmd, sizeof cmd, "mkdir -p \"$(dirname '%s')\"", path);
    cr_assert_eq(system(cmd), 0, "%s", cmd);
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f, "%s", path);
    fputs(text, f);
    fclose(f);
}

/* A llama of `layers` blocks (hidden 64, 4 heads, vocabulary 256): layers tells revisions apart. */
static void llama_config(char *buf, size_t len, int layers) {
    snprintf(buf, len, "{\"model_type\": \"llama\", \"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": 64, "
             "\"intermediate_size\": 128, \"num_hidden_layers\": %d, \"num_attention_heads\": 4, \"vocab_size\": 256, "
             "\"max_position_embeddings\": 512}", layers);
}

#define C1 "1111111111111111111111111111111111111111"
#define C2 "2222222222222222222222222222222222222222"

/* <cache>/models--acme--tiny: main at C1 (2 blocks, the file a link to its blob, as the hub's
   client writes it), branch v1 at C2 (3 blocks, a plain file), and a bare snapshot C3 (4 blocks) */
static void fake_cache(const char *cache) {
    char p[1024], cfg[512];
    llama_config(cfg, sizeof cfg, 2);
    snprintf(p, sizeof p, "%s/models--acme--tiny/blobs/abc123", cache);
    put(p, cfg);
    snprintf(p, sizeof p, "%s/models--acme--tiny/snapshots/" C1 "/config.json", cache);
    put(p, "");
    unlink(p);
    cr_assert_eq(symlink("../../blobs/abc123", p), 0);
    snprintf(p, sizeof p, "%s/models--acme--tiny/refs/main", cache);
    put(p, C1);   /* no newline, as huggingface_hub writes it */
    llama_config(cfg, sizeof cfg, 3);
    snprintf(p, sizeof p, "%s/models--acme--tiny/snapshots/" C2 "/config.json", cache);
    put(p, cfg);
    snprintf(p, sizeof p, "%s/models--acme--tiny/refs/v1", cache);
    put(p, C2 "\n");
    llama_config(cfg, sizeof cfg, 4);
    snprintf(p, sizeof p, "%s/models--acme--tiny/snapshots/3333/config.json", cache);
    put(p, cfg);
}

static void tmp(char *buf, size_t len) {
    snprintf(buf, len, "/tmp/memplan-hub-XXXXXX");
    cr_assert_not_null(mkdtemp(buf));
}

static void clean_env(void) {
    static const char *const VARS[] = {"HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME"};
    for (size_t i = 0; i < sizeof VARS / sizeof VARS[0]; i++) unsetenv(VARS[i]);
}

static int blocks_of(const char *arg, const char *rev) {
    ModelSpec m;
    int rc = plan_load_model_at(&m, arg, rev, msg, sizeof msg);
    cr_assert_eq(rc, 0, "%s @%s: %s", arg, rev ? rev : "main", msg);
    int n = m.n_layer;
    cr_expect_str_eq(m.name, arg, "a cached model is named by its hub id");
    cr_expect(strstr(m.source, "/snapshots/"), "%s", m.source);
    plan_model_free(&m);
    return n;
}

Test(plan_load_hub, hub_ids_should_be_org_slash_name_as_the_hub_spells_them) {
    static const char *const GOOD[] = {"meta-llama/Llama-3.1-8B", "Qwen/Qwen3-30B-A3B", "a/b", "google/t5-v1_1-base",
                                       "HuggingFaceTB/SmolLM3-3B", "org.x/name_y"};
    static const char *const BAD[] = {"gpt2", "/abs/path", "./rel/x", "a/b/c", "a//b", "a/", "/b", "a--b/c", "a/b..c",
                                      "-a/b", "a/b-", "a/.b", "a b/c", "a/config.json", "", "tests/data/hf/gpt2.json"};
    for (size_t i = 0; i < sizeof GOOD / sizeof GOOD[0]; i++) cr_expect(plan_hub_id_valid(GOOD[i]), "%s", GOOD[i]);
    for (size_t i = 0; i < sizeof BAD / sizeof BAD[0]; i++) cr_expect(!plan_hub_id_valid(BAD[i]), "%s", BAD[i]);
    cr_expect(plan_hub_revision_valid("main") && plan_hub_revision_valid("refs/pr/1") && plan_hub_revision_valid(C1));
    cr_expect(!plan_hub_revision_valid("../x") && !plan_hub_revision_valid("/x") && !plan_hub_revision_valid("a b") &&
              !plan_hub_revision_valid("") && !plan_hub_revision_valid("x/"));
}

/* huggingface_hub/constants.py: HF_HUB_CACHE > HUGGINGFACE_HUB_CACHE > HF_HOME/hub >
   $XDG_CACHE_HOME/huggingface/hub > ~/.cache/huggingface/hub, '~' expanded */
Test(plan_load_hub, the_cache_should_be_found_where_huggingface_hub_looks) {
    char dir[1024];
    clean_env();
    setenv("HOME", "/home/u", 1);
    cr_assert_eq(plan_hub_cache_dir(dir, sizeof dir), 0);
    cr_expect_str_eq(dir, "/home/u/.cache/huggingface/hub");
    setenv("XDG_CACHE_HOME", "/xdg", 1);
    plan_hub_cache_dir(dir, sizeof dir);
    cr_expect_str_eq(dir, "/xdg/huggingface/hub");
    setenv("HF_HOME", "~/hf", 1);
    plan_hub_cache_dir(dir, sizeof dir);
    cr_expect_str_eq(dir, "/home/u/hf/hub");
    plan_hub_home(dir, sizeof dir);
    cr_expect_str_eq(dir, "/home/u/hf");
    setenv("HUGGINGFACE_HUB_CACHE", "/legacy", 1);
    plan_hub_cache_dir(dir, sizeof dir);
    cr_expect_str_eq(dir, "/legacy");
    setenv("HF_HUB_CACHE", "/hub", 1);
    plan_hub_cache_dir(dir, sizeof dir);
    cr_expect_str_eq(dir, "/hub");
    plan_hub_repo_dir("/hub", "meta-llama/Llama-3.1-8B", dir, sizeof dir);
    cr_expect_str_eq(dir, "/hub/models--meta-llama--Llama-3.1-8B");
}

Test(plan_load_hub, a_cached_model_should_load_at_main_a_branch_or_a_commit) {
    char t[64], cache[128];
    tmp(t, sizeof t);
    snprintf(cache, sizeof cache, "%s/hub", t);
    fake_cache(cache);
    clean_env();
    setenv("HF_HOME", t, 1);   /* the cache is HF_HOME/hub */
    cr_expect_eq(blocks_of("acme/tiny", NULL), 2, "main -> refs/main -> C1, through the blob link");
    cr_expect_eq(blocks_of("acme/tiny", "v1"), 3, "a branch: refs/v1");
    cr_expect_eq(blocks_of("acme/tiny", C2), 3, "a commit: its snapshot");
    cr_expect_eq(blocks_of("acme/tiny", "3333"), 4, "a snapshot without a ref");
    char cmd[160];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", t);
    cr_expect_eq(system(cmd), 0);
}

Test(plan_load_hub, a_hub_id_not_cached_should_say_so_and_name_the_cache) {
    char t[64];
    tmp(t, sizeof t);
    clean_env();
    setenv("HF_HUB_CACHE", t, 1);
    fake_cache(t);
    ModelSpec m;
    cr_expect_eq(plan_load_model(&m, "acme/other", msg, sizeof msg), PLAN_LOAD_NOT_CACHED);
    cr_expect(strstr(msg, "acme/other: not in the Hugging Face cache (") && strstr(msg, t) && strstr(msg, "revision main"),
              "%s", msg);
    cr_expect_eq(m.layers, NULL);
    cr_expect_eq(plan_load_model_at(&m, "acme/tiny", "v2", msg, sizeof msg), PLAN_LOAD_NOT_CACHED);
    cr_expect(strstr(msg, "at revision v2"), "%s", msg);
    char cmd[160];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", t);
    cr_expect_eq(system(cmd), 0);
}

/* the zoo needs no cache; with --revision its hub id is looked up there (the zoo holds one) */
Test(plan_load_hub, a_zoo_model_should_load_without_a_cache_and_from_it_with_a_revision) {
    clean_env();
    setenv("HF_HUB_CACHE", "/nonexistent", 1);
    ModelSpec m;
    cr_assert_eq(plan_load_model(&m, "meta-llama/Llama-3.2-1B", msg, sizeof msg), 0, "%s", msg);
    cr_expect_str_eq(m.source, "zoo");
    plan_model_free(&m);
    cr_expect_eq(plan_load_model_at(&m, "llama3.2-1b", "v1", msg, sizeof msg), PLAN_LOAD_NOT_CACHED);
    cr_expect(strstr(msg, "meta-llama/Llama-3.2-1B: not in the Hugging Face cache (/nonexistent)"), "%s", msg);
}

Test(plan_load_hub, a_revision_should_be_refused_where_it_means_nothing) {
    static const struct { const char *arg, *rev, *says; } CASES[] = {
        {"tests/data/hf/gpt2.json", "v1", "--revision applies to a hub id ORG/NAME, not to the file tests/data/hf/gpt2.json"},
        {"gpt2-tiny", "v1", "--revision applies to a hub model: gpt2-tiny is not one"},
        {"acme/tiny", "../../etc", "--revision '../../etc': not a branch, tag or commit"},
    };
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) {
        ModelSpec m;
        cr_expect_eq(plan_load_model_at(&m, CASES[i].arg, CASES[i].rev, msg, sizeof msg), -1, "%s", CASES[i].arg);
        cr_expect(strstr(msg, CASES[i].says), "%s: %s", CASES[i].arg, msg);
        cr_expect_eq(m.layers, NULL);
    }
}

/* A folder ORG/NAME holding a config.json is a path (transformers' from_pretrained reads a local
   folder first too); the cache is asked only when there is none */
Test(plan_load_hub, a_local_folder_should_come_before_the_cache) {
    char t[64], cache[128], here[1024], cfg[512];
    tmp(t, sizeof t);
    snprintf(cache, sizeof cache, "%s/hub", t);
    fake_cache(cache);
    clean_env();
    setenv("HF_HUB_CACHE", cache, 1);
    cr_assert_not_null(getcwd(here, sizeof here));
    cr_assert_eq(chdir(t), 0);
    llama_config(cfg, sizeof cfg, 5);
    put("acme/tiny/config.json", cfg);
    ModelSpec m;
    cr_assert_eq(plan_load_model(&m, "acme/tiny", msg, sizeof msg), 0, "%s", msg);
    cr_expect_eq(m.n_layer, 5);
    cr_expect_str_eq(m.source, "acme/tiny/config.json");
    plan_model_free(&m);
    cr_assert_eq(chdir(here), 0);
    char cmd[160];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", t);
    cr_expect_eq(system(cmd), 0);
}
