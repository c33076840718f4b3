"""The benchmark report as Markdown tables and PNG plots, from the JSON `run_bench` writes.

`markdown(doc)` gives one table row per case (latency, speedup over each baseline, roofline
fraction, candidates, proofs, search time), the geomeans per family, and every loss to a baseline.
`plots(doc, dir)` draws speedup bars with the geomean lines, the roofline fraction and the search
time per benchmark (matplotlib, imported here only; `PlotsUnavailable` says how to install it).

Invariant: reads only the JSON document, so a report can be redrawn without measuring again.
"""
from __future__ import annotations

from pathlib import Path

from axon.bench import BASELINES, FAMILIES, geomean

LABEL = {"direct": "direct lowering", "hand": "hand-written NKI", "no_algebra": "Axon without algebra",
         "no_fusion": "Axon without fusion"}
FAMILY = {"single": "single operators", "multi": "MatMul and multi-operator"}


class PlotsUnavailable(RuntimeError):
    pass


def _us(ns) -> str:
    return "—" if ns is None else f"{ns / 1e3:.1f}"


def _x(s) -> str:
    return "—" if s is None else f"{s:.2f}x"


def _sizes(sizes: dict) -> str:
    return ",".join(f"{k}={v}" for k, v in sizes.items())


def markdown(doc: dict) -> str:
    cases = doc["cases"]
    many = len({c["benchmark"] for c in cases}) < len(cases)  # a grid: show the case name
    lines = [f"# Axon benchmark report: {doc['grid']} grid, {doc['target']}, {doc['dtype']}", ""]
    if doc.get("command"):
        lines += [f"Command: `{doc['command']}` (wall time {doc.get('wall_s', 0) / 60:.1f} min on this machine; "
                  f"performance model {doc.get('model', '?')}).", ""]
    lines += ["Latencies are the performance model's (µs), all measured in the same run. Speedup = baseline / Axon "
              "(above 1: Axon is faster). Baselines: **direct** lowering (each operator its own pass with HBM round "
              "trips, default tiling, default engines, no rewrite, no fusion); **hand**-written NKI kernels (timed at the case's sizes, "
              "checked with data); **no algebra** (Axon searching only the program as written); **no fusion** "
              "(Axon with one pass per operator). Roofline: the program's lower bound for the case (its matmul FLOPs "
              "at the matmul peak, its inputs' and outputs' bytes at memory bandwidth; the same for every kernel of "
              "the case); fraction = roofline / Axon. Search: wall time of the full `optimize` call (cold result cache).", ""]
    head = ["benchmark"] + (["case"] if many else []) + ["sizes", "Axon µs", "direct µs", "× direct", "hand µs",
                                                         "× hand", "no-algebra µs", "× no-algebra", "no-fusion µs",
                                                         "× no-fusion", "roofline", "fusion", "rewrites",
                                                         "candidates (gen/eval)", "proofs", "search s"]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for c in cases:
        pre = [c["benchmark"]] + ([c["case"]] if many else []) + [_sizes(c["sizes"])]
        if "axon_ns" not in c:
            lines.append("| " + " | ".join(pre + [f"failed: {c.get('error', '?')}"] + [""] * (len(head) - len(pre) - 1)) + " |")
            continue
        b, s = c["baselines"], c["speedup"]
        cand = c["candidates"]
        lines.append("| " + " | ".join(pre + [
            _us(c["axon_ns"]), _us(b["direct"]), _x(s["direct"]), _us(b["hand"]), _x(s["hand"]),
            _us(b["no_algebra"]), _x(s["no_algebra"]), _us(b["no_fusion"]), _x(s["no_fusion"]),
            f"{c['roofline_fraction']:.0%}", c["fusion"], str(len(c["rewrites"])),
            f"{cand['generated']}/{cand['evaluated']}", str(c["proofs"]["proved"]), f"{c['search_s']:.1f}"]) + " |")
    lines += ["", "## Geomeans per family", "",
              "| family | cases | × direct | × hand (cases) | × no-algebra | × no-fusion | no-algebra keeps | "
              "no-fusion keeps | roofline fraction |", "|---|---|---|---|---|---|---|---|---|"]
    for fam in FAMILIES:
        g = doc["geomean"].get(fam)
        if not g or not g["cases"]:
            continue
        lines.append(f"| {FAMILY[fam]} | {g['cases']} | {_x(g['direct'])} | {_x(g['hand'])} ({g['hand_cases']}) | "
                     f"{_x(g['no_algebra'])} | {_x(g['no_fusion'])} | {_x(g['no_algebra_relative'])} | "
                     f"{_x(g['no_fusion_relative'])} | {g['roofline_fraction']:.0%} |")
    lines += ["", "\"keeps\": the ablated search's performance as a fraction of full Axon's (Axon µs / ablated µs); "
              "the paper reports 0.65-0.85x without algebraic transformation and 0.50-0.65x without fusion.", ""]
    ls = doc.get("losses", [])
    lines += ["## Where Axon loses", ""]
    if not ls:
        lines.append("Axon is at least as fast as every baseline on every case.")
    for l in ls:
        lines.append(f"- {l['benchmark']} ({l['case']}): {LABEL[l['baseline']]} is faster; Axon runs at "
                     f"{l['speedup']:.2f}x of it.")
    for c in cases:
        for k, a in (c.get("ablations") or {}).items():
            if "error" in a:
                lines.append(f"- note: {c['benchmark']} ({c['case']}): {LABEL[k]} found no kernel: {a['error']}")
        dc = c.get("direct_check")
        if dc and dc.get("ok") is False:
            why = dc["error"] or f"max |err| {dc['max_abs_err']:.3g} at output scale {dc['scale']:.3g}"
            lines.append(f"- note: {c['benchmark']} ({c['case']}): the direct lowering fails the numerical check "
                         f"({why}); its time is still the baseline.")
    hand_bad = [c for c in cases if (c.get("hand") or {}).get("reference_ok") is False]
    for c in hand_bad:
        lines.append(f"- note: the hand-written {c['benchmark']} kernel fails its numerical check ({c['hand']['checked']}).")
    return "\n".join(lines) + "\n"


# --- plots ------------------------------------------------------------------------------------
def _per_benchmark(doc: dict) -> list[dict]:
    """One entry per benchmark (geomean over its cases, for the full grid)."""
    out = []
    names = []
    for c in doc["cases"]:
        if "axon_ns" in c and c["benchmark"] not in names:
            names.append(c["benchmark"])
    for n in names:
        rows = [c for c in doc["cases"] if c["benchmark"] == n and "axon_ns" in c]
        out.append({"benchmark": n, "family": rows[0]["family"],
                    "speedup": {b: geomean(r["speedup"][b] for r in rows if r["speedup"].get(b)) for b in BASELINES},
                    "roofline_fraction": geomean(r["roofline_fraction"] for r in rows),
                    "hand_fraction": geomean(r["roofline_ns"] / r["baselines"]["hand"] for r in rows
                                             if r["baselines"].get("hand")),
                    "search_s": sum(r["search_s"] for r in rows) / len(rows)})
    return out


def plots(doc: dict, out_dir) -> list[Path]:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise PlotsUnavailable("matplotlib is not installed; install it with "
                               "`.venv/bin/pip install -e '.[plots]'` (matplotlib==3.11.2) to draw the plots") from None
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    rows = _per_benchmark(doc)
    if not rows:
        return []
    tag = f"{doc['grid']} grid, {doc['target']}, {doc['dtype']}"
    names = [r["benchmark"] for r in rows]
    xs = list(range(len(rows)))
    split = next((i for i, r in enumerate(rows) if r["family"] == "multi"), len(rows))
    paths = []

    def finish(ax, fig, name):
        ax.set_xticks(xs)
        ax.set_xticklabels(names, rotation=45, ha="right", fontsize=8)
        if 0 < split < len(rows):
            ax.axvline(split - 0.5, color="0.6", linewidth=0.8)
        ax.grid(axis="y", alpha=0.3)
        fig.tight_layout()
        p = out_dir / name
        fig.savefig(p, dpi=120)
        plt.close(fig)
        paths.append(p)

    # 1. speedup over the baselines: bars grow up (Axon faster) or down (slower) from 1x
    from matplotlib.ticker import FixedLocator, NullLocator

    fig, ax = plt.subplots(figsize=(13, 5.2))
    colors = {"direct": "tab:blue", "hand": "tab:orange", "no_algebra": "tab:green", "no_fusion": "tab:red"}
    width = 0.2
    allv = [1.0]
    for j, b in enumerate(BASELINES):
        pts = [(x + (j - 1.5) * width, r["speedup"][b]) for x, r in zip(xs, rows) if r["speedup"][b]]
        if not pts:
            continue
        px, pv = zip(*pts)
        allv += pv
        ax.bar(px, [v - 1 for v in pv], width, bottom=1, label=f"over {LABEL[b]}", color=colors[b])
    g = doc["geomean"]
    for b, color in (("direct", "tab:blue"), ("hand", "tab:orange")):
        parts = []
        for fam, lo, hi in (("single", -0.5, split - 0.5), ("multi", split - 0.5, len(rows) - 0.5)):
            v = (g.get(fam) or {}).get(b)
            if v and hi > lo:
                ax.hlines(v, lo, hi, colors=color, linestyles="--", linewidth=1.3)
                parts.append(f"{'single' if fam == 'single' else 'multi'} {v:.2f}x")
                allv.append(v)
        if parts:
            ax.plot([], [], color=color, linestyle="--", label=f"geomean over {LABEL[b]}: {', '.join(parts)}")
    for x, r in zip(xs, rows):
        v = r["speedup"]["direct"]
        if v:
            ax.text(x - 1.5 * width, v * (1.03 if v >= 1 else 0.97), f"{v:.2f}", ha="center",
                    va="bottom" if v >= 1 else "top", fontsize=6, color="tab:blue")
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_yscale("log")
    ticks = [t for t in (0.1, 0.2, 0.3, 0.5, 0.7, 1, 1.5, 2, 3, 5, 7, 10, 20) if min(allv) / 1.3 <= t <= max(allv) * 1.3]
    ax.yaxis.set_major_locator(FixedLocator(ticks))
    ax.yaxis.set_minor_locator(NullLocator())
    ax.set_yticklabels([f"{t:g}x" for t in ticks])
    ax.set_ylim(min(allv) / 1.3, max(allv) * 1.3)
    ax.set_ylabel("Axon's speedup (log scale; up: Axon faster)")
    ax.set_title(f"Axon's speedup over each baseline ({tag})")
    ax.legend(fontsize=8, ncol=3, loc="upper center", bbox_to_anchor=(0.5, -0.28), frameon=False)
    finish(ax, fig, "speedup.png")

    # 2. roofline fraction
    fig, ax = plt.subplots(figsize=(12, 4))
    vals = [r["roofline_fraction"] for r in rows]
    ax.bar(xs, vals, 0.6, color=["tab:purple" if r["family"] == "single" else "tab:cyan" for r in rows])
    for x, v in zip(xs, vals):
        ax.text(x, v + 0.01, f"{v:.0%}", ha="center", fontsize=7)
    hand = [(x, r["hand_fraction"]) for x, r in zip(xs, rows) if r["hand_fraction"]]
    if hand:
        ax.scatter(*zip(*hand), marker="_", s=400, linewidths=2.5, color="tab:orange", zorder=3,
                   label="hand-written NKI kernel")
        ax.legend(fontsize=8, loc="upper right")
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("roofline / latency")
    ax.set_title(f"Fraction of the program's roofline Axon's kernels reach ({tag})")
    finish(ax, fig, "roofline.png")

    # 3. search time
    fig, ax = plt.subplots(figsize=(12, 4))
    vals = [r["search_s"] for r in rows]
    ax.bar(xs, vals, 0.6, color="tab:gray")
    for x, v in zip(xs, vals):
        ax.text(x, v, f"{v:.1f}" if v < 10 else f"{v:.0f}", ha="center", va="bottom", fontsize=7)
    ax.set_ylabel("seconds per case")
    ax.set_title(f"Axon's search time per case: proofs, candidates, model ranking, check ({tag})")
    finish(ax, fig, "search_time.png")
    return paths
