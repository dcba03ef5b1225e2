/* cli_config.c — see cli_config.h. Reading is in cli_config_doc.c (formats, typed keys, the walk)
 * and cli_config_kinds.c (each kind's tables and mapping); this file is the front: the kind, the
 * flags inserted before the command line's, the header, the JSON, the cross-key checks. */
#include "cli_config.h"

#include <ctype.h>
#include <libgen.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "cli_config_doc.h"
#include "cli_config_kinds.h"

static const char *const KINDS[CFG_KIND_COUNT] = {"deepspeed", "accelerate", "torchtitan", "hf-trainer", "trl",
                                                  "llama-factory", "axolotl"};

int cli_config_kind_by_name(const char *s) {
    for (int k = 0; k < CFG_KIND_COUNT; k++)
        if (strcmp(s, KINDS[k]) == 0) return k;
    return -1;
}

const char *cli_config_kind_name(CfgKind k) { return k < CFG_KIND_COUNT ? KINDS[k] : "?"; }

const char *cli_config_kind_names(void) {
    static char buf[160];
    if (!buf[0])
        for (size_t o = 0, k = 0; k < CFG_KIND_COUNT; k++) o += (size_t)snprintf(buf + o, sizeof buf - o, "%s%s", k ? ", " : "", KINDS[k]);
    return buf;
}

/* The document and its kind: a '{' first is JSON (DeepSpeed, TrainingArguments or accelerate's
 * JSON); anything else is tried as TOML (torchtitan), then as YAML (accelerate). */
static cJSON *parse_any(const char *text, const char *path, int kind, int *found, char *err, size_t errlen) {
    const char *p = text;
    while (isspace((unsigned char)*p)) p++;
    int json = *p == '{';
    if (kind >= 0) {
        *found = kind;
        return cfg_doc_parse(text, json && kind == CFG_ACCELERATE ? DOC_JSON : cfg_kind_format((CfgKind)kind), path, err, errlen);
    }
    char e1[300] = "", e2[300] = "";
    cJSON *d = json ? cfg_doc_parse(text, DOC_JSON, path, err, errlen) : cfg_doc_parse(text, DOC_TOML, path, e1, sizeof e1);
    if (json && !d) return NULL;
    *found = d ? cfg_kind_detect(d, json ? DOC_JSON : DOC_TOML) : -1;
    if (*found < 0 && !json) {
        cJSON_Delete(d);
        d = cfg_doc_parse(text, DOC_YAML, path, e2, sizeof e2);
        *found = d ? cfg_kind_detect(d, DOC_YAML) : -1;
    }
    if (*found >= 0) return d;
    cJSON_Delete(d);
    /* a bound (nesting, aliases, size) is the answer whatever the format: said alone */
    static const char *const BOUNDS[] = {"nests deeper", "values once its YAML aliases", "holds more than"};
    for (size_t i = 0; i < sizeof BOUNDS / sizeof BOUNDS[0]; i++)
        for (const char *e = e1; e; e = e == e1 ? e2 : NULL)
            if (strstr(e, BOUNDS[i])) { snprintf(err, errlen, "%s", e); return NULL; }
    size_t n = strlen(path) + 1;   /* the details after "PATH is not valid TOML:" */
    if (e1[0] && e2[0])
        snprintf(err, errlen, "%s is neither a JSON object, nor valid TOML (%s), nor valid YAML (%s)", path,
                 strlen(e1) > n && strchr(e1 + n, ':') ? strchr(e1 + n, ':') + 2 : e1,
                 strlen(e2) > n && strchr(e2 + n, ':') ? strchr(e2 + n, ':') + 2 : e2);
    else
        snprintf(err, errlen, "cannot tell which kind of config %s is (no DeepSpeed, accelerate, torchtitan, TrainingArguments, "
                 "TRL, LLaMA-Factory or axolotl keys): give --config-kind (valid: %s)", path, cli_config_kind_names());
    return NULL;
}

int cli_config_read(CliConfig *c, const char *path, int kind, const CfgKnown *known, char *err, size_t errlen) {
    memset(c, 0, sizeof *c);
    c->path = path;
    c->detected = kind < 0;
    c->not_modelled = cJSON_CreateArray();
    c->no_effect = cJSON_CreateArray();
    c->notes = cJSON_CreateArray();
    char *text = cfg_doc_load(path, err, errlen);
    if (!text) return -1;
    int k = -1;
    cJSON *doc = parse_any(text, path, kind, &k, err, errlen);
    free(text);
    if (!doc) return -1;
    c->kind = (CfgKind)k;
    cJSON *dups = cJSON_CreateArray();
    if (cfg_kind_dups(doc, c->kind, dups, path, err, errlen)) {
        cJSON_Delete(dups);
        cJSON_Delete(doc);
        return -1;
    }
    if (cJSON_GetArraySize(dups) > 0) {
        char buf[600], one[300];
        size_t o = 0;
        const cJSON *e;
        cJSON_ArrayForEach(e, dups) if (o < sizeof buf) o += (size_t)snprintf(buf + o, sizeof buf - o, "%s%s", o ? ", " : "", e->valuestring);
        cfg_fmt(one, sizeof one, "duplicate key%s %s: the last one read (%s)", cJSON_GetArraySize(dups) > 1 ? "s" : "", buf,
                cfg_kind_dup_rule(c->kind));
        cJSON_AddItemToArray(c->notes, cJSON_CreateString(one));
    }
    cJSON_Delete(dups);
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s", path);
    Cfg r = {.out = c, .known = known, .err = err, .errlen = errlen, .file = path, .dir = dirname(dir)};
    int rc = cfg_kind_read(&r, c->kind, doc);
    cJSON_Delete(doc);
    return rc;
}

const CfgHidden CFG_HIDDEN[3] = {{"ds-reduce-bucket", 1, 0}, {"ds3-prefetch", 0.9, 0}, {"ds3-persist", 0, 10}};

int cli_config_hidden(CliConfig *c, long long h, const char *(*given)(const char *flag, const void *ctx), const void *ctx,
                      double values[3], char *err, size_t errlen) {
    for (int i = 0; i < 3; i++) {
        values[i] = -1;
        if (!(c->hidden_auto & (1u << i)) || given(CFG_HIDDEN[i].flag, ctx)) continue;
        if (h <= 0) {
            snprintf(err, errlen, "%s: %s \"auto\" is filled from the model's hidden size, which this model has not "
                     "(the Trainer refuses it too): give --%s", c->path, c->hidden_key[i], CFG_HIDDEN[i].flag);
            return -1;
        }
        values[i] = (double)(long long)(CFG_HIDDEN[i].h2 * (double)h * (double)h + CFG_HIDDEN[i].h1 * (double)h);
        if (c->n < CFG_MAX_SETTINGS) {
            char key[sizeof c->hidden_key[0]];   /* a copy: the setting is written into the same object */
            memcpy(key, c->hidden_key[i], sizeof key);
            CfgSetting *t = &c->set[c->n++];
            t->flag = CFG_HIDDEN[i].flag;
            t->cmdline = NULL;
            snprintf(t->value, sizeof t->value, "%.0f", values[i]);
            cfg_fmt(t->key, sizeof t->key, "%s \"auto\": %s from hidden size %lld", key,
                     i == 0 ? "h^2" : i == 1 ? "int(0.9 h^2)" : "10 h", h);
        }
    }
    return 0;
}

void cli_config_free(CliConfig *c) {
    cJSON_Delete(c->not_modelled);
    cJSON_Delete(c->no_effect);
    cJSON_Delete(c->notes);
    c->not_modelled = c->no_effect = c->notes = NULL;
    free(c->model_json);
    c->model_json = NULL;
    for (int i = 0; i < c->argc; i++) free(c->argv[i]);
    c->argc = 0;
}

int cli_config_merge(CliConfig *c, const char *(*given)(const char *flag, const void *ctx), const void *ctx,
                     int searching, char *err, size_t errlen) {
    for (int i = 0; i < c->n; i++) {
        CfgSetting *s = &c->set[i];
        s->cmdline = given(s->flag, ctx);
        if (s->cmdline && s->deferred && s->choices && !cfg_ok_value(s->choices, s->cmdline)) {
            char ok[96];
            snprintf(ok, sizeof ok, "%s", s->choices);
            for (char *p = ok; *p; p++) if (*p == '|') *p = ',';
            snprintf(err, errlen, "%s: %s is \"auto\", which %s fills in as one of %s; --%s %s is none of them", c->path,
                     s->key, s->filler ? s->filler : "the launcher", ok, s->flag, s->cmdline);
            return -1;
        }
        if (s->cmdline) continue;
        const char *pp = given("pp", ctx);
        if (strcmp(s->flag, "grad-accum") == 0 && pp && atoi(pp) > 1 && !given("microbatches", ctx) && !s->deferred) {
            /* the command line's pipeline stages: the file's accumulation is their micro-batches
               (the same global batch), or memplan's default of pp when fewer than the stages */
            char note[400];
            int keep = atoll(s->value) >= atoi(pp);
            snprintf(note, sizeof note, "%s %s under the command line's --pp %s: %s", s->key, s->value, pp,
                     keep ? "the pipeline's --microbatches" : "fewer than the stages, so the pipeline's default --microbatches (pp)");
            cJSON_AddItemToArray(c->notes, cJSON_CreateString(note));
            if (!keep) { s->dropped = 1; continue; }
            s->flag = "microbatches";
        }
        if (s->deferred) {
            if (searching) { s->searched = 1; continue; }
            char eg[96] = "";
            if (s->choices) {
                snprintf(eg, sizeof eg, " (valid: %s)", s->choices);
                for (char *p = eg; *p; p++) if (*p == '|') *p = ',';
            }
            snprintf(err, errlen, "%s: %s is \"auto\", which %s fills in and memplan cannot know here: give --%s%s, "
                     "or let 'memplan auto' search it", c->path, s->key, s->filler ? s->filler : "the launcher", s->flag, eg);
            return -1;
        }
        size_t n = strlen(s->flag) + 3;
        c->argv[c->argc] = malloc(n);
        if (c->argv[c->argc]) snprintf(c->argv[c->argc], n, "--%s", s->flag);
        c->argv[c->argc + 1] = strdup(s->value);
        c->argc += 2;
    }
    return 0;
}

const CfgSetting *cli_config_searched(const CliConfig *c, const char *flag) {
    for (int i = 0; c && i < c->n; i++)
        if (c->set[i].searched && strcmp(c->set[i].flag, flag) == 0) return &c->set[i];
    return NULL;
}

static void put_clean(FILE *f, const char *s);

static const char *joined(const cJSON *arr, char *buf, size_t len) {
    size_t o = 0;
    const cJSON *e;
    buf[0] = 0;
    cJSON_ArrayForEach(e, arr) if (o < len) o += (size_t)snprintf(buf + o, len - o, "%s%s", o ? ", " : "", e->valuestring);
    return buf;
}

void cli_config_warn(FILE *f, const CliConfig *c) {
    static char buf[16384];
    if (cJSON_GetArraySize(c->not_modelled) == 0) return;
    fputs("memplan: ", f);
    put_clean(f, c->path);
    fputs(": not modelled: ", f);
    put_clean(f, joined(c->not_modelled, buf, sizeof buf));
    fputc('\n', f);
}

/* Text for one line: control characters (a newline in a value) written as \n, \t or \xNN. */
static void put_clean(FILE *f, const char *s) {
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '\n') fputs("\\n", f);
        else if (ch == '\t') fputs("\\t", f);
        else if (ch < 0x20 || ch == 0x7f) fprintf(f, "\\x%02x", ch);
        else fputc(ch, f);
    }
}

void cli_config_header(FILE *f, const CliConfig *c) {
    fputs("# config: ", f);
    put_clean(f, c->path);
    fprintf(f, " (%s%s):", KINDS[c->kind], c->detected ? ", detected" : "");
    int n = 0, cmd = 0;
    for (int i = 0; i < c->n; i++) {
        const CfgSetting *s = &c->set[i];
        if (s->dropped) continue;
        if (s->cmdline && !s->deferred) { cmd++; continue; }
        fprintf(f, "%s --%s ", n++ ? "," : "", s->flag);
        if (s->deferred) fputs(s->cmdline ? s->cmdline : "searched by auto", f);
        else put_clean(f, s->value);
        fputs(" (", f);
        put_clean(f, s->key);
        if (s->deferred) fprintf(f, ": %s", s->cmdline ? "given by the command line" : "left to the search");
        fputc(')', f);
    }
    if (!n) fprintf(f, " no flags");
    if (cmd) fprintf(f, "; from the command line instead:");
    for (int i = 0, k = 0; i < c->n; i++) {
        const CfgSetting *s = &c->set[i];
        if (!s->cmdline || s->deferred) continue;
        fprintf(f, "%s --%s ", k++ ? "," : "", s->flag);
        put_clean(f, s->cmdline);
        fprintf(f, " (not %s from ", s->value);
        put_clean(f, s->key);
        fputc(')', f);
    }
    const cJSON *e;
    int k = 0;
    cJSON_ArrayForEach(e, c->notes) {
        fputs(k++ ? "; " : "; read as the framework reads it: ", f);
        put_clean(f, e->valuestring);
    }
    int nm = cJSON_GetArraySize(c->not_modelled);
    if (nm) fprintf(f, "; not modelled: %d key%s (named on standard error)", nm, nm == 1 ? "" : "s");
    fputc('\n', f);
}

cJSON *cli_config_json(const CliConfig *c) {
    cJSON *j = cJSON_CreateObject(), *a = cJSON_CreateArray();
    cJSON_AddStringToObject(j, "file", c->path);
    cJSON_AddStringToObject(j, "kind", KINDS[c->kind]);
    cJSON_AddBoolToObject(j, "detected", c->detected);
    for (int i = 0; i < c->n; i++) {
        cJSON *s = cJSON_CreateObject();
        cJSON_AddStringToObject(s, "flag", c->set[i].flag);
        cJSON_AddStringToObject(s, "value", c->set[i].value);
        cJSON_AddStringToObject(s, "key", c->set[i].key);
        cJSON_AddStringToObject(s, "source", c->set[i].dropped ? "dropped" : c->set[i].cmdline ? "command line"
                                             : c->set[i].deferred ? "auto search" : "config");
        if (c->set[i].cmdline) cJSON_AddStringToObject(s, "command_line_value", c->set[i].cmdline);
        if (c->set[i].deferred) cJSON_AddBoolToObject(s, "auto_in_file", 1);
        cJSON_AddItemToArray(a, s);
    }
    cJSON_AddItemToObject(j, "settings", a);
    cJSON_AddItemToObject(j, "not_modelled", cJSON_Duplicate(c->not_modelled, 1));
    cJSON_AddItemToObject(j, "no_effect", cJSON_Duplicate(c->no_effect, 1));
    cJSON_AddItemToObject(j, "notes", cJSON_Duplicate(c->notes, 1));
    return j;
}

/* "--batch 4 (train_micro_batch_size_per_gpu)", "--batch 8 (command line)" or memplan's default. */
typedef struct {
    const CliConfig *c;
    const char *(*given)(const char *flag, const void *ctx);
    const void *ctx;
} Sources;

static const char *factor(const Sources *s, const char *flag, long long v, char *buf, size_t len) {
    const char *src = s->given(flag, s->ctx) ? "command line" : "memplan's default";
    for (int i = 0; i < s->c->n; i++)
        if (strcmp(s->c->set[i].flag, flag) == 0 && !s->c->set[i].cmdline) src = s->c->set[i].key;
    snprintf(buf, len, "--%s %lld (%s)", flag, v, src);
    return buf;
}

int cli_config_check(const CliConfig *c, long long micro, long long accum, long long gpus, long long tp_pp,
                     const char *(*given)(const char *flag, const void *ctx), const void *ctx, char *err, size_t errlen) {
    long long dp = tp_pp > 1 ? gpus / tp_pp : gpus;
    if (c->global_batch <= 0 || micro * accum * dp == c->global_batch) return 0;
    Sources s = {c, given, ctx};
    char b[300], a[300], g[300];
    factor(&s, "gpus", gpus, g, sizeof g);
    if (tp_pp > 1) snprintf(g + strlen(g), sizeof g - strlen(g), " / (tp x pp) %lld", tp_pp);
    snprintf(err, errlen, "%s: %s %lld is not %s x %s x %s = %lld: the framework refuses a config whose batch sizes "
             "disagree; make them agree", c->path, c->global_key, c->global_batch, factor(&s, "batch", micro, b, sizeof b),
             factor(&s, "grad-accum", accum, a, sizeof a), g, micro * accum * dp);
    return -1;
}

int cli_config_model_check(const CliConfig *c, int blocks, long long hidden, const char *model_name, char *err, size_t errlen) {
    if (!c->flavor_layers || (blocks == c->flavor_layers && hidden == c->flavor_hidden)) return 0;
    snprintf(err, errlen, "%s: %s is not --model %s (%d blocks, hidden %lld): torchtitan would train the flavor; give the "
             "matching --model, or leave --model out to plan the flavor", c->path, c->flavor_key, model_name, blocks, hidden);
    return -1;
}

/* 1 if msg names the option "--flag" (not a longer one that starts the same). */
static int names_flag(const char *msg, const char *flag) {
    size_t n = strlen(flag);
    for (const char *p = strstr(msg, "--"); p; p = strstr(p + 2, "--"))
        if (strncmp(p + 2, flag, n) == 0 && !(isalnum((unsigned char)p[2 + n]) || p[2 + n] == '-')) return 1;
    return 0;
}

void cli_config_annotate(const CliConfig *c, char *msg, size_t len) {
    char *orig = strdup(msg);   /* the flags the message itself names, not the notes added */
    for (int i = 0; orig && i < c->n; i++) {
        const CfgSetting *s = &c->set[i];
        size_t o = strlen(msg);
        if (!s->cmdline && names_flag(orig, s->flag) && o < len)
            snprintf(msg + o, len - o, " (--%s %s is %s in %s)", s->flag, s->value, s->key, c->path);
    }
    free(orig);
}
