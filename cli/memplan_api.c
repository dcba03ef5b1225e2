/* memplan_api.c — an options document as memplan's command line, run in-process (memplan_api.h). */
#include "memplan_api.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_config_kinds.h"
#include "cli_setup.h"
#include "memplan_front.h"

/* The commands a document may name, and whether they take the shared planning options. */
static const struct {
    const char *name;
    int planning;
} COMMANDS[] = {{"plan", 1}, {"auto", 1}, {"models", 0}, {"gpus", 0}};
#define N_COMMANDS (sizeof COMMANDS / sizeof COMMANDS[0])

/* Options the caller owns: the document is the --json output, and there is no help to print. */
static int reserved(const char *name) { return strcmp(name, "json") == 0 || strcmp(name, "help") == 0; }

/* The option tables a command parses: the shared ones (planning commands), then its own. */
static int command_tables(const char *cmd, const struct option *tabs[2]) {
    for (size_t i = 0; i < N_COMMANDS; i++)
        if (strcmp(cmd, COMMANDS[i].name) == 0) {
            tabs[0] = COMMANDS[i].planning ? cli_setup_options() : NULL;
            tabs[1] = memplan_command_options(cmd);
            return 0;
        }
    return -1;
}

static const struct option *find_option(const struct option *const tabs[2], const char *flag) {
    for (int t = 0; t < 2; t++)
        for (const struct option *o = tabs[t]; o && o->name; o++)
            if (!reserved(o->name) && strcmp(o->name, flag) == 0) return o;
    return NULL;
}

/* "act_ckpt, alloc_conf, ..." : the names a document may use, as the Python keywords spell them. */
static void valid_names(const struct option *const tabs[2], char *buf, size_t len) {
    size_t n = 0;
    buf[0] = 0;
    for (int t = 0; t < 2; t++)
        for (const struct option *o = tabs[t]; o && o->name && n < len; o++) {
            if (reserved(o->name)) continue;
            size_t at = n + (n ? 2 : 0);
            n += (size_t)snprintf(buf + n, len - n, "%s%s", n ? ", " : "", o->name);
            for (size_t i = at; i < n && i < len; i++)
                if (buf[i] == '-') buf[i] = '_';
        }
}

/* A scalar as the flag's text: strings as given, whole numbers plainly, others in the fewest
 * digits that read back the same, booleans as on/off. 0, or -1 if v is not a scalar. */
static int scalar_text(const cJSON *v, char *buf, size_t len) {
    if (cJSON_IsString(v)) {
        snprintf(buf, len, "%s", v->valuestring);
        return 0;
    }
    if (cJSON_IsBool(v)) {
        snprintf(buf, len, "%s", cJSON_IsTrue(v) ? "on" : "off");
        return 0;
    }
    if (!cJSON_IsNumber(v)) return -1;
    double d = v->valuedouble;
    if (d == floor(d) && fabs(d) < 9.2e18) {
        snprintf(buf, len, "%.0f", d);
        return 0;
    }
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(buf, len, "%.*g", prec, d);
        if (strtod(buf, NULL) == d) break;
    }
    return 0;
}

static const char *type_name(const cJSON *v) {
    return cJSON_IsObject(v) ? "an object" : cJSON_IsArray(v) ? "a list" : "this value";
}

static int push(ApiArgv *a, const char *s) {
    char **grown = realloc(a->argv, ((size_t)a->argc + 2) * sizeof *grown);
    if (!grown) return -1;
    a->argv = grown;
    if (!(a->argv[a->argc] = strdup(s))) return -1;
    a->argv[++a->argc] = NULL;
    return 0;
}

/* One option of the document as "--flag" or "--flag=value" on a; 0, or 2 after msg. */
static int add_option(ApiArgv *a, const char *cmd, const struct option *const tabs[2], const cJSON *item, char *msg,
                      size_t msglen) {
    char flag[128], valid[4096], val[4096];
    snprintf(flag, sizeof flag, "%s", item->string);
    for (char *p = flag; *p; p++)
        if (*p == '_') *p = '-';
    const struct option *o = find_option(tabs, flag);
    if (!o) {
        valid_names(tabs, valid, sizeof valid);
        snprintf(msg, msglen, "unknown option '%s' for %s (valid: %s)", item->string, cmd, valid[0] ? valid : "none");
        return 2;
    }
    if (cJSON_IsNull(item)) return 0;   /* not given: the default */
    if (o->has_arg == no_argument) {    /* a switch */
        if (!cJSON_IsBool(item)) {
            snprintf(msg, msglen, "option '%s' is a switch: give true or false", item->string);
            return 2;
        }
        if (cJSON_IsFalse(item)) return 0;
        snprintf(val, sizeof val, "--%s", flag);
        return push(a, val) ? 1 : 0;
    }
    size_t n = (size_t)snprintf(val, sizeof val, "--%s=", flag);
    if (cJSON_IsArray(item)) {
        const cJSON *e;
        int k = 0;
        cJSON_ArrayForEach(e, item) {
            char one[1024];
            if (scalar_text(e, one, sizeof one)) {
                snprintf(msg, msglen, "option '%s': a list of strings or numbers (it holds %s)", item->string, type_name(e));
                return 2;
            }
            if (n < sizeof val) n += (size_t)snprintf(val + n, sizeof val - n, "%s%s", k++ ? "," : "", one);
        }
    } else if (scalar_text(item, val + n, sizeof val - n)) {
        snprintf(msg, msglen, "option '%s': a string, number, boolean or list (got %s)", item->string, type_name(item));
        return 2;
    }
    return push(a, val) ? 1 : 0;
}

int memplan_api_argv(const char *command, const char *options_json, int json, ApiArgv *out, char *msg, size_t msglen) {
    const struct option *tabs[2];
    memset(out, 0, sizeof *out);
    msg[0] = 0;
    if (!command || command_tables(command, tabs)) {
        snprintf(msg, msglen, "unknown command '%s' (valid: plan, auto, models, gpus)", command ? command : "");
        return 2;
    }
    cJSON *doc = options_json ? cJSON_Parse(options_json) : cJSON_CreateObject();
    int rc = 0;
    if (!doc || !cJSON_IsObject(doc)) {
        snprintf(msg, msglen, "the options are not a JSON object");
        rc = 2;
    }
    if (!rc && (push(out, "memplan") || push(out, command) || (json && push(out, "--json")))) rc = 1;
    const cJSON *item;
    if (!rc) cJSON_ArrayForEach(item, doc) if (!rc) rc = add_option(out, command, tabs, item, msg, msglen);
    cJSON_Delete(doc);
    if (rc == 1) snprintf(msg, msglen, "out of memory building the command line");
    if (rc) memplan_api_argv_free(out);
    return rc;
}

void memplan_api_argv_free(ApiArgv *a) {
    for (int i = 0; i < a->argc; i++) free(a->argv[i]);
    free(a->argv);
    memset(a, 0, sizeof *a);
}

int memplan_api_run(const char *command, const char *options_json, int json, char *msg, size_t msglen) {
    ApiArgv a;
    int rc = memplan_api_argv(command, options_json, json, &a, msg, msglen);
    if (rc) return rc == 1 ? 1 : 2;
    /* memplan_front may permute and rewrite the pointers (getopt, --strategy auto): a copy */
    char **av = malloc(((size_t)a.argc + 1) * sizeof *av);
    if (!av) {
        memplan_api_argv_free(&a);
        snprintf(msg, msglen, "out of memory building the command line");
        return 1;
    }
    memcpy(av, a.argv, ((size_t)a.argc + 1) * sizeof *av);
    cli_usage_capture(msg, msglen);
    rc = memplan_front(a.argc, av);
    cli_usage_capture(NULL, 0);
    if (rc != 2) msg[0] = 0;
    fflush(stdout);
    fflush(stderr);
    free(av);
    memplan_api_argv_free(&a);
    return rc;
}

const char *memplan_api_config_format(const char *config_json) {
    cJSON *doc = cJSON_Parse(config_json);
    const char *fmt = !cJSON_IsObject(doc) ? NULL : cfg_kind_detect(doc, DOC_TOML) >= 0 ? "toml" : "json";
    cJSON_Delete(doc);
    return fmt;
}

const char *memplan_api_version(void) { return MEMPLAN_VERSION; }
