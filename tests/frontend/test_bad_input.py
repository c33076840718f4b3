"""Bad input gets one clear AxonError naming the operand and the shapes, never a deep traceback."""
import ml_dtypes
import numpy as np
import pytest

import axon
from axon.errors import InputError, ShapeError, UnsupportedError


def trace(dims, fn):
    return axon.program(**dims)(fn)


@pytest.mark.parametrize("dims, fn, error, words", [
    ({"x": ("m", "k"), "w": ("n", "k")}, lambda x, w: x @ w, ShapeError, ["matmul", "x(m, k)", "w(n, k)", "k with n"]),
    ({"x": ("m", "k"), "y": ("k", "m")}, lambda x, y: x + y, ShapeError, ["add", "(m, k)", "(k, m)", "m vs k"]),
    ({"x": ("m",), "w": ("m", "n")}, lambda x, w: x @ w, ShapeError, ["rank >= 2"]),
    ({"x": ("m", "k")}, lambda x: np.exp(x), UnsupportedError, ["np.exp", "axon"]),
    ({"x": ("m", "k")}, lambda x: x % 2, UnsupportedError, ["operator %"]),
    ({"x": ("m", "k")}, lambda x: x.sum(axis=3), ShapeError, ["axis 3", "x(m, k)"]),
    ({"x": ("m", "k")}, lambda x: x.transpose(0, 0), ShapeError, ["permutation"]),
    ({"x": ("m", "k")}, lambda x: x.reshape(3, 4), ShapeError, ["reshape", "(m, k)", "(3, 4)"]),
    ({"x": ("m", "k")}, lambda x: x[::-1], UnsupportedError, ["slice bound -1"]),
    ({"x": ("m", "k")}, lambda x: x if x > 0 else x, UnsupportedError, ["truth value", "control flow"]),
    ({"x": ("m", "k")}, lambda x: x == 0, UnsupportedError, ["==", "axon.equal"]),
    ({"x": ("m", "k")}, lambda x: axon.arange("q"), ShapeError, ["arange('q')", "not a dimension", "k, m"]),
    ({"x": ("m", "k")}, lambda x: x ** 3, UnsupportedError, ["x ** 3"]),
    ({"x": ("m", "k")}, lambda x: x.argmax(axis=-1), UnsupportedError, ["tensor method .argmax", "test_bad_input.py:"]),
    ({"x": ("m", "k")}, lambda x: x + np.ones(3), UnsupportedError, []),
    ({"x": ("m", "k")}, lambda x: "no tensor", UnsupportedError, ["must return traced tensors"]),
    ({"x": ("m", -1)}, lambda x: x, ShapeError, ["dimension -1"]),
    ({"x": ("m", "k")}, lambda x, y: x, ShapeError, ["parameters"]),
])
def test_tracing_errors_are_clear(dims, fn, error, words):
    with pytest.raises(error) as info:
        trace(dims, fn)
    message = str(info.value)
    assert "\n" not in message
    for word in words:
        assert word in message


def test_error_names_the_users_line():
    with pytest.raises(ShapeError, match=r"test_bad_input.py:\d+: matmul"):
        trace({"x": ("m", "k"), "w": ("n", "k")}, lambda x, w: x @ w)


MATMUL = axon.benchmark("matmul")
F32 = np.float32


@pytest.mark.parametrize("args, kwargs, words", [
    ((np.ones((4, 5), F32), np.ones((6, 3), F32)), {}, ["input 'w'", "(6, 3)", "k=5", "from input 'x'"]),
    ((np.ones((4, 5), np.int32), np.ones((5, 3), F32)), {}, ["input 'x'", "int32", "float"]),
    ((np.ones((4, 5, 1), F32), np.ones((5, 3), F32)), {}, ["input 'x'", "rank 3", "rank 2", "(m, k)"]),
    ((np.ones((4, 5), F32),), {}, ["missing input 'w'"]),
    (([[1.0]], np.ones((5, 3), F32)), {}, ["NumPy array", "list"]),
    ((), {"x": np.ones((4, 5), F32), "v": np.ones((5, 3), F32)}, ["no input 'v'"]),
])
def test_call_errors_name_operand_and_shapes(args, kwargs, words):
    with pytest.raises(InputError) as info:
        MATMUL(*args, **kwargs)
    for word in words:
        assert word in str(info.value)


def test_fixed_and_multiple_dims_are_checked():
    rope = axon.benchmark("rope")
    x, c = np.ones((4, 7), F32), np.ones((4, 3), F32)
    with pytest.raises(InputError, match="multiple of 2"):
        rope(x, c, c)
    gqa = axon.benchmark("gqa")
    q, kv = np.ones((2, 2, 3, 4), F32), np.ones((2, 2, 5, 4), F32)
    with pytest.raises(InputError, match="size 1 got 2"):
        gqa(q, kv, kv)


def test_call_keeps_input_dtype_and_computes_in_float64():
    x = np.full((2, 3), 1.0 + 2**-9, dtype=ml_dtypes.bfloat16)  # not representable: rounds to 1.0
    w = np.ones((3, 2), dtype=ml_dtypes.bfloat16)
    out = MATMUL(x, w)
    assert out.dtype == ml_dtypes.bfloat16 and out.shape == (2, 2)
    assert float(MATMUL.reference(x, w)[0][0, 0]) == 3.0


def test_frontend_surface():
    @axon.program(x=("b", "m", "k"), s=("m", 1))
    def f(x, s):
        y = axon.maximum(x, 0) + axon.minimum(x, 1) * axon.tanh(x) - axon.gelu(x) / axon.sigmoid(x)
        z = axon.log(axon.square(x) + 1) * axon.rsqrt(x * x + 1) * axon.reciprocal(s + 3)
        m = (y + z).mean(axis=(1, 2), keepdims=True) + x.max(axis=-1, keepdims=True).sum(axis=1, keepdims=True)
        return (-x * m).transpose(0, 2, 1)[:, 1:, 0::2].cumsum(axis=1), x.T[..., None].reshape(x.shape[2], x.shape[1], x.shape[0])

    rng = np.random.default_rng(0)
    x, s = rng.standard_normal((2, 4, 6)), rng.standard_normal((4, 1)) ** 2
    out_a, out_b = f(x, s)
    y = np.maximum(x, 0) + np.minimum(x, 1) * np.tanh(x) - 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3))) * (1 + np.exp(-x))
    z = np.log(x**2 + 1) / np.sqrt(x * x + 1) / (s + 3)
    m = (y + z).mean(axis=(1, 2), keepdims=True) + x.max(-1, keepdims=True).sum(1, keepdims=True)
    np.testing.assert_allclose(out_a, np.cumsum(np.transpose(-x * m, (0, 2, 1))[:, 1:, 0::2], axis=1), rtol=1e-10)
    np.testing.assert_allclose(out_b, x.T)


def test_random_inputs_depend_on_the_seed_only_not_on_the_threads_drawing_them(monkeypatch):
    import importlib
    import os

    from axon.suite import SUITE

    program = importlib.import_module("axon.frontend.program")  # the module, not axon.program
    monkeypatch.setattr(program, "DRAW_BLOCK", 1000)  # several blocks, so several threads
    prog, sizes = SUITE["matmul"].program, {"m": 64, "k": 96, "n": 48}
    many = prog.random_inputs(sizes, "bfloat16", seed=3)
    monkeypatch.setattr(os, "cpu_count", lambda: 1)
    one = prog.random_inputs(sizes, "bfloat16", seed=3)
    assert all(one[k].dtype == ml_dtypes.bfloat16 and np.array_equal(one[k], many[k]) for k in one)
    other = prog.random_inputs(sizes, "bfloat16", seed=4)
    assert not np.array_equal(other["x"], one["x"]) and not np.array_equal(one["x"], one["w"][:64, :96])
    x = np.asarray(one["x"], np.float64)
    assert abs(x.mean()) < 0.05 and abs(x.std() - 1) < 0.05  # standard normal


def test_a_file_that_fails_to_import_is_one_line_naming_the_line_that_failed(tmp_path):
    from axon.frontend.loading import load_program

    path = tmp_path / "model.py"
    path.write_text("import axon, math\n\n@axon.program(q=('s', 'd'))\ndef f(q):\n    return q * math.sqrt(q.shape[1])\n")
    with pytest.raises(InputError) as info:
        load_program(f"{path}:f")
    message = str(info.value)
    assert "\n" not in message and f"{path}:5: TypeError" in message and "axon.sqrt(n)" in message


def test_a_branch_on_a_symbolic_size_is_refused_at_its_line():
    """`if x.shape[1] == 3:` would take one branch for every size (a traced program that is not the
    one written, proved equal to the other branch): refused, naming the line; a branch that holds at
    every size (n == n, a size's truth) is fine."""
    def body(cond):
        @axon.program(x=("m", "n"))
        def f(x):
            if cond(x.shape):
                return x.sum(axis=1)
            return x.max(axis=1)
        return f.graph

    for cond, what in ((lambda s: s[1] == 3, "n == 3"), (lambda s: s[0] != s[1], "m != n"),
                       (lambda s: s[1] - 1, r"the truth of -1 \+ n")):
        with pytest.raises(UnsupportedError, match=f"test_bad_input.py:\\d+: {what} in Python"):
            body(cond)
    assert body(lambda s: s[1] == s[1] and s[1]).outputs[0].op.value == "sum"


def test_sizes_as_numbers_and_repeated_axes():
    @axon.program(q=("s", "d"), k=("t", "d"))
    def scaled(q, k):
        return (q @ k.T) * q.shape[-1] ** -0.5 + 1.0 / k.shape[0] - (q.shape[0] * 0.5)

    q, k = np.arange(12.0).reshape(3, 4), np.ones((5, 4))
    np.testing.assert_allclose(scaled(q, k), q @ k.T / 2 + 1 / 5 - 1.5)

    with pytest.raises(ShapeError, match="axis 0 is repeated"):
        @axon.program(x=("m", "n"))
        def twice(x):
            return x.sum(axis=(0, 0))
