"""Pipeline-parallel probe: gpt2-mini split into stages over torch.distributed.pipelining on CPU
ranks (gloo), Schedule1F1B, ScheduleGPipe or ScheduleInterleaved1F1B, fp32, AdamW; prints each
rank's parameters and tensor peak over steady-state steps as one JSON line per rank, for
comparison with `memplan --pp N` (docs/formulas.md "Pipeline parallel").

    flock /tmp/memplan-cpu.lock torchrun --standalone --nproc-per-node 2 \
        bench/torch/pp_probe.py --microbatches 4 --schedule 1f1b
    ... bench/torch/pp_probe.py --microbatches 4 --schedule interleaved --stages-per-rank 2
    ... bench/torch/pp_probe.py --microbatches 4 --schedule 1f1b --less-first 2

Measured as harness.py measures (measure.py): c10's CPU allocator reports every allocation and
free to torch.profiler with profile_memory=True and FLAGS_caffe2_report_cpu_memory_usage on, so
each memory event carries the process's exact live tensor total. Steps 1-2 warm up (optimizer
state, p2p buffers) outside the profiler; the peak is the maximum total over steps 3..K. Stage
split: the blocks over ranks x virtual stages as torchtitan splits them
(torchtitan/distributed/pipeline_parallel.py generate_llm_fqn_per_model_part: the embedding
counted as --less-first blocks, the head as --less-last; 0 and 0: even), rank r holding stages
r, r + ranks, ...; stage 0 also holds wte and wpe, the last stage ln_f and an LM head of its own
(the tied weight copied: a pipelined split cannot share it across ranks), the loss cross entropy
over the micro-batch's logits (labels = ids, unshifted: the same bytes).
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))




def split(nb, S, w_in, w_out):
    """Blocks per stage as torchtitan splits them (generate_llm_fqn_per_model_part)."""
    if S == 1:
        return [nb]
    eff = nb + w_in + w_out
    per, extra = eff // S, eff % S
    assert per > 0 and w_in <= per and w_out <= per, "torchtitan refuses this split"
    out, cur = [], 0
    for k in range(S):
        n = per + (k < extra) - (w_in if k == 0 else 0) - (w_out if k == S - 1 else 0)
        n = max(0, min(n, nb - cur))
        out.append(n)
        cur += n
    return out


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="gpt2-mini")
    p.add_argument("--microbatches", type=int, default=2)
    p.add_argument("--schedule", choices=["1f1b", "gpipe", "interleaved"], default="1f1b")
    p.add_argument("--stages-per-rank", type=int, default=1, help="interleaved: 2 or more")
    p.add_argument("--less-first", type=int, default=0, help="the embedding counted as this many blocks")
    p.add_argument("--less-last", type=int, default=0, help="the head counted as this many blocks")
    p.add_argument("--batch", type=int, default=1, help="micro-batch size")
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--return-outputs", choices=["on", "off"], default="on",
                   help="schedule.step(return_outputs=...): torch's default on keeps every micro-batch's output on "
                        "the last stage (stage.output_chunks) until the next step; torchtitan passes off")
    a = p.parse_args()

    import torch
    import torch.distributed as dist
    import torch.nn as nn
    from torch.distributed.pipelining import (PipelineStage, Schedule1F1B, ScheduleGPipe,
                                              ScheduleInterleaved1F1B)
    import models
    import measure
    from harness import _report_all_frees

    torch.set_num_threads(1)
    exact = _report_all_frees()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    V = a.stages_per_rank if a.schedule == "interleaved" else 1
    assert a.schedule != "interleaved" or V >= 2, "interleaved: --stages-per-rank 2 or more"
    S = world * V
    torch.manual_seed(0)
    spec = models.build(a.model, "sdpa", 0.0)
    full = spec.model
    tr = full.transformer
    nb = len(tr.h)
    counts = split(nb, S, a.less_first, a.less_last)
    firsts = [sum(counts[:k]) for k in range(S)]

    def run_blocks(blocks, h):
        for blk in blocks:
            out = blk(h)
            h = out[0] if isinstance(out, tuple) else out
        return h

    class Stage(nn.Module):
        def __init__(self, k):
            super().__init__()
            self.first, self.last = k == 0, k == S - 1
            if self.first:
                self.wte, self.wpe = tr.wte, tr.wpe
            self.h = nn.ModuleList(tr.h[firsts[k]:firsts[k] + counts[k]])
            if self.last:
                self.ln_f = tr.ln_f
                self.lm_head = nn.Linear(tr.wte.weight.shape[1], tr.wte.weight.shape[0], bias=False)
                self.lm_head.weight = nn.Parameter(tr.wte.weight.detach().clone())

        def forward(self, x):
            if self.first:
                pos = torch.arange(x.shape[1]).unsqueeze(0)
                x = self.wte(x) + self.wpe(pos)
            x = run_blocks(self.h, x)
            return self.lm_head(self.ln_f(x)) if self.last else x

    mine = [k for k in range(S) if k % world == rank]
    mods = [Stage(k) for k in mine]
    vocab = tr.wte.weight.shape[0]
    del full, tr, spec
    import gc
    gc.collect()
    for m_ in mods:
        m_.train()
    n_params = sum(q.numel() for m_ in mods for q in m_.parameters())
    M, b, s = a.microbatches, a.batch, a.seq
    stages = [PipelineStage(m_, k, S, torch.device("cpu")) for m_, k in zip(mods, mine)]

    def loss_fn(logits, target):
        return nn.functional.cross_entropy(logits.view(-1, logits.shape[-1]), target.view(-1))

    if a.schedule == "interleaved":
        sched = ScheduleInterleaved1F1B(stages, n_microbatches=M, loss_fn=loss_fn)
    else:
        sched = (Schedule1F1B if a.schedule == "1f1b" else ScheduleGPipe)(stages[0], n_microbatches=M, loss_fn=loss_fn)
    opt = torch.optim.AdamW([q for m_ in mods for q in m_.parameters()], lr=1e-4)
    g = torch.Generator().manual_seed(1)
    has_first, has_last = 0 in mine, S - 1 in mine

    ret = a.return_outputs == "on"

    def step():
        ids = torch.randint(0, vocab, (b * M, s), generator=g)
        if has_first and has_last:
            sched.step(ids, target=ids.clone(), losses=[], return_outputs=ret)
        elif has_first:
            sched.step(ids, return_outputs=ret)
        elif has_last:
            sched.step(target=ids.clone(), losses=[], return_outputs=ret)
        else:
            sched.step()
        opt.step()
        opt.zero_grad(set_to_none=True)

    for _ in range(2):   # warm-up: optimizer state, p2p buffers
        step()
    from torch.profiler import profile, ProfilerActivity
    prof = profile(activities=[ProfilerActivity.CPU], profile_memory=True)
    prof.start()
    for _ in range(a.steps - 2):
        step()
    prof.stop()
    trace = measure.Trace(prof)
    series = trace.true if exact else trace.total
    peak = max(series) if series else 0
    out = {"rank": rank, "stage": rank, "stages": mine, "blocks": [counts[k] for k in mine], "schedule": a.schedule,
           "virtual": V, "less_first": a.less_first, "less_last": a.less_last, "return_outputs": ret, "microbatches": M, "batch": b, "seq": s,
           "params": n_params, "param_bytes": 4 * n_params, "peak_bytes": peak, "exact": bool(exact),
           "torch": torch.__version__}
    print(json.dumps(out), flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
