"""Trainium (NKI) instruction specifications, as data: slots, holes and meanings.

Each meaning restates the nki.isa docstring's formula in the frontend's operator vocabulary
(sources: nki.isa docstrings at docs tag v2.26.0 and later; see shared/trainium.md):
  nc_matmul            stationary.T @ moving                                     (Tensor, out PSUM)
  nc_transpose         data.T                                   (Tensor -> PSUM, or Vector -> SBUF)
  activation           func(data * scale + bias); scale immediate or column, bias column or immediate;
                       func is spelled nl.<ACT_FUNC_NAMES[func]> (gelu: nl.gelu_apprx_tanh, not nl.gelu)
  activation_reduce    as activation, and reduce_res = sum(out, free axis)   (v2: reduce_op add only)
  tensor_scalar        (data <op0> operand0) <op1> operand1, operands column or immediate, reverse flags
  tensor_tensor        data1 <op> data2, same shapes
  scalar_tensor_tensor (data <op0> operand0) <op1> operand1, operand0 column/immediate, operand1 a tile
  tensor_scalar_reduce data <op0> operand0, and its reduction along the free axis
  tensor_reduce        reduce_op(data, free axis), negated when `negate`
  tensor_tensor_scan   r[i] = (data0[i] <op0> r[i-1]) <op1> data1[i], r[-1] = initial: expressed
                       here for op0 = op1 = add (initial + cumsum(data0 + data1)) and for
                       op0 = multiply with data0 = 1 (initial + cumsum(data1)); other hole
                       values are outside the fragment (Inexpressible)
  affine_select        where(pred, on_true_tile, on_false_value), pred an affine comparison of the
                       tile's positions evaluated on the fly; on_false_value an f32 immediate (GpSimd)
  select               where(pred, on_true, on_false), pred non-zero: three instructions, the
                       predicate as uint8 (pred != 0), a copy, tensor_copy_predicated   (Vector)
  reciprocal           1 / data                                                      (Vector)
  tensor_copy          data                                                (Vector/Scalar/GpSimd)
  dma_copy             src, between HBM and SBUF                                        (DMA)
  dma_transpose        src.T, from HBM or SBUF (NeuronCore-v3 only)                         (DMA)
Weights are relative cycles per element from the cost table (shared/trainium.md) and order
candidates only; `lowering_cost` is the estimate in cycles that reads hardware.py.

Invariant: this module is data about Trainium; the search that uses it lives in axon/synthesis and
never names a Trainium instruction.
"""
from __future__ import annotations

from typing import Mapping

from axon.semantics.ops import AxisParams, Op
from axon.semantics.scalar import SCALAR_SPECS, ScalarOp
from axon.synthesis.lowering import arg_key
from axon.synthesis.spec import (AFFINE, HBM, ISA, PSUM, SBUF, SWAP, Form, Hole, Inexpressible, InstructionSpec, Slot, alu,
                                 apply, reduce_free, unary)
from axon.targets.trainium.hardware import TRN1, TRN2, HardwareDescription

S = ScalarOp
TILE, COLUMN, IMM, FILL = (frozenset({f}) for f in (Form.TILE, Form.COLUMN, Form.IMMEDIATE, Form.FILL))
COL_OR_IMM = COLUMN | IMM

# Activation functions (nki "Supported Activation Functions"), each with the nki.language name
# that computes it; None is nl.copy / identity. The name is part of the meaning: nl.gelu is the
# erf form, and Axon's gelu is the tanh approximation, which NKI calls nl.gelu_apprx_tanh.
ACT_FUNC_NAMES = {None: "copy", S.EXP: "exp", S.LOG: "log", S.SQRT: "sqrt", S.RSQRT: "rsqrt",
                  S.RECIPROCAL: "reciprocal", S.SQUARE: "square", S.RELU: "relu", S.SIGMOID: "sigmoid",
                  S.SILU: "silu", S.TANH: "tanh", S.GELU: "gelu_apprx_tanh"}
ACT_FUNCS = tuple(ACT_FUNC_NAMES)
# Arithmetic ALU operators of the Vector engine that have a tensor-level meaning ("Supported Math
# Operators for NKI ISA"), with their nki.language names.
ALU_OP_NAMES = {S.ADD: "add", S.SUB: "subtract", S.MUL: "multiply", S.DIV: "divide", S.MAXIMUM: "maximum",
                S.MINIMUM: "minimum", S.GE: "greater_equal", S.GT: "greater", S.LE: "less_equal", S.LT: "less",
                S.EQ: "equal"}
ALU_OPS = tuple(ALU_OP_NAMES)
NO_OP = (None,)
NKI_NAMES = {**ALU_OP_NAMES, **ACT_FUNC_NAMES}  # every hole operator -> its nl.<name>


def nki_name(op) -> str:
    """The nki.language name of an activation function or ALU operator a hole may hold."""
    if op not in NKI_NAMES:
        raise KeyError(f"{op} is no activation function or ALU operator of the Trainium ISA")
    return NKI_NAMES[op]


def _commutes(op) -> bool:
    return op is None or SCALAR_SPECS[op].commutative


# --- meanings ------------------------------------------------------------------------------
def _nc_matmul(h, x):
    return {"out": apply(Op.MATMUL, apply(Op.TRANSPOSE, x["stationary"], params=SWAP), x["moving"])}


def _transpose(h, x):
    return {"out": apply(Op.TRANSPOSE, x["data"], params=SWAP)}


def _act(h, x):
    v = x["data"]
    if x.get("scale") is not None:
        v = apply(Op.MUL, v, x["scale"])
    if x.get("bias") is not None:
        v = apply(Op.ADD, v, x["bias"])
    return unary(h["func"], v)


def _activation(h, x):
    return {"out": _act(h, x)}


def _activation_reduce(h, x):
    out = _act(h, x)
    return {"out": out, "reduce": reduce_free(h["reduce_op"], out)}


def _two_ops(h, x, first="operand0", second="operand1"):
    v = alu(h["op0"], x["data"], x[first], h.get("reverse0", False))
    if h.get("op1") is not None:
        v = alu(h["op1"], v, x[second], h.get("reverse1", False))
    return v


def _tensor_scalar(h, x):
    return {"out": _two_ops(h, x)}


def _tensor_scalar_reduce(h, x):
    out = alu(h["op0"], x["data"], x["operand0"], h.get("reverse0", False))
    return {"out": out, "reduce": reduce_free(h["reduce_op"], out)}


def _tensor_tensor(h, x):
    return {"out": alu(h["op"], x["data1"], x["data2"])}


def _scalar_tensor_tensor(h, x):
    return {"out": _two_ops(h, x)}


def _tensor_reduce(h, x):
    r = reduce_free(h["op"], x["data"])
    return {"out": apply(Op.NEG, r) if h["negate"] else r}


def _is_one(node):
    return node.op is Op.CONST and node.params.value == 1


def _scan(h, x):
    if h["op1"] is not S.ADD:
        raise Inexpressible("scan with op1 other than add")
    if h["op0"] is S.ADD:  # r[i] = data0[i] + r[i-1] + data1[i]
        body = apply(Op.ADD, x["data0"], x["data1"])
    elif h["op0"] is S.MUL and _is_one(x["data0"]):  # r[i] = 1 * r[i-1] + data1[i]
        body = x["data1"]
    else:
        raise Inexpressible("scan outside the additive fragment")
    return {"out": apply(Op.ADD, apply(Op.CUMSUM, body, params=AxisParams(1)), x["initial"])}


def _affine_select(h, x):
    return {"out": apply(Op.WHERE, x["pred"], x["on_true_tile"], x["on_false_value"])}


def _select(h, x):
    return {"out": apply(Op.WHERE, x["pred"], x["on_true"], x["on_false"])}


def _reciprocal(h, x):
    return {"out": apply(Op.RECIPROCAL, x["data"])}


def _copy(h, x):
    return {"out": x["data"]}


# --- the instruction table ------------------------------------------------------------------
_ALU0 = (Hole("op0", ALU_OPS, "alu"), Hole("reverse0", (False, True), "flag", of="op0"))
_ALU1 = (Hole("op1", NO_OP + ALU_OPS, "alu"), Hole("reverse1", (False, True), "flag", of="op1"))


def _ordered_if_commutative(holes, args):
    """data1 <op> data2 with a commutative op: one operand order is enough (symmetry breaking)."""
    return not _commutes(holes["op"]) or arg_key(args["data1"]) <= arg_key(args["data2"])


NC_MATMUL = InstructionSpec(
    "nc_matmul", "tensor",
    (Slot("stationary", TILE, ("K", "M"), frozenset({SBUF})), Slot("moving", TILE, ("K", "N"), frozenset({SBUF}))),
    (), _nc_matmul, out_memory=lambda h: PSUM, weight=1.0,
    doc="stationary.T @ moving on the Tensor engine; contraction on the partition axis")
NC_TRANSPOSE = InstructionSpec(
    "nc_transpose", "tensor", (Slot("data", TILE),), (Hole("engine", ("tensor", "vector"), "engine"),), _transpose,
    out_memory=lambda h: PSUM if h["engine"] == "tensor" else SBUF, engines=("tensor", "vector"), weight=1.0,
    doc="partition/free transpose; TensorE writes PSUM, VectorE (32x32 blocks) reads/writes SBUF or PSUM")
ACTIVATION = InstructionSpec(
    "activation", "scalar",
    (Slot("data", TILE), Slot("scale", COL_OR_IMM, optional=True), Slot("bias", COL_OR_IMM, optional=True)),
    (Hole("func", ACT_FUNCS, "func"),), _activation, weight=1.0,
    doc="func(data * scale + bias) on the Scalar engine")
ACTIVATION_REDUCE = InstructionSpec(
    "activation_reduce", "scalar",
    (Slot("data", TILE), Slot("scale", COL_OR_IMM, optional=True), Slot("bias", COL_OR_IMM, optional=True)),
    (Hole("func", ACT_FUNCS, "func"), Hole("reduce_op", (S.ADD,), "reduce")), _activation_reduce,
    outputs=("out", "reduce"), weight=1.2, doc="activation, and the sum of its result along the free axis")
TENSOR_SCALAR = InstructionSpec(
    "tensor_scalar", "vector",
    (Slot("data", TILE), Slot("operand0", COL_OR_IMM), Slot("operand1", COL_OR_IMM, optional=True, hole="op1")),
    _ALU0 + _ALU1, _tensor_scalar, engines=("vector", "scalar", "gpsimd"), weight=1.0,
    doc="(data <op0> operand0) <op1> operand1, operands broadcast along the free axis")
TENSOR_SCALAR_REDUCE = InstructionSpec(
    "tensor_scalar_reduce", "vector",
    (Slot("data", TILE), Slot("operand0", COL_OR_IMM)),
    _ALU0 + (Hole("reduce_op", (S.ADD, S.MAXIMUM), "reduce"),), _tensor_scalar_reduce,
    outputs=("out", "reduce"), weight=1.2,
    doc="data <op0> operand0, and its reduction along the free axis")
TENSOR_TENSOR = InstructionSpec(
    "tensor_tensor", "vector", (Slot("data1", TILE), Slot("data2", TILE)), (Hole("op", ALU_OPS, "alu"),),
    _tensor_tensor, engines=("vector", "gpsimd"), weight=2.0, valid=_ordered_if_commutative, doc="data1 <op> data2, element-wise")
SCALAR_TENSOR_TENSOR = InstructionSpec(
    "scalar_tensor_tensor", "vector",
    (Slot("data", TILE), Slot("operand0", COL_OR_IMM), Slot("operand1", TILE)),
    _ALU0 + (Hole("op1", ALU_OPS, "alu"), Hole("reverse1", (False, True), "flag", of="op1")), _scalar_tensor_tensor,
    weight=2.0,
    doc="(data <op0> operand0) <op1> operand1, operand1 a tile")
TENSOR_REDUCE = InstructionSpec(
    "tensor_reduce", "vector", (Slot("data", TILE),),
    (Hole("op", (S.ADD, S.MAXIMUM), "reduce"), Hole("negate", (False, True), "flag")), _tensor_reduce,
    weight=1.0, doc="reduction along the free axis into a [P, 1] column, optionally negated")
TENSOR_TENSOR_SCAN = InstructionSpec(
    "tensor_tensor_scan", "vector",
    (Slot("data0", TILE | FILL), Slot("data1", TILE | FILL), Slot("initial", COL_OR_IMM)),
    (Hole("op0", (S.ADD, S.MUL), "alu"), Hole("op1", (S.ADD,), "alu")), _scan, weight=2.0,
    doc="r[i] = (data0[i] <op0> r[i-1]) <op1> data1[i] along the free axis")
AFFINE_SELECT = InstructionSpec(
    "affine_select", "gpsimd",
    (Slot("pred", TILE, memories=frozenset({AFFINE})), Slot("on_true_tile", TILE, memories=frozenset({SBUF})),
     Slot("on_false_value", IMM)),
    (), _affine_select, weight=1.0,
    doc="on_true_tile where an affine predicate of the positions holds, else an immediate (GpSimd cannot reach PSUM)")
SELECT = InstructionSpec(
    "select", "vector", (Slot("pred", TILE), Slot("on_true", TILE), Slot("on_false", TILE | IMM)), (), _select,
    weight=4.0, doc="on_true where pred is non-zero, else on_false; printed as pred != 0 into a uint8 "
                    "predicate, a copy of on_false and tensor_copy_predicated of on_true (Vector)")
RECIPROCAL = InstructionSpec("reciprocal", "vector", (Slot("data", TILE),), (), _reciprocal, weight=8.0,
                             doc="1 / data on the Vector engine")
TENSOR_COPY = InstructionSpec("tensor_copy", "vector", (Slot("data", TILE),), (), _copy,
                              engines=("vector", "scalar", "gpsimd"), weight=1.0, doc="a copy (e.g. PSUM -> SBUF)")
DMA_COPY = InstructionSpec("dma_copy", "dma", (Slot("data", TILE, memories=frozenset({HBM, SBUF})),), (), _copy,
                           weight=4.0, doc="a DMA transfer between HBM and SBUF")
DMA_TRANSPOSE = InstructionSpec("dma_transpose", "dma", (Slot("data", TILE, memories=frozenset({HBM, SBUF})),), (),
                                _transpose, weight=4.4, doc="a transposing DMA (NeuronCore-v3 and later)")

COMMON = (NC_MATMUL, ACTIVATION, ACTIVATION_REDUCE, TENSOR_SCALAR, TENSOR_TENSOR, SCALAR_TENSOR_TENSOR,
          TENSOR_SCALAR_REDUCE, TENSOR_REDUCE, TENSOR_TENSOR_SCAN, RECIPROCAL, NC_TRANSPOSE, TENSOR_COPY, DMA_COPY,
          AFFINE_SELECT, SELECT)
TRN1_ISA = ISA("trn1", COMMON, {"hardware": TRN1})
TRN2_ISA = ISA("trn2", COMMON + (DMA_TRANSPOSE,), {"hardware": TRN2})
INSTRUCTIONS = TRN2_ISA.instructions
ISAS = {isa.name: isa for isa in (TRN1_ISA, TRN2_ISA)}


def lowering_cost(lowering, sizes: Mapping[str, int], hardware: HardwareDescription = TRN2) -> float:
    """Estimated engine nanoseconds of one lowering on one tile, engines assumed serial.

    `sizes` binds the pattern's dimension names (e.g. {"d0": 128, "d1": 512}); N is the free size of
    each step's output, read from the lowering's pattern. A rough figure for ordering lowerings;
    the performance model (perfmodel.py) is the one that times kernels.
    """
    from axon.targets.trainium.trace import Engine

    pattern = lowering.pattern if isinstance(lowering.pattern, tuple) else (lowering.pattern,)
    free = max((int(p.shape[-1].evaluate(sizes)) for p in pattern if p.shape), default=1)
    total = 0.0
    for step in lowering.steps:
        if step.instruction.startswith("dma"):
            total += hardware.dma.fixed_ns if hardware.dma else 0.0
            continue
        formula = hardware.cost(step.instruction)
        cycles = max(formula.floor, formula.mult * free) + formula.add
        engine = Engine(step.hole("engine") or _ENGINE_OF.get(step.instruction, "vector"))
        total += cycles / hardware.clock_ghz(engine)
    return total


_ENGINE_OF = {spec.name: spec.engine for spec in INSTRUCTIONS}
