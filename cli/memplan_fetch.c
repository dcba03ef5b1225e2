/* memplan_fetch.c — memplan-fetch: one hub model's config.json (never weights) from the Hugging
 * Face hub into the local cache, laid out as huggingface_hub lays it out, so that memplan (and
 * transformers) find it there offline from then on. memplan runs it (cli/cli_model.c) for a hub
 * id that is neither in its zoo nor in the cache. It is a program of its own, linked with
 * Debian's libcurl, so that memplan itself links no network library (docs/models.md, "Why a
 * helper program").
 *
 *   memplan-fetch [--revision REV] [--cache DIR] ORG/NAME
 *
 * GET $HF_ENDPOINT/ORG/NAME/resolve/REV/config.json (default https://huggingface.co, REV main)
 * with the token (HF_TOKEN, else HUGGING_FACE_HUB_TOKEN, else the file HF_TOKEN_PATH, else
 * HF_HOME/token) as a Bearer header that libcurl sends to the hub's own host only, following
 * redirects, giving up after HF_HUB_DOWNLOAD_TIMEOUT seconds (default 10) without a byte. Writes,
 * in DIR (default: the cache transformers reads, plan_hub_cache_dir):
 *   models--ORG--NAME/blobs/<etag>                          the file (X-Linked-Etag, else ETag)
 *   models--ORG--NAME/snapshots/<commit>/config.json        -> ../../blobs/<etag> (X-Repo-Commit)
 *   models--ORG--NAME/refs/REV                              <commit>, unless REV is the commit
 * each under a temporary name first, then renamed, so that a concurrent reader never sees half a
 * file. Prints the snapshot's config.json path. On failure: one line on stderr saying what to do,
 * and the exit status says what kind of failure (FETCH_* below). */
#include <curl/curl.h>
#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "plan_load.h"

/* exit statuses: memplan adds the nearest zoo names to a "no such model" or "cannot reach" */
enum { FETCH_OK = 0, FETCH_FAILED = 1, FETCH_USAGE = 2, FETCH_NO_SUCH_MODEL = 3, FETCH_UNREACHABLE = 4 };

#define MAX_CONFIG_BYTES (16u << 20)   /* a config.json is kilobytes; anything this big is not one */
#define FIELD 129                      /* a commit or etag with its NUL: 40 or 64 hex digits in practice */

static const char *g_repo = "";

/* "memplan-fetch: ORG/NAME: <msg>" on stderr; fail returns FETCH_FAILED, fail_as its code. */
static int vfail(int code, const char *fmt, va_list ap) {
    char msg[2048];
    vsnprintf(msg, sizeof msg, fmt, ap);
    fprintf(stderr, "memplan-fetch: %s: %s\n", g_repo, msg);
    return code;
}
static int fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int rc = vfail(FETCH_FAILED, fmt, ap);
    va_end(ap);
    return rc;
}
static int fail_as(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail_as(int code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vfail(code, fmt, ap);
    va_end(ap);
    return code;
}

/* What a user without the hub can do instead, for the end of a message. */
static const char *offline_remedy(const char *repo, const char *rev, char *buf, size_t len) {
    char r[300] = "";
    if (strcmp(rev, "main") != 0) snprintf(r, sizeof r, " --revision %s", rev);
    snprintf(buf, len, "to plan without the hub, run `hf download %s config.json%s` (huggingface-cli download before "
             "huggingface_hub 1.0) where it is reachable and copy that cache here, or give --model the path of a config.json",
             repo, r);
    return buf;
}

/* ---- the HTTP exchange ---- */

typedef struct {
    char *body;
    size_t len, cap;
    int too_big;
    /* the response being read (redirects give several) */
    char commit[FIELD], etag[FIELD], linked_etag[FIELD], error_code[64], error_message[160];
    /* from the last response that named a commit: huggingface_hub reads these off the hub's own
       answer (a 200, or the redirect of a file stored elsewhere), never off a CDN's */
    char got_commit[FIELD], got_etag[FIELD];
} Exchange;

static size_t on_body(char *p, size_t size, size_t n, void *ud) {
    Exchange *x = ud;
    size_t k = size * n;
    if (x->len + k > MAX_CONFIG_BYTES) {
        x->too_big = 1;
        return 0;
    }
    if (x->len + k + 1 > x->cap) {
        size_t cap = x->cap ? x->cap : 16384;
        while (cap < x->len + k + 1) cap *= 2;
        char *b = realloc(x->body, cap);
        if (!b) return 0;
        x->body = b;
        x->cap = cap;
    }
    memcpy(x->body + x->len, p, k);
    x->len += k;
    x->body[x->len] = 0;
    return k;
}

/* value of "Name: value" into out when the line's name is name (case-insensitive); ETag's
   W/ prefix and quotes dropped as huggingface_hub's _normalize_etag drops them */
static void take(const char *line, size_t n, const char *name, char *out, size_t outlen) {
    size_t k = strlen(name);
    if (n <= k || strncasecmp(line, name, k) != 0 || line[k] != ':') return;
    const char *v = line + k + 1, *end = line + n;
    while (v < end && (*v == ' ' || *v == '\t')) v++;
    while (end > v && (end[-1] == '\r' || end[-1] == '\n' || end[-1] == ' ')) end--;
    if (end - v >= 2 && v[0] == 'W' && v[1] == '/') v += 2;
    while (v < end && *v == '"') v++;
    while (end > v && end[-1] == '"') end--;
    snprintf(out, outlen, "%.*s", (int)(end - v), v);
}

static size_t on_header(char *p, size_t size, size_t n, void *ud) {
    Exchange *x = ud;
    size_t k = size * n;
    if (k >= 5 && strncmp(p, "HTTP/", 5) == 0) {   /* a new response: forget the last one's */
        x->commit[0] = x->etag[0] = x->linked_etag[0] = x->error_code[0] = x->error_message[0] = 0;
        return k;
    }
    if (k <= 2 && (p[0] == '\r' || p[0] == '\n')) {   /* the end of this response's headers */
        if (x->commit[0]) {
            snprintf(x->got_commit, sizeof x->got_commit, "%s", x->commit);
            snprintf(x->got_etag, sizeof x->got_etag, "%s", x->linked_etag[0] ? x->linked_etag : x->etag);
        }
        return k;
    }
    take(p, k, "X-Repo-Commit", x->commit, sizeof x->commit);
    take(p, k, "ETag", x->etag, sizeof x->etag);
    take(p, k, "X-Linked-Etag", x->linked_etag, sizeof x->linked_etag);
    take(p, k, "X-Error-Code", x->error_code, sizeof x->error_code);
    take(p, k, "X-Error-Message", x->error_message, sizeof x->error_message);
    return k;
}

/* The token huggingface_hub would send: HF_TOKEN, HUGGING_FACE_HUB_TOKEN, then the token file
   (HF_TOKEN_PATH, else HF_HOME/token), stripped of spaces and newlines; "" when none. */
static void find_token(char *out, size_t len) {
    const char *env = getenv("HF_TOKEN");
    if (!env || !env[0]) env = getenv("HUGGING_FACE_HUB_TOKEN");
    char raw[4096] = "", path[4352];
    if (env && env[0]) {
        snprintf(raw, sizeof raw, "%s", env);
    } else {
        const char *tp = getenv("HF_TOKEN_PATH");
        char home[4096];
        if (tp && tp[0]) snprintf(path, sizeof path, "%s", tp);
        else if (plan_hub_home(home, sizeof home) == 0) snprintf(path, sizeof path, "%s/token", home);
        else path[0] = 0;
        FILE *f = path[0] ? fopen(path, "r") : NULL;
        if (f) {
            size_t n = fread(raw, 1, sizeof raw - 1, f);
            raw[n] = 0;
            fclose(f);
        }
    }
    size_t n = 0;
    for (const char *s = raw; *s && n + 1 < len; s++)
        if (*s != '\r' && *s != '\n' && *s != ' ' && *s != '\t') out[n++] = *s;
    out[n] = 0;
}

/* ---- the cache layout ---- */

/* mkdir -p */
static int make_dirs(const char *dir) {
    char p[4608];
    if (snprintf(p, sizeof p, "%s", dir) >= (int)sizeof p) return -1;
    for (char *s = p + 1; *s; s++) {
        if (*s != '/') continue;
        *s = 0;
        if (mkdir(p, 0755) && errno != EEXIST) return -1;
        *s = '/';
    }
    return mkdir(p, 0755) && errno != EEXIST ? -1 : 0;
}

/* data (len bytes) to path through path.incomplete.<pid>, then rename */
static int write_atomic(const char *path, const char *data, size_t len) {
    char tmp[4700];
    snprintf(tmp, sizeof tmp, "%s.incomplete.%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "wb");
    if (!f) return -1;
    int bad = fwrite(data, 1, len, f) != len;
    bad |= fclose(f) != 0;
    if (bad || rename(tmp, path)) {
        unlink(tmp);
        return -1;
    }
    return 0;
}

/* A commit or etag the server sent, used as a file name: one path component of safe characters. */
static int safe_name(const char *s) {
    return s[0] && s[0] != '.' && !strchr(s, '/') && plan_hub_revision_valid(s);
}

static int store(const char *cache, const char *repo, const char *rev, const Exchange *x, char *out, size_t outlen) {
    char dir[4352], blob[4608], snap[4608], link[4700], tmp[4800], target[FIELD + 16];
    if (plan_hub_repo_dir(cache, repo, dir, sizeof dir)) return fail("the cache path %s is too long", cache);
    snprintf(blob, sizeof blob, "%s/blobs", dir);
    snprintf(snap, sizeof snap, "%s/snapshots/%s", dir, x->got_commit);
    if (make_dirs(blob) || make_dirs(snap)) return fail("cannot create %s: %s (set HF_HUB_CACHE to a folder you can write)", dir, strerror(errno));
    snprintf(blob + strlen(blob), sizeof blob - strlen(blob), "/%s", x->got_etag);
    if (write_atomic(blob, x->body, x->len)) return fail("cannot write %s: %s", blob, strerror(errno));
    /* snapshots/<commit>/config.json -> ../../blobs/<etag>, relative as huggingface_hub's _create_symlink makes it */
    snprintf(link, sizeof link, "%s/config.json", snap);
    snprintf(tmp, sizeof tmp, "%s.incomplete.%ld", link, (long)getpid());
    snprintf(target, sizeof target, "../../blobs/%s", x->got_etag);
    unlink(tmp);
    if (symlink(target, tmp) || rename(tmp, link)) {
        unlink(tmp);
        return fail("cannot link %s: %s", link, strerror(errno));
    }
    if (strcmp(rev, x->got_commit) != 0) {   /* refs/<rev> names the commit (may be refs/pr/1: nested) */
        char ref[4608], parent[4608];
        snprintf(ref, sizeof ref, "%s/refs/%s", dir, rev);
        snprintf(parent, sizeof parent, "%s", ref);
        *strrchr(parent, '/') = 0;
        if (make_dirs(parent) || write_atomic(ref, x->got_commit, strlen(x->got_commit)))
            return fail("cannot write %s: %s", ref, strerror(errno));
    }
    snprintf(out, outlen, "%s", link);
    return 0;
}

/* ---- what went wrong, in a sentence ---- */

/* The hub answered, so the remedy is the hub's (a name, a token, access) or a local file. */
static int http_failure(long status, const Exchange *x, const char *endpoint, const char *repo, const char *rev,
                        int have_token) {
    static const char PATH_TOO[] = "or give --model the path of a config.json";
    if (status == 401 && strstr(x->error_message, "Invalid credentials"))
        return fail("%s refused the token (401, invalid credentials): renew it (`hf auth login`, or set HF_TOKEN); %s",
                    endpoint, PATH_TOO);
    if (status == 403 || (status == 401 && have_token && strcmp(x->error_code, "GatedRepo") == 0))
        return fail("%s answered %ld: a gated model the token has no access to: request access at %s/%s and use a token "
                    "of that account (HF_TOKEN or `hf auth login`); %s", endpoint, status, endpoint, repo, PATH_TOO);
    if (status == 401)
        return fail_as(FETCH_NO_SUCH_MODEL, "%s answered 401: no such model, or a gated or private one %s: check the name; "
                       "for a gated model accept its terms at %s/%s and set HF_TOKEN (or `hf auth login`); %s", endpoint,
                       have_token ? "this token cannot read" : "(no token was sent)", endpoint, repo, PATH_TOO);
    if (status == 404 && strcmp(x->error_code, "RevisionNotFound") == 0)
        return fail("%s has no revision '%s' of it (404): check --revision (a branch, tag or commit)", endpoint, rev);
    if (status == 404 && strcmp(x->error_code, "EntryNotFound") == 0)
        return fail("it has no config.json at revision %s (404): not a transformers model; give --model a config.json, "
                    "params.json or memplan model file", rev);
    if (status == 404)
        return fail_as(FETCH_NO_SUCH_MODEL, "%s has no such model (404): check the name (ORG/NAME as on the hub)", endpoint);
    char fix[1024];
    return fail("%s answered HTTP %ld for its config.json%s%s: try again later; or, %s", endpoint, status,
                x->error_message[0] ? ": " : "", x->error_message, offline_remedy(repo, rev, fix, sizeof fix));
}

static int usage(FILE *f) {
    fprintf(f, "memplan-fetch [--revision REV] [--cache DIR] ORG/NAME: fetches the model's config.json (never weights)\n"
               "from $HF_ENDPOINT (default https://huggingface.co) into the Hugging Face cache (default: where\n"
               "transformers keeps it: HF_HUB_CACHE, else HF_HOME/hub, else ~/.cache/huggingface/hub) and prints its\n"
               "path. Token: HF_TOKEN or the file `hf auth login` writes; timeout: HF_HUB_DOWNLOAD_TIMEOUT (default 10 s).\n"
               "memplan runs it for `--model ORG/NAME` when the cache lacks the model (docs/models.md).\n");
    return f == stdout ? FETCH_OK : FETCH_USAGE;
}

int main(int argc, char **argv) {
    static const struct option OPTS[] = {
        {"revision", required_argument, 0, 'r'}, {"cache", required_argument, 0, 'c'}, {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
    const char *rev = "main", *cache_arg = NULL;
    int c;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":", OPTS, NULL)) != -1) {
        if (c == 'h') return usage(stdout);
        if (c == 'r') rev = optarg;
        else if (c == 'c') cache_arg = optarg;
        else if (c == ':') { fprintf(stderr, "memplan-fetch: %s needs a value\n", argv[optind - 1]); return FETCH_USAGE; }
        else { fprintf(stderr, "memplan-fetch: unknown option '%s' (valid: --revision REV, --cache DIR, --help)\n", argv[optind - 1]); return FETCH_USAGE; }
    }
    if (optind != argc - 1) return usage(stderr);
    g_repo = argv[optind];
    if (!plan_hub_id_valid(g_repo)) {
        fprintf(stderr, "memplan-fetch: '%s' is not a hub model id (ORG/NAME: letters, digits, '-', '_', '.')\n", g_repo);
        return FETCH_USAGE;
    }
    if (!plan_hub_revision_valid(rev)) {
        fprintf(stderr, "memplan-fetch: --revision '%s': not a branch, tag or commit (letters, digits, '-', '_', '.', '/')\n", rev);
        return FETCH_USAGE;
    }
    char cache[4096];
    if (cache_arg) snprintf(cache, sizeof cache, "%s", cache_arg);
    else if (plan_hub_cache_dir(cache, sizeof cache)) return fail("HF_HUB_CACHE or HF_HOME is too long a path");
    long timeout = 10;
    const char *t = getenv("HF_HUB_DOWNLOAD_TIMEOUT");
    if (t && t[0]) {
        char *end;
        timeout = strtol(t, &end, 10);
        if (*end || timeout <= 0 || timeout > 3600) {
            fprintf(stderr, "memplan-fetch: HF_HUB_DOWNLOAD_TIMEOUT='%s': not a whole number of seconds from 1 to 3600\n", t);
            return FETCH_USAGE;
        }
    }
    char endpoint[2048] = "https://huggingface.co";
    const char *e = getenv("HF_ENDPOINT");
    if (e && e[0]) snprintf(endpoint, sizeof endpoint, "%s", e);
    for (size_t n = strlen(endpoint); n > 0 && endpoint[n - 1] == '/'; n--) endpoint[n - 1] = 0;
    if (strncmp(endpoint, "https://", 8) != 0 && strncmp(endpoint, "http://", 7) != 0) {
        fprintf(stderr, "memplan-fetch: HF_ENDPOINT='%s': not an http:// or https:// address\n", endpoint);
        return FETCH_USAGE;
    }

    if (curl_global_init(CURL_GLOBAL_DEFAULT)) return fail("libcurl did not start");
    CURL *h = curl_easy_init();
    if (!h) return fail("libcurl did not start");
    char *rev_q = curl_easy_escape(h, rev, 0);   /* hf_hub_url quotes the revision, '/' too */
    char url[4096], token[4096], fix[1024], path[4700], agent[64];
    snprintf(url, sizeof url, "%s/%s/resolve/%s/config.json", endpoint, g_repo, rev_q ? rev_q : rev);
    curl_free(rev_q);
    find_token(token, sizeof token);
    snprintf(agent, sizeof agent, "memplan-fetch/1 %s", curl_version());
    agent[sizeof agent - 1] = 0;
    Exchange x;
    memset(&x, 0, sizeof x);
    char curl_err[CURL_ERROR_SIZE] = "";
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(h, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 1L);
    curl_easy_setopt(h, CURLOPT_MAXREDIRS, 10L);
    curl_easy_setopt(h, CURLOPT_USERAGENT, agent);
    curl_easy_setopt(h, CURLOPT_ACCEPT_ENCODING, "identity");
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT, timeout);
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1L);        /* huggingface_hub's timeout is per read: */
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, timeout);    /* no byte for `timeout` s ends it */
    curl_easy_setopt(h, CURLOPT_TIMEOUT, 4 * timeout);       /* and a trickle ends too */
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, curl_err);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &x);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, &x);
    if (token[0]) {   /* CURLAUTH_BEARER: libcurl keeps it from hosts a redirect leads to */
        curl_easy_setopt(h, CURLOPT_HTTPAUTH, CURLAUTH_BEARER);
        curl_easy_setopt(h, CURLOPT_XOAUTH2_BEARER, token);
    }
    CURLcode rc = curl_easy_perform(h);
    long status = 0;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
    curl_easy_cleanup(h);
    curl_global_cleanup();
    int bad = FETCH_OK;
    offline_remedy(g_repo, rev, fix, sizeof fix);
    if (x.too_big)
        bad = fail("%s sent more than %u MiB for config.json: not a model config (check HF_ENDPOINT)", endpoint, MAX_CONFIG_BYTES >> 20);
    else if (rc == CURLE_OPERATION_TIMEDOUT)
        bad = fail_as(FETCH_UNREACHABLE, "%s did not answer within %ld s (HF_HUB_DOWNLOAD_TIMEOUT sets it); %s", endpoint,
                      timeout, fix);
    else if (rc != CURLE_OK)
        bad = fail_as(FETCH_UNREACHABLE, "cannot reach %s (%s); %s", endpoint, curl_err[0] ? curl_err : curl_easy_strerror(rc),
                      fix);
    else if (status != 200)
        bad = http_failure(status, &x, endpoint, g_repo, rev, token[0] != 0);
    else if (!safe_name(x.got_commit) || !safe_name(x.got_etag))
        bad = fail("%s answered without a usable X-Repo-Commit and ETag, as the Hugging Face hub sends them: is HF_ENDPOINT a "
                   "hub? (commit '%.40s', etag '%.40s')", endpoint, x.got_commit, x.got_etag);
    else
        bad = store(cache, g_repo, rev, &x, path, sizeof path);
    free(x.body);
    if (bad) return bad;
    printf("%s\n", path);
    return FETCH_OK;
}
