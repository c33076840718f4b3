"""Empirical selection: rank candidates by the performance model, check the best numerically.

1. Every candidate runs on the simulator in timing-only mode (no arithmetic, shapes only), with
   its long loops cut short and extended (the target's sampled timing): its instruction trace
   goes through the performance model. This is the cheap ranking.
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


# Ranking budgets count work, not seconds, so the same inputs rank the same candidates on any
# machine, under any load and with any cache state: a run costs the instructions it simulated
# (Measured.work) plus a fixed start-up; a budget of s seconds is s x WORK_PER_S of that, the
# rate of the timing-only simulation on a 2-core machine (7,000 to 14,000 instructions a second
# on gqa kernels; ~10 ms to start one run).
WORK_PER_S = 10_000
WORK_PER_RUN = 100


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
    executor never changes what is decided."""

    def __init__(self, target, candidates: "_Pulled", inputs: dict, cache: ResultCache, executor):
        self.target, self.candidates, self.inputs, self.cache = target, candidates, inputs, cache
        self.executor = executor
        self.started: dict = {}  # index -> (key, Timing) for a cached one, (key, pending run) for a fresh one
        self.next = 0

    def take(self, i: int) -> Timing:
        self._fill(i)
        key, got = self.started.pop(i)
        if isinstance(got, Timing):
            return got
        try:
            m = got.result()
            t = Timing(m.latency_ns, work=WORK_PER_RUN + getattr(m, "work", 0), exact=getattr(m, "exact", True))
        except ExecutorError:
            raise
        except AxonError as err:
            t = Timing(float("inf"), str(err), WORK_PER_RUN)
        if t.error == "" or "KernelError" not in t.error:
            self.cache.put(key, {"latency_ns": t.latency_ns, "error": t.error, "work": t.work, "exact": t.exact})
        return t

    def cancel(self) -> None:
        """Stop the runs started ahead of what was taken (the budget ended before them)."""
        for _, got in self.started.values():
            if not isinstance(got, Timing):
                got.cancel()
        self.started.clear()

    def _fill(self, i: int) -> None:
        self.next = max(self.next, i)
        in_flight = sum(not isinstance(got, Timing) for _, got in self.started.values())
        ahead = self.executor.workers > 1  # one worker: nothing is started before it is taken
        while (self.next <= i or (ahead and in_flight < self.executor.workers)) and self.candidates.reaches(self.next):
            source = self.candidates.items[self.next].source
            key = timing_key(self.cache, self.target, source, self.inputs)
            hit = _valid_timing(self.cache.get(key))
            if hit is None:
                hit = self.executor.submit(self.target, source, self.inputs)
                in_flight += 1
            self.started[self.next] = (key, hit)
            self.next += 1


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


def _valid_timing(value) -> Optional[Timing]:
    """A cached timing as written by `_Timings.take`, or None (a miss: measured again and
    overwritten) for anything else, a hand-edited or truncated file included."""
    if not isinstance(value, dict) or not isinstance(value.get("error", ""), str):
        return None
    latency, work, exact = value.get("latency_ns"), value.get("work"), value.get("exact")
    if isinstance(latency, bool) or not isinstance(latency, (int, float)) or not isinstance(exact, bool):
        return None
    if isinstance(work, bool) or not isinstance(work, int) or work < WORK_PER_RUN:
        return None
    error = value.get("error", "")
    ok = math.isfinite(latency) and latency > 0 and not error
    failed = latency == float("inf") and error
    return Timing(float(latency), error, work, exact) if ok or failed else None


def start_check_run(target, source: str, inputs: dict, partial: bool = False):
    """The run of `source` with data, started in its sandbox and not waited for: the caller
    computes the reference meanwhile and gives the run to check_candidate (`started`)."""
    return target.run(source, inputs, timing_only=False, partial=partial, wait=False)


def check_candidate(target, source: str, inputs: dict, expected: tuple, tolerance: Tolerance,
                    outputs_of: Optional[Callable[[list], list]] = None, started=None) -> Check:
    """Run `source` with data and compare its outputs (or `outputs_of` them: the rows a partial
    check's kernel ran, the others left unwritten) with `expected` under `tolerance`; `started`:
    that run, already under way (start_check_run)."""
    try:
        m = (started.result() if started is not None
             else target.run(source, inputs, timing_only=False, partial=outputs_of is not None))
    except AxonError as err:
        return Check(False, float("inf"), 0.0, str(err), tolerance=tolerance.summary())
    return compare(m.outputs if outputs_of is None else outputs_of(m.outputs), expected, tolerance)


def rank(target, candidates: Iterable, inputs: dict, cache: ResultCache, budget_s: float,
         progress: Optional[Callable[[str], None]] = None, executor=None) -> list[tuple[object, Timing]]:
    """Timing-only runs of the candidates, loop-sampled (sampled_timing.py), in order, until
    `budget_s` x WORK_PER_S of work is spent (a deterministic budget: see WORK_PER_S), fastest
    first; `executor` (search.executor; default one run at a time) runs them, several at once.
    `candidates` may be an iterator (each pulled when ranking, or a run started ahead, needs it)."""
    budget = budget_s * WORK_PER_S
    of = f" of {len(candidates)}" if isinstance(candidates, list) else ""
    pulled = _Pulled(candidates)
    timings = _Timings(target, pulled, inputs, cache, executor or LocalProcesses(1))
    out = []
    spent, longest = 0, 0  # the costliest single run so far: a run that would overshoot is not taken
    try:
        i = 0
        while pulled.reaches(i):
            if out and spent + longest > budget:
                if progress:
                    progress(f"ranking budget spent after {i}{of} candidates")
                break
            t = timings.take(i)
            out.append((pulled.items[i], t))
            spent, longest = spent + t.work, max(longest, t.work)
            i += 1
            if progress and i % 10 == 0:
                best = min(t.latency_ns for _, t in out)
                progress(f"ranked {i}{of} (best so far {best / 1e3:.1f} us)")
    finally:
        timings.cancel()
    out.sort(key=lambda ct: ct[1].latency_ns)
    return out
