"""Folds over a concatenated axis split into folds over its parts (lemma fold_cases): the state
(row max, partial sums) of a row of scores made of two chunks of any lengths is the merge of the
chunks' own states, each rescaled to the joint maximum. Applied once per chunk, this is the running
update of a streaming (online) softmax over chunks of any sizes."""
import numpy as np

import axon
import axon.frontend.functions as F
from axon.semantics.evaluate import evaluate
from axon.verification import Status, Verifier

SHAPES = dict(a=("s", "t1"), b=("s", "t2"), va=("t1", "d"), vb=("t2", "d"))


def verdict(f, g):
    return Verifier().check_programs(f.graph, g.graph)


@axon.program(**SHAPES)
def whole_state(a, b, va, vb):
    x = F.concatenate([a, b], axis=1)
    p = F.exp(x - x.max(axis=1, keepdims=True))
    return p @ F.concatenate([va, vb], axis=0), p.sum(axis=1, keepdims=True)


def _merge(a, b, va, vb, rescale_second=True, joint_max=True):
    ma, mb = a.max(axis=1, keepdims=True), b.max(axis=1, keepdims=True)
    m = F.maximum(ma, mb) if joint_max else ma
    pa, pb = F.exp(a - ma), F.exp(b - mb)
    ca, cb = F.exp(ma - m), (F.exp(mb - m) if rescale_second else 1.0)
    return (pa @ va) * ca + (pb @ vb) * cb, pa.sum(axis=1, keepdims=True) * ca + pb.sum(axis=1, keepdims=True) * cb


@axon.program(**SHAPES)
def merged_state(a, b, va, vb):
    return _merge(a, b, va, vb)


@axon.program(**SHAPES)
def second_chunk_not_rescaled(a, b, va, vb):
    return _merge(a, b, va, vb, rescale_second=False)


@axon.program(**SHAPES)
def first_chunks_max(a, b, va, vb):
    return _merge(a, b, va, vb, joint_max=False)


@axon.program(a=("s", "t1"), b=("s", "t2"), c=("s", "t3"), va=("t1", "d"), vb=("t2", "d"), vc=("t3", "d"))
def three_chunks_softmax(a, b, c, va, vb, vc):
    x = F.concatenate([a, b, c], axis=1)
    p = F.exp(x - x.max(axis=1, keepdims=True))
    return (p / p.sum(axis=1, keepdims=True)) @ F.concatenate([va, vb, vc], axis=0)


@axon.program(a=("s", "t1"), b=("s", "t2"), c=("s", "t3"), va=("t1", "d"), vb=("t2", "d"), vc=("t3", "d"))
def three_chunks_streamed(a, b, c, va, vb, vc):
    m = a.max(axis=1, keepdims=True)
    p = F.exp(a - m)
    o, l = p @ va, p.sum(axis=1, keepdims=True)
    for x, v in ((b, vb), (c, vc)):  # the running update, one chunk at a time
        mx = F.maximum(m, x.max(axis=1, keepdims=True))
        p, scale = F.exp(x - mx), F.exp(m - mx)
        o, l, m = o * scale + p @ v, l * scale + p.sum(axis=1, keepdims=True), mx
    return o / l


def test_the_state_of_two_chunks_of_any_lengths_is_their_merged_states():
    v = verdict(whole_state, merged_state)
    assert v.status is Status.PROVED
    rng = np.random.default_rng(0)
    arrays = dict(a=rng.normal(size=(3, 5)), b=rng.normal(size=(3, 2)), va=rng.normal(size=(5, 4)),
                  vb=rng.normal(size=(2, 4)))
    for got, want in zip(evaluate(merged_state.graph, arrays), evaluate(whole_state.graph, arrays)):
        assert np.allclose(got, want)


def test_a_streamed_softmax_over_three_chunks_of_any_lengths_is_the_softmax():
    assert verdict(three_chunks_softmax, three_chunks_streamed).status is Status.PROVED


def test_a_merge_that_does_not_rescale_to_the_joint_maximum_is_refuted():
    assert verdict(whole_state, second_chunk_not_rescaled).status is Status.REFUTED
    assert verdict(whole_state, first_chunks_max).status is Status.REFUTED
