/* plan_load.h — models from files: `--model ARG` takes a zoo name or a path to a JSON file, and
 * the file is recognised by its content:
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

/* The single entry for `--model ARG`: a zoo name, else a path (a file, or a directory holding a
 * config.json). An unknown name that is not a file gets the zoo's message, which lists the
 * valid names and says that a path is accepted. m->source is set to "zoo" or the path. */
int plan_load_model(ModelSpec *m, const char *arg, char *msg, size_t msglen);

/* Reads one of the three formats from memory (len bytes, need not be NUL-terminated). label
 * names the input in messages and becomes m->source. Writes nothing to disk (the fuzz target's
 * entry point). */
int plan_load_model_from_buffer(ModelSpec *m, const char *buf, size_t len, const char *label,
                                char *msg, size_t msglen);

/* memplan's own JSON model format for *m (every field but source), as a malloc'ed,
 * NUL-terminated string the caller frees. -1 only when out of memory. */
int plan_model_export_json(const ModelSpec *m, char **out_json);


#endif
