"""Propagation's machinery: guards, memo, the soundness double check, budgets, determinism."""
import enum
from dataclasses import dataclass, replace

import numpy as np
import pytest

import axon
from axon.ir import input_node, make_node
from axon.rewriting import TENSOR, Guards, Propagator, SoundnessError, discover
from axon.rewriting.numeric import bindings, double_check
from axon.rewriting.templates import canonical, term_text
from axon.nugraph import NuGraph
from axon.semantics.evaluate import evaluate
from axon.semantics.ops import Op
from axon.semantics.sizes import bind_shape, shape_of
from axon.suite import SUITE


class Status(enum.Enum):
    PROVED = "proved"
    REFUTED = "refuted"
    UNKNOWN = "unknown"


@dataclass
class Verdict:
    status: Status
    reason: str = ""
    solver_time_s: float = 0.0
    query: str = ""
    cached: bool = False


class Always:
    """A broken verifier that answers the same for every query (to test what propagation trusts)."""

    def __init__(self, status):
        self.status, self.calls = status, 0

    def check_nodes(self, lhs, rhs, constraints=frozenset()):
        self.calls += 1
        return Verdict(self.status, "always")


@axon.program(x=("m", "k"), s=("m", 1), w=("k", "n"))
def divided(x, s, w):
    return (x / s) @ w


@axon.program(x=("m", "k"), s=("m", 1), w=("k", "n"))
def divided_twice_used(x, s, w):
    d = x / s
    return d @ w, d


def test_single_user_guard_blocks_a_shared_producer(checker):
    nu, stats = discover(divided_twice_used.graph, checker)
    assert stats.proved == 0 and len(nu.extract_variants(10)) == 1
    nu, stats = discover(divided_twice_used.graph, checker, Guards(single_user=False))
    assert stats.proved == 1 and len(nu.extract_variants(10)) == 2


def test_screen_refutes_without_the_solver_and_agrees_with_it(checker):
    on_nu, on = discover(SUITE["rmsnorm_matmul"].program.graph, checker)
    off_nu, off = discover(SUITE["rmsnorm_matmul"].program.graph, checker, Guards(screen=False))
    assert on.screened > 0 and off.screened == 0 and off.solver_calls > on.solver_calls
    proved = lambda nu: sorted(p.equation() for p in nu.proofs if p.proved)  # noqa: E731
    assert proved(on_nu) == proved(off_nu)  # no candidate the screen refuted is provable


def test_a_lying_verifier_is_caught_by_the_numeric_double_check():
    liar = Always(Status.PROVED)
    with pytest.warns(RuntimeWarning, match="SOUNDNESS BUG"):
        nu, stats = discover(SUITE["relu_matmul"].program.graph, liar, Guards(screen=False))
    assert liar.calls >= 1 and stats.unsound >= 1 and stats.proved == 0
    assert len(nu.extract_variants(10)) == 1  # nothing unsound joined a class
    assert any(p.status == "UNSOUND" for p in nu.proofs)
    with pytest.raises(SoundnessError):
        discover(SUITE["relu_matmul"].program.graph, Always(Status.PROVED), Guards(screen=False, strict=True))


def test_unknown_and_refuted_verdicts_join_nothing():
    for status in (Status.UNKNOWN, Status.REFUTED):
        nu, stats = discover(divided.graph, Always(status))
        assert stats.proved == 0 and len(nu.extract_variants(10)) == 1
        assert nu.proofs and all(p.status == status.name for p in nu.proofs)


def test_proofs_are_memoised_by_canonical_form_across_programs(checker):
    memo = {}
    discover(SUITE["rmsnorm_matmul"].program.graph, checker, memo=memo)
    nu, stats = discover(SUITE["reduce_div_matmul"].program.graph, checker, memo=memo)
    assert stats.memo_hits >= 1 and stats.solver_calls == 0
    assert any(p.cached and p.proved for p in nu.proofs)


def test_canonical_form_renames_dimensions():
    def query(m, k, n):
        x, s, w = input_node("a", shape_of((m, k))), input_node("b", shape_of((m, 1))), input_node("c", shape_of((k, n)))
        lhs = make_node(Op.MATMUL, [make_node(Op.DIV, [x, s]), w])
        rhs = make_node(Op.DIV, [make_node(Op.MATMUL, [x, w]), s])
        return canonical(lhs, rhs)

    assert query("m", "k", "n") == query("s", "t", "d")
    assert query("m", "k", "n") != query("m", "k", "k")  # a repeated dimension is a different query
    assert term_text(query("m", "k", "n")[0]) == "(a / b) @ c"


def test_every_accepted_rewrite_is_double_checked_at_two_sizes(checker):
    for name in ("rmsnorm_matmul", "softmax_matmul", "gqa", "matmul_transpose", "layernorm"):
        nu, stats = discover(SUITE[name].program.graph, checker)
        accepted = [p for p in nu.proofs if p.proved]
        assert accepted and stats.unsound == 0
        for p in accepted:
            sizes = [part for part in p.numeric.split("; ") if part.startswith("agree at")]
            assert len(sizes) >= 2 and len(set(sizes)) >= 2, p.numeric


def test_double_check_uses_distinct_sizes():
    x = input_node("a", shape_of(("m", "k")))
    first, second = bindings(x, x, count=2)
    assert first != second and all(v > 1 for v in first.values())
    assert [c.verdict for c in double_check(make_node(Op.RELU, [x]), x)] == ["differ", "differ"]


def test_every_variant_computes_what_the_program_computes(checker):
    for name in ("rmsnorm_matmul", "softmax_matmul", "gqa", "layernorm"):
        graph = SUITE[name].program.graph
        nu, _ = discover(graph, checker)
        binding = {d: 3 + i for i, d in enumerate(graph.dims)}
        rng = np.random.default_rng(0)
        arrays = {n.params.name: rng.standard_normal(bind_shape(n.shape, binding)) for n in graph.inputs}
        (expected,) = evaluate(graph, arrays, binding)
        for variant in nu.extract_variants(100):
            (got,) = evaluate(variant.graph, arrays, binding)
            np.testing.assert_allclose(got, expected, rtol=1e-9, atol=1e-9)


def test_budgets_stop_propagation():
    @axon.program(x=("m", "k"), y=("m", "k"), s=("m", 1), w=("k", "n"))
    def combo(x, y, s, w):
        return (((x + y) / s) @ w).T

    from axon.verification import Verifier
    nu, stats = discover(combo.graph, Verifier(), Guards(max_enodes=20))
    assert not stats.fixed_point and nu.num_enodes <= 20 + 4  # one candidate's new nodes may overshoot
    nu, stats = discover(combo.graph, Verifier(), Guards(max_rounds=1))
    assert stats.rounds == 1 and not stats.fixed_point


def test_same_program_same_result(checker):
    def run():
        nu, _ = discover(SUITE["softmax_matmul"].program.graph, checker)
        return [(v.rewrites, v.graph.pretty()) for v in nu.extract_variants(20)], [p.equation() for p in nu.proofs]

    assert run() == run()


def test_the_algorithm_takes_its_language_as_an_argument(checker):
    built = []

    def make(op, operands, params):
        built.append(op)
        return TENSOR.make(op, operands, params)

    language = replace(TENSOR, make=make, commutative=lambda op: False)
    nu = NuGraph.from_graph(SUITE["reduce_mul_matmul"].program.graph)
    stats = Propagator(checker, language).run(nu)
    assert built and stats.proved >= 1
    # with commutativity unknown, the commuted forms of mul are tried too (and proved)
    assert stats.proved > discover(SUITE["reduce_mul_matmul"].program.graph, checker)[1].proved
