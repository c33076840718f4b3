"""Two kv heads in one row tile (tiling.packing: head pairing): decode attention whose folded rows
and head dim fill half the partitions walks both heads' keys at once, with q^T block-diagonal.
The identity it rests on is proved by the verifier; the kernels match the reference."""
import numpy as np

from axon.frontend import program
from axon.fusion.nodes import RowWorld, groups
import axon.frontend.functions as F
from axon.rewriting import discover
from axon.search.candidates import Counts, enumerate_candidates
from axon.search.check import check
from axon.search.lowering import Lowerer
from axon.search.select import compare
from axon.semantics.bounds import kernel_reference
from axon.suite import SUITE
from axon.targets.trainium.target import TrainiumTarget
from axon.tiling.packing import fold_heads, paired_heads_lemma, pairable
from axon.verification import Status, Verifier

TARGET = TrainiumTarget("trn2")


def _candidates(sizes, lowerer=None):
    b = SUITE["gqa"]
    nu, _ = discover(b.program.graph)
    pool = [(v.graph, ()) for v in nu.extract_variants(limit=2)]  # the second divides after exp @ v: it walks
    return enumerate_candidates("gqa", pool, sizes, TARGET, "bfloat16", lowerer or Lowerer(TARGET), Counts())


def test_the_pairing_identity_is_proved_block_by_block_and_a_wrong_block_is_not():
    assert [v.status for v in paired_heads_lemma()] == [Status.PROVED] * 4

    @program(pa=("r", "t"), pb=("r", "t"), va=("t", "d"), vb=("t", "d"))
    def own(pa, pb, va, vb):
        return pa @ va

    @program(pa=("r", "t"), pb=("r", "t"), va=("t", "d"), vb=("t", "d"))
    def off_diagonal(pa, pb, va, vb):  # the first head's rows against the second head's values
        return (F.concatenate([pa, pb], axis=0) @ F.concatenate([va, vb], axis=1))[:pa.shape[0], va.shape[1]:]

    assert Verifier().check_programs(own.graph, off_diagonal.graph).status is Status.REFUTED


def test_a_branch_on_an_outer_index_inside_a_fold_is_decided_by_its_range():
    """Rows [0, r) of (q_a stacked over q_b) @ k^T read q_a in every term of the fold over the
    contraction (lemma compare_range); rows [r, 2r) read q_b."""
    @program(qa=("r", "d"), qb=("r", "d"), k=("t", "d"))
    def top(qa, qb, k):
        return (F.concatenate([qa, qb], axis=0) @ k.T)[:qa.shape[0], :]

    @program(qa=("r", "d"), qb=("r", "d"), k=("t", "d"))
    def first(qa, qb, k):
        return qa @ k.T

    @program(qa=("r", "d"), qb=("r", "d"), k=("t", "d"))
    def second(qa, qb, k):
        return qb @ k.T

    assert Verifier().check_programs(first.graph, top.graph).status is Status.PROVED
    assert Verifier().check_programs(second.graph, top.graph).status is Status.REFUTED


def test_decode_at_head_dim_64_pairs_its_kv_heads_and_the_kernels_match():
    sizes = {"kv": 4, "g": 4, "s": 8, "t": 2048, "d": 64}  # 32 rows per kv head, two pairs
    b, lowerer = SUITE["gqa"], Lowerer(TARGET)
    paired = [c for c in _candidates(sizes, lowerer) if c.options.paired]
    assert paired and all(c.options.fold == 4 and c.passes[0].tiling.kv_chunk for c in paired)
    cand = paired[0]
    src = cand.source
    assert "q.reshape((2, 1, 64, 64))" in src and "k[i_b0 * 2 + 1, 0" in src and "v[i_b0 * 2, 0" in src
    assert "nisa.memset(dst=lhsT[0:128, 0:64]" in src and "lhsT[64:128, 32:64]" in src
    data = b.program.random_inputs(sizes, "bfloat16", seed=3)
    assert check(TARGET, "gqa", b.program.graph, cand, sizes, "bfloat16", lowerer, data, None).ok
    out = np.asarray(TARGET.run(src, data, timing_only=False).outputs[0])
    want, tol = kernel_reference(b.program.graph, data, "bfloat16")
    assert compare([out], want, tol).ok
    assert not compare([out[[1, 0, 2, 3]]], want, tol).ok  # the two heads of a pair swapped


def test_pairing_is_offered_only_where_two_heads_fit_a_row_tile():
    b = SUITE["gqa"]
    nu, _ = discover(b.program.graph)
    walking = nu.extract_variants(limit=2)[1].graph  # divides after exp @ v: the online form
    world = RowWorld.of(fold_heads(walking))
    (group,) = groups(world, "fused")
    fits = lambda sizes: pairable(world, group, sizes["g"] * sizes["s"], sizes, 128)  # noqa: E731
    assert fits({"kv": 2, "g": 4, "s": 8, "t": 2048, "d": 64})
    assert not fits({"kv": 2, "g": 4, "s": 8, "t": 2048, "d": 128})  # 2 x 128 contraction rows
    assert not fits({"kv": 3, "g": 4, "s": 8, "t": 2048, "d": 64})  # an odd number of kv heads
    assert not fits({"kv": 2, "g": 4, "s": 32, "t": 2048, "d": 64})  # 128 rows per kv head
    as_written = RowWorld.of(fold_heads(b.program.graph))  # softmax before exp @ v: no walk
    (whole_row,) = groups(as_written, "fused")
    assert not pairable(as_written, whole_row, 32, {"kv": 2, "g": 4, "s": 8, "t": 2048, "d": 64}, 128)
