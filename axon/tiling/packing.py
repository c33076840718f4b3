"""Row packing: several consecutive rows per partition, for passes whose operators are row-local
element-wise.

A program over [m, c] tensors whose every operator is element-wise (operands of one shape, or
scalar constants) or a last-axis strided slice of whole rows computes the same values on the
[m/g, g*c] views of its tensors: row r' of a view is rows r'g .. r'g+g-1 one after another, an
element-wise operator does not care, and a slice start::step of a row whose width is a multiple
of step picks, from the concatenation, the concatenation of what it picks from each row. So a
kernel may read and write its HBM tensors through such views (free reshapes) and keep the DMAs
wide when rows are short (RoPE with 64-pair heads moves 256-byte rows otherwise).

`pack_rows(graph, g)` gives the graph over the views (its row count a fresh symbol, since m/g is
not a size at every m) and that symbol, or None when the program is not of that kind;
`pack_factors` the factors worth trying at concrete sizes.

Head folding is the same idea one level up: in attention with grouped query heads, q and the
output are [.., h, s, d] and K and V are the same for every h (size 1 on that axis). Row i of head
j does exactly what row j*s + i of one [.., 1, h*s, d] tensor would, since every operator is
row-local or a matmul whose right operand does not depend on h; `fold_heads(graph)` gives the
graph over those views (free reshapes of the HBM tensors), so decode attention's few query rows
per head fill the partitions together, against one load of each kv head.
"""
from __future__ import annotations

from fractions import Fraction
from typing import Mapping, Optional

from axon.errors import AxonError
from axon.ir import Graph, Node, input_node, make_node, toposort
from axon.semantics.ops import OP_SPECS, Op, OpKind
from axon.semantics.sizes import Size
from axon.tiling.space import strided_columns

NARROW_ROW = 2048  # elements: rows at least this wide already make wide DMAs


def pack_rows(graph: Graph, g: int) -> Optional[tuple[Graph, dict]]:
    """(the graph over the [m/g, g*c] views, {new symbol: (old symbol, multiplier)}): the views'
    sizes are fresh symbols (m/g rows; a width k*s becomes k*S with S = g*s), so every size stays
    an integer polynomial for the synthesizer and the prover."""
    rows = {n.shape[0] for n in graph.inputs + graph.outputs if n.rank == 2}
    if len(rows) != 1 or any(n.rank != 2 for n in graph.inputs + graph.outputs):
        return None
    (m,) = rows
    symbols: dict = {}
    row = _rescaled(m, g, symbols, rows=True)
    packed: dict[Node, Node] = {}
    for n in toposort(graph.outputs):
        if n.op is Op.INPUT:
            width = _rescaled(n.shape[1], g, symbols, rows=False)
            if row is None or width is None:
                return None
            packed[n] = input_node(n.params.name, (row, width))
        elif n.op is Op.CONST and n.rank == 0:
            packed[n] = n
        elif _row_local(n):
            packed[n] = make_node(n.op, [packed[x] for x in n.inputs], n.params)
        else:
            return None
    return Graph(tuple(packed[n] for n in graph.inputs), tuple(packed[n] for n in graph.outputs),
                 graph.constraints), symbols


def _rescaled(size: Size, g: int, symbols: dict, rows: bool) -> Optional[Size]:
    """k*s as k*S for a fresh symbol S (s/g for rows, g*s for widths); a constant width times g."""
    if rows or size.terms[0][0]:
        if len(size.terms) != 1 or len(size.terms[0][0]) != 1:
            return None
        (s,), k = size.terms[0]
        if rows and k != 1:
            return None
        new = f"{s}_by{g}" if rows else f"{s}_x{g}"
        symbols[new] = (s, Fraction(1, g) if rows else g)
        return Size.of(new) * k
    return size * g


def packed_sizes(symbols: dict, sizes: Mapping[str, int]) -> dict[str, int]:
    """The concrete sizes of a packed graph: the program's, and its views' symbols."""
    return {**sizes, **{new: int(sizes[old] * k) for new, (old, k) in symbols.items()}}


def _row_local(n: Node) -> bool:
    if n.rank != 2 or any(x.rank == 2 and x.shape[0] != n.shape[0] for x in n.inputs):
        return False
    if OP_SPECS[n.op].kind is OpKind.ELEMENTWISE:
        return all(x.rank == 0 or x.shape == n.shape for x in n.inputs)
    if n.op is Op.SLICE:
        return strided_columns(n)
    return False


def pack_factors(graph: Graph, sizes: Mapping[str, int], partitions: int) -> list[int]:
    """Rows per partition worth trying: the views' rows fill one or two partition tiles, when
    the program's rows are narrow, its row count allows it and every width divides by its slice steps."""
    if pack_rows(graph, 1) is None:
        return []
    m = graph.inputs[0].shape[0].evaluate_int(sizes)
    widest = max(n.shape[1].evaluate_int(sizes) for n in graph.inputs)
    if widest >= NARROW_ROW:
        return []
    for n in graph.nodes():
        if n.op is Op.SLICE and n.inputs[0].shape[1].evaluate_int(sizes) % n.params.slices[1][2]:
            return []
    return [g for g in (m // partitions, m // (2 * partitions)) if g > 1 and m % (g * partitions) == 0]


def fold_heads(graph: Graph) -> Optional[Graph]:
    """The graph over [.., 1, h*s, c] views of its row tensors, h the innermost batch axis, or None
    when some value is not the same for every h (besides the row tensors), an operator is not
    row-local (element-wise, reduction or scan along the last axis, a matmul whose right operand
    is not folded), or an output is stored transposed."""
    from axon.fusion.nodes import RowWorld

    try:
        world = RowWorld.of(graph)
    except AxonError:
        return None
    ONE = Size.of(1)
    if not world.batch or world.batch[-1] == ONE:
        return None
    rank, h = len(world.batch) + 2, world.batch[-1]
    j = rank - 3
    folded: dict[Node, Node] = {}
    changed: set[Node] = set()
    for n in toposort(graph.outputs):
        full = n.rank == rank
        if n.op is Op.INPUT:
            if full and world.roles[n] == "row" and n.shape[j] == h:
                folded[n] = input_node(n.params.name, n.shape[:j] + (ONE, h * world.row, n.shape[-1]))
                changed.add(n)
            elif full and n.shape[j] != ONE:
                return None  # varies with h without being a row tensor
            else:
                folded[n] = n
            continue
        if not _folds(n, changed, rank):
            return None
        try:
            folded[n] = make_node(n.op, [folded[x] for x in n.inputs], n.params)
        except AxonError:
            return None  # e.g. a row tensor that broadcasts over h
        if any(x in changed for x in n.inputs):
            changed.add(n)
    if not all(o in changed and o.rank == rank for o in graph.outputs):
        return None
    return Graph(tuple(folded[n] for n in graph.inputs), tuple(folded[n] for n in graph.outputs),
                 graph.constraints)


def _folds(n: Node, changed: set, rank: int) -> bool:
    kind = OP_SPECS[n.op].kind
    if not any(x in changed for x in n.inputs):
        return True  # the same for every h: unchanged
    if kind is OpKind.ELEMENTWISE:
        return True
    if kind in (OpKind.REDUCE, OpKind.SCAN):
        return n.inputs[0].rank == rank and n.params.axis == rank - 1
    if n.op is Op.MATMUL:
        return n.inputs[1] not in changed
    return False
