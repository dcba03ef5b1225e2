/* plan_dim.c — the table of dimensions (plan_dim.h) and the walks over it: checks, the setup
 * transform, one rank's views, header and JSON lines. */
#include "plan_dim.h"

#include <stdio.h>
#include <string.h>

#include "plan_util.h"

#include "plan_dim_cp.h"
#include "plan_dim_ep.h"
#include "plan_dim_ft.h"
#include "plan_dim_moe.h"
#include "plan_dim_offload.h"
#include "plan_dim_pp.h"
#include "plan_dim_tp.h"

/* The order the views apply in: the trainable subset first (it is the model every rank starts
   from), then the tensor-parallel share, then the pipeline stage of that share, then the
   context-parallel rank's tokens; the experts' share of the expert-parallel ranks after them. */
static const PlanDim *const DIMS[] = {&plan_dim_ft, &plan_dim_tp, &plan_dim_pp, &plan_dim_cp, &plan_dim_moe,
                                      &plan_dim_ep, &plan_dim_offload};
#define N_DIMS ((int)(sizeof DIMS / sizeof DIMS[0]))

int plan_dim_count(void) { return N_DIMS; }
const PlanDim *plan_dim(int i) { return i >= 0 && i < N_DIMS ? DIMS[i] : NULL; }

/* The first dimension that refuses (its sentence in msg), or -1 when none does. */
static int refusing(const ModelSpec *m, const TrainSpec *t, const ClusterSpec *c, StrategyKind sk, char *msg, size_t len) {
    for (int i = 0; i < N_DIMS; i++)
        if (DIMS[i]->check && DIMS[i]->check(m, t, c, sk, msg, len)) return i;
    return -1;
}

int plan_dims_check(const ModelSpec *m, const TrainSpec *t, const ClusterSpec *c, StrategyKind sk,
                    char *msg, size_t len) {
    return refusing(m, t, c, sk, msg, len) >= 0 ? -1 : 0;
}

int plan_dims_setup(ModelSpec *m, const TrainSpec *t, char *msg, size_t len) {
    for (int i = 0; i < N_DIMS; i++)
        if (DIMS[i]->setup && DIMS[i]->on(m, t) && DIMS[i]->setup(m, t, msg, len)) return -1;
    return 0;
}

void plan_rank_view_free(RankView *v) {
    if (v->own_m) plan_model_free(&v->m);
    v->own_m = 0;
    memset(&v->m, 0, sizeof v->m);
}

/* Applies dimension i and the ones after it to v (which it consumes), writing the finished views
   to out[*n..max). 0, or -1 out of host memory (or more views than max). */
static int views_from(int i, RankView *v, RankView *out, int max, int *n) {
    for (; i < N_DIMS; i++) {
        if (!DIMS[i]->view || !DIMS[i]->on(&v->m, &v->t)) continue;
        RankView cand[PLAN_MAX_VIEWS];
        int k = DIMS[i]->view(v, cand, PLAN_MAX_VIEWS);
        if (k < 0) { plan_rank_view_free(v); return -1; }
        if (k == 1) continue;       /* narrowed in place */
        plan_rank_view_free(v);     /* the candidates hold views of their own */
        int rc = 0;
        for (int j = 0; j < k; j++) {
            if (rc) plan_rank_view_free(&cand[j]);
            else rc = views_from(i + 1, &cand[j], out, max, n);
        }
        return rc;
    }
    if (*n >= max) { plan_rank_view_free(v); return -1; }
    out[(*n)++] = *v;
    return 0;
}

int plan_rank_views(const ModelSpec *m, const TrainSpec *t, const ClusterSpec *c, StrategyKind sk,
                    RankView *out, int max, char *why, size_t len, const char **where) {
    *where = NULL;
    if (len) why[0] = 0;
    int r = refusing(m, t, c, sk, why, len);
    if (r >= 0) {
        *where = DIMS[r]->not_planned;
        return PLAN_ERR_REFUSED;
    }
    RankView v;
    memset(&v, 0, sizeof v);
    v.m = *m;             /* the given model's layers, shared until a dimension narrows them */
    v.own_m = 0;
    v.dp = *c;
    v.full = *c;
    v.t = *t;
    v.sk = sk;
    v.tp = v.pp = v.ep = v.cp = 1;
    v.stage = -1;
    v.in_flight = 1;
    v.pp_chunks = 1;
    int n = 0;
    if (views_from(0, &v, out, max, &n)) {
        for (int j = 0; j < n; j++) plan_rank_view_free(&out[j]);
        *where = "out of host memory planning it";
        snprintf(why, len, "out of host memory planning it");
        return PLAN_ERR_NOMEM;
    }
    return n;
}

void plan_dims_header(FILE *f, PlanHeaderSlot slot, const ModelSpec *m, const TrainSpec *t, const ClusterSpec *c,
                      const struct Step *const *rows, int n_rows) {
    for (int i = 0; i < N_DIMS; i++)
        if (DIMS[i]->header && DIMS[i]->on(m, t)) DIMS[i]->header(f, slot, m, t, c, rows, n_rows);
}

void plan_dims_json(struct cJSON *model, struct cJSON *train, const ModelSpec *m, const TrainSpec *t,
                    const ClusterSpec *c) {
    for (int i = 0; i < N_DIMS; i++)
        if (DIMS[i]->json && DIMS[i]->on(m, t)) DIMS[i]->json(model, train, m, t, c);
}

void plan_dims_row_json(struct cJSON *strategy, const struct Step *st) {
    for (int i = 0; i < N_DIMS; i++)
        if (DIMS[i]->row_json) DIMS[i]->row_json(strategy, st);
}

void plan_dim_summary(char *buf, size_t len, const char *name, const char *degrees, const char *without, int degree,
                      int found, int first_found) {
    if (degree > 1)
        snprintf(buf, len, "%s %d picked: %s %s%s\n", name, degree,
                 first_found ? "faster than every smaller" : "without", first_found ? degrees : without,
                 first_found ? " by more than the margin" : " nothing fits the safety margin");
    else if (found)
        snprintf(buf, len, "%s 1 kept: no %s fits and runs faster by more than the margin\n", name, degrees);
    else
        buf[0] = 0;
}

void plan_dim_describe_strategy(char *buf, size_t len, StrategyKind sk, const TrainSpec *t) {
    (void)t;
    snprintf(buf, len, "%s", plan_strategy(sk)->name);
}
