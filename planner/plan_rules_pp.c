/* plan_rules_pp.c — pipeline parallelism's own rules (plan_pp.h): what one stage holds beyond
 * the account of its blocks run for one micro-batch. Closed forms (the in-flight activations
 * checked on CPU ranks for gpt2-mini in 2 stages; the send/recv not measured):
 * docs/formulas.md "Pipeline parallel". */
#include "plan_step_internal.h"

/* The stage boundaries' point-to-point traffic: per micro-batch, the residual stream (b, s, h) at
   the parameters' dtype goes to the next stage after the forward and its gradient comes back in
   backward (torch/distributed/pipelining/stage.py get_fwd_send_ops / get_bwd_send_ops: one
   isend/irecv per boundary; Narayanan et al. 2021 §2.2). Stage 0 and the last stage touch one
   boundary, a middle stage two; each GPU of a stage sends its own copy (no scatter/gather over
   the tp ranks). Issued on the side (batched isend/irecv), the end of backward waits for them:
   the fill and drain they imply are the bubble (plan_sim.c). */
static void pp_send_recv(const StepCtx *x, Step *st) {
    int pp = plan_pp_degree(x->t), last = pp - 1, s = x->pp_stage;
    double bounds = (s > 0) + (s < last);
    double each = (double)x->in.b * (double)x->in.s * (double)x->m->d_model * x->p->param_bytes;
    const ClusterSpec *c = x->full;
    int crosses = c->gpus > c->gpus_per_node && c->gpus / pp >= c->gpus_per_node;   /* pp outermost */
    static const struct { PointKind at; CommPhase ph; } WAYS[2] = {{PT_FWD, CPHASE_FORWARD}, {PT_BWD, CPHASE_BACKWARD}};
    for (int w = 0; w < 2; w++) {
        StepXfer *e = step_xfer(st, RULE_PP_SEND_RECV, XFER_COLL, pt(x, WAYS[w].at, w == 0 ? x->L - 1 : 0));
        if (!e) return;
        e->op = PCOLL_SEND_RECV;
        e->purpose = PURPOSE_PP_ACTS;
        e->phase = (uint8_t)WAYS[w].ph;
        e->sched = SCHED_ASYNC_AFTER;
        e->micro = MICRO_EVERY;
        e->count = bounds;
        e->payload = bounds * each;
        e->group = 2;
        e->crosses = crosses;
    }
}

/* A stage keeps every micro-batch's saved tensors from its forward to its backward. Under 1F1B
   stage s runs min(M, pp - s) forwards before its first backward (torch/distributed/pipelining/
   schedules.py Schedule1F1B._step_microbatches: warmup_chunks; Narayanan et al. 2021 §2.2,
   PipeDream-Flush: at most pp micro-batches in flight), under GPipe all M
   (ScheduleGPipe._step_microbatches; Huang et al. 2019). The account's own micro-batch is the
   one whose backward the peak is in; the others' saved bytes are held beside it from the first
   forward to the end of backward. Where every micro-batch is in flight before the first backward
   (GPipe; 1F1B with M <= pp - stage) that is the first backward, with no accumulated gradient
   (plan_step.c pp_build); otherwise 1F1B's steady state, with the earlier gradients. */
void rule_pp(const StepCtx *x, Step *st) {
    if (x->pp_stage < 0 || x->L == 0) return;
    pp_send_recv(x, st);
    if (x->pp_in_flight <= 1) return;
    double a = 0;   /* one micro-batch's saved bytes on this stage (rule_saved_activations') */
    for (int i = 0; i < x->L; i++) a += plan_act_ckpt_bytes(x->m, i, x->t, &x->in);
    step_hold(st, RULE_PP_IN_FLIGHT, TERM_ACTIVATIONS, pt(x, PT_FWD, 0), AT_BEFORE, pt(x, PT_BWD, 0), AT_AFTER,
              (double)(x->pp_in_flight - 1) * a);
}
