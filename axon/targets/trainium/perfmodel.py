"""Performance model of one NeuronCore over an NKI instruction trace.

`estimate(trace, hw)` list-schedules the trace (program order, as the simulator recorded it) onto
the core's engines and returns latency, per-engine busy time and utilisation, HBM bytes and the
kernel's roofline; `write_perfetto` writes the schedule as a Chrome/Perfetto trace.

Modelling decisions (numbers live in hardware.py, with their sources):
- Engines. Tensor, Vector, Scalar and GpSimd each run their own in-order instruction stream. An
  instruction starts when its engine is free and every instruction it depends on has finished.
- Dependencies come only from the regions instructions touch: read-after-write, write-after-read
  and write-after-write on overlapping regions of the same buffer. The simulator gives every
  allocation (and every loop iteration's tiles) a fresh buffer id, so independent iterations
  overlap freely, as NKI's affine_range allows; SBUF capacity does not limit prefetching (the
  simulator checks capacity, the model assumes the compiler found enough buffers).
- PSUM accumulation: an nc_matmul that accumulates into a PSUM region depends on the previous
  matmul into it (in-order on TensorE anyway) and does not pay the back-to-back penalty; other
  engines are not serialised by it, only the reader of the finished accumulation waits. A memset
  of a PSUM region whose next access is a matmul accumulating into it (nl.zeros then +=) is
  folded away, as the compiler starts the group with an overwriting matmul.
- Cost of a compute instruction, in its engine's cycles: the opcode's `CostFormula`, plus the
  fixed access-start cost (~60 cycles; 64 for TensorE), plus ~100 static cycles when N is small
  or the instruction reads what the previous instruction of the same engine wrote. Cycles become
  ns at the engine's own clock.
- DMA. A transfer first pays the fixed cost (descriptors, semaphore, start: ~1300 ns on trn1) as
  latency; at most 16 transfers (the queues) are in that phase at once. Then its data moves at
  the shared bandwidth (the DMA engines' aggregate, capped by the core's HBM share when HBM is
  touched) derated by the efficiency of its per-partition contiguous payload. Both resources are
  booked on fluid timelines of 200 ns buckets, so transfers overlap but never exceed the
  aggregate rate, and a transfer that becomes ready late (a store waiting for compute) cannot
  hold up earlier-ready ones, as the compiler's queue assignment would avoid. A transfer touching
  fewer partitions than there are DMA engines uses only that many engines. Queue lanes in the
  Perfetto trace are for display.
- Roofline: max(TensorE time at peak rate for the matmul FLOPs in the trace, compulsory HBM bytes
  (the union of HBM regions read plus the union written) / the core's HBM bandwidth). The HBM
  bandwidth (410 GB/s on trn1), not the lower DMA aggregate, matches the tutorial's ridge point
  (222 FLOP/B) and keeps the roofline a lower bound. Vector/Scalar work is not in the roofline.
Not modelled: SBUF/PSUM port sharing between engines (v2 Vector/GpSimd, Vector/Scalar), PSUM
bank limits on in-flight accumulation groups, instruction fetch and semaphore latency between
engines, HBM page effects beyond the per-descriptor efficiency.

Invariant: cost is linear in the trace (per instruction: a few dictionary look-ups, a bisect
over the distinct regions of the touched buffers and an amortised O(1) bandwidth booking), and
the same trace gives the same numbers.
"""
from __future__ import annotations

import json
from bisect import bisect_left
from dataclasses import dataclass, field
from pathlib import Path

from axon.targets.trainium.hardware import (
    COSTS,
    CostBasis,
    FastPath,
    HardwareDescription,
    matmul_rate_class,
)
from axon.targets.trainium.trace import Engine, Instruction, Memory

COMPUTE_ENGINES = (Engine.TENSOR, Engine.VECTOR, Engine.SCALAR, Engine.GPSIMD)
_HALF = ("bfloat16", "float16")
_BUCKET_NS = 200.0


@dataclass(frozen=True)
class Schedule:
    """Where and when each instruction ran: rows are (track, start_ns, end_ns, opcode, line,
    trace index); folded instructions have no row."""

    tracks: tuple[str, ...]
    rows: tuple[tuple[int, float, float, str, int, int], ...]


@dataclass(frozen=True)
class Estimate:
    target: str
    latency_ns: float
    engine_busy_ns: dict[str, float]  # "dma": time the shared DMA bandwidth is in use
    utilisation: dict[str, float]  # busy / latency
    hbm_bytes: int  # bytes moved to or from HBM by the trace
    dma_bytes: int
    flops: int  # matmul FLOPs (2*M*K*N summed over nc_matmul)
    compulsory_hbm_bytes: int
    roofline_compute_ns: float
    roofline_memory_ns: float
    instructions: int
    uncosted_opcodes: tuple[str, ...] = ()
    schedule: Schedule | None = field(default=None, repr=False)

    @property
    def roofline_ns(self) -> float:
        return max(self.roofline_compute_ns, self.roofline_memory_ns)

    @property
    def roofline_fraction(self) -> float:
        return self.roofline_ns / self.latency_ns if self.latency_ns > 0 else 0.0


class _Accesses:
    """Latest end time of the accesses to each distinct region of one buffer.

    Keys are (b_start, b_stop, p_start, p_stop); a query walks back from the first key starting at
    or after the query's end and stops once keys start too early to reach it (max_len)."""

    __slots__ = ("ends", "keys", "is_sorted", "max_len")

    def __init__(self):
        self.ends: dict[tuple, float] = {}
        self.keys: list[tuple] = []
        self.is_sorted = True
        self.max_len = 0

    def add(self, key: tuple, end: float) -> None:
        old = self.ends.get(key)
        if old is None:
            self.ends[key] = end
            if self.keys and key < self.keys[-1]:
                self.is_sorted = False
            self.keys.append(key)
            if key[1] - key[0] > self.max_len:
                self.max_len = key[1] - key[0]
        elif end > old:
            self.ends[key] = end

    def latest(self, key: tuple) -> float:
        b0, b1, p0, p1 = key
        if not self.is_sorted:
            self.keys.sort()
            self.is_sorted = True
        keys, ends = self.keys, self.ends
        i = bisect_left(keys, (b1,))
        reach = b0 - self.max_len
        best = 0.0
        while i > 0:
            i -= 1
            k = keys[i]
            if k[0] <= reach:
                break
            if k[1] > b0 and k[2] < p1 and p0 < k[3]:
                e = ends[k]
                if e > best:
                    best = e
        return best


class _Bandwidth:
    """Fluid booking of a shared bandwidth: each bucket of `width` ns holds at most `width` ns of
    transfer time, filled from its start; full buckets are skipped with a union-find pointer."""

    __slots__ = ("width", "used", "nxt")

    def __init__(self, width: float = _BUCKET_NS):
        self.width = width
        self.used: list[float] = []
        self.nxt: list[int] = []

    def _grow(self, n: int) -> None:
        start = len(self.used)
        if n > start:
            self.used.extend([0.0] * (n - start))
            self.nxt.extend(range(start, n))

    def _find(self, i: int) -> int:
        """First bucket at or after i that is not full (grows the timeline as needed)."""
        nxt = self.nxt
        root = i
        while True:
            if root >= len(nxt):
                self._grow(max(root + 1, 2 * len(nxt)))
                nxt = self.nxt
            if nxt[root] == root:
                break
            root = nxt[root]
        while i != root:  # path compression
            nxt[i], i = root, nxt[i]
        return root

    def book(self, t: float, amount: float) -> float:
        """Book `amount` ns of transfer time starting no earlier than t; return its end."""
        w = self.width
        i = int(t // w)
        cursor = t
        while True:
            i = self._find(i)
            base = i * w
            s = max(cursor, base + self.used[i])
            avail = base + w - s
            if amount <= avail:
                end = s + amount
                self.used[i] = end - base
                if avail - amount < 1e-9:
                    self.nxt[i] = i + 1
                return end
            if avail > 0:
                amount -= avail
            self.used[i] = w
            self.nxt[i] = i + 1
            cursor = base + w
            i += 1


def _key(region) -> tuple:
    return (region.b_start, region.b_stop, region.p_start, region.p_stop)


def _fast(ins: Instruction, when: FastPath) -> bool:
    if when is FastPath.NONE:
        return False
    op = ins.extra.get("op", "")
    half = all(d in _HALF for d in ins.extra.get("dtypes", (ins.dtype,)))
    if when is FastPath.PSUM_INPUT_OR_HALF_ARITH:
        if any(r.memory is Memory.PSUM for r in ins.reads):
            return True
        return half and op in ("add", "subtract", "multiply")
    if when is FastPath.HALF_ADD_MAX:
        return half and op in ("add", "maximum")
    return False


def compute_cycles(ins: Instruction, hw: HardwareDescription, back_to_back: bool = False) -> float:
    """Engine cycles of one compute instruction (formula + access start + static overhead)."""
    f = hw.cost(ins.opcode)
    size = ins.free_elems  # elements per partition, for the small-N overhead rule
    if f.basis is CostBasis.MATMUL:
        size = ins.extra.get("moving_free", ins.free_elems)
        n = max(min(64, ins.extra.get("stationary_free", 128)), size)
    elif f.basis is CostBasis.TRANSPOSE:
        n = max(ins.partitions, min(64, ins.free_elems))
    else:
        n = ins.free_elems
    mult = f.fast_mult if _fast(ins, f.fast_when) else f.mult
    cycles = max(float(f.floor), mult * n)
    if ins.dtype in ("float32", "fp32"):
        cycles *= f.fp32_mult
    if ins.extra.get("perf_mode") == "double_row":  # FP8 double-row mode, v3 only [isa]
        cycles /= 2
    cycles += f.add + hw.engines[ins.engine].access_start_cycles
    if size < hw.overhead.small_n_threshold or back_to_back:
        cycles += hw.overhead.static_cycles
    return cycles


def matmul_flops(ins: Instruction) -> int:
    if ins.opcode != "nc_matmul":
        return 0
    k = ins.extra.get("contraction", ins.partitions)
    m = ins.extra.get("stationary_free", 128)
    n = ins.extra.get("moving_free", ins.free_elems)
    return 2 * k * m * n


def _union_bytes(intervals: dict[int, list[tuple[int, int]]]) -> int:
    total = 0
    for spans in intervals.values():
        spans.sort()
        cur_s, cur_e = spans[0]
        for s, e in spans[1:]:
            if s > cur_e:
                total += cur_e - cur_s
                cur_s, cur_e = s, e
            elif e > cur_e:
                cur_e = e
        total += cur_e - cur_s
    return total


def _folded_psum_zeroing(trace: list[Instruction]) -> set[int]:
    """Memsets of a PSUM region whose next access is an nc_matmul accumulating into exactly that
    region (`acc = nl.zeros(..., buffer=nl.psum)` then `acc += matmul`): the compiler starts the
    accumulation group with an overwriting matmul instead. Returns the memsets to skip (the
    matmul's own read of its PSUM region never creates a dependency, see estimate)."""
    pending: dict[int, dict[tuple, int]] = {}  # PSUM buffer -> region key -> memset index
    skip: set[int] = set()
    for i, ins in enumerate(trace):
        if ins.opcode == "memset" and len(ins.writes) == 1 and ins.writes[0].memory is Memory.PSUM:
            w = ins.writes[0]
            pending.setdefault(w.buffer, {})[_key(w)] = i
            continue
        if not pending:
            continue
        for r in ins.reads + ins.writes:
            if r.memory is not Memory.PSUM or r.buffer not in pending:
                continue
            regions = pending[r.buffer]
            k = _key(r)
            if ins.opcode == "nc_matmul" and k in regions and ins.writes and _key(ins.writes[0]) == k:
                skip.add(regions.pop(k))
            else:  # another access: that zeroing is really needed
                regions.clear()
            if not regions:
                del pending[r.buffer]
    return skip


def estimate(trace: list[Instruction], hw: HardwareDescription, *, keep_schedule: bool = False) -> Estimate:
    dma = hw.dma
    writes: dict[int, _Accesses] = {}
    reads: dict[int, _Accesses] = {}
    free = {e: 0.0 for e in COMPUTE_ENGINES}
    last_end = {e: -1.0 for e in COMPUTE_ENGINES}
    busy = {e.value: 0.0 for e in COMPUTE_ENGINES}
    busy["dma"] = 0.0
    ns_per_cycle = {e: 1.0 / hw.engines[e].clock_ghz for e in COMPUTE_ENGINES}
    lanes = [0.0] * dma.queues
    issue = _Bandwidth()
    bandwidth = _Bandwidth()
    hbm_bw = min(dma.bytes_per_ns, hw.hbm_bytes_per_ns)
    rows: list[tuple[int, float, float, str, int, int]] = []
    hbm_read: dict[int, list[tuple[int, int]]] = {}
    hbm_written: dict[int, list[tuple[int, int]]] = {}
    flops_ns = 0.0
    flops = hbm_bytes = dma_bytes = 0
    uncosted: set[str] = set()
    latency = 0.0
    n_tracks = len(COMPUTE_ENGINES)

    folded = _folded_psum_zeroing(trace)
    for idx, ins in enumerate(trace):
        if idx in folded:
            continue
        # --- dependencies through regions ---
        raw = 0.0
        write_keys = [_key(w) for w in ins.writes]
        for r in ins.reads:
            acc = writes.get(r.buffer)
            if acc is None:
                continue
            k = _key(r)
            if ins.opcode == "nc_matmul" and k in write_keys:
                continue  # PSUM accumulation: ordered on TensorE below, no back-to-back penalty
            t = acc.latest(k)
            if t > raw:
                raw = t
        ready = raw
        for w, k in zip(ins.writes, write_keys):
            acc = writes.get(w.buffer)
            if acc is not None:
                t = acc.latest(k)
                if t > ready:
                    ready = t
            acc = reads.get(w.buffer)
            if acc is not None:
                t = acc.latest(k)
                if t > ready:
                    ready = t

        # --- timing ---
        eng = ins.engine
        if eng is Engine.DMA:
            start = ready
            # Fixed cost: a latency for this transfer, and a throughput limit of `queues`
            # transfers in their fixed phase at once (booked fluidly, so late transfers never
            # block earlier-ready ones).
            issued = max(start + dma.fixed_ns, issue.book(start, dma.fixed_ns / dma.queues))
            per_partition = ins.dma_bytes / max(ins.partitions, 1)
            # descriptor payload: the HBM-side contiguous run, at most one partition's bytes
            contiguous = min(ins.extra.get("chunk_bytes") or per_partition, per_partition)
            eff = dma.efficiency(contiguous)
            if ins.extra.get("transpose"):
                eff *= dma.transpose_efficiency
            bw = hbm_bw if ins.hbm_bytes else dma.bytes_per_ns
            data_ns = ins.dma_bytes / (bw * eff)
            end = bandwidth.book(issued, data_ns)
            engines_used = min(dma.engines, max(ins.partitions, 1))
            if engines_used < dma.engines:  # few partitions: only that many engines move data
                end = max(end, issued + data_ns * dma.engines / engines_used)
            busy["dma"] += data_ns
            dma_bytes += ins.dma_bytes
            # Display lane only: the first queue lane free at `start`, else the earliest-free one.
            q = next((i for i, t in enumerate(lanes) if t <= start), None)
            if q is None:
                q = min(range(len(lanes)), key=lanes.__getitem__)
            lanes[q] = end
            track = n_tracks + q
        else:
            if ins.opcode not in COSTS:
                uncosted.add(ins.opcode)
            back_to_back = raw > 0.0 and raw == last_end[eng]
            if ins.opcode == "nc_matmul":
                back_to_back = False
            dur = compute_cycles(ins, hw, back_to_back) * ns_per_cycle[eng]
            start = max(free[eng], ready)
            end = start + dur
            free[eng] = last_end[eng] = end
            busy[eng.value] += dur
            track = COMPUTE_ENGINES.index(eng)
            if ins.opcode == "nc_matmul":
                f = matmul_flops(ins)
                flops += f
                flops_ns += f / hw.tensor_peak_flops[matmul_rate_class(ins.dtype)] * 1e9
        if end > latency:
            latency = end

        # --- bookkeeping ---
        for r in ins.reads:
            k = _key(r)
            acc = reads.get(r.buffer)
            if acc is None:
                acc = reads[r.buffer] = _Accesses()
            acc.add(k, end)
            if r.memory is Memory.HBM:
                hbm_read.setdefault(r.buffer, []).append((r.b_start, r.b_stop))
        for w, k in zip(ins.writes, write_keys):
            acc = writes.get(w.buffer)
            if acc is None:
                acc = writes[w.buffer] = _Accesses()
            acc.add(k, end)
            if w.memory is Memory.HBM:
                hbm_written.setdefault(w.buffer, []).append((w.b_start, w.b_stop))
        hbm_bytes += ins.hbm_bytes
        if keep_schedule:
            rows.append((track, start, end, ins.opcode, ins.line, idx))

    compulsory = (_union_bytes(hbm_read) if hbm_read else 0) + (_union_bytes(hbm_written) if hbm_written else 0)
    util = {name: (b / latency if latency > 0 else 0.0) for name, b in busy.items()}
    schedule = None
    if keep_schedule:
        tracks = tuple(e.value for e in COMPUTE_ENGINES) + tuple(f"dma.q{i}" for i in range(dma.queues))
        schedule = Schedule(tracks=tracks, rows=tuple(rows))
    return Estimate(
        target=hw.name,
        latency_ns=latency,
        engine_busy_ns=busy,
        utilisation=util,
        hbm_bytes=hbm_bytes,
        dma_bytes=dma_bytes,
        flops=flops,
        compulsory_hbm_bytes=compulsory,
        roofline_compute_ns=flops_ns,
        roofline_memory_ns=compulsory / hw.hbm_bytes_per_ns,
        instructions=len(trace),
        uncosted_opcodes=tuple(sorted(uncosted)),
        schedule=schedule,
    )


def write_perfetto(est: Estimate, path: str | Path) -> None:
    """Write the engine timeline as Chrome trace-event JSON (opens in ui.perfetto.dev)."""
    if est.schedule is None:
        raise ValueError("estimate has no schedule: call estimate(..., keep_schedule=True)")
    sched = est.schedule
    events: list[dict] = [{"name": "process_name", "ph": "M", "pid": 1, "tid": 0,
                           "args": {"name": f"NeuronCore ({est.target})"}}]
    used = sorted({row[0] for row in sched.rows})
    for t in used:
        events.append({"name": "thread_name", "ph": "M", "pid": 1, "tid": t + 1,
                       "args": {"name": sched.tracks[t]}})
        events.append({"name": "thread_sort_index", "ph": "M", "pid": 1, "tid": t + 1,
                       "args": {"sort_index": t}})
    for track, start, end, opcode, line, index in sched.rows:
        events.append({"name": opcode, "ph": "X", "pid": 1, "tid": track + 1,
                       "ts": round(start / 1000.0, 4), "dur": round((end - start) / 1000.0, 4),
                       "args": {"line": line, "index": index}})
    with open(path, "w") as fh:
        json.dump({"traceEvents": events, "displayTimeUnit": "ns"}, fh, separators=(",", ":"))
