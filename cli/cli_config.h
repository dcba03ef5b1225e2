/* cli_config.h — `--config FILE`: a user's own training config (a DeepSpeed JSON, an accelerate
 * config YAML, a torchtitan job TOML, Hugging Face TrainingArguments as JSON or YAML, or the
 * training recipe people launch: TRL / alignment-handbook, LLaMA-Factory, axolotl) read into the
 * memplan flags it amounts to, each with the key it came from. Every key of the file is honoured (mapped
 * onto a flag), of no effect on memory, communication or time (accepted silently), or not
 * modelled (named in one warning line). cli_setup.c inserts the flags the command line does not
 * give, so the option parser validates them; docs/configs.md lists every key per kind. */
#ifndef CLI_CONFIG_H
#define CLI_CONFIG_H

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdio.h>

typedef enum {
    CFG_DEEPSPEED = 0, CFG_ACCELERATE, CFG_TORCHTITAN, CFG_HF_TRAINER, CFG_TRL, CFG_LLAMA_FACTORY, CFG_AXOLOTL,
    CFG_KIND_COUNT
} CfgKind;

#define CFG_MAX_SETTINGS 40

/* One memplan flag the file amounts to. */
typedef struct {
    const char *flag;        /* option name without dashes ("batch"): a static string */
    char value[200];         /* its value as the flag takes it ("4", "zero2", "q_proj,v_proj") */
    char key[200];           /* where it came from: the file's key ("train_micro_batch_size_per_gpu"),
                                a derivation ("train_batch_size / (...)") or a default ("... (default)") */
    const char *cmdline;     /* the command line's value of the flag, which wins; NULL if not given */
    /* "auto" the file leaves to its launcher (the HF Trainer, accelerate), which memplan cannot
       know here: value is empty; the command line must give the flag (plan) or `memplan auto`
       searches it among choices ("a|b", NULL: all) */
    int deferred;
    const char *choices;
    const char *filler;      /* who fills it: "the HF Trainer or accelerate" */
    int searched;            /* cli_config_merge: left to auto's search */
    int dropped;             /* cli_config_merge: re-derived away by a command-line flag (a note says why) */
} CfgSetting;

/* What the command line gave that the file's derivations depend on (0: not given). */
typedef struct {
    long long gpus, batch, grad_accum;
    long long gpn;           /* --gpus-per-node */
    int tp, pp;              /* --tp, --pp (-1: auto) */
    const char *precision;   /* --precision as given, NULL if not */
    const char *model;       /* --model as given, NULL if none */
    long long model_layers, model_hidden;   /* the model's, when --model was loaded (0: not known) */
    const char *gpu;         /* the --gpu preset's name */
    int gpu_bf16;            /* the GPU runs bf16 (axolotl's bf16 "auto") */
} CfgKnown;

typedef struct {
    const char *path;        /* as given to --config */
    CfgKind kind;
    int detected;            /* the kind was read from the content (no --config-kind) */
    CfgSetting set[CFG_MAX_SETTINGS];
    int n;
    cJSON *not_modelled;     /* array of "key=value" strings, in the file's order */
    cJSON *no_effect;        /* array of keys accepted silently */
    long long global_batch;  /* > 0: samples per optimizer step the file states ... */
    char global_key[200];    /* ... and its key: micro-batch x accumulation x GPUs must match */
    char *argv[2 * CFG_MAX_SETTINGS];   /* the flags inserted before the command line's */
    int argc;
    /* DeepSpeed sizes left "auto" (bit i: CFG_HIDDEN[i].flag): the HF Trainer and accelerate fill
       them from the model's hidden size (cli_config_hidden) */
    unsigned hidden_auto;
    char hidden_key[3][200];
    /* what the reading resolved that a reader must be told: duplicate keys and which one won,
       values re-derived from the command line, the frameworks' rules applied; one string each,
       in the header's "; read as the framework reads it: ..." */
    cJSON *notes;
    int precision_auto;      /* fp16/bf16.enabled "auto": no fp32 default */
    /* the model the file names, where memplan can build or check it (torchtitan's Llama 3 flavors):
       its blocks and hidden size, checked against --model (cli_config_model_check); without
       --model, model_json (an HF config.json, malloc'd) is the model, labelled model_label */
    int flavor_layers, flavor_hidden;
    char flavor_key[200];
    char *model_json;
    char model_label[64];
    char model_hint[200];    /* the model the file trains (model_name_or_path, base_model, flavor), for
                                "no model" errors */
} CliConfig;

/* The sizes "auto" stands for, as the HF Trainer (transformers integrations/deepspeed.py
 * trainer_config_finalize) and accelerate (accelerator.py _prepare_deepspeed) fill them:
 * reduce_bucket_size h^2, stage3_prefetch_bucket_size int(0.9 h^2), stage3_param_persistence_threshold 10 h. */
typedef struct {
    const char *flag;
    double h2, h1;           /* value = h2 * h^2 + h1 * h */
} CfgHidden;
extern const CfgHidden CFG_HIDDEN[3];

/* "deepspeed", "accelerate", "torchtitan", "hf-trainer", "trl", "llama-factory", "axolotl"; -1 if unknown. */
int cli_config_kind_by_name(const char *s);
const char *cli_config_kind_name(CfgKind k);

/* Reads path (kind < 0: detected from the content) into c. 0, or -1 with one line in err
 * (a bad value names the key, the value and the valid ones). */
int cli_config_read(CliConfig *c, const char *path, int kind, const CfgKnown *known, char *err, size_t errlen);
void cli_config_free(CliConfig *c);

/* The valid --config-kind names, ", "-separated. */
const char *cli_config_kind_names(void);

/* Builds c->argv: "--flag value" for every setting whose flag the command line does not give
 * (given(name, ctx) returns the command line's value, or NULL). A deferred setting ("auto") the
 * command line does not give: left to the search under auto (searching), else one line in err
 * naming the key and the flag to give, and -1. */
int cli_config_merge(CliConfig *c, const char *(*given)(const char *flag, const void *ctx), const void *ctx,
                     int searching, char *err, size_t errlen);
/* The deferred setting of flag left to auto's search, or NULL. */
const CfgSetting *cli_config_searched(const CliConfig *c, const char *flag);

/* The one warning line "memplan: FILE: not modelled: a, b, c" on f, if any key is not modelled. */
void cli_config_warn(FILE *f, const CliConfig *c);
/* "# config: FILE (kind): --flag value (key), ...; from the command line instead: ..." */
void cli_config_header(FILE *f, const CliConfig *c);
/* The same as JSON (docs/json.md "config"). */
cJSON *cli_config_json(const CliConfig *c);

/* Checks that need the resolved setup: the file's global batch against micro-batch x accumulation
 * x data-parallel GPUs (gpus / (tp x pp); given: as for cli_config_merge, to name the command
 * line's). 0, or -1 with one line in err. */
int cli_config_check(const CliConfig *c, long long micro, long long accum, long long gpus, long long tp_pp,
                     const char *(*given)(const char *flag, const void *ctx), const void *ctx, char *err, size_t errlen);

/* The settings "auto" sizes amount to for a model of hidden size h, those the command line gives
 * excepted (given: as for cli_config_merge); values[i] < 0 where bit i is not filled. 0, or -1 with
 * one line in err when h is unknown (0). */
int cli_config_hidden(CliConfig *c, long long h, const char *(*given)(const char *flag, const void *ctx), const void *ctx,
                      double values[3], char *err, size_t errlen);

/* The file's model (a torchtitan flavor) against the loaded --model m: 0, or -1 with one line in
 * err naming both when their blocks or hidden size differ. */
struct ModelSpec;
int cli_config_model_check(const CliConfig *c, int blocks, long long hidden, const char *model_name, char *err, size_t errlen);

/* Appends to msg (a usage error) where each config-derived flag it names came from:
 * " (--batch 4 is train_micro_batch_size_per_gpu in ds.json)". */
void cli_config_annotate(const CliConfig *c, char *msg, size_t len);

#endif
