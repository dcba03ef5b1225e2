/* cli_config_kinds.h — the four kinds of config cli_config.c reads: how each is recognised, which
 * of its keys are honoured, have no effect or are not modelled (tables), and how the honoured
 * ones map onto memplan's flags. The source of every row: docs/configs.md. */
#ifndef CLI_CONFIG_KINDS_H
#define CLI_CONFIG_KINDS_H

#include "cli_config_doc.h"

/* The kind a parsed document is (fmt: how it parsed), or -1 if none recognises it. */
int cfg_kind_detect(const cJSON *doc, DocFormat fmt);
/* The format a kind's files are in (accelerate also writes JSON: YAML reads it too). */
DocFormat cfg_kind_format(CfgKind k);
/* Duplicate keys as kind k's framework reads them (cfg_doc_dups): DeepSpeed (hjson with
 * dict_raise_error_on_duplicate_keys) and LLaMA-Factory (OmegaConf's loader) refuse them, one line
 * in err; the others keep the last one read (json.load, PyYAML, HfArgumentParser), listed in found. */
int cfg_kind_dups(cJSON *doc, CfgKind k, cJSON *found, const char *path, char *err, size_t errlen);
/* How kind k's framework reads a duplicate key, for the header's note. */
const char *cfg_kind_dup_rule(CfgKind k);

/* Who reads a DeepSpeed JSON and fills its "auto" values (transformers integrations/deepspeed.py
 * trainer_config_process, accelerate utils/dataclasses.py DeepSpeedPlugin): NULL who is DeepSpeed
 * alone, which refuses "auto" (its pydantic fields take numbers and bools). */
typedef struct {
    const char *who;              /* "the HF Trainer", "accelerate", NULL */
    int trainer;                  /* the Trainer runs it: its own gradient_checkpointing decides */
    /* how the launcher fills each "auto" from what the reader has read already (the recipe's own
       keys set the flag), NULL: it cannot be known from the files */
    const char *batch_rule, *accum_rule, *precision_rule;
    long long accum;              /* > 0: accelerate's deepspeed_config.gradient_accumulation_steps */
    const char *accum_key;
} DsFill;

/* A DeepSpeed JSON (the file, or one another names) onto c's settings, with the DeepSpeed defaults
 * for what it leaves out. 0, or -1 with one line in c->err. */
int cfg_ds_read(Cfg *c, const cJSON *d, const DsFill *fill);
/* The DeepSpeed JSON that path (a string value of key) names, read relative to the naming file's
 * folder, then its ancestors' (the frameworks open it from the working directory, usually the
 * repository's root), then the working directory; its keys named "FILE:key". */
int cfg_ds_named(Cfg *c, const cJSON *path, const char *key, const DsFill *fill);

/* What the framework assumes where an FSDP config is silent. */
typedef struct {
    int version;             /* accelerate: 1 (launch.py --fsdp_version), the Trainer: 2 */
    const char *who;         /* "accelerate" / "the HF Trainer" */
    int strategy;            /* the Trainer's legacy `fsdp` words: a SHARDING index, -1 none */
    int offload;             /* ... "offload" */
    const char *legacy;      /* the key those came from */
} FsdpDefaults;
/* The Trainer's legacy `fsdp` words ("full_shard auto_wrap", or a list) into df. 0 or -1. */
int cfg_fsdp_words(Cfg *c, const cJSON *f, FsdpDefaults *df);
/* fsdp_config (accelerate's fsdp_ prefixed keys, or the Trainer's) onto c's settings. 0 or -1. */
int cfg_fsdp_read(Cfg *c, const cJSON *fc, const FsdpDefaults *df);

/* The recipes' readers (cli_config_recipes.c). */
int cfg_hf_read(Cfg *c, const cJSON *d);
int cfg_trl_read(Cfg *c, const cJSON *d);
int cfg_lf_read(Cfg *c, const cJSON *d);
int cfg_axolotl_read(Cfg *c, const cJSON *d);
/* 1 when doc has a recipe kind's keys: CFG_HF_TRAINER, CFG_TRL, CFG_LLAMA_FACTORY, CFG_AXOLOTL, or -1. */
int cfg_recipe_detect(const cJSON *doc);

/* Maps doc onto c's settings and warnings: the keys it has, then the framework's defaults for
 * the flags it leaves out. 0, or -1 with one line in c->err. */
int cfg_kind_read(Cfg *c, CfgKind k, const cJSON *doc);

#endif
