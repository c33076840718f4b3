"""Symbolic slice bounds outside the axis, and sizes used as numbers of any sign.

Python clips a stop past the axis and counts a negative start from the end, so `x[:, n - 3:]`
has 3 columns only where n >= 3, and `x[:, :n + 1]` is all of x. A slice's extent is stop -
start only where 0 <= start < stop <= size: the program records that (a claim covers those
sizes), and a bound that breaks it at every size is an error. `n // 2 - 3` used as a number
is an integer for even n, of either sign."""
import numpy as np
import pytest

import axon
from axon.errors import InputError, ShapeError
from axon.verification import Status, Verifier


def verdict(f, g):
    return Verifier().check_programs(f.graph, g.graph)


@axon.program(x=("m", "n"))
def last_three_mean(x):
    return x[:, x.shape[1] - 3:].mean(axis=1)


@axon.program(x=("m", "n"))
def last_three_sum_over_3(x):
    return x[:, x.shape[1] - 3:].sum(axis=1) / 3


def test_a_start_that_is_negative_at_small_sizes_is_claimed_only_where_it_is_not():
    v = verdict(last_three_mean, last_three_sum_over_3)
    assert v.status is Status.PROVED and "n >= 3" in v.reason
    assert v.covers({"m": 2, "n": 3}) and not v.covers({"m": 2, "n": 2})  # numpy: x[:, -1:] there
    with pytest.raises(InputError, match="n >= 3|-3 \\+ n >= 0"):
        last_three_mean(np.ones((2, 2)))
    np.testing.assert_allclose(last_three_mean(np.arange(8.0).reshape(2, 4)), [2.0, 6.0])


@pytest.mark.parametrize("bounds, problem", [(lambda n: slice(0, n + 1), "past the axis"),
                                             (lambda n: slice(n, n + 1), "past the axis"),
                                             (lambda n: slice(n, n), "empty")])
def test_a_bound_outside_the_axis_at_every_size_is_an_error(bounds, problem):
    with pytest.raises((ShapeError, axon.errors.UnsupportedError), match=problem):
        @axon.program(x=("m", "n"))
        def outside(x):
            return x[:, bounds(x.shape[1])]
        outside.graph


@axon.program(x=("m", "n"))
def wrapped_start_mean(x):
    return x[:, 1 - x.shape[1]:].mean(axis=1)


@axon.program(x=("m", "n"))
def over_2n_minus_1(x):
    return x[:, 1 - x.shape[1]:].sum(axis=1) / (2 * x.shape[1] - 1)


def test_a_start_negative_for_most_sizes_is_not_proved_for_them():
    # numpy reads x[:, 1:] at every n >= 2: f = S'/(n - 1), g = S'/(2n - 1)
    v = verdict(wrapped_start_mean, over_2n_minus_1)
    assert not v.covers({"m": 2, "n": 2}) and not v.covers({"m": 2, "n": 5})
    assert v.status is Status.PROVED and v.conditions == ("n <= 1",) and v.covers({"m": 2, "n": 1})


@axon.program(x=("m", "n"))
def relu_of_half_minus_3(x):
    return x * axon.relu(x.shape[1] // 2 - 3 + 0 * x)


@axon.program(x=("m", "n"))
def half_minus_3(x):
    return x * (x.shape[1] // 2 - 3)


def test_a_size_used_as_a_number_may_be_negative():
    # relu(n//2 - 3) = n//2 - 3 only from n = 6: at n = 2 and 4 it is 0 against -2 and -1
    v = verdict(relu_of_half_minus_3, half_minus_3)
    assert v.status is Status.REFUTED or not v.covers({"m": 2, "n": 4})
    assert v.status is not Status.PROVED or "n >= 6" in v.reason
    np.testing.assert_allclose(half_minus_3(np.ones((1, 4))), [[-1.0] * 4])  # needs n even, of any sign


def test_comparing_symbolic_sizes_in_a_program_is_one_line_naming_it():
    with pytest.raises(axon.errors.UnsupportedError, match="test_verify_slice_bounds.py:.*>= 0 in Python is true at some"):
        @axon.program(x=("m", "n"))
        def branch(x):
            return axon.where(x.shape[1] // 2 - 3 >= 0, x, -x)
        branch.graph
