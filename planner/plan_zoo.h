/* plan_zoo.h — the built-in models: one table (planner/plan_zoo.c) of the models people train,
 * each under its Hugging Face hub id and a short alias. Most are built from the published
 * config.json of the checkpoint (tests/data/hf/<config>.json, compiled into the program: no file
 * is read at run time); GPT-2, LLaMA-2, BERT, ResNet-50 and two test shapes from shape tables
 * in plan_zoo.c. Counts are computed from the shapes, never typed in as totals; every entry's
 * equals transformers' own (tests/test_plan_zoo.c). docs/models.md lists the entries and their
 * sources. */
#ifndef PLAN_ZOO_H
#define PLAN_ZOO_H

#include <stddef.h>

#include "plan_model.h"

typedef struct {
    const char *name;         /* the short alias `--model` takes: "llama3.1-8b" */
    const char *hub_id;       /* "meta-llama/Llama-3.1-8B"; NULL for memplan's test shapes and
                                 torchvision's resnet50, which are not hub models */
    const char *family;       /* the release family `memplan models --family` filters by:
                                 "llama3", "qwen3" (Qwen3's dense and MoE models), "gpt2" */
    const char *config;       /* the published config.json, tests/data/hf/<config>.json: what the
                                 entry is built from (compiled in), or, for gpt2, llama2-7b and
                                 bert-base, which are built from their shape tables, the config
                                 that builds the same layers; NULL: none */
    const char *source;       /* where the shapes come from (docs/model-formats.md "Sources") */
} ZooEntry;

int plan_zoo_count(void);
const ZooEntry *plan_zoo_entry(int i);
/* The entry whose alias or hub id is name, compared case-insensitively; NULL if none. */
const ZooEntry *plan_zoo_find(const char *name);
int plan_zoo_has(const char *name);   /* 1 if plan_zoo_find(name) */
/* 1 if e is built from its compiled-in config; 0 for the shape-table ones (gpt2, llama2, bert,
 * resnet50, the test shapes), which the PyTorch harness also knows by name. */
int plan_zoo_from_config(const ZooEntry *e);
/* Builds the entry, with source "zoo". One built from its config is named by its hub id; the
 * shape-table ones keep their alias ("gpt2-xl"), the name the PyTorch harness knows them by. */
int plan_zoo_build_entry(ModelSpec *m, const ZooEntry *e, char *msg, size_t msglen);
/* Builds the named model (plan_zoo_find). -1 with "unknown model 'x' (nearest: ...)" in msg if
 * not in the zoo. */
int plan_zoo_build(ModelSpec *m, const char *name, char *msg, size_t msglen);
/* Up to three names (aliases or hub ids) nearest to name, comma-separated, into buf ("" when
 * none is near): names containing it first, then by edit distance up to half its length
 * (case-insensitive; a hub id also by the part after its '/'). Returns buf. */
const char *plan_zoo_nearest(const char *name, char *buf, size_t len);
/* A few aliases and where the rest are listed, for --help and messages:
 * "e.g. llama3.1-8b, qwen3-30b-a3b, gpt2-xl; `memplan models` lists all 61". */
const char *plan_zoo_hint(void);
/* 1 if some entry's family is f (case-insensitive); the families, comma-separated, into buf. */
int plan_zoo_family_known(const char *f);
const char *plan_zoo_families(char *buf, size_t len);

/* The published configs compiled into the program (every .json file of tests/data/hf but counts.json;
 * build/gen/plan_zoo_configs.c, written by scripts/zoo_embed.sh): how many, and a file stem's text. */
int plan_zoo_config_count(void);
const char *plan_zoo_config_text(const char *stem);   /* NULL if not compiled in */

/* ResNet (torchvision) from stage depths; bottleneck = 1 for ResNet-50/101/152. Each conv and
 * each BatchNorm is one layer with its saved activations per sample at image_size. */
int plan_model_resnet(ModelSpec *m, const char *name, const int depths[4], int bottleneck,
                      int width, int image_size, int classes, char *msg, size_t msglen);

#endif
