"""The chunked softmax identity behind flash-style attention: softmax(S) V over a row split into j
chunks of c columns equals the chunks' own softmax sums, each rescaled by exp(chunk max - row max),
for every j and c, with the row indexed (chunk, column) or flattened into j*c columns (a fold over a
flattened axis reads it through floor division and is split into its two levels: lemma fold_split)."""
import axon
from axon.verification import Status, Verifier


def verdict(f, g):
    return Verifier().check_programs(f.graph, g.graph)


@axon.program(s=("m", "j", "c"), v=("j", "c", "d"))
def whole_row(s, v):
    e = axon.exp(s - s.max(axis=(1, 2), keepdims=True))
    return (e.transpose(1, 0, 2) @ v).sum(axis=0) / e.sum(axis=(1, 2))[:, None]


@axon.program(s=("m", "j", "c"), v=("j", "c", "d"))
def flat_row(s, v):
    m, j, c = s.shape
    row = s.reshape(m, j * c)
    e = axon.exp(row - row.max(axis=-1, keepdims=True))
    return (e / e.sum(axis=-1, keepdims=True)) @ v.reshape(j * c, v.shape[2])


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
    assert verdict(flat_row, chunked).status is Status.PROVED
    assert verdict(flat_row, whole_row).status is Status.PROVED


def test_chunks_must_be_rescaled_to_one_maximum():
    assert verdict(whole_row, chunked_without_rescaling).status is Status.REFUTED
    assert verdict(flat_row, chunked_without_rescaling).status is Status.REFUTED
