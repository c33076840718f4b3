"""`axon list`: the benchmark suite, as a table or as JSON."""
from __future__ import annotations

import json

from axon.suite import SUITE

NAME = "list"
HELP = "list the benchmarks (the paper's 20, HF RoPE, a fused-weight SwiGLU, scaled and causal attention) and their shape cases"


def add_arguments(parser) -> None:
    parser.add_argument("--json", action="store_true", help="print [{name, dims, cases}] as JSON")


def run(args) -> int:
    if args.json:
        rows = [{"name": b.name, "family": b.family, "signature": b.program.signature(),
                 "dims": b.program.dims, "cases": b.cases} for b in SUITE.values()]
        print(json.dumps(rows, indent=1))
        return 0
    width = max(len(n) for n in SUITE)
    print(f"{'benchmark':<{width}}  family  cases  program")
    for b in SUITE.values():
        print(f"{b.name:<{width}}  {b.family:<6}  {len(b.cases):>5}  {b.program.signature()}")
    return 0
