"""The benchmark report: Axon against its baselines on the suite's benchmarks, on one model, in one run.

    from axon.bench import run_bench
    doc = run_bench(target="trn2", grid="quick", json_path="bench.json")

For every case (a benchmark at one shape) this measures, on the same simulator and performance
model:

  axon        `optimize` (rewrites, fusion, tiling search, selection; numerically checked);
  direct      the direct lowering: each operator its own pass, default tiling, default engines, no
              rewrite, no fusion (optimize times it as its own baseline; here it is also run with
              data, and the report says where it fails the numerical check);
  hand        Axon's own hand-written NKI kernel, where one exists (axon/targets/trainium/baselines),
              timed at the case's sizes and checked against the program's reference with data;
  aws         with `corpus` (a folder of public kernel checkouts): AWS's own kernel of the same
              meaning, where one exists (axon/bench/aws.py), run unchanged at the case's sizes and
              checked the same way; otherwise None and the reason;
  no_algebra  `optimize(..., algebra=False)`: the program as written, fusion and tiling searched;
  no_fusion   `optimize(..., fusion=False)`: one pass per operator, rewrites and tiling searched;
  roofline    the program's lower bound for the case (axon.search.roofline: its matmul FLOPs at
              the matmul peak, its inputs' and outputs' bytes at memory bandwidth), one per case
              and the same for Axon, its ablations, the direct lowering and the hand kernel.

Grids: `quick` is each benchmark's `quick` case; `full` is every case but `small` and `quick` (the
sweep grid and the model configurations); `small` is for tests. The JSON is rewritten after every
case, so a killed run continues where it stopped: a case already in the file with the same key
(benchmark, case, target, dtype) and the same model fingerprint is not measured again.

Invariant: every number in one JSON comes from one version of the performance model (its
fingerprint is stored; cases measured under another are measured again), and the result cache
is private to the run, so nothing is reused from an older model.
"""
from __future__ import annotations

import functools
import json
import math
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Iterable, Optional

from axon import suite
from axon.errors import AxonError, InputError

GRIDS = ("quick", "full", "small")
BASELINES = ("direct", "hand", "no_algebra", "no_fusion")
AWS = "aws"  # the baseline only a run with a corpus measures
FAMILIES = ("single", "multi", "user")  # "user": programs named FILE.py:NAME
DEFAULT_BUDGET_S = 45.0  # optimize's ranking budget for the full search and each ablation
# Runs with data simulate every element: up to this much work (the product of the case's sizes, the
# quick grid's largest) the hand kernel and the direct lowering are checked at the case's sizes; above
# it the hand kernel is checked at its `small` case and the direct lowering is not checked.
DATA_CHECK_WORK = 1024 * 4096 * 4096


def model_fingerprint(target: str = "trn2") -> str:
    """The target's fingerprint of the sources that turn a kernel into a latency."""
    from axon import targets

    return targets.get(target).model_fingerprint()


def _work(sizes: dict) -> int:
    """The product of a case's dimensions (m*k*n for a matmul): what a run with data costs."""
    return math.prod(sizes.values())


def grid_cases(bench: suite.Benchmark, grid: str, sizes: Optional[dict] = None) -> list[tuple[str, dict]]:
    """The cases a run measures: the grid's, or one case "given" at `sizes` (a user's program has
    no cases of its own; one whose sizes are all literal needs none)."""
    if grid not in GRIDS:
        raise InputError(f"unknown grid {grid!r}; expected one of {', '.join(GRIDS)}")
    if sizes is not None or not bench.cases:
        missing = sorted(set(bench.program.dims) - set(sizes or {}))
        if missing:
            raise InputError(f"{bench.name} needs --sizes for {', '.join(missing)}")
        return [("given", {d: v for d, v in (sizes or {}).items() if d in bench.program.dims})]
    if grid in ("quick", "small"):
        return [(grid, bench.sizes(grid))]
    return [(c, dict(s)) for c, s in bench.cases.items() if c not in ("small", "quick")]


def case_key(c: dict) -> tuple:
    return (c["benchmark"], c["case"], c["target"], c["dtype"])


def baselines_of(cases: list[dict]) -> tuple[str, ...]:
    """The baselines the cases carry: AWS's kernels only where a run with a corpus measured them."""
    return BASELINES + ((AWS,) if any(AWS in (c.get("baselines") or {}) for c in cases) else ())


def geomean(xs: Iterable[float]) -> Optional[float]:
    xs = [x for x in xs if x and x > 0 and math.isfinite(x)]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


# --- measuring one case -----------------------------------------------------------------------
def _hand(name: str, sizes: dict, target: str, dtype: str) -> Optional[dict]:
    """The hand-written kernel at `sizes`: latency and a numerical check with data."""
    from axon.targets.trainium.baselines import HAND_KERNELS, run_hand_kernel

    hk = HAND_KERNELS.get(name)
    if hk is None:
        return None
    why = hk.unsupported(sizes)
    if why:
        return {"ns": None, "note": why}
    t = run_hand_kernel(name, sizes, dtype, target, timing_only=True).estimate
    check_sizes, where = sizes, "case size"
    if _work(sizes) > DATA_CHECK_WORK:
        check_sizes, where = suite.get(name).sizes("small"), "small case"
    r = run_hand_kernel(name, check_sizes, dtype, target, timing_only=False)
    return {"ns": t.latency_ns, "checked": where, "reference_ok": bool(r.reference_ok),
            "max_abs_err": r.max_abs_err}


def _check_direct(name: str, source: str, sizes: dict, target: str, dtype: str) -> Optional[dict]:
    """The direct lowering run with data at the case's sizes against the program's reference
    (optimize times it but checks it only when nothing better passes)."""
    if not source:
        return None
    if _work(sizes) > DATA_CHECK_WORK:
        return {"ok": None, "note": f"not checked: above {DATA_CHECK_WORK} (product of the sizes)"}
    from axon.search.optimize import get_target
    from axon.search.select import check_candidate
    from axon.semantics.bounds import kernel_reference

    prog = suite.get(name).program
    shapes = prog.random_inputs(sizes, dtype=dtype, seed=0)
    # one pass per operator: every intermediate crosses HBM in the kernel's dtype
    expected, tol = kernel_reference(prog.graph, shapes, dtype)
    c = check_candidate(get_target(target), source, shapes, expected, tol)
    return {"ok": bool(c.ok), "max_abs_err": c.max_abs_err, "scale": c.scale, "error": c.error,
            "max_err_over_bound": c.worst_ratio}


def _aws(row: dict, corpus, say: Callable[[str], None]) -> dict:
    """`row` with AWS's kernel for its case measured (axon/bench/aws.py) and its speedup."""
    from axon.bench import aws

    say("AWS's kernel")
    entry = aws.measure(row["benchmark"], row["sizes"], row["target"], row["dtype"], corpus, DATA_CHECK_WORK)
    if entry["ns"] is None:
        say(f"no AWS kernel time: {entry['why']}")
    row = {**row, "aws": entry, "baselines": {**row["baselines"], AWS: entry["ns"]}}
    row["speedup"] = {**row["speedup"], AWS: entry["ns"] / row["axon_ns"] if entry["ns"] else None}
    return row


def _aws_current(row: dict) -> bool:
    from axon.bench import aws

    return AWS in row and aws.is_current(row["benchmark"], row[AWS])


def measure_case(name: str, case: str, sizes: dict, target: str, dtype: str, budget_s: float,
                 cache, say: Callable[[str], None], corpus=None, executor=None) -> dict:
    from axon.search.optimize import finite_or_none, optimize

    bench = suite.get(name)
    row = {"benchmark": name, "family": bench.family, "case": case, "sizes": sizes, "target": target, "dtype": dtype}
    quiet = lambda s: None
    t0 = time.perf_counter()
    full = optimize(name, sizes, target, dtype, budget_s=budget_s, cache=cache, progress=say, executor=executor)
    search_s = time.perf_counter() - t0
    ablated, notes = {}, {}
    for label, kw in (("no_algebra", {"algebra": False}), ("no_fusion", {"fusion": False})):
        say(f"ablation: {label.replace('_', ' ')}")
        try:
            ablated[label] = optimize(name, sizes, target, dtype, budget_s=budget_s, cache=cache, progress=quiet,
                                      executor=executor, **kw)
        except AxonError as err:  # e.g. every unfused candidate fails the numerical check
            ablated[label] = None
            notes[label] = str(err)
            say(f"{label}: {err}")
    say("checking the direct lowering numerically")
    direct_check = _check_direct(name, getattr(full, "baseline_source", ""), sizes, target, dtype)
    say("Axon's hand-written kernel")
    hand = _hand(name, sizes, target, dtype)
    if hand and hand.get("ns") is not None and not hand["reference_ok"]:
        say(f"warning: the hand-written {name} kernel fails its numerical check ({hand['checked']})")
    roofline = full.roofline_ns  # the program's: the ablations and the hand kernel share it
    lat = {k: (r.latency_ns if r is not None else None) for k, r in ablated.items()}
    row.update({
        "axon_ns": full.latency_ns,
        "roofline_ns": roofline,
        "roofline_fraction": roofline / full.latency_ns,
        "baselines": {"direct": finite_or_none(full.baseline_latency_ns), "hand": hand["ns"] if hand else None, **lat},
        "search_s": round(search_s, 2),
        **_searched(full), "max_abs_err": full.max_abs_err,
        "ablations": {k: ({**_searched(r), "candidates": _searched(r)["candidates"]["generated"]}
                          if r is not None else {"error": notes[k]}) for k, r in ablated.items()},
        "direct_check": direct_check,
        "hand": hand,
    })
    row["speedup"] = {b: (v / full.latency_ns if v else None) for b, v in row["baselines"].items()}
    return _aws(row, corpus, say) if corpus else row


def _searched(r) -> dict:
    """What a row records of a search: fusion, rewrites, candidates, proofs; of a program that is
    several kernels (search.pipeline), its kernels' together."""
    if not hasattr(r, "steps"):
        return {"fusion": r.fusion, "rewrites": list(r.rewrites), "candidates": r.candidates, "proofs": r.proofs}
    kernels = [s.result for s in r.steps if s.kind == "kernel"]
    total = lambda field: {k: sum(getattr(x, field).get(k, 0) for x in kernels)
                           for k in getattr(kernels[0], field)}
    return {"fusion": f"{len(kernels)} kernels", "rewrites": [w for x in kernels for w in x.rewrites],
            "candidates": total("candidates"), "proofs": total("proofs")}


# --- the whole run ----------------------------------------------------------------------------
def summarize(cases: list[dict]) -> dict:
    """Geomean speedups per family and baseline ({baseline}: x > 1 means Axon is faster), and the
    ablations as the fraction of full Axon's performance they keep (axon_ns / ablated_ns)."""
    out = {}
    baselines = baselines_of(cases)
    for fam in FAMILIES:
        rows = [c for c in cases if c.get("family") == fam and "axon_ns" in c]
        if fam == "user" and not rows:
            continue  # the suite's own families are always reported, users' programs when measured
        g = {"cases": len(rows)}
        for b in baselines:
            g[b] = geomean(c["speedup"][b] for c in rows if c["speedup"].get(b))
            g[f"{b}_cases"] = sum(1 for c in rows if c["speedup"].get(b))
        for b in ("no_algebra", "no_fusion"):
            g[f"{b}_relative"] = geomean(c["axon_ns"] / c["baselines"][b] for c in rows if c["baselines"].get(b))
        g["roofline_fraction"] = geomean(c["roofline_fraction"] for c in rows)
        out[fam] = g
    return out


def losses(cases: list[dict], tol: float = 0.005) -> list[dict]:
    """Cases where a baseline is faster than Axon by more than `tol` (relative)."""
    out = []
    for c in cases:
        for b, s in (c.get("speedup") or {}).items():
            if s and s < 1 - tol:
                out.append({"benchmark": c["benchmark"], "case": c["case"], "baseline": b, "speedup": s})
    return out


def load(json_path: Optional[Path]) -> Optional[dict]:
    if json_path is None or not json_path.exists():
        return None
    try:
        return json.loads(json_path.read_text())
    except ValueError:
        raise InputError(f"{json_path} is not a benchmark report (invalid JSON); move it away or pass --fresh")


def write(doc: dict, json_path: Optional[Path]) -> None:
    if json_path is None:
        return
    json_path.parent.mkdir(parents=True, exist_ok=True)
    tmp = json_path.with_suffix(json_path.suffix + ".tmp")
    tmp.write_text(json.dumps(doc, indent=1) + "\n")
    tmp.replace(json_path)


def run_bench(target: str = "trn2", grid: str = "quick", benchmarks: Optional[list[str]] = None,
              dtype: str = "bfloat16", json_path=None, budget_s: float = DEFAULT_BUDGET_S, fresh: bool = False,
              command: str = "", progress: Optional[Callable[[str], None]] = None, corpus=None,
              workers: Optional[int] = None, sizes: Optional[dict] = None) -> dict:
    """`workers`: cases measured side by side (default: one per usable core); the report is the
    same for any number. `sizes`: measure each benchmark once at these sizes (case "given")
    instead of the grid's cases; `benchmarks` may name a user's program as FILE.py:NAME."""
    from axon.search.executor import usable_cpus

    workers = usable_cpus() if workers is None else workers
    if workers < 1:
        raise InputError(f"--workers must be at least 1 (got {workers})")
    from axon.search.select import ResultCache

    say = progress or (lambda s: None)
    names = list(benchmarks or suite.SUITE)
    for n in names:
        suite.get(n)
    json_path = Path(json_path) if json_path else None
    model = model_fingerprint(target)
    old = None if fresh else load(json_path)
    kept = []
    if old:
        kept = [c for c in old.get("cases", []) if c.get("model") == model and c.get("target") == target
                and c.get("dtype") == dtype]
        if len(kept) < len(old.get("cases", [])):
            say(f"{len(old['cases']) - len(kept)} case(s) in {json_path} were measured under another model, "
                f"target or dtype: measuring again")
    done = {case_key(c): c for c in kept}
    doc = {"target": target, "grid": grid, "dtype": dtype, "model": model, "command": command,
           "budget_s": budget_s, "cases": [], "geomean": {}, "losses": [], "wall_s": (old or {}).get("wall_s", 0.0)}
    if corpus:
        corpus = Path(corpus)
        if not corpus.is_dir():
            raise InputError(f"--corpus {corpus} is not a folder")
        doc["corpus"] = str(corpus)
    todo = [(n, c, s) for n in names for c, s in grid_cases(suite.get(n), grid, sizes)]
    if old and old.get("grid") == grid:  # cases of benchmarks not selected this time stay in the report
        wanted = {(n, c, target, dtype) for n, c, _ in todo}
        doc["cases"] = [c for k, c in done.items() if k not in wanted]
    start = time.perf_counter()

    def record(row: dict) -> None:
        doc["cases"].append(row)
        doc["wall_s"] = round((old or {}).get("wall_s", 0.0) * bool(kept) + time.perf_counter() - start, 1)
        _finish(doc)
        write(doc, json_path)

    jobs = []
    for i, (name, case, sizes) in enumerate(todo):
        key = (name, case, target, dtype)
        if key in done and (not corpus or "axon_ns" not in done[key] or _aws_current(done[key])):
            doc["cases"].append(done[key])
        elif key in done:  # measured without AWS's kernels, or with another table of them: add them only
            t = time.perf_counter()
            row = _aws(done[key], corpus, lambda s, tag=f"{name} {case}": say(f"{tag}: {s}"))
            row["wall_s"] = round(row.get("wall_s", 0.0) + time.perf_counter() - t, 2)
            record(row)
        else:
            jobs.append((f"[{i + 1}/{len(todo)}] {name} {case}", name, case, sizes))
    if workers > 1:  # side by side, the longest cases first, so no long one is left to run alone at the end
        jobs.sort(key=_expected_cost(load(json_path) if fresh else old), reverse=True)
    with tempfile.TemporaryDirectory(prefix="axon_bench_cache_") as tmp:
        side_by_side = max(1, min(workers, len(jobs)))
        # cases run side by side share the cores: each one's timing runs go one after another
        measure = functools.partial(_measure_job, target=target, dtype=dtype, budget_s=budget_s, cache_dir=tmp,
                                    say=say, corpus=corpus, model=model,
                                    timing_workers=1 if side_by_side > 1 else workers)
        for row in _each_measured(measure, jobs, side_by_side):
            record(row)
    _finish(doc)
    write(doc, json_path)
    return doc


def _expected_cost(old: Optional[dict]):
    """A job's expected cost, for ordering only: its wall time in the previous report (under any
    model); a case without one goes before those (the product of its sizes, far above any time)."""
    walls = {(c["benchmark"], c["case"]): c["wall_s"] for c in (old or {}).get("cases", []) if c.get("wall_s")}

    def cost(job: tuple) -> float:
        _, name, case, sizes = job
        return walls.get((name, case), float(_work(sizes)))

    return cost


def _measure_job(job: tuple, target: str, dtype: str, budget_s: float, cache_dir: str, say, corpus, model: str,
                 timing_workers: int) -> dict:
    """One case's row (or its one-line failure), as `run_bench` records it."""
    from axon.search.executor import LocalProcesses
    from axon.search.select import ResultCache

    tag, name, case, sizes = job
    say(f"{tag} {sizes}")
    t = time.perf_counter()
    try:
        row = measure_case(name, case, sizes, target, dtype, budget_s, ResultCache(Path(cache_dir)),
                           lambda s: say(f"{tag}: {s}"), corpus=corpus, executor=LocalProcesses(timing_workers))
    except AxonError as err:
        row = {"benchmark": name, "family": suite.get(name).family, "case": case, "sizes": sizes, "target": target,
               "dtype": dtype, "error": str(err)}
        say(f"{tag}: failed: {err}")
    row["model"] = model
    row["wall_s"] = round(time.perf_counter() - t, 2)
    if "axon_ns" in row:
        sp = row["speedup"]
        vs = ", ".join(f"x{sp[b]:.2f} {b.replace('_', '-')}" for b in BASELINES + (AWS,) if sp.get(b))
        say(f"{tag}: axon {row['axon_ns'] / 1e3:.1f} us; {vs}; "
            f"{row['roofline_fraction']:.0%} of roofline ({row['wall_s']:.0f} s)")
    return row


_MEASURE = None  # the job function of the pool being forked: inherited by its workers, never pickled


def _measure_inherited(job: tuple) -> dict:
    return _MEASURE(job)


def _each_measured(measure, jobs: list, workers: int):
    """`measure(job)` for every job, `workers` at a time in forked processes (1: here, in order);
    rows come as they finish. The pool's processes are all forked at its first job, before it
    starts a thread, from this process's one thread, so they fork their own sandboxes and proofs
    as a lone process does, and they inherit `measure` (progress callbacks need not pickle)."""
    global _MEASURE
    if workers <= 1:
        yield from map(measure, jobs)
        return
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed

    _MEASURE = measure
    try:
        with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork")) as pool:
            for done in as_completed([pool.submit(_measure_inherited, job) for job in jobs]):
                yield done.result()
    finally:
        _MEASURE = None


def _finish(doc: dict) -> None:
    order = {n: i for i, n in enumerate(suite.SUITE)}
    cases = lambda c: list(suite.get(c["benchmark"]).cases)
    case_order = lambda c: cases(c).index(c["case"]) if c["case"] in cases(c) else 999
    doc["cases"].sort(key=lambda c: (order.get(c["benchmark"], len(order)), c["benchmark"], case_order(c)))
    ok = [c for c in doc["cases"] if "axon_ns" in c]
    doc["geomean"] = summarize(ok)
    doc["losses"] = losses(ok)


def progress_to_stderr(text: str) -> None:
    print(f"axon bench: {text}", file=sys.stderr, flush=True)
