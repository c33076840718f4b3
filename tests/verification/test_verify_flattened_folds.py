"""Folds over a flattened axis (x.reshape(m, j * c).sum) are the two-level fold over (j, c)
(lemma fold_split), index arithmetic simplifies within known ranges (index_split, index_range,
index_nest); each next to a twin that differs."""
import axon
from axon.verification import Status, Verifier


def verdict(f, g):
    return Verifier().check_programs(f.graph, g.graph)


@axon.program(x=("m", "j", "c"))
def flat_sum(x):
    m, j, c = x.shape
    return x.reshape(m, j * c).sum(axis=1)


@axon.program(x=("m", "j", "c"))
def nested_sum(x):
    return x.sum(axis=2).sum(axis=1)


@axon.program(x=("m", "j", "c"))
def flat_max(x):
    m, j, c = x.shape
    return x.reshape(m, j * c).max(axis=1)


@axon.program(x=("m", "j", "c"))
def nested_max(x):
    return x.max(axis=1).max(axis=1)


@axon.program(x=("m", "j", "c"))
def first_chunk_sum(x):  # only chunk 0: differs
    return x[:, 0:1, :].sum(axis=2).sum(axis=1)


@axon.program(x=("m", "j", "c"))
def flat_identity(x):
    m, j, c = x.shape
    return x.reshape(m, j * c).reshape(m, j, c)


@axon.program(x=("m", "j", "c"))
def same(x):
    return x * 1.0


@axon.program(x=("m", "j", "c"))
def flat_transposed(x):  # the chunks' columns flattened in the other order: differs
    m, j, c = x.shape
    return x.transpose(0, 2, 1).reshape(m, c * j).reshape(m, j, c)


def test_a_fold_over_a_flattened_axis_is_the_nested_fold():
    assert verdict(flat_sum, nested_sum).status is Status.PROVED
    assert verdict(flat_max, nested_max).status is Status.PROVED


def test_a_fold_over_part_of_the_axis_is_not():
    assert verdict(flat_sum, first_chunk_sum).status is Status.REFUTED


def test_reshape_round_trip_is_the_identity_and_a_transposed_one_is_not():
    assert verdict(flat_identity, same).status is Status.PROVED
    assert verdict(flat_transposed, same).status is Status.REFUTED


def test_a_flattened_axis_of_a_sliced_size_is_no_internal_error():
    """The flattened extent m * (n - 1) has a divisor of two terms, which fold_split does not
    take apart: the verdict may be undecided, but never an internal failure."""
    @axon.program(x=("m", "n"))
    def flat(x):
        y = x[:, 1:]
        m, k = y.shape
        return y.reshape(m * k).sum(axis=0, keepdims=True)

    @axon.program(x=("m", "n"))
    def nested(x):
        return x[:, 1:].sum(axis=1).sum(axis=0, keepdims=True)

    v = verdict(flat, nested)
    assert v.status is not Status.REFUTED and "verification failed" not in v.reason, v
