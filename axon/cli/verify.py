"""`axon verify A B`: are two programs equivalent for all sizes?

A and B are `FILE.py:NAME` (NAME an @axon.program in the file) or the name of a benchmark of the
suite. Exit status 0: proved equivalent; 1: not equivalent (a counterexample confirmed in NumPy,
or a rank/shape mismatch); 3: neither could be shown (the undecided query and why).
"""
from __future__ import annotations

import importlib.util
import os
import sys

from axon.errors import InputError
from axon.frontend.program import Program
from axon.verification import Status, Verifier

NAME = "verify"
HELP = "prove two programs equivalent for all sizes, or show a counterexample"
EXIT = {Status.PROVED: 0, Status.REFUTED: 1, Status.UNKNOWN: 3}


def add_arguments(parser) -> None:
    parser.add_argument("first", metavar="FILE.py:F", help="a program: FILE.py:NAME, or a benchmark name")
    parser.add_argument("second", metavar="FILE.py:G", help="the program to compare it with")
    parser.add_argument("--timeout-ms", type=int, default=2000, help="per solver query (default 2000)")
    parser.add_argument("--seed", type=int, default=0, help="solver and random-input seed (default 0)")
    parser.add_argument("--trials", type=int, default=3, help="NumPy size bindings tried to refute (default 3)")


def load(spec: str) -> Program:
    """A program from `FILE.py:NAME` or a benchmark name; errors are one line (InputError)."""
    path, sep, name = spec.rpartition(":")
    if not sep:
        from axon import suite
        return suite.benchmark(spec)
    if not os.path.isfile(path):
        raise InputError(f"no such file: {path}")
    module_name = "_axon_verify_" + "".join(ch if ch.isalnum() else "_" for ch in os.path.abspath(path))
    module_spec = importlib.util.spec_from_file_location(module_name, path)
    if module_spec is None or module_spec.loader is None:
        raise InputError(f"cannot load {path} as a Python module")
    module = sys.modules.get(module_name)
    if module is None:
        module = importlib.util.module_from_spec(module_spec)
        sys.modules[module_name] = module
        try:
            module_spec.loader.exec_module(module)
        except Exception as err:
            del sys.modules[module_name]
            if isinstance(err, InputError):
                raise
            raise InputError(f"{path}: {type(err).__name__}: {err}") from None
    if not hasattr(module, name):
        raise InputError(f"{path} has no {name!r}")
    program = getattr(module, name)
    if not isinstance(program, Program):
        raise InputError(f"{path}:{name} is not an @axon.program (it is a {type(program).__name__})")
    return program


def run(args) -> int:
    first, second = load(args.first), load(args.second)
    verifier = Verifier(timeout_ms=args.timeout_ms, seed=args.seed, numeric_trials=args.trials)
    verdict = verifier.check_graphs(first.graph, second.graph)
    print(f"{first.signature()}\n{second.signature()}")
    headline = {Status.PROVED: "equivalent", Status.REFUTED: "NOT equivalent",
                Status.UNKNOWN: "unknown (neither proved nor refuted)"}[verdict.status]
    print(f"{headline}: {verdict.reason}")
    if verdict.counterexample is not None:
        cex = verdict.counterexample
        print("counterexample: sizes " + (", ".join(f"{k}={v}" for k, v in cex["sizes"].items()) or "(none)"))
        if "index" in cex:
            print(f"  output {cex['output']}[{', '.join(map(str, cex['index']))}]: "
                  f"{first.name} gives {cex['a']!r}, {second.name} gives {cex['b']!r} (NumPy, random inputs)")
    if verdict.status is Status.UNKNOWN and verdict.query:
        print(f"undecided query: {verdict.query}")
    print(f"solver time {verdict.solver_time_s * 1000:.1f} ms")
    return EXIT[verdict.status]
