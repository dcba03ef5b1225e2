/* test_cli_files.h — what the tests that hand memplan files share (test_cli_config.c,
 * test_cli_recipes.c): running build/memplan ($BUILD/memplan) with stdout in `out` and stderr in
 * `err`, writing a file into a fresh temporary directory, and reading the output as JSON.
 * Header-only; define TEST_CLI_FILES_DIR ("/tmp/memplan-xyz-XXXXXX") before including it. */
#ifndef TEST_CLI_FILES_H
#define TEST_CLI_FILES_H

#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static char out[1 << 20], err[1 << 16];
static char dir[64];

/* Runs memplan with args: stdout in out, stderr in err; returns the exit status. */
static int run(const char *args) {
    const char *b = getenv("BUILD");
    char cmd[8192], ef[128];
    snprintf(ef, sizeof ef, "%s/stderr", dir);
    snprintf(cmd, sizeof cmd, "%s/memplan %s 2>%s", b && *b ? b : "build", args, ef);
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(p);
    size_t n = fread(out, 1, sizeof out - 1, p);
    out[n] = 0;
    int st = pclose(p);
    FILE *e = fopen(ef, "r");
    n = e ? fread(err, 1, sizeof err - 1, e) : 0;
    err[n] = 0;
    if (e) fclose(e);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static int runf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int runf(const char *fmt, ...) {
    char args[8000];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    return run(args);
}

/* Writes text to dir/name; returns the path (eight calls' paths stay valid at once). */
static const char *put(const char *name, const char *text) {
    static char path[8][256];
    static int k;
    char *p = path[k++ % 8];
    snprintf(p, 256, "%s/%s", dir, name);
    FILE *f = fopen(p, "w");
    cr_assert_not_null(f);
    fputs(text, f);
    fclose(f);
    return p;
}

static void setup(void) {
    snprintf(dir, sizeof dir, "%s", TEST_CLI_FILES_DIR);
    cr_assert_not_null(mkdtemp(dir));
}

static void teardown(void) {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd)) {}
}

static cJSON *json_out(void) {
    cJSON *j = cJSON_Parse(out);
    cr_assert_not_null(j, "not JSON: %.300s / %.300s", out, err);
    return j;
}

#endif
