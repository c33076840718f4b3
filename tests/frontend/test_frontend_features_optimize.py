"""Frontend features through optimize as through the reference and verify: literal dimensions
(`x=("m", 4096)`: optimize searches the program with each literal named and bound to its value)
and comparisons (1.0 / 0.0 masks, lowered to the Vector engine's comparison ALU operators)."""
import numpy as np
import pytest

import axon
from axon.search.optimize import optimize


@pytest.fixture(autouse=True)
def _no_home_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("AXON_CACHE_DIR", str(tmp_path / "cache"))


def test_literals_become_named_dimensions_bound_to_their_value():
    @axon.program(q=("s", 128), k=("t", 128), w=(128, 64))
    def f(q, k, w):
        return (q @ k.T) @ (k @ w)

    general, named = f.generalized()
    assert named == {"n128": 128, "n64": 64}
    assert [str(d) for d in general.graph.inputs[2].shape] == ["n128", "n64"]
    rng = np.random.default_rng(0)
    arrays = {"q": rng.standard_normal((4, 128)), "k": rng.standard_normal((5, 128)),
              "w": rng.standard_normal((128, 64))}
    np.testing.assert_array_equal(general(**arrays), f(**arrays))


def test_a_literal_the_program_needs_keeps_its_value():
    @axon.program(x=("m", 12), y=("m", 5))
    def f(x, y):
        return x.reshape(("m", 3, 4)).sum(axis=-1), y * 2.0  # the 12 must stay 12 for the reshape

    general, named = f.generalized()
    assert named == {"n5": 5}
    assert [str(d) for d in general.graph.inputs[0].shape] == ["m", "12"]


def test_a_new_name_does_not_clash_with_the_programs_own():
    @axon.program(x=("n8", 8))
    def f(x):
        return x * 2.0

    _, named = f.generalized()
    assert named == {"_n8": 8}


def test_optimize_a_program_with_a_literal_dimension():
    @axon.program(x=("m", 256))
    def square(x):
        return x * x

    r = optimize(square, {"m": 128}, dtype="float32")
    assert r.sizes == {"m": 128}  # the user's sizes, not the internal names
    assert r.checked["rows"] == "all" and r.checked["max_err_over_bound"] <= 1
    assert r.latency_ns <= r.baseline_latency_ns


def test_optimize_a_program_with_comparisons():
    @axon.program(x=("m", "n"), y=("m", "n"))
    def step_mask(x, y):
        return (x > 0.5) * y + (x <= y)

    r = optimize(step_mask, {"m": 128, "n": 256}, dtype="float32")
    assert r.checked["rows"] == "all" and r.checked["max_err_over_bound"] <= 1
    assert "nl.greater" in r.kernel_source and "nl.greater_equal" in r.kernel_source


@axon.program(q=("s", "d"), k=("t", "d"))
def scaled_by_rsqrt_of_a_size(q, k):
    return (q @ k.T) * axon.rsqrt(q.shape[-1])


def test_a_function_of_a_size_is_a_rank_0_constant_of_the_program():
    g = scaled_by_rsqrt_of_a_size.graph
    scale = g.outputs[0].inputs[1]
    assert scale.op.value == "rsqrt" and scale.shape == () and str(scale.inputs[0].params.value) == "d"
    rng = np.random.default_rng(0)
    q, k = rng.standard_normal((3, 16)), rng.standard_normal((5, 16))
    np.testing.assert_allclose(scaled_by_rsqrt_of_a_size(q, k), (q @ k.T) / 4.0, rtol=1e-15)
    with pytest.raises(axon.UnsupportedError, match="inside an @axon.program"):
        axon.rsqrt(16)  # no program is being traced


def test_a_function_of_a_size_is_proved_as_a_function_of_that_size():
    @axon.program(q=("s", "d"), k=("t", "d"))
    def divided(q, k):
        return (q @ k.T) / axon.sqrt(q.shape[1])

    @axon.program(q=("s", "d"), k=("t", "d"))
    def by_the_wrong_size(q, k):
        return (q @ k.T) / axon.sqrt(q.shape[0])

    assert axon.verify(scaled_by_rsqrt_of_a_size, divided).status.value == "proved"
    assert axon.verify(scaled_by_rsqrt_of_a_size, by_the_wrong_size).status.value == "refuted"


def test_optimize_folds_a_function_of_a_size_into_the_kernels_immediate():
    r = optimize(scaled_by_rsqrt_of_a_size, {"s": 128, "t": 256, "d": 64}, dtype="float32")
    assert r.checked["rows"] == "all" and r.checked["max_err_over_bound"] <= 1
    assert "0.125" in r.kernel_source  # 1 / sqrt(64), evaluated at the case's sizes


@axon.program(x=("m", "n"), w=("n", "k"))
def leaky_relu_matmul(x, w):
    return axon.where(x > 0, x, 0.01 * x) @ w


@axon.program(q=("s", "d"), k=("t", "d"), v=("t", "d"), mask=("s", "t"))
def attention_with_a_mask_input(q, k, v, mask):
    s = axon.where(mask, q @ k.T, -30000.0)
    e = axon.exp(s - s.max(axis=-1, keepdims=True))
    return (e / e.sum(axis=-1, keepdims=True)) @ v


@pytest.mark.parametrize("program, sizes", [
    (leaky_relu_matmul, {"m": 128, "n": 256, "k": 128}),
    (attention_with_a_mask_input, {"s": 128, "t": 256, "d": 64}),
])
def test_optimize_a_where_whose_condition_is_data(program, sizes):
    """The condition computed from data (x > 0) or loaded (a mask input): an exact selection,
    tensor_copy_predicated under a uint8 predicate (no 0 * x masks, which an infinity in the
    branch not taken would turn into NaN)."""
    r = optimize(program, sizes, dtype="float32")
    assert r.checked["rows"] == "all" and r.checked["max_err_over_bound"] <= 1
    assert "nisa.tensor_copy_predicated(" in r.kernel_source and "dtype=nl.uint8" in r.kernel_source


def test_a_mask_input_is_checked_on_both_branches():
    data = attention_with_a_mask_input.random_inputs({"s": 64, "t": 128, "d": 32})
    mask = data["mask"]
    assert 0.3 < (mask == 0).mean() < 0.7 and (mask > 0).any()
    assert (data["q"] < 0).any()  # the other inputs stay standard normal


@axon.program(x=("m", "n"), y=("m", "n"))
def mean_squared_error_per_row(x, y):
    return ((x - y) * (x - y)).mean(axis=-1)


@axon.program(x=("b", "s", "d"), w=("d", "k"))
def means_and_projection(x, w):
    return axon.sqrt((x * x).mean(axis=-1)), x @ w


@pytest.mark.parametrize("program, sizes, shapes", [
    (mean_squared_error_per_row, {"m": 256, "n": 512}, [(256,)]),
    (means_and_projection, {"b": 2, "s": 128, "d": 256, "k": 128}, [(2, 128), (2, 128, 128)]),
])
def test_optimize_an_output_a_reduction_without_keepdims_computes(program, sizes, shapes):
    """The kernel computes the [.., 1] column and stores it through a reshaped view of the
    caller's [m] (or [b, s]) tensor."""
    from axon.fusion.nodes import columns_for_vectors

    columns = columns_for_vectors(program.graph)
    assert columns is not program.graph and columns_for_vectors(columns) is columns
    r = optimize(program, sizes, dtype="float32")
    assert r.checked["rows"] == "all" and r.checked["max_err_over_bound"] <= 1
    for i, shape in enumerate(shapes):
        name = "out" if len(shapes) == 1 else f"out{i}"
        assert f"{name} = nl.ndarray({shape!r}, dtype=DT" in r.kernel_source
    assert ", 1))[" in r.kernel_source  # the stores address the [.., 1] view


@axon.program(x=("m", "n"), s=("m", 1))
def centered_by_a_squeezed_mean(x, s):
    c = x - x.mean(axis=-1)[:, None]
    return (c * c) * s


@axon.program(x=("m", "n"), g=("n",))
def scaled_by_a_computed_vector(x, g):
    return x / (g * g + 1.0)


def test_a_reduction_made_a_column_again_is_the_column():
    """x.mean(-1)[:, None] is the keepdims mean: the kernel keeps the column (was 'operator sum
    with shape (m) has no row axis m'); a vector computed from vector inputs alone is one line
    saying to pass it in."""
    r = optimize(centered_by_a_squeezed_mean, {"m": 256, "n": 320}, dtype="float32")
    assert r.checked["rows"] == "all" and r.checked["max_err_over_bound"] <= 1
    from axon.errors import UnsupportedError
    with pytest.raises(UnsupportedError, match=r"computes a \(n\) vector from vector inputs"):
        optimize(scaled_by_a_computed_vector, {"m": 256, "n": 320}, dtype="float32")
