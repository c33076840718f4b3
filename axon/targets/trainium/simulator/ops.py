"""Math operators and activation functions, as data: one `Op` per NKI name with its NumPy
meaning (float32 in, float32 out) and what it may be used for.

Invariant: every operator is one `Op` object; `nl.add` *is* that object, and calling it from a
kernel runs the nki.language function (bound per simulation by language.py); ISA instructions
take the same objects (or NumPy ufuncs, which `lookup` maps onto them) as their `op` fields.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from axon.errors import KernelError


@dataclass(frozen=True, eq=False)
class Op:
    name: str
    fn: Callable  # NumPy meaning on float32 (or int for bitvec ops)
    arity: int  # 1: activation / unary, 2: binary ALU op
    bitvec: bool = False
    reduce_identity: float | None = None  # identity when used as a reduction
    reduce_fn: Callable | None = None  # NumPy reduction along an axis

    def __repr__(self):
        return f"nl.{self.name}"


def _gelu(x):
    erf = np.vectorize(math.erf, otypes=[np.float32])
    return 0.5 * x * (1.0 + erf(x / np.float32(math.sqrt(2.0))))


def _gelu_tanh(x):
    c = np.float32(math.sqrt(2.0 / math.pi))
    return 0.5 * x * (1.0 + np.tanh(c * (x + np.float32(0.044715) * x * x * x)))


def _erf(x):
    return np.vectorize(math.erf, otypes=[np.float32])(x)


def _one_instruction(f):
    """f as one engine instruction computes it: to within a rounding of its value, whatever its
    steps would do in float32 (silu(-90) = -7e-38, a normal float32, although exp(90) in
    1 / (1 + exp(-x)) overflows float32): evaluated in float64, rounded once to x's dtype. The
    numerical check bounds an activation this way (axon.semantics.bounds)."""
    def fn(x):
        x = np.asarray(x)
        with np.errstate(over="ignore"):
            return f(x.astype(np.float64)).astype(x.dtype)
    return fn


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def _gelu_sigmoid(x):  # GELU's sigmoid approximation x * sigmoid(1.702 x) (Hendrycks & Gimpel)
    return x * _sigmoid(1.702 * x)


UNARY = [
    Op("exp", np.exp, 1), Op("log", np.log, 1), Op("sqrt", np.sqrt, 1),
    Op("rsqrt", lambda x: 1.0 / np.sqrt(x), 1), Op("tanh", np.tanh, 1),
    Op("sigmoid", _one_instruction(_sigmoid), 1), Op("relu", lambda x: np.maximum(x, 0), 1),
    Op("gelu", _gelu, 1), Op("gelu_apprx_tanh", _gelu_tanh, 1),
    Op("gelu_apprx_sigmoid", _one_instruction(_gelu_sigmoid), 1),
    Op("silu", _one_instruction(lambda x: x * _sigmoid(x)), 1), Op("square", np.square, 1),
    Op("abs", np.abs, 1), Op("negative", np.negative, 1), Op("sin", np.sin, 1),
    Op("cos", np.cos, 1), Op("tan", np.tan, 1), Op("arctan", np.arctan, 1),
    Op("erf", _erf, 1), Op("softplus", _one_instruction(lambda x: np.logaddexp(0.0, x)), 1),
    Op("sign", np.sign, 1), Op("ceil", np.ceil, 1), Op("floor", np.floor, 1),
    Op("trunc", np.trunc, 1), Op("copy", lambda x: x, 1), Op("identity", lambda x: x, 1),
    Op("reciprocal", lambda x: 1.0 / x, 1), Op("mish", _one_instruction(lambda x: x * np.tanh(np.logaddexp(0.0, x))), 1),
    Op("logical_not", lambda x: (x == 0).astype(np.float32), 1),
]

BINARY = [
    Op("add", np.add, 2, reduce_identity=0.0, reduce_fn=np.sum),
    Op("subtract", np.subtract, 2),
    Op("multiply", np.multiply, 2, reduce_identity=1.0, reduce_fn=np.prod),
    Op("divide", np.divide, 2),
    Op("maximum", np.maximum, 2, reduce_identity=-np.inf, reduce_fn=np.max),
    Op("minimum", np.minimum, 2, reduce_identity=np.inf, reduce_fn=np.min),
    # mod takes the divisor's sign, as numpy.mod; fmod the dividend's, as numpy.fmod [nl.mod, nl.fmod]
    Op("power", np.power, 2), Op("mod", np.mod, 2), Op("fmod", np.fmod, 2),
    Op("equal", lambda a, b: (a == b).astype(np.float32), 2),
    Op("not_equal", lambda a, b: (a != b).astype(np.float32), 2),
    Op("greater", lambda a, b: (a > b).astype(np.float32), 2),
    Op("greater_equal", lambda a, b: (a >= b).astype(np.float32), 2),
    Op("less", lambda a, b: (a < b).astype(np.float32), 2),
    Op("less_equal", lambda a, b: (a <= b).astype(np.float32), 2),
    Op("logical_and", lambda a, b: ((a != 0) & (b != 0)).astype(np.float32), 2),
    Op("logical_or", lambda a, b: ((a != 0) | (b != 0)).astype(np.float32), 2),
    Op("logical_xor", lambda a, b: ((a != 0) ^ (b != 0)).astype(np.float32), 2),
    Op("bitwise_and", np.bitwise_and, 2, bitvec=True, reduce_fn=np.bitwise_and.reduce),
    Op("bitwise_or", np.bitwise_or, 2, bitvec=True, reduce_fn=np.bitwise_or.reduce),
    Op("bitwise_xor", np.bitwise_xor, 2, bitvec=True, reduce_fn=np.bitwise_xor.reduce),
    Op("left_shift", np.left_shift, 2, bitvec=True),
    Op("right_shift", np.right_shift, 2, bitvec=True),
]

OPS = {op.name: op for op in UNARY + BINARY}

_NUMPY = {np.add: "add", np.subtract: "subtract", np.multiply: "multiply", np.divide: "divide",
          np.true_divide: "divide", np.maximum: "maximum", np.minimum: "minimum", np.max: "maximum",
          np.min: "minimum", np.amax: "maximum", np.amin: "minimum", np.sum: "add", np.prod: "multiply",
          np.power: "power", np.exp: "exp", np.log: "log", np.sqrt: "sqrt", np.tanh: "tanh",
          np.abs: "abs", np.negative: "negative", np.square: "square", np.sin: "sin", np.cos: "cos",
          np.equal: "equal", np.not_equal: "not_equal", np.greater: "greater",
          np.greater_equal: "greater_equal", np.less: "less", np.less_equal: "less_equal",
          np.bitwise_and: "bitwise_and", np.bitwise_or: "bitwise_or", np.bitwise_xor: "bitwise_xor",
          np.left_shift: "left_shift", np.right_shift: "right_shift", np.sign: "sign",
          np.ceil: "ceil", np.floor: "floor", np.logical_and: "logical_and",
          np.logical_or: "logical_or", np.logical_xor: "logical_xor", np.fmod: "fmod", np.mod: "mod"}


# Unary functions the Vector Engine's ALU also computes as an `op` of a two-operand instruction
# (the "Supported Math Operators for NKI ISA" table lists them with add, multiply, ...): the
# instruction applies them to its data; the second operand takes no part.
ALU_UNARY = {name: Op(name, lambda a, _b, fn=OPS[name].fn: fn(a), 2) for name in ("abs", "rsqrt", "reciprocal")}


def lookup(op, arity: int | None = None) -> Op:
    """Map an `op=` argument (an nl operator or a NumPy function) onto its Op."""
    found = None
    if isinstance(op, Op):
        found = op
    elif hasattr(op, "op") and isinstance(op.op, Op):  # a bound language function
        # one that is not its Op's own name (nl.mean: a sum, divided) only where a caller takes it
        found = op.op if getattr(op, "name", op.op.name) == op.op.name else None
    else:
        try:
            name = _NUMPY.get(op)
        except TypeError:
            name = None
        if name is not None:
            found = OPS[name]
    if found is None:
        raise KernelError(f"unsupported operator {op!r}")
    if arity == 2 and found.arity == 1 and found.name in ALU_UNARY:
        return ALU_UNARY[found.name]
    if arity is not None and found.arity != arity:
        kind = "binary" if arity == 2 else "unary (activation)"
        raise KernelError(f"operator {found.name} is not a {kind} operator")
    return found


def apply_binary(op: Op, a, b):
    if op.bitvec:
        return op.fn(np.asarray(a).astype(np.int32), np.asarray(b).astype(np.int32))
    with np.errstate(all="ignore"):
        return op.fn(a, b)


def apply_unary(op: Op, x):
    with np.errstate(all="ignore"):
        return op.fn(x)
