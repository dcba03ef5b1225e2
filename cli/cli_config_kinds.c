/* cli_config_kinds.c — see cli_config_kinds.h. Versions read: DeepSpeed 0.19.8, accelerate 1.15.0,
 * torchtitan 0.2.2 (its last TOML job config), transformers 5.24.0. */
#include "cli_config_kinds.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define H KEY_HONOURED
#define NE KEY_NO_EFFECT
#define D KEY_DEFAULT_ONLY
#define ZO "zero_optimization."

/* ==== DeepSpeed (deepspeed/runtime/config.py, zero/config.py, zero/offload_config.py,
 *      precision_config.py, activation_checkpointing/config.py) ==== */

static const CfgKey DS_KEYS[] = {
    {"train_batch_size", H, 0}, {"train_micro_batch_size_per_gpu", H, 0}, {"gradient_accumulation_steps", H, 0},
    {ZO "stage", H, 0}, {ZO "reduce_bucket_size", H, 0},
    {ZO "stage3_prefetch_bucket_size", H, 0}, {ZO "prefetch_bucket_size", H, 0},
    {ZO "stage3_max_live_parameters", H, 0}, {ZO "max_live_parameters", H, 0},
    {ZO "stage3_max_reuse_distance", H, 0}, {ZO "max_reuse_distance", H, 0},
    {ZO "stage3_param_persistence_threshold", H, 0}, {ZO "param_persistence_threshold", H, 0},
    {ZO "overlap_comm", H, 0}, {ZO "offload_optimizer.device", H, 0}, {ZO "offload_param.device", H, 0},
    {ZO "cpu_offload", H, 0}, {ZO "cpu_offload_param", H, 0},
    {ZO "contiguous_gradients", D, "true"}, {ZO "reduce_scatter", D, "true"}, {ZO "allgather_partitions", D, "true"},
    {ZO "use_multi_rank_bucket_allreduce", D, "true"}, {ZO "round_robin_gradients", D, "false"},
    {ZO "sub_group_size", D, "1000000000"}, {ZO "compute_grad_norm", D, "true"}, {ZO "legacy_stage1", D, "false"},
    {ZO "memory_efficient_linear", D, "true"}, {ZO "override_module_apply", D, "true"},
    {ZO "enable_sanity_checks", D, "false"}, {ZO "parameter_alignment", D, "false"},
    {ZO "zero_hpz_partition_size", D, "1"}, {ZO "zero_quantized_weights", D, "false"},
    {ZO "zero_quantized_nontrainable_weights", D, "false"}, {ZO "zero_quantized_gradients", D, "false"},
    {ZO "stage3_module_granularity_threshold", D, "0"}, {ZO "module_granularity_threshold", D, "0"},
    {ZO "stage3_use_all_reduce_for_fetch_params", D, "false"}, {ZO "use_all_reduce_for_fetch_params", D, "false"},
    {ZO "stage3_allgather_sequential", D, "false"}, {ZO "allgather_sequential", D, "false"},
    {ZO "offload_optimizer.ratio", D, "1"}, {ZO "offload_optimizer.super_offload", D, "false"},
    {ZO "allgather_bucket_size", NE, 0}, {ZO "load_from_fp32_weights", NE, 0}, {ZO "elastic_checkpoint", NE, 0},
    {ZO "stage3_gather_16bit_weights_on_model_save", NE, 0}, {ZO "gather_16bit_weights_on_model_save", NE, 0},
    {ZO "stage3_gather_fp16_weights_on_model_save", NE, 0}, {ZO "ignore_unused_parameters", NE, 0},
    {ZO "log_trace_cache_warnings", NE, 0}, {ZO "pipeline_loading_checkpoint", NE, 0},
    {ZO "cpu_offload_use_pin_memory", NE, 0}, {ZO "offload_optimizer.pin_memory", NE, 0},
    {ZO "offload_optimizer.nvme_path", NE, 0}, {ZO "offload_optimizer.buffer_count", NE, 0},
    {ZO "offload_optimizer.pipeline_read", NE, 0}, {ZO "offload_optimizer.pipeline_write", NE, 0},
    {ZO "offload_optimizer.fast_init", NE, 0}, {ZO "offload_optimizer.cpuadam_cores_perc", NE, 0},
    {ZO "offload_param.pin_memory", NE, 0}, {ZO "offload_param.nvme_path", NE, 0},
    {ZO "offload_param.buffer_count", NE, 0}, {ZO "offload_param.buffer_size", NE, 0},
    {ZO "offload_param.max_in_cpu", NE, 0},
    {"fp16.enabled", H, 0}, {"fp16.fp16_master_weights_and_grads", H, 0}, {"fp16.auto_cast", NE, 0},
    {"fp16.loss_scale", NE, 0}, {"fp16.initial_scale_power", NE, 0}, {"fp16.loss_scale_window", NE, 0},
    {"fp16.hysteresis", NE, 0}, {"fp16.consecutive_hysteresis", NE, 0}, {"fp16.min_loss_scale", NE, 0},
    {"bf16.enabled", H, 0}, {"bf16.bf16_master_weights_and_grads", H, 0}, {"bf16.bf16_optimizer_states", H, 0},
    {"bf16.immediate_grad_update", D, "false"}, {"bf16.check_grad_overflow", NE, 0},
    {"bfloat16.enabled", H, 0}, {"bfloat16.bf16_master_weights_and_grads", H, 0},
    {"bfloat16.bf16_optimizer_states", H, 0}, {"bfloat16.immediate_grad_update", D, "false"},
    {"bfloat16.check_grad_overflow", NE, 0},
    {"torch_autocast.enabled", H, 0}, {"torch_autocast.dtype", H, 0},
    {"optimizer.type", H, 0}, {"optimizer.params.adam_w_mode", H, 0}, {"optimizer.params.momentum", H, 0},
    {"optimizer.params.lr", NE, 0}, {"optimizer.params.betas", NE, 0}, {"optimizer.params.eps", NE, 0},
    {"optimizer.params.weight_decay", NE, 0}, {"optimizer.params.bias_correction", NE, 0},
    {"optimizer.params.dampening", NE, 0}, {"optimizer.params.nesterov", NE, 0},
    {"optimizer.params.amsgrad", D, "false"}, {"optimizer.params.torch_adam", D, "false"}, {"optimizer.legacy_fusion", NE, 0},
    {"activation_checkpointing.partition_activations", D, "false"}, {"activation_checkpointing.cpu_checkpointing", D, "false"},
    {"activation_checkpointing.contiguous_memory_optimization", D, "false"},
    {"activation_checkpointing.number_checkpoints", NE, 0}, {"activation_checkpointing.synchronize_checkpoint_boundary", NE, 0},
    {"activation_checkpointing.profile", NE, 0},
    {"gradient_allreduce_op", D, "mean"}, {"disable_allgather", D, "false"},
    {"scheduler", NE, 0}, {"steps_per_print", NE, 0}, {"wall_clock_breakdown", NE, 0}, {"memory_breakdown", NE, 0},
    {"dump_state", NE, 0}, {"log_level", NE, 0}, {"tensorboard", NE, 0}, {"wandb", NE, 0}, {"csv_monitor", NE, 0},
    {"comet", NE, 0}, {"flops_profiler", NE, 0}, {"comms_logger", NE, 0}, {"timers", NE, 0}, {"checkpoint", NE, 0},
    {"gradient_clipping", NE, 0}, {"prescale_gradients", NE, 0}, {"gradient_predivide_factor", NE, 0},
    {"zero_allow_untested_optimizer", NE, 0}, {"zero_force_ds_cpu_optimizer", NE, 0}, {"dataloader_drop_last", NE, 0},
    {"aio", NE, 0}, {"autotuning", NE, 0}, {"disable_python_gc", NE, 0},
    {0, 0, 0},
};

/* The effective value of a batch flag and where it came from: the command line, the settings so far. */
static long long effective(const Cfg *c, const char *flag, long long cmdline, char *src, size_t len) {
    const CfgSetting *s = cfg_setting(c, flag);
    if (cmdline) snprintf(src, len, "the command line's --%s %lld", flag, cmdline);
    else if (s && !s->deferred) cfg_fmt(src, len, "%s %s", s->key, s->value);
    else src[0] = 0;
    return cmdline ? cmdline : s && !s->deferred ? atoll(s->value) : 0;
}

/* 1 when obj's `name` is the string "auto". */
static int is_auto(const cJSON *obj, const char *name) {
    const cJSON *v = cJSON_IsObject(obj) ? cJSON_GetObjectItemCaseSensitive(obj, name) : NULL;
    return cJSON_IsString(v) && strcmp(v->valuestring, "auto") == 0;
}

/* A key left "auto" for flag: filled by fill's launcher where it knows the value (its own key sets
   the flag: only named here), else by the command line, else a deferred setting (cli_config_merge
   refuses it in a plan and leaves it to auto's search). */
static int ds_auto(Cfg *c, const DsFill *fill, const char *key, const char *flag, long long cmdline, const char *choices) {
    char note[400];
    const char *rule = strcmp(flag, "batch") == 0 ? fill->batch_rule : strcmp(flag, "grad-accum") == 0 ? fill->accum_rule
                     : fill->precision_rule;
    if (fill->who && rule) {
        cfg_fmt(note, sizeof note, "%s \"auto\" is filled by %s from %s", key, fill->who, rule);
        cfg_note(c, note);
        return 0;
    }
    if (strcmp(flag, "precision") == 0 && c->known->precision && choices && !cfg_ok_value(choices, c->known->precision)) {
        char ok[96];
        snprintf(ok, sizeof ok, "%s", choices);
        for (char *q = ok; *q; q++) if (*q == '|') *q = ',';
        return cfg_fail(c, "%s \"auto\" is one of %s once %s fills it (DeepSpeed's fp16 / bf16 sections); --precision %s "
                        "is none of them", key, ok, fill->who ? fill->who : "the HF Trainer or accelerate", c->known->precision);
    }
    if (cmdline || (strcmp(flag, "precision") == 0 && c->known->precision)) {
        cfg_fmt(note, sizeof note, "%s \"auto\": the command line's --%s", key, flag);
        cfg_note(c, note);
        return 0;
    }
    const CfgSetting *s = cfg_setting(c, flag);
    if (s) return 0;   /* both fp16.enabled and bf16.enabled "auto": one flag */
    return cfg_defer(c, flag, key, choices, fill->who ? fill->who : "the HF Trainer or accelerate (DeepSpeed alone refuses \"auto\")");
}

/* train_batch_size with one of micro-batch and accumulation missing: DeepSpeed derives it
 * (config.py _set_batch_related_parameters) from the GPU count; a remainder fails its assertion. */
static int ds_derive(Cfg *c, long long tb, const char *tbkey) {
    char ms[240], as[240], gs[240], key[200];
    long long m = effective(c, "batch", c->known->batch, ms, sizeof ms);
    long long a = effective(c, "grad-accum", c->known->grad_accum, as, sizeof as);
    long long g = effective(c, "gpus", c->known->gpus, gs, sizeof gs);
    if (!g) { g = 1; snprintf(gs, sizeof gs, "memplan's default --gpus 1"); }
    if (m && a) return 0;   /* all three known: cli_config_check compares them */
    if (!m && !a) {
        if (cfg_set(c, "grad-accum", "1", "gradient_accumulation_steps (DeepSpeed's 1 beside train_batch_size alone)")) return -1;
        a = 1;
        snprintf(as, sizeof as, "1");
    }
    long long known = m ? m : a, per = g * known;
    if (tb % per)
        return cfg_fail(c, "%s %lld is not a multiple of %s x %s (DeepSpeed derives %s from them and refuses a remainder)",
                        tbkey, tb, m ? ms : as, gs, m ? "gradient_accumulation_steps" : "train_micro_batch_size_per_gpu");
    cfg_fmt(key, sizeof key, "%s / (%s x %s)", tbkey, m ? ms : as, gs);
    return cfg_setf(c, m ? "grad-accum" : "batch", tb / per, key);
}

static int ds_batch(Cfg *c, const cJSON *d, const DsFill *fill) {
    long long tb = 0, mb = 0, ga = 0;
    char key[200];
    int rt = cfg_int(c, d, NULL, "train_batch_size", 1, 1000000000, &tb);
    int rm = cfg_int(c, d, NULL, "train_micro_batch_size_per_gpu", 1, 1000000, &mb);
    int ra = cfg_int(c, d, NULL, "gradient_accumulation_steps", 1, 1000000, &ga);
    if (rt < 0 || rm < 0 || ra < 0) return -1;
    if (rm && cfg_setf(c, "batch", mb, cfg_key(c, NULL, "train_micro_batch_size_per_gpu", key, sizeof key))) return -1;
    if (ra && cfg_setf(c, "grad-accum", ga, cfg_key(c, NULL, "gradient_accumulation_steps", key, sizeof key))) return -1;
    if (is_auto(d, "train_micro_batch_size_per_gpu") &&
        ds_auto(c, fill, cfg_key(c, NULL, "train_micro_batch_size_per_gpu", key, sizeof key), "batch", c->known->batch, NULL))
        return -1;
    if (is_auto(d, "gradient_accumulation_steps")) {
        if (fill->accum > 0) {   /* accelerate: its plugin's gradient_accumulation_steps */
            char k2[400];
            cfg_fmt(k2, sizeof k2, "%s \"auto\" = %s", cfg_key(c, NULL, "gradient_accumulation_steps", key, sizeof key), fill->accum_key);
            if (cfg_setf(c, "grad-accum", fill->accum, k2)) return -1;
        } else if (ds_auto(c, fill, cfg_key(c, NULL, "gradient_accumulation_steps", key, sizeof key), "grad-accum",
                           c->known->grad_accum, NULL))
            return -1;
    }
    if (!rt) return 0;
    cfg_key(c, NULL, "train_batch_size", key, sizeof key);
    c->out->global_batch = tb;
    snprintf(c->out->global_key, sizeof c->out->global_key, "%s", key);
    if ((is_auto(d, "train_micro_batch_size_per_gpu") && !cfg_setting(c, "batch")) ||
        (is_auto(d, "gradient_accumulation_steps") && !cfg_setting(c, "grad-accum")))
        return 0;   /* the filler's values: checked against train_batch_size once known (cli_config_check) */
    return ds_derive(c, tb, key);
}

/* ZeRO stage -> strategy (key: where it came from, absent: the default's note or ""); stage 0 is
   DeepSpeed's own data parallelism, planned as DDP and named. */
static int ds_stage_strategy(Cfg *c, long long stage, const char *key, const char *absent) {
    char s[16], k[320];
    snprintf(k, sizeof k, "%s%s", key, absent);
    if (stage > 0) {
        cfg_fmt(s, sizeof s, "zero%lld", stage);
        return cfg_set(c, "strategy", s, k);
    }
    cJSON *zero = cJSON_CreateNumber(0);
    cfg_unmodelled(c, key, zero);
    cJSON_Delete(zero);
    snprintf(k, sizeof k, "%s 0%s (not modelled: planned as ddp)", key, absent);
    return cfg_set(c, "strategy", "ddp", k);
}

/* DeepSpeed's sizes (elements) onto the --ds-* flags; the stage-3 ones only under stage 3, and
 * none under stage 0: elsewhere DeepSpeed does not read them. DeepSpeed's pydantic models
 * (zero/config.py 0.19.8) take reduce_bucket_size from 1 (gt=0: 0 is refused) and the stage-3
 * sizes from 0 (ge=0: 0 behaves as 1, each tensor its own gather; the --ds-* flags likewise). */
static int ds_sizes(Cfg *c, const cJSON *zo, long long stage) {
    static const struct { const char *name, *flag; int stage3, hidden, lo; } S[] = {   /* hidden: CFG_HIDDEN's */
        {"reduce_bucket_size", "ds-reduce-bucket", 0, 0, 1},
        {"stage3_prefetch_bucket_size", "ds3-prefetch", 1, 1, 0}, {"prefetch_bucket_size", "ds3-prefetch", 1, -1, 0},
        {"stage3_max_live_parameters", "ds3-max-live", 1, -1, 0}, {"max_live_parameters", "ds3-max-live", 1, -1, 0},
        {"stage3_max_reuse_distance", "ds3-max-reuse", 1, -1, 0}, {"max_reuse_distance", "ds3-max-reuse", 1, -1, 0},
        {"stage3_param_persistence_threshold", "ds3-persist", 1, 2, 0}, {"param_persistence_threshold", "ds3-persist", 1, -1, 0},
    };
    for (size_t i = 0; i < sizeof S / sizeof S[0]; i++) {
        long long v;
        char key[200];
        cfg_key(c, "zero_optimization", S[i].name, key, sizeof key);
        if (S[i].hidden >= 0 && stage > 0 && (!S[i].stage3 || stage == 3) && is_auto(zo, S[i].name)) {
            /* the Trainer / accelerate fill it from the hidden size */
            c->out->hidden_auto |= 1u << S[i].hidden;
            snprintf(c->out->hidden_key[S[i].hidden], sizeof c->out->hidden_key[0], "%s", key);
            continue;
        }
        int r = cfg_int(c, zo, "zero_optimization", S[i].name, S[i].lo, 10000000000000LL, &v);
        if (r < 0) return -1;
        if (!r) continue;
        if (stage == 0 || (S[i].stage3 && stage != 3)) cfg_no_effect(c, key);
        else if (cfg_setf(c, S[i].flag, v, key)) return -1;
    }
    return 0;
}

/* An offload device: 0 none, 1 cpu, 2 nvme (not modelled); -1 absent. */
typedef struct { int dev; char key[200]; const cJSON *v; } Offload;

static int offload_device(Cfg *c, const cJSON *obj, const char *parent, const char *name, Offload *o) {
    static const char *const DEV[] = {"none", "cpu", "nvme"};
    o->dev = -1;
    o->v = cfg_item(obj, name);
    cfg_key(c, parent, name, o->key, sizeof o->key);
    int r = cfg_choice(c, obj, parent, name, DEV, 3, 0, &o->dev);
    if (r <= 0) o->dev = -1;
    return r < 0 ? -1 : 0;
}

/* --offload from DeepSpeed's two devices: offload_param (stage 3 only; DeepSpeed ignores it
 * below) moves the optimizer too in memplan's --offload params, so it needs offload_optimizer. */
static int offload_flag(Cfg *c, long long stage, const Offload *opt, const Offload *par) {
    if (opt->dev == 2) cfg_unmodelled(c, opt->key, opt->v);
    if (par->dev == 2) cfg_unmodelled(c, par->key, par->v);
    if (stage == 0) {   /* planned as ddp, which offloads nothing */
        if (opt->dev > 0) cfg_unmodelled(c, opt->key, opt->v);
        if (par->dev > 0) cfg_unmodelled(c, par->key, par->v);
        return 0;
    }
    if (par->dev >= 0 && stage < 3) cfg_no_effect(c, par->key);
    int param = stage == 3 && par->dev == 1;
    if (param && opt->dev != 1) {
        cfg_unmodelled(c, par->key, par->v);   /* parameters offloaded, the optimizer kept on the GPU */
        param = 0;
    }
    if (param) {
        char key[420];
        snprintf(key, sizeof key, "%s + %s", par->key, opt->key);
        return cfg_set(c, "offload", "params", key);
    }
    if (opt->dev == 1) return cfg_set(c, "offload", "optimizer", opt->key);
    if (opt->dev == 0 && par->dev <= 0) return cfg_set(c, "offload", "none", opt->key);
    return 0;
}

static int ds_offload(Cfg *c, const cJSON *zo, long long stage) {
    Offload opt, par;
    int legacy_opt = 0, legacy_par = 0;
    if (cfg_section(c, zo, "zero_optimization", "offload_optimizer") || cfg_section(c, zo, "zero_optimization", "offload_param") ||
        offload_device(c, cfg_item(zo, "offload_optimizer"), "zero_optimization.offload_optimizer", "device", &opt) ||
        offload_device(c, cfg_item(zo, "offload_param"), "zero_optimization.offload_param", "device", &par) ||
        cfg_bool(c, zo, "zero_optimization", "cpu_offload", &legacy_opt) < 0 ||
        cfg_bool(c, zo, "zero_optimization", "cpu_offload_param", &legacy_par) < 0)
        return -1;
    if (legacy_opt && opt.dev < 0) {   /* deprecated spellings of offload_*: device cpu */
        opt.dev = 1;
        opt.v = cfg_item(zo, "cpu_offload");
        cfg_key(c, "zero_optimization", "cpu_offload", opt.key, sizeof opt.key);
    }
    if (legacy_par && par.dev < 0) {
        par.dev = 1;
        par.v = cfg_item(zo, "cpu_offload_param");
        cfg_key(c, "zero_optimization", "cpu_offload_param", par.key, sizeof par.key);
    }
    return offload_flag(c, stage, &opt, &par);
}

/* fp16 -> mixed-fp16, bf16 -> mixed-bf16 (pure bf16 with both bf16_* keys), torch_autocast -> amp-*.
 * "auto" in fp16.enabled / bf16.enabled: the launcher's (fill). */
static int ds_precision(Cfg *c, const cJSON *d, const DsFill *fill) {
    const char *bn = cfg_item(d, "bf16") || !cfg_item(d, "bfloat16") ? "bf16" : "bfloat16";
    const cJSON *fp = cfg_item(d, "fp16"), *bf = cfg_item(d, bn), *ac = cfg_item(d, "torch_autocast");
    int f16 = 0, b16 = 0, amp = 0, fm = 0, bm = 0, bs = 0;
    char key[200], k2[200], both[420];
    if (cfg_section(c, d, NULL, "fp16") || cfg_section(c, d, NULL, bn) || cfg_section(c, d, NULL, "torch_autocast") ||
        cfg_bool(c, fp, "fp16", "enabled", &f16) < 0 || cfg_bool(c, bf, bn, "enabled", &b16) < 0 ||
        cfg_bool(c, ac, "torch_autocast", "enabled", &amp) < 0 || cfg_bool(c, fp, "fp16", "fp16_master_weights_and_grads", &fm) < 0 ||
        cfg_bool(c, bf, bn, "bf16_master_weights_and_grads", &bm) < 0 || cfg_bool(c, bf, bn, "bf16_optimizer_states", &bs) < 0)
        return -1;
    if (f16 && b16) return cfg_fail(c, "fp16.enabled and %s.enabled are both true: DeepSpeed refuses it (config.py)", bn);
    if (fm) cfg_unmodelled(c, cfg_key(c, "fp16", "fp16_master_weights_and_grads", key, sizeof key), cfg_item(fp, "fp16_master_weights_and_grads"));
    if (f16) return cfg_set(c, "precision", "mixed-fp16", cfg_key(c, "fp16", "enabled", key, sizeof key));
    if (bs && !bm)
        return cfg_fail(c, "%s.bf16_optimizer_states needs %s.bf16_master_weights_and_grads: DeepSpeed refuses it (config.py)", bn, bn);
    if (b16 && bm && bs) {
        snprintf(both, sizeof both, "%s + %s", cfg_key(c, bn, "bf16_master_weights_and_grads", key, sizeof key),
                 cfg_key(c, bn, "bf16_optimizer_states", k2, sizeof k2));
        return cfg_set(c, "precision", "bf16", both);
    }
    if (bm) cfg_unmodelled(c, cfg_key(c, bn, "bf16_master_weights_and_grads", key, sizeof key), cfg_item(bf, "bf16_master_weights_and_grads"));
    if (b16) return cfg_set(c, "precision", "mixed-bf16", cfg_key(c, bn, "enabled", key, sizeof key));
    int fa = is_auto(fp, "enabled"), ba = is_auto(bf, "enabled");
    if (fa || ba) {   /* the launcher decides between them (and fp32); an explicit false stays false */
        snprintf(both, sizeof both, "%s%s%s", fa ? cfg_key(c, "fp16", "enabled", key, sizeof key) : "", fa && ba ? " and " : "",
                 ba ? cfg_key(c, bn, "enabled", k2, sizeof k2) : "");
        const char *choices = fa && ba ? "fp32|mixed-bf16|mixed-fp16" : fa ? "fp32|mixed-fp16" : "fp32|mixed-bf16";
        c->out->precision_auto = 1;
        return ds_auto(c, fill, both, "precision", 0, choices);
    }
    if (!amp) return 0;
    /* DtypeEnum's spellings (config.py); no dtype: torch.autocast's own on CUDA, float16 */
    static const char *const DT[] = {"torch.bfloat16", "bf16", "bfloat16", "torch.float16", "fp16", "float16", "half"};
    int i = 3;
    if (cfg_choice(c, ac, "torch_autocast", "dtype", DT, 7, 0, &i) < 0) return -1;
    return cfg_set(c, "precision", i < 3 ? "amp-bf16" : "amp-fp16", cfg_key(c, "torch_autocast", "enabled", key, sizeof key));
}

/* optimizer.type: Adam (AdamW unless params.adam_w_mode is false, engine.py), AdamW, SGD
 * (torch.optim.SGD; with momentum > 0 it keeps a buffer); others are named. */
static int ds_optimizer(Cfg *c, const cJSON *d) {
    static const char *const T[] = {"Adam", "AdamW", "SGD"};
    if (cfg_section(c, d, NULL, "optimizer")) return -1;
    const cJSON *o = cfg_item(d, "optimizer"), *p = cfg_item(o, "params"), *t = cfg_item(o, "type");
    char key[200];
    int i = -1, aw = 1;
    double mom = 0;
    if (!t) return 0;
    cfg_key(c, "optimizer", "type", key, sizeof key);
    for (int k = 0; k < 3 && cJSON_IsString(t); k++)
        if (strcasecmp(t->valuestring, T[k]) == 0) i = k;
    if (i < 0) { cfg_unmodelled(c, key, t); return 0; }
    if (cfg_bool(c, p, "optimizer.params", "adam_w_mode", &aw) < 0 || cfg_num(c, p, "optimizer.params", "momentum", 0, 1, &mom) < 0)
        return -1;
    const char *name = i == 1 || (i == 0 && aw) ? "adamw" : i == 0 ? "adam" : mom > 0 ? "sgd-momentum" : "sgd";
    return cfg_set(c, "optimizer", name, key);
}

/* zero_optimization: a table; a bool is DeepSpeed's deprecated spelling (zero/config.py
 * get_zero_config -> read_zero_config_deprecated: true is stage 1); anything else DeepSpeedZeroConfig
 * refuses. The stage: 0 to 3 (ZeroStageEnum). */
static int ds_stage(Cfg *c, const cJSON *d, long long *stage, char *key, size_t klen, const char **absent) {
    const cJSON *zv = cJSON_GetObjectItemCaseSensitive(d, "zero_optimization");
    cfg_key(c, "zero_optimization", "stage", key, klen);
    *absent = "";
    *stage = 0;
    if (cJSON_IsBool(zv)) {
        *stage = cJSON_IsTrue(zv);
        cfg_key(c, NULL, "zero_optimization", key, klen);
        *absent = cJSON_IsTrue(zv) ? " true (DeepSpeed's deprecated spelling of stage 1)" : " false (stage 0)";
        return 0;
    }
    if (cfg_section(c, d, NULL, "zero_optimization")) return -1;
    int r = cfg_int(c, cfg_item(d, "zero_optimization"), "zero_optimization", "stage", 0, 3, stage);
    if (r < 0) return -1;
    if (!r) *absent = " (absent: DeepSpeed's default)";
    return 0;
}

/* A DeepSpeed config: the file itself, accelerate's deepspeed_config_file or the HF Trainer's
 * deepspeed. fill: who reads it, and fills its "auto"; a Trainer's own checkpointing
 * (gradient_checkpointing) decides, not deepspeed.checkpointing's section. */
static int ds_read(Cfg *c, const cJSON *d, const DsFill *fill) {
    const cJSON *zo;
    long long stage = 0;
    char key[200];
    const char *absent;
    int oc = 0, r;
    cfg_walk(c, d, NULL, DS_KEYS);
    if (ds_stage(c, d, &stage, key, sizeof key, &absent)) return -1;
    zo = cfg_item(d, "zero_optimization");
    if (ds_stage_strategy(c, stage, key, absent) || ds_batch(c, d, fill) || ds_sizes(c, zo, stage) || ds_offload(c, zo, stage) ||
        ds_precision(c, d, fill) || ds_optimizer(c, d))
        return -1;
    if ((r = cfg_bool(c, zo, "zero_optimization", "overlap_comm", &oc)) < 0) return -1;
    cfg_key(c, "zero_optimization", "overlap_comm", key, sizeof key);
    if (r && (stage == 1 || stage == 2)) {   /* zero1/2: a second reduce bucket when on (--ds-overlap-comm) */
        if (cfg_set(c, "ds-overlap-comm", oc ? "on" : "off", key)) return -1;
    } else if (r && stage == 3 && !oc) cfg_unmodelled(c, key, cfg_item(zo, "overlap_comm"));   /* default: on */
    else if (r) cfg_no_effect(c, key);
    if (cfg_section(c, d, NULL, "activation_checkpointing")) return -1;
    if (cfg_item(d, "activation_checkpointing")) {
        cfg_key(c, NULL, "activation_checkpointing", key, sizeof key);
        if (fill->trainer) cfg_no_effect(c, key);
        else if (cfg_set(c, "act-ckpt", "full", strncat(key, " (present: the model checkpoints every block through "
                                                              "deepspeed.checkpointing)", sizeof key - strlen(key) - 1)))
            return -1;
    }
    return 0;
}

/* The flags a DeepSpeed run has whatever its file says: no fp16/bf16/torch_autocast is fp32
 * (unless they are "auto": the launcher's), no offload section is none. */
static void ds_defaults(Cfg *c) {
    if (!c->out->precision_auto) cfg_default(c, "precision", "fp32", "DeepSpeed's default: no fp16, bf16 or torch_autocast");
    cfg_default(c, "offload", "none", "DeepSpeed's default: no offload_optimizer or offload_param");
}

int cfg_ds_read(Cfg *c, const cJSON *d, const DsFill *fill) {
    if (ds_read(c, d, fill)) return -1;
    ds_defaults(c);
    return 0;
}

/* ==== FSDP as accelerate's plugin and the HF Trainer configure it (accelerate utils/dataclasses.py
 *      FullyShardedDataParallelPlugin, transformers training_args.py _process_fsdp_args) ==== */

static const CfgKey FSDP_KEYS[] = {
    {"fsdp_config.version", H, 0}, {"fsdp_config.reshard_after_forward", H, 0}, {"fsdp_config.sharding_strategy", H, 0},
    {"fsdp_config.offload_params", H, 0}, {"fsdp_config.cpu_offload", H, 0}, {"fsdp_config.activation_checkpointing", H, 0},
    {"fsdp_config.auto_wrap_policy", H, 0}, {"fsdp_config.min_num_params", H, 0}, {"fsdp_config.backward_prefetch", H, 0},
    {"fsdp_config.forward_prefetch", H, 0}, {"fsdp_config.use_orig_params", H, 0}, {"fsdp_config.limit_all_gathers", H, 0},
    {"fsdp_config.transformer_layer_cls_to_wrap", NE, 0}, {"fsdp_config.state_dict_type", NE, 0},
    {"fsdp_config.sync_module_states", NE, 0}, {"fsdp_config.cpu_ram_efficient_loading", NE, 0},
    {"fsdp_config.activation_checkpointing_offload", D, "false"}, {"fsdp_config.xla", D, "false"},
    {"fsdp_config.xla_fsdp_v2", D, "false"}, {"fsdp_config.xla_fsdp_grad_ckpt", D, "false"},
    {0, 0, 0},
};

static const char *const SHARDING[] = {"FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD", "HYBRID_SHARD_ZERO2"};
static const char *const SHARDED_AS[] = {"fsdp-full", "fsdp-grad-op", "ddp", "fsdp-hybrid", "fsdp-hybrid"};

/* fsdp_config's key `name` as the file spells it: "fsdp_" + name (accelerate) or name (the Trainer). */
static const char *fsdp_name(const cJSON *fc, const char *name, char *buf, size_t len) {
    snprintf(buf, len, "fsdp_%s", name);
    return cJSON_GetObjectItemCaseSensitive(fc, buf) ? buf : name;
}

/* The sharding strategy: FSDP1 reads sharding_strategy, else reshard_after_forward as a strategy
 * name (FULL_SHARD or 1..5); FSDP2 reshard_after_forward as a bool (default true). NO_SHARD and
 * HYBRID_SHARD_ZERO2 are not modelled (planned as ddp / fsdp-hybrid). */
static int fsdp_strategy(Cfg *c, const cJSON *fc, long long version, const FsdpDefaults *df) {
    char n1[64], n2[64], key[200];
    const char *ss = fsdp_name(fc, "sharding_strategy", n1, sizeof n1), *ra = fsdp_name(fc, "reshard_after_forward", n2, sizeof n2);
    int idx = df->strategy >= 0 ? df->strategy : 0, r, keep = 1;
    snprintf(key, sizeof key, "%s", df->strategy >= 0 ? df->legacy : "");
    if (version == 2) {
        if (cfg_item(fc, ss)) cfg_no_effect(c, cfg_key(c, "fsdp_config", ss, key, sizeof key));   /* FSDP1's */
        if ((r = cfg_bool(c, fc, "fsdp_config", ra, &keep)) < 0) return -1;
        if (r) { idx = keep ? 0 : 1; cfg_key(c, "fsdp_config", ra, key, sizeof key); }
    } else {
        const char *name = cfg_item(fc, ss) ? ss : ra;
        if ((r = cfg_choice(c, fc, "fsdp_config", name, SHARDING, 5, 1, &idx)) < 0) return -1;
        if (r) cfg_key(c, "fsdp_config", name, key, sizeof key);
        if (r && name == ss && cfg_item(fc, ra)) cfg_no_effect(c, cfg_key(c, "fsdp_config", ra, n1, sizeof n1));
    }
    if (version == 2 && df->strategy > 1)
        return cfg_fail(c, "%s %s is FSDP1's only (the HF Trainer refuses it with FSDP2): set fsdp_config.version 1",
                        df->legacy, SHARDING[df->strategy]);
    if (!key[0]) snprintf(key, sizeof key, "fsdp_config (%s's default: %s)", df->who, version == 2 ? "reshard_after_forward true" : "FULL_SHARD");
    if (idx == 2 || idx == 4) cfg_unmodelled(c, key, NULL);
    return cfg_set(c, "strategy", SHARDED_AS[idx], key);
}

/* 1 when the config's strategy is an fsdp-* row (not NO_SHARD planned as ddp): FSDP1's knobs
 * apply only there. */
static int fsdp_rows(const Cfg *c) {
    const CfgSetting *st = cfg_setting(c, "strategy");
    return st && strncmp(st->value, "fsdp-", 5) == 0;
}

/* FSDP1's knobs onto --fsdp-backward-prefetch / --fsdp-forward-prefetch / --fsdp-limit-all-gathers
 * (accelerate utils/dataclasses.py FullyShardedDataParallelPlugin: backward_prefetch defaults to
 * NO_PREFETCH, i.e. None, in accelerate and in the Trainer, training_args.py; forward_prefetch
 * false, limit_all_gathers true); use_orig_params false is not modelled. FSDP2 has none of them. */
static int fsdp1_knobs(Cfg *c, const cJSON *fc, long long version) {
    static const char *const BWD[] = {"BACKWARD_PRE", "BACKWARD_POST", "NO_PREFETCH"};
    static const char *const BWD_FLAG[] = {"pre", "post", "none"};
    char n[64], key[200], t[64];
    int on = version == 1 && fsdp_rows(c), idx = 2, r, b;
    const char *name = fsdp_name(fc, "backward_prefetch", n, sizeof n);
    if (version == 2 || !on) {
        if (cfg_item(fc, name)) cfg_no_effect(c, cfg_key(c, "fsdp_config", name, key, sizeof key));
    } else {
        if ((r = cfg_choice(c, fc, "fsdp_config", name, BWD, 3, 1, &idx)) < 0) return -1;
        if (r) cfg_key(c, "fsdp_config", name, key, sizeof key);
        else snprintf(key, sizeof key, "fsdp_config (accelerate's and the Trainer's default: NO_PREFETCH)");
        if (cfg_set(c, "fsdp-backward-prefetch", BWD_FLAG[idx], key)) return -1;
    }
    static const struct { const char *name, *flag; } B[] = {
        {"forward_prefetch", "fsdp-forward-prefetch"}, {"limit_all_gathers", "fsdp-limit-all-gathers"},
    };
    for (size_t i = 0; i < sizeof B / sizeof B[0]; i++) {
        name = fsdp_name(fc, B[i].name, n, sizeof n);
        if (!cfg_item(fc, name)) continue;
        cfg_key(c, "fsdp_config", name, key, sizeof key);
        if (version == 2 || !on) { cfg_no_effect(c, key); continue; }
        if ((r = cfg_bool(c, fc, "fsdp_config", name, &b)) < 0) return -1;
        if (r && cfg_set(c, B[i].flag, b ? "on" : "off", key)) return -1;
        /* limit_all_gathers false: the rate limiter moves no memory on CPU ranks (measured, gloo
           is synchronous); on GPUs the CPU thread may run ahead and hold more gathered units,
           which memplan does not model (planned as true) */
        if (r && i == 1 && !b) cfg_unmodelled(c, key, cfg_item(fc, name));
    }
    name = fsdp_name(fc, "use_orig_params", n, sizeof n);
    if (cfg_item(fc, name)) {
        cfg_key(c, "fsdp_config", name, key, sizeof key);
        if (version == 2 || cfg_ok_value("true", cfg_text(cfg_item(fc, name), t, sizeof t))) cfg_no_effect(c, key);
        else cfg_unmodelled(c, key, cfg_item(fc, name));
    }
    return 0;
}

/* Wrapping (accelerate dataclasses.py set_auto_wrap_policy): TRANSFORMER_BASED_WRAP is memplan's
 * units (each block); FSDP1's SIZE_BASED_WRAP with min_num_params N > 0 is --fsdp-min-params N,
 * with 0 (accelerate then wraps nothing: auto_wrap_policy None) and NO_WRAP everything stays in
 * the root: --fsdp-min-params 1e16, which no module reaches. FSDP2's size-based wrapping
 * (fully_shard on the modules the policy picks) is not modelled. The Trainer's default is
 * min_num_params 0 (training_args.py). */
static int fsdp_wrap(Cfg *c, const cJSON *fc, long long version) {
    static const char *const POLICY[] = {"TRANSFORMER_BASED_WRAP", "SIZE_BASED_WRAP", "NO_WRAP"};
    char n1[64], n2[64], key[200], k2[200];
    const char *ap = fsdp_name(fc, "auto_wrap_policy", n1, sizeof n1), *mn = fsdp_name(fc, "min_num_params", n2, sizeof n2);
    int policy = 0, r = cfg_choice(c, fc, "fsdp_config", ap, POLICY, 3, 0, &policy);
    double minp = 0;
    if (r < 0) return -1;
    if (r) cfg_key(c, "fsdp_config", ap, key, sizeof key);
    if (r && policy == 0) cfg_no_effect(c, key);
    int sized = r && policy > 0 && version == 1 && fsdp_rows(c);
    if (r && policy > 0 && !sized) cfg_unmodelled(c, key, cfg_item(fc, ap));
    int rm = 0;
    if (cfg_item(fc, mn)) {
        cfg_key(c, "fsdp_config", mn, k2, sizeof k2);
        if (policy == 1 && sized) {
            if ((rm = cfg_num(c, fc, "fsdp_config", mn, 0, 1e16, &minp)) < 0) return -1;
        } else {
            cfg_no_effect(c, k2);
        }
    }
    if (!sized) return 0;
    char v[32];
    snprintf(v, sizeof v, "%.0f", policy == 1 && minp > 0 ? minp : 1e16);
    if (policy == 1 && minp > 0) return cfg_set(c, "fsdp-min-params", v, k2);
    if (policy == 1 && rm) strncat(k2, " 0 (accelerate then wraps nothing)", sizeof k2 - strlen(k2) - 1);
    return cfg_set(c, "fsdp-min-params", v, policy == 1 && rm ? k2 : key);
}

int cfg_fsdp_read(Cfg *c, const cJSON *fc, const FsdpDefaults *df) {
    char n[64], key[200], k2[200];
    long long version = df->version;
    int off = 0, ckpt = 0, r;
    cfg_walk(c, fc, "fsdp_config", FSDP_KEYS);
    const char *vn = fsdp_name(fc, "version", n, sizeof n);
    if ((r = cfg_int(c, fc, "fsdp_config", vn, 1, 2, &version)) < 0) return -1;
    if (r) cfg_key(c, "fsdp_config", vn, key, sizeof key);
    else snprintf(key, sizeof key, "fsdp_config (%s's default FSDP%d)", df->who, df->version);
    if (cfg_setf(c, "fsdp", version, key) || fsdp_strategy(c, fc, version, df) || fsdp1_knobs(c, fc, version) || fsdp_wrap(c, fc, version))
        return -1;
    const char *on = fsdp_name(fc, "offload_params", n, sizeof n);
    if (!cfg_item(fc, on)) on = fsdp_name(fc, "cpu_offload", n, sizeof n);
    if ((r = cfg_bool(c, fc, "fsdp_config", on, &off)) < 0) return -1;
    if (r) cfg_key(c, "fsdp_config", on, k2, sizeof k2);
    else if (df->offload) { snprintf(k2, sizeof k2, "%s", df->legacy); off = 1; }
    if ((r || df->offload) && cfg_set(c, "offload", off ? "params" : "none", k2)) return -1;
    const char *an = fsdp_name(fc, "activation_checkpointing", n, sizeof n);
    if ((r = cfg_bool(c, fc, "fsdp_config", an, &ckpt)) < 0) return -1;
    if (r && ckpt && cfg_set(c, "act-ckpt", "full", cfg_key(c, "fsdp_config", an, key, sizeof key))) return -1;
    return 0;
}

/* The Trainer's legacy `fsdp` words ("full_shard auto_wrap", a list): the strategy and offload
   they stand for where fsdp_config does not say (training_args.py _apply_legacy_fsdp_to_config). */
int cfg_fsdp_words(Cfg *c, const cJSON *f, FsdpDefaults *df) {
    const cJSON *w = cJSON_IsArray(f) ? f->child : f;
    char key[200];
    cfg_key(c, NULL, "fsdp", key, sizeof key);
    for (; w; w = cJSON_IsArray(f) ? w->next : NULL) {
        char buf[256];
        if (!cJSON_IsString(w)) return cJSON_IsBool(w) && !cJSON_IsArray(f) ? 0 : cfg_bad(c, key, w, "true, or words among full_shard, shard_grad_op, hybrid_shard, offload, auto_wrap");
        snprintf(buf, sizeof buf, "%s", w->valuestring);
        for (char *save = NULL, *t = strtok_r(buf, " ", &save); t; t = strtok_r(NULL, " ", &save)) {
            int k = -1;
            for (int i = 0; i < 5; i++)
                if (strcasecmp(t, SHARDING[i]) == 0) k = i;
            if (k >= 0) df->strategy = k;
            else if (strcmp(t, "offload") == 0) df->offload = 1;
            else if (strcmp(t, "auto_wrap") != 0)
                return cfg_bad(c, key, w, "full_shard, shard_grad_op, hybrid_shard, hybrid_shard_zero2, no_shard, offload, auto_wrap");
        }
    }
    df->legacy = "fsdp";
    return 0;
}

/* ==== accelerate's config YAML (commands/config/config_args.py ClusterConfig, cluster.py) ==== */

static const CfgKey ACC_KEYS[] = {
    {"distributed_type", H, 0}, {"mixed_precision", H, 0}, {"num_processes", H, 0}, {"num_machines", H, 0},
    {"fsdp_config", H, 0}, {"deepspeed_config", H, 0},
    {"use_cpu", D, "false"}, {"compute_environment", D, "LOCAL_MACHINE"}, {"dynamo_config.dynamo_backend", D, "NO"},
    {"dynamo_config.*", NE, 0},
    {"debug", NE, 0}, {"machine_rank", NE, 0}, {"main_process_ip", NE, 0}, {"main_process_port", NE, 0},
    {"main_training_function", NE, 0}, {"rdzv_backend", NE, 0}, {"same_network", NE, 0}, {"gpu_ids", NE, 0},
    {"enable_cpu_affinity", NE, 0}, {"downcast_bf16", NE, 0}, {"tpu_env", NE, 0}, {"tpu_use_cluster", NE, 0},
    {"tpu_use_sudo", NE, 0}, {"tpu_name", NE, 0}, {"tpu_zone", NE, 0}, {"tpu_vm", NE, 0}, {"commands", NE, 0},
    {"command_file", NE, 0}, {"mpirun_config", NE, 0},
    {0, 0, 0},
};

/* deepspeed_config of the YAML (accelerate launch's DeepSpeed arguments, utils/dataclasses.py
   DeepSpeedPlugin); with deepspeed_config_file the others are refused by accelerate */
static const CfgKey ACC_DS_KEYS[] = {
    {"deepspeed_config.deepspeed_config_file", H, 0}, {"deepspeed_config.zero_stage", H, 0},
    {"deepspeed_config.offload_optimizer_device", H, 0}, {"deepspeed_config.offload_param_device", H, 0},
    {"deepspeed_config.gradient_accumulation_steps", H, 0},
    {"deepspeed_config.gradient_clipping", NE, 0}, {"deepspeed_config.zero3_init_flag", NE, 0},
    {"deepspeed_config.zero3_save_16bit_model", NE, 0}, {"deepspeed_config.offload_optimizer_nvme_path", NE, 0},
    {"deepspeed_config.offload_param_nvme_path", NE, 0}, {"deepspeed_config.deepspeed_multinode_launcher", NE, 0},
    {"deepspeed_config.deepspeed_hostfile", NE, 0}, {"deepspeed_config.deepspeed_exclusion_filter", NE, 0},
    {"deepspeed_config.deepspeed_inclusion_filter", NE, 0},
    {0, 0, 0},
};

int cfg_ds_named(Cfg *c, const cJSON *path, const char *key, const DsFill *fill) {
    if (!cJSON_IsString(path)) return cfg_bad(c, key, path, "a path to a DeepSpeed JSON");
    cJSON *d = cfg_load_named(c, path->valuestring, key);
    if (!d) return -1;
    char saved[sizeof c->prefix];
    snprintf(saved, sizeof saved, "%s", c->prefix);
    const char *base = strrchr(path->valuestring, '/');
    snprintf(c->prefix, sizeof c->prefix, "%s:", base ? base + 1 : path->valuestring);
    int rc = cfg_ds_read(c, d, fill);
    snprintf(c->prefix, sizeof c->prefix, "%s", saved);
    cJSON_Delete(d);
    return rc;
}

/* accelerate's DeepSpeed: deepspeed_config_file (refusing the keys accelerate refuses beside it),
   else zero_stage (default 2), the offload devices and gradient_accumulation_steps. */
static int acc_deepspeed(Cfg *c, const cJSON *dc) {
    static const char *const BESIDE[] = {"zero_stage", "offload_optimizer_device", "offload_param_device",
        "gradient_accumulation_steps", "gradient_clipping", "zero3_save_16bit_model", "offload_optimizer_nvme_path",
        "offload_param_nvme_path"};
    const cJSON *file = cfg_item(dc, "deepspeed_config_file");
    char key[200];
    cfg_walk(c, dc, "deepspeed_config", ACC_DS_KEYS);
    if (file) {
        for (size_t i = 0; i < sizeof BESIDE / sizeof BESIDE[0]; i++)
            if (cfg_item(dc, BESIDE[i]))
                return cfg_fail(c, "deepspeed_config.%s beside deepspeed_config_file: accelerate refuses it "
                                "(DeepSpeedPlugin._deepspeed_config_checks); set it in the DeepSpeed JSON", BESIDE[i]);
        /* DeepSpeedPlugin (utils/dataclasses.py): "auto" precision from mixed_precision, read next
           (acc_precision); the micro-batch from the DataLoader the script prepares (not in a file);
           the accumulation from the Accelerator's (1 unless the script says otherwise) */
        DsFill fill = {"accelerate", 0, NULL, NULL, "mixed_precision (DeepSpeedPlugin.set_mixed_precision; absent: no, fp32)", 1,
                       "accelerate's default 1 (the Accelerator's gradient_accumulation_steps)"};
        c->out->precision_auto = 1;   /* mixed_precision decides (its absence: no, fp32) */
        return cfg_ds_named(c, file, cfg_key(c, "deepspeed_config", "deepspeed_config_file", key, sizeof key), &fill);
    }
    long long stage = 2, ga;
    int r = cfg_int(c, dc, "deepspeed_config", "zero_stage", 0, 3, &stage);
    if (r < 0) return -1;
    cfg_key(c, "deepspeed_config", "zero_stage", key, sizeof key);
    Offload opt, par;
    if (ds_stage_strategy(c, stage, key, r ? "" : " (absent: accelerate's default 2)") || offload_device(c, dc, "deepspeed_config", "offload_optimizer_device", &opt) ||
        offload_device(c, dc, "deepspeed_config", "offload_param_device", &par) || offload_flag(c, stage, &opt, &par))
        return -1;
    if ((r = cfg_int(c, dc, "deepspeed_config", "gradient_accumulation_steps", 1, 1000000, &ga)) < 0) return -1;
    return r ? cfg_setf(c, "grad-accum", ga, cfg_key(c, "deepspeed_config", "gradient_accumulation_steps", key, sizeof key)) : 0;
}

/* num_processes -> --gpus, num_processes / num_machines -> --gpus-per-node; a --gpus on the
   command line re-derives the GPUs per node from the same num_machines (accelerate launch
   --num_processes N splits N over the machines). */
static int acc_gpus(Cfg *c, const cJSON *d) {
    long long np = 0, nm = 1;
    int rp = cfg_int(c, d, NULL, "num_processes", -1, 1000000, &np), rm = cfg_int(c, d, NULL, "num_machines", 1, 100000, &nm);
    char key[200], note[300];
    if (rp < 0 || rm < 0) return -1;
    if (rp && np > 0 && cfg_setf(c, "gpus", np, cfg_key(c, NULL, "num_processes", key, sizeof key))) return -1;
    if (!rm) return 0;
    if (c->known->gpus > 0 && !c->known->gpn && c->known->gpus != np) {
        if (c->known->gpus % nm)
            return cfg_fail(c, "--gpus %lld does not split over num_machines %lld (memplan's nodes are equal): give a multiple of "
                            "%lld, or --gpus-per-node", c->known->gpus, nm, nm);
        cfg_fmt(key, sizeof key, "the command line's --gpus %lld / %snum_machines %lld", c->known->gpus, c->prefix, nm);
        cfg_fmt(note, sizeof note, "--gpus-per-node re-derived from the command line's --gpus and num_machines %lld", nm);
        cfg_note(c, note);
        return cfg_setf(c, "gpus-per-node", c->known->gpus / nm, key);
    }
    if (np <= 0) return 0;
    if (np % nm) return cfg_fail(c, "num_processes %lld does not split over num_machines %lld (memplan's nodes are equal)", np, nm);
    snprintf(key, sizeof key, "%snum_processes / num_machines", c->prefix);
    return cfg_setf(c, "gpus-per-node", np / nm, key);
}

/* mixed_precision: DDP autocasts (amp-*), FSDP's MixedPrecision keeps fp32 shards (mixed-*),
   DeepSpeed's own fp16/bf16 (mixed-*; the JSON's explicit fp16/bf16 must agree); no: fp32. */
static int acc_precision(Cfg *c, const cJSON *d, int amp) {
    static const char *const MP[] = {"no", "fp16", "bf16", "fp8"};
    static const char *const AS[2][4] = {{"fp32", "mixed-fp16", "mixed-bf16", ""}, {"fp32", "amp-fp16", "amp-bf16", ""}};
    int mp = 0, r = cfg_choice(c, d, NULL, "mixed_precision", MP, 4, 0, &mp);
    char key[200];
    if (r < 0) return -1;
    cfg_key(c, NULL, "mixed_precision", key, sizeof key);
    if (mp == 3) { cfg_unmodelled(c, key, cfg_item(d, "mixed_precision")); return 0; }
    const CfgSetting *s = cfg_setting(c, "precision");   /* a DeepSpeed JSON's own fp16/bf16 stand */
    if (s && mp > 0 && !strstr(s->value, MP[mp]))
        return cfg_fail(c, "%s %s but %s says --precision %s: accelerate refuses the two "
                        "(DeepSpeedPlugin.set_mixed_precision)", key, MP[mp], s->key, s->value);
    if (s && mp > 0) { cfg_no_effect(c, key); return 0; }
    if (mp > 0) return cfg_set(c, "precision", AS[amp][mp], key);
    cfg_default(c, "precision", "fp32", r ? key : "mixed_precision (absent: accelerate's default no)");
    return 0;
}

static int acc_read(Cfg *c, const cJSON *d) {
    static const char *const DT[] = {"NO", "MULTI_GPU", "FSDP", "DEEPSPEED"};
    const cJSON *dt = cfg_item(d, "distributed_type");
    char key[200];
    int t = 0;
    cfg_walk(c, d, NULL, ACC_KEYS);
    cfg_key(c, NULL, "distributed_type", key, sizeof key);
    if (dt && !cJSON_IsString(dt)) return cfg_bad(c, key, dt, "NO, MULTI_GPU, FSDP, DEEPSPEED, or another of accelerate's");
    for (int i = 0; dt && i < 4; i++)
        if (strcmp(dt->valuestring, DT[i]) == 0) t = i;
    if (dt && strcmp(dt->valuestring, DT[t]) != 0) cfg_unmodelled(c, key, dt);   /* MULTI_CPU, XLA, MEGATRON_LM, ... */
    if (acc_gpus(c, d)) return -1;
    if (t != 2 && cfg_item(d, "fsdp_config")) cfg_no_effect(c, cfg_key(c, NULL, "fsdp_config", key, sizeof key));
    if (t != 3 && cfg_item(d, "deepspeed_config")) cfg_no_effect(c, cfg_key(c, NULL, "deepspeed_config", key, sizeof key));
    if (t == 3) {
        if (acc_deepspeed(c, cfg_item(d, "deepspeed_config")) || acc_precision(c, d, 0)) return -1;
        ds_defaults(c);
        return 0;
    }
    if (t == 2) {
        FsdpDefaults df = {1, "accelerate", -1, 0, ""};
        if (cfg_fsdp_read(c, cfg_item(d, "fsdp_config"), &df) || acc_precision(c, d, 0)) return -1;
        cfg_default(c, "offload", "none", "fsdp_config (accelerate's default: fsdp_offload_params false)");
        const CfgSetting *pr = cfg_setting(c, "precision");
        if (pr && !strncmp(pr->value, "mixed-", 6) &&   /* MixedPrecision(param_dtype, reduce_dtype) both 16-bit */
            cfg_set(c, "fsdp-reduce-dtype", pr->value + 6, "mixed_precision (accelerate's FSDP MixedPrecision reduces in the same "
                                               "16-bit dtype: utils/dataclasses.py set_mixed_precision)"))
            return -1;
        return cfg_set(c, "fsdp-grad-sync", "last", "distributed_type FSDP (Accelerator.accumulate skips the "
                                                    "reduce-scatter of non-final micro-steps: no_sync)");
    }
    if (dt && strcmp(dt->valuestring, DT[t]) == 0 && cfg_set(c, "strategy", "ddp", key)) return -1;
    return acc_precision(c, d, 1);
}

/* ==== torchtitan's job TOML (torchtitan 0.2.2 config/job_config.py; train.py, parallel_dims.py,
 *      models/llama3/infra/parallelize.py, distributed/activation_checkpoint.py) ==== */

static const CfgKey TT_KEYS[] = {
    {"training.local_batch_size", H, 0}, {"training.batch_size", H, 0}, {"training.seq_len", H, 0},
    {"training.global_batch_size", H, 0}, {"training.mixed_precision_param", H, 0}, {"training.dtype", H, 0},
    {"training.enable_cpu_offload", H, 0}, {"training.mixed_precision_reduce", H, 0},
    {"training.dataset", NE, 0}, {"training.dataset_path", NE, 0}, {"training.max_norm", NE, 0}, {"training.steps", NE, 0},
    {"training.gc_freq", NE, 0}, {"training.gc_debug", NE, 0}, {"training.dataloader", NE, 0}, {"training.seed", NE, 0},
    {"training.deterministic", NE, 0},
    {"parallelism.data_parallel_replicate_degree", H, 0}, {"parallelism.data_parallel_shard_degree", H, 0},
    {"parallelism.fsdp_reshard_after_forward", H, 0}, {"parallelism.tensor_parallel_degree", H, 0},
    {"parallelism.pipeline_parallel_degree", H, 0}, {"parallelism.context_parallel_degree", H, 0},
    {"parallelism.expert_parallel_degree", H, 0}, {"parallelism.expert_tensor_parallel_degree", H, 0},
    {"parallelism.disable_loss_parallel", H, 0}, {"parallelism.enable_async_tensor_parallel", NE, 0},
    {"parallelism.enable_compiled_autograd", D, "false"}, {"parallelism.module_fqns_per_model_part", NE, 0},
    {"parallelism.pipeline_parallel_first_stage_less_layers", H, 0}, {"parallelism.pipeline_parallel_last_stage_less_layers", H, 0},
    {"parallelism.pipeline_parallel_layers_per_stage", D, "null"}, {"parallelism.pipeline_parallel_schedule", H, 0},
    {"parallelism.pipeline_parallel_schedule_csv", D, ""}, {"parallelism.pipeline_parallel_microbatch_size", H, 0},
    {"parallelism.pipeline_parallel_expert_parallel_overlap", NE, 0}, {"parallelism.context_parallel_load_balancer", NE, 0},
    {"parallelism.context_parallel_rotate_method", D, "allgather"}, {"parallelism.expert_parallel_comm_backend", D, "standard"},
    {"activation_checkpoint.mode", H, 0}, {"activation_checkpoint.selective_ac_option", H, 0},
    {"activation_checkpoint.per_op_sac_force_recompute_mm_shapes_by_fqns", NE, 0}, {"activation_checkpoint.early_stop", D, "false"},
    {"activation_checkpoint.memory_budget", NE, 0}, {"activation_checkpoint.visualize_memory_budget_pareto", NE, 0},
    {"activation_checkpoint.preserve_rng_state", NE, 0}, {"activation_checkpoint.determinism_check", NE, 0},
    {"activation_checkpoint.debug", NE, 0},
    {"optimizer.name", H, 0}, {"optimizer.implementation", D, "foreach"}, {"optimizer.early_step_in_backward", D, "false"},
    {"optimizer.lr", NE, 0}, {"optimizer.beta1", NE, 0}, {"optimizer.beta2", NE, 0}, {"optimizer.eps", NE, 0},
    {"optimizer.weight_decay", NE, 0},
    {"compile.enable", D, "false"}, {"compile.components", NE, 0}, {"compile.backend", NE, 0},
    {"fault_tolerance.enable", D, "false"}, {"fault_tolerance.process_group", NE, 0},
    {"fault_tolerance.process_group_timeout_ms", NE, 0}, {"fault_tolerance.replica_id", NE, 0},
    {"fault_tolerance.group_size", NE, 0}, {"fault_tolerance.min_replica_size", NE, 0},
    {"fault_tolerance.semi_sync_method", NE, 0},
    {"model.name", H, 0}, {"model.flavor", H, 0}, {"model.hf_assets_path", NE, 0}, {"model.tokenizer_path", NE, 0},
    {"model.print_after_conversion", NE, 0},
    {"job", NE, 0}, {"profiling", NE, 0}, {"metrics", NE, 0}, {"lr_scheduler", NE, 0}, {"checkpoint", NE, 0},
    {"comm", NE, 0}, {"memory_estimation", NE, 0}, {"experimental", NE, 0}, {"validation", NE, 0}, {"debug", NE, 0},
    {0, 0, 0},
};

typedef struct {
    long long rep, shard, tp, pp, cp, ep, etp;
} Degrees;

/* [parallelism]: the degrees (data_parallel_shard_degree -1 takes the GPUs the others leave,
   parallel_dims.py _validate); tensor and pipeline parallel onto --tp/--sp and --pp (a --tp or --pp
   on the command line replaces the file's degree, and what the file derived from it follows:
   SequenceParallel norms with tp > 1); context and expert parallelism are named. */
static int tt_degrees(Cfg *c, const cJSON *p, Degrees *g) {
    static const struct { const char *name; size_t off; } K[] = {
        {"tensor_parallel_degree", offsetof(Degrees, tp)}, {"pipeline_parallel_degree", offsetof(Degrees, pp)},
        {"context_parallel_degree", offsetof(Degrees, cp)}, {"expert_parallel_degree", offsetof(Degrees, ep)},
        {"expert_tensor_parallel_degree", offsetof(Degrees, etp)}, {"data_parallel_replicate_degree", offsetof(Degrees, rep)},
    };
    *g = (Degrees){1, -1, 1, 1, 1, 1, 1};
    char key[200], note[300];
    for (size_t i = 0; i < sizeof K / sizeof K[0]; i++) {
        long long *v = (long long *)((char *)g + K[i].off);
        if (cfg_int(c, p, "parallelism", K[i].name, 1, 100000, v) < 0) return -1;
        cfg_key(c, "parallelism", K[i].name, key, sizeof key);
        if (i == 0) {   /* tensor parallel: torchtitan's plan shards the norms too (SequenceParallel) */
            if (*v > 1 && cfg_setf(c, "tp", *v, key)) return -1;
            if (c->known->tp > 0) {
                if (*v != c->known->tp) {
                    cfg_fmt(note, sizeof note, "tensor parallel from the command line's --tp %d%s", c->known->tp,
                            c->known->tp > 1 ? " with torchtitan's SequenceParallel norms (--sp on)" : ": no --sp");
                    cfg_note(c, note);
                }
                *v = c->known->tp;
            }
            if (*v > 1) {
                if (cfg_set(c, "sp", "on", "torchtitan's TP plan (SequenceParallel norms)")) return -1;
                /* loss parallel, torchtitan's default (apply_tp: the head's output Shard(-1) unless
                   disable_loss_parallel; train.py's train_context enters loss_parallel()) */
                int off = 0, r = cfg_bool(c, p, "parallelism", "disable_loss_parallel", &off);
                if (r < 0) return -1;
                char k2[200];
                cfg_key(c, "parallelism", "disable_loss_parallel", k2, sizeof k2);
                if (!r) strncat(k2, " (absent: false)", sizeof k2 - strlen(k2) - 1);
                if (cfg_set(c, "loss-parallel", off ? "off" : "on", k2)) return -1;
            }
        } else if (i == 1) {   /* pipeline stages: --pp (torch.distributed.pipelining, as memplan plans it) */
            if (*v > 1 && cfg_setf(c, "pp", *v, key)) return -1;
            if (c->known->pp > 0) *v = c->known->pp;
        } else if (*v > 1 && (i == 2 || i == 3)) {
            /* context and expert parallel: --cp, --ep (torchtitan's dp_shard_cp mesh and its ep mesh
               borrowed from dp_shard x cp: parallel_dims.py), planned with FSDP2 */
            if (cfg_setf(c, i == 2 ? "cp" : "ep", *v, key)) return -1;
        } else if (*v > 1 && i < 4)
            cfg_unmodelled(c, key, cfg_item(p, K[i].name));
    }
    /* expert tensor parallel (parallel_dims.py _validate: with ep > 1, etp is 1 or tp): with ep 1
       the experts split over tp whatever etp says (llama4 parallelize.py apply_moe_ep_tp:
       TensorParallel on the tp mesh); with ep > 1, etp = tp is ExpertTensorParallel (the ep ranks
       drawn from dp x cp, as --ep with --tp plans it), etp 1 lends the tp ranks to ep
       (ReordererSequenceParallel), not planned */
    if (g->ep > 1 && g->etp != 1 && g->etp != g->tp)
        return cfg_fail(c, "parallelism.expert_tensor_parallel_degree %lld: with expert_parallel_degree %lld torchtitan "
                        "takes 1 or the tensor-parallel degree %lld (parallel_dims.py)", g->etp, g->ep, g->tp);
    if (g->ep > 1 && g->tp > 1 && g->etp == 1)
        return cfg_fail(c, "parallelism.expert_tensor_parallel_degree 1 with tensor_parallel_degree %lld and "
                        "expert_parallel_degree %lld: the expert-parallel ranks borrow the tensor-parallel ones "
                        "(torchtitan's ReordererSequenceParallel), which memplan does not plan; valid: %lld (the "
                        "experts split over tp too)", g->tp, g->ep, g->tp);
    const cJSON *sv = cfg_item(p, "data_parallel_shard_degree");
    if (sv && cJSON_IsNumber(sv) && sv->valuedouble == -1) g->shard = -1;
    else if (cfg_int(c, p, "parallelism", "data_parallel_shard_degree", 1, 100000, &g->shard) < 0) return -1;
    long long rest = g->rep * g->tp * g->pp * g->cp;
    long long n = c->known->gpus;
    if (g->shard > 0) {
        if (n && n != rest * g->shard)
            return cfg_fail(c, "--gpus %lld is not the product of the degrees, %lld (replicate x shard x tensor x pipeline x context): "
                            "torchtitan refuses a world size that differs (parallel_dims.py); give --gpus %lld, or set "
                            "data_parallel_shard_degree -1", n, rest * g->shard, rest * g->shard);
        snprintf(key, sizeof key, "%sparallelism: the product of the degrees", c->prefix);
        return cfg_setf(c, "gpus", rest * g->shard, key);
    }
    if (!n)
        return cfg_fail(c, "parallelism.data_parallel_shard_degree %s takes the GPUs the other degrees leave, and the "
                        "file does not say how many there are (torchrun's --nproc_per_node x nodes): give --gpus",
                        sv ? "-1" : "(absent: torchtitan's default -1)");
    if (n % rest)
        return cfg_fail(c, "--gpus %lld is not a multiple of the other degrees' product %lld (replicate x tensor x pipeline "
                        "x context): torchtitan refuses it (parallel_dims.py)", n, rest);
    g->shard = n / rest;
    return 0;
}

/* FSDP2 (fully_shard) when the shard (or context) degree is above 1: HSDP with replicas, FULL_SHARD
   or SHARD_GRAD_OP by fsdp_reshard_after_forward ("default": reshard unless pipelining); else
   DDP (torch's replicate) or one GPU. */
static int tt_strategy(Cfg *c, const cJSON *p, const Degrees *g, int *fsdp) {
    static const char *const POL[] = {"default", "always", "never"};
    int pol = 0, r = cfg_choice(c, p, "parallelism", "fsdp_reshard_after_forward", POL, 3, 0, &pol);
    char key[200], k2[200];
    if (r < 0) return -1;
    *fsdp = g->shard > 1 || g->cp > 1;
    cfg_key(c, "parallelism", "data_parallel_shard_degree", key, sizeof key);
    if (!*fsdp) {
        if (r) cfg_no_effect(c, cfg_key(c, "parallelism", "fsdp_reshard_after_forward", k2, sizeof k2));
        return cfg_set(c, "strategy", "ddp", g->rep > 1 ? "parallelism.data_parallel_replicate_degree (DDP)" : "one data-parallel rank");
    }
    int reshard = pol == 1 || (pol == 0 && g->pp == 1);
    if (cfg_set(c, "fsdp", "2", "torchtitan shards with FSDP2 (fully_shard)")) return -1;
    if (g->rep > 1) {
        if (!reshard) cfg_unmodelled(c, cfg_key(c, "parallelism", "fsdp_reshard_after_forward", k2, sizeof k2), cfg_item(p, "fsdp_reshard_after_forward"));
        cfg_fmt(k2, sizeof k2, "%s (HSDP: memplan shards inside a node)", key);
        return cfg_setf(c, "gpus-per-node", g->shard, k2) ? -1 : cfg_set(c, "strategy", "fsdp-hybrid", "parallelism: data_parallel_replicate_degree > 1 and data_parallel_shard_degree > 1 (HSDP)");
    }
    if (r) cfg_key(c, "parallelism", "fsdp_reshard_after_forward", key, sizeof key);
    else if (g->pp > 1)   /* parallelize.py apply_fsdp: "default" does not reshard under pipeline stages */
        snprintf(key, sizeof key, "%sparallelism.fsdp_reshard_after_forward (torchtitan's default under pipeline stages: never)",
                 c->prefix);
    return cfg_set(c, "strategy", reshard ? "fsdp-full" : "fsdp-grad-op", key);
}

/* training.dtype bfloat16 is pure bf16; else mixed_precision_param: FSDP's MixedPrecisionPolicy
   (mixed-bf16) or, under DDP or one GPU, torch.autocast (amp-bf16; utils.py maybe_enable_amp). */
static int tt_precision(Cfg *c, const cJSON *t, const Degrees *g, int fsdp) {
    static const char *const DT[] = {"float32", "bfloat16"};
    int dt = 0, mp = 1, rd = cfg_choice(c, t, "training", "dtype", DT, 2, 0, &dt);
    int rm = cfg_choice(c, t, "training", "mixed_precision_param", DT, 2, 0, &mp);
    char key[200];
    if (rd < 0 || rm < 0) return -1;
    if (dt == 1) return cfg_set(c, "precision", "bf16", cfg_key(c, "training", "dtype", key, sizeof key));
    if (rm) cfg_key(c, "training", "mixed_precision_param", key, sizeof key);
    else snprintf(key, sizeof key, "training.mixed_precision_param (torchtitan's default bfloat16)");
    const char *p = mp == 0 || (!fsdp && (g->tp > 1 || g->pp > 1)) ? "fp32" : fsdp ? "mixed-bf16" : "amp-bf16";
    int rr = 0, r2 = cfg_choice(c, t, "training", "mixed_precision_reduce", DT, 2, 0, &rr);
    char k2[200];
    if (r2 < 0) return -1;
    if (r2 && rr == 1 && fsdp && !strcmp(p, "mixed-bf16") &&   /* MixedPrecisionPolicy(reduce_dtype=bfloat16) */
        cfg_set(c, "fsdp-reduce-dtype", "bf16", cfg_key(c, "training", "mixed_precision_reduce", k2, sizeof k2)))
        return -1;
    if (r2 && !(rr == 1 && fsdp && !strcmp(p, "mixed-bf16"))) cfg_no_effect(c, cfg_key(c, "training", "mixed_precision_reduce", k2, sizeof k2));
    return cfg_set(c, "precision", p, key);
}

/* [activation_checkpoint]: none, full, selective with an integer N (every N-th block; 0 all of
   them) or "op" (per-op SAC: --act-ckpt op), memory_budget (not modelled). Default: selective "2". */
static int tt_ckpt(Cfg *c, const cJSON *a) {
    static const char *const MODE[] = {"selective", "full", "memory_budget", "none"};
    int mode = 0, rm = cfg_choice(c, a, "activation_checkpoint", "mode", MODE, 4, 0, &mode);
    const cJSON *opt = cfg_item(a, "selective_ac_option");
    char key[200], v[32], text[32];
    if (rm < 0) return -1;
    if (rm) cfg_key(c, "activation_checkpoint", "mode", key, sizeof key);
    else snprintf(key, sizeof key, "activation_checkpoint.mode (torchtitan's default selective, option \"2\")");
    if (mode == 3 || mode == 1) return cfg_set(c, "act-ckpt", MODE[mode], key);
    if (mode == 2) { cfg_unmodelled(c, key, cfg_item(a, "mode")); return 0; }
    cfg_text(opt, text, sizeof text);
    const char *o = opt ? text : "2";
    if (strcmp(o, "op") == 0)
        return cfg_set(c, "act-ckpt", "op", cfg_key(c, "activation_checkpoint", "selective_ac_option", key, sizeof key));
    char *end;
    long n = strtol(o, &end, 10);
    if (*end || n < 0 || n > 100000 || !*o)
        return cfg_bad(c, cfg_key(c, "activation_checkpoint", "selective_ac_option", key, sizeof key), opt, "\"op\" or a whole number");
    if (opt) cfg_key(c, "activation_checkpoint", "selective_ac_option", key, sizeof key);
    snprintf(v, sizeof v, "every:%ld", n);
    return cfg_set(c, "act-ckpt", n == 0 ? "full" : v, key);
}

/* training.global_batch_size -> accumulation = global / (local x data-parallel degree) (train.py);
   under pipeline stages the local batch is split into micro-batches of
   pipeline_parallel_microbatch_size (--batch), local / that of them per schedule step
   (--microbatches), and accumulation steps each run the schedule again: planned as one schedule
   of all their micro-batches (one bubble instead of one per step, named). */
static int tt_accum(Cfg *c, const cJSON *t, const cJSON *p, const Degrees *g) {
    long long gb = -1, dp = g->rep * g->shard, accum = 1;
    char ms[240], key[200], k2[600], note[400];
    const cJSON *v = cfg_item(t, "global_batch_size");
    if (v && !(cJSON_IsNumber(v) && v->valuedouble < 0) && cfg_int(c, t, "training", "global_batch_size", 1, 1000000000, &gb) < 0)
        return -1;
    long long m = effective(c, "batch", c->known->batch, ms, sizeof ms);
    cfg_key(c, "training", "global_batch_size", key, sizeof key);
    if (gb > 0 && gb % (m * dp))
        return cfg_fail(c, "%s %lld is not a multiple of %s x data-parallel degree %lld: torchtitan refuses it (train.py)",
                        key, gb, ms, dp);
    if (gb > 0) accum = gb / (m * dp);
    if (g->pp > 1) {
        long long mbs = 1;
        if (cfg_int(c, p, "parallelism", "pipeline_parallel_microbatch_size", 1, 1000000, &mbs) < 0) return -1;
        if (m % mbs)
            return cfg_fail(c, "%s is not a multiple of parallelism.pipeline_parallel_microbatch_size %lld: torchtitan refuses it", ms, mbs);
        if (c->known->pp > 0 && !cfg_setting(c, "pp"))
            cfg_note(c, "pipeline stages from the command line's --pp: the local batch split into micro-batches of "
                        "parallelism.pipeline_parallel_microbatch_size");
        CfgSetting *bs = (CfgSetting *)cfg_setting(c, "batch");
        if (bs && !c->known->batch) {   /* the local batch becomes --microbatches; a pipeline micro-batch is --batch */
            snprintf(bs->key, sizeof bs->key, "parallelism.pipeline_parallel_microbatch_size (torchtitan's pipeline micro-batch%s)",
                     cfg_item(p, "pipeline_parallel_microbatch_size") ? "" : ", default 1");
            snprintf(bs->value, sizeof bs->value, "%lld", mbs);
        }
        if (accum > 1) {
            cfg_fmt(note, sizeof note, "%lld accumulation steps of the pipeline schedule planned as one schedule of all their "
                    "micro-batches (one bubble, not %lld)", accum, accum);
            cfg_note(c, note);
        }
        snprintf(k2, sizeof k2, "%s / parallelism.pipeline_parallel_microbatch_size %lld%s", ms, mbs,
                 accum > 1 ? " x the accumulation steps" : "");
        return cfg_setf(c, "microbatches", m / mbs * accum, k2);
    }
    if (gb <= 0) return cfg_set(c, "grad-accum", "1", "training.global_batch_size -1 (torchtitan: local batch x data-parallel degree)");
    if (g->tp == 1 && g->cp == 1) {
        c->out->global_batch = gb;
        snprintf(c->out->global_key, sizeof c->out->global_key, "%s", key);
    }
    snprintf(k2, sizeof k2, "%s / (%s x data-parallel degree %lld)", key, ms, dp);
    return cfg_setf(c, "grad-accum", accum, k2);
}

/* torchtitan's Llama 3 flavors (models/llama3/__init__.py llama3_args; FeedForward's hidden size
   multiple_of x ceil(ffn_dim_multiplier x int(8 dim / 3) / multiple_of); the vocabulary the Llama
   3.1 tokenizer's 128,256 unless the flavor fixes it). */
static const struct { const char *flavor; int dim, layers, heads, kv, ffn, vocab; } TT_LLAMA3[] = {
    {"debugmodel", 256, 6, 16, 16, 768, 2048}, {"debugmodel_flex_attn", 256, 6, 16, 16, 768, 2048},
    {"debugmodel_varlen_attn", 256, 6, 16, 16, 768, 2048},
    {"8B", 4096, 32, 32, 8, 14336, 128256}, {"8B_flex", 4096, 32, 32, 8, 14336, 128256},
    {"8B_varlen", 4096, 32, 32, 8, 14336, 128256},
    {"70B", 8192, 80, 64, 8, 28672, 128256}, {"405B", 16384, 126, 128, 8, 53248, 128256},
};

/* [model]: name and flavor. A Llama 3 flavor is checked against --model (blocks and hidden size)
   once it is loaded, or, without --model, is the model (its shapes as a Llama config.json: the
   same parameters as torchtitan's Transformer). Other names are noted as not checked. */
static int tt_model(Cfg *c, const cJSON *d, long long seq) {
    const cJSON *mo = cfg_item(d, "model"), *name = cfg_item(mo, "name"), *fl = cfg_item(mo, "flavor");
    char t1[64], t2[64];
    if (!name && !fl) return 0;
    cfg_fmt(c->out->model_hint, sizeof c->out->model_hint, "torchtitan's %s flavor %s", name ? cfg_text(name, t1, sizeof t1) : "llama3",
            fl ? cfg_text(fl, t2, sizeof t2) : "debugmodel");
    int llama = !name || (cJSON_IsString(name) && strcmp(name->valuestring, "llama3") == 0);
    for (size_t i = 0; llama && fl && cJSON_IsString(fl) && i < sizeof TT_LLAMA3 / sizeof TT_LLAMA3[0]; i++) {
        if (strcmp(fl->valuestring, TT_LLAMA3[i].flavor) != 0) continue;
        c->out->flavor_layers = TT_LLAMA3[i].layers;
        c->out->flavor_hidden = TT_LLAMA3[i].dim;
        cfg_fmt(c->out->flavor_key, sizeof c->out->flavor_key, "%smodel.flavor %s (torchtitan's Llama 3 %s: %d blocks, hidden %d)",
                c->prefix, fl->valuestring, fl->valuestring, TT_LLAMA3[i].layers, TT_LLAMA3[i].dim);
        free(c->out->model_json);
        c->out->model_json = malloc(1024);
        if (!c->out->model_json) return cfg_fail(c, "out of memory");
        snprintf(c->out->model_json, 1024,
                 "{\"model_type\": \"llama\", \"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": %d, "
                 "\"num_hidden_layers\": %d, \"num_attention_heads\": %d, \"num_key_value_heads\": %d, "
                 "\"intermediate_size\": %d, \"vocab_size\": %d, \"max_position_embeddings\": %lld, \"rms_norm_eps\": 1e-05, "
                 "\"rope_theta\": 500000.0, \"tie_word_embeddings\": false, \"hidden_act\": \"silu\", "
                 "\"attention_dropout\": 0.0, \"torch_dtype\": \"bfloat16\"}",
                 TT_LLAMA3[i].dim, TT_LLAMA3[i].layers, TT_LLAMA3[i].heads, TT_LLAMA3[i].kv, TT_LLAMA3[i].ffn,
                 TT_LLAMA3[i].vocab, seq > 131072 ? seq : 131072LL);
        snprintf(c->out->model_label, sizeof c->out->model_label, "llama3-%s", fl->valuestring);
        return 0;
    }
    cfg_note(c, "model.name / model.flavor: not one of torchtitan's Llama 3 flavors memplan knows, so not checked against --model");
    return 0;
}

/* The pipeline under pp > 1: 1F1B (torchtitan's default), GPipe and Interleaved1F1B are memplan's
   (the others are named); the split as torchtitan makes it (distributed/pipeline_parallel.py
   pipeline_llm, generate_llm_fqn_per_model_part): the embedding counted as
   pipeline_parallel_first_stage_less_layers blocks, the norm and head as ..._last_stage_less_layers
   (config/job_config.py: 1 and 1 by default), 2 stages per rank for a multi-stage schedule when
   pipeline_parallel_layers_per_stage is null (its only modelled value). */
static int tt_pipeline(Cfg *c, const cJSON *p, const cJSON *sched) {
    char key[200];
    cfg_key(c, "parallelism", "pipeline_parallel_schedule", key, sizeof key);
    const char *sn = sched && cJSON_IsString(sched) ? sched->valuestring : "1F1B";
    const char *why = sched ? key : "parallelism.pipeline_parallel_schedule (torchtitan's default 1F1B)";
    if (strcasecmp(sn, "Interleaved1F1B") == 0) {
        if (cfg_set(c, "pp-schedule", "interleaved", why) ||
            cfg_setf(c, "pp-virtual", 2, "torchtitan's 2 stages per rank for a multi-stage schedule "
                                        "(pipeline_parallel_layers_per_stage null)"))
            return -1;
    } else if (strcasecmp(sn, "1F1B") == 0 || strcasecmp(sn, "GPipe") == 0) {
        if (cfg_set(c, "pp-schedule", strcasecmp(sn, "GPipe") == 0 ? "gpipe" : "1f1b", why)) return -1;
    } else cfg_unmodelled(c, key, sched);
    static const struct { const char *name, *flag; } LESS[2] = {
        {"pipeline_parallel_first_stage_less_layers", "pp-less-first"},
        {"pipeline_parallel_last_stage_less_layers", "pp-less-last"}};
    for (int k = 0; k < 2; k++) {
        long long v = 1;
        int r = cfg_int(c, p, "parallelism", LESS[k].name, 0, 1024, &v);
        if (r < 0) return -1;
        char dflt[160];
        snprintf(dflt, sizeof dflt, "parallelism.%s (torchtitan's default 1)", LESS[k].name);
        if (cfg_setf(c, LESS[k].flag, v, r ? cfg_key(c, "parallelism", LESS[k].name, key, sizeof key) : dflt)) return -1;
    }
    /* train.py: pp_schedule.step(..., return_outputs=False): the last stage keeps no outputs */
    return cfg_set(c, "pp-return-outputs", "off", "torchtitan's train.py calls pp_schedule.step(return_outputs=False)");
}

static int tt_read(Cfg *c, const cJSON *d) {
    const cJSON *t = cfg_item(d, "training"), *p = cfg_item(d, "parallelism");
    long long b = 8, seq = 2048;
    char key[200];
    int fsdp, off = 0, r;
    Degrees g;
    static const char *const SECTIONS[] = {"training", "parallelism", "activation_checkpoint", "model", "optimizer"};
    cfg_walk(c, d, NULL, TT_KEYS);
    for (size_t i = 0; i < sizeof SECTIONS / sizeof SECTIONS[0]; i++)
        if (cfg_section(c, d, NULL, SECTIONS[i])) return -1;
    const char *bn = cfg_item(t, "local_batch_size") || !cfg_item(t, "batch_size") ? "local_batch_size" : "batch_size";
    if ((r = cfg_int(c, t, "training", bn, 1, 1000000, &b)) < 0) return -1;
    if (cfg_setf(c, "batch", b, r ? cfg_key(c, "training", bn, key, sizeof key) : "training.local_batch_size (torchtitan's default 8)"))
        return -1;
    if ((r = cfg_int(c, t, "training", "seq_len", 1, 10000000, &seq)) < 0) return -1;
    if (cfg_setf(c, "seq", seq, r ? cfg_key(c, "training", "seq_len", key, sizeof key) : "training.seq_len (torchtitan's default 2048)"))
        return -1;
    const cJSON *sched = cfg_item(p, "pipeline_parallel_schedule");
    if (tt_degrees(c, p, &g) || tt_strategy(c, p, &g, &fsdp) || tt_precision(c, t, &g, fsdp) ||
        tt_ckpt(c, cfg_item(d, "activation_checkpoint")) || tt_accum(c, t, p, &g) || tt_model(c, d, seq))
        return -1;
    if (g.pp > 1 && tt_pipeline(c, p, sched)) return -1;
    if (g.pp <= 1 && sched) cfg_no_effect(c, cfg_key(c, "parallelism", "pipeline_parallel_schedule", key, sizeof key));
    if ((r = cfg_bool(c, t, "training", "enable_cpu_offload", &off)) < 0) return -1;
    cfg_key(c, "training", "enable_cpu_offload", key, sizeof key);
    if (r && off && !fsdp) cfg_no_effect(c, key);   /* CPUOffloadPolicy is fully_shard's */
    else if (r && cfg_set(c, "offload", off ? "params" : "none", key)) return -1;
    cfg_default(c, "offload", "none", "training.enable_cpu_offload (torchtitan's default false)");
    const cJSON *on = cfg_item(cfg_item(d, "optimizer"), "name");
    cfg_key(c, "optimizer", "name", key, sizeof key);
    if (on && cJSON_IsString(on) && strcmp(on->valuestring, "AdamW") == 0) return cfg_set(c, "optimizer", "adamw", key);
    if (on && cJSON_IsString(on) && strcmp(on->valuestring, "Adam") == 0) return cfg_set(c, "optimizer", "adam", key);
    if (on) cfg_unmodelled(c, key, on);
    cfg_default(c, "optimizer", "adamw", "optimizer.name (torchtitan's default AdamW)");
    return 0;
}

/* ==== recognising a kind ==== */

static int has_any(const cJSON *d, const char *const *keys) {
    for (; *keys; keys++)
        if (cJSON_GetObjectItemCaseSensitive(d, *keys)) return 1;
    return 0;
}

int cfg_kind_detect(const cJSON *doc, DocFormat fmt) {
    static const char *const ACC[] = {"distributed_type", "compute_environment", NULL};
    static const char *const DS[] = {"train_batch_size", "train_micro_batch_size_per_gpu", "zero_optimization", "fp16",
                                     "bf16", "torch_autocast", "optimizer", "gradient_accumulation_steps", NULL};
    static const char *const TT[] = {"training", "parallelism", "activation_checkpoint", "job", NULL};
    if (fmt == DOC_TOML) return has_any(doc, TT) ? CFG_TORCHTITAN : -1;
    if (has_any(doc, ACC)) return CFG_ACCELERATE;
    int r = cfg_recipe_detect(doc);
    if (r >= 0) return r;
    return fmt == DOC_JSON && has_any(doc, DS) ? CFG_DEEPSPEED : -1;
}

DocFormat cfg_kind_format(CfgKind k) {
    return k == CFG_TORCHTITAN ? DOC_TOML : k == CFG_DEEPSPEED ? DOC_JSON : DOC_YAML;
}

/* DeepSpeed reads its JSON with hjson and dict_raise_error_on_duplicate_keys (runtime/config.py);
   LLaMA-Factory loads its YAML with OmegaConf, whose loader refuses a duplicate key; TOML forbids
   them (tomlc17 refuses); json.load, PyYAML's safe_load (accelerate, TRL, axolotl) and
   HfArgumentParser keep the last. */
const char *cfg_kind_dup_rule(CfgKind k) {
    return k == CFG_TORCHTITAN ? "TOML refuses them" : "as json.load and PyYAML's safe_load keep it";
}

int cfg_kind_dups(cJSON *doc, CfgKind k, cJSON *found, const char *path, char *err, size_t errlen) {
    int refuse = k == CFG_DEEPSPEED || k == CFG_LLAMA_FACTORY;
    if (!cfg_doc_dups(doc, refuse, found)) return 0;
    snprintf(err, errlen, "%s: key %s appears twice: %s refuses duplicate keys (%s)", path,
             cJSON_GetArrayItem(found, 0)->valuestring, k == CFG_DEEPSPEED ? "DeepSpeed" : "LLaMA-Factory",
             k == CFG_DEEPSPEED ? "runtime/config.py dict_raise_error_on_duplicate_keys" : "its OmegaConf.load");
    return -1;
}

int cfg_kind_read(Cfg *c, CfgKind k, const cJSON *doc) {
    static const DsFill ALONE = {0};
    switch (k) {
    case CFG_DEEPSPEED: return cfg_ds_read(c, doc, &ALONE);
    case CFG_ACCELERATE: return acc_read(c, doc);
    case CFG_TORCHTITAN: return tt_read(c, doc);
    case CFG_HF_TRAINER: return cfg_hf_read(c, doc);
    case CFG_TRL: return cfg_trl_read(c, doc);
    case CFG_LLAMA_FACTORY: return cfg_lf_read(c, doc);
    case CFG_AXOLOTL: return cfg_axolotl_read(c, doc);
    default: return cfg_fail(c, "unknown kind");
    }
}
