"""Loop sampling: a timing-only run that executes only the first iterations of long loops.

A timing-only simulation costs about the same per instruction whatever the sizes, so a Llama-70B
kernel (10^5 instructions and more) takes seconds where its quick-size version takes
milliseconds. Most of those instructions repeat loop bodies. A sampled run cuts each long loop
short after `keep` iterations and records what it ran and skipped; `sampled_timing.py` times the
cut trace, and the trace with some loops run a few iterations longer, and extends each loop by the
time one more iteration adds on average.

Which loops are cut (decided once per loop statement, by its kernel line, at the end of the
first iteration of its first instance): a loop of at least `min_trip` iterations whose first
iteration issued at least `min_body` instructions (as cut itself). So a cut loop's iterations are
whole pipeline stages (a tile's loads, matmuls and store), never one instruction of an
accumulation. Cut loops may nest.
"""
from __future__ import annotations

from dataclasses import dataclass, field

MIN_TRIP = 8
MIN_BODY = 32


@dataclass
class LoopSampling:
    keep: int = 2  # iterations a cut loop instance runs
    longer: frozenset = frozenset()  # kernel lines of the loops that run keep + longer_by iterations
    longer_by: int = 1
    min_trip: int = MIN_TRIP
    min_body: int = MIN_BODY
    decided: dict = field(default_factory=dict)  # loop line -> cut or not (given ones stay)
    frozen: bool = False  # decisions come from an earlier run: loops not decided there run whole
    ran: dict = field(default_factory=dict)  # loop line -> iterations run, all instances
    skipped: dict = field(default_factory=dict)  # loop line -> iterations not run, all instances
    cut: dict = field(default_factory=dict)  # loop line -> instances cut short
    around: dict = field(default_factory=dict)  # loop line -> lines of the loops around it
    line_of: dict = field(default_factory=dict)  # loop id (trace Instruction.extra["loops"]) -> line
    _open: list = field(default_factory=list)  # the running loop instances, outermost first

    def start(self, line: int, trip: int, issued: int, loop_id: int = 0) -> "_Instance":
        self.around.setdefault(line, tuple(o.line for o in self._open))
        self.line_of[loop_id] = line
        inst = _Instance(self, line, trip, issued)
        self._open.append(inst)
        return inst

    def follow(self, longer, by: int = 1) -> "LoopSampling":
        """A run with this one's decisions and the loops `longer` (kernel lines) `by` iterations longer."""
        return LoopSampling(self.keep, frozenset(longer), by, self.min_trip, self.min_body, dict(self.decided),
                            frozen=True)


class _Instance:
    """One execution of a loop statement under sampling."""

    def __init__(self, sampling: LoopSampling, line: int, trip: int, issued: int):
        self.s, self.line, self.trip, self.first_issued = sampling, line, trip, issued

    def goes_on(self, i: int, issued: int) -> bool:
        """Whether iteration `i` runs; `issued` is the trace length now."""
        s = self.s
        if i == 1 and self.line not in s.decided:
            s.decided[self.line] = (not s.frozen and self.trip >= s.min_trip
                                    and issued - self.first_issued >= s.min_body)
        keep = s.keep + s.longer_by * (self.line in s.longer)
        if i < keep or not s.decided.get(self.line):
            s.ran[self.line] = s.ran.get(self.line, 0) + 1
            return True
        s.skipped[self.line] = s.skipped.get(self.line, 0) + self.trip - i
        s.cut[self.line] = s.cut.get(self.line, 0) + 1
        return False

    def end(self) -> None:
        self.s._open.remove(self)
