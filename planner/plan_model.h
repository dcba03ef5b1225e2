/* plan_model.h — what the planner knows about a model: its layers (each with its trainable
 * parameter count, non-trainable buffers, BatchNorm channels, forward FLOPs and saved
 * activations), plus the architecture hyper-parameters the activation model reads.
 *
 * A model is built layer by layer (plan_model_add_layer) by the zoo, by the loaders for
 * Hugging Face config.json / PyTorch params.json / memplan's own JSON format, or by
 * plan_model_generic for `--params N`. Parameter totals are always sums over layers, never
 * typed in. All counts are elements (not bytes) unless the name says _bytes. */
#ifndef PLAN_MODEL_H
#define PLAN_MODEL_H

#include <stdint.h>
#include <stddef.h>

/* What kind of layer this is, so the activation and communication models know how to read it. */
typedef enum {
    LAYER_EMBED = 0,   /* token (+ position) embeddings: activations = its output */
    LAYER_BLOCK,       /* one transformer block (attention + MLP + norms) */
    LAYER_NORM,        /* a lone final norm */
    LAYER_HEAD,        /* LM / classifier head: logits + loss activations */
    LAYER_CONV,        /* convolution (+ its BatchNorm, ReLU) as one saved-tensor group */
    LAYER_BN,          /* a BatchNorm layer (bn_channels > 0) */
    LAYER_LINEAR,      /* a dense layer outside a transformer block */
    LAYER_OTHER,       /* anything else (params.json layers, pooling) */
    LAYER_KIND_COUNT
} LayerKind;

/* Model families, each with its own activation terms (planner/plan_activ.c). */
typedef enum {
    ARCH_GENERIC = 0,  /* only parameter counts are known (--params, params.json) */
    ARCH_DECODER,      /* GPT-2, LLaMA, ... causal decoder */
    ARCH_ENCODER,      /* BERT */
    ARCH_ENC_DEC,      /* T5 */
    ARCH_CNN,          /* ResNet */
    ARCH_KIND_COUNT
} ArchKind;

typedef enum { NORM_LAYERNORM = 0, NORM_RMSNORM } NormKind;
/* Where a block's norms sit: before each sublayer (the classic pre-norm block), before and after
 * it (Gemma 2/3's sandwich), or only after it, on the sublayer's output (OLMo 2). */
typedef enum { NORM_PLACE_PRE = 0, NORM_PLACE_SANDWICH, NORM_PLACE_POST, NORM_PLACE_COUNT } NormPlace;
/* How q, k and v are projected, where it differs from what the norm implies (RMSNorm decoders:
 * three projections; the others: GPT-2's fused c_attn): separate (StarCoder2) or one fused
 * projection (Phi-3's qkv_proj). */
typedef enum { QKV_CLASSIC = 0, QKV_SEPARATE, QKV_FUSED, QKV_COUNT } QkvLayout;
/* MLP shapes: GELU as one fused op (saves its input), GPT-2's composite gelu_new (tanh
 * formula written out in eager PyTorch: saves four 4h tensors), ReLU, and gated SwiGLU/GeGLU. */
typedef enum { MLP_GELU = 0, MLP_GELU_NEW, MLP_RELU, MLP_SWIGLU } MlpKind;

#define PLAN_LAYER_MAX_TENSORS 32

/* How a MoE block's router picks and weighs its experts, as transformers 5.24 runs it; each saves
 * different tensors for backward (plan_activ.c, docs/formulas.md "Mixture of experts"). */
typedef enum {
    MOE_ROUTER_SOFTMAX = 0,  /* fp32 softmax over the E logits, then top-k (Mixtral, Qwen-MoE) */
    MOE_ROUTER_TOPK_SOFTMAX, /* top-k of the logits, softmax over those k (GPT-OSS) */
    MOE_ROUTER_GROUPED,      /* sigmoid scores, top-k within the best groups (DeepSeek-V3) */
    MOE_ROUTER_ALL_EXPERTS,  /* the top-k logits scattered into -inf, sigmoid: every expert runs on
                                every token, weighted 0 where not chosen (Llama 4) */
    MOE_ROUTER_COUNT
} MoeRouter;

/* The mixture-of-experts MLP of a model's MoE blocks (LayerSpec.expert_params > 0). */
typedef struct {
    int n_experts;           /* routed experts per MoE block (0 = a dense model) */
    int top_k;               /* experts each token is routed to */
    int64_t d_ff_expert;     /* each routed expert's MLP width */
    int64_t d_ff_shared;     /* the always-on shared expert(s)' total width (0 = none) */
    MoeRouter router;
    int norm_topk;           /* the top-k weights renormalised in place (Mixtral always; Qwen-MoE and
                                DeepSeek with norm_topk_prob) */
    int fp32_weights;        /* the routing weights stay fp32 (Mixtral); else the logits' dtype */
    int shared_gate;         /* Qwen2-MoE: a sigmoid gate (1 x h) on the shared expert */
    int shared_last;         /* the shared expert runs after the routed ones (DeepSeek, Llama 4) */
    int bias;                /* GPT-OSS: biases on the router and on the experts */
    int clamped_glu;         /* GPT-OSS: clamp, sigmoid(alpha x) and (up + 1) in the experts' SwiGLU */
    int router_logits;       /* output_router_logits: the logits kept in the output for the
                                load-balancing loss */
    int n_group, topk_group; /* MOE_ROUTER_GROUPED: expert groups and the groups a token's experts
                                come from (DeepSeek's n_group, topk_group; 0 reads as 1) */
    int ep;                  /* a rank's view under expert parallelism (planner/plan_dim_ep.h): the
                                blocks' routed-expert tensors hold n_experts / ep of the experts, and
                                a rank's experts run on the rows the dispatch brings them; 0 or 1 =
                                every expert (the model as given) */
} MoeSpec;

/* What a decoder block of the 2024-26 families saves beyond the classic block of its norm and MLP
 * (transformers 5.24's modeling_*.py; docs/formulas.md "Activations"). All zero = the classic block. */
typedef struct {
    int qk_norm;             /* 0; 1 = an RMSNorm over each head's q and k (Qwen3, Gemma 3); 2 = over
                                all of q and of k (OLMo 2) */
    NormPlace norm_place;
    int norm_fp32;           /* the RMSNorm scales by its weight before casting back, (x*w).to(dtype)
                                (Gemma, OLMo 2): it saves the normalised tensor in fp32 */
    QkvLayout qkv;
    int fused_gate_up;       /* one gate|up projection (Phi-3): autocast casts its input once */
    int rotary;              /* q and k pass a rotary embedding and softmax runs in fp32 (transformers'
                                shared eager attention); implied for RMSNorm decoders (StarCoder2) */
    int rotary_cat;          /* the rotary embedding concatenates rotated and passed dims (Phi-3's
                                partial rotary): q leaves it contiguous per head */
    int resid_dropout;       /* the sublayers' outputs pass a dropout; implied for non-RMSNorm models (Phi-3) */
    double attn_softcap;     /* tanh soft-capping of the attention scores (Gemma 2), 0 = none */
    double logit_softcap;    /* tanh soft-capping of the logits (Gemma 2), 0 = none */
} BlockSpec;

/* Multi-head latent attention (DeepSeek-V2/V3; kv_rank > 0): q through a q_rank bottleneck (0 = a
 * plain q_proj) to heads of nope + rope dims, k and v from a kv_rank latent (+ a shared rope key),
 * v heads of v_dim. */
typedef struct {
    int64_t q_rank, kv_rank, rope_dim, nope_dim, v_dim;
} MlaSpec;

typedef struct {
    char name[48];
    LayerKind kind;
    /* The FSDP unit the layer belongs to: k >= 1 = the model's k-th repeated block (a
     * transformer block, a ResNet bottleneck: fully_shard(block) each), 0 = the root
     * (fully_shard(model): embeddings, stem, final norm, head). A unit's layers are
     * consecutive and units are numbered in order. plan_model_add_layer numbers a LAYER_BLOCK
     * layer given without one as the next unit. A model without units (--params; a params.json
     * without numbered blocks) shards each layer on its own. */
    int unit;
    int64_t params;          /* trainable elements */
    int64_t buffers;         /* non-trainable elements (BN running stats); DDP broadcasts them */
    int64_t buffers_i64;     /* of those, int64 elements (BERT's position_ids, token_type_ids);
                                BN's num_batches_tracked is counted from bn_channels instead */
    int64_t bn_channels;     /* BatchNorm channels C (SyncBN moves 2C+1 and 2C fp32 per layer) */
    int64_t largest_tensor;  /* largest single parameter tensor, elements */
    double fwd_flops;        /* forward FLOPs per sample at the model's reference input, where
                                not given by a formula (CNN, params.json); 0 = use the formula */
    /* Saved activations per sample, for layers whose activations are not given by a formula
     * (CNN, params.json): elements kept at the compute dtype, fp32 elements, and 1-byte elements
     * (masks). act_known = 0 means "unknown", never a silent zero. */
    int64_t act_elems;
    int64_t act_fp32_elems;
    int64_t act_mask_elems;
    int64_t act_bytes;       /* measured saved bytes per sample (params.json), taken as is */
    int act_known;
    /* The layer's parameter tensors (each nn.Parameter once, a tied one where it is first
     * registered), element counts in model.parameters() order: DeepSpeed partitions the
     * flattened list, its ZeRO-3 keeps tensors below a size threshold whole, FSDP2 pads each
     * tensor's dim 0, torch's Adam keeps a step scalar per tensor. n_tensors = 0 with params > 0
     * means "unknown" (params.json, --params), never "none". */
    int n_tensors;
    int64_t tensor_elems[PLAN_LAYER_MAX_TENSORS];
    /* Each tensor's dim 0 (its first size), beside tensor_elems: FSDP2 shards every tensor
     * along dim 0 and pads it to ceil(dim0 / n) rows per rank (docs/formulas.md "FSDP2
     * buffers", "Padding"). nn.Linear weight (out, in): out; GPT-2's Conv1D (in, out): in;
     * nn.Embedding (V, e): V; a conv (out_c, in_c, k, k): out_c; biases and norm weights are
     * 1-D: numel. 0 = unknown (FSDP2 is then padded per unit, as a flat parameter). */
    int64_t tensor_dim0[PLAN_LAYER_MAX_TENSORS];
    /* LAYER_CONV: the (square) kernel side and the stride; 0 = unknown. On CPU ranks ATen picks
     * the convolution kernel by them, and its oneDNN backward holds a weight-sized buffer
     * (docs/formulas.md "CPU convolution backward"). */
    int conv_kernel, conv_stride;
    /* LAYER_BLOCK of a mixture-of-experts model: the elements of its routed experts (all E of
     * them; ModelSpec.moe says how many each token uses); 0 = a dense block */
    int64_t expert_params;
    /* Which of tensor_elems[] are the routed experts' (bit k: tensor k; their dim 0 is the expert
     * index), as the loaders register them; 0 with expert_params > 0 = not known (expert
     * parallelism needs them: planner/plan_dim_ep.h) */
    uint32_t expert_mask;
    /* LAYER_BLOCK: sliding-window attention, the keys each query sees (Mistral, Gemma 2/3's
     * sliding layers, Qwen's above max_window_layers); 0 = every earlier key. Beyond the window
     * transformers hands SDPA a materialised mask (docs/formulas.md "Activations"). */
    int64_t attn_window;
    /* LAYER_BLOCK: 1 = its q and k skip the rotary embedding (SmolLM3's NoPE layers), so under
     * autocast q stays in the compute dtype */
    int no_rope;
    /* The named module each tensor is the weight of (a PlanModule, | PLAN_MOD_CONV1D for GPT-2's
     * Conv1D, whose weight is (in, out)); 0 = not a projection's weight (a bias, a norm, an
     * embedding, or a family whose names are not recorded). --lora-targets matches these. */
    uint8_t tensor_mod[PLAN_LAYER_MAX_TENSORS];
    /* Frozen parameters (requires_grad=False: a LoRA model's base, --freeze), beside the trainable
     * ones above, which alone get gradients, optimizer state and reductions: their elements, and
     * their tensors in registration order with each one's dim 0 and module (as above). 0 = none. */
    int64_t frozen;
    int n_frozen;
    int64_t frozen_elems[PLAN_LAYER_MAX_TENSORS];
    int64_t frozen_dim0[PLAN_LAYER_MAX_TENSORS];
    uint8_t frozen_mod[PLAN_LAYER_MAX_TENSORS];
    /* Saved activations the trainable subset changes, elements per token (planner/plan_dim_ft.c):
     * inputs of projections no longer saved (autograd saves a matmul's input only for its weight's
     * gradient), LoRA A outputs (rank r each, saved by B), LoRA dropout outputs (saved by A, with
     * as many 1-byte dropout masks). act_unsaved_tok_ac: the inputs no longer saved under autocast,
     * where each projection saved its own cast copy (both kept, so that one setup serves every
     * precision a search tries). */
    int64_t act_unsaved_tok, act_unsaved_tok_ac, lora_r_tok, lora_drop_tok;
    /* A quantized base held as its packed storage (a rank's view under ZeRO-3 / FSDP): the
     * elements the frozen projections compute with beyond the storage elements frozen counts. */
    int64_t frozen_flops_extra;
    /* Where backward starts (autograd records nothing before the first trainable parameter):
     * 1 = the layer runs before it and saves nothing; 2 = its first norm does (the block whose
     * attention input projections carry the first trainable parameters); 0 otherwise. */
    uint8_t grad_frontier;
} LayerSpec;

/* The projections a transformer block registers, by the module names PEFT's target_modules
 * match (peft/tuners/lora/model.py; GPT-2's c_proj is both attention's output and the MLP's
 * down projection: two ids, one name). Each belongs to an input group (modules reading the same
 * tensor: q, k, v read the attention norm's output). */
typedef enum {
    PLAN_MOD_NONE = 0, PLAN_MOD_Q, PLAN_MOD_K, PLAN_MOD_V, PLAN_MOD_O, PLAN_MOD_GATE, PLAN_MOD_UP,
    PLAN_MOD_DOWN, PLAN_MOD_C_ATTN, PLAN_MOD_C_PROJ_ATTN, PLAN_MOD_C_PROJ_MLP, PLAN_MOD_C_FC,
    PLAN_MOD_LM_HEAD, PLAN_MOD_COUNT
} PlanModule;
#define PLAN_MOD_CONV1D 0x80
#define PLAN_MOD_ID(x) ((x) & 0x7f)
const char *plan_module_name(int mod);   /* PEFT's name ("q_proj", "c_proj"); "" for none */
/* The module's key in memplan's model JSON ("tensor_modules"): its name, GPT-2's two c_proj as
   "attn.c_proj" and "mlp.c_proj", ":conv1d" appended for a Conv1D; "" for none. Returns buf. */
const char *plan_module_key(int mod, char *buf, size_t len);
/* The tensor_mod value of such a key; -1 when it names no module. */
int plan_module_by_key(const char *key);
int plan_module_group(int mod);          /* input group: 1 attention in, 2 attention out, 3 MLP in,
                                            4 MLP out, 5 the head; 0 none */
/* A projection's in and out features from its weight tensor's elements, dim 0 and module. */
void plan_module_features(int mod, int64_t elems, int64_t dim0, int64_t *in, int64_t *out);
enum { PLAN_PROJ_QKV = 1, PLAN_PROJ_OUT = 2, PLAN_PROJ_MLP = 4 };

typedef struct {
    char name[64];
    char family[24];         /* the Hugging Face model_type of its family ("llama", "qwen3_moe"), "" unknown:
                                names its block class in emitted code */
    char source[256];        /* where it came from: "zoo", a file path, "--params" */
    ArchKind arch;
    LayerSpec *layers;
    int n_layers, cap_layers;

    /* transformer hyper-parameters (0 where not applicable) */
    int n_layer;             /* blocks (decoder blocks for ENC_DEC: see n_enc_layer) */
    int n_enc_layer;         /* encoder blocks (ENC_DEC only) */
    int64_t d_model;         /* h */
    int n_head;              /* a */
    int n_kv_head;           /* KV heads (grouped-query attention); = n_head when absent */
    int64_t d_head;          /* h / a unless the config says otherwise */
    int64_t d_ff;            /* MLP inner width */
    int64_t vocab;           /* V */
    int64_t head_cols;       /* the head GEMM's output columns on this rank where they are not V:
                                V/tp under a vocab-sharded tensor-parallel head whose logits are
                                gathered for the loss (plan_dim_tp.c); 0: V */
    int64_t max_seq;         /* context length; the default --seq */
    int tied_embeddings;
    int headless;            /* a base class (GPT2Model, LlamaModel, BertModel, T5Model): no LM
                                head, no logits, no loss; the caller holds the last hidden state */
    NormKind norm;
    MlpKind mlp;
    int fused_qkv;           /* one q|k|v projection (GPT-2's c_attn, NeoX's query_key_value) */
    int learned_pos;         /* learned absolute positions (GPT-2, BERT, OPT): no rotary embedding
                                makes q and k new tensors */
    int addmm_proj;          /* PLAN_PROJ_QKV | _OUT | _MLP: projections whose bias is added in the
                                GEMM (aten.addmm: nn.Linear with a bias, GPT-2's Conv1D); the
                                others run aten.mm (op-level checkpointing tells them apart) */
    double dropout;          /* default dropout probability from the config */
    char act_fn[32];         /* MLP activation as the config names it ("gelu_pytorch_tanh");
                                "" = the usual one for mlp */

    /* CNN input: image side and channels (ARCH_CNN); classes in vocab */
    int image_size, in_channels;

    /* mixture of experts (0 = dense): each MoE block routes every token to top_k of n_experts
     * experts of width d_ff_expert, beside shared experts of total width d_ff_shared */
    MoeSpec moe;
    /* the parts of a 2024-26 decoder block that change what it saves (zero: the classic block) */
    BlockSpec block;
    MlaSpec mla;             /* latent attention (mla.kv_rank > 0), else zero */
    int attn_sinks;          /* GPT-OSS: a learned sink logit per head joins each softmax */
    int qk_norm;             /* TransformerConfig.qk_norm: 1 an RMSNorm per head on q and k (Qwen3),
                                3 an L2 norm per head (Llama 4) */
    int nope_every;          /* TransformerConfig.nope_every: blocks N, 2N, ... have no q/k norm */
    /* 1: a wrap policy left every layer in the root unit (LayerSpec.unit 0 throughout: FSDP1's
     * size-based wrapping with nothing large enough, plan_fsdp_size_wrap), one unit of the whole
     * model; 0: a model without units shards each layer on its own */
    int root_only;
} ModelSpec;

void plan_model_init(ModelSpec *m, const char *name, ArchKind arch);
void plan_model_free(ModelSpec *m);
/* Appends a copy of *l; returns a pointer to the stored layer or NULL on allocation failure. */
LayerSpec *plan_model_add_layer(ModelSpec *m, const LayerSpec *l);
/* Convenience: a layer of kind with name and params (other fields zero). */
LayerSpec *plan_model_add(ModelSpec *m, LayerKind kind, const char *name, int64_t params);

int64_t plan_model_params(const ModelSpec *m);          /* Σ layers.params (trainable) */
/* Σ frozen elements (0 without a trainable subset); total = plan_model_params + this. */
int64_t plan_model_frozen(const ModelSpec *m);
/* The parameters one token uses: all but the routed experts it is not sent to, Σ params −
 * Σ expert_params × (1 − top_k / n_experts); = plan_model_params for a dense model. */
int64_t plan_model_active_params(const ModelSpec *m);
/* Layer l's parameters that one token uses (its active share of the routed experts). */
double plan_layer_active_params(const ModelSpec *m, const LayerSpec *l);
int64_t plan_model_buffers(const ModelSpec *m);         /* Σ layers.buffers */
/* Module buffers by dtype, as DDP broadcasts them (one coalesced broadcast per dtype): BatchNorm's
 * num_batches_tracked and the layers' buffers_i64 are int64, everything else fp32. Returns the
 * bytes; *dtypes = how many dtypes (broadcasts per forward). */
double plan_model_buffer_bytes(const ModelSpec *m, int *dtypes);
/* CNN: activations and FLOPs per sample scale with the image area; seq (--seq) is the image
 * side for a CNN. (seq / image_size)^2, exact for sides that are multiples of 32 (every
 * stride-2 stage halves them exactly); 1 for other models or seq <= 1 (the model's own size). */
double plan_cnn_area_scale(const ModelSpec *m, int64_t seq);
/* Appends a parameter tensor of elems elements to l; -1 when l already has
 * PLAN_LAYER_MAX_TENSORS (the layer's tensors are then unknown). Its dim 0 is unknown. */
int plan_layer_add_tensor(LayerSpec *l, int64_t elems);
/* The same with the tensor's dim 0 (rows; must divide elems, else it is kept as unknown). */
int plan_layer_add_tensor_dim0(LayerSpec *l, int64_t elems, int64_t dim0);
/* 1 when every parameter tensor of the model has a known dim 0 (and the tensors are known). */
int plan_model_dim0_known(const ModelSpec *m);
/* FSDP2's local shard of layer l on a shard group of n: Σ over its tensors of
 * ceil(dim0 / n) × (elems / dim0) elements (torch.chunk along dim 0, every rank padded to the
 * first chunk); -1 when a dim 0 is unknown. */
int64_t plan_layer_shard_dim0(const LayerSpec *l, int64_t n);
/* The same for a layer whose routed-expert tensors (LayerSpec.expert_mask) shard over a group
   of their own, ne (expert parallelism's expert data-parallel group), the others over n; *experts
   (may be NULL): the experts' part of the shard. -1 when a dim 0 is unknown. */
int64_t plan_layer_shard_dim0_ep(const LayerSpec *l, int64_t n, int64_t ne, int64_t *experts);
/* The same over layer l's frozen tensors (FSDP2 shards frozen parameters too); -1 when a frozen
 * tensor's dim 0 is unknown. */
int64_t plan_layer_frozen_shard_dim0(const LayerSpec *l, int64_t n);
/* Units: the largest LayerSpec.unit (0 = the model has no units: every layer its own). */
int plan_model_units(const ModelSpec *m);
/* 1 when every layer with parameters lists tensors that add up to its params. */
int plan_model_tensors_known(const ModelSpec *m);
/* 1 when m->family is one of the NULL-terminated names ("" names the zoo's and memplan's own
   models, which carry no Hugging Face model_type): the families a rule was measured for. */
int plan_model_family_in(const ModelSpec *m, const char *const *names);
/* Parameter tensors of the model (Σ n_tensors), or -1 when unknown. */
int64_t plan_model_n_tensors(const ModelSpec *m);
int plan_model_bn_layers(const ModelSpec *m, int64_t *sum_channels);  /* count, Σ C */
int plan_model_acts_known(const ModelSpec *m);          /* 1 if activations can be modelled */
const char *plan_arch_name(ArchKind a);
const char *plan_layer_kind_name(LayerKind k);
/* 1 when a and b describe the same layer but for its name and unit: every shape, tensor and
   saved-tensor field equal (repeated blocks), so whatever is computed from a layer alone is the
   same for both (rule_compute prices one of them for all). */
int plan_layer_same(const LayerSpec *a, const LayerSpec *b);

/* Builders shared by the zoo and the loaders. Each computes the exact parameter count from
 * the shapes. Return 0 on success, -1 (with msg filled) on invalid shapes. */
/* The order (and fusion) in which a transformer family registers its parameter tensors
 * (transformers' modeling_*.py __init__ order; docs/model-formats.md "Parameter tensors"):
 * LLAMA (also Mistral, Qwen2, Gemma): q, k, v, o, gate, up, down, input norm, post-attention
 * norm; GPT2: ln_1, c_attn (fused q|k|v), c_proj, ln_2, c_fc, c_proj; NEOX: both norms, fused
 * query_key_value, dense, h_to_4h, 4h_to_h; OPT: k, v, q, out, norm, fc1, fc2, norm; BERT:
 * q, k, v, output dense, norm, intermediate, output, norm; T5: q, k, v, o (+ relative bias),
 * norm, (cross q, k, v, o, norm), wi(_0, _1), wo, norm. */
typedef enum { LAYOUT_LLAMA = 0, LAYOUT_GPT2, LAYOUT_NEOX, LAYOUT_OPT, LAYOUT_BERT,
               LAYOUT_T5 } TensorLayout;

typedef struct {
    const char *name;
    ArchKind arch;           /* ARCH_DECODER, ARCH_ENCODER or ARCH_ENC_DEC */
    int n_layer, n_enc_layer;
    int64_t d_model, d_ff, vocab, max_seq;
    int n_head, n_kv_head;
    int64_t d_head;          /* 0 = d_model / n_head */
    NormKind norm;
    MlpKind mlp;
    int tied;                /* output head shares the token embedding */
    int learned_pos;         /* learned absolute position embeddings (GPT-2, BERT, OPT) */
    int64_t pos_offset;      /* extra position rows (OPT: 2) */
    int qkv_bias, out_bias, mlp_bias, norm_bias;  /* biases present */
    int final_norm;          /* a norm after the last block */
    int type_vocab;          /* BERT token-type embeddings (0 = none) */
    int pooler;              /* BERT pooler dense h*h + h */
    int mlm_head;            /* BERT MLM head transform (dense + LN, decoder bias) */
    int rel_pos_buckets;     /* T5 relative attention bias buckets (0 = none) */
    double dropout;
    /* Added for the config.json loader; 0 / NULL keep the behaviour above. */
    int64_t embed_dim;       /* token embedding width when it differs from d_model (OPT's
                                word_embed_proj_dim): project_in/out (no bias) are added */
    int64_t cls_outputs;     /* classifier on the pooled output (BERT NSP: 2), h*n + n */
    const char *act_fn;      /* activation name noted in ModelSpec.act_fn (NULL = "") */
    int headless;            /* base model class: no head layer (and no mlm_head/cls_outputs) */
    TensorLayout layout;     /* how the family registers its parameter tensors */
    const char *family;      /* ModelSpec.family (NULL = "") */
    double rotary_frac;      /* rotary dims / head dim: 0 = the family's default (LLAMA layout 1,
                                NEOX 0.25, others no rotary embedding) */
    /* The 2024-26 decoders (LAYOUT_LLAMA; plan_load_hf.c FAMILIES describes each family): */
    int qk_norm;             /* 1: an RMSNorm over each head's q and k (d_head weights each: Qwen3,
                                Gemma 3); 2: over all of q and of k (A·d and KV·d weights: OLMo 2);
                                3: an L2 norm per head, no weights (Llama 4) */
    int nope_every;          /* Llama 4: every N-th block has no rope and no q/k norm (0 = none) */
    int block_norms;         /* norms per block (0 = 2): 4 for Gemma 2/3's pre- and post-norms */
    int fused_qkv;           /* Phi-3: one qkv_proj (h x (A + 2 KV)·d), registered after o_proj */
    int fused_gate_up;       /* Phi-3: one gate_up_proj (h x 2f) */
    int sinks;               /* GPT-OSS: a learned attention-sink logit per head */
    int post_norms;          /* OLMo 2: the block's two norms act on the sublayers' outputs */
    int norm_fp32;           /* Gemma, OLMo 2: the RMSNorm scales before casting back (BlockSpec) */
    int resid_dropout;       /* Phi-3: resid_pdrop dropouts on the sublayers' outputs */
    int rotary_cat;          /* Phi-3: partial rotary through torch.cat */
    int embed_scale_buffer;  /* Gemma, Gemma 2/3: the scaled embedding's 0-d fp32 embed_scale buffer */
    int rope_kinds;          /* Gemma 3: rotary inv_freq pairs, one per attention kind (0 = 1) */
    double attn_softcap, logit_softcap;   /* Gemma 2 (BlockSpec) */
    int64_t window;          /* sliding-window attention: the keys a query sees in the blocks sliding_blocks marks */
    const unsigned char *sliding_blocks; /* per block, 1 = sliding-window attention of `window` (NULL: none) */
    const unsigned char *no_rope_blocks; /* per block, 1 = no rotary embedding (SmolLM3; NULL: none) */
    MlaSpec mla;             /* multi-head latent attention (DeepSeek-V2/V3; mla.kv_rank > 0) */
    /* mixture of experts (n_experts > 0): the MoE blocks' router (h x E), routed experts (gated:
       gate|up E x 2f x h and down E x h x f), shared expert(s) of total width d_ff_shared,
       Qwen2-MoE's shared-expert gate (moe.shared_gate), GPT-OSS's biases (moe.bias) */
    MoeSpec moe;
    int moe_router_first;    /* the router registers before the experts (Mixtral, Qwen2-MoE,
                                GPT-OSS), else after them (Qwen3-MoE, DeepSeek-V3, Llama 4) */
    int moe_first_dense;     /* DeepSeek first_k_dense_replace: blocks 0 .. k-1 are dense */
    int moe_step;            /* Qwen-MoE decoder_sparse_step, Llama 4 interleave_moe_layer_step:
                                block i is MoE when (i + 1) % step == 0 (0 or 1: every block) */
    const unsigned char *dense_blocks;   /* Qwen-MoE mlp_only_layers: per block, 1 = dense (NULL: none);
                                a MoE model's dense blocks have MLPs of width d_ff */
} TransformerConfig;

int plan_model_transformer(ModelSpec *m, const TransformerConfig *c, char *msg, size_t msglen);
/* A dense model known only by its parameter count: n_units equal layers (FSDP units). */
int plan_model_generic(ModelSpec *m, const char *name, int64_t params, int n_units,
                       char *msg, size_t msglen);

#endif
