"""Equivalence of two programs (or two sub-DAGs) for all sizes: `Verifier`, `verify`.

Check order (shared/axon-paper.md, Pipeline 3): output count and rank, input signatures, shape
equality (sizes are canonical polynomials, so symbolic shapes compare exactly), then NumPy
evaluation at small sizes on random inputs (the cheap filter, and the only source of reported
counterexamples), then value equality at a fresh symbolic index: each output element is encoded
as a canonical term (axon/verification/symbolic.py), the difference becomes one ground SMT query
(axon/verification/smt.py), and `unsat` proves it. A solver `sat` is reported as a counterexample
only when NumPy confirms it at the model's sizes; `unknown` or a timeout means "not proved".

Proofs hold over the reals under the domain assumptions (every divisor non-zero, every sqrt argument
>= 0, every log argument > 0); the verdict's reason says when a proof used them. A `Verifier` owns
its caches (verdicts by graph structure, solver outcomes by the query's canonical text) and stats.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, replace
from typing import Optional

import numpy as np

from axon.errors import UnsupportedError
from axon.ir import Graph, Node, toposort
from axon.semantics.ops import Op
from axon.semantics.sizes import bind_shape, format_shape
from axon.verification import numeric
from axon.verification.smt import Outcome, Query, solve
from axon.verification.symbolic import Encoder, SymbolicAlgebra, output_index, size_poly
from axon.verification.terms import Undefined


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

    @property
    def proved(self) -> bool:
        return self.status is Status.PROVED


@dataclass
class VerifierStats:
    proved: int = 0
    refuted: int = 0
    unknown: int = 0
    cache_hits: int = 0
    solver_calls: int = 0
    solver_time_s: float = 0.0


DOMAIN_NOTE = {"!=": "divisors are non-zero", ">=": "sqrt arguments are >= 0", ">": "log arguments are > 0"}
QUERY_CHARS = 240  # a deciding query is shown abbreviated to this many characters


class Verifier:
    def __init__(self, timeout_ms: int = 2000, seed: int = 0, numeric_trials: int = 3):
        self.timeout_ms = timeout_ms
        self.seed = seed
        self.numeric_trials = numeric_trials
        self.stats = VerifierStats()
        self._verdicts: dict[tuple, Verdict] = {}
        self._outcomes: dict[str, Outcome] = {}

    # -- public -------------------------------------------------------------------------------
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
        """Equivalence of two sub-DAGs whose leaves are INPUT nodes (matched by name) and CONSTs."""
        return self.check_graphs(_graph_of(a, constraints), _graph_of(b, constraints))

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
        cex = numeric.refute(a, b, self.numeric_trials, self.seed)
        if cex is not None:
            return Verdict(Status.REFUTED, _describe(cex), cex)
        return self._prove(a, b)

    def _shape_mismatch(self, a: Graph, b: Graph, k: int) -> Verdict:
        oa, ob = a.outputs[k], b.outputs[k]
        why = f"output {k} has shape {format_shape(oa.shape)} vs {format_shape(ob.shape)}"
        nodes = toposort(a.outputs + b.outputs)
        rng = np.random.default_rng(self.seed)
        for binding in numeric.bindings(numeric.node_dims(nodes), nodes, a.constraints | b.constraints, 50, rng):
            sa, sb = bind_shape(oa.shape, binding), bind_shape(ob.shape, binding)
            if sa != sb:
                cex = {"sizes": binding, "output": k, "shape_a": sa, "shape_b": sb}
                return Verdict(Status.REFUTED, f"{why}: {_describe(cex)}", cex)
        return Verdict(Status.UNKNOWN, f"{why}, but no small sizes were found where they differ")

    def _prove(self, a: Graph, b: Graph) -> Verdict:
        alg = SymbolicAlgebra()
        enc = Encoder(alg)
        nodes = toposort(a.outputs + b.outputs)
        positive = {p.key: p for n in nodes for p in map(size_poly, n.shape) if not p.is_const}
        divisible = tuple(sorted(((size_poly(s), d) for s, d in a.constraints | b.constraints),
                                 key=lambda t: (t[0].key, t[1])))
        spent, all_cached, used = 0.0, True, set()
        for k, (oa, ob) in enumerate(zip(a.outputs, b.outputs)):
            index = output_index(oa.rank)
            try:
                difference = enc.term(oa, index) - enc.term(ob, index)
            except (Undefined, UnsupportedError, RecursionError) as err:
                return Verdict(Status.UNKNOWN, f"output {k} could not be encoded symbolically: {err}",
                               solver_time_s=spent)
            assumptions = tuple(sorted(alg.assumptions.values(), key=lambda t: (t[0], t[1].key)))
            query = Query(difference, assumptions, tuple(zip(index, map(size_poly, oa.shape))),
                          tuple(positive.values()), divisible)
            label = _abbreviate(f"output {k}: {difference.key} == 0")
            cached = query.key in self._outcomes
            if cached:
                self.stats.cache_hits += 1
                outcome = self._outcomes[query.key]
            else:
                outcome = solve(query, self.timeout_ms, self.seed)
                self._outcomes[query.key] = outcome
                self.stats.solver_calls += 1
                self.stats.solver_time_s += outcome.seconds
                spent += outcome.seconds
                all_cached = False
            if outcome.result == "sat":
                return self._confirm(a, b, outcome, label, spent)
            if outcome.result != "unsat":
                return Verdict(Status.UNKNOWN, f"not proved: {outcome.reason}", solver_time_s=spent, query=label,
                               cached=cached)
            used |= {relation for relation, _ in assumptions}
        notes = [DOMAIN_NOTE[r] for r in sorted(used)]
        reason = "equal for all sizes" + (f", assuming {' and '.join(notes)}" if notes else "")
        return Verdict(Status.PROVED, reason, solver_time_s=spent, cached=all_cached)

    def _confirm(self, a: Graph, b: Graph, outcome: Outcome, label: str, spent: float) -> Verdict:
        """A solver model is reported only if NumPy shows a difference at the model's sizes."""
        sizes = outcome.model_sizes or {}
        nodes = toposort(a.outputs + b.outputs)
        dims = numeric.node_dims(nodes)
        if set(dims) <= set(sizes):
            binding = {d: sizes[d] for d in dims}
            if (numeric.valid_binding(binding, nodes, a.constraints | b.constraints)
                    and all(np.prod(bind_shape(n.shape, binding)) <= numeric.MAX_ELEMENTS for n in nodes)):
                cex = numeric.refute(a, b, 1, self.seed + 1, only=[binding])
                if cex is not None:
                    return Verdict(Status.REFUTED, _describe(cex), cex, solver_time_s=spent, query=label)
        return Verdict(Status.UNKNOWN, "not proved: the solver found a model of the abstracted query (folds and "
                                       "exp/log/sqrt/tanh uninterpreted) that NumPy does not confirm",
                       solver_time_s=spent, query=label)


def verify(f, g, **kw) -> Verdict:
    """Are two programs (axon.Program or Graph) equivalent for all sizes? See `Verifier`."""
    return Verifier(**kw).check_graphs(_as_graph(f), _as_graph(g))


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


def _describe(cex: dict) -> str:
    sizes = ", ".join(f"{k}={v}" for k, v in cex["sizes"].items()) or "no dimensions"
    if "shape_a" in cex:
        return f"at sizes {sizes} output {cex['output']} has shape {cex['shape_a']} vs {cex['shape_b']}"
    return (f"at sizes {sizes} on random inputs, output {cex['output']} differs at index {cex['index']}: "
            f"{cex['a']!r} vs {cex['b']!r}")


def _abbreviate(text: str) -> str:
    return text if len(text) <= QUERY_CHARS else text[:QUERY_CHARS - 3] + "..."
