"""Every benchmark, traced and evaluated by Axon, matches an independent NumPy implementation
written here from the suite's definition (shared/axon-paper.md), not derived from Axon's code."""
import numpy as np
import pytest

import axon
from axon.suite import SUITE

EPS = 1e-6


def np_softmax(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def np_silu(x):
    return x / (1 + np.exp(-x))


def np_rms(x):
    return x / np.sqrt(np.mean(x**2, axis=-1, keepdims=True) + EPS)


INDEPENDENT = {
    "relu": lambda x: np.maximum(x, 0),
    "silu": np_silu,
    "mul": lambda x, y: x * y,
    "softmax": np_softmax,
    "rmsnorm": lambda x, g: np_rms(x) * g,
    "layernorm": lambda x, g, b: (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + EPS) * g + b,
    "cumsum": lambda x: np.cumsum(x, axis=1),
    "rope": lambda x, cos, sin: (x[:, ::2] * cos - x[:, 1::2] * sin, x[:, 1::2] * cos + x[:, ::2] * sin),
    "rope_hf": lambda x, cos, sin: x * cos + np.concatenate([-x[:, x.shape[1] // 2:], x[:, :x.shape[1] // 2]], 1) * sin,
    "matmul": lambda x, w: x @ w,
    "transpose_matmul": lambda x, w: x.T @ w,
    "matmul_transpose": lambda x, w: (x @ w).T,
    "relu_matmul": lambda x, w: np.maximum(x, 0) @ w,
    "silu_matmul": lambda x, w: np_silu(x) @ w,
    "rmsnorm_matmul": lambda x, w: np_rms(x) @ w,
    "softmax_matmul": lambda x, w: np_softmax(x) @ w,
    "reduce_mul_matmul": lambda x, y, w: (x * y.sum(1)[:, None]) @ w,
    "reduce_div_matmul": lambda x, y, w: (x / y.sum(1)[:, None]) @ w,
    "gated_projection": lambda x, w1, w2: np_silu(x @ w1) * (x @ w2),
    "gated_mlp": lambda x, w1, w2, w3: (np_silu(x @ w1) * (x @ w2)) @ w3,
    "swiglu_mlp": lambda x, w_gate_up, w_down: (np_silu(x @ w_gate_up[:, :w_down.shape[0]])
                                                * (x @ w_gate_up[:, w_down.shape[0]:])) @ w_down,
    "gqa": None,  # below: an explicit loop over heads
    "attention": None,  # the same, scaled by 1/sqrt(128)
    "causal_gqa": None,  # the same, each query row seeing the keys up to its own position
}


def np_gqa(q, k, v, causal=False):
    kv, g, s = q.shape[:3]
    t = k.shape[2]
    visible = np.arange(s)[:, None] + (t - s) >= np.arange(t)[None, :]
    out = np.empty_like(q)
    for h in range(kv):
        for j in range(g):
            scores = q[h, j] @ k[h, 0].T
            out[h, j] = np_softmax(np.where(visible, scores, -30000.0) if causal else scores) @ v[h, 0]
    return out


def np_attention(q, k, v):
    return np_gqa(q / np.sqrt(128), k, v)


def test_suite_has_the_papers_twenty_benchmarks_and_four_llm_kernels():
    assert set(SUITE) == set(INDEPENDENT) and len(SUITE) == 24
    families = [b.family for b in SUITE.values()]
    assert families.count("single") == 9 and families.count("multi") == 15


@pytest.mark.parametrize("name", list(SUITE))
def test_benchmark_matches_independent_numpy(name):
    bench = SUITE[name]
    program = axon.benchmark(name)
    inputs = program.random_inputs(bench.sizes("small"), dtype="float64", seed=7)
    if name in ("reduce_div_matmul",):
        inputs["y"] = np.abs(inputs["y"]) + 0.1  # keep the row sums away from zero
    got = program(**inputs)
    fn = {"gqa": np_gqa, "attention": np_attention,
          "causal_gqa": lambda q, k, v: np_gqa(q, k, v, causal=True)}.get(name) or INDEPENDENT[name]
    expected = fn(**inputs)
    got, expected = (got, expected) if isinstance(got, tuple) else ((got,), (expected,))
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert g.shape == e.shape
        np.testing.assert_allclose(g, e, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("name", list(SUITE))
def test_case_grids(name):
    bench = SUITE[name]
    assert "small" in bench.cases and "quick" in bench.cases
    grid = [c for c in bench.cases if c not in ("small", "quick")]
    # the paper's sweeps: 25 single-operator, 27 MatMul-family shapes; attention: model configurations
    least = {"attention": 10, "causal_gqa": 4}.get(name, 25 if bench.family == "single" else 27)
    assert len(grid) >= least
    for case, sizes in bench.cases.items():
        assert set(sizes) == set(bench.program.dims)
        assert all(128 <= v <= 151936 for d, v in sizes.items() if d in ("m", "n", "k", "t"))
        # decode: 1 to 16 new query rows per head
        assert 1 <= sizes.get("s", 128) <= 16 if "decode" in case else sizes.get("s", 128) >= 128
