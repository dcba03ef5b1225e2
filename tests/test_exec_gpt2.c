/* test_exec_gpt2.c — specifications of the GPT-2 model runtime (exec/exec_gpt2.h): parameter
 * counts, initialisation, gradients against finite differences, training on the synthetic
 * task, the exact memory layout seen by the tracked allocator, out-of-memory handling, and the
 * hooks a data-parallel strategy relies on. Everything runs on gpt2-tiny in a second or two. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec_gpt2.h"
#include "plan_zoo.h"
#include "prof_mem.h"

static void *host_alloc(void *ctx, size_t n) { (void)ctx; return malloc(n); }
static void host_free(void *ctx, void *p) { (void)ctx; free(p); }
static MemTracker *tracker(size_t limit)
{
    MemTracker *t = prof_mem_create(host_alloc, host_free, NULL, limit);
    cr_assert_not_null(t);
    return t;
}

static Gpt2Config preset(const char *name)
{
    Gpt2Config c;
    cr_assert_eq(gpt2_config_preset(&c, name), 0, "unknown preset %s", name);
    return c;
}

/* A tiny model with initialised parameters. */
static Gpt2 *tiny(MemTracker *mt, const Gpt2Hooks *hooks, void *ctx)
{
    Gpt2Config c = preset("gpt2-tiny");
    Gpt2 *m = NULL;
    cr_assert_eq(gpt2_create(&m, &c, mt, hooks, ctx), 0);
    cr_assert_eq(gpt2_init_params(m, 1234), 0);
    return m;
}

typedef struct { int B, T; int *tok, *tgt; } Batch;
static Batch batch(int B, int T, int step)
{
    Batch b = {B, T, malloc(sizeof(int) * B * T), malloc(sizeof(int) * B * T)};
    cr_assert_eq(gpt2_synthetic_batch(7, step, B, 0, 1, T, 256, b.tok, b.tgt), 0);
    return b;
}
static void batch_free(Batch *b) { free(b->tok); free(b->tgt); }

static float step_fwd_bwd(Gpt2 *m, const Batch *b)
{
    float loss = 0;
    cr_assert_eq(gpt2_forward(m, b->tok, b->tgt, b->B, b->T, &loss), 0, "%s", gpt2_error(m));
    cr_assert_eq(gpt2_backward(m), 0, "%s", gpt2_error(m));
    return loss;
}

/* ---- parameter counts ---- */

Test(exec_gpt2, presets_should_have_the_hugging_face_parameter_counts)
{
    /* gpt2-tiny by hand: wte 256·64 + wpe 64·64 + 2 blocks·(12·64² + 13·64) + lnf 2·64 */
    Gpt2Config t = preset("gpt2-tiny");
    cr_assert_eq(gpt2_cfg_num_params(&t), 256 * 64 + 64 * 64 + 2 * (12 * 64 * 64 + 13 * 64) + 2 * 64);
    struct { const char *name; int64_t params; } hf[] = {
        {"gpt2", 124439808}, {"gpt2-medium", 354823168}, {"gpt2-large", 774030080}, {"gpt2-xl", 1557611200},
    };
    for (size_t i = 0; i < sizeof hf / sizeof hf[0]; i++) {
        Gpt2Config c = preset(hf[i].name);
        cr_assert_eq(gpt2_cfg_num_params(&c), hf[i].params, "%s: %lld, Hugging Face %lld", hf[i].name,
                     (long long)gpt2_cfg_num_params(&c), (long long)hf[i].params);
        cr_assert_eq(c.vocab, 50257);
        cr_assert_eq(c.max_seq, 1024);
    }
    Gpt2Config mini = preset("gpt2-mini");
    cr_assert(mini.n_layer == 4 && mini.d_model == 128 && mini.n_head == 4 && mini.vocab == 1024 && mini.max_seq == 128);
    cr_assert_eq(gpt2_preset_count(), 6);
    cr_assert_str_eq(gpt2_preset_name(0), "gpt2-tiny");
    cr_assert_null(gpt2_preset_name(6));
}

Test(exec_gpt2, units_should_be_embeddings_then_blocks_then_final_norm)
{
    Gpt2Config c = preset("gpt2");
    cr_assert_eq(gpt2_cfg_units(&c), 14);
    cr_assert_eq(gpt2_cfg_unit_numel(&c, 0), (size_t)50257 * 768 + 1024 * 768);
    for (int u = 1; u <= 12; u++) cr_assert_eq(gpt2_cfg_unit_numel(&c, u), (size_t)12 * 768 * 768 + 13 * 768);
    cr_assert_eq(gpt2_cfg_unit_numel(&c, 13), (size_t)2 * 768);
    cr_assert_eq(gpt2_cfg_unit_numel(&c, 14), 0);
    cr_assert_eq(gpt2_cfg_unit_numel(&c, -1), 0);
}

Test(exec_gpt2, every_preset_should_have_the_planners_parameters_layer_by_layer)
{
    /* the executor runs what the planner predicts: embeddings, each block, final norm, and a
     * tied head with no parameters of its own */
    for (int i = 0; i < gpt2_preset_count(); i++) {
        Gpt2Config c = preset(gpt2_preset_name(i));
        ModelSpec ms;
        char msg[256];
        cr_assert_eq(plan_zoo_build(&ms, c.name, msg, sizeof msg), 0, "%s", msg);
        cr_assert_eq(plan_model_params(&ms), gpt2_cfg_num_params(&c), "%s", c.name);
        int blocks = 0;
        for (int k = 0; k < ms.n_layers; k++) {
            const LayerSpec *l = &ms.layers[k];
            if (l->kind == LAYER_EMBED) cr_assert_eq((size_t)l->params, gpt2_cfg_unit_numel(&c, 0), "%s", c.name);
            if (l->kind == LAYER_BLOCK) cr_assert_eq((size_t)l->params, gpt2_cfg_unit_numel(&c, ++blocks), "%s", c.name);
            if (l->kind == LAYER_NORM) cr_assert_eq((size_t)l->params, gpt2_cfg_unit_numel(&c, c.n_layer + 1), "%s", c.name);
            if (l->kind == LAYER_HEAD) cr_assert_eq(l->params, 0, "%s: the LM head is tied to wte", c.name);
        }
        cr_assert_eq(blocks, c.n_layer, "%s", c.name);
        cr_assert(ms.n_head == c.n_head && ms.d_model == c.d_model && ms.vocab == c.vocab && ms.max_seq == c.max_seq, "%s", c.name);
        plan_model_free(&ms);
    }
}

Test(exec_gpt2, created_model_should_hold_one_tracked_params_buffer_per_unit)
{
    MemTracker *mt = tracker(0);
    Gpt2 *m = tiny(mt, NULL, NULL);
    const Gpt2Config *c = gpt2_config(m);
    cr_assert_eq(prof_mem_current(mt, MEM_PARAMS), 4 * (size_t)gpt2_cfg_num_params(c));
    cr_assert_eq(prof_mem_live_count(mt), gpt2_cfg_units(c));
    for (int u = 0; u < gpt2_cfg_units(c); u++) {
        MemCategory cat;
        cr_assert_eq(prof_mem_size_of(mt, gpt2_unit_params(m, u), &cat), 4 * gpt2_unit_numel(m, u));
        cr_assert_eq(cat, MEM_PARAMS);
        cr_assert_null(gpt2_unit_grads(m, u));   /* created lazily in backward */
    }
    gpt2_destroy(m);
    cr_assert_eq(prof_mem_current_total(mt), 0);
    prof_mem_destroy(mt);
}

/* ---- initialisation ---- */

Test(exec_gpt2, init_should_follow_the_gpt2_scheme_and_be_independent_of_sharding)
{
    Gpt2Config c = preset("gpt2-tiny");
    int C = c.d_model, L = c.n_layer;
    size_t n0 = gpt2_cfg_unit_numel(&c, 0), n1 = gpt2_cfg_unit_numel(&c, 1);
    float *u0 = malloc(4 * n0), *u1 = malloc(4 * n1), *again = malloc(4 * n1), *other = malloc(4 * n1);
    cr_assert_eq(gpt2_init_unit_range(&c, 0, 99, 0, n0, u0), 0);
    cr_assert_eq(gpt2_init_unit_range(&c, 1, 99, 0, n1, u1), 0);
    /* wte: normal(0, 0.02) */
    double s = 0, s2 = 0;
    size_t nwte = (size_t)c.vocab * C;
    for (size_t i = 0; i < nwte; i++) { s += u0[i]; s2 += (double)u0[i] * u0[i]; }
    double mean = s / nwte, sd = sqrt(s2 / nwte - mean * mean);
    cr_assert(fabs(mean) < 1e-3 && fabs(sd - 0.02) < 1e-3, "wte mean %g sd %g", mean, sd);
    /* block: ln1w ones, ln1b zeros, attprojw sd 0.02/sqrt(2L), attprojb zeros */
    for (int i = 0; i < C; i++) cr_assert(u1[i] == 1.0f && u1[C + i] == 0.0f);
    size_t qkvb = 2 * C + 3 * C * C, attprojw = qkvb + 3 * C, attprojb = attprojw + C * C;
    for (int i = 0; i < 3 * C; i++) cr_assert(u1[qkvb + i] == 0.0f);
    s = s2 = 0;
    for (size_t i = attprojw; i < attprojb; i++) { s += u1[i]; s2 += (double)u1[i] * u1[i]; }
    sd = sqrt(s2 / (C * C) - (s / (C * C)) * (s / (C * C)));
    cr_assert(fabs(sd - 0.02 / sqrt(2.0 * L)) < 1e-3, "attprojw sd %g", sd);
    /* any shard equals the same slice of the whole unit; the same seed gives the same bits */
    size_t off = n1 / 3, len = n1 / 2;
    cr_assert_eq(gpt2_init_unit_range(&c, 1, 99, off, len, again), 0);
    cr_assert(memcmp(again, u1 + off, 4 * len) == 0);
    cr_assert_eq(gpt2_init_unit_range(&c, 1, 100, 0, n1, other), 0);
    cr_assert(memcmp(other + qkvb - 3 * C * C, u1 + qkvb - 3 * C * C, 4 * 16) != 0, "a new seed must change weights");
    cr_assert_eq(gpt2_init_unit_range(&c, 1, 99, n1 - 1, 2, again), -1);   /* past the end */
    free(u0); free(u1); free(again); free(other);
}

/* ---- gradients ---- */

/* The parameter tensors of a unit from the layout documented in exec_gpt2.h: {numel}. */
static int unit_tensor_sizes(const Gpt2Config *c, int u, size_t *out)
{
    size_t C = c->d_model;
    if (u == 0) { out[0] = (size_t)c->vocab * C; out[1] = (size_t)c->max_seq * C; return 2; }
    if (u == c->n_layer + 1) { out[0] = out[1] = C; return 2; }
    size_t b[] = {C, C, 3 * C * C, 3 * C, C * C, C, C, C, 4 * C * C, 4 * C, 4 * C * C, C};
    memcpy(out, b, sizeof b);
    return 12;
}

Test(exec_gpt2, backward_should_match_finite_differences_in_every_parameter_tensor)
{
    /* For each parameter tensor of each unit: its largest-gradient coordinate and one random
     * coordinate. Central differences of the float mean loss with h = 3e-3 agree with the
     * analytic gradient to ~2e-4 absolute on gpt2-tiny (measured); the tolerance
     * 1e-4 + 1e-2·|g| allows twice that, while a missing term would be off by O(|g|). */
    MemTracker *mt = tracker(0);
    Gpt2 *m = tiny(mt, NULL, NULL);
    const Gpt2Config *c = gpt2_config(m);
    Batch b = batch(2, 16, 0);
    step_fwd_bwd(m, &b);
    unsigned long long r = 88172645463325252ull;
    int checked = 0;
    for (int u = 0; u < gpt2_cfg_units(c); u++) {
        float *p = gpt2_unit_params(m, u);
        const float *g = gpt2_unit_grads(m, u);
        size_t sz[12], start = 0;
        int nt = unit_tensor_sizes(c, u, sz);
        for (int k = 0; k < nt; start += sz[k], k++) {
            size_t n = sz[k];
            if (u == 0 && k == 1) n = (size_t)b.T * c->d_model;   /* wpe rows beyond T get no gradient */
            size_t best = start;
            for (size_t i = start; i < start + n; i++) if (fabsf(g[i]) > fabsf(g[best])) best = i;
            r ^= r << 13; r ^= r >> 7; r ^= r << 17;
            size_t pick[2] = {best, start + r % n};
            for (int j = 0; j < 2; j++) {
                size_t i = pick[j];
                float keep = p[i], lp, lm, h = 3e-3f;
                p[i] = keep + h;
                cr_assert_eq(gpt2_forward(m, b.tok, b.tgt, b.B, b.T, &lp), 0);
                p[i] = keep - h;
                cr_assert_eq(gpt2_forward(m, b.tok, b.tgt, b.B, b.T, &lm), 0);
                p[i] = keep;
                double fd = ((double)lp - lm) / (2.0 * h);
                cr_assert(fabs(fd - g[i]) <= 1e-4 + 1e-2 * fabs(g[i]),
                          "unit %d tensor %d element %zu: analytic %.6g, finite difference %.6g", u, k, i - start, g[i], fd);
                checked++;
            }
        }
    }
    cr_assert_eq(checked, 2 * (2 + 2 * 12 + 2));
    gpt2_free_activations(m);
    batch_free(&b);
    gpt2_destroy(m);
    prof_mem_destroy(mt);
}

Test(exec_gpt2, two_runs_with_the_same_seed_should_give_identical_bits)
{
    MemTracker *mt = tracker(0);
    Gpt2 *a = tiny(mt, NULL, NULL), *b2 = tiny(mt, NULL, NULL);
    Batch b = batch(2, 16, 3);
    float la = step_fwd_bwd(a, &b), lb = step_fwd_bwd(b2, &b);
    cr_assert(memcmp(&la, &lb, sizeof la) == 0);
    for (int u = 0; u < gpt2_cfg_units(gpt2_config(a)); u++)
        cr_assert(memcmp(gpt2_unit_grads(a, u), gpt2_unit_grads(b2, u), 4 * gpt2_unit_numel(a, u)) == 0, "unit %d", u);
    batch_free(&b);
    gpt2_destroy(a); gpt2_destroy(b2);
    prof_mem_destroy(mt);
}

Test(exec_gpt2, gradient_accumulation_with_grad_scale_should_match_one_big_batch)
{
    MemTracker *mt = tracker(0);
    Gpt2 *big = tiny(mt, NULL, NULL), *acc = tiny(mt, NULL, NULL);
    int B = 4, T = 16;
    Batch b = batch(B, T, 5);
    step_fwd_bwd(big, &b);
    gpt2_set_grad_scale(acc, 1.0f / (2 * (B / 2) * T));
    for (int half = 0; half < 2; half++) {
        Batch mb = {B / 2, T, b.tok + half * (B / 2) * T, b.tgt + half * (B / 2) * T};
        step_fwd_bwd(acc, &mb);
    }
    for (int u = 0; u < gpt2_cfg_units(gpt2_config(big)); u++) {
        const float *g1 = gpt2_unit_grads(big, u), *g2 = gpt2_unit_grads(acc, u);
        for (size_t i = 0; i < gpt2_unit_numel(big, u); i++)
            cr_assert(fabsf(g1[i] - g2[i]) <= 1e-6f + 1e-4f * fabsf(g1[i]), "unit %d [%zu]: %g vs %g", u, i, g1[i], g2[i]);
    }
    /* zero_grad clears, and backward then accumulates from zero again */
    gpt2_zero_grad(acc);
    for (size_t i = 0; i < gpt2_unit_numel(acc, 1); i++) cr_assert(gpt2_unit_grads(acc, 1)[i] == 0.0f);
    batch_free(&b);
    gpt2_destroy(big); gpt2_destroy(acc);
    prof_mem_destroy(mt);
}

/* ---- training ---- */

Test(exec_gpt2, loss_should_fall_over_30_adamw_steps_on_the_synthetic_task)
{
    MemTracker *mt = tracker(0);
    Gpt2 *m = tiny(mt, NULL, NULL);
    Gpt2AdamW opt = {.lr = 3e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0.01f};
    float first = 0, last = 0;
    for (int t = 1; t <= 30; t++) {
        Batch b = batch(8, 32, t);
        gpt2_zero_grad(m);
        float loss = step_fwd_bwd(m, &b);
        cr_assert_eq(gpt2_adamw_step(m, &opt, t, NULL, NULL), 0, "%s", gpt2_error(m));
        if (t == 1) first = loss;
        last = loss;
        batch_free(&b);
    }
    cr_assert(fabsf(first - logf(256.0f)) < 0.3f, "initial loss %g should be near ln(256) = 5.55", first);
    cr_assert(last < first - 1.0f, "loss went from %g to %g in 30 steps", first, last);
    cr_assert_eq(prof_mem_current(mt, MEM_OPTIMIZER), 2 * prof_mem_current(mt, MEM_PARAMS));
    gpt2_destroy(m);
    prof_mem_destroy(mt);
}

Test(exec_gpt2, sharded_adamw_steps_should_equal_the_whole_update)
{
    MemTracker *mt = tracker(0);
    Gpt2 *whole = tiny(mt, NULL, NULL), *lo = tiny(mt, NULL, NULL), *hi = tiny(mt, NULL, NULL);
    Gpt2 *ms[] = {whole, lo, hi};
    int nu = gpt2_cfg_units(gpt2_config(whole));
    size_t off_lo[16] = {0}, len_lo[16], off_hi[16], len_hi[16];
    for (int u = 0; u < nu; u++) {
        size_t n = gpt2_unit_numel(whole, u);
        len_lo[u] = n / 2; off_hi[u] = n / 2; len_hi[u] = n - n / 2;
    }
    Gpt2AdamW opt = {1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f};
    for (int t = 1; t <= 2; t++) {
        Batch b = batch(2, 8, t);
        for (int i = 0; i < 3; i++) { gpt2_zero_grad(ms[i]); step_fwd_bwd(ms[i], &b); }
        cr_assert_eq(gpt2_adamw_step(whole, &opt, t, NULL, NULL), 0);
        cr_assert_eq(gpt2_adamw_step(lo, &opt, t, off_lo, len_lo), 0);
        cr_assert_eq(gpt2_adamw_step(hi, &opt, t, off_hi, len_hi), 0);
        /* the next forward must see whole parameters: copy the other half across, as an
         * all-gather would */
        for (int u = 0; u < nu; u++) {
            memcpy(gpt2_unit_params(lo, u) + off_hi[u], gpt2_unit_params(hi, u) + off_hi[u], 4 * len_hi[u]);
            memcpy(gpt2_unit_params(hi, u), gpt2_unit_params(lo, u), 4 * len_lo[u]);
        }
        batch_free(&b);
    }
    for (int u = 0; u < nu; u++)
        cr_assert(memcmp(gpt2_unit_params(whole, u), gpt2_unit_params(lo, u), 4 * gpt2_unit_numel(whole, u)) == 0, "unit %d", u);
    /* each shard keeps only its share of m and v */
    cr_assert_eq(gpt2_adamw_step(lo, &opt, 3, NULL, NULL), -1, "a different length must be refused");
    cr_assert(strstr(gpt2_error(lo), "AdamW state") != NULL, "%s", gpt2_error(lo));
    gpt2_destroy(whole); gpt2_destroy(lo); gpt2_destroy(hi);
    prof_mem_destroy(mt);
}

/* ---- memory layout ---- */

Test(exec_gpt2, tracker_should_see_the_documented_layout_with_exact_peaks)
{
    MemTracker *mt = tracker(0);
    Gpt2 *m = tiny(mt, NULL, NULL);
    const Gpt2Config *c = gpt2_config(m);
    int B = 4, T = 64;
    Gpt2MemLayout lay;
    cr_assert_eq(gpt2_activation_layout(c, B, T, &lay), 0);
    /* the header's byte formulas, by hand */
    size_t C = c->d_model, NH = c->n_head, V = c->vocab, L = c->n_layer, bt = (size_t)B * T;
    size_t P = 4 * (size_t)gpt2_cfg_num_params(c);
    cr_assert_eq(lay.block_bytes, 4 * bt * (18 * C + 4) + 8 * B * NH * T * T);
    cr_assert_eq(lay.outside_bytes, 4 * bt * (2 * C + V + 4));
    cr_assert_eq(lay.act_bytes, L * lay.block_bytes + lay.outside_bytes);
    cr_assert_eq(lay.ws_bytes, 4 * bt * 10 * C + 8 * B * NH * T * T);
    cr_assert_eq(lay.param_bytes, P);
    /* at this size the first step peaks at the start of backward, once unit 0's grads exist */
    cr_assert_eq(lay.peak_first_bytes, P + lay.act_bytes + lay.ws_bytes + 4 * gpt2_unit_numel(m, 0));
    cr_assert_eq(lay.peak_bytes, 4 * P + lay.act_bytes + lay.ws_bytes);

    Batch b = batch(B, T, 0);
    cr_assert_eq(gpt2_forward(m, b.tok, b.tgt, B, T, NULL), 0);
    cr_assert_eq(prof_mem_current(mt, MEM_ACTIVATIONS), lay.act_bytes);
    cr_assert_eq(prof_mem_live_count(mt), (int64_t)(gpt2_cfg_units(c) + 16 * L + 7));
    cr_assert_eq(gpt2_backward(m), 0);
    cr_assert_eq(prof_mem_current(mt, MEM_ACTIVATIONS), 0, "activations must be freed by the end of backward");
    cr_assert_eq(prof_mem_current(mt, MEM_WORKSPACE), 0, "workspace must be freed by the end of backward");
    cr_assert_eq(prof_mem_current(mt, MEM_GRADS), P);
    cr_assert_eq(prof_mem_peak(mt, MEM_ACTIVATIONS), lay.act_bytes);
    cr_assert_eq(prof_mem_peak(mt, MEM_WORKSPACE), lay.ws_bytes);
    cr_assert_eq(prof_mem_peak_total(mt), lay.peak_first_bytes);

    Gpt2AdamW opt = {1e-3f, 0.9f, 0.999f, 1e-8f, 0.0f};
    cr_assert_eq(gpt2_adamw_step(m, &opt, 1, NULL, NULL), 0);
    cr_assert_eq(prof_mem_current(mt, MEM_OPTIMIZER), 2 * P);
    prof_mem_reset_peaks(mt);
    gpt2_zero_grad(m);
    step_fwd_bwd(m, &b);
    cr_assert_eq(prof_mem_peak_total(mt), lay.peak_bytes);
    batch_free(&b);
    gpt2_destroy(m);
    cr_assert_eq(prof_mem_current_total(mt), 0);
    prof_mem_destroy(mt);
}

Test(exec_gpt2, layout_should_predict_a_late_peak_when_gradients_outweigh_activations)
{
    /* B = T = 1 with wide blocks: each block's gradient (12C² + 13C floats) is larger than the
     * activations its backward frees, so the first step peaks at the last block's (block 1's) backward. */
    Gpt2Config c = {"wide", 3, 2, 256, 64, 8};
    MemTracker *mt = tracker(0);
    Gpt2 *m = NULL;
    cr_assert_eq(gpt2_create(&m, &c, mt, NULL, NULL), 0);
    cr_assert_eq(gpt2_init_params(m, 5), 0);
    Gpt2MemLayout lay;
    cr_assert_eq(gpt2_activation_layout(&c, 1, 1, &lay), 0);
    int tok = 3, tgt = 4;
    cr_assert_eq(gpt2_forward(m, &tok, &tgt, 1, 1, NULL), 0);
    cr_assert_eq(gpt2_backward(m), 0);
    size_t P = lay.param_bytes;
    cr_assert(lay.peak_first_bytes > P + lay.act_bytes + lay.ws_bytes + 4 * gpt2_unit_numel(m, 0));
    /* at block 1's grads: params, all grads, block 1's tensors, encoded (4·C), scratch */
    cr_assert_eq(lay.peak_first_bytes, 2 * P + lay.block_bytes + 4 * 256 + lay.ws_bytes);
    cr_assert_eq(prof_mem_peak_total(mt), lay.peak_first_bytes);
    gpt2_destroy(m);
    prof_mem_destroy(mt);
}

Test(exec_gpt2, allocation_failures_under_a_limit_should_return_minus_one_without_leaks)
{
    Gpt2Config c = preset("gpt2-tiny");
    int B = 2, T = 32;
    Gpt2MemLayout lay;
    cr_assert_eq(gpt2_activation_layout(&c, B, T, &lay), 0);
    /* a full first step (forward, backward, AdamW) needs max(peak of fwd+bwd, 4·params) */
    size_t need = lay.peak_first_bytes > 4 * lay.param_bytes ? lay.peak_first_bytes : 4 * lay.param_bytes;
    Batch b = batch(B, T, 0);
    Gpt2AdamW opt = {1e-3f, 0.9f, 0.999f, 1e-8f, 0.0f};
    int failures = 0;
    for (int k = 0; k <= 40; k++) {
        size_t limit = k == 40 ? need : k == 39 ? need - 1 : lay.param_bytes - 4 + (need - lay.param_bytes) / 38 * k;
        MemTracker *mt = tracker(limit);
        Gpt2 *m = NULL;
        int rc = gpt2_create(&m, &c, mt, NULL, NULL);
        if (rc == 0) rc = gpt2_init_params(m, 1);
        if (rc == 0) rc = gpt2_forward(m, b.tok, b.tgt, B, T, NULL);
        if (rc == 0) rc = gpt2_backward(m);
        if (rc == 0) rc = gpt2_adamw_step(m, &opt, 1, NULL, NULL);
        cr_assert(rc == 0 || rc == -1);
        if (rc == -1) {
            failures++;
            cr_assert(prof_mem_oom(mt)->happened, "limit %zu: the tracker should record the OOM", limit);
            if (m) {
                cr_assert(strstr(gpt2_error(m), "out of memory") != NULL, "%s", gpt2_error(m));
                cr_assert_eq(prof_mem_current(mt, MEM_ACTIVATIONS), 0, "a failed pass frees its activations");
                cr_assert_eq(prof_mem_current(mt, MEM_WORKSPACE), 0);
            }
        }
        cr_assert_eq(rc, limit >= need ? 0 : -1, "limit %zu (need %zu): rc %d", limit, need, rc);
        gpt2_destroy(m);
        cr_assert_eq(prof_mem_current_total(mt), 0, "limit %zu: leak after destroy", limit);
        prof_mem_destroy(mt);
    }
    cr_assert_eq(failures, 40);
    batch_free(&b);
}

/* ---- hooks ---- */

typedef struct { char log[512]; } HookLog;
static int log_hook(HookLog *h, const char *tag, int u)
{
    size_t n = strlen(h->log);
    snprintf(h->log + n, sizeof h->log - n, "%s%d ", tag, u);
    return 0;
}
static int h_bf(void *c, Gpt2 *m, int u) { (void)m; return log_hook(c, "F+", u); }
static int h_af(void *c, Gpt2 *m, int u) { (void)m; return log_hook(c, "F-", u); }
static int h_bb(void *c, Gpt2 *m, int u) { (void)m; return log_hook(c, "B+", u); }
static int h_ab(void *c, Gpt2 *m, int u) { (void)m; return log_hook(c, "B-", u); }

Test(exec_gpt2, hooks_should_be_called_in_the_documented_order)
{
    MemTracker *mt = tracker(0);
    HookLog h = {{0}};
    Gpt2Hooks hooks = {h_bf, h_af, h_bb, h_ab, 0};
    Gpt2 *m = tiny(mt, &hooks, &h);
    Batch b = batch(1, 4, 0);
    step_fwd_bwd(m, &b);
    cr_assert_str_eq(h.log, "F+0 F+1 F-1 F+2 F-2 F+3 F-3 F-0 B+0 B+3 B-3 B+2 B-2 B+1 B-1 B-0 ");
    batch_free(&b);
    gpt2_destroy(m);
    prof_mem_destroy(mt);
}

static int failing_hook(void *c, Gpt2 *m, int u) { (void)c; (void)m; return u == 2 ? -1 : 0; }

Test(exec_gpt2, a_failing_hook_should_abort_the_pass_with_minus_one)
{
    MemTracker *mt = tracker(0);
    Gpt2Hooks hooks = {.before_unit_backward = failing_hook};
    Gpt2 *m = tiny(mt, &hooks, NULL);
    Batch b = batch(1, 4, 0);
    cr_assert_eq(gpt2_forward(m, b.tok, b.tgt, 1, 4, NULL), 0);
    cr_assert_eq(gpt2_backward(m), -1);
    cr_assert(strstr(gpt2_error(m), "before_unit_backward hook failed for unit 2") != NULL, "%s", gpt2_error(m));
    cr_assert_eq(prof_mem_current(mt, MEM_ACTIVATIONS) + prof_mem_current(mt, MEM_WORKSPACE), 0);
    batch_free(&b);
    gpt2_destroy(m);
    prof_mem_destroy(mt);
}

/* after_unit_backward(u) promises unit u's gradients are final: snapshot them there. */
typedef struct { float *snap[8]; } Snap;
static int snap_hook(void *c, Gpt2 *m, int u)
{
    Snap *s = c;
    size_t n = gpt2_unit_numel(m, u);
    s->snap[u] = malloc(4 * n);
    memcpy(s->snap[u], gpt2_unit_grads(m, u), 4 * n);
    return 0;
}

Test(exec_gpt2, gradients_should_be_complete_when_after_unit_backward_is_called)
{
    MemTracker *mt = tracker(0);
    Snap s = {{0}};
    Gpt2Hooks hooks = {.after_unit_backward = snap_hook};
    Gpt2 *m = tiny(mt, &hooks, &s);
    Batch b = batch(2, 16, 0);
    step_fwd_bwd(m, &b);
    for (int u = 0; u < gpt2_cfg_units(gpt2_config(m)); u++) {
        cr_assert_not_null(s.snap[u], "no after_unit_backward for unit %d", u);
        cr_assert(memcmp(s.snap[u], gpt2_unit_grads(m, u), 4 * gpt2_unit_numel(m, u)) == 0,
                  "unit %d's gradients changed after its after_unit_backward", u);
        free(s.snap[u]);
    }
    batch_free(&b);
    gpt2_destroy(m);
    prof_mem_destroy(mt);
}

/* A ZeRO-3-like strategy: keeps each unit's parameters outside the model (here: whole master
 * copies in test memory, standing in for shards), gathers a unit into a MEM_COMM buffer just in
 * time and frees it after use; gradients go to a per-unit buffer it provides and takes back. */
typedef struct { MemTracker *mt; float *master[8], *grads_out[8]; int gathered, max_gathered; } Zero3;
static int z3_gather(void *c, Gpt2 *m, int u)
{
    Zero3 *z = c;
    size_t bytes = 4 * gpt2_unit_numel(m, u);
    float *p = prof_mem_alloc(z->mt, MEM_COMM, bytes, "gathered unit");
    if (!p) return -1;
    memcpy(p, z->master[u], bytes);
    if (++z->gathered > z->max_gathered) z->max_gathered = z->gathered;
    return gpt2_set_unit_params(m, u, p);
}
static int z3_release(void *c, Gpt2 *m, int u)
{
    Zero3 *z = c;
    prof_mem_free(z->mt, gpt2_unit_params(m, u));
    z->gathered--;
    return gpt2_set_unit_params(m, u, NULL);
}
static int z3_before_bwd(void *c, Gpt2 *m, int u)
{
    Zero3 *z = c;
    float *g = prof_mem_calloc(z->mt, MEM_COMM, 4 * gpt2_unit_numel(m, u), "unit grads");
    if (!g || gpt2_set_unit_grads(m, u, g)) return -1;
    return z3_gather(c, m, u);
}
static int z3_after_bwd(void *c, Gpt2 *m, int u)
{
    Zero3 *z = c;
    float *g = gpt2_unit_grads(m, u);
    memcpy(z->grads_out[u], g, 4 * gpt2_unit_numel(m, u));   /* "reduce-scatter" */
    gpt2_set_unit_grads(m, u, NULL);
    prof_mem_free(z->mt, g);
    return z3_release(c, m, u);
}

Test(exec_gpt2, strategy_provided_parameters_and_gradients_should_give_the_same_step)
{
    MemTracker *mt = tracker(0);
    Gpt2 *plain = tiny(mt, NULL, NULL);
    const Gpt2Config *c = gpt2_config(plain);
    int nu = gpt2_cfg_units(c);
    Zero3 z = {.mt = mt};
    for (int u = 0; u < nu; u++) {
        size_t n = gpt2_cfg_unit_numel(c, u);
        z.master[u] = malloc(4 * n);
        z.grads_out[u] = malloc(4 * n);
        /* initialised shard by shard, as each rank would */
        cr_assert_eq(gpt2_init_unit_range(c, u, 1234, 0, n / 2, z.master[u]), 0);
        cr_assert_eq(gpt2_init_unit_range(c, u, 1234, n / 2, n - n / 2, z.master[u] + n / 2), 0);
    }
    Gpt2Hooks hooks = {z3_gather, z3_release, z3_before_bwd, z3_after_bwd, 1};
    Gpt2 *sharded = NULL;
    cr_assert_eq(gpt2_create(&sharded, c, mt, &hooks, &z), 0);
    size_t params_before = prof_mem_current(mt, MEM_PARAMS);
    Batch b = batch(2, 16, 0);
    float l1 = step_fwd_bwd(plain, &b), l2 = step_fwd_bwd(sharded, &b);
    cr_assert(memcmp(&l1, &l2, sizeof l1) == 0, "loss %g vs %g", l1, l2);
    for (int u = 0; u < nu; u++)
        cr_assert(memcmp(z.grads_out[u], gpt2_unit_grads(plain, u), 4 * gpt2_unit_numel(plain, u)) == 0, "unit %d", u);
    cr_assert_eq(prof_mem_current(mt, MEM_PARAMS), params_before, "external params: the model allocates none");
    cr_assert_eq(prof_mem_current(mt, MEM_COMM), 0);
    cr_assert_eq(prof_mem_current(mt, MEM_GRADS), 4 * (size_t)gpt2_cfg_num_params(c), "only the plain model's grads");
    cr_assert_eq(z.max_gathered, 2, "unit 0 plus one other unit at a time");
    cr_assert_eq(z.gathered, 0);
    batch_free(&b);
    for (int u = 0; u < nu; u++) { free(z.master[u]); free(z.grads_out[u]); }
    gpt2_destroy(plain); gpt2_destroy(sharded);
    prof_mem_destroy(mt);
}

/* ---- bad input ---- */

Test(exec_gpt2, bad_input_should_return_minus_one_with_a_sentence)
{
    char msg[128] = "";
    Gpt2Config bad = {"bad", 2, 3, 64, 256, 64};
    cr_assert_eq(gpt2_config_check(&bad, msg, sizeof msg), -1);
    cr_assert(strstr(msg, "multiple of n_head") != NULL, "%s", msg);
    Gpt2Config c;
    cr_assert_eq(gpt2_config_preset(&c, "gpt3"), -1);
    MemTracker *mt = tracker(0);
    Gpt2 *m = NULL;
    cr_assert_eq(gpt2_create(&m, &bad, mt, NULL, NULL), -1);
    cr_assert_null(m);
    m = tiny(mt, NULL, NULL);
    cr_assert_eq(gpt2_backward(m), -1, "backward before forward");
    cr_assert(strstr(gpt2_error(m), "forward") != NULL);
    Batch b = batch(1, 8, 0);
    b.tok[3] = 256;
    cr_assert_eq(gpt2_forward(m, b.tok, b.tgt, 1, 8, NULL), -1);
    cr_assert(strstr(gpt2_error(m), "vocabulary") != NULL, "%s", gpt2_error(m));
    b.tok[3] = 0;
    cr_assert_eq(gpt2_forward(m, b.tok, b.tgt, 1, 65, NULL), -1);
    cr_assert(strstr(gpt2_error(m), "max_seq") != NULL, "%s", gpt2_error(m));
    cr_assert_eq(gpt2_forward(m, b.tok, NULL, 1, 8, NULL), -1);
    Gpt2AdamW opt = {1e-3f, 0.9f, 0.999f, 1e-8f, 0.0f};
    cr_assert_eq(gpt2_adamw_step(m, &opt, 1, NULL, NULL), -1, "no gradients yet");
    cr_assert_eq(gpt2_adamw_step(m, &opt, 0, NULL, NULL), -1, "t starts at 1");
    cr_assert_eq(gpt2_set_unit_params(m, 99, NULL), -1);
    cr_assert_eq(prof_mem_current(mt, MEM_ACTIVATIONS), 0);
    batch_free(&b);
    gpt2_destroy(m);
    prof_mem_destroy(mt);
}

/* ---- synthetic data ---- */

Test(exec_gpt2, synthetic_batches_should_give_each_rank_its_contiguous_shard)
{
    int G = 8, T = 16, V = 256, R = 4, bl = G / R;
    int *tok = malloc(sizeof(int) * G * T), *tgt = malloc(sizeof(int) * G * T);
    int *rt = malloc(sizeof(int) * bl * T), *rg = malloc(sizeof(int) * bl * T);
    cr_assert_eq(gpt2_synthetic_batch(11, 4, G, 0, 1, T, V, tok, tgt), 0);
    for (int r = 0; r < R; r++) {
        cr_assert_eq(gpt2_synthetic_batch(11, 4, G, r, R, T, V, rt, rg), 0);
        cr_assert(memcmp(rt, tok + r * bl * T, sizeof(int) * bl * T) == 0, "rank %d tokens", r);
        cr_assert(memcmp(rg, tgt + r * bl * T, sizeof(int) * bl * T) == 0, "rank %d targets", r);
    }
    for (int i = 0; i < G; i++)
        for (int t = 0; t + 1 < T; t++) cr_assert_eq(tgt[i * T + t], tok[i * T + t + 1]);
    /* learnable: the next token is a function of the current one, up to ~1/16 noise */
    int next[256], agree = 0, pairs = 0;
    for (int i = 0; i < 256; i++) next[i] = -1;
    for (int s = 0; s < 8; s++) {
        cr_assert_eq(gpt2_synthetic_batch(11, s, G, 0, 1, T, V, tok, tgt), 0);
        for (int i = 0; i < G * T; i++) {
            int a = tok[i], n = tgt[i];
            if (next[a] < 0) next[a] = n;   /* first sighting; noise makes some of these wrong */
            else { pairs++; agree += next[a] == n; }
        }
    }
    cr_assert(agree > 0.8 * pairs, "only %d of %d transitions follow the pattern", agree, pairs);
    cr_assert_eq(gpt2_synthetic_batch(11, 0, 6, 0, 4, T, V, rt, rg), -1, "6 rows do not split over 4 ranks");
    cr_assert_eq(gpt2_synthetic_batch(11, 0, 8, 4, 4, T, V, rt, rg), -1, "rank 4 of 4");
    free(tok); free(tgt); free(rt); free(rg);
}
