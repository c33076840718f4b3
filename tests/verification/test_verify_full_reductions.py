"""Full reductions to rank 0 (x.sum(), x.mean(), x.max()) in the reference and the prover; the
order of a double sum or max is not part of its value (lemma fold_swap), its combine is."""
import numpy as np

import axon
from axon.verification import Status, Verifier


def verdict(f, g):
    return Verifier().check_programs(f.graph, g.graph)


@axon.program(x=("m", "n"))
def total(x):
    return x.sum()


@axon.program(x=("m", "n"))
def columns_then_rows(x):
    return x.sum(axis=0).sum()


@axon.program(x=("m", "n"))
def total_of_transpose(x):
    return x.T.sum(axis=1).sum()


@axon.program(x=("m", "n"))
def largest(x):
    return x.max()


@axon.program(x=("m", "n"))
def largest_by_columns(x):
    return x.max(axis=0).max()


@axon.program(x=("m", "n"))
def sum_of_row_maxima(x):  # a different combine inside: differs
    return x.max(axis=1).sum()


@axon.program(x=("m", "n"))
def mean_all(x):
    return x.mean()


def test_reference_gives_rank_zero_values():
    x = np.arange(6.0).reshape(2, 3)
    assert total(x).shape == () and total(x) == 15.0 and mean_all(x) == 2.5 and largest(x) == 5.0


def test_either_order_of_a_double_reduction():
    for f, g in ((total, columns_then_rows), (total, total_of_transpose), (largest, largest_by_columns)):
        assert verdict(f, g).status is Status.PROVED, (f.name, g.name)


def test_the_combine_is_part_of_the_value():
    assert verdict(largest_by_columns, sum_of_row_maxima).status is Status.REFUTED
