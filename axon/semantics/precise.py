"""One output element of a graph in high-precision arithmetic (mpmath), from the element rules.

float64 cannot tell `(x + 1e10) - 1e10` from a program that differs from `x` by 1e-6, and it
overflows in `exp(x + 1000)`; a difference it shows may be rounding, and one it hides may be real.
The refuter therefore confirms each candidate counterexample here: the same `element` rules that
the solver reads (axon/semantics/ops.py), interpreted on mpmath numbers at PRECISION_DIGITS
significant digits, one element at a time (only the cone of operands that element reads is
evaluated). Domain errors follow NumPy: x/0 is +-inf (0/0 NaN), log(0) is -inf, log and sqrt of a
negative number are NaN.
"""
from __future__ import annotations

from fractions import Fraction
from typing import Callable, Mapping, Sequence

import mpmath
import numpy as np

from axon.ir import Graph, Node
from axon.semantics.ops import OP_SPECS, Op
from axon.semantics.scalar import SCALAR_SPECS, ScalarOp
from axon.semantics.sizes import Size

PRECISION_DIGITS = 100
# Two evaluations of programs equal over the reals agree to about 10^-PRECISION_DIGITS times the
# magnitude of their largest intermediate; this much closer than that counts as equal.
AGREE_DIGITS = 60

_S = ScalarOp
_NAN = mpmath.mpf("nan")


def _div(a, b):
    if b == 0:
        return _NAN if (a == 0 or mpmath.isnan(a)) else mpmath.mpf("inf") * mpmath.sign(a)
    return a / b


def _log(a):
    if a == 0:
        return mpmath.mpf("-inf")
    return _NAN if a < 0 or mpmath.isnan(a) else mpmath.log(a)


def _sqrt(a):
    return _NAN if a < 0 or mpmath.isnan(a) else mpmath.sqrt(a)


def _extremum(pick):
    return lambda a, b: _NAN if (mpmath.isnan(a) or mpmath.isnan(b)) else pick(a, b)


# the primitives; every other scalar operation is expanded through its `definition`
PRIMITIVES: dict[ScalarOp, Callable] = {
    _S.ADD: lambda a, b: a + b, _S.SUB: lambda a, b: a - b, _S.MUL: lambda a, b: a * b, _S.DIV: _div,
    _S.MAXIMUM: _extremum(max), _S.MINIMUM: _extremum(min), _S.NEG: lambda a: -a,
    _S.EXP: mpmath.exp, _S.LOG: _log, _S.SQRT: _sqrt, _S.TANH: mpmath.tanh,
    # comparisons with NaN are false and a NaN condition selects its first branch, as in NumPy
    _S.GE: lambda a, b: mpmath.mpf(a >= b), _S.GT: lambda a, b: mpmath.mpf(a > b),
    _S.EQ: lambda a, b: mpmath.mpf(a == b), _S.WHERE: lambda c, a, b: a if c != 0 else b,
}


class PreciseAlgebra:
    """The element-rule algebra (see axon/semantics/algebra.py) over mpmath numbers."""

    def __init__(self, binding: Mapping[str, int]):
        self.binding = dict(binding)

    def apply(self, op: ScalarOp, *args):
        if op in PRIMITIVES:
            return PRIMITIVES[op](*args)
        return SCALAR_SPECS[op].definition(self, *args)

    def const(self, value):
        if isinstance(value, Size):
            value = value.evaluate(self.binding)
        if isinstance(value, Fraction):
            return mpmath.mpf(value.numerator) / value.denominator
        return mpmath.mpf(value)

    def size(self, size: Size) -> int:
        return size.evaluate_int(self.binding)

    def fold(self, combine: ScalarOp, extent: int, body: Callable[[int], object]):
        values = [body(r) for r in range(int(extent))]
        acc = values[0] if values else self.const(SCALAR_SPECS[combine].fold_identity)
        for v in values[1:]:
            acc = self.apply(combine, acc, v)
        return acc

    def branch(self, index: int, bound: int, below: Callable, above: Callable):
        return below() if index < bound else above()

    def select(self, c, then: Callable, otherwise: Callable):
        return then() if c != 0 else otherwise()

    def floordiv(self, a: int, b: int) -> int:
        return a // b

    def mod(self, a: int, b: int) -> int:
        return a % b


class Elements:
    """Elements of graphs on one set of inputs and sizes at `digits` significant digits. Values
    of operands are kept across the elements asked for: the elements of one row read its sum
    once. Each value keeps the magnitude of the largest finite value among itself and what it was
    computed from (as mpmath.mag, a power of two), so an element's rounding scale is its own
    cone's, whatever was asked before it."""

    def __init__(self, arrays: Mapping[str, np.ndarray], binding: Mapping[str, int],
                 digits: int = PRECISION_DIGITS):
        self.arrays, self.digits = arrays, digits
        self._alg = PreciseAlgebra(binding)
        self._memo: dict[tuple, tuple] = {}  # (node, index) -> (value, magnitude of its cone)
        self._cones: list = []  # the cone magnitudes of the values being computed, innermost last
        self._finer = None

    @property
    def finer(self) -> "Elements":
        """The same inputs at twice the digits (kept: its values serve every element asked)."""
        if self._finer is None:
            self._finer = Elements(self.arrays, self._alg.binding, 2 * self.digits)
        return self._finer

    def at(self, node: Node, index: Sequence[int]) -> tuple[object, object]:
        """`node` at `index` as an mpmath number (inputs read exactly), and the scale of its
        rounding error: the largest finite magnitude among the intermediates it was computed
        from, rounded up to a power of two."""
        idx = tuple(int(i) for i in index)
        with mpmath.workdps(self.digits):
            value = self._value(node, idx)
            cone = self._memo[(node, idx)][1]
            return value, (mpmath.ldexp(mpmath.mpf(1), cone) if cone != _NO_MAGNITUDE else mpmath.mpf(0))

    def _value(self, node: Node, idx: tuple):
        key = (node, idx)
        hit = self._memo.get(key)
        if hit is None:
            if node.op is Op.INPUT:
                value, cone = mpmath.mpf(float(self.arrays[node.params.name][idx])), _NO_MAGNITUDE
            else:
                self._cones.append(_NO_MAGNITUDE)
                value = OP_SPECS[node.op].element(
                    self._alg, lambda k, i: self._value(node.inputs[k], tuple(int(j) for j in i)), idx,
                    tuple(i.shape for i in node.inputs), node.params)
                cone = self._cones.pop()
            if value and mpmath.isfinite(value):
                cone = max(cone, mpmath.mag(value))
            hit = self._memo[key] = (value, cone)
        if self._cones and hit[1] > self._cones[-1]:
            self._cones[-1] = hit[1]
        return hit[0]


_NO_MAGNITUDE = float("-inf")  # the cone of values that are all zero or not finite


def agree(a, b, scale) -> bool:
    """Equal up to AGREE_DIGITS digits of `scale` (NaN equals NaN, an infinity equals itself)."""
    with mpmath.workdps(PRECISION_DIGITS):
        if mpmath.isnan(a) or mpmath.isnan(b):
            return bool(mpmath.isnan(a) and mpmath.isnan(b))
        if mpmath.isinf(a) or mpmath.isinf(b):
            return a == b
        return abs(a - b) <= max(scale, abs(a), abs(b)) * mpmath.mpf(10) ** (-AGREE_DIGITS)


def gap(a, b):
    """|a - b|, infinite where they differ in kind (a NaN or an infinity against anything else)."""
    with mpmath.workdps(PRECISION_DIGITS):
        if mpmath.isnan(a) or mpmath.isnan(b):
            return mpmath.mpf(0) if mpmath.isnan(a) and mpmath.isnan(b) else mpmath.inf
        if mpmath.isinf(a) or mpmath.isinf(b):
            return mpmath.mpf(0) if a == b else mpmath.inf
        return abs(a - b)


def finite(x) -> bool:
    return bool(mpmath.isfinite(x))


def shrank(coarse, fine) -> bool:
    """Did a gap between two values shrink by AGREE_DIGITS orders or more as the digits grew?"""
    with mpmath.workdps(PRECISION_DIGITS):
        return mpmath.isfinite(fine) and (not mpmath.isfinite(coarse)
                                          or fine <= coarse * mpmath.mpf(10) ** (-AGREE_DIGITS))


def is_zero(node: Node, index: Sequence[int], elements: Elements) -> bool:
    """Is `node` at `index` exactly zero over the reals? Computed at `elements`' digits and twice
    that: a true zero computed with cancellation leaves a residue that shrinks as the precision
    grows; a genuine tiny value (exp(-800)) stays put, and one absorbed at the lower precision
    ((exp(-400) + 1e12) - 1e12 is 0 at 100 digits) grows. Absorption beyond the higher precision
    is not seen."""
    coarse, _ = elements.at(node, index)
    fine, _ = elements.finer.at(node, index)
    with mpmath.workdps(elements.finer.digits):
        return fine == 0 or abs(fine) <= abs(coarse) * mpmath.mpf(10) ** (-AGREE_DIGITS)
