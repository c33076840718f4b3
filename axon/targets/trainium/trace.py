"""The instruction trace: what the NKI simulator records and the performance model consumes.

Invariant: one `Instruction` per hardware instruction the kernel issues, in program order, with
the memory regions it reads and writes. Dependencies are derived from overlapping regions only,
so the simulator must give every allocation its own `buffer` id (a tile allocated inside a loop
body gets a fresh id on every iteration, which is what lets independent iterations overlap).
"""
from __future__ import annotations

import enum
import gc
from contextlib import contextmanager
from dataclasses import dataclass, field


class Engine(enum.Enum):
    TENSOR = "tensor"
    VECTOR = "vector"
    SCALAR = "scalar"
    GPSIMD = "gpsimd"
    DMA = "dma"


class Memory(enum.Enum):
    HBM = "hbm"
    SBUF = "sbuf"
    PSUM = "psum"


@dataclass(frozen=True)
class Region:
    """A rectangle of one buffer: partitions [p_start, p_stop) x bytes [b_start, b_stop) per partition.

    HBM buffers have no partitions: they use p_start=0, p_stop=1 and a flat byte range. A strided
    HBM access (a tile of a wider matrix) may also say which bytes of that range it touches:
    `rows` runs of `row_bytes` bytes, `row_stride` bytes apart, the first at b_start (so
    b_stop = b_start + (rows - 1) * row_stride + row_bytes). rows == 0: the whole range.
    """

    buffer: int
    memory: Memory
    p_start: int
    p_stop: int
    b_start: int
    b_stop: int
    row_stride: int = 0
    rows: int = 0
    row_bytes: int = 0

    def __init__(self, buffer: int, memory: Memory, p_start: int, p_stop: int, b_start: int, b_stop: int,
                 row_stride: int = 0, rows: int = 0, row_bytes: int = 0):
        # What the generated frozen __init__ does (one object.__setattr__ per field), at a third of
        # the cost: the simulator makes a Region per tile access.
        d = self.__dict__
        d["buffer"], d["memory"], d["p_start"], d["p_stop"] = buffer, memory, p_start, p_stop
        d["b_start"], d["b_stop"], d["row_stride"], d["rows"], d["row_bytes"] = (
            b_start, b_stop, row_stride, rows, row_bytes)

    def overlaps(self, other: "Region") -> bool:
        return (
            self.buffer == other.buffer
            and self.p_start < other.p_stop
            and other.p_start < self.p_stop
            and self.b_start < other.b_stop
            and other.b_start < self.b_stop
            and rows_overlap(self.b_start, self.b_stop, self.row_stride, self.rows, self.row_bytes,
                             other.b_start, other.b_stop, other.row_stride, other.rows, other.row_bytes)
        )


def rows_overlap(a0: int, a1: int, sa: int, na: int, wa: int,
                 b0: int, b1: int, sb: int, nb: int, wb: int) -> bool:
    """Whether two byte sets {x0 + i*s + [0, w)} (i < n) share a byte, given that their bounding
    ranges [x0, x1) do. A set with n <= 1 is its whole bounding range. Exact when at most one set
    has rows or both have the same row stride; otherwise True (the bounding ranges decide)."""
    if na <= 1:
        if nb <= 1:
            return True
        a0, a1, sa, na, wa, b0, b1, sb, nb, wb = b0, b1, sb, nb, wb, a0, a1, sa, na, wa
    if nb <= 1:
        nb, wb = 1, b1 - b0
    elif sb != sa:
        return True
    if sa <= 0:
        return True
    # rows a0 + k*s, k = i - j in [-(nb-1), na-1], against [b0, b0 + wb): need k*s in (d - wa, d + wb)
    d = b0 - a0
    k = (d - wa) // sa + 1  # the smallest k with k*s > d - wa
    if k < 1 - nb:
        k = 1 - nb
    return k <= na - 1 and k * sa < d + wb


class Waits:
    """Earlier instructions one must wait for beyond its data dependencies (extra["space_after"]),
    held by identity: compared and printed without walking into them."""

    __slots__ = ("instructions",)

    def __init__(self, instructions: tuple):
        self.instructions = instructions

    def __repr__(self) -> str:
        return f"Waits({len(self.instructions)} instructions)"


@dataclass
class Instruction:
    opcode: str  # the nki.isa name: "nc_matmul", "activation", "dma_copy", ...
    engine: Engine
    partitions: int  # partitions the instruction touches
    free_elems: int  # N in the cost formulas: elements per partition processed
    dtype: str  # dtype that sets the instruction's speed (e.g. "bfloat16", "float32")
    reads: tuple[Region, ...]
    writes: tuple[Region, ...]
    line: int  # kernel source line that issued it (for errors and the trace viewer)
    dma_bytes: int = 0  # bytes moved, DMA only
    hbm_bytes: int = 0  # bytes read from or written to HBM by this instruction
    # Per-opcode facts the cost formula needs, e.g. {"stationary_free": 128, "moving_free": 512}.
    extra: dict = field(default_factory=dict)


@contextmanager
def cyclic_gc_paused():
    """Pause Python's cyclic garbage collector while a trace is built or scheduled.

    A large kernel's trace is millions of live objects, and the collector's periodic full passes
    over them took about a third of a timing-only simulation; neither the simulator nor the model
    makes reference cycles worth collecting (tiles and buffers are freed by reference counting,
    which the pause leaves alone). Restores the previous setting."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
