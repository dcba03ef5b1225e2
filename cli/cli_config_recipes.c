/* cli_config_recipes.c — the training recipes people launch, each a set of Hugging Face
 * TrainingArguments with the framework's own keys around them: TrainingArguments themselves (JSON
 * from args.to_json_string(), or YAML as HfArgumentParser.parse_yaml_file reads it), TRL /
 * alignment-handbook SFTConfig / DPOConfig with ModelConfig (trl sft|dpo --config), LLaMA-Factory
 * (llamafactory-cli train) and axolotl (axolotl train). All four train with the HF Trainer, so one
 * mapping (Run, run_apply) turns what they say about the batch, precision and the model's dtype,
 * LoRA, the quantized base, the sequence, checkpointing and the DeepSpeed / FSDP file they point at
 * into memplan's flags; each kind reads its own keys into a Run with its own defaults. Versions:
 * transformers 5.24.0, TRL at f2cd577 (2026-07), LLaMA-Factory at ff6d4d1 (2026-08), axolotl at
 * 067b021 (2026-07), peft 0.21.2. Every row's source: docs/configs.md. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cli_config_kinds.h"

#define H KEY_HONOURED
#define NE KEY_NO_EFFECT
#define D KEY_DEFAULT_ONLY

/* ==== TrainingArguments (transformers 5.24 training_args.py; trainer.py, trainer_optimizer.py) ==== */

static const CfgKey HF_KEYS[] = {
    {"per_device_train_batch_size", H, 0}, {"gradient_accumulation_steps", H, 0}, {"bf16", H, 0}, {"fp16", H, 0},
    {"activation_checkpointing", H, 0}, {"gradient_checkpointing", H, 0},
    {"activation_checkpointing_kwargs.every_n_layers", H, 0}, {"gradient_checkpointing_kwargs.every_n_layers", H, 0},
    {"activation_checkpointing_kwargs.offload", D, "false"}, {"gradient_checkpointing_kwargs.offload", D, "false"},
    {"activation_checkpointing_kwargs.use_reentrant", NE, 0}, {"gradient_checkpointing_kwargs.use_reentrant", NE, 0},
    {"activation_checkpointing_kwargs.preserve_rng_state", NE, 0}, {"gradient_checkpointing_kwargs.preserve_rng_state", NE, 0},
    {"optim", H, 0}, {"optim_args", H, 0}, {"deepspeed", H, 0}, {"fsdp", H, 0}, {"fsdp_config", H, 0},
    {"accelerator_config.gradient_accumulation_kwargs.sync_each_batch", H, 0},
    {"accelerator_config.split_batches", D, "false"}, {"accelerator_config.dispatch_batches", NE, 0},
    {"accelerator_config.even_batches", NE, 0}, {"accelerator_config.use_seedable_sampler", NE, 0},
    {"accelerator_config.non_blocking", NE, 0}, {"accelerator_config.gradient_accumulation_kwargs.num_steps", NE, 0},
    {"accelerator_config.gradient_accumulation_kwargs.adjust_scheduler", NE, 0},
    {"accelerator_config.gradient_accumulation_kwargs.sync_with_dataloader", NE, 0},
    {"use_cpu", D, "false"}, {"tf32", D, "false"}, {"torch_compile", D, "false"}, {"torch_compile_backend", NE, 0},
    {"torch_compile_mode", NE, 0}, {"use_liger_kernel", D, "false"}, {"use_cache", D, "false"},
    {"auto_find_batch_size", D, "false"}, {"full_determinism", D, "false"}, {"ddp_static_graph", D, "false"},
    {"label_smoothing_factor", NE, 0}, {"neftune_noise_alpha", NE, 0}, {"torch_empty_cache_steps", NE, 0},
    {"average_tokens_across_devices", NE, 0}, {"include_num_input_tokens_seen", NE, 0},
    {"ddp_find_unused_parameters", NE, 0}, {"ddp_broadcast_buffers", NE, 0}, {"ddp_backend", NE, 0}, {"ddp_timeout", NE, 0},
    {"output_dir", NE, 0}, {"overwrite_output_dir", NE, 0}, {"num_train_epochs", NE, 0}, {"max_steps", NE, 0},
    {"learning_rate", NE, 0}, {"lr_scheduler_type", NE, 0}, {"lr_scheduler_kwargs", NE, 0}, {"warmup_steps", NE, 0},
    {"warmup_ratio", NE, 0}, {"weight_decay", NE, 0}, {"adam_beta1", NE, 0}, {"adam_beta2", NE, 0},
    {"adam_epsilon", NE, 0}, {"max_grad_norm", NE, 0}, {"logging_dir", NE, 0}, {"logging_strategy", NE, 0},
    {"logging_steps", NE, 0}, {"logging_first_step", NE, 0}, {"logging_nan_inf_filter", NE, 0},
    {"log_on_each_node", NE, 0}, {"log_level", NE, 0}, {"log_level_replica", NE, 0}, {"disable_tqdm", NE, 0},
    {"report_to", NE, 0}, {"run_name", NE, 0}, {"project", NE, 0}, {"trackio_space_id", NE, 0},
    {"trackio_bucket_id", NE, 0}, {"trackio_static_space_id", NE, 0}, {"eval_strategy", NE, 0}, {"eval_steps", NE, 0},
    {"eval_delay", NE, 0}, {"per_device_eval_batch_size", NE, 0}, {"prediction_loss_only", NE, 0},
    {"eval_on_start", NE, 0}, {"eval_do_concat_batches", NE, 0}, {"eval_use_gather_object", NE, 0},
    {"eval_accumulation_steps", NE, 0}, {"include_for_metrics", NE, 0}, {"batch_eval_metrics", NE, 0},
    {"bf16_full_eval", NE, 0}, {"fp16_full_eval", NE, 0}, {"save_only_model", NE, 0}, {"save_strategy", NE, 0},
    {"save_steps", NE, 0}, {"save_on_each_node", NE, 0}, {"save_total_limit", NE, 0}, {"save_safetensors", NE, 0},
    {"enable_jit_checkpoint", NE, 0}, {"push_to_hub", NE, 0}, {"hub_token", NE, 0}, {"hub_private_repo", NE, 0},
    {"hub_model_id", NE, 0}, {"hub_strategy", NE, 0}, {"hub_always_push", NE, 0}, {"hub_revision", NE, 0},
    {"load_best_model_at_end", NE, 0}, {"metric_for_best_model", NE, 0}, {"greater_is_better", NE, 0},
    {"ignore_data_skip", NE, 0}, {"restore_callback_states_from_checkpoint", NE, 0}, {"seed", NE, 0},
    {"data_seed", NE, 0}, {"dataloader_drop_last", NE, 0}, {"dataloader_num_workers", NE, 0},
    {"dataloader_pin_memory", NE, 0}, {"dataloader_persistent_workers", NE, 0}, {"dataloader_prefetch_factor", NE, 0},
    {"dataloader_multiprocessing_context", NE, 0}, {"dataloader_in_order", NE, 0}, {"remove_unused_columns", NE, 0},
    {"label_names", NE, 0}, {"train_sampling_strategy", NE, 0}, {"length_column_name", NE, 0},
    {"group_by_length", NE, 0}, {"skip_memory_metrics", NE, 0}, {"do_train", NE, 0}, {"do_eval", NE, 0},
    {"do_predict", NE, 0}, {"resume_from_checkpoint", NE, 0}, {"local_rank", NE, 0}, {"past_index", NE, 0},
    /* names transformers 4.x still wrote, at the values that change nothing memplan plans */
    {"evaluation_strategy", NE, 0}, {"per_gpu_eval_batch_size", NE, 0}, {"fp16_opt_level", NE, 0},
    {"fp16_backend", D, "auto"}, {"half_precision_backend", D, "auto"}, {"mp_parameters", NE, 0}, {"ray_scope", NE, 0},
    {"jit_mode_eval", NE, 0}, {"use_ipex", D, "false"}, {"use_mps_device", D, "false"}, {"tpu_num_cores", NE, 0},
    {"tpu_metrics_debug", NE, 0}, {"use_legacy_prediction_loop", NE, 0}, {"push_to_hub_model_id", NE, 0},
    {"push_to_hub_organization", NE, 0}, {"push_to_hub_token", NE, 0}, {"include_inputs_for_metrics", NE, 0},
    {"xpu_backend", NE, 0}, {"split_batches", D, "false"}, {"dispatch_batches", NE, 0}, {"fsdp_min_num_params", D, "0"},
    {"fsdp_transformer_layer_cls_to_wrap", NE, 0}, {"torchdynamo", D, "false"}, {"include_tokens_per_second", NE, 0},
    {0, 0, 0},
};

/* What a recipe amounts to before it becomes flags: each field with the key it came from (or the
   framework's default, said so). */
typedef struct {
    const char *who;              /* "the HF Trainer", "TRL", "LLaMA-Factory", "axolotl" */
    int bf16, fp16;               /* the Trainer's mixed precision (autocast, or DeepSpeed's / FSDP's own) */
    char prec_key[200];
    const char *load;             /* the dtype the model's parameters are loaded in: "float32", "bfloat16", "float16" */
    char load_key[200];
    int lora;                     /* LoRA adapters on a frozen base */
    int full_upcast;              /* trainable parameters upcast to fp32 (LLaMA-Factory's cast_trainable_params_to_fp32) */
    int qbits;                    /* 4 or 8: a bitsandbytes base */
    int quant_storage_float;      /* bnb_4bit_quant_storage a float dtype (what FSDP/ZeRO-3 shard); -1 not said */
    char quant_key[200];
    const cJSON *ds, *fsdp, *fsdp_config;
    char ds_key[200];
    const char *fsdp_version_key; /* axolotl's fsdp_version beside fsdp_config */
    long long fsdp_version;
} Run;

/* activation_checkpointing (or its deprecated alias gradient_checkpointing) with every_n_layers
   -> --act-ckpt; dflt: the framework's default when the key is absent (TRL: true). */
static int run_ckpt(Cfg *c, const cJSON *d, int dflt, const char *dflt_key) {
    const char *on = cfg_item(d, "activation_checkpointing") ? "activation_checkpointing" : "gradient_checkpointing";
    const char *kw = cfg_item(d, "activation_checkpointing_kwargs") ? "activation_checkpointing_kwargs" : "gradient_checkpointing_kwargs";
    int ck = dflt, r;
    long long n = 1;
    char key[200], k2[200], v[32];
    if (cfg_section(c, d, NULL, kw)) return -1;
    const cJSON *g = cfg_item(d, on);
    if (cJSON_IsString(g) && (strcmp(g->valuestring, "offload") == 0 || strcmp(g->valuestring, "offload_disk") == 0)) {
        cfg_unmodelled(c, cfg_key(c, NULL, on, key, sizeof key), g);   /* axolotl's activation offloading */
        return cfg_set(c, "act-ckpt", "full", key);
    }
    if ((r = cfg_bool(c, d, NULL, on, &ck)) < 0 || cfg_int(c, cfg_item(d, kw), kw, "every_n_layers", 1, 100000, &n) < 0) return -1;
    if (!ck) return 0;   /* false: FSDP's own activation_checkpointing may still apply (the default below) */
    if (r) cfg_key(c, NULL, on, key, sizeof key);
    else snprintf(key, sizeof key, "%s", dflt_key);
    snprintf(v, sizeof v, "every:%lld", n);
    if (n > 1) snprintf(key + strlen(key), sizeof key - strlen(key), " + %s", cfg_key(c, kw, "every_n_layers", k2, sizeof k2));
    return cfg_set(c, "act-ckpt", n > 1 ? v : "full", key);
}

/* optim (axolotl: optimizer): torch's AdamW (adamw_torch, adamw_torch_fused, the Trainer's
   default) or SGD (momentum from optim_args); bitsandbytes' 8-bit and paged optimizers, and the
   others, are named; under DeepSpeed with its own optimizer section the Trainer builds none. */
static int run_optim(Cfg *c, const cJSON *d, const char *name_key, int ds) {
    static const char *const ADAMW[] = {"adamw_torch", "adamw_torch_fused"};
    const cJSON *o = cfg_item(d, name_key), *oa = cfg_item(d, "optim_args");
    char key[200], ka[200];
    cfg_key(c, NULL, name_key, key, sizeof key);
    cfg_key(c, NULL, "optim_args", ka, sizeof ka);
    if (ds && cfg_setting(c, "optimizer")) {
        if (o) cfg_no_effect(c, key);
        if (oa) cfg_no_effect(c, ka);
        return 0;
    }
    const char *name = o && cJSON_IsString(o) ? o->valuestring : "adamw_torch_fused";
    for (int i = 0; i < 2; i++)
        if (strcmp(name, ADAMW[i]) == 0) {
            if (oa) cfg_no_effect(c, ka);
            return cfg_set(c, "optimizer", "adamw", o ? key : "optim (the Trainer's default adamw_torch_fused)");
        }
    if (strcmp(name, "sgd") != 0) {   /* its optim_args go with it */
        cfg_unmodelled(c, key, o);
        if (oa) cfg_no_effect(c, ka);
        return 0;
    }
    const char *m = oa && cJSON_IsString(oa) ? strstr(oa->valuestring, "momentum=") : NULL;
    double mom = m ? strtod(m + 9, NULL) : 0;
    return cfg_set(c, "optimizer", mom > 0 ? "sgd-momentum" : "sgd", key);
}

/* The precision of the trainable parameters and the storage of a frozen base, as the Trainer runs
   them: DeepSpeed's own fp16/bf16 (it casts the whole module and keeps fp32 masters: mixed-*);
   FSDP's MixedPrecision through accelerate (which upcasts trainable parameters to fp32,
   accelerator.py / fsdp_utils.py fsdp2_prepare_model: mixed-*); plain DDP: autocast over the
   parameters as loaded (amp-* over fp32; a model loaded in bf16 and trained whole is pure bf16,
   autocast changing nothing), LoRA adapters fp32 (PEFT's autocast_adapter_dtype), the frozen base
   kept at its load dtype (--quant-base bf16). */
static int run_precision(Cfg *c, const Run *r, int path /* 0 ddp, 1 deepspeed, 2 fsdp */) {
    int half = strcmp(r->load, "float32") != 0;
    char key[420];
    const char *mixed = r->bf16 ? "mixed-bf16" : r->fp16 ? "mixed-fp16" : NULL;
    if (path == 1 || (path == 2 && mixed)) return cfg_set(c, "precision", mixed ? mixed : "fp32", r->prec_key);
    if (r->lora || r->full_upcast) {   /* fp32 trainable parameters, autocast to the 16-bit type */
        if (r->lora && half && !r->qbits) {
            snprintf(key, sizeof key, "%s (the frozen base stays at its load dtype)", r->load_key);
            if (cfg_set(c, "quant-base", "bf16", key)) return -1;
        }
        return cfg_set(c, "precision", r->bf16 ? "amp-bf16" : r->fp16 ? "amp-fp16" : "fp32", r->prec_key);
    }
    if (!half) return cfg_set(c, "precision", r->bf16 ? "amp-bf16" : r->fp16 ? "amp-fp16" : "fp32", r->prec_key);
    if (r->fp16 && strcmp(r->load, "float16") == 0)
        return cfg_fail(c, "%s with %s: the Trainer's GradScaler refuses float16 gradients (\"Attempting to unscale FP16 "
                        "gradients\"); load the model in float32 or bfloat16", r->prec_key, r->load_key);
    snprintf(key, sizeof key, "%s (parameters, gradients and AdamW states in 16 bits: pure %s%s)", r->load_key,
             strcmp(r->load, "float16") == 0 ? "fp16, planned as bf16 (the same bytes)" : "bf16",
             path == 2 ? "; FSDP without mixed precision keeps them" : "");
    return cfg_set(c, "precision", "bf16", key);
}

/* The DeepSpeed file (a path, or inline under the Trainer's deepspeed) or the FSDP words and
   fsdp_config, else the Trainer's DDP; then precision, optimizer, checkpointing defaults. */
static int run_apply(Cfg *c, const cJSON *d, Run *r, const char *optim_key) {
    char key[200];
    int fsdp = r->fsdp && !(cJSON_IsFalse(r->fsdp) || (cJSON_IsString(r->fsdp) && !*r->fsdp->valuestring) ||
                            (cJSON_IsArray(r->fsdp) && !r->fsdp->child));
    if (r->fsdp && !fsdp) cfg_no_effect(c, cfg_key(c, NULL, "fsdp", key, sizeof key));
    if (r->ds && fsdp) return cfg_fail(c, "deepspeed and fsdp are both set: the Trainer runs one of them");
    if (!fsdp && r->fsdp_config) cfg_no_effect(c, cfg_key(c, NULL, "fsdp_config", key, sizeof key));
    if (r->ds) {
        /* the Trainer fills the JSON's "auto" from its arguments (integrations/deepspeed.py
           trainer_config_process) and refuses an explicit value that disagrees, as cfg_set does */
        DsFill fill = {"the HF Trainer", 1, "the recipe's micro-batch", "the recipe's gradient_accumulation_steps",
                       "the recipe's bf16 / fp16", 0, NULL};
        int rc;
        if (cJSON_IsObject(r->ds)) {
            char saved[sizeof c->prefix];
            snprintf(saved, sizeof saved, "%s", c->prefix);
            cfg_fmt(c->prefix, sizeof c->prefix, "%.80sdeepspeed.", saved);
            rc = cfg_ds_read(c, r->ds, &fill);
            snprintf(c->prefix, sizeof c->prefix, "%s", saved);
        } else rc = cfg_ds_named(c, r->ds, r->ds_key, &fill);
        if (rc || run_precision(c, r, 1) || run_optim(c, d, optim_key, 1)) return -1;
    } else if (fsdp) {
        FsdpDefaults df = {2, "the HF Trainer", -1, 0, ""};
        const char *gk = "accelerator_config.gradient_accumulation_kwargs";
        int sync = 0;
        if (cfg_fsdp_words(c, r->fsdp, &df)) return -1;
        cJSON *fc = r->fsdp_config ? cJSON_Duplicate(r->fsdp_config, 1) : cJSON_CreateObject();
        if (r->fsdp_version_key && fc && !cJSON_GetObjectItem(fc, "version") && !cJSON_GetObjectItem(fc, "fsdp_version"))
            cJSON_AddNumberToObject(fc, "fsdp_version", (double)r->fsdp_version);   /* axolotl's top-level fsdp_version */
        int rc = cfg_fsdp_read(c, fc, &df);
        cJSON_Delete(fc);
        if (rc || run_precision(c, r, 2) || run_optim(c, d, optim_key, 0) ||
            cfg_bool(c, cfg_item(cfg_item(d, "accelerator_config"), "gradient_accumulation_kwargs"), gk, "sync_each_batch", &sync) < 0)
            return -1;
        cfg_default(c, "offload", "none", "fsdp_config (the Trainer's default: cpu_offload false)");
        if ((r->bf16 || r->fp16) &&   /* accelerate's plugin: MixedPrecision reduce_dtype = param_dtype */
            cfg_set(c, "fsdp-reduce-dtype", r->bf16 ? "bf16" : "fp16", "bf16 / fp16 under fsdp (accelerate's MixedPrecision reduces in the same "
                                               "16-bit dtype: utils/dataclasses.py set_mixed_precision)"))
            return -1;
        if (r->qbits == 4 && r->quant_storage_float == 0)
            cfg_unmodelled(c, r->quant_key[0] ? r->quant_key : "bnb_4bit_quant_storage (absent: uint8)", NULL);
        if (cfg_set(c, "fsdp-grad-sync", sync ? "every" : "last", sync ? "accelerator_config.gradient_accumulation_kwargs.sync_each_batch"
                    : "fsdp (the Trainer skips the reduce-scatter of non-final micro-steps: no_sync)"))
            return -1;
    } else if (cfg_set(c, "strategy", "ddp", "no deepspeed or fsdp (the Trainer's DDP)") || run_precision(c, r, 0) ||
               run_optim(c, d, optim_key, 0))
        return -1;
    cfg_default(c, "act-ckpt", "none", "gradient_checkpointing false");
    return cfg_set(c, "loop", "trainer", "the HF Trainer's loop (compute_loss keeps the loss only, not the logits)");
}

/* The batch keys of the Trainer (and axolotl's spellings). */
static int run_batch(Cfg *c, const cJSON *d, const char *bk, long long bdflt, const char *bdflt_key, int dpo) {
    long long b = bdflt, ga = 1;
    int r;
    char key[300], k2[400];
    if ((r = cfg_int(c, d, NULL, bk, 1, 1000000, &b)) < 0) return -1;
    if (r) cfg_key(c, NULL, bk, key, sizeof key);
    else snprintf(key, sizeof key, "%s", bdflt_key);
    if (dpo) {   /* chosen and rejected in one forward of twice the batch (TRL DPOTrainer.concatenated_forward;
                    LLaMA-Factory's CustomDPOTrainer.concatenated_forward) */
        snprintf(k2, sizeof k2, "%s %lld x 2 (chosen and rejected concatenated in one forward)", key, b);
        if (cfg_setf(c, "batch", 2 * b, k2)) return -1;
    } else if (cfg_setf(c, "batch", b, key)) return -1;
    if ((r = cfg_int(c, d, NULL, "gradient_accumulation_steps", 1, 1000000, &ga)) < 0) return -1;
    return cfg_setf(c, "grad-accum", ga, r ? cfg_key(c, NULL, "gradient_accumulation_steps", key, sizeof key)
                                           : "gradient_accumulation_steps (the Trainer's default 1)");
}

/* The sequence the recipe trains at: its key, or the framework's default (said so). Recipes pad
   or pack up to it: memplan plans the longest. */
static int run_seq(Cfg *c, const cJSON *d, const char *const *names, long long dflt, const char *dflt_key) {
    char key[300];
    for (; *names; names++) {
        long long v;
        int r = cfg_int(c, d, NULL, *names, 1, 10000000, &v);
        if (r < 0) return -1;
        if (r) {
            char k[200];
            cfg_fmt(key, sizeof key, "%s (the longest a sample is padded or packed to)", cfg_key(c, NULL, *names, k, sizeof k));
            return cfg_setf(c, "seq", v, key);
        }
    }
    if (dflt <= 0) return 0;
    return cfg_setf(c, "seq", dflt, dflt_key);
}

/* The model's load dtype: a dtype key ("bfloat16", "auto" = the checkpoint's own, assumed bf16 as
   the configs memplan reads are published; "float32"). */
static int run_load(Cfg *c, const cJSON *d, Run *r, const char *const *names, const char *dflt, const char *dflt_key) {
    static const char *const DT[] = {"float32", "bfloat16", "float16", "auto"};
    r->load = dflt;
    snprintf(r->load_key, sizeof r->load_key, "%s", dflt_key);
    for (; *names; names++) {
        int i = 0, k = cfg_choice(c, d, NULL, *names, DT, 4, 0, &i);
        if (k < 0) return -1;
        if (!k) continue;
        cfg_key(c, NULL, *names, r->load_key, sizeof r->load_key);
        if (i == 3) {
            strncat(r->load_key, " \"auto\" (the checkpoint's dtype, bf16 for the models it names)", sizeof r->load_key - strlen(r->load_key) - 1);
            r->load = "bfloat16";
        } else r->load = DT[i];
        return 0;
    }
    return 0;
}

/* LoRA onto --lora / --lora-alpha / --lora-dropout / --lora-targets (a list, a comma string,
   "all" / "all-linear" / a true lora_target_linear). */
static int run_lora(Cfg *c, const cJSON *d, const char *rk, long long rdflt, const char *ak, double adflt_mul, double adflt,
                    const char *dk, double ddflt, const char *tk, const char *linear_key, const char *who) {
    long long rank = rdflt;
    double alpha = 0, drop = ddflt;
    char key[300], v[64];
    int r = cfg_int(c, d, NULL, rk, 1, 65536, &rank);
    if (r < 0) return -1;
    cfg_key(c, NULL, rk, key, sizeof key);
    if (!r) cfg_fmt(key, sizeof key, "%s (%s's default %lld)", rk, who, rdflt);
    if (cfg_setf(c, "lora", rank, key)) return -1;
    if ((r = cfg_num(c, d, NULL, ak, 1e-6, 1e6, &alpha)) < 0) return -1;
    if (!r) alpha = adflt_mul > 0 ? adflt_mul * (double)rank : adflt;
    cfg_fmt(v, sizeof v, "%g", alpha);
    if (r) cfg_key(c, NULL, ak, key, sizeof key);
    else cfg_fmt(key, sizeof key, "%s (%s's default%s)", ak, who, adflt_mul > 0 ? ": 2 x the rank" : "");
    if (alpha > 0 && cfg_set(c, "lora-alpha", v, key)) return -1;
    if ((r = cfg_num(c, d, NULL, dk, 0, 0.999, &drop)) < 0) return -1;
    cfg_fmt(v, sizeof v, "%g", drop);
    if (r) cfg_key(c, NULL, dk, key, sizeof key);
    else cfg_fmt(key, sizeof key, "%s (%s's default %g)", dk, who, ddflt);
    if (cfg_set(c, "lora-dropout", v, key)) return -1;
    /* targets */
    int lin = 0;
    if (linear_key && cfg_bool(c, d, NULL, linear_key, &lin) < 0) return -1;
    if (lin) return cfg_set(c, "lora-targets", "all-linear", cfg_key(c, NULL, linear_key, key, sizeof key));
    const cJSON *t = cfg_item(d, tk);
    if (!t) return 0;   /* PEFT's default for the model type (plan_lora_default_targets) */
    cfg_key(c, NULL, tk, key, sizeof key);
    char list[192] = "";
    size_t o = 0;
    const cJSON *e = cJSON_IsArray(t) ? t->child : t;
    for (; e; e = cJSON_IsArray(t) ? e->next : NULL) {
        if (!cJSON_IsString(e) || !*e->valuestring) return cfg_bad(c, key, e, "module names (a list or comma-separated), or all-linear");
        o += (size_t)snprintf(list + o, o < sizeof list ? sizeof list - o : 0, "%s%s", o ? "," : "", e->valuestring);
    }
    for (char *p = list; *p; p++) if (*p == ' ') memmove(p, p + 1, strlen(p));
    if (!strcmp(list, "all") || !strcmp(list, "all-linear") || !strcmp(list, "all_linear")) snprintf(list, sizeof list, "all-linear");
    if (o >= sizeof list) return cfg_bad(c, key, t, "fewer module names (memplan's list holds 190 characters)");
    return cfg_set(c, "lora-targets", list, key);
}

/* A bitsandbytes base: 4-bit (nf4 / fp4: the same 4 bits and absmax) or 8-bit. */
static int run_quant(Cfg *c, Run *r, int bits, const char *key, int double_quant, const char *dq_key) {
    char k[420];
    r->qbits = bits;
    if (bits == 4 && !double_quant) {   /* memplan's nf4 stores the double-quantized absmax */
        snprintf(k, sizeof k, "%s (absmax in fp32, not double-quantized: 0.047 B per weight more, not modelled)", dq_key);
        cfg_unmodelled(c, k, NULL);
    }
    return cfg_set(c, "quant-base", bits == 4 ? "nf4" : "int8", key);
}

/* attn_implementation: flash_attention_2 and sdpa keep no s x s scores (memplan's sdpa); eager does. */
static int run_attn(Cfg *c, const cJSON *d, const char *name) {
    const cJSON *a = cfg_item(d, name);
    char key[200];
    if (!a) return 0;
    cfg_key(c, NULL, name, key, sizeof key);
    if (!cJSON_IsString(a)) return cfg_bad(c, key, a, "eager, sdpa, flash_attention_2, flash_attention_3");
    if (!strcmp(a->valuestring, "eager")) return cfg_set(c, "attn", "eager", key);
    if (!strcmp(a->valuestring, "sdpa") || !strncmp(a->valuestring, "flash_attention", 15) || !strcmp(a->valuestring, "fa2"))
        return cfg_set(c, "attn", "sdpa", strcat(key, " (no s x s scores kept, as SDPA)"));
    cfg_unmodelled(c, key, a);
    return 0;
}

/* ==== TrainingArguments as JSON or YAML ==== */

int cfg_hf_read(Cfg *c, const cJSON *d) {
    const CfgKey *const tabs[] = {HF_KEYS, NULL};
    Run r = {.who = "the HF Trainer", .load = "float32"};
    cfg_walk_tables(c, d, tabs);
    if (run_batch(c, d, "per_device_train_batch_size", 8, "per_device_train_batch_size (the Trainer's default 8)", 0) ||
        cfg_bool(c, d, NULL, "bf16", &r.bf16) < 0 || cfg_bool(c, d, NULL, "fp16", &r.fp16) < 0 ||
        run_ckpt(c, d, 0, ""))
        return -1;
    cfg_fmt(r.prec_key, sizeof r.prec_key, "%s", r.bf16 ? "bf16" : r.fp16 ? "fp16" : "bf16 and fp16 false (fp32)");
    snprintf(r.load_key, sizeof r.load_key, "the model as the script loads it (fp32: from_pretrained's default)");
    r.ds = cfg_item(d, "deepspeed");
    snprintf(r.ds_key, sizeof r.ds_key, "deepspeed");
    r.fsdp = cfg_item(d, "fsdp");
    r.fsdp_config = cfg_item(d, "fsdp_config");
    return run_apply(c, d, &r, "optim");
}

/* ==== TRL (and alignment-handbook, whose recipes are TRL's): SFTConfig / DPOConfig, ModelConfig,
 *      ScriptArguments (trl/trainer/sft_config.py, dpo_config.py, base_config.py, model_config.py,
 *      trl/scripts/utils.py; trl/trainer/utils.py get_quantization_config) ==== */

static const CfgKey TRL_KEYS[] = {
    {"model_name_or_path", H, 0}, {"dtype", H, 0}, {"torch_dtype", H, 0}, {"attn_implementation", H, 0},
    {"use_peft", H, 0}, {"lora_r", H, 0}, {"lora_alpha", H, 0}, {"lora_dropout", H, 0}, {"lora_target_modules", H, 0},
    {"load_in_4bit", H, 0}, {"load_in_8bit", H, 0}, {"bnb_4bit_quant_type", H, 0}, {"use_bnb_nested_quant", H, 0},
    {"bnb_4bit_quant_storage", H, 0}, {"max_length", H, 0}, {"max_seq_length", H, 0}, {"loss_type", H, 0},
    {"precompute_ref_log_probs", H, 0}, {"beta", H, 0}, {"max_prompt_length", H, 0},
    {"use_dora", D, "false"}, {"lora_modules_to_save", D, "null"}, {"lora_target_parameters", D, "null"},
    {"activation_offloading", D, "false"}, {"padding_free", D, "false"}, {"use_liger_kernel", D, "false"},
    {"ref_model_init_kwargs", NE, 0}, {"model_init_kwargs", NE, 0}, {"use_rslora", NE, 0}, {"lora_task_type", NE, 0},
    {"model_revision", NE, 0}, {"trust_remote_code", NE, 0}, {"tokenizer_name_or_path", NE, 0},
    {"dataset_name", NE, 0}, {"dataset_config", NE, 0}, {"dataset_train_split", NE, 0}, {"dataset_test_split", NE, 0},
    {"dataset_streaming", NE, 0}, {"dataset_mixture", NE, 0}, {"dataset_num_proc", NE, 0}, {"dataset_text_field", NE, 0},
    {"dataset_kwargs", NE, 0}, {"datasets", NE, 0}, {"chat_template", NE, 0}, {"chat_template_path", NE, 0},
    {"eos_token", NE, 0}, {"pad_token", NE, 0}, {"truncation_mode", NE, 0}, {"shuffle_dataset", NE, 0},
    {"packing", NE, 0}, {"packing_strategy", NE, 0}, {"pad_to_multiple_of", NE, 0}, {"eval_packing", NE, 0},
    {"completion_only_loss", NE, 0}, {"assistant_only_loss", NE, 0}, {"label_smoothing", NE, 0}, {"ld_alpha", NE, 0},
    {"f_divergence_type", NE, 0}, {"f_alpha_divergence_coef", NE, 0}, {"loss_weights", NE, 0}, {"use_weighting", NE, 0},
    {"discopop_tau", NE, 0}, {"disable_dropout", NE, 0}, {"sync_ref_model", NE, 0}, {"ref_model_mixup_alpha", NE, 0},
    {"ref_model_sync_steps", NE, 0}, {"rpo_alpha", NE, 0}, {"router_aux_loss_coef", NE, 0},
    {"precompute_ref_batch_size", NE, 0}, {"ignore_bias_buffers", NE, 0}, {"dataset_id_or_path", NE, 0},
    {"preprocessing_num_workers", NE, 0}, {"env", NE, 0},
    {0, 0, 0},
};

/* DPO's keys: the recipe is a DPOConfig (trl dpo). */
static int trl_is_dpo(const cJSON *d) {
    static const char *const K[] = {"beta", "max_prompt_length", "precompute_ref_log_probs", "rpo_alpha", "ref_model_init_kwargs",
                                    "f_divergence_type", "sync_ref_model", "reference_free"};
    for (size_t i = 0; i < sizeof K / sizeof K[0]; i++)
        if (cJSON_GetObjectItemCaseSensitive(d, K[i])) return 1;
    const cJSON *lt = cJSON_GetObjectItemCaseSensitive(d, "loss_type");
    return cJSON_IsArray(lt) || (cJSON_IsString(lt) && !strstr(lt->valuestring, "nll"));
}

int cfg_trl_read(Cfg *c, const cJSON *d) {
    const CfgKey *const tabs[] = {TRL_KEYS, HF_KEYS, NULL};
    static const char *const SEQ[] = {"max_length", "max_seq_length", NULL};
    static const char *const DTYPE[] = {"dtype", "torch_dtype", NULL};
    Run r = {.who = "TRL", .quant_storage_float = -1};
    int dpo = trl_is_dpo(d), peft = 0, q4 = 0, q8 = 0, nested = 0, fp = 0, rb;
    char key[300];
    const cJSON *mn = cfg_item(d, "model_name_or_path");
    cfg_walk_tables(c, d, tabs);
    if (cJSON_IsString(mn)) cfg_fmt(c->out->model_hint, sizeof c->out->model_hint, "%s (model_name_or_path)", mn->valuestring);
    /* bf16: BaseConfig's default is not fp16 (base_config.py __post_init__) */
    if (cfg_bool(c, d, NULL, "fp16", &fp) < 0 || (rb = cfg_bool(c, d, NULL, "bf16", &r.bf16)) < 0) return -1;
    if (!rb) r.bf16 = !fp;
    r.fp16 = fp;
    if (rb) cfg_key(c, NULL, r.bf16 ? "bf16" : "fp16", r.prec_key, sizeof r.prec_key);
    else snprintf(r.prec_key, sizeof r.prec_key, "bf16 (TRL's default: true unless fp16)");
    if (run_batch(c, d, "per_device_train_batch_size", 8, "per_device_train_batch_size (the Trainer's default 8)", dpo) ||
        run_seq(c, d, SEQ, 1024, dpo ? "max_length (DPOConfig's default 1024)" : "max_length (SFTConfig's default 1024)") ||
        run_ckpt(c, d, 1, "gradient_checkpointing (TRL's default true)") ||
        run_load(c, d, &r, DTYPE, "float32", "dtype (ModelConfig's default float32)") || run_attn(c, d, "attn_implementation") ||
        cfg_bool(c, d, NULL, "use_peft", &peft) < 0 || cfg_bool(c, d, NULL, "load_in_4bit", &q4) < 0 ||
        cfg_bool(c, d, NULL, "load_in_8bit", &q8) < 0 || cfg_bool(c, d, NULL, "use_bnb_nested_quant", &nested) < 0)
        return -1;
    if (cfg_item(d, "max_seq_length") && !cfg_item(d, "max_length"))
        cfg_note(c, "max_seq_length: TRL's former name of max_length");
    if (q4 && q8) return cfg_fail(c, "load_in_4bit and load_in_8bit are both true: TRL refuses it (ModelConfig)");
    if ((q4 || q8) && !peft) return cfg_fail(c, "%s without use_peft: a quantized base trains only with LoRA (TRL refuses it)",
                                             q4 ? "load_in_4bit" : "load_in_8bit");
    if (peft) {
        r.lora = 1;
        if (run_lora(c, d, "lora_r", 16, "lora_alpha", 0, 32, "lora_dropout", 0.05, "lora_target_modules", NULL, "ModelConfig"))
            return -1;
    } else {
        static const char *const LK[] = {"lora_r", "lora_alpha", "lora_dropout", "lora_target_modules"};
        for (size_t i = 0; i < sizeof LK / sizeof LK[0]; i++)
            if (cfg_item(d, LK[i])) cfg_no_effect(c, cfg_key(c, NULL, LK[i], key, sizeof key));
    }
    if (q4 || q8) {
        const cJSON *qs = cfg_item(d, "bnb_4bit_quant_storage");
        r.quant_storage_float = qs ? cJSON_IsString(qs) && strcmp(qs->valuestring, "uint8") != 0 : 0;
        if (qs) cfg_key(c, NULL, "bnb_4bit_quant_storage", r.quant_key, sizeof r.quant_key);
        if (run_quant(c, &r, q4 ? 4 : 8, cfg_key(c, NULL, q4 ? "load_in_4bit" : "load_in_8bit", key, sizeof key), nested,
                      "use_bnb_nested_quant false (ModelConfig's default)"))
            return -1;
    }
    if (dpo) {
        int pre = 0;
        if (cfg_bool(c, d, NULL, "precompute_ref_log_probs", &pre) < 0) return -1;
        if (peft) cfg_note(c, "DPO's reference model: the base with the adapters disabled (no copy held)");
        else cfg_unmodelled(c, pre ? "the DPO reference model (a frozen copy of the policy, used to precompute its log-probs)"
                                   : "the DPO reference model (a frozen copy of the policy, DPOTrainer's ref_model)", NULL);
    } else {
        const cJSON *lt = cfg_item(d, "loss_type");
        if (!lt || (cJSON_IsString(lt) && !strcmp(lt->valuestring, "chunked_nll")))
            cfg_unmodelled(c, lt ? "loss_type=chunked_nll (the logits in chunks)" : "loss_type (absent: SFTConfig's chunked_nll, the logits in chunks)", NULL);
        else if (lt) cfg_no_effect(c, "loss_type");
    }
    r.ds = cfg_item(d, "deepspeed");
    snprintf(r.ds_key, sizeof r.ds_key, "deepspeed");
    r.fsdp = cfg_item(d, "fsdp");
    r.fsdp_config = cfg_item(d, "fsdp_config");
    return run_apply(c, d, &r, "optim");
}

/* ==== LLaMA-Factory: its ModelArguments, DataArguments, FinetuningArguments and
 *      Seq2SeqTrainingArguments (src/llamafactory/hparams/ *_args.py; model/adapter.py, loader.py,
 *      model_utils/quantization.py, checkpointing.py) ==== */

static const CfgKey LF_KEYS[] = {
    {"model_name_or_path", H, 0}, {"stage", H, 0}, {"finetuning_type", H, 0}, {"lora_rank", H, 0}, {"lora_alpha", H, 0},
    {"lora_dropout", H, 0}, {"lora_target", H, 0}, {"quantization_bit", H, 0}, {"quantization_method", H, 0},
    {"quantization_type", H, 0}, {"double_quantization", H, 0}, {"cutoff_len", H, 0}, {"disable_gradient_checkpointing", H, 0},
    {"flash_attn", H, 0}, {"pure_bf16", H, 0}, {"freeze_trainable_layers", H, 0}, {"freeze_trainable_modules", H, 0},
    {"pref_loss", H, 0}, {"ref_model", H, 0},
    {"enable_liger_kernel", D, "false"}, {"use_unsloth", D, "false"}, {"use_unsloth_gc", D, "false"}, {"use_galore", D, "false"},
    {"use_apollo", D, "false"}, {"use_badam", D, "false"}, {"use_adam_mini", D, "false"}, {"use_muon", D, "false"},
    {"use_llama_pro", D, "false"}, {"use_dora", D, "false"}, {"pissa_init", D, "false"}, {"additional_target", D, "null"},
    {"freeze_extra_modules", D, "null"}, {"mixture_of_depths", D, "null"}, {"shift_attn", D, "false"},
    {"rope_scaling", D, "null"}, {"upcast_layernorm", D, "false"}, {"upcast_lmhead_output", D, "false"},
    {"train_from_scratch", D, "false"}, {"use_mca", D, "false"}, {"use_kt", D, "false"}, {"resize_vocab", D, "false"},
    {"use_v1_kernels", D, "false"}, {"adapter_name_or_path", D, "null"}, {"fp8", D, "false"},
    {"use_reentrant_gc", NE, 0}, {"use_rslora", NE, 0}, {"loraplus_lr_ratio", NE, 0}, {"loraplus_lr_embedding", NE, 0},
    {"create_new_adapter", NE, 0}, {"template", NE, 0}, {"dataset", NE, 0}, {"eval_dataset", NE, 0}, {"dataset_dir", NE, 0},
    {"media_dir", NE, 0}, {"max_samples", NE, 0}, {"preprocessing_num_workers", NE, 0}, {"preprocessing_batch_size", NE, 0},
    {"overwrite_cache", NE, 0}, {"val_size", NE, 0}, {"plot_loss", NE, 0}, {"trust_remote_code", NE, 0}, {"packing", NE, 0},
    {"neat_packing", NE, 0}, {"tokenized_path", NE, 0}, {"mix_strategy", NE, 0}, {"interleave_probs", NE, 0},
    {"streaming", NE, 0}, {"buffer_size", NE, 0}, {"train_on_prompt", NE, 0}, {"mask_history", NE, 0}, {"tool_format", NE, 0},
    {"default_system", NE, 0}, {"enable_thinking", NE, 0}, {"ignore_pad_token_for_loss", NE, 0}, {"cache_dir", NE, 0},
    {"use_fast_tokenizer", NE, 0}, {"split_special_tokens", NE, 0}, {"model_revision", NE, 0}, {"low_cpu_mem_usage", NE, 0},
    {"pref_beta", NE, 0}, {"pref_ftx", NE, 0}, {"dpo_label_smoothing", NE, 0}, {"simpo_gamma", NE, 0},
    {"include_effective_tokens_per_second", NE, 0}, {"compute_accuracy", NE, 0}, {"disable_shuffling", NE, 0},
    {"early_stopping_steps", NE, 0}, {"infer_backend", NE, 0}, {"infer_dtype", NE, 0}, {"print_param_status", NE, 0},
    {"hf_hub_token", NE, 0}, {"ms_hub_token", NE, 0}, {"om_hub_token", NE, 0}, {"export_*", NE, 0}, {"vllm_*", NE, 0},
    {"sglang_*", NE, 0}, {"swanlab_*", NE, 0}, {"use_swanlab", NE, 0}, {"ray_*", NE, 0}, {"add_tokens", NE, 0},
    {"add_special_tokens", NE, 0}, {"moe_aux_loss_coef", NE, 0}, {"quantization_device_map", NE, 0}, {"eval_num_beams", NE, 0},
    {"eval_on_each_dataset", NE, 0}, {"data_shared_file_system", NE, 0}, {"image_*", NE, 0}, {"video_*", NE, 0},
    {"audio_sampling_rate", NE, 0}, {"use_audio_in_video", NE, 0}, {"crop_to_patches", NE, 0},
    {"freeze_vision_tower", NE, 0}, {"freeze_multi_modal_projector", NE, 0}, {"master_addr", NE, 0}, {"master_port", NE, 0},
    {"enable_torch_profiler", NE, 0}, {"profiler_*", NE, 0}, {"do_sample", NE, 0}, {"temperature", NE, 0}, {"top_p", NE, 0},
    {"top_k", NE, 0}, {"num_beams", NE, 0}, {"max_new_tokens", NE, 0}, {"repetition_penalty", NE, 0},
    {"length_penalty", NE, 0}, {"skip_special_tokens", NE, 0}, {"predict_with_generate", NE, 0},
    {"sortish_sampler", NE, 0}, {"generation_max_length", NE, 0}, {"generation_num_beams", NE, 0}, {"generation_config", NE, 0},
    {0, 0, 0},
};

int cfg_lf_read(Cfg *c, const cJSON *d) {
    static const char *const STAGES[] = {"pt", "sft", "rm", "ppo", "dpo", "kto"};
    static const char *const TYPES[] = {"lora", "oft", "freeze", "full"};
    static const char *const QM[] = {"bnb", "hqq", "eetq"};
    static const char *const FA[] = {"auto", "disabled", "sdpa", "fa2", "fa3"};
    static const char *const SEQ[] = {"cutoff_len", NULL};
    const CfgKey *const tabs[] = {LF_KEYS, HF_KEYS, NULL};
    Run r = {.who = "LLaMA-Factory", .quant_storage_float = 1};
    int stage = 1, type = 0, qm = 0, fa = 0, nogc = 0, pure = 0, dq = 1, rs, rt;
    long long qbits = 0;
    char key[300], note[400];
    const cJSON *mn = cfg_item(d, "model_name_or_path");
    cfg_walk_tables(c, d, tabs);
    if (cJSON_IsString(mn)) cfg_fmt(c->out->model_hint, sizeof c->out->model_hint, "%s (model_name_or_path)", mn->valuestring);
    if ((rs = cfg_choice(c, d, NULL, "stage", STAGES, 6, 0, &stage)) < 0 || (rt = cfg_choice(c, d, NULL, "finetuning_type", TYPES, 4, 0, &type)) < 0 ||
        cfg_choice(c, d, NULL, "quantization_method", QM, 3, 0, &qm) < 0 || cfg_choice(c, d, NULL, "flash_attn", FA, 5, 0, &fa) < 0 ||
        cfg_bool(c, d, NULL, "disable_gradient_checkpointing", &nogc) < 0 || cfg_bool(c, d, NULL, "pure_bf16", &pure) < 0 ||
        cfg_bool(c, d, NULL, "double_quantization", &dq) < 0 || cfg_int(c, d, NULL, "quantization_bit", 2, 8, &qbits) < 0 ||
        cfg_bool(c, d, NULL, "bf16", &r.bf16) < 0 || cfg_bool(c, d, NULL, "fp16", &r.fp16) < 0)
        return -1;
    if (stage == 2 || stage == 3 || stage == 5) {   /* a value head, PPO's four models, KTO's pairs */
        cfg_key(c, NULL, "stage", key, sizeof key);
        cfg_unmodelled(c, key, cfg_item(d, "stage"));
    }
    int dpo = stage == 4;
    if (run_batch(c, d, "per_device_train_batch_size", 8, "per_device_train_batch_size (the Trainer's default 8)", dpo) ||
        run_seq(c, d, SEQ, 2048, "cutoff_len (LLaMA-Factory's default 2048)"))
        return -1;
    /* gradient checkpointing is on unless disabled (model/model_utils/checkpointing.py prepare_model_for_training) */
    if (!nogc && cfg_set(c, "act-ckpt", "full", cfg_item(d, "disable_gradient_checkpointing") ? "disable_gradient_checkpointing false"
                         : "disable_gradient_checkpointing (absent: LLaMA-Factory checkpoints every block)"))
        return -1;
    if (cfg_item(d, "flash_attn")) {
        cfg_key(c, NULL, "flash_attn", key, sizeof key);
        if (cfg_set(c, "attn", fa == 1 ? "eager" : "sdpa", key)) return -1;
    }
    /* the model loads at torch_dtype "auto" (loader.py): the checkpoint's dtype */
    r.load = "bfloat16";
    snprintf(r.load_key, sizeof r.load_key, "the model loaded at torch_dtype \"auto\" (LLaMA-Factory's loader.py: the checkpoint's dtype, bf16 for the models it names)");
    if (pure) { r.bf16 = 1; snprintf(r.prec_key, sizeof r.prec_key, "pure_bf16"); }
    else cfg_fmt(r.prec_key, sizeof r.prec_key, "%s", r.bf16 ? "bf16" : r.fp16 ? "fp16" : "bf16 and fp16 false (fp32)");
    /* trainable parameters upcast to fp32 unless pure_bf16, or ZeRO-3 without quantization, which
       keeps fp32 partitions itself (model/adapter.py init_adapter) */
    r.full_upcast = !pure;
    if (type == 0 || type == 1) {
        if (type == 1) cfg_unmodelled(c, "finetuning_type=oft", NULL);
        r.lora = 1;
        if (run_lora(c, d, "lora_rank", 8, "lora_alpha", 2, 0, "lora_dropout", 0, "lora_target", NULL, "LLaMA-Factory")) return -1;
        if (!rt) cfg_note(c, "finetuning_type (absent: LLaMA-Factory's default lora)");
    } else if (type == 2) {
        long long n = 2;
        char v[48];
        int rn = cfg_int(c, d, NULL, "freeze_trainable_layers", -100000, 100000, &n);
        if (rn < 0) return -1;
        if (n <= 0) { cfg_unmodelled(c, "freeze_trainable_layers (the first layers trainable)", cfg_item(d, "freeze_trainable_layers")); n = -n; }
        snprintf(v, sizeof v, "all-but-last:%lld", n ? n : 1);
        cfg_fmt(key, sizeof key, "%s", rn ? "freeze_trainable_layers" : "freeze_trainable_layers (LLaMA-Factory's default 2)");
        if (cfg_set(c, "freeze", v, key)) return -1;
        const cJSON *fm = cfg_item(d, "freeze_trainable_modules");
        if (fm && !(cJSON_IsString(fm) && !strcmp(fm->valuestring, "all"))) cfg_unmodelled(c, "freeze_trainable_modules", fm);
        cfg_note(c, "finetuning_type freeze: the frozen layers held at the checkpoint's dtype; planned at the precision's bytes");
    }
    if (qbits) {
        cfg_key(c, NULL, "quantization_bit", key, sizeof key);
        if (qm != 0 || (qbits != 4 && qbits != 8)) cfg_unmodelled(c, key, cfg_item(d, "quantization_bit"));
        else {
            if (!r.lora) return cfg_fail(c, "quantization_bit with finetuning_type %s: LLaMA-Factory refuses it (quantized models "
                                            "train only with LoRA or OFT)", TYPES[type]);
            snprintf(r.quant_key, sizeof r.quant_key, "bnb_4bit_quant_storage = the compute dtype (LLaMA-Factory under FSDP / ZeRO-3)");
            if (run_quant(c, &r, (int)qbits, key, dq, "double_quantization false")) return -1;
        }
    }
    if (dpo) {
        const cJSON *pl = cfg_item(d, "pref_loss");
        int ref_free = cJSON_IsString(pl) && (!strcmp(pl->valuestring, "orpo") || !strcmp(pl->valuestring, "simpo"));
        if (ref_free || r.lora) cfg_note(c, ref_free ? "pref_loss orpo/simpo: no reference model" :
                                         "DPO's reference model: the base with the adapters disabled (no copy held)");
        else cfg_unmodelled(c, "the DPO reference model (a frozen copy of the policy, LLaMA-Factory's ref_model)", NULL);
    }
    r.ds = cfg_item(d, "deepspeed");
    snprintf(r.ds_key, sizeof r.ds_key, "deepspeed");
    r.fsdp = cfg_item(d, "fsdp");
    r.fsdp_config = cfg_item(d, "fsdp_config");
    if (r.ds && !r.qbits) {   /* ZeRO-3 keeps fp32 partitions itself; DeepSpeed's own precision either way */
        cfg_fmt(note, sizeof note, "trainable parameters: DeepSpeed's %s precision", r.bf16 ? "bf16" : r.fp16 ? "fp16" : "fp32");
        cfg_note(c, note);
    }
    return run_apply(c, d, &r, "optim");
}

/* ==== axolotl: its AxolotlInputConfig (src/axolotl/utils/schemas/config.py, model.py, peft.py,
 *      training.py; utils/config/__init__.py normalize_config, loaders/model.py) ==== */

static const CfgKey AX_KEYS[] = {
    {"base_model", H, 0}, {"load_in_8bit", H, 0}, {"load_in_4bit", H, 0}, {"adapter", H, 0}, {"lora_r", H, 0},
    {"lora_alpha", H, 0}, {"lora_dropout", H, 0}, {"lora_target_modules", H, 0}, {"lora_target_linear", H, 0},
    {"sequence_len", H, 0}, {"micro_batch_size", H, 0}, {"bf16", H, 0}, {"fp16", H, 0}, {"bfloat16", H, 0},
    {"float16", H, 0}, {"gradient_checkpointing", H, 0}, {"gradient_checkpointing_kwargs.use_reentrant", NE, 0},
    {"optimizer", H, 0}, {"flash_attention", H, 0}, {"sdp_attention", H, 0}, {"xformers_attention", H, 0},
    {"fsdp_version", H, 0}, {"rl", H, 0}, {"bnb_config_kwargs", H, 0},
    {"lora_modules_to_save", D, "null"}, {"peft_use_dora", D, "false"}, {"relora", D, "false"}, {"plugins", D, "null"},
    {"liger_*", D, "false"}, {"cut_cross_entropy", D, "false"}, {"chunked_cross_entropy", D, "false"},
    {"activation_offloading", D, "false"}, {"tiled_mlp", D, "false"}, {"sequence_parallel_degree", D, "1"},
    {"context_parallel_size", D, "1"}, {"tensor_parallel_size", D, "1"}, {"torch_compile", D, "false"},
    {"lora_mlp_kernel", D, "false"}, {"lora_qkv_kernel", D, "false"}, {"lora_o_kernel", D, "false"},
    {"unfrozen_parameters", D, "null"}, {"fp8", D, "false"}, {"float32", D, "false"},
    {"model_type", NE, 0}, {"tokenizer_type", NE, 0}, {"base_model_config", NE, 0}, {"tokenizer_config", NE, 0},
    {"trust_remote_code", NE, 0}, {"datasets", NE, 0}, {"test_datasets", NE, 0}, {"dataset_prepared_path", NE, 0},
    {"val_set_size", NE, 0}, {"output_dir", NE, 0}, {"lora_model_dir", NE, 0}, {"lora_fan_in_fan_out", NE, 0},
    {"sample_packing", NE, 0}, {"eval_sample_packing", NE, 0}, {"pad_to_sequence_len", NE, 0}, {"wandb_*", NE, 0},
    {"mlflow_*", NE, 0}, {"comet_*", NE, 0}, {"use_wandb", NE, 0}, {"use_tensorboard", NE, 0}, {"num_epochs", NE, 0},
    {"lr_scheduler", NE, 0}, {"learning_rate", NE, 0}, {"cosine_min_lr_ratio", NE, 0}, {"train_on_inputs", NE, 0},
    {"group_by_length", NE, 0}, {"tf32", NE, 0}, {"resume_from_checkpoint", NE, 0}, {"auto_resume_from_checkpoints", NE, 0},
    {"logging_steps", NE, 0}, {"attn_implementation", H, 0}, {"warmup_steps", NE, 0}, {"warmup_ratio", NE, 0},
    {"evals_per_epoch", NE, 0}, {"eval_steps", NE, 0}, {"saves_per_epoch", NE, 0}, {"save_steps", NE, 0},
    {"save_strategy", NE, 0}, {"save_total_limit", NE, 0}, {"save_first_step", NE, 0}, {"eval_table_size", NE, 0},
    {"eval_max_new_tokens", NE, 0}, {"weight_decay", NE, 0}, {"special_tokens", NE, 0}, {"tokens", NE, 0},
    {"chat_template", NE, 0}, {"default_system_message", NE, 0}, {"hub_model_id", NE, 0}, {"hub_strategy", NE, 0},
    {"seed", NE, 0}, {"strict", NE, 0}, {"max_grad_norm", NE, 0}, {"early_stopping_patience", NE, 0}, {"debug", NE, 0},
    {"deepspeed", H, 0}, {"fsdp", H, 0}, {"fsdp_config", H, 0}, {"gradient_accumulation_steps", H, 0},
    {"dataloader_*", NE, 0}, {"ddp_timeout", NE, 0}, {"eval_batch_size", NE, 0}, {"eval_causal_lm_metrics", NE, 0},
    {"do_causal_lm_eval", NE, 0}, {"adam_beta1", NE, 0}, {"adam_beta2", NE, 0}, {"adam_epsilon", NE, 0},
    {"loraplus_lr_ratio", NE, 0}, {"peft_use_rslora", NE, 0}, {"lr_quadratic_warmup", NE, 0}, {"max_steps", NE, 0},
    {"dpo_*", NE, 0}, {"rl_beta", NE, 0}, {"orpo_alpha", NE, 0}, {"remove_unused_columns", NE, 0}, {"shuffle_merged_datasets", NE, 0},
    {"dataset_processes", NE, 0}, {"dataset_num_proc", NE, 0}, {"is_llama_derived_model", NE, 0}, {"is_mistral_derived_model", NE, 0},
    {"is_qwen_derived_model", NE, 0}, {"is_falcon_derived_model", NE, 0}, {"save_safetensors", NE, 0}, {"flash_attn_cross_entropy", D, "false"},
    {"flash_attn_rms_norm", NE, 0}, {"flash_attn_fuse_qkv", D, "false"}, {"flash_attn_fuse_mlp", D, "false"},
    {0, 0, 0},
};

int cfg_axolotl_read(Cfg *c, const cJSON *d) {
    static const char *const SEQ[] = {"sequence_len", NULL};
    const CfgKey *const tabs[] = {AX_KEYS, NULL};
    Run r = {.who = "axolotl", .quant_storage_float = 1};
    int q4 = 0, q8 = 0, fp = 0, bf_pure = 0, rf;
    char key[300];
    const cJSON *bm = cfg_item(d, "base_model"), *ad = cfg_item(d, "adapter"), *rl = cfg_item(d, "rl");
    cfg_walk_tables(c, d, tabs);
    if (cJSON_IsString(bm)) cfg_fmt(c->out->model_hint, sizeof c->out->model_hint, "%s (base_model)", bm->valuestring);
    /* bf16 "auto" (its default): bf16 where the GPU has it, else fp16 (utils/config/__init__.py
       normalize_config: is_torch_bf16_gpu_available) */
    const cJSON *b = cfg_item(d, "bf16");
    if ((rf = cfg_bool(c, d, NULL, "fp16", &fp)) < 0 || cfg_bool(c, d, NULL, "bfloat16", &bf_pure) < 0) return -1;
    if (!b || (cJSON_IsString(b) && (!strcmp(b->valuestring, "auto") || !strcmp(b->valuestring, "full")))) {
        r.bf16 = !fp && c->known->gpu_bf16;
        r.fp16 = fp || !c->known->gpu_bf16;
        cfg_fmt(r.prec_key, sizeof r.prec_key, "bf16 \"auto\" (axolotl's default: %s, as %s has%s bf16)", r.bf16 ? "bf16" : "fp16",
                c->known->gpu ? c->known->gpu : "the GPU", c->known->gpu_bf16 ? "" : " no");
        if (!b || strcmp(b->valuestring, "full")) cfg_note(c, r.prec_key);
    } else {
        if (cfg_bool(c, d, NULL, "bf16", &r.bf16) < 0) return -1;
        r.fp16 = fp && !r.bf16;
        cfg_fmt(r.prec_key, sizeof r.prec_key, "%s", r.bf16 ? "bf16" : r.fp16 ? "fp16" : "bf16 and fp16 false (fp32)");
    }
    if (bf_pure) r.bf16 = 1;
    /* the model loads at cfg.torch_dtype: bf16 with bf16 or bfloat16, fp16 with fp16, float16 or
       8-bit, else fp32 */
    r.load = r.bf16 || bf_pure ? "bfloat16" : (r.fp16 || q8) ? "float16" : "float32";
    snprintf(r.load_key, sizeof r.load_key, "the model loaded at axolotl's torch_dtype (%s)", r.load);
    if (cfg_bool(c, d, NULL, "load_in_4bit", &q4) < 0 || cfg_bool(c, d, NULL, "load_in_8bit", &q8) < 0) return -1;
    int dpo = 0;
    if (rl) {
        cfg_key(c, NULL, "rl", key, sizeof key);
        if (cJSON_IsString(rl) && (!strcmp(rl->valuestring, "dpo") || !strcmp(rl->valuestring, "ipo"))) dpo = 1;
        else if (!(cJSON_IsString(rl) && (!strcmp(rl->valuestring, "orpo") || !strcmp(rl->valuestring, "simpo"))))
            cfg_unmodelled(c, key, rl);
        else dpo = 1;
    }
    if (run_batch(c, d, "micro_batch_size", 1, "micro_batch_size (axolotl's default 1)", dpo) ||
        run_seq(c, d, SEQ, 512, "sequence_len (axolotl's default 512)") ||
        run_ckpt(c, d, 0, "") || run_attn(c, d, "attn_implementation"))
        return -1;
    int fa = 0, sdp = 0;
    if (cfg_bool(c, d, NULL, "flash_attention", &fa) < 0 || cfg_bool(c, d, NULL, "sdp_attention", &sdp) < 0) return -1;
    if ((fa || sdp) && !cfg_setting(c, "attn") && cfg_set(c, "attn", "sdpa", fa ? "flash_attention" : "sdp_attention")) return -1;
    if (ad) {
        cfg_key(c, NULL, "adapter", key, sizeof key);
        if (!cJSON_IsString(ad) || (strcmp(ad->valuestring, "lora") && strcmp(ad->valuestring, "qlora")))
            cfg_unmodelled(c, key, ad);
        else {
            r.lora = 1;
            if (run_lora(c, d, "lora_r", 8, "lora_alpha", 0, 16, "lora_dropout", 0, "lora_target_modules", "lora_target_linear",
                         "axolotl"))
                return -1;
            if (!strcmp(ad->valuestring, "qlora") && !q4) cfg_note(c, "adapter qlora without load_in_4bit: axolotl loads the base unquantized");
        }
    } else if (q4 || q8) return cfg_fail(c, "%s without adapter: a quantized base trains only with LoRA", q4 ? "load_in_4bit" : "load_in_8bit");
    if (r.lora && (q4 || q8)) {
        const cJSON *kw = cfg_item(d, "bnb_config_kwargs");
        int dq = 1;
        if (cfg_section(c, d, NULL, "bnb_config_kwargs") || cfg_bool(c, kw, "bnb_config_kwargs", "bnb_4bit_use_double_quant", &dq) < 0) return -1;
        const cJSON *qs = cfg_item(kw, "bnb_4bit_quant_storage");
        if (qs) r.quant_storage_float = cJSON_IsString(qs) && strcmp(qs->valuestring, "uint8") != 0;
        snprintf(r.quant_key, sizeof r.quant_key, "%s", qs ? "bnb_config_kwargs.bnb_4bit_quant_storage" : "");
        if (run_quant(c, &r, q4 ? 4 : 8, cfg_key(c, NULL, q4 ? "load_in_4bit" : "load_in_8bit", key, sizeof key), dq,
                      "bnb_config_kwargs.bnb_4bit_use_double_quant false"))
            return -1;
    }
    if (dpo && !r.lora) cfg_unmodelled(c, "the DPO reference model (a frozen copy of the policy)", NULL);
    r.ds = cfg_item(d, "deepspeed");
    snprintf(r.ds_key, sizeof r.ds_key, "deepspeed");
    r.fsdp = cfg_item(d, "fsdp");
    r.fsdp_config = cfg_item(d, "fsdp_config");
    long long fv = 0;
    if (cfg_int(c, d, NULL, "fsdp_version", 1, 2, &fv) < 0) return -1;
    if (fv) { r.fsdp_version = fv; r.fsdp_version_key = "fsdp_version"; }
    if (!r.fsdp && r.fsdp_config) {   /* axolotl: fsdp_config alone turns FSDP on */
        static cJSON *on;
        if (!on) on = cJSON_CreateString("full_shard auto_wrap");
        r.fsdp = on;
    }
    return run_apply(c, d, &r, "optimizer");
}

/* ==== recognising a recipe ==== */

static int has_any_key(const cJSON *d, const char *const *keys) {
    for (; *keys; keys++)
        if (cJSON_GetObjectItemCaseSensitive(d, *keys)) return 1;
    return 0;
}

int cfg_recipe_detect(const cJSON *doc) {
    static const char *const AX[] = {"base_model", "micro_batch_size", "sequence_len", "lora_target_linear", "sample_packing", NULL};
    static const char *const LF[] = {"finetuning_type", "cutoff_len", "lora_target", "quantization_bit", "template", NULL};
    static const char *const TRL[] = {"model_name_or_path", "max_seq_length", "max_length", "use_peft", "lora_r", "dataset_name",
                                      "dataset_mixture", "packing", "load_in_4bit", "dataset_text_field", "beta", NULL};
    static const char *const HF[] = {"per_device_train_batch_size", "output_dir", "per_device_eval_batch_size", NULL};
    if (has_any_key(doc, AX)) return CFG_AXOLOTL;
    if (has_any_key(doc, LF)) return CFG_LLAMA_FACTORY;
    if (has_any_key(doc, TRL)) return CFG_TRL;
    if (has_any_key(doc, HF)) return CFG_HF_TRAINER;
    return -1;
}
