"""`axon simulate KERNEL.py[:FUNC]`: run an NKI kernel on the CPU simulator and print its
estimated NeuronCore latency, per-engine utilisation and the kernel's own traffic bound (a bare
kernel has no program, so no program roofline; the logic lives in axon.targets.trainium.runner;
this module parses and prints)."""
from __future__ import annotations

import json
import math

from axon.errors import InputError

NAME = "simulate"
HELP = "simulate an NKI kernel on the CPU and estimate its latency on a NeuronCore"

_ENGINES = ("tensor", "vector", "scalar", "gpsimd", "dma")
_UNREAD_SHOWN = 5  # kernel lines with unread results printed (all are in --json)


def add_arguments(parser) -> None:
    parser.add_argument("kernel", metavar="KERNEL.py[:FUNC]",
                        help="kernel file; FUNC names the kernel function when the file has several")
    parser.add_argument("--target", choices=("trn1", "trn2"), default="trn2", help="NeuronCore to model (default trn2)")
    parser.add_argument("--input", action="append", default=[], metavar="NAME=SHAPE:DTYPE",
                        help="a parameter filled with seeded random data, e.g. a=4096x8192:bfloat16 (repeatable)")
    parser.add_argument("--inputs", metavar="FILE.npz", help="arrays named after the kernel's parameters")
    parser.add_argument("--arg", action="append", default=[], metavar="NAME=VALUE",
                        help="a scalar argument, e.g. eps=1e-5 or TILES_IN_BLOCK_M=8 (repeatable; "
                             "parameters with Python defaults keep them unless given)")
    parser.add_argument("--grid", metavar="AxB", help="SPMD launch grid, e.g. 2x4: every instance runs")
    parser.add_argument("--reference", metavar="FILE.py:FUNC",
                        help="NumPy function (or @axon.program) taking the same named arrays; the output is "
                             "checked against it within per-element error bounds")
    parser.add_argument("--reduction-length", type=int, metavar="K",
                        help="longest reduction in a NumPy reference, for its error bound (default: the largest "
                             "input dimension; an @axon.program reference has its own)")
    parser.add_argument("--roundings", type=int, default=1, metavar="R",
                        help="intermediate roundings to the kernel's narrowest dtype a NumPy reference's bound "
                             "allows (default 1)")
    parser.add_argument("--strict-capacity", action="store_true",
                        help="fail when the live SBUF/PSUM tiles exceed the target instead of spilling them to "
                             "HBM (the rule for Axon's own kernels; by default a kernel spills as the compiler would)")
    parser.add_argument("--timing-only", action="store_true",
                        help="skip the numerics (no data, no reference check): trace and timing only")
    parser.add_argument("--trace", metavar="OUT.json", help="write the engine timeline (Chrome/Perfetto JSON)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random inputs (default 0)")
    parser.add_argument("--timeout", type=float, default=600.0, metavar="SECONDS",
                        help="wall-clock limit of the simulation, which runs the kernel file (Python code) in a "
                             "child process; a kernel past it is killed (default 600)")
    parser.add_argument("--lint", action="store_true",
                        help="check the kernel's source against the documented NKI API (nki_api.NKI_VERSION) "
                             "instead of running it: one line per finding, exit 1 on any error")
    parser.add_argument("--memory", type=float, default=None, metavar="MB",
                        help="memory limit of that child process (default 3/4 of RAM, at most 16384)")


def _fmt_ns(ns: float) -> str:
    if ns >= 1e6:
        return f"{ns / 1e6:.3f} ms"
    if ns >= 1e3:
        return f"{ns / 1e3:.2f} us"
    return f"{ns:.0f} ns"


def _fmt_bytes(n: float) -> str:
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if n >= size:
            return f"{n / size:.2f} {unit}"
    return f"{int(n)} B"


def lint(args) -> int:
    from collections import Counter
    from pathlib import Path

    from axon.targets.trainium.nki_api import NKI_VERSION, lint as lint_source

    path = args.kernel.rpartition(":")[0] if ":" in args.kernel and not Path(args.kernel).exists() else args.kernel
    try:
        source = Path(path).read_text()
    except OSError as err:
        raise InputError(f"cannot read {path}: {err.strerror}") from None
    findings = lint_source(source, args.target)
    errors = [f for f in findings if f.severity == "error"]
    for f in errors:
        print(f.format(path))
    # deprecations are noted once per name, not once per line: they are not errors
    for text, n in Counter(f.text for f in findings if f.severity != "error").items():
        print(f"{path}: note: {text}" + (f" ({n} uses)" if n > 1 else ""))
    print(f"{path}: {len(errors)} error(s) against NKI {NKI_VERSION} ({args.target})")
    return 1 if errors else 0


def run(args) -> int:
    if args.lint:
        return lint(args)
    from axon.semantics.bounds import describe
    from axon.targets.trainium.runner import parse_arg, parse_grid, parse_input_spec, run as run_kernel

    given = {}
    for text in args.input:
        name, spec = parse_input_spec(text)
        if name in given:
            raise InputError(f"--input {name} given twice")
        given[name] = spec
    scalars = {}
    for text in args.arg:
        name, value = parse_arg(text)
        if name in scalars or name in given:
            raise InputError(f"--arg {name} given twice (or also as --input)")
        scalars[name] = value
    grid = parse_grid(args.grid) if args.grid else None
    if args.timeout <= 0:
        raise InputError("--timeout must be positive")
    if args.memory is not None and args.memory <= 0:
        raise InputError("--memory must be positive")
    # the kernel runs in a child process under --timeout and --memory (simulator/sandbox.py)
    report = run_kernel(args.kernel, given, target=args.target, timing_only=args.timing_only,
                        reference=args.reference, seed=args.seed, trace_path=args.trace, npz=args.inputs,
                        reduction_length=args.reduction_length, roundings=args.roundings,
                        args=scalars, grid=grid, strict_capacity=args.strict_capacity,
                        timeout_s=args.timeout, memory_mb=args.memory)
    if args.json:
        print(json.dumps(report.to_json(), indent=2))
        return 0 if report.reference_ok is not False else 1
    e = report.estimate
    print(f"kernel    {report.kernel} on {report.target}")
    print(f"latency   {_fmt_ns(e.latency_ns)}")
    print(f"bound     {_fmt_ns(e.kernel_bound_ns)}, the kernel's own traffic bound, not a program roofline "
          f"({100 * e.kernel_bound_fraction:.1f}% of the latency; its matmuls {_fmt_ns(e.kernel_bound_compute_ns)}, "
          f"its HBM bytes {_fmt_ns(e.kernel_bound_memory_ns)})")
    print("engine    busy          utilisation")
    for name in _ENGINES:
        print(f"  {name:7s} {_fmt_ns(e.engine_busy_ns.get(name, 0.0)):>12s}  {100 * e.utilisation.get(name, 0.0):5.1f}%")
    print(f"hbm       {_fmt_bytes(e.hbm_bytes)} moved ({_fmt_bytes(e.compulsory_hbm_bytes)} compulsory)")
    print(f"trace     {e.instructions} instructions, {e.scheduled} scheduled ({e.folded} zeroings folded), "
          f"{e.flops:.3g} matmul FLOPs" + (f", timeline in {args.trace}" if args.trace else ""))
    if e.hoisted or e.recomputed:
        print(f"reused    {e.hoisted} repeated loads served from SBUF, {e.recomputed} repeated computations on "
              "the same input values served by their first (the compiler's loop-invariant code motion)")
    if report.spills or report.reloads:
        print(f"spilled   the live tiles exceed on-chip memory (peak {_fmt_bytes(report.sbuf_peak_bytes)} SBUF, "
              f"{_fmt_bytes(report.psum_peak_bytes)} PSUM per partition): {report.spills} spills "
              f"({_fmt_bytes(report.spill_bytes)}) and {report.reloads} reloads ({_fmt_bytes(report.reload_bytes)}) "
              f"to and from HBM, timed as DMAs")
    if e.uncosted_opcodes:
        print(f"note      default cost for: {', '.join(e.uncosted_opcodes)}")
    for line, opcode, n in report.unread[:_UNREAD_SHOWN]:
        print(f"unread    line {line}: {opcode}'s result is never read ({n} instruction{'s' if n > 1 else ''}), "
              "work the kernel could leave out (timed all the same)")
    if len(report.unread) > _UNREAD_SHOWN:
        print(f"unread    and {len(report.unread) - _UNREAD_SHOWN} more lines (--json lists them)")
    if report.reference_ok is not None:
        verdict = "ok" if report.reference_ok else "MISMATCH"
        if report.reference_ok and not math.isfinite(report.max_abs_err):
            # only elements with no finite bound can differ that much and pass (up to MAX_UNBOUNDED of them)
            verdict = "ok where it has a bound; elements without one differ, within the share left unchecked"
        print(f"reference {verdict} (max abs err {report.max_abs_err:.4g}, "
              f"{report.max_err_over_bound:.3g} of its per-element bound at worst)")
        print(f"tolerance {describe(report.tolerance)}")
    return 0 if report.reference_ok is not False else 1
