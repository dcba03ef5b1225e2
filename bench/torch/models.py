"""Model construction for the memplan PyTorch harness.

Zoo names map to the Hugging Face configs whose shapes memplan plans (planner/plan_zoo.c);
a path to a config.json builds the transformers class named by ``architectures[0]`` (or the
auto class for its ``model_type``) with random initialisation.  Nothing is ever downloaded.
"""
import json
import os

import torch

# Zoo name -> (transformers class, config class, config kwargs).  Shapes from planner/plan_zoo.c.
_GPT2 = {"gpt2": (12, 768, 12), "gpt2-medium": (24, 1024, 16), "gpt2-large": (36, 1280, 20),
         "gpt2-xl": (48, 1600, 25)}
_LLAMA2 = {"llama2-7b": (32, 4096, 32, 32, 11008), "llama2-13b": (40, 5120, 40, 40, 13824),
           "llama2-70b": (80, 8192, 64, 8, 28672)}
_BERT = {"bert-base": (12, 768, 12), "bert-large": (24, 1024, 16)}

ZOO_NAMES = (["gpt2-tiny", "gpt2-mini"] + list(_GPT2) + list(_LLAMA2) + list(_BERT)
             + ["resnet50"])

# Config keys that carry a dropout probability, per family; --dropout sets all of them.
_DROPOUT_KEYS = ("resid_pdrop", "embd_pdrop", "attn_pdrop", "attention_dropout",
                 "hidden_dropout_prob", "attention_probs_dropout_prob", "hidden_dropout",
                 "dropout", "summary_first_dropout", "residual_dropout", "embedding_dropout")


class ModelSpec:
    """What was built: the module, its HF class name, the batch maker and the block class."""

    def __init__(self, name, model, cls_name, kind, context, vocab):
        self.name = name
        self.model = model
        self.cls_name = cls_name
        self.kind = kind            # "causal", "masked" or "image"
        self.context = context      # default --seq (tokens, or image side for resnet)
        self.vocab = vocab          # token vocabulary, or number of classes

    def block_modules(self):
        """The repeated blocks (FSDP units, checkpoint units): the classes of HF's
        _no_split_modules that occur more than once (BERT lists BertEmbeddings too, whose word
        embeddings are tied to the MLM decoder in the root: FSDP2 refuses a parameter shared
        by two units, and memplan's units are the repeated blocks), torchvision's
        Bottleneck/BasicBlock for ResNets."""
        names = set(getattr(self.model, "_no_split_modules", None) or [])
        if self.kind == "image":
            names = {"Bottleneck", "BasicBlock"}
        mods = [m for m in self.model.modules() if type(m).__name__ in names]
        count = {}
        for m in mods:
            count[type(m)] = count.get(type(m), 0) + 1
        return [m for m in mods if count[type(m)] > 1]


def _zoo_config(name, dropout):
    import transformers as tf
    if name in ("gpt2-tiny", "gpt2-mini"):
        L, H, A, V, C = (2, 64, 4, 256, 64) if name == "gpt2-tiny" else (4, 128, 4, 1024, 128)
        return "GPT2LMHeadModel", tf.GPT2Config(
            n_layer=L, n_embd=H, n_head=A, vocab_size=V, n_positions=C, bos_token_id=None,
            eos_token_id=None, resid_pdrop=dropout, embd_pdrop=dropout, attn_pdrop=dropout)
    if name in _GPT2:
        L, H, A = _GPT2[name]
        return "GPT2LMHeadModel", tf.GPT2Config(n_layer=L, n_embd=H, n_head=A,
                                                resid_pdrop=dropout, embd_pdrop=dropout,
                                                attn_pdrop=dropout)
    if name in _LLAMA2:
        L, H, A, KV, F = _LLAMA2[name]
        return "LlamaForCausalLM", tf.LlamaConfig(
            num_hidden_layers=L, hidden_size=H, num_attention_heads=A, num_key_value_heads=KV,
            intermediate_size=F, vocab_size=32000, max_position_embeddings=4096,
            rms_norm_eps=1e-5, tie_word_embeddings=False, attention_dropout=dropout)
    if name in _BERT:
        L, H, A = _BERT[name]
        return "BertForMaskedLM", tf.BertConfig(
            num_hidden_layers=L, hidden_size=H, num_attention_heads=A, intermediate_size=4 * H,
            hidden_dropout_prob=dropout, attention_probs_dropout_prob=dropout)
    return None, None


def _file_config(path, dropout):
    import transformers as tf
    with open(path) as f:
        raw = json.load(f)
    for k in _DROPOUT_KEYS:
        if k in raw and isinstance(raw[k], (int, float)):
            raw[k] = dropout
    mt = raw.get("model_type")
    if not mt:
        raise ValueError(f"{path}: no model_type in config.json")
    cfg = tf.AutoConfig.for_model(mt, **{k: v for k, v in raw.items() if k != "model_type"})
    archs = raw.get("architectures") or []
    cls_name = archs[0] if archs else None
    return cls_name, cfg


def _kind_of(cls_name):
    if "MaskedLM" in cls_name or "PreTraining" in cls_name:
        return "masked"
    return "causal"


def build(name, attn, dropout, device="cpu"):
    """Build the model named by a zoo name or a config.json path; random init, fp32."""
    if name == "resnet50":
        import torchvision
        with torch.device(device):
            m = torchvision.models.resnet50()
        return ModelSpec(name, m, "torchvision.models.ResNet", "image", 64, 1000)
    if os.path.isfile(name):
        cls_name, cfg = _file_config(name, dropout)
        label = os.path.splitext(os.path.basename(name))[0]
        if label == "config":
            label = os.path.basename(os.path.dirname(os.path.abspath(name)))
    elif name in ZOO_NAMES:
        cls_name, cfg = _zoo_config(name, dropout)
        label = name
    else:
        raise KeyError(name)
    import transformers as tf
    cls = getattr(tf, cls_name, None) if cls_name else None
    if cls is None:
        # fall back by model_type: a causal LM head, else the bare model
        for auto in (tf.AutoModelForCausalLM, tf.AutoModelForMaskedLM, tf.AutoModel):
            try:
                cls = auto._model_mapping[type(cfg)]
                break
            except KeyError:
                continue
        if cls is None:
            raise ValueError(f"{name}: no transformers class for model_type {cfg.model_type}")
        cls_name = cls.__name__
    cfg._attn_implementation = attn
    cfg.use_cache = False
    with torch.device(device):
        m = cls(cfg)
    ctx = (getattr(cfg, "n_positions", None) or getattr(cfg, "max_position_embeddings", None)
           or 128)
    return ModelSpec(label, m, cls_name, _kind_of(cls_name), int(ctx), int(cfg.vocab_size))


def freeze(model, spec, blocks):
    """memplan --freeze: "embeddings" = the input embeddings (a head tied to them with them);
    "all-but-last:N" = every parameter outside the last N blocks and the layers registered after
    them (final norm, an untied head; a head tied to the embeddings stays frozen with them)."""
    if spec in (None, "", "none"):
        return
    if spec == "embeddings":
        for p in model.get_input_embeddings().parameters():
            p.requires_grad_(False)
        return
    n = int(spec.split(":")[1])
    keep = set()
    for b in blocks[len(blocks) - n:]:
        keep.update(id(p) for p in b.parameters())
    last_block = {id(p) for p in blocks[-1].parameters()}
    after = False
    for _, p in model.named_parameters():
        if id(p) in last_block:
            after = True
        elif after:
            keep.add(id(p))
    emb = {id(p) for p in model.get_input_embeddings().parameters()}
    for p in model.parameters():
        p.requires_grad_(id(p) in keep and id(p) not in emb)


def param_count(model):
    """Unique parameters (a tied weight counts once), as memplan counts them."""
    return sum(p.numel() for p in model.parameters())


def make_batch(spec, batch, seq, seed):
    """One random batch: token ids with labels = ids (masked LM: labels = ids too),
    or images and class labels."""
    g = torch.Generator().manual_seed(seed)
    if spec.kind == "image":
        x = torch.randn(batch, 3, seq, seq, generator=g)
        y = torch.randint(0, spec.vocab, (batch,), generator=g)
        return {"pixel_values": x, "labels": y}
    ids = torch.randint(0, spec.vocab, (batch, seq), generator=g)
    return {"input_ids": ids, "labels": ids.clone()}


class ImageOutput:
    """ResNet forward result shaped like a HF ModelOutput (.loss, .logits)."""

    def __init__(self, logits, loss):
        self.logits = logits
        self.loss = loss


def forward(spec, model, batch):
    """model(**batch) for HF models; logits + cross entropy for torchvision."""
    if spec.kind == "image":
        logits = model(batch["pixel_values"])
        return ImageOutput(logits, torch.nn.functional.cross_entropy(logits, batch["labels"]))
    return model(**batch)
