/* test_docs.c — the documentation cannot go stale silently: every `$ memplan` example in
 * README.md and the docs folder is run and its shown output compared with the binary's, figures
 * included, and docs/json.md names every key the JSON writes (scripts/docs_examples.py, run on
 * $BUILD/memplan). The checker itself fails on a changed figure, honours '...' and rewrites an
 * example with --update. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static char out[1 << 16];

/* Runs the checker with args (stdout + stderr in out); returns its exit status. */
static int check(const char *args) {
    const char *b = getenv("BUILD");
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "python3 scripts/docs_examples.py --memplan %s/memplan %s 2>&1", b && *b ? b : "build", args);
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(p);
    size_t n = fread(out, 1, sizeof out - 1, p);
    out[n] = 0;
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static const char *put(const char *text) {
    static char path[64];
    snprintf(path, sizeof path, "/tmp/memplan_docs_XXXXXX.md");
    int fd = mkstemps(path, 3);
    cr_assert_geq(fd, 0);
    cr_assert_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    return path;
}

static char *slurp(const char *path) {
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f);
    static char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = 0;
    fclose(f);
    return buf;
}

Test(docs, every_example_in_the_readme_and_docs_should_match_the_binary, .timeout = 60) {
    cr_expect_eq(check(""), 0, "%s", out);
    cr_expect(strstr(out, " examples in ") && strstr(out, ", 0 failing"), "%s", out);
}

Test(docs, a_changed_figure_should_fail_and_update_should_rewrite_it) {
    const char *f = put("# t\n\n```\n$ memplan --model gpt2 --gpus 8 --quiet\nfits: ddp, peak 9.99 GiB of 40.00 GiB per GPU\n```\n");
    char args[256];
    snprintf(args, sizeof args, "--files %s", f);
    cr_expect_eq(check(args), 1, "%s", out);
    cr_expect(strstr(out, ".md:4: $ memplan --model gpt2 --gpus 8 --quiet: expected 'fits: ddp, peak 9.99 GiB"), "%s", out);
    snprintf(args, sizeof args, "--files %s --update", f);
    cr_expect_eq(check(args), 0, "%s", out);
    snprintf(args, sizeof args, "--files %s", f);
    cr_expect_eq(check(args), 0, "%s", out);
    cr_expect(strstr(slurp(f), "\nfits: ") && !strstr(slurp(f), "9.99 GiB"), "%s", slurp(f));
    unlink(f);
}

Test(docs, elided_lines_should_match_any_lines_and_a_wrong_one_should_fail) {
    const char *ok = put("```\n$ memplan --model gpt2-xl --gpus 8\n...\nrecommendation: memplan --model gpt2-xl --gpus 8 --strategy fsdp-grad-op\n...\n```\n");
    char args[256];
    snprintf(args, sizeof args, "--files %s", ok);
    cr_expect_eq(check(args), 0, "%s", out);
    unlink(ok);
    const char *bad = put("```\n$ memplan --model gpt2-xl --gpus 8\n...\nrecommendation: memplan --model gpt2-xl --gpus 8 --strategy ddp\n...\n```\n");
    snprintf(args, sizeof args, "--files %s", bad);
    cr_expect_eq(check(args), 1, "%s", out);
    cr_expect(strstr(out, "shown line not found"), "%s", out);
    unlink(bad);
    /* without a closing '...' the output must end where the shown lines do */
    const char *cut = put("```\n$ memplan --model gpt2-xl --gpus 8\n...\nstrategy      params   grads    comm   optim   activ transnt  overhd    peak fits headroom\n```\n");
    snprintf(args, sizeof args, "--files %s", cut);
    cr_expect_eq(check(args), 1, "%s", out);
    cr_expect(strstr(out, "the output goes on"), "%s", out);
    unlink(cut);
}
