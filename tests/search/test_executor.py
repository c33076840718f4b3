"""Timing runs several at a time (search/executor.py): concurrent sandboxed children, a ranking
that takes outcomes in candidate order whatever finishes first, and the same winner with one
worker, two workers and a local Ray instance."""
import json
import os
import time
from pathlib import Path

import pytest

from axon.errors import KernelError
from axon.search.executor import LocalProcesses, make_executor
from axon.search.select import ResultCache, Timing, rank
from axon.targets.trainium.simulator import sandbox

needs_fork = pytest.mark.skipif(not hasattr(os, "fork"), reason="the sandbox needs fork")


@needs_fork
def test_children_run_at_once_and_each_answers_its_own():
    start = time.monotonic()
    slow = sandbox.start(lambda: (time.sleep(0.6), "slow")[1], "slow")
    fast = sandbox.start(lambda: (time.sleep(0.6), "fast")[1], "fast")
    assert slow.result() == "slow" and fast.result() == "fast"
    assert time.monotonic() - start < 1.1  # side by side, not one after the other


@needs_fork
def test_a_sibling_that_answers_first_with_a_large_value_does_not_block():
    big = sandbox.start(lambda: b"x" * (8 << 20), "big")  # far past a pipe's buffer
    late = sandbox.start(lambda: (time.sleep(0.3), 1)[1], "late")
    assert late.result() == 1 and len(big.result()) == 8 << 20


@needs_fork
def test_a_hung_child_is_killed_at_its_limit_while_its_sibling_answers():
    hung = sandbox.start(lambda: time.sleep(60), "hung", sandbox.Limits(timeout_s=0.5))
    fine = sandbox.start(lambda: 7, "fine")
    start = time.monotonic()
    assert fine.result() == 7
    with pytest.raises(KernelError, match="wall-clock limit"):
        hung.result()
    assert time.monotonic() - start < 8


@needs_fork
def test_a_cancelled_child_is_gone():
    child = sandbox.start(lambda: time.sleep(60), "cancelled")
    child.cancel()
    with pytest.raises(ChildProcessError):
        os.waitpid(child.pid, os.WNOHANG)
    assert child not in sandbox._RUNNING


class _Cand:
    def __init__(self, i):
        self.source = f"kernel {i}"


class _FakeTarget:
    """Latency and work read off the source; a run's outcome comes when it is asked for."""

    name, cancelled, started = "fake", 0, 0

    def model_fingerprint(self):
        return "fake-model"


class _Pending:
    def __init__(self, target, source, stop_above_ns=float("inf")):
        self.target, self.i = target, int(source.split()[1])

    def result(self):
        from axon.targets.trainium.target import Measured

        return Measured(latency_ns=1000.0 + (self.i * 37) % 11, outputs=None, estimate=None, work=400)

    def cancel(self):
        self.target.cancelled += 1


class _OutOfOrder:
    """Submits up to `workers` ahead; outcomes are read in any order the test likes."""

    keeps_schedule = False

    def __init__(self, workers):
        self.workers = workers

    def submit(self, target, source, shapes, stop_above_ns=float("inf")):
        target.started += 1
        return (_Stopping if source.startswith("floors") else _Pending)(target, source, stop_above_ns)


def test_ranking_takes_outcomes_in_candidate_order_for_any_worker_count():
    cands = [_Cand(i) for i in range(20)]
    results = {}
    for workers in (1, 2, 5):
        target = _FakeTarget()
        # 0.25 budget seconds = 2500 work: five runs of 500 (400 simulated + the start-up)
        out = rank(target, cands, {}, ResultCache(None), budget_s=0.25, executor=_OutOfOrder(workers))
        results[workers] = [(c.source, t.latency_ns) for c, t in out]
        assert len(out) == 5
        assert target.started - target.cancelled == 5  # runs started ahead of the budget's end are stopped
    assert results[1] == results[2] == results[5]


class _Stopping(_Pending):
    """A sampled run whose floors are in its source ("floors I w:f w:f ... latency work"): it
    stops at the first floor that reaches its stop, as sampled_timing does."""

    def __init__(self, target, source, stop_above_ns):
        super().__init__(target, source)
        *floors, self.latency, self.work = source.split()[2:]
        self.floors = tuple((int(w), float(f)) for w, f in (p.split(":") for p in floors))
        self.stop = stop_above_ns

    def result(self):
        from axon.targets.trainium.target import Measured

        for k, (w, f) in enumerate(self.floors):
            if f >= self.stop:
                return Measured(f, None, None, w, False, self.floors[:k + 1], True)
        return Measured(float(self.latency), None, None, int(self.work), False, self.floors)


def test_a_run_past_the_best_stops_at_its_floor_the_same_for_any_worker_count_and_cache(tmp_path):
    """A candidate whose floor passes the best latency before it by the margin stops there: it is
    charged the work spent to that floor and ranks after every finished one; which candidates stop
    and what each costs depend only on the order, not on the workers or what the cache holds."""
    sources = ["floors 0 300:400 600:900 900 800",  # the best so far: 900
               "floors 1 300:500 600:2000 900:5000 5000 900",  # 2000 > 1.1 x 900: stops at 600
               "floors 2 300:700 600:850 850 800",  # finishes: the new best
               "floors 3 300:900 600:940 1000 900",  # 940 passes 1.1 x 850 = 935: stops
               "floors 4 300:500 600:920 920 800"]  # within the margin of the best: timed to the end
    cands = [type("C", (), {"source": s})() for s in sources]
    want = [("floors 2", 850.0, 900, False), ("floors 0", 900.0, 900, False), ("floors 4", 920.0, 900, False),
            ("floors 3", 940.0, 700, True), ("floors 1", 2000.0, 700, True)]
    seen = []
    for workers, cache in ((1, None), (2, None), (5, None), (2, tmp_path), (1, tmp_path), (5, tmp_path)):
        out = rank(_FakeTarget(), cands, {}, ResultCache(cache), budget_s=10, executor=_OutOfOrder(workers))
        seen.append([(c.source[:8], t.latency_ns, t.work, t.pruned) for c, t in out])
    assert all(s == want for s in seen), seen
    # a stored run that stopped below the limit now in force (none: no best before it) runs again
    rank(_FakeTarget(), cands, {}, ResultCache(tmp_path / "one"), budget_s=10, executor=_OutOfOrder(1))
    target = _FakeTarget()
    alone = rank(target, cands[1:2], {}, ResultCache(tmp_path / "one"), budget_s=10, executor=_OutOfOrder(1))
    assert target.started == 1 and alone[0][1] == Timing(5000.0, "", 1000, False)


def test_cached_timings_are_read_not_run(tmp_path):
    cands = [_Cand(i) for i in range(4)]
    cache = ResultCache(tmp_path)
    first = rank(_FakeTarget(), cands, {}, cache, budget_s=10, executor=_OutOfOrder(2))
    again_target = _FakeTarget()
    again = rank(again_target, cands, {}, cache, budget_s=10, executor=_OutOfOrder(2))
    assert again_target.started == 0
    assert [(c.source, t) for c, t in again] == [(c.source, t) for c, t in first]
    assert all(isinstance(t, Timing) and t.work == 500 for _, t in again)


def test_a_worker_with_another_model_stops_the_search():
    from axon.search.executor import ExecutorError, _RayPending

    class FakeRay:
        def get(self, ref):
            return "other-model", None

    class Remote:
        workers, keeps_schedule = 1, False

        def submit(self, target, source, shapes, stop_above_ns=float("inf")):
            return _RayPending(FakeRay(), None, target.model_fingerprint())

    with pytest.raises(ExecutorError, match="install the same Axon on every node"):
        rank(_FakeTarget(), [_Cand(0)], {}, ResultCache(None), budget_s=1, executor=Remote())


def test_bad_worker_counts_are_one_clear_error():
    from axon.errors import InputError

    with pytest.raises(InputError, match="--workers must be at least 1"):
        make_executor(0)


@needs_fork
@pytest.mark.slow
def test_the_winner_is_the_same_with_one_worker_two_workers_and_ray(tmp_path):
    from axon.search.optimize import optimize

    ray = pytest.importorskip("ray")  # the [test] extra installs it: CI runs this
    from axon.search.executor import RayCluster

    def run(executor):
        out = tmp_path / str(len(list(tmp_path.iterdir())))
        r = optimize("rmsnorm_matmul", "small", budget_s=5, cache=ResultCache(None), executor=executor, out_dir=out)
        assert json.loads(Path(r.trace_path).read_text())  # the winner's trace, wherever it was timed
        return r.kernel_source, r.latency_ns, r.candidates

    one = run(LocalProcesses(1))
    assert run(LocalProcesses(2)) == one
    try:
        assert run(RayCluster("local")) == one
    finally:
        ray.shutdown()
