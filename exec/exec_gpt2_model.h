/* exec_gpt2_model.h — GPT-2 (exec_gpt2.h) behind the model interface (exec_model.h), so the
 * data-parallel strategies drive it like any other model. The adapter owns the Gpt2 and turns
 * its Gpt2Hooks into the ExecHooks of the strategy; units, hook order and memory layout are
 * exec_gpt2.h's (units 0 and L+1 are the root: the embeddings tied to the LM head bracket each
 * pass, and the final LayerNorm is sharded with them). GPT-2 has no buffers. */
#ifndef EXEC_GPT2_MODEL_H
#define EXEC_GPT2_MODEL_H

#include "exec_gpt2.h"
#include "exec_model.h"

/* As gpt2_create_on (dev NULL or host = the CPU engine; a CUDA device = device memory and the
 * CUDA kernels; hooks may be NULL; ctx goes to every hook). Returns 0, or -1 with *out NULL: an
 * invalid config (gpt2_config_check gives the sentence) or out of memory (in the tracker). */
int exec_gpt2_model_create_on(ExecModel **out, const Gpt2Config *cfg, MemTracker *mt, Device *dev,
                              const ExecHooks *hooks, void *ctx);

#endif
