"""Values that depend on positions only (`axon.arange` and what is built from it), as affine
predicates of a tile's positions.

A kernel never stores an index value: a causal mask `arange("s")[:, None] >= arange("t")[None, :]`
is a comparison of affine functions of the row and column positions, and for the tile whose rows
start at r0 and whose columns start at c0 it is

    cmp(offset + row * p + col * f, 0),  offset = row * r0 + col * c0 + const,

p the tile's partition, f its column. An instruction that evaluates such a predicate on the fly
reads the `Predicate` in place of a tile (the synthesizer sees it in memory `AFFINE`).

Invariant: shared stage; only shapes and the operators' meanings decide the coefficients, and a
form this module cannot read raises UnsupportedError (never a guess).
"""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Mapping

from axon.errors import UnsupportedError
from axon.ir import Node
from axon.semantics.algebra import const_value
from axon.semantics.ops import Op
from axon.semantics.scalar import ScalarOp
from axon.semantics.sizes import Size
from axon.synthesis.spec import AFFINE

ONE = Size.of(1)

# a comparison a - b <cmp> 0, for each comparison operator a <op> b
COMPARISONS = {Op.GE: ScalarOp.GE, Op.GT: ScalarOp.GT, Op.LE: ScalarOp.LE, Op.LT: ScalarOp.LT, Op.EQ: ScalarOp.EQ}


@dataclass(frozen=True)
class Affine:
    """sum(coef[a] * position along axis a) + const; axes counted from the last (-1: columns)."""

    coef: tuple[tuple[int, Fraction], ...]  # (axis, coefficient), non-zero coefficients only
    const: Fraction = Fraction(0)

    def of(self, axis: int) -> Fraction:
        return dict(self.coef).get(axis, Fraction(0))

    def plus(self, other: "Affine", sign: int = 1) -> "Affine":
        c = dict(self.coef)
        for a, k in other.coef:
            c[a] = c.get(a, Fraction(0)) + sign * k
        return Affine(_nonzero(c), self.const + sign * other.const)

    def times(self, k: Fraction) -> "Affine":
        return Affine(_nonzero({a: v * k for a, v in self.coef}), self.const * k)


def _nonzero(c: dict) -> tuple:
    return tuple(sorted((a, k) for a, k in c.items() if k != 0))


@dataclass(frozen=True)
class Predicate:
    """cmp(offset + row * p + col * f, 0) over a [P, width] tile; `offset` is an expression in the
    kernel's loop variables."""

    offset: str
    row: int
    col: int
    width: int
    cmp: ScalarOp


def position_memories(world, nodes) -> dict:
    """operand -> AFFINE for the index values `nodes` read (what the synthesizer must know of them)."""
    return {x: AFFINE for n in nodes for x in n.inputs if world.roles.get(x) == "index"}


def affine(node: Node, sizes: Mapping[str, int]) -> Affine:
    """The value of an index node as an affine function of its positions."""
    if node.op is Op.IOTA:
        return Affine(((-1, Fraction(1)),))
    if node.op is Op.CONST:
        return Affine((), Fraction(const_value(node.params.value, sizes)))
    if node.op is Op.RESHAPE:
        return _reshaped(affine(node.inputs[0], sizes), node.inputs[0].shape, node.shape)
    if node.op in (Op.ADD, Op.SUB):
        a, b = (affine(x, sizes) for x in node.inputs)
        return a.plus(b, 1 if node.op is Op.ADD else -1)
    if node.op is Op.NEG:
        return affine(node.inputs[0], sizes).times(Fraction(-1))
    if node.op is Op.MUL:
        a, b = node.inputs
        if b.op is Op.CONST or a.op is Op.CONST:
            k, x = (b, a) if b.op is Op.CONST else (a, b)
            return affine(x, sizes).times(Fraction(const_value(k.params.value, sizes)))
    raise UnsupportedError(f"{node.op.value} of positions (axon.arange) is not an affine function of them")


def _reshaped(a: Affine, src: tuple, dst: tuple) -> Affine:
    """A reshape that only adds or drops unit axes: the non-unit axes keep their order."""
    keep_src = [i - len(src) for i, s in enumerate(src) if s != ONE]
    keep_dst = [i - len(dst) for i, s in enumerate(dst) if s != ONE]
    if len(keep_src) != len(keep_dst):
        raise UnsupportedError("a reshape of positions (axon.arange) that is not a unit-axis view")
    move = dict(zip(keep_src, keep_dst))
    if any(a not in move for a, _ in a.coef):
        raise UnsupportedError("a reshape of positions (axon.arange) that drops an indexed axis")
    return Affine(_nonzero({move[ax]: k for ax, k in a.coef}), a.const)


def predicate(node: Node, sizes: Mapping[str, int], r0: str, c0: str, width: int) -> Predicate:
    """The comparison `node` on the tile whose rows start at r0 and columns at c0 (expressions)."""
    if node.op not in COMPARISONS:
        raise UnsupportedError(f"positions (axon.arange) used as data ({node.op.value}): only a comparison "
                               "of them can be evaluated inside a kernel, as the condition of axon.where")
    a, b = node.inputs
    d = affine(a, sizes).plus(affine(b, sizes), -1)
    if any(ax < -2 for ax, _ in d.coef):
        raise UnsupportedError("a mask over batch axes (an arange of a leading dimension) cannot be evaluated per tile")
    row, col, const = d.of(-2), d.of(-1), d.const
    if any(k.denominator != 1 for k in (row, col, const)):
        raise UnsupportedError("a mask with fractional coefficients of positions")
    row, col, const = int(row), int(col), int(const)
    return Predicate(_offset(((r0, row), (c0, col)), const), row, col, width, COMPARISONS[node.op])


def _offset(terms, const: int) -> str:
    """row * r0 + col * c0 + const, readable: 'i_r * 128 - i_nt * 512 + 3'."""
    parts = []
    for expr, k in terms:
        if k == 0 or expr == "0":
            continue
        e = expr if " " not in expr or k == 1 else f"({expr})"
        parts.append((1 if k > 0 else -1, e if abs(k) == 1 else f"{abs(k)} * {e}"))
    if const or not parts:
        parts.append((1 if const >= 0 else -1, str(abs(const))))
    text = ("-" if parts[0][0] < 0 else "") + parts[0][1]
    for sign, e in parts[1:]:
        text += (" + " if sign > 0 else " - ") + e
    return text


# --- skipping masked tiles ---------------------------------------------------------------------
# A masked score is at most this. exp(masked - row max) is then 0 in float32 (e^-104 underflows)
# for any row whose max is above MASKED_FLOOR + 104: computing only the columns a row block can
# see gives what the whole row gives, as long as every row sees a score above that (a real score
# always is; the numerical check runs the kernel on its data).
MASKED_FLOOR = -10000.0


@dataclass(frozen=True)
class Prefix:
    """A pass whose columns (symbol `dim`) beyond a row's last visible one change nothing: row r
    sees columns c <= r + reach (a causal mask)."""

    dim: str
    reach: int

    def width(self, r0: int, rows: int, full: int, quantum: int) -> int:
        """Columns the rows r0 .. r0 + rows - 1 need, in whole quanta: all of them where a row
        of the block sees none (its softmax is uniform over every column)."""
        if r0 + self.reach < 0:
            return full
        need = r0 + rows + self.reach
        return min(full, -(-need // quantum) * quantum)

    def whole_tiles(self, r0: int, tile: int) -> int:
        """Leading column tiles of `tile` columns that every row r >= r0 sees whole (the mask
        keeps each of their positions): the last column of tile i is i * tile + tile - 1."""
        return max(0, (r0 + self.reach + 1) // tile)


def masked_prefix(world, group, sizes: Mapping[str, int], stored=frozenset()) -> "Prefix | None":
    """The Prefix of a pass that masks with where(causal mask, scores, masked) and only reduces the
    masked row through a softmax (max, exp(x - max), sums, products into a contraction over the
    columns), or None. Values beyond the prefix are followed through the pass: LOW (a masked score,
    or one minus the row max), ZERO (exp of LOW, products and quotients of ZERO); a reduction or
    contraction over the columns of LOW or ZERO values is unaffected; anything else reading them,
    or a stored value over the columns, leaves the pass as it is."""
    from axon.semantics.ops import OP_SPECS, OpKind

    wheres = [n for n in group.nodes if n.op is Op.WHERE and world.roles.get(n.inputs[0]) == "index"]
    if len(wheres) != 1:
        return None
    w = wheres[0]
    mask, x, masked = w.inputs
    if masked.op is not Op.CONST or const_value(masked.params.value, sizes) > MASKED_FLOOR:
        return None
    try:
        p = predicate(mask, sizes, "0", "0", 1)
    except UnsupportedError:
        return None
    if p.row != 1 or p.col != -1 or p.cmp not in (ScalarOp.GE, ScalarOp.GT):
        return None
    dim = w.shape[-1].as_symbol()
    if dim is None or dim in world.row.symbols or any(dim in b.symbols for b in world.batch):
        return None
    wide = lambda n: dim in n.shape[-1].symbols
    if any(i.op is Op.CONST and isinstance(i.params.value, Size) and dim in i.params.value.symbols
           for n in group.nodes for i in n.inputs):
        return None  # a constant of the column count (a mean's divisor) would see the prefix's
    state = {w: "LOW"}
    for n in group.nodes:
        if n is w:
            continue
        kinds = [state.get(i) for i in n.inputs]
        if not any(kinds):
            continue
        spec = OP_SPECS[n.op]
        if spec.kind is OpKind.REDUCE and n.params.axis == n.inputs[0].rank - 1 and \
                (n.op is Op.REDUCE_MAX and kinds[0] == "LOW" or n.op is Op.REDUCE_SUM and kinds[0] == "ZERO"):
            continue  # the max of a row with its masked scores, a sum of zeros: unaffected
        if n.op is Op.MATMUL and kinds == ["ZERO", None]:
            continue  # the contraction over the columns: zero terms
        if n.op is Op.SUB and kinds == ["LOW", None] and not wide(n.inputs[1]):
            state[n] = "LOW"  # a masked score minus the row's max
        elif n.op is Op.EXP and kinds == ["LOW"]:
            state[n] = "ZERO"
        elif n.op in (Op.MUL, Op.DIV) and kinds[0] == "ZERO" and kinds[1:] == [None] * (len(kinds) - 1):
            state[n] = "ZERO"
        elif n.op is Op.MUL and kinds == [None, "ZERO"]:
            state[n] = "ZERO"
        else:
            return None
    members = set(group.nodes)
    if any(wide(n) and n in set(stored) | set(world.graph.outputs) for n in members):
        return None  # a stored value over the columns
    users = {n: [u for u in group.nodes if n in u.inputs] for n in members}
    feeding = set()  # what only the masked scores are computed from
    for n in reversed(group.nodes):
        if users[n] and all(u in feeding or (u is w and n is x) for u in users[n]):
            feeding.add(n)
    if any(wide(n) and n not in state and n not in feeding for n in members):
        return None  # a wide value that is not the masked row's
    return Prefix(dim, int(p.offset) - (1 if p.cmp is ScalarOp.GT else 0))
