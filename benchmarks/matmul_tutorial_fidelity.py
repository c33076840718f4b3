"""Fidelity of the NeuronCore performance model against published hardware measurements.

Runs our own versions of the four kernels of AWS's NKI matrix-multiplication tutorial
(examples/nki/matmul_tutorial/) on the CPU simulator in timing-only mode for the tutorial's
problem, bf16 [4096, 8192] @ [8192, 8192] on trn1, and compares the model's latency with the
latencies the tutorial publishes (trn1.32xlarge, one NeuronCore; shared/trainium.md). One model,
no per-kernel constants. Writes benchmarks/results/matmul_tutorial_fidelity.{md,json}.

Usage: .venv/bin/python benchmarks/matmul_tutorial_fidelity.py
"""
from __future__ import annotations

import json
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from axon.targets.trainium.runner import InputSpec, run  # noqa: E402

COMMAND = ".venv/bin/python benchmarks/matmul_tutorial_fidelity.py"
KERNELS = [  # (file, published latency ms, published hardware FLOPs utilisation %)
    ("tiled.py", 51.80, 10.98),
    ("hoist_load.py", 42.96, 13.24),
    ("block_free.py", 22.07, 26.51),
    ("fully_optimized.py", 6.97, 85.24),
]
M, K, N = 4096, 8192, 8192
TARGET = "trn1"
TOLERANCE = 0.25


def measure() -> list[dict]:
    inputs = {"lhsT": InputSpec((K, M), "bfloat16"), "rhs": InputSpec((K, N), "bfloat16")}
    rows = []
    for name, published_ms, published_hfu in KERNELS:
        path = ROOT / "examples" / "nki" / "matmul_tutorial" / name
        start = time.perf_counter()
        report = run(str(path), inputs, target=TARGET, timing_only=True)
        wall = time.perf_counter() - start
        e = report.estimate
        model_ms = e.latency_ns / 1e6
        rows.append({
            "kernel": name.removesuffix(".py"),
            "published_ms": published_ms,
            "model_ms": round(model_ms, 3),
            "error_pct": round(100 * (model_ms / published_ms - 1), 1),
            "published_hfu_pct": published_hfu,
            "model_hfu_pct": round(100 * e.kernel_bound_compute_ns / e.latency_ns, 2),
            "kernel_bound_ms": round(e.kernel_bound_ns / 1e6, 3),
            "hbm_gb": round(e.hbm_bytes / 1e9, 3),
            "busy_ms": {k: round(v / 1e6, 3) for k, v in e.engine_busy_ns.items()},
            "instructions": e.instructions,
            "wall_s": round(wall, 2),
        })
    return rows


def render(rows: list[dict]) -> str:
    within = all(abs(r["error_pct"]) <= 100 * TOLERANCE for r in rows)
    model_order = [r["kernel"] for r in sorted(rows, key=lambda r: -r["model_ms"])]
    published_order = [r["kernel"] for r in sorted(rows, key=lambda r: -r["published_ms"])]
    lines = [
        "# Performance-model fidelity: NKI matmul tutorial on trn1",
        "",
        f"bf16 [{M},{K}] @ [{K},{N}], one NeuronCore-v2. Published: AWS NKI matrix-multiplication tutorial",
        "(trn1.32xlarge). Model: Axon's simulator (timing-only) + performance model, our own kernels in",
        "examples/nki/matmul_tutorial/. HFU = TensorE time at peak for the FLOPs / latency. Instructions:",
        "the trace's, less PSUM zeroings folded into their matmuls; the model checks it scheduled each.",
        "",
        f"Command: `{COMMAND}`",
        "",
        "| kernel | published ms | model ms | error | published HFU | model HFU | TensorE busy ms | DMA busy ms | HBM GB | instructions | wall s |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(f"| {r['kernel']} | {r['published_ms']:.2f} | {r['model_ms']:.2f} | {r['error_pct']:+.1f}% | "
                     f"{r['published_hfu_pct']:.2f}% | {r['model_hfu_pct']:.2f}% | {r['busy_ms']['tensor']:.2f} | "
                     f"{r['busy_ms']['dma']:.2f} | {r['hbm_gb']:.2f} | {r['instructions']} | {r['wall_s']:.1f} |")
    lines += [
        "",
        f"All within {int(100 * TOLERANCE)}%: {'yes' if within else 'NO'}. "
        f"Same order as published: {'yes' if model_order == published_order else 'NO'}.",
        f"Machine: {platform.machine()}, Python {platform.python_version()} (wall s: simulator + model, "
        "timing-only; noisy on a shared machine).",
        "",
        "Notes. The first three kernels are DMA-bound in the model and on hardware. The published",
        "latencies imply ~100 GB/s for their 1 KiB-per-partition (and 256 B) transfers. The model's",
        "payload efficiency saturates at 4 KiB of contiguous HBM bytes, as the DMA bandwidth guide says,",
        "and falls as a power law below it; the exponent (0.6, hardware.py) is fitted to these three",
        "rows (benchmarks/calibrate.py): 118 GB/s at 1 KiB and 52 GB/s at 256 B. The fully optimised",
        "kernel is TensorE-bound: 512 + 64 cycles per matmul.",
        "",
    ]
    return "\n".join(lines)


def main() -> int:
    rows = measure()
    text = render(rows)
    print(text)
    out = ROOT / "benchmarks" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / "matmul_tutorial_fidelity.md").write_text(text)
    (out / "matmul_tutorial_fidelity.json").write_text(json.dumps(
        {"command": COMMAND, "target": TARGET, "shape": [M, K, N], "dtype": "bfloat16", "rows": rows}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
