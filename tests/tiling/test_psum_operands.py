"""Instructions that may not read some operands from PSUM: the Tensor Engine transposes only SBUF
tiles, and tensor_tensor-like instructions read at most one of their two tiles from PSUM [isa].
`h * rsqrt(mean(h * h)) @ w2` with h = x @ w1 in PSUM gave both: 104 of 641 candidates of one
program were kernels the simulator refused as illegal NKI."""
import re

import axon
from axon.rewriting import discover
from axon.search.candidates import Counts, enumerate_candidates
from axon.search.lowering import Lowerer
from axon.search.select import compare
from axon.semantics.bounds import kernel_reference
from axon.targets.trainium.target import TrainiumTarget

TRN2 = TrainiumTarget("trn2")


@axon.program(x=("m", "k"), w1=("k", "h"), w2=("h", "n"))
def rms_of_projection(x, w1, w2):
    h = x @ w1
    return (h * axon.rsqrt((h * h).mean(axis=-1, keepdims=True) + 1e-6)) @ w2


def _psum_tiles(source: str) -> set:
    return set(re.findall(r"(\w+) = nl\.ndarray\(.*buffer=nl\.psum\)", source))


def test_no_candidate_reads_two_operands_or_a_transpose_from_psum():
    sizes = {"m": 256, "k": 64, "h": 1024, "n": 512}
    nu, _ = discover(rms_of_projection.graph)  # (h * h) / n as one instruction reads h twice
    variants = [(v.graph, ()) for v in nu.extract_variants(limit=8)]
    cands = enumerate_candidates("rms_of_projection", variants, sizes, TRN2, "bfloat16", Lowerer(TRN2), Counts())
    assert len(cands) > 20
    staged_transpose = staged_operand = 0
    for c in cands:
        psum = _psum_tiles(c.source)
        for line in c.source.splitlines():
            if "nisa.nc_transpose(" in line:
                assert re.search(r"data=(\w+)", line).group(1) not in psum, line
            pair = re.search(r"nisa\.scalar_tensor_tensor\(.*data=(\w+).*operand1=(\w+)", line)
            if pair:
                assert not set(pair.groups()) <= psum, line
        staged_transpose += bool(re.search(r"nc_transpose\(.*data=st\d*\[", c.source))
        staged_operand += bool(re.search(r"scalar_tensor_tensor\(.*operand1=st\d*\[", c.source))
    assert staged_transpose and staged_operand  # both kinds are met, and go through SBUF
    inputs = rms_of_projection.random_inputs(sizes, "bfloat16", seed=1)
    want, tol = kernel_reference(rms_of_projection.graph, inputs, "bfloat16")
    for c in [c for c in cands if re.search(r"\bst\d* = nl\.ndarray", c.source)][:4]:
        assert compare(TRN2.run(c.source, inputs, timing_only=False).outputs, want, tol).ok, c.describe()
