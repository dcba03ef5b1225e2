/* plan_load_hub.c — where transformers keeps a hub model's files on this machine: the Hugging
 * Face cache folder (the environment variables huggingface_hub reads, in its order), a repo's
 * folder in it, and the cached config.json of a revision. Reads the file system only; fetching
 * from the hub is cli/memplan_fetch.c's (a program of its own, so that the planner links no
 * network library). Layout and variables: docs/models.md, from huggingface_hub's constants.py
 * and file_download.py (try_to_load_from_cache, _cache_commit_hash_for_specific_revision). */
#include <ctype.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "plan_load.h"

/* Like huggingface_hub's validate_repo_id, for the ORG/NAME form: letters, digits, '-', '_', '.'
 * on each side, not starting or ending with '-' or '.', no "--" or "..", at most 96 characters.
 * A NAME ending in ".json" reads as a file name, never as a repository. */
int plan_hub_id_valid(const char *s) {
    size_t n = s ? strlen(s) : 0;
    const char *slash = s ? strchr(s, '/') : NULL;
    if (n == 0 || n > 96 || !slash || strchr(slash + 1, '/') || strstr(s, "--") || strstr(s, "..")) return 0;
    if (n > 5 && strcmp(s + n - 5, ".json") == 0) return 0;
    for (const char *part = s; part; part = part == s ? slash + 1 : NULL) {
        size_t len = part == s ? (size_t)(slash - s) : strlen(part);
        if (len == 0 || strchr("-.", part[0]) || strchr("-.", part[len - 1])) return 0;
        for (size_t i = 0; i < len; i++)
            if (!isalnum((unsigned char)part[i]) && !strchr("-_.", part[i])) return 0;
    }
    return 1;
}

/* A branch, tag or commit as a path inside the repo folder: refs/<rev> and snapshots/<commit>.
 * Git allows more in a ref name; these are the characters that cannot leave the folder. */
int plan_hub_revision_valid(const char *r) {
    size_t n = r ? strlen(r) : 0;
    if (n == 0 || n > 255 || r[0] == '/' || r[n - 1] == '/' || strstr(r, "..") || strstr(r, "//")) return 0;
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)r[i]) && !strchr("-_./", r[i])) return 0;
    return 1;
}

/* The home folder as os.path.expanduser("~") finds it: $HOME, else the password database. */
static const char *home_dir(void) {
    const char *h = getenv("HOME");
    if (h && h[0]) return h;
    const struct passwd *pw = getpwuid(getuid());
    return pw && pw->pw_dir ? pw->pw_dir : "/";
}

/* The variable's value with a leading "~" or "~/" replaced by the home folder
   (os.path.expanduser); 0, or -1 when unset, empty or too long. */
static int env_path(const char *var, char *out, size_t len) {
    const char *v = getenv(var);
    if (!v || !v[0]) return -1;
    if (v[0] == '~' && (v[1] == '/' || v[1] == 0)) return snprintf(out, len, "%s%s", home_dir(), v + 1) < (int)len ? 0 : -1;
    return snprintf(out, len, "%s", v) < (int)len ? 0 : -1;
}

/* huggingface_hub: HF_HOME = $HF_HOME, else $XDG_CACHE_HOME/huggingface, else ~/.cache/huggingface */
int plan_hub_home(char *out, size_t len) {
    if (env_path("HF_HOME", out, len) == 0) return 0;
    char base[4096];
    if (env_path("XDG_CACHE_HOME", base, sizeof base) != 0 &&
        snprintf(base, sizeof base, "%s/.cache", home_dir()) >= (int)sizeof base)
        return -1;
    return snprintf(out, len, "%s/huggingface", base) < (int)len ? 0 : -1;
}

/* huggingface_hub: HF_HUB_CACHE, else the legacy HUGGINGFACE_HUB_CACHE, else HF_HOME/hub */
int plan_hub_cache_dir(char *out, size_t len) {
    if (env_path("HF_HUB_CACHE", out, len) == 0 || env_path("HUGGINGFACE_HUB_CACHE", out, len) == 0) return 0;
    char home[4096];
    if (plan_hub_home(home, sizeof home)) return -1;
    return snprintf(out, len, "%s/hub", home) < (int)len ? 0 : -1;
}

/* <cache>/models--ORG--NAME (huggingface_hub's repo_folder_name) */
int plan_hub_repo_dir(const char *cache, const char *repo, char *out, size_t len) {
    const char *slash = strchr(repo, '/');
    if (!slash) return -1;
    return snprintf(out, len, "%s/models--%.*s--%s", cache, (int)(slash - repo), repo, slash + 1) < (int)len ? 0 : -1;
}

/* refs/<rev> names the commit a branch or tag was at when it was fetched; a revision with no
   ref is taken as a commit itself (try_to_load_from_cache does the same) */
int plan_hub_cached_config(const char *cache, const char *repo, const char *revision, char *path, size_t len) {
    char dir[4096], ref[4352], commit[256];
    const char *rev = revision && revision[0] ? revision : "main";
    if (!plan_hub_revision_valid(rev) || plan_hub_repo_dir(cache, repo, dir, sizeof dir)) return -1;
    snprintf(commit, sizeof commit, "%s", rev);
    if (snprintf(ref, sizeof ref, "%s/refs/%s", dir, rev) < (int)sizeof ref) {
        FILE *f = fopen(ref, "r");
        if (f) {
            char line[256] = "";
            if (fgets(line, sizeof line, f)) {
                line[strcspn(line, " \t\r\n")] = 0;
                if (plan_hub_revision_valid(line) && !strchr(line, '/')) snprintf(commit, sizeof commit, "%s", line);
            }
            fclose(f);
        }
    }
    struct stat st;
    if (snprintf(path, len, "%s/snapshots/%s/config.json", dir, commit) >= (int)len) return -1;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode) ? 0 : -1;   /* stat follows the blob link */
}
