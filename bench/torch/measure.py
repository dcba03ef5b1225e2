"""Memory and collective measurement from torch.profiler's event tree.

Mechanism
---------
The whole run (model construction included) executes under ``torch.profiler.profile(
profile_memory=True, record_shapes=True)``.  With memory profiling on, c10's CPU allocator
(``DefaultCPUAllocator`` via ``ProfiledCPUMemoryReporter``) reports every allocation and free
it serves to the profiler: ptr, size, and its own running total of bytes allocated while
profiling.  That covers tensors made in C++ (DDP reducer buckets, gloo work buffers,
DeepSpeed flat buffers) as well as Python-visible ones; the profiler state is thread local
and propagated to autograd and gloo worker threads, whose allocations are reported too.
Only allocations made before the profiler started (import time) are not seen; they are not
freed during the run either, so they cannot change the peak.

The harness marks phases and modules with ``record_function`` ranges:
``memplan::step<N>`` (one optimizer step, all its micro-steps), inside it
``memplan::data``, ``memplan::forward``, ``memplan::backward``, ``memplan::optimizer``,
``memplan::zero_grad``; ``memplan::module::<path>`` from forward pre/post hooks on every module
(they fire again during checkpoint recomputation); ``memplan::wrap`` around the strategy's
construction; ``memplan::snap::<i>`` at the moments the harness records which storages hold
parameters, gradients and optimizer state.

From the allocation events (sorted by time) the running live total is rebuilt; the peak is its
maximum over the steady window (start of step 2 to the end of step K).  Every allocation live
at the peak is classified (rules in ``classify``), so the categories add up to the total.
"""
import bisect
import collections

from torch._C._profiler import _EventType

CATS = ("params", "grads", "optimizer", "activations", "comm_buffers", "temporaries", "other")
PHASES = ("data", "forward", "backward", "optimizer", "zero_grad")

# c10d dispatcher op -> (reported op name, which argument is the payload)
_C10D = {
    "c10d::allreduce_": ("all_reduce", 0),
    "c10d::allreduce_coalesced_": ("all_reduce", 0),
    "c10d::allgather_": ("all_gather", 0),
    "c10d::_allgather_base_": ("all_gather", 0),
    "c10d::allgather_coalesced_": ("all_gather", 0),
    "c10d::allgather_into_tensor_coalesced_": ("all_gather", 0),
    "c10d::reduce_scatter_": ("reduce_scatter", 1),
    "c10d::_reduce_scatter_base_": ("reduce_scatter", 1),
    "c10d::reduce_scatter_tensor_coalesced_": ("reduce_scatter", 1),
    "c10d::broadcast_": ("broadcast", 0),
    "c10d::reduce_": ("reduce", 0),
    "c10d::gather_": ("gather", 1),
    "c10d::scatter_": ("scatter", 0),
    "c10d::alltoall_": ("all_to_all", 1),
    "c10d::alltoall_base_": ("all_to_all", 1),
    "c10d::send": ("send", 0),
    "c10d::recv_": ("recv", 0),
    "c10d::barrier": ("barrier", None),
}

_ELEM = {}


def _elem_size(dtype):
    if dtype not in _ELEM:
        import torch
        _ELEM[dtype] = torch.empty((), dtype=dtype).element_size()
    return _ELEM[dtype]


def _tensor_bytes(x):
    """Bytes of a recorded input: a tensor's metadata, or a (nested) list of them."""
    if isinstance(x, list):
        return sum(_tensor_bytes(t) for t in x)
    sizes = getattr(x, "sizes", None)
    dtype = getattr(x, "dtype", None)
    if sizes is None or dtype is None:
        return 0
    n = 1
    for s in sizes:
        n *= s
    return n * _elem_size(dtype)


def _walk(ev):
    stack = [ev]
    while stack:
        e = stack.pop()
        yield e
        stack.extend(e.children)


class Alloc:
    __slots__ = ("ptr", "size", "t0", "t1", "ev", "cat", "why", "last_id", "unseen")

    def __init__(self, ptr, size, t0, ev):
        self.ptr, self.size, self.t0, self.t1, self.ev = ptr, size, t0, None, ev
        self.cat, self.why, self.last_id, self.unseen = None, None, None, False


class Trace:
    """Indexes one rank's profiler event tree."""

    def __init__(self, prof):
        roots = prof.profiler.kineto_results.experimental_event_tree()
        self.allocs = []           # Alloc, in time order
        self.markers = collections.defaultdict(list)   # name -> [(t0, t1, ev)]
        self.seq_fwd = {}          # autograd sequence number -> [op events carrying it]
        self.c10d = []             # collective op events (outermost)
        events = []
        for root in roots:
            for e in _walk(root):
                if e.tag == _EventType.Allocation:
                    f = e.extra_fields
                    if f.device.type == "cpu":
                        events.append((e.start_time_ns, e.id, e))
                elif e.tag == _EventType.TorchOp:
                    n = e.name
                    if n.startswith("memplan::"):
                        self.markers[n].append((e.start_time_ns, e.end_time_ns, e))
                    elif n in _C10D:
                        self.c10d.append(e)
                    seq = e.extra_fields.sequence_number
                    if seq >= 0 and not n.startswith("autograd::"):
                        self.seq_fwd.setdefault(seq, []).append(e)
        events.sort(key=lambda x: (x[0], x[1]))
        live = {}
        self.total = []            # running live bytes after each event (rebuilt)
        self.true = []             # the allocator's own running total after each event
        self.times = []
        self.event_alloc = []      # the Alloc each event opened (None for frees)
        self.seq = []              # (time, "a" | "f", Alloc) in order: the allocation sequence
        cur = 0
        self.unmatched_free = 0
        self.unseen_frees = 0
        self.unseen_free_bytes = 0
        for t, _, e in events:
            f = e.extra_fields
            if f.alloc_size > 0:
                old = live.get(f.ptr)
                if old is not None:
                    # the address was handed out again, so the earlier block was freed on a
                    # thread whose frees the profiler does not see (gloo worker threads once
                    # their work is done); close it here, the latest moment it can have died
                    old.t1 = t
                    old.unseen = True
                    cur -= old.size
                    self.unseen_frees += 1
                    self.unseen_free_bytes += old.size
                    self.seq.append((t, "f", old))
                a = Alloc(f.ptr, f.alloc_size, t, e)
                self.seq.append((t, "a", a))
                live[f.ptr] = a
                self.allocs.append(a)
                cur += f.alloc_size
                self.event_alloc.append(a)
            else:
                a = live.pop(f.ptr, None)
                if a is None:
                    self.unmatched_free += -f.alloc_size
                    self.event_alloc.append(None)
                    self.times.append(t)
                    self.total.append(cur)
                    self.true.append(f.total_allocated)
                    continue
                a.t1 = t
                cur -= a.size
                self.seq.append((t, "f", a))
                self.event_alloc.append(None)
            self.times.append(t)
            self.total.append(cur)
            self.true.append(f.total_allocated)
        self.last_reported_total = events[-1][2].extra_fields.total_allocated if events else 0
        self.final_live = cur
        self._by_ptr = collections.defaultdict(list)
        for a in self.allocs:
            self._by_ptr[a.ptr].append(a)

    def marker(self, name, i=0):
        m = self.markers.get(name)
        return m[i] if m and len(m) > i else None

    def alloc_at(self, ptr, t):
        """The allocation at ptr that is live at time t."""
        for a in self._by_ptr.get(ptr, ()):
            if a.t0 <= t and (a.t1 is None or t < a.t1):
                return a
        return None

    # --- context of an event (its ancestors) ---
    @staticmethod
    def ancestors(ev):
        p = ev.parent
        while p is not None:
            yield p
            p = p.parent

    def context(self, ev):
        """(phase, module, comm scope name or None, inside a module forward, wrap)"""
        phase, module, comm, in_mod, wrap, bwd_node = None, None, None, False, False, None
        fsdp = None
        for p in self.ancestors(ev):
            n = p.name
            if fsdp is None and n.startswith("FSDP::") and not n.startswith("FSDP::cast_"):
                fsdp = n
            if n.startswith("memplan::module::"):
                if module is None:
                    module = n[len("memplan::module::"):]
                in_mod = True
            elif n.startswith("memplan::phase::") and phase is None:
                phase = n[len("memplan::phase::"):]
            elif n == "memplan::wrap":
                wrap = True
            elif n.startswith("memplan::comm::") and comm is None:
                comm = n
            elif n.startswith("FSDP::") and comm is None and not n.startswith("FSDP::cast_"):
                comm = n
            elif (n in _C10D or n.startswith("gloo:") or n == "record_param_comms") \
                    and comm is None:
                comm = n
            elif n.startswith("autograd::engine::evaluate_function") and bwd_node is None:
                bwd_node = p
        if fsdp is not None and not in_mod:
            module = fsdp.split(" (", 1)[1].rstrip(")") if " (" in fsdp else "model"
        if module is None and bwd_node is not None:
            for fw in self.seq_fwd.get(bwd_node.extra_fields.sequence_number, ()):
                for p in self.ancestors(fw):
                    if p.name.startswith("memplan::module::"):
                        module = p.name[len("memplan::module::"):]
                        break
                if module is not None:
                    break
            if module is None:
                module = bwd_node.name.split(": ", 1)[-1]
        return phase, module, comm, in_mod, wrap

    def step_of(self, t):
        for name, ranges in self.markers.items():
            if name.startswith("memplan::step"):
                for t0, t1, _ in ranges:
                    if t0 <= t <= t1:
                        return int(name[len("memplan::step"):])
        return 0


def apply_snapshots(trace, snaps):
    """snaps: list of (marker name, {category: set(ptr)}).  Every allocation live at a snapshot
    with a listed ptr gets that category; params > grads > optimizer > comm_buffers."""
    rank = {c: i for i, c in enumerate(("params", "grads", "optimizer", "comm_buffers"))}
    trace.snap_times = []
    for name, by_cat in snaps:
        m = trace.marker(name)
        if m is None:
            continue
        t = m[0]
        trace.snap_times.append(t)
        for cat, ptrs in by_cat.items():
            for ptr in ptrs:
                a = trace.alloc_at(ptr, t)
                if a is None:
                    continue
                if a.cat is None or rank[cat] < rank[a.cat]:
                    a.cat, a.why = cat, "snapshot"
                a.last_id = t if a.last_id is None else max(a.last_id, t)
    trace.snap_times.sort()


def _stale(trace, a, t):
    """True when a snapshot after the allocation was last identified, and before t, no longer
    listed it (e.g. a gradient dropped by zero_grad whose storage something else still holds)."""
    if a.last_id is None:
        return False
    i = bisect.bisect_right(trace.snap_times, a.last_id)
    return i < len(trace.snap_times) and trace.snap_times[i] <= t


def classify(trace, a, t=None):
    """Category of an allocation not identified by a snapshot.

    - inside a collective op, an FSDP:: comm range (all-gather, reduce-scatter, pre/post
      hooks; not FSDP::cast_*) or a memplan::comm:: range (DDP's pre-forward bucket rebuild,
      DeepSpeed's gather/reduce functions) -> comm_buffers
    - made during the strategy's construction (memplan::wrap) -> comm_buffers (DDP reducer
      buckets, DeepSpeed flat/IPG buffers that are not parameters, gradients or optimizer state)
    - made while a module's forward runs (forward, or recomputation in backward) or anywhere in
      the forward phase (loss) -> activations
    - the data phase (input ids, labels, images) and setup outside the wrap (module buffers)
      -> other
    - anything else made in backward, optimizer or zero_grad -> temporaries
    An allocation identified by a snapshot keeps that category until a later snapshot (before
    the moment asked about) no longer lists it; from then on the rules above apply (a gradient
    storage that zero_grad dropped but a gloo work object still holds is a comm buffer).
    """
    if a.cat is not None and (t is None or not _stale(trace, a, t)):
        return a.cat
    phase, _, comm, in_mod, wrap = trace.context(a.ev)
    if comm is not None:
        return "comm_buffers"
    if wrap:
        return "comm_buffers"
    if in_mod or phase == "forward":
        return "activations"
    if phase == "data" or phase is None:
        return "other"
    return "temporaries"


def peak(trace, t_start, t_end, exact):
    """Index of the event with the largest running total inside [t_start, t_end]: the
    allocator's own total when `exact` (every thread's frees counted), else the rebuilt one."""
    series = trace.true if exact else trace.total
    i0 = bisect.bisect_left(trace.times, t_start)
    i1 = bisect.bisect_right(trace.times, t_end)
    best, bi = -1, None
    for i in range(i0, i1):
        if series[i] > best:
            best, bi = series[i], i
    return bi


def detail_key(trace, a, c):
    """What a live block is, for the at-peak tables: (category, the step it was allocated in,
    its phase, module, comm scope, the op that allocated it)."""
    phase, module, comm, _, _ = trace.context(a.ev)
    op = a.ev.parent.name if a.ev.parent is not None else "?"
    return (c, trace.step_of(a.t0), phase or "setup", module or "", comm or "", op)


def top_rows(detail, n):
    """The n largest entries of a detail_key counter as JSON rows (a 7th key field: "free")."""
    names = ("category", "alloc_step", "alloc_phase", "module", "scope", "op", "free")
    return [dict(zip(names, k), bytes=v) for k, v in sorted(detail.items(), key=lambda kv: -kv[1])[:n]]


def split_at(trace, t, total):
    """Category bytes of everything live at time t (inclusive of allocations made at t), made
    to add up to `total` (the allocator's exact figure):

    Blocks freed on a thread the profiler does not follow (a gloo worker dropping the last
    reference to a collective's buffer) have no free event.  The rebuilt live set then holds
    more than the allocator does.  The excess is removed from the blocks whose free was not
    seen (closed later by the reuse of their address, or alive at the end of the trace),
    largest first, allocations made inside collectives before the others, never more than the
    excess; what is left unexplained goes to `other` (`unattributed` > 0), or, when the
    rebuilt set still exceeds the total by less than any candidate block, is taken from
    comm_buffers (`unattributed` < 0)."""
    live = [a for a in trace.allocs if a.t0 <= t and (a.t1 is None or t < a.t1)]
    excess = sum(a.size for a in live) - total
    dropped = set()
    if excess > 0:
        def is_comm(a):
            comm = trace.context(a.ev)[2]
            return comm is not None and (comm in _C10D or comm.startswith("gloo:"))
        cand = [a for a in live if a.unseen or a.t1 is None]
        cand.sort(key=lambda a: (not is_comm(a), -a.size))
        left = excess
        for a in cand:
            if a.size <= left:
                dropped.add(id(a))
                left -= a.size
    out = {c: 0 for c in CATS}
    detail = collections.Counter()
    backend = 0
    casts = collections.Counter()
    dropped_bytes = 0
    for a in live:
        if id(a) in dropped:
            dropped_bytes += a.size
            continue
        if True:
            c = classify(trace, a, t)
            out[c] += a.size
            key = detail_key(trace, a, c)
            detail[key] += a.size
            comm = key[4]
            if c == "comm_buffers" and comm and (comm in _C10D or comm.startswith("gloo:")):
                backend += a.size
            p = a.ev.parent
            for _ in range(3):      # aten::_to_copy -> aten::empty_strided -> allocation
                if p is None:
                    break
                if p.name == "aten::_to_copy":
                    casts[c] += a.size
                    break
                p = p.parent
    unattributed = total - sum(out.values())
    if unattributed > 0:
        out["other"] += unattributed
    elif unattributed < 0:
        # blocks smaller than the excess could not be matched exactly (a few bytes): take the
        # rest from comm_buffers, where unseen frees come from, else the largest category
        c = "comm_buffers" if out["comm_buffers"] >= -unattributed else max(out, key=out.get)
        out[c] += unattributed
    return out, detail, backend, dict(casts), dropped_bytes, unattributed


def collectives(trace, step, group=None):
    """Collectives issued during optimizer step number `step` (outermost c10d ops). group: the
    ranks of an all-gather whose output is recorded without sizes (FSDP1's padded unsharded flat
    parameter, whose storage it resizes between uses: _flat_param.py _alloc_storage /
    _free_storage): its payload is then the input shard times the group."""
    m = trace.marker(f"memplan::step{step}")
    if m is None:
        return []
    t0, t1, _ = m
    groups = collections.OrderedDict()
    for e in sorted(trace.c10d, key=lambda e: e.start_time_ns):
        if not (t0 <= e.start_time_ns <= t1):
            continue
        if any(p.name in _C10D for p in Trace.ancestors(e)):
            continue
        op, arg = _C10D[e.name]
        inputs = e.extra_fields.inputs
        nbytes = _tensor_bytes(inputs[arg]) if arg is not None and len(inputs) > arg else 0
        if nbytes == 0 and op == "all_gather" and group and len(inputs) > 1:
            nbytes = _tensor_bytes(inputs[1]) * group
        phase = None
        for p in Trace.ancestors(e):
            if p.name.startswith("memplan::phase::"):
                phase = p.name[len("memplan::phase::"):]
                break
        key = (op, phase or "setup")
        g = groups.setdefault(key, {"op": op, "phase": phase or "setup", "count": 0,
                                    "payload_bytes": 0, "payloads": []})
        g["count"] += 1
        g["payload_bytes"] += nbytes
        g["payloads"].append(nbytes)
    return list(groups.values())


def _is_backend(trace, a):
    """An allocation made inside a collective (c10d op, gloo): NCCL makes no such tensor."""
    _, _, comm, _, _ = trace.context(a.ev)
    return comm is not None and (comm in _C10D or comm.startswith("gloo:"))


def op_path(a, depth=8):
    """The ops an allocation was made under, innermost first, '<'-joined (the profiler's event
    tree: its parents): which op asked for it, for diagnosis (alloc_diff.py prints them)."""
    names, p = [], a.ev.parent
    while p is not None and len(names) < depth:
        if not p.name.startswith("memplan::step"):
            names.append(p.name.replace(" ", "_"))
        p = p.parent
    return "<".join(names)


def write_alloc_trace(trace, path, header, ops=False):
    """The allocation sequence as text for `memplan alloc` (docs/formulas.md "The caching
    allocator"): one event a line, in order; `header` lines are written as `#` comments.

        m NAME          a phase starts: step<N>, data, forward, backward, optimizer, zero_grad
        a ADDR SIZE     SIZE bytes allocated at ADDR (hex)
        x ADDR SIZE     allocated inside a gloo collective: NCCL makes no such tensor through
                        PyTorch's allocator, so a GPU replay leaves it out (and its free)
        f ADDR          the block at ADDR freed (a free the profiler did not see, on a gloo
                        worker thread, is written where the address is handed out again)

    All on one stream: a CPU run has none; the sizes are the tensors' storage bytes, what the
    CUDA allocator would be asked for.  With `ops`, each allocation made under other ops than
    the one before it is preceded by a comment line `# op PATH` (op_path: innermost first),
    which `memplan alloc` skips."""
    marks = []
    for name, ranges in trace.markers.items():
        if name.startswith("memplan::step"):
            label = name[len("memplan::"):]
        elif name.startswith("memplan::phase::"):
            label = name[len("memplan::phase::"):]
        else:
            continue
        marks.extend((t0, label) for t0, _, _ in ranges)
    marks.sort()
    k, last_ops = 0, None
    with open(path, "w") as out:
        for line in header:
            out.write(f"# {line}\n")
        for t, op, a in trace.seq:
            while k < len(marks) and marks[k][0] <= t:
                out.write(f"m {marks[k][1]}\n")
                k += 1
            if op == "f":
                out.write(f"f {a.ptr:x}\n")
                continue
            if ops:
                where = op_path(a)
                if where != last_ops:
                    out.write(f"# op {where}\n")
                    last_ops = where
            out.write(f"{'x' if _is_backend(trace, a) else 'a'} {a.ptr:x} {a.size}\n")


def peak_excl_backend(trace, t_start, t_end, exact):
    """The peak of live bytes without the buffers gloo allocates inside its collectives (what a
    GPU run with NCCL would hold), in [t_start, t_end].

    Returns (index, lower, upper, backend ptrs).  Frees made on gloo's worker threads are not
    seen (an allocation is closed at the reuse of its address at the latest), so the live set
    rebuilt without gloo's buffers is an upper bound (`upper`, stale blocks counted); with the
    allocator's exact total, `lower` = max(upper - (rebuilt - exact), exact - gloo's buffers not
    yet seen freed) is a bound below.  Equal bounds: the exact figure.  The index is the
    moment of the largest lower bound (the largest figure the run is known to reach)."""
    n = len(trace.times)
    idx = {id(a): i for i, a in enumerate(trace.event_alloc) if a is not None}
    delta = [0] * (n + 1)
    for a in trace.allocs:
        if not _is_backend(trace, a):
            continue
        delta[idx[id(a)]] += a.size
        if a.t1 is not None:
            j = bisect.bisect_left(trace.times, a.t1)
            while j < n and trace.event_alloc[j] is not None and trace.times[j] == a.t1 \
                    and trace.event_alloc[j] is not a:
                j += 1
            # a free event at t1, or the reuse of the address (an allocation event) at t1
            delta[min(j, n)] -= a.size
    i0 = bisect.bisect_left(trace.times, t_start)
    i1 = bisect.bisect_right(trace.times, t_end)
    be, best, bi, best_up = 0, -1, None, -1
    for i in range(n):
        be += delta[i]
        if i < i0 or i >= i1:
            continue
        up = trace.total[i] - be
        lo = max(up - max(0, trace.total[i] - trace.true[i]), trace.true[i] - be) if exact else up
        if lo > best:
            best, bi = lo, i
        best_up = max(best_up, up)
    return bi, best, best_up
