"""`axon bench`: the benchmark report (Axon against the direct lowering, hand-written kernels, its
own ablations and the roofline) over the quick or full grid. Progress goes to stderr; the JSON is
rewritten after every case, so rerunning the same command after an interruption continues."""
from __future__ import annotations

import shlex
import sys
from pathlib import Path

NAME = "bench"
HELP = "benchmark report: Axon vs direct lowering, hand kernels, ablations and roofline (JSON, Markdown, PNG)"


def add_arguments(parser) -> None:
    parser.add_argument("program", nargs="?", metavar="FILE.py:NAME",
                        help="a program of yours to measure beside (or instead of) --benchmarks, at --sizes")
    parser.add_argument("--sizes", help="measure each benchmark once at these sizes (case 'given'), "
                                        "e.g. m=1024,k=4096,n=4096, instead of the grid's cases")
    parser.add_argument("--target", default="trn2", choices=["trn1", "trn2"])
    parser.add_argument("--benchmarks", nargs="+", metavar="BENCH",
                        help="benchmarks to run (names or comma-separated; default: all 20)")
    parser.add_argument("--grid", default="quick", choices=["quick", "full", "small"],
                        help="quick: one representative case per benchmark; full: each benchmark's shape grid "
                             "and model configurations; small: the CI-sized case")
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32", "float16"])
    parser.add_argument("--json", dest="json_path", help="the report's JSON (default: bench_GRID_TARGET.json); "
                                                        "cases already in it are not measured again")
    parser.add_argument("--md", dest="md_path", help="the Markdown table (default: the JSON path with .md)")
    parser.add_argument("--plots", dest="plots_dir", help="write speedup, roofline and search-time PNGs here")
    parser.add_argument("--budget", type=float, default=None,
                        help="seconds of model ranking per optimize call (default 45)")
    parser.add_argument("--corpus", metavar="DIR",
                        help="folder of public NKI checkouts (nki-samples-fc5c69f, AccelOpt): adds a column for "
                             "AWS's own kernel of each benchmark's meaning, run and checked at the same sizes "
                             "(cases already in the JSON get only that column)")
    parser.add_argument("--fresh", action="store_true", help="ignore the cases already in the JSON")
    parser.add_argument("--workers", type=int, default=None, metavar="N",
                        help="cases measured side by side (default: one per usable core); the report is the same "
                             "for any N")
    parser.add_argument("--quiet", action="store_true", help="no progress lines")


def run(args) -> int:
    from axon.bench import DEFAULT_BUDGET_S, progress_to_stderr, run_bench
    from axon.bench.report import PlotsUnavailable, markdown, plots

    from axon.cli.optimize import parse_sizes

    names = [n for part in (args.benchmarks or []) for n in part.split(",") if n] + \
        ([args.program] if args.program else []) or None
    json_path = Path(args.json_path or f"bench_{args.grid}_{args.target}.json")
    md_path = Path(args.md_path) if args.md_path else json_path.with_suffix(".md")
    command = "axon bench " + " ".join(shlex.quote(a) for a in sys.argv[2:]) if sys.argv[1:2] == ["bench"] else ""
    doc = run_bench(target=args.target, grid=args.grid, benchmarks=names, dtype=args.dtype, json_path=json_path,
                    budget_s=args.budget if args.budget is not None else DEFAULT_BUDGET_S, fresh=args.fresh,
                    command=command, progress=None if args.quiet else progress_to_stderr, corpus=args.corpus,
                    workers=args.workers, sizes=parse_sizes(args.sizes) if args.sizes else None)
    md_path.parent.mkdir(parents=True, exist_ok=True)
    md_path.write_text(markdown(doc))
    written = [json_path, md_path]
    if args.plots_dir:
        try:
            written += plots(doc, args.plots_dir)
        except PlotsUnavailable as err:
            print(f"axon bench: no plots: {err}", file=sys.stderr)
    fmt = lambda v: "-" if v is None else f"{v:.2f}x"
    for fam, g in doc["geomean"].items():
        if g["cases"]:
            print(f"{fam}: {g['cases']} case(s), geomean {fmt(g['direct'])} over the direct lowering"
                  + (f", {fmt(g['hand'])} over Axon's hand kernels ({g['hand_cases']})" if g["hand"] else "")
                  + (f", {fmt(g['aws'])} over AWS's kernels ({g['aws_cases']})" if g.get("aws") else "")
                  + f"; without algebra {fmt(g['no_algebra_relative'])}, without fusion "
                  f"{fmt(g['no_fusion_relative'])} of full Axon")
    for l in doc["losses"]:
        print(f"loss: {l['benchmark']} ({l['case']}): {l['baseline']} is faster (Axon at {l['speedup']:.2f}x)")
    failed = [c for c in doc["cases"] if "error" in c]
    for c in failed:
        print(f"failed: {c['benchmark']} ({c['case']}): {c['error']}")
    print("wrote " + ", ".join(str(p) for p in written))
    return 1 if failed else 0
