/* test_plan_tensors.c — the model description's parameter tensors (LayerSpec.tensor_elems)
 * against transformers 5.24 / torchvision: len(list(model.parameters())), their total, the
 * largest, and the tensors below DeepSpeed's stage3_param_persistence_threshold (1e5 elements),
 * counted on the meta device with the harness's builder (bench/torch/models.py build(name,
 * "eager", 0.0, device="meta")). t5-v1_1-base: transformers 5 ties its head whatever the config
 * says (T5Config), so it counts as t5-base plus the gated wi_1 per block. */
#include <criterion/criterion.h>
#include <string.h>

#include "plan_load.h"
#include "plan_model.h"
#include "test_plan.h"

typedef struct {
    const char *model;        /* zoo name or tests/data/hf file */
    int64_t tensors, params, largest, small_tensors, small_elems;
} TensorCount;

/* measured: transformers 5.24.0, torchvision (torch 2.15.0) */
static const TensorCount COUNTS[] = {
    {"gpt2-tiny", 28, 120576, 16384, 28, 120576},
    {"gpt2-mini", 52, 940800, 131072, 51, 809728},
    {"gpt2", 148, 124439808, 38597376, 98, 121344},
    {"llama2-7b", 291, 6738415616, 131072000, 65, 266240},
    {"bert-base", 202, 109514298, 23440896, 127, 155706},
    {"resnet50", 161, 25557032, 2359296, 126, 768040},
    {"tests/data/hf/bert-base-uncased.json", 202, 109514298, 23440896, 127, 155706},
    {"tests/data/hf/gemma-2b.json", 164, 2506172416, 524288000, 37, 75776},
    {"tests/data/hf/gpt2.json", 148, 124439808, 38597376, 98, 121344},
    {"tests/data/hf/llama-3-8b.json", 291, 8030261248, 525336576, 65, 266240},
    {"tests/data/hf/llama-3.2-1b.json", 146, 1235814400, 262668288, 33, 67584},
    {"tests/data/hf/mistral-7b-v0.1.json", 291, 7241732096, 131072000, 65, 266240},
    {"tests/data/hf/opt-125m.json", 196, 125239296, 38608896, 122, 121344},
    {"tests/data/hf/opt-350m.json", 388, 331196416, 25739264, 240, 319488},
    {"tests/data/hf/pythia-160m.json", 148, 162322944, 38633472, 98, 121344},
    {"tests/data/hf/qwen2-0.5b.json", 290, 494032768, 136134656, 121, 71552},
    {"tests/data/hf/t5-base.json", 257, 222903552, 24674304, 64, 48384},
    {"tests/data/hf/t5-v1_1-base.json", 281, 222903552, 24674304, 64, 48384},
    /* params.json lists named_parameters(): the same tensors */
    {"tests/data/params/gpt2.json", 148, 124439808, 38597376, 98, 121344},
    {"tests/data/params/resnet50.json", 161, 25557032, 2359296, 126, 768040},
};

static ModelSpec load(const char *name) {
    ModelSpec m;
    char msg[512];
    if (strchr(name, '/')) {
        cr_assert_eq(plan_load_model(&m, name, msg, sizeof(msg)), 0, "%s: %s", name, msg);
        return m;
    }
    return zoo(name);
}

Test(plan_tensors, every_model_should_list_the_tensors_transformers_registers) {
    for (size_t k = 0; k < sizeof COUNTS / sizeof COUNTS[0]; k++) {
        const TensorCount *e = &COUNTS[k];
        ModelSpec m = load(e->model);
        cr_assert(plan_model_tensors_known(&m), "%s: tensors unknown", e->model);
        int64_t n = 0, sum = 0, largest = 0, small = 0, small_elems = 0;
        for (int i = 0; i < m.n_layers; i++)
            for (int j = 0; j < m.layers[i].n_tensors; j++) {
                int64_t t = m.layers[i].tensor_elems[j];
                n++;
                sum += t;
                if (t > largest) largest = t;
                if (t < 100000) { small++; small_elems += t; }
            }
        cr_expect_eq(plan_model_n_tensors(&m), e->tensors, "%s: %lld tensors, transformers %lld",
                     e->model, (long long)plan_model_n_tensors(&m), (long long)e->tensors);
        cr_expect_eq(n, e->tensors, "%s", e->model);
        cr_expect_eq(sum, e->params, "%s: %lld elements", e->model, (long long)sum);
        cr_expect_eq(largest, e->largest, "%s: largest %lld", e->model, (long long)largest);
        cr_expect_eq(small, e->small_tensors, "%s: %lld small tensors", e->model, (long long)small);
        cr_expect_eq(small_elems, e->small_elems, "%s: %lld small elements", e->model,
                     (long long)small_elems);
        plan_model_free(&m);
    }
}

/* FSDP2's local shard on n ranks, Σ over model.parameters() of ceil(dim0 / n) x (numel / dim0)
   (torch.chunk along dim 0, every shard padded to the first: _fsdp_param.py _init_sharded_param),
   from the shapes transformers 5.24 / torchvision build on the meta device (bench/torch/models.py). */
typedef struct {
    const char *model;
    int64_t shard[3];         /* n = 2, 3, 7 */
} Dim0Shard;

static const Dim0Shard SHARDS[] = {
    {"gpt2-tiny", {60288, 41056, 18254}},
    {"gpt2-mini", {470400, 315274, 137970}},
    {"gpt2", {62220288, 41480960, 17800408}},
    {"llama2-7b", {3369207808, 2246900438, 963499210}},
    {"bert-base", {54757149, 36505278, 15669291}},
    {"resnet50", {12778516, 8546130, 3685943}},
    {"tests/data/hf/bert-base-uncased.json", {54757149, 36505278, 15669291}},
    {"tests/data/hf/gemma-2b.json", {1253086208, 835613367, 358247001}},
    {"tests/data/hf/gpt2.json", {62220288, 41480960, 17800408}},
    {"tests/data/hf/llama-3-8b.json", {4015130624, 2677496534, 1147991242}},
    {"tests/data/hf/llama-3.2-1b.json", {617907200, 412047371, 176733637}},
    {"tests/data/hf/mistral-7b-v0.1.json", {3620866048, 2414656214, 1035343050}},
    {"tests/data/hf/opt-125m.json", {62619648, 41747456, 17914072}},
    {"tests/data/hf/opt-350m.json", {165598208, 110548128, 47476984}},
    {"tests/data/hf/pythia-160m.json", {81161472, 54107648, 23212504}},
    {"tests/data/hf/qwen2-0.5b.json", {247016384, 164774483, 70613776}},
    {"tests/data/hf/t5-base.json", {111451776, 74301704, 31898908}},
    {"tests/data/hf/t5-v1_1-base.json", {111451776, 74313992, 31905052}},
    /* params.json carries the shapes themselves */
    {"tests/data/params/gpt2.json", {62220288, 41480960, 17800408}},
    {"tests/data/params/resnet50.json", {12778516, 8546130, 3685943}},
};

Test(plan_tensors, every_tensor_should_know_its_dim0_as_torch_shapes_it) {
    static const int64_t N[3] = {2, 3, 7};
    for (size_t k = 0; k < sizeof SHARDS / sizeof SHARDS[0]; k++) {
        const Dim0Shard *e = &SHARDS[k];
        ModelSpec m = load(e->model);
        cr_assert(plan_model_dim0_known(&m), "%s: a dim 0 is unknown", e->model);
        for (int j = 0; j < 3; j++) {
            int64_t s = 0;
            for (int i = 0; i < m.n_layers; i++) s += plan_layer_shard_dim0(&m.layers[i], N[j]);
            cr_expect_eq(s, e->shard[j], "%s on %lld ranks: %lld, torch %lld", e->model, (long long)N[j],
                         (long long)s, (long long)e->shard[j]);
        }
        plan_model_free(&m);
    }
}

Test(plan_tensors, dim0_should_follow_each_modules_weight_layout) {
    /* GPT-2's Conv1D stores (in, out): c_attn (h, 3h) has dim 0 h; nn.Linear (out, in), nn.Embedding
       (V, e), a conv (out_c, in_c, k, k), 1-D biases and norms their length */
    ModelSpec m = zoo("gpt2-mini");
    static const int64_t want[] = {128, 128, 128, 384, 128, 128, 128, 128, 128, 512, 512, 128};
    for (int j = 0; j < 12; j++) cr_expect_eq(m.layers[1].tensor_dim0[j], want[j], "tensor %d", j);
    cr_expect_eq(m.layers[0].tensor_dim0[0], 1024);   /* wte (V, h) */
    cr_expect_eq(m.layers[0].tensor_dim0[1], 128);    /* wpe (positions, h) */
    plan_model_free(&m);
    m = zoo("llama2-7b");                               /* q, k, v, o, gate, up, down: (out, in) */
    static const int64_t llama[] = {4096, 4096, 4096, 4096, 11008, 11008, 4096, 4096, 4096};
    for (int j = 0; j < 9; j++) cr_expect_eq(m.layers[1].tensor_dim0[j], llama[j], "tensor %d", j);
    cr_expect_eq(m.layers[m.n_layers - 1].tensor_dim0[0], 32000);   /* lm_head (V, h) */
    plan_model_free(&m);
    m = zoo("resnet50");
    cr_expect_eq(m.layers[0].tensor_dim0[0], 64);     /* conv1 (64, 3, 7, 7) */
    cr_expect_eq(m.layers[m.n_layers - 1].tensor_dim0[0], 1000);    /* fc (1000, 2048) */
    plan_model_free(&m);
}

Test(plan_tensors, an_unknown_dim0_should_make_the_shard_unknown) {
    LayerSpec l;
    memset(&l, 0, sizeof(l));
    l.params = 12;
    plan_layer_add_tensor_dim0(&l, 8, 4);
    plan_layer_add_tensor(&l, 4);
    cr_expect_eq(plan_layer_shard_dim0(&l, 3), -1);
    l.tensor_dim0[1] = 4;
    cr_expect_eq(plan_layer_shard_dim0(&l, 3), 2 * 2 + 2 * 1);   /* ceil(4/3) rows of 2, of 1 */
    plan_layer_add_tensor_dim0(&l, 9, 2);                        /* 2 does not divide 9: unknown */
    cr_expect_eq(l.tensor_dim0[2], 0);
}

Test(plan_tensors, gpt2_blocks_should_follow_the_modules_registration_order) {
    /* GPT2Block: ln_1 (w, b), attn.c_attn (h x 3h, 3h), attn.c_proj (h x h, h), ln_2 (w, b),
       mlp.c_fc (h x 4h, 4h), mlp.c_proj (4h x h, h) */
    ModelSpec m = zoo("gpt2-mini");
    const LayerSpec *b = &m.layers[1];
    static const int64_t want[] = {128, 128, 49152, 384, 16384, 128, 128, 128, 65536, 512, 65536, 128};
    cr_assert_eq(b->n_tensors, 12);
    for (int j = 0; j < 12; j++) cr_expect_eq(b->tensor_elems[j], want[j], "tensor %d", j);
    cr_expect_eq(m.layers[0].n_tensors, 2);        /* wte, wpe */
    cr_expect_eq(m.layers[0].tensor_elems[0], 131072);
    plan_model_free(&m);
}

Test(plan_tensors, a_generic_model_should_say_its_tensors_are_unknown) {
    ModelSpec m;
    char msg[256];
    cr_assert_eq(plan_model_generic(&m, "g", 1000000, 4, msg, sizeof(msg)), 0);
    cr_expect_not(plan_model_tensors_known(&m));
    cr_expect_eq(plan_model_n_tensors(&m), -1);
    plan_model_free(&m);
}

Test(plan_tensors, a_layer_should_refuse_more_tensors_than_it_can_hold) {
    LayerSpec l;
    memset(&l, 0, sizeof(l));
    for (int j = 0; j < PLAN_LAYER_MAX_TENSORS; j++) cr_assert_eq(plan_layer_add_tensor(&l, 1), 0);
    cr_expect_eq(plan_layer_add_tensor(&l, 1), -1);
    cr_expect_eq(l.n_tensors, -1);
}
