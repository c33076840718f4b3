"""The functions of the axon namespace (axon.exp, axon.maximum, ...), one per element-wise operator."""
from __future__ import annotations

from numbers import Real

from axon.errors import ShapeError, UnsupportedError
from axon.frontend.tracer import Tensor, Trace, _finite, _user_location
from axon.ir import Node
from axon.semantics.ops import ConcatParams, ConstParams, IotaParams, Op
from axon.semantics.sizes import Size


def _traced(op: Op, *args):
    for a in args:
        if not isinstance(a, (Tensor, Real, Size)) or isinstance(a, bool):
            raise UnsupportedError(f"{_user_location()}axon.{op.value}: argument of type {type(a).__name__} "
                                   "is not supported")
    tensors = [a for a in args if isinstance(a, Tensor)]
    if tensors:
        first = tensors[0]
        return first.trace.apply(op, [first._lift(a) for a in args])
    # only numbers and sizes (axon.rsqrt(q.shape[-1])): a constant of the program being traced
    trace = Trace.active
    if trace is None:
        raise UnsupportedError(f"axon.{op.value} needs a traced tensor or a size argument (inside an @axon.program)")
    return trace.apply(op, [constant(a, trace) for a in args])


def constant(value, trace: Trace) -> Tensor:
    """A number or a size as a rank-0 tensor of `trace`."""
    if isinstance(value, Size):
        return trace.size_constant(value)
    return Tensor(Node(Op.CONST, (), ConstParams(_finite(value)), ()), trace)


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
equal = _binary(Op.EQ)


def concatenate(tensors, axis: int = 0):
    """The tensors joined along `axis` (sizes add there; the other axes must agree)."""
    tensors = list(tensors)
    if not tensors or not all(isinstance(t, Tensor) for t in tensors):
        raise UnsupportedError(f"{_user_location()}axon.concatenate takes a non-empty list of traced tensors")
    first = tensors[0]
    (a,) = first._one_axis(axis, "axon.concatenate")
    out = first
    for t in tensors[1:]:
        out = first.trace.apply(Op.CONCAT, [out, first._lift(t)], ConcatParams(a), what="concatenate")
    return out


def where(condition, x, y):
    """x where condition is non-zero (a comparison's 1.0), else y, with NumPy broadcasting."""
    return _traced(Op.WHERE, condition, x, y)


def arange(dim):
    """The indices 0, 1, ..., n - 1 of the dimension `dim` (a name or a size, e.g. x.shape[0]) as
    a tensor of shape (n,): `axon.arange("s")[:, None] >= axon.arange("t")[None, :]` is a causal mask."""
    trace = Trace.active
    if trace is None:
        raise UnsupportedError("axon.arange is only available inside an @axon.program")
    size = Size.of(dim) if isinstance(dim, (str, Size)) or (isinstance(dim, int) and dim > 0) else None
    if size is None or not size.symbols <= trace.dims:
        raise ShapeError(f"{_user_location()}axon.arange({dim!r}): not a dimension of this program "
                         f"(its dimensions are {', '.join(sorted(trace.dims))})")
    return trace.apply(Op.IOTA, [], IotaParams(size), what="arange")


def matmul(x, y):
    return x @ y


def transpose(x, axes=None):
    return x.transpose(*(axes or ()))
