/* cli_torch.h — `memplan validate --against torch`: plan a setup with the PyTorch layout, run
 * the same setup in real PyTorch / DeepSpeed (bench/torch/harness.py under torchrun, CPU ranks
 * over gloo), and print predicted versus measured side by side. Needs no MPI, BLAS or CUDA in
 * this process: the measurement runs in the harness's processes. */
#ifndef CLI_TORCH_H
#define CLI_TORCH_H

/* argv[0] is "validate". Returns the exit status: 0 all rows pass, 1 a row fails or a run
 * failed, 2 usage error or missing environment. */
int cli_cmd_validate_torch(int argc, char **argv);

/* 1 if argv (after the subcommand) asks for --against (any value). */
int cli_wants_against(int argc, char **argv);

#endif
