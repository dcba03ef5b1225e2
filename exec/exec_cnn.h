/* exec_cnn.h — the ResNet-style CNN runtime of the executor: torchvision's ResNet with bottleneck
 * blocks (conv 7×7/2 -> BN -> ReLU -> max-pool 3×3/2 stem; stages of bottleneck blocks 1×1 ->
 * 3×3 (stride on the 3×3, torchvision's v1.5) -> 1×1 ×4 with a 1×1 downsample conv + BN where the
 * shape changes; residual add + ReLU; global average pool; linear head; softmax cross-entropy),
 * on the fp32 CPU kernels of kernels/kern_cnn.h and kern_ops.h. Every buffer comes from the
 * tracked allocator under its category. It implements the model interface (exec_model.h), so
 * the data-parallel strategies drive it as they drive GPT-2.
 *
 * Units. One unit per layer with parameters, in torchvision's order (the planner's zoo order,
 * planner/plan_zoo.c, layer by layer): stem conv, stem bn, then per block conv1, bn1, conv2,
 * bn2, conv3, bn3 [, downsample conv, downsample bn], and the fc head last. A conv unit holds its
 * weight (OC, C, K, K) (no bias); a BN unit weight (C) then bias (C); the fc unit weight
 * (classes, C) then bias (classes). resnet50: 107 units, 25,557,032 parameters, 53 BN layers.
 * No root units: every pass runs units in order (forward ascending, backward descending; a
 * block's downsample branch is computed after its main branch and differentiated before it).
 *
 * Buffers (exec_model_buffers, MEM_PARAMS): per BN layer, in order, running_mean (C),
 * running_var (C) and num_batches_tracked (1, as a float): Σ (2C+1) fp32, what DDP broadcasts.
 * Initial values 0, 1, 0 (PyTorch).
 *
 * Memory of a step. MEM_ACTIVATIONS: each layer's output that a backward needs (a conv output
 * = its BN's input; a BN output followed by ReLU; a block output; the pooled features), per BN
 * layer its saved mean and invstd (2C), the max-pool's argmax (int32), logits, probabilities
 * and per-sample losses; an output no backward needs (a BN output before the residual add) is
 * freed as soon as the add has consumed it. MEM_WORKSPACE: the im2col scratch (one image's
 * largest) during each pass, and the activation gradients, each created zeroed when first
 * needed and freed once consumed. MEM_GRADS per unit, lazily at its first backward (kept);
 * MEM_OPTIMIZER per unit at the first AdamW step. SyncBN's collective buffers are MEM_COMM for
 * the duration of the call. Activations and workspace are gone at the end of backward.
 *
 * SyncBatchNorm: exec_cnn_convert_sync_batchnorm converts every BN layer in one call (their
 * parameters and buffers stay as they are); it must happen before a strategy wraps the model
 * (exec_strategy_bind), as torch.nn.SyncBatchNorm.convert_sync_batchnorm before
 * DistributedDataParallel. The layer's mechanics are exec_bn.h's: training with more than one
 * rank all-gathers (2C+1) fp32 per rank in forward and all-reduces 2C fp32 in backward, per BN
 * layer; evaluation mode and one rank skip the collectives. */
#ifndef EXEC_CNN_H
#define EXEC_CNN_H

#include <stddef.h>
#include <stdint.h>

#include "exec_comm.h"
#include "exec_model.h"
#include "prof_mem.h"

/* ---- configuration ---- */
typedef struct {
    char name[32];
    int depths[4];      /* bottleneck blocks per stage (resnet50: 3, 4, 6, 3) */
    int width;          /* stem channels; stage s has width·2^s planes and 4× that out */
    int image_size;     /* H = W of the input images */
    int in_channels;    /* 3 */
    int classes;
} CnnConfig;

/* Presets: "resnet50" (3,4,6,3, width 64, 224×224, 1000 classes: torchvision's), "resnet-tiny"
 * (1,1,1,1, width 8, 32×32, 10 classes), "resnet-mini" (2,2,2,2, width 16, 32×32, 10).
 * 0, or -1 for an unknown name. */
int exec_cnn_config_preset(CnnConfig *cfg, const char *name);
int exec_cnn_preset_count(void);
const char *exec_cnn_preset_name(int i);   /* NULL when out of range */
int exec_cnn_cfg_units(const CnnConfig *cfg);
size_t exec_cnn_cfg_unit_numel(const CnnConfig *cfg, int unit);   /* 0 if out of range */
int64_t exec_cnn_cfg_num_params(const CnnConfig *cfg);
/* Number of BN layers; Σ channels in *sum_channels (may be NULL). */
int exec_cnn_cfg_bn_layers(const CnnConfig *cfg, int64_t *sum_channels);
/* The unit's layer name as the planner's zoo writes it ("stem.conv", "layer1.0.2.bn",
 * "layer2.0.downsample.conv", "fc"); "" if out of range. */
const char *exec_cnn_cfg_unit_name(const CnnConfig *cfg, int unit, char *buf, size_t len);
/* Forward FLOPs per image (convs and fc, 2 per multiply-add), for rates and predictions. */
double exec_cnn_cfg_fwd_flops(const CnnConfig *cfg);
/* Seeded initial parameters (the model interface's init_unit_range: exec_cnn_init_params, a
 * strategy's bind), as torchvision: conv kaiming_normal (fan_out, ReLU gain):
 * std = sqrt(2 / (OC·K·K)); BN weight 1, bias 0; fc weight and bias uniform(±1/sqrt(C)).
 * Each value depends only on (seed, unit, element index). */

/* ---- the model ---- */
typedef struct Cnn Cnn;   /* opaque */

/* hooks may be NULL (no strategy); ctx goes to every hook. Allocates the parameters
 * (MEM_PARAMS, uninitialised: exec_model_init_params or a strategy's bind initialises them)
 * unless hooks->external_params, and the buffers (initialised). 0, or -1 with *out NULL (an
 * invalid config, or out of memory: the tracker records it). */
int exec_cnn_create(Cnn **out, const CnnConfig *cfg, MemTracker *mt, const ExecHooks *hooks, void *ctx);
/* The same on a device (NULL or a host Device: the CPU, as exec_cnn_create). On a CUDA device mt
 * must be that device's tracker (exec_device_tracker_create): parameters, gradients, optimizer
 * state, BN buffers, activations and workspace are device memory; the kernels are the CUDA
 * table's (exec_kern.h: kern_cnn_cuda.h, kern_cuda.h) on the device's compute stream. The batch
 * stays a host one: each forward copies its images and labels into tracked device buffers
 * (MEM_ACTIVATIONS, B·C·S·S fp32 + B int32, freed with the step's activations) and reads the
 * per-sample losses back for the mean loss. exec_cnn_logits then returns device memory. */
typedef struct Device Device;
int exec_cnn_create_on(Cnn **out, const CnnConfig *cfg, MemTracker *mt, Device *dev, const ExecHooks *hooks,
                       void *ctx);
/* Initialises the parameters the model allocated (no strategy), on the host or copied to the
 * device; exec_model_init_params writes host memory and so serves the host only. 0 or -1. */
int exec_cnn_init_params(Cnn *c, uint64_t seed);
Device *exec_cnn_device(const Cnn *c);    /* NULL on the host */
void exec_cnn_destroy(Cnn *c);            /* NULL is ignored; = exec_model_destroy(exec_cnn_model(c)) */
ExecModel *exec_cnn_model(Cnn *c);        /* the model interface of c */
const char *exec_cnn_error(const Cnn *c);

/* Converts every BatchNorm layer to SyncBatchNorm over comm, in one call, reusing its parameters
 * and buffers. Returns the number of layers converted, or -1 when the model is already wrapped
 * by a strategy (the error, in exec_cnn_error, says to convert first) or comm is NULL. */
int exec_cnn_convert_sync_batchnorm(Cnn *c, Comm *comm);
int exec_cnn_synced(const Cnn *c);        /* 1 after the conversion */
/* Wall seconds this rank spent inside SyncBN's collectives since creation (waits for slower
 * ranks included): out[0] forward all-gathers, out[1] backward all-reduces. */
void exec_cnn_syncbn_seconds(const Cnn *c, double out[2]);
/* 1: training (batch statistics; SyncBN communicates); 0: evaluation (running statistics, no
 * collectives; backward is refused). Default 1, like nn.Module. */
void exec_cnn_set_training(Cnn *c, int training);
/* The last forward's logits (B, classes), until the next forward or backward; NULL if none. */
const float *exec_cnn_logits(const Cnn *c, int *batch);

/* Forward and backward go through the model interface: exec_model_forward(exec_cnn_model(c),
 * &(ExecBatch){images (B, in_channels, S, S) fp32, labels (B) int32 in [0, classes), B, 0},
 * &mean_loss), then exec_model_backward. B >= 1 (>= 2 for BN statistics with one rank). */

/* ---- synthetic data ---- */
/* Seeded images with a learnable class: row g of step `step` has label = hash(seed, step, g) mod
 * classes and pixels = template(label) + 0.5·noise(seed, step, g), both standard normal, each
 * value depending only on (seed, step, g, index). Fills rows first_row .. first_row+rows-1 of
 * the step's global batch (a rank's DistributedSampler shard: contiguous rows, as
 * gpt2_synthetic_batch), images (rows, C, S, S), labels (rows). -1 on invalid arguments. */
int exec_cnn_synthetic_batch(const CnnConfig *cfg, uint64_t seed, int step, int first_row, int rows,
                             float *images, int *labels);

#endif
