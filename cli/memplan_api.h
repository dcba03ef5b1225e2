/* memplan_api.h — memplan as a library call, for the Python package (python/) and the
 * WebAssembly page (web/). A command and an options document, {"model": "gpt2-xl", "gpus": 8,
 * "act_ckpt": "full"}, become the command line `memplan plan --json --model=gpt2-xl --gpus=8
 * --act-ckpt=full`, which memplan_front runs in this process: the same parsing, validation, one-line
 * errors and JSON as the program. The caller collects what it writes on stdout and stderr (the
 * Python module swaps the streams, the page reads Emscripten's print hooks). */
#ifndef MEMPLAN_API_H
#define MEMPLAN_API_H

#include <stddef.h>

/* A command line built from an options document; memplan_api_argv_free releases it. */
typedef struct {
    int argc;
    char **argv;   /* argc strings and a NULL, each malloc'd */
} ApiArgv;

/* The command line for command (plan, auto, models, gpus) and options_json (a JSON object, or
 * NULL for none), with --json first when json is set. An option's name is the command's long flag
 * with '_' or '-' ("act_ckpt"); json and help are the caller's, not options. A value is a string, a
 * number (written as the shortest text that reads back the same, whole numbers without exponent),
 * true or false (a switch given or left out; "on"/"off" for a flag that takes a value), null (not
 * given), or an array of those joined with ','. 0, or 2 with one line in msg naming the bad option
 * or value and the valid ones. */
int memplan_api_argv(const char *command, const char *options_json, int json, ApiArgv *out, char *msg, size_t msglen);
void memplan_api_argv_free(ApiArgv *a);

/* Runs the command line memplan_api_argv builds through memplan_front: the exit status (0, 1 or 2).
 * On 2 the usage error's one line (without "memplan: ") is in msg; msg is empty otherwise (an
 * output failure's line is on stderr, as the program writes it). stdout and stderr are flushed. */
int memplan_api_run(const char *command, const char *options_json, int json, char *msg, size_t msglen);

/* How a config document given as data (JSON text) must be written for --config to read it as
 * what it is: "toml" for torchtitan's job config (only its TOML is read), else "json"; NULL when
 * the text is not a JSON object. */
const char *memplan_api_config_format(const char *config_json);

/* MEMPLAN_VERSION (memplan_front.h), for callers that cannot read the header (the page). */
const char *memplan_api_version(void);

#endif
