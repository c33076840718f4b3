"""Instruction specifications as data, in the frontend's operator vocabulary (target-neutral).

An `InstructionSpec` states once, for one instruction of some target: its operand slots (what each
accepts: a full [P, F] tile, a per-partition [P, 1] column, an immediate scalar, or a tile filled
with a constant; which memories it may be read from; the shape letters it shares with the other
slots), its holes (activation function, ALU operators, flags) with their domains, and its MEANING:
a function from (hole values, operand Nodes) to IR Nodes built with `make_node`. Because the
meaning is written with the same operators as the programs, the verifier proves
"operator == instruction sequence" with no extra encoding, the reference evaluator runs it, and
the basic operations an instruction contains (for pruning) are read off its meaning.

Invariant: a meaning uses only `apply`, which is `make_node` plus exact real-arithmetic identities
(x+0 -> x, x*1 -> x, transpose(transpose(x)) -> x); it raises ShapeError for a shape the
operators reject and `Inexpressible` for hole values outside the fragment the meaning covers.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Optional

from axon.ir import Node, const_node, make_node
from axon.semantics.ops import ELEMENTWISE_OF_SCALAR, OP_SPECS, AxisParams, Op, OpKind, TransposeParams
from axon.semantics.scalar import SCALAR_SPECS, ScalarOp
from axon.semantics.sizes import Size

SBUF, PSUM, HBM = "sbuf", "psum", "hbm"
# not a memory: a predicate of the tile's positions (tiling.positions), which an instruction that
# evaluates it on the fly reads in place of a tile; no other slot accepts it
AFFINE = "affine"
ON_CHIP = frozenset({SBUF, PSUM})


class Inexpressible(Exception):
    """The hole values chosen fall outside what this instruction's meaning expresses."""


class Form(enum.Enum):
    TILE = "tile"  # a [P, F] tile (a [P, 1] column is a tile too)
    COLUMN = "column"  # a [P, 1] tile broadcast along the free axis
    IMMEDIATE = "immediate"  # a compile-time scalar
    FILL = "fill"  # a tile every element of which is one constant (memset by the emitter)


@dataclass(frozen=True)
class Slot:
    name: str
    forms: frozenset
    shape: tuple = ("P", "F")  # letters shared with the instruction's other slots; COLUMN reads (shape[0], 1)
    memories: frozenset = ON_CHIP
    optional: bool = False
    hole: Optional[str] = None  # an optional slot's operator hole, None exactly when the slot is absent


@dataclass(frozen=True)
class Hole:
    name: str
    domain: tuple
    kind: str  # "func" (activation function), "alu" (binary operator), "reduce", "flag", "engine"
    of: Optional[str] = None  # a "flag" hole that only matters for a non-commutative operator in hole `of`


@dataclass(frozen=True)
class InstructionSpec:
    name: str
    engine: str
    slots: tuple[Slot, ...]
    holes: tuple[Hole, ...]
    meaning: Callable[[Mapping[str, Any], Mapping[str, Optional[Node]]], Mapping[str, Node]]
    outputs: tuple[str, ...] = ("out",)
    out_memory: Callable[[Mapping[str, Any]], str] = lambda holes: SBUF
    engines: tuple[str, ...] = ()  # engines the emitter may issue it on (default: `engine`)
    weight: float = 1.0  # relative cycles per element: orders candidates, the perf model decides
    valid: Callable[[Mapping[str, Any], Mapping[str, Any]], bool] = lambda holes, args: True
    doc: str = ""

    def slot(self, name: str) -> Slot:
        return next(s for s in self.slots if s.name == name)


@dataclass(frozen=True)
class ISA:
    """A target's instruction set: its name and instruction specifications (data only)."""

    name: str
    instructions: tuple[InstructionSpec, ...]
    extra: dict = field(default_factory=dict, compare=False)

    def __getitem__(self, name: str) -> InstructionSpec:
        for spec in self.instructions:
            if spec.name == name:
                return spec
        raise KeyError(f"ISA {self.name} has no instruction {name!r}")

    def __contains__(self, name: str) -> bool:
        return any(s.name == name for s in self.instructions)


# --- the vocabulary meanings are written in --------------------------------------------------
FREE_AXIS = AxisParams(1, True)  # tiles are [P, F]: reductions run along F and keep a [P, 1] column
SWAP = TransposeParams((1, 0))


def _is_const(node: Optional[Node], value) -> bool:
    return node is not None and node.op is Op.CONST and not isinstance(node.params.value, Size) \
        and node.params.value == value


def apply(op: Op, *args: Node, params=None) -> Node:
    """make_node, with the exact identities that keep meanings small for the solver."""
    node = make_node(op, args, params)
    if op in (Op.ADD, Op.SUB) and _is_const(args[1], 0) and args[0].shape == node.shape:
        return args[0]  # x+0 -> x, x-0 -> x
    if op is Op.ADD and _is_const(args[0], 0) and args[1].shape == node.shape:
        return args[1]  # 0+x -> x
    if op in (Op.MUL, Op.DIV) and _is_const(args[1], 1) and args[0].shape == node.shape:
        return args[0]  # x*1 -> x, x/1 -> x
    if op is Op.MUL and _is_const(args[0], 1) and args[1].shape == node.shape:
        return args[1]  # 1*x -> x
    if op is Op.TRANSPOSE and args[0].op is Op.TRANSPOSE and params == SWAP == args[0].params:
        return args[0].inputs[0]  # transpose(transpose(x)) -> x
    return node


def alu(op: ScalarOp, a: Node, b: Node, reverse: bool = False) -> Node:
    """A binary ALU operator on tensors: a <op> b, or b <op> a when `reverse`."""
    if SCALAR_SPECS[op].arity != 2:
        raise Inexpressible(f"{op.value} is not a binary operator")
    return apply(ELEMENTWISE_OF_SCALAR[op], *((b, a) if reverse else (a, b)))


def unary(op: Optional[ScalarOp], x: Node) -> Node:
    """An activation function (None: the identity, NKI's copy)."""
    if op is None:
        return x
    if SCALAR_SPECS[op].arity != 1:
        raise Inexpressible(f"{op.value} is not a unary function")
    return apply(ELEMENTWISE_OF_SCALAR[op], x)


REDUCE_OF_SCALAR = {ScalarOp.ADD: Op.REDUCE_SUM, ScalarOp.MAXIMUM: Op.REDUCE_MAX}


def reduce_free(op: ScalarOp, x: Node) -> Node:
    if op not in REDUCE_OF_SCALAR:
        raise Inexpressible(f"no tensor operator reduces with {op.value}")
    return apply(REDUCE_OF_SCALAR[op], x, params=FREE_AXIS)


# --- basic operations: what pruning compares ---------------------------------------------------
class _Collect:
    """An algebra that records the primitive scalar operations and constants a definition uses."""

    def __init__(self):
        self.ops: set[ScalarOp] = set()
        self.consts: set = set()

    def apply(self, op: ScalarOp, *args):
        spec = SCALAR_SPECS[op]
        if spec.definition is not None:
            return spec.definition(self, *args)
        self.ops.add(op)
        return None

    def const(self, value):
        self.consts.add(value)
        return None


def _expand(op: ScalarOp) -> tuple[frozenset, frozenset]:
    c = _Collect()
    c.apply(op, *([None] * SCALAR_SPECS[op].arity))
    return frozenset(c.ops), frozenset(c.consts)


SCALAR_BASICS = {op: _expand(op) for op in ScalarOp}  # immutable, computed once at import


def scalar_basics(op: ScalarOp) -> tuple[frozenset, frozenset]:
    """The primitive scalar operations and the constants of one scalar operation's definition."""
    return SCALAR_BASICS[op]


def node_scalar_ops(node: Node) -> frozenset:
    """The scalar operations one (non-leaf) node applies, before expansion."""
    spec = OP_SPECS[node.op]
    if spec.kind is OpKind.CONTRACTION:
        return frozenset({ScalarOp.MUL, ScalarOp.ADD})
    if spec.scalar is not None:
        return frozenset({spec.scalar})
    return frozenset()


def basic_ops(nodes) -> tuple[frozenset, frozenset]:
    """Primitive scalar operations and definition constants of a set of nodes (leaves ignored)."""
    ops, consts = set(), set()
    for node in nodes:
        if node.op in (Op.INPUT, Op.CONST):
            continue
        for s in node_scalar_ops(node):
            o, c = scalar_basics(s)
            ops |= o
            consts |= c
    return frozenset(ops), frozenset(consts)
