/* test_plan_cp.c — context parallelism (plan_dim_cp.h): a rank's share of every sequence, the
 * ring attention's collectives (counts, payloads, group), its compute (a rank's queries see every
 * key), the estimate label, the refusals, and the 128k-token Llama 3.1 8B step the issue asked
 * for fitting on H100s. Closed forms from torch 2.15's source: nothing here is measured. */
#include <criterion/criterion.h>
#include <cjson/cJSON.h>
#include <math.h>
#include <string.h>

#include "plan_comm.h"
#include "plan_dim_cp.h"
#include "plan_load.h"
#include "plan_memory.h"
#include "plan_plan.h"
#include "plan_report.h"
#include "plan_sim.h"
#include "plan_step.h"
#include "test_plan.h"

static void setup(TrainSpec *t, ClusterSpec *c, int cp);

static const PlanColl *row(const CommPlan *p, CollKind op, PhaseKind ph) {
    for (int i = 0; i < p->n; i++)
        if (p->c[i].op == op && p->c[i].phase == ph && p->c[i].purpose == PURPOSE_CP_KV) return &p->c[i];
    return NULL;
}

/* llama2-7b at seq 8192 in bf16 on 8 H100s at cp. */
static ModelSpec llama(TrainSpec *t, ClusterSpec *c, int cp) {
    ModelSpec m = zoo("llama2-7b");
    setup(t, c, cp);
    return m;
}

static void setup(TrainSpec *t, ClusterSpec *c, int cp) {
    plan_train_defaults(t);
    t->precision = PREC_BF16;
    t->seq = 8192;
    t->cp = cp;
    cluster(c, 8, 8);
    c->gpu = *plan_gpu_by_name("h100-80gb");
}

Test(cp, a_rank_should_hold_its_share_of_every_sequence) {
    TrainSpec t;
    ClusterSpec c;
    ModelSpec m = llama(&t, &c, 4);
    Step st;
    cr_assert_eq(plan_step_build(&st, &m, &t, &c, STRAT_FSDP_FULL), PLAN_OK, "%s", st.fail_why);
    cr_expect_eq(st.view.t.seq, 2048);
    cr_expect_eq(st.view.cp, 4);
    cr_expect_eq(st.view.dp.gpus, 8, "FSDP2 shards over the dp x cp ranks together");
    cr_expect_eq(st.tokens_per_sample, 2048);
    plan_step_free(&st);
    plan_model_free(&m);
}

/* Per attention layer: forward one all-gather of the whole sequence's keys and values (2 b s a d
   at the compute dtype; torchtitan repeats the KV heads), backward one more and cp send/recv of
   the rank's fp32 gradients of its keys and values. */
Test(cp, the_ring_should_gather_the_keys_and_values_and_pass_their_gradients) {
    TrainSpec t;
    ClusterSpec c;
    ModelSpec m = llama(&t, &c, 4);
    CommPlan p;
    plan_comm(&m, &t, &c, STRAT_FSDP_FULL, &p);
    double L = 32, s = 8192, a = 32, d = 128;
    const PlanColl *f = row(&p, COLL_ALL_GATHER, PHASE_FORWARD), *b = row(&p, COLL_ALL_GATHER, PHASE_BACKWARD);
    const PlanColl *r = row(&p, COLL_SEND_RECV, PHASE_BACKWARD);
    cr_assert(f && b && r);
    cr_expect_eq(f->count, L);
    cr_expect_eq(f->payload_bytes, L * 2 * s * a * d * 2);
    cr_expect_eq(b->payload_bytes, f->payload_bytes);
    cr_expect_eq(r->count, L * 4);
    cr_expect_eq(r->payload_bytes, L * 4 * 2 * (s / 4) * a * d * 4);
    cr_expect_eq(f->group, 4);
    plan_model_free(&m);
}

/* A rank's queries attend to the whole sequence, so its attention is 1/cp of the whole
   sequence's, not (1/cp)^2: the step's compute is about the no-cp step's over cp. */
Test(cp, a_ranks_compute_should_be_its_share_of_the_whole_sequences) {
    TrainSpec t;
    ClusterSpec c;
    ModelSpec m = llama(&t, &c, 4);
    SimResult with, without;
    cr_assert_eq(plan_sim(&m, &t, &c, STRAT_FSDP_FULL, 0, &with), 0);
    t.cp = 1;
    cr_assert_eq(plan_sim(&m, &t, &c, STRAT_FSDP_FULL, 0, &without), 0);
    double a = with.fwd_compute_s + with.bwd_compute_s, b = without.fwd_compute_s + without.bwd_compute_s;
    cr_expect(fabs(a * 4 / b - 1) < 0.15, "cp 4 computes %.4f s, the whole sequence %.4f s", a, b);
    plan_model_free(&m);
}

Test(cp, a_setup_it_does_not_apply_to_should_be_refused_with_the_valid_values) {
    TrainSpec t;
    ClusterSpec c;
    ModelSpec m = llama(&t, &c, 4);
    char msg[320];
    cr_expect_neq(plan_cp_check(&m, &t, &c, STRAT_DDP, msg, sizeof msg), 0);
    cr_expect(strstr(msg, "fsdp-full") != NULL, "%s", msg);
    t.attn = ATTN_EAGER;
    cr_expect_neq(plan_cp_check(&m, &t, &c, STRAT_FSDP_FULL, msg, sizeof msg), 0);
    cr_expect(strstr(msg, "--attn sdpa") != NULL, "%s", msg);
    t.attn = ATTN_SDPA;
    t.seq = 8196;   /* not 2 x 4 chunks */
    cr_expect_neq(plan_cp_check(&m, &t, &c, STRAT_FSDP_FULL, msg, sizeof msg), 0);
    cr_expect(strstr(msg, "2 x 4 chunks") != NULL, "%s", msg);
    t.seq = 8192;
    t.cp = 3;
    cr_expect_neq(plan_cp_check(&m, &t, &c, STRAT_FSDP_FULL, msg, sizeof msg), 0);
    plan_model_free(&m);
}

/* The case: Llama 3.1 8B, one 128k-token sequence per step on 8 H100s, cp 8, full
   checkpointing: it fits, and the plan says its ring figures are estimates. */
Test(cp, a_128k_token_llama_3_1_8b_step_should_fit_on_h100s_labelled_an_estimate) {
    ModelSpec m;
    char msg[512];
    cr_assert_eq(plan_load_model(&m, "tests/data/hf/llama-3.1-8b.json", msg, sizeof msg), 0, "%s", msg);
    TrainSpec t;
    ClusterSpec c;
    setup(&t, &c, 8);
    t.precision = PREC_AMP_BF16;
    t.seq = 131072;
    t.act_ckpt = CKPT_FULL;
    c.alloc_model = 1;
    Plan p;
    plan_run(&m, &t, &c, 1u << STRAT_FSDP_FULL, &p);
    cr_assert_eq(p.n_rows, 1);
    cr_expect(p.rows[0].mem.fits, "peak %.2f GiB", p.rows[0].mem.peak / 1073741824.0);
    cJSON *j = plan_report_json(&m, &t, &c, &p);
    const cJSON *tr = cJSON_GetObjectItem(j, "train");
    cr_expect_eq(cJSON_GetObjectItem(tr, "cp")->valuedouble, 8);
    cr_expect_eq(cJSON_GetObjectItem(tr, "cp_seq_per_rank")->valuedouble, 16384);
    cr_expect(strstr(cJSON_GetObjectItem(tr, "cp_source")->valuestring, "estimate") != NULL);
    cJSON_Delete(j);
    t.cp = 1;   /* without it the same step does not fit */
    Plan q;
    plan_run(&m, &t, &c, 1u << STRAT_FSDP_FULL, &q);
    cr_expect(!q.rows[0].mem.fits);
    plan_free(&q);
    plan_free(&p);
    plan_model_free(&m);
}
