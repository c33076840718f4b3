"""The algebra an operator's element rule is written against, and its concrete interpretation.

An element rule calls `alg.apply(scalar_op, *args)`, `alg.const(value)`,
`alg.fold(combine, extent, body)`, `alg.size(size)`, `alg.floordiv(a, b)`, `alg.mod(a, b)`,
`alg.branch(index, bound, below, above)` (below() where index < bound, else above()),
`alg.select(c, then, otherwise)` (then() where the value c != 0, else otherwise()); index
terms are combined with + and *. `ConcreteAlgebra` evaluates a rule on numbers, one element at a
time: slow, and used only to check each operator's NumPy reference against its element rule.
The SMT encoding (axon.verification) is a second algebra over the same rules.
"""
from __future__ import annotations

from fractions import Fraction
from typing import Callable, Mapping

import numpy as np

from axon.semantics.scalar import SCALAR_SPECS, ScalarOp
from axon.semantics.sizes import Size


class ConcreteAlgebra:
    def __init__(self, binding: Mapping[str, int]):
        self.binding = dict(binding)

    def apply(self, op: ScalarOp, *args):
        return float(SCALAR_SPECS[op].numpy(*(np.float64(a) for a in args)))

    def const(self, value):
        if isinstance(value, Size):
            return float(value.evaluate(self.binding))
        return float(value)

    def size(self, size: Size) -> int:
        return size.evaluate_int(self.binding)

    def fold(self, combine: ScalarOp, extent: int, body: Callable[[int], float]) -> float:
        acc = SCALAR_SPECS[combine].fold_identity
        for r in range(int(extent)):
            acc = self.apply(combine, acc, body(r))
        return acc

    def branch(self, index: int, bound: int, below: Callable, above: Callable):
        """below() where index < bound, else above() (an element rule's choice of operand)."""
        return below() if index < bound else above()

    def select(self, c: float, then: Callable, otherwise: Callable):
        """then() where c != 0 (NaN included, as NumPy's where reads it), else otherwise()."""
        return then() if c != 0 else otherwise()

    def floordiv(self, a: int, b: int) -> int:
        return a // b

    def mod(self, a: int, b: int) -> int:
        return a % b


def const_value(value, binding: Mapping[str, int]) -> float:
    """A constant parameter's number under a size binding (constants may be symbolic sizes)."""
    if isinstance(value, Size):
        return float(value.evaluate(binding))
    return float(Fraction(value)) if isinstance(value, Fraction) else float(value)
