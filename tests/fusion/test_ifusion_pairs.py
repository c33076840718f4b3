"""Instruction fusion: each fused instruction is found by synthesis of the pair's meaning, proved."""
import pytest

from axon.fusion.instructions import fuse_steps
from axon.ir import input_node, make_node
from axon.semantics.ops import AxisParams, Op, TransposeParams
from axon.semantics.scalar import ScalarOp as S
from axon.semantics.sizes import shape_of
from axon.synthesis import PROVED, Arg, Lowering, Step, Synthesizer, sequence_meaning
from axon.synthesis.pattern import pattern_inputs
from axon.synthesis.spec import const_node
from axon.targets.trainium.isa import TRN1_ISA, TRN2_ISA
from axon.verification import Status, Verifier

A0 = input_node("a0", shape_of(("p", "f")))
COL = input_node("a1", shape_of(("p", 1)))
A2 = input_node("a2", shape_of(("p", "f")))
TS = lambda op, data, operand: Step("tensor_scalar", (("op0", op), ("reverse0", False), ("op1", None), ("reverse1", False)),
                                    (("data", data), ("operand0", operand)))
op, st = Arg("operand", 0), Arg("step", 0)


@pytest.fixture(scope="module")
def synth():
    return Synthesizer(TRN2_ISA, Verifier())


def _lowering(pattern, steps, outputs):
    outs = tuple(outputs)
    return Lowering(pattern, tuple(steps), outs[0].index if len(outs) == 1 else tuple(o.index for o in outs),
                    PROVED, 0.0, "", outs, "trn2")


def _same_values(synth, before, after):
    operands = {int(n.params.name[1:]): n for n in pattern_inputs(before.pattern)}
    a = sequence_meaning(synth.spec, operands, before.steps, before.outputs)
    b = sequence_meaning(synth.spec, operands, after.steps, after.outputs)
    for x, y in zip(a, b):
        assert Verifier().check_nodes(x, y).status is Status.PROVED


def test_tensor_scalar_then_tensor_tensor(synth):
    pattern = make_node(Op.ADD, [make_node(Op.MUL, [A0, COL]), A2])
    lw = _lowering(pattern, [TS(S.MUL, op, Arg("operand", 1)),
                             Step("tensor_tensor", (("op", S.ADD),), (("data1", st), ("data2", Arg("operand", 2))))],
                   [Arg("step", 1)])
    log = []
    fused = fuse_steps(lw, synth, log=log)
    assert fused.instructions == ("scalar_tensor_tensor",) and fused.proved
    assert log[0].fused == "scalar_tensor_tensor" and log[0].verdict_status == PROVED
    _same_values(synth, lw, fused)


def test_two_tensor_scalars(synth):
    pattern = make_node(Op.ADD, [make_node(Op.DIV, [COL, const_node(4.0)]), const_node(1e-6)])
    lw = _lowering(pattern, [TS(S.DIV, Arg("operand", 1), Arg("const", value=4.0)),
                             TS(S.ADD, st, Arg("const", value=1e-6))], [Arg("step", 1)])
    fused = fuse_steps(lw, synth)
    assert fused.instructions == ("tensor_scalar",)
    assert (fused.steps[0].hole("op0"), fused.steps[0].hole("op1")) == (S.DIV, S.ADD)
    _same_values(synth, lw, fused)


def test_activation_then_reduce(synth):
    e = make_node(Op.EXP, [A0])
    pattern = (e, make_node(Op.REDUCE_SUM, [e], AxisParams(1)))
    lw = _lowering(pattern, [Step("activation", (("func", S.EXP),), (("data", op),)),
                             Step("tensor_reduce", (("op", S.ADD), ("negate", False)), (("data", st),))],
                   [Arg("step", 0), Arg("step", 1)])
    fused = fuse_steps(lw, synth)
    assert fused.instructions == ("activation_reduce",)
    assert fused.outputs == (Arg("step", 0), Arg("step", 0, output="reduce"))
    _same_values(synth, lw, fused)


def test_dma_copy_then_transpose_only_where_the_target_has_it():
    pattern = make_node(Op.TRANSPOSE, [A0], TransposeParams((1, 0)))
    lw = _lowering(pattern, [Step("dma_copy", (), (("data", op),)),
                             Step("nc_transpose", (("engine", "tensor"),), (("data", st),))], [Arg("step", 1)])
    trn2 = fuse_steps(lw, Synthesizer(TRN2_ISA, Verifier()), operand_memories={"a0": "hbm"})
    assert trn2.instructions == ("dma_transpose",) and trn2.proved
    trn1 = fuse_steps(lw, Synthesizer(TRN1_ISA, Verifier()), operand_memories={"a0": "hbm"})
    assert trn1.instructions == ("dma_copy", "nc_transpose")  # v2: no DMA transpose, nc_transpose can't read HBM


def test_no_fusion_when_the_intermediate_is_needed_elsewhere(synth):
    """tensor_scalar's result is also an output: a scalar_tensor_tensor would lose it."""
    mid = make_node(Op.MUL, [A0, COL])
    pattern = (mid, make_node(Op.ADD, [mid, A2]))
    lw = _lowering(pattern, [TS(S.MUL, op, Arg("operand", 1)),
                             Step("tensor_tensor", (("op", S.ADD),), (("data1", st), ("data2", Arg("operand", 2))))],
                   [Arg("step", 0), Arg("step", 1)])
    assert fuse_steps(lw, synth) == lw


def test_refuted_fusion_is_not_applied():
    class Refuting:
        def check_nodes(self, a, b, constraints=frozenset()):
            from axon.verification import Verdict
            return Verdict(Status.REFUTED, "no")

    pattern = make_node(Op.ADD, [make_node(Op.DIV, [COL, const_node(4.0)]), const_node(1e-6)])
    lw = _lowering(pattern, [TS(S.DIV, Arg("operand", 1), Arg("const", value=4.0)),
                             TS(S.ADD, st, Arg("const", value=1e-6))], [Arg("step", 1)])
    assert fuse_steps(lw, Synthesizer(TRN2_ISA, Refuting())) == lw


def test_a_pair_with_a_reader_between_keeps_the_steps_in_order(synth):
    """exp; x * e (reads e); sum(e); (x * e) / sum: fusing exp with its sum puts the fused step
    where the exp was, since the step between reads e (at the sum's place it would follow its reader)."""
    e = make_node(Op.EXP, [A0])
    s = make_node(Op.REDUCE_SUM, [e], AxisParams(1, True))
    pattern = make_node(Op.DIV, [make_node(Op.MUL, [A2, e]), s])
    lw = _lowering(pattern, [Step("activation", (("func", S.EXP),), (("data", op),)),
                             Step("tensor_tensor", (("op", S.MUL),), (("data1", Arg("operand", 2)), ("data2", st))),
                             Step("tensor_reduce", (("op", S.ADD), ("negate", False)), (("data", st),)),
                             TS(S.DIV, Arg("step", 1), Arg("step", 2))],
                   [Arg("step", 3)])
    fused = fuse_steps(lw, synth)
    assert fused.instructions[0] == "activation_reduce" and len(fused.steps) < len(lw.steps)
    for k, step in enumerate(fused.steps):
        assert all(a.index < k for _, a in step.args if a.kind == "step")
    _same_values(synth, lw, fused)
