"""The numerical check of a candidate (search.check): over the budget, the full-size kernel runs on
row blocks spread over the output (first and last included), its rows are the full kernel's,
a wrong checked block fails, and optimize reports which rows it checked at what tolerance."""
import importlib

import numpy as np
import pytest

from axon.search.candidates import Counts, direct_lowering, enumerate_candidates
from axon.search.check import CheckedRows, check, plan_columns, plan_rows
from axon.search.lowering import Lowerer
from axon.search.roofline import matmul_macs
from axon.search.select import check_candidate
from axon.semantics import batch
from axon.semantics.bounds import kernel_reference
from axon.semantics.evaluate import evaluate
from axon.suite import SUITE
from axon.targets.trainium.target import TrainiumTarget

TRN2 = TrainiumTarget("trn2")
MATMUL = SUITE["matmul"].program
SIZES = {"m": 4096, "k": 128, "n": 512}


@pytest.fixture(scope="module")
def direct():
    cand = direct_lowering("matmul", MATMUL.graph, SIZES, TRN2, "bfloat16", Lowerer(TRN2))
    assert [p.tiling.row_tile * p.tiling.row_block for p in cand.passes] == [128]  # 32 blocks of 128 rows
    return cand


def test_the_plan_spreads_blocks_over_the_rows_first_and_last_included(direct):
    macs = matmul_macs(MATMUL.graph, SIZES)
    assert plan_rows(MATMUL.graph, direct, SIZES, macs, budget=macs) is None  # all rows fit the budget
    two = plan_rows(MATMUL.graph, direct, SIZES, macs, budget=1.0)  # below one block: still first and last
    assert two == CheckedRows("m", 4096, 128, ((0, 128), (3968, 4096)))
    five = plan_rows(MATMUL.graph, direct, SIZES, macs, budget=macs * 5 / 32)
    assert [s // 128 for s, _ in five.ranges] == [0, 8, 16, 23, 31] and five.checked == 5 * 128
    assert "5 of 32 blocks of 128 rows" in five.describe()


def test_a_partial_check_computes_the_full_kernels_rows_and_passes(direct):
    data = MATMUL.random_inputs(SIZES, "bfloat16", seed=4)
    rows = plan_rows(MATMUL.graph, direct, SIZES, matmul_macs(MATMUL.graph, SIZES), budget=3 * 128 * 128 * 512)
    result = check(TRN2, "matmul", MATMUL.graph, direct, SIZES, "bfloat16", Lowerer(TRN2), data, rows)
    assert result.ok and result.tolerance["elements"] == rows.checked * 512
    full = TRN2.run(direct.source, data, timing_only=False).outputs[0]
    from axon.search.candidates import emit
    from axon.search.candidates import packed_world

    world, _, wsizes = packed_world(MATMUL.graph, 1, SIZES)
    part_src = emit("matmul", TRN2, world, direct, SIZES, "bfloat16", Lowerer(TRN2), rows=rows.ranges)
    assert "i_rb = (0, 16, 31)[i_rb_k]  # 3 of 32 iterations" in part_src
    part = TRN2.run(part_src, data, timing_only=False, partial=True).outputs[0]
    inside = np.zeros(4096, bool)
    for s, e in rows.ranges:
        inside[s:e] = True
    assert np.array_equal(np.asarray(part[inside], np.float32), np.asarray(full[inside], np.float32))
    assert np.isnan(np.asarray(part[~inside], np.float32)).all()  # never written


def test_a_kernel_that_misses_a_checked_block_fails(direct):
    data = MATMUL.random_inputs(SIZES, "bfloat16", seed=5)
    rows = plan_rows(MATMUL.graph, direct, SIZES, matmul_macs(MATMUL.graph, SIZES), budget=1.0)
    from axon.search.candidates import emit, packed_world

    world, _, _ = packed_world(MATMUL.graph, 1, SIZES)
    src = emit("matmul", TRN2, world, direct, SIZES, "bfloat16", Lowerer(TRN2), rows=rows.ranges)
    wrong = src.replace("i_rb = (0, 31)[i_rb_k]", "i_rb = (0, 30)[i_rb_k]")  # the last block's rows not written
    assert wrong != src
    sliced = {k: (v[np.r_[0:128, 3968:4096]] if k == "x" else v) for k, v in data.items()}
    want, tol = kernel_reference(MATMUL.graph, sliced, "bfloat16")
    take = lambda outs: [np.asarray(outs[0])[np.r_[0:128, 3968:4096]]]
    assert check_candidate(TRN2, src, data, want, tol, take).ok
    bad = check_candidate(TRN2, wrong, data, want, tol, take)
    assert not bad.ok and bad.failed == 128 * 512 and bad.worst[1][0] >= 128


WIDE = {"m": 1024, "k": 128, "n": 2048}  # 4 column blocks of 512


def test_over_the_budget_a_one_pass_matmul_checks_column_blocks_too():
    cand = direct_lowering("matmul", MATMUL.graph, WIDE, TRN2, "bfloat16", Lowerer(TRN2))
    macs = matmul_macs(MATMUL.graph, WIDE)
    assert plan_columns(MATMUL.graph, cand, WIDE, macs, budget=macs) is None  # the rows fit the budget
    cols = plan_columns(MATMUL.graph, cand, WIDE, macs, budget=1.0)
    assert cols == CheckedRows("n", 2048, 512, ((0, 512), (1536, 2048)), "columns")
    assert "n columns 0:512, 1536:2048 of 2048 (2 of 4 blocks of 512 columns" in cols.describe()
    # an output whose last axis is the rows (stored transposed), a max over the columns, a second
    # matmul contracting the first one's: no column of the output is computed from its own columns alone
    import axon

    @axon.program(x=("m", "k"), w=("k", "n"))
    def shifted(x, w):
        y = x @ w
        return y - y.max(axis=1, keepdims=True)
    for name, g in [(n, SUITE[n].program.graph) for n in ("matmul_transpose", "gated_mlp")] + [("shifted", shifted.graph)]:
        sizes = {d: 1024 for n in g.inputs for s in n.shape for d in s.symbols}
        other = direct_lowering(name, g, sizes, TRN2, "bfloat16", Lowerer(TRN2))
        assert plan_columns(g, other, sizes, 1e12, budget=1.0) is None, name


def test_a_check_on_rows_and_columns_passes_and_fails_a_kernel_that_skips_a_checked_column_block():
    cand = direct_lowering("matmul", MATMUL.graph, WIDE, TRN2, "bfloat16", Lowerer(TRN2))
    data = MATMUL.random_inputs(WIDE, "bfloat16", seed=8)
    macs = matmul_macs(MATMUL.graph, WIDE)
    rows = plan_rows(MATMUL.graph, cand, WIDE, macs, budget=1.0)
    cols = plan_columns(MATMUL.graph, cand, WIDE, macs * rows.checked / rows.rows, budget=1.0)
    result = check(TRN2, "matmul", MATMUL.graph, cand, WIDE, "bfloat16", Lowerer(TRN2), data, rows, columns=cols)
    assert result.ok and result.tolerance["elements"] == rows.checked * cols.checked
    from axon.search.candidates import emit, packed_world

    world, _, _ = packed_world(MATMUL.graph, 1, WIDE)
    src = emit("matmul", TRN2, world, cand, WIDE, "bfloat16", Lowerer(TRN2), rows=rows.ranges,
               columns=("n", cols.ranges))
    assert "i_nb = (0, 3)[i_nb_k]  # 2 of 4 iterations" in src
    wrong = src.replace("i_nb = (0, 3)[i_nb_k]", "i_nb = (0, 2)[i_nb_k]")  # the last block's columns not written
    r, c = np.r_[0:128, 896:1024], np.r_[0:512, 1536:2048]
    want, tol = kernel_reference(MATMUL.graph, {"x": data["x"][r], "w": data["w"][:, c]}, "bfloat16")
    take = lambda outs: [np.asarray(outs[0])[r][:, c]]
    assert check_candidate(TRN2, src, data, want, tol, take).ok
    bad = check_candidate(TRN2, wrong, data, want, tol, take)
    assert not bad.ok and bad.failed == 256 * 512


def test_a_packed_candidates_partial_check_runs_whole_packed_blocks():
    b = SUITE["rope"]
    sizes = {"m": 2048, "h": 256}
    lowerer = Lowerer(TRN2)
    cands = enumerate_candidates("rope", [(b.program.graph, ())], sizes, TRN2, "bfloat16", lowerer, Counts())
    cand = next(c for c in cands if c.options.packed == 8 and c.passes[0].tiling.row_block == 1)
    # packing leaves few blocks (256 packed rows: 2), so a plan checks them all ...
    assert plan_rows(b.program.graph, cand, sizes, macs=1e9, budget=1.0) is None
    # ... and a hand-made one checks the last: program rows 1024:2048, packed rows 128:256
    rows = CheckedRows("m", 2048, 128 * 8, ((1024, 2048),))
    data = b.program.random_inputs(sizes, "bfloat16", seed=7)
    result = check(TRN2, "rope", b.program.graph, cand, sizes, "bfloat16", lowerer, data, rows)
    assert result.ok, result.explain()
    assert result.tolerance["elements"] == 2 * 1024 * 256


def test_optimize_checks_row_blocks_over_the_budget_and_says_which(monkeypatch, tmp_path):
    monkeypatch.setenv("AXON_CACHE_DIR", str(tmp_path / "cache"))
    optimize_module = importlib.import_module("axon.search.optimize")
    monkeypatch.setattr(optimize_module, "FULL_CHECK_MACS", 4 * 128 * 128 * 512)
    r = optimize_module.optimize("matmul", SIZES, budget_s=5)
    rows = r.checked["rows"]
    assert rows["dim"] == "m" and rows["of"] == 4096
    assert rows["ranges"][0][0] == 0 and rows["ranges"][-1][1] == 4096 and len(rows["ranges"]) >= 2
    assert "PART of the rows" in r.check and "the first, the last" in r.check
    assert r.checked["tolerance"]["method"] == "program" and r.checked["max_err_over_bound"] <= 1
    assert r.to_json()["best"]["checked"] == r.checked


@pytest.mark.parametrize("elements, slices", [(2 * 16 * 32, [(1, 2, 16, 8)] * 3),  # one kv head's logits
                                              (16 * 32, [(1, 1, 16, 8)] * 6)])  # then one query head's
def test_a_large_reference_is_evaluated_in_slices_with_the_same_values_and_bounds(elements, slices, monkeypatch):
    import axon.semantics.bounds as bounds

    gqa = SUITE["gqa"].program
    sizes = {"kv": 3, "g": 2, "s": 16, "t": 32, "d": 8}
    data = gqa.random_inputs(sizes, "bfloat16", seed=5)
    whole, tol = kernel_reference(gqa.graph, data, "bfloat16", None, sizes)
    assert batch.batch_axis(gqa.graph, data, sizes) == ("kv", 0, {"q": 0, "k": 0, "v": 0})
    monkeypatch.setattr(batch, "REFERENCE_ELEMENTS", elements)
    calls = []
    real = bounds._whole_reference
    monkeypatch.setattr(bounds, "_whole_reference", lambda g, a, *r: calls.append(a["q"].shape) or real(g, a, *r))
    parts, ptol = kernel_reference(gqa.graph, data, "bfloat16", None, sizes)
    assert calls == slices
    for a, b in zip(whole + tol.bounds, parts + ptol.bounds):
        np.testing.assert_array_equal(a, b)
    assert ptol.reduction == tol.reduction
    # the plain float64 evaluation (the program as written, beside a rewritten variant's check)
    # takes the same slices with the same values
    monkeypatch.setattr(batch, "REFERENCE_ELEMENTS", 1 << 23)
    plain = evaluate(gqa.graph, data, sizes)
    monkeypatch.setattr(batch, "REFERENCE_ELEMENTS", elements)
    seen = []
    real_in_slices = batch.in_slices
    monkeypatch.setattr(batch, "in_slices", lambda g, a, *r: seen.append(a["q"].shape) or real_in_slices(g, a, *r))
    np.testing.assert_array_equal(evaluate(gqa.graph, data, sizes)[0], plain[0])
    np.testing.assert_array_equal(plain[0], whole[0])
    assert seen.count(slices[0]) == len(slices)  # the leaves: evaluated whole
    # a program of rank 2 stays whole (a slice of rows would read all of a weight again)
    assert batch.batch_axis(SUITE["matmul"].program.graph, {}, {"m": 4, "k": 4, "n": 4}) is None


@pytest.mark.parametrize("mixing", ["sum over it", "max over it", "cumsum over it", "contracted",
                                    "sliced", "its size", "moved by a reshape"])
def test_a_program_that_mixes_its_leading_axis_is_not_evaluated_in_slices_of_it(mixing, monkeypatch):
    import axon

    body = {"sum over it": lambda x, w: x - x.sum(axis=0, keepdims=True),
            "max over it": lambda x, w: x.max(axis=0, keepdims=True) * x,
            "cumsum over it": lambda x, w: x.cumsum(axis=0),
            "contracted": lambda x, w: (x.transpose(2, 1, 0) @ w).transpose(2, 1, 0),
            "sliced": lambda x, w: axon.concatenate([x[1:], x[:1]], axis=0),
            "its size": lambda x, w: x * x.shape[0],
            "moved by a reshape": lambda x, w: x.reshape(x.shape[1], x.shape[0], x.shape[2])}[mixing]

    @axon.program(x=("b", "m", "n"), w=("b", "b"))
    def program(x, w):
        return body(x, w)

    rng = np.random.default_rng(0)
    data = {"x": rng.standard_normal((4, 8, 16)), "w": rng.standard_normal((4, 4))}
    sizes = {"b": 4, "m": 8, "n": 16}
    want = program(**data)
    monkeypatch.setattr(batch, "REFERENCE_ELEMENTS", 8 * 16)  # one b at a time, were it a batch axis
    got, _ = kernel_reference(program.graph, data, "float32", None, sizes)
    np.testing.assert_allclose(got[0], want, rtol=1e-12, atol=1e-12)


def test_the_reference_takes_all_checked_rows_at_once_with_the_same_result(direct, monkeypatch):
    import axon.search.check as check_module

    data = MATMUL.random_inputs(SIZES, "bfloat16", seed=6)
    rows = CheckedRows("m", 4096, 128, ((0, 128), (2048, 2176), (3968, 4096)))
    windows = []
    real = check_module._reference
    monkeypatch.setattr(check_module, "_reference", lambda *args: windows.append(args[5]) or real(*args))
    want, tol = check_module._reference_on_part(MATMUL.graph, MATMUL.graph, 1, direct, data, SIZES, "bfloat16",
                                                frozenset(), rows, None)
    assert [w["m"] for w in windows] == [3 * 128]  # one reference over the three windows' rows, not one per window
    sliced = {k: (v[np.r_[0:128, 2048:2176, 3968:4096]] if k == "x" else v) for k, v in data.items()}
    alone, alone_tol = kernel_reference(MATMUL.graph, sliced, "bfloat16", narrow=frozenset())
    assert np.array_equal(want[0], alone[0]) and np.array_equal(tol.bounds[0], alone_tol.bounds[0])
    # a causal mask reads each row's position: the rows of both windows, at once, each at its own position
    causal = SUITE["causal_gqa"].program
    sizes = {"kv": 1, "g": 1, "s": 512, "t": 512, "d": 64}
    cand = direct_lowering("causal_gqa", causal.graph, sizes, TRN2, "bfloat16", Lowerer(TRN2))
    data = causal.random_inputs(sizes, "bfloat16", seed=3)
    windows.clear()
    want, tol = check_module._reference_on_part(causal.graph, causal.graph, 1, cand, data, sizes, "bfloat16",
                                                frozenset(), CheckedRows("s", 512, 128, ((0, 128), (384, 512))), None)
    assert [w["s"] for w in windows] == [256]
    whole, whole_tol = kernel_reference(causal.graph, data, "bfloat16", narrow=frozenset())
    rows = np.r_[0:128, 384:512]
    np.testing.assert_allclose(want[0], whole[0][..., rows, :], rtol=1e-12, atol=1e-12)
    # the bounds agree to rounding (values exactly): on one machine (2026-12-07, no AVX-512) 1694 of
    # 16384 bounds differed by up to 1.6e-7 relative between the window's and the whole program's
    # arrays, where earlier machines agreed to 1e-9; a row at the wrong position differs by far more
    np.testing.assert_allclose(tol.bounds[0], whole_tol.bounds[0][..., rows, :], rtol=1e-6)


def test_the_blocks_of_a_partial_check_are_counted_by_the_references_work():
    """Attention's scores, each with a dozen float64 bound passes, are most of its reference: by
    multiply-adds alone five blocks fit where the reference's work allows the first and the last."""
    from axon.search.check import ELEMENT_MACS, reference_work

    g = SUITE["gqa"].program.graph
    sizes = {"kv": 1, "g": 1, "s": 2048, "t": 2048, "d": 64}
    cand = direct_lowering("gqa", g, sizes, TRN2, "bfloat16", Lowerer(TRN2))
    macs = matmul_macs(g, sizes)
    work = reference_work(g, sizes)
    assert work > macs + ELEMENT_MACS * 2048 * 2048  # the scores at least
    unit = max(p.tiling.row_tile * p.tiling.row_block for p in cand.passes)
    by_macs = plan_rows(g, cand, sizes, macs, budget=macs * 5 * unit / 2048)
    by_work = plan_rows(g, cand, sizes, macs, budget=macs * 5 * unit / 2048, work=work)
    assert by_macs.checked == 5 * unit and by_work.checked == 2 * unit


def test_a_check_on_columns_alone_runs_the_kernel_as_partial():
    sizes = {"m": 256, "k": 128, "n": 2048}  # two row blocks: both checked, the columns in part
    cand = direct_lowering("matmul", MATMUL.graph, sizes, TRN2, "bfloat16", Lowerer(TRN2))
    macs = matmul_macs(MATMUL.graph, sizes)
    assert plan_rows(MATMUL.graph, cand, sizes, macs, budget=1.0) is None
    cols = plan_columns(MATMUL.graph, cand, sizes, macs, budget=1.0)
    data = MATMUL.random_inputs(sizes, "bfloat16", seed=9)
    result = check(TRN2, "matmul", MATMUL.graph, cand, sizes, "bfloat16", Lowerer(TRN2), data, None, columns=cols)
    assert result.ok, result.explain()
    assert result.tolerance["elements"] == 256 * cols.checked


def test_a_kernel_of_a_wrong_variant_fails_against_the_program_as_written():
    """Defense in depth behind the prover: a kernel of a variant that differs from the program
    (a wrong rewrite, here where(x > 0, sqrt(x), -1) taken for sqrt(where(x > 0, x, -1))) passes
    against its own reference, NaN for NaN, and fails against the program as written."""
    import axon

    @axon.program(x=("m", "k"), w=("k", "n"))
    def written(x, w):
        return axon.where(x > 0, axon.sqrt(x), -1.0) @ w

    @axon.program(x=("m", "k"), w=("k", "n"))
    def wrong(x, w):
        return axon.sqrt(axon.where(x > 0, x, -1.0)) @ w

    sizes = {"m": 128, "k": 128, "n": 128}
    cand = direct_lowering("wrong", wrong.graph, sizes, TRN2, "float32", Lowerer(TRN2))
    data = written.random_inputs(sizes, "float32", seed=2)
    alone = check(TRN2, "wrong", wrong.graph, cand, sizes, "float32", Lowerer(TRN2), data, None)
    assert alone.ok  # its own NaN reference, matched NaN for NaN
    against = check(TRN2, "wrong", wrong.graph, cand, sizes, "float32", Lowerer(TRN2), data, None,
                    original=written.graph)
    assert not against.ok and "differs from the program as written" in against.explain()


def test_a_kernel_of_several_passes_checks_the_column_blocks_of_its_matmuls():
    """gated_projection unfused: two matmul passes restricted to the checked column blocks, the
    silu and mul passes over whole rows, reading the skipped columns unwritten (partial mode)."""
    b = SUITE["gated_projection"].program
    sizes = {"m": 256, "k": 4096, "n": 4096}  # weights in column blocks of 1024
    lowerer = Lowerer(TRN2)
    cands = enumerate_candidates("gp", [(b.graph, ())], sizes, TRN2, "bfloat16", lowerer, Counts())
    cand = next(c for c in cands if len(c.passes) == 4 and c.passes[0].tiling.n_block_for(4096) < 2048)
    macs = matmul_macs(b.graph, sizes)
    cols = plan_columns(b.graph, cand, sizes, macs, budget=1.0)
    assert cols is not None and cols.ranges[0][0] == 0 and cols.ranges[-1][1] == 4096
    data = b.random_inputs(sizes, "bfloat16", seed=4)
    result = check(TRN2, "gp", b.graph, cand, sizes, "bfloat16", lowerer, data, None, columns=cols)
    assert result.ok, result.explain()
    from axon.search.candidates import emit, packed_world

    world, _, _ = packed_world(b.graph, 1, sizes)
    src = emit("gp", TRN2, world, cand, sizes, "bfloat16", lowerer, columns=("n", cols.ranges))
    part = np.asarray(TRN2.run(src, data, timing_only=False, partial=True).outputs[0], np.float32)
    full = np.asarray(TRN2.run(cand.source, data, timing_only=False).outputs[0], np.float32)
    inside = np.zeros(4096, bool)
    for s, e in cols.ranges:
        inside[s:e] = True
    assert np.array_equal(part[:, inside], full[:, inside]) and np.isnan(part[:, ~inside]).all()
    assert result.tolerance["elements"] == 256 * cols.checked
