/* plan_dim_ft.c — fine-tuning as one dimension (plan_dim_ft.h): LoRA, frozen parameters and a
 * quantized base; the check, the setup transform, the header and JSON lines and the Python lines
 * --emit prints. Sources: peft/tuners/lora/layer.py (LoraLayer.update_layer:
 * lora_A = nn.Linear(in_features, r, bias=False), lora_B = nn.Linear(r, out_features,
 * bias=False), lora_dropout = nn.Dropout(p) or nn.Identity(); Linear.forward: result =
 * base_layer(x) + lora_B(lora_A(dropout(x))) * scaling), peft/tuners/lora/model.py (every
 * parameter whose name lacks "lora_" gets requires_grad=False under bias="none"),
 * peft/tuners/tuners_utils.py (_maybe_include_all_linear_layers: every nn.Linear / Conv1D but
 * the output embeddings), peft/utils/constants.py (default targets per model type). */
#include "plan_dim_ft.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan_emit.h"
#include "plan_util.h"

int plan_finetune_on(const FinetuneSpec *f) {
    return f->rank > 0 || f->freeze != FREEZE_NONE;
}

int plan_freeze_parse(const char *s, FinetuneSpec *f) {
    if (strcmp(s, "none") == 0) { f->freeze = FREEZE_NONE; f->freeze_n = 0; return 0; }
    if (strcmp(s, "embeddings") == 0) { f->freeze = FREEZE_EMBEDDINGS; f->freeze_n = 0; return 0; }
    const char *pre = "all-but-last:";
    size_t k = strlen(pre);
    long long n;
    if (strncmp(s, pre, k) == 0 && plan_parse_int(s + k, 1, 100000, &n) == 0) {
        f->freeze = FREEZE_ALL_BUT_LAST;
        f->freeze_n = (int)n;
        return 0;
    }
    return -1;
}

const char *plan_freeze_label(const FinetuneSpec *f, char *buf, size_t len) {
    if (f->freeze == FREEZE_ALL_BUT_LAST) snprintf(buf, len, "all-but-last:%d", f->freeze_n);
    else snprintf(buf, len, "%s", f->freeze == FREEZE_EMBEDDINGS ? "embeddings" : "none");
    return buf;
}

static const char *const QUANT_NAMES[QUANT_COUNT] = {"none", "bf16", "int8", "nf4"};

int plan_quant_by_name(const char *s) {
    for (int k = 0; k < QUANT_COUNT; k++)
        if (strcmp(s, QUANT_NAMES[k]) == 0) return k;
    return -1;
}

const char *plan_quant_name(QuantKind q) {
    return q >= 0 && q < QUANT_COUNT ? QUANT_NAMES[q] : "?";
}

/* peft/utils/constants.py TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING (peft 0.21.2), the
   families whose projections memplan names (plan_model.c t_named) */
static const struct { const char *family, *targets; } DEFAULTS[] = {
    {"gpt2", "c_attn"}, {"llama", "q_proj,v_proj"}, {"mistral", "q_proj,v_proj"},
    {"qwen2", "q_proj,v_proj"}, {"qwen3", "q_proj,v_proj"}, {"gemma", "q_proj,v_proj"},
    {"gemma2", "q_proj,v_proj"}, {"gemma3_text", "q_proj,v_proj"}, {"olmo2", "q_proj,v_proj"},
    {"granite", "q_proj,v_proj"},
};

const char *plan_lora_default_targets(const char *family) {
    for (size_t i = 0; i < sizeof DEFAULTS / sizeof DEFAULTS[0]; i++)
        if (strcmp(DEFAULTS[i].family, family) == 0) return DEFAULTS[i].targets;
    return "";
}

const char *plan_lora_targets(const ModelSpec *m, const FinetuneSpec *f, char *buf, size_t len) {
    snprintf(buf, len, "%s", f->targets[0] ? f->targets : plan_lora_default_targets(m->family));
    return buf;
}

/* 1 when module mod is one of the targets (a comma list; all-linear: every projection but the
   output head). PEFT matches a name against the end of the module's path, so "c_proj" is both
   of GPT-2's. */
static int targeted(const char *targets, int mod) {
    int id = PLAN_MOD_ID(mod);
    if (id == PLAN_MOD_NONE) return 0;
    if (strcmp(targets, "all-linear") == 0) return id != PLAN_MOD_LM_HEAD;
    const char *name = plan_module_name(mod);
    size_t n = strlen(name);
    for (const char *p = targets; *p;) {
        const char *e = strchr(p, ',');
        size_t k = e ? (size_t)(e - p) : strlen(p);
        if (k == n && strncmp(p, name, n) == 0) return 1;
        p += k + (e ? 1 : 0);
    }
    return 0;
}

int plan_lora_adapts(const ModelSpec *m, const FinetuneSpec *f, int mod) {
    return f->rank > 0 && targeted(f->targets[0] ? f->targets : plan_lora_default_targets(m->family), mod);
}

/* The names of the projections m has, for messages. */
static void model_modules(const ModelSpec *m, char *buf, size_t len) {
    int seen[PLAN_MOD_COUNT] = {0};
    size_t n = 0;
    buf[0] = 0;
    for (int i = 0; i < m->n_layers; i++)
        for (int k = 0; k < m->layers[i].n_tensors; k++) {
            int id = PLAN_MOD_ID(m->layers[i].tensor_mod[k]);
            if (id == PLAN_MOD_NONE || id == PLAN_MOD_LM_HEAD || seen[id]) continue;   /* the head: named, never a default */
            const char *nm = plan_module_name(id);
            int dup = 0;
            for (int j = 1; j < PLAN_MOD_COUNT; j++) dup |= seen[j] && strcmp(plan_module_name(j), nm) == 0;
            seen[id] = 1;
            if (!dup && n < len) n += (size_t)snprintf(buf + n, len - n, "%s%s", n ? ", " : "", nm);
        }
}

/* Checks each comma-separated target against the model's module names; 0, or -1 with msg. */
static int check_targets(const ModelSpec *m, const char *targets, char *msg, size_t len) {
    char have[256];
    model_modules(m, have, sizeof have);
    if (!have[0]) {
        snprintf(msg, len, "--lora: memplan does not know the projection names of %s (family '%s'): LoRA is planned for "
                 "GPT-2 and LLaMA-layout models (llama, mistral, qwen2, qwen3, gemma, ...)", m->name,
                 m->family[0] ? m->family : "unknown");
        return -1;
    }
    if (!targets[0]) {
        snprintf(msg, len, "--lora: PEFT has no default target modules for model type '%s': give --lora-targets "
                 "(valid: all-linear or some of %s)", m->family[0] ? m->family : "unknown", have);
        return -1;
    }
    if (strcmp(targets, "all-linear") == 0) return 0;
    int head = 0;   /* an untied head: PEFT adapts it when named outright */
    for (int i = 0; i < m->n_layers; i++)
        for (int k = 0; k < m->layers[i].n_tensors; k++) head |= PLAN_MOD_ID(m->layers[i].tensor_mod[k]) == PLAN_MOD_LM_HEAD;
    if (head) strncat(have, ", lm_head", sizeof have - strlen(have) - 1);
    for (const char *p = targets; *p;) {
        const char *e = strchr(p, ',');
        size_t k = e ? (size_t)(e - p) : strlen(p);
        int ok = 0;
        for (int id = 1; id < PLAN_MOD_COUNT && k; id++) {
            const char *nm = plan_module_name(id);
            if (strlen(nm) == k && strncmp(p, nm, k) == 0 && strstr(have, nm)) ok = 1;
        }
        if (!ok) {
            snprintf(msg, len, "--lora-targets: '%.*s' is not a module of %s (valid: all-linear, or a comma list of %s)",
                     (int)k, p, m->name, have);
            return -1;
        }
        p += k + (e ? 1 : 0);
    }
    return 0;
}

/* Moves every tensor of l to its frozen list. */
static void freeze_layer(LayerSpec *l) {
    for (int k = 0; k < l->n_tensors && l->n_frozen < PLAN_LAYER_MAX_TENSORS; k++) {
        l->frozen_elems[l->n_frozen] = l->tensor_elems[k];
        l->frozen_dim0[l->n_frozen] = l->tensor_dim0[k];
        l->frozen_mod[l->n_frozen++] = l->tensor_mod[k];
    }
    l->frozen += l->params;
    l->params = 0;
    l->n_tensors = 0;
    l->largest_tensor = 0;
}

/* Moves tensor k of l to its frozen list (a layer whose tensors are known). */
static void freeze_tensor(LayerSpec *l, int k) {
    if (l->n_frozen >= PLAN_LAYER_MAX_TENSORS) return;
    l->frozen_elems[l->n_frozen] = l->tensor_elems[k];
    l->frozen_dim0[l->n_frozen] = l->tensor_dim0[k];
    l->frozen_mod[l->n_frozen++] = l->tensor_mod[k];
    l->frozen += l->tensor_elems[k];
    l->params -= l->tensor_elems[k];
    for (int j = k; j + 1 < l->n_tensors; j++) {
        l->tensor_elems[j] = l->tensor_elems[j + 1];
        l->tensor_dim0[j] = l->tensor_dim0[j + 1];
        l->tensor_mod[j] = l->tensor_mod[j + 1];
    }
    l->n_tensors--;
    l->largest_tensor = 0;
    for (int j = 0; j < l->n_tensors; j++)
        if (l->tensor_elems[j] > l->largest_tensor) l->largest_tensor = l->tensor_elems[j];
}

/* Which inputs of layer l's projections autograd still saves once its base is frozen: a matmul
   saves its input for its weight's gradient only (derivatives.yaml mm/addmm: self is saved when
   mat2 requires grad), so a group of frozen projections reading one tensor saves it only where a
   LoRA A reads it undropped (lora_dropout = 0: nn.Identity hands A the same tensor). Under
   autocast each projection saves its own cast copy (LLaMA's q, k, v: three). Per input group g
   (1 to 5): its width in_of[g] (elements per token) and how many of its copies are no longer
   saved. The one rule both the account's counts (lora_activations) and the allocation listing's
   tensors (plan_activ.c) read. */
void plan_lora_unsaved(const ModelSpec *m, const LayerSpec *l, const FinetuneSpec *f, int autocast,
                       int64_t in_of[6], int unsaved[6]) {
    int copies[6] = {0}, lora_a[6] = {0};
    for (int g = 0; g < 6; g++) in_of[g] = 0, unsaved[g] = 0;
    for (int k = 0; k < l->n_frozen; k++) {
        int mod = l->frozen_mod[k], g = plan_module_group(mod);
        if (!g) continue;
        int64_t in, out;
        plan_module_features(mod, l->frozen_elems[k], l->frozen_dim0[k], &in, &out);
        in_of[g] = in;
        copies[g]++;
        if (plan_lora_adapts(m, f, mod)) lora_a[g]++;
    }
    for (int g = 1; g < 6; g++) {
        if (!copies[g]) continue;
        int before = autocast ? copies[g] : 1;
        int after = f->dropout > 0 ? 0 : autocast ? lora_a[g] : (lora_a[g] > 0);
        unsaved[g] = before - after;
    }
}

/* The layer's counts of what its adapters save and its frozen base no longer does (above); each
   adapter's A output (r per token, saved by B) and under lora_dropout the dropout's output (A's
   input). */
static void lora_activations(const ModelSpec *m, LayerSpec *l, const FinetuneSpec *f, int r) {
    for (int k = 0; k < l->n_frozen; k++) {
        int mod = l->frozen_mod[k];
        if (!plan_module_group(mod) || !plan_lora_adapts(m, f, mod)) continue;
        int64_t in, out;
        plan_module_features(mod, l->frozen_elems[k], l->frozen_dim0[k], &in, &out);
        l->lora_r_tok += r;
        if (f->dropout > 0) l->lora_drop_tok += in;
    }
    for (int autocast = 0; autocast < 2; autocast++) {
        int64_t in_of[6];
        int unsaved[6];
        plan_lora_unsaved(m, l, f, autocast, in_of, unsaved);
        for (int g = 1; g < 6; g++)
            *(autocast ? &l->act_unsaved_tok_ac : &l->act_unsaved_tok) += (int64_t)unsaved[g] * in_of[g];
    }
}

/* LoRA: the base frozen, each targeted module's adapters added after its weight; the rank
   bounded as PEFT bounds it */
static int ft_apply_lora(ModelSpec *m, const FinetuneSpec *f, char *msg, size_t len) {
    FinetuneSpec g = *f;
    plan_lora_targets(m, f, g.targets, sizeof g.targets);
    if (check_targets(m, g.targets, msg, len)) return -1;
    /* a rank above a target's smaller dimension adds parameters and no capacity: B (out x r)
       times A (r x in) has rank at most min(in, out), the bound PEFT itself enforces where the
       rank is bounded (peft/tuners/lora/layer.py: r <= min(in_features, out_features) for its
       MiCA init; r <= 0 for every LoRA) */
    int64_t lim = 0, lin = 0, lout = 0;
    const char *lname = "";
    for (int i = 0; i < m->n_layers; i++)
        for (int k = 0; k < m->layers[i].n_tensors; k++) {
            int mod = m->layers[i].tensor_mod[k];
            if (!targeted(g.targets, mod)) continue;
            int64_t in, out;
            plan_module_features(mod, m->layers[i].tensor_elems[k], m->layers[i].tensor_dim0[k], &in, &out);
            int64_t mn = in < out ? in : out;
            if (mn > 0 && (!lim || mn < lim)) { lim = mn; lin = in; lout = out; lname = plan_module_name(mod); }
        }
    if (lim > 0 && f->rank > lim) {
        snprintf(msg, len, "--lora %d is larger than %s's dimensions (in %lld, out %lld): B x A has rank at most %lld, so a "
                 "larger rank only adds parameters (PEFT bounds r by min(in_features, out_features); valid here: 1 to %lld)",
                 f->rank, lname, (long long)lin, (long long)lout, (long long)lim, (long long)lim);
        return -1;
    }
    for (int i = 0; i < m->n_layers; i++) {
        LayerSpec *l = &m->layers[i];
        freeze_layer(l);
        /* the adapters, in registration order: each targeted module's lora_A (r, in) and
           lora_B (out, r) after its base layer's weight and bias */
        for (int k = 0; k < l->n_frozen; k++) {
            int mod = l->frozen_mod[k];
            if (!targeted(g.targets, mod)) continue;
            int64_t in, out, r = f->rank;
            plan_module_features(mod, l->frozen_elems[k], l->frozen_dim0[k], &in, &out);
            if (plan_layer_add_tensor_dim0(l, r * in, r) || plan_layer_add_tensor_dim0(l, out * r, out)) {
                snprintf(msg, len, "--lora: layer %s has more than %d adapter tensors", l->name, PLAN_LAYER_MAX_TENSORS);
                return -1;
            }
            l->params += r * in + out * r;
            if (r * in > l->largest_tensor) l->largest_tensor = r * in;
            if (out * r > l->largest_tensor) l->largest_tensor = out * r;
        }
        lora_activations(m, l, &g, f->rank);
    }
    if (plan_model_params(m) == 0) {   /* PEFT: "Target modules ... not found in the base model" */
        snprintf(msg, len, "--lora-targets %s matches no module of %s", g.targets, m->name);
        return -1;
    }
    return 0;
}

/* --freeze embeddings | all-but-last:N on a model with `blocks` transformer blocks */
static int ft_apply_freeze(ModelSpec *m, const FinetuneSpec *f, int blocks, char *msg, size_t len) {
    if (f->freeze == FREEZE_EMBEDDINGS) {
        /* model.get_input_embeddings().requires_grad_(False): the token table (a head tied to
           it with it); position tables stay trainable */
        int done = 0;
        for (int i = 0; i < m->n_layers && !done; i++)
            if (m->layers[i].kind == LAYER_EMBED && m->layers[i].n_tensors > 0) { freeze_tensor(&m->layers[i], 0); done = 1; }
        if (!done) {
            if (blocks > 0)
                snprintf(msg, len, "--freeze embeddings: %s has no token embeddings (valid there: none, or all-but-last:N "
                         "with N from 1 to %d)", m->name, blocks);
            else
                snprintf(msg, len, "--freeze embeddings: %s has no token embeddings (valid there: none)", m->name);
            return -1;
        }
    } else {
        if (blocks == 0) {
            snprintf(msg, len, "--freeze all-but-last:%d: %s has no transformer blocks to keep (valid: none, or "
                     "embeddings for a model with token embeddings)", f->freeze_n, m->name);
            return -1;
        }
        if (f->freeze_n > blocks) {
            snprintf(msg, len, "--freeze all-but-last:%d: %s has %d blocks (valid: all-but-last:1 .. all-but-last:%d)",
                     f->freeze_n, m->name, blocks, blocks);
            return -1;
        }
        int seen = 0;
        for (int i = 0; i < m->n_layers; i++) {
            LayerSpec *l = &m->layers[i];
            seen += l->kind == LAYER_BLOCK;
            int trainable = seen > blocks - f->freeze_n;   /* the last N blocks and what follows */
            if (!trainable) { freeze_layer(l); l->grad_frontier = 1; continue; }
            if (l->kind == LAYER_EMBED && l->n_tensors > 0) freeze_tensor(l, 0);
        }
    }
    return 0;
}

/* where backward starts and what a frozen head saves, once the trainable set is known */
static void ft_mark_frontier(ModelSpec *m, const FinetuneSpec *f) {
    /* where backward starts: layers before the first trainable parameter save nothing; the
       first LoRA block's input norm neither (it runs before the adapters) */
    for (int i = 0; i < m->n_layers; i++) {
        LayerSpec *l = &m->layers[i];
        if (l->params > 0) {
            if (f->rank > 0 && l->kind == LAYER_BLOCK) {
                int first_group = 0;
                for (int k = 0; k < l->n_frozen && !first_group; k++)
                    if (targeted(f->targets[0] ? f->targets : plan_lora_default_targets(m->family), l->frozen_mod[k]))
                        first_group = plan_module_group(l->frozen_mod[k]);
                if (first_group == 1) l->grad_frontier = 2;
            }
            break;
        }
        if (l->kind == LAYER_EMBED || l->kind == LAYER_BLOCK) l->grad_frontier = 1;
    }
    /* a frozen head (an untied lm_head, or one tied to frozen embeddings) saves no input for
       its weight's gradient */
    int embed_frozen = 0;
    for (int j = 0; j < m->n_layers; j++)
        if (m->layers[j].kind == LAYER_EMBED) embed_frozen = m->layers[j].n_frozen > 0;
    for (int i = 0; i < m->n_layers; i++) {
        LayerSpec *l = &m->layers[i];
        if (l->kind == LAYER_HEAD && l->params == 0 && (l->frozen > 0 || (m->tied_embeddings && embed_frozen)))
            l->act_unsaved_tok = l->act_unsaved_tok_ac = m->d_model;
    }
}

int plan_finetune_apply(ModelSpec *m, const TrainSpec *t, char *msg, size_t len) {
    const FinetuneSpec *f = &t->ft;
    if (!plan_finetune_on(f)) return 0;
    if (f->rank > 0 && f->freeze != FREEZE_NONE) {
        snprintf(msg, len, "--freeze and --lora: a LoRA model's base is frozen already; give one of them");
        return -1;
    }
    if (!plan_model_tensors_known(m)) {
        snprintf(msg, len, "%s: its parameter tensors are not known (a --params or params.json model), so no subset of "
                 "them can be frozen: use a zoo model or a config.json", m->name);
        return -1;
    }
    int blocks = 0;
    for (int i = 0; i < m->n_layers; i++) blocks += m->layers[i].kind == LAYER_BLOCK;
    if (f->rank > 0 ? ft_apply_lora(m, f, msg, len) : ft_apply_freeze(m, f, blocks, msg, len)) return -1;
    ft_mark_frontier(m, f);
    return 0;
}

double plan_quant_bytes_per_param(const TrainSpec *t) {
    switch (t->ft.quant) {
    case QUANT_BF16: return 2;
    case QUANT_INT8: return 1;
    /* NF4: 4 bits per weight; one absmax per 64 weights, itself quantized to 8 bits (double
       quantization) with one fp32 constant per 256 absmax values */
    case QUANT_NF4: return 0.5 + 1.0 / 64 + 4.0 / (64.0 * 256.0);
    default: return plan_precision(t->precision)->param_bytes;
    }
}

double plan_model_frozen_bytes(const ModelSpec *m, const TrainSpec *t) {
    double pb = plan_precision(t->precision)->param_bytes, qb = plan_quant_bytes_per_param(t), sum = 0;
    if (t->ft.packed) return (double)plan_model_frozen(m) * pb;   /* the packed storage: elements at pb */
    for (int i = 0; i < m->n_layers; i++) {
        const LayerSpec *l = &m->layers[i];
        double quant = 0;
        for (int k = 0; k < l->n_frozen; k++) {
            int id = PLAN_MOD_ID(l->frozen_mod[k]);
            if (id != PLAN_MOD_NONE && id != PLAN_MOD_LM_HEAD) quant += (double)l->frozen_elems[k];
        }
        sum += quant * qb + ((double)l->frozen - quant) * pb;
    }
    return sum;
}

/* ---- the dimension's row ---- */

static int ft_on(const ModelSpec *m, const TrainSpec *t) { (void)m; return plan_finetune_on(&t->ft); }

/* What the planner has no account of: a trainable subset on memplan's engine, or under FSDP1's
   flat parameters (frozen and trainable parameters in one flat parameter: not planned). */
static int ft_check(const ModelSpec *m, const TrainSpec *t, const ClusterSpec *c, StrategyKind sk, char *msg, size_t len) {
    (void)m; (void)c;
    if (!plan_finetune_on(&t->ft)) return 0;
    if (t->impl == IMPL_ENGINE) {
        snprintf(msg, len, "--lora / --freeze: memplan's engine trains every parameter; use --impl pytorch");
        return -1;
    }
    if (t->ft.quant == QUANT_INT8 && (plan_strategy(sk)->shard & SHARD_PARAM)) {
        snprintf(msg, len, "--quant-base int8 with --strategy %s: bitsandbytes' 8-bit base is not sharded by ZeRO-3 or FSDP "
                 "(its Int8Params keep their scales outside the parameter; PEFT's sharded QLoRA is 4-bit with "
                 "bnb_4bit_quant_storage): not planned (valid there: nf4, bf16, none)", plan_strategy(sk)->name);
        return -1;
    }
    if ((plan_strategy(sk)->shard & SHARD_PARAM) && !plan_strategy_is_deepspeed(sk) && t->fsdp_impl == 1) {
        snprintf(msg, len, "--strategy %s with --lora/--freeze under --fsdp 1: FSDP1's flat parameters with frozen ones "
                 "are not planned (valid: --fsdp 2, or ddp, zero1, zero2, zero3)", plan_strategy(sk)->name);
        return -1;
    }
    return 0;
}

static void ft_header(FILE *f, PlanHeaderSlot slot, const ModelSpec *m, const TrainSpec *t, const ClusterSpec *c,
                      const struct Step *const *rows, int n_rows) {
    (void)c; (void)rows; (void)n_rows;
    if (slot != HEADER_AFTER_MODEL || !plan_finetune_on(&t->ft)) return;
    char a[32], b[32];
    int64_t tr = plan_model_params(m), tot = tr + plan_model_frozen(m);
    char what[512], tg[160], fz[32];
    if (t->ft.rank > 0)
        snprintf(what, sizeof what, "LoRA r=%d, alpha %g, dropout %g on %s (PEFT get_peft_model)%s%s%s", t->ft.rank,
                 t->ft.alpha, t->ft.dropout, plan_lora_targets(m, &t->ft, tg, sizeof tg),
                 t->ft.quant != QUANT_NONE ? "; frozen base projections stored " : "",
                 t->ft.quant != QUANT_NONE ? plan_quant_name(t->ft.quant) : "",
                 t->ft.quant == QUANT_NF4 ? " (as bitsandbytes' quantize_4bit stores it: 0.5 B + a double-quantized absmax per "
                 "64 weights; its dequantization transients are an estimate, no QLoRA step is measured)" :
                 t->ft.quant == QUANT_INT8 ? " (1 B per weight: an estimate, not measured)" : "");
    else
        snprintf(what, sizeof what, "--freeze %s", plan_freeze_label(&t->ft, fz, sizeof fz));
    fprintf(f, "# trainable: %s of %s parameters (%.4f%%), %s; frozen parameters get no gradients, no optimizer "
            "state and no reductions\n", plan_fmt_count(tr, a, sizeof a), plan_fmt_count(tot, b, sizeof b),
            tot > 0 ? 100.0 * (double)tr / (double)tot : 0.0, what);
}

static void ft_json(cJSON *jm, cJSON *train, const ModelSpec *m, const TrainSpec *t, const ClusterSpec *c) {
    (void)train; (void)c;
    if (!plan_finetune_on(&t->ft)) return;
    cJSON_AddNumberToObject(jm, "trainable_params", (double)plan_model_params(m));
    cJSON *jf = cJSON_AddObjectToObject(jm, "finetune");
    char tg[160], fz[32];
    cJSON_AddNumberToObject(jf, "lora_rank", t->ft.rank);
    if (t->ft.rank > 0) {
        cJSON_AddNumberToObject(jf, "lora_alpha", t->ft.alpha);
        cJSON_AddNumberToObject(jf, "lora_dropout", t->ft.dropout);
        cJSON_AddStringToObject(jf, "lora_targets", plan_lora_targets(m, &t->ft, tg, sizeof tg));
    }
    cJSON_AddStringToObject(jf, "freeze", plan_freeze_label(&t->ft, fz, sizeof fz));
    cJSON_AddStringToObject(jf, "quant_base", plan_quant_name(t->ft.quant));
    cJSON_AddBoolToObject(jf, "quant_estimate", t->ft.quant == QUANT_NF4 || t->ft.quant == QUANT_INT8);
    cJSON_AddNumberToObject(jf, "frozen_params", (double)plan_model_frozen(m));
}

static int ft_setup(ModelSpec *m, const TrainSpec *t, char *msg, size_t len) { return plan_finetune_apply(m, t, msg, len); }

/* 1 when strategy sk shards parameters (ZeRO-3, FSDP): a 4-bit base is then held, sharded and
   gathered as its packed storage. */
static int shards_params(StrategyKind sk) { return (plan_strategy(sk)->shard & SHARD_PARAM) != 0; }

/* ZeRO-3 and FSDP with a 4-bit base: bitsandbytes' Params4bit is a tensor of the packed weight,
   stored in bnb_4bit_quant_storage's dtype so that the wrappers can shard and gather it with the
   other parameters (PEFT's QLoRA under FSDP and DeepSpeed ZeRO-3: bnb_4bit_quant_storage = the
   compute dtype; accelerate utils/fsdp_utils.py fsdp2_prepare_model shards float-stored
   Params4bit, and does not upcast them); partition_parameters.py partitions it as any parameter.
   So each quantized projection of this rank's model becomes its packed storage: elems x the NF4
   bytes per weight / the parameter bytes elements, which every shard, gather, persistence
   threshold and padding then counts as the wrapper does; the compute keeps the unpacked count
   (frozen_flops_extra), the dequantization its size. The absmax constants ride with the packed
   data here (bitsandbytes keeps them in quant_state, whole on each rank: 0.016 B per weight, an
   under-count of that much times (N-1)/N, stated in docs/formulas.md). A bf16 base below fp32
   parameters is counted the same way: its elements at 2 bytes. */
static int ft_view(RankView *v, RankView *out, int max) {
    (void)out; (void)max;
    if ((v->t.ft.quant != QUANT_NF4 && v->t.ft.quant != QUANT_BF16) || v->t.ft.packed || !shards_params(v->sk)) return 1;
    double pb = plan_precision(v->t.precision)->param_bytes, qb = plan_quant_bytes_per_param(&v->t);
    if (qb >= pb) return 1;   /* stored at the parameters' own bytes: nothing to count differently */
    ModelSpec w;
    plan_model_init(&w, v->m.name, v->m.arch);
    LayerSpec *keep = w.layers;
    w = v->m;
    w.layers = keep;
    w.n_layers = w.cap_layers = 0;
    for (int i = 0; i < v->m.n_layers; i++) {
        LayerSpec l = v->m.layers[i];
        for (int k = 0; k < l.n_frozen; k++) {
            int id = PLAN_MOD_ID(l.frozen_mod[k]);
            if (id == PLAN_MOD_NONE || id == PLAN_MOD_LM_HEAD) continue;
            int64_t e = l.frozen_elems[k], pe = (int64_t)ceil((double)e * qb / pb);
            l.frozen -= e - pe;
            l.frozen_flops_extra += e - pe;
            l.frozen_elems[k] = pe;
            l.frozen_dim0[k] = pe;   /* Params4bit: a (packed, 1) column */
        }
        if (!plan_model_add_layer(&w, &l)) { plan_model_free(&w); return -1; }
    }
    if (v->own_m) plan_model_free(&v->m);
    v->m = w;
    v->own_m = 1;
    v->t.ft.packed = 1;
    return 1;
}

const PlanDim plan_dim_ft = {
    .name = "finetune",
    .not_planned = "fine-tuning does not apply to this setup",
    .on = ft_on,
    .check = ft_check,
    .setup = ft_setup,
    .view = ft_view,
    .header = ft_header,
    .json = ft_json,
};

/* ---- --emit: the Python lines that make the trainable subset ---- */

void plan_ft_emit_code(FILE *f, const ModelSpec *m, const TrainSpec *t, StrategyKind sk) {
    const FinetuneSpec *ft = &t->ft;
    if (ft->rank > 0) {
        char tg[160];
        const PrecisionSpec *ps = plan_precision(t->precision);
        /* the dequantized weight's dtype is the activations': the plan's compute dtype */
        const char *cdt = ps->peak == PEAK_BF16 ? "torch.bfloat16" : ps->peak == PEAK_FP16 ? "torch.float16" : "torch.float32";
        int sharded = (plan_strategy(sk)->shard & SHARD_PARAM) != 0;
        plan_lora_targets(m, ft, tg, sizeof tg);
        if (ft->quant == QUANT_NF4 || ft->quant == QUANT_INT8) {
            fprintf(f, "# --quant-base %s: load the base with from_pretrained(..., quantization_config=BitsAndBytesConfig(%s", plan_quant_name(ft->quant),
                    ft->quant == QUANT_NF4 ? "load_in_4bit=True, bnb_4bit_quant_type=\"nf4\", bnb_4bit_use_double_quant=True, "
                                             "bnb_4bit_compute_dtype=" : "load_in_8bit=True");
            if (ft->quant == QUANT_NF4) fprintf(f, "%s", cdt);
            /* ZeRO-3 and FSDP shard the packed weight only when it is stored in a float dtype (PEFT's
               QLoRA under FSDP / ZeRO-3; accelerate's FSDP2 leaves a uint8-stored base unsharded) */
            if (ft->quant == QUANT_NF4 && sharded) fprintf(f, ", bnb_4bit_quant_storage=%s", cdt);
            fprintf(f, "))\n");
            if (!sharded)   /* its own checkpointing off: the plan's checkpointing follows below, as planned */
                fprintf(f, "from peft import prepare_model_for_kbit_training\n"
                           "model = prepare_model_for_kbit_training(model, use_gradient_checkpointing=False)  # fp32 norms and "
                           "embeddings, as planned\n");
        } else if (ft->quant == QUANT_BF16)
            fprintf(f, "# --quant-base bf16: load the base with torch_dtype=torch.bfloat16\n");
        fprintf(f, "from peft import LoraConfig, get_peft_model\n");
        fprintf(f, "model = get_peft_model(model, LoraConfig(r=%d, lora_alpha=%g, lora_dropout=%g, target_modules=",
                ft->rank, ft->alpha, ft->dropout);
        if (strcmp(tg, "all-linear") == 0) fprintf(f, "\"all-linear\"");
        else {
            fputc('[', f);
            for (const char *p = tg; *p;) {
                const char *e = strchr(p, ',');
                int k = e ? (int)(e - p) : (int)strlen(p);
                fprintf(f, "%s\"%.*s\"", p == tg ? "" : ", ", k, p);
                p += k + (e ? 1 : 0);
            }
            fputc(']', f);
        }
        fprintf(f, "))  # --lora %d\n", ft->rank);
    } else if (ft->freeze == FREEZE_EMBEDDINGS) {
        fprintf(f, "model.get_input_embeddings().requires_grad_(False)  # --freeze embeddings\n");
    } else if (ft->freeze == FREEZE_ALL_BUT_LAST) {
        const char *blk = plan_emit_block_class(m->family, NULL);
        fprintf(f, "# --freeze all-but-last:%d: train the last %d blocks and what follows them\n"
                   "blocks = [m for m in model.modules() if isinstance(m, %s)]\n"
                   "keep = {id(p) for b in blocks[-%d:] for p in b.parameters()}\n"
                   "last = {id(p) for p in blocks[-1].parameters()}; after = False\n"
                   "for _, p in model.named_parameters():\n"
                   "    after = after or id(p) in last\n"
                   "    if after and id(p) not in last: keep.add(id(p))\n"
                   "emb = {id(p) for p in model.get_input_embeddings().parameters()}\n"
                   "for p in model.parameters(): p.requires_grad_(id(p) in keep and id(p) not in emb)\n",
                ft->freeze_n, ft->freeze_n, blk, ft->freeze_n);
    }
}
