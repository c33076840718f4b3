"""Stand-in instruction lowerings for Trainium, used only while `axon.synthesis` offers none.

The synthesis stage proves, per operator pattern, which short nki.isa sequence implements it and
returns `Lowering`s of `Step`s. Until it is in the tree (or when it returns nothing for a
pattern) selection asks this table, which states the textbook lowering of each operator in the
same `Lowering`/`Step`/`Arg` form, so the emitter prints either source the same way. Every
lowering here is still checked end to end: each emitted kernel is run on the simulator against
the NumPy reference before it can be reported. `verdict_status` is "UNCHECKED" to say that no
SMT proof stands behind these (the search reports them as unknown proofs).

Invariant: this is target data (instruction names and their slots), used by `lower`, never by
a shared stage directly.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from axon.ir import Node
from axon.semantics.ops import OP_SPECS, Op, OpKind
from axon.semantics.scalar import ScalarOp
from axon.semantics.sizes import Size


@dataclass(frozen=True)
class Arg:
    kind: str  # "operand" | "step" | "const"
    index: int = 0
    value: Any = None
    transposed: bool = False


@dataclass(frozen=True)
class Step:
    instruction: str
    holes: tuple = ()  # ((name, value), ...)
    args: tuple = ()  # ((slot, Arg), ...)


@dataclass(frozen=True)
class Lowering:
    pattern: Node
    steps: tuple
    output_step: int
    verdict_status: str = "UNCHECKED"


_ACTIVATION = {Op.EXP: "exp", Op.LOG: "log", Op.SQRT: "sqrt", Op.RSQRT: "rsqrt", Op.RELU: "relu",
               Op.SIGMOID: "sigmoid", Op.SILU: "silu", Op.TANH: "tanh", Op.GELU: "gelu", Op.SQUARE: "square",
               Op.RECIPROCAL: "reciprocal"}
_ALU = {Op.ADD: "add", Op.SUB: "subtract", Op.MUL: "multiply", Op.DIV: "divide", Op.MAXIMUM: "maximum",
        Op.MINIMUM: "minimum"}
_REDUCE = {Op.REDUCE_SUM: "add", Op.REDUCE_MAX: "maximum"}


def _is_column(n: Node, other: Node) -> bool:
    return n.rank >= 1 and n.shape[-1] == Size.of(1) and other.shape[-1] != Size.of(1)


def fallback(pattern: Node) -> Optional[Lowering]:
    """The table's lowering of one operator applied to operands a0, a1 (CONST operands kept)."""
    op, ins = pattern.op, pattern.inputs
    opnd = lambda i: Arg("operand", i)
    if op in _ACTIVATION:
        steps = (Step("activation", (("op", _ACTIVATION[op]),), (("data", opnd(0)),)),)
    elif op is Op.NEG:
        steps = (Step("tensor_scalar", (("op0", "multiply"),), (("data", opnd(0)), ("operand0", Arg("const", value=-1.0)))),)
    elif op in _ALU:
        a, b = ins
        name = _ALU[op]
        if b.op is Op.CONST:
            steps = (Step("tensor_scalar", (("op0", name),), (("data", opnd(0)), ("operand0", opnd(1)))),)
        elif a.op is Op.CONST:
            steps = (Step("tensor_scalar", (("op0", name), ("reverse0", True)), (("data", opnd(1)), ("operand0", opnd(0)))),)
        elif _is_column(b, a):
            steps = (Step("tensor_scalar", (("op0", name),), (("data", opnd(0)), ("operand0", opnd(1)))),)
        elif _is_column(a, b):
            steps = (Step("tensor_scalar", (("op0", name), ("reverse0", True)), (("data", opnd(1)), ("operand0", opnd(0)))),)
        else:
            steps = (Step("tensor_tensor", (("op", name),), (("data1", opnd(0)), ("data2", opnd(1)))),)
    elif op in _REDUCE:
        steps = (Step("tensor_reduce", (("op", _REDUCE[op]), ("axis", 1), ("keepdims", True)), (("data", opnd(0)),)),)
    elif op is Op.CUMSUM:
        steps = (Step("tensor_tensor_scan", (("op0", "multiply"), ("op1", "add"), ("initial", 0.0)),
                      (("data0", Arg("const", value=1.0)), ("data1", opnd(0)))),)
    elif op is Op.MATMUL:
        steps = (Step("nc_matmul", (), (("stationary", Arg("operand", 0, transposed=True)), ("moving", opnd(1)))),)
    elif op is Op.TRANSPOSE:
        steps = (Step("nc_transpose", (), (("data", opnd(0)),)),)
    else:
        return None
    return Lowering(pattern, steps, len(steps) - 1)
