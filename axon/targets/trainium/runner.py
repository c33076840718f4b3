"""Run an NKI kernel on the CPU simulator, estimate its time on a NeuronCore, check its output.

`run(kernel, inputs, target, timing_only, reference)` is what `axon simulate` and Axon's selection
stage call: simulate (numpy semantics + instruction trace), estimate (perfmodel), and compare the
outputs with a NumPy reference. Inputs are arrays, `ShapeDtype`s, or `InputSpec`s (shape and dtype
to fill with seeded random data; in timing-only mode they stay shapes and no data is made).

`run` executes the kernel file (Python code) in a child process with wall-clock, CPU-time and
memory limits (keywords `timeout_s`, `memory_mb`, `cpu_s`; `sandbox=False` runs in-process): a kernel
that hangs, exhausts memory or exits the interpreter is one KernelError and the caller goes on.

Invariant: the same kernel, inputs, target and seed give the same report.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import ml_dtypes
import numpy as np

from axon.frontend.loading import load_from_file
from axon.semantics.bounds import Check, Precision, compare, function_tolerance, program_reference, unit_roundoff
from axon.errors import InputError, KernelError
from axon.targets.trainium.hardware import get_target
from axon.targets.trainium.perfmodel import Estimate, estimate, unread_results, write_perfetto
from axon.targets.trainium.simulator.sandbox import kernel_label, sandboxed

_DTYPES = ("float32", "float16", "bfloat16", "float8_e4m3", "float8_e5m2", "int32", "int8", "uint8",
           "int16", "uint16", "uint32", "tfloat32")


@dataclass(frozen=True)
class InputSpec:
    """A shape and dtype to fill with random data (standard normal for floats)."""

    shape: tuple[int, ...]
    dtype: str


def numpy_dtype(name: str) -> np.dtype:
    if name == "tfloat32":
        name = "float32"  # stored as fp32; TensorE reads it at the tf32 rate
    if name in ("bfloat16", "float8_e4m3", "float8_e5m2"):
        import ml_dtypes

        return np.dtype(getattr(ml_dtypes, "float8_e4m3fn" if name == "float8_e4m3" else name))
    try:
        return np.dtype(name)
    except TypeError:
        raise InputError(f"unknown dtype {name!r}; expected one of {', '.join(_DTYPES)}") from None


_SPEC = re.compile(r"^([A-Za-z_]\w*)=(\d+(?:x\d+)*):(\w+)$")


def parse_input_spec(text: str) -> tuple[str, InputSpec]:
    """`NAME=D0xD1x...:DTYPE`, e.g. `lhsT=8192x4096:bfloat16`."""
    m = _SPEC.match(text.strip())
    if not m:
        raise InputError(f"bad --input {text!r}; expected NAME=SHAPE:DTYPE, e.g. a=4096x8192:bfloat16")
    name, dims, dtype = m.groups()
    if dtype not in _DTYPES:
        raise InputError(f"bad --input {text!r}: unknown dtype {dtype!r}; expected one of {', '.join(_DTYPES)}")
    shape = tuple(int(d) for d in dims.split("x"))
    if any(d == 0 for d in shape):
        raise InputError(f"bad --input {text!r}: zero-sized dimension")
    return name, InputSpec(shape, dtype)


def load_npz(path: str | Path) -> dict[str, np.ndarray]:
    """The arrays of an .npz. NumPy saves an ml_dtypes bfloat16 array as 2-byte void (|V2), the
    only dtype that becomes one: read back as bfloat16. A 1-byte void is one of the fp8 formats,
    which the file does not say."""
    try:
        with np.load(path, allow_pickle=False) as data:
            arrays = {k: data[k] for k in data.files}
    except FileNotFoundError:
        raise InputError(f"--inputs file not found: {path}") from None
    except (OSError, ValueError) as err:
        raise InputError(f"cannot read --inputs {path}: {err}") from None
    for k, a in arrays.items():
        if a.dtype.kind == "V" and a.dtype.fields is None:
            if a.dtype.itemsize != 2:
                raise InputError(f"--inputs {path}: array {k!r} is {a.dtype.itemsize}-byte raw data (an fp8 "
                                 "array, saved without its format): save it as float32 or bfloat16")
            arrays[k] = a.view(ml_dtypes.bfloat16)
    return arrays


def _random(spec: InputSpec, rng: np.random.Generator) -> np.ndarray:
    dt = numpy_dtype(spec.dtype)
    if np.issubdtype(dt, np.integer):
        return rng.integers(-8, 8, size=spec.shape).astype(dt)
    return rng.standard_normal(spec.shape, dtype=np.float32).astype(dt)


def parse_arg(text: str) -> tuple[str, Any]:
    """`NAME=VALUE` for a scalar kernel argument: a Python literal (1e-5, 16, True, (2, 4),
    'name'), a dtype name such as `bfloat16` or `nl.float32`, or else the text itself."""
    import ast

    name, sep, value = text.partition("=")
    name, value = name.strip(), value.strip()
    if not sep or not name.isidentifier():
        raise InputError(f"bad --arg {text!r}; expected NAME=VALUE, e.g. eps=1e-5")
    try:
        return name, ast.literal_eval(value)
    except (ValueError, SyntaxError):
        pass
    dtype = value.split(".")[-1] if value.startswith(("nl.", "np.", "numpy.")) else value
    if dtype in _DTYPES:
        return name, numpy_dtype(dtype)
    return name, value


_GRID = re.compile(r"^\s*\d+(\s*[x,]\s*\d+)*\s*$")


def parse_grid(text: str) -> tuple[int, ...]:
    """`2x4` (or `2,4`, `8`): an SPMD launch grid."""
    if not _GRID.match(text) or any(int(g) <= 0 for g in re.split(r"[x,]", text)):
        raise InputError(f"bad --grid {text!r}; expected positive sizes such as 8 or 2x4")
    return tuple(int(g) for g in re.split(r"[x,]", text))


def resolve_inputs(params: tuple[str, ...] | list[str], given: dict[str, Any], *, timing_only: bool,
                   seed: int = 0, defaults: dict | None = None) -> dict[str, Any]:
    """Map every kernel parameter to an array (or a ShapeDtype in timing-only mode); a parameter
    with a Python default that is not given keeps its default."""
    defaults = defaults or {}
    from axon.targets.trainium.simulator import ShapeDtype

    unknown = sorted(set(given) - set(params))
    if unknown:
        raise InputError(f"input(s) {', '.join(unknown)} are not parameters of the kernel ({', '.join(params)})")
    missing = [p for p in params if p not in given and p not in defaults]
    if missing:
        raise InputError(f"missing input(s) for kernel parameter(s): {', '.join(missing)} "
                         f"(give --input NAME=SHAPE:DTYPE or --inputs FILE.npz)")
    rng = np.random.default_rng(seed)
    out: dict[str, Any] = {}
    for p in params:
        if p not in given:
            continue
        value = given[p]
        if isinstance(value, InputSpec):
            value = ShapeDtype(value.shape, value.dtype) if timing_only else _random(value, rng)
        out[p] = value
    return out


def load_reference(ref: str | Callable) -> Callable:
    """`FILE.py:FUNC` (a NumPy function taking the kernel's arrays by name, or an `@axon.program`
    whose inputs are named like the kernel's parameters) or a callable."""
    if callable(ref):
        return ref
    path, _, func = str(ref).rpartition(":")
    if not path or not func:
        raise InputError(f"bad --reference {ref!r}; expected FILE.py:FUNC")
    fn = load_from_file(path, func, "reference function")
    if not callable(fn):
        raise InputError(f"reference {path}:{func} is not a function")
    return fn


def _widen(a):
    """Low-precision floats (bf16, fp16, fp8) reach the reference as float32 arrays."""
    if isinstance(a, np.ndarray) and (a.dtype.kind == "V" or (a.dtype.kind == "f" and a.dtype.itemsize < 4)):
        return a.astype(np.float32)
    return a


def _as_list(value) -> list[np.ndarray]:
    if value is None:
        return []
    if isinstance(value, dict):
        return [np.asarray(v) for v in value.values()]
    if isinstance(value, (tuple, list)):
        return [np.asarray(v) for v in value]
    return [np.asarray(value)]


def _float_dtypes(arrays) -> list[np.dtype]:
    return [a.dtype for a in arrays if a.dtype.kind == "V" or a.dtype.kind == "f"]


def _precision(inputs: list[np.ndarray], outputs: list[np.ndarray]) -> Precision:
    """An opaque kernel's precision model: its outputs' dtypes; intermediates in the narrowest float
    dtype it touches (it may keep any of them there); accumulation in float32 (PSUM, and the
    engines compute in float32)."""
    floats = _float_dtypes(inputs + outputs)
    mid = max(floats, key=unit_roundoff, default=np.dtype(np.float32))
    return Precision(tuple(o.dtype.name for o in outputs), mid.name)


def _magnitude(fn, args: dict):
    """f(|x|): for a multilinear f (a matmul, a sum) the sum of its terms' magnitudes; None where f
    does not take it (the bound then uses |ref| alone)."""
    try:
        with np.errstate(all="ignore"):
            return _as_list(fn(**{n: np.abs(_widen(a)) if isinstance(a, np.ndarray) else a for n, a in args.items()}))
    except Exception:  # noqa: BLE001 - a reference need not accept absolute values
        return None


def reference_check(fn, args: dict, outputs, *, reduction_length: int | None = None, roundings: int = 1) -> Check:
    """Compare a kernel's outputs with reference `fn` under per-element error bounds
    (axon.semantics.bounds). An `@axon.program` reference gets the forward error analysis of its
    graph (any intermediate possibly in the kernel's narrowest dtype); a NumPy function the bound
    of an opaque function: K = `reduction_length` (default the largest input dimension, which
    bounds a reduction along one axis; give it for reductions over several axes), R = `roundings`,
    C = the float inputs wider than the narrowest dtype (the kernel may narrow them)."""
    from axon.frontend.program import Program

    got = _as_list(outputs)
    arrays = [a for a in args.values() if isinstance(a, np.ndarray)]
    prec = _precision(arrays, got)
    name = getattr(fn, "name", getattr(fn, "__name__", fn))
    if isinstance(fn, Program):
        missing = [n for n in fn.input_names if n not in args]
        if missing:
            raise InputError(f"reference program {fn.name} takes {', '.join(missing)}, which the kernel does not")
        expected, tol = program_reference(fn.graph, {n: args[n] for n in fn.input_names}, prec)
    else:
        try:
            expected = _as_list(fn(**{n: _widen(a) for n, a in args.items()}))
        except Exception as exc:
            raise KernelError(f"reference {name} failed: {type(exc).__name__}: {exc}") from None
        magnitude = _magnitude(fn, args)
        if magnitude is not None and [m.shape for m in magnitude] != [e.shape for e in expected]:
            magnitude = None
        K = reduction_length or max((max(a.shape, default=1) for a in arrays), default=1)
        narrowed = sum(1 for d in _float_dtypes(arrays) if unit_roundoff(d) < prec.u("mid"))
        tol = function_tolerance(expected, magnitude, prec, K, roundings, narrowed)
    if len(got) != len(expected):
        raise InputError(f"kernel returned {len(got)} output(s), reference returned {len(expected)}")
    for g, w in zip(got, expected):
        if g.shape != w.shape:
            raise InputError(f"output shape {g.shape} differs from the reference's {w.shape}")
    return compare(got, expected, tol)


@dataclass(frozen=True)
class RunReport:
    kernel: str
    target: str
    estimate: Estimate
    outputs: Any
    reference_ok: bool | None
    max_abs_err: float | None
    tolerance: dict | None = None  # the bound's formula and size (axon.semantics.bounds), when checked
    max_err_over_bound: float | None = None  # at most 1 passes
    # on-chip capacity by liveness (simulator/liveness.py): peaks before spilling, and the spill
    # traffic the trace carries where the live set exceeded SBUF/PSUM
    sbuf_peak_bytes: int = 0
    psum_peak_bytes: int = 0
    spill_bytes: int = 0
    reload_bytes: int = 0
    spills: int = 0
    reloads: int = 0
    # (kernel line, opcode, instructions) whose results no later instruction reads (perfmodel.unread_results)
    unread: tuple = ()

    def to_json(self) -> dict:
        e = self.estimate
        return {
            "kernel": self.kernel,
            "target": self.target,
            "latency_ns": e.latency_ns,
            # the kernel's own traffic bound (its trace), not the roofline of a program
            "kernel_bound_ns": e.kernel_bound_ns,
            "kernel_bound_fraction": e.kernel_bound_fraction,
            "kernel_bound_compute_ns": e.kernel_bound_compute_ns,
            "kernel_bound_memory_ns": e.kernel_bound_memory_ns,
            "engine_busy_ns": dict(e.engine_busy_ns),
            "utilisation": dict(e.utilisation),
            "hbm_bytes": e.hbm_bytes,
            "compulsory_hbm_bytes": e.compulsory_hbm_bytes,
            "dma_bytes": e.dma_bytes,
            # what the trace holds and what the schedule accounted for (the model checks they agree)
            "instructions": e.instructions,
            "scheduled": e.scheduled,
            "folded": e.folded,
            "hoisted": e.hoisted,
            "recomputed": e.recomputed,
            "matmul_flops": e.flops,
            "scheduled_matmul_flops": e.scheduled_flops,
            "uncosted_opcodes": list(e.uncosted_opcodes),
            "reference_ok": self.reference_ok,
            "max_abs_err": self.max_abs_err,
            "max_err_over_bound": self.max_err_over_bound,
            "tolerance": self.tolerance,
            "sbuf_peak_bytes": self.sbuf_peak_bytes,
            "psum_peak_bytes": self.psum_peak_bytes,
            "spill_bytes": self.spill_bytes,
            "reload_bytes": self.reload_bytes,
            "spills": self.spills,
            "reloads": self.reloads,
            "unread_results": [{"line": line, "opcode": op, "instructions": n} for line, op, n in self.unread],
        }


def _loaded(kernel):
    """The Kernel behind `kernel` (a Kernel, source text, or `FILE.py[:FUNC]`); source text is
    loaded as `kernel.py`, the name its errors give, and never written to a file (a run killed at
    its time limit, or cancelled by ranking, would leave the file behind)."""
    from axon.targets.trainium.simulator import load_kernel, load_source

    if hasattr(kernel, "params") and hasattr(kernel, "path"):
        return kernel
    text = str(kernel)
    if "\n" in text:
        return load_source(text, "kernel.py")
    path, func = text, None
    if ":" in text and not Path(text).is_file():
        path, _, func = text.rpartition(":")
    if not Path(path).is_file():
        raise InputError(f"kernel file not found: {path}")
    return load_kernel(path, func or None)


@sandboxed(kernel_label)  # a child process: keywords timeout_s, memory_mb, cpu_s (simulator/sandbox.py)
def run(kernel, inputs: dict[str, Any], target: str = "trn2", timing_only: bool = False,
        reference: str | Callable | None = None, *, seed: int = 0, trace_path: str | Path | None = None,
        npz: str | Path | None = None, reduction_length: int | None = None, roundings: int = 1,
        args: dict[str, Any] | None = None, grid: tuple[int, ...] | None = None,
        strict_capacity: bool = False) -> RunReport:
    """Simulate `kernel` (a Kernel, a `FILE.py[:FUNC]` path, or source text) and estimate it; with
    `reference`, check its outputs (`reference_check`, which takes `reduction_length`, `roundings`).
    `args` are scalar arguments (parameters with Python defaults keep them unless given); `grid`
    launches an SPMD kernel: every instance runs, in turn, on one NeuronCore, and the estimate
    schedules all their instructions as one stream. A live set larger than SBUF/PSUM is spilled
    (the report says how much) unless `strict_capacity`, which makes it an error."""
    from axon.targets.trainium.simulator import simulate

    k = _loaded(kernel)
    hw = get_target(target)
    given = dict(load_npz(npz)) if npz else {}
    given.update(inputs)
    for name, value in (args or {}).items():
        if name in given:
            raise InputError(f"{name} is given both as an input and as an argument")
        given[name] = value
    args = resolve_inputs(k.params, given, timing_only=timing_only, seed=seed,
                          defaults=getattr(k, "defaults", None))
    result = simulate(k, args, target=hw.name, timing_only=timing_only, grid=grid,
                      strict_capacity=strict_capacity)
    est = estimate(result.trace, hw, keep_schedule=trace_path is not None)
    if trace_path is not None:
        try:
            write_perfetto(est, trace_path)
        except OSError as err:
            raise InputError(f"cannot write trace {trace_path}: {err}") from None
    check = None
    if reference is not None and not timing_only:
        check = reference_check(load_reference(reference), args, result.outputs,
                                reduction_length=reduction_length, roundings=roundings)
    return RunReport(kernel=getattr(k, "name", str(kernel)), target=hw.name, estimate=est,
                     outputs=None if timing_only else result.outputs,
                     reference_ok=None if check is None else check.ok,
                     max_abs_err=None if check is None else check.max_abs_err,
                     tolerance=None if check is None else check.tolerance,
                     max_err_over_bound=None if check is None else check.worst_ratio,
                     sbuf_peak_bytes=result.sbuf_peak_bytes, psum_peak_bytes=result.psum_peak_bytes,
                     spill_bytes=result.spill_bytes, reload_bytes=result.reload_bytes,
                     spills=result.spills, reloads=result.reloads, unread=_unread(result.trace))


def _unread(trace) -> tuple:
    """(line, opcode, count) of the instructions whose results are never read, by kernel line."""
    counts: dict = {}
    for ins in unread_results(trace):
        counts[ins.line, ins.opcode] = counts.get((ins.line, ins.opcode), 0) + 1
    return tuple((line, op, n) for (line, op), n in sorted(counts.items()))
