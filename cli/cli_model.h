/* cli_model.h — `--model ARG [--revision REV]` as every command resolves it: the planner's lookup
 * (the zoo, a path, the local Hugging Face cache: plan_load_model_at), then, for a hub id that is
 * in none of them, its config.json fetched into that cache by memplan-fetch, the program beside
 * this one (cli/memplan_fetch.c, linked with libcurl so that memplan links no network library),
 * and loaded from there. Lookup order, cache layout and variables: docs/models.md. */
#ifndef CLI_MODEL_H
#define CLI_MODEL_H

#include <stddef.h>

#include "plan_model.h"

/* 0, or -1 with one line in msg (what failed and what to do). revision: NULL = main. */
int cli_model_load(ModelSpec *m, const char *arg, const char *revision, char *msg, size_t msglen);

#endif
