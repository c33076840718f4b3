"""Weights streamed along K (Tiling.k_block): kernels with a forced small weight piece match the
NumPy reference in float32; the fit model accepts the llama3 gated_mlp sizes only with streaming
where the whole contraction does not fit; every candidate it accepts at those sizes runs within the
simulator's capacity."""
import pytest

from axon.fusion.nodes import RowWorld, groups, phases
from axon.search.candidates import Candidate, emit
from axon.search.lowering import Lowerer
from axon.search.select import compare
from axon.semantics.bounds import kernel_reference
from axon.suite import SUITE
from axon.targets.trainium.target import TrainiumTarget
from axon.tiling.build import Options, Pass
from axon.tiling.space import Tiling, check, default_tiling, enumerate_tilings, footprint

TRN2 = TrainiumTarget("trn2")


@pytest.fixture(autouse=True)
def _no_home_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("AXON_CACHE_DIR", str(tmp_path / "cache"))


def _streamed_kernel(name, sizes, mode, t, stationary="pe", target=TRN2):
    program = SUITE[name].program
    w = RowWorld.of(program.graph)
    gs = groups(w, mode)
    for g in gs:
        assert check(w, g, t, sizes, target.limits()) == ""
    cand = Candidate(0, (), mode, Options(stationary=stationary), tuple(Pass(g, t) for g in gs))
    return emit(program.name, target, w, cand, sizes, "float32", Lowerer(target))


@pytest.mark.parametrize("name,sizes,mode,t,stationary", [
    ("gated_mlp", {"m": 256, "k": 256, "n": 512}, "fused", Tiling(128, 2, 256, 256, 128, k_block=128), "pe"),
    ("gated_mlp", {"m": 256, "k": 256, "n": 512}, "split", Tiling(128, 1, 256, 512, 128, k_block=128), "dma"),
    ("rmsnorm_matmul", {"m": 256, "k": 512, "n": 1024}, "fused", Tiling(128, 1, 512, 1024, 128, k_block=256), "pe"),
    ("matmul_transpose", {"m": 256, "k": 512, "n": 1024}, "fused", Tiling(128, 2, 512, 512, 128, k_block=256), "pe"),
    ("transpose_matmul", {"m": 256, "k": 512, "n": 1024}, "fused", Tiling(128, 2, 512, 512, 128, k_block=128), "pe"),
    ("gated_projection", {"m": 128, "k": 384, "n": 512}, "fused", Tiling(128, 1, 256, 256, 128, k_block=128), "pe"),
])
def test_streamed_kernels_match_the_reference_in_float32(name, sizes, mode, t, stationary):
    src = _streamed_kernel(name, sizes, mode, t, stationary)
    assert "for i_kb in nl.affine_range(" in src and "weights streamed along K" in src
    program = SUITE[name].program
    inputs = program.random_inputs(sizes, "float32", seed=5)
    got = TRN2.run(src, inputs, timing_only=False)
    result = compare(got.outputs, *kernel_reference(program.graph, inputs, "float32"))
    assert result.ok, result


def test_piece_size_divides_each_contraction():
    t = Tiling(128, 1, 512, 512, 128, k_block=8192)
    assert (t.k_block_for(4096), t.k_block_for(14336), t.k_block_for(28672)) == (4096, 7168, 7168)
    assert Tiling(128, 1, 512, 512, 128).k_block_for(14336) == 14336  # 0: all of K resident


@pytest.mark.parametrize("target", ["trn2", "trn1"])
@pytest.mark.parametrize("case", ["llama3_8b", "llama3_70b"])
def test_fit_model_accepts_llama3_gated_mlp_by_streaming(case, target):
    tgt = TrainiumTarget(target)
    limits = tgt.limits()
    b = SUITE["gated_mlp"]
    sizes = b.sizes(case)
    w = RowWorld.of(b.program.graph)
    for mode in ("fused", "split", "unfused"):
        for g in groups(w, mode):
            fits, rejected = enumerate_tilings(w, g, sizes, limits)
            assert fits, (mode, rejected[:1])
            for t in fits:
                assert footprint(w, g, t, sizes) <= limits.onchip_bytes
    # h @ w3 (contraction n) cannot keep its whole contraction resident for one 512-wide block
    (g,) = groups(w, "fused")
    whole = Tiling(128, 1, 512, 512, 128)
    assert "on-chip footprint" in check(w, g, whole, sizes, limits)
    last = phases(w, g)[-1]
    assert last.kind == "matmul" and all(t.k_block for t in enumerate_tilings(w, g, sizes, limits)[0])
    # the direct lowering streams too, so it is a baseline that runs
    for g in groups(w, "unfused"):
        assert check(w, g, default_tiling(w, g, sizes, limits), sizes, limits) == ""


def test_fit_accepted_llama3_8b_gated_mlp_candidates_fit_the_simulator(simulate_all):
    """llama3_8b's k and n with one row block of rows (128): the per-partition footprint does not
    depend on the row count beyond the row block, and the fused and split kernels stream w3."""
    sizes = {**SUITE["gated_mlp"].sizes("llama3_8b"), "m": 128}
    cands, errors = simulate_all("gated_mlp", sizes, TRN2, modes=("fused", "split"))
    assert errors == []
    assert any(p.tiling.k_block for c in cands for p in c.passes)


def test_fit_accepted_k8192_gated_candidates_fit_the_simulator(simulate_all):
    cands, errors = simulate_all("gated_projection", SUITE["gated_projection"].sizes("m128_k8192_n8192"), TRN2,
                                     modes=("fused",))
    assert errors == []


@pytest.mark.slow
def test_fit_accepted_candidates_fit_the_simulator_at_full_size_on_trn1(simulate_all):
    """The full-size llama3 runs take minutes here; they are measured by benchmarks/optimize_suite.py."""
    name, case = "gated_mlp", "m128_k8192_n8192"
    assert simulate_all(name, SUITE[name].sizes(case), TrainiumTarget("trn1"), modes=("fused", "split"))[1] == []
