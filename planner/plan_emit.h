/* plan_emit.h — what `memplan auto --emit deepspeed|torch` prints for auto's pick: a DeepSpeed
 * config (only keys DeepSpeed's config parser knows), or a torchrun command and the wrapping
 * snippet; memplan's prediction as '#' comment lines. docs/formulas.md "Auto mode". */
#ifndef PLAN_EMIT_H
#define PLAN_EMIT_H

#include <stdio.h>

#include "plan_auto.h"

/* DeepSpeed config JSON for the choice (caller frees): only keys DeepSpeed's config parser
   knows, integer byte counts; memplan's prediction goes through plan_emit_prediction. */
char *plan_emit_deepspeed_json(const ModelSpec *m, const ClusterSpec *c, const AutoResult *r);
/* memplan's prediction for the choice as '#' comment lines. */
void plan_emit_prediction(FILE *f, const ClusterSpec *c, const AutoResult *r);
/* torchrun command line and the DDP/FSDP wrapping snippet; alloc_env ("PYTORCH_CUDA_ALLOC_CONF=..."
   quoted for a shell, or NULL) the allocator settings the plan replayed, set for the job. */
void plan_emit_torch(FILE *f, const ModelSpec *m, const ClusterSpec *c, const AutoResult *r, const char *alloc_env);
/* What a DeepSpeed config cannot hold but the plan has, as the Python lines train.py runs before
   deepspeed.initialize: the trainable subset (PEFT, a quantized base) and checkpointing other than
   none or full (which the config's activation_checkpointing section stands for); nothing when
   the config holds it all. */
void plan_emit_deepspeed_code(FILE *f, const ModelSpec *m, const AutoResult *r);
/* The Hugging Face transformer block class of a family (ModelSpec.family: the config's
   model_type), "BLOCK" when unknown; *module (may be NULL): its transformers.models module, NULL
   when unknown. */
const char *plan_emit_block_class(const char *family, const char **module);

#endif
