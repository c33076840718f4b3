"""Timing-only latency from loop samples: the performance model on traces whose long loops ran
only their first iterations (simulator/sampling.py), extended loop by loop:

    T = T(cut) + sum over cut loops L of skipped(L) x scale(L) x (T(L longer) - T(cut)) / (step(L) x cut(L))

where skipped(L) counts the iterations of L that did not run, cut(L) its instances cut short, and
scale(L) the product, over the cut loops around L, of (iterations in full) / (iterations run):
the instances of L inside the skipped iterations of an outer loop. T(L longer) runs L step(L)
iterations longer in each of its instances: STEP (two: a schedule that alternates between two
states, as DMA queues taken in turn make it, averages out; one more iteration would time one
state), or one for a loop whose body is a whole block of the kernel (simulator/sampling.py: its
own instructions average such states out). Loops with the same
multiple skipped(L) x scale(L) / cut(L) and step, none inside another, share that run (the kernel
runs all of them longer; what they add is summed): a causal kernel's copies of one loop nest, one
per run of row blocks, cost one run, not one each.

The runs are views of one simulation (simulator/sampling.py): it runs every cut loop STEP
iterations longer, and the cut run and each group's longer run are the subsequences of its trace
that they would have issued, each accounted for capacity and timed by the model on its own. So
the cost is one simulation of the kernel with its cut loops KEEP + STEP iterations long (a long
body: KEEP + 1, or 1 + 1), and one estimate of the cut kernel and one per group of cut loop
statements: it grows with the kernel's distinct loop bodies, not its iteration counts. Where no loop is long enough to cut, the run is
the whole kernel and its latency is the full path's, exactly.

The extension is linear, so it holds only where one more iteration costs what every later one
will. Over many iterations, one costs at least the busy time it adds to its busiest engine (or to
the DMA bandwidth; the model's `busy_by` counts the extra iterations' instructions): the extension
per iteration is the larger of that and what the longer run added (more where a dependency chain
runs through the iterations). A longer run that added much less than that busy time (under TRUST
of it, summed over the group's loops) shows an iteration hidden behind work outside the loop that
does not grow with it (a matmul loop cut to two iterations behind the weight loads of its block):
at full length the loop bounds the time instead, so the extension would be wrong. A group that
fails is timed again loop by loop; a single loop that fails runs whole, and every decision is
taken again (cutting it later does not help: the hidden share shrinks only as the cut approaches
the loop's length).

Whether sampling can pay is known before any run for a kernel whose loops have literal trip
counts and whose instructions are `nisa` calls (Axon's own): `static_counts` counts what the cut run,
the sampled run and the whole kernel issue from the source, by the same rules as the simulator's
sampling. Where the sampled run and the estimates of the cut run and one longer run would cost more
than sampling saves, the kernel runs whole at once, instead of a sampled run that only shows it.
"""
from __future__ import annotations

import ast
import functools
import math
from dataclasses import dataclass
from fractions import Fraction
from typing import NamedTuple

from axon.targets.trainium.hardware import HardwareDescription
from axon.targets.trainium.perfmodel import estimate as estimate_trace
from axon.targets.trainium.simulator import LoopSampling, simulate
from axon.targets.trainium.simulator.sampling import View
from axon.targets.trainium.trace import cyclic_gc_paused

KEEP = 2  # iterations a cut loop runs; the extension is the time of one more
STEP = 2  # iterations the longer runs add (the extension is their average)
TRUST = 0.9  # a longer run must add this share of the busy time it adds to its busiest engine
SAVING = 0.5  # sample only where the runs cost at most this share of the whole kernel's (`_work`)
SIMULATE_SHARE = 0.7  # of the cost of an instruction simulated and timed, the simulation's (measured
#                       on the Llama-70B winners: about 41 us simulating, 17 us timing, per instruction)


@dataclass(frozen=True)
class SampledLatency:
    latency_ns: float  # when `stopped`: the floor that passed `stop_above_ns`, not the latency
    work: int  # what the runs cost, in instructions simulated and timed (`_work`)
    exact: bool  # no loop was cut: the full path's latency
    loops: dict  # kernel line of a cut loop -> (iterations skipped in all, instances cut, ns one iteration adds)
    floors: tuple = ()  # (work spent so far, the latency's floor then), after each estimate (`_Floors`)
    stopped: bool = False  # a floor reached `stop_above_ns`: the runs stopped there


def _cut_loops(cut: View) -> dict:
    """Loop id -> (line, full / run iterations) of the loop instances a run cut: the performance
    model sizes what it keeps resident by the uncut kernel (perfmodel._hoisted_loads)."""
    scale = {line: (cut.ran[line] + cut.skipped[line]) / cut.ran[line] for line in cut.cut}
    return {lid: (line, scale[line]) for lid, line in cut.line_of.items() if line in scale}


def _multiple(cut: View, line: int) -> Fraction:
    """Iterations the full kernel runs beyond the cut one, per instance of loop `line` cut short:
    skipped(L) x scale(L) / cut(L) (the module docstring), exactly."""
    scale = Fraction(1)
    for outer in cut.around[line]:
        if outer in cut.cut:
            scale *= Fraction(cut.ran[outer] + cut.skipped[outer], cut.ran[outer])
    return cut.skipped[line] * scale / cut.cut[line]


def _groups(cut: View) -> list[tuple[int, ...]]:
    """The cut loop statements, in groups that one longer run times together: loops with the same
    multiple and step, none inside another (a kernel emitted once per run of row blocks repeats
    one loop nest per run: its copies share one run instead of one each)."""
    groups: list[list[int]] = []
    for line in sorted(cut.cut):
        alike = (_multiple(cut, line), cut.step_of(line))
        home = next((g for g in groups if (_multiple(cut, g[0]), cut.step_of(g[0])) == alike
                     and all(o not in cut.around[line] and line not in cut.around[o] for o in g)), None)
        if home is None:
            groups.append([line])
        else:
            home.append(line)
    return [tuple(g) for g in groups]


def _uncut_instructions(trace: list, cut_loops: dict) -> float:
    """The instructions the uncut kernel would issue: each of the cut trace's counts once per
    iteration its cut loops would run in full."""
    total = 0.0
    for ins in trace:
        total += math.prod(cut_loops[lid][1] for lid, _, _ in ins.extra.get("loops", ()) if lid in cut_loops)
    return total


def _work(simulated: float, timed: float) -> int:
    """The cost of simulating `simulated` instructions and timing `timed` with the model, in
    instructions simulated and timed once each (what the full path pays per instruction)."""
    return round(SIMULATE_SHARE * simulated + (1 - SIMULATE_SHARE) * timed)


def sampled_latency(kernel, inputs: dict, hw: HardwareDescription, keep: int = KEEP, serve_repeats: bool = True,
                    stop_above_ns: float = math.inf, **sim_options) -> SampledLatency:
    """The latency of `kernel` on `inputs` (shapes) as the full timing-only path estimates it,
    from one run that cuts long loops after `keep` iterations (and STEP more, for the longer
    views); the whole kernel where that would not save much. `serve_repeats`: as `estimate`'s.
    `stop_above_ns`: stop at the first floor (`_Floors`) that reaches it (ranking: a candidate
    that cannot beat the best so far needs no more said of it)."""
    floors = _Floors(stop_above_ns)
    with cyclic_gc_paused():  # the views are made between simulation and estimates (trace.py says why)
        try:
            return _sampled_latency(kernel, inputs, hw, keep, sim_options, serve_repeats, floors)
        except _Stop:
            work, ns = floors.seen[-1]
            return SampledLatency(ns, work, False, {}, tuple(floors.seen), True)


class _Stop(Exception):
    """A floor reached the caller's stop: the runs end there."""


class _Floors:
    """Checkpoints (work spent, floor of the latency) after each estimate of a sampled run. The
    floor is the cut run's latency plus, for each group of loops timed so far, what the formula
    adds for it (groups not yet timed add at least nothing), and at least the busy time of each
    engine (or of the DMA bandwidth) in the whole kernel as far as the runs so far show it: the cut
    run's, and the skipped iterations of loops, each as busy as an iteration seen (an untrusted
    loop's, which may fill time the cut run's engines idled, counts there only). The highest so
    far is kept, so floors only grow; each is the model's own, not a second model: what ranking
    may stop on."""

    def __init__(self, stop_above_ns: float):
        self.stop_above_ns, self.seen = stop_above_ns, []

    def at(self, work: int, ns: float) -> None:
        ns = max(ns, self.seen[-1][1]) if self.seen else ns  # each is a floor: the highest so far holds
        self.seen.append((work, ns))
        if ns >= self.stop_above_ns:
            raise _Stop


def _sampled_latency(kernel, inputs: dict, hw: HardwareDescription, keep: int, sim_options: dict,
                     serve_repeats: bool, floors: _Floors) -> SampledLatency:
    work = 0
    estimate = functools.partial(estimate_trace, serve_repeats=serve_repeats)

    def whole() -> SampledLatency:
        nonlocal work
        res = simulate(kernel, inputs, target=hw, timing_only=True, **sim_options)
        work += _work(len(res.trace), len(res.trace))
        return SampledLatency(estimate(res.trace, hw).latency_ns, work, True, {}, tuple(floors.seen))

    counts = static_counts(kernel.source, kernel.name, keep)
    if counts is not None and counts[0] < counts[2] and _work(counts[1], counts[0] + counts[1]) > SAVING * counts[2]:
        return whole()  # not even one longer run pays
    untrusted: dict = {}  # loops whose extension was not trusted: they run whole
    first = None  # the cut run alone, run first where a floor may stop the runs (ranking)
    if counts is not None and counts[0] < counts[2] and math.isfinite(floors.stop_above_ns):
        first = _cut_run_first(kernel, inputs, hw, keep, sim_options, estimate, floors)
        work = first.work
        if first.sampling is None:
            return SampledLatency(first.estimate.latency_ns, work, True, {}, tuple(floors.seen))
    while True:
        run = (LoopSampling(keep, STEP, decided=dict(untrusted)) if first is None else
               LoopSampling(keep, STEP, decided=dict(first.sampling.decided), runs=dict(first.sampling.runs)))
        base_trace = simulate(kernel, inputs, target=hw, timing_only=True, sampling=run, **sim_options).trace
        simulated = len(run.trace)
        cut = run.view()
        if not cut.cut:
            work += _work(simulated, len(base_trace))
            return SampledLatency(estimate(base_trace, hw).latency_ns, work, True, {}, tuple(floors.seen))
        todo = _groups(cut)
        timed = len(base_trace) + sum(sum(map(run.view(g).keeps, run.trace)) for g in todo)
        if _work(simulated, timed) > SAVING * _uncut_instructions(base_trace, _cut_loops(cut)):
            work += _work(simulated, 0)
            return whole()
        if first is None:
            base = estimate(base_trace, hw, cut_loops=_cut_loops(cut))
            work += _work(simulated, len(base_trace))
        else:  # the cut run's own estimate: its trace is this run's cut view
            base, first = first.estimate, None
            work += _work(simulated, 0)
        latency, loops, refused = base.latency_ns, {}, []
        # the floor of the engines' busy time: the cut run's, and the refused loops' at full length
        busy = dict(base.engine_busy_ns)
        floors.at(work, latency)
        while todo:
            group = todo.pop(0)
            longer = run.view(group)
            trace = longer.accounting().trace
            work += _work(0, len(trace))
            est = estimate(trace, hw, cut_loops=_cut_loops(longer), busy_of=lambda ins: _extra_iteration(ins, longer))
            step = cut.step_of(group[0])
            added = (est.latency_ns - base.latency_ns) / step
            # each loop's extra iterations keep at least its busiest engine (or the DMA bandwidth) busy
            busiest = sum(max((ns for (line, _), ns in est.busy_by.items() if line == g), default=0.0)
                          for g in group) / step
            m = _multiple(cut, group[0])
            if added < TRUST * busiest:
                if len(group) > 1:  # one of them may be hidden behind other work: each on its own
                    todo[:0] = [(line,) for line in group]
                else:
                    refused.append(group[0])
                    for (line, engine), ns in est.busy_by.items():
                        if line == group[0]:
                            busy[engine] = busy.get(engine, 0.0) + float(m) * ns / step
                    floors.at(work, max(busy.values()))
                continue
            latency += float(m) * max(added, busiest)
            floors.at(work, latency)
            instances = sum(cut.cut[g] for g in group)
            for g in group:
                loops[g] = (float(cut.cut[g] * m), cut.cut[g], max(added, busiest) / instances)
        if not refused:
            return SampledLatency(latency, work, False, loops, tuple(floors.seen))
        untrusted.update(dict.fromkeys(refused, False))


class _CutRun(NamedTuple):
    estimate: object  # perfmodel.Estimate of the cut run
    sampling: LoopSampling | None  # which loops it cut, and how; None: none, the whole kernel ran
    work: int


def _cut_run_first(kernel, inputs, hw, keep, sim_options, estimate, floors: "_Floors") -> _CutRun:
    """The cut run alone, after the floors of its latency and of the engines' busy time
    (`_busy_floor`): a candidate ranking would stop stops here, before the longer runs."""
    run = LoopSampling(keep, 0)
    trace = simulate(kernel, inputs, target=hw, timing_only=True, sampling=run, **sim_options).trace
    cut = run.view()
    if not cut.cut:
        return _CutRun(estimate(trace, hw), None, _work(len(trace), len(trace)))
    cut_ids = {lid for lid, line in cut.line_of.items() if line in cut.cut}
    base = estimate(trace, hw, cut_loops=_cut_loops(cut),
                    busy_of=lambda ins: tuple((lid, i) for lid, i, _ in ins.extra.get("loops", ()) if lid in cut_ids))
    work = _work(len(trace), len(trace))
    floors.at(work, base.latency_ns)
    floors.at(work, _busy_floor(cut, base))
    return _CutRun(base, run, work)


def _busy_floor(cut: View, base) -> float:
    """A floor of the whole kernel's latency from the cut run's estimate `base` (its `busy_by`
    keyed by the cut loops' (loop id, iteration) path of an instruction): the busiest engine's
    (or the DMA bandwidth's) busy time in the whole kernel, at least its time in the cut run plus,
    for each skipped iteration of a cut loop L (skipped(L) x scale(L), as the formula counts them),
    the least of L's iterations after the first in the cut run (the first may hold work later ones
    are spared: a load the model hoists out of the loop). Not the cut run's latency plus that: the
    extra work may fill time an engine idled in the cut run (a loop hidden behind loads)."""
    per_iteration: dict = {}  # (loop id, iteration) -> {engine: busy ns}, its loops within included
    for (path, engine), ns in base.busy_by.items():
        for step in path:
            engines = per_iteration.setdefault(step, {})
            engines[engine] = engines.get(engine, 0.0) + ns
    least: dict = {}  # loop line -> {engine: least busy ns of an iteration after the first}
    for (lid, i), engines in per_iteration.items():
        if i == 0:
            continue
        seen = least.setdefault(cut.line_of[lid], dict(engines))
        for engine in set(seen) | set(engines):
            seen[engine] = min(seen.get(engine, 0.0), engines.get(engine, 0.0))
    busy = dict(base.engine_busy_ns)
    for line, engines in least.items():
        skipped = float(_multiple(cut, line) * cut.cut[line])  # skipped(L) x scale(L)
        for engine, ns in engines.items():
            busy[engine] = busy.get(engine, 0.0) + skipped * ns
    return max(busy.values(), default=0.0)


_LOOPS = ("affine_range", "sequential_range", "static_range")
_NOT_INSTRUCTIONS = ("ndarray", "ds", "arange", "par_dim")  # nl calls that issue nothing


def static_counts(source: str, name: str | None = None, keep: int = KEEP) -> tuple[int, int, int] | None:
    """(instructions the cut run issues, instructions the sampled run issues (cut loops STEP
    iterations longer), instructions the whole kernel issues), counted from the source of kernel
    `name` (None: the module's first function) whose loops are `nl.*_range` over literal integers
    and whose instructions are `nisa.*` calls, cut by the simulator's rule (simulator/sampling.py:
    `LoopSampling.decide` on the iterations and what the first, itself cut, issues); None for any
    other."""
    try:
        fn = next(n for n in ast.parse(source).body if isinstance(n, ast.FunctionDef) and name in (None, n.name))
        return _counts(fn.body, keep)
    except (SyntaxError, StopIteration, _Unknown):
        return None


class _Unknown(Exception):
    """A statement whose instruction count the source does not give."""


def _counts(body: list, keep: int) -> tuple[int, int, int]:
    cut = sampled = whole = 0
    for stmt in body:
        if isinstance(stmt, ast.For):
            trip = _trip(stmt.iter)
            if stmt.orelse:
                raise _Unknown
            inner_cut, inner_sampled, inner_whole = _counts(stmt.body, keep)
            rule = LoopSampling(keep, STEP)  # the simulator's own rule, on this loop
            rule.decide(0, trip, inner_cut)
            runs, step = (rule.keep_of(0), rule.extra_of(0)) if rule.decided[0] else (0, 0)
            if runs:  # inside its extra iterations, the loops within run as in the cut run
                cut += min(trip, runs) * inner_cut
                sampled += min(trip, runs) * inner_sampled + (min(trip, runs + step) - min(trip, runs)) * inner_cut
            else:
                cut += trip * inner_cut
                sampled += trip * inner_sampled
            whole += trip * inner_whole
        elif isinstance(stmt, (ast.Expr, ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Assert, ast.Return, ast.Pass)):
            n = sum(_issues(c) for c in ast.walk(stmt) if isinstance(c, ast.Call))
            cut, sampled, whole = cut + n, sampled + n, whole + n
        else:  # if, while, with, try, a nested def: control the source does not count
            raise _Unknown
    return cut, sampled, whole


def _trip(it) -> int:
    if not (isinstance(it, ast.Call) and isinstance(it.func, ast.Attribute) and it.func.attr in _LOOPS
            and not it.keywords and all(isinstance(a, ast.Constant) and type(a.value) is int for a in it.args)):
        raise _Unknown
    bounds = [a.value for a in it.args]
    return len(range(*bounds))


def _issues(call: ast.Call) -> int:
    """1 for an instruction (`nisa.*`), 0 for an allocation or index helper (`nl.ndarray`, ...)."""
    f = call.func
    if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name):
        if f.value.id == "nisa":
            return 1
        if f.value.id == "nl" and f.attr in _NOT_INSTRUCTIONS:
            return 0
    if isinstance(f, ast.Name) and f.id in ("tuple", "len", "range", "int", "min", "max"):
        return 0
    raise _Unknown


def _extra_iteration(ins, longer: View):
    """The line of the longer loop whose extra iterations (from its `keep` on) issued `ins`, or None."""
    for loop_id, i, _ in ins.extra.get("loops", ()):
        line = longer.line_of.get(loop_id)
        if line in longer.longer and i >= longer.keep_of(line):
            return line
    return None
