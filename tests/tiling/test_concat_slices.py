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
    assert "nisa.tensor_copy(dst=concatenate1[0:128, 64:64 + 64], src=x_t[0:128, 0:64]" in src
    assert r.checked["tolerance"]["unbounded_elements"] == 0 and r.max_abs_err < 1e-5


def test_a_slice_of_rows_or_a_concatenation_of_weights_is_one_clear_error():
    @program(x=("m", "k"), w1=("k", "n"), w3=("k", "n"))
    def swiglu(x, w1, w3):
        u = x @ F.concatenate([w1, w3], axis=1)
        n = u.shape[1] // 2
        return F.silu(u[:, :n]) * u[:, n:]

    with pytest.raises(UnsupportedError, match="concatenate with shape \\(k, 2\\*n\\) has no row axis m"):
        optimize(swiglu, {"m": 128, "k": 128, "n": 128}, "trn2", "bfloat16", budget_s=5)
