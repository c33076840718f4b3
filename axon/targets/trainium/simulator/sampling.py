"""Loop sampling: a timing-only run that executes only the first iterations of long loops.

A timing-only simulation costs about the same per instruction whatever the sizes, so a Llama-70B
kernel (10^5 instructions and more) takes seconds where its quick-size version takes
milliseconds. Most of those instructions repeat loop bodies. A sampled run cuts each long loop
short after `keep` iterations and records what it ran and skipped; `sampled_timing.py` times the
cut trace, and the trace with some loops run a few iterations longer, and extends each loop by the
time one more iteration adds on average.

One run serves all of those traces: every cut loop runs `keep + extra` iterations (`keep` inside
another's extra iterations: no view runs two nested loops longer), and a `View`
(`LoopSampling.view(longer)`) is the run that would have run the loops `longer` that far and
every other cut loop `keep` iterations: its instructions (`View.keeps`), a subsequence of the
run's, and its counts. Which loops are cut is decided as if no loop ran longer, so every view is
what a run of its own would have made.

Which loops are cut (decided once per loop statement, by its kernel line, at the end of the
first iteration of its first instance): a loop of at least `min_trip` iterations whose first
iteration issued at least `min_body` instructions (as cut itself, `keep` iterations for a cut loop
inside it). So a cut loop's iterations are whole pipeline stages (a tile's loads, matmuls and
store), never one instruction of an accumulation. A loop whose first iteration issued at least
`long_body` is a whole block of the kernel (a row block's pass over every weight tile): its own
instructions average out a schedule that alternates between two states, so the longer views run
it one iteration longer, not `extra`. With fewer than `min_trip` iterations (from 3: the 4 row
blocks of a Llama-70B matmul, which 2 plus 2 would leave whole) it is cut after its first; with
more it keeps `keep`, since one iteration past the first times the start-up's overlap, not the
steady state (gqa's Llama-70B kernel came out 3.5% short). Cut loops may nest. A loop statement
first met in the extra iterations of a cut loop (in no view without them) runs whole.
"""
from __future__ import annotations

from dataclasses import dataclass, field

MIN_TRIP = 8
MIN_BODY = 32
LONG_BODY = 256  # a first iteration this long: one iteration more in the longer views
LONG_MIN_TRIP = 3  # such a loop is cut from this many iterations (one run, one more, one skipped)


@dataclass
class LoopSampling:
    keep: int = 2  # iterations a cut loop instance runs in the view without longer loops
    extra: int = 0  # iterations every cut loop instance runs beyond `keep` (for the longer views)
    min_trip: int = MIN_TRIP
    min_body: int = MIN_BODY
    long_body: int | None = LONG_BODY  # None: every cut loop runs `keep` (+ `extra`)
    decided: dict = field(default_factory=dict)  # loop line -> cut or not (given ones stay)
    runs: dict = field(default_factory=dict)  # cut loop line with a long body -> (its keep, its extra)
    around: dict = field(default_factory=dict)  # loop line -> lines of the loops around it
    line_of: dict = field(default_factory=dict)  # loop id (trace Instruction.extra["loops"]) -> line
    instances: list = field(default_factory=list)  # (line, trip, ((outer loop id, its iteration), ...))
    _open: list = field(default_factory=list)  # the running loop instances, outermost first
    _extra_depth: int = 0  # open instances now in an extra iteration
    _extra_issued: int = 0  # instructions issued in extra iterations (finished ones)
    _extra_from: int = 0  # trace length when the outermost extra iteration began
    trace: list = field(default_factory=list)  # the run's trace, before capacity accounting
    _account: object = None  # trace -> liveness.Accounting, as the simulator accounts the run

    def start(self, line: int, trip: int, issued: int, loop_id: int = 0, outer: tuple = ()) -> "_Instance":
        """A loop instance begins; `outer` is the simulator's loop path ((loop id, iteration, ...), ...)."""
        self.around.setdefault(line, tuple(o.line for o in self._open))
        self.line_of[loop_id] = line
        if self._extra_depth and line not in self.decided:
            self.decided[line] = False  # first met where only the longer views reach: runs whole
        self.instances.append((line, trip, tuple((lid, i) for lid, i, *_ in outer)))
        inst = _Instance(self, line, trip, issued - self._extra_issued)
        self._open.append(inst)
        return inst

    def keep_of(self, line: int) -> int:
        """Iterations cut loop `line` runs in the cut run."""
        return self.runs.get(line, (self.keep, None))[0]

    def extra_of(self, line: int) -> int:
        """Iterations cut loop `line` runs beyond `keep_of` in the longer views."""
        return min(self.extra, self.runs[line][1]) if line in self.runs else self.extra

    def decide(self, line: int, trip: int, body: int) -> None:
        """Whether loop `line` (`trip` iterations, `body` instructions in its first) is cut, and how."""
        long = self.long_body is not None and body >= self.long_body
        if long and LONG_MIN_TRIP <= trip < self.min_trip:
            self.runs[line] = (1, 1)
        elif long and trip >= self.min_trip:
            self.runs[line] = (self.keep, 1)
        self.decided[line] = line in self.runs or (trip >= self.min_trip and body >= self.min_body)

    def recorded(self, trace: list, account) -> None:
        """The simulator's run ended with `trace`; `account` accounts a view's instructions."""
        self.trace, self._account = trace, account

    def view(self, longer=frozenset()) -> "View":
        """The run in which the cut loops `longer` (kernel lines, none inside another) run
        `keep + extra` iterations and the other cut loops `keep` (`longer` empty: the cut run)."""
        longer = frozenset(longer)
        if any(o in longer for line in longer for o in self.around.get(line, ())):
            raise ValueError("a view runs no loop longer inside another that runs longer")
        return View(self, longer)


class View:
    """One run's share of a sampled run: what it issued (`keeps`) and its loop counts."""

    def __init__(self, s: LoopSampling, longer: frozenset):
        self._s, self.longer, self.around, self.line_of = s, longer, s.around, s.line_of
        self.keep_of, self.step_of = s.keep_of, s.extra_of
        self._runs = {line: s.keep_of(line) + s.extra_of(line) * (line in longer)
                      for line, cut in s.decided.items() if cut}
        self.ran: dict = {}  # loop line -> iterations run, all instances
        self.skipped: dict = {}  # loop line -> iterations not run, all instances
        self.cut: dict = {}  # loop line -> instances cut short
        for line, trip, outer in s.instances:
            if not self.reaches(outer):
                continue
            runs = min(trip, self._runs.get(line, trip))
            self.ran[line] = self.ran.get(line, 0) + runs
            if runs < trip:
                self.skipped[line] = self.skipped.get(line, 0) + trip - runs
                self.cut[line] = self.cut.get(line, 0) + 1

    def reaches(self, loops) -> bool:
        """Whether this run reaches the point with loop path `loops` ((loop id, iteration, ...), ...)."""
        runs, line_of = self._runs, self.line_of
        for loop_id, i, *_ in loops:
            n = runs.get(line_of[loop_id])
            if n is not None and i >= n:
                return False
        return True

    def keeps(self, ins) -> bool:
        """Whether this run issued trace instruction `ins`."""
        return self.reaches(ins.extra.get("loops", ()))

    def accounting(self):
        """This run's instructions with their capacity accounted (liveness.Accounting), as the
        simulator accounts a run of its own."""
        s = self._s
        return s._account([ins for ins in s.trace if self.keeps(ins)])


class _Instance:
    """One execution of a loop statement under sampling."""

    def __init__(self, sampling: LoopSampling, line: int, trip: int, issued: int):
        self.s, self.line, self.trip, self.first_issued = sampling, line, trip, issued
        # no view runs two nested loops longer (sampled_timing groups never hold both), so inside
        # another loop's extra iterations a cut loop runs `keep` iterations only
        self.may_run_extra = sampling.extra > 0 and sampling._extra_depth == 0
        self.in_extra = False

    def goes_on(self, i: int, issued: int) -> bool:
        """Whether iteration `i` runs; `issued` is the trace length now."""
        s = self.s
        if i == 1 and self.line not in s.decided:
            s.decide(self.line, self.trip, issued - s._extra_issued - self.first_issued)
        keep, extra = s.keep_of(self.line), s.extra_of(self.line)
        if not s.decided.get(self.line) or i < keep:
            return True
        if not self.may_run_extra or not extra:
            return False
        if i == keep:
            self._enter_extra(issued)
        return i < keep + extra

    def _enter_extra(self, issued: int) -> None:
        s = self.s
        if s._extra_depth == 0:
            s._extra_from = issued
        s._extra_depth += 1
        self.in_extra = True

    def end(self, issued: int) -> None:
        s = self.s
        s._open.remove(self)
        if self.in_extra:
            s._extra_depth -= 1
            if s._extra_depth == 0:
                s._extra_issued += issued - s._extra_from
