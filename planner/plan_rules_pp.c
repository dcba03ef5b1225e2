/* plan_rules_pp.c — pipeline parallelism's own rules (plan_pp.h): what one stage holds beyond
 * the account of its blocks run for one micro-batch. Closed forms, not measured:
 * docs/formulas.md "Pipeline parallel". */
#include "plan_step_internal.h"

/* A stage keeps every micro-batch's saved tensors from its forward to its backward. Under 1F1B
   stage s runs min(M, pp - s) forwards before its first backward (torch/distributed/pipelining/
   schedules.py Schedule1F1B._step_microbatches: warmup_chunks; Narayanan et al. 2021 §2.2,
   PipeDream-Flush: at most pp micro-batches in flight), under GPipe all M
   (ScheduleGPipe._step_microbatches; Huang et al. 2019). The account's own micro-batch is the
   one whose forward runs last; the others' saved bytes are held beside it from the first forward
   to the end of backward (the peak is at the first backward, where all are live). */
void rule_pp(const StepCtx *x, Step *st) {
    if (x->pp_in_flight <= 1 || x->L == 0) return;
    double a = 0;   /* one micro-batch's saved bytes on this stage (rule_saved_activations') */
    for (int i = 0; i < x->L; i++) a += plan_act_ckpt_bytes(x->m, i, x->t, &x->in);
    step_hold(st, RULE_PP_IN_FLIGHT, TERM_ACTIVATIONS, pt(x, PT_FWD, 0), AT_BEFORE, pt(x, PT_BWD, 0), AT_AFTER,
              (double)(x->pp_in_flight - 1) * a);
}
