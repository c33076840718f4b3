"""A Llama-style block from PyTorch and from JAX, optimized end to end (issue 14, item 3).

    python benchmarks/llama_block.py [--configs small,mid] [--frameworks torch,jax]

Each case imports examples/llama_torch.py or examples/llama_jax.py at one configuration
(`axon.from_torch` / `axon.from_jax`) and runs `axon.optimize` with the default budget, in a process
of its own with an empty kernel database. Writes benchmarks/results/llama_block.md (and .json):
the kernels the block became, each one's latency against its direct lowering, the whole block
against the program's roofline, and the end-to-end check.
"""
from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "llama_block"
CONFIGS = {
    "small": dict(seq=128, hidden=256, head_dim=64, heads=4, kv_heads=2, ffn=512),
    "mid": dict(seq=512, hidden=1024, head_dim=128, heads=8, kv_heads=2, ffn=2816),
}
CHILD = """
import json, sys, time
from axon.frontend.loading import load_from_file
import axon
framework, config, path = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
module = "examples/llama_%s.py" % framework
Config = load_from_file(module, "Config")
imported = load_from_file(module, "import_block")(Config(**config))
prog = imported[-1]
t = time.perf_counter()
r = axon.optimize(prog, None, "trn2", "bfloat16")
out = r.to_json()
out["wall_s"] = round(time.perf_counter() - t, 1)
out["program"] = prog.signature()
open(path, "w").write(json.dumps(out))
"""


def run(framework: str, config: str) -> dict:
    with tempfile.TemporaryDirectory() as cache, tempfile.NamedTemporaryFile(suffix=".json") as out:
        env = {**__import__("os").environ, "AXON_CACHE_DIR": cache}
        r = subprocess.run([sys.executable, "-c", CHILD, framework, json.dumps(CONFIGS[config]), out.name],
                           cwd=ROOT, env=env, capture_output=True, text=True)
        if r.returncode != 0:
            return {"error": (r.stderr.strip().splitlines() or ["?"])[-1]}
        return json.loads(Path(out.name).read_text())


def report(results: dict, command: str) -> str:
    lines = ["# A Llama-style block from PyTorch and JAX, end to end", "",
             f"Command: `{command}` (target trn2, bfloat16, default budget, each case in a fresh process with an "
             "empty kernel database). The block (examples/llama_torch.py, examples/llama_jax.py): RMSNorm with "
             "gain, Q/K/V projections, rotate-half RoPE, causal GQA attention, the output projection and a "
             "SwiGLU MLP, with residuals. Latencies are the model's; a block's is the sum of its kernels' "
             "(they run one after another).", "",
             "| framework | config | kernels | relayouts | Axon us | direct us | speedup | roofline | "
             "end-to-end max abs err (median abs ref) | optimize s |", "|---|---|---|---|---|---|---|---|---|---|"]
    for (fw, cfg), r in results.items():
        if "error" in r:
            lines.append(f"| {fw} | {cfg} | - | - | - | - | - | - | {r['error']} | - |")
            continue
        steps = r["steps"]
        found = re.search(r"End to end .* max \|err\| (\S+) \(median \|ref\| (\S+)\)", r["best"]["check"])
        e2e = f"{found[1]} ({found[2]})" if found else "-"
        lines.append(f"| {fw} | {cfg} | {sum(s['kind'] == 'kernel' for s in steps)} | "
                     f"{sum(s['kind'] == 'relayout' for s in steps)} | {r['best']['latency_ns'] / 1e3:.1f} | "
                     f"{_us(r['baseline']['latency_ns'])} | {_times(r['baseline']['speedup'])} | "
                     f"{r['best']['roofline_fraction']:.0%} | {e2e} | {r['wall_s']} |")
    lines += ["", "Configurations: " + "; ".join(f"{k}: {v}" for k, v in CONFIGS.items()), ""]
    for (fw, cfg), r in results.items():
        if "error" in r:
            continue
        lines += [f"## {fw}, {cfg}", "", f"Program: `{r['program']}`", "", "| step | kind | us | direct us | what |",
                  "|---|---|---|---|---|"]
        for s in r["steps"]:
            what = (f"{s['result']['best']['roofline_fraction']:.0%} of its roofline, {s['result']['best']['fusion']} "
                    f"passes" if s["kind"] == "kernel" else f"{s['inputs'][0][0]}{tuple(s['inputs'][0][1])}")
            lines.append(f"| {s['name']} | {s['kind']} | {s['latency_ns'] / 1e3:.1f} | "
                         f"{_us(s['baseline_latency_ns'])} | {what} |")
        lines += ["", f"Check: {r['best']['check']}", ""]
    return "\n".join(lines)


def _us(ns) -> str:
    return "-" if ns is None else f"{ns / 1e3:.1f}"  # null: a direct lowering with no latency


def _times(x) -> str:
    return "-" if x is None else f"{x:.2f}x"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--configs", default="small,mid")
    ap.add_argument("--frameworks", default="torch,jax")
    ap.add_argument("--report-only", action="store_true", help="rewrite the Markdown from the JSON of the last run")
    args = ap.parse_args()
    command = "python benchmarks/llama_block.py" + "".join(
        f" --{k.replace('_', '-')} {v}" for k, v in vars(args).items() if v != ap.get_default(k) and k != "report_only")
    if args.report_only:
        stored = json.loads(OUT.with_suffix(".json").read_text())
        OUT.with_suffix(".md").write_text(report({tuple(k.split("/")): r for k, r in stored.items()}, command) + "\n")
        return
    results = {}
    for cfg in args.configs.split(","):
        for fw in args.frameworks.split(","):
            print(f"{fw} {cfg} ...", file=sys.stderr, flush=True)
            results[(fw, cfg)] = run(fw, cfg)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.with_suffix(".json").write_text(json.dumps({f"{fw}/{cfg}": r for (fw, cfg), r in results.items()},
                                                   indent=2) + "\n")
    OUT.with_suffix(".md").write_text(report(results, command) + "\n")
    print(OUT.with_suffix(".md").read_text())


if __name__ == "__main__":
    main()
