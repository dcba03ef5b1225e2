#!/usr/bin/env python3
"""peer_ddp.py — the peer for memplan's engine: the same GPT-2 step in PyTorch DDP (gloo backend,
CPU, fp32), on the same shape, micro-batch, sequence and number of ranks, timed the same way
(mean step time over steps 2..K, the first step being warm-up).

Model code (--impl): "transformers" is the code path users run, transformers' GPT2LMHeadModel
built from a GPT2Config with the engine preset's n_layer, n_head, n_embd, vocab and n_positions,
dropout 0, gelu_new (tanh GELU), tied LM head, its default attention implementation (named in
the output), loss = mean cross-entropy of the logits against the next tokens; "handwritten" is
a model written out to match exec/exec_gpt2.c (eager causal attention, scores and softmax
materialised), for PyTorch installs without transformers (Debian's python3-torch 1.13); "auto"
(default) takes transformers when it imports. AdamW (lr 1e-3, weight decay 0) either way. One
thread per rank (torch.set_num_threads(1)), as the engine runs with OPENBLAS_NUM_THREADS=1 in
bench/bench_peer.sh.

Usage: PY bench/peer_ddp.py --model gpt2-mini --ranks 2 --batch 4 --seq 128 --steps 6 [--impl auto] [--json FILE]
"""
import argparse
import json
import math
import os
import socket
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F

# exec/exec_gpt2.c presets: n_layer, n_head, d_model, vocab, max_seq
PRESETS = {
    "gpt2-tiny": (2, 4, 64, 256, 64),
    "gpt2-mini": (4, 4, 128, 1024, 128),
    "gpt2": (12, 12, 768, 50257, 1024),
    "gpt2-medium": (24, 16, 1024, 50257, 1024),
}


class Block(nn.Module):
    def __init__(self, C, NH):
        super().__init__()
        self.nh = NH
        self.ln1 = nn.LayerNorm(C)
        self.qkv = nn.Linear(C, 3 * C)
        self.proj = nn.Linear(C, C)
        self.ln2 = nn.LayerNorm(C)
        self.fc = nn.Linear(C, 4 * C)
        self.fcproj = nn.Linear(4 * C, C)

    def forward(self, x, mask):
        B, T, C = x.shape
        hs = C // self.nh
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        q = q.view(B, T, self.nh, hs).transpose(1, 2)
        k = k.view(B, T, self.nh, hs).transpose(1, 2)
        v = v.view(B, T, self.nh, hs).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
        att = att.masked_fill(mask[:, :, :T, :T] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        x = x + self.proj(y)
        return x + self.fcproj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT2(nn.Module):
    def __init__(self, L, NH, C, V, maxT):
        super().__init__()
        self.wte = nn.Embedding(V, C)
        self.wpe = nn.Embedding(maxT, C)
        self.blocks = nn.ModuleList([Block(C, NH) for _ in range(L)])
        self.lnf = nn.LayerNorm(C)
        self.register_buffer("mask", torch.tril(torch.ones(maxT, maxT)).view(1, 1, maxT, maxT), persistent=False)
        for n, p in self.named_parameters():
            if p.dim() == 2:
                std = 0.02 / math.sqrt(2 * L) if n.endswith(("proj.weight", "fcproj.weight")) else 0.02
                nn.init.normal_(p, 0.0, std)

    def forward(self, idx, targets):
        B, T = idx.shape
        pos = torch.arange(T, device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for b in self.blocks:
            x = b(x, self.mask)
        logits = self.lnf(x) @ self.wte.weight.t()          # tied LM head
        return F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))


class HFGPT2(nn.Module):
    """transformers' GPT2LMHeadModel behind the same forward(idx, targets) -> mean loss."""

    def __init__(self, L, NH, C, V, maxT):
        super().__init__()
        from transformers import GPT2Config, GPT2LMHeadModel
        cfg = GPT2Config(n_layer=L, n_head=NH, n_embd=C, vocab_size=V, n_positions=maxT, resid_pdrop=0.0,
                         embd_pdrop=0.0, attn_pdrop=0.0, activation_function="gelu_new", use_cache=False,
                         bos_token_id=V - 1, eos_token_id=V - 1)
        self.m = GPT2LMHeadModel(cfg)
        self.attn = getattr(self.m.config, "_attn_implementation", None) or "eager"

    def forward(self, idx, targets):
        logits = self.m(input_ids=idx, use_cache=False).logits
        return F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))


def model_impl(choice):
    if choice != "auto":
        return choice
    try:
        import transformers  # noqa: F401
        return "transformers"
    except ImportError:
        return "handwritten"


def worker(rank, args, port, out):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=args.ranks)
    L, NH, C, V, maxT = PRESETS[args.model]
    T = args.seq or maxT
    torch.manual_seed(1337)
    impl = model_impl(args.impl)
    model = HFGPT2(L, NH, C, V, maxT) if impl == "transformers" else GPT2(L, NH, C, V, maxT)
    if impl == "transformers":
        import transformers
        code = "transformers %s GPT2LMHeadModel, attention %s" % (transformers.__version__, model.attn)
    else:
        code = "handwritten GPT-2 (bench/peer_ddp.py), eager attention"
    ddp = nn.parallel.DistributedDataParallel(model)   # 25 MiB buckets, first 1 MiB
    opt = torch.optim.AdamW(ddp.parameters(), lr=1e-3, weight_decay=0.0)
    g = torch.Generator().manual_seed(1000 + rank)
    times, cpu = [], []
    for step in range(args.steps):
        idx = torch.randint(0, V, (args.batch, T + 1), generator=g)
        dist.barrier()
        t0, c0 = time.perf_counter(), time.process_time()
        opt.zero_grad(set_to_none=True)
        loss = ddp(idx[:, :-1], idx[:, 1:])
        loss.backward()
        opt.step()
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    steady = times[1:] if len(times) > 1 else times
    steady_cpu = cpu[1:] if len(cpu) > 1 else cpu
    t = torch.tensor([sum(steady) / len(steady)])
    dist.all_reduce(t, op=dist.ReduceOp.MAX)               # the slowest rank sets the pace
    if rank == 0:
        res = {
            "peer": "pytorch-ddp-gloo", "torch": torch.__version__, "model": args.model, "model_code": code,
            "params": sum(p.numel() for p in model.parameters()), "ranks": args.ranks,
            "micro_batch": args.batch, "seq": T, "steps": args.steps, "threads_per_rank": 1,
            "steady_ms_per_step": t.item() * 1e3,
            # rank 0's process, all its threads (gloo's included)
            "steady_cpu_ms_per_step": sum(steady_cpu) / len(steady_cpu) * 1e3, "last_loss": loss.item(),
            "tokens_per_s": args.batch * T * args.ranks / t.item(),
        }
        with open(out, "w") as f:
            json.dump(res, f)
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="gpt2-mini", choices=sorted(PRESETS))
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=0)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--impl", default="auto", choices=["auto", "transformers", "handwritten"])
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    with socket.socket() as s:                             # a free port for the rendezvous
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = args.json or "/tmp/peer_ddp.json"
    mp.spawn(worker, args=(args, port, out), nprocs=args.ranks, join=True)
    with open(out) as f:
        res = json.load(f)
    print(json.dumps(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
