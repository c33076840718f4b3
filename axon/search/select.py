"""Empirical selection: rank candidates by the performance model, check the best numerically.

1. Every candidate runs on the simulator in timing-only mode (no arithmetic, shapes only), with
   its long loops cut short and extended (the target's sampled timing): its instruction trace
   goes through the performance model. This is the cheap ranking. A run whose latency's floor
   (the sampled timing's, after each estimate) passes the best latency of the candidates before
   it by PRUNE_MARGIN stops there: it cannot win, and the budget is charged only what it spent.
2. In latency order, candidates are run with data (random inputs, full size) and compared with
   the NumPy reference (float64); the first that passes wins. A candidate whose simulation fails
   or whose numbers disagree is counted and skipped. `optimize` then times the winner (and the
   baseline, where its ranking timing was sampled) on the full path: reported latencies are
   never extensions.

Tolerances: per element, |out - ref| <= the bound floating-point error analysis gives a correct
kernel at that element (axon.semantics.bounds: the dtypes, the reduction lengths, the element's
own magnitudes; never a fraction of the largest output), against the float64 reference.

Results are cached in the kernel database (search/database.py) by (candidate source, target, the
target's model fingerprint, input shapes) so a rerun pays nothing and a changed model measures again. Timings carry no roofline:
the roofline is the program's, one per case (`search.roofline`), never a candidate's own.
Invariant: shared stage; the target is reached through `target.run`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Iterable, Optional

from axon.errors import AxonError
from axon.search.database import KernelDB, default_dir
from axon.search.executor import ExecutorError, LocalProcesses
from axon.semantics.bounds import Check, Tolerance, compare  # noqa: F401 (the check, defined once)


@dataclass
class Timing:
    latency_ns: float
    error: str = ""
    work: int = 0  # what the run cost in the budget's units (cached with it: a hit costs the same)
    exact: bool = True  # False: extended from loop samples (sampled_timing.py), not the full path
    pruned: bool = False  # stopped at a floor past the best before it: latency_ns is that floor


# Ranking budgets count work, not seconds, so the same inputs rank the same candidates on any
# machine, under any load and with any cache state: a run costs the instructions it simulated
# (Measured.work) plus a fixed start-up; a budget of s seconds is s x WORK_PER_S of that, the
# rate of the timing-only simulation on a 2-core machine (7,000 to 14,000 instructions a second
# on gqa kernels; ~10 ms to start one run).
WORK_PER_S = 10_000
WORK_PER_RUN = 100
# A run stops once its latency's floor reaches the best latency taken before it times (1 + this):
# a candidate within the margin is always timed to the end (the floor is the sampled timing's own
# extension, exact only as far as its loops' iterations cost alike)
PRUNE_MARGIN = 0.1


# timings live in the kernel database (search/database.py); the name selection has always used
ResultCache = KernelDB


def default_cache() -> KernelDB:
    """The database under AXON_CACHE_DIR (default ~/.cache/axon; empty: none)."""
    return KernelDB(default_dir())


def timing_key(cache: ResultCache, target, source: str, inputs: dict) -> str:
    # the model's fingerprint is in the key: a corrected model never serves an old latency
    return cache.key("sampled timing", target.name, target.model_fingerprint(), source,
                     *(f"{k}{v.shape}{v.dtype}" for k, v in sorted(inputs.items())))


class _Timings:
    """The timings of `sources`, taken in order, with up to `executor.workers` fresh runs in flight
    ahead of the one taken (cached ones are read, not run). Outcomes are used in order only, so the
    executor never changes what is decided: candidate i is pruned exactly when one of its floors
    reaches `_limit` of the best latency before it (`take`'s `best_ns`), whichever run or cache
    entry gave the floors. A run started ahead stops at the limit of the best known at its start,
    which is no lower, so its floors reach the one that decides."""

    def __init__(self, target, candidates: "_Pulled", inputs: dict, cache: ResultCache, executor):
        self.target, self.candidates, self.inputs, self.cache = target, candidates, inputs, cache
        self.executor = executor
        self.started: dict = {}  # index -> (key, record) for a cached one, (key, pending run) for a fresh one
        self.next = 0
        self.best_ns = math.inf  # the best latency taken so far (rank keeps it)

    def take(self, i: int, best_ns: float) -> Timing:
        self._fill(i)
        key, got = self.started.pop(i)
        if not isinstance(got, dict):
            try:
                m = got.result()
                got = {"latency_ns": m.latency_ns, "error": "", "work": WORK_PER_RUN + getattr(m, "work", 0),
                       "exact": getattr(m, "exact", True), "stopped": getattr(m, "stopped", False),
                       "floors": [[WORK_PER_RUN + w, f] for w, f in getattr(m, "floors", ())]}
            except ExecutorError:
                raise
            except AxonError as err:
                got = {"latency_ns": float("inf"), "error": str(err), "work": WORK_PER_RUN, "exact": True,
                       "stopped": False, "floors": []}
            if "KernelError" not in got["error"]:
                self.cache.put(key, got)
        return _decided(got, best_ns)

    def cancel(self) -> None:
        """Stop the runs started ahead of what was taken (the budget ended before them)."""
        for _, got in self.started.values():
            if not isinstance(got, dict):
                got.cancel()
        self.started.clear()

    def _fill(self, i: int) -> None:
        self.next = max(self.next, i)
        in_flight = sum(not isinstance(got, dict) for _, got in self.started.values())
        ahead = self.executor.workers > 1  # one worker: nothing is started before it is taken
        while (self.next <= i or (ahead and in_flight < self.executor.workers)) and self.candidates.reaches(self.next):
            source = self.candidates.items[self.next].source
            key = timing_key(self.cache, self.target, source, self.inputs)
            hit = _valid_timing(self.cache.get(key))
            if hit is None or (hit["stopped"] and not _reaches(hit, _limit(self.best_ns))):
                hit = self.executor.submit(self.target, source, self.inputs, stop_above_ns=_limit(self.best_ns))
                in_flight += 1
            self.started[self.next] = (key, hit)
            self.next += 1


def _limit(best_ns: float) -> float:
    return best_ns * (1 + PRUNE_MARGIN)


def _reaches(record: dict, limit: float):
    """The first (work, floor) of `record` at or past `limit`, or None."""
    return next(((w, f) for w, f in record["floors"] if f >= limit), None)


def _decided(record: dict, best_ns: float) -> Timing:
    """The timing a record gives the candidate taken after a best latency of `best_ns`."""
    stop = _reaches(record, _limit(best_ns))
    if stop is not None:
        return Timing(stop[1], "", stop[0], False, pruned=True)
    if record["stopped"]:  # stopped below this limit: cannot happen (runs stop at a higher one)
        raise AssertionError("a timing run stopped below the limit that decides it")
    return Timing(record["latency_ns"], record["error"], record["work"], record["exact"])


class _Pulled:
    """Candidates from a list or an iterator (emitted as they are pulled: optimize's plans),
    pulled as far as ranking has reached."""

    def __init__(self, candidates):
        self.items, self._rest = [], iter(candidates)

    def reaches(self, i: int) -> bool:
        """Whether there is an i-th candidate (pulling up to it)."""
        while len(self.items) <= i:
            nxt = next(self._rest, None)
            if nxt is None:
                return False
            self.items.append(nxt)
        return True


def _valid_timing(value) -> Optional[dict]:
    """A cached timing record as written by `_Timings.take`, or None (a miss: measured again and
    overwritten) for anything else, a hand-edited or truncated file included."""
    if not isinstance(value, dict) or not isinstance(value.get("error", ""), str):
        return None
    latency, work, exact = value.get("latency_ns"), value.get("work"), value.get("exact")
    stopped, floors = value.get("stopped", False), value.get("floors", [])
    if isinstance(latency, bool) or not isinstance(latency, (int, float)) or not isinstance(exact, bool):
        return None
    if isinstance(work, bool) or not isinstance(work, int) or work < WORK_PER_RUN:
        return None
    if not isinstance(stopped, bool) or not isinstance(floors, list) or not all(
            isinstance(p, list) and len(p) == 2 and type(p[0]) is int and isinstance(p[1], (int, float))
            and not isinstance(p[1], bool) for p in floors):
        return None
    error = value.get("error", "")
    ok = math.isfinite(latency) and latency > 0 and not error
    failed = latency == float("inf") and error
    if not (ok or failed) or (stopped and not floors):
        return None
    return {"latency_ns": float(latency), "error": error, "work": work, "exact": exact, "stopped": stopped,
            "floors": [[w, float(f)] for w, f in floors]}


def start_check_run(target, source: str, inputs: dict, partial: bool = False):
    """The run of `source` with data, started in its sandbox and not waited for: the caller
    computes the reference meanwhile and gives the run to check_candidate (`started`)."""
    return target.run(source, inputs, timing_only=False, partial=partial, timed=False, wait=False)


def check_candidate(target, source: str, inputs: dict, expected: tuple, tolerance: Tolerance,
                    outputs_of: Optional[Callable[[list], list]] = None, started=None) -> Check:
    """Run `source` with data and compare its outputs (or `outputs_of` them: the rows a partial
    check's kernel ran, the others left unwritten) with `expected` under `tolerance`; `started`:
    that run, already under way (start_check_run)."""
    try:
        m = (started.result() if started is not None
             else target.run(source, inputs, timing_only=False, partial=outputs_of is not None, timed=False))
    except AxonError as err:
        return Check(False, float("inf"), 0.0, str(err), tolerance=tolerance.summary())
    return compare(m.outputs if outputs_of is None else outputs_of(m.outputs), expected, tolerance)


def rank(target, candidates: Iterable, inputs: dict, cache: ResultCache, budget_s: float,
         progress: Optional[Callable[[str], None]] = None, executor=None,
         best_ns: float = math.inf) -> list[tuple[object, Timing]]:
    """Timing-only runs of the candidates, loop-sampled (sampled_timing.py), in order, until
    `budget_s` x WORK_PER_S of work is spent (a deterministic budget: see WORK_PER_S), fastest
    first and the pruned ones (`Timing.pruned`, stopped at a floor) last; `executor`
    (search.executor; default one run at a time) runs them, several at once. `candidates` may be
    an iterator (each pulled when ranking, or a run started ahead, needs it); `best_ns`: the best
    latency of an earlier ranking of the same case, which prunes from the start."""
    budget = budget_s * WORK_PER_S
    of = f" of {len(candidates)}" if isinstance(candidates, list) else ""
    pulled = _Pulled(candidates)
    timings = _Timings(target, pulled, inputs, cache, executor or LocalProcesses(1))
    timings.best_ns = best_ns
    out = []
    spent, longest = 0, 0  # the costliest single run so far: a run that would overshoot is not taken
    try:
        i = 0
        while pulled.reaches(i):
            if out and spent + longest > budget:
                if progress:
                    progress(f"ranking budget spent after {i}{of} candidates")
                break
            t = timings.take(i, timings.best_ns)
            out.append((pulled.items[i], t))
            spent, longest = spent + t.work, max(longest, t.work)
            if not t.pruned and not t.error:
                timings.best_ns = min(timings.best_ns, t.latency_ns)
            i += 1
            if progress and i % 10 == 0:
                progress(f"ranked {i}{of} (best so far {timings.best_ns / 1e3:.1f} us)")
    finally:
        timings.cancel()
    out.sort(key=lambda ct: (ct[1].pruned, ct[1].latency_ns))
    return out
