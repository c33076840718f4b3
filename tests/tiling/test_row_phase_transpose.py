"""rms(x) @ w as diag(1/rms) (x @ w): the row phase that reads x for the statistics also transposes
the tile it loaded for the matmul, so x is loaded once and the kernel still matches."""
import re

from axon.fusion.nodes import RowWorld
from axon.rewriting import discover
from axon.search.candidates import Counts, enumerate_candidates
from axon.search.lowering import Lowerer
from axon.search.select import compare
from axon.semantics.bounds import kernel_reference
from axon.semantics.ops import Op
from axon.suite import SUITE
from axon.targets.trainium.target import TrainiumTarget

TRN2 = TrainiumTarget("trn2")


def test_the_statistics_pass_transposes_the_rows_it_loaded():
    b = SUITE["rmsnorm_matmul"]
    sizes = b.sizes("small")
    nu, _ = discover(b.program.graph)
    variants = [v.graph for v in nu.extract_variants(limit=8)]
    # the variant whose matmul reads the input x itself (the norm applied after it)
    late = next(g for g in variants if any(n.op is Op.MATMUL and n.inputs[0].op is Op.INPUT for n in g.nodes()))
    assert RowWorld.of(late)
    cands = enumerate_candidates("rmsnorm_matmul", [(late, ("late norm",))], sizes, TRN2, "bfloat16",
                                 Lowerer(TRN2), Counts())
    fused = [c for c in cands if c.fusion == "fused" and c.options.stationary == "pe"]
    assert fused
    for c in fused[:3]:
        assert re.search(r"\bx\d*_T = nl\.ndarray", c.source), c.describe()
        assert c.source.count("src=x[") == 1, c.describe()  # x loaded once per row tile
    inputs = b.program.random_inputs(sizes, "bfloat16", seed=3)
    want, tol = kernel_reference(b.program.graph, inputs, "bfloat16")
    assert compare(TRN2.run(fused[0].source, inputs, timing_only=False).outputs, want, tol).ok
