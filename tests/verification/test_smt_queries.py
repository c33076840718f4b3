"""The solver side: assumptions are satisfiable (no vacuous proofs), timeouts and unknowns are
reported as 'not proved', results are memoised by the query's canonical form, verdicts are
deterministic, and sub-DAGs (the propagation engine's use) are checked like programs."""
import time

import axon
import axon.frontend.functions as F
from axon.ir import input_node, make_node
from axon.semantics.ops import AxisParams, ConstParams, Op
from axon.semantics.sizes import shape_of
from axon.verification import Status, Verifier, verify
from axon.verification import terms as T
from axon.verification.smt import Query, solve


@axon.program(x=("m", "n"))
def impossible_sqrt(x):  # sqrt of a negative number, cancelled: only the assumption remains
    return F.sqrt(-F.exp(x)) - F.sqrt(-F.exp(x)) + x


@axon.program(x=("m", "n"))
def plain(x):
    return x * 1


def test_smt_vacuous_assumptions_are_not_a_proof():
    verdict = Verifier(numeric_trials=0).check_graphs(impossible_sqrt.graph, plain.graph)
    assert verdict.status is Status.UNKNOWN and "vacuous" in verdict.reason
    # with the NumPy filter on, the NaNs of the left side refute it outright
    assert verify(impossible_sqrt, plain).status is Status.REFUTED


def test_smt_proof_assumptions_are_satisfiable():
    a, b = T.read("a", []), T.read("b", [])
    q = Query(T.ZERO, ((">", a - b), ("!=", a)), (), (), ())
    assert solve(q, 2000, 0).result == "unsat"            # proved, and a > b, a != 0 can hold
    contradictory = Query(T.ZERO, ((">", a - b), (">", b - a)), (), (), ())
    outcome = solve(contradictory, 2000, 0)
    assert outcome.result == "unknown" and outcome.vacuous


def test_smt_division_reports_its_assumption():
    @axon.program(x=("m", "n"), y=("m", "n"))
    def cancel(x, y):
        return x * y / y

    @axon.program(x=("m", "n"), y=("m", "n"))
    def keep(x, y):
        return x + 0 * y

    verdict = verify(cancel, keep)
    assert verdict.status is Status.PROVED and "divisors are non-zero" in verdict.reason


@axon.program(x=("m", "n"))
def tanh_direct(x):
    return F.tanh(x)


@axon.program(x=("m", "n"))
def tanh_by_exp(x):  # true, but tanh is uninterpreted: not provable, never refuted
    e = F.exp(2 * x)
    return (e - 1) / (e + 1)


def test_smt_true_but_unprovable_is_unknown_with_the_query():
    verdict = verify(tanh_direct, tanh_by_exp)
    assert verdict.status is Status.UNKNOWN
    assert verdict.query and "tanh" in verdict.query and "not proved" in verdict.reason


@axon.program(x=("n", "n"), w=("n", "n"))
def rms_a(x, w):
    return (x @ w) * F.rsqrt((x * x).mean(axis=-1, keepdims=True) + 1e-6)


@axon.program(x=("n", "n"), w=("n", "n"))
def rms_b(x, w):  # wrong: the mean is divided by n twice (a hard `sat` for the solver)
    return (x @ w) * F.rsqrt(((x * x).mean(axis=-1, keepdims=True) + 1e-6) / x.shape[0] + 1e-6)


def test_smt_timeout_is_unknown_and_bounded():
    start = time.perf_counter()
    verdict = Verifier(timeout_ms=200, numeric_trials=0).check_graphs(rms_a.graph, rms_b.graph)
    assert verdict.status is not Status.PROVED
    assert time.perf_counter() - start < 5


def test_smt_results_are_memoised_per_verifier():
    v = Verifier()
    first = v.check_graphs(rms_a.graph, rms_a.graph)
    again = v.check_graphs(rms_a.graph, rms_a.graph)
    assert first.status is again.status is Status.PROVED and not first.cached and again.cached
    assert v.stats.cache_hits == 1 and v.stats.proved == 1
    assert not Verifier().check_graphs(rms_a.graph, rms_a.graph).cached  # no shared global cache


def test_smt_query_cache_uses_the_canonical_form():
    x = input_node("x", shape_of(("m", "n")))
    v = Verifier()
    double = make_node(Op.ADD, [x, x])
    first = v.check_nodes(make_node(Op.MUL, [x, _const(2)]), double)
    second = v.check_nodes(make_node(Op.MUL, [_const(2), x]), double)  # another graph, the same query
    assert first.status is second.status is Status.PROVED and second.cached
    assert v.stats.solver_calls == 1


def _const(value):
    from axon.ir import Node
    return Node(Op.CONST, (), ConstParams(value), ())


def test_smt_check_nodes_scale_across_matmul():
    x, s, w = (input_node(n, shape_of(d)) for n, d in [("x", ("m", "k")), ("s", ("m", 1)), ("w", ("k", "n"))])
    before = make_node(Op.MATMUL, [make_node(Op.MUL, [x, s]), w])
    after = make_node(Op.MUL, [make_node(Op.MATMUL, [x, w]), s])
    v = Verifier()
    assert v.check_nodes(before, after).status is Status.PROVED
    s_col = input_node("s", shape_of((1, "k")))
    wrong = make_node(Op.MATMUL, [make_node(Op.MUL, [x, s_col]), w])
    verdict = v.check_nodes(wrong, make_node(Op.MATMUL, [x, w]))
    assert verdict.status is Status.REFUTED and verdict.counterexample["sizes"]


def test_smt_verdicts_are_deterministic():
    texts = {repr(Verifier(seed=3).check_graphs(rms_a.graph, rms_b.graph)) for _ in range(2)}
    assert len(texts) == 1


def test_smt_rank_and_input_mismatch_are_refuted():
    x = input_node("x", shape_of(("m", "n")))
    summed = make_node(Op.REDUCE_SUM, [x], AxisParams(1, keepdims=False))
    verdict = Verifier().check_nodes(x, summed)
    assert verdict.status is Status.REFUTED and "rank" in verdict.reason
    xt = input_node("x", shape_of(("n", "m")))
    verdict = Verifier().check_nodes(make_node(Op.TRANSPOSE, [x], _perm()), xt)
    assert verdict.status is Status.REFUTED and "input 'x'" in verdict.reason


def _perm():
    from axon.semantics.ops import TransposeParams
    return TransposeParams((1, 0))
