"""SPMD launches: the programs of a grid (`kernel[2](...)`, logical NeuronCores) run in turn, and
`nisa.core_barrier` holds a program until every program it names has reached it.

Each program runs in its own thread, but only the one holding the turn executes: it runs until it
finishes or waits at a barrier, then the turn passes to the next program that can run, in
program order. Without barriers that is program 0 to the end, then program 1, ...; with them, a
program that reads after a barrier what another wrote before it sees that data, as on hardware.

Invariant: exactly one program executes kernel code at any time, and the context's per-program
state (its ids, its place among the shared HBM allocations, its loop path) is that program's.
"""
from __future__ import annotations

import threading

import numpy as np

from axon.errors import KernelError
from axon.targets.trainium.trace import Engine

from .operands import as_tile, engine_of

# SimContext fields that belong to one program of the launch
_PROGRAM_STATE = ("program_ids", "hbm_cursor", "loop_path", "masked_off")


class _Aborted(BaseException):
    """Unwinds a program's thread after another program failed."""


def core_barrier(ctx, data, cores, engine=None, name=None, **_):
    """nisa.core_barrier(data, cores): every program in `cores` reaches this point before any goes
    on; `data` is the shared HBM tensor they synchronise on (the instruction reads it, so it waits
    for the writes to it that came before) [nki.isa.core_barrier docs]."""
    t = as_tile(data, "data", "core_barrier")
    programs = ctx.spmd
    if programs is None:
        raise KernelError(f"nisa.core_barrier(cores={tuple(cores)}) in a launch of one program: no "
                          f"other program can reach it (launch the kernel on a grid, kernel[2](...))")
    ctx.emit("core_barrier", engine_of(engine, Engine.GPSIMD), 1, 1, t.dtype, (t.region(),), (),
             {"cores": tuple(int(c) for c in cores)})
    programs.barrier(tuple(cores), ctx.line())


class Programs:
    def __init__(self, ctx, grid: tuple):
        self.ctx = ctx
        self.ids = [tuple(int(i) for i in ids) for ids in np.ndindex(*grid)]
        n = len(self.ids)
        self.saved = [{"program_ids": ids, "hbm_cursor": 0, "loop_path": (), "masked_off": False}
                      for ids in self.ids]
        self.done, self.results = [False] * n, [None] * n
        self.waiting: dict[int, tuple] = {}  # program -> the cores of the barrier it waits at
        self.turn = 0
        self.error: BaseException | None = None
        self.cond = threading.Condition()

    def run(self, fn, args: dict):
        """Run every program; the last one's return value is the launch's (they share outputs)."""
        threads = [threading.Thread(target=self._program, args=(i, fn, args), daemon=True)
                   for i in range(len(self.ids))]
        for t in threads:
            t.start()
        with self.cond:
            while not all(self.done) and self.error is None:
                self.cond.wait(0.05)  # a timed wait lets the watchdog's timeout reach this thread
        if self.error is not None:
            raise self.error
        return self.results[-1]

    def barrier(self, cores: tuple, line: int):
        """The running program waits until each program in `cores` has reached this barrier."""
        me = self.turn
        names = tuple(self.index_of(c) for c in cores)
        if me not in names:
            raise KernelError(f"nisa.core_barrier: program {me} is not among the cores {tuple(cores)}")
        with self.cond:
            self.waiting[me] = (names, line)
            if all(self.waiting.get(p, ((), 0))[0] == names for p in names):
                for p in names:  # everyone is here: the barrier opens, this program goes on
                    del self.waiting[p]
                return
            self._pass_turn(me)
            self._wait_for_turn(me)

    def index_of(self, core) -> int:
        if not isinstance(core, (int, np.integer)) or not 0 <= int(core) < len(self.ids):
            raise KernelError(f"nisa.core_barrier: core {core!r} is not one of the launch's "
                              f"{len(self.ids)} programs")
        return int(core)

    # ----- turns -------------------------------------------------------------------------
    def _program(self, i: int, fn, args: dict):
        try:
            with self.cond:
                self._wait_for_turn(i)
            with np.errstate(all="ignore"):
                self.results[i] = fn(**args)
        except _Aborted:
            return
        except BaseException as err:  # noqa: BLE001 - handed to the launching thread
            with self.cond:
                if self.error is None:
                    self.error = err
                self.cond.notify_all()
            return
        with self.cond:
            self.done[i] = True
            self._pass_turn(i)

    def _wait_for_turn(self, i: int):
        """(holding the lock) Sleep until program i has the turn, then make the context its own."""
        while self.turn != i and self.error is None:
            self.cond.wait()
        if self.error is not None:
            raise _Aborted
        for name in _PROGRAM_STATE:
            setattr(self.ctx, name, self.saved[i][name])

    def _pass_turn(self, i: int):
        """(holding the lock) Program i stops running: save its state, give the turn to the next
        program that can run, or report the deadlock."""
        self.saved[i] = {name: getattr(self.ctx, name) for name in _PROGRAM_STATE}
        n = len(self.ids)
        for step in range(1, n + 1):
            j = (i + step) % n
            if not self.done[j] and j not in self.waiting:
                self.turn = j
                self.cond.notify_all()
                return
        if self.waiting and self.error is None:
            p, (cores, line) = next(iter(self.waiting.items()))
            missing = [c for c in cores if c not in self.waiting]
            self.error = KernelError(f"{self.ctx.kernel_path}:{line}: nisa.core_barrier: program {p} waits "
                                     f"for program(s) {missing}, which finished without reaching it")
        self.cond.notify_all()
