"""`axon demo`: the main job on a default example, for a first run from a fresh clone.

It traces the program, discovers and proves its variants, then optimizes it for a target and
writes the winning kernel, saying what each stage produced.
"""
from __future__ import annotations

import sys

from axon.suite import get

NAME = "demo"
HELP = "run the whole pipeline on a default example (rmsnorm_matmul, small case, trn2)"


def add_arguments(parser) -> None:
    parser.add_argument("benchmark", nargs="?", default="rmsnorm_matmul", help="benchmark name (default rmsnorm_matmul)")
    parser.add_argument("--case", default="small", help="shape case (default small)")
    parser.add_argument("--target", default="trn2", choices=["trn1", "trn2"])
    parser.add_argument("-o", "--out-dir", default="axon_out", help="where the kernel, trace and JSON go")


def _say(text: str) -> None:
    print(f"axon: {text}", file=sys.stderr, flush=True)


def run(args) -> int:
    from axon.rewriting import discover
    from axon.search.optimize import launcher_path, optimize

    bench = get(args.benchmark)
    sizes = bench.sizes(args.case)
    program = bench.program
    print(f"== 1. program  {program.signature()}")
    print("  " + program.graph.pretty().replace("\n", "\n  "))

    print("== 2. rewrites discovered by operator propagation and proved for all sizes")
    nugraph, _ = discover(program.graph)
    proved = [p for p in nugraph.proofs if p.status == "PROVED"]
    for proof in proved:
        print(f"  {proof.lhs} = {proof.rhs}   ({proof.solver_time_s * 1e3:.0f} ms)")
    if not proved:
        print("  none: no operator pair of this program admits a true propagation")

    print(f"== 3. optimize for {args.target} at {', '.join(f'{k}={v}' for k, v in sizes.items())} (bfloat16)")
    result = optimize(program, sizes, target=args.target, out_dir=args.out_dir, progress=_say)
    print("  " + result.report.replace("\n", "\n  "))
    print(f"== kernel written to {result.kernel_path} (its launcher from PyTorch and JAX: "
          f"{launcher_path(result.kernel_path)}); Perfetto timeline {result.trace_path}")
    print("   (latencies are the performance model's; kernels ran on Axon's NKI simulator)")
    return 0
