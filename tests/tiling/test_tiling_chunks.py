"""Column chunks of row passes: the sweep plan, the fit model's chunk tilings, and chunked kernels
(reductions accumulated per chunk, scans carried across chunks, a shorter last chunk) matching
the NumPy reference."""
import pytest

import axon
from axon.fusion.nodes import RowWorld, chunk_plan, groups, phases
from axon.search.candidates import Candidate, emit
from axon.search.lowering import Lowerer
from axon.search.select import compare
from axon.semantics.bounds import kernel_reference
from axon.suite import SUITE
from axon.targets.trainium.target import TrainiumTarget
from axon.tiling.build import Options, Pass
from axon.tiling.space import Limits, Tiling, check, chunk_dim, default_tiling, enumerate_tilings, footprint

TARGET = TrainiumTarget("trn2")
LIMITS = TARGET.limits()


def _fused(program):
    w = RowWorld.of(program.graph)
    (g,) = groups(w, "fused")
    return w, g


def _chunked_kernel(program, sizes, chunk, target=TARGET):
    w, g = _fused(program)
    t = Tiling(128, 1, 512, 0, 128, 1, chunk)
    assert check(w, g, t, sizes, target.limits()) == ""
    cand = Candidate(0, (), "fused", Options(), (Pass(g, t),))
    return emit(program.name, target, w, cand, sizes, "bfloat16", Lowerer(target))


def _matches(program, sizes, source, target=TARGET):
    inputs = program.random_inputs(sizes, "bfloat16", seed=3)
    want, tol = kernel_reference(program.graph, inputs, "bfloat16")
    got = target.run(source, inputs, timing_only=False)
    return compare(got.outputs, want, tol)


def test_sweeps_of_the_row_benchmarks():
    def plan(name):
        w, g = _fused(SUITE[name].program)
        (ph,) = phases(w, g)
        return chunk_plan(ph.nodes, set(w.graph.outputs))[1]

    assert [len(plan(n)) for n in ("relu", "cumsum", "rope", "rmsnorm", "softmax", "layernorm")] == [1, 1, 1, 2, 3, 3]
    soft = plan("softmax")
    assert [r.op.value for r in soft[0].reduce] == ["max"] and [r.op.value for r in soft[1].reduce] == ["sum"]
    assert [n.op.value for n in soft[2].wide] == ["sub", "exp", "div"]  # recomputed from x, not kept
    assert [s.op.value for s in plan("cumsum")[0].scans] == ["cumsum"]


def test_chunk_dimension():
    assert chunk_dim(*_fused(SUITE["rope"].program)) == "h"  # x is 2*h wide, its halves h
    assert chunk_dim(*_fused(SUITE["rmsnorm"].program)) == "n"
    w, g = _fused(SUITE["rmsnorm_matmul"].program)
    assert chunk_dim(w, g) == ""  # a matmul reads the whole row


def test_wide_cumsum_fits_only_in_chunks():
    w, g = _fused(SUITE["cumsum"].program)
    sizes = SUITE["cumsum"].sizes("llama3_vocab")
    fits, rejected = enumerate_tilings(w, g, sizes, LIMITS)
    assert fits and all(t.col_chunk for t in fits)
    for t in fits:
        assert footprint(w, g, t, sizes) <= LIMITS.onchip_bytes
    whole = [why for t, why in rejected if not t.col_chunk]
    assert whole and whole[0].startswith("cumsum: on-chip footprint") and "128256" in whole[0]
    assert default_tiling(w, g, sizes, LIMITS).col_chunk  # the direct lowering chunks too


def test_no_fit_names_the_operator_and_the_constraint():
    w, g = _fused(SUITE["softmax"].program)
    tiny = Limits(**{**LIMITS.__dict__, "onchip_bytes": 4096})
    fits, rejected = enumerate_tilings(w, g, {"m": 128, "n": 8192}, tiny)
    assert not fits
    assert all("on-chip footprint" in why and "exceeds the 4.0 KiB on chip" in why for _, why in rejected)


def test_chunked_cumsum_carries_across_a_shorter_last_chunk():
    sizes = {"m": 128, "n": 5000}  # chunks 2048, 2048, 904
    src = _chunked_kernel(SUITE["cumsum"].program, sizes, 2048)
    assert "nl.sequential_range(2)" in src and "904" in src and "initial=carry" in src
    assert _matches(SUITE["cumsum"].program, sizes, src).ok


@pytest.mark.parametrize("name,sizes,chunk", [("softmax", {"m": 128, "n": 5000}, 2048),
                                              ("rmsnorm", {"m": 256, "n": 3000}, 1024),
                                              ("layernorm", {"m": 128, "n": 2600}, 1024),
                                              ("rope", {"m": 128, "h": 1500}, 512)])
def test_chunked_row_kernels_match_the_reference(name, sizes, chunk):
    program = SUITE[name].program
    src = _chunked_kernel(program, sizes, chunk)
    assert f"column chunks of {chunk}" in src
    assert _matches(program, sizes, src).ok


def test_chunked_kernel_on_trn1():
    trn1 = TrainiumTarget("trn1")
    src = _chunked_kernel(SUITE["softmax"].program, {"m": 128, "n": 3000}, 1024, trn1)
    assert _matches(SUITE["softmax"].program, {"m": 128, "n": 3000}, src, trn1).ok


def test_a_column_output_of_a_chunked_pass():
    @axon.program(x=("m", "n"))
    def row_stats(x):
        return x * 2.0, x.max(axis=-1, keepdims=True)

    sizes = {"m": 128, "n": 3000}
    src = _chunked_kernel(row_stats, sizes, 1024)
    assert _matches(row_stats, sizes, src).ok
