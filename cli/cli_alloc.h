/* cli_alloc.h — `memplan alloc`: replays recorded allocation sequences (bench/torch/harness.py
 * --alloc-trace) through the caching allocator model and prints the reserved memory a GPU run
 * would hold. */
#ifndef CLI_ALLOC_H
#define CLI_ALLOC_H

int cli_cmd_alloc(int argc, char **argv);

#endif
