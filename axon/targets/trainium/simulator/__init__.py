"""The NKI CPU simulator: runs NKI kernel source files (current `nki` API and beta-1
`neuronxcc.nki` API) with NumPy, checks Trainium's hardware rules, and records one trace
`Instruction` per hardware instruction for the performance model.

    kernel = load_kernel("examples/nki/tensor_add_beta1.py")
    result = simulate(kernel, {"a": a, "b": b}, target="trn2")
    result.outputs, result.trace, result.hbm_bytes

Invariants: a simulation's state lives in its `SimContext` only; every kernel problem surfaces
as one `KernelError` whose message starts with `path:line:`; runaway kernels stop at an
instruction cap; `sandbox.call` adds wall-clock, CPU-time and memory limits in a child process
(what `runner.run` and the target's `run` use); `simulate` itself runs in the calling process.
"""
from __future__ import annotations

import ctypes
import math
import os
import threading
import traceback
from dataclasses import dataclass, field

import numpy as np

from axon.errors import InputError, KernelError
from axon.targets.trainium.hardware import HardwareDescription, get_target
from axon.targets.trainium.trace import Instruction, cyclic_gc_paused

from . import dtypes
from .context import SimContext
from .liveness import account
from .loader import Jit, execute
from .memory import Tile, untouched, wrap_array
from .sampling import LoopSampling
from .spmd import Programs

__all__ = ["Kernel", "KernelValue", "LoopSampling", "ShapeDtype", "SimResult", "load_kernel", "load_source",
           "simulate", "simulate_source"]


@dataclass(frozen=True)
class ShapeDtype:
    """An input known only by shape and dtype (timing-only mode)."""

    shape: tuple
    dtype: object = "float32"


@dataclass(frozen=True)
class KernelValue:
    """An argument the kernel's own module defines, named by its dotted path there
    (`KernelValue("NormType.RMS_NORM")`), or the result of calling one of its functions on such
    arguments (`KernelValue.call("make_config", k=4)`, as a host script prepares a configuration
    object): each simulation executes the kernel's package afresh, so its enum members and
    configuration objects exist only inside the simulation."""

    name: str
    args: tuple = ()
    kwargs: dict = field(default_factory=dict)
    called: bool = False

    @classmethod
    def call(cls, name: str, *args, **kwargs) -> "KernelValue":
        return cls(name, args, kwargs, called=True)

    def resolve(self, namespace: dict):
        first, *rest = self.name.split(".")
        if first not in namespace:
            raise InputError(f"argument {self.name!r}: the kernel module defines no {first!r}")
        value, seen = namespace[first], first
        for part in rest:
            if not hasattr(value, part):
                raise InputError(f"argument {self.name!r}: {seen} has no {part!r}")
            value, seen = getattr(value, part), f"{seen}.{part}"
        if not self.called:
            return value

        def arg(a):
            return a.resolve(namespace) if isinstance(a, KernelValue) else a

        return value(*map(arg, self.args), **{k: arg(v) for k, v in self.kwargs.items()})


@dataclass
class Kernel:
    name: str
    params: list[str]
    path: str
    source: str = field(repr=False)
    code: object = field(repr=False, default=None)
    defaults: dict = field(repr=False, default_factory=dict)


@dataclass
class SimResult:
    outputs: object  # the kernel's return value(s) as NumPy arrays (data None in timing-only mode)
    trace: list[Instruction]
    hbm_bytes: int
    arguments: dict = field(default_factory=dict)  # every HBM argument after the run, by name
    sbuf_peak_bytes: int = 0  # peak live SBUF bytes per partition (by liveness, before spilling)
    psum_peak_bytes: int = 0  # peak live PSUM bytes per partition (whole banks, before spilling)
    spill_bytes: int = 0  # bytes the spill DMAs in the trace store to HBM (liveness.py)
    reload_bytes: int = 0  # bytes they load back
    spills: int = 0  # spill stores in the trace
    reloads: int = 0  # spill reloads in the trace


# False inside the sandbox's child, whose SIGALRM replaces the watchdog thread (a thread costs ~10 ms
# to start in a freshly forked process)
_watchdog = True


class _Timeout(BaseException):
    """Raised asynchronously inside the simulating thread when the wall-clock limit passes
    (PyThreadState_SetAsyncExc takes the class, so the message is added where it is caught)."""


def _compile(source: str, path: str):
    try:
        return compile(source, path, "exec")
    except SyntaxError as e:
        raise KernelError(f"{path}:{e.lineno}: syntax error: {e.msg}") from None


def _find_function(ns: dict, path: str, function: str | None):
    if function is not None:
        fn = ns.get(function)
        if fn is None:
            raise KernelError(f"{path}: no function named {function!r}")
        return fn
    jitted = [v for v in ns.values() if isinstance(v, Jit)]
    if len(jitted) == 1:
        return jitted[0]
    if not jitted:
        raise KernelError(f"{path}: no @nki.jit kernel found; name the function to simulate")
    names = ", ".join(j.fn.__name__ for j in jitted)
    raise KernelError(f"{path}: several kernels ({names}); name the one to simulate")


def _signature(fn) -> tuple[str, list[str], dict]:
    raw = fn.fn if isinstance(fn, Jit) else fn
    if not callable(raw) or not hasattr(raw, "__code__"):
        raise KernelError(f"{raw!r} is not a kernel function")
    code = raw.__code__
    params = list(code.co_varnames[:code.co_argcount + code.co_kwonlyargcount])
    defaults = {}
    if raw.__defaults__:
        for name, value in zip(params[code.co_argcount - len(raw.__defaults__):], raw.__defaults__):
            defaults[name] = value
    if raw.__kwdefaults__:
        defaults.update(raw.__kwdefaults__)
    return raw.__name__, params, defaults


def load_kernel(path: str, function: str | None = None) -> Kernel:
    """Parse and load a kernel source file; `function` picks one of several kernels."""
    try:
        with open(path, encoding="utf-8") as f:
            source = f.read()
    except OSError as e:
        raise InputError(f"cannot read kernel file {path}: {e.strerror}") from None
    return load_source(source, os.path.abspath(path), function)


def load_source(source: str, path: str = "<kernel>", function: str | None = None) -> Kernel:
    """Load a kernel from source text; `path` names it in errors."""
    code = _compile(source, path)
    from axon.targets.trainium.hardware import TRN2

    ctx = SimContext(TRN2, path, timing_only=True, max_instructions=0)
    ns = _run_guarded(ctx, lambda: execute(code, path, ctx), 30.0)
    fn = _find_function(ns, path, function)
    name, params, defaults = _signature(fn)
    return Kernel(name, params, path, source, code, defaults)


def _locate(exc: BaseException, path: str) -> int | None:
    line = None
    for frame in traceback.extract_tb(exc.__traceback__):
        if frame.filename == path:
            line = frame.lineno
    return line


def _stopped(exc: BaseException, where: str) -> KernelError | None:
    """A kernel that exits the interpreter or runs out of time: an error, never a success."""
    if isinstance(exc, SystemExit):
        return KernelError(f"{where}: the kernel exits the interpreter (SystemExit({exc.code!r}))")
    if isinstance(exc, _Timeout):
        return KernelError(f"{where}: {exc.args[0] if exc.args else 'timed out'}")
    return None


def _kernel_error(exc: BaseException, path: str) -> KernelError:
    line = _locate(exc, path)
    where = f"{path}:{line}" if line is not None else path
    if isinstance(exc, KernelError):
        msg = str(exc)
        if msg.startswith(path + ":"):
            return exc
        return KernelError(f"{where}: {msg}")
    stopped = _stopped(exc, where)
    if stopped is not None:
        return stopped
    if isinstance(exc, RecursionError):
        return KernelError(f"{where}: recursion too deep")
    detail = str(exc)
    kind = type(exc).__name__
    return KernelError(f"{where}: {kind}{': ' + detail if detail else ''}")


def _run_guarded(ctx, thunk, time_limit_s: float):
    """Run `thunk`, converting every failure into a located KernelError; a watchdog thread
    interrupts a kernel that runs longer than `time_limit_s`."""
    tid = threading.get_ident()
    state = {"running": True, "fired": False}
    lock = threading.Lock()

    def fire():
        with lock:
            if state["running"]:
                state["fired"] = True
                ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(tid), ctypes.py_object(_Timeout))

    timer = threading.Timer(time_limit_s, fire) if time_limit_s and _watchdog else None
    if timer:
        timer.daemon = True
        timer.start()
    try:
        with np.errstate(all="ignore"):
            return thunk()
    except InputError:
        raise
    except _Timeout as e:
        if not e.args:  # from the watchdog thread (the sandbox's alarm names its own limit)
            e.args = (f"kernel did not finish within the {time_limit_s:g} s wall-clock limit "
                      f"(infinite loop?)",)
        raise _kernel_error(e, ctx.kernel_path) from None
    except (Exception, SystemExit) as e:  # noqa: BLE001 - every kernel failure becomes one error
        raise _kernel_error(e, ctx.kernel_path) from None
    finally:
        with lock:
            state["running"] = False
            if timer:
                timer.cancel()
            if state["fired"]:  # drop an exception that was raised but not yet delivered
                ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(tid), None)


def _hbm_input(ctx, name, value, timing_only, namespace):
    if isinstance(value, ShapeDtype):
        if not timing_only:
            raise InputError(f"input {name!r} has no data; ShapeDtype inputs need timing_only=True")
        return wrap_array(ctx, untouched(tuple(value.shape), dtypes.to_dtype(value.dtype)), name)
    if isinstance(value, KernelValue):
        return value.resolve(namespace)
    if isinstance(value, np.ndarray):
        try:
            dt = dtypes.to_dtype(value.dtype)
        except KernelError as e:
            raise InputError(f"input {name!r}: {e}") from None
        # row-major, as a tensor in device memory is (a NumPy view may have any strides)
        return wrap_array(ctx, np.array(value, dtype=dt, copy=True, order="C"), name)
    return value  # scalars and other Python values pass through as meta-parameters


def _return_line(source: str, name: str) -> int | None:
    """The line of the kernel's first return statement, for errors about its outputs."""
    import ast

    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef) and node.name == name:
            for sub in ast.walk(node):
                if isinstance(sub, ast.Return):
                    return sub.lineno
    return None


def _to_output(value, where="", partial=False):
    """`partial`: elements never written come back NaN instead of failing the kernel (a numerical
    check's kernel that runs only some row blocks writes only their rows)."""
    if isinstance(value, Tile):
        ini = value.initialised() if value.buf.init is not None else None
        if ini is not None and not ini.all() and not partial:
            raise KernelError(f"{where}kernel returns {value.buf.name or 'a tensor'} with "
                              f"{int((~ini).sum())} elements never written")
        if value.arr is None and value.idx is None:
            return None
        out = np.array(value.values())
        if ini is not None and not ini.all():
            out = out.astype(np.float64) if out.dtype.kind in "iub" else out
            out[~ini] = np.nan
        return out
    if isinstance(value, (tuple, list)):
        return type(value)(_to_output(v, where, partial) for v in value)
    if isinstance(value, dict):
        return {k: _to_output(v, where, partial) for k, v in value.items()}
    return value


def simulate(kernel: Kernel, inputs: dict, target: str | HardwareDescription = "trn2",
             timing_only: bool = False, max_instructions: int = 5_000_000,
             time_limit_s: float | None = None, partial: bool = False, grid: tuple | None = None,
             strict_capacity: bool = False, strict_api: bool = False,
             sampling: LoopSampling | None = None, reads_unwritten: bool = False) -> SimResult:
    """Run `kernel` on `inputs` (parameter name -> array, ShapeDtype, or Python value);
    `partial` as in `_to_output`. `reads_unwritten`: reads and stores of never-written data are
    no error (Axon's check kernel on part of its blocks: that data reaches only outputs the check
    does not compare, as NaN, and NaN where it does). `grid` (e.g. (2, 4)) launches the kernel as SPMD instances:
    each runs in turn with its own `nl.program_id` (switching at `nisa.core_barrier`, spmd.py),
    all sharing the HBM tensors they allocate
    (the trace holds every instance's instructions, on one NeuronCore).
    On-chip capacity is accounted by liveness after the run (liveness.py): with
    `strict_capacity` (Axon's own kernels) more live SBUF/PSUM than the target has is an error;
    without it (kernels written by users) the excess is spilled to HBM by DMAs in the trace.
    `strict_api` (Axon's own kernels): every current-API nki.isa call is held to the documented
    API of nki_api.NKI_VERSION (arguments, engines, memories, dtypes), as `axon simulate --lint`
    checks it in the source; kernels written by users run with what the simulator accepts.
    `sampling` (timing-only runs): long loops run only their first iterations (sampling.py); the
    result is the cut run (`sampling.view()`), and the sampling keeps the whole run for its
    other views."""
    hw = get_target(target) if isinstance(target, str) else target
    grid = _check_grid(grid)
    missing = [p for p in kernel.params if p not in inputs and p not in kernel.defaults]
    if missing:
        raise InputError(f"kernel {kernel.name} needs inputs: {', '.join(missing)}")
    extra = [k for k in inputs if k not in kernel.params]
    if extra:
        raise InputError(f"kernel {kernel.name} has no parameter(s): {', '.join(extra)}")
    ctx = SimContext(hw, kernel.path, timing_only, max_instructions)
    ctx.grid, ctx.strict_api, ctx.reads_unwritten = grid, strict_api, reads_unwritten
    if sampling is not None:
        if not timing_only:
            raise ValueError("loop sampling is for timing-only runs: a sampled run computes no outputs")
        ctx.sampling = sampling

    def run():
        ns = execute(kernel.code, kernel.path, ctx)
        fn = ns.get(kernel.name)
        fn = fn.fn if isinstance(fn, Jit) else fn
        args = {n: _hbm_input(ctx, n, v, timing_only, ns) for n, v in inputs.items()}
        if math.prod(grid) > 1:  # programs take turns, so a core barrier can hold one (spmd.py)
            ctx.spmd = Programs(ctx, grid)
            ret = ctx.spmd.run(fn, args)
        else:
            ctx.program_ids, ctx.hbm_cursor = (0,) * len(grid), 0
            ret = fn(**args)
        def accounted(trace):
            return account(trace, ctx.onchip, hw, strict=strict_capacity, path=kernel.path,
                           new_buffer_id=ctx.new_buffer_id)

        if sampling is None:
            acc = accounted(ctx.trace)
        else:  # the result is the cut run's; the sampling keeps the whole run for its other views
            sampling.recorded(ctx.trace, accounted)
            acc = sampling.view().accounting()
        line = _return_line(kernel.source, kernel.name) if not timing_only else None
        out = None if timing_only else _to_output(ret, f"{kernel.path}:{line}: " if line else "", partial)
        if timing_only:
            out = _shapes(ret)
        hbm = {n: (None if timing_only else np.array(t.buf.data)) for n, t in args.items()
               if isinstance(t, Tile)}
        return out, hbm, acc

    with cyclic_gc_paused():
        outputs, arguments, acc = _run_guarded(ctx, run, time_limit_s)
    hbm = ctx.hbm_bytes if sampling is None else sum(i.hbm_bytes for i in acc.trace if not i.extra.get("spill"))
    return SimResult(outputs, acc.trace, hbm + acc.spill_bytes + acc.reload_bytes, arguments,
                     acc.sbuf_peak, acc.psum_peak, acc.spill_bytes, acc.reload_bytes, acc.spills, acc.reloads)


def _check_grid(grid) -> tuple:
    if grid is None:
        return ()
    if isinstance(grid, int):
        grid = (grid,)
    try:
        grid = tuple(int(g) for g in grid)
    except (TypeError, ValueError):
        raise InputError(f"bad SPMD grid {grid!r}; expected a tuple of positive ints, e.g. (2, 4)") from None
    if not grid or any(g <= 0 for g in grid):
        raise InputError(f"bad SPMD grid {grid!r}; every axis must be a positive int")
    return grid


def _shapes(value):
    if isinstance(value, Tile):
        return ShapeDtype(value.shape, value.dtype.name)
    if isinstance(value, (tuple, list)):
        return type(value)(_shapes(v) for v in value)
    return value


def simulate_source(source: str, function: str | None = None, inputs: dict | None = None,
                    path: str = "<kernel>", **options) -> SimResult:
    """Load a kernel from a source string and simulate it (convenient in tests)."""
    kernel = load_source(source, path, function)
    return simulate(kernel, inputs or {}, **options)
