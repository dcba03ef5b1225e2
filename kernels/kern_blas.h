/* kern_blas.h — how the CPU kernels' BLAS (OpenBLAS) runs: which of its CPU kernels it uses and
 * how many threads a rank gives it.
 *
 * OpenBLAS picks its GEMM kernel from the CPU model number at load time. A CPU model newer than
 * the library (Debian 12's OpenBLAS 0.3.21 on a Xeon of family 6 model 207, for one) falls back
 * to the SSE3 "Prescott" kernel: 10-25 GFLOP/s where the AVX-512 kernel does 130-145 on one core
 * (measured: docs/validation.md, "Engine speed"). OPENBLAS_CORETYPE overrides the choice, but
 * only when set before the library loads, hence the re-exec below. */
#ifndef KERN_BLAS_H
#define KERN_BLAS_H

/* When OPENBLAS_CORETYPE is unset and OpenBLAS chose a core older than the CPU's vector
 * features (Prescott etc. on a CPU with AVX-512F or AVX2), sets OPENBLAS_CORETYPE to the
 * matching core (SkylakeX or Haswell) and re-executes this program (/proc/self/exe, the same
 * argv and pid: mpirun is unaffected). Returns without doing anything otherwise, and when the
 * re-exec fails (the program then runs with the slower kernel). Call first thing in main. */
void kern_blas_select_core(char **argv);

/* BLAS threads for one rank of local_ranks sharing this node's cores: OPENBLAS_NUM_THREADS when
 * set, else cores / local_ranks (at least 1), so that ranks do not oversubscribe the cores
 * (OpenBLAS alone would start one thread per core in every rank). Sets it and returns it. */
int kern_blas_set_threads(int local_ranks);

#endif
