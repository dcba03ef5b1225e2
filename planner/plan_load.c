/* plan_load.c — `--model ARG`: zoo name, file or cached hub model; reading the file, parsing the JSON (syntax
 * errors with line and column), recognising the format, and the typed field readers the three
 * loaders share (planner/plan_load_hf.c, plan_load_params.c, plan_load_json.c). */
#include "plan_load.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "plan_load_internal.h"
#include "plan_zoo.h"

/* A model description is small: the largest params.json (a few thousand tensors) is well
 * under a megabyte. Anything above this is not a model file. */
#define MAX_FILE_BYTES (64u << 20)

/* ---- messages and field readers ---- */

int ld_fail(LoadCtx *c, const char *fmt, ...) {
    int n = snprintf(c->msg, c->msglen, "%s: ", c->label);
    if (n < 0) n = 0;
    if ((size_t)n < c->msglen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(c->msg + n, c->msglen - (size_t)n, fmt, ap);
        va_end(ap);
    }
    return -1;
}

void ld_describe(const cJSON *v, char *out, size_t outlen) {
    if (!v) snprintf(out, outlen, "nothing");
    else if (cJSON_IsNumber(v)) snprintf(out, outlen, "%.15g", v->valuedouble);
    else if (cJSON_IsString(v)) {
        const char *s = v->valuestring ? v->valuestring : "";
        snprintf(out, outlen, "the string \"%.24s%s\"", s, strlen(s) > 24 ? "..." : "");
    } else if (cJSON_IsTrue(v)) snprintf(out, outlen, "true");
    else if (cJSON_IsFalse(v)) snprintf(out, outlen, "false");
    else if (cJSON_IsNull(v)) snprintf(out, outlen, "null");
    else if (cJSON_IsArray(v)) snprintf(out, outlen, "an array");
    else if (cJSON_IsObject(v)) snprintf(out, outlen, "an object");
    else snprintf(out, outlen, "an invalid value");
}

/* The member, or NULL when absent (or null where null means "default"). */
static const cJSON *member(LoadCtx *c, const cJSON *obj, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (v && c->null_is_absent && cJSON_IsNull(v)) return NULL;
    return v;
}

int ld_value_int(LoadCtx *c, const cJSON *v, const char *what, int64_t lo, int64_t hi,
                 int64_t *out) {
    char got[64];
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || v->valuedouble != floor(v->valuedouble) ||
        v->valuedouble < (double)lo || v->valuedouble > (double)hi) {
        ld_describe(v, got, sizeof(got));
        return ld_fail(c, "%s must be an integer from %lld to %lld (got %s)", what,
                       (long long)lo, (long long)hi, got);
    }
    *out = (int64_t)v->valuedouble;
    /* (double)hi may round up past hi near 2^63; the bounds used here are all below 2^53 */
    if (*out < lo || *out > hi) {
        ld_describe(v, got, sizeof(got));
        return ld_fail(c, "%s must be an integer from %lld to %lld (got %s)", what,
                       (long long)lo, (long long)hi, got);
    }
    return 0;
}

int ld_int(LoadCtx *c, const cJSON *obj, const char *prefix, const char *key, int required,
           int64_t def, int64_t lo, int64_t hi, int64_t *out) {
    const cJSON *v = member(c, obj, key);
    if (!v) {
        if (required) return ld_fail(c, "missing field '%s%s'", prefix, key);
        *out = def;
        return 0;
    }
    char what[160];
    snprintf(what, sizeof(what), "field '%s%s'", prefix, key);
    return ld_value_int(c, v, what, lo, hi, out);
}

int ld_int32(LoadCtx *c, const cJSON *obj, const char *prefix, const char *key, int required,
             int def, int lo, int hi, int *out) {
    int64_t v;
    if (ld_int(c, obj, prefix, key, required, def, lo, hi, &v)) return -1;
    *out = (int)v;
    return 0;
}

int ld_num(LoadCtx *c, const cJSON *obj, const char *prefix, const char *key, int required,
           double def, double lo, double hi, double *out) {
    const cJSON *v = member(c, obj, key);
    if (!v) {
        if (required) return ld_fail(c, "missing field '%s%s'", prefix, key);
        *out = def;
        return 0;
    }
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || v->valuedouble < lo ||
        v->valuedouble > hi) {
        char got[64];
        ld_describe(v, got, sizeof(got));
        return ld_fail(c, "field '%s%s' must be a number from %g to %g (got %s)", prefix, key,
                       lo, hi, got);
    }
    *out = v->valuedouble;
    return 0;
}

int ld_bool(LoadCtx *c, const cJSON *obj, const char *prefix, const char *key, int required,
            int def, int allow_01, int *out) {
    const cJSON *v = member(c, obj, key);
    if (!v) {
        if (required) return ld_fail(c, "missing field '%s%s'", prefix, key);
        *out = def;
        return 0;
    }
    if (cJSON_IsBool(v)) {
        *out = cJSON_IsTrue(v);
        return 0;
    }
    if (allow_01 && cJSON_IsNumber(v) && (v->valuedouble == 0.0 || v->valuedouble == 1.0)) {
        *out = v->valuedouble == 1.0;
        return 0;
    }
    char got[64];
    ld_describe(v, got, sizeof(got));
    return ld_fail(c, "field '%s%s' must be true or false (got %s)", prefix, key, got);
}

int ld_str(LoadCtx *c, const cJSON *obj, const char *prefix, const char *key, int required,
           const char *def, char *out, size_t outlen) {
    const cJSON *v = member(c, obj, key);
    if (!v) {
        if (required) return ld_fail(c, "missing field '%s%s'", prefix, key);
        snprintf(out, outlen, "%s", def ? def : "");
        return 0;
    }
    if (!cJSON_IsString(v) || !v->valuestring) {
        char got[64];
        ld_describe(v, got, sizeof(got));
        return ld_fail(c, "field '%s%s' must be a string (got %s)", prefix, key, got);
    }
    if (strlen(v->valuestring) >= outlen)
        return ld_fail(c, "field '%s%s' is longer than %zu characters", prefix, key, outlen - 1);
    snprintf(out, outlen, "%s", v->valuestring);
    return 0;
}

int ld_known_keys(LoadCtx *c, const cJSON *obj, const char *prefix, const char *const *known) {
    for (const cJSON *it = obj->child; it; it = it->next) {
        const char *k = it->string ? it->string : "";
        int ok = 0;
        for (int i = 0; known[i] && !ok; i++) ok = strcmp(known[i], k) == 0;
        if (!ok) {
            char list[512];
            size_t n = 0;
            list[0] = '\0';
            for (int i = 0; known[i] && n < sizeof(list); i++)
                n += (size_t)snprintf(list + n, sizeof(list) - n, "%s%s", i ? ", " : "", known[i]);
            return ld_fail(c, "unknown key '%s%.64s' (known keys: %s)", prefix, k, list);
        }
        for (const cJSON *j = obj->child; j != it; j = j->next)
            if (j->string && strcmp(j->string, k) == 0)
                return ld_fail(c, "key '%s%.64s' is given twice", prefix, k);
    }
    return 0;
}

void ld_name_from_label(const char *label, char *out, size_t outlen) {
    const char *base = strrchr(label, '/');
    base = base ? base + 1 : label;
    size_t n = strlen(base);
    if (strcmp(base, "config.json") == 0 && base != label) {
        /* the directory a Hugging Face model lives in names it */
        const char *end = base - 1, *start = end;
        while (start > label && start[-1] != '/') start--;
        if (end > start) {
            snprintf(out, outlen, "%.*s", (int)(end - start), start);
            return;
        }
    }
    if (n > 5 && strcmp(base + n - 5, ".json") == 0) n -= 5;
    if (n == 0) {
        snprintf(out, outlen, "model");
        return;
    }
    snprintf(out, outlen, "%.*s", (int)n, base);
}

/* ---- parsing and format detection ---- */

static int is_space(char ch) { return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r'; }

/* Line and column (both from 1) of byte offset off in buf. */
static void line_col(const char *buf, size_t off, int *line, int *col) {
    int l = 1, k = 1;
    for (size_t i = 0; i < off; i++) {
        if (buf[i] == '\n') { l++; k = 1; }
        else k++;
    }
    *line = l;
    *col = k;
}

static int syntax_error(LoadCtx *c, const char *buf, size_t len, const char *err) {
    size_t off = (err && err >= buf && err <= buf + len) ? (size_t)(err - buf) : len;
    int line, col;
    /* A trailing comma ({"a": 1,} or [1, 2,]) is the usual slip in a hand-edited file; cJSON
     * reports it at or just after the closing bracket: point at the comma instead. */
    size_t br = off;
    while (br < len && is_space(buf[br])) br++;
    if (!(br < len && (buf[br] == '}' || buf[br] == ']'))) {
        br = off;
        while (br > 0 && is_space(buf[br - 1])) br--;
        br = (br > 0 && (buf[br - 1] == '}' || buf[br - 1] == ']')) ? br - 1 : len;
    }
    if (br < len) {
        size_t k = br;
        while (k > 0 && is_space(buf[k - 1])) k--;
        if (k > 0 && buf[k - 1] == ',') {
            line_col(buf, k - 1, &line, &col);
            return ld_fail(c, "invalid JSON at line %d, column %d: trailing comma before '%c'",
                           line, col, buf[br]);
        }
    }
    /* cJSON stops where it gave up; skip whitespace so the position points at the culprit */
    while (off < len && is_space(buf[off])) off++;
    line_col(buf, off, &line, &col);
    if (off >= len)
        return ld_fail(c, "invalid JSON at line %d, column %d: unexpected end of file", line, col);
    char near[24];
    size_t n = 0;
    for (size_t i = off; i < len && n < 16 && buf[i] != '\n' && buf[i] != '\r'; i++)
        near[n++] = (buf[i] >= 0x20 && buf[i] < 0x7f) ? buf[i] : '?';
    near[n] = '\0';
    return ld_fail(c, "invalid JSON at line %d, column %d, near '%s'", line, col, near);
}

typedef enum { FMT_UNKNOWN, FMT_HF, FMT_PARAMS, FMT_MEMPLAN } FileFormat;

static FileFormat detect(const cJSON *root) {
    if (cJSON_GetObjectItemCaseSensitive(root, "memplan_model")) return FMT_MEMPLAN;
    if (cJSON_GetObjectItemCaseSensitive(root, "model_type") ||
        cJSON_GetObjectItemCaseSensitive(root, "architectures"))
        return FMT_HF;
    if (cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(root, "parameters"))) return FMT_PARAMS;
    /* a bare {name: shape} map, as `named_parameters()` dumps it */
    if (root->child && cJSON_IsArray(root->child)) return FMT_PARAMS;
    return FMT_UNKNOWN;
}

/* A key given twice in one object: cJSON keeps both and lookups see the first, so the second
 * would be ignored silently. 0, or -1 naming the key and where it is. */
static int duplicate_key(const cJSON *o, LoadCtx *c, const char *where) {
    if (!o) return 0;
    for (const cJSON *a = o->child; a; a = a->next) {
        if (cJSON_IsObject(o) && a->string)
            for (const cJSON *b = a->next; b; b = b->next)
                if (b->string && strcmp(a->string, b->string) == 0)
                    return ld_fail(c, "key '%s'%s%s is given twice: give it once", a->string, *where ? " in " : "", where);
        if (cJSON_IsObject(a) || cJSON_IsArray(a)) {
            char sub[128];
            snprintf(sub, sizeof(sub), "%s%s%s", where, *where && a->string ? "." : "", a->string ? a->string : "");
            if (duplicate_key(a, c, cJSON_IsObject(o) ? sub : where)) return -1;
        }
    }
    return 0;
}

/* The offset of the first \u0000 escape in a JSON text, or -1. cJSON decodes it into a NUL that
 * ends the C string early ("llama\u0000x" would read as "llama"); transformers refuses such a
 * name. Backslashes occur only inside strings, so a scan of escapes is exact. */
static long escaped_nul(const char *text, size_t len) {
    for (size_t i = 0; i + 1 < len; i++) {
        if (text[i] != '\\') continue;
        if (text[i + 1] == 'u' && i + 5 < len && memcmp(text + i + 2, "0000", 4) == 0) return (long)i;
        i++;   /* the escaped character (a second backslash included) */
    }
    return -1;
}

/* cJSON reports a failed allocation as a parse error (NULL): its allocations go through this
 * while a file is parsed, so that running out of memory is said as such. */
static int parse_oom;
static void *parse_malloc(size_t n) {
    void *p = malloc(n);
    if (!p) parse_oom = 1;
    return p;
}

int plan_load_model_from_buffer(ModelSpec *m, const char *buf, size_t len, const char *label,
                                char *msg, size_t msglen) {
    LoadCtx c = {label && label[0] ? label : "(input)", msg, msglen, 0};
    memset(m, 0, sizeof(*m));
    if (!buf || len == 0) return ld_fail(&c, "empty file (expected a JSON model description)");
    const void *nul = memchr(buf, '\0', len);
    if (nul)
        return ld_fail(&c, "contains a NUL byte at offset %zu: not a JSON text file",
                       (size_t)((const char *)nul - buf));
    /* a UTF-8 byte-order mark (some Windows editors write one) is not JSON: skip it */
    if (len >= 3 && memcmp(buf, "\xEF\xBB\xBF", 3) == 0) {
        buf += 3;
        len -= 3;
    }
    /* cJSON is given a NUL-terminated copy, so no code path of it can read past the end */
    char *text = malloc(len + 1);
    if (!text) return ld_fail(&c, "out of host memory parsing the file");
    memcpy(text, buf, len);
    text[len] = '\0';
    long esc = escaped_nul(text, len);
    if (esc >= 0) {
        int line, col;
        line_col(text, (size_t)esc, &line, &col);
        free(text);
        return ld_fail(&c, "a string holds \\u0000 (a NUL character) at line %d, column %d: no name or value "
                       "contains one (transformers refuses it too)", line, col);
    }
    const char *end = NULL;
    cJSON_Hooks hooks = {parse_malloc, free};
    parse_oom = 0;
    cJSON_InitHooks(&hooks);
    cJSON *root = cJSON_ParseWithLengthOpts(text, len + 1, &end, 0);
    cJSON_InitHooks(NULL);
    if (!root) {
        if (parse_oom)
            ld_fail(&c, "out of memory parsing the file (%zu bytes; the JSON itself may be valid): free memory "
                    "or raise the limit (ulimit -v)", len);
        else
            syntax_error(&c, text, len, end ? end : cJSON_GetErrorPtr());
        free(text);
        return -1;
    }
    int rc = -1;
    /* anything but whitespace after the JSON value is an error too */
    size_t off = (end && end >= text && end <= text + len) ? (size_t)(end - text) : len;
    while (off < len && is_space(text[off])) off++;
    if (off < len) {
        syntax_error(&c, text, len, text + off);
        goto done;
    }
    if (!cJSON_IsObject(root)) {
        char got[64];
        ld_describe(root, got, sizeof(got));
        ld_fail(&c, "expected a JSON object at the top level (got %s)", got);
        goto done;
    }
    switch (detect(root)) {
    case FMT_MEMPLAN: rc = ld_memplan_json(m, root, &c); break;
    case FMT_HF: c.null_is_absent = 1; rc = ld_hf_config(m, root, &c); break;
    case FMT_PARAMS: rc = ld_params_json(m, root, &c); break;
    default:
        ld_fail(&c, "not a model description: expected a Hugging Face config.json (with "
                "\"model_type\"), a params.json (with \"parameters\") or a memplan model (with "
                "\"memplan_model\")");
        break;
    }
    if (rc == 0 && duplicate_key(root, &c, "")) rc = -1;   /* where the format's loader did not say it */
    if (rc == 0 && plan_model_params(m) == 0)
        rc = ld_fail(&c, "the model has no trainable parameters: nothing to plan");
    if (rc == 0) {
        snprintf(m->source, sizeof(m->source), "%s", c.label);
    } else {
        plan_model_free(m);
        memset(m, 0, sizeof(*m));
    }
done:
    cJSON_Delete(root);
    free(text);
    return rc;
}

/* ---- files ---- */

static int read_file(const char *path, int64_t size, char **out, size_t *out_len, LoadCtx *c) {
    *out = NULL;
    *out_len = 0;
    if (size > (int64_t)MAX_FILE_BYTES)
        return ld_fail(c, "larger than %u MiB: not a model description", MAX_FILE_BYTES >> 20);
    FILE *f = fopen(path, "rb");
    if (!f) return ld_fail(c, "cannot open: %s", strerror(errno));
    size_t cap = (size_t)size + 1;       /* one more byte tells a file that grew */
    char *buf = malloc(cap);
    if (!buf) {
        fclose(f);
        return ld_fail(c, "out of host memory reading the file");
    }
    size_t n = fread(buf, 1, cap, f);
    int err = ferror(f);
    fclose(f);
    if (err || n == cap) {
        free(buf);
        return ld_fail(c, err ? "read error" : "the file changed while it was read");
    }
    *out = buf;
    *out_len = n;
    return 0;
}

/* The regular file at path (size bytes by stat), loaded with path as its label. */
static int load_file(ModelSpec *m, const char *path, int64_t size, char *msg, size_t msglen) {
    LoadCtx c = {path, msg, msglen, 0};
    char *buf;
    size_t len;
    if (read_file(path, size, &buf, &len, &c)) return -1;
    int rc = plan_load_model_from_buffer(m, buf, len, path, msg, msglen);
    free(buf);
    return rc;
}

/* repo's config.json at revision from the local Hugging Face cache, named by repo. */
static int load_cached(ModelSpec *m, const char *repo, const char *revision, char *msg, size_t msglen) {
    char cache[4096], path[4608];
    struct stat st;
    if (plan_hub_cache_dir(cache, sizeof cache)) {
        snprintf(msg, msglen, "%s: the Hugging Face cache folder (HF_HUB_CACHE or HF_HOME) is too long a path", repo);
        return -1;
    }
    if (plan_hub_cached_config(cache, repo, revision, path, sizeof path) || stat(path, &st) != 0) {
        snprintf(msg, msglen, "%s: not in the Hugging Face cache (%s) at revision %s", repo, cache,
                 revision && revision[0] ? revision : "main");
        return PLAN_LOAD_NOT_CACHED;
    }
    int rc = load_file(m, path, (int64_t)st.st_size, msg, msglen);
    if (rc == 0) snprintf(m->name, sizeof m->name, "%s", repo);
    return rc;
}

int plan_load_model(ModelSpec *m, const char *arg, char *msg, size_t msglen) {
    return plan_load_model_at(m, arg, NULL, msg, msglen);
}

int plan_load_model_at(ModelSpec *m, const char *arg, const char *revision, char *msg, size_t msglen) {
    memset(m, 0, sizeof(*m));
    if (!arg || !arg[0]) {
        snprintf(msg, msglen, "no model given (a zoo name: %s; a hub id ORG/NAME; or a config.json / params.json / "
                 "memplan model path)", plan_zoo_hint());
        return -1;
    }
    if (revision && !plan_hub_revision_valid(revision)) {
        snprintf(msg, msglen, "--revision '%.64s': not a branch, tag or commit (letters, digits, '-', '_', '.', '/'; no '..')",
                 revision);
        return -1;
    }
    const ZooEntry *e = plan_zoo_find(arg);
    if (e && !revision) return plan_zoo_build_entry(m, e, msg, msglen);
    if (e && !e->hub_id) {
        snprintf(msg, msglen, "--revision applies to a hub model: %s is not one (%s)", e->name, e->source);
        return -1;
    }
    if (e) return load_cached(m, e->hub_id, revision, msg, msglen);

    struct stat st;
    size_t alen = strlen(arg);
    int pathlike = strchr(arg, '/') != NULL || (alen > 5 && strcmp(arg + alen - 5, ".json") == 0);
    if (stat(arg, &st) != 0) {
        if (plan_hub_id_valid(arg)) return load_cached(m, arg, revision, msg, msglen);
        if (!pathlike) return plan_zoo_build(m, arg, msg, msglen);   /* the zoo's message */
        snprintf(msg, msglen, "%s: no such file (--model takes a zoo name: %s; a hub id ORG/NAME; or a path to a "
                 "config.json, params.json or memplan model file)", arg, plan_zoo_hint());
        return -1;
    }
    if (revision) {
        snprintf(msg, msglen, "--revision applies to a hub id ORG/NAME, not to the file %s", arg);
        return -1;
    }
    char path[4096];
    if (snprintf(path, sizeof(path), "%s", arg) >= (int)sizeof(path)) {
        snprintf(msg, msglen, "%.64s...: path too long", arg);
        return -1;
    }
    if (S_ISDIR(st.st_mode)) {
        /* a Hugging Face model directory: read its config.json */
        if (snprintf(path, sizeof(path), "%s%sconfig.json", arg,
                     arg[alen - 1] == '/' ? "" : "/") >= (int)sizeof(path) ||
            stat(path, &st) != 0 || !S_ISREG(st.st_mode)) {
            snprintf(msg, msglen, "%s: is a directory without a config.json (give a config.json, "
                     "params.json or memplan model file)", arg);
            return -1;
        }
    } else if (!S_ISREG(st.st_mode)) {
        snprintf(msg, msglen, "%s: not a regular file (give a config.json, params.json or "
                 "memplan model file)", arg);
        return -1;
    }
    return load_file(m, path, (int64_t)st.st_size, msg, msglen);
}
