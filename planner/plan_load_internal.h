/* plan_load_internal.h — what the three loaders share (not part of the planner's API): the
 * error context, typed field readers that name the file and the field in their messages, and
 * each format's entry point. Every reader returns 0 or -1 (message written). */
#ifndef PLAN_LOAD_INTERNAL_H
#define PLAN_LOAD_INTERNAL_H

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>

#include "plan_model.h"

/* Integers in the formats must be exact in a double (JSON numbers are doubles in cJSON). */
#define LD_MAX_EXACT 9007199254740992LL   /* 2^53 */
/* More parameters than this is taken as a mistake (same bound as plan_model_transformer). */
#define LD_MAX_PARAMS 1000000000000000LL  /* 10^15 */

typedef struct {
    const char *label;       /* the file, for messages */
    char *msg;
    size_t msglen;
    int null_is_absent;      /* Hugging Face configs write null for "use the default" */
} LoadCtx;

/* "label: <text>"; returns -1. */
int ld_fail(LoadCtx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A short description of a JSON value for messages: "-3", "2.5", "the string \"abc\"",
 * "an array", "true", "null". */
void ld_describe(const cJSON *v, char *out, size_t outlen);

/* Field readers. obj's member `key` (case-sensitive); `prefix` goes before the key in messages
 * ("layers[3]." or ""). Absent (or null when null_is_absent): required → "missing field",
 * otherwise *out = def. */
int ld_int(LoadCtx *c, const cJSON *obj, const char *prefix, const char *key, int required,
           int64_t def, int64_t lo, int64_t hi, int64_t *out);
int ld_int32(LoadCtx *c, const cJSON *obj, const char *prefix, const char *key, int required,
             int def, int lo, int hi, int *out);
int ld_num(LoadCtx *c, const cJSON *obj, const char *prefix, const char *key, int required,
           double def, double lo, double hi, double *out);
/* true/false; allow_01 also takes the numbers 0 and 1. */
int ld_bool(LoadCtx *c, const cJSON *obj, const char *prefix, const char *key, int required,
            int def, int allow_01, int *out);
/* A string of at most outlen-1 bytes (longer is an error naming the limit). */
int ld_str(LoadCtx *c, const cJSON *obj, const char *prefix, const char *key, int required,
           const char *def, char *out, size_t outlen);
/* A value (not an object member) as an integer in [lo, hi]; `what` names it in messages. */
int ld_value_int(LoadCtx *c, const cJSON *v, const char *what, int64_t lo, int64_t hi,
                 int64_t *out);
/* Rejects a key of obj not in known[] (NULL-terminated) and a key given twice. */
int ld_known_keys(LoadCtx *c, const cJSON *obj, const char *prefix, const char *const *known);

/* The formats. root is the parsed top-level object. */
int ld_hf_config(ModelSpec *m, const cJSON *root, LoadCtx *c);
int ld_params_json(ModelSpec *m, const cJSON *root, LoadCtx *c);
int ld_memplan_json(ModelSpec *m, const cJSON *root, LoadCtx *c);

/* A model name from a file label: "dir/llama/config.json" → "llama", "x/resnet.json" →
 * "resnet". */
void ld_name_from_label(const char *label, char *out, size_t outlen);

#endif
