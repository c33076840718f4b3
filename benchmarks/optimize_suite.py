"""Run `axon optimize` over the suite's benchmarks at one shape case and tabulate the results.

    python benchmarks/optimize_suite.py --case quick [--target trn2] [--only a,b]
    python benchmarks/optimize_suite.py --case largest   # each benchmark's largest case (120 s goal)

Each benchmark runs as its own `axon optimize` process with a fresh (empty) result cache, so the
wall time is what a user waits for. Writes benchmarks/results/optimize_<case>.md and .json.
"""
from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from axon.suite import SUITE  # noqa: E402

ROOFLINE_GOAL = {"rmsnorm_matmul", "softmax_matmul", "gated_mlp", "transpose_matmul"}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--case", default="quick")
    ap.add_argument("--target", default="trn2")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--only", default="")
    args = ap.parse_args()
    names = [n for n in SUITE if not args.only or n in args.only.split(",")]
    case_of = {n: largest_case(n) if args.case == "largest" else args.case for n in names}
    out_dir = ROOT / "benchmarks" / "results" / f"optimize_{args.case}"
    rows = []
    for name in names:
        with tempfile.TemporaryDirectory() as cache:
            jpath = out_dir / f"{name}.json"
            cmd = [sys.executable, "-m", "axon", "optimize", name, "--case", case_of[name], "--target", args.target,
                   "--dtype", args.dtype, "-o", str(out_dir), "--json", str(jpath), "--quiet"]
            t = time.perf_counter()
            proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT,
                                  env={**__import__("os").environ, "AXON_CACHE_DIR": cache})
            wall = time.perf_counter() - t
        if proc.returncode != 0:
            why = proc.stderr.strip().splitlines()[-1:] or [
                f"killed by signal {-proc.returncode}" + (" (out of memory?)" if proc.returncode == -9 else "")
                if proc.returncode < 0 else f"exit {proc.returncode}, nothing on stderr"]
            rows.append({"benchmark": name, "ok": False, "error": why, "wall_s": wall})
            print(f"{name:20s} FAILED ({wall:.1f} s): {proc.stderr.strip()[-300:]}", flush=True)
            continue
        data = json.loads(jpath.read_text())
        b = data["best"]
        row = {"benchmark": name, "ok": True, "sizes": data["sizes"], "latency_us": b["latency_ns"] / 1e3,
               "baseline_us": _us(data["baseline"]["latency_ns"]), "speedup": data["baseline"]["speedup"],
               "baseline_none": data["baseline"].get("none", ""),
               "roofline_fraction": b["roofline_fraction"], "max_abs_err": b["max_abs_err"], "fusion": b["fusion"],
               "rewrites": b["rewrites"], "candidates": data["candidates"], "wall_s": wall,
               "check": _checked(b["checked"])}
        rows.append(row)
        print(f"{name:20s} {row['latency_us']:10.1f} us  base {_cell(row['baseline_us'], '.1f')} us  "
              f"{_cell(row['speedup'], '.2f', unit='x')}  roof {row['roofline_fraction']:.0%}  {wall:.1f} s", flush=True)
    cmdline = "python benchmarks/optimize_suite.py " + " ".join(sys.argv[1:])
    json_path = ROOT / "benchmarks" / "results" / f"optimize_{args.case}.json"
    if args.only and json_path.exists():  # the other benchmarks' rows stay, with the command that made them
        old = json.loads(json_path.read_text())
        cmdline = f"{old['command']}, then {cmdline}"
        fresh = {r["benchmark"]: r for r in rows}
        order = list(SUITE)
        rows = sorted([r for r in old["rows"] if r["benchmark"] not in fresh] + rows,
                      key=lambda r: order.index(r["benchmark"]) if r["benchmark"] in order else len(order))
    md = [f"# axon optimize, case `{args.case}`, {args.target}, {args.dtype}", "",
          f"Command: `{cmdline}` (each benchmark a fresh `axon optimize` process, empty result cache; "
          f"2-core machine). Latencies are the performance model's, on kernels checked numerically on the "
          f"simulator (column `check`: at full size, or on blocks of rows (and of columns) where a full-size "
          f"check would exceed 1e11 multiply-adds). Baseline: the direct lowering (one pass per operator with HBM round trips, "
          f"default tiling, no rewrite, no fusion). Candidates: planned (tilings x layouts x precisions x "
          f"lowering alternatives), emitted (built when ranking reached them; '-': every one, before "
          f"2026-12-06), rejected by the target's limits before planning, evaluated by the model.", "",
          "| benchmark | sizes | best (us) | direct (us) | speedup | roofline | max abs err | check | fusion | rewrites | candidates (planned/emitted/rej/eval) | time (s) |",
          "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if not r["ok"]:
            md.append(f"| {r['benchmark']} | | FAILED: {' '.join(r['error'])} | | | | | | | | | {r['wall_s']:.1f} |")
            continue
        c = r["candidates"]
        goal = " (goal 70%)" if r["benchmark"] in ROOFLINE_GOAL else ""
        md.append(f"| {r['benchmark']} | {','.join(f'{k}={v}' for k, v in r['sizes'].items())} | {r['latency_us']:.1f} | "
                  f"{_cell(r['baseline_us'], '.1f', r.get('baseline_none'))} | {_cell(r['speedup'], '.2f', unit='x')} | "
                  f"{r['roofline_fraction']:.0%}{goal} | "
                  f"{r['max_abs_err']:.3g} | {r['check']} | {r['fusion']} | {len(r['rewrites'])} | "
                  f"{c['generated']}/{c.get('emitted', '-')}/{c['rejected_by_constraints']}/{c['evaluated']} | "
                  f"{r['wall_s']:.1f} |")
    (ROOT / "benchmarks" / "results" / f"optimize_{args.case}.md").write_text("\n".join(md) + "\n")
    json_path.write_text(json.dumps({"command": cmdline, "rows": rows}, indent=2) + "\n")
    return 0 if all(r["ok"] for r in rows) else 1


def _checked(checked: dict) -> str:
    """The check column: 'full size', or the checked blocks of rows and of columns out of all."""
    parts = [f"{p['dim']} {kind} {sum(e - s for s, e in p['ranges'])} of {p['of']}"
             for kind in ("rows", "columns") if isinstance(p := checked.get(kind, "all"), dict)]
    return " and ".join(parts) if parts else "full size"


def _us(ns):
    return None if ns is None else ns / 1e3


def _cell(x, spec: str, why: str = "", unit: str = "") -> str:
    """A number of the table, or a dash (with the reason) where there is none."""
    if x is not None:
        return format(x, spec) + unit
    return f"— ({why.split(':')[0]})" if why else "—"


def largest_case(name: str) -> str:
    """The case with the most work: the largest product of its sizes."""
    cases = SUITE[name].cases
    return max(cases, key=lambda c: math.prod(cases[c].values()))


if __name__ == "__main__":
    sys.exit(main())
