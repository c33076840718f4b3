"""What operator propagation needs to know about an IR, as one value.

Propagation (propagation.py) is written once against a `Language`: how to build a checked term,
which operators are leaves, which operands may be permuted, how to make a fresh opaque operand,
and which operators take a part of their operand or join theirs.
`TENSOR` is the tensor IR's; the instruction-level round (the paper's second) passes its own.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from axon.ir import Node, input_node, make_node
from axon.semantics.ops import OP_SPECS, OpKind
from axon.semantics.scalar import SCALAR_SPECS
from axon.semantics.sizes import Shape


@dataclass(frozen=True)
class Language:
    make: Callable[[Any, tuple[Node, ...], Any], Node]  # (op, operands, params) -> node; raises on bad shapes
    is_leaf: Callable[[Any], bool]  # inputs and constants: nothing to propagate into
    commutative: Callable[[Any], bool]  # permuting its operands only restates commutativity
    fresh: Callable[[str, Shape], Node]  # an opaque operand of a shape (a universally quantified tensor)
    # a part of its operand (a slice): moved into a shared producer it computes only that part
    takes_part: Callable[[Any], bool] = lambda op: False
    # its operands side by side (a concatenation): a part of it may be one of them
    joins: Callable[[Any], bool] = lambda op: False


def _tensor_commutative(op) -> bool:
    spec = OP_SPECS[op]
    return spec.kind is OpKind.ELEMENTWISE and SCALAR_SPECS[spec.scalar].commutative


TENSOR = Language(
    make=lambda op, operands, params: make_node(op, operands, params),
    is_leaf=lambda op: OP_SPECS[op].kind is OpKind.LEAF,
    commutative=_tensor_commutative,
    fresh=input_node,
    takes_part=lambda op: OP_SPECS[op].takes_part,
    joins=lambda op: OP_SPECS[op].joins,
)
