"""Tracing: NumPy-like tensors that record operator applications into the IR.

Inside an `@axon.program` function every input is a `Tensor`. Its operators (+ - * / @, unary -,
methods such as .sum, .transpose, slicing) build `Node`s through each operator's shape rule, so a
rank or size mismatch is caught while tracing and reported once, naming the operands, their
shapes and the line of the user's program. Nothing here evaluates numbers.
"""
from __future__ import annotations

import math
import os
import sys
from numbers import Real
from typing import Optional

from axon.errors import ShapeError, UnsupportedError
from axon.ir import Node, make_node
from axon.semantics.ops import (OP_SPECS, AxisParams, ConstParams, Op, ReshapeParams, SliceParams,
                                TransposeParams)
from axon.semantics.sizes import Size, SizeFact, format_shape

_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _user_location() -> str:
    """'file.py:line' of the innermost caller outside the axon package, for error messages."""
    frame = sys._getframe(1)
    while frame is not None:
        path = os.path.abspath(frame.f_code.co_filename)
        if not path.startswith(_PACKAGE_DIR + os.sep):
            return f"{os.path.basename(path)}:{frame.f_lineno}: "
        frame = frame.f_back
    return ""


class Trace:
    """What one tracing run collects besides the graph: size preconditions of its operators. The
    trace being run is `Trace.active` (functions with no tensor argument, axon.arange, need it)."""

    active: Optional["Trace"] = None

    def __init__(self, dims: frozenset[str] = frozenset()):
        self.constraints: set[SizeFact] = set()
        self.dims = dims  # the program's dimension names

    def apply(self, op: Op, operands: list["Tensor"], params=None, what: Optional[str] = None) -> "Tensor":
        nodes = [t.node for t in operands]
        try:
            node = make_node(op, nodes, params)
        except ShapeError as err:
            shown = ", ".join(t.describe() for t in operands)
            raise ShapeError(f"{_user_location()}{what or op.value}({shown}): {err}") from None
        self.constraints.update(OP_SPECS[op].constraints(tuple(n.shape for n in nodes), params))
        self.require_integers(node.shape)
        return Tensor(node, self)

    def size_constant(self, value: Size) -> "Tensor":
        """A size as a rank-0 tensor of this trace (`x * (x.shape[1] // 2)`)."""
        self.require_integers((value,))
        return Tensor(Node(Op.CONST, (), ConstParams(value), ()), self)

    def require_integers(self, sizes) -> None:
        """A size the program computes with (a shape, or `n // 2` as a number) is a whole number:
        the program requires it (n // 2 needs n even, as in a slice bound), or `//` would be `/`."""
        for size in sizes:
            fact = size.integral()
            if fact is not None and not any(f.size == fact.size and f.divisor % fact.divisor == 0
                                             for f in self.constraints):
                self.constraints.add(fact)


def _size_as_number(size: Size):
    """`d ** -0.5`, `n * 0.5`, `1.0 / n` in a program: the size as a rank-0 constant of the trace."""
    return Trace.active.size_constant(size) if Trace.active is not None else None


Size.as_number = _size_as_number


def _finite(value: Real) -> Real:
    """Programs compute over the reals, and their reference in float64: a constant must be both."""
    try:
        finite = math.isfinite(float(value))
    except OverflowError:
        finite = False
    if not finite:
        shown = f"{value:.3g}" if isinstance(value, float) else f"of {len(str(abs(int(value))))} digits"
        raise UnsupportedError(f"{_user_location()}constant {shown} is not a finite float64 number: a program's "
                               "constants must be real numbers the float64 reference can hold")
    return value


def _bound(value):
    """A slice bound: an integer, None, or a symbolic size (a constant size is its integer)."""
    if isinstance(value, Size) and value.as_int() is not None:
        return value.as_int()
    return value


def _unsupported(what: str, hint: str = ""):
    raise UnsupportedError(f"{_user_location()}{what} is not supported in an axon program" + (f"; {hint}" if hint else ""))


class Tensor:
    """A traced value. Behaves like a NumPy array whose sizes are symbolic."""

    __slots__ = ("node", "trace", "label")
    __array_priority__ = 1000  # so `ndarray op Tensor` defers to us and reports a clear error

    def __init__(self, node: Node, trace: Trace, label: Optional[str] = None):
        self.node, self.trace, self.label = node, trace, label

    # -- description ----------------------------------------------------------------------
    @property
    def shape(self) -> tuple[Size, ...]:
        return self.node.shape

    @property
    def ndim(self) -> int:
        return len(self.node.shape)

    def describe(self) -> str:
        name = self.label or ("constant" if self.node.op is Op.CONST else self.node.op.value)
        return f"{name}{format_shape(self.shape)}"

    def __repr__(self) -> str:
        return f"Tensor({self.describe()})"

    # -- operands -------------------------------------------------------------------------
    def _lift(self, value) -> "Tensor":
        if isinstance(value, Tensor):
            if value.trace is not self.trace:
                raise UnsupportedError(f"{_user_location()}tensors from two different programs are mixed")
            return value
        if isinstance(value, Real) and not isinstance(value, bool):
            return Tensor(Node(Op.CONST, (), ConstParams(_finite(value)), ()), self.trace)
        if isinstance(value, Size):
            return self.trace.size_constant(value)
        raise UnsupportedError(f"{_user_location()}operand of type {type(value).__name__} is not supported: "
                               "use Python numbers as constants and pass arrays as program inputs")

    def _binary(self, op: Op, other, symbol: str, reverse: bool = False) -> "Tensor":
        a, b = (self._lift(other), self) if reverse else (self, self._lift(other))
        return self.trace.apply(op, [a, b], what=symbol)

    def __add__(self, o): return self._binary(Op.ADD, o, "add")
    def __radd__(self, o): return self._binary(Op.ADD, o, "add", reverse=True)
    def __sub__(self, o): return self._binary(Op.SUB, o, "subtract")
    def __rsub__(self, o): return self._binary(Op.SUB, o, "subtract", reverse=True)
    def __mul__(self, o): return self._binary(Op.MUL, o, "multiply")
    def __rmul__(self, o): return self._binary(Op.MUL, o, "multiply", reverse=True)
    def __truediv__(self, o): return self._binary(Op.DIV, o, "divide")
    def __rtruediv__(self, o): return self._binary(Op.DIV, o, "divide", reverse=True)
    def __matmul__(self, o): return self._binary(Op.MATMUL, o, "matmul")
    def __rmatmul__(self, o): return self._binary(Op.MATMUL, o, "matmul", reverse=True)

    def __neg__(self): return self.trace.apply(Op.NEG, [self])
    def __pos__(self): return self

    def __pow__(self, exponent):
        if exponent == 2:
            return self.trace.apply(Op.SQUARE, [self])
        if exponent == 0.5:
            return self.trace.apply(Op.SQRT, [self])
        if exponent == -1:
            return self.trace.apply(Op.RECIPROCAL, [self])
        if exponent == -0.5:
            return self.trace.apply(Op.RSQRT, [self])
        _unsupported(f"x ** {exponent!r}", "supported exponents are 2, 0.5, -1 and -0.5")

    # -- reductions and scans -------------------------------------------------------------
    def _axes(self, axis) -> list[int]:
        if axis is None:
            return list(range(self.ndim))
        axes = list(axis) if isinstance(axis, (tuple, list)) else [axis]
        out = []
        for a in axes:
            if not isinstance(a, int) or not -self.ndim <= a < self.ndim:
                raise ShapeError(f"{_user_location()}axis {a!r} is out of range for {self.describe()}")
            if a % self.ndim in out:
                raise ShapeError(f"{_user_location()}axis {a!r} is repeated in {axis!r}")
            out.append(a % self.ndim)
        return out

    def _reduce(self, op: Op, axis, keepdims: bool) -> "Tensor":
        result = self
        for a in sorted(self._axes(axis), reverse=True):  # high axes first keeps lower numbers valid
            result = self.trace.apply(op, [result], AxisParams(a, bool(keepdims)))
        return result

    def sum(self, axis=None, keepdims: bool = False) -> "Tensor":
        return self._reduce(Op.REDUCE_SUM, axis, keepdims)

    def max(self, axis=None, keepdims: bool = False) -> "Tensor":
        return self._reduce(Op.REDUCE_MAX, axis, keepdims)

    def mean(self, axis=None, keepdims: bool = False) -> "Tensor":
        count = Size.of(1)
        for a in self._axes(axis):
            count = count * self.shape[a]
        return self.sum(axis, keepdims) / count

    def cumsum(self, axis=None) -> "Tensor":
        (a,) = self._one_axis(axis, "cumsum")
        return self.trace.apply(Op.CUMSUM, [self], AxisParams(a))

    def _one_axis(self, axis, what: str) -> list[int]:
        """[axis], checked; axis None is NumPy's flattened tensor: axis 0 of a vector, else refused."""
        if axis is None and self.ndim != 1:
            raise UnsupportedError(f"{_user_location()}{what} without an axis runs over the flattened tensor in NumPy; "
                                   f"{self.describe()} has {self.ndim} axes: give axis=")
        return self._axes(0 if axis is None else axis)

    # -- layout ---------------------------------------------------------------------------
    def transpose(self, *axes) -> "Tensor":
        if len(axes) == 1 and isinstance(axes[0], (tuple, list)):
            axes = tuple(axes[0])
        perm = tuple(a % self.ndim for a in axes) if axes else tuple(reversed(range(self.ndim)))
        return self.trace.apply(Op.TRANSPOSE, [self], TransposeParams(perm))

    @property
    def T(self) -> "Tensor":
        return self.transpose()

    def reshape(self, *shape) -> "Tensor":
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = tuple(shape[0])
        if any(isinstance(d, int) and d < 0 for d in shape):
            _unsupported("reshape with -1")
        return self.trace.apply(Op.RESHAPE, [self], ReshapeParams(tuple(Size.of(d) for d in shape)))

    def __getitem__(self, key) -> "Tensor":
        key = key if isinstance(key, tuple) else (key,)
        if sum(k is Ellipsis for k in key) > 1:
            _unsupported("more than one '...' in an index")
        named = [k for k in key if k is not None and k is not Ellipsis]
        if len(named) > self.ndim:
            raise ShapeError(f"{_user_location()}too many indices for {self.describe()}")
        if Ellipsis in key:
            at = key.index(Ellipsis)
            key = key[:at] + (slice(None),) * (self.ndim - len(named)) + key[at + 1:]
        else:
            key = key + (slice(None),) * (self.ndim - len(named))
        slices, new_shape, axis = [], [], 0
        for k in key:
            if k is None:
                new_shape.append(Size.of(1))
                continue
            if not isinstance(k, slice):
                _unsupported(f"indexing with {type(k).__name__}", "use slices, '...' and None")
            start, stop, step = (_bound(b) for b in (k.start or 0, k.stop, 1 if k.step is None else k.step))
            for v in (start, stop, step):
                if v is not None and not isinstance(v, Size) and (not isinstance(v, int) or v < 0):
                    _unsupported(f"slice bound {v!r}", "bounds must be non-negative integers or sizes "
                                 "(x.shape[1] // 2)")
            if isinstance(step, Size):
                _unsupported("a symbolic slice step")
            if step == 0:
                raise ShapeError(f"{_user_location()}slice step cannot be zero")
            slices.append((start, stop, step))
            new_shape.append(None)
            axis += 1
        result = self
        if any(s != (0, None, 1) for s in slices):
            result = self.trace.apply(Op.SLICE, [self], SliceParams(tuple(slices)), what="slice")
        if any(d is not None for d in new_shape):
            sizes = iter(result.shape)
            shape = tuple(next(sizes) if d is None else d for d in new_shape)
            result = result.trace.apply(Op.RESHAPE, [result], ReshapeParams(shape))
        return result

    # -- what a traced value cannot do ----------------------------------------------------
    def __getattr__(self, name):  # only reached for names a Tensor does not have
        if name.startswith("__"):
            raise AttributeError(name)
        _unsupported(f"tensor method .{name}", "tensors have .sum, .max, .mean, .cumsum, .transpose, .T, "
                     ".reshape, .shape, .ndim and slicing")

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        _unsupported(f"NumPy function np.{ufunc.__name__}", "use axon's function of that name (e.g. axon.exp)")

    def __array_function__(self, func, types, args, kwargs):
        _unsupported(f"NumPy function np.{func.__name__}", "use tensor methods or axon functions")

    def __bool__(self):
        _unsupported("using a traced tensor as a truth value (data-dependent control flow)")

    def __len__(self):
        _unsupported("len() of a traced tensor (use .shape)")

    def __iter__(self):
        _unsupported("iterating over a traced tensor")

    def __float__(self):
        _unsupported("converting a traced tensor to a Python number")

    __hash__ = object.__hash__  # tensors are used as dict keys by identity

    # comparisons give 1.0 / 0.0 tensors (masks for axon.where); == and != stay Python's, since
    # tensors are dict keys: use axon.equal
    def __ge__(self, o): return self._binary(Op.GE, o, "greater_equal")
    def __gt__(self, o): return self._binary(Op.GT, o, "greater")
    def __le__(self, o): return self._binary(Op.LE, o, "less_equal")
    def __lt__(self, o): return self._binary(Op.LT, o, "less")

    def __eq__(self, other):
        _unsupported("== on traced tensors", "use axon.equal(a, b)")

    __ne__ = __eq__


def _refuse(symbol: str):
    def method(self, *args, **kwargs):
        _unsupported(f"operator {symbol}")
    return method


for _name, _symbol in [("__floordiv__", "//"), ("__rfloordiv__", "//"), ("__mod__", "%"), ("__rmod__", "%"),
                       ("__abs__", "abs()"), ("__and__", "&"), ("__or__", "|"), ("__xor__", "^"),
                       ("__invert__", "~"), ("__lshift__", "<<"), ("__rshift__", ">>"), ("__rpow__", "** with a tensor exponent")]:
    setattr(Tensor, _name, _refuse(_symbol))
