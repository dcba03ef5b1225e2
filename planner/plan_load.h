/* plan_load.h — models from files: `--model ARG` takes a zoo name, a path to a JSON file or a hub
 * id whose config.json is in the local Hugging Face cache, and the file is recognised by its
 * content:
 *   - a Hugging Face config.json ("model_type" / "architectures"): gpt2, llama, mistral, qwen2,
 *     gemma, gpt_neox, opt, bert, t5, built with the exact parameter count of the reference
 *     implementation (plan_model_transformer);
 *   - a PyTorch parameter list, params.json ("parameters": {name: shape}, or a bare
 *     {name: shape} map): exact model states, layers grouped from the names;
 *   - memplan's own model format ("memplan_model": 1): every ModelSpec and LayerSpec field, so a
 *     new architecture needs no C code. plan_model_export_json writes it.
 * docs/model-formats.md documents the three formats, the formulas and their sources.
 *
 * Every function returns 0 on success and -1 with one sentence in msg on failure; a failure
 * names the file, the field and, for JSON syntax errors, the line and column. On failure *m is
 * left empty (nothing to free); on success the caller frees it with plan_model_free. */
#ifndef PLAN_LOAD_H
#define PLAN_LOAD_H

#include <stddef.h>

#include "plan_model.h"

/* The single entry for `--model ARG [--revision REV]`, in this order (docs/models.md):
 *   1. the zoo: an alias or a hub id, in any case (plan_zoo_find); with REV, a zoo entry's hub id
 *      is looked up as in 3 instead (the zoo holds one revision);
 *   2. a path: a file, or a directory holding a config.json;
 *   3. a hub id ORG/NAME: its config.json in the local Hugging Face cache (plan_hub_cached_config)
 *      at REV (default main), named by the hub id.
 * A hub id in none of them gives PLAN_LOAD_NOT_CACHED, with a message naming the cache folder: the
 * caller may fetch it (cli/cli_model.c) and load again. Else -1: a path-like ARG "no such file",
 * a name "unknown model" with the nearest zoo names. m->source is "zoo" or the file's path. */
#define PLAN_LOAD_NOT_CACHED (-2)
int plan_load_model_at(ModelSpec *m, const char *arg, const char *revision, char *msg, size_t msglen);
int plan_load_model(ModelSpec *m, const char *arg, char *msg, size_t msglen);   /* REV = main */

/* ---- the local Hugging Face cache (plan_load_hub.c; docs/models.md) ---- */

/* 1 if s reads as a hub model id ORG/NAME (huggingface_hub's validate_repo_id, with an
 * organisation; a NAME ending in ".json" is a file name) */
int plan_hub_id_valid(const char *s);
/* 1 if r can name a revision inside the cache (letters, digits, '-', '_', '.', '/'; no ".."). */
int plan_hub_revision_valid(const char *r);
/* HF_HOME as huggingface_hub resolves it: $HF_HOME, else $XDG_CACHE_HOME/huggingface, else
 * ~/.cache/huggingface. 0, or -1 if too long. */
int plan_hub_home(char *out, size_t len);
/* The hub cache: $HF_HUB_CACHE, else $HUGGINGFACE_HUB_CACHE, else HF_HOME/hub. */
int plan_hub_cache_dir(char *out, size_t len);
/* A repository's folder in the cache: <cache>/models--ORG--NAME. */
int plan_hub_repo_dir(const char *cache, const char *repo, char *out, size_t len);
/* <repo folder>/snapshots/<commit>/config.json, where refs/<revision> names the commit (a
 * revision with no ref is the commit itself); revision NULL = "main". 0 with the path when that
 * file exists, else -1 (path still holds where it would be). */
int plan_hub_cached_config(const char *cache, const char *repo, const char *revision, char *path, size_t len);

/* Reads one of the three formats from memory (len bytes, need not be NUL-terminated). label
 * names the input in messages and becomes m->source. Writes nothing to disk (the fuzz target's
 * entry point). */
int plan_load_model_from_buffer(ModelSpec *m, const char *buf, size_t len, const char *label,
                                char *msg, size_t msglen);

/* memplan's own JSON model format for *m (every field but source), as a malloc'ed,
 * NUL-terminated string the caller frees. -1 only when out of memory. */
int plan_model_export_json(const ModelSpec *m, char **out_json);


#endif
