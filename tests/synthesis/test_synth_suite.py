"""Every operator of the suite gets a proved lowering (slices and reshapes as views), with literal
dimensions named as optimize names them; values of positions (a causal mask) are not lowered, the
operator reading them gets them as affine predicates; a concatenation along the columns is
assembled in its row's tile by the kernel builder, not lowered."""
import pytest

import axon.suite as suite
from axon.fusion.nodes import is_rowwise
from axon.ir import positional
from axon.semantics.ops import Op
from axon.synthesis.spec import AFFINE
from axon.synthesis import Synthesizer, abstract
from axon.targets.trainium.isa import TRN2_ISA
from axon.verification import Verifier


@pytest.fixture(scope="module")
def synth():
    return Synthesizer(TRN2_ISA, Verifier())


@pytest.mark.parametrize("name", list(suite.SUITE))
def test_every_operator_lowers(synth, name):
    graph = suite.SUITE[name].program.generalized()[0].graph
    index = positional(graph.nodes())
    for node in graph.nodes():
        if node.op in (Op.INPUT, Op.CONST) or node in index or (node.op is Op.CONCAT and is_rowwise(node)):
            continue
        ab = abstract([node])
        memories = {f"a{k}": AFFINE for k, x in enumerate(ab.operands) if x in index}
        found = synth.lower(ab.pattern, operand_memories=memories)
        assert found, f"{name}: no lowering for {node.op.value}"
        assert found[0].proved
        if node.op in (Op.SLICE, Op.RESHAPE):
            assert found[0].instructions == ("view",)
        else:
            assert "view" not in found[0].instructions
