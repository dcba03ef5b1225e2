"""The harness's CUDA mode (harness.py --device cuda): where a rank's tensors live, which backend its
collectives take, and what torch.cuda says about memory, for the figures only a GPU has: the
caching allocator's allocated and reserved peaks and its segments, the CUDA context, cuBLAS's
workspace (docs/gpu.md "PyTorch's GPU rows").

    Target   the device of the tensors, the process-group backend and why, autocast's device type
    Meter    per-phase peaks (max_memory_allocated / max_memory_reserved, reset at each phase),
             the context (device memory used before and after CUDA's init in this process), the
             cuBLAS probe, memory_stats() and the segments at the end

With --dry-cpu the same calls run on CPU tensors over gloo and every CUDA call is skipped, named
once on stderr and listed in the result ("cuda_skipped"), so the path is exercised on a machine
without a GPU. No CUDA call is made in that mode (the CPU-only venv has no driver).
"""
import collections
import contextlib
import os
import subprocess
import sys

MIB = 1 << 20

# What --dry-cpu skips, in the order a GPU run does it (named on stderr and in the result).
DRY_SKIPS = ("torch.cuda.set_device", "context: device memory used (NVML / nvidia-smi) before and "
             "cudaMemGetInfo after CUDA's init", "cuBLAS workspace probe (first SGEMM 1024^3)",
             "max_memory_allocated / max_memory_reserved per phase", "torch.cuda.synchronize per step",
             "memory_stats and the allocator's segments at the end")

# Environment that makes NCCL treat ranks sharing a GPU as separate hosts (the engine's fake hosts,
# docs/gpu.md): each rank its own NCCL_HOSTID, sockets over loopback, no NVLS/MNNVL.
FAKE_HOST_ENV = {"NCCL_SOCKET_IFNAME": "lo", "NCCL_IB_DISABLE": "1", "NCCL_NVLS_ENABLE": "0",
                 "NCCL_MNNVL_ENABLE": "0"}


def _say(rank, msg):
    if rank == 0:
        print(f"harness: {msg}", file=sys.stderr, flush=True)


class Target:
    """Where a rank computes: the tensors' device and the collectives' backend, chosen once.

    cpu: CPU tensors, gloo. cuda: device local_rank % GPUs; backend auto = nccl when every rank
    of this node has a GPU of its own, else gloo on CUDA tensors (NCCL refuses two ranks of one
    communicator on one GPU, "Duplicate GPU detected", unless each rank has its own NCCL_HOSTID);
    nccl on a shared GPU = fake hosts (NCCL_HOSTID per rank: NCCL's own memory and every time
    figure are then not a real measurement). dry: cuda's path on CPU tensors over gloo."""

    def __init__(self, a, rank, world):
        import torch
        self.kind, self.dry = a.device, bool(getattr(a, "dry_cpu", False))
        self.rank, self.world = rank, world
        self.local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        local_world = int(os.environ.get("LOCAL_WORLD_SIZE", str(world)))
        self.fake_hosts = False
        self.index = None
        if self.kind == "cpu" or self.dry:
            self.device = torch.device("cpu")
            self.backend = "gloo"
            self.why = ("CPU ranks" if self.kind == "cpu" else
                        f"--dry-cpu: gloo on CPU tensors (asked for --backend {a.backend})")
            return
        n = torch.cuda.device_count()
        if n < 1:
            raise RuntimeError("--device cuda: torch sees no CUDA device "
                               f"(torch {torch.__version__}, CUDA {torch.version.cuda})")
        self.index = self.local_rank % n
        self.device = torch.device("cuda", self.index)
        shared = local_world > n
        if a.backend == "auto":
            self.backend = "gloo" if shared else "nccl"
        else:
            self.backend = a.backend
        if self.backend == "nccl" and shared:
            self.fake_hosts = True
            os.environ["NCCL_HOSTID"] = f"memplan-fake-host-{rank}"
            for k, v in FAKE_HOST_ENV.items():
                os.environ.setdefault(k, v)
            self.why = (f"{local_world} ranks share {n} GPU(s): NCCL with an NCCL_HOSTID per rank "
                        "(fake hosts, sockets over loopback): NCCL's own memory and the times are "
                        "not a real measurement")
        elif self.backend == "gloo" and shared:
            self.why = (f"{local_world} ranks share {n} GPU(s) and NCCL refuses two ranks of one "
                        "communicator on one GPU: gloo on CUDA tensors (it stages through host "
                        "memory; the allocator's figures are the GPU's, the times are not)")
        elif self.backend == "nccl":
            self.why = "each rank has a GPU of its own"
        else:
            self.why = "asked for (--backend gloo)"

    @property
    def type(self):
        """The device type for meshes, autocast and tensor filters: cpu or cuda."""
        return self.device.type

    def describe(self):
        return {"name": self.backend, "why": self.why, "fake_hosts": self.fake_hosts,
                "device": str(self.device)}


def _device_used_bytes(index):
    """Device memory in use on GPU `index` without touching CUDA in this process: NVML (bytes), else
    nvidia-smi (MiB). Returns (bytes or None, how)."""
    try:
        import pynvml
        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(index)
        return int(pynvml.nvmlDeviceGetMemoryInfo(h).used), "nvml"
    except Exception:  # noqa: BLE001 - no NVML binding or no driver: try nvidia-smi
        pass
    try:
        out = subprocess.run(["nvidia-smi", "-i", str(index), "--query-gpu=memory.used",
                              "--format=csv,noheader,nounits"], capture_output=True, text=True,
                             timeout=20).stdout.strip()
        return int(float(out.splitlines()[0])) * MIB, "nvidia-smi (MiB)"
    except Exception:  # noqa: BLE001 - no nvidia-smi either: the context stays unmeasured
        return None, "none"


def _process_used_bytes(index):
    """This process's device memory as NVML sees it (None when NVML lists it under another PID
    namespace's number, as in some containers)."""
    try:
        import pynvml
        h = pynvml.nvmlDeviceGetHandleByIndex(index)
        for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h):
            if p.pid == os.getpid():
                return p.usedGpuMemory
    except Exception:  # noqa: BLE001 - NVML absent: not measured
        pass
    return None


# memory_stats() keys kept in the result: the allocator's segments and blocks, split blocks,
# retries (cudaFree + cudaMalloc again after an OOM) and raw device calls.
_STATS = ("allocated_bytes.all.peak", "reserved_bytes.all.peak", "requested_bytes.all.peak",
          "active_bytes.all.peak", "reserved_bytes.all.current", "allocated_bytes.all.current",
          "segment.all.peak", "segment.all.current", "segment.large_pool.peak",
          "segment.small_pool.peak", "allocation.all.peak", "active.all.peak",
          "inactive_split.all.peak", "inactive_split.all.current",
          "inactive_split_bytes.all.peak", "inactive_split_bytes.all.current",
          "inactive_split_bytes.large_pool.peak", "inactive_split_bytes.small_pool.peak",
          "num_alloc_retries", "num_ooms", "num_device_alloc", "num_device_free",
          "num_sync_all_streams", "oversize_allocations.peak", "oversize_segments.peak",
          "max_split_size")


class Meter:
    """torch.cuda's figures for one rank (Target.dry: every call skipped and named)."""

    def __init__(self, target):
        self.t = target
        self.dry = target.dry
        self.skipped = []
        self.phases = collections.OrderedDict()   # (step, phase) -> {allocated, reserved, requested}
        self.step = 0
        self.context = None
        self.cublas = None
        self.baseline = None
        if self.dry:
            _say(target.rank, "--dry-cpu: the CUDA path on CPU tensors over gloo; skipped: "
                 + "; ".join(DRY_SKIPS))

    def _skip(self, what):
        if what not in self.skipped:
            self.skipped.append(what)

    # ---- the allocator's own record of each allocation (--alloc-trace) ----

    def record_history(self):
        """From here on the caching allocator records every allocation, free and segment
        (torch.cuda.memory._record_memory_history; no stack frames: context None)."""
        if self.dry:
            self._skip("torch.cuda.memory._record_memory_history (--alloc-trace)")
            return
        import torch
        torch.cuda.memory._record_memory_history(enabled="all", context=None, stacks="python",
                                                 max_entries=4_000_000)

    def write_history(self, path, header):
        """The recorded history as an allocation trace for `memplan alloc` (history_trace)."""
        if self.dry:
            return
        import torch
        snap = torch.cuda.memory._snapshot()
        traces = snap.get("device_traces") or []
        entries = traces[self.t.index] if self.t.index < len(traces) else []
        with open(path, "w") as f:
            for line in header:
                f.write(f"# {line}\n")
            f.writelines(history_trace(entries))

    # ---- before the model: the context and cuBLAS, one rank at a time ----

    def init_device(self, barrier):
        """Creates this rank's CUDA context and measures it, ranks in turn (barrier: a CPU barrier
        of every rank) so that no other rank's context lands between a rank's two readings."""
        if self.dry:
            self._skip(DRY_SKIPS[0])
            self._skip(DRY_SKIPS[1])
            for _ in range(self.t.world):
                barrier()
            return
        import torch
        for r in range(self.t.world):
            if r == self.t.rank:
                before, how = _device_used_bytes(self.t.index)
                torch.cuda.set_device(self.t.index)   # CUDA 12+: this creates the primary context
                torch.zeros(1, device=self.t.device)  # and the allocator's first segment
                torch.cuda.synchronize()
                free, total = torch.cuda.mem_get_info()
                reserved = torch.cuda.memory_reserved()
                after = total - free
                self.context = {
                    "device_used_before_bytes": before, "device_used_after_bytes": after,
                    "reserved_after_bytes": reserved, "how_before": how,
                    # what the driver holds for this process beyond the allocator's segments
                    "context_bytes": (after - before - reserved) if before is not None else None,
                    "process_used_bytes": _process_used_bytes(self.t.index),
                    "CUDA_MODULE_LOADING": os.environ.get("CUDA_MODULE_LOADING", "unset (LAZY)"),
                }
            barrier()

    def probe_cublas(self):
        """The first SGEMM's cost: the workspace the caching allocator hands cuBLAS (it stays
        allocated, as in training), and the device memory cuBLAS's handle and kernels take."""
        if self.dry:
            self._skip(DRY_SKIPS[2])
            return
        import torch
        n = 1024
        a0, r0 = torch.cuda.memory_allocated(), torch.cuda.memory_reserved()
        u0 = torch.cuda.mem_get_info()
        x = torch.randn(n, n, device=self.t.device)
        y = x @ x
        torch.cuda.synchronize()
        del x, y
        a1, r1 = torch.cuda.memory_allocated(), torch.cuda.memory_reserved()
        u1 = torch.cuda.mem_get_info()
        self.cublas = {
            "gemm": f"{n}x{n}x{n} fp32", "allow_tf32": bool(torch.backends.cuda.matmul.allow_tf32),
            "CUBLAS_WORKSPACE_CONFIG": os.environ.get("CUBLAS_WORKSPACE_CONFIG", "unset"),
            "workspace_allocated_bytes": a1 - a0,       # held by the handle after x, y are freed
            "reserved_delta_bytes": r1 - r0,
            "device_used_delta_bytes": (u0[0] - u1[0]),  # handle + kernels + segments
        }
        torch.cuda.empty_cache()   # the probe's own freed blocks go; the workspace stays

    def start_run(self):
        """After the model, the wrap and the optimizer exist: the allocator's starting point."""
        if self.dry:
            return
        import torch
        self.baseline = {"allocated_bytes": torch.cuda.memory_allocated(),
                         "reserved_bytes": torch.cuda.memory_reserved()}
        torch.cuda.reset_peak_memory_stats()

    # ---- the loop ----

    def begin_step(self, step):
        self.step = step

    @contextlib.contextmanager
    def phase(self, name, marker):
        """One phase of the step inside the record_function marker; its peaks are read at the end
        and the peak statistics reset, so each phase's maximum stands alone."""
        with marker:
            if not self.dry:
                import torch
                self._gap()
                torch.cuda.reset_peak_memory_stats()
            yield
            if self.dry:
                self._skip(DRY_SKIPS[3])
            else:
                self._read(name)

    def _read(self, name):
        import torch
        key = (self.step, name)
        s = torch.cuda.memory_stats()
        cur = {"allocated": torch.cuda.max_memory_allocated(),
               "reserved": torch.cuda.max_memory_reserved(),
               "requested": s.get("requested_bytes.all.peak", 0)}
        old = self.phases.get(key)
        self.phases[key] = cur if old is None else {k: max(old[k], cur[k]) for k in cur}
        torch.cuda.reset_peak_memory_stats()

    def _gap(self):
        """What was allocated between two phases (snapshots, the loop's own code) counts too."""
        self._read("between")

    def sync(self):
        if self.dry:
            self._skip(DRY_SKIPS[4])
            return
        import torch
        torch.cuda.synchronize()

    # ---- the result ----

    def result(self, first_steady_step):
        """The rank's CUDA figures: the steady peaks (steps >= first_steady_step) and the phase
        they fell in, every phase's peaks, the allocator's statistics and segments at the end."""
        if self.dry:
            self._skip(DRY_SKIPS[5])
            return {"max_memory_allocated": None, "max_memory_reserved": None, "skipped": self.skipped}
        import torch
        steady = {k: v for k, v in self.phases.items() if k[0] >= first_steady_step}
        (pk_step, pk_phase), pk = max(steady.items(), key=lambda kv: kv[1]["allocated"])
        stats = torch.cuda.memory_stats()
        segs = collections.Counter()
        snapshot = torch.cuda.memory_snapshot()
        for seg in snapshot:
            segs[(seg.get("segment_type", "?"), seg["total_size"])] += 1
        # every segment at the end, with its stream and blocks (size, state): what memplan's
        # replay of the same allocations should hold (bench/torch/gpu_alloc_check.py)
        streams = {}
        segment_snapshot = [
            {"stream": streams.setdefault(seg.get("stream", 0), len(streams)), "type": seg.get("segment_type", "?"),
             "total_size": seg["total_size"], "allocated_size": seg.get("allocated_size"),
             "blocks": [[b["size"], b.get("state", "?")] for b in seg.get("blocks", [])]}
            for seg in snapshot]
        free, total = torch.cuda.mem_get_info()
        return {
            "max_memory_allocated": pk["allocated"],
            "max_memory_reserved": max(v["reserved"] for v in steady.values()),
            "max_requested": pk["requested"],
            "peak_phase": pk_phase, "peak_step": pk_step,
            "phases": [{"step": s, "phase": p, **v} for (s, p), v in self.phases.items()],
            "baseline": self.baseline,
            "context": self.context,
            "cublas": self.cublas,
            "memory_stats": {k: stats.get(k) for k in _STATS if k in stats},
            "segments_end": [{"pool": t, "bytes": b, "count": c} for (t, b), c in sorted(segs.items())],
            "segment_snapshot": segment_snapshot,
            "device_used_end_bytes": total - free,
            "device_total_bytes": total,
            "process_used_end_bytes": _process_used_bytes(self.t.index),
        }


def history_trace(entries):
    """The caching allocator's recorded history (torch.cuda.memory._snapshot()["device_traces"]
    of one device) as the lines of an allocation trace (planner/plan_alloc_trace.h): "alloc" ->
    "a ADDR SIZE [STREAM]"; "free_completed" (the block reusable again: after record_stream's
    events, when there were any) -> "f ADDR"; a run of "segment_free" that no "oom" preceded
    (torch.cuda.empty_cache()) -> "e"; "oom" -> a comment. Streams are numbered by first use,
    the default stream (0) staying 0."""
    streams, out, freeing = {0: 0}, [], False
    for e in entries:
        act = e.get("action")
        if act == "alloc":
            s = streams.setdefault(e.get("stream", 0), len(streams))
            if s >= 32:
                raise ValueError("more than 31 streams besides the default one")
            out.append(f"a {e['addr']:x} {e['size']}" + (f" {s}" if s else "") + "\n")
        elif act == "free_completed":
            out.append(f"f {e['addr']:x}\n")
        elif act == "oom":
            out.append(f"# oom: {e.get('size', 0)} B asked, {e.get('device_free', 0)} B free on the device\n")
            freeing = True   # the retry's releases are the allocator's own
            continue
        elif act == "segment_free" and not freeing:
            out.append("e\n")
            freeing = True
            continue
        if act not in ("segment_free",):
            freeing = False
    return out


def versions(target):
    """What a CUDA row says about the software it ran on (the device's own torch, not the
    harness's pinned one)."""
    if target.kind != "cuda" or target.dry:
        return {}
    import torch
    v = {"cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version(),
         "gpu": torch.cuda.get_device_name(target.index),
         "gpu_count": torch.cuda.device_count()}
    try:
        v["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
    except Exception:  # noqa: BLE001 - a torch built without NCCL
        v["nccl"] = None
    try:
        import pynvml
        v["driver"] = pynvml.nvmlSystemGetDriverVersion()
    except Exception:  # noqa: BLE001 - no NVML binding
        v["driver"] = None
    return v


def summary_line(doc):
    """One line for bench/gpu_check.sh's summary: rank 0's peaks, context, workspace, backend."""
    r = doc["per_rank"][0]["cuda"]
    if r.get("max_memory_allocated") is None:
        return (f"# cuda (dry-cpu): the CUDA path ran on CPU tensors; torch {doc['versions']['torch']}; "
                f"skipped: {len(r.get('skipped', []))} CUDA measurement(s)")
    ctx = (r.get("context") or {}).get("context_bytes")
    ws = (r.get("cublas") or {}).get("workspace_allocated_bytes")

    def m(x):
        return "?" if x is None else f"{x / MIB:.1f}"
    return (f"# cuda: rank 0 allocated {m(r['max_memory_allocated'])} MiB ({r['peak_phase']}, step "
            f"{r['peak_step']}), reserved {m(r['max_memory_reserved'])} MiB, context {m(ctx)} MiB, "
            f"cuBLAS workspace {m(ws)} MiB, segments {r['memory_stats'].get('segment.all.peak')}; "
            f"{doc['backend']['name']}; torch {doc['versions']['torch']}")
