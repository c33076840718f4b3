"""Comparisons, axon.where and axon.arange: the reference, the prover and the refuter read the same
meaning (1.0 / 0.0 masks; where(c, a, b) is a where c != 0). Each must-prove case sits next to a
twin that differs, which must never be proved."""
import numpy as np

import axon
from axon.verification import Status, Verifier


def verdict(f, g):
    return Verifier().check_programs(f.graph, g.graph)


def causal_mask():
    return axon.arange("m")[:, None] >= axon.arange("n")[None, :]


@axon.program(s=("m", "n"))
def causal(s):
    return axon.where(causal_mask(), s, -1e9)


@axon.program(s=("m", "n"))
def causal_flipped(s):  # the same mask written from the other side
    return axon.where(axon.arange("n")[None, :] > axon.arange("m")[:, None], -1e9, s)


@axon.program(s=("m", "n"))
def strictly_causal(s):  # the diagonal masked too: differs
    return axon.where(axon.arange("m")[:, None] > axon.arange("n")[None, :], s, -1e9)


@axon.program(s=("m", "n"))
def causal_by_arithmetic(s):  # s + (mask - 1) * 1e9 is not -1e9 where masked: differs
    return s + (causal_mask() - 1.0) * 1e9


@axon.program(s=("m", "n"))
def causal_by_product(s):  # where(mask, s, c) = mask * s + (1 - mask) * c for a 0/1 mask
    mask = causal_mask()
    return mask * s + (1.0 - mask) * -1e9


@axon.program(x=("m", "n"))
def relu_by_where(x):
    return axon.where(x > 0, x, 0.0)


@axon.program(x=("m", "n"))
def relu_by_where_ge(x):
    return axon.where(x >= 0, x, 0.0)


@axon.program(x=("m", "n"))
def relu(x):
    return axon.relu(x)


@axon.program(x=("m", "n"))
def abs_by_where(x):
    return axon.where(x < 0, -x, x)


@axon.program(x=("m", "n"))
def positive_part_mask(x):
    return axon.where(x > 0, 1.0, 0.0)


@axon.program(x=("m", "n"))
def nonnegative_mask(x):  # differs from positive_part_mask only at x = 0 exactly
    return x >= 0


@axon.program(x=("m", "n"))
def identity_picks_diagonal(x):
    eye = axon.equal(axon.arange("m")[:, None], axon.arange("n")[None, :])
    return axon.where(eye, x, 0.0) + axon.where(eye, 0.0, x)


@axon.program(x=("m", "n"))
def same(x):
    return x * 1.0


def test_reference_masks_are_zero_one_and_where_selects():
    s = np.arange(12.0).reshape(3, 4)
    out = causal(s)
    assert out[1, 1] == 5.0 and out[1, 2] == -1e9 and out[2, 0] == 8.0
    np.testing.assert_array_equal(nonnegative_mask(np.array([[-1.0, 0.0, 2.0]])), [[0.0, 1.0, 1.0]])


def test_a_causal_mask_from_either_side_is_one_mask():
    assert verdict(causal, causal_flipped).status is Status.PROVED


def test_where_over_a_mask_is_its_product_form():
    assert verdict(causal, causal_by_product).status is Status.PROVED


def test_the_diagonal_matters():
    v = verdict(causal, strictly_causal)
    assert v.status is Status.REFUTED


def test_adding_a_large_negative_is_not_masking():
    assert verdict(causal, causal_by_arithmetic).status is Status.REFUTED


def test_relu_by_where_either_comparison():
    assert verdict(relu_by_where, relu).status is Status.PROVED
    assert verdict(relu_by_where_ge, relu).status is Status.PROVED  # both give 0 at x = 0


def test_where_cases_split_on_a_data_comparison():
    assert verdict(identity_picks_diagonal, same).status is Status.PROVED
    assert verdict(abs_by_where, relu).status is Status.REFUTED


def test_strict_and_non_strict_masks_differ_at_zero_only_and_are_never_proved():
    # random inputs never hit x = 0, so only the solver can see the difference: never a proof
    assert verdict(positive_part_mask, nonnegative_mask).status is not Status.PROVED


def test_error_bounds_of_an_exact_mask_do_not_flip_and_an_inexact_one_may():
    from axon.semantics.bounds import kernel_reference
    from axon.targets.trainium.runner import numpy_dtype

    s = np.random.default_rng(0).standard_normal((8, 8)).astype(numpy_dtype("bfloat16"))
    (ref,), tol = kernel_reference(causal.graph, {"s": s}, "bfloat16")
    kept = np.tril(np.ones((8, 8), bool))
    assert np.all(tol.bounds[0][kept] <= 1e-30)  # indices compare exactly: s passes through as it is
    assert np.all(tol.bounds[0][~kept] < 1e-2 * 1e9)  # only -1e9's own rounding to bfloat16
    x = np.array([[1e-3, -1e-3, 0.5, 1e-42]], np.float32)  # narrowed to bfloat16 inside the kernel
    (ref,), tol = kernel_reference(positive_part_mask.graph, {"x": x}, "bfloat16")
    assert np.all(tol.bounds[0][0, :3] <= 1e-30)  # narrowing cannot move them across 0
    assert tol.bounds[0][0, 3] >= 1.0  # a subnormal that bfloat16 may round to 0: the mask may flip


@axon.program(x=("m", "n"))
def count_below_fraction(x):
    return x * (axon.arange(6000) < 2.5).sum()


@axon.program(x=("m", "n"))
def times_two_and_a_half(x):
    return x * 2.5


@axon.program(x=("m", "n"))
def times_three(x):
    return x * 3.0


@axon.program(x=("m", "n"))
def count_at_least_fraction(x):
    return x * (axon.arange(6000) >= 5997.5).sum()


@axon.program(x=("m", "n"))
def times_two(x):
    return x * 2.0


def test_a_fractional_threshold_counts_whole_indices():
    """r < 2.5 holds at r = 0, 1, 2: three indices, not 2.5 (the fold split at the threshold took
    the fraction for a count); r >= 5997.5 at two. The width of 6000 is past the small-trial
    limit, so the refuter's one larger trial is what catches the false pairs."""
    assert verdict(count_below_fraction, times_two_and_a_half).status is Status.REFUTED
    assert verdict(count_below_fraction, times_three).status is Status.PROVED
    assert verdict(count_at_least_fraction, times_two_and_a_half).status is Status.REFUTED
    assert verdict(count_at_least_fraction, times_two).status is Status.PROVED


@axon.program(x=("m", "n"))
def count_below_half_plus(x):
    return x * (axon.arange("n") - 0.5 < x.shape[1] // 2).sum()


@axon.program(x=("m", "n"))
def times_half_plus_half(x):
    return x * (x.shape[1] // 2) + x * 0.5


def test_a_threshold_off_the_integers_is_not_split():
    """r < n/2 + 1/2 counts n/2 + 1 indices for an even n: never proved equal to n/2 + 1/2."""
    assert verdict(count_below_half_plus, times_half_plus_half).status is not Status.PROVED
