/* plan_dim_ft.h — fine-tuning as one dimension (plan_dim.h): the trainable subset of a model: LoRA adapters (PEFT's get_peft_model) and
 * frozen parameters (--freeze), applied to a built ModelSpec. Afterwards each layer's params and
 * tensors are its trainable ones (gradients, optimizer state, reductions read them) and its
 * frozen ones are LayerSpec.frozen and frozen_elems (storage, ZeRO-3 / FSDP shards and gathers
 * read them). docs/formulas.md "LoRA and frozen parameters" gives each rule's source. */
#ifndef PLAN_DIM_FT_H
#define PLAN_DIM_FT_H

#include <stddef.h>
#include <stdio.h>

#include "plan_dim.h"
#include "plan_model.h"
#include "plan_train.h"

/* 1 when t asks for a trainable subset (LoRA or --freeze). */
int plan_finetune_on(const FinetuneSpec *f);
/* "none", "embeddings", "all-but-last:N" (N >= 1) into f; 0, or -1 if not valid. */
int plan_freeze_parse(const char *s, FinetuneSpec *f);
/* f's freeze as --freeze takes it, in buf. */
const char *plan_freeze_label(const FinetuneSpec *f, char *buf, size_t len);
int plan_quant_by_name(const char *s);        /* none, bf16, int8, nf4; -1 if unknown */
const char *plan_quant_name(QuantKind q);
/* PEFT's default target modules for a model type (TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_
   MAPPING, peft/utils/constants.py), "" when PEFT has none. */
const char *plan_lora_default_targets(const char *family);
/* The targets t's LoRA resolves to for m (its --lora-targets or the default), in buf. */
const char *plan_lora_targets(const ModelSpec *m, const FinetuneSpec *f, char *buf, size_t len);

/* 1 when f's LoRA (its targets, or PEFT's default for m) adapts module mod (a PlanModule). */
int plan_lora_adapts(const ModelSpec *m, const FinetuneSpec *f, int mod);

/* Per input group g (1 to 5) of layer l's projections: its width in_of[g] (elements per token)
   and how many of its copies autograd no longer saves with the base frozen and f's adapters on
   it (without or under autocast); what the layer's act_unsaved counts sum. */
void plan_lora_unsaved(const ModelSpec *m, const LayerSpec *l, const FinetuneSpec *f, int autocast,
                       int64_t in_of[6], int unsaved[6]);

/* Applies t->ft to m (LoRA adapters added as trainable tensors, the base frozen; or --freeze),
   with the activation changes for t's precision. 0, or -1 with msg naming the bad value and
   the valid ones (a target no module has, a model without named projections). m unchanged
   when nothing is asked. */
int plan_finetune_apply(ModelSpec *m, const TrainSpec *t, char *msg, size_t len);

/* Bytes per element of the frozen base's storage (--quant-base; the precision's param bytes
   otherwise): bf16 2, int8 1 + its per-row fp32 scale, NF4 0.5 + the double-quantized
   absmax constants (bitsandbytes functional.py quantize_4bit, blocksize 64; the absmax
   quantized to 8 bits in blocks of 256 with fp32 second-level constants). */
double plan_quant_bytes_per_param(const TrainSpec *t);
/* Bytes of m's frozen parameters held whole: the projections at plan_quant_bytes_per_param, the
   rest (embeddings, norms, the head) at the precision's parameter bytes. */
double plan_model_frozen_bytes(const ModelSpec *m, const TrainSpec *t);

/* --emit: the Python lines that make t's trainable subset (PEFT's get_peft_model with t's LoRA,
   QLoRA's 4-bit loading as a comment, or --freeze's requires_grad_(False)), as train.py would run
   them before wrapping the model under strategy sk (its compute dtype t's precision's; a sharded
   strategy stores a 4-bit base in that float dtype so that it shards); nothing without one. */
void plan_ft_emit_code(FILE *f, const ModelSpec *m, const TrainSpec *t, StrategyKind sk);

extern const PlanDim plan_dim_ft;

#endif
