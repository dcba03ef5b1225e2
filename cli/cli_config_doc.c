/* cli_config_doc.c — see cli_config_doc.h. */
#include "cli_config_doc.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml.h>

#include "../third_party/tomlc17/tomlc17.h"

#define DOC_MAX_BYTES (4 << 20)   /* a training config is a few KiB: a larger file is not one */
#define DOC_MAX_DEPTH 64

char *cfg_doc_load(const char *path, char *err, size_t errlen) {
    struct stat st;
    if (stat(path, &st) != 0) {
        snprintf(err, errlen, "--config '%s': %s", path, strerror(errno));
        return NULL;
    }
    if (!S_ISREG(st.st_mode) || st.st_size > DOC_MAX_BYTES) {
        snprintf(err, errlen, "--config '%s' is %s", path,
                 S_ISREG(st.st_mode) ? "larger than 4 MiB: not a training config" : "not a regular file");
        return NULL;
    }
    FILE *f = fopen(path, "rb");
    char *buf = f ? malloc((size_t)st.st_size + 1) : NULL;
    size_t n = buf ? fread(buf, 1, (size_t)st.st_size, f) : 0;
    if (!buf || n != (size_t)st.st_size || memchr(buf, 0, n)) {
        snprintf(err, errlen, "--config '%s': %s", path, !f ? strerror(errno) : buf ? "cannot be read as text" : "out of memory");
        free(buf);
        buf = NULL;
    } else {
        buf[n] = 0;
    }
    if (f) fclose(f);
    return buf;
}

/* ---- YAML: libyaml's document tree, scalars typed as YAML 1.1 (PyYAML's safe_load) types them ---- */

static int word_in(const char *s, const char *const *words) {
    for (; *words; words++)
        if (strcmp(s, *words) == 0) return 1;
    return 0;
}

static cJSON *yaml_scalar(const char *s, yaml_scalar_style_t style) {
    static const char *const NUL[] = {"", "~", "null", "Null", "NULL", NULL};
    static const char *const YES[] = {"true", "True", "TRUE", "yes", "Yes", "YES", "on", "On", "ON", NULL};
    static const char *const NO[] = {"false", "False", "FALSE", "no", "No", "NO", "off", "Off", "OFF", NULL};
    if (style != YAML_PLAIN_SCALAR_STYLE) return cJSON_CreateString(s);
    if (word_in(s, NUL)) return cJSON_CreateNull();
    if (word_in(s, YES)) return cJSON_CreateTrue();
    if (word_in(s, NO)) return cJSON_CreateFalse();
    const char *d = s + (*s == '-' || *s == '+');
    if ((*d >= '0' && *d <= '9') || (*d == '.' && d[1] >= '0' && d[1] <= '9')) {
        char *end;
        double v = strtod(s, &end);
        if (*end == 0) return cJSON_CreateNumber(v);
    }
    return cJSON_CreateString(s);
}

static cJSON *yaml_json(yaml_document_t *d, yaml_node_t *n, int depth) {
    if (!n || depth > DOC_MAX_DEPTH) return NULL;
    if (n->type == YAML_SCALAR_NODE) return yaml_scalar((const char *)n->data.scalar.value, n->data.scalar.style);
    if (n->type == YAML_SEQUENCE_NODE) {
        cJSON *a = cJSON_CreateArray();
        for (yaml_node_item_t *it = n->data.sequence.items.start; it < n->data.sequence.items.top; it++) {
            cJSON *e = yaml_json(d, yaml_document_get_node(d, *it), depth + 1);
            if (!e) { cJSON_Delete(a); return NULL; }
            cJSON_AddItemToArray(a, e);
        }
        return a;
    }
    if (n->type != YAML_MAPPING_NODE) return NULL;
    cJSON *o = cJSON_CreateObject();
    for (yaml_node_pair_t *p = n->data.mapping.pairs.start; p < n->data.mapping.pairs.top; p++) {
        yaml_node_t *k = yaml_document_get_node(d, p->key);
        cJSON *v = k && k->type == YAML_SCALAR_NODE ? yaml_json(d, yaml_document_get_node(d, p->value), depth + 1) : NULL;
        if (!v) { cJSON_Delete(o); return NULL; }
        cJSON_AddItemToObject(o, (const char *)k->data.scalar.value, v);
    }
    return o;
}

static cJSON *parse_yaml(const char *text, const char *name, char *err, size_t errlen) {
    yaml_parser_t p;
    yaml_document_t d;
    cJSON *j = NULL;
    if (!yaml_parser_initialize(&p)) { snprintf(err, errlen, "out of memory reading %s", name); return NULL; }
    yaml_parser_set_input_string(&p, (const unsigned char *)text, strlen(text));
    if (!yaml_parser_load(&p, &d)) {
        snprintf(err, errlen, "%s is not valid YAML: line %lu: %s", name, (unsigned long)p.problem_mark.line + 1,
                 p.problem ? p.problem : "syntax error");
        yaml_parser_delete(&p);
        return NULL;
    }
    yaml_node_t *root = yaml_document_get_root_node(&d);
    j = root ? yaml_json(&d, root, 0) : NULL;
    if (!j || !cJSON_IsObject(j)) {
        snprintf(err, errlen, "%s is not a YAML mapping of keys to values%s", name, j ? "" : " (or nests too deep)");
        cJSON_Delete(j);
        j = NULL;
    }
    yaml_document_delete(&d);
    yaml_parser_delete(&p);
    return j;
}

/* ---- TOML: tomlc17's tree; dates and times as their text ---- */

static cJSON *toml_json(toml_datum_t d, int depth) {
    if (depth > DOC_MAX_DEPTH) return NULL;
    switch (d.type) {
    case TOML_STRING: return cJSON_CreateString(d.u.s);
    case TOML_INT64: return cJSON_CreateNumber((double)d.u.int64);
    case TOML_FP64: return cJSON_CreateNumber(d.u.fp64);
    case TOML_BOOLEAN: return cJSON_CreateBool(d.u.boolean);
    case TOML_ARRAY: {
        cJSON *a = cJSON_CreateArray();
        for (int i = 0; i < d.u.arr.size; i++) {
            cJSON *e = toml_json(d.u.arr.elem[i], depth + 1);
            if (!e) { cJSON_Delete(a); return NULL; }
            cJSON_AddItemToArray(a, e);
        }
        return a;
    }
    case TOML_TABLE: {
        cJSON *o = cJSON_CreateObject();
        for (int i = 0; i < d.u.tab.size; i++) {
            cJSON *e = toml_json(d.u.tab.value[i], depth + 1);
            if (!e) { cJSON_Delete(o); return NULL; }
            cJSON_AddItemToObject(o, d.u.tab.key[i], e);
        }
        return o;
    }
    default: return cJSON_CreateString("(a date or time)");
    }
}

static cJSON *parse_toml(const char *text, const char *name, char *err, size_t errlen) {
    toml_result_t r = toml_parse(text, (int)strlen(text));
    cJSON *j = NULL;
    if (!r.ok) snprintf(err, errlen, "%s is not valid TOML: %s", name, r.errmsg);
    else if (!(j = toml_json(r.toptab, 0))) snprintf(err, errlen, "%s nests too deep", name);
    toml_free(r);
    return j;
}

cJSON *cfg_doc_parse(const char *text, DocFormat fmt, const char *name, char *err, size_t errlen) {
    if (fmt == DOC_YAML) return parse_yaml(text, name, err, errlen);
    if (fmt == DOC_TOML) return parse_toml(text, name, err, errlen);
    const char *end = NULL;
    cJSON *j = cJSON_ParseWithOpts(text, &end, 1);
    if (!j || !cJSON_IsObject(j)) {
        int line = 1;
        for (const char *p = text; end && p < end; p++) line += *p == '\n';
        if (j) snprintf(err, errlen, "%s is not a JSON object of keys to values", name);
        else snprintf(err, errlen, "%s is not valid JSON (line %d)", name, line);
        cJSON_Delete(j);
        return NULL;
    }
    return j;
}

/* ---- values and keys ---- */

char *cfg_fmt(char *buf, size_t len, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, len, fmt, ap);
    va_end(ap);
    return buf;
}

const char *cfg_text(const cJSON *v, char *buf, size_t len) {
    if (cJSON_IsString(v)) snprintf(buf, len, "%s", v->valuestring);
    else if (cJSON_IsNumber(v) && v->valuedouble == floor(v->valuedouble) && fabs(v->valuedouble) < 1e18)
        snprintf(buf, len, "%.0f", v->valuedouble);
    else if (cJSON_IsNumber(v)) snprintf(buf, len, "%g", v->valuedouble);
    else if (cJSON_IsBool(v)) snprintf(buf, len, "%s", cJSON_IsTrue(v) ? "true" : "false");
    else if (cJSON_IsArray(v)) snprintf(buf, len, "[...]");
    else if (cJSON_IsObject(v)) snprintf(buf, len, "{...}");
    else snprintf(buf, len, "null");
    return buf;
}

/* Not set: absent, null, "auto" (the HF Trainer or accelerate fills it in), an empty list or table. */
static int unset(const cJSON *v) {
    return !v || cJSON_IsNull(v) || (cJSON_IsString(v) && strcmp(v->valuestring, "auto") == 0) ||
           ((cJSON_IsArray(v) || cJSON_IsObject(v)) && !v->child);
}

const cJSON *cfg_item(const cJSON *obj, const char *name) {
    const cJSON *v = cJSON_IsObject(obj) ? cJSON_GetObjectItemCaseSensitive(obj, name) : NULL;
    return unset(v) ? NULL : v;
}

const char *cfg_key(const Cfg *c, const char *parent, const char *name, char *buf, size_t len) {
    snprintf(buf, len, "%s%s%s%s", c->prefix, parent && *parent ? parent : "", parent && *parent ? "." : "", name);
    return buf;
}


int cfg_fail(Cfg *c, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = snprintf(c->err, c->errlen, "%s: ", c->file);
    if (n >= 0 && (size_t)n < c->errlen) vsnprintf(c->err + n, c->errlen - (size_t)n, fmt, ap);
    va_end(ap);
    return -1;
}

int cfg_bad(Cfg *c, const char *key, const cJSON *v, const char *valid) {
    char t[64];
    return cfg_fail(c, "%s %s%s%s is not valid (valid: %s)", key, cJSON_IsString(v) ? "'" : "", cfg_text(v, t, sizeof t),
                cJSON_IsString(v) ? "'" : "", valid);
}

/* v as a number: a JSON number, or a string that parses whole ("8", "1e6"). 0, or -1. */
static int as_number(const cJSON *v, double *d) {
    if (cJSON_IsNumber(v)) { *d = v->valuedouble; return 0; }
    if (!cJSON_IsString(v) || !*v->valuestring) return -1;
    char *end;
    *d = strtod(v->valuestring, &end);
    return *end ? -1 : 0;
}

/* A number in [lo, hi] (whole: a whole number). */
static int number(Cfg *c, const cJSON *obj, const char *parent, const char *name, double lo, double hi, int whole,
                  double *out) {
    const cJSON *v = cfg_item(obj, name);
    if (!v) return 0;
    double d;
    char key[200], valid[96];
    if (as_number(v, &d) || (whole && d != floor(d)) || !(d >= lo && d <= hi)) {
        snprintf(valid, sizeof valid, "a %s from %.15g to %.15g", whole ? "whole number" : "number", lo, hi);
        return cfg_bad(c, cfg_key(c, parent, name, key, sizeof key), v, valid);
    }
    *out = d;
    return 1;
}

int cfg_num(Cfg *c, const cJSON *obj, const char *parent, const char *name, double lo, double hi, double *out) {
    return number(c, obj, parent, name, lo, hi, 0, out);
}

int cfg_int(Cfg *c, const cJSON *obj, const char *parent, const char *name, long long lo, long long hi, long long *out) {
    double d;
    int r = number(c, obj, parent, name, (double)lo, (double)hi, 1, &d);
    if (r == 1) *out = (long long)d;
    return r;
}

int cfg_bool(Cfg *c, const cJSON *obj, const char *parent, const char *name, int *out) {
    static const char *const YES[] = {"y", "yes", "t", "true", "on", "1", NULL};
    static const char *const NO[] = {"n", "no", "f", "false", "off", "0", NULL};
    const cJSON *v = cfg_item(obj, name);
    if (!v) return 0;
    char key[200], low[16] = "";
    if (cJSON_IsBool(v)) { *out = cJSON_IsTrue(v); return 1; }
    if (cJSON_IsNumber(v) && (v->valuedouble == 0 || v->valuedouble == 1)) { *out = v->valuedouble == 1; return 1; }
    if (cJSON_IsString(v) && strlen(v->valuestring) < sizeof low)
        for (size_t i = 0; v->valuestring[i]; i++) low[i] = (char)(v->valuestring[i] | 0x20);   /* ASCII lower case */
    if (word_in(low, YES)) { *out = 1; return 1; }
    if (word_in(low, NO)) { *out = 0; return 1; }
    return cfg_bad(c, cfg_key(c, parent, name, key, sizeof key), v, "true, false");
}

int cfg_choice(Cfg *c, const cJSON *obj, const char *parent, const char *name, const char *const *names, int n,
               int numbered, int *idx) {
    const cJSON *v = cfg_item(obj, name);
    if (!v) return 0;
    double d;
    for (int i = 0; i < n && cJSON_IsString(v); i++)
        if (strcasecmp(v->valuestring, names[i]) == 0) { *idx = i; return 1; }
    if (numbered && as_number(v, &d) == 0 && d == floor(d) && d >= 1 && d <= n) { *idx = (int)d - 1; return 1; }
    char key[200], valid[400];
    size_t o = 0;
    valid[0] = 0;
    for (int i = 0; i < n && o < sizeof valid; i++)
        o += (size_t)snprintf(valid + o, sizeof valid - o, "%s%s", i ? ", " : "", names[i]);
    if (numbered && o < sizeof valid) snprintf(valid + o, sizeof valid - o, ", or 1 to %d in that order", n);
    return cfg_bad(c, cfg_key(c, parent, name, key, sizeof key), v, valid);
}

/* ---- settings ---- */

const CfgSetting *cfg_setting(const Cfg *c, const char *flag) {
    for (int i = 0; i < c->out->n; i++)
        if (strcmp(c->out->set[i].flag, flag) == 0) return &c->out->set[i];
    return NULL;
}

int cfg_set(Cfg *c, const char *flag, const char *value, const char *key) {
    const CfgSetting *s = cfg_setting(c, flag);
    if (s && strcmp(s->value, value) == 0) return 0;
    if (s)
        return cfg_fail(c, "%s says --%s %s but %s says --%s %s: they must agree (the framework refuses them otherwise)",
                    s->key, flag, s->value, key, flag, value);
    if (c->out->n == CFG_MAX_SETTINGS) return cfg_fail(c, "more settings than memplan's %d", CFG_MAX_SETTINGS);
    CfgSetting *t = &c->out->set[c->out->n++];
    t->flag = flag;
    snprintf(t->value, sizeof t->value, "%s", value);
    snprintf(t->key, sizeof t->key, "%s", key);
    t->cmdline = NULL;
    return 0;
}

int cfg_setf(Cfg *c, const char *flag, long long value, const char *key) {
    char v[32];
    snprintf(v, sizeof v, "%lld", value);
    return cfg_set(c, flag, v, key);
}

void cfg_default(Cfg *c, const char *flag, const char *value, const char *key) {
    if (!cfg_setting(c, flag)) cfg_set(c, flag, value, key);
}

void cfg_no_effect(Cfg *c, const char *key) {
    cJSON_AddItemToArray(c->out->no_effect, cJSON_CreateString(key));
}

cJSON *cfg_load_named(Cfg *c, const char *name, const char *key) {
    char path[4096], e[600];
    snprintf(path, sizeof path, "%s%s%s", name[0] == '/' ? "" : c->dir, name[0] == '/' ? "" : "/", name);
    if (access(path, F_OK) != 0 && access(name, F_OK) == 0) snprintf(path, sizeof path, "%s", name);   /* the cwd's */
    char *text = cfg_doc_load(path, e, sizeof e);
    cJSON *j = text ? cfg_doc_parse(text, DOC_JSON, path, e, sizeof e) : NULL;
    free(text);
    if (!j) cfg_fail(c, "%s names %s: %s", key, name, e);
    return j;
}

void cfg_unmodelled(Cfg *c, const char *key, const cJSON *v) {
    char t[40], s[260];
    if (!v || cJSON_IsObject(v)) snprintf(s, sizeof s, "%s", key);
    else snprintf(s, sizeof s, "%s=%s", key, cfg_text(v, t, sizeof t));
    cJSON_AddItemToArray(c->out->not_modelled, cJSON_CreateString(s));
}

/* ---- the walk ---- */

static const CfgKey *lookup(const CfgKey *tab, const char *path) {
    const CfgKey *section = NULL;
    for (const CfgKey *k = tab; k->path; k++) {
        size_t n = strlen(k->path);
        if (strcmp(k->path, path) == 0) return k;
        if (n >= 2 && strcmp(k->path + n - 2, ".*") == 0 && strncmp(path, k->path, n - 1) == 0) section = k;
    }
    return section;
}

static int rules_under(const CfgKey *tab, const char *path) {
    size_t n = strlen(path);
    for (const CfgKey *k = tab; k->path; k++)
        if (strncmp(k->path, path, n) == 0 && k->path[n] == '.') return 1;
    return 0;
}

int cfg_ok_value(const char *ok, const char *text) {
    size_t n = strlen(text);
    for (const char *p = ok; p; p = strchr(p, '|') ? strchr(p, '|') + 1 : NULL)
        if (strncasecmp(p, text, n) == 0 && (p[n] == 0 || p[n] == '|')) return 1;
    return 0;
}

/* cpath: the parent's path in the table's names; dpath: as the file names it. */
static void walk(Cfg *c, const cJSON *obj, const char *cpath, const char *dpath, const CfgKey *tab, int depth) {
    size_t cl = strlen(cpath);
    int fsdp = cl >= 11 && strcmp(cpath + cl - 11, "fsdp_config") == 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, obj) {
        if (unset(it) || depth > DOC_MAX_DEPTH) continue;
        const char *canon = fsdp && strncmp(it->string, "fsdp_", 5) == 0 ? it->string + 5 : it->string;
        char cp[256], dp[256], key[400], t[64];
        snprintf(cp, sizeof cp, "%s%s%s", cpath, *cpath ? "." : "", canon);
        snprintf(dp, sizeof dp, "%s%s%s", dpath, *dpath ? "." : "", it->string);
        cfg_key(c, NULL, dp, key, sizeof key);
        const CfgKey *k = lookup(tab, cp);
        if (k && k->cls == KEY_HONOURED) continue;
        if (k && (k->cls == KEY_NO_EFFECT || cfg_ok_value(k->ok, cfg_text(it, t, sizeof t))))
            cfg_no_effect(c, key);
        else if (!k && cJSON_IsObject(it) && rules_under(tab, cp))
            walk(c, it, cp, dp, tab, depth + 1);
        else
            cfg_unmodelled(c, key, it);
    }
}

void cfg_walk(Cfg *c, const cJSON *obj, const char *parent, const CfgKey *tab) {
    walk(c, obj, parent ? parent : "", parent ? parent : "", tab, 0);
}
