/* plan_train.c — precision and optimizer tables (REFERENCE: "Bytes per parameter").
 *   regime      params grads master states act
 *   fp32          4     4     0     4      4
 *   amp-*         4     4     0     4      2   torch.autocast; +2 B/param cached casts
 *   mixed-*       2     2     4     4      2   DeepSpeed/Megatron: K = 4 + 4 + 4 = 12
 *   bf16          2     2     0     2      2   pure bf16, torch AdamW keeps bf16 states */
#include "plan_train.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const PrecisionSpec PRECISIONS[PREC_COUNT] = {
    {"fp32", "fp32 params, grads and compute", 4, 4, 0, 4, 4, 0, 0, PEAK_FP32},
    {"amp-fp16", "torch.autocast fp16: fp32 params/grads, fp16 compute", 4, 4, 0, 4, 2, 1, 2, PEAK_FP16},
    {"amp-bf16", "torch.autocast bf16: fp32 params/grads, bf16 compute", 4, 4, 0, 4, 2, 1, 2, PEAK_BF16},
    {"mixed-fp16", "fp16 params/grads, fp32 master weights (DeepSpeed/Megatron)", 2, 2, 4, 4, 2, 0, 0, PEAK_FP16},
    {"mixed-bf16", "bf16 params/grads, fp32 master weights (DeepSpeed/Megatron)", 2, 2, 4, 4, 2, 0, 0, PEAK_BF16},
    {"bf16", "pure bf16: params, grads and AdamW states in bf16", 2, 2, 0, 2, 2, 0, 0, PEAK_BF16},
};

static const OptimizerSpec OPTIMIZERS[OPT_COUNT] = {
    {"adamw", 2, 1, 1},
    {"adam", 2, 1, 1},
    {"sgd", 0, 0, 0},
    {"sgd-momentum", 1, 0, 0},
};

static const char *const ATTN_NAMES[ATTN_COUNT] = {"eager", "sdpa"};
static const char *const ATTN_KERNEL_NAMES[ATTN_KERNEL_COUNT] = {"fa2", "fa3", "fa4"};
static const char *const CKPT_NAMES[CKPT_COUNT] = {"none", "full", "every", "op", "selective"};
static const char *const IMPL_NAMES[IMPL_COUNT] = {"pytorch", "engine"};
static const char *const OFFLOAD_NAMES[OFFLOAD_COUNT] = {"none", "optimizer", "params"};
static const char *const FSDP_SYNC_NAMES[FSDP_SYNC_COUNT] = {"every", "last"};
static const char *const FSDP_BWD_NAMES[FSDP_BWD_COUNT] = {"pre", "post", "none"};

void plan_train_defaults(TrainSpec *t) {
    memset(t, 0, sizeof(*t));
    t->micro_batch = 1;
    t->grad_accum = 1;
    t->precision = PREC_AMP_BF16;
    t->optimizer = OPT_ADAMW;
    t->attn = ATTN_SDPA;
    t->act_ckpt = CKPT_NONE;
    t->dropout = -1;
    t->impl = IMPL_PYTORCH;
    t->fsdp_impl = 2;
    t->fsdp_grad_sync = FSDP_SYNC_EVERY;
    t->tp = 1;
    t->pp = 1;
    t->ep = 1;
    t->cp = 1;
}

DsKnobs plan_ds_knobs(const TrainSpec *t) {
    static const DsKnobs DEF = {PLAN_DS_REDUCE_BUCKET, PLAN_DS_ALLGATHER_BUCKET, PLAN_DS3_PREFETCH,
                                PLAN_DS3_MAX_LIVE, PLAN_DS3_REUSE, PLAN_DS3_PERSIST, 0, PARAM_SYNC_ALLGATHER, 0};
    DsKnobs k = t->ds;
    if (k.reduce_bucket <= 0) k.reduce_bucket = DEF.reduce_bucket;
    if (k.allgather_bucket <= 0) k.allgather_bucket = DEF.allgather_bucket;
    if (k.prefetch <= 0) k.prefetch = DEF.prefetch;
    if (k.max_live <= 0) k.max_live = DEF.max_live;
    if (k.max_reuse <= 0) k.max_reuse = DEF.max_reuse;
    if (k.persist <= 0) k.persist = DEF.persist;
    return k;
}

const PrecisionSpec *plan_precision(PrecisionKind k) { return &PRECISIONS[k]; }
const OptimizerSpec *plan_optimizer(OptimizerKind k) { return &OPTIMIZERS[k]; }

int plan_precision_by_name(const char *s) {
    for (int i = 0; i < PREC_COUNT; i++) if (strcmp(s, PRECISIONS[i].name) == 0) return i;
    return -1;
}
int plan_optimizer_by_name(const char *s) {
    for (int i = 0; i < OPT_COUNT; i++) if (strcmp(s, OPTIMIZERS[i].name) == 0) return i;
    return -1;
}
static int by_name(const char *s, const char *const *names, int n) {
    for (int i = 0; i < n; i++) if (strcmp(s, names[i]) == 0) return i;
    return -1;
}
int plan_attn_by_name(const char *s) { return by_name(s, ATTN_NAMES, ATTN_COUNT); }
int plan_attn_kernel_by_name(const char *s) { return by_name(s, ATTN_KERNEL_NAMES, ATTN_KERNEL_COUNT); }
int plan_ckpt_by_name(const char *s) {
    int v = by_name(s, CKPT_NAMES, CKPT_COUNT);
    return v == CKPT_EVERY ? -1 : v;   /* "every" alone names no policy: every:N does */
}

int plan_ckpt_parse(const char *s, CkptKind *k, int *every) {
    int v = plan_ckpt_by_name(s);
    if (v >= 0) {
        *k = (CkptKind)v;
        *every = v == CKPT_FULL ? 1 : 0;   /* op, selective: every block, each in part */
        return 0;
    }
    if (strncmp(s, "every:", 6) != 0) return -1;
    char *end;
    errno = 0;
    long n = strtol(s + 6, &end, 10);
    if (errno || end == s + 6 || *end || n < 1 || n > 100000) return -1;
    *k = n == 1 ? CKPT_FULL : CKPT_EVERY;   /* every block is full checkpointing */
    *every = (int)n;
    return 0;
}

const char *plan_ckpt_label(const TrainSpec *t, char *buf, size_t len) {
    if (t->act_ckpt == CKPT_EVERY) snprintf(buf, len, "every:%d", t->ckpt_every);
    else snprintf(buf, len, "%s", CKPT_NAMES[t->act_ckpt]);
    return buf;
}
int plan_impl_by_name(const char *s) { return by_name(s, IMPL_NAMES, IMPL_COUNT); }
int plan_offload_by_name(const char *s) { return by_name(s, OFFLOAD_NAMES, OFFLOAD_COUNT); }
const char *plan_offload_name(OffloadKind o) { return OFFLOAD_NAMES[o]; }
int plan_fsdp_sync_by_name(const char *s) { return by_name(s, FSDP_SYNC_NAMES, FSDP_SYNC_COUNT); }
const char *plan_fsdp_sync_name(FsdpSyncKind k) { return FSDP_SYNC_NAMES[k]; }
int plan_fsdp_bwd_by_name(const char *s) { return by_name(s, FSDP_BWD_NAMES, FSDP_BWD_COUNT); }
const char *plan_fsdp_bwd_name(FsdpBwdPrefetch k) { return FSDP_BWD_NAMES[k]; }
const char *plan_attn_name(AttnKind a) { return ATTN_NAMES[a]; }
const char *plan_attn_kernel_name(AttnKernel k) { return ATTN_KERNEL_NAMES[k]; }
const char *plan_attn_label(const TrainSpec *t) {
    return t->attn == ATTN_SDPA && t->attn_kernel != ATTN_KERNEL_FA2 ? ATTN_KERNEL_NAMES[t->attn_kernel]
                                                                      : ATTN_NAMES[t->attn];
}
const char *plan_ckpt_name(CkptKind c) { return CKPT_NAMES[c]; }
const char *plan_impl_name(ImplKind i) { return IMPL_NAMES[i]; }

const char *plan_precision_names(void) {
    return "fp32, amp-fp16, amp-bf16, mixed-fp16, mixed-bf16, bf16";
}
const char *plan_optimizer_names(void) { return "adamw, adam, sgd, sgd-momentum"; }
