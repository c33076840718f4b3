"""Equivalence of two programs (or two sub-DAGs) for all sizes: `Verifier`, `verify`.

Check order (shared/axon-paper.md, Pipeline 3): output count and rank, input signatures, shape
equality (sizes are canonical polynomials, so symbolic shapes compare exactly), then the sizes the
claim can cover (the programs' `SizeFact`s, positive intermediate sizes, and no size at which a
divisor is zero for every input), then NumPy evaluation at small sizes on random inputs, with
every flagged difference confirmed in high precision (the cheap filter, and the only source of
reported counterexamples), then value equality at a fresh symbolic index: each output element is
encoded as a canonical term (axon/verification/symbolic.py), the difference becomes one ground SMT
query (axon/verification/smt.py), and `unsat` proves it. A solver `sat` is reported as a
counterexample only when high precision confirms it at the model's sizes; `unknown` or a timeout
means "not proved".

A proof's `Claim` says exactly what it covers: the size conditions it used, and the domain
assumptions (divisor != 0, sqrt argument >= 0, log argument > 0, inside folds for every binder
value) that the solver could not derive from the sizes alone. Whole programs are compared by
`check_programs`, which matches inputs by position (`align`); sub-DAGs match inputs by name.
A `Verifier` owns its caches (verdicts by graph structure, solver outcomes by the query's
canonical text) and stats.
"""
from __future__ import annotations

import enum
from fractions import Fraction
from dataclasses import dataclass, replace
from typing import Optional

import numpy as np

from axon.errors import InputError, UnsupportedError
from axon.ir import Graph, Node, rename, toposort
from axon.semantics.ops import Op
from axon.semantics.sizes import Size, bind_shape, format_shape
from axon.verification import numeric
from axon.verification.claim import ASSUMPTION_TEXT, Claim, narrowing, positivity, simplify
from axon.verification.smt import Outcome, Query, solve
from axon.verification.symbolic import Encoder, SymbolicAlgebra, output_index, size_poly
from axon.verification import terms as T
from axon.verification.terms import TooLarge, Undefined


class Status(enum.Enum):
    PROVED = "proved"
    REFUTED = "refuted"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class Verdict:
    status: Status
    reason: str
    counterexample: Optional[dict] = None
    solver_time_s: float = 0.0
    query: Optional[str] = None  # short description of the deciding query
    cached: bool = False
    claim: Optional[Claim] = None  # what a proof covers (PROVED only)

    @property
    def proved(self) -> bool:
        return self.status is Status.PROVED

    @property
    def assumptions(self) -> tuple[str, ...]:
        return self.claim.assumption_texts if self.claim else ()

    @property
    def conditions(self) -> tuple[str, ...]:
        return self.claim.conditions if self.claim else ()

    def covers(self, sizes) -> bool:
        """Does the proof claim equality at this size binding? (False unless PROVED.)"""
        return self.proved and self.claim is not None and self.claim.covers(sizes)


@dataclass
class VerifierStats:
    proved: int = 0
    refuted: int = 0
    unknown: int = 0
    cache_hits: int = 0
    solver_calls: int = 0
    solver_time_s: float = 0.0


QUERY_CHARS = 240  # a deciding query is shown abbreviated to this many characters
CONFIRM_TRIALS = 16  # size bindings the refuter tries again before a solver model is left unconfirmed


class Verifier:
    def __init__(self, timeout_ms: int = 2000, seed: int = 0, numeric_trials: int = 3):
        self.timeout_ms = timeout_ms
        self.seed = seed
        self.numeric_trials = numeric_trials
        self.stats = VerifierStats()
        self._verdicts: dict[tuple, Verdict] = {}
        self._outcomes: dict[str, Outcome] = {}

    # -- public -------------------------------------------------------------------------------
    def check_programs(self, a: Graph, b: Graph) -> Verdict:
        """Two whole programs: inputs correspond by position, dimension names are each program's own."""
        return self.check_graphs(a, align(a, b))

    def check_graphs(self, a: Graph, b: Graph) -> Verdict:
        """Are the outputs of `a` and `b` pairwise equal for all sizes and inputs (matched by name)?"""
        key = (a.inputs, a.outputs, a.constraints, b.inputs, b.outputs, b.constraints)
        if key in self._verdicts:
            self.stats.cache_hits += 1
            return replace(self._verdicts[key], cached=True)
        verdict = self._check(a, b)
        self._verdicts[key] = verdict
        field_name = verdict.status.value
        setattr(self.stats, field_name, getattr(self.stats, field_name) + 1)
        return verdict

    def check_nodes(self, a: Node, b: Node, constraints=frozenset()) -> Verdict:
        """Equivalence of two sub-DAGs whose leaves are INPUT nodes (matched by name) and CONSTs,
        as a rewrite: it is applied at every size, so a claim narrowed below the sizes the terms
        accept is no proof here."""
        ga, gb = _graph_of(a, constraints), _graph_of(b, constraints)
        verdict = self.check_graphs(ga, gb)
        if verdict.proved and verdict.claim.narrowed:
            return replace(verdict, status=Status.UNKNOWN, claim=None,
                           reason=f"not proved at every size: {verdict.reason}")
        if verdict.proved and verdict.claim.assumptions:
            one_sided = self._one_sided_assumptions(ga, gb, verdict.claim)
            if one_sided:
                return replace(verdict, status=Status.UNKNOWN, claim=None,
                               reason=f"not proved for every input: {one_sided} on one side only (where it fails, "
                                      f"that side is undefined and the other need not be): {verdict.reason}")
            # an assumption inside a sum is no premise of the query: the sides' domains are
            # compared on numbers too
            edge = numeric.domain_difference(ga, gb, self.numeric_trials, self.seed)
            if edge is not None:
                return replace(verdict, status=Status.UNKNOWN, claim=None,
                               reason=f"not proved for every input: one side is undefined where the other is not, "
                                      f"{_describe(edge)}: {verdict.reason}")
        return verdict

    def _one_sided_assumptions(self, a: Graph, b: Graph, claim: Claim) -> str:
        """The first ground domain assumption (a divisor != 0, a sqrt argument >= 0, a log argument
        > 0) that one side's terms make and the other side's assumptions do not imply, described;
        "" when there is none. A proof assumes them all, so an assumption of one side alone
        leaves out exactly the inputs where the two differ (where(m, sqrt(c), -1) against
        sqrt(where(m, c, -1)): the second's argument is -1 wherever m is false), and a rewrite
        applies at every input."""
        (oa,), (ob,) = a.outputs, b.outputs
        index = output_index(oa.rank)
        bounds = tuple(zip(index, map(size_poly, oa.shape)))
        nodes = toposort(a.outputs + b.outputs)
        positive = tuple({p.key: p for n in nodes for p in map(size_poly, n.shape) if not p.is_const}.values())
        facts = tuple(sorted(((size_poly(f.size), f.divisor, f.minimum) for f in claim.facts),
                             key=lambda t: (t[0].key, t[1], t[2] is not None, t[2] or 0)))
        sides = []
        for out in (oa, ob):
            alg = SymbolicAlgebra()
            try:
                with T.ranged(bounds):
                    Encoder(alg).term(out, index)
            except (Undefined, TooLarge, UnsupportedError, RecursionError) as err:
                return f"an assumption that cannot be attributed ({err})"
            sides.append({f.key: f for f in alg.assumptions.values() if f.ground})
        for mine, other in ((sides[0], sides[1]), (sides[1], sides[0])):
            premises = tuple(sorted(((f.relation, f.term) for f in other.values()), key=lambda t: (t[0], t[1].key)))
            for key, fact in sorted(mine.items()):
                if key in other:
                    continue
                query = Query(fact.term, premises, bounds, positive, facts, claim=fact.relation)
                if self._solve(query)[0].result != "unsat":
                    term = _abbreviate(f"{fact.term.key} {fact.relation} 0")
                    return f"{ASSUMPTION_TEXT[fact.relation]} ({term})"
        return ""

    # -- the check order ---------------------------------------------------------------------
    def _check(self, a: Graph, b: Graph) -> Verdict:
        if len(a.outputs) != len(b.outputs):
            return Verdict(Status.REFUTED, f"the programs have {len(a.outputs)} and {len(b.outputs)} outputs")
        shapes_b = {n.params.name: n.shape for n in b.inputs}
        for n in a.inputs:
            other = shapes_b.get(n.params.name)
            if other is not None and other != n.shape:
                return Verdict(Status.REFUTED, f"input {n.params.name!r} is {format_shape(n.shape)} in one program "
                                               f"and {format_shape(other)} in the other")
        for k, (oa, ob) in enumerate(zip(a.outputs, b.outputs)):
            if oa.rank != ob.rank:
                return Verdict(Status.REFUTED, f"output {k} has rank {oa.rank} vs {ob.rank} "
                                               f"(shapes {format_shape(oa.shape)} vs {format_shape(ob.shape)})")
        for k, (oa, ob) in enumerate(zip(a.outputs, b.outputs)):
            if oa.shape != ob.shape:
                return self._shape_mismatch(a, b, k)
        claim_or_verdict = self._sizes_claimed(a, b)
        if isinstance(claim_or_verdict, Verdict):
            return claim_or_verdict
        small, claim = claim_or_verdict
        extra = [binding for binding in small if claim.covers(binding)]
        cex = numeric.refute(a, b, self.numeric_trials, self.seed, extra=extra, narrowed=claim.facts,
                             nonzero=claim.nonzero)
        if cex is not None:
            return Verdict(Status.REFUTED, _describe(cex), cex)
        return self._prove(a, b, claim)

    def _sizes_claimed(self, a: Graph, b: Graph):
        """(small bindings, the Claim's sizes): the programs' facts, the positivity of every
        intermediate size, and a lower bound that leaves out sizes where a divisor is zero for
        every input; or an UNKNOWN verdict when no small size is left."""
        nodes = toposort(a.outputs + b.outputs)
        facts = a.constraints | b.constraints
        base = list(facts) + positivity(s for n in nodes for s in n.shape)
        small, failing = numeric.domain_failures(a, b, facts, self.seed)
        nonzero = numeric.size_divisors(nodes)  # the claim leaves out their zeros: no bound needed there
        failing = [f for f in failing if all(s.evaluate(f) != 0 for s in nonzero)]
        narrowed = narrowing(small, failing)
        if narrowed is None:
            return Verdict(Status.UNKNOWN, "not proved: at every small size some divisor (or log argument) is zero "
                                           f"for every input, e.g. at {_sizes(failing[0])}")
        note = (f"sizes with {' or '.join(f'{f.size} < {f.minimum}' for f in narrowed)} are left out: a divisor is "
                f"zero for every input at {_sizes(failing[0])}" + (f" and {len(failing) - 1} more of them" if len(failing) > 1 else "")
                if narrowed else "")
        return small, Claim(simplify(base + narrowed), (), note, nonzero)

    def _shape_mismatch(self, a: Graph, b: Graph, k: int) -> Verdict:
        oa, ob = a.outputs[k], b.outputs[k]
        why = f"output {k} has shape {format_shape(oa.shape)} vs {format_shape(ob.shape)}"
        nodes = toposort(a.outputs + b.outputs)
        rng = np.random.default_rng(self.seed)
        dims = numeric.node_dims(nodes)
        found = numeric.bindings(dims, nodes, a.constraints | b.constraints, 50, rng, max_elements=None)
        for binding in found:
            sa, sb = bind_shape(oa.shape, binding), bind_shape(ob.shape, binding)
            if sa != sb:
                cex = {"sizes": binding, "output": k, "shape_a": sa, "shape_b": sb}
                return Verdict(Status.REFUTED, f"{why}: {_describe(cex)}", cex)
        if not found:
            needs = "; ".join(sorted({f.describe() for f in a.constraints | b.constraints if f.describe()}))
            return Verdict(Status.UNKNOWN, f"{why}, and no small sizes meet both programs' requirements ({needs})")
        return Verdict(Status.UNKNOWN, f"{why}, but no small sizes were found where they differ")

    def _prove(self, a: Graph, b: Graph, claim: Claim) -> Verdict:
        assumptions: dict = {}  # every output's, for the claim
        nodes = toposort(a.outputs + b.outputs)
        positive = tuple({p.key: p for n in nodes for p in map(size_poly, n.shape) if not p.is_const}.values())
        facts = tuple(sorted(((size_poly(f.size), f.divisor, f.minimum) for f in claim.facts),
                             key=lambda t: (t[0].key, t[1], t[2] is not None, t[2] or 0)))
        spent, all_cached = 0.0, True
        for k, (oa, ob) in enumerate(zip(a.outputs, b.outputs)):
            index = output_index(oa.rank)
            # one algebra and encoder per output: its terms are simplified within this output's index
            # ranges, and its assumptions are about this output's index (i0, i1, ...), no other's
            alg = SymbolicAlgebra()
            try:
                enc = Encoder(alg)
                whole = (p * T.Poly.const(Fraction(1, d)) for p, d, _ in facts if d > 1)
                with T.ranged(zip(index, map(size_poly, oa.shape))), T.integers(whole):
                    difference = enc.term(oa, index) - enc.term(ob, index)
            except (Undefined, TooLarge, UnsupportedError, RecursionError) as err:
                return Verdict(Status.UNKNOWN, f"output {k} could not be encoded symbolically: {err}",
                               solver_time_s=spent)
            assumptions.update(alg.assumptions)
            ground = tuple(sorted(((f.relation, f.term) for f in alg.assumptions.values() if _premise(f)),
                                  key=lambda t: (t[0], t[1].key)))
            bounds = tuple(zip(index, map(size_poly, oa.shape)))
            query = Query(difference, ground, bounds, positive, facts)
            label = _abbreviate(f"output {k}: {difference.key} == 0")
            outcome, cached = self._solve(query)
            spent += 0.0 if cached else outcome.seconds
            all_cached &= cached
            if outcome.result == "sat":
                return self._confirm(a, b, outcome, label, spent, claim)
            if outcome.result != "unsat":
                return Verdict(Status.UNKNOWN, f"not proved: {outcome.reason}", solver_time_s=spent, query=label,
                               cached=cached)
        stated = self._stated(assumptions.values(), positive, facts, max((o.rank for o in a.outputs), default=0))
        claim = replace(claim, assumptions=tuple(sorted(stated)))
        return Verdict(Status.PROVED, claim.describe(), solver_time_s=spent, cached=all_cached, claim=claim)

    def _solve(self, query: Query) -> tuple[Outcome, bool]:
        """The solver's outcome for `query`, memoised by its canonical text; (outcome, was cached)."""
        if query.key in self._outcomes:
            self.stats.cache_hits += 1
            return self._outcomes[query.key], True
        outcome = solve(query, self.timeout_ms, self.seed)
        self._outcomes[query.key] = outcome
        self.stats.solver_calls += 1
        self.stats.solver_time_s += outcome.seconds
        return outcome, False

    def _stated(self, assumptions, positive, facts, rank: int) -> set[str]:
        """The relations of the assumptions that do not follow from the sizes (and the solver's
        lemmas, e.g. exp > 0): a mean's divisor k, or 1 + exp(-x), is no assumption at all."""
        stated = set()
        index_bounds = tuple(zip(output_index(rank), _output_extents(rank)))
        for fact in assumptions:
            if fact.relation in stated:
                continue
            bounds = tuple((i, s) for i, s in index_bounds if i.key in fact.term.free) + fact.binders
            query = Query(fact.term, (), bounds, positive + tuple(s for _, s in bounds if not s.is_const), facts,
                          claim=fact.relation)
            if self._solve(query)[0].result != "unsat":
                stated.add(fact.relation)
        return stated

    def _confirm(self, a: Graph, b: Graph, outcome: Outcome, label: str, spent: float, claim: Claim) -> Verdict:
        """A solver model is reported only if high precision shows a difference at the model's sizes."""
        sizes = outcome.model_sizes or {}
        nodes = toposort(a.outputs + b.outputs)
        dims = numeric.node_dims(nodes)
        if set(dims) <= set(sizes):
            binding = {d: sizes[d] for d in dims}
            if (numeric.valid_binding(binding, nodes, a.constraints | b.constraints) and claim.covers(binding)
                    and all(np.prod(bind_shape(n.shape, binding)) <= numeric.MAX_ELEMENTS for n in nodes)):
                cex = numeric.refute(a, b, 1, self.seed + 1, only=[binding], draws=numeric.CONFIRM_DRAWS)
                if cex is not None:
                    return Verdict(Status.REFUTED, _describe(cex), cex, solver_time_s=spent, query=label)
        # before giving up, more sizes and inputs than the first screening took: a difference at
        # one element in a few (the maximum landing on a dropped column) is often missed there
        cex = (numeric.refute(a, b, CONFIRM_TRIALS, self.seed + 2, narrowed=claim.facts, nonzero=claim.nonzero,
                              draws=numeric.CONFIRM_DRAWS)
               if self.numeric_trials else None)
        if cex is not None and claim.covers(cex["sizes"]):
            return Verdict(Status.REFUTED, _describe(cex), cex, solver_time_s=spent, query=label)
        return Verdict(Status.UNKNOWN, "not proved: the solver found a model of the abstracted query (folds and "
                                       "exp/log/sqrt/tanh uninterpreted) that NumPy does not confirm",
                       solver_time_s=spent, query=label)


def verify(f, g, **kw) -> Verdict:
    """Are two programs (axon.Program or Graph) equivalent for all sizes? See `Verifier`."""
    return Verifier(**kw).check_programs(_as_graph(f), _as_graph(g))


def _as_graph(p) -> Graph:
    if isinstance(p, Graph):
        return p
    graph = getattr(p, "graph", None)
    if not isinstance(graph, Graph):
        raise TypeError(f"not a program or graph: {p!r}")
    return graph


def _graph_of(node: Node, constraints) -> Graph:
    leaves = sorted((n for n in toposort([node]) if n.op is Op.INPUT), key=lambda n: n.params.name)
    return Graph(tuple(leaves), (node,), frozenset(constraints))


def align(a: Graph, b: Graph) -> Graph:
    """`b` with its inputs and dimensions renamed to `a`'s, matching inputs by position (a
    program's dimension names are its own: x(m, n) and x(rows, cols) are one signature)."""
    if len(a.inputs) != len(b.inputs):
        raise InputError(f"the programs take {len(a.inputs)} and {len(b.inputs)} inputs")
    dims: dict[str, str] = {}
    for pos, (na, nb) in enumerate(zip(a.inputs, b.inputs)):
        mismatch = InputError(f"input {pos + 1} is {na.params.name}{format_shape(na.shape)} in one program and "
                              f"{nb.params.name}{format_shape(nb.shape)} in the other: their sizes do not correspond")
        if na.rank != nb.rank:
            raise mismatch
        for sa, sb in zip(na.shape, nb.shape):
            if sa.is_constant or sb.is_constant:
                if sa != sb:
                    raise mismatch
                continue
            ((ma, ca),), ((mb, cb),) = sa.terms, sb.terms  # declared dims are `name` or `c*name`
            if ca != cb or dims.setdefault(mb[0], ma[0]) != ma[0]:
                raise mismatch
    if len(set(dims.values())) != len(dims):
        raise InputError("the programs' inputs do not correspond: one program has two sizes where the other has one")
    tensors = {nb.params.name: na.params.name for na, nb in zip(a.inputs, b.inputs)}
    renamed = rename(b.inputs + b.outputs, dims, tensors)
    return Graph(renamed[:len(b.inputs)], renamed[len(b.inputs):], frozenset(f.rename(dims) for f in b.constraints))


def _sizes(binding: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in binding.items()) or "no dimensions"


def _premise(fact) -> bool:
    """Whether a domain assumption is given to the solver as a premise: a ground one (no fold
    binders) that reads data, or is about sizes alone. One about positions alone (an index and
    sizes, e.g. the log of arange(k) + 1 - n in a concatenation's right part, built for every
    position) would restrict which positions the proof covers: the left part's would go unchecked."""
    return fact.ground and (T.reads_data(fact.term) or not fact.term.free)


def _output_extents(rank: int):
    """Placeholder extents for index variables an assumption mentions: a fresh positive size each."""
    return tuple(size_poly(Size.of(f"_extent{k}")) for k in range(rank))


def _describe(cex: dict) -> str:
    sizes = ", ".join(f"{k}={v}" for k, v in cex["sizes"].items()) or "no dimensions"
    if "shape_a" in cex:
        return f"at sizes {sizes} output {cex['output']} has shape {cex['shape_a']} vs {cex['shape_b']}"
    return (f"at sizes {sizes} on random inputs, output {cex['output']} differs at index {cex['index']}: "
            f"{cex['a']!r} vs {cex['b']!r}")


def _abbreviate(text: str) -> str:
    return text if len(text) <= QUERY_CHARS else text[:QUERY_CHARS - 3] + "..."
