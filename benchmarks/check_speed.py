"""Wall time of a numerical check's float64 reference and error bounds at Llama-3-70B sizes.

    .venv/bin/python benchmarks/check_speed.py [--repeat 3] [--out benchmarks/results/check_speed.md]

At the largest cases the check of the winner is most of `axon optimize`'s wall time, and its
reference (axon.semantics.bounds.kernel_reference: the program in float64 with per-element error
bounds) most of the check. Each row times that reference on the rows a partial check of the
case's winner runs (optimize_largest.md: gqa and causal gqa 5 blocks of 128 rows, the
MatMul-family kernels 2 blocks of 512; gqa's quick case whole), on the program as written, seeded random bf16 inputs, three
ways: as the check runs it (freed memory kept for reuse, axon.heap; values of up to
batch.REFERENCE_ELEMENTS evaluated at once, larger ones over slices of batch axes, a slice over
slices of the next); with glibc's default allocator (what the check did before axon.heap); and with
slices of up to 64M elements (what it did before 2026-12-07: for gqa one kv head at a time). Each
run a fresh process, medians of `--repeat`, all in this one run.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

CASES = (  # (benchmark, sizes at the checked rows, the case they come from)
    ("gqa", {"kv": 8, "g": 4, "s": 512, "t": 2048, "d": 128}, "quick"),  # checked at full size
    ("gqa", {"kv": 8, "g": 8, "s": 640, "t": 8192, "d": 128}, "llama3_70b_s2048_t8192"),
    ("causal_gqa", {"kv": 8, "g": 8, "s": 640, "t": 8192, "d": 128}, "llama3_70b_s8192"),
    ("matmul", {"m": 1024, "k": 8192, "n": 28672}, "llama3_70b_mlp_up"),
    ("gated_mlp", {"m": 1024, "k": 8192, "n": 28672}, "llama3_70b"),
)


MODES = ("glibc", "64M", "check")  # the columns, the check's own way last


def one(name: str, sizes: dict, mode: str) -> float:
    """Seconds of one reference, in this process."""
    import axon.heap
    import axon.semantics.batch as batch
    from axon.semantics.bounds import kernel_reference
    from axon.suite import get

    if mode == "glibc":
        axon.heap._libc = None  # glibc's defaults: large arrays mapped and unmapped each time
    if mode == "64M":
        batch.REFERENCE_ELEMENTS = 1 << 26
    prog = get(name).program
    data = prog.random_inputs(sizes, "bfloat16")
    t = time.perf_counter()
    kernel_reference(prog.graph, data, "bfloat16")
    return time.perf_counter() - t


def timed(name: str, sizes: dict, mode: str) -> float:
    out = subprocess.run([sys.executable, __file__, "--one", name, json.dumps(sizes), mode],
                         capture_output=True, text=True, check=True)
    return float(out.stdout.split()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "check_speed.md"))
    ap.add_argument("--only", default="", help="benchmarks to time, comma-separated (default: all)")
    ap.add_argument("--one", nargs=3, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        print(one(args.one[0], json.loads(args.one[1]), args.one[2]))
        return
    rows = []
    for name, sizes, case in CASES:
        if args.only and name not in args.only.split(","):
            continue
        runs = {mode: [] for mode in MODES}
        for _ in range(args.repeat):
            for mode in MODES:  # interleaved: load changes hit all alike
                runs[mode].append(timed(name, sizes, mode))
        glibc, big, check = (statistics.median(runs[m]) for m in MODES)
        rows.append(f"| {name} | {case} | {sizes} | {glibc:.1f} | {big:.1f} | {check:.1f} | {glibc / check:.2f}x "
                    f"| {big / check:.2f}x |")
        print(rows[-1], flush=True)
    only = f" --only {args.only}" if args.only else ""
    text = (f"# Check reference speed\n\nCommand: `.venv/bin/python benchmarks/check_speed.py --repeat {args.repeat}{only}` "
            "(the script's docstring says what runs). Seconds, medians of "
            f"{args.repeat} fresh processes each, on this 2-core machine.\n\n"
            "| benchmark | case | sizes checked | glibc default (s) | 64M-element slices (s) | as the check runs (s) "
            "| speedup over glibc | over 64M slices |\n"
            "|---|---|---|---|---|---|---|---|\n" + "\n".join(rows) + "\n")
    Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
