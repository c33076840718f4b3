"""Attention walked in key chunks with a running softmax state (tiling.online): the merge it relies
on is proved by the verifier, the walk is offered only where the pass has that form, it fits
where a whole row of scores does not, and its kernels match the reference."""
import re

import numpy as np
import pytest

from axon.fusion.nodes import RowWorld, groups
from axon.ir import Graph
from axon.rewriting import discover
from axon.search.candidates import Counts, enumerate_candidates
from axon.search.lowering import Lowerer
from axon.search.select import compare
from axon.semantics.bounds import kernel_reference
from axon.semantics.evaluate import evaluate
from axon.suite import SUITE
from axon.targets.trainium.target import TrainiumTarget
from axon.tiling.online import _merged, _state, merge_lemma, online_softmax, partial_max_lemma, slot_state
from axon.tiling.space import enumerate_tilings
from axon.verification import Status

TARGET = TrainiumTarget("trn2")


def _fused_worlds(name):
    prog, _ = SUITE[name].program.generalized()
    nu, _ = discover(prog.graph)
    for v in nu.extract_variants(limit=8):
        try:
            w = RowWorld.of(v.graph)
        except Exception:
            continue
        (g,) = groups(w, "fused")
        yield v, w, g


def _unread_results(source: str, inputs: dict) -> list:
    """Kernel lines of instructions whose on-chip results nothing reads (dead code)."""
    from axon.targets.trainium.simulator import ShapeDtype, load_source, simulate
    from axon.targets.trainium.perfmodel import unread_results

    shapes = {k: ShapeDtype(v.shape, "bfloat16") for k, v in inputs.items()}
    trace = simulate(load_source(source), shapes, target="trn2", timing_only=True).trace
    return sorted({ins.line for ins in unread_results(trace)})


def test_the_merge_of_chunk_states_is_proved_for_chunks_of_any_lengths():
    v = merge_lemma()
    assert v.status is Status.PROVED, v.reason


def test_a_chunk_max_from_its_pieces_maxes_is_proved_and_a_wrong_split_is_not():
    from axon.ir import input_node, make_node
    from axon.semantics.ops import AxisParams, ConcatParams, Op
    from axon.semantics.sizes import Size
    from axon.verification import Verifier

    assert partial_max_lemma().status is Status.PROVED, partial_max_lemma().reason
    s, t1, t2 = (Size.of(n) for n in ("s", "t1", "t2"))
    a, b = input_node("a", (s, t1)), input_node("b", (s, t2))
    mx = lambda y: make_node(Op.REDUCE_MAX, (y,), AxisParams(1, True))
    whole = mx(make_node(Op.CONCAT, (a, b), ConcatParams(1)))
    first_only = mx(make_node(Op.CONCAT, (mx(a), mx(a)), ConcatParams(1)))  # forgets the second piece
    v = Verifier().check_programs(Graph((a, b), (whole,)), Graph((a, b), (first_only,)))
    assert v.status is Status.REFUTED


def test_the_merge_lemma_is_a_real_claim_numerically():
    # the same programs the verifier compared, on numbers: and a wrong merge (the second chunk's
    # state not rescaled) differs
    from axon.ir import input_node, make_node
    from axon.semantics.ops import ConcatParams, Op
    from axon.semantics.sizes import Size

    s, t1, t2, d = (Size.of(n) for n in ("s", "t1", "t2", "d"))
    a, b, va, vb = (input_node("a", (s, t1)), input_node("b", (s, t2)), input_node("va", (t1, d)),
                    input_node("vb", (t2, d)))
    whole = _state(make_node(Op.CONCAT, (a, b), ConcatParams(1)), make_node(Op.CONCAT, (va, vb), ConcatParams(0)))
    first, second = slot_state(a, va), slot_state(b, vb)
    parts = {"n": first["n"], "l": first["l"], "o": first["o"], "n_c": second["n"], "l_c": second["l"],
             "o_c": second["o"]}
    merged = _merged(parts)
    rng = np.random.default_rng(0)
    arrays = dict(a=rng.normal(size=(3, 5)) * 4, b=rng.normal(size=(3, 2)) * 4, va=rng.normal(size=(5, 4)),
                  vb=rng.normal(size=(2, 4)))
    ins = (a, b, va, vb)
    want = evaluate(Graph(ins, (whole["o"], whole["l"], whole["m"])), arrays)
    got = evaluate(Graph(ins, (merged["o"], merged["l"], make_node(Op.NEG, (merged["n"],)))), arrays)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-12)
    wrong = evaluate(Graph(ins, (make_node(Op.ADD, (first["o"], parts["o_c"])),)), arrays)[0]
    assert not np.allclose(wrong, want[0])


def test_a_tree_of_merges_in_any_bracketing_is_the_whole_rows_state():
    """The walk merges adjacent runs of chunks pairwise, ((0 1) (2 3)) (4): on numbers, any
    bracketing of the proved merge gives the state of the whole row."""
    rng = np.random.default_rng(1)
    x, v = rng.normal(size=(3, 10)) * 4, rng.normal(size=(10, 2))
    cuts = [(0, 2), (2, 3), (3, 7), (7, 8), (8, 10)]

    def merge(p, q):
        n = np.minimum(p[0], q[0])
        a, b = np.exp(n - p[0]), np.exp(n - q[0])
        return n, p[1] * a + q[1] * b, p[2] * a + q[2] * b

    def state(lo, hi):
        n = -x[:, lo:hi].max(axis=1, keepdims=True)
        e = np.exp(x[:, lo:hi] + n)
        return n, e.sum(axis=1, keepdims=True), e @ v[lo:hi]

    states = [state(*c) for c in cuts]
    while len(states) > 1:
        states = [merge(*states[i:i + 2]) if i + 1 < len(states) else states[i] for i in range(0, len(states), 2)]
    n, l, o = states[0]
    e = np.exp(x - x.max(axis=1, keepdims=True))
    np.testing.assert_allclose(o / l, (e @ v) / e.sum(axis=1, keepdims=True), rtol=1e-12)
    np.testing.assert_allclose(-n, x.max(axis=1, keepdims=True))


def test_the_walk_is_offered_only_for_max_exp_sum_between_two_matmuls():
    found = [v for v, w, g in _fused_worlds("gqa") if online_softmax(w, g)]
    # gqa: only the variant dividing after the second matmul (o / l) has the form; softmax as
    # written divides the whole row of exps first
    assert len(found) == 1 and found[0].rewrites
    assert any(online_softmax(w, g) for _, w, g in _fused_worlds("attention"))
    assert not any(online_softmax(w, g) for _, w, g in _fused_worlds("softmax_matmul"))
    assert not any(online_softmax(w, g) for _, w, g in _fused_worlds("causal_gqa"))  # masked: the causal walk


def test_decode_at_a_long_context_fits_only_as_a_walk():
    sizes = {"kv": 8, "g": 4, "s": 16, "t": 32768, "d": 128}
    (w, g), = [(w, g) for _, w, g in _fused_worlds("gqa") if online_softmax(w, g)]
    fits, rejected = enumerate_tilings(w, g, sizes, TARGET.limits())
    assert fits and all(t.kv_chunk for t in fits)
    assert any("exceeds" in why for t, why in rejected if not t.kv_chunk)
    # 16 rows of one head per row tile, the kv head's K and V shared by its 4 query heads: whole
    assert {t.n_block for t in fits} == {0}


@pytest.mark.parametrize("name, sizes, weights", [
    ("gqa", {"kv": 2, "g": 2, "s": 128, "t": 2048, "d": 64}, "whole"),  # two query heads share a kv head's K, V
    ("gqa", {"kv": 1, "g": 1, "s": 128, "t": 2048, "d": 128}, "per chunk"),  # one row tile: loads overlap the walk
    ("attention", {"kv": 1, "g": 2, "s": 128, "t": 2048}, "whole")])  # the scale: an epilogue of the scores
def test_walk_kernels_match_the_reference(name, sizes, weights):
    b = SUITE[name]
    prog, named = b.program.generalized()
    sizes = {**sizes, **named}
    nu, _ = discover(prog.graph)
    variants = [(v.graph, ()) for v in nu.extract_variants(limit=8)]
    cands = enumerate_candidates(name, variants, sizes, TARGET, "bfloat16", Lowerer(TARGET), Counts())
    walks = [c for c in cands if c.passes[0].tiling.kv_chunk and not c.options.lowering]
    chunks = {c.passes[0].tiling.kv_chunk for c in walks}
    assert chunks == {512, 1024} and {c.options.precision for c in walks} == {"f32", "kernel"}
    assert {c.passes[0].tiling.n_block for c in walks} == ({0} if weights == "whole" else chunks)
    # exp @ v contracts over a chunk's keys on all 128 partitions, also where q k^T contracts over
    # a head dim of 64
    contractions = {int(k) for c in walks for k in re.findall(r"nc_matmul\(.*stationary=\w+\[0:(\d+), ", c.source)}
    assert contractions == {sizes.get("d", 128), 128}
    inputs = prog.random_inputs(sizes, "bfloat16", seed=3)
    want, tol = kernel_reference(prog.graph, inputs, "bfloat16")
    seen = set()
    for c in walks:
        key = (c.variant, c.passes[0].tiling.kv_chunk, c.passes[0].tiling.n_block, c.options.precision)
        if key in seen:
            continue
        seen.add(key)
        # the chunks run in an affine loop (independent: each writes its own state slot), then a
        # tree of merges: at each level a loop over the pairs left (one pair: no loop)
        n_chunks = 2048 // c.passes[0].tiling.kv_chunk
        chunks = c.source.find("for i_ch in nl.affine_range(")
        levels = re.findall(r"for i_m in nl\.sequential_range\((\d+)\)", c.source)
        first_merge = c.source.find("for i_m in")
        assert chunks > 0 and (first_merge == -1 or first_merge > chunks)
        assert [int(k) for k in levels] == [k for k in (n_chunks // 2, n_chunks // 4) if k > 1]
        assert "nl.memset" not in c.source  # the running state starts as chunk 0's: nothing to fill
        m = TARGET.run(c.source, inputs, timing_only=False)
        assert compare(m.outputs, want, tol).ok, c.describe()
        assert not _unread_results(c.source, inputs), c.describe()
        # the scores' maxes ride on the instruction that takes them out of PSUM: the scale where
        # the variant has one there, else a copy as x * 1
        assert re.search(r"tensor_scalar_reduce\(dst=\w+\[[^]]*\], reduce_res=max_parts\[.*operand0=(1\.0|0\.088)"
                         r".*op0=nl\.multiply, reduce_op=nl\.maximum", c.source), c.describe()
