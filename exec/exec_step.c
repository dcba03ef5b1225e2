/* exec_step.c — the one training step (exec_step.h). */
#include "exec_step.h"

#include <math.h>
#include <string.h>

#include "exec_device.h"

static const struct {
    const char *timer;     /* the phase timer's name */
    const char *planner;   /* the tracker's and the counters' (the planner's phases); NULL: none */
} PHASES[EXEC_PHASE_COUNT] = {
    [EXEC_PHASE_FORWARD] = {"forward", "forward"},
    [EXEC_PHASE_BACKWARD] = {"backward", "backward"},
    [EXEC_PHASE_OPTIMIZER] = {"optimizer", "step"},
    [EXEC_PHASE_STEP] = {"step", NULL},
    [EXEC_PHASE_COMM_WAIT] = {"comm_wait", NULL},
};

const char *exec_phase_name(ExecPhase p) { return (unsigned)p < EXEC_PHASE_COUNT ? PHASES[p].timer : "unknown"; }
const char *exec_phase_planner_name(ExecPhase p) { return (unsigned)p < EXEC_PHASE_COUNT ? PHASES[p].planner : NULL; }

int exec_step_fixed_batch(void *ctx, int micro, ExecBatch *b)
{
    (void)micro;
    *b = *(const ExecBatch *)ctx;
    return 0;
}

/* A CUPTI phase boundary: the compute stream is drained first, so the kernels the host queued in
 * the previous phase count there (collectives in flight on the comm stream run on). */
static void cupti_phase(const ExecStep *st, const char *name)
{
    if (!st->cupti) return;
    exec_device_sync_compute(st->dev);
    prof_cupti_set_phase(st->cupti, name);
}

/* Part p begins: the tracker's and the counters' phase, the timer's; returns the clock (µs). */
static double enter(const ExecStep *st, ExecPhase p)
{
    if (st->mt) prof_mem_set_phase(st->mt, PHASES[p].planner);
    if (st->cc) prof_comm_set_phase(st->cc, PHASES[p].planner);
    if (st->pt) prof_phase_begin(st->pt, PHASES[p].timer);
    return prof_clock_us();
}

/* Part p ends: its wall time is added to out->ms[p]. */
static void leave(const ExecStep *st, ExecPhase p, double t0_us, ExecStepResult *out)
{
    out->ms[p] += (prof_clock_us() - t0_us) / 1e3;
    if (st->pt) prof_phase_end(st->pt, PHASES[p].timer);
}

/* One micro-batch: forward, backward, the strategy's end of backward. NULL or why it failed. */
static const char *micro_step(const ExecStep *st, int a, ExecStepResult *out)
{
    ExecBatch b;
    if (st->batch(st->batch_ctx, a, &b)) return "cannot make the step's batch";
    exec_strategy_begin_micro(st->s, a == st->accum - 1);
    const char *why = NULL;
    float loss = 0;
    cupti_phase(st, "forward");
    double t0 = enter(st, EXEC_PHASE_FORWARD);
    if (exec_model_forward(st->m, &b, &loss)) why = exec_model_error(st->m);
    leave(st, EXEC_PHASE_FORWARD, t0, out);
    if (why) return why;
    out->loss_sum += loss;
    if (!isfinite(loss)) out->nonfinite = 1;
    cupti_phase(st, "backward");
    t0 = enter(st, EXEC_PHASE_BACKWARD);
    if (exec_model_backward(st->m)) {
        why = exec_model_error(st->m);
    } else {
        cupti_phase(st, "comm");
        if (exec_strategy_end_backward(st->s)) why = exec_strategy_error(st->s);
    }
    leave(st, EXEC_PHASE_BACKWARD, t0, out);
    return why;
}

int exec_step(const ExecStep *st, int t, ExecStepResult *out)
{
    memset(out, 0, sizeof *out);
    int gpu = st->dev && exec_device_kind(st->dev) == DEVICE_CUDA;
    double t0 = prof_clock_us();
    if (st->pt) prof_phase_begin(st->pt, PHASES[EXEC_PHASE_STEP].timer);
    const char *why = exec_strategy_zero_grad(st->s) ? exec_strategy_error(st->s) : NULL;
    for (int a = 0; a < st->accum && !why; a++) why = micro_step(st, a, out);
    if (!why) {
        cupti_phase(st, "optimizer");
        double t1 = enter(st, EXEC_PHASE_OPTIMIZER);
        if (exec_strategy_step(st->s, &st->opt, t)) why = exec_strategy_error(st->s);
        /* the step's time is the GPU's: wait for its last kernels */
        if (!why && gpu && (exec_device_sync_compute(st->dev) || exec_device_failed(st->dev)))
            why = "a CUDA call failed on the GPU (see the message above)";
        leave(st, EXEC_PHASE_OPTIMIZER, t1, out);
    }
    if (st->pt) prof_phase_end(st->pt, PHASES[EXEC_PHASE_STEP].timer);
    out->ms[EXEC_PHASE_STEP] = (prof_clock_us() - t0) / 1e3;
    if (!why) return 0;
    const char *detail = exec_strategy_error(st->s);
    out->why = detail && *detail ? detail : why;
    return -1;
}
