"""Operator propagation (the paper's Algorithm 1) over a nuGraph: rewrites found, not written.

For a consumer e-node C = op_c(..., P, ...) whose operand class holds a producer e-node
P = op_p(p_1, ..., p_n), a candidate moves op_c inside op_p: for a clone degree k = 1, 2, ...
and each k-subset S of P's operands,

    op_c(..., op_p(p_1, ..., p_n), ...)  ==  op_p(q_1, ..., q_n),   q_i = op_c(..., p_i, ...) if i in S else p_i

and, for a producer whose operator is not commutative, every permutation of (q_1, ..., q_n). The
permutations are where a swap comes from: (X @ Y).T has no degree-1 or degree-2 candidate in
operand order that type-checks, but the permuted degree-2 one, Y.T @ X.T, does. For a commutative
producer a permutation would only restate commutativity, so it is not tried. A candidate whose
shapes do not check (the language's `make` raises ShapeError) or whose shape differs from C's is
dropped before any solver call.

Each surviving candidate is stated over opaque operands (fresh inputs for every operand class,
constants kept), so a proof holds for all operand values and all sizes; it goes to a cheap
numeric screen (a counterexample refutes it), then to the verifier. PROVED candidates are double
checked numerically at >= 2 sizes and then joined to C's class, with their proof record. Pulling
an operator out is the same move read backwards: both sides share a class, so either can be chosen.

Guards (the paper's, plus budgets) keep this finite: the producer is not a leaf, it feeds the
consumer in one slot and has no other user; the clone degree is bounded and stops at the first
degree that proves (or already knows) anything; a candidate already in C's class is not re-derived;
rounds repeat to a fixed point or to a round or e-node budget. Solver outcomes are memoised by the
candidate's canonical form, so a move met twice (in one program or in many) is proved once.
"""
from __future__ import annotations

import itertools
import time
import warnings
from dataclasses import dataclass, field
from typing import Callable, Optional

from axon.errors import AxonError, ShapeError
from axon.ir import Graph, Node, toposort
from axon.nugraph.egraph import ENode, NuGraph, ProofRecord
from axon.rewriting import numeric
from axon.rewriting.language import TENSOR, Language
from axon.rewriting.templates import canonical, operands_text, term_text
from axon.semantics.ops import Op

_FRESH = "abcdefghijklmnopqrstuvwxyz"


class SoundnessError(AxonError):
    """A rewrite the verifier proved disagrees with NumPy: a bug in the verifier or an encoding."""


@dataclass(frozen=True)
class Guards:
    max_degree: int = 3  # clone degree bound (operators here have arity <= 2)
    single_user: bool = True  # the paper's guard: the producer feeds only this consumer, in one slot
    max_rounds: int = 6  # passes over the nuGraph looking for a fixed point
    max_enodes: int = 500  # stop adding once the nuGraph is this large
    screen: bool = True  # look for a numeric counterexample before calling the solver
    double_check_shapes: int = 2  # sizes every proved rewrite is also checked at (>= 2)
    strict: bool = False  # raise SoundnessError on a failed double check (else record and warn)


@dataclass
class Stats:
    sites: int = 0  # (consumer, slot, producer) triples visited
    candidates: int = 0  # candidates that type-checked
    shape_rejected: int = 0
    known: int = 0  # candidates already in the consumer's class (not re-derived)
    screened: int = 0  # refuted by a numeric counterexample, no solver call
    solver_calls: int = 0
    memo_hits: int = 0
    proved: int = 0
    refuted: int = 0
    unknown: int = 0
    unsound: int = 0  # proved but numerically different: must stay 0
    double_checked: int = 0  # distinct proved statements checked numerically
    double_checks: int = 0  # comparisons run on them (statements x sizes)
    double_check_agree: int = 0
    solver_time_s: float = 0.0
    rounds: int = 0
    fixed_point: bool = False
    wall_s: float = 0.0

    def line(self) -> str:
        return (f"{self.candidates} candidates ({self.screened} refuted by counterexample, "
                f"{self.solver_calls} solver calls, {self.memo_hits} memo hits): {self.proved} proved, "
                f"{self.refuted} refuted, {self.unknown} unknown; solver {self.solver_time_s:.2f} s; "
                f"{'fixed point' if self.fixed_point else 'budget reached'} after {self.rounds} rounds")


@dataclass(frozen=True)
class Outcome:
    """What is memoised per canonical query."""
    status: str
    reason: str
    query: str
    solver_time_s: float
    numeric: str
    sound: bool


@dataclass(frozen=True)
class Site:
    consumer_class: int
    consumer: ENode
    slot: int
    producer: ENode


@dataclass
class Propagator:
    """Algorithm 1, parameterised by the checker (the SMT verifier) and the language (tensor IR)."""
    checker: object  # .check_nodes(lhs, rhs, constraints=...) -> verdict with .status, .reason, ...
    language: Language = TENSOR
    guards: Guards = field(default_factory=Guards)
    progress: Optional[Callable[[str], None]] = None
    memo: dict = field(default_factory=dict)

    def run(self, nu: NuGraph) -> Stats:
        stats = Stats()
        start = time.perf_counter()
        visited: set = set()
        for round_no in range(1, self.guards.max_rounds + 1):
            stats.rounds = round_no
            nu.rebuild()
            changed = False
            if nu.num_enodes >= self.guards.max_enodes:
                self._say(f"stopped at the e-node budget ({self.guards.max_enodes}): {nu.summary()}")
                break
            for site in self._sites(nu):
                site = Site(nu.find(site.consumer_class), nu.canonicalize(site.consumer), site.slot,
                            nu.canonicalize(site.producer))
                key = (site.consumer_class, site.consumer, site.slot, site.producer)
                if key in visited or nu.num_enodes >= self.guards.max_enodes:
                    continue
                visited.add(key)
                stats.sites += 1
                changed |= self._propagate(nu, site, stats)
                nu.rebuild()
            self._say(f"round {round_no}: {nu.summary()}")
            if not changed:
                stats.fixed_point = True
                break
        stats.wall_s = time.perf_counter() - start
        return stats

    # -- sites ----------------------------------------------------------------------------
    def _sites(self, nu: NuGraph) -> list[Site]:
        sites = []
        for eclass in nu.classes():
            for consumer in sorted(eclass.nodes, key=repr):
                if self.language.is_leaf(consumer.op):
                    continue
                children = [nu.find(c) for c in consumer.children]
                for slot, child in enumerate(children):
                    if child == eclass.id:
                        continue
                    if self.guards.single_user and (children.count(child) > 1 or nu.eclass(child).shared) \
                            and not self.language.takes_part(consumer.op):
                        continue  # the paper's guard: the producer has one user, in one slot (a slice
                        # takes a part of it: moved inside, it computes only that part)
                    for producer in sorted(nu.eclass(child).nodes, key=repr):
                        if not self.language.is_leaf(producer.op):
                            sites.append(Site(eclass.id, consumer, slot, producer))
        return sites

    # -- one site -------------------------------------------------------------------------
    def _propagate(self, nu: NuGraph, site: Site, stats: Stats) -> bool:
        """Try clone degrees 1, 2, ... at one site; True if the nuGraph gained an equivalence."""
        lang = self.language
        consumer, producer, slot = site.consumer, site.producer, site.slot
        operand = _Operands(nu, lang)
        c_args = [operand(c) for c in consumer.children]
        p_args = [operand(c) for c in producer.children]
        try:
            inner = lang.make(producer.op, tuple(p_args), producer.params)
            lhs = lang.make(consumer.op, tuple(c_args[:slot] + [inner] + c_args[slot + 1:]), consumer.params)
        except ShapeError:
            return False
        if lang.takes_part(consumer.op) and lang.joins(producer.op):
            return self._select(nu, site, lhs, p_args, operand, stats)
        n = len(p_args)
        orders = [tuple(range(n))]
        if n >= 2 and not lang.commutative(producer.op):
            orders = list(itertools.permutations(range(n)))
        changed = False
        for degree in range(1, min(n, self.guards.max_degree) + 1):
            found = False
            for subset in itertools.combinations(range(n), degree):
                try:
                    cloned = [lang.make(consumer.op, tuple(c_args[:slot] + [p] + c_args[slot + 1:]), consumer.params)
                              if i in subset else p for i, p in enumerate(p_args)]
                except ShapeError:
                    stats.shape_rejected += 1
                    continue
                for order in orders:
                    try:
                        rhs = lang.make(producer.op, tuple(cloned[i] for i in order), producer.params)
                    except ShapeError:
                        stats.shape_rejected += 1
                        continue
                    if rhs.shape != lhs.shape:
                        stats.shape_rejected += 1
                        continue
                    stats.candidates += 1
                    if operand.lookup(rhs) == nu.find(site.consumer_class):
                        stats.known += 1
                        found = True
                        continue
                    name = _rewrite_name(consumer, producer, slot, subset, order)
                    proof = self._check(nu, name, lhs, rhs, stats)
                    if proof is None:
                        continue
                    proof.after = tuple(sorted({o for o in (nu.eclass(site.consumer_class).nodes.get(consumer),
                                                            nu.eclass(consumer.children[slot]).nodes.get(producer))
                                                if o is not None}))
                    nu.record(proof)
                    if proof.proved and nu.num_enodes < self.guards.max_enodes:
                        nu.union(site.consumer_class, operand.add(rhs, proof.id), proof)
                        nu.rebuild()
                        found = changed = True
                        self._say(f"proved {proof.equation()}")
            if found:
                break
        return changed

    def _select(self, nu: NuGraph, site: Site, lhs: Node, parts: list, operand, stats: Stats) -> bool:
        """A part of joined operands (a slice of a concatenation) may be one of them: each part of
        lhs's shape is a candidate (cloning the consumer into every part changes the shape)."""
        for k, part in enumerate(parts):
            if part.shape != lhs.shape:
                stats.shape_rejected += 1
                continue
            stats.candidates += 1
            proof = self._check(nu, f"select operand {k} of {site.producer.op.value} by {site.consumer.op.value}",
                                lhs, part, stats)
            if proof is None:
                continue
            nu.record(proof)
            if proof.proved:
                nu.union(site.consumer_class, operand.add(part, proof.id), proof)
                nu.rebuild()
                self._say(f"proved {proof.equation()}")
                return True
        return False

    def _check(self, nu: NuGraph, name: str, lhs: Node, rhs: Node, stats: Stats) -> Optional[ProofRecord]:
        c_lhs, c_rhs, c_constraints = canonical(lhs, rhs, nu.constraints)
        key = (c_lhs, c_rhs, c_constraints)
        outcome = self.memo.get(key)
        cached = outcome is not None
        if cached:
            stats.memo_hits += 1
        else:
            outcome = self._decide(c_lhs, c_rhs, c_constraints, stats)
            self.memo[key] = outcome
        if outcome.status == "SCREENED":
            stats.screened += 1
            return None  # a counterexample: nothing worth a proof record
        stats.proved += outcome.status == "PROVED" and outcome.sound
        stats.refuted += outcome.status == "REFUTED"
        stats.unknown += outcome.status == "UNKNOWN"
        status = outcome.status if outcome.sound else "UNSOUND"
        where = operands_text(lhs, rhs)
        return ProofRecord(rewrite=name, lhs=term_text(lhs), rhs=term_text(rhs), operands=where, status=status,
                           reason=outcome.reason, query=outcome.query, solver_time_s=outcome.solver_time_s,
                           cached=cached, numeric=outcome.numeric)

    def _decide(self, lhs: Node, rhs: Node, constraints, stats: Stats) -> Outcome:
        if self.guards.screen:
            counterexample = numeric.screen(lhs, rhs, constraints)
            if counterexample is not None:
                return Outcome("SCREENED", f"counterexample at {counterexample.sizes}: {counterexample.detail}",
                               "", 0.0, "", True)
        verdict = self.checker.check_nodes(lhs, rhs, constraints=constraints)
        status = _status_name(verdict)
        solver_time = float(getattr(verdict, "solver_time_s", 0.0) or 0.0)
        stats.solver_calls += 1
        stats.solver_time_s += solver_time
        query = f"{term_text(lhs)} == {term_text(rhs)} for all {operands_text(lhs, rhs)}"  # the canonical statement
        if getattr(verdict, "query", None):
            query += f"; deciding query: {verdict.query}"
        reason = str(getattr(verdict, "reason", "") or "")
        if status != "PROVED":
            return Outcome(status, reason, query, solver_time, "", True)
        checks = numeric.double_check(lhs, rhs, constraints, max(2, self.guards.double_check_shapes))
        stats.double_checked += 1
        stats.double_checks += len(checks)
        stats.double_check_agree += sum(c.verdict == "agree" for c in checks)
        bad = [c for c in checks if c.verdict == "differ"]
        summary = "; ".join(f"{c.verdict} at {c.sizes}" for c in checks)
        if bad:
            stats.unsound += 1
            message = (f"SOUNDNESS BUG: the verifier proved {term_text(lhs)} = {term_text(rhs)} but NumPy "
                       f"disagrees at {bad[0].sizes} ({bad[0].detail})")
            if self.guards.strict:
                raise SoundnessError(message)
            warnings.warn(message, RuntimeWarning, stacklevel=2)
            self._say(message)
            return Outcome(status, reason, query, solver_time, summary, False)
        return Outcome(status, reason, query, solver_time, summary, True)

    def _say(self, text: str) -> None:
        if self.progress is not None:
            self.progress(text)


class _Operands:
    """Opaque operands for one site: class -> fresh input (constants stay), and back again."""

    def __init__(self, nu: NuGraph, lang: Language):
        self.nu, self.lang = nu, lang
        self.node_of: dict[int, Node] = {}
        self.class_of: dict[Node, int] = {}

    def __call__(self, cid: int) -> Node:
        cid = self.nu.find(cid)
        if cid not in self.node_of:
            const = next((e for e in self.nu.eclass(cid).nodes if e.op is Op.CONST), None)
            if const is not None:
                node = Node(Op.CONST, (), const.params, self.nu.shape(cid))
            else:
                fresh = sum(1 for n in self.node_of.values() if n.op is Op.INPUT)
                node = self.lang.fresh(_FRESH[fresh] if fresh < len(_FRESH) else f"a{fresh}", self.nu.shape(cid))
            self.node_of[cid] = node
            self.class_of[node] = cid
        return self.node_of[cid]

    def lookup(self, term: Node) -> Optional[int]:
        """The class of a term over these operands, if the nuGraph already has it."""
        ids: dict[Node, int] = {}
        for node in toposort([term]):
            if node in self.class_of:
                ids[node] = self.class_of[node]
                continue
            found = self.nu.lookup(ENode(node.op, node.params, tuple(ids[i] for i in node.inputs)))
            if found is None:
                return None
            ids[node] = found
        return ids[term]

    def add(self, term: Node, origin: int) -> int:
        """Instantiate a proved rhs; classes it reads twice, or finds already used, become shared."""
        ids: dict[Node, int] = {}
        reads: dict[Node, int] = {}
        for node in toposort([term]):
            for child in node.inputs:
                reads[child] = reads.get(child, 0) + 1
            ids[node] = self.class_of.get(node)
            if ids[node] is None:
                enode = ENode(node.op, node.params, tuple(ids[i] for i in node.inputs))
                if node is not term and self.nu.lookup(enode) is not None:
                    reads[node] = reads.get(node, 0) + 1  # already read elsewhere in the nuGraph
                ids[node] = self.nu.add_enode(enode, node.shape, origin)
        for node, count in reads.items():
            if count > 1:
                self.nu.mark_shared(ids[node])
        return ids[term]


def _status_name(verdict) -> str:
    status = verdict.status
    return str(getattr(status, "name", status)).upper()


def _rewrite_name(consumer: ENode, producer: ENode, slot: int, subset, order) -> str:
    onto = ", ".join(str(i) for i in subset)
    swap = "" if order == tuple(sorted(order)) else f", operands reordered {order}"
    return (f"propagate {consumer.op.value} (operand {slot}) into {producer.op.value}: "
            f"degree {len(subset)} onto operand{'s' if len(subset) > 1 else ''} {onto}{swap}")


# -- the whole job ---------------------------------------------------------------------------
def default_verifier(timeout_ms: int = 2000):
    """The SMT verifier (axon.verification), imported when first needed."""
    try:
        from axon.verification import Verifier
    except ImportError as err:
        raise AxonError(f"the SMT verifier is not available ({err}); propagation proves nothing without it") from None
    return Verifier(timeout_ms=timeout_ms)


def discover(graph: Graph, checker=None, guards: Guards = Guards(), progress=None,
             memo: Optional[dict] = None) -> tuple[NuGraph, Stats]:
    """Every variant propagation can prove for a program: its nuGraph and what it cost."""
    nu = NuGraph.from_graph(graph)
    propagator = Propagator(checker if checker is not None else default_verifier(), TENSOR, guards, progress,
                            memo if memo is not None else {})
    stats = propagator.run(nu)
    nu.rebuild()
    return nu, stats
