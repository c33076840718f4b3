"""Rewrite candidates as closed statements: canonical form (the memo key) and readable text.

A candidate `lhs == rhs` is built over opaque operands (fresh INPUT nodes named a, b, c, ... in
order of first appearance in lhs), so a proof of it holds for every value of those operands and
every size. `canonical` also renames the symbolic dimensions d0, d1, ... in order of first
appearance, so the same move met in two programs (rmsnorm's and softmax's `(a / b) @ c`, with
dims (m, k, n) in one and (s, t, d) in another) is one query and one solver call.
"""
from __future__ import annotations

from fractions import Fraction

from axon.ir import Node, rename, toposort
from axon.semantics.ops import Op, TransposeParams, AxisParams
from axon.verification.numeric import node_dims

Constraints = frozenset  # of SizeFacts


def leaves(*nodes: Node) -> list[Node]:
    """The INPUT nodes of some terms, in order of first appearance."""
    return [n for n in toposort(nodes) if n.op is Op.INPUT]


def dim_names(*nodes: Node) -> list[str]:
    """Dimension names of every node reachable from `nodes`, in first-seen order."""
    return node_dims(toposort(nodes))


def canonical(lhs: Node, rhs: Node, constraints: Constraints = frozenset()):
    """(lhs, rhs, constraints) with dimensions renamed d0, d1, ...: equal for equal queries."""
    order = dim_names(lhs, rhs)
    names = {s: f"d{i}" for i, s in enumerate(order)}
    kept = frozenset(fact.rename(names) for fact in constraints if fact.size.symbols <= set(names))
    new_lhs, new_rhs = rename((lhs, rhs), names)
    return new_lhs, new_rhs, kept


# -- text ----------------------------------------------------------------------------------
_INFIX = {Op.ADD: "+", Op.SUB: "-", Op.MUL: "*", Op.DIV: "/", Op.MATMUL: "@"}


def term_text(node: Node, top: bool = True) -> str:
    """A term as one line of math: (a / b) @ c, sum(a, axis=1), a.T."""
    if node.op is Op.INPUT:
        return node.params.name
    if node.op is Op.CONST:
        value = node.params.value
        return str(value) if not isinstance(value, Fraction) else f"({value})"
    if node.op in _INFIX:
        text = f" {_INFIX[node.op]} ".join(term_text(i, top=False) for i in node.inputs)
        return text if top else f"({text})"
    args = [term_text(i) for i in node.inputs]
    params = node.params
    if isinstance(params, TransposeParams):
        if params.perm == tuple(reversed(range(len(params.perm)))):
            return f"{term_text(node.inputs[0], top=False)}.T"
        return f"transpose({args[0]}, {params.perm})"
    if isinstance(params, AxisParams):
        keep = "" if params.keepdims else ", keepdims=False"
        return f"{node.op.value}({args[0]}, axis={params.axis}{keep})"
    extra = "" if params is None else f", {params}"
    return f"{node.op.value}({', '.join(args)}{extra})"


def operands_text(*nodes: Node) -> str:
    """The opaque operands with their shapes: 'a(m, k), b(m, 1), c(k, n)'."""
    from axon.semantics.sizes import format_shape
    return ", ".join(f"{n.params.name}{format_shape(n.shape)}" for n in leaves(*nodes))
