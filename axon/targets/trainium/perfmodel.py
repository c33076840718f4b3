"""Performance model of one NeuronCore over an NKI instruction trace.

`estimate(trace, hw)` list-schedules the trace onto the core's engines and returns latency,
per-engine busy time and utilisation, HBM bytes and the kernel's own bound; `write_perfetto`
writes the schedule as a Chrome/Perfetto trace.

Modelling decisions (numbers live in hardware.py, with their sources):
- Dependencies come only from the regions instructions touch: read-after-write, write-after-read
  and write-after-write on overlapping regions of the same buffer, found in program order. The
  simulator gives every allocation (and every loop iteration's tiles) a fresh buffer id; strided
  HBM accesses carry their rows, so tiles of a wide matrix do not falsely overlap. SBUF capacity
  does not limit prefetching by DMA (the simulator checks capacity).
- Engines. Tensor, Vector, Scalar and GpSimd each run one instruction at a time. Event-driven list
  scheduling: when an engine is free it starts the oldest waiting instruction whose dependencies
  have finished and that may go ahead of every earlier-issued, unstarted instruction of its
  engine; that is allowed only across iterations of an affine_range loop, at most
  `scheduler.affine_lookahead` iterations back (sequential_range iterations and statements of one
  iteration keep their order): the Neuron compiler's reordering and its finite buffers. One
  exception: the Tensor Engine in tiling mode. A matmul with a `pe_tile` (its tile_position and
  tile_size) holds only those cells of the PE array (squares of the smallest tile) until it ends, so
  matmuls on disjoint tiles run side by side; one without holds the whole array. Its busy time
  is its duration times the share of the array it holds.
- v2 shared ports: VectorE and GpSimdE instructions touching SBUF, and VectorE and ScalarE ones
  touching PSUM, never run at the same time (hw.access.shared_ports).
- PSUM accumulation: an nc_matmul that accumulates into a PSUM region follows the previous matmul
  into it (write-after-write) and does not pay the back-to-back penalty; other engines are not
  serialised by it, only the reader of the finished accumulation waits. A memset of a PSUM region
  whose next access is a matmul accumulating into it (nl.zeros then +=) is folded away, as the
  compiler starts the group with an overwriting matmul.
- Compiler fusion: an add-reduction along the free axis of exactly the output of the ScalarE
  activation just before it runs inside that activation (nisa.activation_reduce, MIN_II more), as
  the compiler fuses them; the VectorE reduction is not scheduled.
- Cost of a compute instruction, in its engine's cycles: the opcode's `CostFormula` (fast paths as
  documented: tensor_tensor's only on VectorE, for contiguous all-bf16 add/mul/sub or a PSUM input;
  tensor_reduce's for bf16 in and out), its streaming part doubled when an operand's innermost
  stride is 16 B or more, plus the fixed access-start cost (~60 cycles; 64 for TensorE), plus ~100
  static cycles when N is small or the instruction starts right as the instruction of its engine
  that produced its input ends. Cycles become ns at the engine's own clock.
- DMA. A transfer starts when its dependencies have finished and first pays the fixed cost
  (descriptors, semaphore, start: ~1300 ns on trn1) as latency; at most 16 transfers (the queues)
  are in that phase at once. Then its data moves at the shared bandwidth (the DMA engines'
  aggregate, capped by the core's HBM share when HBM is touched) derated by the efficiency of its
  payload, the contiguous run on the HBM side (saturating at 4 KiB, hw.dma.efficiency). Both
  resources are booked on fluid timelines of 200 ns buckets, so transfers overlap but never exceed the aggregate rate, and a transfer that becomes
  ready late (a store waiting for compute) cannot hold up earlier-ready ones. A transfer touching
  fewer partitions than there are DMA engines uses only that many engines. Queue lanes in the
  Perfetto trace are for display.
- Hoisting: a load of an HBM region the trace never writes that repeats an earlier load of
  exactly that region is served from SBUF (scheduled after the first load, no transfer) when its
  load statement's resident copies fit in `scheduler.hoist_sbuf_fraction` of SBUF: the compiler's
  loop-invariant code motion (shared/fidelity.md: "hoists loop-invariant loads").
- Repeated computations: a matmul, transpose, copy or tensor_tensor that repeats an earlier one
  of the same statement on operands holding the same values, all of them the kernel's inputs or
  what such computations made of them (value numbering over the trace), is served from the first
  (scheduled after it, no engine time): the compiler computes a loop-invariant value once
  (NKIBench lora reads its input once although its loads and transposes repeat per outer
  iteration). Its loads stay charged (the reloads of the kept value). Axon's own kernels get no
  such credit (`serve_repeats=False`).
- Launch: `hw.launch_ns` (NEFF start/teardown, fitted) is reported as `launch_ns` and in
  `end_to_end_ns` (what neuron-profile's total_time measures), not in `latency_ns`.
- Kernel bound: max(TensorE time at peak rate for the matmul FLOPs in the trace, compulsory HBM
  bytes (the union of HBM regions read plus the union written, by bounding ranges) / the core's
  HBM bandwidth). The HBM bandwidth (410 GB/s on trn1), not the lower DMA aggregate, matches the
  tutorial's ridge point (222 FLOP/B). It is the kernel's own traffic bound: a kernel that spills
  to HBM or runs extra matmuls gets a larger one, so optimize and the benchmark report measure
  kernels against the program's roofline (axon.search.roofline) instead. Vector/Scalar work is in
  neither.
Not modelled: PSUM bank limits on in-flight accumulation groups, buffer reuse limiting DMA
prefetch, instruction fetch and semaphore latency between engines, HBM page effects beyond the
per-descriptor efficiency.

Invariant: every estimate accounts for the whole trace: each instruction not folded is placed
exactly once and its matmul FLOPs charged, checked at the end of every estimate (`ModelError`
otherwise: an instruction left out would read as a saving). Cost is near-linear in the trace
(per instruction: a bisect over the distinct regions of the touched buffers, heap operations, an
amortised O(1) bandwidth booking and bounded eligibility checks; an instruction the loop rules
hold back waits parked on the instruction that blocks it instead of being checked again at every
event), and the same trace gives the same numbers.
"""
from __future__ import annotations

import json
import math
from bisect import bisect_left
from heapq import heappop, heappush
from dataclasses import dataclass, field, replace
from operator import attrgetter
from pathlib import Path
from typing import Callable

from axon.errors import ModelError
from axon.targets.trainium.hardware import (
    COSTS,
    CostBasis,
    FastPath,
    HardwareDescription,
    matmul_rate_class,
)
from axon.targets.trainium.trace import Engine, Instruction, Memory, Region, cyclic_gc_paused, rows_overlap

COMPUTE_ENGINES = (Engine.TENSOR, Engine.VECTOR, Engine.SCALAR, Engine.GPSIMD)
_HALF = ("bfloat16", "float16")
_BUCKET_NS = 200.0
_EPS = 1e-6  # ns: times closer than this are the same instant


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
    flops: int  # matmul FLOPs of the trace (2*M*K*N summed over its nc_matmul)
    scheduled_flops: int  # matmul FLOPs the schedule charged: equal to flops (checked)
    compulsory_hbm_bytes: int
    # The kernel's own bound (see the module docstring), from its trace: not the program's
    # roofline, which the search computes from the program (axon.search.roofline).
    kernel_bound_compute_ns: float
    kernel_bound_memory_ns: float
    instructions: int  # instructions of the trace the model accounts for (folded and fused excluded)
    scheduled: int  # instructions the schedule placed: equal to instructions (checked)
    folded: int  # PSUM zeroings folded into the matmul that follows them
    fused: int = 0  # reductions compiled into the activation before them (activation_reduce)
    hoisted: int = 0  # repeated loop-invariant loads served from SBUF (scheduled, no transfer)
    recomputed: int = 0  # repeated computations served by their first (scheduled, no engine time)
    uncosted_opcodes: tuple[str, ...] = ()
    schedule: Schedule | None = field(default=None, repr=False)
    # Fixed NEFF launch cost (hw.launch_ns): in what a hardware timer of the whole run measures
    # (neuron-profile total_time, nki.benchmark), not in latency_ns, the schedule's own span.
    launch_ns: float = 0.0
    # estimate(..., busy_of=f): (f(instruction), engine or "dma") -> busy ns, where f is not None
    busy_by: dict = field(default_factory=dict, repr=False)

    @property
    def end_to_end_ns(self) -> float:
        """Latency as a whole-NEFF measurement sees it: the schedule plus the fixed launch cost."""
        return self.latency_ns + self.launch_ns

    @property
    def kernel_bound_ns(self) -> float:
        return max(self.kernel_bound_compute_ns, self.kernel_bound_memory_ns)

    @property
    def kernel_bound_fraction(self) -> float:
        return self.kernel_bound_ns / self.latency_ns if self.latency_ns > 0 else 0.0


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


# A region's identity within its buffer, ordered by first byte (see _Accesses); attrgetter builds
# the tuple in C, and _dependencies makes one per region access.
_key = attrgetter("b_start", "b_stop", "p_start", "p_stop", "row_stride", "rows", "row_bytes")


def _fast(ins: Instruction, when: FastPath) -> bool:
    if when is FastPath.NONE:
        return False
    ex = ins.extra
    op = ex.get("op", "")
    out = ex.get("out_dtype", ins.dtype)
    if when is FastPath.PSUM_INPUT_OR_HALF_ARITH:
        if ins.engine is not Engine.VECTOR:
            return False  # the fast cases are the Vector Engine's [isa tensor_tensor]
        if any(r.memory is Memory.PSUM for r in ins.reads):
            return True
        return (out == "bfloat16" and all(d == "bfloat16" for d in ex.get("dtypes", (ins.dtype,)))
                and op in ("add", "subtract", "multiply") and ex.get("contiguous", True))
    if when is FastPath.HALF_ADD_MAX:
        return ins.dtype == "bfloat16" and out == "bfloat16" and op in ("add", "maximum")
    return False


def _perf_mode(ins: Instruction, hw: HardwareDescription) -> float:
    """The Vector Engine performance mode's speed-up of `ins` (hardware.VectorPerfMode)."""
    ex = ins.extra
    out = ex.get("out_dtype", ins.dtype)
    psum = any(r.memory is Memory.PSUM for r in ins.reads + ins.writes)
    # the mode's dtypes are 2-byte ones: contiguous output is a 2-byte innermost stride
    contiguous = ex.get("contiguous", True) and ex.get("out_stride_bytes", 2) == 2
    return hw.vector_speedup(ins.opcode, ins.dtype, out, psum, contiguous)


def compute_cycles(ins: Instruction, hw: HardwareDescription, back_to_back: bool = False) -> float:
    """Engine cycles of one compute instruction (formula + access start + static overhead)."""
    f = hw.cost(ins.opcode, ins.engine)
    size = ins.free_elems  # elements per partition, for the small-N overhead rule
    if f.basis is CostBasis.MATMUL:
        size = ins.extra.get("moving_free", ins.free_elems)
        n = max(min(64, ins.extra.get("stationary_free", 128)), size)
    elif f.basis is CostBasis.TRANSPOSE:
        n = max(ins.partitions, min(64, ins.free_elems))
    else:
        n = ins.free_elems
    stream = (f.fast_mult if _fast(ins, f.fast_when) else f.mult) * n
    if ins.engine is Engine.VECTOR:
        stream /= _perf_mode(ins, hw)
    acc = hw.access
    if max(ins.extra.get("free_stride_bytes", 0), ins.extra.get("out_stride_bytes", 0)) >= acc.wide_stride_bytes:
        stream *= acc.wide_stride_slowdown  # half the SBUF/PSUM bandwidth on a wide innermost stride
    cycles = max(float(f.floor), stream)
    if ins.dtype in ("float32", "fp32"):
        cycles *= f.fp32_mult
    if ins.extra.get("perf_mode") == "double_row":  # FP8 double-row mode, v3 only [isa]
        cycles /= 2
    return hw.issue_cycles(ins.engine, cycles + f.add, size, back_to_back)


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
    """Memsets of a PSUM region whose next access is an nc_matmul writing exactly that region
    (`acc = nl.zeros(..., buffer=nl.psum)` then `acc += matmul`, or a lazily initialised zeros
    tensor a matmul overwrites): the compiler starts the accumulation group with an overwriting
    matmul instead. A memset the kernel issued itself (nisa.memset, extra["explicit"]) is an ISA
    instruction the compiler emits as written: never folded. An access to another region of the same buffer (another block of a multi-block
    tensor) leaves the zeroings it does not overlap pending. Returns the memsets to skip (the
    matmul's own read of its PSUM region never creates a dependency, see estimate)."""
    pending: dict[int, dict[tuple, tuple[int, object]]] = {}  # PSUM buffer -> key -> (memset, region)
    skip: set[int] = set()
    for i, ins in enumerate(trace):
        if (ins.opcode == "memset" and len(ins.writes) == 1 and ins.writes[0].memory is Memory.PSUM
                and not ins.extra.get("explicit")):
            w = ins.writes[0]
            pending.setdefault(w.buffer, {})[_key(w)] = (i, w)
            continue
        if not pending:
            continue
        for r in ins.reads + ins.writes:
            if r.memory is not Memory.PSUM or r.buffer not in pending:
                continue
            regions = pending[r.buffer]
            k = _key(r)
            if ins.opcode == "nc_matmul" and k in regions and ins.writes and _key(ins.writes[0]) == k:
                skip.add(regions.pop(k)[0])
            elif k in regions:  # read (or partly written) first: that zeroing is really needed
                del regions[k]
            else:
                for kk in [kk for kk, (_, w) in regions.items() if w.overlaps(r)]:
                    del regions[kk]
            if not regions:
                del pending[r.buffer]
    return skip


def _fused_activation_reduces(trace: list[Instruction], skip: set[int]) -> tuple[list[Instruction], set[int]]:
    """An add-reduction along the free axis of exactly what the ScalarE activation just before it
    wrote (nl.square then nl.sum, exp then tensor_reduce(add)) is compiled into that activation,
    as nisa.activation_reduce: ScalarE reduces while it writes, costing MIN_II more [isa
    activation_reduce], and the VectorE reduction disappears. Returns the trace with each such
    activation turned into an activation_reduce that also writes the reduction's output, and the
    reductions to skip."""
    fused: set[int] = set()
    out = trace
    for i in range(1, len(trace)):
        red, act = trace[i], trace[i - 1]
        if (red.opcode != "tensor_reduce" or red.extra.get("op") != "add" or act.opcode != "activation"
                or act.engine is not Engine.SCALAR or i - 1 in skip or len(red.reads) != 1
                or len(red.writes) != 1 or len(act.writes) != 1 or red.partitions != act.partitions
                or _key(red.reads[0]) != _key(act.writes[0]) or red.reads[0].buffer != act.writes[0].buffer):
            continue
        w = red.writes[0]
        if w.b_stop - w.b_start > 8:  # not one value per partition: not a whole-free-axis reduction
            continue
        if out is trace:
            out = list(trace)
        out[i - 1] = replace(act, opcode="activation_reduce", writes=act.writes + red.writes)
        fused.add(i)
    return out, fused


def compiled_away(trace: list[Instruction]) -> tuple[list[Instruction], set[int]]:
    """The trace as the model schedules it, and the instructions compiled into another one (folded
    PSUM zeroings, reductions fused into their activation), which are never scheduled."""
    zeroings = _folded_psum_zeroing(trace)
    trace, fused = _fused_activation_reduces(trace, zeroings)
    return trace, zeroings | fused


def _space_waits(trace: list[Instruction]) -> dict[int, tuple[int, ...]]:
    """Per instruction, the trace indices of its `extra["space_after"]` (simulator/liveness.py
    space_reuse: the last users of the SBUF space it takes); instructions not in this trace (a
    trace cut by loop sampling) are left out."""
    pos = None
    out = {}
    for i, ins in enumerate(trace):
        users = ins.extra.get("space_after")
        if not users:
            continue
        if pos is None:
            pos = {id(x): k for k, x in enumerate(trace)}
        ks = tuple(pos[id(x)] for x in users.instructions if id(x) in pos)
        if ks:
            out[i] = ks
    return out


def _hoisted_loads(trace: list[Instruction], skip: set[int], hw: HardwareDescription,
                   cut_loops: dict | None = None) -> dict[int, int]:
    """Loads the compiler hoists (hw.scheduler.hoist_sbuf_fraction): a DMA from an HBM region
    that the trace never writes, of exactly a region loaded before. Hoisting is per load statement
    (source line): in first-load order, a statement's repeatedly loaded regions are kept resident
    if all of them fit in what is left of the SBUF share (else none: the compiler hoists a load
    out of its loop or leaves it); every later load of a resident region is served from SBUF.
    `cut_loops` (a loop-sampled trace): loop id -> (loop line, full / run iterations); a statement
    whose regions differ between iterations of a cut loop would hold that many times more.
    Returns {repeat: first load}."""
    written = {w.buffer for ins in trace for w in ins.writes if w.memory is Memory.HBM}
    first: dict[tuple, int] = {}
    repeats: dict[tuple, list[int]] = {}
    for i, ins in enumerate(trace):
        if (i in skip or ins.engine is not Engine.DMA or len(ins.reads) != 1 or len(ins.writes) != 1
                or ins.reads[0].memory is not Memory.HBM or ins.writes[0].memory is not Memory.SBUF
                or ins.reads[0].buffer in written):
            continue
        r = ins.reads[0]
        k = (r.buffer, _key(r), ins.dma_bytes)
        if k in first:
            repeats.setdefault(k, []).append(i)
        else:
            first[k] = i
    by_line: dict[int, list[tuple]] = {}
    for k in sorted(repeats, key=first.__getitem__):
        by_line.setdefault(trace[first[k]].line, []).append(k)
    budget = hw.scheduler.hoist_sbuf_fraction * hw.memory.sbuf_bytes_per_partition
    out: dict[int, int] = {}
    used = 0.0
    for keys in by_line.values():
        w = [trace[first[k]].writes[0] for k in keys]
        pp = sum(trace[first[k]].dma_bytes / max(r.p_stop - r.p_start, 1) for k, r in zip(keys, w))
        if cut_loops:
            pp *= _uncut_share(trace, [first[k] for k in keys], cut_loops)
        if used + pp > budget:
            continue
        used += pp
        for k in keys:
            for i in repeats[k]:
                out[i] = first[k]
    return out


# Compute instructions whose result is fixed by the opcode, the statement, the operands' values and
# the layout: an instruction whose immediates the trace does not record (activation's scale and
# bias, tensor_scalar's operands, memset's value, a scan's initial value) is never taken as a repeat.
_RECOMPUTABLE = frozenset(("nc_matmul", "nc_transpose", "tensor_copy", "tensor_tensor"))
_NOT_SEMANTIC = frozenset(("loops", "space_after"))


def _shape(r: Region) -> tuple:
    """A region's layout without its position: what two copies of one value share."""
    return (r.memory, r.p_stop - r.p_start, r.b_stop - r.b_start, r.row_stride, r.rows, r.row_bytes)


def _repeated_computations(trace: list[Instruction], skip: set[int]) -> dict[int, int]:
    """Computations on the kernel's inputs that repeat an earlier one exactly: the same statement
    (kernel line) and opcode on operands holding the same values, where every operand is an input
    region or what such computations made of it. Value numbering over the trace: a transfer gives
    its destination the value of its source (an input region read from HBM: that region), a
    region keeps the value of its last write until an overlapping write, and a slice of a value is
    that value, where and how it is sliced. The compiler computes such a value once and keeps it
    (NKIBench lora reads its input once although its loads and TensorE transposes repeat in each
    of 12 outer iterations: shared/fidelity.md's HBM-read column); the repeat is served from the
    first (scheduled after it, no engine time). What is computed from other values is not
    deduplicated (add_rmsnorm_matmul's profile shows ScalarE evacuating every transpose of its
    normalised rows, repeated per column block). Returns {repeat: first}."""
    written_hbm = {w.buffer for ins in trace for w in ins.writes if w.memory is Memory.HBM}
    regions: dict[int, _Accesses] = {}
    values: dict[int, dict] = {}  # buffer -> region key -> value number
    number: dict[tuple, int] = {}  # what an input-derived value is -> its number (>= 0), hash-consed
    others = iter(range(-1, -(1 << 62), -1))  # numbers of every other value: each its own
    first: dict[tuple, int] = {}
    out: dict[int, int] = {}

    def derived(what: tuple) -> int:
        return number.setdefault(what, len(number))

    def value_of(r: Region) -> int | None:
        k = _key(r)
        vals = values.get(r.buffer)
        if vals is None:
            return derived(("input", r.buffer, k)) if r.memory is Memory.HBM and r.buffer not in written_hbm else None
        v = vals.get(k)
        if v is not None:
            return v
        # a part of one value (a slice of a loaded tile): that value, where, and the part's layout
        over = regions[r.buffer].overlapping(k)
        if len(over) != 1 or k[5] > 1 or over[0][5] > 1:
            return None
        o = over[0]
        whole = vals.get(o, -1)
        if whole < 0 or not (o[0] <= k[0] and k[1] <= o[1] and o[2] <= k[2] and k[3] <= o[3]):
            return None
        return derived(("part", whole, k[0] - o[0], k[2] - o[2], _shape(r)))

    def write(r: Region, v: int) -> None:
        k = _key(r)
        acc = regions.get(r.buffer)
        if acc is None:
            acc, values[r.buffer] = regions.setdefault(r.buffer, _Accesses()), {}
        vals = values[r.buffer]
        for o in acc.overlapping(k):
            vals.pop(o, None)
        acc.add(k)
        vals[k] = v

    for i, ins in enumerate(trace):
        if i in skip:  # folded or fused away, but what it writes is not what was there before
            for w in ins.writes:
                write(w, next(others))
            continue
        operands = [value_of(r) for r in ins.reads]
        of_inputs = bool(operands) and all(v is not None and v >= 0 for v in operands)
        if ins.engine is Engine.DMA:
            copied = len(ins.reads) == 1 and len(ins.writes) == 1 and of_inputs
            for w in ins.writes:
                write(w, derived(("dma", operands[0], _shape(w))) if copied else next(others))
            continue
        sig = None
        if ins.opcode in _RECOMPUTABLE and of_inputs and not ins.extra.get("broadcast"):
            extra = tuple(sorted((k, v) for k, v in ins.extra.items() if k not in _NOT_SEMANTIC))
            sig = (ins.line, ins.opcode, ins.engine, ins.partitions, ins.free_elems, ins.dtype, extra,
                   tuple(zip(operands, map(_shape, ins.reads))), tuple(map(_shape, ins.writes)))
            try:
                hash(sig)
            except TypeError:  # an unhashable fact in `extra`: never taken for a repeat
                sig = None
        if sig is None:
            for w in ins.writes:
                write(w, next(others))
            continue
        if sig in first:
            out[i] = first[sig]
        else:
            first[sig] = i
        for n, w in enumerate(ins.writes):
            write(w, derived(("made", sig, n)))
    return out


def _uncut_share(trace: list[Instruction], loads: list[int], cut_loops: dict) -> float:
    """How many times more distinct regions the uncut kernel loads than these first `loads`: the
    product of the scales of the cut loops in whose iterations they differ."""
    seen: dict[int, set] = {}
    for i in loads:
        for loop_id, it, _ in trace[i].extra.get("loops", ()):
            if loop_id in cut_loops:
                seen.setdefault(loop_id, set()).add(it)
    scales = {cut_loops[lid] for lid, its in seen.items() if len(its) > 1}  # (line, scale), once per line
    return math.prod(scale for _, scale in scales)


class _Accesses:
    """The distinct regions of one buffer accessed so far, for overlap queries.

    Keys are (b_start, b_stop, p_start, p_stop, row_stride, rows, row_bytes); a query walks back
    from the first key starting at or after the query's end and stops once keys start too early to
    reach it (max_len)."""

    __slots__ = ("keys", "known", "is_sorted", "max_len")

    def __init__(self):
        self.keys: list[tuple] = []
        self.known: set = set()
        self.is_sorted = True
        self.max_len = 0

    def add(self, key: tuple) -> None:
        if key not in self.known:
            self.known.add(key)
            if self.keys and key < self.keys[-1]:
                self.is_sorted = False
            self.keys.append(key)
            if key[1] - key[0] > self.max_len:
                self.max_len = key[1] - key[0]

    def overlapping(self, key: tuple) -> list:
        b0, b1, p0, p1 = key[:4]
        if not self.is_sorted:
            self.keys.sort()
            self.is_sorted = True
        keys = self.keys
        i = bisect_left(keys, (b1,))
        reach = b0 - self.max_len
        out = []
        while i > 0:
            i -= 1
            k = keys[i]
            if k[0] <= reach:
                break
            if k[1] > b0 and k[2] < p1 and p0 < k[3] and (
                    (k[5] <= 1 and key[5] <= 1)
                    or rows_overlap(k[0], k[1], k[4], k[5], k[6], b0, b1, key[4], key[5], key[6])):
                out.append(k)
        return out


def _dependencies(trace: list[Instruction], skip: set[int]) -> tuple[list, list]:
    """Predecessors of each instruction through overlapping regions, in program order:
    read-after-write (the last writer of each overlapping region), write-after-write and
    write-after-read (the readers since that region's last write). Returns (all predecessors,
    read-after-write predecessors), as tuples of trace indices."""
    written: dict[int, _Accesses] = {}  # buffer -> regions written so far
    read: dict[int, _Accesses] = {}  # buffer -> regions read so far
    writer: dict[int, dict] = {}  # buffer -> region key -> its last writer
    readers: dict[int, dict] = {}  # buffer -> region key -> its readers since its last write
    preds: list = [()] * len(trace)
    raws: list = [()] * len(trace)
    for i, ins in enumerate(trace):
        if i in skip:
            continue
        raw: set[int] = set()
        reads = [(r.buffer, _key(r)) for r in ins.reads]
        writes = [(w.buffer, _key(w)) for w in ins.writes]
        accumulated = writes if ins.opcode == "nc_matmul" else ()
        for b, k in reads:
            acc = written.get(b)
            if acc is None:
                continue
            if (b, k) in accumulated:
                continue  # PSUM accumulation: ordered after the previous matmul by write-after-write
            ws = writer[b]
            for o in acc.overlapping(k):
                raw.add(ws[o])
        p = set(raw)
        for b, k in writes:
            acc = written.get(b)
            if acc is not None:
                ws = writer[b]
                for o in acc.overlapping(k):
                    p.add(ws[o])
            acc = read.get(b)
            if acc is not None:
                rs = readers[b]
                for o in acc.overlapping(k):
                    p.update(rs[o])
        p.discard(i)
        raw.discard(i)
        preds[i], raws[i] = tuple(p), tuple(raw)
        for b, k in reads:
            acc = read.get(b)
            if acc is None:
                acc = read[b] = _Accesses()
                readers[b] = {}
            acc.add(k)
            readers[b].setdefault(k, []).append(i)
        for b, k in writes:
            acc = written.get(b)
            if acc is None:
                acc = written[b] = _Accesses()
                writer[b] = {}
            acc.add(k)
            writer[b][k] = i
            rs = readers.get(b)
            if rs is not None and k in rs:
                rs[k] = []  # later writers are ordered after those readers through this write
    return preds, raws


def _may_overtake(later: tuple, earlier: tuple, lookahead: int) -> bool:
    """Whether an instruction with loop path `later` may start before an unstarted, earlier-issued
    one of the same engine with path `earlier` (see SchedulerRules): only if they first differ in
    the iteration of one affine loop, at most `lookahead` iterations apart."""
    return _overtake_level(later, earlier, lookahead) >= 0


def _overtake_level(later: tuple, earlier: tuple, lookahead: int) -> int:
    """The loop level where `later` and `earlier` first differ if `later` may overtake (see
    _may_overtake), else -1. Any `earlier` path with the same first level + 1 elements gives the
    same answer."""
    level = 0
    for a, b in zip(later, earlier):
        if a is b or a == b:
            level += 1
            continue
        return level if a[0] == b[0] and not a[2] and 0 < a[1] - b[1] <= lookahead else -1
    return -1


_ELIGIBLE, _SCAN_LIMIT = -1, -2  # results of _Engine.walk besides a blocker's position


class _Engine:
    """One compute engine's stream: its instructions in program order, which have started, the
    dependency-ready ones waiting to be looked at (a heap of trace indices) and the ready ones
    parked on an unstarted earlier instruction they may not overtake.

    Parking keeps the scheduler near-linear: a refused instruction is looked at again only once
    its blocker has started, instead of at every event. It changes nothing in the schedule: while
    the blocker is unstarted, looking at the parked instruction would refuse it again without any
    change of state, and `parked_before` keeps it counted in the engine's candidate window."""

    __slots__ = ("order", "pos", "paths", "nxt", "checked", "ready", "free", "last",
                 "parked", "n_parked", "counts")

    def __init__(self):
        self.order: list[int] = []  # trace indices, program order
        self.pos: dict[int, int] = {}
        self.paths: list[tuple] = []  # loop path of each position
        self.nxt: list[int] = []  # union-find: first unstarted position at or after p
        # per position: up to where every earlier unstarted instruction may be overtaken by it
        self.checked: list[int] = []
        self.ready: list[int] = []
        self.free = 0.0
        self.last = -1  # the instruction that ran last
        self.parked: dict[int, list[int]] = {}  # blocker position -> parked trace indices
        self.n_parked = 0
        self.counts: list[int] = []  # Fenwick tree: parked instructions per position

    def add(self, i: int, path: tuple) -> None:
        self.pos[i] = len(self.order)
        self.order.append(i)
        self.paths.append(path)

    def close(self) -> None:
        n = len(self.order)
        self.nxt = list(range(n + 1))
        self.checked = [0] * n
        self.counts = [0] * (n + 1)

    def first_unstarted(self, p: int) -> int:
        nxt = self.nxt
        root = p
        while nxt[root] != root:
            root = nxt[root]
        while nxt[p] != root:
            nxt[p], p = root, nxt[p]
        return root

    def walk(self, i: int, scan: int, lookahead: int) -> int:
        """Whether i may go ahead of every unstarted, earlier-issued instruction of the engine,
        checked incrementally (instructions only ever start, so a checked prefix stays checked)
        and at most `scan` of them per call. Returns _ELIGIBLE, _SCAN_LIMIT (more to check next
        time) or the position of the first one i may not overtake."""
        paths, checked, nxt = self.paths, self.checked, self.nxt
        target = self.pos[i]
        path = paths[target]
        p, looked = self.first_unstarted(checked[target]), 0
        same = None  # the path prefix through the level where i differs from the last one overtaken
        while p < target:
            earlier = paths[p]
            if same is None or earlier[:len(same)] != same:  # else: that same level, same answer
                level = _overtake_level(path, earlier, lookahead)
                if level < 0:
                    checked[target] = p
                    return p
                same = earlier[:level + 1]
            looked += 1
            if looked > scan:
                checked[target] = p
                return _SCAN_LIMIT
            p += 1
            if nxt[p] != p:
                p = self.first_unstarted(p)
        checked[target] = p
        return _ELIGIBLE

    def park(self, i: int, blocker: int) -> None:
        self.parked.setdefault(blocker, []).append(i)
        self.n_parked += 1
        self._count(self.pos[i], 1)

    def parked_before(self, p: int) -> int:
        """How many parked instructions precede position p."""
        counts, total = self.counts, 0
        while p > 0:
            total += counts[p]
            p &= p - 1
        return total

    def _count(self, p: int, delta: int) -> None:
        counts = self.counts
        p += 1
        while p < len(counts):
            counts[p] += delta
            p += p & -p

    def start(self, i: int, lookahead: int) -> None:
        """Mark i started; what was parked on it moves to the next unstarted instruction when it
        still may not overtake that one (its `checked` need not move: everything in between has
        started), else waits in the heap to be looked at."""
        p = self.pos[i]
        self.nxt[p] = p + 1
        waiters = self.parked.pop(p, None)
        if not waiters:
            return
        q = self.first_unstarted(p)
        q_path = self.paths[q] if q < len(self.order) else ()
        for c in waiters:
            c_pos = self.pos[c]
            if q < c_pos and not _may_overtake(self.paths[c_pos], q_path, lookahead):
                self.parked.setdefault(q, []).append(c)
            else:
                self.n_parked -= 1
                self._count(c_pos, -1)
                heappush(self.ready, c)


def _pe_grid(hw: HardwareDescription) -> tuple[int, int]:
    """(cell side, cells per side) of the PE array (pmax x pmax PEs) cut into squares of its
    smallest tile side: the units tiling mode hands out."""
    cell = min(hw.tiles.pe_tile_sizes)
    return cell, hw.tiles.pmax // cell


def _pe_cells(ins: Instruction, hw: HardwareDescription) -> tuple:
    """The PE-array cells a Tensor Engine instruction holds: its tile's in tiling mode
    (extra["pe_tile"] = (start row, start column, rows, columns)), else all of them."""
    cell, side = _pe_grid(hw)
    r0, c0, rows, cols = (v // cell for v in ins.extra.get("pe_tile", (0, 0, cell * side, cell * side)))
    return tuple(r * side + c for r in range(r0, r0 + rows) for c in range(c0, c0 + cols))


def _choose(eng: _Engine, now: float, needs: list, port_free: list, scan: int, lookahead: int) -> int | None:
    """The instruction a free engine starts now: the first waiting one, in program order, whose
    shared ports are free and that may go ahead of the engine's unstarted earlier ones, looking at
    no more than the first `scan` + 1 waiting ones (parked ones count: they are refused)."""
    ready, held, chosen = eng.ready, [], None
    while ready:
        i = ready[0]
        # i's rank among the waiting ones: those held in this call plus the parked ones before it
        # (counted only when there could be enough of them to close the window)
        if len(held) + eng.n_parked > scan and len(held) + eng.parked_before(eng.pos[i]) > scan:
            break
        heappop(ready)
        if needs[i] and any(port_free[q] > now for q in needs[i]):
            held.append(i)  # port use changes with time: looked at again at the next event
            continue
        r = eng.walk(i, scan, lookahead)
        if r == _ELIGIBLE:
            chosen = i
            break
        if r >= 0:
            eng.park(i, r)
        else:
            held.append(i)
    for i in held:
        heappush(ready, i)
    return chosen


def unread_results(trace: list[Instruction]) -> list[Instruction]:
    """The instructions whose on-chip results no later instruction reads (a load never used, a
    copy whose tile is overwritten first): work the kernel could leave out, which the model still
    times. A matmul is read by the next one accumulating into its region, and a PSUM zeroing a
    matmul folds (the model drops it) is not listed."""
    zeroings = _folded_psum_zeroing(trace)
    preds, raws = _dependencies(trace, zeroings)
    read = {j for r in raws for j in r}
    for j, ins in enumerate(trace):
        if ins.opcode == "nc_matmul":  # an accumulation group is read where its last matmul is
            read.update(i for i in preds[j] if trace[i].opcode == "nc_matmul")
    return [ins for i, ins in enumerate(trace) if i not in read and i not in zeroings and ins.writes
            and all(w.memory is not Memory.HBM for w in ins.writes)]


def estimate(trace: list[Instruction], hw: HardwareDescription, *, keep_schedule: bool = False,
             cut_loops: dict | None = None, busy_of: Callable[[Instruction], object] | None = None,
             serve_repeats: bool = True) -> Estimate:
    """The schedule of `trace` on `hw`; `cut_loops` for a loop-sampled trace (sampled_timing.py),
    as `_hoisted_loads` reads it; `busy_of` names the share of busy time an instruction counts
    towards (`Estimate.busy_by`; None: none). `serve_repeats=False` charges every repeated
    computation in full (Axon's own kernels: work a kernel issues is work it costs, not work it
    counts on the compiler to remove)."""
    with cyclic_gc_paused():
        return _estimate(trace, hw, keep_schedule, cut_loops, busy_of, serve_repeats)


def _estimate(trace: list[Instruction], hw: HardwareDescription, keep_schedule: bool,
              cut_loops: dict | None = None, busy_of: Callable | None = None,
              serve_repeats: bool = True) -> Estimate:
    dma = hw.dma
    lookahead = hw.scheduler.affine_lookahead
    scan = hw.scheduler.candidate_limit
    busy = {e.value: 0.0 for e in COMPUTE_ENGINES}
    busy["dma"] = 0.0
    busy_by: dict = {}

    def charge(i: int, engine: str, ns: float) -> None:
        busy[engine] += ns
        key = busy_of(trace[i]) if busy_of else None
        if key is not None:
            busy_by[key, engine] = busy_by.get((key, engine), 0.0) + ns

    ns_per_cycle = {e: 1.0 / hw.engines[e].clock_ghz for e in COMPUTE_ENGINES}
    lanes = [0.0] * dma.queues
    issue = _Bandwidth()
    bandwidth = _Bandwidth()
    hbm_bw = min(dma.bytes_per_ns, hw.hbm_bytes_per_ns)
    rows: list[tuple[int, float, float, str, int, int]] = []
    hbm_read: dict[int, list[tuple[int, int]]] = {}
    hbm_written: dict[int, list[tuple[int, int]]] = {}
    flops_ns = 0.0
    flops = charged_flops = placed = hbm_bytes = dma_bytes = 0
    uncosted: set[str] = set()
    latency = 0.0
    n_tracks = len(COMPUTE_ENGINES)

    zeroings = _folded_psum_zeroing(trace)
    space = _space_waits(trace)
    trace, fused = _fused_activation_reduces(trace, zeroings)
    folded = zeroings | fused
    preds, raws = _dependencies(trace, folded)
    hoisted = _hoisted_loads(trace, folded, hw, cut_loops)
    for i, j in hoisted.items():  # served from the resident copy: after the load that made it
        if j not in preds[i]:
            preds[i] = preds[i] + (j,)
    for i, users in space.items():  # SBUF space taken over from its previous owner
        if i not in folded:
            preds[i] = preds[i] + tuple(j for j in users if j not in folded and j not in preds[i])
    repeated = _repeated_computations(trace, folded) if serve_repeats else {}
    for i, j in repeated.items():  # the value is the first computation's: ready when it is
        preds[i] = (j,)
    n = len(trace)
    waiting = [len(p) for p in preds]  # unfinished predecessors
    succs: list[list[int]] = [[] for _ in range(n)]
    for i, p in enumerate(preds):
        for j in p:
            succs[j].append(i)
    engines = {e: _Engine() for e in COMPUTE_ENGINES}
    # shared SBUF/PSUM ports (v2), then the PE array's cells where the trace uses its tiling mode:
    # resource index -> time free; per instruction the resources it holds
    n_ports = len(hw.access.shared_ports)
    tiled = any("pe_tile" in ins.extra for ins in trace)
    n_cells = _pe_grid(hw)[1] ** 2
    port_free = [0.0] * (n_ports + (n_cells if tiled else 0))
    needs: list = [()] * n
    for i, ins in enumerate(trace):
        if i in folded or ins.engine is Engine.DMA or i in repeated:
            continue
        engines[ins.engine].add(i, ins.extra.get("loops", ()))
        needs[i] = tuple(q for q, (mem, users) in enumerate(hw.access.shared_ports)
                         if ins.engine in users and any(r.memory.value == mem for r in ins.reads + ins.writes))
        if tiled and ins.engine is Engine.TENSOR:
            needs[i] += tuple(n_ports + c for c in _pe_cells(ins, hw))
    for eng in engines.values():
        eng.close()
    ready_at = [0.0] * n
    end_at = [0.0] * n
    events: list[tuple[float, int]] = []  # (time, trace index) of instruction completions

    def run_dma(i: int, start: float) -> None:
        nonlocal dma_bytes
        ins = trace[i]
        # Fixed cost: a latency for this transfer, and a throughput limit of `queues` transfers in
        # their fixed phase at once (booked fluidly, so late transfers never block earlier-ready ones).
        issued = max(start + dma.fixed_ns, issue.book(start, dma.fixed_ns / dma.queues))
        per_partition = ins.dma_bytes / max(ins.partitions, 1)
        # payload: the HBM-side contiguous run, which may span partitions (a [128, 64] fp32 tile of
        # contiguous rows is one 32 KiB run): NKIBench bmm moves 1153 MB in 4.2 ms of schedule, at
        # the engines' peak, although its loads put 256 B on each partition
        contiguous = ins.extra.get("chunk_bytes") or per_partition
        eff = dma.efficiency(contiguous)
        if ins.extra.get("transpose"):
            eff *= dma.transpose_efficiency if ins.hbm_bytes else dma.onchip_transpose_efficiency
        bw = hbm_bw if ins.hbm_bytes else dma.bytes_per_ns
        data_ns = ins.dma_bytes / (bw * eff)
        end = bandwidth.book(issued, data_ns)
        engines_used = min(dma.engines, max(ins.partitions, 1))
        if engines_used < dma.engines:  # few partitions: only that many engines move data
            end = max(end, issued + data_ns * dma.engines / engines_used)
        charge(i, "dma", data_ns)
        dma_bytes += ins.dma_bytes
        # Display lane only: the first queue lane free at `start`, else the earliest-free one.
        q = next((k for k, t in enumerate(lanes) if t <= start), None)
        if q is None:
            q = min(range(len(lanes)), key=lanes.__getitem__)
        lanes[q] = end
        finish(i, start, end, n_tracks + q)

    def finish(i: int, start: float, end: float, track: int) -> None:
        nonlocal latency, placed
        placed += 1
        end_at[i] = end
        if end > latency:
            latency = end
        heappush(events, (end, i))
        if keep_schedule:
            rows.append((track, start, end, trace[i].opcode, trace[i].line, i))

    def became_ready(i: int, t: float) -> None:
        ready_at[i] = t
        if i in hoisted:
            finish(i, t, t, n_tracks)  # no transfer: the data is resident since the first load
        elif i in repeated:
            finish(i, t, t, COMPUTE_ENGINES.index(trace[i].engine))  # computed once, by its first
        elif trace[i].engine is Engine.DMA:
            heappush(dma_ready, i)
        else:
            heappush(engines[trace[i].engine].ready, i)

    def start_transfers(now: float) -> None:
        # each transfer holds one of the queues; a free queue takes the ready transfer that comes
        # first in program order (the order the compiler issued them in)
        nonlocal in_flight
        while in_flight < dma.queues and dma_ready:
            i = heappop(dma_ready)
            in_flight += 1
            on_queue[i] = True
            run_dma(i, now)

    def dispatch(now: float) -> None:
        nonlocal charged_flops
        for e, eng in engines.items():
            # an engine takes one instruction at a time, except the PE array in tiling mode: a
            # matmul on a tile of it leaves the rest to others [isa nc_matmul, "Tiling mode"]
            while eng.free <= now and eng.ready:
                chosen = _choose(eng, now, needs, port_free, scan, lookahead)
                if chosen is None:
                    break
                i, ins = chosen, trace[chosen]
                if ins.opcode not in COSTS:
                    uncosted.add(ins.opcode)
                # static overhead when it reads what its engine finished just before [isa]
                b2b = (ins.opcode != "nc_matmul" and eng.last in raws[i]
                       and abs(end_at[eng.last] - now) < _EPS)
                dur = compute_cycles(ins, hw, b2b) * ns_per_cycle[e]
                end = now + dur
                share = len(_pe_cells(ins, hw)) / n_cells if "pe_tile" in ins.extra else 1.0
                eng.free = end if share == 1.0 else now  # its cells are held until `end` (needs)
                eng.last = i
                eng.start(i, lookahead)
                for q in needs[i]:
                    port_free[q] = end
                charge(i, e.value, dur * share)
                charged_flops += matmul_flops(ins)
                finish(i, now, end, COMPUTE_ENGINES.index(e))
                if share == 1.0:
                    break

    dma_ready: list[int] = []
    in_flight = 0
    on_queue = [False] * n
    for i in range(n):
        if i not in folded and waiting[i] == 0:
            became_ready(i, 0.0)
    start_transfers(0.0)
    dispatch(0.0)
    while events:
        # Everything finishing within _EPS of the first completion is one instant, dispatched once
        # at the LAST of those times: at the first, an engine whose instruction ends a rounding
        # error later would still look busy, its completion already consumed, and no later event
        # would ever offer it work again (instructions silently left unscheduled).
        done = [heappop(events)]
        while events and events[0][0] <= done[0][0] + _EPS:
            done.append(heappop(events))
        now = done[-1][0]
        for _, j in done:
            if on_queue[j]:
                in_flight -= 1
            for s in succs[j]:
                waiting[s] -= 1
                if waiting[s] == 0:
                    became_ready(s, now)
        start_transfers(now)
        dispatch(now)

    for i, ins in enumerate(trace):
        if i in folded or i in repeated:
            continue
        if ins.opcode == "nc_matmul":
            f = matmul_flops(ins)
            flops += f
            flops_ns += f / hw.tensor_peak_flops[matmul_rate_class(ins.dtype)] * 1e9
        if i in hoisted:
            continue
        for r in ins.reads:
            if r.memory is Memory.HBM:
                hbm_read.setdefault(r.buffer, []).append((r.b_start, r.b_stop))
        for w in ins.writes:
            if w.memory is Memory.HBM:
                hbm_written.setdefault(w.buffer, []).append((w.b_start, w.b_stop))
        hbm_bytes += ins.hbm_bytes
    _check_accounted(trace, folded, end_at, placed, flops, charged_flops)
    if keep_schedule:
        rows.sort(key=lambda row: row[5])  # program order, as before

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
        scheduled_flops=charged_flops,
        compulsory_hbm_bytes=compulsory,
        kernel_bound_compute_ns=flops_ns,
        kernel_bound_memory_ns=compulsory / hw.hbm_bytes_per_ns,
        instructions=len(trace) - len(folded),
        scheduled=placed,
        folded=len(zeroings),
        fused=len(fused),
        hoisted=len(hoisted),
        recomputed=len(repeated),
        uncosted_opcodes=tuple(sorted(uncosted)),
        schedule=schedule,
        launch_ns=hw.launch_ns,
        busy_by=busy_by,
    )


def _check_accounted(trace: list[Instruction], folded: set[int], end_at: list[float], placed: int,
                     flops: int, charged_flops: int) -> None:
    """Every unfolded instruction of the trace was placed and charged once, on every estimate: an
    instruction the scheduler failed to place would otherwise be a silent saving."""
    expected = len(trace) - len(folded)
    if placed == expected and charged_flops == flops:
        return
    # every placed instruction ends after time 0 (each pays at least its fixed start cost)
    missing = next((i for i in range(len(trace)) if i not in folded and end_at[i] == 0.0), None)
    where = (f"; first unplaced: #{missing} {trace[missing].opcode} on {trace[missing].engine.value} "
             f"(line {trace[missing].line})" if missing is not None else "")
    raise ModelError(f"performance model placed {placed} of {expected} instructions and charged "
                     f"{charged_flops} of {flops} matmul FLOPs{where}: a model bug, not a saving")


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
    # json.dumps, not json.dump: only the one-shot form uses the C encoder (a 70B kernel's trace
    # of millions of events took seconds in the pure-Python one)
    Path(path).write_text(json.dumps({"traceEvents": events, "displayTimeUnit": "ns"}, separators=(",", ":")))
