/* test_cli_hostile.c — the hostile pass over the surface of issues 23, 25-29 and 36, as a user
 * trying to break memplan would make it: every case of tests/hostile/cases.tsv (written by
 * tests/hostile/gen_cases.py: configs and recipes from public repositories, YAML alias bombs,
 * 100,000-deep brackets, FIFOs and devices as inputs, duplicate and merge keys, wrong types, every
 * numeric flag beyond its range, emitters that cannot express a pick, quantized bases under each
 * strategy, planning-only flags given to run and validate, malformed allocation traces) is run
 * under a time limit, and each must keep the contract: no crash and no hang, exit 0, 1 or 2; after
 * an error nothing on standard output and a last line "memplan: ..."; every line on standard
 * error a "memplan: " or "#" line; no inf or nan in a plan; --json output that parses; plus the
 * case's own exit status and the words its message must hold.
 * Short form (make test): the issue's own cases and every second other one; HOSTILE_FULL=1 runs all. */
#include <criterion/criterion.h>
#include <errno.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

static char tmp[64];

static char *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) { *len = 0; return strdup(""); }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    *len = b ? fread(b, 1, (size_t)n, f) : 0;
    if (b) b[*len] = 0;
    fclose(f);
    return b;
}

/* ARGS with $F, $T, $C, $H, $D replaced by their folders. */
static void expand(const char *in, char *out, size_t len) {
    static const struct { const char *var, *path; } V[] = {
        {"$F", "tests/hostile/fixtures"}, {"$T", NULL}, {"$C", "tests/data/configs"}, {"$H", "tests/data/hf"}, {"$D", "tests/data"},
    };
    size_t o = 0;
    while (*in && o + 1 < len) {
        int done = 0;
        for (size_t i = 0; i < sizeof V / sizeof V[0] && !done; i++)
            if (strncmp(in, V[i].var, 2) == 0) {
                o += (size_t)snprintf(out + o, len - o, "%s", V[i].path ? V[i].path : tmp);
                in += 2;
                done = 1;
            }
        if (!done) out[o++] = *in++;
    }
    out[o < len ? o : len - 1] = 0;
}

/* One failure of the contract or of the case, appended to msg. */
static void bad(char *msg, size_t len, const char *what) {
    size_t o = strlen(msg);
    snprintf(msg + o, len - o, "%s%s", o ? "; " : "", what);
}

Test(cli_hostile, every_case_should_keep_the_contract_and_its_own_expectation, .timeout = 1500) {
    snprintf(tmp, sizeof tmp, "/tmp/memplan-hostile-XXXXXX");
    cr_assert_not_null(mkdtemp(tmp));
    char path[256], cmd[8192], args[6000], msg[2048];
    snprintf(path, sizeof path, "%s/fifo", tmp);
    cr_assert_eq(mkfifo(path, 0600), 0);
    snprintf(path, sizeof path, "%s/big.yaml", tmp);   /* 5 MiB: past the 4 MiB bound */
    FILE *big = fopen(path, "w");
    cr_assert_not_null(big);
    for (int i = 0; i < (5 << 20) / 5 + 10; i++) fputs("a: b\n", big);
    fclose(big);
    const char *b = getenv("BUILD"), *full = getenv("HOSTILE_FULL");
    FILE *f = fopen("tests/hostile/cases.tsv", "r");
    cr_assert_not_null(f, "tests/hostile/cases.tsv: run from the repository root (make test)");
    char line[8192];
    int n = 0, ran = 0, failed = 0, other = 0;
    regex_t nonfinite;
    cr_assert_eq(regcomp(&nonfinite, "(^|[^A-Za-z_])(-?inf|-?nan)([^A-Za-z_]|$)", REG_EXTENDED | REG_NEWLINE), 0);
    while (fgets(line, sizeof line, f)) {
        if (line[0] == '#' || line[0] == '\n') continue;
        line[strcspn(line, "\n")] = 0;
        char *save = NULL, *exp = strtok_r(line, "\t", &save), *a = strtok_r(NULL, "\t", &save);
        char *words = strtok_r(NULL, "\t", &save), *note = strtok_r(NULL, "\t", &save);
        cr_assert(exp && a && words && note, "case %d: four tab-separated fields", n);
        n++;
        int issue = strncmp(note, "item", 4) == 0;
        if (!issue && !full && (other++ % 2)) continue;   /* the short form */
        ran++;
        expand(a, args, sizeof args);
        snprintf(cmd, sizeof cmd, "timeout 60 %s/memplan %s >%s/out 2>%s/err </dev/null", b && *b ? b : "build", args, tmp, tmp);
        int st = system(cmd);
        int rc = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        size_t ol, el;
        snprintf(path, sizeof path, "%s/out", tmp);
        char *out = slurp(path, &ol);
        snprintf(path, sizeof path, "%s/err", tmp);
        char *err = slurp(path, &el);
        msg[0] = 0;
        char rcs[8];
        snprintf(rcs, sizeof rcs, "%d", rc);
        if (rc >= 124) bad(msg, sizeof msg, rc == 124 ? "hung (60 s)" : "crashed");
        else if (!strstr(exp, rcs)) { char w[64]; snprintf(w, sizeof w, "exit %d, not %s", rc, exp); bad(msg, sizeof msg, w); }
        if (rc != 0 && ol > 0) bad(msg, sizeof msg, "standard output after an error");
        /* every stderr line is memplan's ("memplan: ..." or a '#' line; under --emit deepspeed also the
           Python lines the config cannot hold); an error ends with its line */
        int code_ok = strstr(args, "--emit") != NULL;
        char *last = NULL;
        for (char *p = err; *p;) {
            char *e = strchr(p, '\n');
            size_t k = e ? (size_t)(e - p) : strlen(p);
            if (k && !code_ok && strncmp(p, "memplan: ", 9) != 0 && *p != '#') { bad(msg, sizeof msg, "a stray standard error line"); break; }
            if (k) last = p;
            p = e ? e + 1 : p + k;
        }
        if (rc == 2 && (!last || strncmp(last, "memplan: ", 9) != 0)) bad(msg, sizeof msg, "no 'memplan: ' error line");
        if (rc == 0 && regexec(&nonfinite, out, 0, NULL, 0) == 0) bad(msg, sizeof msg, "inf or nan in the output");
        if (rc == 0 && strstr(args, "--json") && !strstr(args, "--json=")) {
            cJSON *j = cJSON_Parse(out);
            if (!j) bad(msg, sizeof msg, "--json output that does not parse");
            cJSON_Delete(j);
        }
        if (strcmp(words, "-") != 0 && !strstr(err, words)) {
            char w[300];
            snprintf(w, sizeof w, "standard error lacks '%.200s'", words);
            bad(msg, sizeof msg, w);
        }
        if (msg[0]) {
            failed++;
            cr_log_error("case %d [%s] memplan %.300s: %s\n    stderr: %.400s", n, note, args, msg, err);
        }
        free(out);
        free(err);
    }
    fclose(f);
    regfree(&nonfinite);
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmp);
    if (system(cmd)) {}
    cr_log_info("hostile pass: %d of %d cases run (%s), %d failing", ran, n, full ? "HOSTILE_FULL" : "short form", failed);
    cr_expect_geq(n, 500, "at least 500 cases (tests/hostile/gen_cases.py), found %d", n);
    cr_expect_eq(failed, 0, "%d of %d cases broke the contract (see the log above)", failed, ran);
}
