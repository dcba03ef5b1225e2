/* cli_model.c — a model by name, path or hub id, fetching a hub model's config.json when the
 * local Hugging Face cache lacks it (cli_model.h). */
#include "cli_model.h"

#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/wait.h>
#include <unistd.h>

#include "plan_load.h"
#include "plan_zoo.h"

/* huggingface_hub's _is_true: "1", "ON", "YES", "TRUE" in any case */
static int env_true(const char *var) {
    const char *v = getenv(var);
    static const char *const YES[] = {"1", "on", "yes", "true"};
    for (size_t i = 0; v && i < sizeof YES / sizeof YES[0]; i++)
        if (strcasecmp(v, YES[i]) == 0) return 1;
    return 0;
}

/* memplan-fetch beside this program's resolved path; -1 if /proc/self/exe is unreadable. */
static int fetch_path(char *out, size_t len) {
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) return -1;
    self[n] = 0;
    return snprintf(out, len, "%s/memplan-fetch", dirname(self)) < (int)len ? 0 : -1;
}

/* memplan-fetch's exit statuses (cli/memplan_fetch.c) after which the nearest zoo names may be
   what the user meant: the hub has no such model, or the hub could not be asked */
enum { FETCH_NO_SUCH_MODEL = 3, FETCH_UNREACHABLE = 4 };

/* Runs memplan-fetch for repo at revision into cache: its exit status (0: written), or -1 when it
   could not start; otherwise its one-line reason in msg (its "memplan-fetch: ORG/NAME: " dropped:
   the message names the model once). Its standard output (the path it wrote) is discarded: the
   caller finds the file through the cache, as transformers would. */
static int run_fetch(const char *repo, const char *revision, const char *cache, char *msg, size_t msglen) {
    char helper[PATH_MAX + 16] = "memplan-fetch";   /* named so in the message when its folder is unknown */
    if (fetch_path(helper, sizeof helper) || access(helper, X_OK)) {
        snprintf(msg, msglen, "%s: not in the Hugging Face cache (%s), and %s, which fetches its config.json, is missing "
                 "(build it: make); or give --model the path of a config.json", repo, cache, helper);
        return -1;
    }
    int pipefd[2];
    if (pipe(pipefd)) {
        snprintf(msg, msglen, "%s: cannot start %s: %s", repo, helper, strerror(errno));
        return -1;
    }
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        close(pipefd[0]);
        close(pipefd[1]);
        snprintf(msg, msglen, "%s: cannot start %s: %s", repo, helper, strerror(errno));
        return -1;
    }
    if (pid == 0) {
        dup2(pipefd[1], STDERR_FILENO);
        if (!freopen("/dev/null", "w", stdout)) _exit(127);
        close(pipefd[0]);
        close(pipefd[1]);
        execl(helper, helper, "--revision", revision ? revision : "main", "--cache", cache, repo, (char *)NULL);
        fprintf(stderr, "memplan-fetch: %s: cannot start %s: %s\n", repo, helper, strerror(errno));
        _exit(127);
    }
    close(pipefd[1]);
    char out[4096];
    size_t n = 0;
    ssize_t got;
    while ((got = read(pipefd[0], out + n, sizeof out - 1 - n)) > 0 || (got < 0 && errno == EINTR))
        if (got > 0) n += (size_t)got;
    close(pipefd[0]);
    out[n] = 0;
    int status;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return 0;
    int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    while (n > 0 && (out[n - 1] == '\n' || out[n - 1] == '\r')) out[--n] = 0;
    char *line = strrchr(out, '\n');   /* its last line is the reason */
    line = line ? line + 1 : out;
    /* "memplan-fetch: ORG/NAME: why" -> "why" */
    static const char PREFIX[] = "memplan-fetch: ";
    if (strncmp(line, PREFIX, sizeof PREFIX - 1) == 0) line += sizeof PREFIX - 1;
    if (strncmp(line, repo, strlen(repo)) == 0 && strncmp(line + strlen(repo), ": ", 2) == 0) line += strlen(repo) + 2;
    if (!line[0])
        snprintf(msg, msglen, "%s: not in the Hugging Face cache (%s), and %s ended without a reason (%s %d)", repo, cache,
                 helper, WIFEXITED(status) ? "exit" : "signal", WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
    else
        snprintf(msg, msglen, "%s: not in the Hugging Face cache (%s), and %s", repo, cache, line);
    return code;
}

int cli_model_load(ModelSpec *m, const char *arg, const char *revision, char *msg, size_t msglen) {
    int rc = plan_load_model_at(m, arg, revision, msg, msglen);
    if (rc != PLAN_LOAD_NOT_CACHED) return rc ? -1 : 0;
    const ZooEntry *e = plan_zoo_find(arg);
    const char *repo = e && e->hub_id ? e->hub_id : arg;
    char cache[4096];
    if (plan_hub_cache_dir(cache, sizeof cache)) return -1;   /* msg already says why */
    if (env_true("HF_HUB_OFFLINE") || env_true("TRANSFORMERS_OFFLINE")) {
        snprintf(msg, msglen, "%s: not in the Hugging Face cache (%s), and %s is set: fetch its config.json where the hub "
                 "is reachable (`hf download %s config.json`) and copy that cache here, or give --model the path of a "
                 "config.json", repo, cache, env_true("HF_HUB_OFFLINE") ? "HF_HUB_OFFLINE" : "TRANSFORMERS_OFFLINE", repo);
        return -1;
    }
    int code = run_fetch(repo, revision, cache, msg, msglen);
    if (code == FETCH_NO_SUCH_MODEL || code == FETCH_UNREACHABLE) {   /* a typo of a zoo name? */
        char near[256];
        if (plan_zoo_nearest(repo, near, sizeof near)[0])
            snprintf(msg + strlen(msg), msglen - strlen(msg), " (nearest in the zoo, which needs no hub: %s)", near);
    }
    if (code) return -1;
    rc = plan_load_model_at(m, arg, revision, msg, msglen);
    if (rc == PLAN_LOAD_NOT_CACHED)
        snprintf(msg + strlen(msg), msglen - strlen(msg), ", although memplan-fetch reported it written there");
    return rc ? -1 : 0;
}
