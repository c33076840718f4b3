"""Attention at the cases issue 12 names: Axon's kernel against the program roofline and against
AWS's own attention kernels run in the same simulator and model at the same shapes.

    python benchmarks/attention.py [--corpus DIR] [--target trn2] [--only gqa:quick,...] [--out NAME]

Cases: gqa (softmax(q k^T) v, grouped query heads) at its quick and Llama-3-70B prefill cases,
scaled attention (1/sqrt(128)) at s = t = 4096 and its quick case, and decode (1 and 16 query
rows per head against 4096 and 32768 keys, head dim 128 and 64), and causal GQA prefill (s = t =
2048 at Llama-3-8B and -70B head counts, head dim 128, and at Llama-3.2-1B's, head dim 64; AWS's
kernels with their causal masks on), and one head at s = t = 128 and 4096, the shapes of AWS's
attention performance tutorial (attn_fwd_v1 .. v11, in a table of their own). The roofline
is the program's: for a causal case it counts the masked half of the scores too. Each Axon kernel is the one
`optimize` reports, so it passed its numerical check (the report says which rows, at what
tolerance); an AWS kernel's time counts only when it passed its own check (axon/bench/aws.py).
With `--corpus DIR` (fetched checkouts of nki-samples, nki-library, ...; see
benchmarks/fidelity.py) the AWS columns are filled. Writes benchmarks/results/attention.md and .json.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from axon.bench import DATA_CHECK_WORK, aws  # noqa: E402
from axon.errors import AxonError  # noqa: E402
from axon.search.optimize import optimize  # noqa: E402
from axon.suite import SUITE  # noqa: E402

CASES = [("gqa", "quick"), ("gqa", "llama3_70b_s2048_t8192"), ("attention", "quick"),
         ("attention", "llama3_8b_s4096"), ("attention", "llama3_8b_decode_s1_t4096"),
         ("attention", "llama3_8b_decode_s16_t32768"), ("attention", "llama3_70b_decode_s1_t32768"),
         ("attention", "llama3_70b_decode_s16_t4096"), ("gqa", "small_model_decode_s16_t32768"),
         ("causal_gqa", "quick"), ("causal_gqa", "llama3_70b_s2048"), ("causal_gqa", "llama3_2_1b_s2048"),
         ("gqa", "one_head_s128"), ("gqa", "one_head_s4096")]
GOAL = 0.70  # of the program roofline (issue 12)


def run_case(name: str, case: str, target: str, corpus) -> dict:
    sizes = SUITE[name].sizes(case)
    row = {"benchmark": name, "case": case, "sizes": sizes}
    t0 = time.perf_counter()
    try:
        r = optimize(name, sizes, target, "bfloat16")
    except AxonError as err:
        return {**row, "error": str(err), "wall_s": round(time.perf_counter() - t0, 1)}
    row.update({"axon_ns": r.latency_ns, "roofline_ns": r.roofline_ns, "roofline_fraction": r.roofline_fraction,
                "direct_ns": r.baseline_latency_ns, "check": r.check, "rewrites": list(r.rewrites),
                "layout": [line for line in r.kernel_source.splitlines() if line.startswith("layout:")],
                "wall_s": round(time.perf_counter() - t0, 1)})
    if corpus:
        entries = [aws.measure_kernel(k, sizes, target, "bfloat16", Path(corpus), DATA_CHECK_WORK)
                   for k in aws.AWS_KERNELS.get(name, ())]
        row["aws"] = [{"kernel": e["kernel"], "file": e["file"], "ns": e["ns"], "why": e.get("why")} for e in entries]
    return row


def _tutorial(kernel: str) -> bool:
    return kernel.split(":")[-1] in aws.ATTN_TUTORIAL


def render(rows: list[dict], command: str, target: str) -> str:
    kernels = sorted({a["kernel"] for r in rows for a in r.get("aws", []) if not _tutorial(a["kernel"])})
    L = ["# Attention against the roofline and AWS's kernels", "",
         f"Command: `{command}` (target {target}, bfloat16; the model of `axon/targets/trainium/perfmodel.py`). "
         "AWS columns: the kernel's latency in the same simulator and model, and Axon's speedup over it "
         "(> 1: Axon faster); `-` where the kernel does not run the case (reason below).", "",
         "| benchmark | case | Axon us | roofline | direct us | " + " | ".join(f"{k} us (x)" for k in kernels)
         + " | layout |",
         "|---|---|---|---|---|" + "---|" * len(kernels) + "---|"]
    whys = []
    for r in rows:
        if "error" in r:
            L.append(f"| {r['benchmark']} | {r['case']} | FAILED: {r['error']} |")
            continue
        cells = []
        for k in kernels:
            a = next((a for a in r.get("aws", []) if a["kernel"] == k), None)
            if a and a["ns"]:
                cells.append(f"{a['ns'] / 1e3:.1f} ({a['ns'] / r['axon_ns']:.2f}x)")
            else:
                cells.append("-")
                if a:
                    whys.append(f"- {r['benchmark']} {r['case']}, {k}: {a['why']}")
        layout = "; ".join(line.split(":", 1)[1].strip() for line in r["layout"]) or "-"
        L.append(f"| {r['benchmark']} | {r['case']} | {r['axon_ns'] / 1e3:.1f} | {r['roofline_fraction']:.0%} | "
                 f"{r['direct_ns'] / 1e3:.1f} | " + " | ".join(cells) + f" | {layout} |")
    done = [r for r in rows if "error" not in r]
    met = [r for r in done if r["roofline_fraction"] >= GOAL]
    L += ["", f"At >= {GOAL:.0%} of the roofline: {len(met)} of {len(done)} cases.", ""]
    if whys:
        L += ["Where an AWS kernel has no time:", ""] + whys + [""]
    L += tutorial_table(rows)
    L += ["Checks (each Axon kernel passed it before being reported):", ""]
    L += [f"- {r['benchmark']} {r['case']}: {r['check']}" for r in done]
    return "\n".join(L) + "\n"


def tutorial_table(rows: list[dict]) -> list[str]:
    """AWS's attention performance tutorial, version by version, at the shapes it runs."""
    timed = [(r, a) for r in rows if "error" not in r for a in r.get("aws", []) if _tutorial(a["kernel"]) and a["ns"]]
    if not timed:
        return []
    L = ["## AWS's attention performance tutorial (nki-samples `attention_fwd_performance`)", "",
         "Each version at the shapes it runs (one head, no scale: v1 and v2 at s = t = 128, the later ones "
         "at 4096), in the same simulator and model; q, k and v transposed on the host to its [d, s] layout.", "",
         "| kernel | case | AWS us | Axon us | Axon faster by |", "|---|---|---|---|---|"]
    L += [f"| {a['kernel'].split(':')[-1]} | {r['case']} | {a['ns'] / 1e3:.1f} | {r['axon_ns'] / 1e3:.1f} | "
          f"{a['ns'] / r['axon_ns']:.2f}x |" for r, a in timed]
    slower = [a["kernel"] for r, a in timed if a["ns"] < r["axon_ns"]]
    L += ["", f"Axon is faster than {len(timed) - len(slower)} of {len(timed)}"
          + (f"; slower than {', '.join(slower)}." if slower else "."), ""]
    # a version that should run a case but has no time (not a size it refuses) says why
    failed = [(r, a) for r in {id(r): r for r, _ in timed}.values() for a in r["aws"]
              if _tutorial(a["kernel"]) and not a["ns"] and not a["why"].startswith("the kernel ")]
    L += [f"- {a['kernel'].split(':')[-1]} at {r['case']}: {a['why']}" for r, a in failed]
    return L + ([""] if failed else [])


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpus", default="")
    ap.add_argument("--target", default="trn2")
    ap.add_argument("--only", default="", help="comma-separated benchmark:case pairs")
    ap.add_argument("--out", default="attention", help="name of the results files (benchmarks/results/NAME.md, .json)")
    args = ap.parse_args()
    cases = [c for c in CASES if not args.only or f"{c[0]}:{c[1]}" in args.only.split(",")]
    rows = []
    for name, case in cases:
        print(f"{name} {case} ...", flush=True)
        rows.append(run_case(name, case, args.target, args.corpus))
        r = rows[-1]
        print(f"  {r.get('axon_ns', 0) / 1e3:.1f} us, {r.get('roofline_fraction', 0):.0%} of the roofline"
              if "error" not in r else f"  FAILED: {r['error']}", flush=True)
    command = "python benchmarks/attention.py" + (f" --corpus {args.corpus}" if args.corpus else "") \
        + (f" --only {args.only}" if args.only else "") + (f" --out {args.out}" if args.out != "attention" else "")
    out = ROOT / "benchmarks" / "results"
    (out / f"{args.out}.json").write_text(json.dumps({"command": command, "target": args.target, "rows": rows},
                                                   indent=1, default=str) + "\n")
    (out / f"{args.out}.md").write_text(render(rows, command, args.target))
    return 0


if __name__ == "__main__":
    sys.exit(main())
