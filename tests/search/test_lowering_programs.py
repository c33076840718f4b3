"""Emission consumes only synthesized programs: no hand table, proved steps, fusion where it pays."""
import importlib

import pytest

from axon.errors import UnsupportedError
from axon.fusion.nodes import RowWorld, groups, phases
from axon.search.candidates import Counts, direct_lowering, enumerate_candidates
from axon.search.lowering import Lowerer
from axon.suite import SUITE
from axon.targets.trainium.target import TrainiumTarget

TARGET = TrainiumTarget("trn2")


def test_there_is_no_stand_in_table():
    with pytest.raises(ImportError):
        importlib.import_module("axon.targets.trainium.lowerings")
    assert not hasattr(TARGET, "fallback_lowering")


# as written, a slice of a computed value (u[:, :n] of u = x @ w_gate_up): only the proved rewrite
# slice(x @ W) = x @ slice(W) has a kernel (optimize's baseline is that variant's direct lowering)
NEEDS_A_REWRITE = {"swiglu_mlp"}


@pytest.mark.parametrize("name", list(SUITE))
def test_no_kernel_header_is_unchecked(name):
    b = SUITE[name]
    prog, literals = b.program.generalized()  # as optimize searches it: literal dims named
    if name in NEEDS_A_REWRITE:
        with pytest.raises(UnsupportedError, match="slice of a computed value"):
            direct_lowering(name, prog.graph, {**b.sizes("small"), **literals}, TARGET, "bfloat16", Lowerer(TARGET))
        return
    cand = direct_lowering(name, prog.graph, {**b.sizes("small"), **literals}, TARGET, "bfloat16", Lowerer(TARGET))
    for word in ("UNCHECKED", "stand-in", "fallback", "unproved"):
        assert word not in cand.source
    assert "(synthesis, proved)" in cand.source.split('"""')[1]


def _fused_source(name, case="small"):
    b = SUITE[name]
    cands = enumerate_candidates(name, [(b.program.graph, ())], b.sizes(case), TARGET, "float32", Lowerer(TARGET),
                                 Counts())
    return next(c.source for c in cands if c.fusion == "fused")


def test_softmax_uses_fused_instructions():
    src = _fused_source("softmax")
    assert "nisa.activation_reduce(" in src and "op=nl.exp" in src  # exp and its row sum in one instruction
    assert "negate=True" in src  # the max is negated once, for exp's bias
    assert src.count("nisa.tensor_reduce(") == 1
    assert "fused activation+tensor_reduce->activation_reduce" in src


def test_rmsnorm_lowering_comes_from_synthesis():
    b = SUITE["rmsnorm"]
    world = RowWorld.of(b.program.graph)
    (ph,) = phases(world, groups(world, "fused")[0])
    lw = Lowerer(TARGET)
    prog = lw.program(ph.nodes, [ph.nodes[-1]])
    assert prog.status == "proved"
    names = [s.instruction for s in prog.steps]
    assert "activation_reduce" in names  # sum(x*x): one Scalar-engine square with its row sum
    square = next(s for s in prog.steps if s.instruction == "activation_reduce")
    assert square.hole("func").value == "square"
    assert "scalar_tensor_tensor" in names  # x / rms * g in one Vector instruction
    assert len(prog.steps) < len(ph.nodes)
    assert lw.stats["fusions"] >= 1


def test_a_pattern_without_instructions_fails_clearly():
    from dataclasses import replace

    from axon.synthesis import Synthesizer

    class MatmulOnly(TrainiumTarget):
        def synthesizer(self):
            s = super().synthesizer()
            isa = replace(s.isa, instructions=tuple(i for i in s.isa.instructions if i.name == "nc_matmul"))
            return Synthesizer(isa, s.verifier)

    b = SUITE["relu"]
    with pytest.raises(UnsupportedError, match="no instruction sequence implements relu.* on trn2"):
        direct_lowering("relu", b.program.graph, b.sizes("small"), MatmulOnly("trn2"), "bfloat16",
                        Lowerer(MatmulOnly("trn2")))


def test_optimize_reports_the_instruction_level(tmp_path, monkeypatch):
    from axon.search.optimize import optimize

    monkeypatch.setenv("AXON_CACHE_DIR", str(tmp_path / "cache"))
    r = optimize("softmax", "small")
    assert r.instructions["fusions"] >= 1 and "activation+tensor_reduce->activation_reduce" in r.instructions[
        "winner_fusions"]
    assert {"second_round_proved", "second_round_used"} <= set(r.instructions)
    assert "activation_reduce" in r.kernel_source and "instructions:" in r.report


def test_rmsnorm_candidates_carry_lowering_alternatives():
    """The fused program is not the only lowering: an alternative leaving a fusion undone (its two
    instructions may spread over engines) joins the candidates, for the performance model to rank."""
    b = SUITE["rmsnorm"]
    world = RowWorld.of(b.program.graph)
    (ph,) = phases(world, groups(world, "fused")[0])
    lw = Lowerer(TARGET)
    fused = lw.program(ph.nodes, [ph.nodes[-1]])
    assert lw.alternatives(ph.nodes, [ph.nodes[-1]]) >= 1
    alt = lw.program(ph.nodes, [ph.nodes[-1]], alt=1)
    assert alt.status == "proved" and alt.steps != fused.steps
    assert "scalar_tensor_tensor" not in [s.instruction for s in alt.steps]
    cands = enumerate_candidates("rmsnorm", [(b.program.graph, ())], b.sizes("small"), TARGET, "float32",
                                 Lowerer(TARGET), Counts())
    fused_cands = [c for c in cands if c.fusion == "fused"]
    assert len({c.options.lowering for c in fused_cands}) > 1
    assert len({c.key for c in fused_cands}) == len(fused_cands)
