"""Column chunks for element-wise passes, engine placement and loop-invariant constants: each
emitted kernel still matches the reference, and the direct lowering keeps its defaults."""
import pytest

from axon.fusion.nodes import RowWorld, groups
from axon.search.candidates import Counts, direct_lowering, enumerate_candidates
from axon.search.lowering import Lowerer
from axon.search.select import compare
from axon.semantics.bounds import kernel_reference
from axon.suite import SUITE
from axon.targets.trainium.target import TrainiumTarget
from axon.tiling.space import col_splits, enumerate_tilings

TARGET = TrainiumTarget("trn2")
LIMITS = TARGET.limits()


def _candidates(name, sizes, target=TARGET):
    b = SUITE[name]
    return enumerate_candidates(name, [(b.program.graph, ())], sizes, target, "bfloat16", Lowerer(target), Counts())


def test_only_elementwise_passes_split_columns():
    for name, sizes, want in [("rope", {"m": 128, "h": 2048}, [1, 2, 4, 8]), ("relu", {"m": 128, "n": 512}, [1, 2]),
                              ("softmax", {"m": 128, "n": 4096}, [1]), ("cumsum", {"m": 128, "n": 4096}, [1])]:
        w = RowWorld.of(SUITE[name].program.graph)
        (g,) = groups(w, "fused")
        assert col_splits(w, g, sizes) == want, name  # chunks of at least 512 B per partition
    w = RowWorld.of(SUITE["matmul"].program.graph)
    (g,) = groups(w, "fused")
    fits, _ = enumerate_tilings(w, g, SUITE["matmul"].sizes("small"), LIMITS)
    assert {t.col_split for t in fits} == {1}


@pytest.mark.parametrize("name,sizes", [("rope", {"m": 128, "h": 1024}), ("mul", {"m": 256, "n": 1024})])
def test_split_kernels_match_the_reference(name, sizes):
    b = SUITE[name]
    cands = [c for c in _candidates(name, sizes) if c.passes[0].tiling.col_split > 1]
    assert cands
    inputs = b.program.random_inputs(sizes, "bfloat16", seed=2)
    want, tol = kernel_reference(b.program.graph, inputs, "bfloat16")
    for cand in cands[:2]:
        split = cand.passes[0].tiling.col_split
        assert f"for i_c in nl.affine_range({split}):" in cand.source and "column chunks" in cand.source
        m = TARGET.run(cand.source, inputs, timing_only=False)
        assert compare(m.outputs, want, tol).ok, cand.describe()


def test_engines_balanced_on_trn2_only_and_not_in_the_direct_lowering():
    sizes = SUITE["layernorm"].sizes("small")
    assert any("engine=nisa.engine.gpsimd" in c.source for c in _candidates("layernorm", sizes))
    trn1 = TrainiumTarget("trn1")  # Vector and GpSimd share the SBUF port on NeuronCore-v2
    assert not any("engine=nisa.engine.gpsimd" in c.source for c in _candidates("layernorm", sizes, trn1))
    b = SUITE["layernorm"]
    direct = direct_lowering("layernorm", b.program.graph, sizes, TARGET, "bfloat16", Lowerer(TARGET))
    assert "engine=" not in direct.source


def test_constant_tiles_are_set_once_outside_the_loops():
    sizes = {"m": 512, "n": 512}  # four row tiles: a loop
    b = SUITE["cumsum"]
    src = direct_lowering("cumsum", b.program.graph, sizes, TARGET, "bfloat16", Lowerer(TARGET)).source
    body = src.split("@nki.jit", 1)[1]
    first_loop = body.index("nl.affine_range")
    assert all(i < first_loop for i in _find_all(body, "nisa.memset("))


def _find_all(text, sub):
    i = text.find(sub)
    while i >= 0:
        yield i
        i = text.find(sub, i + 1)
