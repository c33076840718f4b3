"""`axon variants BENCH|FILE.py:F`: the proved-equivalent variants operator propagation finds.

Prints the nuGraph's size, what propagation checked and what the solver said, the soundness
double check, every proved rewrite as an equation over opaque operands, then each variant as a
listing with the chain of rewrites that led to it. Progress goes to stderr; `--json` prints one
JSON object instead.
"""
from __future__ import annotations

import json
import sys
import time
from dataclasses import asdict

from axon.errors import InputError

NAME = "variants"
HELP = "discover and prove the variants of a program by operator propagation"


def add_arguments(parser) -> None:
    parser.add_argument("program", metavar="BENCH|FILE.py:F", help="a benchmark name or FILE.py:NAME")
    parser.add_argument("--limit", type=int, default=20, help="variants to show (default 20)")
    parser.add_argument("--timeout-ms", type=int, default=2000, help="per solver query (default 2000)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--quiet", action="store_true", help="no progress on stderr")


def run(args) -> int:
    from axon.cli.verify import load
    from axon.rewriting import Guards, default_verifier, discover

    if args.limit < 1:
        raise InputError(f"--limit must be at least 1, got {args.limit}")
    program = load(args.program)
    progress = None if args.quiet or args.json else (lambda text: print(f"axon variants: {text}", file=sys.stderr))
    start = time.perf_counter()
    nu, stats = discover(program.graph, default_verifier(args.timeout_ms), Guards(), progress)
    variants = nu.extract_variants(args.limit)
    elapsed = time.perf_counter() - start
    if args.json:
        print(json.dumps({
            "program": program.signature(), "eclasses": nu.num_classes, "enodes": nu.num_enodes,
            "seconds": round(elapsed, 3), "stats": asdict(stats), "proofs": [asdict(p) for p in nu.proofs],
            "variants": [{"rewrites": list(v.rewrites), "listing": v.graph.pretty()} for v in variants],
        }, indent=1, default=str))
        return 0
    print(program.signature())
    print(f"nuGraph: {nu.num_classes} e-classes, {nu.num_enodes} e-nodes ({elapsed:.2f} s)")
    print(f"propagation: {stats.line()}")
    print(f"soundness double check: {stats.double_check_agree}/{stats.double_checks} comparisons agree "
          f"({stats.unsound} unsound)")
    if stats.unsound:
        print("WARNING: the verifier proved a rewrite that NumPy refutes; see UNSOUND below")
    shown = [p for p in nu.proofs if p.proved or p.status == "UNSOUND" or p.status == "UNKNOWN"]
    if shown:
        print("rewrites:")
    for p in shown:
        memo = ", memoised" if p.cached else f", {p.solver_time_s * 1000:.0f} ms"
        print(f"  P{p.id} {p.status.lower()}: {p.equation()}   for {p.operands}")
        print(f"      {p.rewrite}; {p.reason}{memo}")
    print(f"variants: {len(variants)}{' (limit reached)' if len(variants) == args.limit else ''}")
    for i, v in enumerate(variants, 1):
        how = "the program as written" if not v.rewrites else "via " + ", ".join(f"P{r}" for r in v.rewrites)
        print(f"variant {i}: {how}")
        for r in v.rewrites:
            print(f"  P{r}: {nu.proofs[r].equation()}")
        print("  " + v.graph.pretty().replace("\n", "\n  "))
    return 0
