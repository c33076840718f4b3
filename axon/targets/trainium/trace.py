"""The instruction trace: what the NKI simulator records and the performance model consumes.

Invariant: one `Instruction` per hardware instruction the kernel issues, in program order, with
the memory regions it reads and writes. Dependencies are derived from overlapping regions only,
so the simulator must give every allocation its own `buffer` id (a tile allocated inside a loop
body gets a fresh id on every iteration, which is what lets independent iterations overlap).
"""
from __future__ import annotations

import enum
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

    HBM buffers have no partitions: they use p_start=0, p_stop=1 and a flat byte range.
    """

    buffer: int
    memory: Memory
    p_start: int
    p_stop: int
    b_start: int
    b_stop: int

    def overlaps(self, other: "Region") -> bool:
        return (
            self.buffer == other.buffer
            and self.p_start < other.p_stop
            and other.p_start < self.p_stop
            and self.b_start < other.b_stop
            and other.b_start < self.b_stop
        )


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
