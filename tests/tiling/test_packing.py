"""Row packing: a row-local element-wise program over [m, c] runs on [m/g, g*c] views of its HBM
tensors; the kernels take and return the caller's shapes and match the reference."""
from axon.search.candidates import Counts, enumerate_candidates
from axon.search.lowering import Lowerer
from axon.search.select import compare
from axon.semantics.bounds import kernel_reference
from axon.suite import SUITE
from axon.targets.trainium.target import TrainiumTarget
from axon.tiling.packing import pack_factors, pack_rows, packed_sizes

TRN2 = TrainiumTarget("trn2")


def test_only_row_local_elementwise_programs_pack():
    sizes = {"m": 1024, "n": 128}
    assert pack_factors(SUITE["relu"].program.graph, sizes, 128) == [8, 4]
    assert pack_factors(SUITE["softmax"].program.graph, sizes, 128) == []  # a row reduction
    assert pack_factors(SUITE["relu"].program.graph, {"m": 1024, "n": 4096}, 128) == []  # rows already wide
    assert pack_factors(SUITE["relu"].program.graph, {"m": 128, "n": 128}, 128) == []  # one row tile
    graph, symbols = pack_rows(SUITE["rope"].program.graph, 8)
    assert packed_sizes(symbols, {"m": 1024, "h": 64}) == {"m": 1024, "h": 64, "m_by8": 128, "h_x8": 512}
    assert [str(s) for s in graph.inputs[0].shape] == ["m_by8", "2*h_x8"]


def test_packed_rope_kernels_take_the_callers_shapes_and_match():
    b = SUITE["rope"]
    sizes = {"m": 512, "h": 64}
    cands = enumerate_candidates("rope", [(b.program.graph, ())], sizes, TRN2, "bfloat16", Lowerer(TRN2), Counts())
    packed = [c for c in cands if c.options.packed > 1]
    assert {c.options.packed for c in packed} == {4, 2}
    inputs = b.program.random_inputs(sizes, "bfloat16", seed=6)
    want, tol = kernel_reference(b.program.graph, inputs, "bfloat16")
    for c in packed[:3]:
        g = c.options.packed
        assert f"x.reshape(({512 // g}, {128 * g}))" in c.source and "out0 = nl.ndarray((512, 64)" in c.source
        got = TRN2.run(c.source, inputs, timing_only=False).outputs
        assert [o.shape for o in got] == [(512, 64), (512, 64)]
        assert compare(got, want, tol).ok, c.describe()
