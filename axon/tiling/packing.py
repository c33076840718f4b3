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

Head pairing goes one level further for an online walk (`Options.paired`) whose folded rows and
head dim fill at most half of the partitions (decode at head dim 64): two kv heads share a row
tile. Their rows are consecutive in the [.., kv/2, 1, 2*h*s, d] view of q and the output; q k^T
takes the block-diagonal [q_a 0; 0 q_b] as its stationary operand against both heads' keys on
the contraction (k_a^T over k_b^T), and exp @ v both heads' values side by side ([v_a | v_b]),
of which each head keeps its diagonal block. That each head's block is its own product
(`paired_heads_lemma`) is proved by the verifier before a pairing is offered. The Tensor Engine
does one matmul where it did two, and every instruction of the softmax covers 128 partitions
instead of 64.
"""
from __future__ import annotations

import functools
from fractions import Fraction
from typing import Mapping, Optional

from axon.errors import AxonError
from axon.ir import Graph, Node, const_node, input_node, make_node, toposort
from axon.semantics.ops import OP_SPECS, ConcatParams, Op, OpKind, SliceParams, TransposeParams
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


@functools.cache
def paired_heads_lemma():
    """The verifier's verdicts (a tuple) on what a paired row tile computes, for all sizes: the
    first / second head's block of rows of [q_a 0; 0 q_b] [k_a | k_b]^T is q_a k_a^T / q_b k_b^T,
    and the first / second head's diagonal block of [p_a; p_b] [v_a | v_b] is p_a v_a / p_b v_b."""
    from axon.verification import Verifier

    r, d, t = (Size.of(n) for n in ("r", "d", "t"))
    qa, qb, ka, kb = (input_node(n, s) for n, s in (("qa", (r, d)), ("qb", (r, d)), ("ka", (t, d)), ("kb", (t, d))))
    pa, pb, va, vb = (input_node(n, s) for n, s in (("pa", (r, t)), ("pb", (r, t)), ("va", (t, d)), ("vb", (t, d))))
    ap = lambda op, *xs, p=None: make_node(op, xs, p)  # noqa: E731
    cat = lambda axis, *xs: ap(Op.CONCAT, *xs, p=ConcatParams(axis))  # noqa: E731
    zero = lambda x: ap(Op.MUL, x, const_node(0.0))  # noqa: E731
    block = lambda x, rows, cols: ap(Op.SLICE, x, p=SliceParams((rows + (1,), cols + (1,))))  # noqa: E731
    first, second, whole = (0, r), (r, None), (0, None)
    scores = ap(Op.MATMUL, cat(0, cat(1, qa, zero(qa)), cat(1, zero(qb), qb)),
                ap(Op.TRANSPOSE, cat(1, ka, kb), p=TransposeParams((1, 0))))
    values = ap(Op.MATMUL, cat(0, pa, pb), cat(1, va, vb))
    kT = lambda k: ap(Op.TRANSPOSE, k, p=TransposeParams((1, 0)))  # noqa: E731
    claims = ((block(scores, first, whole), ap(Op.MATMUL, qa, kT(ka))),
              (block(scores, second, whole), ap(Op.MATMUL, qb, kT(kb))),
              (block(values, first, (0, d)), ap(Op.MATMUL, pa, va)),
              (block(values, second, (d, None)), ap(Op.MATMUL, pb, vb)))
    ins = (qa, qb, ka, kb, pa, pb, va, vb)
    return tuple(Verifier().check_programs(Graph(ins, (paired,)), Graph(ins, (own,))) for paired, own in claims)


def pairable(world, group, row_tile: int, sizes: Mapping[str, int], partitions: int) -> bool:
    """Whether an online walk of `group` over a folded world may pair kv heads (the module
    docstring): one row tile holds a head's rows and two fit the partitions, the kv axis (the
    batch axis outside the folded one) is even, the scores' stationary operand is an input row
    tensor read as it is, their keys a transposed input and the values an input, nothing else
    is read but constants (no positions: a row of the tile is a row of either head), each head's
    contraction and value columns at most half a tile, and the pairing lemma is proved."""
    from axon.tiling.online import online_softmax
    from axon.verification import Status

    form = online_softmax(world, group)
    if form is None or form.lead or len(world.batch) < 2 or world.batch[-1] != Size.of(1):
        return False
    c = lambda size: size.evaluate_int(sizes)  # noqa: E731
    s_mm, v_mm = form.scores.matmuls[0], form.o
    A, keys, vals = s_mm.inputs[0], s_mm.inputs[1], v_mm.inputs[1]
    leaves = {x for n in group.nodes for x in n.inputs if not x.inputs}
    if any(x.op is not Op.CONST and x not in (A, vals, keys.inputs[0]) for x in leaves) or \
            any(n.op is Op.IOTA for n in group.nodes):
        return False
    return (c(world.row) == row_tile and 2 * row_tile <= partitions and c(world.batch[-2]) % 2 == 0
            and A.op is Op.INPUT and world.roles.get(A) == "row"
            and keys.op is Op.TRANSPOSE and world.roles.get(keys) == "view" and keys.inputs[0].op is Op.INPUT
            and vals.op is Op.INPUT and world.roles.get(vals) != "row"
            and 2 * c(A.shape[-1]) <= partitions and 2 * c(vals.shape[-1]) <= partitions
            and all(v.status is Status.PROVED for v in paired_heads_lemma()))
