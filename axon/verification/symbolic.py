"""Symbolic evaluation: a program's output element at a symbolic index, as a canonical term.

`SymbolicAlgebra` is the second interpretation of the operator table (axon/semantics/ops.py): the
same `element` rules that give numbers under `ConcreteAlgebra` give `terms.Poly` values here.
Scalar operations the solver does not know natively are expanded through their `definition`
(sigmoid, silu, gelu, rsqrt, ...), so each operator's meaning is written once. The algebra also
records the domain assumptions of every operation it meets (divisor != 0, sqrt argument >= 0, log
argument > 0), inside folds too: there an assumption holds for every value of the fold binders in
scope (`Assumption.binders`), since the term constructors cancel `d(r) / d(r)` inside a fold body
just as they do outside. One made in a branch (of a where, or one part of a concatenation) holds
where that branch is chosen: `select(cond, term, 1) > 0`. Proofs hold under the assumptions; ground
ones are also given to the solver, and the verifier states each one that does not follow from the
sizes.
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from fractions import Fraction
from typing import Callable, Sequence

from axon.errors import UnsupportedError
from axon.ir import Node
from axon.semantics.ops import OP_SPECS, Op
from axon.semantics.scalar import SCALAR_SPECS, ScalarOp
from axon.semantics.sizes import Size
from axon.verification import terms as T
from axon.verification.terms import Poly

_S = ScalarOp
COMBINE = {_S.ADD: "add", _S.MAXIMUM: "max", _S.MINIMUM: "min"}
UNINTERPRETED = {_S.SQRT: "sqrt", _S.TANH: "tanh"}
COMPARE = {_S.GE: "ge", _S.GT: "gt", _S.EQ: "eq"}


def size_poly(size: Size) -> Poly:
    total = T.ZERO
    for monomial, coeff in size.terms:
        term = Poly.const(coeff)
        for name in monomial:
            term = term * T.var(name, "dim")
        total = total + term
    return total


@dataclass(frozen=True)
class Assumption:
    """`term <relation> 0` for every value 0 <= binder < extent of each of `binders`."""
    relation: str
    term: Poly
    binders: tuple[tuple[Poly, Poly], ...] = ()

    @property
    def ground(self) -> bool:
        return not self.binders

    @property
    def key(self) -> str:
        scope = "".join(f"forall 0 <= {b.key} < {e.key}: " for b, e in self.binders)
        return f"{scope}{self.relation} 0: {self.term.key}"


class SymbolicAlgebra:
    """The algebra of `axon.semantics.algebra` over canonical terms; one per encoding."""

    def __init__(self):
        self._fresh = 0
        self._scope: list[tuple[Poly, Poly]] = []  # (binder, extent) of the folds being built
        self._guards: list[tuple[Poly, bool]] = []  # (condition, whether it holds) of the branches being built
        self._recordings: list[tuple[int, list[Assumption]]] = []  # (guard depth, facts) being recorded
        self.assumptions: dict[str, Assumption] = {}

    def _assume(self, relation: str, p: Poly) -> None:
        self.note(Assumption(relation, p, self._binders_of(p)))

    def _binders_of(self, p: Poly, known=()) -> tuple[tuple[Poly, Poly], ...]:
        if not any(f.startswith("bound:") for f in p.free):
            return ()
        return tuple({b.key: (b, e) for b, e in (*known, *self._scope)}.values())

    def note(self, fact: Assumption) -> None:
        """Record `fact`, stated where it was made (inside the branches being built): an operation
        in a branch of a where, or in one part of a concatenation, needs its domain only where
        that branch is chosen, so the fact holds under the branches' conditions."""
        for depth, facts in self._recordings:
            facts.append(self._under(fact, self._guards[depth:]))
        fact = self._under(fact, self._guards)
        self.assumptions.setdefault(fact.key, fact)

    def _under(self, fact: Assumption, guards) -> Assumption:
        term = fact.term
        for condition, holds in reversed(guards):  # 1 satisfies every relation (!= 0, > 0, >= 0)
            term = T.select(condition, term, T.ONE) if holds else T.select(condition, T.ONE, term)
        return Assumption(fact.relation, term, self._binders_of(term, fact.binders) if guards else fact.binders)

    @contextmanager
    def recording(self):
        """The facts noted while the block runs, stated relative to the branches open at its start
        (an encoder's memo replays them through `note` where the same term is used again)."""
        facts: list[Assumption] = []
        self._recordings.append((len(self._guards), facts))
        try:
            yield facts
        finally:
            self._recordings.pop()

    @contextmanager
    def _guarded(self, condition: Poly, holds: bool):
        self._guards.append((condition, holds))
        try:
            yield
        finally:
            self._guards.pop()

    def _choose(self, condition: Poly, then: Callable, otherwise: Callable) -> Poly:
        with self._guarded(condition, True):
            a = Poly.of(then())
        with self._guarded(condition, False):
            b = Poly.of(otherwise())
        return T.select(condition, a, b)

    def apply(self, op: ScalarOp, *args):
        a = [Poly.of(x) for x in args]
        if op is _S.ADD:
            return a[0] + a[1]
        if op is _S.SUB:
            return a[0] - a[1]
        if op is _S.MUL:
            return a[0] * a[1]
        if op is _S.NEG:
            return -a[0]
        if op is _S.DIV:
            self._assume("!=", a[1])
            return a[0] / a[1]
        if op in (_S.MAXIMUM, _S.MINIMUM):
            return T.extremum(COMBINE[op], a[0], a[1])
        if op is _S.EXP:
            return T.exp(a[0])
        if op is _S.LOG:
            self._assume(">", a[0])
            return T.log(a[0])
        if op is _S.SQRT:
            self._assume(">=", a[0])
            return T.unary("sqrt", a[0])
        if op in UNINTERPRETED:
            return T.unary(UNINTERPRETED[op], a[0])
        if op in COMPARE:
            return T.compare(COMPARE[op], a[0], a[1])
        if op is _S.WHERE:
            return T.select(a[0], a[1], a[2])
        definition = SCALAR_SPECS[op].definition
        if definition is None:
            raise UnsupportedError(f"no symbolic meaning for scalar operation {op.value}")
        return definition(self, *a)

    def const(self, value) -> Poly:
        if isinstance(value, Size):
            return size_poly(value)
        return Poly.const(Fraction(value))

    def size(self, size: Size) -> Poly:
        return size_poly(size)

    def fold(self, combine: ScalarOp, extent, body: Callable[[Poly], Poly]) -> Poly:
        if combine not in COMBINE:
            raise UnsupportedError(f"no symbolic fold for {combine.value}")
        binder, extent = self._binder(), Poly.of(extent)
        self._scope.append((Poly.atom(binder), extent))
        try:
            with T.ranged([(Poly.atom(binder), extent)]):
                value = Poly.of(body(Poly.atom(binder)))
        finally:
            self._scope.pop()
        factor = T.split_factor(value, binder, extent)
        if factor is None:
            return T.fold(COMBINE[combine], extent, binder, value)
        # lemma fold_split: a fold over a flattened (q, c) axis reads it as r = c*i + k; two folds
        outer, inner = self._binder(), self._binder()
        q = T.exact_quotient(extent, factor)
        with T.ranged([(Poly.atom(outer), q), (Poly.atom(inner), factor)]):
            split = T.substitute(value, {binder.key: factor * Poly.atom(outer) + Poly.atom(inner)})
            return T.fold(COMBINE[combine], q, outer, T.fold(COMBINE[combine], factor, inner, split))

    def _binder(self) -> T.Var:
        self._fresh += 1
        return T.Var(f"_r{self._fresh}", "bound")

    def branch(self, index, bound, below: Callable, above: Callable) -> Poly:
        return self._choose(T.compare("gt", Poly.of(bound), Poly.of(index)), below, above)

    def select(self, c, then: Callable, otherwise: Callable) -> Poly:
        return self._choose(Poly.of(c), then, otherwise)

    def floordiv(self, a, b) -> Poly:
        return T.int_fn("floordiv", Poly.of(a), Poly.of(b))

    def mod(self, a, b) -> Poly:
        return T.int_fn("mod", Poly.of(a), Poly.of(b))


def output_index(rank: int) -> tuple[Poly, ...]:
    return tuple(T.var(f"i{k}", "idx") for k in range(rank))


class Encoder:
    """Terms of nodes at index terms, memoised per (node, index) so shared sub-DAGs encode once."""

    def __init__(self, alg: SymbolicAlgebra):
        self.alg = alg
        self._memo: dict[tuple, Poly] = {}

    def term(self, node: Node, index: Sequence) -> Poly:
        index = tuple(Poly.of(i) for i in index)
        key = (node, tuple(i.key for i in index))
        hit = self._memo.get(key)
        if hit is not None:  # the term again, and the facts its operations need, here
            value, facts = hit
            for fact in facts:
                self.alg.note(fact)
            return value
        if node.op is Op.INPUT:
            value, facts = T.read(node.params.name, index), []
        else:
            with self.alg.recording() as facts:
                value = Poly.of(OP_SPECS[node.op].element(
                    self.alg, lambda k, i: self.term(node.inputs[k], i), index,
                    tuple(i.shape for i in node.inputs), node.params))
        self._memo[key] = (value, tuple({f.key: f for f in facts}.values()))
        return value
