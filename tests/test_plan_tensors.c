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
