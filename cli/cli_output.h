/* cli_output.h — files the planning commands write: the simulated timeline as a Chrome trace
 * (the profiler's writer, so predicted and measured traces open side by side in Perfetto) and
 * gnuplot plots of the memory breakdown and of memory over the step. */
#ifndef CLI_OUTPUT_H
#define CLI_OUTPUT_H

#include "plan_plan.h"

/* One process per planned strategy: compute and comm lanes, memory counters. 0 or -1. */
int cli_write_sim_trace(const char *path, const ModelSpec *m, const TrainSpec *t,
                        const ClusterSpec *c, const Plan *p);
/* PNG or SVG by extension; without gnuplot, writes the data and script beside it and says so.
 * 0 on success (also when gnuplot is missing), -1 on a write error. */
int cli_write_plot(const char *path, const ModelSpec *m, const TrainSpec *t, const ClusterSpec *c,
                   const Plan *p);

#endif
