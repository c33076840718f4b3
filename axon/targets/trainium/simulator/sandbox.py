"""Run a simulation in a child process with wall-clock, CPU-time and memory limits.

A kernel file is Python code, and the simulator executes it: a kernel can loop forever while
catching every exception, sleep, allocate without bound or exit the interpreter. `call(fn, label,
limits)` runs `fn` (load, simulate, estimate, check) in a forked child (the kernel module and the
inputs are already in memory, so nothing is re-imported or copied up front) and returns its value,
pickled back through a pipe:

- wall clock: at `timeout_s` the child raises the simulator's timeout inside the kernel (a located
  one-line error); at `timeout_s` + grace the parent kills the child's process group (a kernel
  that catches the interrupt, or blocks in C);
- CPU time: RLIMIT_CPU (default `timeout_s` times the usable CPUs, the backstop for a child whose
  parent died; the child also dies with its parent where prctl exists);
- memory: RLIMIT_AS, the child's address space at the fork plus `memory_mb` (numpy and Python
  allocations past it raise MemoryError, reported as the limit). A timing-only run moves no data,
  so the HBM tensors it declares are never touched: `reserve_untouched` lets their address space
  past the limit (up to UNTOUCHED_MAX more), and gives it back when the array goes;
- exit: the child's answer is one explicit message; a child that exits without one (`os._exit`,
  a signal) or raises SystemExit is a `KernelError`, never a success.

Every failure is one `KernelError` naming the kernel and the limit; the caller keeps running.
Where `os.fork` is missing the call runs in-process, under the simulator's watchdog thread only.
Invariant: the child sends back exactly what `fn` returns (or raises); results are the same as an
in-process run (the fork inherits the seed, the hash seed and every module).
"""
from __future__ import annotations

import functools
import os
import pickle
import select
import signal
import sys
import time
import traceback
from dataclasses import dataclass
from typing import Callable

from threadpoolctl import threadpool_limits

from axon.errors import AxonError, KernelError

DEFAULT_TIMEOUT_S = 600.0
UNTOUCHED_MAX = 1 << 40  # address space (not memory) a child may map for arrays it never touches
_OK, _ERR = "axon-sandbox-ok", "axon-sandbox-error"


def _default_memory_mb() -> float:
    """Three quarters of physical memory, at most 16 GiB on top of what the caller holds."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**20
    except (ValueError, OSError, AttributeError):
        return 16384.0
    return float(min(16384.0, 0.75 * total))


def _cpus() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


@dataclass(frozen=True)
class Limits:
    """`None` fields take the defaults: 600 s, 3/4 of RAM (<= 16 GiB), timeout x CPUs."""

    timeout_s: float | None = None
    memory_mb: float | None = None
    cpu_s: float | None = None

    def resolved(self) -> "Limits":
        t = DEFAULT_TIMEOUT_S if self.timeout_s is None else float(self.timeout_s)
        m = _default_memory_mb() if self.memory_mb is None else float(self.memory_mb)
        c = t * _cpus() + 1 if self.cpu_s is None else float(self.cpu_s)
        for what, v in (("timeout", t), ("memory limit", m), ("CPU-time limit", c)):
            if not v > 0:
                raise AxonError(f"the {what} must be positive (got {v:g})")
        return Limits(t, m, c)

    @property
    def grace_s(self) -> float:
        return min(5.0, 0.5 + 0.1 * self.timeout_s)


def _vm_bytes() -> int | None:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmSize:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def _limit_child(lim: Limits, path: str) -> None:
    import resource

    from axon.targets.trainium import simulator

    from . import _Timeout

    simulator._watchdog = False

    try:
        os.setpgid(0, 0)  # the parent kills the group: whatever the kernel started dies too
    except OSError:
        pass
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass
    # one BLAS thread: a simulation is one of several processes sharing the cores (the ranking
    # executor's, a check's beside its reference), and a kernel's matmuls are small (128 x 128 x
    # 512 per instruction), where OpenBLAS's threads only contend for them
    threadpool_limits(1, user_api="blas")
    cpu = int(lim.cpu_s + 0.999)
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    base = _vm_bytes()
    if base is not None:
        cap = base + int(lim.memory_mb * 2**20)
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap + UNTOUCHED_MAX))

    def alarm(signum, frame):
        raise _Timeout(f"kernel did not finish within the {lim.timeout_s:g} s wall-clock limit (infinite loop?)")

    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, lim.timeout_s)


def reserve_untouched(nbytes: int) -> Callable[[], None]:
    """Raise the address-space limit by `nbytes` for an array that will never be read or written
    (pages never touched are address space, not memory); returns what gives it back. Outside a
    sandboxed child, or past UNTOUCHED_MAX, nothing changes (the allocation meets the limit)."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    if soft == resource.RLIM_INFINITY or soft + nbytes > hard:
        return lambda: None
    resource.setrlimit(resource.RLIMIT_AS, (soft + nbytes, hard))

    def give_back() -> None:
        now, top = resource.getrlimit(resource.RLIMIT_AS)
        resource.setrlimit(resource.RLIMIT_AS, (max(now - nbytes, 0), top))
    return give_back


def _error_message(exc: BaseException, label: str, path: str | None, lim: Limits):
    """What the child sends for a failure: an AxonError to raise as it is, or (type name, text,
    traceback text) for a bug outside the kernel."""
    from . import _locate, _stopped

    line = _locate(exc, path) if path else None
    where = f"{path}:{line}" if line is not None else label
    if isinstance(exc, MemoryError) or (isinstance(exc, KernelError) and ": MemoryError" in str(exc)):
        text = str(exc) if isinstance(exc, KernelError) else f"{where}: MemoryError"
        return KernelError(f"{text} (over the {lim.memory_mb:g} MB memory limit)")
    if isinstance(exc, AxonError):
        return exc
    stopped = _stopped(exc, where)
    if stopped is not None:
        return stopped
    if isinstance(exc, KeyboardInterrupt):
        return KernelError(f"{label}: interrupted")
    return (type(exc).__name__, str(exc), "".join(traceback.format_exception(exc)))


_SEND_FAILED = 87  # the child's exit status when its answer could not be sent


def _child(fn, label: str, path: str | None, lim: Limits, w: int) -> None:
    code = 0
    try:
        msg = None
        try:
            _limit_child(lim, path or label)
            msg = (_OK, fn())
        except MemoryError:
            pass  # the kernel's frames (its memory) go when this block ends; the message comes after
        except BaseException as exc:  # noqa: BLE001 - SystemExit and interrupts included
            try:
                err = _error_message(exc, label, path, lim)
                if isinstance(err, BaseException):
                    err.__traceback__ = err.__context__ = err.__cause__ = None  # free the kernel's frames
                msg = (_ERR, err)
            except MemoryError:
                pass
            exc = None
        signal.setitimer(signal.ITIMER_REAL, 0)
        if msg is None:
            msg = (_ERR, KernelError(f"{path or label}: MemoryError (over the {lim.memory_mb:g} MB memory limit)"))
        if msg[0] == _ERR:  # small: made whole before it is sent
            try:
                data = pickle.dumps(msg, protocol=pickle.HIGHEST_PROTOCOL)
            except Exception as exc:  # noqa: BLE001 - an unpicklable exception
                data = pickle.dumps((_ERR, KernelError(f"{label}: {type(msg[1]).__name__}: {msg[1]}")))
            with os.fdopen(w, "wb") as out:
                out.write(data)
        else:  # outputs may be large: streamed (a failure part-way sends no answer)
            code = _SEND_FAILED
            with os.fdopen(w, "wb") as out:
                pickle.dump(msg, out, protocol=pickle.HIGHEST_PROTOCOL)
        code = 0
    except BaseException:  # noqa: BLE001 - never return into the caller's code
        code = code or _SEND_FAILED
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except BaseException:  # noqa: BLE001
                pass
        os._exit(code)


_EXITING: list[int] = []  # children that answered and are exiting


def _reap() -> None:
    for pid in list(_EXITING):
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            done = pid
        if done:
            _EXITING.remove(pid)


def _answered(chunks: list) -> bool:
    """Does the pipe hold a whole answer? (pickle's STOP opcode ends it; loading checks it.)"""
    return bool(chunks) and chunks[-1].endswith(b".")


def _kill(pid: int) -> None:
    for kill in (lambda: os.killpg(pid, signal.SIGKILL), lambda: os.kill(pid, signal.SIGKILL)):
        try:
            kill()
            return
        except OSError:
            continue


def _describe_exit(status: int, label: str, lim: Limits) -> str:
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        if sig == signal.SIGXCPU:
            return f"{label}: killed at the {lim.cpu_s:g} s CPU-time limit"
        if sig == signal.SIGKILL:
            return f"{label}: killed (SIGKILL; out of memory? the memory limit is {lim.memory_mb:g} MB)"
        return f"{label}: the simulation died of signal {signal.Signals(sig).name}"
    code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else status
    if code == _SEND_FAILED:
        return f"{label}: the simulation's result could not be sent back (over the {lim.memory_mb:g} MB memory limit?)"
    return f"{label}: the kernel exits the interpreter (exit status {code}) before the simulation finished"


def call(fn, label: str, limits: Limits | None = None, path: str | None = None):
    """`fn()` in a child process under `limits`; `label` names the kernel in errors, `path` (the
    kernel file) locates them."""
    return start(fn, label, limits, path).result()


class Done:
    """A value already computed (where `os.fork` is missing): the interface of `Child`."""

    def __init__(self, fn):
        self._fn = fn

    def result(self):
        return self._fn()

    def cancel(self) -> None:
        pass


def start(fn, label: str, limits: Limits | None = None, path: str | None = None):
    """`fn()` started in a child process under `limits`; `.result()` waits for its value (or
    raises its error), `.cancel()` kills it. Several may run at once: each is forked from the
    caller's thread, so nothing but that thread is copied into the child."""
    lim = (limits or Limits()).resolved()
    if not hasattr(os, "fork"):
        return Done(fn)
    import axon.targets.trainium.perfmodel  # noqa: F401 - imported once here, not in every child
    _reap()
    r, w = os.pipe()
    for stream in (sys.stdout, sys.stderr):  # the child must not print the parent's pending output again
        try:
            stream.flush()
        except Exception:  # noqa: BLE001
            pass
    pid = os.fork()
    if pid == 0:
        os.close(r)
        for child in list(_RUNNING):  # a sibling's pipe is not this child's to hold open
            os.close(child.fd)
        _child(fn, label, path, lim, w)
    os.close(w)
    child = Child(pid, r, label, lim, time.monotonic() + lim.timeout_s + lim.grace_s)
    _RUNNING.append(child)
    return child


_RUNNING: list["Child"] = []  # children started and not yet answered, whose pipes are open


class Child:
    """One sandboxed simulation in flight: its pipe is read while any child is waited for, so a
    sibling that answers first never blocks on a full pipe."""

    def __init__(self, pid: int, fd: int, label: str, lim: Limits, deadline: float):
        self.pid, self.fd, self.label, self.lim, self.deadline = pid, fd, label, lim, deadline
        self.chunks: list = []
        self.closed = False  # the pipe reached its end (or the child was killed)
        self.timed_out = False
        self.status = None

    def result(self):
        try:
            while not self.closed:
                _read_any(self)
        except BaseException:  # an interrupt while waiting: the child does not outlive the wait
            self.cancel()
            raise
        return self._value()

    def cancel(self) -> None:
        if not self.closed:
            self._close()
        if self.status is None:
            _kill(self.pid)
            os.waitpid(self.pid, 0)
            self.status = -1

    def _close(self) -> None:
        self.closed = True
        os.close(self.fd)
        _RUNNING.remove(self)

    def _finish(self) -> None:
        """The pipe closed: an explicit answer (reaped later), or the child's exit status."""
        self._close()
        if _answered(self.chunks):
            self.status = 0  # the child only exits now; reaped later, not waited for
            _EXITING.append(self.pid)
            return
        while self.status is None:  # the child is exiting (or closed the pipe and runs on)
            done, code = os.waitpid(self.pid, os.WNOHANG)  # (0, 0) while it runs
            if done:
                self.status = code
            elif time.monotonic() > self.deadline:
                self._expire()
            else:
                time.sleep(0.001)

    def _expire(self) -> None:
        self.timed_out = True
        if not self.closed:
            self._close()
        _kill(self.pid)
        os.waitpid(self.pid, 0)
        self.status = -1

    def _value(self):
        if self.timed_out:
            raise KernelError(f"{self.label}: killed at the {self.lim.timeout_s:g} s wall-clock limit "
                              f"(the kernel ignores the interrupt or blocks)")
        msg = None
        if self.chunks:
            try:
                msg = pickle.loads(b"".join(self.chunks))
            except Exception:  # noqa: BLE001 - a truncated answer is no answer
                msg = None
        if self.status == 0 and isinstance(msg, tuple) and len(msg) == 2:
            tag, value = msg
            if tag == _OK:
                return value
            if tag == _ERR:
                if isinstance(value, BaseException):
                    raise value
                kind, text, tb = value
                raise RuntimeError(f"{self.label}: {kind}: {text} (in the simulation process)\n{tb}")
        raise KernelError(_describe_exit(self.status, self.label, self.lim))


def _read_any(waiting: Child) -> None:
    """Read whatever the running children have written, until `waiting`'s deadline at most. A
    child past its deadline is killed unless it has begun to answer: it finished in time and only
    waited for the caller to read (who may compute something else beside a run before asking)."""
    _read_ready(0.0)
    now = time.monotonic()
    for child in [c for c in _RUNNING if c.deadline <= now and not c.chunks]:
        child._expire()
    if waiting.closed:
        return
    if not _read_ready(None if waiting.chunks else max(0.0, waiting.deadline - now)):
        waiting._expire()


def _read_ready(timeout: float | None) -> bool:
    """Read what the running children have written, waiting up to `timeout` (None: until one
    writes) for the first of them; whether any had written."""
    if not _RUNNING:
        return False
    ready, _, _ = select.select([c.fd for c in _RUNNING], [], [], timeout)
    for child in [c for c in _RUNNING if c.fd in ready]:
        chunk = os.read(child.fd, 1 << 20)
        if chunk:
            child.chunks.append(chunk)
        else:
            child._finish()
    return bool(ready)


def sandboxed(label_path):
    """Decorator: the function runs under `call`, with keyword arguments `timeout_s`, `memory_mb`
    and `cpu_s` (the limits; `sandbox=False` runs in-process; `wait=False` returns the started
    `Child` instead of its value). `label_path(*args, **kw)` gives (label, kernel path or None)."""

    def deco(fn):
        @functools.wraps(fn)
        def wrapper(*args, timeout_s=None, memory_mb=None, cpu_s=None, sandbox=True, wait=True, **kw):
            if not sandbox:
                return fn(*args, **kw) if wait else Done(lambda: fn(*args, **kw))
            label, path = label_path(*args, **kw)
            child = start(lambda: fn(*args, **kw), label, Limits(timeout_s, memory_mb, cpu_s), path)
            return child.result() if wait else child

        return wrapper

    return deco


def kernel_label(kernel, *args, **kw) -> tuple[str, str | None]:
    """(label, path) of `runner.run`'s kernel argument: a Kernel, `FILE.py[:FUNC]`, or source."""
    if hasattr(kernel, "path") and hasattr(kernel, "name"):
        return f"{kernel.path} (kernel {kernel.name})", kernel.path
    text = str(kernel)
    if "\n" in text:
        return source_label(text)
    path = text if os.path.isfile(text) or ":" not in text else text.rpartition(":")[0]
    return text, os.path.abspath(path)


def source_label(source: str, *args, **kw) -> tuple[str, str | None]:
    """(label, path) of a kernel given as source text (the simulator names it `<kernel>`)."""
    import re

    m = re.search(r"^def\s+(\w+)", source, re.M)
    return (f"kernel {m.group(1)}" if m else "kernel"), "<kernel>"
