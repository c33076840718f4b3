"""Tensor operators: one specification per operator, interpreted by every stage.

Each `OpSpec` states, once:
  * `shape(in_shapes, params)`: the precondition and shape rule over symbolic sizes (raises
    ShapeError naming the mismatch);
  * `constraints(in_shapes, params)`: the `SizeFact`s the operator needs of the sizes (a strided
    slice needs its axis divisible by the step, a constant stop needs the axis to reach it);
  * `element(alg, read, idx, in_shapes, params)`: the element-level meaning, an index map plus a
    scalar function, written against an abstract algebra (see algebra.py) so that the same text
    yields concrete numbers (tests) and SMT terms (verification);
  * `numpy(args, params, out_shape)`: the vectorised NumPy reference, checked against `element` by a test
    that walks this table.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Callable, Optional, Union

import numpy as np

from axon.errors import ShapeError
from axon.semantics.scalar import SCALAR_SPECS, ScalarOp
from axon.semantics.sizes import Shape, Size, SizeFact, format_shape


class OpKind(enum.Enum):
    LEAF = "leaf"
    ELEMENTWISE = "elementwise"
    REDUCE = "reduce"
    SCAN = "scan"
    CONTRACTION = "contraction"
    LAYOUT = "layout"


# The operators: leaves, one element-wise operator per scalar operation (named as it is: the scalar
# table is their one list), and the structural operators.
Op = enum.Enum("Op", [
    ("INPUT", "input"), ("CONST", "const"),
    *[(s.name, s.value) for s in ScalarOp],
    ("IOTA", "arange"),  # the index vector of a dimension (axon.arange)
    ("REDUCE_SUM", "sum"), ("REDUCE_MAX", "max"), ("CUMSUM", "cumsum"), ("MATMUL", "matmul"),
    ("TRANSPOSE", "transpose"), ("SLICE", "slice"), ("RESHAPE", "reshape"), ("CONCAT", "concatenate"),
], module=__name__, qualname="Op")


# --- parameters, one frozen record per operator family ------------------------------------
@dataclass(frozen=True)
class InputParams:
    name: str


@dataclass(frozen=True)
class ConstParams:
    value: Union[int, float, Fraction, Size]  # a number, or a symbolic size such as k (for mean)


@dataclass(frozen=True)
class IotaParams:
    size: Size  # the dimension whose indices 0, 1, ..., size - 1 are the values


@dataclass(frozen=True)
class AxisParams:
    axis: int  # non-negative
    keepdims: bool = True


@dataclass(frozen=True)
class TransposeParams:
    perm: tuple[int, ...]


@dataclass(frozen=True)
class SliceParams:
    # per axis: (start, stop or None for "to the end", step); all non-negative, step >= 1; a bound
    # may be a symbolic Size (x[:, :k/2]), with step 1
    slices: tuple[tuple[Union[int, Size], Union[int, Size, None], int], ...]

    @property
    def symbolic(self) -> bool:
        return any(isinstance(b, Size) for start, stop, _ in self.slices for b in (start, stop))

    def bound(self, binding) -> "SliceParams":
        """The same slice with symbolic bounds evaluated (what the NumPy reference indexes with)."""
        value = lambda b: b.evaluate_int(binding) if isinstance(b, Size) else b  # noqa: E731
        return SliceParams(tuple((value(a), value(b), c) for a, b, c in self.slices))


@dataclass(frozen=True)
class ConcatParams:
    axis: int  # non-negative


@dataclass(frozen=True)
class ReshapeParams:
    shape: Shape


Params = Any
Read = Callable[[int, tuple], Any]  # read(operand number, index tuple) -> scalar term


@dataclass(frozen=True)
class OpSpec:
    op: Op
    kind: OpKind
    arity: int
    shape: Callable[[tuple[Shape, ...], Params], Shape]
    element: Callable[..., Any]
    numpy: Callable[[list[np.ndarray], Params, tuple[int, ...]], np.ndarray]  # (args, params, bound out shape)
    scalar: Optional[ScalarOp] = None
    constraints: Callable[[tuple[Shape, ...], Params], tuple[SizeFact, ...]] = lambda shapes, p: ()
    takes_part: bool = False  # its value is a part of its operand's (a slice)
    joins: bool = False  # its value is its operands' side by side (a concatenation)


# --- shape rules ---------------------------------------------------------------------------
ONE = Size.of(1)


def broadcast_shapes(a: Shape, b: Shape) -> Shape:
    """NumPy broadcasting over symbolic sizes: equal sizes, or one of them is literally 1."""
    rank = max(len(a), len(b))
    pa = (ONE,) * (rank - len(a)) + a
    pb = (ONE,) * (rank - len(b)) + b
    out = []
    for da, db in zip(pa, pb):
        if da == db or db == ONE:
            out.append(da)
        elif da == ONE:
            out.append(db)
        else:
            raise ShapeError(f"cannot broadcast shapes {format_shape(a)} and {format_shape(b)}: {da} vs {db}")
    return tuple(out)


def broadcast_index(idx: tuple, in_shape: Shape, out_shape: Shape) -> tuple:
    """Index into an operand of `in_shape` broadcast to `out_shape`: broadcast axes read index 0."""
    offset = len(out_shape) - len(in_shape)
    return tuple(0 if (d == ONE and out_shape[offset + j] != ONE) else idx[offset + j] for j, d in enumerate(in_shape))


def _elementwise_shape(shapes, params):
    out = shapes[0]
    for s in shapes[1:]:
        out = broadcast_shapes(out, s)
    return out


def _reduce_shape(shapes, p: AxisParams):
    (s,) = shapes
    _check_axis(p.axis, len(s))
    return s[: p.axis] + ((ONE,) if p.keepdims else ()) + s[p.axis + 1:]


def _check_axis(axis, rank):
    if not 0 <= axis < rank:
        raise ShapeError(f"axis {axis} is out of range for a rank-{rank} tensor")


def _scan_shape(shapes, p: AxisParams):
    _check_axis(p.axis, len(shapes[0]))
    return shapes[0]


def _matmul_shape(shapes, params):
    a, b = shapes
    if len(a) < 2 or len(b) < 2:
        raise ShapeError(f"matmul needs operands of rank >= 2, got {format_shape(a)} @ {format_shape(b)}")
    if a[-1] != b[-2]:
        raise ShapeError(
            f"matmul contraction mismatch: {format_shape(a)} @ {format_shape(b)} contracts {a[-1]} with {b[-2]}")
    batch = broadcast_shapes(a[:-2], b[:-2])
    return batch + (a[-2], b[-1])


def _transpose_shape(shapes, p: TransposeParams):
    (s,) = shapes
    if sorted(p.perm) != list(range(len(s))):
        raise ShapeError(f"transpose axes {p.perm} are not a permutation of a rank-{len(s)} tensor's axes")
    return tuple(s[j] for j in p.perm)


def _slice_extent(size: Size, start, stop, step: int) -> Size:
    if isinstance(start, Size) or isinstance(stop, Size):
        if step != 1:
            raise ShapeError("a slice with a symbolic bound must have step 1")
        return (size if stop is None else Size.of(stop)) - Size.of(start)
    if stop is not None:
        # a literal axis clips as NumPy does; a symbolic one must reach the stop (a SizeFact
        # recorded by `_slice_constraints`), so the extent is the same at every size the program takes
        bound = size.as_int()
        if bound is not None:
            stop = min(stop, bound)
        return Size.of(max(0, -(-(stop - start) // step)))
    concrete = size.as_int()
    if concrete is not None:
        return Size.of(max(0, -(-(concrete - start) // step)))
    # symbolic: ceil((size - start) / step) = size/step + ceil(-start/step), exact when step | size
    return size.divide(step) + Size.of(-(start // step))


def _slice_shape(shapes, p: SliceParams):
    (s,) = shapes
    if len(p.slices) != len(s):
        raise ShapeError(f"slice gives {len(p.slices)} axes for a rank-{len(s)} tensor")
    out = []
    for size, (start, stop, step) in zip(s, p.slices):
        extent = _slice_extent(size, start, stop, step)
        if extent.as_int() is not None and extent.as_int() <= 0:
            raise ShapeError(f"slice {start}:{stop}:{step} of an axis of size {size} is empty")
        out.append(extent)
    return tuple(out)


def _slice_constraints(shapes, p: SliceParams):
    """start:stop:step of a symbolic axis k: with a constant stop, k must hold the last index read
    (NumPy would clip at a smaller k and change the shape); open-ended with step > 1, step | k
    (the extent k/step + c is exact only then)."""
    (s,) = shapes
    facts = []
    for size, (start, stop, step) in zip(s, p.slices):
        if isinstance(start, Size) or isinstance(stop, Size):
            facts += _symbolic_slice_facts(size, start, stop)
            continue
        if size.as_int() is not None:
            continue
        if stop is not None:  # the axis must hold the last index read: start + step * (extent - 1)
            last = start + step * (_slice_extent(Size.of(stop), start, stop, step).as_int() - 1)
            if last + 1 > 1:
                facts.append(SizeFact(size, minimum=last + 1))
        elif stop is None and step > 1:
            facts.append(SizeFact(size, divisor=step))
    return tuple(facts)


def _symbolic_slice_facts(size: Size, start, stop) -> list[SizeFact]:
    """start:stop with a symbolic bound: integer bounds (k/2 needs k even), a start at 0 or after,
    a non-empty extent, and a stop inside the axis. Python clips a stop past the axis and counts
    a negative start from the end, so the extent is stop - start only where these hold; a bound
    that breaks one at every size is an error."""
    begin, end = Size.of(start), size if stop is None else Size.of(stop)
    facts = [f for b in (begin, end) if (f := b.integral()) is not None]
    for fact, broken in ((SizeFact(begin, minimum=0), f"the start {begin} is negative"),
                         (SizeFact(end - begin, minimum=1), f"{begin}:{end} is empty"),
                         (SizeFact(size - end, minimum=0), f"the stop {end} lies past the axis of {size}")):
        if fact.size.is_constant:
            if fact.size.constant < fact.minimum:
                raise ShapeError(f"slice {begin}:{end} of an axis of {size}: {broken} at every size "
                                 "(Python would clip or wrap it; write the bounds inside the axis)")
        elif fact.bounded:
            facts.append(fact)
    return facts


def _concat_shape(shapes, p: ConcatParams):
    a, b = shapes
    if len(a) != len(b):
        raise ShapeError(f"concatenate needs operands of one rank, got {format_shape(a)} and {format_shape(b)}")
    _check_axis(p.axis, len(a))
    for j, (da, db) in enumerate(zip(a, b)):
        if j != p.axis and da != db:
            raise ShapeError(f"concatenate along axis {p.axis}: {format_shape(a)} and {format_shape(b)} differ "
                             f"on axis {j} ({da} vs {db})")
    return a[:p.axis] + (a[p.axis] + b[p.axis],) + a[p.axis + 1:]


def _product(shape: Shape) -> Size:
    total = ONE
    for d in shape:
        total = total * d
    return total


def _reshape_shape(shapes, p: ReshapeParams):
    (s,) = shapes
    if _product(s) != _product(p.shape):
        raise ShapeError(f"cannot reshape {format_shape(s)} into {format_shape(p.shape)}: sizes differ")
    return p.shape


# --- element-level meanings ----------------------------------------------------------------
def _elementwise_element(scalar: ScalarOp):
    def element(alg, read, idx, shapes, params):
        out_shape = _elementwise_shape(shapes, params)
        args = [read(i, broadcast_index(idx, s, out_shape)) for i, s in enumerate(shapes)]
        return alg.apply(scalar, *args)

    return element


def _where_element(alg, read, idx, shapes, params):
    # only the chosen branch is read: an operation's domain (log's argument > 0, a divisor != 0)
    # matters in a branch only where the condition selects it
    out_shape = _elementwise_shape(shapes, params)
    c, a, b = (lambda k=k, s=s: read(k, broadcast_index(idx, s, out_shape)) for k, s in enumerate(shapes))
    return alg.select(c(), a, b)


def _reduce_element(combine: ScalarOp):
    def element(alg, read, idx, shapes, p: AxisParams):
        (s,) = shapes
        outer = idx[: p.axis]
        inner = idx[p.axis + 1:] if p.keepdims else idx[p.axis:]
        return alg.fold(combine, alg.size(s[p.axis]), lambda r: read(0, outer + (r,) + inner))

    return element


def _cumsum_element(alg, read, idx, shapes, p: AxisParams):
    # out[.., i, ..] = sum_{r <= i} x[.., r, ..]: a fold whose extent is the index itself
    return alg.fold(ScalarOp.ADD, idx[p.axis] + 1, lambda r: read(0, idx[: p.axis] + (r,) + idx[p.axis + 1:]))


def _matmul_element(alg, read, idx, shapes, params):
    a, b = shapes
    batch_shape = _matmul_shape(shapes, params)[:-2]
    batch, i, j = idx[:-2], idx[-2], idx[-1]
    ia = broadcast_index(batch, a[:-2], batch_shape)
    ib = broadcast_index(batch, b[:-2], batch_shape)
    return alg.fold(ScalarOp.ADD, alg.size(a[-1]),
                    lambda r: alg.apply(ScalarOp.MUL, read(0, ia + (i, r)), read(1, ib + (r, j))))


def _transpose_element(alg, read, idx, shapes, p: TransposeParams):
    src = [None] * len(p.perm)
    for j, axis in enumerate(p.perm):
        src[axis] = idx[j]
    return read(0, tuple(src))


def _slice_element(alg, read, idx, shapes, p: SliceParams):
    return read(0, tuple((alg.size(start) if isinstance(start, Size) else start) + step * i
                         for i, (start, _, step) in zip(idx, p.slices)))


def _concat_element(alg, read, idx, shapes, p: ConcatParams):
    # out[.., i, ..] = a[.., i, ..] for i < A, else b[.., i - A, ..]: only the branch taken is read
    i, extent = idx[p.axis], alg.size(shapes[0][p.axis])
    return alg.branch(i, extent, lambda: read(0, idx),
                      lambda: read(1, idx[:p.axis] + (i - extent,) + idx[p.axis + 1:]))


def _reshape_element(alg, read, idx, shapes, p: ReshapeParams):
    (s,) = shapes
    if [d for d in s if d != ONE] == [d for d in p.shape if d != ONE]:
        # only unit axes inserted or removed: the index map is a plain renumbering
        kept = iter([i for i, d in zip(idx, p.shape) if d != ONE])
        return read(0, tuple(0 if d == ONE else next(kept) for d in s))
    linear = 0
    for i, d in zip(idx, p.shape):
        linear = linear * alg.size(d) + i
    src = []
    for d in reversed(s):
        src.append(alg.mod(linear, alg.size(d)))
        linear = alg.floordiv(linear, alg.size(d))
    return read(0, tuple(reversed(src)))


def _const_element(alg, read, idx, shapes, p: ConstParams):
    return alg.const(p.value)


def _iota_element(alg, read, idx, shapes, p: IotaParams):
    return alg.const(0) + idx[0]  # an index used as a value


def _input_element(alg, read, idx, shapes, p):
    raise TypeError("inputs have no element rule: the interpreter reads them")


# --- NumPy references ----------------------------------------------------------------------
def _numpy_slice(args, p: SliceParams, out):
    return args[0][tuple(slice(start, stop, step) for start, stop, step in p.slices)]


def concrete_params(params, binding):
    """An operator's parameters as its NumPy reference reads them: symbolic slice bounds evaluated."""
    return params.bound(binding) if isinstance(params, SliceParams) and params.symbolic else params


def _numpy_reshape(args, p: ReshapeParams, out: tuple[int, ...]):
    return np.reshape(args[0], out)


def _spec_elementwise(op: Op, scalar: ScalarOp) -> OpSpec:
    fn = SCALAR_SPECS[scalar].numpy
    element = _where_element if scalar is ScalarOp.WHERE else _elementwise_element(scalar)
    return OpSpec(op, OpKind.ELEMENTWISE, SCALAR_SPECS[scalar].arity, _elementwise_shape,
                  element, lambda args, p, out: fn(*args), scalar=scalar)


OP_SPECS: dict[Op, OpSpec] = {
    spec.op: spec
    for spec in [
        OpSpec(Op.INPUT, OpKind.LEAF, 0, lambda shapes, p: (), _input_element, lambda args, p, out: None),
        OpSpec(Op.CONST, OpKind.LEAF, 0, lambda shapes, p: (), _const_element, lambda args, p, out: None),
        OpSpec(Op.IOTA, OpKind.LEAF, 0, lambda shapes, p: (p.size,), _iota_element,
               lambda args, p, out: np.arange(out[0], dtype=np.float64)),
        *[_spec_elementwise(Op[s.name], s) for s in ScalarOp],
        OpSpec(Op.REDUCE_SUM, OpKind.REDUCE, 1, _reduce_shape, _reduce_element(ScalarOp.ADD),
               lambda args, p, out: np.sum(args[0], axis=p.axis, keepdims=p.keepdims), scalar=ScalarOp.ADD),
        OpSpec(Op.REDUCE_MAX, OpKind.REDUCE, 1, _reduce_shape, _reduce_element(ScalarOp.MAXIMUM),
               lambda args, p, out: np.max(args[0], axis=p.axis, keepdims=p.keepdims), scalar=ScalarOp.MAXIMUM),
        OpSpec(Op.CUMSUM, OpKind.SCAN, 1, _scan_shape, _cumsum_element,
               lambda args, p, out: np.cumsum(args[0], axis=p.axis), scalar=ScalarOp.ADD),
        OpSpec(Op.MATMUL, OpKind.CONTRACTION, 2, _matmul_shape, _matmul_element,
               lambda args, p, out: np.matmul(args[0], args[1])),
        OpSpec(Op.TRANSPOSE, OpKind.LAYOUT, 1, _transpose_shape, _transpose_element,
               lambda args, p, out: np.transpose(args[0], p.perm)),
        OpSpec(Op.SLICE, OpKind.LAYOUT, 1, _slice_shape, _slice_element, _numpy_slice,
               constraints=_slice_constraints, takes_part=True),
        OpSpec(Op.RESHAPE, OpKind.LAYOUT, 1, _reshape_shape, _reshape_element, _numpy_reshape),
        OpSpec(Op.CONCAT, OpKind.LAYOUT, 2, _concat_shape, _concat_element,
               lambda args, p, out: np.concatenate(args, axis=p.axis), joins=True),
    ]
}

ELEMENTWISE_OF_SCALAR: dict[ScalarOp, Op] = {s: Op[s.name] for s in ScalarOp}
