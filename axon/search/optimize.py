"""`axon.optimize(program, sizes, target="trn2", dtype="bfloat16")`: the whole pipeline, one call.

Symbolic phase: operator propagation proves variants into the nuGraph; each variant is grouped
into passes (node fusion), tiled under the target's limits (misfits rejected by the model) and
lowered to proved instruction programs by synthesis (per operator and group, then instruction
fusion and a second round of propagation on the instructions' meaning), and every candidate
is emitted as kernel source. Selection phase: the performance model ranks all candidates from
timing-only simulation; the fastest ones are run with data at full size against the NumPy
reference until one passes. The direct lowering (one pass per operator, default tiling, no
rewrite) is timed as the baseline and is itself a candidate, so the winner is never slower.

Invariant: shared stage; Trainium appears only as the default target name.
"""
from __future__ import annotations

import copy
import json
import math
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping, Optional, Union

from axon.frontend.loading import load_program
from axon.errors import AxonError, InputError, UnsupportedError
from axon.fusion.nodes import FUSION_MODES, RowWorld, columns_for_vectors
from axon.frontend.program import Program, program_of
from axon.search.candidates import (Candidate, Counts, Plans, check_lowerable, direct_lowering, enumerate_candidates,
                                    with_header_line)
from axon.search.check import check as check_with_data, plan_columns, plan_rows, reference_work
from axon.search.lowering import Lowerer
from axon.search.roofline import matmul_macs, program_roofline
from axon.search.database import code_fingerprint
from axon.search.executor import make_executor
from axon.search.select import WORK_PER_S, ResultCache, Timing, default_cache, rank
from axon.semantics.bounds import describe
from axon.semantics.ops import Op
from axon.semantics.evaluate import check_constraints, dtype_named, fold_constants

DEFAULT_BUDGET_S = 45.0  # ranking work, in seconds of a 2-core machine (select.WORK_PER_S: counted in
# simulated instructions, so the same on any machine); checks and the symbolic phase come on top
MAX_CHECKS = 3
MORE_VARIANTS = 64  # how far past the first variants to look when none of them has a kernel
MODEL_SHORTLIST = 32  # candidates the performance model ranks, after the static traffic estimate
# ...and past the shortlist, while ranking has taken less than this (or the budget, if smaller: the
# budget bounds all ranking): the static estimate counts traffic only, so engine balance and
# lowering alternatives are the model's to judge where it is cheap
EXTRA_RANK_S = 20.0
# numerics with data cost ~0.1 s per 1e10 multiply-adds in the NumPy simulator (gated_mlp at
# llama3_8b, 3.6e11, checks in ~35 s idle and past the simulator's 120 s limit on a loaded
# 2-core machine); above this a candidate is checked on some of its row blocks (search.check)
# and the report says which
FULL_CHECK_MACS = 1e11
# The direct lowering's latency is the full timing path's while that run costs at most this much
# work (the ranking budget's unit: 5 s of it); past it, its latency from loop samples is reported
# and said (benchmarks/results/sampled_timing.md: within 0.74% of the full path on the suite's
# winners). gqa's baseline at Llama-3-70B sizes took 56 s to time in full, beside the check.
FULL_BASELINE_WORK = 5 * WORK_PER_S


class Ratios:
    """What a result says of its latency: against the program's roofline and the direct lowering."""

    @property
    def roofline_fraction(self) -> float:
        return self.roofline_ns / self.latency_ns if self.latency_ns else 0.0

    @property
    def speedup(self) -> float:
        return self.baseline_latency_ns / self.latency_ns if self.latency_ns else 0.0


@dataclass
class OptimizeResult(Ratios):
    benchmark: str
    target: str
    sizes: dict
    dtype: str
    kernel_source: str = field(repr=False)  # the whole kernel: printed by the report, not by repr
    latency_ns: float
    roofline_ns: float  # the program's at this case (search.roofline), not the winner's own bound
    max_abs_err: float
    rewrites: tuple
    tiling: list
    fusion: str
    baseline_latency_ns: float  # inf when the direct lowering has no latency (baseline_note says why)
    candidates: dict
    proofs: dict
    time_s: dict
    check: str  # what was checked how
    checked: dict = field(default_factory=dict)  # the rows checked and the tolerance, as data
    report: str = ""
    kernel_path: Optional[str] = None
    trace_path: Optional[str] = None
    winner: Optional[Candidate] = field(default=None, repr=False)
    baseline_source: str = field(default="", repr=False)  # the direct lowering's kernel (the report checks it)
    baseline_note: str = ""  # why the direct lowering has no latency: it does not fit, or failed to simulate
    baseline_timing: str = "full"  # or "loop-sampled": its full timing run costs too much (FULL_BASELINE_WORK)
    # instruction level: groups lowered together, instruction fusions, second-round propagation
    instructions: dict = field(default_factory=dict)
    # what the winner implements: (the variant's Graph, the sizes binding its dimensions); not stored
    implemented: Optional[tuple] = field(default=None, repr=False)

    def to_json(self) -> dict:
        return {
            "benchmark": self.benchmark, "target": self.target, "sizes": self.sizes, "dtype": self.dtype,
            "best": {"kernel_path": self.kernel_path, "latency_ns": self.latency_ns, "roofline_ns": self.roofline_ns,
                     "roofline_fraction": self.roofline_fraction, "max_abs_err": self.max_abs_err,
                     "rewrites": list(self.rewrites), "tiling": self.tiling, "fusion": self.fusion,
                     "check": self.check, "checked": self.checked, "trace_path": self.trace_path},
            "baseline": {"latency_ns": finite_or_none(self.baseline_latency_ns), "speedup": finite_or_none(self.speedup),
                         **({"none": self.baseline_note} if self.baseline_note else {"timing": self.baseline_timing})},
            "candidates": self.candidates, "proofs": self.proofs, "time_s": self.time_s,
            "instructions": self.instructions,
        }


def finite_or_none(x: float) -> Optional[float]:
    """JSON has no infinity: a latency that does not exist is null."""
    return x if math.isfinite(x) else None


def baseline_line(r) -> str:
    """What the report says of the direct lowering."""
    if r.baseline_note:
        return f"none: the direct lowering {r.baseline_note}"
    how = "" if getattr(r, "baseline_timing", "full") == "full" else ", timed from loop samples"
    return f"{r.baseline_latency_ns / 1e3:.2f} us (direct lowering{how}); speedup {r.speedup:.2f}x"


# --- inputs --------------------------------------------------------------------------------
def resolve_program(program: Union[Program, str]) -> tuple[Program, Optional[object]]:
    """A Program, a benchmark name, or FILE.py:FUNC."""
    if isinstance(program, Program):
        return program, None
    return load_program(str(program))


def resolve_sizes(prog: Program, bench, sizes: Union[Mapping[str, int], str, None]) -> dict[str, int]:
    if sizes is None and bench is None and not prog.dims:
        return {}  # every dimension is a literal
    if sizes is None or isinstance(sizes, str):
        if bench is None:
            raise InputError(f"{prog.name}: give --sizes (a case name needs a benchmark)")
        return bench.sizes(sizes or "small")
    sizes = {k: int(v) for k, v in sizes.items()}
    missing = [d for d in prog.dims if d not in sizes]
    extra = [d for d in sizes if d not in prog.dims]
    if missing or extra:
        raise InputError(f"sizes do not match {prog.signature()}: "
                         + (f"missing {', '.join(missing)}" if missing else "")
                         + ("; " if missing and extra else "")
                         + (f"no dimension {', '.join(extra)}" if extra else ""))
    check_constraints(prog.graph, sizes)
    return sizes


def get_target(name: str):
    from axon import targets

    return targets.get(name)


# --- the pipeline --------------------------------------------------------------------------
INTERMEDIATES = ("any", "float32")  # optimize(intermediates=...): see optimize


class NotOneKernel(UnsupportedError):
    """No variant of the program is one kernel: it is optimized as several (search.pipeline)."""


def optimize(program, sizes=None, target: str = "trn2", dtype: str = "bfloat16", *, budget_s: float = DEFAULT_BUDGET_S,
             variants: int = 8, out_dir: Optional[Union[str, Path]] = None, cache: Optional[ResultCache] = None,
             progress: Optional[Callable[[str], None]] = None, seed: int = 0, algebra: bool = True,
             fusion: bool = True, executor=None, intermediates: str = "any"):
    """The fastest correct kernel for `program` at `sizes` (an OptimizeResult); a program that no
    kernel implements whole (a transformer block) is cut into kernels (fusion.kernels) and gives a
    PipelineResult (search.pipeline). The ablations of the benchmark report: `algebra=False`
    searches only the program as written (no propagation variants, no proofs); `fusion=False`
    gives every operator its own pass (tiling and layout are still searched). `intermediates`:
    "any" lets a half-precision kernel keep values between instructions in its own dtype where
    that is faster (checked within the error bounds of that choice), "float32" keeps them in
    float32 (attention's scores and exponentials: more accurate, slower). `executor`
    (search.executor) runs the timing simulations, several at once; the default is a process per
    usable core. It never changes the result."""
    prog, bench = resolve_program(program)
    _check_outputs(prog)
    if intermediates not in INTERMEDIATES:
        raise InputError(f"intermediates {intermediates!r}: expected one of {', '.join(INTERMEDIATES)}")
    options = dict(budget_s=budget_s, variants=variants, cache=cache, algebra=algebra, fusion=fusion,
                   executor=executor or make_executor(), intermediates=intermediates)
    try:
        return optimize_kernel(prog, bench, sizes, target, dtype, out_dir=out_dir, progress=progress, seed=seed,
                               **options)
    except NotOneKernel as err:
        from axon.fusion.kernels import partition
        from axon.search.pipeline import optimize_pipeline

        folded = fold_constants(prog.graph, resolve_sizes(prog, bench, sizes))
        prog = prog if folded is prog.graph else program_of(folded, prog.name)
        try:
            part = partition(prog.graph)
        except UnsupportedError:
            raise err from None  # no kernels compute it either: the first reason, naming the program
        if len(part.steps) < 2:
            raise
        if progress:
            progress(f"not one kernel ({err}): optimizing it as several")
        return optimize_pipeline(prog, part, resolve_sizes(prog, bench, sizes), _optimize_piece, get_target(target),
                                 dtype, seed=seed, out_dir=out_dir, progress=progress, **options)


def _check_outputs(prog: Program) -> None:
    """A kernel writes each output it computes once: an input returned as it is, or one value
    returned twice, would be a tensor it never writes. It loads arrays: a rank-0 input has no
    tile to load into (a per-row value is an (m, 1) input)."""
    for node in prog.graph.inputs:
        if node.rank == 0:
            raise UnsupportedError(f"{prog.name}: input {node.params.name} has rank 0; a kernel loads arrays "
                                   "(write a fixed number as a Python constant, or pass an (m, 1) column)")
    seen = set()
    for k, out in enumerate(prog.graph.outputs):
        if out.op is Op.INPUT:
            raise UnsupportedError(f"{prog.name}: output {k} is the input {out.params.name} itself; a kernel "
                                   "returns values it computes (return the input from the caller instead)")
        if out in seen:
            raise UnsupportedError(f"{prog.name}: output {k} is the same value as an earlier output; a kernel "
                                   "returns each value once (return it once and reuse it in the caller)")
        seen.add(out)


def _optimize_piece(prog, sizes, target, dtype, seed, progress, **options):
    return optimize_kernel(prog, None, sizes, target, dtype, out_dir=None, seed=seed, progress=progress, **options)


def optimize_kernel(prog: Program, bench, sizes, target: str, dtype: str, *, budget_s: float, variants: int,
                    out_dir, cache, progress, seed: int, algebra: bool, fusion: bool, executor,
                    intermediates: str = "any") -> OptimizeResult:
    """The fastest correct single kernel for `prog` (see optimize)."""
    say = progress or (lambda s: None)
    given = sizes = resolve_sizes(prog, bench, sizes)
    prog, named = prog.generalized()  # literal dimensions searched as named ones bound to their value
    sizes = {**sizes, **named}
    # 1 / sqrt(d) of a size d: the kernel's immediate; a rank-1 output of a row reduction: its column
    folded = columns_for_vectors(fold_constants(prog.graph, sizes))
    if folded is not prog.graph:
        prog = program_of(folded, prog.name)
    dtype_named(dtype)
    if dtype not in ("float32", "bfloat16", "float16"):
        raise UnsupportedError(f"dtype {dtype} is not supported by the kernels Axon emits (float32, bfloat16, float16)")
    tgt = get_target(target)
    cache = cache if cache is not None else default_cache()
    t0 = time.perf_counter()
    # a case this Axon has optimized before, with the same options, returns at once
    wkey = cache.key("winner", prog.graph.pretty(), json.dumps(sizes, sort_keys=True), dtype, tgt.name,
                     repr((budget_s, variants, seed, algebra, fusion) + ((intermediates,) if intermediates != "any" else ())), code_fingerprint())
    stored = cache.get_winner(wkey)
    if stored is not None:
        result = _stored_result(stored[0], wkey)
        if result is not None:
            if out_dir is not None:
                write_outputs(result, tgt, Path(out_dir), prog.input_shapes(sizes, dtype=dtype), trace=stored[1])
            say(f"stored result of an earlier run (axon cache show {wkey}): best {result.latency_ns / 1e3:.1f} us")
            return result

    # symbolic phase: variants, lowerings, tilings, emission
    from axon.rewriting import discover

    proofs = {"proved": 0, "refuted": 0, "unknown": 0}
    pool = []
    lowerer = Lowerer(tgt)
    if algebra:
        say(f"{prog.name} {sizes} on {tgt.name} ({dtype}): discovering rewrites")
        nu, _stats = discover(prog.graph)
        vs = nu.extract_variants(limit=variants)
        if not any(_lowers(v.graph, lowerer) for v in vs):
            # none of the first variants has a kernel (a concatenation of weights, sliced): the
            # ones past them that do join the pool
            vs += [v for v in nu.extract_variants(limit=MORE_VARIANTS)[len(vs):] if _lowers(v.graph, lowerer)][:variants]
        for p in nu.proofs:
            key = {"PROVED": "proved", "REFUTED": "refuted"}.get(p.status, "unknown")
            proofs[key] += 1
        pool = [(v.graph, tuple(nu.proofs[i].rewrite for i in v.rewrites)) for v in vs]
    pool = pool or [(prog.graph, ())]
    counts = Counts()
    rewritten = sum(1 for _, chain in pool if chain)
    say(f"{len(pool)} program variant(s) (the program as written"
        + (f" and {rewritten} proved rewrite{'s' if rewritten > 1 else ''} of it" if rewritten else "")
        + "); tiling and emitting candidates")
    try:
        baseline = direct_lowering(prog.name, prog.graph, sizes, tgt, dtype, lowerer)
    except UnsupportedError as err:
        # the program as written has no kernel: the direct lowering of the first variant that has one
        vi = next((i for i, (g, _) in enumerate(pool) if _lowers(g, lowerer)), None)
        if vi is None:
            raise NotOneKernel(f"{prog.name} cannot be implemented on {tgt.name}: {err}") from None
        try:
            baseline = direct_lowering(prog.name, pool[vi][0], sizes, tgt, dtype, lowerer)
        except UnsupportedError as err:
            raise NotOneKernel(f"{prog.name} cannot be implemented on {tgt.name}: {err}") from None
        baseline.variant, baseline.rewrites = vi, pool[vi][1]
        say(f"the program as written has no kernel ({err}): the baseline is the direct lowering of variant {vi}")
    plans = enumerate_candidates(prog.name, pool, sizes, tgt, dtype, lowerer, counts, progress=say,
                                 wide_only=intermediates == "float32",
                                 modes=FUSION_MODES if fusion else ("unfused",), plans=True)
    base_misfit = baseline.misfit
    if base_misfit:
        counts.reject(f"direct lowering: {base_misfit}")
    else:
        plans.append(baseline)  # emitted already: it joins the plans as it is
    # cheap first rank (estimated traffic), then the performance model on the most promising;
    # only what is ranked is emitted (in this order, each distinct kernel once: a kernel reached
    # through several rewrite chains is timed once, under the first variant reaching it)
    plans.sort(key=lambda c: c.static_cost)
    order = _InTurn(plans, Plans(counts))
    shortlist = order.take(MODEL_SHORTLIST)
    if not shortlist:
        why = "; ".join(counts.reasons[:3]) or "no tiling fits"
        raise UnsupportedError(f"{prog.name}: no candidate kernel fits {tgt.name}: {why}")
    t_symbolic = time.perf_counter() - t0

    # selection phase
    t1 = time.perf_counter()
    shapes = prog.input_shapes(sizes, dtype=dtype)  # timing-only runs need no data
    # one roofline per case, from the program: the same for every candidate and the baseline
    roofline = program_roofline(prog.graph, sizes, dtype, tgt.peaks(dtype))
    if not base_misfit and not any(c.key == baseline.key for c in shortlist):
        # ranked second: beside the first candidate where runs go ahead, so it runs to its end
        # (a run stopped at a floor gives no latency: ranked last, gqa's at Llama-3-70B was
        # stopped, then run again), and not first, whose latency bounds the runs started next
        shortlist.insert(1, baseline)
    say(f"ranking {len(shortlist)} of {counts.planned} candidates with the performance model (timing-only "
        "simulation, long loops sampled; each emitted when ranked)")
    executor = executor or make_executor()
    ranked = rank(tgt, shortlist, shapes, cache, budget_s, progress=say, executor=executor)
    spent = sum(t.work for _, t in ranked) / WORK_PER_S  # in budget seconds: the same on any machine
    extra_s = min(EXTRA_RANK_S, budget_s) - spent
    if extra_s > 0:  # cheap to simulate: the model ranks past the static shortlist
        say(f"ranking more candidates while it stays cheap (up to {extra_s:.1f} budget seconds)")
        rest = (c for taken in iter(lambda: order.take(1), []) for c in taken if c.key != baseline.key)
        best = min((t.latency_ns for _, t in ranked if not t.pruned and not t.error), default=math.inf)
        ranked = sorted(ranked + rank(tgt, rest, shapes, cache, extra_s, executor=executor, best_ns=best),
                        key=lambda ct: (ct[1].pruned, ct[1].latency_ns))
    # what emission cost, as of the last candidate ranking took: not what timing runs started
    # ahead of it pulled (more with more workers), so the report is the same for any executor
    counts = order.counts_at([c for c in shortlist] + [c for c, _ in ranked])
    timed = {c.key: t for c, t in ranked}
    base_t = Timing(float("inf"), base_misfit) if base_misfit else timed.get(baseline.key)
    if base_t is None or base_t.pruned:  # a run ranking stopped at a floor: that is no latency
        base_t = rank(tgt, [baseline], shapes, cache, budget_s, executor=executor)[0][1]
    failed_sim = [c for c, t in ranked if t.error]
    # reported latencies are the full path's, never extensions of loop samples (the winner's run
    # keeps its schedule for the trace): the likely winner's and a sampled baseline's full runs
    # start now, beside the numerical checks
    full = _FullTimings(tgt, shapes, say)
    likely = next((c for c, t in ranked if not t.error), None)
    if likely is not None and (out_dir is not None or not timed[likely.key].exact):
        full.start(likely.source)
    base_sampled = not base_t.exact and not base_t.error and not _cheap_in_full(tgt, baseline.source)
    if not base_t.exact and not base_t.error and not base_sampled:
        full.start(baseline.source)
    try:
        data = prog.random_inputs(sizes, dtype=dtype, seed=seed)  # full size: a partial check runs the full kernel
        macs = matmul_macs(prog.graph, sizes)
        winner, check, failed_numerics, checked = None, None, 0, 0
        check_rows = {}
        for cand, t in ranked:
            if t.error or checked >= MAX_CHECKS:
                continue
            checked += 1
            check, check_rows[cand.key] = _check(prog, pool, cand, sizes, tgt, dtype, lowerer, data, macs, say,
                                                 t.latency_ns)
            if check.ok:
                winner = (cand, t)
                break
            failed_numerics += 1
            say(f"  failed: {check.explain()}")
        if winner is None and not base_t.error and baseline.key not in [c.key for c, _ in ranked[:checked]]:
            check, check_rows[baseline.key] = _check(prog, pool, baseline, sizes, tgt, dtype, lowerer, data, macs,
                                                     say, base_t.latency_ns)
            if check.ok:
                winner = (baseline, base_t)
        if winner is None:
            detail = check.explain() if check else "every simulation failed"
            errs = sorted({t.error.split(': ', 1)[-1] for _, t in ranked if t.error})[:2]
            raise UnsupportedError(f"{prog.name}: no candidate passed the numerical check ({detail})"
                                   + (f"; simulation errors: {'; '.join(errs)}" if errs else ""))
        cand, t = winner
        final = full.take(cand.source) if (out_dir is not None or not t.exact) else None
        if final is not None:
            t = Timing(final.latency_ns, work=t.work)
        if not base_t.exact and not base_t.error and not base_sampled:
            full_base = full.take(baseline.source)
            base_t = Timing(full_base.latency_ns, work=base_t.work) if full_base else base_t
    finally:
        full.cancel()  # the likely winner's run, when another candidate won
    t_selection = time.perf_counter() - t1
    rows, columns = check_rows[cand.key]
    part = " and ".join(p.describe() for p in (rows, columns) if p is not None)
    result = OptimizeResult(
        benchmark=prog.name, target=tgt.name, sizes=given, dtype=dtype, kernel_source=cand.source,
        latency_ns=t.latency_ns, roofline_ns=roofline.ns, max_abs_err=check.max_abs_err, rewrites=cand.rewrites,
        tiling=cand.tiling(), fusion=cand.fusion, baseline_latency_ns=base_t.latency_ns,
        baseline_note=(f"does not fit {tgt.name}: {base_misfit}" if base_misfit else
                       f"failed in the simulator: {base_t.error}" if base_t.error else ""),
        baseline_timing="loop-sampled" if base_sampled else "full",
        candidates={"generated": counts.planned, "emitted": counts.emitted, "distinct_kernels": counts.generated,
                    "rejected_by_constraints": counts.rejected_by_constraints,
                    "unsupported": counts.unsupported, "failed_simulation": len(failed_sim),
                    "failed_numerics": failed_numerics, "evaluated": len(ranked),
                    "stopped_early": sum(t.pruned for _, t in ranked), "checked": checked,
                    "shortlisted_by_static_cost": len(shortlist)},
        proofs=proofs, time_s={"symbolic": round(t_symbolic, 3), "selection": round(t_selection, 3)},
        check=(f"full size {sizes}" if not part else
               f"PART of the {'rows' if columns is None else 'outputs'}: {part}, the full-size kernel on "
               f"those blocks (all {sizes} would exceed the {FULL_CHECK_MACS:.0e} multiply-add check budget)")
              + f", random normal inputs (seed {seed}), {dtype} (intermediates {cand.options.precision}), against "
              f"the float64 reference within per-element error bounds ({describe(check.tolerance)}; "
              f"max |err| / bound {check.worst_ratio:.3g})",
        checked={"rows": "all" if rows is None else rows.to_json(),
                 "columns": "all" if columns is None else columns.to_json(), "tolerance": check.tolerance,
                 "max_err_over_bound": check.worst_ratio},
        winner=cand, instructions=_instruction_stats(lowerer, cand), baseline_source=baseline.source,
        implemented=(pool[cand.variant][0] if cand.rewrites or cand.variant else prog.graph, sizes))
    result.kernel_source = with_header_line(
        cand.source, f"checked:  {'on ' + part if part else 'at full size'}, random normal inputs "
                     f"(seed {seed}), against the float64 reference: max |err| {check.max_abs_err:.3g}, "
                     f"{check.worst_ratio:.2f} of its per-element error bound")
    result.report = _report(result, cand, counts)
    trace = None
    if out_dir is not None:
        write_outputs(result, tgt, Path(out_dir), shapes, final)
        trace = Path(result.trace_path).read_bytes() if result.trace_path else None
    cache.put_winner(wkey, prog.graph.pretty(), sizes, dtype, tgt.name, _stored_fields(result), trace)
    say(f"best {result.latency_ns / 1e3:.1f} us ({result.roofline_fraction:.0%} of roofline); baseline "
        f"{baseline_line(result)}")
    return result


# what a stored winner keeps of its OptimizeResult: everything but the search's own objects and
# where this run wrote its files
_NOT_STORED = ("winner", "kernel_path", "trace_path", "implemented")


def _stored_fields(result: OptimizeResult) -> dict:
    return {f: getattr(result, f) for f in OptimizeResult.__dataclass_fields__ if f not in _NOT_STORED}


def _stored_result(fields: dict, key: str) -> Optional[OptimizeResult]:
    """The OptimizeResult a stored winner describes, or None when the row is not one (a miss)."""
    try:
        r = OptimizeResult(**{**fields, "rewrites": tuple(fields["rewrites"])})
    except (TypeError, KeyError):
        return None
    if not (isinstance(r.kernel_source, str) and isinstance(r.latency_ns, (int, float)) and r.latency_ns > 0):
        return None
    r.report += f"\n  stored:   the result of an earlier run (axon cache show {key})"
    return r


def _cheap_in_full(tgt, source: str) -> bool:
    """Whether the full timing path on `source` costs at most FULL_BASELINE_WORK (unknown: yes)."""
    work = getattr(tgt, "full_timing_work", lambda s: None)(source)
    return work is None or work <= FULL_BASELINE_WORK


def _lowers(graph, lowerer) -> bool:
    """Whether a kernel can be built for `graph` at all (every operator tiles and lowers)."""
    try:
        check_lowerable(RowWorld.of(graph), lowerer)
        return True
    except UnsupportedError:
        return False


def _check(prog, pool, cand: Candidate, sizes, tgt, dtype, lowerer, data, macs, say, latency_ns):
    """Check `cand` with data against the variant it implements (search.check): all rows, or the
    row blocks `plan_rows` picks when all would exceed FULL_CHECK_MACS, and where those still
    would, the column blocks `plan_columns` picks. Returns (Check, (the rows checked or None for
    all, the columns checked or None for all))."""
    graph = pool[cand.variant][0] if cand.rewrites or cand.variant else prog.graph
    try:
        work = reference_work(graph, sizes)
        rows = plan_rows(graph, cand, sizes, macs, FULL_CHECK_MACS, work)
        share = 1.0 if rows is None else rows.checked / rows.rows
        columns = plan_columns(graph, cand, sizes, macs * share, FULL_CHECK_MACS, work * share)
    except UnsupportedError as err:
        raise UnsupportedError(f"{prog.name}: {err}") from None
    part = " and ".join(p.describe() for p in (rows, columns) if p is not None)
    say(f"checking candidate at {latency_ns / 1e3:.1f} us numerically {'on ' + part if part else 'at full size'}")
    return check_with_data(tgt, prog.name, graph, cand, sizes, dtype, lowerer, data, rows, columns=columns,
                           original=None if graph == prog.graph else prog.graph), (rows, columns)


def _report(r: OptimizeResult, cand: Candidate, counts: Counts) -> str:
    lines = [f"{r.benchmark} on {r.target} ({r.dtype}), sizes {r.sizes}",
             f"  best:     {r.latency_ns / 1e3:.2f} us, {r.roofline_fraction:.0%} of the program's roofline "
             f"({r.roofline_ns / 1e3:.2f} us); {cand.describe()}",
             f"  baseline: {baseline_line(r)}",
             f"  rewrites: {', '.join(r.rewrites) or 'none'}",
             f"  checked:  {r.check}; max |err| {r.max_abs_err:.3g}",
             f"  candidates: {r.candidates}",
             f"  proofs:   {r.proofs}; time {r.time_s}",
             f"  instructions: {r.instructions}"]
    if counts.reasons:
        lines.append("  rejections (first few): " + "; ".join(counts.reasons[:3]))
    return "\n".join(lines)


def _instruction_stats(lowerer, cand: Candidate) -> dict:
    """What the instruction level did: over the whole search (groups lowered together, instruction
    fusions applied, second-round rewrites proved on instruction meanings and programs they
    replaced) and in the winning kernel (its fused instructions)."""
    st = getattr(lowerer, "stats", {})
    used = [line.split("; fused ", 1)[1].split(";")[0] for line in cand.source.splitlines()
            if "instruction(s)" in line and "; fused " in line]
    return {"groups": st.get("groups", 0), "fusions": st.get("fusions", 0),
            "second_round_proved": st.get("second_round_proved", 0),
            "second_round_used": st.get("second_round_used", 0),
            "second_round_cheaper": st.get("second_round_cheaper", 0),
            "second_round_s": round(st.get("second_round_s", 0.0), 3),
            "winner_fusions": used}


def kernel_name(source: str) -> str:
    """The name of the (first) kernel function of `source`."""
    return source.split("@nki.jit", 1)[-1].split("def ", 1)[1].split("(", 1)[0]


def launcher_path(kernel_path) -> Path:
    """KERNEL_launch.py beside KERNEL.py: how to call it from PyTorch and JAX."""
    path = Path(kernel_path)
    return path.with_name(f"{path.stem}_launch.py")


def write_launcher(tgt, kernel_path: Path, entry: str, shapes: dict, dtype: str, pipeline: bool = False) -> None:
    """The launcher beside the kernel file, when the target has one."""
    if hasattr(tgt, "launcher"):
        launcher_path(kernel_path).write_text(tgt.launcher(kernel_path.stem, entry, shapes, dtype, pipeline))


class _InTurn:
    """Candidates in static-cost order within each fusion mode of each program variant (and walk
    and row layout), those taking turns: the static estimate counts traffic, not compute, so it orders kernels of one
    pass structure of one program but not across them (gqa at Llama-3-70B: split passes that move
    less but compute no faster filled the ranking budget before any fused one was timed; gqa at
    its quick case: the rewrite that divides after the second matmul, on d columns instead of t,
    computes less but moves the same). `plans` (in static-cost order) are emitted as they are
    taken; one that gives no new kernel passes its turn to its mode's next."""

    def __init__(self, plans: list, emitter: Plans):
        modes: dict = {}
        for c in plans:  # an online-softmax walk (tiling.online) is a pass structure of its own, and
            # heads folded into the rows a row tile of its own (the same bytes, more lanes busy)
            online = any(p.tiling.kv_chunk for p in c.passes)
            modes.setdefault((c.fusion, c.variant, online, c.options.fold), []).append(c)
        self.queues = [iter(q) for q in modes.values()]
        self.emitter, self.turn = emitter, 0  # turn: the queue whose turn it is
        self.marks: dict = {}  # id of a taken candidate -> (its place, the emitter's counts as it was taken)

    def take(self, k: int) -> list:
        """The next k candidates (fewer when the plans run out)."""
        out = []
        while len(out) < k and self.queues:
            self.turn %= len(self.queues)
            c = next((e for e in map(self.emitter.emit, self.queues[self.turn]) if e is not None), None)
            if c is None:  # this mode has no more: the next one moves into its turn
                del self.queues[self.turn]
                continue
            out.append(c)
            self.turn += 1
            counts = getattr(self.emitter, "counts", None)
            self.marks[id(c)] = (len(self.marks), copy.deepcopy(counts))
        return out

    def counts_at(self, taken: list) -> Counts:
        """The emitter's counts as they were when the last of `taken` was taken."""
        return max((self.marks[id(c)] for c in taken if id(c) in self.marks), key=lambda m: m[0])[1]


class _FullTimings:
    """Full-path timing-only runs, schedules kept, of the kernels whose latencies are reported
    (ranking's may be extended from loop samples): started early, taken when needed."""

    def __init__(self, tgt, shapes: dict, say):
        self.tgt, self.shapes, self.say, self.pending = tgt, shapes, say, {}

    def start(self, source: str) -> None:
        if source not in self.pending:
            self.pending[source] = self.tgt.run(source, self.shapes, timing_only=True, keep_schedule=True,
                                                wait=False)

    def take(self, source: str):
        """The measurement of `source`; None, said, if that run fails."""
        self.start(source)
        try:
            return self.pending.pop(source).result()
        except AxonError as err:
            self.say(f"warning: the full timing run failed ({err}); its latency stays the one extended from "
                     "loop samples")
            return None

    def cancel(self) -> None:
        for run in self.pending.values():
            run.cancel()
        self.pending.clear()


def write_outputs(result: OptimizeResult, tgt, out_dir: Path, shapes: dict, measured=None,
                  trace: Optional[bytes] = None) -> None:
    """The kernel, its Perfetto trace (`trace`: a stored one; else from `measured`, the winner's
    timing run with its schedule, or a fresh timing-only run) and the JSON report."""
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = f"{result.benchmark}_{result.target}"
    kpath = out_dir / f"{stem}{tgt.kernel_suffix}"
    kpath.write_text(result.kernel_source)
    result.kernel_path = str(kpath)
    write_launcher(tgt, kpath, kernel_name(result.kernel_source), {n: s.shape for n, s in shapes.items()},
                   result.dtype)
    try:
        tpath = out_dir / f"{stem}.trace.json"
        if trace is not None:
            tpath.write_bytes(trace)
        else:
            m = measured or tgt.run(result.kernel_source, shapes, timing_only=True, keep_schedule=True)
            tgt.write_trace(m, tpath)
        result.trace_path = str(tpath)
    except (AxonError, OSError) as err:
        print(f"axon: warning: no trace written: {err}", file=sys.stderr)
    (out_dir / f"{stem}.json").write_text(json.dumps(result.to_json(), indent=2) + "\n")
