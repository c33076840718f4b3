"""Wall time of `axon optimize` as a user runs it (a fresh process, an empty kernel database), for
two checkouts back to back: what a change to the search costs or saves, on the same machine, in
the same minutes.

    python benchmarks/search_speed.py --before /tmp/wt_old --cases rmsnorm_matmul:small,gqa:small

Each case runs `--repeat` times per checkout, alternating, with the checkout's own Python path;
the table gives the medians, their ratio, and whether both found the same kernel (its sha256).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_once(checkout: Path, name: str, case: str) -> tuple[float, str]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out"
        cmd = [sys.executable, "-m", "axon", "optimize", name, "--case", case, "-o", str(out), "--quiet",
               "--json", str(Path(tmp) / "r.json")]
        t = time.perf_counter()
        proc = subprocess.run(cmd, cwd=checkout, capture_output=True, text=True,
                              env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(checkout), "AXON_CACHE_DIR": str(Path(tmp) / "db")})
        wall = time.perf_counter() - t
        if proc.returncode != 0:
            raise SystemExit(f"{checkout}: {name} {case} failed: {proc.stderr.strip()[-300:]}")
        kernel = json.loads((Path(tmp) / "r.json").read_text())["best"]["kernel_path"]
        body = "".join(line for line in Path(kernel).read_text().splitlines(keepends=True)
                       if not line.startswith("checked:"))  # the header line names where it was checked
        return wall, hashlib.sha256(body.encode()).hexdigest()[:16]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--before", required=True, help="a checkout of the code to compare with (git worktree)")
    ap.add_argument("--cases", required=True, help="name:case,... (suite benchmarks)")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "search_speed.md"))
    args = ap.parse_args()
    before = Path(args.before).resolve()
    rev = {p: subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=p, capture_output=True, text=True).stdout.strip()
           for p in (before, ROOT)}
    rows = []
    for spec in args.cases.split(","):
        name, case = spec.split(":")
        times = {before: [], ROOT: []}
        kernels = {}
        for _ in range(args.repeat):
            for checkout in (before, ROOT):
                wall, sha = run_once(checkout, name, case)
                times[checkout].append(wall)
                kernels[checkout] = sha
        a, b = statistics.median(times[before]), statistics.median(times[ROOT])
        rows.append(f"| {name} | {case} | {a:.1f} | {b:.1f} | {b / a:.2f} | "
                    f"{'yes' if kernels[before] == kernels[ROOT] else 'no'} |")
        print(rows[-1], flush=True)
    text = "\n".join([
        "# Search wall time, back to back", "",
        f"Command: `python benchmarks/search_speed.py --before <worktree at {rev[before]}> --cases {args.cases} "
        f"--repeat {args.repeat}` (HEAD {rev[ROOT]}; each run a fresh `axon optimize` process with an empty kernel "
        f"database; medians of {args.repeat} runs per checkout, alternating; 2-core machine, otherwise idle).", "",
        f"| benchmark | case | {rev[before]} (s) | {rev[ROOT]} (s) | ratio | same kernel |", "|---|---|---|---|---|---|",
        *rows, ""])
    Path(args.out).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
