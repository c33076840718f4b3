"""A program that is several kernels, end to end.

`fusion.kernels.partition` cuts the program into pieces and relayouts. Each piece is optimized as
a program of its own (`search.optimize`: its rewrites, proofs, candidates, numerical check); each
relayout is emitted as a copy kernel (`tiling.relayout`) and timed. Then the whole pipeline runs in
the simulator on one set of random inputs, every kernel on what the one before it stored, and its
outputs are checked against the float64 reference of the whole program, under the error bounds of
a pipeline that rounds every intermediate to the kernel's dtype. The latency is the sum of the
steps' (they run one after another); the roofline is the whole program's.

The launcher written next to the kernels (`NAME_TARGET.py`) holds every kernel and one function,
named after the program, that calls them in order with the reshapes between them, as the check
(`run_steps`) ran them; a test runs that function with each kernel call going to the simulator.
"""
from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

import numpy as np

from axon.errors import UnsupportedError
from axon.frontend.program import InputShape, Program, program_of
from axon.fusion.kernels import Partition, Piece, Relayout
from axon.search.roofline import program_roofline
from axon.search.check import check as check_with_data
from axon.search.optimize import Ratios, finite_or_none, get_target, write_launcher
from axon.semantics.evaluate import dtype_named
from axon.tiling.relayout import relayout_kernel


@dataclass
class Step:
    kind: str  # "kernel" (a piece, optimized) or "relayout"
    name: str  # the kernel function's name
    inputs: tuple  # (value, shape it is read in) per kernel parameter, in order
    outputs: tuple[str, ...]  # the values it stores
    source: str = field(repr=False)
    latency_ns: float = 0.0
    baseline_latency_ns: float = 0.0
    result: object = field(default=None, repr=False)  # the piece's OptimizeResult
    perm: tuple = ()  # a relayout's
    shapes: tuple = ()  # of its outputs, as it stores them

    def to_json(self) -> dict:
        out = {"kind": self.kind, "name": self.name, "inputs": [[v, list(s)] for v, s in self.inputs],
               "outputs": list(self.outputs), "latency_ns": self.latency_ns,
               "baseline_latency_ns": finite_or_none(self.baseline_latency_ns)}
        if self.result is not None:
            out["result"] = self.result.to_json()
        return out


@dataclass
class PipelineResult(Ratios):
    benchmark: str
    target: str
    sizes: dict
    dtype: str
    inputs: tuple[str, ...]  # the program's input names, in order
    input_shapes: dict  # name -> shape
    steps: list
    results: tuple  # (value, shape) per program output
    roofline_ns: float
    max_abs_err: float
    check: str
    report: str = ""
    kernel_path: Optional[str] = None  # the launcher
    trace_path: Optional[str] = None
    time_s: dict = field(default_factory=dict)

    @property
    def latency_ns(self) -> float:
        return sum(s.latency_ns for s in self.steps)

    @property
    def baseline_latency_ns(self) -> float:
        return sum(s.baseline_latency_ns for s in self.steps)

    @property
    def kernel_source(self) -> str:
        return launcher(self)

    def to_json(self) -> dict:
        return {"benchmark": self.benchmark, "target": self.target, "sizes": self.sizes, "dtype": self.dtype,
                "kernels": len([s for s in self.steps if s.kind == "kernel"]),
                "best": {"kernel_path": self.kernel_path, "latency_ns": self.latency_ns,
                         "roofline_ns": self.roofline_ns, "roofline_fraction": self.roofline_fraction,
                         "max_abs_err": self.max_abs_err, "check": self.check},
                "baseline": {"latency_ns": finite_or_none(self.baseline_latency_ns),
                             "speedup": finite_or_none(self.speedup)},
                "steps": [s.to_json() for s in self.steps], "time_s": self.time_s}


def optimize_pipeline(prog: Program, part: Partition, sizes: dict, optimize_one: Callable, target, dtype: str,
                      seed: int = 0, out_dir=None, progress: Optional[Callable[[str], None]] = None,
                      **options) -> PipelineResult:
    """Each step of `part`, then the pipeline checked end to end (see the module doc).
    `optimize_one(program, sizes, **options)` optimizes one piece (search.optimize)."""
    say = progress or (lambda s: None)
    t0 = time.perf_counter()
    kernels = sum(isinstance(s, Piece) for s in part.steps)
    say(f"{prog.name} is {kernels} kernels and {len(part.steps) - kernels} relayouts (fusion.kernels)")
    binding = dict(sizes)
    shape_of = lambda shape: tuple(d.evaluate_int(binding) for d in shape)
    steps = []
    for i, step in enumerate(part.steps):
        name = f"{prog.name}_{i + 1}"
        if isinstance(step, Piece):
            piece = program_of(step.graph, name)
            say(f"kernel {i + 1} of {len(part.steps)}: {piece.signature()}")
            psizes = {d: binding[d] for d in piece.dims}
            r = optimize_one(piece, psizes, target=target.name, dtype=dtype, seed=seed, progress=_prefixed(say, i + 1),
                             **options)
            ins = tuple((step.feeds[n.params.name].source, shape_of(n.shape)) for n in step.graph.inputs)
            steps.append(Step("kernel", name, ins, step.outputs, r.kernel_source, r.latency_ns,
                              r.baseline_latency_ns, r, shapes=tuple(shape_of(o.shape) for o in step.graph.outputs)))
        else:
            steps.append(_relayout_step(step, name, shape_of, target, dtype))
            say(f"step {i + 1} of {len(part.steps)}: relayout {step.perm} of {step.source.source}: "
                f"{steps[-1].latency_ns / 1e3:.1f} us")
    results = tuple((f.source, shape_of(f.shape)) for f in part.results)
    roofline = program_roofline(prog.graph, binding, dtype, target.peaks(dtype))
    shapes = {n: spec.shape for n, spec in prog.input_shapes(binding, dtype).items()}
    result = PipelineResult(prog.name, target.name, dict(sizes), dtype, tuple(prog.input_names), shapes, steps,
                            results, roofline.ns, math.nan, "")
    _check(result, prog, target, binding, seed)
    result.time_s = {"total": round(time.perf_counter() - t0, 3)}
    result.report = _report(result)
    if out_dir is not None:
        write_pipeline(result, Path(out_dir))
    say(f"best {result.latency_ns / 1e3:.1f} us in {kernels} kernels ({result.roofline_fraction:.0%} of roofline); "
        f"baseline {_baseline(result)}")
    return result


def _prefixed(say, i: int):
    return lambda s: say(f"  [{i}] {s}")


def _relayout_step(step: Relayout, name: str, shape_of, target, dtype: str) -> Step:
    shape = shape_of(step.source.shape)
    source = relayout_kernel(name, shape, step.perm, target.emitter(dtype), target.limits().partitions)
    m = target.run(source, {"x": InputShape(shape, dtype_named(dtype))}, timing_only=True)
    return Step("relayout", name, ((step.source.source, shape),), (step.output,), source, m.latency_ns,
                m.latency_ns, perm=step.perm, shapes=(tuple(shape[p] for p in step.perm),))


def run_steps(result: PipelineResult, arrays: dict, call: Callable) -> list:
    """The pipeline on `arrays` (program inputs by name): `call(step, args)` runs one kernel and
    returns its outputs. Values between kernels are reshaped as the next one reads them."""
    values = dict(arrays)
    for step in result.steps:
        args = [np.asarray(values[v]).reshape(shape) for v, shape in step.inputs]
        outs = call(step, args)
        values.update(zip(step.outputs, outs))
    return [np.asarray(values[v]).reshape(shape) for v, shape in result.results]


def _check(result: PipelineResult, prog: Program, target, binding: dict, seed: int) -> None:
    """Every step on the data the steps before it stored: a kernel against the float64 reference
    of what it implements on those inputs, under the error bounds of its own roundings (as its
    own check was); a relayout exactly. Inputs are random normal, except an imported module's
    own weights and example inputs (`Program.examples`: unit-normal weights would put a block's
    scores where softmax is ill-conditioned). The whole program's float64 reference is compared
    too, and reported: through a block's softmax the analysis has no useful bound for that."""
    data = prog.random_inputs(binding, dtype=result.dtype, seed=seed)
    own = {k: np.asarray(v).astype(data[k].dtype) for k, v in prog.examples.items()
           if k in data and np.shape(v) == data[k].shape}
    data.update(own)
    worst, stored = [0.0], []

    def call(step, args):
        inputs = dict(zip(_params(step), args))
        outs = target.run(step.source, inputs, timing_only=False, timed=False).outputs
        if step.kind == "relayout":
            if not np.array_equal(np.asarray(outs[0]), np.transpose(args[0], step.perm)):
                raise UnsupportedError(f"{prog.name}: relayout {step.name} does not permute its input by {step.perm}")
            return outs
        r = step.result
        if r.implemented is None:  # a stored result: checked when it was found
            stored.append(step.name)
            return outs
        graph, sizes = r.implemented
        check = check_with_data(target, step.name, graph, r.winner, sizes, result.dtype, None, inputs, None, outs)
        if not check.ok:
            raise UnsupportedError(f"{prog.name}: kernel {step.name} fails on the values the kernels before it "
                                   f"stored: {check.explain()}")
        worst[0] = max(worst[0], check.worst_ratio)
        return outs

    outs = run_steps(result, data, call)
    want = prog.reference(**data)
    err = max(float(np.max(np.abs(np.asarray(o, np.float64) - w))) for o, w in zip(outs, want))
    scale = max(float(np.median(np.abs(w))) for w in want)
    result.max_abs_err = err
    every = "every kernel" if not stored else f"every kernel but {', '.join(stored)} (stored results, checked when found)"
    result.check = (f"{every} on what the kernels before it stored, at {binding}, from random normal inputs "
                    f"(seed {seed})" + (f", the import's example values of {', '.join(sorted(own))}" if own else "")
                    + f", {result.dtype}, each against the float64 reference of what it implements within the "
                    f"error bounds of its roundings (max |err| / bound {worst[0]:.3g}); relayouts exactly. "
                    f"End to end against the program's float64 reference: max |err| {err:.3g} "
                    f"(median |ref| {scale:.3g})")


def _params(step: Step) -> list[str]:
    """The kernel function's parameter names, in order (from its source's def line)."""
    head = next(line for line in step.source.splitlines() if line.startswith(f"def {step.name}("))
    return [p.strip() for p in head[head.index("(") + 1:head.rindex(")")].split(",") if p.strip()]


def launcher(result: PipelineResult) -> str:
    """One Python file: every kernel, then `NAME(inputs..., run=None)` calling them in order."""
    parts = [f'"""{result.benchmark} on {result.target} as {len(result.steps)} NKI kernels, run in order by '
             f'{result.benchmark}() below.\n\nEach kernel runs unchanged under nki.jit; between kernels a value is '
             "only reshaped\n(row-major, no data moves). `run(kernel, *args)` calls one kernel: by default the kernel "
             'itself,\nas on a NeuronCore from PyTorch (torch-neuronx) or JAX (jax-neuronx) arrays.\n"""',
             "import nki", "import nki.isa as nisa", "import nki.language as nl"]
    for step in result.steps:
        body = step.source.split("@nki.jit", 1)[1]
        parts.append(f"\n\n@nki.jit{body.rstrip()}")
    args = ", ".join(result.inputs)
    lines = [f"\n\ndef {result.benchmark}({args}, run=None):",
             f'    """{result.benchmark} end to end ({result.latency_ns / 1e3:.1f} us on {result.target} by Axon\'s model)."""',
             "    run = run or (lambda kernel, *args: kernel(*args))"]
    stored = dict(result.input_shapes)
    read = lambda v, shape: v if stored.get(v) == tuple(shape) else f"{v}.reshape({tuple(shape)})"
    for step in result.steps:
        ins = ", ".join(read(v, shape) for v, shape in step.inputs)
        lines.append(f"    {', '.join(step.outputs)} = run({step.name}, {ins})")
        stored.update(zip(step.outputs, step.shapes))
    lines.append(f"    return {', '.join(read(v, shape) for v, shape in result.results)}")
    return "\n".join(parts + lines) + "\n"


def write_pipeline(result: PipelineResult, out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = f"{result.benchmark}_{result.target}"
    path = out_dir / f"{stem}.py"
    path.write_text(launcher(result))
    result.kernel_path = str(path)
    write_launcher(get_target(result.target), path, result.benchmark, dict(result.input_shapes), result.dtype,
                   pipeline=True)
    (out_dir / f"{stem}.json").write_text(json.dumps(result.to_json(), indent=2) + "\n")


def _baseline(result: PipelineResult) -> str:
    if not math.isfinite(result.baseline_latency_ns):
        return "none: a kernel's direct lowering does not fit or failed in the simulator (its own report says which)"
    return f"{result.baseline_latency_ns / 1e3:.1f} us (each kernel's direct lowering), speedup {result.speedup:.2f}x"


def _report(result: PipelineResult) -> str:
    lines = [f"{result.benchmark} on {result.target} ({result.dtype}) {result.sizes}: "
             f"{len([s for s in result.steps if s.kind == 'kernel'])} kernels",
             f"  best:     {result.latency_ns / 1e3:.1f} us ({result.roofline_fraction:.0%} of the program's roofline "
             f"{result.roofline_ns / 1e3:.1f} us)",
             f"  baseline: {_baseline(result)}"]
    for i, s in enumerate(result.steps):
        if s.kind == "kernel":
            r = s.result
            what = (f"{r.roofline_fraction:.0%} of its roofline, {r.speedup:.2f}x its direct lowering, "
                    f"{r.fusion} passes, rewrites: {', '.join(r.rewrites) or 'none'}")
        else:
            what = f"relayout {s.perm} of {s.inputs[0][0]}{s.inputs[0][1]}"
        lines.append(f"  {i + 1}. {s.name}: {s.latency_ns / 1e3:.1f} us; {what}")
    lines.append(f"  check:    {result.check}")
    return "\n".join(lines)
