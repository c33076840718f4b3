"""Symbolic slice bounds (`x.shape[1] // 2`) and axon.concatenate: HF rotate-half RoPE in the
reference and the prover. A bound k/2 needs k even, which the program records and a proof states."""
import numpy as np
import pytest

import axon
from axon.errors import InputError, ShapeError
from axon.verification import Status, Verifier


def verdict(f, g):
    return Verifier().check_programs(f.graph, g.graph)


@axon.program(x=("m", "d"), cos=("m", "d"), sin=("m", "d"))
def rope_half(x, cos, sin):
    h = x.shape[1] // 2
    return x * cos + axon.concatenate([-x[:, h:], x[:, :h]], axis=1) * sin


@axon.program(x=("m", "d"), cos=("m", "d"), sin=("m", "d"))
def rope_by_halves(x, cos, sin):
    h = x.shape[1] // 2
    first = x[:, :h] * cos[:, :h] - x[:, h:] * sin[:, :h]
    second = x[:, h:] * cos[:, h:] + x[:, :h] * sin[:, h:]
    return axon.concatenate([first, second], axis=1)


@axon.program(x=("m", "d"), cos=("m", "d"), sin=("m", "d"))
def rope_sign_swapped(x, cos, sin):
    h = x.shape[1] // 2
    return x * cos + axon.concatenate([x[:, h:], -x[:, :h]], axis=1) * sin


def reference_rope(x, cos, sin):
    h = x.shape[1] // 2
    return x * cos + np.concatenate([-x[:, h:], x[:, :h]], axis=1) * sin


def test_reference_is_numpys_rotate_half():
    rng = np.random.default_rng(0)
    x, c, s = (rng.standard_normal((3, 8)) for _ in range(3))
    np.testing.assert_allclose(rope_half(x, c, s), reference_rope(x, c, s), rtol=1e-12)


def test_an_odd_size_is_refused_where_numpy_would_split_unevenly():
    with pytest.raises(InputError, match="d even"):
        rope_half(np.ones((2, 5)), np.ones((2, 5)), np.ones((2, 5)))


def test_rotate_half_equals_its_halves_for_every_even_size():
    v = verdict(rope_half, rope_by_halves)
    assert v.status is Status.PROVED and "d even" in v.reason
    assert v.covers({"m": 3, "d": 8}) and not v.covers({"m": 3, "d": 7})


def test_the_sign_of_the_rotation_matters():
    assert verdict(rope_half, rope_sign_swapped).status is Status.REFUTED


def test_concatenate_shape_errors_name_the_axis():
    with pytest.raises(ShapeError, match="differ on axis 0"):
        axon.program(x=("m", "k"), y=("n", "k"))(lambda x, y: axon.concatenate([x, y], axis=1))
    with pytest.raises(ShapeError, match="step 1"):
        axon.program(x=("m", "k"))(lambda x: x[:, : x.shape[1] // 2 : 2])


@axon.program(x=("m", "n"))
def times_half_size(x):
    return x * (x.shape[1] // 2)


@axon.program(x=("m", "n"))
def times_size_halved(x):
    return x * x.shape[1] * 0.5


@axon.program(x=("m", "n"))
def first_half_mask(x):
    return x * (axon.arange("n") < x.shape[1] // 2)


@axon.program(x=("m", "n"))
def first_half_mask_doubled(x):
    return x * (axon.arange("n") * 2.0 < x.shape[1])


def test_a_halved_size_used_as_a_number_requires_an_even_size():
    """n // 2 outside a slice bound is n / 2 only where n is even: the program requires it, the
    proof states it (before, it held 'for all sizes', false at n = 3, where // is 1 and / 1.5)."""
    assert any(f.divisor == 2 for f in times_half_size.graph.constraints)
    for f, g in ((times_half_size, times_size_halved), (first_half_mask, first_half_mask_doubled)):
        v = verdict(f, g)
        assert v.status is Status.PROVED, v.reason
        assert "n even" in v.reason
    with pytest.raises(InputError, match="even"):
        times_half_size(np.ones((2, 3)))


@axon.program(x=("m", 7))
def literal_floor_half(x):
    return x[:, : x.shape[1] // 2]


def test_a_literal_size_halves_by_floor_division():
    assert literal_floor_half(np.arange(14.0).reshape(2, 7)).shape == (2, 3)
