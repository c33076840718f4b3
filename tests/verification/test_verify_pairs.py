"""Equivalent pairs the verifier must prove for all sizes, each with a must-reject twin.

Covers RMSNorm (scale moved across the matmul, sqrt/rsqrt/mean forms), softmax (shift
invariance, normalisation after the matmul), transposes, broadcasts, reductions and cumsum over
symbolic sizes. A twin differs in one detail and must be REFUTED with a NumPy-confirmed
counterexample; no twin may ever be PROVED.
"""
import pytest

import axon
import axon.frontend.functions as F
from axon.suite import EPS, SUITE
from axon.verification import Status, Verifier

MK, KN = ("m", "k"), ("k", "n")


def _softmax(x, axis=-1):
    e = F.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def _rms_scale(x):
    return F.rsqrt((x * x).mean(axis=-1, keepdims=True) + EPS)


# --- RMSNorm ---------------------------------------------------------------------------------
@axon.program(x=MK, w=KN)
def rms_scale_after(x, w):
    return (x @ w) * _rms_scale(x)


@axon.program(x=MK, w=KN)
def rms_sum_over_k(x, w):  # mean written as sum / k, rsqrt as 1 / sqrt
    return (x @ w) / F.sqrt((x * x).sum(axis=1, keepdims=True) / x.shape[1] + EPS)


@axon.program(x=MK, w=KN)
def rms_twin_sum(x, w):  # sum instead of mean
    return (x @ w) / F.sqrt((x * x).sum(axis=1, keepdims=True) + EPS)


@axon.program(x=MK, s=("m", 1), w=KN)
def scaled_rows_first(x, s, w):
    return (x * s) @ w


@axon.program(x=MK, s=("m", 1), w=KN)
def scaled_rows_after(x, s, w):
    return (x @ w) * s


@axon.program(x=MK, s=("m", 1), w=KN)
def scaled_rows_twin(x, s, w):  # the scale divides instead
    return (x @ w) / s


@axon.program(x=("m", "n"), g=("n",))
def rmsnorm_rsqrt(x, g):
    return x * _rms_scale(x) * g


@axon.program(x=("m", "n"), g=("n",))
def rmsnorm_twin_eps(x, g):  # a different epsilon
    return x * F.rsqrt((x * x).mean(axis=-1, keepdims=True) + 1e-5) * g


# --- softmax ---------------------------------------------------------------------------------
@axon.program(x=("m", "n"))
def softmax_unshifted(x):
    e = F.exp(x)
    return e / e.sum(axis=-1, keepdims=True)


@axon.program(x=("m", "n"))
def softmax_twin_axis(x):  # normalised over the wrong axis
    return _softmax(x, axis=0)


@axon.program(x=MK, w=KN)
def softmax_late_normalise(x, w):
    e = F.exp(x - x.max(axis=-1, keepdims=True))
    return (e @ w) / e.sum(axis=-1, keepdims=True)


@axon.program(x=MK, w=KN)
def softmax_twin_no_normalise(x, w):
    return F.exp(x - x.max(axis=-1, keepdims=True)) @ w


@axon.program(x=MK, w=KN)
def softmax_shift_by_sum(x, w):  # any row-constant shift: the row sum instead of the max
    e = F.exp(x - x.sum(axis=-1, keepdims=True))
    return (e @ w) / e.sum(axis=-1, keepdims=True)


# --- transposes ------------------------------------------------------------------------------
@axon.program(x=MK, y=KN)
def matmul_then_t(x, y):
    return (x @ y).T


@axon.program(x=MK, y=KN)
def t_then_matmul(x, y):
    return y.T @ x.T


@axon.program(x=MK, w=KN)
def t_then_matmul_w(x, w):
    return w.T @ x.T


@axon.program(x=("n", "n"), y=("n", "n"))
def square_matmul_then_t(x, y):
    return (x @ y).T


@axon.program(x=("n", "n"), y=("n", "n"))
def square_twin_order(x, y):  # X^T Y^T is not (XY)^T
    return x.T @ y.T


@axon.program(x=("a", "b", "c"))
def perm_twice(x):
    return x.transpose(1, 2, 0).transpose(2, 0, 1)


@axon.program(x=("a", "b", "c"))
def perm_identity(x):
    return x * 1


@axon.program(x=("n", "n", "n"))
def cube_perm_twice(x):
    return x.transpose(1, 2, 0).transpose(1, 2, 0)


@axon.program(x=("n", "n", "n"))
def cube_identity(x):
    return x + 0


# --- broadcasts ------------------------------------------------------------------------------
@axon.program(x=MK, b=(1, "k"), w=KN)
def bias_then_matmul(x, b, w):
    return (x + b) @ w


@axon.program(x=MK, b=(1, "k"), w=KN)
def matmul_then_bias(x, b, w):
    return x @ w + b @ w


@axon.program(x=MK, b=(1, "k"), w=KN)
def bias_twin_dropped(x, b, w):
    return x @ w + b.sum(axis=1, keepdims=True)


@axon.program(x=("m", "n"), b=("n",))
def row_bias(x, b):
    return x + b


@axon.program(x=("m", "n"), b=("n",))
def row_bias_reshaped(x, b):
    return b[None, :] + x


@axon.program(x=("n", "n"), b=("n",))
def square_row_bias(x, b):
    return x + b


@axon.program(x=("n", "n"), b=("n",))
def square_twin_column_bias(x, b):  # broadcast along the other axis
    return x + b[:, None]


# --- reductions over symbolic sizes ------------------------------------------------------------
@axon.program(x=("m", "n"), c=("m", 1))
def sum_scaled(x, c):
    return (x * c).sum(axis=1)


@axon.program(x=("m", "n"), c=("m", 1))
def scaled_sum(x, c):
    return x.sum(axis=1) * c.sum(axis=1)


@axon.program(x=("m", "n"), c=("m", 1))
def scaled_max_twin(x, c):  # sum vs max
    return x.max(axis=1) * c.sum(axis=1)


@axon.program(x=("m", "n"), c=("m", 1))
def max_shifted(x, c):
    return (x - c).max(axis=1, keepdims=True)


@axon.program(x=("m", "n"), c=("m", 1))
def shifted_max(x, c):
    return x.max(axis=1, keepdims=True) - c


@axon.program(x=("m", "n"), c=("m", 1))
def max_negated(x, c):
    return (-(x * 2)).max(axis=1, keepdims=True)


@axon.program(x=("m", "n"), c=("m", 1))
def min_scaled(x, c):
    return -2 * (-(-x).max(axis=1, keepdims=True))


@axon.program(x=("m", "n"), c=("m", 1))
def shifted_max_twin(x, c):
    return x.max(axis=1, keepdims=True) + c


@axon.program(x=("m", "n"))
def centered_mean(x):
    return (x - x.mean(axis=1, keepdims=True)).sum(axis=1) * x.sum(axis=1)


@axon.program(x=("m", "n"))
def zeros(x):
    return x.sum(axis=1) * 0


@axon.program(x=("m", "n"))
def centered_twin(x):
    return (x - x.mean(axis=0, keepdims=True)).sum(axis=1) * x.sum(axis=1)


@axon.program(x=("n", "n"))
def sum_of_transpose(x):
    return x.T.sum(axis=0)


@axon.program(x=("n", "n"))
def sum_rows(x):
    return x.sum(axis=1)


@axon.program(x=("n", "n"))
def sum_cols_twin(x):
    return x.sum(axis=0)


# --- cumsum -----------------------------------------------------------------------------------
@axon.program(x=("m", "n"), c=("m", 1), y=("m", "n"))
def cumsum_of_affine(x, c, y):
    return (x * c + y).cumsum(axis=1)


@axon.program(x=("m", "n"), c=("m", 1), y=("m", "n"))
def affine_of_cumsum(x, c, y):
    return x.cumsum(axis=1) * c + y.cumsum(axis=1)


@axon.program(x=("m", "n"), c=("m", 1), y=("m", "n"))
def cumsum_twin_shift(x, c, y):  # an exclusive scan of y
    return x.cumsum(axis=1) * c + y.cumsum(axis=1) - y


@axon.program(x=("n", "n"))
def cumsum_transposed(x):
    return x.T.cumsum(axis=0).T


@axon.program(x=("n", "n"))
def cumsum_rows(x):
    return x.cumsum(axis=1)


@axon.program(x=("n", "n"))
def cumsum_cols_twin(x):
    return x.cumsum(axis=0)


# --- interpreted relu / maximum ----------------------------------------------------------------
@axon.program(x=("m", "n"))
def relu_difference(x):
    return F.relu(x) - F.relu(-x)


@axon.program(x=("m", "n"))
def identity(x):
    return x * 1


@axon.program(x=("m", "n"))
def relu_sum_twin(x):
    return F.relu(x) + F.relu(-x)


@axon.program(x=("m", "n"), y=("m", "n"))
def max_plus_min(x, y):
    return F.maximum(x, y) + F.minimum(y, x)


@axon.program(x=("m", "n"), y=("m", "n"))
def plain_sum(x, y):
    return x + y


@axon.program(x=("m", "n"), y=("m", "n"))
def max_twice_twin(x, y):
    return F.maximum(x, y) * 2


# --- scalars across a matmul, gated projection ----------------------------------------------------
@axon.program(x=MK, w=KN)
def scalar_first(x, w):
    return (x * 3) @ w


@axon.program(x=MK, w=KN)
def scalar_after(x, w):
    return 3 * (x @ w)


@axon.program(x=MK, w=KN)
def scalar_twin(x, w):
    return (x * 3) @ (w * 3)


@axon.program(x=MK, w1=KN, w2=KN)
def gated_swapped(x, w1, w2):
    return (x @ w2) * (x @ w1) / (1 + F.exp(-(x @ w1)))


@axon.program(x=MK, w1=KN, w2=KN)
def gated_twin(x, w1, w2):  # silu gate on the wrong projection
    return F.silu(x @ w2) * (x @ w1)



@axon.program(x=("m", "n"))
def far_columns(x):  # valid from n = 17 on: the refuter's sizes must start there
    return x[:, 16:]


@axon.program(x=("m", "n"))
def far_columns_twin_sqrt_square(x):  # |x|, not x
    return F.sqrt(x[:, 16:] * x[:, 16:])


@axon.program(x=("m", "2*h"))
def max_of_strided_parts(x):
    return F.maximum(x[:, ::2].max(axis=1, keepdims=True), x[:, 1::2].max(axis=1, keepdims=True))


@axon.program(x=("m", "2*h"))
def max_twin_dropping_a_column(x):  # differs only where a row's maximum is in column h
    h = x.shape[1] // 2
    return F.maximum(x[:, :h].max(axis=1, keepdims=True), x[:, h + 1:].max(axis=1, keepdims=True))

EQUIVALENT = [
    (SUITE["rmsnorm_matmul"].program, rms_scale_after),
    (SUITE["rmsnorm_matmul"].program, rms_sum_over_k),
    (scaled_rows_first, scaled_rows_after),
    (SUITE["rmsnorm"].program, rmsnorm_rsqrt),
    (SUITE["softmax"].program, softmax_unshifted),
    (SUITE["softmax_matmul"].program, softmax_late_normalise),
    (SUITE["softmax_matmul"].program, softmax_shift_by_sum),
    (matmul_then_t, t_then_matmul),
    (SUITE["matmul_transpose"].program, t_then_matmul_w),
    (square_matmul_then_t, square_matmul_then_t),
    (perm_twice, perm_identity),
    (bias_then_matmul, matmul_then_bias),
    (row_bias, row_bias_reshaped),
    (sum_scaled, scaled_sum),
    (max_shifted, shifted_max),
    (max_negated, min_scaled),
    (centered_mean, zeros),
    (sum_of_transpose, sum_rows),
    (cumsum_of_affine, affine_of_cumsum),
    (cumsum_transposed, cumsum_rows),
    (relu_difference, identity),
    (max_plus_min, plain_sum),
    (scalar_first, scalar_after),
    (SUITE["gated_projection"].program, gated_swapped),
]

NOT_EQUIVALENT = [
    (SUITE["rmsnorm_matmul"].program, rms_twin_sum),
    (scaled_rows_first, scaled_rows_twin),
    (SUITE["rmsnorm"].program, rmsnorm_twin_eps),
    (SUITE["softmax"].program, softmax_twin_axis),
    (SUITE["softmax_matmul"].program, softmax_twin_no_normalise),
    (square_matmul_then_t, square_twin_order),
    (cube_perm_twice, cube_identity),
    (bias_then_matmul, bias_twin_dropped),
    (square_row_bias, square_twin_column_bias),
    (sum_scaled, scaled_max_twin),
    (max_shifted, shifted_max_twin),
    (centered_mean, centered_twin),
    (sum_of_transpose, sum_cols_twin),
    (cumsum_of_affine, cumsum_twin_shift),
    (cumsum_rows, cumsum_cols_twin),
    (relu_difference, relu_sum_twin),
    (far_columns, far_columns_twin_sqrt_square),
    (max_of_strided_parts, max_twin_dropping_a_column),
    (max_plus_min, max_twice_twin),
    (scalar_first, scalar_twin),
    (SUITE["gated_projection"].program, gated_twin),
]


@pytest.fixture(scope="module")
def verifier():
    return Verifier(timeout_ms=2000, seed=0)


@pytest.mark.parametrize("f,g", EQUIVALENT, ids=[f"{f.name}=={g.name}" for f, g in EQUIVALENT])
def test_verify_proves(verifier, f, g):
    verdict = verifier.check_graphs(f.graph, g.graph)
    assert verdict.status is Status.PROVED, verdict
    assert verifier.check_graphs(g.graph, f.graph).status is Status.PROVED


@pytest.mark.parametrize("f,g", NOT_EQUIVALENT, ids=[f"{f.name}!={g.name}" for f, g in NOT_EQUIVALENT])
def test_verify_rejects_twin(verifier, f, g):
    verdict = verifier.check_graphs(f.graph, g.graph)
    assert verdict.status is Status.REFUTED, verdict
    cex = verdict.counterexample
    assert cex is not None and set(cex["sizes"]) <= set(f.dims) | set(g.dims)
    # the counterexample is NumPy's: re-evaluate both programs at its sizes and see the difference
    if "index" in cex:
        assert abs(cex["a"] - cex["b"]) > 1e-9 * max(1.0, abs(cex["a"]), abs(cex["b"]))


@pytest.mark.parametrize("f,g", NOT_EQUIVALENT, ids=[f"{f.name}!={g.name}" for f, g in NOT_EQUIVALENT])
def test_verify_prover_alone_never_proves_twin(f, g):
    """Without the NumPy filter the symbolic prover must still not accept a twin."""
    verdict = Verifier(timeout_ms=2000, seed=0, numeric_trials=0).check_graphs(f.graph, g.graph)
    assert verdict.status is not Status.PROVED, verdict


def test_verify_benchmarks_equal_themselves(verifier):
    for bench in SUITE.values():
        verdict = verifier.check_graphs(bench.program.graph, bench.program.graph)
        assert verdict.status is Status.PROVED, (bench.name, verdict)
