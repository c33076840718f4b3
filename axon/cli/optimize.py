"""`axon optimize BENCH|FILE.py:FUNC`: the fastest correct kernel for a program at concrete sizes.

Writes the winning kernel, a Perfetto trace of it and a JSON summary to OUT_DIR; `--json` writes
the summary elsewhere too. Progress goes to stderr, the report to stdout.
"""
from __future__ import annotations

import json
import math
import sys
from pathlib import Path

from axon.errors import InputError

NAME = "optimize"
HELP = "find the fastest correct kernel for a benchmark or program (synthesis, tiling, fusion, selection)"


def add_arguments(parser) -> None:
    parser.add_argument("program", metavar="BENCH|FILE.py:FUNC", help="a benchmark name (axon list) or FILE.py:FUNC")
    parser.add_argument("--target", default="trn2", choices=["trn1", "trn2"])
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--case", help="a benchmark shape case (default: small)")
    group.add_argument("--sizes", help="concrete sizes, e.g. m=1024,k=4096,n=4096")
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32", "float16"])
    parser.add_argument("--intermediates", default="any", choices=["any", "float32"],
                        help="values between instructions of a bfloat16/float16 kernel: 'any' (default) keeps "
                             "them in that dtype where faster, within the error bounds of that choice; 'float32' "
                             "always in float32 (attention's scores: more accurate, slower)")
    parser.add_argument("-o", "--out-dir", default="axon_out", help="where the kernel, trace and JSON go")
    parser.add_argument("--json", dest="json_path", help="also write the JSON summary here")
    from axon.search.optimize import DEFAULT_BUDGET_S

    parser.add_argument("--budget", type=float, default=None,
                        help=f"model ranking work, in seconds of a 2-core machine: counted in simulated "
                             f"instructions, so the same search on any machine and under any load "
                             f"(default {DEFAULT_BUDGET_S:g})")
    parser.add_argument("--workers", type=int, default=None, metavar="N",
                        help="timing simulations run at once on this machine (default: one per usable core); "
                             "the result is the same for any N")
    parser.add_argument("--ray", metavar="ADDRESS",
                        help="run the timing simulations as Ray tasks on the cluster at ADDRESS ('auto': the "
                             "one this machine is in; 'local': start one here); needs the [ray] extra")
    parser.add_argument("--quiet", action="store_true", help="no progress lines")


def parse_sizes(text: str) -> dict[str, int]:
    out = {}
    for part in text.split(","):
        name, eq, value = part.strip().partition("=")
        if not eq or not name.isidentifier() or not value.strip().isdigit() or int(value) <= 0:
            raise InputError(f"bad --sizes {text!r}; expected NAME=POSITIVE_INT,... e.g. m=1024,k=4096,n=4096")
        if name in out and out[name] != int(value):
            raise InputError(f"bad --sizes {text!r}: {name} is given twice ({out[name]} and {int(value)})")
        out[name] = int(value)
    return out


def run(args) -> int:
    from axon.search.executor import make_executor
    from axon.search.optimize import DEFAULT_BUDGET_S, launcher_path, optimize

    sizes = parse_sizes(args.sizes) if args.sizes else args.case
    if args.budget is not None and not (math.isfinite(args.budget) and args.budget > 0):
        raise InputError(f"bad --budget {args.budget}: a positive number of budget seconds")
    for folder, flag in ((args.out_dir, "-o"), (Path(args.json_path).parent if args.json_path else None, "--json")):
        if folder is not None:  # before the search, not after it
            try:
                Path(folder).mkdir(parents=True, exist_ok=True)
            except OSError as err:
                raise InputError(f"cannot write {flag} {folder}: {err.strerror or err}") from None
    progress = None if args.quiet else (lambda s: print(f"axon: {s}", file=sys.stderr, flush=True))
    result = optimize(args.program, sizes, target=args.target, dtype=args.dtype,
                      budget_s=args.budget if args.budget is not None else DEFAULT_BUDGET_S,
                      out_dir=args.out_dir, progress=progress, executor=make_executor(args.workers, args.ray),
                      intermediates=args.intermediates)
    if args.json_path:
        Path(args.json_path).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json_path).write_text(json.dumps(result.to_json(), indent=2) + "\n")
    print(result.report)
    print(f"kernel: {result.kernel_path}\nlaunch: {launcher_path(result.kernel_path)}"
          + (f"\ntrace:  {result.trace_path}" if result.trace_path else ""))
    return 0
