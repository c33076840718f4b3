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


@pytest.mark.parametrize("f, g", [(guarded_quotient, guard_then_divide), (guard_then_divide, guarded_quotient),
                                  (sum_of_c_over_c, sum_of_ones), (safe_mean, guarded_numerator)])
def test_an_assumption_both_sides_record_but_one_side_guards_is_no_rewrite(f, g):
    """Both sides assume d != 0 (the solver records a divisor under a where's branch, or inside a
    sum, as if unguarded), yet where m and d are 0 the first is 0 and the second NaN; a helper's
    masked mean optimized to NaN on its fully masked rows through the last pair."""
    v = as_rewrite(f, g)
    assert v.status is Status.UNKNOWN and "undefined where the other is not" in v.reason
