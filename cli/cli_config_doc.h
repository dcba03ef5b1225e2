/* cli_config_doc.h — reading a config document for cli_config.c: JSON, YAML (libyaml) and TOML
 * (tomlc17) parsed into one cJSON tree; typed reads of its keys with one-line errors that name
 * the key, the value and the valid ones; the settings a file amounts to; and the walk that sorts
 * every key into honoured, no effect or not modelled by a kind's table. */
#ifndef CLI_CONFIG_DOC_H
#define CLI_CONFIG_DOC_H

#include <cjson/cJSON.h>

#include "cli_config.h"

typedef enum { DOC_JSON = 0, DOC_YAML, DOC_TOML } DocFormat;

/* Parses text (NUL-terminated) as fmt into a cJSON tree. NULL with one line in err if it is not
 * valid (name: the file, for the message). */
cJSON *cfg_doc_parse(const char *text, DocFormat fmt, const char *name, char *err, size_t errlen);
/* Duplicate keys, which cfg_doc_parse keeps where they stand: their paths appended to found;
 * refuse: -1 at the first (DeepSpeed's and OmegaConf's rule); else the earlier ones are dropped,
 * the last read wins (json.load's and PyYAML's), and 0. */
int cfg_doc_dups(cJSON *doc, int refuse, cJSON *found);
/* The whole file (at most 4 MiB) in a malloc'd NUL-terminated buffer, or NULL with err. */
char *cfg_doc_load(const char *path, char *err, size_t errlen);

/* How a kind treats a key (a leaf, or a whole section). */
typedef enum {
    KEY_HONOURED = 1,   /* read by the kind's mapping onto flags (which may still warn for some values) */
    KEY_NO_EFFECT,      /* no effect on memory, communication or time: accepted silently */
    KEY_DEFAULT_ONLY,   /* modelled at the value(s) in `ok` ("a|b"): other values are not modelled */
} KeyClass;

typedef struct {
    const char *path;   /* "zero_optimization.stage"; "scheduler.*" covers a whole section */
    KeyClass cls;
    const char *ok;     /* KEY_DEFAULT_ONLY: the values memplan models, as cfg_text writes them */
} CfgKey;

/* The reading of one file: where settings and warnings go, and how keys are named. */
typedef struct {
    CliConfig *out;
    const CfgKnown *known;
    char *err;
    size_t errlen;
    const char *file;        /* the config's path, for messages */
    const char *dir;         /* its folder, for files it names */
    char prefix[96];         /* before every key named: "" / "deepspeed." / "ds_config.json:" */
} Cfg;

/* A key's value as text: strings as they are, whole numbers without exponent, true/false/null;
 * arrays and objects as "[...]" / "{...}". */
const char *cfg_text(const cJSON *v, char *buf, size_t len);
/* snprintf into buf for labels and keys, where a cut text is acceptable; returns buf. */
char *cfg_fmt(char *buf, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* 1 if text is one of ok's values ("a|b", case-insensitive). */
int cfg_ok_value(const char *ok, const char *text);
/* The item `name` of obj, NULL if absent or "auto" (filled in by the HF Trainer / accelerate). */
const cJSON *cfg_item(const cJSON *obj, const char *name);
/* The key as the user knows it: prefix + parent + "." + name. */
const char *cfg_key(const Cfg *c, const char *parent, const char *name, char *buf, size_t len);

/* Typed reads of obj's `name` (parent: its path, for messages): 1 set, 0 absent (or "auto"),
 * -1 after a one-line error. Numbers may be strings that parse whole ("8"). */
int cfg_int(Cfg *c, const cJSON *obj, const char *parent, const char *name, long long lo, long long hi, long long *out);
int cfg_num(Cfg *c, const cJSON *obj, const char *parent, const char *name, double lo, double hi, double *out);
int cfg_bool(Cfg *c, const cJSON *obj, const char *parent, const char *name, int *out);
/* A string among names (case-insensitive); *idx its position. numbered: a whole number k in
 * 1..n stands for names[k - 1] too (accelerate's FSDP enums: 1 = FULL_SHARD). */
int cfg_choice(Cfg *c, const cJSON *obj, const char *parent, const char *name, const char *const *names, int n,
               int numbered, int *idx);
/* A one-line error "FILE: ..." in c->err; returns -1. */
int cfg_fail(Cfg *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A one-line error "FILE: KEY VALUE is not valid (valid: ...)"; returns -1. */
int cfg_bad(Cfg *c, const char *key, const cJSON *v, const char *valid);

/* Sets --flag value from key. A second source of the same flag must agree: else a one-line
 * error naming both (-1). */
int cfg_set(Cfg *c, const char *flag, const char *value, const char *key);
int cfg_setf(Cfg *c, const char *flag, long long value, const char *key);
/* A setting the file leaves "auto" to its launcher (CfgSetting.deferred): the command line gives
 * it, or auto searches it among choices ("a|b", NULL: every value); filler: who fills it. 0 or -1. */
int cfg_defer(Cfg *c, const char *flag, const char *key, const char *choices, const char *filler);
/* A resolution the header names ("read as the framework reads it: ..."). */
void cfg_note(Cfg *c, const char *note);
/* obj's `name`, when present, must be a table (DeepSpeed's sections, a recipe's kwargs): -1 after
 * a one-line error naming the key and its value otherwise, 0 when it is one or absent. */
int cfg_section(Cfg *c, const cJSON *obj, const char *parent, const char *name);
/* Sets --flag value unless the file already set it: the framework's default (key says so). */
void cfg_default(Cfg *c, const char *flag, const char *value, const char *key);
/* The setting of flag, or NULL. */
const CfgSetting *cfg_setting(const Cfg *c, const char *flag);
/* Names key (with its value) in the "not modelled" warning / among the keys of no effect. */
void cfg_unmodelled(Cfg *c, const char *key, const cJSON *v);
void cfg_no_effect(Cfg *c, const char *key);
/* A JSON file another config names (accelerate's deepspeed_config_file, the Trainer's deepspeed
 * path), relative to the config's folder; key: the naming key, for messages. NULL after err. */
cJSON *cfg_load_named(Cfg *c, const char *name, const char *key);

/* Sorts every key of obj (found at parent) by tab: KEY_NO_EFFECT and KEY_DEFAULT_ONLY at an ok
 * value go to no_effect, KEY_DEFAULT_ONLY at another value and keys tab lacks to not_modelled;
 * KEY_HONOURED is left to the kind's mapping. "auto" values count as not set. Under a key
 * named "fsdp_config", a leading "fsdp_" of a key is dropped before the lookup, as the HF
 * Trainer does (accelerate writes fsdp_version, the Trainer reads version). */
void cfg_walk(Cfg *c, const cJSON *obj, const char *parent, const CfgKey *tab);
/* The same over several tables (NULL-terminated), from the top of obj: a recipe's own keys and
 * the TrainingArguments it extends. A row "name*" (no dot) covers every top-level key starting so. */
void cfg_walk_tables(Cfg *c, const cJSON *obj, const CfgKey *const *tabs);

#endif
