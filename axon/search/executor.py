"""Where candidate timings run: one interface, two executors.

Selection hands an executor a *timing task* (a target, a kernel's source, its input shapes, the
floor of the latency at which the run may stop: select.rank's best so far) and later asks for the
outcome; several tasks may be in flight at once. What comes back is the
target's `Measured` (a loop-sampled timing-only latency, sampled_timing.py: whether it is the
full path's, and the work it cost) or the `AxonError` the run raised.

- `LocalProcesses(n)`: up to n sandboxed simulations at once, each a child forked from this
  process's one thread (`target.run(..., wait=False)`), so a pool needs no start-up and no
  import in its workers (the default: one per usable core; 1 is one run after another);
- `RayCluster(address)`: tasks as Ray remote calls (`ray` is the optional extra `[ray]`), for a
  cluster; each worker runs the same target in its own sandbox and says which model it ran, and a
  worker with another model than this process is an error, never a silently different latency.

Executors never decide anything: `select.rank` takes outcomes in candidate order and applies the
budget to them in that order, so the winner is the same for any executor and any worker count.
A machine with a NeuronCore that compiles and times candidates for real (the paper's phase 2)
plugs in as another executor whose tasks answer with measured latencies.
"""
from __future__ import annotations

import math
import os
from typing import Optional

from axon.errors import AxonError, InputError


class ExecutorError(InputError):
    """The executor itself is wrong (a worker with another model): the search stops, no candidate
    is blamed."""


def usable_cpus() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


class LocalProcesses:
    """Up to `workers` sandboxed timing runs at once on this machine (1: one after another)."""

    def __init__(self, workers: int):
        self.workers = workers

    def submit(self, target, source: str, shapes: dict, stop_above_ns: float = math.inf):
        return target.run(source, shapes, timing_only=True, sampled=True, stop_above_ns=stop_above_ns, wait=False)


def _remote_timing(target_name: str, source: str, shapes: dict, stop_above_ns: float):
    """A Ray task: the timing run on a worker, with the model that made it (or the error)."""
    from axon import targets

    target = targets.get(target_name)
    try:
        m = target.run(source, shapes, timing_only=True, sampled=True, stop_above_ns=stop_above_ns)
    except AxonError as err:
        return target.model_fingerprint(), err
    return target.model_fingerprint(), m


class _RayPending:
    def __init__(self, ray, ref, fingerprint: str):
        self._ray, self._ref, self._fingerprint = ray, ref, fingerprint

    def result(self):
        fingerprint, outcome = self._ray.get(self._ref)
        if fingerprint != self._fingerprint:
            raise ExecutorError(f"a Ray worker runs performance model {fingerprint}, this process "
                                f"{self._fingerprint}: install the same Axon on every node")
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    def cancel(self) -> None:
        self._ray.cancel(self._ref, force=True)


class RayCluster:
    """Ray remote calls on the cluster at `address` ("auto": the one this machine belongs to;
    "local": start one here with a CPU per usable core)."""

    def __init__(self, address: str):
        try:
            import ray
        except ImportError:
            raise InputError("--ray needs Ray: pip install 'axon-superopt[ray]'") from None
        self._ray = ray
        if not ray.is_initialized():
            kw = dict(include_dashboard=False, log_to_driver=False, configure_logging=False)
            if address == "local":
                ray.init(num_cpus=usable_cpus(), **kw)
            else:
                ray.init(address=address, **kw)
        self.workers = max(1, int(ray.cluster_resources().get("CPU", 1)))
        self._task = ray.remote(num_cpus=1, max_retries=0)(_remote_timing)

    def submit(self, target, source: str, shapes: dict, stop_above_ns: float = math.inf):
        return _RayPending(self._ray, self._task.remote(target.name, source, shapes, stop_above_ns),
                           target.model_fingerprint())


def make_executor(workers: Optional[int] = None, ray: Optional[str] = None):
    """The executor `--workers N` / `--ray ADDRESS` ask for (default: a local process per core)."""
    if ray:
        return RayCluster(ray)
    n = usable_cpus() if workers is None else int(workers)
    if n < 1:
        raise InputError(f"--workers must be at least 1 (got {n})")
    return LocalProcesses(n)
