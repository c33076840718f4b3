"""High-precision elements (axon/semantics/precise.py): values shared across the elements asked
for must not change any element's value or rounding scale."""
import mpmath
import numpy as np

import axon
from axon.semantics import precise


@axon.program(x=("m", "k"))
def row_sums_plus_x(x):
    return x.sum(axis=1, keepdims=True) + x


def test_an_elements_scale_is_its_own_cone_whatever_was_asked_before():
    x = np.array([[1e30, -1e30, 3.0], [0.25, 0.5, 0.75]])
    out = row_sums_plus_x.graph.outputs[0]
    shared = precise.Elements({"x": x}, {"m": 2, "k": 3})
    big, big_scale = shared.at(out, (0, 2))
    small, small_scale = shared.at(out, (1, 2))
    alone, alone_scale = precise.Elements({"x": x}, {"m": 2, "k": 3}).at(out, (1, 2))
    assert (small, small_scale) == (alone, alone_scale)
    assert big == 6 and small == 2.25  # the reals: 1e30 - 1e30 cancels exactly
    assert 1e30 <= big_scale <= 2e30 and 2.25 <= small_scale <= 4.5  # the largest in its cone, up to 2x


def test_a_zero_is_told_from_an_underflow():
    @axon.program(x=("m", "k"))
    def shifted(x):
        return axon.exp(x - 800.0) - axon.exp(x) * axon.exp(-800.0 + 0.0 * x)

    x = np.zeros((1, 2))
    out = shifted.graph.outputs[0]
    elements = precise.Elements({"x": x}, {"m": 1, "k": 2})
    assert precise.is_zero(out, (0, 1), elements)
    tiny = shifted.graph.outputs[0].inputs[0]  # exp(x - 800): 1e-348, below float64, not zero
    assert not precise.is_zero(tiny, (0, 0), elements)
    with mpmath.workdps(30):
        assert elements.at(tiny, (0, 0))[0] > 0


def test_a_value_absorbed_at_the_lower_precision_is_not_zero():
    @axon.program(x=("m", "k"))
    def absorbed(x):
        return (axon.exp(x - 400.0) + 1e12) - 1e12  # 1e-174: 0 at 100 digits, itself at 200

    elements = precise.Elements({"x": np.zeros((1, 1))}, {"m": 1, "k": 1})
    assert elements.at(absorbed.graph.outputs[0], (0, 0))[0] == 0
    assert not precise.is_zero(absorbed.graph.outputs[0], (0, 0), elements)
