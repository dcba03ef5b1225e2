/* plan_load_params.c — a PyTorch parameter list (params.json) → ModelSpec with exact model
 * states. The format (docs/model-formats.md):
 *   {"parameters": {name: shape, ...},          from model.named_parameters()
 *    "buffers": {name: shape, ...},             optional, from model.named_buffers()
 *    "batchnorm": [module name, ...],           optional; else BN = modules with running_mean
 *    "activation_bytes_per_sample": N,          optional, measured saved bytes per sample
 *    "max_seq": N, "name": "..."}               optional
 * or just the bare {name: shape} map.
 *
 * Layers (the FSDP units / ZeRO-3 gather units) come from the names: a tensor belongs to the
 * prefix up to and including its first numeric component ("transformer.h.7", "layer3.2"),
 * else to its top-level module ("transformer", "fc"). Each BatchNorm module is a layer of its
 * own (kind bn, bn_channels = C), so SyncBN counts one collective pair per BN layer. Numbered
 * prefixes are the repeated blocks: LayerSpec.unit, with their BatchNorm layers; each tensor's
 * dim 0 is its first size. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan_load_internal.h"

/* ---- a small string → int map (open addressing, FNV-1a), keys copied ---- */

typedef struct {
    char **keys;
    int *vals;
    size_t cap, n;
} StrMap;

static uint64_t hash(const char *s, size_t len) {
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < len; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ULL;
    return h;
}

static void map_free(StrMap *m) {
    for (size_t i = 0; i < m->cap; i++) free(m->keys[i]);
    free(m->keys);
    free(m->vals);
    memset(m, 0, sizeof(*m));
}

/* Slot of key (occupied or the empty one where it would go). */
static size_t map_slot(const StrMap *m, const char *key, size_t len) {
    size_t i = (size_t)hash(key, len) & (m->cap - 1);
    while (m->keys[i] && !(strlen(m->keys[i]) == len && memcmp(m->keys[i], key, len) == 0))
        i = (i + 1) & (m->cap - 1);
    return i;
}

static int map_get(const StrMap *m, const char *key, size_t len) {
    if (!m->cap) return -1;
    size_t i = map_slot(m, key, len);
    return m->keys[i] ? m->vals[i] : -1;
}

static int map_grow(StrMap *m) {
    size_t cap = m->cap ? 2 * m->cap : 64;
    StrMap g = {calloc(cap, sizeof(char *)), calloc(cap, sizeof(int)), cap, 0};
    if (!g.keys || !g.vals) {
        free(g.keys);
        free(g.vals);
        return -1;
    }
    for (size_t i = 0; i < m->cap; i++)
        if (m->keys[i]) {
            size_t j = map_slot(&g, m->keys[i], strlen(m->keys[i]));
            g.keys[j] = m->keys[i];
            g.vals[j] = m->vals[i];
            g.n++;
        }
    free(m->keys);
    free(m->vals);
    *m = g;
    return 0;
}

/* Sets key → val (overwriting). -1 when out of memory. */
static int map_put(StrMap *m, const char *key, size_t len, int val) {
    if (2 * (m->n + 1) > m->cap && map_grow(m)) return -1;
    size_t i = map_slot(m, key, len);
    if (!m->keys[i]) {
        char *k = malloc(len + 1);
        if (!k) return -1;
        memcpy(k, key, len);
        k[len] = '\0';
        m->keys[i] = k;
        m->n++;
    }
    m->vals[i] = val;
    return 0;
}

/* ---- names ---- */

static int all_digits(const char *s, size_t len) {
    if (len == 0) return 0;
    for (size_t i = 0; i < len; i++)
        if (s[i] < '0' || s[i] > '9') return 0;
    return 1;
}

/* Length of the repeated block a tensor belongs to: its name up to and including the first
 * numeric component ("layer3.2", "transformer.h.7"); 0 when it has none. */
static size_t block_len(const char *name) {
    size_t n = strlen(name), start = 0;
    for (size_t i = 0; i <= n; i++) {
        if (i == n || name[i] == '.') {
            if (all_digits(name + start, i - start)) return i;
            start = i + 1;
        }
    }
    return 0;
}

/* Length of the layer key of a tensor name: its block, else the first component. */
static size_t group_len(const char *name) {
    size_t b = block_len(name);
    if (b) return b;
    const char *dot = strchr(name, '.');
    return dot ? (size_t)(dot - name) : strlen(name);
}

/* Length of the module that owns a tensor: everything before the last '.' (0 = the root). */
static size_t module_len(const char *name) {
    const char *dot = strrchr(name, '.');
    return dot ? (size_t)(dot - name) : 0;
}

static void layer_name(char *out, size_t outlen, const char *key, size_t len) {
    if (len == 0) snprintf(out, outlen, "(root)");
    else if (len < outlen) snprintf(out, outlen, "%.*s", (int)len, key);
    else snprintf(out, outlen, "...%.*s", (int)(outlen - 4), key + len - (outlen - 4));
}

/* ---- the loader ---- */

typedef struct {
    int64_t bn_mean;       /* running_mean elements seen (0 = none) */
    int64_t bn_weight;     /* BN weight elements seen (0 = none) */
} LayerNote;

typedef struct {
    ModelSpec *m;
    LoadCtx *c;
    StrMap layers;         /* layer key → index into m->layers */
    StrMap bn;             /* BatchNorm module → 1 (0 once something belongs to it) */
    StrMap seen;           /* full tensor names, to reject duplicates */
    StrMap blocks;         /* block prefix → its FSDP unit (1, 2, ... in order of appearance) */
    int n_blocks;
    LayerNote *notes;
    int notes_cap;
    int64_t total_params, total_buffers;
} ParamsLoad;

static int oom(ParamsLoad *p) { return ld_fail(p->c, "out of host memory reading the parameter list"); }

/* The layer a tensor of that name belongs to (created on first use). */
static int layer_for(ParamsLoad *p, const char *name, int *is_bn_module) {
    size_t ml = module_len(name);
    int in_bn = map_get(&p->bn, name, ml) >= 0;
    size_t kl = in_bn ? ml : group_len(name);
    *is_bn_module = in_bn;
    if (in_bn && map_put(&p->bn, name, ml, 0)) return oom(p);
    int idx = map_get(&p->layers, name, kl);
    if (idx < 0) {
        LayerSpec l;
        memset(&l, 0, sizeof(l));
        l.kind = LAYER_OTHER;
        layer_name(l.name, sizeof(l.name), name, kl);
        /* a layer under a numbered prefix is in that repeated block's FSDP unit (its BatchNorm
           layers too); the others are the root's */
        size_t bl = block_len(name);
        if (bl) {
            int u = map_get(&p->blocks, name, bl);
            if (u < 0 && map_put(&p->blocks, name, bl, u = ++p->n_blocks)) return oom(p);
            l.unit = u;
        }
        if (!plan_model_add_layer(p->m, &l)) return oom(p);
        idx = p->m->n_layers - 1;
        if (map_put(&p->layers, name, kl, idx)) return oom(p);
        if (idx >= p->notes_cap) {
            int cap = p->notes_cap ? 2 * p->notes_cap : 64;
            LayerNote *nn = realloc(p->notes, (size_t)cap * sizeof(*nn));
            if (!nn) return oom(p);
            memset(nn + p->notes_cap, 0, (size_t)(cap - p->notes_cap) * sizeof(*nn));
            p->notes = nn;
            p->notes_cap = cap;
        }
    }
    if (in_bn) p->m->layers[idx].kind = LAYER_BN;
    return idx;
}

/* Elements of a shape [d0, d1, ...] ([] = a scalar), and d0 (0 for a scalar). */
static int numel(ParamsLoad *p, const char *what, const char *name, const cJSON *shape,
                 int64_t *out, int64_t *dim0) {
    if (!cJSON_IsArray(shape)) {
        char got[64];
        ld_describe(shape, got, sizeof(got));
        return ld_fail(p->c, "%s '%.80s': the shape must be a list of sizes (got %s)", what,
                       name, got);
    }
    int64_t n = 1;
    int k = 0;
    for (const cJSON *d = shape->child; d; d = d->next, k++) {
        char dim[160];
        int64_t v;
        snprintf(dim, sizeof(dim), "%s '%.80s' dimension %d", what, name, k);
        if (ld_value_int(p->c, d, dim, 0, LD_MAX_EXACT, &v)) return -1;
        if (v > 0 && n > LD_MAX_EXACT / v)
            return ld_fail(p->c, "%s '%.80s' has more than 2^53 elements", what, name);
        n *= v;
        if (k == 0) *dim0 = v;
    }
    *out = n;
    return 0;
}

static int add_tensor(ParamsLoad *p, const cJSON *t, int is_param) {
    const char *what = is_param ? "parameter" : "buffer";
    const char *name = t->string ? t->string : "";
    if (!name[0]) return ld_fail(p->c, "a %s has an empty name", what);
    size_t len = strlen(name);
    if (map_get(&p->seen, name, len) >= 0)
        return ld_fail(p->c, "%s '%.80s' is listed twice", what, name);
    if (map_put(&p->seen, name, len, 1)) return oom(p);
    int64_t n = 0, dim0 = 0;
    if (numel(p, what, name, t, &n, &dim0)) return -1;
    int in_bn;
    int idx = layer_for(p, name, &in_bn);
    if (idx < 0) return -1;
    LayerSpec *l = &p->m->layers[idx];
    const char *leaf = name + module_len(name) + (module_len(name) ? 1 : 0);
    if (is_param) {
        p->total_params += n;
        if (p->total_params > LD_MAX_PARAMS)
            return ld_fail(p->c, "more than 10^15 parameters: check the shapes");
        l->params += n;
        if (n > l->largest_tensor) l->largest_tensor = n;
        /* FSDP2 shards along dim 0 (a scalar's stays unknown); beyond PLAN_LAYER_MAX_TENSORS
           the layer's tensors are unknown */
        plan_layer_add_tensor_dim0(l, n, dim0);
        if (in_bn && strcmp(leaf, "weight") == 0) p->notes[idx].bn_weight = n;
    } else {
        p->total_buffers += n;
        if (p->total_buffers > LD_MAX_EXACT)
            return ld_fail(p->c, "more than 2^53 buffer elements: check the shapes");
        l->buffers += n;
        if (in_bn && strcmp(leaf, "running_mean") == 0) p->notes[idx].bn_mean = n;
    }
    return 0;
}

/* BatchNorm modules: the explicit list, or every module with a running_mean buffer. */
static int find_bn(ParamsLoad *p, const cJSON *list, const cJSON *buffers) {
    if (list) {
        if (!cJSON_IsArray(list)) {
            char got[64];
            ld_describe(list, got, sizeof(got));
            return ld_fail(p->c, "field 'batchnorm' must be a list of module names (got %s)", got);
        }
        int k = 0;
        for (const cJSON *it = list->child; it; it = it->next, k++) {
            if (!cJSON_IsString(it) || !it->valuestring) {
                char got[64];
                ld_describe(it, got, sizeof(got));
                return ld_fail(p->c, "field 'batchnorm[%d]' must be a module name (got %s)", k,
                               got);
            }
            if (map_put(&p->bn, it->valuestring, strlen(it->valuestring), 1)) return oom(p);
        }
        return 0;
    }
    if (!buffers) return 0;
    static const char suffix[] = ".running_mean";
    size_t sl = sizeof(suffix) - 1;
    for (const cJSON *it = buffers->child; it; it = it->next) {
        const char *n = it->string ? it->string : "";
        size_t len = strlen(n);
        if (strcmp(n, "running_mean") == 0) {
            if (map_put(&p->bn, n, 0, 1)) return oom(p);
        } else if (len > sl && strcmp(n + len - sl, suffix) == 0) {
            if (map_put(&p->bn, n, len - sl, 1)) return oom(p);
        }
    }
    return 0;
}

static int finish_bn(ParamsLoad *p) {
    for (size_t i = 0; i < p->bn.cap; i++)
        if (p->bn.keys[i] && p->bn.vals[i] == 1)
            return ld_fail(p->c, "batchnorm module '%.80s' has no parameters or buffers in the "
                           "list", p->bn.keys[i]);
    for (int i = 0; i < p->m->n_layers; i++) {
        LayerSpec *l = &p->m->layers[i];
        if (l->kind != LAYER_BN) continue;
        const LayerNote *nt = &p->notes[i];
        if (nt->bn_mean && nt->bn_weight && nt->bn_mean != nt->bn_weight)
            return ld_fail(p->c, "batchnorm '%s': weight has %lld elements but running_mean has "
                           "%lld", l->name, (long long)nt->bn_weight, (long long)nt->bn_mean);
        l->bn_channels = nt->bn_mean ? nt->bn_mean : nt->bn_weight;
        if (l->bn_channels <= 0)
            return ld_fail(p->c, "batchnorm '%s': cannot tell its channels (no weight and no "
                           "running_mean)", l->name);
    }
    return 0;
}

int ld_params_json(ModelSpec *m, const cJSON *root, LoadCtx *c) {
    static const char *const KNOWN[] = {"parameters", "buffers", "batchnorm",
                                        "activation_bytes_per_sample", "max_seq", "name", NULL};
    const cJSON *params = cJSON_GetObjectItemCaseSensitive(root, "parameters");
    int wrapped = cJSON_IsObject(params);
    const cJSON *buffers = NULL, *bnlist = NULL;
    int64_t act_bytes = -1, max_seq = 0;
    char name[64] = "";
    if (wrapped) {
        if (ld_known_keys(c, root, "", KNOWN)) return -1;
        buffers = cJSON_GetObjectItemCaseSensitive(root, "buffers");
        bnlist = cJSON_GetObjectItemCaseSensitive(root, "batchnorm");
        if (buffers && !cJSON_IsObject(buffers)) {
            char got[64];
            ld_describe(buffers, got, sizeof(got));
            return ld_fail(c, "field 'buffers' must be an object {name: shape} (got %s)", got);
        }
        if (ld_int(c, root, "", "activation_bytes_per_sample", 0, -1, 0, LD_MAX_EXACT,
                   &act_bytes) ||
            ld_int(c, root, "", "max_seq", 0, 0, 1, 1 << 24, &max_seq) ||
            ld_str(c, root, "", "name", 0, "", name, sizeof(name)))
            return -1;
    } else {
        params = root;
    }
    if (!params->child) return ld_fail(c, "the parameter list is empty");

    plan_model_init(m, "", ARCH_GENERIC);
    if (name[0]) snprintf(m->name, sizeof(m->name), "%s", name);
    else ld_name_from_label(c->label, m->name, sizeof(m->name));
    m->max_seq = max_seq;

    ParamsLoad p;
    memset(&p, 0, sizeof(p));
    p.m = m;
    p.c = c;
    int rc = -1;
    if (find_bn(&p, bnlist, buffers)) goto done;
    for (const cJSON *t = params->child; t; t = t->next)
        if (add_tensor(&p, t, 1)) goto done;
    if (buffers)
        for (const cJSON *t = buffers->child; t; t = t->next)
            if (add_tensor(&p, t, 0)) goto done;
    if (finish_bn(&p)) goto done;
    /* units must be consecutive runs in layer order (each block's tensors listed together, as
       named_parameters() lists them); otherwise every layer stays its own unit */
    for (int i = 0, max = 0; i < m->n_layers; i++) {
        int u = m->layers[i].unit;
        if (u == 0 || (i > 0 && m->layers[i - 1].unit == u)) continue;
        if (u == max + 1) { max = u; continue; }
        for (int k = 0; k < m->n_layers; k++) m->layers[k].unit = 0;
        break;
    }
    if (p.total_params == 0) {
        ld_fail(c, "the parameter list has no elements (every shape has a 0)");
        goto done;
    }
    /* A measured figure is spread evenly over the layers (the remainder on the first ones),
     * so the sum is exact; without it activations stay unknown, never a silent zero. */
    if (act_bytes >= 0) {
        int64_t each = act_bytes / m->n_layers, rest = act_bytes % m->n_layers;
        for (int i = 0; i < m->n_layers; i++) {
            m->layers[i].act_bytes = each + (i < rest ? 1 : 0);
            m->layers[i].act_known = 1;
        }
    }
    rc = 0;
done:
    map_free(&p.layers);
    map_free(&p.bn);
    map_free(&p.seen);
    map_free(&p.blocks);
    free(p.notes);
    return rc;
}
