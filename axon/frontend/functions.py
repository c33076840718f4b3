"""The functions of the axon namespace (axon.exp, axon.maximum, ...), one per element-wise operator."""
from __future__ import annotations

from numbers import Real

from axon.errors import UnsupportedError
from axon.frontend.tracer import Tensor
from axon.semantics.ops import Op


def _traced(op: Op, *args):
    tensors = [a for a in args if isinstance(a, Tensor)]
    if not tensors:
        raise UnsupportedError(f"axon.{op.value} needs a traced tensor argument (inside an @axon.program)")
    first = tensors[0]
    for a in args:
        if not isinstance(a, (Tensor, Real)) or isinstance(a, bool):
            raise UnsupportedError(f"axon.{op.value}: argument of type {type(a).__name__} is not supported")
    return first.trace.apply(op, [first._lift(a) for a in args])


def _unary(op: Op):
    def fn(x):
        return _traced(op, x)

    fn.__name__ = op.value
    fn.__doc__ = f"Element-wise {op.value}."
    return fn


def _binary(op: Op):
    def fn(x, y):
        return _traced(op, x, y)

    fn.__name__ = op.value
    fn.__doc__ = f"Element-wise {op.value} with NumPy broadcasting."
    return fn


exp = _unary(Op.EXP)
log = _unary(Op.LOG)
sqrt = _unary(Op.SQRT)
rsqrt = _unary(Op.RSQRT)
reciprocal = _unary(Op.RECIPROCAL)
square = _unary(Op.SQUARE)
silu = _unary(Op.SILU)
relu = _unary(Op.RELU)
sigmoid = _unary(Op.SIGMOID)
tanh = _unary(Op.TANH)
gelu = _unary(Op.GELU)
maximum = _binary(Op.MAXIMUM)
minimum = _binary(Op.MINIMUM)


def matmul(x, y):
    return x @ y


def transpose(x, axes=None):
    return x.transpose(*(axes or ()))
