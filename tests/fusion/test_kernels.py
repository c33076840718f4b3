"""Kernel partitioning: the steps of a partition compose to the program, each piece is one kernel."""
import numpy as np
import pytest

import axon
import axon.frontend.functions as F
from axon.errors import UnsupportedError
from axon.frontend.program import program_of
from axon.fusion.kernels import Piece, Relayout, partition
from axon.fusion.nodes import FUSION_MODES, RowWorld, groups, phases
from axon.semantics.evaluate import evaluate

S, H, D, NQ, NKV = 128, 256, 64, 4, 2


@axon.program(x=("s", H), wq=(H, NQ * D), wk=(H, NKV * D), wv=(H, NKV * D), wo=(NQ * D, H))
def attention_block(x, wq, wk, wv, wo):
    # as a PyTorch user writes it: projections viewed as heads, GQA by a reshape of the queries
    q = (x @ wq).reshape(x.shape[0], NQ, D).transpose(1, 0, 2).reshape(NKV, NQ // NKV, x.shape[0], D)
    k = (x @ wk).reshape(x.shape[0], NKV, 1, D).transpose(1, 2, 0, 3)
    v = (x @ wv).reshape(x.shape[0], NKV, 1, D).transpose(1, 2, 0, 3)
    s = F.where(F.arange("s")[:, None] >= F.arange("s")[None, :], q @ k.transpose(0, 1, 3, 2) * D ** -0.5, -30000.0)
    p = F.exp(s - s.max(axis=-1, keepdims=True))
    a = (p / p.sum(axis=-1, keepdims=True)) @ v
    return x + a.reshape(NQ, x.shape[0], D).transpose(1, 0, 2).reshape(x.shape[0], NQ * D) @ wo


def _run(part, arrays, binding):
    """The partition's steps on NumPy: pieces by the reference evaluator, relayouts by transpose."""
    values = dict(arrays)
    shape = lambda s: tuple(d.evaluate_int(binding) for d in s)
    for step in part.steps:
        if isinstance(step, Piece):
            ins = {name: values[f.source].reshape(shape(f.shape)) for name, f in step.feeds.items()}
            values.update(zip(step.outputs, evaluate(step.graph, ins, binding)))
        else:
            values[step.output] = np.transpose(values[step.source.source].reshape(shape(step.source.shape)), step.perm)
    return [values[f.source].reshape(shape(f.shape)) for f in part.results]


def test_the_steps_of_an_attention_block_compose_to_the_program():
    part = partition(attention_block.graph)
    binding = {"s": S}
    arrays = {k: v.astype(np.float64) * 0.1 for k, v in attention_block.random_inputs(binding, "float32").items()}
    want = attention_block.reference(**arrays)
    got = _run(part, arrays, binding)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-12, atol=1e-12)
    kinds = [type(s).__name__ for s in part.steps]
    assert kinds.count("Piece") >= 3 and "Relayout" in kinds
    # the projections share one kernel (they read the same rows), the attention is one kernel
    first = part.steps[0]
    assert sum(n.op.value == "matmul" for n in first.graph.nodes()) == 3
    assert any(isinstance(s, Piece) and any(n.op.value == "exp" for n in s.graph.nodes()) and
               sum(n.op.value == "matmul" for n in s.graph.nodes()) == 2 for s in part.steps)


def test_every_piece_is_one_kernel_and_keeps_the_programs_dimension_names():
    for step in partition(attention_block.graph).steps:
        if isinstance(step, Piece):
            world = RowWorld.of(step.graph)
            for mode in FUSION_MODES:
                for g in groups(world, mode):
                    phases(world, g)
            assert "s" in program_of(step.graph, "piece").dims
        else:
            assert isinstance(step, Relayout) and step.perm[-1] == len(step.perm) - 1


def test_a_program_that_is_one_kernel_is_one_piece():
    part = partition(axon.benchmark("rmsnorm_matmul").graph)
    assert len(part.steps) == 1 and isinstance(part.steps[0], Piece)


def test_a_piece_traced_at_named_sizes_reads_its_literal_bounds_as_parts_of_them():
    @axon.program(x=(4, 128, 64))
    def rope_half(x):
        return F.concatenate([-x[..., 32:], x[..., :32]], axis=-1) * x
    general, names = program_of(rope_half.graph, "rope").generalized()
    assert names == {"n4": 4, "n64": 64, "n128": 128}
    assert "slice" in general.graph.pretty() and "n64" in general.graph.pretty()


def test_an_operator_no_kernel_computes_is_one_line():
    @axon.program(x=("m", "n"))
    def column_sums(x):
        return x.sum(axis=0, keepdims=True)
    with pytest.raises(UnsupportedError, match=r"^sum of shape \(1, n\) cannot be computed in any kernel"):
        partition(column_sums.graph)
