/* plan_dim.h — the dimensions a setup adds to data parallelism, as one table the planner walks.
 *
 * A dimension is one module, planner/plan_dim_<name>.[ch], and one row of the table below:
 *   fine-tuning (plan_dim_ft: LoRA, frozen parameters, a quantized base),
 *   tensor and sequence parallel (plan_dim_tp), pipeline stages (plan_dim_pp),
 *   context parallel (plan_dim_cp), mixture of experts (plan_dim_moe), expert parallel
 *   (plan_dim_ep), CPU offload (plan_dim_offload).
 * A row holds everything the planner does for that dimension: its checks and refusals, what it
 * does to the setup (fine-tuning's trainable subset, once, when the setup is resolved) and to one
 * rank's view of it (tp's share of every tensor, pp's stage, at every build of a step), its
 * rules (the step events only it writes, under its own rule ids), its header and JSON lines, and
 * the degrees `memplan auto` may try. The step builder (plan_step.c) applies the views in the
 * table's order and runs the rules after the core ones; the report and auto walk the same rows.
 * docs/architecture.md draws the flow: setup -> dimensions (check, view) -> RankView -> rules ->
 * Step -> readers. */
#ifndef PLAN_DIM_H
#define PLAN_DIM_H

#include <stddef.h>
#include <stdio.h>

#include "plan_gpu.h"
#include "plan_model.h"
#include "plan_strategy.h"
#include "plan_train.h"

struct cJSON;
struct Step;
struct StepCtx;
struct AutoSpec;

/* The most stages one pipeline rank may hold (--pp-virtual). */
#define PLAN_PP_MAX_VIRTUAL 16

/* What one rank sees of a setup once the dimensions have split it: every rule, the memory
   replay, the collective table and the simulated step read this, never the model as given. */
typedef struct RankView {
    ModelSpec m;             /* this rank's model: the tp share of every tensor, the pp stage */
    int own_m;               /* 1: m.layers belongs to the view (freed with it); 0: the given model's */
    ClusterSpec dp;          /* the cluster the data-parallel strategy sees: gpus / (tp x pp) ranks */
    ClusterSpec full;        /* the whole cluster (the tp and pp groups' links, throughput) */
    TrainSpec t;             /* the training setup, micro-batch included */
    StrategyKind sk;
    int tp, pp;              /* degrees, 1 = none */
    int ep, cp;              /* expert- and context-parallel degrees, 1 = none */
    int comms;               /* communicators the dimensions' groups add beyond the data-parallel
                                one(s) and the tp and pp groups' (--ep: the ep group and the expert
                                data-parallel group; --cp: the ring's) */
    int stage;               /* --pp: the pipeline rank this view is (-1: none) */
    int in_flight;           /* --pp: forwards whose activations the rank holds at once (1: none;
                                interleaved: chunk forwards, pp_chunk_in_flight summed) */
    int pp_chunks;           /* --pp: the rank's stages (model chunks; interleaved: pp_virtual, else 1) */
    int pp_chunk_layers[PLAN_PP_MAX_VIRTUAL];      /* the view's layers of each chunk, in order */
    int pp_chunk_in_flight[PLAN_PP_MAX_VIRTUAL];   /* each chunk's forwards in flight at the rank's
                                                      first backward */
    int mem_one_micro;       /* --pp: every micro-batch is in flight before the stage's first
                                backward, so its memory is the account of one micro-step (no
                                gradient accumulated yet) while its collectives and compute are
                                those of all M (plan_dim_pp.c) */
    double opt_plain_elems;  /* parameters a dimension leaves beside the others in a parameter group
                                of their own (--tp without FSDP: the plain tensors beside the
                                DTensors, which torch's foreach refuses to mix): the optimizer's
                                foreach temporary is the larger group's (0: one group) */
} RankView;

/* One setting of a dimension auto may try (a degree, and what it implies for the setup). */
typedef struct {
    TrainSpec t;             /* the setup with this degree */
    unsigned strategies;     /* the strategies it may be planned with (bit per StrategyKind) */
    unsigned offloads;       /* the offloads (bit per OffloadKind) */
    int keep_accum;          /* its accumulation is fixed (pp: the micro-batches) */
    char label[64];          /* "tp 2 sp on", "pp 4 (1f1b, 8 micro-batches)" */
    char skip[320];          /* not tried: why (one line), "" otherwise */
} DimSetting;

/* Where in the plan's header a dimension's lines go. */
typedef enum { HEADER_AFTER_MODEL = 0, HEADER_AFTER_TRAIN } PlanHeaderSlot;

typedef struct PlanDim {
    const char *name;        /* "finetune", "tp", "pp", "moe", "offload" */
    const char *not_planned; /* the short form of a refusal ("tensor parallel does not apply to this
                                setup"), for a row's peak_at */
    /* 1 when t uses the dimension */
    int (*on)(const ModelSpec *m, const TrainSpec *t);
    /* 0 when it applies to m on c under strategy sk, else -1 with one sentence (the bad value and
       what is valid) */
    int (*check)(const ModelSpec *m, const TrainSpec *t, const ClusterSpec *c, StrategyKind sk,
                 char *msg, size_t len);
    /* Once per setup: what the dimension does to the model as given (fine-tuning's trainable
       subset). 0, or -1 with msg. NULL: nothing. */
    int (*setup)(ModelSpec *m, const TrainSpec *t, char *msg, size_t len);
    /* At every build: one rank's view, narrowed from v in place, or the candidates it could be
       (pp: stage 0 and the last stage) written to out[0..n) for the builder to keep the most
       loaded. Returns n >= 1 (1 with v narrowed in place and out unused), or -1 out of host
       memory. NULL: the view is unchanged. */
    int (*view)(RankView *v, RankView *out, int max);
    /* Its rules: the step events only this dimension writes, after the core rules. */
    void (*rule)(const struct StepCtx *x, struct Step *st);
    /* Its lines of the plan's header ('#' lines) in one of the header's two places (after the
       model line, after the train line; rows: the plan's built steps, one per strategy, n_rows of
       them, for what depends on the strategy), and its JSON fields (the model and train objects;
       a strategy's record). NULL: none. */
    void (*header)(FILE *f, PlanHeaderSlot slot, const ModelSpec *m, const TrainSpec *t, const ClusterSpec *c,
                   const struct Step *const *rows, int n_rows);
    void (*json)(struct cJSON *model, struct cJSON *train, const ModelSpec *m, const TrainSpec *t,
                 const ClusterSpec *c);
    void (*row_json)(struct cJSON *strategy, const struct Step *st);
    /* auto: 1 when t asks auto to search this dimension's degree (--tp auto, --pp auto) */
    int (*auto_on)(const TrainSpec *t);
    /* auto: the settings to try for t on c, the simplest first, into out[0..max); how many */
    int (*settings)(const ModelSpec *m, const TrainSpec *t, const ClusterSpec *c, const struct AutoSpec *a,
                    DimSetting *out, int max);
    /* auto: the heading of its search in the explanation, and what a found setup is called on its
       line ("ddp tp 2", after the setting's label) */
    const char *search_title;
    void (*describe)(char *buf, size_t len, StrategyKind sk, const TrainSpec *t);
    /* auto: a closing line of its search ("pp 4 picked: ..."), "" for none; first_found: its
       simplest setting found a setup */
    void (*summary)(char *buf, size_t len, int found, const TrainSpec *picked, int first_found);
} PlanDim;

/* The table, in the order the views apply. */
int plan_dim_count(void);
const PlanDim *plan_dim(int i);

/* Every dimension's check for strategy sk: 0, or -1 with the first refusal in msg. */
int plan_dims_check(const ModelSpec *m, const TrainSpec *t, const ClusterSpec *c, StrategyKind sk,
                    char *msg, size_t len);
/* Every dimension's setup transform, once, on the model as given: 0, or -1 with msg. */
int plan_dims_setup(ModelSpec *m, const TrainSpec *t, char *msg, size_t len);

/* The views of one rank of setup (m, t, c) under strategy sk: the candidates the dimensions
   leave (pp: two stages), into out[0..max); returns how many (>= 1), or a PlanStatus (plan_util.h:
   PLAN_ERR_REFUSED with the dimension's sentence in why and its short form in *where;
   PLAN_ERR_NOMEM). Each view is freed with plan_rank_view_free. */
int plan_rank_views(const ModelSpec *m, const TrainSpec *t, const ClusterSpec *c, StrategyKind sk,
                    RankView *out, int max, char *why, size_t len, const char **where);
void plan_rank_view_free(RankView *v);
/* The largest number of candidate views a setup can have. */
#define PLAN_MAX_VIEWS 4

/* What a dimension's search says at its end (PlanDim.summary) when it searches a degree: "pp 4
   picked: ..." / "pp 1 kept: ..." (name "pp", degrees "pipeline degree", without "pipeline
   stages"). */
void plan_dim_summary(char *buf, size_t len, const char *name, const char *degrees, const char *without, int degree,
                      int found, int first_found);
/* PlanDim.describe for a dimension whose found setups are named by their strategy alone. */
void plan_dim_describe_strategy(char *buf, size_t len, StrategyKind sk, const TrainSpec *t);

/* The header lines and JSON fields of every dimension a setup uses. */
void plan_dims_header(FILE *f, PlanHeaderSlot slot, const ModelSpec *m, const TrainSpec *t, const ClusterSpec *c,
                      const struct Step *const *rows, int n_rows);
void plan_dims_json(struct cJSON *model, struct cJSON *train, const ModelSpec *m, const TrainSpec *t,
                    const ClusterSpec *c);
void plan_dims_row_json(struct cJSON *strategy, const struct Step *st);

#endif
