"""The chunked softmax identity behind flash-style attention: softmax(S) V over a row split into j
chunks of c columns equals the chunks' own softmax sums, each rescaled by exp(chunk max - row max),
for every j and c. Rows are indexed (chunk, column) here; a fold over a flattened j*c axis (a
reshape) is not yet normalised into its two levels, so that form stays unknown."""
import axon
from axon.verification import Status, Verifier


def verdict(f, g):
    return Verifier().check_programs(f.graph, g.graph)


@axon.program(s=("m", "j", "c"), v=("j", "c", "d"))
def whole_row(s, v):
    e = axon.exp(s - s.max(axis=(1, 2), keepdims=True))
    return (e.transpose(1, 0, 2) @ v).sum(axis=0) / e.sum(axis=(1, 2))[:, None]


def _chunks(s, v, rescale: bool):
    chunk_max = s.max(axis=-1, keepdims=True)  # (m, j, 1)
    p = axon.exp(s - chunk_max)
    partial_sum = p.sum(axis=-1, keepdims=True)  # (m, j, 1)
    partial_out = p.transpose(1, 0, 2) @ v  # (j, m, d)
    w = axon.exp(chunk_max - chunk_max.max(axis=1, keepdims=True)) if rescale else chunk_max * 0.0 + 1.0
    return (w.transpose(1, 0, 2) * partial_out).sum(axis=0) / (w * partial_sum).sum(axis=1)


@axon.program(s=("m", "j", "c"), v=("j", "c", "d"))
def chunked(s, v):
    return _chunks(s, v, rescale=True)


@axon.program(s=("m", "j", "c"), v=("j", "c", "d"))
def chunked_without_rescaling(s, v):
    return _chunks(s, v, rescale=False)


def test_chunked_softmax_equals_the_whole_row_for_any_number_of_chunks():
    v = verdict(whole_row, chunked)
    assert v.status is Status.PROVED
    assert v.covers({"m": 2, "j": 7, "c": 3, "d": 4})


def test_chunks_must_be_rescaled_to_one_maximum():
    assert verdict(whole_row, chunked_without_rescaling).status is Status.REFUTED
