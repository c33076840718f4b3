"""Loop-sampled timing (axon/targets/trainium/sampled_timing.py) against the full timing-only path.

    .venv/bin/python benchmarks/sampled_timing.py [--out benchmarks/results/sampled_timing.md]

Every kernel `optimize_suite.py` stored (benchmarks/results/optimize_{small,quick,largest}/, the
winners of each benchmark at its sizes), timed both ways on trn2 at its own shapes and dtype: the
full path simulates every instruction, the sampled path cuts long loops after `--keep` iterations
and extends them. The table gives both latencies, the relative difference, the instructions each
simulated and the wall time of each (medians of `--repeat` runs, in this one process).
"""
from __future__ import annotations

import argparse
import ast
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from axon.targets.trainium.hardware import get_target  # noqa: E402
from axon.targets.trainium.perfmodel import estimate  # noqa: E402
from axon.targets.trainium.sampled_timing import KEEP, sampled_latency  # noqa: E402
from axon.targets.trainium.simulator import ShapeDtype, load_kernel, simulate  # noqa: E402

CASES = ("small", "quick", "largest")


def stored_kernels(case: str):
    """(name, kernel path, {input: ShapeDtype}) of each kernel stored for `case`."""
    folder = REPO / "benchmarks" / "results" / f"optimize_{case}"
    for launch in sorted(folder.glob("*_launch.py")):
        kernel = launch.with_name(launch.name.replace("_launch.py", ".py"))
        text = launch.read_text()
        tree = ast.parse(text)
        shapes = next(ast.literal_eval(n.value) for n in tree.body
                      if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "SHAPES")
        dtype = "bfloat16" if "bfloat16" in text else "float32"
        yield kernel.stem, kernel, {k: ShapeDtype(tuple(v), dtype) for k, v in shapes.items()}


def measure(path: Path, inputs: dict, keep: int, repeat: int) -> dict:
    hw = get_target("trn2")
    kernel = load_kernel(str(path))
    full_s, fast_s = [], []
    for _ in range(repeat):
        t0 = time.perf_counter()
        sim = simulate(kernel, inputs, target=hw, timing_only=True, time_limit_s=1800)
        full = estimate(sim.trace, hw).latency_ns
        full_s.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        fast = sampled_latency(kernel, inputs, hw, keep=keep)
        fast_s.append(time.perf_counter() - t0)
    return {"full_ns": full, "sampled_ns": fast.latency_ns, "exact": fast.exact, "full_instructions": len(sim.trace),
            "sampled_instructions": fast.work, "full_s": statistics.median(full_s),
            "sampled_s": statistics.median(fast_s), "cut_loops": len(fast.loops)}


def render(rows: list, command: str, keep: int) -> str:
    errs = [abs(r["sampled_ns"] / r["full_ns"] - 1) for r in rows]
    cut = [r for r in rows if not r["exact"]]
    lines = [
        "# Loop-sampled timing against the full timing-only path (trn2)", "",
        f"Command: `{command}` (cut loops run {keep} iterations, one where a body of 256 instructions or "
        "more has fewer than 8; the cut run and one longer run per group of "
        "loops cut alike are views of one simulation; work: instructions simulated and timed, weighted by "
        "their cost, `sampled_timing._work`; the full path simulates and times each instruction once). "
        "Kernels: the stored winners of `optimize_suite.py` at each case's sizes. Times are medians "
        "of repeated runs in one process on this machine (2 cores).", "",
        f"- kernels: {len(rows)}; with a loop cut: {len(cut)} (the others ran whole: the same latency, exactly)",
        f"- |sampled / full - 1|: median {statistics.median(errs):.2%}, max {max(errs):.2%}",
    ]
    if cut:
        lines.append(f"- where loops were cut: full path {statistics.median(r['full_s'] for r in cut):.2f} s "
                     f"median, sampled {statistics.median(r['sampled_s'] for r in cut):.2f} s median "
                     f"(largest full {max(r['full_s'] for r in cut):.2f} s; its sampled time "
                     f"{max(cut, key=lambda r: r['full_s'])['sampled_s']:.2f} s)")
    lines += ["", "| case | kernel | full (us) | sampled (us) | difference | work full / sampled "
              "| time full / sampled (s) | cut loops |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['case']} | {r['kernel']} | {r['full_ns'] / 1e3:.1f} | {r['sampled_ns'] / 1e3:.1f} | "
                     f"{r['sampled_ns'] / r['full_ns'] - 1:+.2%} | {r['full_instructions']} / "
                     f"{r['sampled_instructions']} | {r['full_s']:.2f} / {r['sampled_s']:.2f} | {r['cut_loops']} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "sampled_timing.md"))
    ap.add_argument("--case", action="append", choices=CASES, help="default: all")
    ap.add_argument("--keep", type=int, default=KEEP)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args(argv)
    rows = []
    for case in a.case or CASES:
        for name, path, inputs in stored_kernels(case):
            r = measure(path, inputs, a.keep, a.repeat)
            rows.append({"case": case, "kernel": name, **r})
            print(f"{case} {name}: full {r['full_ns'] / 1e3:.1f} us sampled {r['sampled_ns'] / 1e3:.1f} us "
                  f"({r['sampled_ns'] / r['full_ns'] - 1:+.2%}); {r['full_s']:.2f} s / {r['sampled_s']:.2f} s",
                  flush=True)
    command = "python benchmarks/sampled_timing.py" + "".join(f" --case {c}" for c in a.case or []) + \
        (f" --keep {a.keep}" if a.keep != KEEP else "") + (f" --repeat {a.repeat}" if a.repeat != 3 else "")
    Path(a.out).write_text(render(rows, command, a.keep))
    return 0


if __name__ == "__main__":
    sys.exit(main())
