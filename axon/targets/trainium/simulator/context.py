"""The simulation context: one object per `simulate` call holding the trace, buffer ids,
on-chip capacity accounting, loop bookkeeping, and the instruction cap.

Invariant: nothing outside a `SimContext` changes during a simulation (no module-level state);
every recorded `Instruction` carries the kernel line that issued it.
"""
from __future__ import annotations

import sys
import weakref

from axon.errors import KernelError
from axon.targets.trainium.trace import Engine, Instruction, Memory


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
        self.trace: list[Instruction] = []
        self.hbm_bytes = 0
        self._next_buffer = 0
        self._next_loop = 0
        self.loop_path: tuple = ()  # ((loop id, iteration, sequential), ...) outermost first
        self.scopes: list[list] = [[]]  # weak refs to buffers charged in each open loop iteration
        self.sbuf_used = 0
        self.psum_used = 0
        self.sbuf_peak = 0
        self.psum_peak = 0
        self.pending: list = []  # fresh result buffers not yet charged (see charge_pending)
        self.staged: list = []  # results of the instruction being issued: pending after it

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
        if self.pending:
            self.charge_pending()
        if self.staged:
            self.pending, self.staged = self.staged, []
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
    def _cost(self, buf) -> int:
        pp = buf.pp_bytes
        if buf.memory is Memory.PSUM:
            bank = self.hw.memory.psum_bank_bytes
            return -(-pp // bank) * bank
        return pp

    def check_fits(self, memory, pp_bytes: int, live: bool) -> None:
        """Raise `charge`'s capacity error for a buffer of `pp_bytes` per partition before it is
        allocated: with what is live when `live` (it is charged at once), else on its own (a fresh
        result is charged later, and may be dropped first)."""
        mem = self.hw.memory
        if memory is Memory.SBUF:
            used = pp_bytes + (self.sbuf_used if live else 0)
            if used > mem.sbuf_bytes_per_partition:
                raise KernelError(f"SBUF capacity exceeded: live tiles need {used} bytes per "
                                  f"partition, {self.hw.name} has {mem.sbuf_bytes_per_partition}")
        elif memory is Memory.PSUM:
            bank = mem.psum_bank_bytes
            used = -(-pp_bytes // bank) * bank + (self.psum_used if live else 0)
            if used > mem.psum_bytes_per_partition:
                raise KernelError(f"PSUM capacity exceeded: live tiles need {used} bytes per "
                                  f"partition ({used // bank} banks of {bank} B), {self.hw.name} has "
                                  f"{mem.psum_bytes_per_partition} ({mem.psum_banks} banks)")

    def charge(self, buf, check=True):
        buf.charge = self._cost(buf)
        buf.charged = True
        self.scopes[-1].append(weakref.ref(buf))
        mem = self.hw.memory
        if buf.memory is Memory.SBUF:
            self.sbuf_used += buf.charge
            self.sbuf_peak = max(self.sbuf_peak, self.sbuf_used)
            if check and self.sbuf_used > mem.sbuf_bytes_per_partition:
                used = self.sbuf_used
                self.release(buf)
                raise KernelError(f"SBUF capacity exceeded: live tiles need {used} bytes per "
                                  f"partition, {self.hw.name} has {mem.sbuf_bytes_per_partition}")
        else:
            self.psum_used += buf.charge
            self.psum_peak = max(self.psum_peak, self.psum_used)
            if check and self.psum_used > mem.psum_bytes_per_partition:
                used = self.psum_used
                self.release(buf)
                raise KernelError(f"PSUM capacity exceeded: live tiles need {used} bytes per "
                                  f"partition ({used // mem.psum_bank_bytes} banks of "
                                  f"{mem.psum_bank_bytes} B), {self.hw.name} has "
                                  f"{mem.psum_bytes_per_partition} ({mem.psum_banks} banks)")

    def release(self, buf):
        if not buf.charged:
            return
        buf.charged = False
        if buf.memory is Memory.SBUF:
            self.sbuf_used -= buf.charge
        else:
            self.psum_used -= buf.charge

    def add_pending(self, buf):
        self.staged.append(buf)

    def charge_pending(self):
        """Fresh instruction results are charged once the next instruction issues: by then a
        result stored straight into another tile (`t[...] = nl.exp(x)`) has been dropped."""
        pending, self.pending = self.pending + self.staged, []
        self.staged = []
        for ref in pending:
            buf = ref()
            if buf is not None and not buf.charged:
                self.charge(buf)

    # ----- loops -------------------------------------------------------------------------
    def loop(self, iterable, sequential: bool, kind: str):
        loop_id = self.new_loop_id()
        outer = self.loop_path
        self.scopes.append([])
        try:
            for i, value in enumerate(iterable):
                if i:
                    self._end_iteration()
                self.loop_path = outer + ((loop_id, i, sequential),)
                yield value
            self._end_iteration()
        finally:
            self.loop_path = outer
            scope = self.scopes.pop()
            for ref in scope:
                buf = ref()
                if buf is not None:
                    self.release(buf)

    def _end_iteration(self):
        if self.pending:
            self.charge_pending()
        scope = self.scopes[-1]
        for ref in scope:
            buf = ref()
            if buf is not None:
                self.release(buf)
        scope.clear()
