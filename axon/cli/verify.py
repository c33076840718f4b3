"""`axon verify A B`: are two programs equivalent for all sizes?

A and B are `FILE.py:NAME` (NAME an @axon.program in the file) or the name of a benchmark of the
suite; inputs correspond by position, and each program's dimension names are its own. Exit
status 0: proved equivalent (the verdict states the sizes and assumptions the proof covers);
1: not equivalent, with a counterexample confirmed in high precision (or outputs that differ in
count, rank or shape); 2: bad input (one line); 3: neither could be shown (the undecided query
and why).
"""
from __future__ import annotations

import sys

from axon.errors import AxonError
from axon.frontend.loading import load_program
from axon.frontend.program import Program
from axon.verification import Status, Verifier

NAME = "verify"
HELP = "prove two programs equivalent for all sizes, or show a counterexample"
EXIT = {Status.PROVED: 0, Status.REFUTED: 1, Status.UNKNOWN: 3}
UNDECIDED = 3


def add_arguments(parser) -> None:
    parser.add_argument("first", metavar="FILE.py:F", help="a program: FILE.py:NAME, or a benchmark name")
    parser.add_argument("second", metavar="FILE.py:G", help="the program to compare it with")
    parser.add_argument("--timeout-ms", type=int, default=2000, help="per solver query (default 2000)")
    parser.add_argument("--seed", type=int, default=0, help="solver and random-input seed (default 0)")
    parser.add_argument("--trials", type=int, default=3, help="NumPy size bindings tried to refute (default 3)")


def load(spec: str) -> Program:
    """A program from `FILE.py:NAME` or a benchmark name; errors are one line (InputError)."""
    return load_program(spec)[0]


def run(args) -> int:
    first, second = load(args.first), load(args.second)
    verifier = Verifier(timeout_ms=args.timeout_ms, seed=args.seed, numeric_trials=args.trials)
    try:
        verdict = verifier.check_programs(first.graph, second.graph)
    except AxonError:
        raise
    except Exception as err:  # a defect of ours must not read as "not equivalent" (exit 1)
        print(f"axon: error: verification failed ({type(err).__name__}: {err}); undecided", file=sys.stderr)
        return UNDECIDED
    print(f"{first.signature()}\n{second.signature()}")
    headline = {Status.PROVED: "equivalent", Status.REFUTED: "NOT equivalent",
                Status.UNKNOWN: "unknown (neither proved nor refuted)"}[verdict.status]
    print(f"{headline}: {verdict.reason}")
    if verdict.counterexample is not None:
        cex = verdict.counterexample
        print("counterexample: sizes " + (", ".join(f"{k}={v}" for k, v in cex["sizes"].items()) or "(none)"))
        if "index" in cex:
            print(f"  output {cex['output']}[{', '.join(map(str, cex['index']))}]: "
                  f"{first.name} gives {cex['a']!r}, {second.name} gives {cex['b']!r} "
                  "(random inputs, confirmed in high precision)")
    if verdict.status is Status.UNKNOWN and verdict.query:
        print(f"undecided query: {verdict.query}")
    print(f"solver time {verdict.solver_time_s * 1000:.1f} ms")
    return EXIT[verdict.status]
