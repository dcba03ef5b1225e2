/* test_cli_model.c — `--model` as a user meets it: the zoo by alias or hub id, `memplan models`,
 * and a hub id fetched by memplan-fetch from a stand-in hub on 127.0.0.1 (tests/hub_server.py:
 * configs, a gated model, a 404, a slow answer, a redirect) into a fake cache folder, then planned
 * offline. The real hub is not reachable from the build machine; the stand-in answers as it does
 * (huggingface_hub itself downloads from it, last test). Runs build/memplan ($BUILD/memplan). */
#include <criterion/criterion.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "test_run.h"

typedef struct {
    pid_t pid;
    int port;
    char dir[64];            /* the served models (root/) and the caches */
    char log[128];           /* one line per request: METHOD PATH TOKEN */
    char cache[128];
} Hub;

static void put(const char *path, const char *text) {
    char cmd[1100];
    snprintf(cmd, sizeof cmd, "mkdir -p \"$(dirname '%s')\"", path);
    cr_assert_eq(system(cmd), 0);
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f, "%s", path);
    fputs(text, f);
    fclose(f);
}

static void llama(char *buf, size_t len, int layers) {
    snprintf(buf, len, "{\"model_type\": \"llama\", \"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": 64, "
             "\"intermediate_size\": 128, \"num_hidden_layers\": %d, \"num_attention_heads\": 4, \"vocab_size\": 256, "
             "\"max_position_embeddings\": 512}\n", layers);
}

/* Starts the stand-in hub on a free port and points this process's environment (which memplan
   inherits) at it, with a fresh cache and no token, proxy or offline switch. */
static void hub_start(Hub *h) {
    char p[256], cfg[512];
    snprintf(h->dir, sizeof h->dir, "/tmp/memplan-hubtest-XXXXXX");
    cr_assert_not_null(mkdtemp(h->dir));
    llama(cfg, sizeof cfg, 2);
    static const char *const MODELS[] = {"acme/tiny", "gated/tiny", "acme/slow", "acme/not-a-hub"};
    for (size_t i = 0; i < sizeof MODELS / sizeof MODELS[0]; i++) {
        snprintf(p, sizeof p, "%s/root/%s/config.json", h->dir, MODELS[i]);
        put(p, cfg);
    }
    llama(cfg, sizeof cfg, 3);
    snprintf(p, sizeof p, "%s/root/acme/tiny/v1/config.json", h->dir);
    put(p, cfg);
    snprintf(p, sizeof p, "%s/root/acme/old/moved-to", h->dir);   /* renamed: acme/old -> acme/tiny */
    put(p, "acme/tiny\n");
    snprintf(p, sizeof p, "%s/root/acme/noconf/README.md", h->dir);   /* a repository without config.json */
    put(p, "no config\n");
    snprintf(h->log, sizeof h->log, "%s/requests.log", h->dir);
    put(h->log, "");
    snprintf(h->cache, sizeof h->cache, "%s/cache", h->dir);
    int fd[2];
    cr_assert_eq(pipe(fd), 0);
    h->pid = fork();
    cr_assert_geq(h->pid, 0);
    if (h->pid == 0) {
        dup2(fd[1], STDOUT_FILENO);
        close(fd[0]);
        char root[128];
        snprintf(root, sizeof root, "%s/root", h->dir);
        execlp("python3", "python3", "tests/hub_server.py", root, h->log, (char *)NULL);
        _exit(127);
    }
    close(fd[1]);
    FILE *f = fdopen(fd[0], "r");
    cr_assert_eq(fscanf(f, "%d", &h->port), 1, "tests/hub_server.py did not start (run from the repository root)");
    fclose(f);
    char ep[64];
    snprintf(ep, sizeof ep, "http://127.0.0.1:%d", h->port);
    setenv("HF_ENDPOINT", ep, 1);
    setenv("HF_HUB_CACHE", h->cache, 1);
    setenv("HF_HOME", h->dir, 1);   /* no token file unless a test writes one */
    setenv("no_proxy", "127.0.0.1", 1);
    static const char *const UNSET[] = {"HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_TOKEN_PATH", "HF_HUB_OFFLINE",
                                        "TRANSFORMERS_OFFLINE", "HF_HUB_DOWNLOAD_TIMEOUT", "http_proxy", "HTTP_PROXY"};
    for (size_t i = 0; i < sizeof UNSET / sizeof UNSET[0]; i++) unsetenv(UNSET[i]);
}

static void hub_stop(Hub *h) {
    kill(h->pid, SIGKILL);
    waitpid(h->pid, NULL, 0);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", h->dir);
    cr_expect_eq(system(cmd), 0);
}

static Run memplan(const char *args) {
    char bin[PATH_MAX], cmd[PATH_MAX + 1024];
    test_sibling_path(bin, sizeof bin, "../memplan");
    snprintf(cmd, sizeof cmd, "timeout 60 %s %s 2>&1", bin, args);
    return test_run_cmd(cmd);
}

static int requests(const Hub *h) {
    FILE *f = fopen(h->log, "r");
    cr_assert_not_null(f);
    int n = 0, c;
    while ((c = fgetc(f)) != EOF) n += c == '\n';
    fclose(f);
    return n;
}

static void expect_one_line(Run r, int status, const char *fragment) {
    cr_expect_eq(r.status, status, "exit %d: %s", r.status, r.out);
    cr_expect(strstr(r.out, fragment), "expected \"%s\" in: %s", fragment, r.out);
    cr_expect_eq(test_count(r.out, "\n"), 1, "one line: %s", r.out);
}

Test(cli_model, a_hub_model_should_be_fetched_once_into_the_cache_layout_then_plan_offline) {
    Hub h;
    hub_start(&h);
    Run r = memplan("--model acme/tiny --gpus 2 --strategy ddp");
    cr_assert_eq(r.status, 0, "%s", r.out);
    cr_expect(strstr(r.out, "# model: acme/tiny (") && strstr(r.out, "/snapshots/"), "%s", r.out);
    cr_expect_eq(requests(&h), 1);
    /* the layout huggingface_hub writes: refs/main -> commit, snapshots/<commit>/config.json a
       relative link to blobs/<etag>, the blob the served bytes */
    char p[512], commit[128] = "", link[256], served[600], blob[600];
    snprintf(p, sizeof p, "%s/models--acme--tiny/refs/main", h.cache);
    FILE *f = fopen(p, "r");
    cr_assert_not_null(f, "%s", p);
    cr_assert(fgets(commit, sizeof commit, f));
    fclose(f);
    cr_expect_eq(strlen(commit), 40, "refs/main holds the commit, no newline: '%s'", commit);
    snprintf(p, sizeof p, "%s/models--acme--tiny/snapshots/%s/config.json", h.cache, commit);
    ssize_t n = readlink(p, link, sizeof link - 1);
    cr_assert_gt(n, 0, "%s is a link", p);
    link[n] = 0;
    cr_expect_eq(strncmp(link, "../../blobs/", 12), 0, "%s", link);
    f = fopen(p, "r");
    n = (ssize_t)fread(blob, 1, sizeof blob - 1, f);
    blob[n] = 0;
    fclose(f);
    llama(served, sizeof served, 2);
    cr_expect_str_eq(blob, served);
    /* the next run needs no hub */
    setenv("HF_ENDPOINT", "http://127.0.0.1:1", 1);
    r = memplan("--model acme/tiny --gpus 2 --strategy ddp --json");
    cr_expect_eq(r.status, 0, "%s", r.out);
    cr_expect_eq(requests(&h), 1, "the cached model planned without asking the hub");
    free(r.out);
    hub_stop(&h);
}

Test(cli_model, a_revision_should_be_fetched_and_cached_under_its_branch) {
    Hub h;
    hub_start(&h);
    /* main has 2 blocks (5 layers with the embedding, final norm and head), v1 3 */
    Run main_rev = memplan("--model acme/tiny --gpus 2 --strategy ddp --wide"), v1 = memplan("--model acme/tiny --revision v1 --gpus 2 --strategy ddp --wide");
    cr_assert_eq(v1.status, 0, "%s", v1.out);
    cr_expect(strstr(main_rev.out, "decoder, 5 layers; from "), "%s", main_rev.out);
    cr_expect(strstr(v1.out, "decoder, 6 layers; from "), "%s", v1.out);
    char p[256];
    struct stat st;
    snprintf(p, sizeof p, "%s/models--acme--tiny/refs/v1", h.cache);
    cr_expect_eq(stat(p, &st), 0, "refs/v1 written");
    cr_expect_eq(requests(&h), 2);
    expect_one_line(memplan("--model acme/tiny --revision nope --gpus 2 --strategy ddp"), 2, "has no revision 'nope' of it (404)");
    expect_one_line(memplan("--model tests/data/hf/gpt2.json --revision v1"), 2, "--revision applies to a hub id");
    expect_one_line(memplan("--revision v1 --gpus 2 --strategy ddp"), 2, "--revision 'v1' picks a revision of --model ORG/NAME");
    hub_stop(&h);
}

Test(cli_model, a_gated_model_should_ask_for_a_token_and_plan_with_one) {
    Hub h;
    hub_start(&h);
    expect_one_line(memplan("--model gated/tiny --gpus 2 --strategy ddp"), 2, "answered 401: no such model, or a gated or private one (no token was sent)");
    Run r = memplan("--model gated/tiny --gpus 2 --strategy ddp");
    cr_expect(strstr(r.out, "set HF_TOKEN") && strstr(r.out, "or give --model the path of a config.json"), "%s", r.out);
    setenv("HF_TOKEN", "someone-elses", 1);
    expect_one_line(memplan("--model gated/tiny --gpus 2 --strategy ddp"), 2, "answered 403: a gated model the token has no access to");
    unsetenv("HF_TOKEN");
    char p[128];
    snprintf(p, sizeof p, "%s/token", h.dir);   /* what `hf auth login` writes: HF_HOME/token */
    put(p, "good-token\n");
    r = memplan("--model gated/tiny --gpus 2 --strategy ddp");
    cr_expect_eq(r.status, 0, "%s", r.out);
    char *log = NULL;
    size_t cap = 0;
    FILE *f = fopen(h.log, "r");
    cr_assert_not_null(f);
    int sent = 0;
    while (getline(&log, &cap, f) > 0) sent += strstr(log, " good-token") != NULL;
    fclose(f);
    free(log);
    cr_expect_eq(sent, 1, "the token file's token was sent once");
    hub_stop(&h);
}

Test(cli_model, what_the_hub_does_not_have_should_get_one_line_and_the_nearest_zoo_names) {
    Hub h;
    hub_start(&h);
    expect_one_line(memplan("--model acme/noconf --gpus 2 --strategy ddp"), 2, "has no config.json at revision main (404)");
    expect_one_line(memplan("--model acme/nope --gpus 2 --strategy ddp"), 2, "acme/nope: not in the Hugging Face cache (");
    expect_one_line(memplan("--model meta-llama/Llama-3-8B --gpus 2 --strategy ddp"), 2,
                    "(nearest in the zoo, which needs no hub: meta-llama/Meta-Llama-3-8B,");
    expect_one_line(memplan("--model acme/not-a-hub --gpus 2 --strategy ddp"), 2, "is HF_ENDPOINT a hub?");
    Run r = memplan("--model acme/old --gpus 2 --strategy ddp");   /* a renamed repository: the hub's redirect */
    cr_expect_eq(r.status, 0, "%s", r.out);
    hub_stop(&h);
}

Test(cli_model, a_slow_or_absent_hub_should_fail_in_one_line_saying_how_to_plan_offline) {
    Hub h;
    hub_start(&h);
    setenv("HF_HUB_DOWNLOAD_TIMEOUT", "1", 1);   /* the stand-in answers acme/slow after 5 s */
    Run r = memplan("--model acme/slow --gpus 2 --strategy ddp");
    expect_one_line(r, 2, "did not answer within 1 s (HF_HUB_DOWNLOAD_TIMEOUT sets it)");
    cr_expect_lt(r.seconds, 4.0, "gave up after %.1f s", r.seconds);
    setenv("HF_ENDPOINT", "http://127.0.0.1:1", 1);
    r = memplan("--model acme/tiny --gpus 2 --strategy ddp");
    expect_one_line(r, 2, "cannot reach http://127.0.0.1:1");
    cr_expect(strstr(r.out, "`hf download acme/tiny config.json`") && strstr(r.out, "huggingface-cli download"), "%s", r.out);
    unsetenv("HF_HUB_DOWNLOAD_TIMEOUT");
    setenv("HF_HUB_OFFLINE", "1", 1);
    int before = requests(&h);
    expect_one_line(memplan("--model acme/tiny --gpus 2 --strategy ddp"), 2, "and HF_HUB_OFFLINE is set");
    cr_expect_eq(requests(&h), before);
    hub_stop(&h);
}

/* huggingface_hub's own client against the stand-in, and both caches read across: what
   memplan-fetch writes, huggingface_hub finds offline, and the reverse (the venv of make test) */
Test(cli_model, huggingface_hub_and_memplan_should_read_each_others_cache, .timeout = 120) {
    const char *e = getenv("MEMPLAN_TORCH_ENV"), *x = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    char py[PATH_MAX], cmd[PATH_MAX + 2048];
    if (e && *e) snprintf(py, sizeof py, "%s/bin/python", e);
    else if (x && *x) snprintf(py, sizeof py, "%s/memplan/torch-venv/bin/python", x);
    else snprintf(py, sizeof py, "%s/.cache/memplan/torch-venv/bin/python", home && *home ? home : "/root");
    snprintf(cmd, sizeof cmd, "'%s' -c 'import huggingface_hub' >/dev/null 2>&1", py);
    if (system(cmd) != 0) cr_skip_test("skipped: no huggingface_hub in %s (make torch-env)", py);
    Hub h;
    hub_start(&h);
    Run r = memplan("--model acme/tiny --revision v1 --gpus 2 --strategy ddp");
    cr_assert_eq(r.status, 0, "%s", r.out);
    snprintf(cmd, sizeof cmd, "HF_HUB_OFFLINE=1 '%s' -c \"from huggingface_hub import try_to_load_from_cache as t; "
             "p = t('acme/tiny', 'config.json', revision='v1'); print('found' if isinstance(p, str) else 'missing', p)\" 2>&1", py);
    Run hf = test_run_cmd(cmd);
    cr_expect(strstr(hf.out, "found ") && strstr(hf.out, h.cache), "huggingface_hub on memplan's cache: %s", hf.out);
    char other[160];
    snprintf(other, sizeof other, "%s/hf-cache", h.dir);
    snprintf(cmd, sizeof cmd, "HF_HUB_CACHE='%s' '%s' -c \"from huggingface_hub import hf_hub_download as d; "
             "print(d('gated/tiny', 'config.json', token='good-token'))\" 2>&1", other, py);
    hf = test_run_cmd(cmd);
    cr_assert_eq(hf.status, 0, "huggingface_hub against the stand-in: %s", hf.out);
    setenv("HF_HUB_CACHE", other, 1);
    setenv("HF_ENDPOINT", "http://127.0.0.1:1", 1);
    r = memplan("--model gated/tiny --gpus 2 --strategy ddp");
    cr_expect_eq(r.status, 0, "memplan on huggingface_hub's cache, offline: %s", r.out);
    hub_stop(&h);
}

Test(cli_model, the_planning_front_end_should_link_no_network_library) {
    char bin[PATH_MAX], fetch[PATH_MAX], cmd[PATH_MAX * 2];
    test_sibling_path(bin, sizeof bin, "../memplan");
    test_sibling_path(fetch, sizeof fetch, "../memplan-fetch");
    snprintf(cmd, sizeof cmd, "ldd '%s' 2>&1", bin);
    Run r = test_run_cmd(cmd);
    cr_expect_null(strstr(r.out, "libcurl"), "%s", r.out);
    cr_expect_null(strstr(r.out, "libssl"), "%s", r.out);
    snprintf(cmd, sizeof cmd, "ldd '%s' 2>&1", fetch);
    r = test_run_cmd(cmd);
    cr_expect(strstr(r.out, "libcurl"), "%s", r.out);
}

Test(cli_model, the_zoo_should_answer_to_aliases_and_hub_ids_in_any_case) {
    setenv("HF_ENDPOINT", "http://127.0.0.1:1", 1);   /* the zoo needs no hub and no cache */
    setenv("HF_HUB_CACHE", "/nonexistent", 1);
    static const char *const NAMES[] = {"llama3.1-8b", "LLAMA3.1-8B", "meta-llama/Llama-3.1-8B", "META-LLAMA/llama-3.1-8b"};
    for (size_t i = 0; i < sizeof NAMES / sizeof NAMES[0]; i++) {
        char args[128];
        snprintf(args, sizeof args, "--model %s --gpus 8", NAMES[i]);
        Run r = memplan(args);
        cr_expect_eq(r.status, 0, "%s: %s", NAMES[i], r.out);
        cr_expect(strstr(r.out, "# model: meta-llama/Llama-3.1-8B (8,030,261,248 parameters"), "%s: %s", NAMES[i], r.out);
    }
    expect_one_line(memplan("--model qwen3-30b --gpus 8"), 2, "unknown model 'qwen3-30b' (nearest: qwen3-30b-a3b, ");
    /* the PyTorch harness builds the shape-table models by name, the others from their file */
    expect_one_line(memplan("validate --against torch --model Qwen/Qwen3-0.6B --strategy ddp"), 2,
                    "--against torch takes qwen3-0.6b as its config file: --model tests/data/hf/qwen3-0.6b.json");
}

Test(cli_model, models_should_list_family_counts_and_context_and_filter_by_family) {
    Run r = memplan("models --family QWEN3");
    cr_assert_eq(r.status, 0, "%s", r.out);
    cr_expect_eq(test_count(r.out, "Qwen/Qwen3-"), 7, "%s", r.out);
    cr_expect(strstr(r.out, "qwen3-30b-a3b            Qwen/Qwen3-30B-A3B                   qwen3          30,532,122,624     "
                            "3,353,032,704     48     40960"), "%s", r.out);
    cr_expect(strstr(r.out, "# 7 models"), "%s", r.out);
    expect_one_line(memplan("models --family qwen"), 2, "--family 'qwen': no such family (valid: ");
    r = memplan("models --json");
    cr_assert_eq(r.status, 0);
    cJSON *j = cJSON_Parse(r.out), *o;
    cr_assert(cJSON_IsArray(j), "%s", r.out);
    int n = 0, moe = 0;
    cJSON_ArrayForEach(o, j) {
        cr_expect(cJSON_IsString(cJSON_GetObjectItem(o, "name")) && cJSON_GetObjectItem(o, "hub_id") &&
                  cJSON_IsString(cJSON_GetObjectItem(o, "family")) && cJSON_IsString(cJSON_GetObjectItem(o, "source")));
        double total = cJSON_GetObjectItem(o, "params")->valuedouble, active = cJSON_GetObjectItem(o, "active_params")->valuedouble;
        int experts = cJSON_GetObjectItem(o, "experts")->valueint;
        cr_expect(experts ? active < total : active == total, "%s", cJSON_GetObjectItem(o, "name")->valuestring);
        moe += experts > 0;
        n++;
    }
    cr_expect_geq(n, 58);
    cr_expect_geq(moe, 12);
    cJSON_Delete(j);
}
