"""A domain condition about positions alone restricts no proof. The symbolic term of a
concatenation holds every part at every position (a select on the position), so the log of
arange(k) + 1 in the right part is, at a left position i, the log of i - n + 1: "assuming log
arguments are > 0" there meant "only positions i >= n", and the left parts went unchecked. Each
pair below differs in NumPy (where every log, sqrt and divisor is in its domain); each was
proved equal. Also: a solver's model of a difference is confirmed on the inputs where such pairs
differ (ties, large magnitudes), and scans and concatenations without an axis mean NumPy's."""
import numpy as np
import pytest

import axon
from axon.errors import UnsupportedError
from axon.verification import Status, Verifier


def _right(y):
    return y + axon.log(axon.arange(y.shape[1]) + 1.0)


@axon.program(x=("m", "n"), y=("m", "k"))
def clipped_left(x, y):
    return axon.concatenate([axon.maximum(x, -40.0), _right(y)], axis=1)


@axon.program(x=("m", "n"), y=("m", "k"))
def plain_left(x, y):
    return axon.concatenate([x, _right(y)], axis=1)


@axon.program(x=("m", "n"), y=("m", "k"))
def clipped_column_then_quotient(x, y):  # the divisor arange(k) + 1 is zero at position n, a left one
    left = axon.concatenate([x, axon.maximum(x[:, :1], -40.0)], axis=1)
    return axon.concatenate([left, y / (axon.arange(y.shape[1]) + 1.0)], axis=1)


@axon.program(x=("m", "n"), y=("m", "k"))
def column_then_quotient(x, y):
    left = axon.concatenate([x, x[:, :1]], axis=1)
    return axon.concatenate([left, y / (axon.arange(y.shape[1]) + 1.0)], axis=1)


@axon.program(x=("m", "n"), y=("m", "k"))
def log_first_then_clipped(x, y):  # output 0's log(n - i) must not restrict output 1's i to i < n
    return x * axon.log(x.shape[1] - axon.arange(x.shape[1])), axon.concatenate([x, axon.maximum(y, -40.0)], axis=1)


@axon.program(x=("m", "n"), y=("m", "k"))
def log_first_then_plain(x, y):
    return x * axon.log(x.shape[1] - axon.arange(x.shape[1])), axon.concatenate([x, y], axis=1)


def _numpy_differ(f, g, sizes):
    x = np.full((sizes["m"], sizes["n"]), -50.0)
    y = np.full((sizes["m"], sizes["k"]), -50.0)
    return any(not np.array_equal(a, b) for a, b in zip(_outputs(f, x, y), _outputs(g, x, y)))


def _outputs(p, x, y):
    out = p(x, y)
    return out if isinstance(out, tuple) else (out,)


@pytest.mark.parametrize("f, g", [(clipped_left, plain_left), (clipped_column_then_quotient, column_then_quotient),
                                  (log_first_then_clipped, log_first_then_plain)])
def test_a_condition_on_positions_alone_leaves_no_position_unchecked(f, g):
    assert _numpy_differ(f, g, {"m": 2, "n": 3, "k": 2})  # the pair is false: x = -50 is clipped on one side
    verdict = Verifier().check_programs(f.graph, g.graph)
    assert verdict.status is not Status.PROVED, verdict.reason


def test_a_true_pair_with_a_log_of_positions_still_proves():
    @axon.program(x=("m", "n"), y=("m", "k"))
    def doubled(x, y):
        return axon.concatenate([x + x, _right(y)], axis=1)

    @axon.program(x=("m", "n"), y=("m", "k"))
    def twice(x, y):
        return axon.concatenate([2.0 * x, _right(y)], axis=1)

    assert Verifier().check_programs(doubled.graph, twice.graph).status is Status.PROVED


def test_a_scan_or_a_concatenation_without_an_axis_is_numpys_flattened_one_or_refused():
    with pytest.raises(UnsupportedError, match=r"cumsum without an axis runs over the flattened tensor in NumPy"):
        @axon.program(x=("m", "n"))
        def scan_all(x):
            return x.cumsum()

    @axon.program(x=("n",))
    def scan_vector(x):
        return x.cumsum()

    @axon.program(x=("n",))
    def scan_axis_0(x):
        return x.cumsum(axis=0)

    assert Verifier().check_programs(scan_vector.graph, scan_axis_0.graph).status is Status.PROVED

    with pytest.raises(UnsupportedError, match=r"axon.concatenate without an axis"):
        @axon.program(x=("m", "n"), y=("m", "n"))
        def joined(x, y):
            return axon.concatenate([x, y], axis=None)


@axon.program(x=("m", "n"))
def strictly_positive(x):
    return x > 0.0


@axon.program(x=("m", "n"))
def non_negative(x):
    return x >= 0.0


@axon.program(x=("m", "n"))
def clamped_below(x):
    return axon.maximum(x, -40.0)


@axon.program(x=("m", "n"))
def unclamped(x):
    return x


@pytest.mark.parametrize("f, g", [(strictly_positive, non_negative), (clamped_below, unclamped)])
def test_a_solver_model_is_confirmed_with_ties_and_large_inputs_too(f, g):
    """They differ only at x == 0 and at x < -40, where standard-normal draws never land: the
    solver's model was left "unknown" until its confirmation also drew ties and large magnitudes."""
    verdict = Verifier().check_programs(f.graph, g.graph)
    assert verdict.status is Status.REFUTED, verdict.reason
    cex = verdict.counterexample
    assert cex["a"] != cex["b"]
