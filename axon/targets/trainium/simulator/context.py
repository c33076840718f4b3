"""The simulation context: one object per `simulate` call holding the trace, buffer ids, the
on-chip buffers (for the capacity accounting of liveness.py), loop bookkeeping, and the
instruction cap.

Invariant: nothing outside a `SimContext` changes during a simulation (no module-level state);
every recorded `Instruction` carries the kernel line that issued it.
"""
from __future__ import annotations

import sys

from axon.errors import KernelError
from axon.targets.trainium.trace import Engine, Instruction, Memory

from .liveness import OnChip


class SimContext:
    def __init__(self, hw, kernel_path: str, timing_only: bool, max_instructions: int):
        self.hw = hw
        self.kernel_path = kernel_path
        self.timing_only = timing_only
        self.max_instructions = max_instructions
        # SPMD launch: the grid, this instance's ids, and the shared HBM tensors the first
        # instance allocated (later instances get the same tensors, in allocation order)
        self.grid: tuple = ()
        self.program_ids: tuple = ()
        self.hbm_allocs: list = []
        self.hbm_cursor = 0
        self.spmd = None  # spmd.Programs of a launch of several programs (they take turns)
        self.trace: list[Instruction] = []
        self.hbm_bytes = 0
        self._next_buffer = 0
        self._next_loop = 0
        self.loop_path: tuple = ()  # ((loop id, iteration, sequential), ...) outermost first
        self.onchip: dict[int, OnChip] = {}  # on-chip buffer id -> what liveness.account needs
        self.placements: dict = {}  # explicit placement -> the last buffer placed there
        self.holds_earlier_data: set[int] = set()  # buffers placed over an earlier one's data
        self.masked_off = False  # the running instruction's mask is off everywhere: it reads nothing
        self.strict_api = False  # current-API calls held to the documented API (nki_api.py)
        # a check's kernel on some row or column blocks: what it skips is never written, and a
        # pass that reads whole rows reads it; unwritten data flows to NaN outputs, not an error
        self.reads_unwritten = False
        self.sampling = None  # sampling.LoopSampling: timing-only runs that cut long loops short

    # ----- ids and lines -----------------------------------------------------------------
    def new_buffer_id(self) -> int:
        self._next_buffer += 1
        return self._next_buffer

    def new_loop_id(self) -> int:
        self._next_loop += 1
        return self._next_loop

    def line(self) -> int:
        f = sys._getframe(2)
        path = self.kernel_path
        while f is not None:
            if f.f_code.co_filename == path:
                return f.f_lineno
            f = f.f_back
        return 0

    # ----- the trace ---------------------------------------------------------------------
    def emit(self, opcode: str, engine: Engine, partitions: int, free_elems: int, dtype,
             reads, writes, extra=None, dma_bytes=0, hbm_bytes=0) -> Instruction:
        if len(self.trace) >= self.max_instructions:
            raise KernelError(f"kernel issued more than {self.max_instructions} instructions "
                              f"(runaway loop?); raise max_instructions if this is intended")
        ex = {"loops": self.loop_path} if self.loop_path else {}
        if extra:
            ex.update(extra)
        ins = Instruction(opcode, engine, partitions, free_elems,
                          dtype if isinstance(dtype, str) else dtype.name,
                          tuple(reads), tuple(writes), self.line(), dma_bytes, hbm_bytes, ex)
        self.trace.append(ins)
        self.hbm_bytes += hbm_bytes
        return ins

    # ----- capacity ----------------------------------------------------------------------
    # Capacity is accounted by liveness over the finished trace (liveness.py); here a buffer is
    # only registered, and a block that could never fit on its own is refused before allocation.
    def check_fits(self, memory, unit_bytes: int) -> None:
        """Raise the capacity error for an allocation unit (one block) of `unit_bytes` per
        partition that exceeds the memory on its own, before it is allocated."""
        mem = self.hw.memory
        if memory is Memory.SBUF:
            if unit_bytes > mem.sbuf_bytes_per_partition:
                raise KernelError(f"SBUF capacity exceeded: live tiles need {unit_bytes} bytes per "
                                  f"partition, {self.hw.name} has {mem.sbuf_bytes_per_partition}")
        elif memory is Memory.PSUM:
            bank = mem.psum_bank_bytes
            used = -(-unit_bytes // bank) * bank
            if used > mem.psum_bytes_per_partition:
                raise KernelError(f"PSUM capacity exceeded: live tiles need {used} bytes per "
                                  f"partition ({used // bank} banks of {bank} B), {self.hw.name} has "
                                  f"{mem.psum_bytes_per_partition} ({mem.psum_banks} banks)")

    def register(self, buf, unit_bytes: int, partitions: int) -> None:
        self.onchip[buf.id] = OnChip(buf.memory, unit_bytes, partitions, buf.dtype.name, buf.dtype.itemsize)

    # ----- loops -------------------------------------------------------------------------
    def loop(self, iterable, sequential: bool, kind: str):
        loop_id = self.new_loop_id()
        outer = self.loop_path
        sampled = (self.sampling.start(self.line(), len(iterable), len(self.trace), loop_id, outer)
                   if self.sampling else None)
        try:
            for i, value in enumerate(iterable):
                if sampled is not None and not sampled.goes_on(i, len(self.trace)):
                    break
                self.loop_path = outer + ((loop_id, i, sequential),)
                yield value
        finally:
            self.loop_path = outer
            if sampled is not None:
                sampled.end(len(self.trace))
