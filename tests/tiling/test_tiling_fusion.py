"""Node fusion: passes and phases of the benchmark programs."""
import pytest

from axon.errors import UnsupportedError
from axon.fusion.nodes import RowWorld, groups, phases
from axon.semantics.ops import Op
from axon.suite import SUITE


def test_gated_projections_share_one_matmul_phase():
    w = RowWorld.of(SUITE["gated_mlp"].program.graph)
    (g,) = groups(w, "fused")
    ph = phases(w, g)
    assert [p.kind for p in ph] == ["matmul", "matmul"]
    assert len(ph[0].matmuls) == 2 and [n.op for n in ph[0].epilogue] == [Op.SILU, Op.MUL]


def test_split_and_unfused_passes():
    w = RowWorld.of(SUITE["gated_mlp"].program.graph)
    assert len(groups(w, "split")) == 2
    assert len(groups(w, "unfused")) == 5


def test_softmax_after_scores_is_a_row_phase():
    w = RowWorld.of(SUITE["gqa"].program.graph)
    (g,) = groups(w, "fused")
    assert [p.kind for p in phases(w, g)] == ["matmul", "row", "matmul"]
    assert str(w.row) == "s"


def test_transposed_output_keeps_the_matmul_rows():
    w = RowWorld.of(SUITE["matmul_transpose"].program.graph)
    assert str(w.row) == "m"


def test_a_column_output_without_rows_is_rejected():
    import axon

    @axon.program(x=("m", "n"))
    def total(x):
        return x.sum(axis=0, keepdims=True)

    with pytest.raises(UnsupportedError):
        w = RowWorld.of(total.graph)
        phases(w, groups(w, "fused")[0])
