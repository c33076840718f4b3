"""On-chip capacity by liveness, and spilling, over a finished trace.

The NKI compiler allocates SBUF and PSUM by liveness, per block of a multi-block tensor
(`nl.ndarray((nblocks, nl.par_dim(128), F), ...)`: each block is its own allocation), and spills
what does not fit. The simulator therefore does not charge capacity while the kernel runs (it only
refuses, before allocating, a block that could never fit on its own): after the run, `account`
reads the trace.

- The unit of allocation is one block of an on-chip buffer (the whole buffer when it has no block
  dimensions). A unit is live from its first access to its last access, in program (trace) order,
  so a tile held by a Python name but never used again, a whole-kernel tensor whose blocks are each
  used in one iteration, and a temporary of an iteration are not live past their last use. A
  constant written before the first real use (`nl.zeros(...)`, a memset or iota: what
  `lazy_initialization` means) does not start the unit's life; its first real use does.
- SBUF bytes per partition add up over live units; PSUM is charged in whole 2 KiB banks per
  buffer (the live units of one buffer packed: ceil(live units x unit bytes / bank) banks).
- `strict=True` (Axon's own kernels, where a spill is a defect): more live bytes than the memory
  holds raise a KernelError naming the kernel line of the first instruction where that happens.
- `strict=False` (kernels written by users, as the real toolchain compiles them): the live units
  whose next use lies furthest ahead (Belady's choice: the compiler allocates the whole kernel
  statically, so it knows every next use), among those the current instruction does not touch,
  are spilled to HBM, one DMA each (a store of the unit before the instruction that needs the space; none if its HBM copy
  is still current), and reloaded by a DMA before their next use (none when that use overwrites
  the whole unit). The DMAs are ordinary trace instructions (`extra["spill"]`), so the
  performance model times them; a reload depends on its store through the HBM spill slot. Not
  modelled: spilling PSUM to SBUF instead of HBM.
- Space reuse (`space_reuse`, both modes): each instruction that starts a unit's life in SBUF
  carries `extra["space_after"]`, the last users of the space it takes, which the performance
  model makes it wait for: the reuse of a dead tile's (or a spilled victim's) addresses.

Invariant: the instructions come back in order, each original one kept (with `space_after` added
where it takes space); with spills only spill DMAs are inserted.
"""
from __future__ import annotations

import heapq
from bisect import bisect_right
from collections import deque
from dataclasses import dataclass, replace

from axon.errors import KernelError
from axon.targets.trainium.trace import Engine, Instruction, Memory, Region, Waits

_CONSTANT = frozenset(("memset", "iota"))
_SHIFT = 32  # unit key = buffer id << _SHIFT | block index


@dataclass(frozen=True)
class OnChip:
    """What the accounting needs to know of one on-chip buffer."""

    memory: Memory
    unit: int  # bytes per partition of one block (the allocation unit)
    partitions: int
    dtype: str
    itemsize: int


@dataclass
class Accounting:
    trace: list[Instruction]
    sbuf_peak: int = 0  # peak live SBUF bytes per partition (before spilling)
    psum_peak: int = 0  # peak live PSUM bytes per partition, in whole banks (before spilling)
    spill_bytes: int = 0  # bytes stored to HBM by spills
    reload_bytes: int = 0  # bytes loaded back from HBM
    spills: int = 0  # spill stores
    reloads: int = 0  # spill reloads


def _units(ins: Instruction, onchip: dict):
    """(unit key, OnChip, read, write, region) of every on-chip unit `ins` touches."""
    out = {}
    for regs, w in ((ins.reads, False), (ins.writes, True)):
        for r in regs:
            m = onchip.get(r.buffer)
            if m is None or r.b_stop <= r.b_start:
                continue
            base = r.buffer << _SHIFT
            unit = m.unit
            for k in range(r.b_start // unit, (r.b_stop - 1) // unit + 1):
                u = base | k
                e = out.get(u)
                if e is None:
                    out[u] = [m, not w, w, r if w else None]
                elif w:
                    e[2] = True
                    e[3] = r
                else:
                    e[1] = True
    return out


def _psum_cost(n: int, unit: int, bank: int) -> int:
    return -(-n * unit // bank) * bank


def account(trace: list[Instruction], onchip: dict, hw, *, strict: bool, path: str,
            new_buffer_id) -> Accounting:
    """Capacity of `trace` by liveness (see the module docstring); `new_buffer_id()` gives the
    HBM spill slots their buffer ids."""
    if not onchip:
        return Accounting(trace)
    first: dict[int, int] = {}
    last: dict[int, int] = {}
    early: dict[int, int] = {}  # a constant written before the first real use
    meta: dict[int, OnChip] = {}
    touched: list = [None] * len(trace)
    for i, ins in enumerate(trace):
        us = _units(ins, onchip)
        if not us:
            continue
        touched[i] = us
        const = ins.opcode in _CONSTANT
        for u, (m, rd, wr, _) in us.items():
            if u not in first:
                if const and not rd:
                    if u not in early:
                        early[u] = i
                        meta[u] = m
                    last[u] = i
                    continue
                first[u] = i
                meta[u] = m
            last[u] = i
    for u, i in early.items():
        first.setdefault(u, i)

    mem = hw.memory
    cap = {Memory.SBUF: mem.sbuf_bytes_per_partition, Memory.PSUM: mem.psum_bytes_per_partition}
    bank = mem.psum_bank_bytes
    starts: dict[int, list[int]] = {}
    ends: dict[int, list[int]] = {}
    for u, i in first.items():
        starts.setdefault(i, []).append(u)
        ends.setdefault(last[u], []).append(u)

    # peak live bytes, and where capacity is first exceeded
    used = {Memory.SBUF: 0, Memory.PSUM: 0}
    count: dict[int, int] = {}  # PSUM buffer -> live units
    peak = {Memory.SBUF: 0, Memory.PSUM: 0}
    over = None
    for i in sorted(set(starts) | set(ends)):
        for u in starts.get(i, ()):
            used[meta[u].memory] += _grow(u, meta[u], count, bank, 1)
        for m_ in (Memory.SBUF, Memory.PSUM):
            if used[m_] > peak[m_]:
                peak[m_] = used[m_]
                if over is None and used[m_] > cap[m_]:
                    over = (i, m_, used[m_])
        for u in ends.get(i, ()):
            used[meta[u].memory] += _grow(u, meta[u], count, bank, -1)
    acc = Accounting(trace, peak[Memory.SBUF], peak[Memory.PSUM])
    if over is not None:
        if strict:
            i, m_, n = over
            raise KernelError(f"{path}:{trace[i].line}: {_exceeded(m_, n, hw)} (strict capacity: no spilling)")
        acc = _spill(trace, touched, first, ends, meta, cap, bank, hw, path, new_buffer_id, acc)
    acc.trace = space_reuse(acc.trace, onchip, cap[Memory.SBUF])
    return acc


def _grow(u: int, m: OnChip, count: dict, bank: int, step: int) -> int:
    """The change in charged bytes when unit `u` becomes live (step 1) or dies (step -1)."""
    if m.memory is Memory.SBUF:
        return step * m.unit
    b = u >> _SHIFT
    n = count.get(b, 0)
    count[b] = n + step
    return _psum_cost(n + step, m.unit, bank) - _psum_cost(n, m.unit, bank)


def _exceeded(memory: Memory, used: int, hw) -> str:
    mem = hw.memory
    if memory is Memory.SBUF:
        return (f"SBUF capacity exceeded: live tiles need {used} bytes per partition, {hw.name} has "
                f"{mem.sbuf_bytes_per_partition}")
    bank = mem.psum_bank_bytes
    return (f"PSUM capacity exceeded: live tiles need {used} bytes per partition ({used // bank} banks "
            f"of {bank} B), {hw.name} has {mem.psum_bytes_per_partition} ({mem.psum_banks} banks)")


def _region(u: int, m: OnChip) -> Region:
    k = u & ((1 << _SHIFT) - 1)
    return Region(u >> _SHIFT, m.memory, 0, m.partitions, k * m.unit, (k + 1) * m.unit)


def _covers(r: Region | None, u: int, m: OnChip) -> bool:
    """Whether write region `r` overwrites all of unit `u` (then a spilled unit needs no reload)."""
    if r is None:
        return False
    k = u & ((1 << _SHIFT) - 1)
    return (r.p_start == 0 and r.p_stop >= m.partitions and r.b_start <= k * m.unit
            and r.b_stop >= (k + 1) * m.unit and r.rows <= 1)


def _next_uses(touched, first) -> dict[int, list[int]]:
    """Per unit, the instructions that use it while it is live, in order."""
    uses: dict[int, list[int]] = {}
    for i, us in enumerate(touched):
        if us is not None:
            for u in us:
                if first[u] <= i:
                    uses.setdefault(u, []).append(i)
    return uses


def _spill(trace, touched, first, ends, meta, cap, bank, hw, path, new_buffer_id, acc: Accounting) -> Accounting:
    uses = _next_uses(touched, first)
    never = len(trace)
    # per memory, a max-heap of (-next use, unit) over resident units; an entry is current only
    # while its unit is resident and `due[u]` still equals its next use (stale ones are skipped)
    heaps = {Memory.SBUF: [], Memory.PSUM: []}
    due: dict[int, int] = {}  # resident unit -> its next use after the last touch
    used = {Memory.SBUF: 0, Memory.PSUM: 0}
    count: dict[int, int] = {}  # PSUM buffer -> resident units
    spilled: set[int] = set()  # live units whose data is in their HBM slot only
    clean: set[int] = set()  # resident units whose HBM slot holds the same data
    slots: dict[int, int] = {}
    out: list[Instruction] = []

    def dma(ins: Instruction, u: int, store: bool) -> Instruction:
        m = meta[u]
        slot = slots.get(u)
        if slot is None:
            slot = slots[u] = new_buffer_id()
        nbytes = m.unit * m.partitions
        onchip, hbm = _region(u, m), Region(slot, Memory.HBM, 0, 1, 0, nbytes)
        where = m.memory.value
        extra = {"api": "spill" if store else "spill reload", "src": where if store else "hbm",
                 "dst": "hbm" if store else where, "chunk_bytes": m.unit, "transpose": False,
                 "spill": True}
        if "loops" in ins.extra:
            extra["loops"] = ins.extra["loops"]
        return Instruction("dma_copy", Engine.DMA, m.partitions, m.unit // m.itemsize, m.dtype,
                           (onchip,) if store else (hbm,), (hbm,) if store else (onchip,),
                           ins.line, nbytes, nbytes, extra)

    def touch(u: int, i: int, became_resident: bool):
        m = meta[u]
        if became_resident:
            used[m.memory] += _grow(u, m, count, bank, 1)
        ui = uses[u]
        k = bisect_right(ui, i)
        nxt = ui[k] if k < len(ui) else never
        due[u] = nxt
        heapq.heappush(heaps[m.memory], (-nxt, u))

    def victims(memory, us) -> list[int]:
        """Resident units, furthest next use first, until `memory` fits (none the instruction uses)."""
        heap, out_, held = heaps[memory], [], []
        while used[memory] > cap[memory] and heap:
            neg, v = heapq.heappop(heap)
            if due.get(v) != -neg:
                continue  # stale: touched again, spilled or dead since
            if v in us:
                held.append((neg, v))
                continue
            del due[v]
            out_.append(v)
            used[memory] += _grow(v, meta[v], count, bank, -1)
        for e in held:
            heapq.heappush(heap, e)
        return out_

    for i, ins in enumerate(trace):
        us = touched[i]
        if us is None:
            out.append(ins)
            continue
        live = [u for u in us if first[u] <= i]  # not a constant written ahead of its first use
        stores: list[Instruction] = []
        reloads: list[Instruction] = []
        for u in live:
            m, rd, wr, reg = us[u]
            if u in spilled:
                spilled.discard(u)
                if rd or not _covers(reg, u, m):
                    reloads.append(dma(ins, u, store=False))
                    clean.add(u)
                touch(u, i, True)
            else:
                touch(u, i, first[u] == i)
            if wr:
                clean.discard(u)
        for memory in (Memory.SBUF, Memory.PSUM):
            if used[memory] <= cap[memory]:
                continue
            for v in victims(memory, us):
                if v not in clean:
                    stores.append(dma(ins, v, store=True))
                    clean.add(v)
                spilled.add(v)
            if used[memory] > cap[memory]:
                raise KernelError(f"{path}:{ins.line}: {_exceeded(memory, used[memory], hw)} by the "
                                  f"operands of one instruction (nothing can be spilled)")
        out.extend(stores)
        out.extend(reloads)
        out.append(ins)
        acc.spills += len(stores)
        acc.reloads += len(reloads)
        acc.spill_bytes += sum(s.dma_bytes for s in stores)
        acc.reload_bytes += sum(r.dma_bytes for r in reloads)
        for u in ends.get(i, ()):
            m = meta[u]
            if u in spilled:
                spilled.discard(u)
            elif u in due:
                del due[u]
                used[m.memory] += _grow(u, m, count, bank, -1)
            clean.discard(u)
    acc.trace = out
    return acc


def space_reuse(trace: list[Instruction], onchip: dict, capacity: int) -> list[Instruction]:
    """The trace with `extra["space_after"]` on each instruction that starts a unit's life in SBUF:
    the instructions that last used the space it takes, which it must wait for.

    The compiler allocates SBUF statically, so a tile's space is free only once the tile that held
    it before is dead: this is what bounds how far a load can run ahead of its use, and a spill
    reload cannot start before its victim's store. The allocator modelled reuses the space freed
    longest ago first (a ring over the whole SBUF, which leaves the most slack between a tile's
    last use and its space's next owner; the real allocator's choice of addresses is not known).
    A unit's life is from its first real use to its last use, split by a spill store and the next
    access (its reload). Every write in the life waits (a tile loaded in pieces takes all its space
    before the first piece lands; reads come after writes); a constant written ahead of the first
    use (lazy initialisation) waits too. PSUM is not modelled (its banks rotate within an
    accumulation pipeline)."""
    lives: list[list] = []  # [first, last, bytes, writes in the life (and constants ahead)]
    open_: dict[int, list] = {}
    ahead: dict[int, list[int]] = {}
    for i, ins in enumerate(trace):
        us = _units(ins, onchip)
        if not us:
            continue
        spill_store = ins.extra.get("spill") and ins.writes and ins.writes[0].memory is Memory.HBM
        const = ins.opcode in _CONSTANT
        for u, (m, rd, wr, _) in us.items():
            if m.memory is not Memory.SBUF:
                continue
            life = open_.get(u)
            if life is None:
                if const and not rd:
                    ahead.setdefault(u, []).append(i)
                    continue
                life = open_[u] = [i, i, m.unit, ahead.pop(u, [])]
            life[1] = i
            if wr:
                life[3].append(i)
            if spill_store:
                lives.append(open_.pop(u))
    lives.extend(open_.values())
    births: dict[int, list] = {}
    deaths: dict[int, list[int]] = {}
    for life in lives:
        births.setdefault(life[0], []).append(life)
        deaths.setdefault(life[1], []).append(life[2])
    free = deque([[capacity, None]])  # [bytes, its last user], freed longest ago first
    after: dict[int, set[int]] = {}
    for i in sorted(births.keys() | deaths.keys()):
        for first, _, need, writes in births.get(i, ()):
            users = set()
            while need > 0 and free:
                chunk = free[0]
                take = min(need, chunk[0])
                if chunk[1] is not None:
                    users.add(chunk[1])
                chunk[0] -= take
                need -= take
                if chunk[0] == 0:
                    free.popleft()
            for j in (first, *writes):
                waits = {k for k in users if k < j}
                if waits:
                    after.setdefault(j, set()).update(waits)
        for nbytes in deaths.get(i, ()):
            free.append([nbytes, i])
    if not after:
        return trace
    out = list(trace)
    for j in after:
        out[j] = replace(trace[j], extra=dict(trace[j].extra))
    for j, users in after.items():
        out[j].extra["space_after"] = Waits(tuple(out[k] for k in sorted(users)))
    return out
