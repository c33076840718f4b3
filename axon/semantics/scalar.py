"""Scalar operations: the element-level meaning every tensor operator is built from.

One table, interpreted by every stage: `numpy` is the vectorised NumPy meaning (the reference
evaluator uses it); `definition`, where present, states the operation in terms of other scalar
operations (the SMT encoding expands it, and a test checks it against `numpy`); `interpreted`
marks operations an SMT solver understands natively over the reals; the remaining primitives
(exp, log, sqrt, tanh) are uninterpreted functions there. Algebraic flags are facts rewriting uses.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, Callable, Optional

import numpy as np


class ScalarOp(enum.Enum):
    ADD = "add"
    SUB = "sub"
    MUL = "mul"
    DIV = "div"
    MAXIMUM = "maximum"
    MINIMUM = "minimum"
    NEG = "neg"
    EXP = "exp"
    LOG = "log"
    SQRT = "sqrt"
    RSQRT = "rsqrt"
    RECIPROCAL = "reciprocal"
    SQUARE = "square"
    RELU = "relu"
    SIGMOID = "sigmoid"
    SILU = "silu"
    TANH = "tanh"
    GELU = "gelu"
    # comparisons give 1.0 (true) or 0.0 (false); where(c, a, b) is a where c != 0, else b
    GE = "ge"
    GT = "gt"
    LE = "le"
    LT = "lt"
    EQ = "eq"
    WHERE = "where"


# A definition receives the algebra `a` (with .apply(op, *args) and .const(value)) and the arguments.
Definition = Callable[..., Any]


@dataclass(frozen=True)
class ScalarSpec:
    op: ScalarOp
    arity: int
    numpy: Callable[..., np.ndarray]
    definition: Optional[Definition] = None
    interpreted: bool = False  # native in the SMT theory of reals (with if-then-else)
    commutative: bool = False
    associative: bool = False
    fold_identity: Optional[float] = None  # identity element when used as a reduction


def _quiet(fn):
    """NumPy functions evaluated without overflow/invalid warnings: infinities are results too."""

    def wrapped(*args):
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            return fn(*args)

    return wrapped


_GELU_C = float(np.sqrt(2.0 / np.pi))


def _truth(compare):
    return lambda a, b: np.asarray(compare(a, b), dtype=np.float64)[()]


def _gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(_GELU_C * (x + 0.044715 * x**3)))


_S = ScalarOp
SCALAR_SPECS: dict[ScalarOp, ScalarSpec] = {
    spec.op: spec
    for spec in [
        ScalarSpec(_S.ADD, 2, np.add, interpreted=True, commutative=True, associative=True, fold_identity=0.0),
        ScalarSpec(_S.SUB, 2, np.subtract, interpreted=True),
        ScalarSpec(_S.MUL, 2, np.multiply, interpreted=True, commutative=True, associative=True, fold_identity=1.0),
        ScalarSpec(_S.DIV, 2, _quiet(np.divide), interpreted=True),
        ScalarSpec(_S.MAXIMUM, 2, np.maximum, interpreted=True, commutative=True, associative=True,
                   fold_identity=float("-inf")),
        ScalarSpec(_S.MINIMUM, 2, np.minimum, interpreted=True, commutative=True, associative=True,
                   fold_identity=float("inf")),
        ScalarSpec(_S.NEG, 1, np.negative, interpreted=True),
        ScalarSpec(_S.EXP, 1, _quiet(np.exp)),
        ScalarSpec(_S.LOG, 1, _quiet(np.log)),
        ScalarSpec(_S.SQRT, 1, _quiet(np.sqrt)),
        ScalarSpec(_S.TANH, 1, np.tanh),
        # rsqrt(x) = 1 / sqrt(x)
        ScalarSpec(_S.RSQRT, 1, _quiet(lambda x: 1.0 / np.sqrt(x)),
                   definition=lambda a, x: a.apply(_S.DIV, a.const(1), a.apply(_S.SQRT, x))),
        # reciprocal(x) = 1 / x
        ScalarSpec(_S.RECIPROCAL, 1, _quiet(lambda x: 1.0 / x),
                   definition=lambda a, x: a.apply(_S.DIV, a.const(1), x)),
        # square(x) = x * x
        ScalarSpec(_S.SQUARE, 1, np.square, definition=lambda a, x: a.apply(_S.MUL, x, x)),
        # relu(x) = max(x, 0)
        ScalarSpec(_S.RELU, 1, lambda x: np.maximum(x, 0.0),
                   definition=lambda a, x: a.apply(_S.MAXIMUM, x, a.const(0))),
        # sigmoid(x) = 1 / (1 + exp(-x))
        ScalarSpec(_S.SIGMOID, 1, _quiet(lambda x: 1.0 / (1.0 + np.exp(-x))),
                   definition=lambda a, x: a.apply(
                       _S.DIV, a.const(1), a.apply(_S.ADD, a.const(1), a.apply(_S.EXP, a.apply(_S.NEG, x))))),
        # silu(x) = x * sigmoid(x)
        ScalarSpec(_S.SILU, 1, _quiet(lambda x: x / (1.0 + np.exp(-x))),
                   definition=lambda a, x: a.apply(_S.MUL, x, a.apply(_S.SIGMOID, x))),
        # gelu, tanh approximation (NKI's gelu_apprx_tanh; we choose it so that every target
        # and the reference share one formula): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
        ScalarSpec(_S.GELU, 1, _quiet(_gelu_tanh),
                   definition=lambda a, x: a.apply(
                       _S.MUL, a.apply(_S.MUL, a.const(0.5), x),
                       a.apply(_S.ADD, a.const(1), a.apply(_S.TANH, a.apply(
                           _S.MUL, a.const(_GELU_C),
                           a.apply(_S.ADD, x, a.apply(_S.MUL, a.const(0.044715),
                                                       a.apply(_S.MUL, x, a.apply(_S.MUL, x, x))))))))),
        ScalarSpec(_S.GE, 2, _truth(np.greater_equal), interpreted=True),
        ScalarSpec(_S.GT, 2, _truth(np.greater), interpreted=True),
        ScalarSpec(_S.EQ, 2, _truth(np.equal), interpreted=True, commutative=True),
        # le(a, b) = ge(b, a), lt(a, b) = gt(b, a): one direction of each is primitive
        ScalarSpec(_S.LE, 2, _truth(np.less_equal), definition=lambda a, x, y: a.apply(_S.GE, y, x)),
        ScalarSpec(_S.LT, 2, _truth(np.less), definition=lambda a, x, y: a.apply(_S.GT, y, x)),
        ScalarSpec(_S.WHERE, 3, lambda c, x, y: np.where(np.asarray(c) != 0, x, y)[()], interpreted=True),
    ]
}
