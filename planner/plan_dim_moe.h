/* plan_dim_moe.h — mixture of experts as one dimension (plan_dim.h): a MoE block's activations and
 * backward working set as transformers 5.24 runs it (docs/formulas.md "Mixture of experts"), its
 * header and JSON lines. The activation model (plan_activ.c) asks it for every MoE block. */
#ifndef PLAN_DIM_MOE_H
#define PLAN_DIM_MOE_H

#include "plan_activ.h"
#include "plan_dim.h"

/* 1 when layer l is a MoE block of m (its routed experts' elements > 0). */
int plan_moe_block(const ModelSpec *m, const LayerSpec *l);
/* 1 when every MoE block of m marks its routed-expert tensors (LayerSpec.expert_mask, set where
   the loaders add them): what --ep and --tp split apart from the router and shared experts. */
int plan_moe_experts_known(const ModelSpec *m);
/* The MLP width one token passes through in layer l: d_ff, or in a MoE block top_k routed
   experts of d_ff_expert (Llama 4: all of them) plus the shared experts' d_ff_shared. */
double plan_act_mlp_width(const ModelSpec *m, const LayerSpec *l);
/* Parameter elements of layer l that autocast never casts: a MoE block's routed experts under
   transformers' grouped_mm, which runs them in the weights' dtype. */
double plan_act_uncast_params(const ModelSpec *m, const LayerSpec *l);
/* Per token, what a MoE block's MLP saves instead of a dense MLP of d_ff (+, or −): the router
   and the routed and shared experts as transformers 5.24 runs them (grouped_mm experts; Llama 4's
   bmm over every expert), measured per family (docs/formulas.md "Mixture of experts"). 0 for a
   dense block. */
double plan_act_moe_delta(const ModelSpec *m, const LayerSpec *l, const TrainSpec *t);

/* A MoE block's MLP backward at its largest moment, beyond its saved activations, for the tokens
   of in (bytes); *grads and *casts (may be NULL): the parameter elements whose gradients exist and
   whose autocast copies are freed by then. */
double plan_moe_backward(const ModelSpec *m, const LayerSpec *l, const TrainSpec *t, const ActInputs *in,
                         double *grads, double *casts);

/* The saved tensors a routed MoE block's backward frees by its MLP moment (the product
   act(gate)·up, the down output, the routing weights), where the account frees them there: their
   bytes into v (3 entries) and their count (3), or 0 (docs/formulas.md "A MoE block's MLP backward");
   _bytes: their sum. */
int plan_moe_bwd_freed(const ModelSpec *m, int i, const TrainSpec *t, const ActInputs *in, double *v);
double plan_moe_bwd_freed_bytes(const ModelSpec *m, int i, const TrainSpec *t, const ActInputs *in);

extern const PlanDim plan_dim_moe;

#endif
