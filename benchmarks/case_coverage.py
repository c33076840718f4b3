"""Case coverage: for every benchmark and shape case of axon/suite.py, on trn2 and trn1, does at
least one candidate fit the target? Analytical only: the fit model (axon/tiling/space.py) is asked
for every fusion mode of the program as written (fused, split, unfused); a case is covered when
some mode has a fitting tiling for each of its passes. A program that is not one kernel is asked
per piece of its partition (fusion.kernels), as optimize builds it: covered when every piece is. Nothing is emitted or simulated (the test
tests/search/test_optimize_wide.py and tests/tiling/test_tiling_kstream.py check that what the
model accepts runs within the simulator's capacity). Rewrite variants are not enumerated: they can
only add candidates, so a covered case stays covered.

Writes benchmarks/results/case_coverage.md.

Usage: .venv/bin/python benchmarks/case_coverage.py
"""
from __future__ import annotations

import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from axon.errors import AxonError  # noqa: E402
from axon.fusion.kernels import partition  # noqa: E402
from axon.fusion.nodes import FUSION_MODES, RowWorld, groups  # noqa: E402
from axon.suite import SUITE  # noqa: E402
from axon.targets.trainium.target import TrainiumTarget  # noqa: E402
from axon.tiling.space import enumerate_tilings  # noqa: E402

COMMAND = ".venv/bin/python benchmarks/case_coverage.py"
TARGETS = ("trn2", "trn1")
OUT = ROOT / "benchmarks" / "results" / "case_coverage.md"


def kernels_of(graph) -> list[RowWorld]:
    """The program's kernels as optimize builds them: one, or the pieces of its partition."""
    try:
        return [RowWorld.of(graph)]
    except AxonError:
        return [RowWorld.of(piece.graph) for piece in partition(graph).pieces]


def coverage(worlds: list[RowWorld], sizes: dict, limits) -> tuple[list[str], str]:
    """(the fusion modes with a fitting tiling for every pass of every piece, why the first mode
    failed if none)."""
    modes, why = [], ""
    for mode in FUSION_MODES:
        try:
            ok = True
            for world, g in ((world, g) for world in worlds for g in groups(world, mode)):
                fits, rejected = enumerate_tilings(world, g, sizes, limits)
                if not fits:
                    ok = False
                    why = why or f"{mode}: " + (rejected[0][1] if rejected else "no tiling enumerated")
                    break
        except AxonError as err:
            ok, why = False, why or f"{mode}: {err}"
        if ok:
            modes.append(mode)
    return modes, why


def main() -> None:
    t0 = time.perf_counter()
    rows, missing = [], []
    for name, bench in SUITE.items():
        try:
            worlds = kernels_of(bench.program.graph)
        except AxonError as err:
            rows.append([name, str(len(bench.cases))] + ["0", "0"] * len(TARGETS))
            missing += [(name, "all", tn, str(err)) for tn in TARGETS]
            continue
        line = [name, str(len(bench.cases))]
        for tn in TARGETS:
            limits = TrainiumTarget(tn).limits()
            covered, all_modes = 0, 0
            for case, sizes in bench.cases.items():
                modes, why = coverage(worlds, sizes, limits)
                covered += bool(modes)
                all_modes += len(modes) == len(FUSION_MODES)
                if not modes:
                    missing.append((name, case, tn, why))
            line += [str(covered), str(all_modes)]
        rows.append(line)
    took = time.perf_counter() - t0
    out = ["# Case coverage: does some candidate fit each benchmark case?", "",
           f"Command: `{COMMAND}` ({took:.0f} s on {platform.machine()}, analytical: the fit model only, "
           "no emission or simulation).", "",
           "For each benchmark and case of `axon/suite.py`, every fusion mode of the program as written is "
           "tiled by `axon.tiling.space.enumerate_tilings` under the target's limits; a case is *covered* "
           "when at least one mode has a fitting tiling for each of its passes (that is when "
           "`axon optimize` has a candidate); a program that is not one kernel, when every piece of its "
           "partition (`axon.fusion.kernels`) is. *all modes*: cases where fused, split and unfused all fit.", "",
           "| benchmark | cases | trn2 covered | trn2 all modes | trn1 covered | trn1 all modes |",
           "|---|---|---|---|---|---|"]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    total = sum(int(r[1]) for r in rows)
    out += ["", f"Total: {total} cases per target; covered on trn2 {sum(int(r[2]) for r in rows)}, "
                f"on trn1 {sum(int(r[4]) for r in rows)}.", ""]
    out += ["## Cases without any fitting candidate", "",
            "As written: rewrite variants are not enumerated here (they only add candidates), so optimize "
            "may still reach such a case through a proved rewrite.", ""]
    if missing:
        out += ["| benchmark | case | target | reason (first mode's first rejection) |", "|---|---|---|---|"]
        out += [f"| {n} | {c} | {t} | {w} |" for n, c, t, w in missing]
    else:
        out.append("None: every case of every benchmark has a candidate on both targets.")
    OUT.write_text("\n".join(out) + "\n")
    print("\n".join(out))


if __name__ == "__main__":
    main()
