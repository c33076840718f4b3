"""`axon demo`: the main job on a default example, for a first run from a fresh clone.

It runs every stage that exists on one benchmark case and says what each produced.
"""
from __future__ import annotations

import time

import numpy as np

from axon.suite import get

NAME = "demo"
HELP = "run Axon's pipeline on a default example (rmsnorm_matmul, small case)"


def add_arguments(parser) -> None:
    parser.add_argument("benchmark", nargs="?", default="rmsnorm_matmul", help="benchmark name (default rmsnorm_matmul)")
    parser.add_argument("--case", default="small", help="shape case (default small)")


def run(args) -> int:
    bench = get(args.benchmark)
    sizes = bench.sizes(args.case)
    program = bench.program
    print(f"program  {program.signature()}")
    print(f"sizes    {', '.join(f'{k}={v}' for k, v in sizes.items())}")
    print("traced graph:")
    print("  " + program.graph.pretty().replace("\n", "\n  "))
    inputs = program.random_inputs(sizes, dtype="float32")
    start = time.perf_counter()
    outputs = program.reference(**inputs)
    elapsed = time.perf_counter() - start
    for i, out in enumerate(outputs):
        print(f"reference output {i}: shape {out.shape}, mean {np.mean(out):+.4f}, std {np.std(out):.4f} "
              f"({elapsed * 1e3:.1f} ms in NumPy)")
    return 0
