/* cli_time.h — `memplan validate`'s time rows: the planner's time model (plan_sim) on a cluster
 * set from the measured device description (exec_describe.h), against the engine's measured
 * steady-state step (medians over steps 2..K, rank 0). docs/validation.md "Time". */
#ifndef CLI_TIME_H
#define CLI_TIME_H

#include <cjson/cJSON.h>
#include <stdio.h>

#include "exec_describe.h"
#include "exec_run.h"
#include "plan_gpu.h"
#include "plan_model.h"
#include "plan_strategy.h"
#include "plan_train.h"

#define CLI_TIME_TOLERANCE 0.15   /* the step-time target of issue 13 */
/* A step time is judged only from at least CLI_TIME_MIN_STEADY steady steps (their median) of
 * at least CLI_TIME_MIN_STEP_MS each (the median): on this 2-core machine a shorter step moves by
 * more than the tolerance from run to run (a scheduler slice, a collective's wake-up, are
 * milliseconds), so it says nothing about the model. Measured: docs/validation.md "Time rows". */
#define CLI_TIME_MIN_STEADY 5
#define CLI_TIME_MIN_STEP_MS 30.0
#define CLI_TIME_NOT_JUDGED (-1)

/* The cluster from d: peak fp32 = the GEMM rate (mfu 1), memory bandwidth = the elementwise
 * passes', the optimizer's rate, per collective its bus bandwidth and latency per ring step, the
 * collective's cost among computing ranks as the base latency, and the steal factor. */
void cli_time_cluster(const DeviceDesc *d, ClusterSpec *c);
void cli_time_print_desc(FILE *f, const char *strategy, const DeviceDesc *d);
cJSON *cli_time_desc_json(const DeviceDesc *d);

/* Rows step, forward, backward, optimizer (phase walls: compute and the waits inside), compute
 * (the step without its waits) and exposed_comm (the waits) for one strategy, predicted vs
 * measured (ms per optimizer step); adds "time" to o. Returns 1 when the step time is within
 * CLI_TIME_TOLERANCE, 0 otherwise (reported, not a validate failure: see the docs), or
 * CLI_TIME_NOT_JUDGED after a line saying the run was too short to judge. */
int cli_time_rows(FILE *f, const char *strategy, const ModelSpec *m, const TrainSpec *t, const ClusterSpec *c,
                  StrategyKind k, const ExecRunResult *r, int steps, cJSON *o);

#endif
