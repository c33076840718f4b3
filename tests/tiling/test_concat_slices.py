"""Slices of inputs with bounds computed from sizes, and concatenations along the columns, inside
kernels: a slice is a view of the row tile already loaded, a concatenation is assembled in its
row's tile (an operand computed in the pass is written straight into its columns, one loaded is
copied there). Each kernel passes its numerical check."""
import pytest

import axon.frontend.functions as F
from axon.errors import UnsupportedError
from axon.frontend.program import program
from axon.search.optimize import optimize


def test_halves_of_a_symbolic_width_are_views_of_the_loaded_rows():
    @program(x=("m", "d"), y=("m", "d"))
    def halves(x, y):
        h = x.shape[1] // 2
        return x[:, :h] * y[:, h:]

    r = optimize(halves, {"m": 256, "d": 128}, "trn2", "bfloat16", budget_s=5)
    assert "data1=x_t[0:128, 0:64], data2=y_t[0:128, 64:128]" in r.kernel_source.replace(" + 0", "")
    assert r.checked["tolerance"]["unbounded_elements"] == 0


def test_hf_rotate_half_rope_assembles_its_concatenation_in_place():
    r = optimize("rope_hf", {"m": 256, "h": 64}, "trn2", "float32", budget_s=5)
    src = r.kernel_source
    # -x[:, h:] is computed into the first half of the concatenation's tile, x[:, :h] copied after it
    assert "(dst=concatenate1[0:128, 0:64], data=x_t[0:128, 64:128], scale=-1.0" in src
    assert "nisa.tensor_copy(dst=concatenate1[0:128, 64:128], src=x_t[0:128, 0:64]" in src
    assert r.checked["tolerance"]["unbounded_elements"] == 0 and r.max_abs_err < 1e-5


def test_a_concatenation_of_weights_sliced_in_halves_becomes_two_matmuls():
    @program(x=("m", "k"), w1=("k", "n"), w3=("k", "n"))
    def swiglu(x, w1, w3):
        u = x @ F.concatenate([w1, w3], axis=1)
        n = u.shape[1] // 2
        return F.silu(u[:, :n]) * u[:, n:]

    # proved: slice(x @ W) = x @ slice(W) (a slice may leave its shared producer), and a slice of
    # a concatenation that takes one part is that part
    r = optimize(swiglu, {"m": 128, "k": 256, "n": 256}, "trn2", "bfloat16", budget_s=5)
    assert "concatenate" not in r.kernel_source.split('"""', 2)[2]
    assert r.checked["tolerance"]["unbounded_elements"] == 0 and r.candidates["failed_numerics"] == 0


def test_a_fused_gate_and_up_weight_is_read_by_its_column_halves():
    r = optimize("swiglu_mlp", {"m": 256, "k": 512, "n": 512}, "trn2", "bfloat16", budget_s=5)
    assert "src=w_gate_up[nl.ds(i_kt * 128, 128), 512:1024])" in r.kernel_source  # the up half
    assert r.candidates["failed_numerics"] == 0


def test_a_slice_of_a_weights_rows_is_one_error_line():
    @program(x=("m", "k"), w=("k", "n"))
    def top(x, w):
        return x[:, :128] @ w[:128, :]

    with pytest.raises(UnsupportedError, match="^top cannot be implemented on trn2: [^\n]+$"):
        optimize(top, {"m": 128, "k": 256, "n": 256}, "trn2", "bfloat16", budget_s=5)
