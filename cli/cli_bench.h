/* cli_bench.h — `memplan bench syncbn`: what SyncBatchNorm costs, measured on the executor's CNN
 * under DDP (plain BatchNorm against SyncBN, per-GPU batches by rank counts) next to the
 * planner's prediction; a table, JSON and a plot. Started under mpirun (2 or more ranks).
 * Returns the process exit status (0, 1 a failed run, 2 a usage error). */
#ifndef CLI_BENCH_H
#define CLI_BENCH_H

int cli_cmd_bench(int argc, char **argv);

#endif
