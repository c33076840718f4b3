"""Batch axes: a dimension along which a program is many independent programs.

A program can be evaluated in slices of a dimension only when every operator maps each index of
that dimension to the same index of what it reads: element-wise operators (broadcasting aligned
right), reductions, scans and concatenations along other axes, a matmul's batch, row or column
axis, transposes. A reduction, scan, concatenation, slice or contraction over it mixes the
slices; so do a reshape that moves it and a size or index vector that depends on it (a mean's
divisor, an arange). `positions` says, per value, which axis carries the batch index, and
`in_slices` evaluates a large program one slice of a batch axis at a time.
"""
from __future__ import annotations

import contextlib
import math
from typing import Callable, Optional, TypeVar

import numpy as np

from axon.heap import reusing_freed_memory
from axon.ir import Graph, Node, toposort
from axon.semantics.ops import OP_SPECS, Op, OpKind
from axon.semantics.sizes import Size


class _Mixed(Exception):
    """An operator reads other batch indices than the one it computes."""


def positions(graph: Graph, dim: str) -> Optional[dict[Node, Optional[int]]]:
    """Per node, the axis holding the index of `dim` (None: the value does not vary along it), or
    None when some operator mixes the indices of `dim` (module docstring)."""
    where: dict[Node, Optional[int]] = {}
    try:
        for node in toposort(graph.outputs):
            where[node] = _position(node, [where[i] for i in node.inputs], dim)
    except _Mixed:
        return None
    return where


def _mentions(size, dim: str) -> bool:
    return isinstance(size, Size) and dim in size.symbols


def _position(n: Node, ins: list, dim: str) -> Optional[int]:
    op, p = n.op, n.params
    kind = OP_SPECS[op].kind if op in OP_SPECS else None
    if op is Op.INPUT:
        axes = [i for i, d in enumerate(n.shape) if _mentions(d, dim)]
        if len(axes) > 1 or (axes and n.shape[axes[0]].as_symbol() != dim):
            raise _Mixed  # an input is sliced along one axis that is `dim` itself
        return axes[0] if axes else None
    if op is Op.CONST or op is Op.IOTA:
        if _mentions(p.value if op is Op.CONST else p.size, dim):
            raise _Mixed
        return None
    if kind is OpKind.ELEMENTWISE or op is Op.CONCAT:
        aligned = {at + n.rank - x.rank for at, x in zip(ins, n.inputs) if at is not None}
        if len(aligned) > 1 or (op is Op.CONCAT and p.axis in aligned):
            raise _Mixed
        return aligned.pop() if aligned else None
    (at,) = ins if op is not Op.MATMUL else (None,)
    if op is Op.MATMUL:
        return _matmul_position(n, ins)
    if at is None:
        if any(_mentions(d, dim) for d in n.shape):
            raise _Mixed
        return None
    if op in (Op.REDUCE_SUM, Op.REDUCE_MAX, Op.CUMSUM):
        if p.axis == at:
            raise _Mixed
        return at if op is Op.CUMSUM or p.keepdims or p.axis > at else at - 1
    if op is Op.TRANSPOSE:
        return p.perm.index(at)
    if op is Op.SLICE:
        start, stop, step = p.slices[at]
        whole = start == 0 and step == 1 and (stop is None or stop == n.inputs[0].shape[at])
        if not whole or any(_mentions(b, dim) for s in p.slices for b in s[:2]):
            raise _Mixed
        return at
    if op is Op.RESHAPE and at == 0 and n.shape and n.shape[0] == n.inputs[0].shape[0] \
            and not any(_mentions(d, dim) for d in n.shape[1:]):
        return 0
    raise _Mixed


def _matmul_position(n: Node, ins: list) -> Optional[int]:
    """a[..., m, k] @ b[..., k, n]: the batch index on a's m or b's n axis, or on a leading axis
    of either (broadcast); never on k, which the product sums over."""
    if ins == [None, None]:
        return None
    if min(x.rank for x in n.inputs) < 2:
        raise _Mixed  # a matrix-vector product: kept whole
    found = set()
    for at, x, k_axis, own_axis in ((ins[0], n.inputs[0], -1, -2), (ins[1], n.inputs[1], -2, -1)):
        if at is None:
            continue
        if at == x.rank + k_axis:
            raise _Mixed
        found.add(n.rank + own_axis if at == x.rank + own_axis else at + n.rank - x.rank)
    if len(found) > 1:
        raise _Mixed
    return found.pop() if found else None


# The largest value a float64 evaluation computes at once (64 MB). Smaller slices are faster, not
# only leaner: gqa's quick case (33.5M logits) took 20.5 s whole, 8.1 s in four slices.
REFERENCE_ELEMENTS = 1 << 23
LARGE_ELEMENTS = 1 << 20  # 8 MB: glibc maps each temporary of this size afresh (axon.heap)

Result = TypeVar("Result")


def in_slices(graph: Graph, arrays, binding, whole: Callable[[dict, dict], Result],
              join: Callable[[list, int], Result]) -> Result:
    """`whole(arrays, binding)` when the largest value of `graph` fits REFERENCE_ELEMENTS, else
    `join(parts, axis)` of it on slices of a batch axis (`batch_axis`; a slice still too large
    over slices of the next), the outputs' `axis` holding it: batch slices are independent programs
    (every operator maps batch index to batch index), so their outputs concatenate. Freed memory
    is kept for reuse where values are large (axon.heap)."""
    biggest = max(math.prod(d.evaluate_int(binding) for d in n.shape) for n in graph.nodes())
    axis = batch_axis(graph, arrays, binding) if biggest > REFERENCE_ELEMENTS else None
    if axis is None:
        with reusing_freed_memory() if biggest >= LARGE_ELEMENTS else contextlib.nullcontext():
            return whole(arrays, binding)
    dim, at, sliced = axis
    size = binding[dim]
    step = max(1, size * REFERENCE_ELEMENTS // biggest)

    def part(b: int):
        cut = {k: (np.take(v, range(b, min(b + step, size)), axis=sliced[k]) if k in sliced else v)
               for k, v in arrays.items()}
        return in_slices(graph, cut, {**binding, dim: min(step, size - b)}, whole, join)
    return join([part(b) for b in range(0, size, step)], at)


def batch_axis(graph: Graph, arrays, binding) -> Optional[tuple[str, int, dict[str, int]]]:
    """(symbol, the outputs' axis holding it, {input: its axis}) for the first of the outputs'
    leading axes (all but the last two) that is one symbol every operator keeps as a batch axis
    (a reduction over it, say, would see only its slice); else None. Programs of rank 2 stay
    whole: a slice of rows would read all of a weight again."""
    ranks = {o.rank for o in graph.outputs}
    if len(ranks) != 1:
        return None
    for at in range(ranks.pop() - 2):
        syms = {o.shape[at].as_symbol() for o in graph.outputs}
        dim = syms.pop() if len(syms) == 1 else None
        if dim is None or binding.get(dim, 1) <= 1:
            continue
        where = positions(graph, dim)
        if where is None or any(where[o] != at for o in graph.outputs):
            continue
        sliced = {n.params.name: where[n] for n in graph.inputs if where.get(n) is not None}
        if sliced and all(k in arrays for k in sliced):
            return dim, at, sliced
    return None
