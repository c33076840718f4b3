"""Patterns: an operator (or a connected group of <= 3) cut out of a graph, on 2-D tiles.

`abstract` replaces the group's external operands by INPUT nodes a0, a1, ... (numbered in order
of first use) whose shapes are tile shapes: the last two dimensions ([P, F]; leading batch
dimensions are loops the emitter owns), a rank-1 operand becoming a [1, F] row. Dimension names
are renamed d0, d1, ... in order of first appearance, as a substitution of names (so `2*h` and
`h` keep their relation), and constants (eps, a symbolic n for a mean) stay CONST nodes. Two
occurrences of the same operator on differently named sizes therefore give one pattern, which is
what makes the memo hit across benchmarks.

Invariant: the pattern's operators, parameters and shape relations are the group's own; only
names, batch dimensions and rank-1 operands' leading unit axis change.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Collection, Optional, Sequence

from axon.errors import UnsupportedError
from axon.ir import Node, input_node, make_node, toposort
from axon.semantics.ops import AxisParams, ConstParams, Op, SliceParams, TransposeParams
from axon.semantics.sizes import Size


@dataclass(frozen=True)
class Abstraction:
    pattern: Node | tuple[Node, ...]
    operands: tuple[Node, ...]  # the graph nodes bound to a0, a1, ...
    dims: tuple[tuple[str, str], ...]  # (canonical name, graph dimension name)
    batch: int  # leading dimensions dropped from the group's nodes


def _rename(size: Size, names: dict[str, str]) -> Size:
    return Size({tuple(sorted(names[s] for s in mono)): c for mono, c in size.terms})


def _tile_shape(shape: tuple) -> tuple:
    if len(shape) >= 2:
        return tuple(shape[-2:])
    if len(shape) == 1:
        return (Size.of(1), shape[0])
    raise UnsupportedError("a scalar tensor operand has no tile layout")


def _params(node: Node, drop: int):
    p = node.params
    if not drop:
        return p
    if isinstance(p, AxisParams):
        if p.axis < drop:
            raise UnsupportedError(f"{node.op.value} over a batch axis is not a tile operation")
        return AxisParams(p.axis - drop, p.keepdims)
    if isinstance(p, TransposeParams):
        if tuple(p.perm[:drop]) != tuple(range(drop)):
            raise UnsupportedError("a transpose that moves batch axes is not a tile operation")
        return TransposeParams(tuple(a - drop for a in p.perm[drop:]))
    if isinstance(p, SliceParams):
        if any(s != (0, None, 1) for s in p.slices[:drop]):
            raise UnsupportedError("a slice of a batch axis is not a tile operation")
        return SliceParams(p.slices[drop:])
    if p is None:
        return p
    raise UnsupportedError(f"{node.op.value} with batch axes has no tile form")


def abstract(outputs: Sequence[Node], group: Optional[Collection[Node]] = None) -> Abstraction:
    """The tile pattern of `group` (default: the output nodes alone) computing `outputs`."""
    outputs = tuple(outputs)
    members = set(group) if group is not None else set(outputs)
    if not set(outputs) <= members:
        raise ValueError("every output must belong to the group")
    order = [n for n in toposort(outputs) if n in members or n.op is Op.CONST or
             any(n in m.inputs for m in members)]
    operands: list[Node] = []
    for node in order:  # first use, inputs before users
        if node not in members and node.op is not Op.CONST and node not in operands:
            operands.append(node)
    names: dict[str, str] = {}
    for node in operands + [n for n in order if n.op is Op.CONST]:
        sizes = _tile_shape(node.shape) if node.op is not Op.CONST else (
            [node.params.value] if isinstance(node.params.value, Size) else [])
        for size in sizes:
            for s in sorted(size.symbols):
                names.setdefault(s, f"d{len(names)}")
    batch = max(len(n.shape) for n in members) - 2
    env: dict[Node, Node] = {}
    for i, node in enumerate(operands):
        env[node] = input_node(f"a{i}", tuple(_rename(s, names) for s in _tile_shape(node.shape)))
    for node in order:
        if node in env:
            continue
        if node.op is Op.CONST:
            v = node.params.value
            env[node] = Node(Op.CONST, (), ConstParams(_rename(v, names) if isinstance(v, Size) else v), ())
        elif node in members:
            drop = max(len(node.shape) - 2, 0)
            env[node] = make_node(node.op, [env[i] for i in node.inputs], _params(node, drop))
    built = tuple(env[o] for o in outputs)
    dims = tuple((canon, orig) for orig, canon in names.items())
    return Abstraction(built[0] if len(built) == 1 else built, tuple(operands), dims, max(batch, 0))


def pattern_nodes(pattern) -> list[Node]:
    return toposort(pattern if isinstance(pattern, tuple) else (pattern,))


def pattern_inputs(pattern) -> list[Node]:
    return sorted((n for n in pattern_nodes(pattern) if n.op is Op.INPUT), key=lambda n: int(n.params.name[1:]))


def pattern_constraints(pattern) -> frozenset:
    from axon.semantics.ops import OP_SPECS

    out = set()
    for n in pattern_nodes(pattern):
        if n.op not in (Op.INPUT, Op.CONST):
            out |= set(OP_SPECS[n.op].constraints(tuple(i.shape for i in n.inputs), n.params))
    return frozenset(out)


def operator_pattern(*shapes_and_op) -> Node:
    """A one-operator pattern on fresh INPUTs, e.g. operator_pattern(Op.MATMUL, ("m","k"), ("k","n"))."""
    op, *rest = shapes_and_op
    params = rest.pop() if rest and not isinstance(rest[-1], tuple) else None
    from axon.semantics.sizes import shape_of

    inputs = [input_node(f"a{i}", shape_of(s)) for i, s in enumerate(rest)]
    return abstract([make_node(op, inputs, params)]).pattern
