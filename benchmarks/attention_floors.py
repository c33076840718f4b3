"""How close attention can come to its program roofline on a NeuronCore, by engine floors.

    .venv/bin/python benchmarks/attention_floors.py [--target trn2]

The program roofline (search/roofline.py) counts matmul FLOPs and HBM bytes only. A softmax of
the scores also needs, per score element a kernel computes (a causal kernel skips the masked
tiles, so about half), at least:
- one exp, on the Scalar Engine: only it evaluates transcendental functions (nki.isa.activation);
- one read of the element by the row max on the Vector Engine (tensor_reduce; the scores are fp32,
  so not its bf16 fast path);
- one PSUM -> SBUF copy of the probabilities, transposed on the Tensor Engine so that the P @ V
  contraction lies on the partitions (nc_matmul operands live in SBUF), on ScalarE or VectorE
  (VectorE at its performance-mode rate where the target has one: a bf16 copy out of PSUM, 2x on
  trn2).
Each costs the hardware description's cycles per element per partition (hardware.COSTS) at that
engine's clock, 128 partitions at a time. The exp alone is a floor on ScalarE; ScalarE and VectorE
together must do all three, so their combined work over two engines is a floor on the kernel.
The Tensor Engine, per block of 128 query rows x 512 score columns, issues at least: the q k^T
matmul (512 columns moving), four 128 x 128 transposes of the probabilities (nc_matmul contracts
over partitions, so P @ V needs P^T), and P @ V as the cheaper of four matmuls d columns wide or
one with P^T's 512 columns moving (the output transposed), each at its hardware.COSTS formula
plus the engine's access start: a floor on the kernel that the roofline, which counts only the
two matmuls' FLOPs at peak, does not see.
Writes benchmarks/results/attention_floors.md.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from axon.search.roofline import program_roofline  # noqa: E402
from axon.suite import SUITE  # noqa: E402
from axon.targets.trainium.hardware import Engine, get_target as hardware  # noqa: E402
from axon.targets.trainium.target import TrainiumTarget  # noqa: E402

CASES = [("gqa", "quick"), ("gqa", "llama3_70b_s2048_t8192"), ("attention", "quick"),
         ("attention", "llama3_8b_s4096"), ("gqa", "llama3_70b_decode_s16_t32768"), ("causal_gqa", "quick"),
         ("causal_gqa", "llama3_70b_s8192")]
OUT = ROOT / "benchmarks" / "results" / "attention_floors.md"


def per_element_ns(hw, opcode: str, engine: Engine) -> float:
    """ns per element per partition of a long instruction (the floor and fixed costs amortized)."""
    return hw.cost(opcode, engine).mult / hw.clock_ghz(engine)


def floors(name: str, sizes: dict, target: str) -> dict:
    hw, tgt = hardware(target), TrainiumTarget(target)
    roof = program_roofline(SUITE[name].program.graph, sizes, "bfloat16", tgt.peaks("bfloat16")).ns
    heads, s, t = sizes["kv"] * sizes["g"], sizes["s"], sizes["t"]
    visible = s * t if name != "causal_gqa" else sum(min(t, t - s + i + 1) for i in range(s))
    per_partition = heads * visible / 128
    exp = per_partition * per_element_ns(hw, "activation", Engine.SCALAR)
    row_max = per_partition * per_element_ns(hw, "tensor_reduce", Engine.VECTOR)
    vector_copy = per_element_ns(hw, "tensor_copy", Engine.VECTOR) / hw.vector_speedup(
        "tensor_copy", "bfloat16", "bfloat16", psum=True)
    copy = per_partition * min(per_element_ns(hw, "tensor_copy", Engine.SCALAR), vector_copy)
    tensor = heads * visible / (128 * 512) * tensor_block_ns(hw, sizes.get("d", 128))
    return {"roofline": roof, "exp": exp, "max": row_max, "copy": copy, "two_engines": (exp + row_max + copy) / 2,
            "tensor": tensor}


def tensor_block_ns(hw, d: int) -> float:
    """TensorE ns for one block of 128 query rows x 512 score columns (bf16): q k^T, the four
    transposes of P and P @ V (see the docstring)."""
    start = hw.engines[Engine.TENSOR].access_start_cycles

    def matmul(stationary_free: int, moving: int) -> float:
        return max(min(64, stationary_free), moving) * hw.cost("nc_matmul").mult + start

    transpose = max(128, min(64, 128)) * hw.cost("nc_transpose").mult + start
    pv = min(4 * matmul(128, d), matmul(d, 512))
    return (matmul(128, 512) + 4 * transpose + pv) / hw.clock_ghz(Engine.TENSOR)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--target", default="trn2")
    args = ap.parse_args()
    lines = [f"# Engine floors of attention on {args.target}", "",
             f"Command: `.venv/bin/python benchmarks/attention_floors.py --target {args.target}` (the script's "
             "docstring says what is counted). Times in us; a fraction is roofline / floor, the most of the "
             "program roofline a kernel can reach under that floor.", "",
             "| benchmark | case | roofline | exp on ScalarE | row max on VectorE | P copy out of PSUM | "
             "ScalarE + VectorE work / 2 | TensorE: q k^T, P^T, P @ V | best reachable |",
             "|---|---|---|---|---|---|---|---|---|"]
    for name, case in CASES:
        f = floors(name, SUITE[name].cases[case], args.target)
        bound = max(f["exp"], f["two_engines"], f["tensor"])
        lines.append(f"| {name} | {case} | {f['roofline'] / 1e3:.1f} | {f['exp'] / 1e3:.1f} | {f['max'] / 1e3:.1f} | "
                     f"{f['copy'] / 1e3:.1f} | {f['two_engines'] / 1e3:.1f} | {f['tensor'] / 1e3:.1f} | "
                     f"{min(1.0, f['roofline'] / bound):.0%} |")
    OUT.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
