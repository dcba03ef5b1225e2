"""Writes the params.json test files without PyTorch: the tensor names and shapes that
named_parameters() / named_buffers() give for torchvision's resnet50 and Hugging Face's
GPT2LMHeadModel, plus two small hand-made lists. Run: python3 gen.py (in this folder)."""
import json

def resnet50():
    P, B, bn = {}, {}, []
    def conv(n, cin, cout, k): P[n + ".weight"] = [cout, cin, k, k]
    def bnl(n, c):
        P[n + ".weight"] = [c]; P[n + ".bias"] = [c]
        B[n + ".running_mean"] = [c]; B[n + ".running_var"] = [c]; B[n + ".num_batches_tracked"] = []
        bn.append(c)
    conv("conv1", 3, 64, 7); bnl("bn1", 64)
    cin = 64
    for s, (planes, blocks) in enumerate([(64, 3), (128, 4), (256, 6), (512, 3)]):
        for i in range(blocks):
            pre = f"layer{s+1}.{i}"
            conv(pre + ".conv1", cin, planes, 1); bnl(pre + ".bn1", planes)
            conv(pre + ".conv2", planes, planes, 3); bnl(pre + ".bn2", planes)
            conv(pre + ".conv3", planes, planes * 4, 1); bnl(pre + ".bn3", planes * 4)
            if i == 0:
                conv(pre + ".downsample.0", cin, planes * 4, 1); bnl(pre + ".downsample.1", planes * 4)
            cin = planes * 4
    P["fc.weight"] = [1000, 2048]; P["fc.bias"] = [1000]
    # named_buffers() walks modules in the same order as named_parameters()
    return {"name": "resnet50", "parameters": P, "buffers": B}, bn

def gpt2():
    P, h, V = {}, 768, 50257
    P["transformer.wte.weight"] = [V, h]; P["transformer.wpe.weight"] = [1024, h]
    for i in range(12):
        pre = f"transformer.h.{i}"
        P[pre + ".ln_1.weight"] = [h]; P[pre + ".ln_1.bias"] = [h]
        P[pre + ".attn.c_attn.weight"] = [h, 3 * h]; P[pre + ".attn.c_attn.bias"] = [3 * h]
        P[pre + ".attn.c_proj.weight"] = [h, h]; P[pre + ".attn.c_proj.bias"] = [h]
        P[pre + ".ln_2.weight"] = [h]; P[pre + ".ln_2.bias"] = [h]
        P[pre + ".mlp.c_fc.weight"] = [h, 4 * h]; P[pre + ".mlp.c_fc.bias"] = [4 * h]
        P[pre + ".mlp.c_proj.weight"] = [4 * h, h]; P[pre + ".mlp.c_proj.bias"] = [h]
    P["transformer.ln_f.weight"] = [h]; P["transformer.ln_f.bias"] = [h]
    # lm_head.weight is tied to wte: named_parameters() lists it once
    return {"name": "gpt2", "parameters": P, "max_seq": 1024,
            "activation_bytes_per_sample": 2500000003}

def numel(s):
    n = 1
    for d in s: n *= d
    return n

r, bn = resnet50()
g = gpt2()
# nn.Sequential(Linear(8,16), ReLU(), Linear(16,4)) as the bare {name: shape} map
bare = {"0.weight": [16, 8], "0.bias": [16], "2.weight": [4, 16], "2.bias": [4]}
# a small CNN with an explicit BatchNorm list; "norm" has no running stats
# (track_running_stats=False), so its channels come from its weight
cnn = {"parameters": {"stem.weight": [32, 3, 3, 3], "norm.weight": [32], "norm.bias": [32],
                      "blocks.0.conv.weight": [32, 32, 3, 3], "blocks.0.bn.weight": [32],
                      "blocks.0.bn.bias": [32], "head.weight": [10, 32], "head.bias": [10]},
       "buffers": {"blocks.0.bn.running_mean": [32], "blocks.0.bn.running_var": [32],
                   "blocks.0.bn.num_batches_tracked": []},
       "batchnorm": ["norm", "blocks.0.bn"]}
for name, d in [("resnet50", r), ("gpt2", g), ("mlp-bare", bare), ("cnn-bnlist", cnn)]:
    with open(name + ".json", "w") as f:   # one tensor per line
        items = []
        for k, v in d.items():
            if isinstance(v, dict):
                inner = ",\n".join(f"  {json.dumps(n)}: {json.dumps(s)}" for n, s in v.items())
                items.append(f"{json.dumps(k)}: {{\n{inner}\n}}" if k in ("parameters", "buffers")
                             else f"{json.dumps(k)}: {json.dumps(v)}")
            else:
                items.append(f"{json.dumps(k)}: {json.dumps(v)}")
        if "parameters" in d:
            f.write("{\n" + ",\n".join(items) + "\n}\n")
        else:
            f.write("{\n" + ",\n".join(f"  {json.dumps(n)}: {json.dumps(s)}" for n, s in d.items()) + "\n}\n")
    p = d.get("parameters", d)
    print(name, sum(numel(s) for s in p.values()), "params,",
          sum(numel(s) for s in d.get("buffers", {}).values()), "buffer elements")
print("resnet50 BN layers", len(bn), "sum C", sum(bn))
