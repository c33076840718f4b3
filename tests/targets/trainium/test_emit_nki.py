"""NKI emission: current API, readable header, deterministic, runs on the simulator correctly."""
import pytest

from axon.search.candidates import Counts, direct_lowering, enumerate_candidates
from axon.search.lowering import Lowerer
from axon.search.select import compare
from axon.semantics.bounds import kernel_reference
from axon.suite import SUITE
from axon.targets.trainium.target import TrainiumTarget

TARGET = TrainiumTarget("trn2")


def _candidates(name, case="small"):
    b = SUITE[name]
    sizes = b.sizes(case)
    return b, sizes, enumerate_candidates(name, [(b.program.graph, ())], sizes, TARGET, "float32", Lowerer(TARGET),
                                          Counts())


def test_current_api_and_header():
    b, sizes, cands = _candidates("rmsnorm_matmul")
    src = cands[0].source
    assert "import nki\n" in src and "import nki.isa as nisa" in src and "@nki.jit" in src
    assert "buffer=nl.shared_hbm" in src and "nisa.nc_matmul(dst=" in src and "nl.affine_range" in src
    assert "neuronxcc" not in src
    head = src.split('"""')[1]
    assert "rmsnorm_matmul" in head and "m=128" in head and "rewrites:" in head and "row tile" in head


def test_emission_is_deterministic():
    _, _, a = _candidates("gated_mlp")
    _, _, b = _candidates("gated_mlp")
    assert [c.source for c in a] == [c.source for c in b]


@pytest.mark.parametrize("name", ["softmax", "rope", "cumsum", "matmul_transpose", "gated_mlp", "gqa"])
def test_fp32_candidates_match_the_reference(name):
    b, sizes, cands = _candidates(name)
    inputs = b.program.random_inputs(sizes, "float32", seed=1)
    want, tol = kernel_reference(b.program.graph, inputs, "float32")
    for cand in cands[:2]:
        m = TARGET.run(cand.source, inputs, timing_only=False)
        check = compare(m.outputs, want, tol)
        assert check.ok, (cand.describe(), check)


def test_direct_lowering_is_one_pass_per_operator():
    b = SUITE["softmax_matmul"]
    cand = direct_lowering("softmax_matmul", b.program.graph, b.sizes("small"), TARGET, "bfloat16", Lowerer(TARGET))
    assert len(cand.passes) == 6 and cand.fusion == "unfused" and cand.rewrites == ()
    assert cand.source.count("buffer=nl.hbm") == 5  # intermediates round-trip through HBM


@pytest.mark.parametrize("name", sorted(SUITE))
def test_no_emitted_kernel_computes_what_nothing_reads(name):
    """Every candidate of every proved variant (the first 30 at the small case): no instruction
    whose on-chip result no later instruction reads (perfmodel.unread_results), which the model
    would time and a reader would wonder about."""
    from axon.rewriting import discover
    from axon.targets.trainium.perfmodel import unread_results
    from axon.targets.trainium.simulator import ShapeDtype, load_source, simulate

    prog, named = SUITE[name].program.generalized()
    sizes = {**SUITE[name].sizes("small"), **named}
    nu, _ = discover(prog.graph)
    variants = [(v.graph, ()) for v in nu.extract_variants(limit=4)]
    cands = enumerate_candidates(name, variants, sizes, TARGET, "bfloat16", Lowerer(TARGET), Counts())
    shapes = {k: ShapeDtype(v.shape, "bfloat16") for k, v in prog.input_shapes(sizes, "bfloat16").items()}
    for c in cands[:30]:
        trace = simulate(load_source(c.source), shapes, target="trn2", timing_only=True).trace
        assert not unread_results(trace), f"{c.describe()}: lines {sorted({i.line for i in unread_results(trace)})}"
