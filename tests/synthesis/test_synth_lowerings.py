"""Sketch synthesis finds (and the verifier proves) each benchmark operator's lowering; nothing is
listed: the tests state only the pattern and what a correct answer must look like."""
import pytest

from axon.ir import input_node, make_node
from axon.semantics.ops import AxisParams, Op, TransposeParams
from axon.semantics.scalar import ScalarOp as S
from axon.semantics.sizes import shape_of
from axon.synthesis import PROVED, Arg, Synthesizer, abstract, operator_pattern, sequence_meaning
from axon.synthesis.pattern import pattern_inputs
from axon.synthesis.spec import const_node
from axon.targets.trainium.isa import TRN1_ISA, TRN2_ISA
from axon.verification import Status, Verifier

FREE = AxisParams(1)


@pytest.fixture(scope="module")
def synth():
    return Synthesizer(TRN2_ISA, Verifier())


def _inp(name, *dims):
    return input_node(name, shape_of(dims))


def _names(lw):
    return [s.instruction for s in lw.steps]


def _check_meaning(synth, lw):
    """Re-derive the lowering's meaning from its steps and prove it again: the record is honest."""
    outs = sequence_meaning(synth.spec, pattern_inputs(lw.pattern), lw.steps, lw.outputs)
    targets = lw.pattern if isinstance(lw.pattern, tuple) else (lw.pattern,)
    for t, o in zip(targets, outs):
        assert Verifier().check_nodes(t, o).status is Status.PROVED


def test_matmul_is_nc_matmul_with_transposed_stationary(synth):
    (lw, *_) = synth.lower(operator_pattern(Op.MATMUL, ("m", "k"), ("k", "n")))
    assert lw.verdict_status == PROVED and _names(lw) == ["nc_matmul"]
    assert lw.steps[0].arg("stationary") == Arg("operand", 0, transposed=True)
    assert lw.steps[0].arg("moving") == Arg("operand", 1)
    _check_meaning(synth, lw)


def test_transpose_matmul_needs_no_transpose(synth):
    x, w = _inp("x", "k", "m"), _inp("w", "k", "n")
    node = make_node(Op.MATMUL, [make_node(Op.TRANSPOSE, [x], TransposeParams((1, 0))), w])
    a = abstract([node], [node, node.inputs[0]])
    (lw, *_) = synth.lower(a.pattern)
    assert _names(lw) == ["nc_matmul"] and not any(arg.transposed for _, arg in lw.steps[0].args)


def test_matmul_transpose_swaps_operands(synth):
    x, w = _inp("x", "m", "k"), _inp("w", "k", "n")
    mm = make_node(Op.MATMUL, [x, w])
    node = make_node(Op.TRANSPOSE, [mm], TransposeParams((1, 0)))
    (lw, *_) = synth.lower(abstract([node], [node, mm]).pattern)
    assert _names(lw) == ["nc_matmul"] and lw.steps[0].arg("stationary") == Arg("operand", 1)
    _check_meaning(synth, lw)


@pytest.mark.parametrize("op, func", [(Op.EXP, S.EXP), (Op.SILU, S.SILU), (Op.RELU, S.RELU), (Op.SQRT, S.SQRT)])
def test_unary_is_an_activation(synth, op, func):
    found = synth.lower(operator_pattern(op, ("m", "n")))
    assert found and all(lw.proved for lw in found)
    assert (found[0].instructions, found[0].steps[0].hole("func")) == (("activation",), func)


def test_relu_also_on_the_vector_engine(synth):
    found = synth.lower(operator_pattern(Op.RELU, ("m", "n")))
    assert any(lw.instructions == ("tensor_scalar",) and lw.steps[0].hole("op0") is S.MAXIMUM for lw in found)


def test_transpose_lowerings(synth):
    found = synth.lower(operator_pattern(Op.TRANSPOSE, ("m", "n"), TransposeParams((1, 0))))
    names = {lw.instructions for lw in found}
    assert {("nc_transpose",), ("dma_transpose",), ("view",)} <= names
    trn1 = Synthesizer(TRN1_ISA, Verifier()).lower(operator_pattern(Op.TRANSPOSE, ("m", "n"), TransposeParams((1, 0))))
    assert ("dma_transpose",) not in {lw.instructions for lw in trn1}  # NeuronCore-v2 has no DMA transpose


def test_cumsum_is_a_scan(synth):
    (lw, *_) = synth.lower(operator_pattern(Op.CUMSUM, ("m", "n"), FREE))
    assert lw.proved and _names(lw) == ["tensor_tensor_scan"]
    assert (lw.steps[0].hole("op0"), lw.steps[0].hole("op1")) == (S.ADD, S.ADD)
    _check_meaning(synth, lw)


@pytest.mark.parametrize("shapes, instruction, slot", [
    ((("m", "n"), ("m", "n")), "tensor_tensor", "data2"),
    ((("m", "n"), ("m", 1)), "tensor_scalar", "operand0"),
    ((("m", "n"), ("n",)), "tensor_tensor", "data2"),  # a [n] row broadcast over partitions
])
def test_elementwise_with_broadcasts(synth, shapes, instruction, slot):
    found = synth.lower(operator_pattern(Op.MUL, *shapes))
    assert found and found[0].proved
    lw = next(lw for lw in found if lw.instructions == (instruction,))
    arg = lw.steps[0].arg(slot) or lw.steps[0].arg("data1")
    assert arg.index == 1 and arg.broadcast == (shapes[1] == ("n",))


def test_softmax_pieces(synth):
    x = _inp("x", "m", "n")
    mx = make_node(Op.REDUCE_MAX, [x], FREE)
    assert synth.lower(abstract([mx]).pattern)[0].instructions == ("tensor_reduce",)
    e = make_node(Op.EXP, [make_node(Op.SUB, [x, mx])])
    # max, subtract, exp: the negated max becomes the activation's bias
    (lw, *_) = synth.lower(abstract([e], [e, e.inputs[0], mx]).pattern)
    assert lw.instructions == ("tensor_reduce", "activation") and lw.steps[0].hole("negate")
    # exp and its row sum in one instruction
    s = make_node(Op.REDUCE_SUM, [e], FREE)
    (lw, *_) = synth.lower(abstract([e, s], [e, s]).pattern)
    assert lw.instructions == ("activation_reduce",)
    # e / sum(e): a reciprocal and a multiply are among the proved lowerings
    div = operator_pattern(Op.DIV, ("m", "n"), ("m", 1))
    found = synth.lower(div, exhaustive=True)
    assert found[0].instructions == ("tensor_scalar",) and found[0].steps[0].hole("op0") is S.DIV
    assert any(len(lw.steps) == 2 and _reciprocal_then_multiply(lw) for lw in found)
    for lw in found:
        _check_meaning(synth, lw)


def test_copy_out_of_psum_with_its_max_is_one_instruction(synth):
    """x * 1 and its row max (a score tile leaving PSUM with its max taken on the way): the
    multiply the exact identity drops is still an operation a step may do, so the max rides on it."""
    x = _inp("x", "m", "n")
    y = make_node(Op.MUL, [x, const_node(1.0)])
    mx = make_node(Op.REDUCE_MAX, [y], AxisParams(1, True))
    (lw, *_) = synth.lower(abstract([y, mx], [y, mx]).pattern, operand_memories={"a0": "psum"})
    assert lw.instructions == ("tensor_scalar_reduce",) and lw.steps[0].hole("reduce_op") is S.MAXIMUM
    _check_meaning(synth, lw)


def _reciprocal_then_multiply(lw):
    first, second = lw.steps
    recip = first.instruction == "reciprocal" or first.hole("func") is S.RECIPROCAL or \
        (first.hole("op0") is S.DIV and first.hole("reverse0"))
    return recip and (second.hole("op0") is S.MUL or second.arg("scale") == Arg("step", 0))


def test_rmsnorm_pieces(synth):
    x = _inp("x", "m", "n")
    ss = make_node(Op.REDUCE_SUM, [make_node(Op.MUL, [x, x])], FREE)
    (lw, *_) = synth.lower(abstract([ss], [ss, ss.inputs[0]]).pattern)
    assert lw.instructions == ("activation_reduce",) and lw.steps[0].hole("func") is S.SQUARE
    assert lw.outputs == (Arg("step", 0, output="reduce"),)
    col = _inp("c", "m", 1)
    n = const_node(shape_of(("n",))[0])
    mean_eps = make_node(Op.ADD, [make_node(Op.DIV, [col, n]), const_node(1e-6)])
    (lw, *_) = synth.lower(abstract([mean_eps], [mean_eps, mean_eps.inputs[0]]).pattern)
    assert lw.instructions == ("tensor_scalar",) and (lw.steps[0].hole("op0"), lw.steps[0].hole("op1")) == (S.DIV, S.ADD)
    root = make_node(Op.SQRT, [col])
    (lw, *_) = synth.lower(abstract([root]).pattern)
    assert lw.instructions == ("activation",) and lw.steps[0].hole("func") is S.SQRT
    scaled = make_node(Op.DIV, [x, col])
    found = synth.lower(abstract([scaled]).pattern, exhaustive=True)
    assert any(_reciprocal_then_multiply(lw) for lw in found if len(lw.steps) == 2)
    assert all(lw.proved for lw in found)


def test_silu_times_gate_group(synth):
    a, b = _inp("a", "m", "n"), _inp("b", "m", "n")
    node = make_node(Op.MUL, [make_node(Op.SILU, [a]), b])
    (lw, *_) = synth.lower(abstract([node], [node, node.inputs[0]]).pattern)
    assert lw.proved and lw.instructions == ("activation", "tensor_tensor")


def test_wrong_lowerings_are_rejected():
    """A verifier that refutes everything leaves nothing; a wrong sequence is refuted by the real one."""
    class Refuting:
        def check_nodes(self, a, b, constraints=frozenset()):
            from axon.verification import Verdict
            return Verdict(Status.REFUTED, "no")

    synth = Synthesizer(TRN2_ISA, Refuting())
    assert synth.lower(operator_pattern(Op.EXP, ("m", "n"))) == []
    assert synth.stats["refuted"] >= 1
    # matmul with an untransposed stationary operand is not matmul
    pattern = operator_pattern(Op.MATMUL, ("k", "k"), ("k", "n"))
    from axon.synthesis import Step
    wrong = (Step("nc_matmul", (), (("stationary", Arg("operand", 0)), ("moving", Arg("operand", 1)))),)
    (out,) = sequence_meaning(Synthesizer(TRN2_ISA, False).spec, pattern_inputs(pattern), wrong, (Arg("step", 0),))
    assert Verifier().check_nodes(pattern, out).status is Status.REFUTED
    # and the search never proposes it (a square operand makes the shapes fit)
    for lw in Synthesizer(TRN2_ISA, Verifier()).lower(pattern):
        assert lw.steps[0].arg("stationary") != Arg("operand", 0)


def test_without_verifier_results_are_marked_unproved():
    found = Synthesizer(TRN2_ISA, verifier=False).lower(operator_pattern(Op.EXP, ("m", "n")))
    assert found and all(lw.verdict_status == "unproved" and not lw.proved for lw in found)


def test_memo_hits_across_names():
    synth = Synthesizer(TRN2_ISA, Verifier())
    x, w = _inp("x", "m", "k"), _inp("w", "k", "n")
    t, w3 = _inp("t", "m", "n"), _inp("w3", "n", "k")
    first = synth.lower(abstract([make_node(Op.MATMUL, [x, w])]).pattern)
    again = synth.lower(abstract([make_node(Op.MATMUL, [t, w3])]).pattern)
    assert first == again and synth.stats["cache_hits"] == 1 and synth.stats["patterns"] == 1


def test_deterministic():
    p = operator_pattern(Op.DIV, ("m", "n"), ("m", 1))
    a = Synthesizer(TRN2_ISA, False).lower(p, exhaustive=True)
    b = Synthesizer(TRN2_ISA, False).lower(p, exhaustive=True)
    assert [str(x) for x in a] == [str(y) for y in b]


def test_where_on_positions_is_affine_select_and_on_data_is_select(synth):
    mask, x = _inp("a0", "d0", "d1"), _inp("a1", "d0", "d1")
    pattern = make_node(Op.WHERE, [mask, x, const_node(-30000.0)])
    (lw,) = synth.lower(pattern, operand_memories={"a0": "affine"})[:1]
    assert _names(lw) == ["affine_select"] and lw.proved
    _check_meaning(synth, lw)
    # GpSimd cannot read PSUM: a matmul's chunk is moved to SBUF first, a copy the pruning keeps
    (lw,) = synth.lower(pattern, operand_memories={"a0": "affine", "a1": "psum"})[:1]
    assert _names(lw)[-1] == "affine_select" and len(lw.steps) == 2 and lw.proved
    # a mask that is a tile of data: the ISA's select (a predicated copy), proved
    (lw,) = synth.lower(pattern)[:1]
    assert _names(lw) == ["select"] and lw.proved
    _check_meaning(synth, lw)
