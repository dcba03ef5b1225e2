/* plan_load_json.c — memplan's own model format ("memplan_model": 1): every ModelSpec and
 * LayerSpec field, written by plan_model_export_json (`memplan models --export NAME`) and read
 * back by ld_memplan_json, so export → import reproduces the ModelSpec field for field (all but
 * source, which records the file). The schema is in docs/model-formats.md; the key tables below
 * are the one place that lists the fields. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan_load.h"
#include "plan_load_internal.h"

#define MEMPLAN_MODEL_VERSION 1

static const char *const NORM_NAMES[] = {"layernorm", "rmsnorm"};
static const char *const MLP_NAMES[] = {"gelu", "gelu_new", "relu", "swiglu"};
static const char *const QK_NORM_NAMES[] = {"none", "head", "full"};
static const char *const NORM_PLACE_NAMES[NORM_PLACE_COUNT] = {"pre", "sandwich", "post"};
static const char *const QKV_NAMES[QKV_COUNT] = {"classic", "separate", "fused"};
#define N_NORMS ((int)(sizeof(NORM_NAMES) / sizeof(NORM_NAMES[0])))
#define N_MLPS ((int)(sizeof(MLP_NAMES) / sizeof(MLP_NAMES[0])))
#define N_QK_NORMS ((int)(sizeof(QK_NORM_NAMES) / sizeof(QK_NORM_NAMES[0])))

static const char *const TOP_KEYS[] = {
    "memplan_model", "name", "family", "description", "arch", "n_layer", "n_enc_layer", "d_model",
    "n_head", "n_kv_head", "d_head", "d_ff", "vocab", "max_seq", "tied_embeddings", "norm",
    "mlp", "fused_qkv", "learned_pos", "addmm_proj", "act_fn", "dropout", "image_size", "in_channels", "moe", "block", "mla", "attn_sinks", "qk_norm",
    "nope_every", "root_only", "layers", NULL};
static const char *const MOE_KEYS[] = {"n_experts", "top_k", "d_ff_expert", "d_ff_shared", "router", "norm_topk",
                                       "fp32_weights", "shared_gate", "shared_last", "bias", "clamped_glu",
                                       "router_logits", "n_group", "topk_group", NULL};
static const char *const BLOCK_KEYS[] = {"qk_norm", "norm_place", "norm_fp32", "qkv", "fused_gate_up", "rotary",
                                         "rotary_cat", "resid_dropout", "attn_softcap", "logit_softcap", NULL};
static const char *const MLA_KEYS[] = {"q_rank", "kv_rank", "rope_dim", "nope_dim", "v_dim", NULL};
/* MoeRouter, in order */
static const char *const ROUTER_NAMES[] = {"softmax", "topk_softmax", "grouped", "all_experts"};
static const char *const LAYER_KEYS[] = {
    "name", "kind", "params", "buffers", "buffers_i64", "bn_channels", "largest_tensor", "fwd_flops",
    "act_elems", "act_fp32_elems", "act_mask_elems", "act_bytes", "act_known", "tensors",
    "tensor_dim0", "tensor_modules", "tensor_experts", "unit", "conv_kernel", "conv_stride", "expert_params", "attn_window",
    "no_rope", NULL};

/* ---- export ---- */

#define TF(x) ((x) ? "true" : "false")

typedef struct {
    char *buf;
    size_t n, cap;
    int oom;
} Out;

static void put(Out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(Out *o, const char *fmt, ...) {
    if (o->oom) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int k = vsnprintf(o->buf + o->n, o->cap - o->n, fmt, ap);
        va_end(ap);
        if (k < 0) { o->oom = 1; return; }
        if ((size_t)k < o->cap - o->n) { o->n += (size_t)k; return; }
        size_t cap = 2 * o->cap + (size_t)k + 1;
        char *b = realloc(o->buf, cap);
        if (!b) { o->oom = 1; return; }
        o->buf = b;
        o->cap = cap;
    }
}

/* A JSON string with the escapes JSON requires. */
static void put_str(Out *o, const char *s) {
    put(o, "\"");
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\') put(o, "\\%c", *p);
        else if (*p < 0x20) put(o, "\\u%04x", *p);
        else put(o, "%c", *p);
    }
    put(o, "\"");
}

/* The shortest decimal that reads back as the same double. */
static void put_double(Out *o, double d) {
    if (!isfinite(d)) { put(o, "null"); return; }
    char b[40];
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(b, sizeof(b), "%.*g", prec, d);
        if (strtod(b, NULL) == d) break;
    }
    put(o, "%s", b);
}

/* "block": what a 2024-26 decoder block saves beyond the classic one (BlockSpec); written when
   any of it is set. */
static void put_block(Out *o, const BlockSpec *b) {
    BlockSpec zero;
    memset(&zero, 0, sizeof(zero));
    if (memcmp(b, &zero, sizeof(zero)) == 0) return;   /* optional: absent = the classic block */
    int qk = b->qk_norm >= 0 && b->qk_norm < N_QK_NORMS ? b->qk_norm : 0;
    int place = b->norm_place >= 0 && b->norm_place < NORM_PLACE_COUNT ? (int)b->norm_place : 0;
    int qkv = b->qkv >= 0 && b->qkv < QKV_COUNT ? (int)b->qkv : 0;
    put(o, "  \"block\": {\"qk_norm\": \"%s\", \"norm_place\": \"%s\", \"norm_fp32\": %s, \"qkv\": \"%s\", "
        "\"fused_gate_up\": %s, \"rotary\": %s, \"rotary_cat\": %s, \"resid_dropout\": %s, \"attn_softcap\": ",
        QK_NORM_NAMES[qk], NORM_PLACE_NAMES[place], b->norm_fp32 ? "true" : "false", QKV_NAMES[qkv],
        b->fused_gate_up ? "true" : "false", b->rotary ? "true" : "false", b->rotary_cat ? "true" : "false",
        b->resid_dropout ? "true" : "false");
    put_double(o, b->attn_softcap);
    put(o, ", \"logit_softcap\": ");
    put_double(o, b->logit_softcap);
    put(o, "},\n");
}

int plan_model_export_json(const ModelSpec *m, char **out_json) {
    Out o = {malloc(4096), 0, 4096, 0};
    *out_json = NULL;
    if (!o.buf) return -1;
    int norm = (m->norm >= 0 && (int)m->norm < N_NORMS) ? (int)m->norm : 0;
    int mlp = (m->mlp >= 0 && (int)m->mlp < N_MLPS) ? (int)m->mlp : 0;
    put(&o, "{\n  \"memplan_model\": %d,\n  \"name\": ", MEMPLAN_MODEL_VERSION);
    put_str(&o, m->name);
    if (m->family[0]) {   /* optional */
        put(&o, ",\n  \"family\": ");
        put_str(&o, m->family);
    }
    put(&o, ",\n  \"arch\": ");
    put_str(&o, plan_arch_name(m->arch));
    put(&o, ",\n  \"n_layer\": %d,\n  \"n_enc_layer\": %d,\n  \"d_model\": %lld,\n"
        "  \"n_head\": %d,\n  \"n_kv_head\": %d,\n  \"d_head\": %lld,\n  \"d_ff\": %lld,\n"
        "  \"vocab\": %lld,\n  \"max_seq\": %lld,\n  \"tied_embeddings\": %s,\n",
        m->n_layer, m->n_enc_layer, (long long)m->d_model, m->n_head, m->n_kv_head,
        (long long)m->d_head, (long long)m->d_ff, (long long)m->vocab, (long long)m->max_seq,
        m->tied_embeddings ? "true" : "false");
    put(&o, "  \"norm\": \"%s\",\n  \"mlp\": \"%s\",\n  \"act_fn\": ", NORM_NAMES[norm],
        MLP_NAMES[mlp]);
    put_str(&o, m->act_fn);
    if (m->fused_qkv) put(&o, ",\n  \"fused_qkv\": true");        /* optional: absent = false */
    if (m->learned_pos) put(&o, ",\n  \"learned_pos\": true");    /* optional: absent = false */
    if (m->addmm_proj) put(&o, ",\n  \"addmm_proj\": %d", m->addmm_proj);   /* optional: absent = 0 */
    put(&o, ",\n  \"dropout\": ");
    put_double(&o, m->dropout);
    put(&o, ",\n  \"image_size\": %d,\n  \"in_channels\": %d,\n", m->image_size, m->in_channels);
    const MoeSpec *e = &m->moe;
    if (e->n_experts > 0)   /* optional: absent = a dense model */
        put(&o, "  \"moe\": {\"n_experts\": %d, \"top_k\": %d, \"d_ff_expert\": %lld, \"d_ff_shared\": %lld, "
            "\"router\": \"%s\", \"norm_topk\": %s, \"fp32_weights\": %s, \"shared_gate\": %s, \"shared_last\": %s, "
            "\"bias\": %s, \"clamped_glu\": %s, \"router_logits\": %s, \"n_group\": %d, \"topk_group\": %d},\n",
            e->n_experts, e->top_k,
            (long long)e->d_ff_expert, (long long)e->d_ff_shared,
            ROUTER_NAMES[e->router >= 0 && e->router < MOE_ROUTER_COUNT ? e->router : 0], TF(e->norm_topk),
            TF(e->fp32_weights), TF(e->shared_gate), TF(e->shared_last), TF(e->bias), TF(e->clamped_glu),
            TF(e->router_logits), e->n_group, e->topk_group);
    put_block(&o, &m->block);
    if (m->mla.kv_rank > 0)   /* optional: absent = no latent attention */
        put(&o, "  \"mla\": {\"q_rank\": %lld, \"kv_rank\": %lld, \"rope_dim\": %lld, \"nope_dim\": %lld, "
            "\"v_dim\": %lld},\n", (long long)m->mla.q_rank, (long long)m->mla.kv_rank, (long long)m->mla.rope_dim,
            (long long)m->mla.nope_dim, (long long)m->mla.v_dim);
    if (m->attn_sinks) put(&o, "  \"attn_sinks\": true,\n");
    if (m->qk_norm) put(&o, "  \"qk_norm\": %d,\n", m->qk_norm);
    if (m->nope_every) put(&o, "  \"nope_every\": %d,\n", m->nope_every);
    if (m->root_only) put(&o, "  \"root_only\": true,\n");   /* optional: a wrap left every layer in the root */
    put(&o, "  \"layers\": [\n");
    for (int i = 0; i < m->n_layers; i++) {
        const LayerSpec *l = &m->layers[i];
        put(&o, "    {\"name\": ");
        put_str(&o, l->name);
        put(&o, ", \"kind\": \"%s\", \"params\": %lld, \"buffers\": %lld, \"bn_channels\": %lld, "
            "\"largest_tensor\": %lld, \"fwd_flops\": ", plan_layer_kind_name(l->kind),
            (long long)l->params, (long long)l->buffers, (long long)l->bn_channels,
            (long long)l->largest_tensor);
        put_double(&o, l->fwd_flops);
        put(&o, ", \"act_elems\": %lld, \"act_fp32_elems\": %lld, \"act_mask_elems\": %lld, "
            "\"act_bytes\": %lld, \"act_known\": %s", (long long)l->act_elems,
            (long long)l->act_fp32_elems, (long long)l->act_mask_elems, (long long)l->act_bytes,
            l->act_known ? "true" : "false");
        if (l->buffers_i64 > 0) put(&o, ", \"buffers_i64\": %lld", (long long)l->buffers_i64);   /* optional */
        if (l->n_tensors > 0) {   /* optional: absent = unknown */
            put(&o, ", \"tensors\": [");
            for (int k = 0; k < l->n_tensors; k++)
                put(&o, "%s%lld", k ? ", " : "", (long long)l->tensor_elems[k]);
            put(&o, "]");
            int dims = 0;
            for (int k = 0; k < l->n_tensors; k++) dims += l->tensor_dim0[k] > 0;
            if (dims) {   /* optional: absent (or 0) = unknown */
                put(&o, ", \"tensor_dim0\": [");
                for (int k = 0; k < l->n_tensors; k++)
                    put(&o, "%s%lld", k ? ", " : "", (long long)l->tensor_dim0[k]);
                put(&o, "]");
            }
            int mods = 0;
            for (int k = 0; k < l->n_tensors; k++) mods += l->tensor_mod[k] != 0;
            if (mods) {   /* optional: absent = no named projections (no --lora targets) */
                char key[32];
                put(&o, ", \"tensor_modules\": [");
                for (int k = 0; k < l->n_tensors; k++)
                    put(&o, "%s\"%s\"", k ? ", " : "", plan_module_key(l->tensor_mod[k], key, sizeof key));
                put(&o, "]");
            }
            if (l->expert_mask) {   /* optional: absent = no routed-expert tensors (what --ep shards) */
                put(&o, ", \"tensor_experts\": [");
                for (int k = 0; k < l->n_tensors; k++)
                    put(&o, "%s%s", k ? ", " : "", TF(k < 32 && (l->expert_mask >> k & 1u)));
                put(&o, "]");
            }
        }
        if (l->unit > 0) put(&o, ", \"unit\": %d", l->unit);
        if (l->conv_kernel > 0 || l->conv_stride > 0)
            put(&o, ", \"conv_kernel\": %d, \"conv_stride\": %d", l->conv_kernel, l->conv_stride);
        if (l->expert_params > 0) put(&o, ", \"expert_params\": %lld", (long long)l->expert_params);
        if (l->attn_window > 0) put(&o, ", \"attn_window\": %lld", (long long)l->attn_window);
        if (l->no_rope) put(&o, ", \"no_rope\": true");
        put(&o, "}%s\n", i + 1 < m->n_layers ? "," : "");
    }
    put(&o, "  ]\n}\n");
    if (o.oom) {
        free(o.buf);
        return -1;
    }
    *out_json = o.buf;
    return 0;
}

/* ---- import ---- */

/* A string field that must be one of names[0..n). */
static int ld_enum(LoadCtx *c, const cJSON *obj, const char *prefix, const char *key,
                   int required, int def, const char *(*name_of)(int), int n, int *out) {
    char s[32];
    if (ld_str(c, obj, prefix, key, required, def >= 0 ? name_of(def) : "", s, sizeof(s)))
        return -1;
    for (int i = 0; i < n; i++)
        if (strcmp(name_of(i), s) == 0) {
            *out = i;
            return 0;
        }
    char list[256];
    size_t k = 0;
    for (int i = 0; i < n && k < sizeof(list); i++)
        k += (size_t)snprintf(list + k, sizeof(list) - k, "%s%s", i ? ", " : "", name_of(i));
    return ld_fail(c, "field '%s%s' must be one of %s (got '%s')", prefix, key, list, s);
}

static const char *arch_name(int i) { return plan_arch_name((ArchKind)i); }
static const char *kind_name(int i) { return plan_layer_kind_name((LayerKind)i); }
static const char *norm_name(int i) { return NORM_NAMES[i]; }
static const char *mlp_name(int i) { return MLP_NAMES[i]; }
static const char *router_name(int i) { return ROUTER_NAMES[i]; }
static const char *qk_norm_name(int i) { return QK_NORM_NAMES[i]; }
static const char *norm_place_name(int i) { return NORM_PLACE_NAMES[i]; }
static const char *qkv_name(int i) { return QKV_NAMES[i]; }

/* Optional "block" (BlockSpec): every key optional, absent = the classic block's value. */
static int read_block(LoadCtx *c, const cJSON *root, BlockSpec *b) {
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(root, "block");
    int place, qkv;
    if (!j) return 0;
    if (!cJSON_IsObject(j)) return ld_fail(c, "field 'block' must be an object");
    if (ld_known_keys(c, j, "block.", BLOCK_KEYS) ||
        ld_enum(c, j, "block.", "qk_norm", 0, 0, qk_norm_name, N_QK_NORMS, &b->qk_norm) ||
        ld_enum(c, j, "block.", "norm_place", 0, 0, norm_place_name, NORM_PLACE_COUNT, &place) ||
        ld_bool(c, j, "block.", "norm_fp32", 0, 0, 1, &b->norm_fp32) ||
        ld_enum(c, j, "block.", "qkv", 0, 0, qkv_name, QKV_COUNT, &qkv) ||
        ld_bool(c, j, "block.", "fused_gate_up", 0, 0, 1, &b->fused_gate_up) ||
        ld_bool(c, j, "block.", "rotary", 0, 0, 1, &b->rotary) ||
        ld_bool(c, j, "block.", "rotary_cat", 0, 0, 1, &b->rotary_cat) ||
        ld_bool(c, j, "block.", "resid_dropout", 0, 0, 1, &b->resid_dropout) ||
        ld_num(c, j, "block.", "attn_softcap", 0, 0.0, 0.0, 1e9, &b->attn_softcap) ||
        ld_num(c, j, "block.", "logit_softcap", 0, 0.0, 0.0, 1e9, &b->logit_softcap))
        return -1;
    b->norm_place = (NormPlace)place;
    b->qkv = (QkvLayout)qkv;
    return 0;
}

/* The optional per-tensor list `key` of layer j (with "tensors"): *out = the list, one entry per
 * tensor, or NULL when absent; -1 (reported, naming what an entry is) when it is not such a list. */
static int per_tensor_list(LoadCtx *c, const cJSON *j, const char *prefix, const char *key, const char *entries,
                           const LayerSpec *l, const cJSON **out) {
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(j, key);
    *out = NULL;
    if (!a) return 0;
    int n = cJSON_IsArray(a) ? cJSON_GetArraySize(a) : -1;
    if (n != l->n_tensors)
        return ld_fail(c, "field '%s%s' must be a list of %d %s, one per entry of 'tensors' (got %s%d)", prefix, key,
                       l->n_tensors, entries, n < 0 ? "no list, " : "", n < 0 ? 0 : n);
    *out = a;
    return 0;
}

/* Optional "tensor_dim0" (with "tensors"): each tensor's dim 0, one entry per tensor, a whole
 * number dividing the tensor's elements, 0 = unknown; absent = all unknown. */
static int read_dim0(LoadCtx *c, const cJSON *j, const char *prefix, LayerSpec *l) {
    const cJSON *a;
    if (per_tensor_list(c, j, prefix, "tensor_dim0", "dim-0 sizes", l, &a)) return -1;
    if (!a) return 0;
    int k = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, a) {
        char what[96];
        int64_t d;
        snprintf(what, sizeof(what), "field '%stensor_dim0' entry %d", prefix, k);
        if (ld_value_int(c, e, what, 0, l->tensor_elems[k], &d)) return -1;
        if (d > 0 && l->tensor_elems[k] % d != 0)
            return ld_fail(c, "%s (%lld) must divide the tensor's %lld elements (0 = unknown)", what,
                           (long long)d, (long long)l->tensor_elems[k]);
        l->tensor_dim0[k++] = d;
    }
    return 0;
}

/* Optional "tensor_modules" (with "tensors"): the projection each tensor is the weight of, as
 * plan_module_key names it ("q_proj", "mlp.c_proj:conv1d"), "" for none; absent = none. */
static int read_modules(LoadCtx *c, const cJSON *j, const char *prefix, LayerSpec *l) {
    const cJSON *a;
    if (per_tensor_list(c, j, prefix, "tensor_modules", "module names", l, &a)) return -1;
    if (!a) return 0;
    int k = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, a) {
        int mod = cJSON_IsString(e) ? plan_module_by_key(e->valuestring) : -1;
        if (mod < 0)
            return ld_fail(c, "field '%stensor_modules' entry %d must be \"\" or one of q_proj, k_proj, v_proj, o_proj, "
                           "gate_proj, up_proj, down_proj, c_attn, attn.c_proj, mlp.c_proj, c_fc, lm_head (\":conv1d\" "
                           "appended for a Conv1D)", prefix, k);
        l->tensor_mod[k++] = (uint8_t)mod;
    }
    return 0;
}

/* Optional "tensor_experts" (with "tensors"): true for a routed expert's tensor (the ones expert
 * parallelism splits: LayerSpec.expert_mask), one entry per tensor, among the first 32; absent = none. */
static int read_experts(LoadCtx *c, const cJSON *j, const char *prefix, LayerSpec *l) {
    const cJSON *a;
    if (per_tensor_list(c, j, prefix, "tensor_experts", "true/false", l, &a)) return -1;
    if (!a) return 0;
    int k = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, a) {
        if (!cJSON_IsBool(e) || (cJSON_IsTrue(e) && k >= 32))
            return ld_fail(c, "field '%stensor_experts' entry %d must be %s", prefix, k,
                           cJSON_IsBool(e) ? "false (an expert tensor is one of the layer's first 32)" : "true or false");
        if (cJSON_IsTrue(e)) l->expert_mask |= 1u << k;
        k++;
    }
    return 0;
}

/* Optional "tensors": the layer's parameter tensors (elements, model.parameters() order), 1 to
 * PLAN_LAYER_MAX_TENSORS whole numbers (0: an empty tensor, as a params.json may list) adding up
 * to params; absent = unknown. */
static int read_tensors(LoadCtx *c, const cJSON *j, const char *prefix, LayerSpec *l) {
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(j, "tensors");
    if (!a) return 0;
    int n = cJSON_IsArray(a) ? cJSON_GetArraySize(a) : 0;
    if (n < 1 || n > PLAN_LAYER_MAX_TENSORS)
        return ld_fail(c, "field '%stensors' must be a list of 1 to %d element counts (got %s%d)",
                       prefix, PLAN_LAYER_MAX_TENSORS, cJSON_IsArray(a) ? "" : "no list, ", n);
    int64_t sum = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, a) {
        double v = cJSON_IsNumber(e) ? e->valuedouble : -1;
        if (v < 0 || v > (double)LD_MAX_PARAMS || v != (double)(int64_t)v)   /* 0: an empty tensor */
            return ld_fail(c, "field '%stensors' must hold whole element counts (got "
                           "entry %d: %s)", prefix, l->n_tensors, cJSON_IsNumber(e) ? "a bad number" : "not a number");
        plan_layer_add_tensor(l, (int64_t)v);
        sum += (int64_t)v;
    }
    if (sum != l->params)
        return ld_fail(c, "field '%stensors' adds up to %lld elements, not the layer's params (%lld)",
                       prefix, (long long)sum, (long long)l->params);
    if (read_dim0(c, j, prefix, l) || read_experts(c, j, prefix, l)) return -1;
    return read_modules(c, j, prefix, l);
}

static int read_layer(LoadCtx *c, const cJSON *j, int i, LayerSpec *l) {
    char prefix[32];
    snprintf(prefix, sizeof(prefix), "layers[%d].", i);
    if (!cJSON_IsObject(j)) {
        char got[64];
        ld_describe(j, got, sizeof(got));
        return ld_fail(c, "field 'layers[%d]' must be an object (got %s)", i, got);
    }
    int kind;
    memset(l, 0, sizeof(*l));
    if (ld_known_keys(c, j, prefix, LAYER_KEYS) ||
        ld_str(c, j, prefix, "name", 1, NULL, l->name, sizeof(l->name)) ||
        ld_enum(c, j, prefix, "kind", 1, -1, kind_name, LAYER_KIND_COUNT, &kind) ||
        ld_int(c, j, prefix, "params", 1, 0, 0, LD_MAX_PARAMS, &l->params) ||
        ld_int(c, j, prefix, "buffers", 0, 0, 0, LD_MAX_EXACT, &l->buffers) ||
        ld_int(c, j, prefix, "buffers_i64", 0, 0, 0, LD_MAX_EXACT, &l->buffers_i64) ||
        ld_int(c, j, prefix, "bn_channels", 0, 0, 0, LD_MAX_EXACT, &l->bn_channels) ||
        ld_int(c, j, prefix, "largest_tensor", 0, 0, 0, LD_MAX_PARAMS, &l->largest_tensor) ||
        ld_num(c, j, prefix, "fwd_flops", 0, 0.0, 0.0, 1e30, &l->fwd_flops) ||
        ld_int(c, j, prefix, "act_elems", 0, 0, 0, LD_MAX_EXACT, &l->act_elems) ||
        ld_int(c, j, prefix, "act_fp32_elems", 0, 0, 0, LD_MAX_EXACT, &l->act_fp32_elems) ||
        ld_int(c, j, prefix, "act_mask_elems", 0, 0, 0, LD_MAX_EXACT, &l->act_mask_elems) ||
        ld_int(c, j, prefix, "act_bytes", 0, 0, 0, LD_MAX_EXACT, &l->act_bytes) ||
        ld_bool(c, j, prefix, "act_known", 0, 0, 1, &l->act_known) ||
        ld_int32(c, j, prefix, "unit", 0, 0, 0, 100000, &l->unit) ||
        ld_int32(c, j, prefix, "conv_kernel", 0, 0, 0, 65536, &l->conv_kernel) ||
        ld_int32(c, j, prefix, "conv_stride", 0, 0, 0, 65536, &l->conv_stride) ||
        ld_int(c, j, prefix, "expert_params", 0, 0, 0, LD_MAX_PARAMS, &l->expert_params) ||
        ld_int(c, j, prefix, "attn_window", 0, 0, 0, 1 << 24, &l->attn_window) ||
        ld_bool(c, j, prefix, "no_rope", 0, 0, 1, &l->no_rope))
        return -1;
    if (l->expert_params > l->params)
        return ld_fail(c, "field '%sexpert_params' (%lld) exceeds the layer's params (%lld)", prefix,
                       (long long)l->expert_params, (long long)l->params);
    l->kind = (LayerKind)kind;
    if (!l->name[0]) return ld_fail(c, "field '%sname' is empty", prefix);
    if (l->buffers_i64 > l->buffers)
        return ld_fail(c, "field '%sbuffers_i64' (%lld) exceeds the layer's buffers (%lld)", prefix,
                       (long long)l->buffers_i64, (long long)l->buffers);
    if (l->largest_tensor > l->params)
        return ld_fail(c, "field '%slargest_tensor' (%lld) exceeds the layer's params (%lld)",
                       prefix, (long long)l->largest_tensor, (long long)l->params);
    if (!cJSON_GetObjectItemCaseSensitive(j, "tensors") && cJSON_GetObjectItemCaseSensitive(j, "tensor_dim0"))
        return ld_fail(c, "field '%stensor_dim0' needs 'tensors' (the element counts it divides)", prefix);
    return read_tensors(c, j, prefix, l);
}

/* Optional "moe": {n_experts, top_k, d_ff_expert, d_ff_shared, router, norm_topk, fp32_weights,
 * shared_gate, shared_last, bias, clamped_glu, router_logits, n_group, topk_group}: a mixture of experts (MoeSpec). */
static int read_moe(LoadCtx *c, const cJSON *root, MoeSpec *e) {
    const cJSON *moe = cJSON_GetObjectItemCaseSensitive(root, "moe");
    int router = 0;
    if (!moe) return 0;
    if (!cJSON_IsObject(moe)) return ld_fail(c, "field 'moe' must be an object");
    if (ld_known_keys(c, moe, "moe.", MOE_KEYS) ||
        ld_int32(c, moe, "moe.", "n_experts", 1, 0, 1, 65536, &e->n_experts) ||
        ld_int32(c, moe, "moe.", "top_k", 1, 0, 1, 65536, &e->top_k) ||
        ld_int(c, moe, "moe.", "d_ff_expert", 1, 0, 1, 1 << 22, &e->d_ff_expert) ||
        ld_int(c, moe, "moe.", "d_ff_shared", 0, 0, 0, 1 << 24, &e->d_ff_shared) ||
        ld_enum(c, moe, "moe.", "router", 0, 0, router_name, MOE_ROUTER_COUNT, &router) ||
        ld_bool(c, moe, "moe.", "norm_topk", 0, 0, 1, &e->norm_topk) ||
        ld_bool(c, moe, "moe.", "fp32_weights", 0, 0, 1, &e->fp32_weights) ||
        ld_bool(c, moe, "moe.", "shared_gate", 0, 0, 1, &e->shared_gate) ||
        ld_bool(c, moe, "moe.", "shared_last", 0, 0, 1, &e->shared_last) ||
        ld_bool(c, moe, "moe.", "bias", 0, 0, 1, &e->bias) ||
        ld_bool(c, moe, "moe.", "clamped_glu", 0, 0, 1, &e->clamped_glu) ||
        ld_bool(c, moe, "moe.", "router_logits", 0, 0, 1, &e->router_logits) ||
        ld_int32(c, moe, "moe.", "n_group", 0, 0, 0, 65536, &e->n_group) ||
        ld_int32(c, moe, "moe.", "topk_group", 0, 0, 0, 65536, &e->topk_group))
        return -1;
    e->router = (MoeRouter)router;
    if (e->top_k > e->n_experts)
        return ld_fail(c, "field 'moe.top_k' (%d) exceeds 'moe.n_experts' (%d)", e->top_k, e->n_experts);
    return 0;
}

/* Optional "mla": {q_rank, kv_rank, rope_dim, nope_dim, v_dim}: latent attention (MlaSpec). */
static int read_mla(LoadCtx *c, const cJSON *root, MlaSpec *a) {
    const cJSON *mla = cJSON_GetObjectItemCaseSensitive(root, "mla");
    if (!mla) return 0;
    if (!cJSON_IsObject(mla)) return ld_fail(c, "field 'mla' must be an object");
    return ld_known_keys(c, mla, "mla.", MLA_KEYS) || ld_int(c, mla, "mla.", "q_rank", 0, 0, 0, 65536, &a->q_rank) ||
           ld_int(c, mla, "mla.", "kv_rank", 1, 0, 1, 65536, &a->kv_rank) ||
           ld_int(c, mla, "mla.", "rope_dim", 1, 0, 0, 65536, &a->rope_dim) ||
           ld_int(c, mla, "mla.", "nope_dim", 1, 0, 0, 65536, &a->nope_dim) ||
           ld_int(c, mla, "mla.", "v_dim", 1, 0, 1, 65536, &a->v_dim) ? -1 : 0;
}

/* Hyper-parameters: required (and range-checked like plan_model_transformer) for the
 * transformer families, optional elsewhere. */
static int read_hyper(LoadCtx *c, const cJSON *root, ModelSpec *m) {
    int tf = m->arch == ARCH_DECODER || m->arch == ARCH_ENCODER || m->arch == ARCH_ENC_DEC;
    int lo = tf ? 1 : 0, norm, mlp;
    if (ld_int32(c, root, "", "n_layer", tf, 0, lo, 100000, &m->n_layer) ||
        ld_int32(c, root, "", "n_enc_layer", m->arch == ARCH_ENC_DEC, 0,
                 m->arch == ARCH_ENC_DEC ? 1 : 0, 100000, &m->n_enc_layer) ||
        ld_int(c, root, "", "d_model", tf, 0, lo, 1 << 20, &m->d_model) ||
        ld_int32(c, root, "", "n_head", tf, 0, lo, 65536, &m->n_head) ||
        ld_int32(c, root, "", "n_kv_head", 0, m->n_head, lo, 65536, &m->n_kv_head) ||
        ld_int(c, root, "", "d_head", 0, m->n_head ? m->d_model / m->n_head : 0, lo, 65536,
               &m->d_head) ||
        ld_int(c, root, "", "d_ff", tf, 0, lo, 1 << 22, &m->d_ff) ||
        ld_int(c, root, "", "vocab", tf, 0, lo, 1 << 24, &m->vocab) ||
        ld_int(c, root, "", "max_seq", tf, 0, lo, 1 << 24, &m->max_seq) ||
        ld_bool(c, root, "", "tied_embeddings", 0, 0, 1, &m->tied_embeddings) ||
        ld_bool(c, root, "", "root_only", 0, 0, 0, &m->root_only) ||
        ld_bool(c, root, "", "fused_qkv", 0, 0, 1, &m->fused_qkv) ||
        ld_bool(c, root, "", "learned_pos", 0, 0, 1, &m->learned_pos) ||
        ld_int32(c, root, "", "addmm_proj", 0, 0, 0, PLAN_PROJ_QKV | PLAN_PROJ_OUT | PLAN_PROJ_MLP, &m->addmm_proj) ||
        ld_enum(c, root, "", "norm", 0, 0, norm_name, N_NORMS, &norm) ||
        ld_enum(c, root, "", "mlp", 0, 0, mlp_name, N_MLPS, &mlp) ||
        ld_str(c, root, "", "act_fn", 0, "", m->act_fn, sizeof(m->act_fn)) ||
        ld_str(c, root, "", "family", 0, "", m->family, sizeof(m->family)) ||
        ld_num(c, root, "", "dropout", 0, 0.0, 0.0, 1.0, &m->dropout) ||
        ld_int32(c, root, "", "image_size", m->arch == ARCH_CNN, 0,
                 m->arch == ARCH_CNN ? 1 : 0, 1 << 16, &m->image_size) ||
        ld_int32(c, root, "", "in_channels", m->arch == ARCH_CNN, 0,
                 m->arch == ARCH_CNN ? 1 : 0, 1 << 16, &m->in_channels))
        return -1;
    m->norm = (NormKind)norm;
    m->mlp = (MlpKind)mlp;
    if (read_moe(c, root, &m->moe) || read_mla(c, root, &m->mla) ||
        ld_bool(c, root, "", "attn_sinks", 0, 0, 1, &m->attn_sinks) ||
        ld_int32(c, root, "", "qk_norm", 0, 0, 0, 3, &m->qk_norm) ||
        ld_int32(c, root, "", "nope_every", 0, 0, 0, 100000, &m->nope_every))
        return -1;
    if (tf) {
        if (!cJSON_GetObjectItemCaseSensitive(root, "d_head") && m->d_model % m->n_head != 0)
            return ld_fail(c, "d_model %lld is not divisible by n_head %d: give d_head",
                           (long long)m->d_model, m->n_head);
        if (m->n_head % m->n_kv_head != 0)
            return ld_fail(c, "n_head %d is not a multiple of n_kv_head %d", m->n_head,
                           m->n_kv_head);
    }
    return 0;
}

int ld_memplan_json(ModelSpec *m, const cJSON *root, LoadCtx *c) {
    int64_t version;
    int arch;
    if (ld_known_keys(c, root, "", TOP_KEYS) ||
        ld_int(c, root, "", "memplan_model", 1, 0, 0, LD_MAX_EXACT, &version))
        return -1;
    if (version != MEMPLAN_MODEL_VERSION)
        return ld_fail(c, "memplan_model version %lld is not supported (this memplan reads "
                       "version %d)", (long long)version, MEMPLAN_MODEL_VERSION);
    const cJSON *d = cJSON_GetObjectItemCaseSensitive(root, "description");
    if (d && !cJSON_IsString(d)) return ld_fail(c, "field 'description' must be a string");
    const cJSON *layers = cJSON_GetObjectItemCaseSensitive(root, "layers");
    if (!layers) return ld_fail(c, "missing field 'layers'");
    if (!cJSON_IsArray(layers) || !layers->child) {
        char got[64];
        ld_describe(layers, got, sizeof(got));
        return ld_fail(c, "field 'layers' must be a non-empty list of layers (got %s)",
                       cJSON_IsArray(layers) ? "an empty list" : got);
    }
    plan_model_init(m, "", ARCH_GENERIC);
    if (ld_str(c, root, "", "name", 1, NULL, m->name, sizeof(m->name)) ||
        ld_enum(c, root, "", "arch", 1, -1, arch_name, ARCH_KIND_COUNT, &arch))
        goto fail;
    if (!m->name[0]) {
        ld_fail(c, "field 'name' is empty");
        goto fail;
    }
    m->arch = (ArchKind)arch;
    if (read_hyper(c, root, m) || read_block(c, root, &m->block)) goto fail;

    int64_t total = 0;
    int blocks = 0, i = 0;
    for (const cJSON *j = layers->child; j; j = j->next, i++) {
        LayerSpec l;
        if (read_layer(c, j, i, &l)) goto fail;
        total += l.params;
        if (total > LD_MAX_PARAMS) {
            ld_fail(c, "more than 10^15 parameters in all (at layers[%d])", i);
            goto fail;
        }
        blocks += l.kind == LAYER_BLOCK;
        /* units: a unit's layers are consecutive, units numbered in order from 1 (a block
           given without one starts the next) */
        int units = plan_model_units(m), last = m->n_layers ? m->layers[m->n_layers - 1].unit : 0;
        if (l.unit > 0 && l.unit != units + 1 && !(l.unit == units && last == units)) {
            ld_fail(c, "field 'layers[%d].unit' must be %d (the next unit)%s, or 0 for the root (got %d): "
                    "a unit's layers are consecutive and units are numbered in order from 1", i, units + 1,
                    last > 0 ? " or the previous layer's" : "", l.unit);
            goto fail;
        }
        if (!plan_model_add_layer(m, &l)) {
            ld_fail(c, "out of host memory at layers[%d]", i);
            goto fail;
        }
    }
    /* the activation model walks the blocks; they must agree with the hyper-parameters */
    if ((m->arch == ARCH_DECODER || m->arch == ARCH_ENCODER || m->arch == ARCH_ENC_DEC) &&
        blocks != m->n_layer + m->n_enc_layer) {
        ld_fail(c, "n_layer %d + n_enc_layer %d blocks expected, but layers[] has %d of kind "
                "'block'", m->n_layer, m->n_enc_layer, blocks);
        goto fail;
    }
    if (m->root_only)   /* every layer in the root: blocks too (plan_model_add_layer numbered them) */
        for (int k = 0; k < m->n_layers; k++) m->layers[k].unit = 0;
    return 0;
fail:
    plan_model_free(m);
    return -1;
}
