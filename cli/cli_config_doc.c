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
#define DOC_MAX_BRACKETS 1000  /* [ and { before any parser runs (cJSON's own limit) */
#define DOC_MAX_NODES 100000   /* values in one document, aliases expanded: a config has a few hundred */

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

/* ---- YAML: libyaml's event stream built into a tree, scalars typed as YAML 1.1 (PyYAML's
 *      safe_load) types them. Built from events, not libyaml's document loader, so that every
 *      bound holds while it is read: DOC_MAX_DEPTH levels, DOC_MAX_NODES values with every alias
 *      expanded (an alias bomb stops at the bound, not at the end of memory), merge keys ("<<",
 *      PyYAML's SafeConstructor.flatten_mapping) applied, a duplicate key kept in its place for
 *      the kind's own rule (cfg_doc_dups). ---- */

static int word_in(const char *s, const char *const *words) {
    for (; *words; words++)
        if (strcmp(s, *words) == 0) return 1;
    return 0;
}

static cJSON *yaml_scalar(const char *s, yaml_scalar_style_t style, const char *tag) {
    static const char *const NUL[] = {"", "~", "null", "Null", "NULL", NULL};
    static const char *const YES[] = {"true", "True", "TRUE", "yes", "Yes", "YES", "on", "On", "ON", NULL};
    static const char *const NO[] = {"false", "False", "FALSE", "no", "No", "NO", "off", "Off", "OFF", NULL};
    if (tag && strcmp(tag, "tag:yaml.org,2002:str") == 0) return cJSON_CreateString(s);
    if (style != YAML_PLAIN_SCALAR_STYLE) return cJSON_CreateString(s);
    if (word_in(s, NUL)) return cJSON_CreateNull();
    if (word_in(s, YES)) return cJSON_CreateTrue();
    if (word_in(s, NO)) return cJSON_CreateFalse();
    const char *d = s + (*s == '-' || *s == '+');
    if ((*d >= '0' && *d <= '9') || (*d == '.' && d[1] >= '0' && d[1] <= '9')) {
        char *end;
        double v = strtod(s, &end);
        if (*end == 0 && isfinite(v)) return cJSON_CreateNumber(v);
    }
    return cJSON_CreateString(s);
}

typedef struct {
    char *name;
    cJSON *node;              /* the anchored value as built (aliases duplicate it) */
    long count;               /* its values, for the expansion bound */
} YamlAnchor;

typedef struct {
    yaml_parser_t p;
    YamlAnchor *anchors;
    int n_anchors, cap_anchors;
    long values;              /* values built so far, aliases expanded */
    const char *name;
    char *err;
    size_t errlen;
    int failed;
} YamlBuild;

static void *yb_fail(YamlBuild *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void *yb_fail(YamlBuild *b, const char *fmt, ...) {
    if (b->failed++) return NULL;
    va_list ap;
    va_start(ap, fmt);
    int n = snprintf(b->err, b->errlen, "%s ", b->name);
    if (n >= 0 && (size_t)n < b->errlen) vsnprintf(b->err + n, b->errlen - (size_t)n, fmt, ap);
    va_end(ap);
    return NULL;
}

static long yb_count(const cJSON *v) {
    long n = 1;
    for (const cJSON *c = v ? v->child : NULL; c; c = c->next) n += yb_count(c);
    return n;
}

static int yb_next(YamlBuild *b, yaml_event_t *ev) {
    if (yaml_parser_parse(&b->p, ev)) return 0;
    yb_fail(b, "is not valid YAML: line %lu: %s", (unsigned long)b->p.problem_mark.line + 1,
            b->p.problem ? b->p.problem : "syntax error");
    return -1;
}

static int yb_anchor(YamlBuild *b, const yaml_char_t *anchor, const cJSON *node) {
    if (!anchor || !node) return 0;
    if (b->n_anchors == b->cap_anchors) {
        int cap = b->cap_anchors ? 2 * b->cap_anchors : 8;
        YamlAnchor *a = realloc(b->anchors, sizeof *a * (size_t)cap);
        if (!a) { yb_fail(b, "cannot be read: out of memory"); return -1; }
        b->anchors = a;
        b->cap_anchors = cap;
    }
    YamlAnchor *a = &b->anchors[b->n_anchors];
    a->name = strdup((const char *)anchor);
    a->node = cJSON_Duplicate(node, 1);
    a->count = yb_count(node);
    if (!a->name || !a->node) { free(a->name); cJSON_Delete(a->node); yb_fail(b, "cannot be read: out of memory"); return -1; }
    b->n_anchors++;
    return 0;
}

/* Counts n more values against the bound. */
static int yb_spend(YamlBuild *b, long n) {
    b->values += n;
    if (b->values <= DOC_MAX_NODES) return 0;
    yb_fail(b, "holds more than %d values once its YAML aliases are expanded (an alias bomb?): not a training config",
            DOC_MAX_NODES);
    return -1;
}

static cJSON *yb_node(YamlBuild *b, yaml_event_t *ev, int depth);

/* PyYAML's merge: each mapping that "<<" names (one, or a list of them) lends the keys the
   mapping does not have yet; explicit keys win wherever they stand (flatten_mapping). */
static int yb_merge(YamlBuild *b, cJSON *into, cJSON *merged, cJSON *explicit_keys) {
    cJSON *list = cJSON_IsArray(merged) ? merged : NULL;
    for (cJSON *m = list ? list->child : merged; m; m = list ? m->next : NULL) {
        if (!cJSON_IsObject(m)) { yb_fail(b, "has a merge key (<<) whose value is not a mapping (PyYAML refuses it)"); return -1; }
        for (cJSON *kv = m->child; kv; kv = kv->next) {
            if (cJSON_GetObjectItemCaseSensitive(explicit_keys, kv->string) || cJSON_GetObjectItemCaseSensitive(into, kv->string))
                continue;
            cJSON *dup = cJSON_Duplicate(kv, 1);
            if (!dup || yb_spend(b, yb_count(kv))) { cJSON_Delete(dup); return -1; }
            cJSON_AddItemToObject(into, kv->string, dup);
        }
    }
    return 0;
}

static cJSON *yb_mapping(YamlBuild *b, int depth) {
    cJSON *o = cJSON_CreateObject(), *keys = cJSON_CreateObject(), *merges = cJSON_CreateArray();
    yaml_event_t ev;
    if (!o || !keys || !merges) goto fail;
    for (;;) {
        if (yb_next(b, &ev)) goto fail;
        if (ev.type == YAML_MAPPING_END_EVENT) { yaml_event_delete(&ev); break; }
        int is_merge = ev.type == YAML_SCALAR_EVENT && ev.data.scalar.style == YAML_PLAIN_SCALAR_STYLE &&
                       strcmp((const char *)ev.data.scalar.value, "<<") == 0;
        cJSON *k = yb_node(b, &ev, depth + 1);   /* consumes ev */
        if (!k) goto fail;
        if (!is_merge && !cJSON_IsString(k) && !cJSON_IsNumber(k) && !cJSON_IsBool(k) && !cJSON_IsNull(k)) {
            cJSON_Delete(k);
            yb_fail(b, "has a key that is a list or a mapping: a training config's keys are names");
            goto fail;
        }
        char kbuf[64];
        const char *key = cJSON_IsString(k) ? k->valuestring : cfg_text(k, kbuf, sizeof kbuf);
        if (yb_next(b, &ev)) { cJSON_Delete(k); goto fail; }
        cJSON *v = yb_node(b, &ev, depth + 1);
        if (!v) { cJSON_Delete(k); goto fail; }
        if (is_merge) cJSON_AddItemToArray(merges, v);
        else {
            cJSON_AddItemToObject(o, key, v);   /* a duplicate stays in place: cfg_doc_dups applies the kind's rule */
            cJSON_AddItemToObject(keys, key, cJSON_CreateTrue());
        }
        cJSON_Delete(k);
    }
    for (cJSON *m = merges->child; m; m = m->next)
        if (yb_merge(b, o, m, keys)) goto fail;
    cJSON_Delete(keys);
    cJSON_Delete(merges);
    return o;
fail:
    cJSON_Delete(o);
    cJSON_Delete(keys);
    cJSON_Delete(merges);
    return b->failed ? NULL : yb_fail(b, "cannot be read: out of memory");
}

static cJSON *yb_sequence(YamlBuild *b, int depth) {
    cJSON *a = cJSON_CreateArray();
    yaml_event_t ev;
    if (!a) return yb_fail(b, "cannot be read: out of memory");
    for (;;) {
        if (yb_next(b, &ev)) break;
        if (ev.type == YAML_SEQUENCE_END_EVENT) { yaml_event_delete(&ev); return a; }
        cJSON *e = yb_node(b, &ev, depth + 1);
        if (!e) break;
        cJSON_AddItemToArray(a, e);
    }
    cJSON_Delete(a);
    return NULL;
}

/* The value that starts with ev (which it consumes), NULL after yb_fail. */
static cJSON *yb_node(YamlBuild *b, yaml_event_t *ev, int depth) {
    cJSON *v = NULL;
    if (depth > DOC_MAX_DEPTH) {
        yaml_event_delete(ev);
        return yb_fail(b, "nests deeper than %d levels: not a training config", DOC_MAX_DEPTH);
    }
    if (yb_spend(b, 1)) { yaml_event_delete(ev); return NULL; }
    switch (ev->type) {
    case YAML_SCALAR_EVENT:
        v = yaml_scalar((const char *)ev->data.scalar.value, ev->data.scalar.style, (const char *)ev->data.scalar.tag);
        if (v && yb_anchor(b, ev->data.scalar.anchor, v)) { cJSON_Delete(v); v = NULL; }
        break;
    case YAML_ALIAS_EVENT: {
        const YamlAnchor *a = NULL;
        for (int i = b->n_anchors - 1; i >= 0 && !a; i--)
            if (strcmp(b->anchors[i].name, (const char *)ev->data.alias.anchor) == 0) a = &b->anchors[i];
        if (!a) { yb_fail(b, "has an alias *%.60s with no anchor before it", (const char *)ev->data.alias.anchor); break; }
        if (!yb_spend(b, a->count - 1)) v = cJSON_Duplicate(a->node, 1);
        if (!v && !b->failed) yb_fail(b, "cannot be read: out of memory");
        break;
    }
    case YAML_SEQUENCE_START_EVENT: {
        yaml_char_t *anchor = ev->data.sequence_start.anchor ? (yaml_char_t *)strdup((char *)ev->data.sequence_start.anchor) : NULL;
        yaml_event_delete(ev);
        v = yb_sequence(b, depth);
        if (v && yb_anchor(b, anchor, v)) { cJSON_Delete(v); v = NULL; }
        free(anchor);
        return v;
    }
    case YAML_MAPPING_START_EVENT: {
        yaml_char_t *anchor = ev->data.mapping_start.anchor ? (yaml_char_t *)strdup((char *)ev->data.mapping_start.anchor) : NULL;
        yaml_event_delete(ev);
        v = yb_mapping(b, depth);
        if (v && yb_anchor(b, anchor, v)) { cJSON_Delete(v); v = NULL; }
        free(anchor);
        return v;
    }
    default:
        yb_fail(b, "is not valid YAML (an unexpected event)");
    }
    yaml_event_delete(ev);
    return v;
}

static cJSON *parse_yaml(const char *text, const char *name, char *err, size_t errlen) {
    YamlBuild b = {.name = name, .err = err, .errlen = errlen};
    yaml_event_t ev;
    cJSON *j = NULL;
    if (!yaml_parser_initialize(&b.p)) { snprintf(err, errlen, "out of memory reading %s", name); return NULL; }
    yaml_parser_set_input_string(&b.p, (const unsigned char *)text, strlen(text));
    /* stream start, document start, the root value (an empty file: stream end) */
    while (!yb_next(&b, &ev)) {
        yaml_event_type_t t = ev.type;
        if (t == YAML_STREAM_START_EVENT || t == YAML_DOCUMENT_START_EVENT) { yaml_event_delete(&ev); continue; }
        if (t == YAML_STREAM_END_EVENT || t == YAML_DOCUMENT_END_EVENT) { yaml_event_delete(&ev); break; }
        j = yb_node(&b, &ev, 0);
        break;
    }
    if (j && !b.failed) {   /* a second document: PyYAML's safe_load refuses the stream */
        while (!yb_next(&b, &ev)) {
            yaml_event_type_t t = ev.type;
            yaml_event_delete(&ev);
            if (t == YAML_DOCUMENT_START_EVENT) { yb_fail(&b, "holds more than one YAML document (PyYAML's safe_load refuses it)"); break; }
            if (t == YAML_STREAM_END_EVENT) break;
        }
    }
    for (int i = 0; i < b.n_anchors; i++) { free(b.anchors[i].name); cJSON_Delete(b.anchors[i].node); }
    free(b.anchors);
    yaml_parser_delete(&b.p);
    if (b.failed) { cJSON_Delete(j); return NULL; }
    if (!j || !cJSON_IsObject(j)) {
        snprintf(err, errlen, "%s is not a YAML mapping of keys to values", name);
        cJSON_Delete(j);
        return NULL;
    }
    return j;
}

static int json_depth(const cJSON *v) {
    int most = 0;
    for (const cJSON *c = v ? v->child : NULL; c; c = c->next) {
        int d = json_depth(c);
        if (d > most) most = d;
    }
    return (cJSON_IsArray(v) || cJSON_IsObject(v)) + most;
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

/* The deepest nesting of [ and { outside quoted strings (and # comments outside JSON): a
   bound checked before any parser runs, so that a file of 100,000 open brackets is one line,
   not minutes of a parser's work. Block-style YAML nests by indentation, which the YAML
   builder bounds itself. */
static int bracket_depth(const char *s, DocFormat fmt) {
    int depth = 0, most = 0;
    char quote = 0;
    for (; *s; s++) {
        if (quote) {
            if (*s == '\\' && quote == '"' && s[1]) s++;
            else if (*s == quote) quote = 0;
            continue;
        }
        if (*s == '"' || (*s == '\'' && fmt != DOC_JSON)) quote = *s;
        else if (*s == '#' && fmt != DOC_JSON) { while (s[1] && s[1] != '\n') s++; }
        else if (*s == '[' || *s == '{') { if (++depth > most) most = depth; }
        else if ((*s == ']' || *s == '}') && depth > 0) depth--;
    }
    return most;
}

cJSON *cfg_doc_parse(const char *text, DocFormat fmt, const char *name, char *err, size_t errlen) {
    if (bracket_depth(text, fmt) > DOC_MAX_BRACKETS) {
        snprintf(err, errlen, "%s nests deeper than %d levels of brackets: not a training config", name, DOC_MAX_BRACKETS);
        return NULL;
    }
    if (fmt == DOC_YAML) return parse_yaml(text, name, err, errlen);
    cJSON *j = NULL;
    if (fmt == DOC_TOML) j = parse_toml(text, name, err, errlen);
    else {
        const char *end = NULL;
        j = cJSON_ParseWithOpts(text, &end, 1);
        if (!j || !cJSON_IsObject(j)) {
            int line = 1;
            for (const char *p = text; end && p < end; p++) line += *p == '\n';
            if (j) snprintf(err, errlen, "%s is not a JSON object of keys to values", name);
            else snprintf(err, errlen, "%s is not valid JSON (line %d)", name, line);
            cJSON_Delete(j);
            return NULL;
        }
    }
    if (j && yb_count(j) > DOC_MAX_NODES) {
        snprintf(err, errlen, "%s holds more than %d values: not a training config", name, DOC_MAX_NODES);
        cJSON_Delete(j);
        return NULL;
    }
    if (j && json_depth(j) > DOC_MAX_DEPTH) {
        snprintf(err, errlen, "%s nests deeper than %d levels: not a training config", name, DOC_MAX_DEPTH);
        cJSON_Delete(j);
        return NULL;
    }
    return j;
}

static void dups_walk(cJSON *o, const char *path, int refuse, cJSON *found, int *bad) {
    for (cJSON *a = o ? o->child : NULL; a && !*bad; a = a->next) {
        char p[256];
        if (cJSON_IsObject(o)) snprintf(p, sizeof p, "%s%s%s", path, *path ? "." : "", a->string);
        else snprintf(p, sizeof p, "%s", path);
        if (cJSON_IsObject(o)) {
            cJSON *later = NULL;
            for (cJSON *b = a->next; b && !later; b = b->next) if (strcmp(a->string, b->string) == 0) later = b;
            if (later) {
                cJSON_AddItemToArray(found, cJSON_CreateString(p));
                if (refuse) { *bad = 1; return; }
                a->string[0] = 0;   /* the earlier one: dropped below, the last read wins */
                continue;
            }
        }
        dups_walk(a, p, refuse, found, bad);
    }
    if (!cJSON_IsObject(o)) return;
    for (cJSON *a = o->child, *next; a; a = next) {
        next = a->next;
        if (!a->string[0]) cJSON_Delete(cJSON_DetachItemViaPointer(o, a));
    }
}

int cfg_doc_dups(cJSON *doc, int refuse, cJSON *found) {
    int bad = 0;
    dups_walk(doc, "", refuse, found, &bad);
    return bad ? -1 : 0;
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
    CfgSetting *d = (CfgSetting *)cfg_setting(c, flag);
    if (d && d->deferred) {   /* "auto" the launcher fills: a later key that gives it (accelerate's mixed_precision) */
        char note[400];
        cfg_fmt(note, sizeof note, "%s \"auto\" = %s", d->key, key);
        cfg_note(c, note);
        *d = c->out->set[--c->out->n];
        if (d == &c->out->set[c->out->n]) memset(d, 0, sizeof *d);
    }
    const CfgSetting *s = cfg_setting(c, flag);
    if (s && strcmp(s->value, value) == 0) return 0;
    if (s)
        return cfg_fail(c, "%s says --%s %s but %s says --%s %s: they must agree (the framework refuses them otherwise)",
                    s->key, flag, s->value, key, flag, value);
    if (c->out->n == CFG_MAX_SETTINGS) return cfg_fail(c, "more settings than memplan's %d", CFG_MAX_SETTINGS);
    CfgSetting *t = &c->out->set[c->out->n++];
    memset(t, 0, sizeof *t);
    t->flag = flag;
    snprintf(t->value, sizeof t->value, "%s", value);
    snprintf(t->key, sizeof t->key, "%s", key);
    return 0;
}

int cfg_setf(Cfg *c, const char *flag, long long value, const char *key) {
    char v[32];
    snprintf(v, sizeof v, "%lld", value);
    return cfg_set(c, flag, v, key);
}

int cfg_defer(Cfg *c, const char *flag, const char *key, const char *choices, const char *filler) {
    if (cfg_setting(c, flag)) return 0;
    if (c->out->n == CFG_MAX_SETTINGS) return cfg_fail(c, "more settings than memplan's %d", CFG_MAX_SETTINGS);
    CfgSetting *t = &c->out->set[c->out->n++];
    memset(t, 0, sizeof *t);
    t->flag = flag;
    t->deferred = 1;
    t->choices = choices;
    t->filler = filler;
    snprintf(t->key, sizeof t->key, "%s", key);
    return 0;
}

void cfg_note(Cfg *c, const char *note) {
    const cJSON *e;
    cJSON_ArrayForEach(e, c->out->notes) if (strcmp(e->valuestring, note) == 0) return;
    cJSON_AddItemToArray(c->out->notes, cJSON_CreateString(note));
}

int cfg_section(Cfg *c, const cJSON *obj, const char *parent, const char *name) {
    const cJSON *v = cJSON_IsObject(obj) ? cJSON_GetObjectItemCaseSensitive(obj, name) : NULL;
    if (!v || cJSON_IsNull(v) || cJSON_IsObject(v)) return 0;
    char key[200];
    return cfg_bad(c, cfg_key(c, parent, name, key, sizeof key), v, "a table of settings");
}

void cfg_default(Cfg *c, const char *flag, const char *value, const char *key) {
    if (!cfg_setting(c, flag)) cfg_set(c, flag, value, key);
}

void cfg_no_effect(Cfg *c, const char *key) {
    cJSON_AddItemToArray(c->out->no_effect, cJSON_CreateString(key));
}

cJSON *cfg_load_named(Cfg *c, const char *name, const char *key) {
    char path[8300], e[600], note[9000];
    int found = 0, up = 0;
    if (name[0] == '/') {
        snprintf(path, sizeof path, "%s", name);
        found = 1;
    }
    /* the naming file's folder, then each folder above it (llamafactory-cli and axolotl are run
       from the repository's root, and their recipes name files from there), then the working
       directory */
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", c->dir);
    for (; !found && up < 16; up++) {
        snprintf(path, sizeof path, "%s/%s", dir, name);
        if (access(path, F_OK) == 0) { found = 1; break; }
        char *slash = strrchr(dir, '/');
        if (!strcmp(dir, ".") || !strcmp(dir, "/")) break;
        if (slash == dir) snprintf(dir, sizeof dir, "/");
        else if (slash) *slash = 0;
        else snprintf(dir, sizeof dir, ".");
    }
    if (!found && access(name, F_OK) == 0) { snprintf(path, sizeof path, "%s", name); found = 1; up = -1; }
    if (!found) {
        cfg_fail(c, "%s names %s, which is not beside it, in a folder above it, nor in the working directory", key, name);
        return NULL;
    }
    if (up != 0) {
        cfg_fmt(note, sizeof note, "%s %s read as %s (%s)", key, name, path,
                up > 0 ? "found above the recipe's folder: the frameworks open it from the working directory" : "the working directory's");
        cfg_note(c, note);
    }
    char *text = cfg_doc_load(path, e, sizeof e);
    cJSON *j = text ? cfg_doc_parse(text, DOC_JSON, path, e, sizeof e) : NULL;
    free(text);
    if (!j) { cfg_fail(c, "%s names %s: %s", key, name, e); return NULL; }
    cJSON *dups = cJSON_CreateArray();
    cfg_doc_dups(j, 0, dups);   /* read by json.load (the Trainer, accelerate): the last one wins */
    if (cJSON_GetArraySize(dups) > 0) {
        cfg_fmt(note, sizeof note, "%s: duplicate key %s: the last one read (json.load, as the HF Trainer and accelerate read it)",
                name, cJSON_GetArrayItem(dups, 0)->valuestring);
        cfg_note(c, note);
    }
    cJSON_Delete(dups);
    return j;
}

void cfg_unmodelled(Cfg *c, const char *key, const cJSON *v) {
    char t[40], s[260];
    if (!v || cJSON_IsObject(v)) snprintf(s, sizeof s, "%s", key);
    else snprintf(s, sizeof s, "%s=%s", key, cfg_text(v, t, sizeof t));
    cJSON_AddItemToArray(c->out->not_modelled, cJSON_CreateString(s));
}

/* ---- the walk ---- */

/* A key's row: exact, else a section's "a.*", else a prefix "vllm_*"; tabs: NULL-terminated. */
static const CfgKey *lookup(const CfgKey *const *tabs, const char *path) {
    const CfgKey *section = NULL;
    for (; *tabs; tabs++)
        for (const CfgKey *k = *tabs; k->path; k++) {
            size_t n = strlen(k->path);
            if (strcmp(k->path, path) == 0) return k;
            if (n >= 2 && strcmp(k->path + n - 2, ".*") == 0 && strncmp(path, k->path, n - 1) == 0) section = k;
            else if (n >= 2 && k->path[n - 1] == '*' && k->path[n - 2] != '.' && strncmp(path, k->path, n - 1) == 0 &&
                     !strchr(path, '.'))
                section = k;
        }
    return section;
}

static int rules_under(const CfgKey *const *tabs, const char *path) {
    size_t n = strlen(path);
    for (; *tabs; tabs++)
        for (const CfgKey *k = *tabs; k->path; k++)
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
static void walk(Cfg *c, const cJSON *obj, const char *cpath, const char *dpath, const CfgKey *const *tab, int depth) {
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
    const CfgKey *const tabs[] = {tab, NULL};
    walk(c, obj, parent ? parent : "", parent ? parent : "", tabs, 0);
}

void cfg_walk_tables(Cfg *c, const cJSON *obj, const CfgKey *const *tabs) { walk(c, obj, "", "", tabs, 0); }
