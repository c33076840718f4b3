"""Parallel and deterministic search (issue 13): the same kernel with 1 and 2 workers, under load and
with Ray; a stored case as a whole process; the quick bench grid with 1 and 2 workers.

    python benchmarks/parallel_search.py [--grid-benchmarks all|NAME,...] [--skip-grid] [--corpus DIR]
                                         [--report benchmarks/results/bench_quick_trn2.json]

Writes benchmarks/results/parallel_search.md (and .json). Every optimize runs as its own `axon`
process with its own empty kernel database, so nothing is reused between the runs compared; "under
load" has one busy process per core beside it. The grid is `axon bench --grid quick` into two
fresh JSON files, whose cases are compared with the wall-clock fields left out; `--corpus` gives
both runs the AWS kernels' column, and `--report` keeps the 2-worker run's report (its Markdown
beside it, plots in benchmarks/results/plots): the bench report of the README.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import multiprocessing
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "parallel_search"
AXON = [sys.executable, "-m", "axon"]
CASE = ["rmsnorm_matmul", "--case", "quick"]
WALL_CLOCK = ("wall_s", "search_s")


def _spin(stop):
    while not stop.is_set():
        sum(i * i for i in range(10_000))


def optimize(cache: Path, out: Path, *extra: str, load: bool = False) -> dict:
    """One `axon optimize` process: its wall time, the kernel's hash and the JSON summary."""
    stop = multiprocessing.Event()
    spinners = [multiprocessing.Process(target=_spin, args=(stop,)) for _ in range(os.cpu_count() or 1)] if load else []
    for p in spinners:
        p.start()
    try:
        t = time.perf_counter()
        subprocess.run(AXON + ["optimize", *CASE, "-o", str(out), "--quiet", *extra], check=True,
                       env={**os.environ, "AXON_CACHE_DIR": str(cache)}, stdout=subprocess.DEVNULL)
        wall = time.perf_counter() - t
    finally:
        stop.set()
        for p in spinners:
            p.join()
    summary = json.loads((out / "rmsnorm_matmul_trn2.json").read_text())
    kernel = (out / "rmsnorm_matmul_trn2.py").read_bytes()
    return {"wall_s": round(wall, 2), "kernel_sha256": hashlib.sha256(kernel).hexdigest()[:16],
            "latency_us": round(summary["best"]["latency_ns"] / 1e3, 3),
            "evaluated": summary["candidates"]["evaluated"], "time_s": summary["time_s"]}


def determinism(tmp: Path) -> dict:
    runs = {}
    for label, extra, load in (("1 worker, idle", ["--workers", "1"], False),
                               ("2 workers, idle", ["--workers", "2"], False),
                               ("2 workers, under load", ["--workers", "2"], True),
                               ("1 worker, under load", ["--workers", "1"], True),
                               ("Ray (local instance)", ["--ray", "local"], False)):
        print(f"optimize {' '.join(CASE)}: {label}", flush=True)
        runs[label] = optimize(tmp / label.replace(" ", "_"), tmp / f"out_{len(runs)}", *extra, load=load)
    cache = tmp / "1_worker,_idle"
    t = time.perf_counter()
    subprocess.run(AXON + ["optimize", *CASE, "-o", str(tmp / "stored"), "--quiet"], check=True,
                   env={**os.environ, "AXON_CACHE_DIR": str(cache)}, stdout=subprocess.DEVNULL)
    return {"runs": runs, "stored_case_process_s": round(time.perf_counter() - t, 2),
            "identical": len({r["kernel_sha256"] for r in runs.values()}) == 1}


def grid(tmp: Path, benchmarks: str, corpus: str | None, report: str | None) -> dict:
    out = {}
    for workers in (1, 2):
        path = Path(report) if report and workers == 2 else tmp / f"grid_{workers}.json"
        cmd = AXON + ["bench", "--grid", "quick", "--json", str(path), "--workers", str(workers), "--quiet", "--fresh"]
        if benchmarks != "all":
            cmd += ["--benchmarks", benchmarks]
        if corpus:
            cmd += ["--corpus", corpus]
        if report and workers == 2:
            cmd += ["--plots", str(ROOT / "benchmarks" / "results" / "plots")]
        print(f"axon bench --grid quick --workers {workers}", flush=True)
        t = time.perf_counter()
        subprocess.run(cmd, env={**os.environ, "AXON_CACHE_DIR": str(tmp / f"grid_cache_{workers}")},
                       stdout=subprocess.DEVNULL)
        out[workers] = {"wall_s": round(time.perf_counter() - t, 1), "doc": json.loads(path.read_text())}
    strip = lambda d: [{k: v for k, v in c.items() if k not in WALL_CLOCK} for c in d["cases"]]
    return {"wall_s": {w: r["wall_s"] for w, r in out.items()}, "speedup": round(out[1]["wall_s"] / out[2]["wall_s"], 2),
            "cases": len(out[1]["doc"]["cases"]), "same_report": strip(out[1]["doc"]) == strip(out[2]["doc"])
            and out[1]["doc"]["geomean"] == out[2]["doc"]["geomean"]}


def markdown(doc: dict) -> str:
    d = doc["determinism"]
    lines = ["# Parallel and deterministic search", "", f"Command: `{doc['command']}` (code {doc['commit']}, "
             f"{doc['cpus']} cores).", "", f"## `axon optimize {' '.join(CASE)}`, each run with an empty kernel database",
             "", "| run | wall s | symbolic s | selection s | kernel sha256 | latency us | ranked |", "|---|---|---|---|---|---|---|"]
    for label, r in d["runs"].items():
        lines.append(f"| {label} | {r['wall_s']} | {r['time_s']['symbolic']} | {r['time_s']['selection']} | "
                     f"`{r['kernel_sha256']}` | {r['latency_us']} | {r['evaluated']} |")
    lines += ["", f"Byte-identical kernels in every run: {'yes' if d['identical'] else 'NO'}.",
              f"The same case again, stored: {d['stored_case_process_s']} s as a whole `axon optimize` process."]
    if "grid" in doc:
        g = doc["grid"]
        lines += ["", "## `axon bench --grid quick`", "",
                  f"{g['cases']} cases: {g['wall_s'][1]} s with 1 worker, {g['wall_s'][2]} s with 2 workers: "
                  f"**{g['speedup']}x**; the same report (wall-clock fields aside): {'yes' if g['same_report'] else 'NO'}."]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--grid-benchmarks", default="all", help="the quick grid's benchmarks (default: all)")
    ap.add_argument("--skip-grid", action="store_true")
    ap.add_argument("--corpus", help="fetched AWS kernel checkouts for the grid's AWS column (axon bench --corpus)")
    ap.add_argument("--report", help="keep the 2-worker grid's report (JSON path; the Markdown beside it)")
    args = ap.parse_args()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    doc = {"command": "python benchmarks/parallel_search.py " + " ".join(sys.argv[1:]), "commit": commit,
           "cpus": os.cpu_count()}
    with tempfile.TemporaryDirectory(prefix="axon_parallel_") as tmp:
        doc["determinism"] = determinism(Path(tmp))
        if not args.skip_grid:
            doc["grid"] = grid(Path(tmp), args.grid_benchmarks, args.corpus, args.report)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.with_suffix(".json").write_text(json.dumps(doc, indent=1) + "\n")
    OUT.with_suffix(".md").write_text(markdown(doc))
    print(markdown(doc))


if __name__ == "__main__":
    main()
