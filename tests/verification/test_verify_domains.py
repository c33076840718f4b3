"""A rewrite keeps the domain: a proof assumes every divisor non-zero and every sqrt or log
argument in range, so an assumption that one side alone makes leaves out exactly the inputs
where the sides differ. where(m, sqrt(c), -1) is -1 wherever m is false; sqrt(where(m, c, -1))
is NaN there. Both were "proved" as a rewrite, and optimize reported kernels that were NaN
where the program as written is -1."""
import numpy as np
import pytest

import axon
from axon.rewriting.numeric import compare
from axon.verification import Status, Verifier


def as_rewrite(f, g):
    return Verifier().check_nodes(f.graph.outputs[0], g.graph.outputs[0])


@axon.program(m=("r", "c"), c=("r", "c"))
def guarded_sqrt(m, c):
    return axon.where(m, axon.sqrt(c), -1.0)


@axon.program(m=("r", "c"), c=("r", "c"))
def sqrt_of_guard(m, c):
    return axon.sqrt(axon.where(m, c, -1.0))


@axon.program(m=("r", "c"), c=("r", "c"), d=("r", "c"))
def guarded_quotient(m, c, d):
    return axon.where(m, c / d, 0.0)


@axon.program(m=("r", "c"), c=("r", "c"), d=("r", "c"))
def quotient_by_guard(m, c, d):
    return c / axon.where(m, d, 0.0)


@pytest.mark.parametrize("f, g, what", [(guarded_sqrt, sqrt_of_guard, "sqrt argument"),
                                        (sqrt_of_guard, guarded_sqrt, "sqrt argument"),
                                        (guarded_quotient, quotient_by_guard, "divisor")])
def test_an_assumption_of_one_side_only_is_no_rewrite(f, g, what):
    v = as_rewrite(f, g)
    assert v.status is Status.UNKNOWN and what in v.reason and "one side only" in v.reason
    # the two differ where the guard is false: NumPy says so
    m = np.array([[0.0, 1.0]])
    c = np.array([[2.0, 4.0]])
    args = (m, c) if f is not guarded_quotient else (m, c, np.array([[1.0, 2.0]]))
    assert not np.array_equal(f(*args), g(*args), equal_nan=True)


@axon.program(e=("r", "t"), v=("t", "d"))
def normalized_then_matmul(e, v):
    return (e / e.sum(axis=1, keepdims=True)) @ v


@axon.program(e=("r", "t"), v=("t", "d"))
def matmul_then_normalized(e, v):
    return (e @ v) / e.sum(axis=1, keepdims=True)


@axon.program(x=("r", "c"))
def rsqrt_of(x):
    return axon.rsqrt(x)


@axon.program(x=("r", "c"))
def one_over_sqrt(x):
    return 1.0 / axon.sqrt(x)


@pytest.mark.parametrize("f, g", [(normalized_then_matmul, matmul_then_normalized), (rsqrt_of, one_over_sqrt)])
def test_assumptions_both_sides_make_still_prove_a_rewrite(f, g):
    v = as_rewrite(f, g)
    assert v.status is Status.PROVED and v.assumptions


def test_the_numeric_screen_takes_both_branches_of_a_where_and_sees_a_domain_change():
    got = compare(guarded_sqrt.graph.outputs[0], sqrt_of_guard.graph.outputs[0], {"r": 3, "c": 4})
    assert got.verdict == "differ" and "finite on one side only" in got.detail
    same = compare(rsqrt_of.graph.outputs[0], one_over_sqrt.graph.outputs[0], {"r": 3, "c": 4})
    assert same.verdict == "agree"


@axon.program(m=("r", "c"), c=("r", "c"), d=("r", "c"))
def guard_then_divide(m, c, d):
    return axon.where(m, c, 0.0) / d


@axon.program(c=("r", "c"))
def sum_of_c_over_c(c):
    return (c / c).sum(axis=1)


@axon.program(c=("r", "c"))
def sum_of_ones(c):
    return (c * 0 + 1).sum(axis=1)


@axon.program(s=("r", 1), n=("r", 1))
def safe_mean(s, n):
    return axon.where(n > 0, s / n, 0.0)


@axon.program(s=("r", 1), n=("r", 1))
def guarded_numerator(s, n):
    return axon.where(n > 0, s, 0.0) / n


@pytest.mark.parametrize("f, g, why", [(guarded_quotient, guard_then_divide, "on one side only"),
                                       (guard_then_divide, guarded_quotient, "on one side only"),
                                       (sum_of_c_over_c, sum_of_ones, "undefined where the other is not"),
                                       (safe_mean, guarded_numerator, "on one side only")])
def test_an_assumption_both_sides_make_but_one_side_guards_is_no_rewrite(f, g, why):
    """Where m and d are 0 the first is 0 and the second NaN. A divisor under a where's branch is
    assumed non-zero only where the branch is chosen, so the sides' assumptions differ (a helper's
    masked mean optimized to NaN on its fully masked rows through the last pair); one inside a sum
    is recorded for every term, and the sides' domains are compared on numbers."""
    v = as_rewrite(f, g)
    assert v.status is Status.UNKNOWN and why in v.reason


@axon.program(x=("r", "c"))
def log_or_clamped(x):
    return axon.where(x > 0, axon.log(x), axon.maximum(x, -40.0))


@axon.program(x=("r", "c"))
def log_or_identity(x):
    return axon.where(x > 0, axon.log(x), x)


@axon.program(x=("r", "c"))
def log_or_doubled_half(x):
    return axon.where(x > 0, axon.log(x), (x + x) * 0.5)


def test_a_branch_assumption_holds_only_where_its_branch_is_chosen():
    """log(x) in the branch x > 0 assumes nothing: read as "log arguments > 0" everywhere, the
    assumption left out every x <= 0, where the two programs differ (x < -40)."""
    v = Verifier()
    refuted = v.check_programs(log_or_clamped.graph, log_or_identity.graph)
    assert refuted.status is Status.REFUTED
    proved = v.check_programs(log_or_identity.graph, log_or_doubled_half.graph)
    assert proved.status is Status.PROVED and proved.assumptions == ()
    x = np.array([[-50.0, 2.0]])
    assert log_or_clamped(x)[0, 0] != log_or_identity(x)[0, 0]


@axon.program(x=("r", "c"), d=("r", "c"))
def guarded_quotient_plus_log(x, d):
    return axon.where(d > 0, x / d, 0.0) + axon.log(x)


@axon.program(x=("r", "c"), d=("r", "c"))
def log_plus_guarded_quotient(x, d):
    return axon.log(x) + axon.where(d > 0, x / d, 0.0)


def test_only_the_unguarded_assumption_is_stated():
    v = Verifier().check_programs(guarded_quotient_plus_log.graph, log_plus_guarded_quotient.graph)
    assert v.status is Status.PROVED and v.assumptions == ("log arguments are > 0",)
