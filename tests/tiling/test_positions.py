"""Masks built from axon.arange become affine predicates of a tile's positions: on every tile the
predicate holds exactly where the mask is 1, and a kernel evaluates it (nisa.affine_select) instead
of loading or computing it. Positions read as data are one clear error."""
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import axon.frontend.functions as F
from axon.errors import UnsupportedError
from axon.frontend.program import program
from axon.ir import positional
from axon.search.optimize import optimize
from axon.semantics.evaluate import evaluate_nodes
from axon.semantics.ops import Op
from axon.semantics.scalar import SCALAR_SPECS
from axon.tiling.positions import predicate

COMPARE = {">=": lambda a, b: a >= b, ">": lambda a, b: a > b, "<=": lambda a, b: a <= b,
           "<": lambda a, b: a < b, "==": F.equal}


def _mask_program(cmp: str, row_scale: int, shift: int):
    @program(x=("s", "t"))
    def masked(x):
        rows = F.arange("s")[:, None] * row_scale + (x.shape[1] - x.shape[0]) + shift
        return F.where(COMPARE[cmp](rows, F.arange("t")[None, :]), x, -30000.0)
    return masked


def _the_mask(prog):
    return next(n for n in prog.graph.nodes() if n.op is Op.WHERE).inputs[0]


@settings(max_examples=60, deadline=None)
@given(cmp=st.sampled_from(sorted(COMPARE)), row_scale=st.sampled_from([1, 2, -1]), shift=st.integers(-70, 70),
       s_tiles=st.integers(1, 3), t=st.sampled_from([64, 128, 192]), width=st.sampled_from([16, 64]),
       r_tile=st.integers(0, 2), c_tile=st.integers(0, 11))
def test_the_predicate_holds_exactly_where_the_mask_is_one(cmp, row_scale, shift, s_tiles, t, width, r_tile, c_tile):
    P = 32
    sizes = {"s": P * s_tiles, "t": t}
    i_r, i_c = min(r_tile, s_tiles - 1), min(c_tile, t // width - 1)
    prog = _mask_program(cmp, row_scale, shift)
    mask = _the_mask(prog)
    values = evaluate_nodes(prog.graph, {"x": np.zeros((sizes["s"], t))}, sizes)[mask]
    # the tile's rows and columns start at expressions in the kernel's loop variables
    pred = predicate(mask, sizes, f"i_r * {P}", f"i_c * {width}", width)
    offset = eval(pred.offset, {"i_r": i_r, "i_c": i_c})
    p, f = np.indices((P, width))
    got = SCALAR_SPECS[pred.cmp].numpy(offset + pred.row * p + pred.col * f, 0) != 0
    tile = values[i_r * P:(i_r + 1) * P, i_c * width:(i_c + 1) * width]
    assert np.array_equal(got, tile != 0)


def test_a_mask_is_a_value_of_positions_and_data_is_not():
    prog = _mask_program(">=", 1, 0)
    index = positional(prog.graph.nodes())
    assert _the_mask(prog) in index
    assert not any(n.op in (Op.INPUT, Op.WHERE) for n in index)


def test_positions_read_as_data_are_one_clear_error():
    @program(x=("s", "t"))
    def weighted(x):
        return x * (F.arange("s")[:, None] >= F.arange("t")[None, :])

    with pytest.raises(UnsupportedError, match=r"mul reads positions \(axon.arange\) as data"):
        optimize(weighted, {"s": 128, "t": 128}, "trn2", "float32", budget_s=5)


@pytest.mark.slow
@pytest.mark.parametrize("sizes", [{"s": 128, "t": 256}, {"s": 256, "t": 256}])
def test_a_causal_kernel_masks_with_affine_select_and_matches(sizes):
    @program(q=("s", 64), k=("t", 64), v=("t", 64))
    def causal(q, k, v):
        visible = F.arange("s")[:, None] + (k.shape[0] - q.shape[0]) >= F.arange("t")[None, :]
        x = F.where(visible, q @ k.T, -30000.0)
        e = F.exp(x - x.max(axis=-1, keepdims=True))
        return (e / e.sum(axis=-1, keepdims=True)) @ v

    r = optimize(causal, sizes, "trn2", "bfloat16", budget_s=3)
    assert "nisa.affine_select(" in r.kernel_source and "cmp_op=nl.greater_equal" in r.kernel_source
    tolerance = r.checked["tolerance"]
    assert tolerance["unbounded_elements"] == 0
    # a bound that sees a wrong mask (see test_bounds): scores kept in bf16 move each probability by
    # ~10%, so their honest bound is wide; with f32 intermediates it is tight
    wide = "(intermediates kernel)" in r.check
    assert tolerance["bound_over_ref_median"] < (1.0 if wide else 0.1)


def _fused(prog):
    from axon.fusion.nodes import RowWorld, groups

    world = RowWorld.of(prog.graph)
    (group,) = groups(world, "fused")
    return world, group


def test_a_causal_softmax_pass_needs_only_the_columns_each_row_block_sees():
    from axon.suite import SUITE
    from axon.tiling.positions import masked_prefix

    sizes = {"kv": 2, "g": 2, "s": 1024, "t": 1536, "d": 64}
    prefix = masked_prefix(*_fused(SUITE["causal_gqa"].program), sizes)
    assert prefix is not None and prefix.dim == "t" and prefix.reach == 1536 - 1024
    # row r sees columns up to r + 512: rows 0..255 up to 767, rows 256..511 up to 1023 (in whole
    # 512-column tiles: 1024 both), the rest all 1536
    assert [prefix.width(r0, 256, 1536, 512) for r0 in (0, 256, 512, 768)] == [1024, 1024, 1536, 1536]
    assert prefix.width(0, 256, 1536, 512) == 1024 and masked_prefix(*_fused(SUITE["gqa"].program), sizes) is None


@settings(max_examples=200, deadline=None)
@given(reach=st.integers(-300, 300), r0=st.integers(0, 1024), tile=st.sampled_from([64, 128, 512]))
def test_the_whole_tiles_of_a_run_are_those_every_later_row_sees_whole(reach, r0, tile):
    from axon.tiling.positions import Prefix

    k = Prefix("t", reach).whole_tiles(r0, tile)
    sees = lambda r, c: c <= r + reach  # row r sees column c
    for i in range(k + 2):
        whole = all(sees(r, c) for r in (r0, r0 + 1, r0 + 7) for c in range(i * tile, (i + 1) * tile))
        assert whole == (i < k)  # the first row of the run is the one that sees least


@pytest.mark.parametrize("change", ["masked score kept", "mild mask value", "anti-causal", "mean over t"])
def test_a_pass_whose_masked_columns_matter_computes_them(change):
    from axon.tiling.positions import masked_prefix

    value = -5.0 if change == "mild mask value" else -30000.0

    @program(q=("s", 64), k=("t", 64), v=("t", 64))
    def attend(q, k, v):
        rows, cols = F.arange("s")[:, None], F.arange("t")[None, :]
        x = F.where(rows <= cols if change == "anti-causal" else rows >= cols, q @ k.T, value)
        e = F.exp(x - x.max(axis=-1, keepdims=True))
        out = (e / e.sum(axis=-1, keepdims=True)) @ v
        if change == "masked score kept":
            return out, x
        return out + x.mean(axis=-1, keepdims=True) if change == "mean over t" else out

    assert masked_prefix(*_fused(attend), {"s": 512, "t": 512}) is None


@pytest.mark.slow
def test_a_causal_kernel_skips_the_masked_tiles_and_matches():
    r = optimize("causal_gqa", {"kv": 1, "g": 2, "s": 1024, "t": 1024, "d": 128}, "trn2", "bfloat16", budget_s=3)
    runs = [tuple(map(int, m)) for m in
            re.findall(r"rows (\d+):(\d+) see t columns 0:(\d+) of 1024: the masked tiles beyond are skipped",
                       r.kernel_source)]
    assert len(runs) > 1 and runs[0][0] == 0 and runs[-1][1] == 1024
    assert all(a[1] == b[0] for a, b in zip(runs, runs[1:]))  # the runs cover the rows in order
    # each run computes the columns its last row sees, in whole contraction tiles of 128
    assert all(width == -(-stop // 128) * 128 for _, stop, width in runs)
    assert r.checked["tolerance"]["unbounded_elements"] == 0


@pytest.mark.slow
def test_a_causal_kernel_masks_only_the_tiles_the_diagonal_crosses_and_matches():
    from axon.search.candidates import Counts, enumerate_candidates
    from axon.search.lowering import Lowerer
    from axon.semantics.evaluate import evaluate
    from axon.suite import SUITE
    from axon.targets.trainium.simulator import load_source, simulate
    from axon.targets.trainium.target import TrainiumTarget

    target, prog = TrainiumTarget("trn2"), SUITE["causal_gqa"].program
    sizes = {"kv": 1, "g": 2, "s": 1024, "t": 1024, "d": 64}
    cands = enumerate_candidates("causal_gqa", [(prog.graph, ())], sizes, target, "bfloat16", Lowerer(target), Counts())
    cand = next(c for c in cands if len(c.passes) == 1 and c.passes[0].tiling.row_tile * c.passes[0].tiling.row_block == 128
                and c.passes[0].tiling.n_tile == 512)
    assert "where: the mask keeps every position of these tiles" in cand.source
    # q k^T contracts over the head dim (64 partitions), exp @ v over 128 keys per instruction
    assert {int(k) for k in re.findall(r"nc_matmul\(.*stationary=\w+\[0:(\d+), ", cand.source)} == {64, 128}
    data = prog.random_inputs(sizes, "bfloat16", seed=5)
    trace = simulate(load_source(cand.source), data, target="trn2").trace
    # rows 512p .. 512p + 511 see columns 0 .. 512p + 511: tiles 0..p-1 whole, tile p crossed by the
    # diagonal; each 128-row tile masks exactly one 512-column tile, per head
    assert sum(i.opcode == "affine_select" for i in trace) == 2 * 1024 // 128
    got = np.asarray(target.run(cand.source, data, timing_only=False).outputs[0], np.float64)
    want = np.asarray(evaluate(prog.graph, {k: np.asarray(v, np.float64) for k, v in data.items()}, sizes)[0])
    assert np.abs(got - want).max() < 0.05 * np.abs(want).max()


@pytest.mark.slow
def test_a_causal_kernel_checked_on_some_row_blocks_computes_the_full_kernels_rows():
    from axon.search.candidates import Counts, emit, enumerate_candidates
    from axon.search.lowering import Lowerer
    from axon.suite import SUITE
    from axon.targets.trainium.target import TrainiumTarget

    target, prog = TrainiumTarget("trn2"), SUITE["causal_gqa"].program
    sizes = {"kv": 1, "g": 1, "s": 1024, "t": 1024, "d": 64}
    lowerer = Lowerer(target)
    cands = enumerate_candidates("causal_gqa", [(prog.graph, ())], sizes, target, "bfloat16", lowerer, Counts())
    cand = next(c for c in cands if len(c.passes) == 1 and c.passes[0].tiling.row_tile * c.passes[0].tiling.row_block == 256)
    assert "the masked tiles beyond are skipped" in cand.source
    data = prog.random_inputs(sizes, "bfloat16", seed=3)
    full = np.asarray(target.run(cand.source, data, timing_only=False).outputs[0], np.float32)
    from axon.fusion.nodes import RowWorld

    ranges = ((0, 256), (768, 1024))  # a block of the first run of widths, one of the last
    part_src = emit("causal_gqa", target, RowWorld.of(prog.graph), cand, sizes, "bfloat16", lowerer, rows=ranges)
    part = np.asarray(target.run(part_src, data, timing_only=False, partial=True).outputs[0], np.float32)
    inside = np.zeros(1024, bool)
    for s, e in ranges:
        inside[s:e] = True
    assert np.array_equal(part[..., inside, :], full[..., inside, :])
    assert np.isnan(part[..., ~inside, :]).all()


@settings(max_examples=40, deadline=None)
@given(cmp=st.sampled_from(sorted(COMPARE)), row_scale=st.integers(1, 3), shift=st.integers(-40, 40),
       blocks=st.sets(st.integers(0, 7), min_size=1, max_size=5))
def test_rows_of_the_program_computed_together_are_those_rows_of_the_whole_program(cmp, row_scale, shift, blocks):
    from axon.search.check import rows_window
    from axon.semantics.evaluate import evaluate

    graph = _mask_program(cmp, row_scale, shift).graph
    x = np.random.default_rng(0).normal(size=(8 * 16, 200))
    whole = evaluate(graph, {"x": x})[0]
    ranges = tuple((b * 16, (b + 1) * 16) for b in sorted(blocks))
    rows = np.concatenate([np.arange(s, e) for s, e in ranges])
    window, moved = rows_window(graph, "s", ranges, 128)
    assert moved  # the arange of s and the size read as a number changed
    part = evaluate(window, {"x": x[rows]}, {"s": len(rows), "t": 200})[0]
    assert np.array_equal(part, whole[rows])


def test_a_causal_kernel_checked_on_some_row_blocks_passes_against_the_reference_of_those_rows():
    """The check's reference on the checked rows sees each row at its own position: with the rows
    counted from 0 (and the offset t - s read at the checked length) every correct kernel failed."""
    from axon.search.candidates import Counts, enumerate_candidates
    from axon.search.check import CheckedRows, check
    from axon.search.lowering import Lowerer
    from axon.suite import SUITE
    from axon.targets.trainium.target import TrainiumTarget

    target, prog = TrainiumTarget("trn2"), SUITE["causal_gqa"].program
    sizes = {"kv": 1, "g": 2, "s": 1024, "t": 1024, "d": 64}
    lowerer = Lowerer(target)
    cands = enumerate_candidates("causal_gqa", [(prog.graph, ())], sizes, target, "bfloat16", lowerer, Counts())
    cand = next(c for c in cands if len(c.passes) == 1 and c.passes[0].tiling.row_tile * c.passes[0].tiling.row_block == 256)
    data = prog.random_inputs(sizes, "bfloat16", seed=5)
    rows = CheckedRows("s", 1024, 256, ((0, 256), (512, 1024)))
    result = check(target, "causal_gqa", prog.graph, cand, sizes, "bfloat16", lowerer, data, rows)
    assert result.ok, result.explain()
    assert result.worst_ratio <= 1.0
