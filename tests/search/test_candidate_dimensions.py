"""The candidate dimensions the performance model judges: wide intermediates in bf16, reductions
offloaded to another engine, Scalar-Engine placement on trn2. Each kernel still matches the
reference, and each dimension really changes the kernel."""
import re

from axon.search.candidates import Counts, enumerate_candidates
from axon.search.lowering import Lowerer
from axon.search.select import compare
from axon.semantics.bounds import kernel_reference
from axon.suite import SUITE
from axon.targets.trainium.target import TrainiumTarget

TRN2 = TrainiumTarget("trn2")


def _candidates(name, sizes, target=TRN2, dtype="bfloat16"):
    b = SUITE[name]
    lw = Lowerer(target)
    return enumerate_candidates(name, [(b.program.graph, ())], sizes, target, dtype, lw, Counts()), lw


def _check(name, sizes, cand, target=TRN2):
    b = SUITE[name]
    inputs = b.program.random_inputs(sizes, "bfloat16", seed=4)
    want, tol = kernel_reference(b.program.graph, inputs, "bfloat16")
    m = target.run(cand.source, inputs, timing_only=False)
    return compare(m.outputs, want, tol)


def test_bf16_intermediates_are_a_choice_and_stay_correct():
    sizes = SUITE["layernorm"].sizes("small")
    cands, _ = _candidates("layernorm", sizes)
    wide_f32 = re.compile(r"nl\.ndarray\(\(128, (\d+)\), dtype=nl\.float32, buffer=nl\.sbuf\)")
    low = [c for c in cands if c.options.precision == "kernel"]
    assert low and all(c.options.precision == "f32" or not any(int(w) > 1 for w in wide_f32.findall(c.source))
                       for c in cands)
    assert any(int(w) > 1 for c in cands if c.options.precision == "f32" for w in wide_f32.findall(c.source))
    for cand in low[:2]:
        assert _check("layernorm", sizes, cand).ok, cand.describe()


def test_float32_kernels_keep_float32_intermediates():
    cands, _ = _candidates("layernorm", SUITE["layernorm"].sizes("small"), dtype="float32")
    assert {c.options.precision for c in cands} == {"f32"}


def test_a_reduction_can_be_offloaded_to_the_scalar_engine():
    sizes = SUITE["layernorm"].sizes("small")
    cands, lw = _candidates("layernorm", sizes)
    # the mean's sum: VectorE tensor_reduce in the fused program, ScalarE activation_reduce(copy) in an alternative
    copy_reduce = [c for c in cands if "op=nl.copy, reduce_op=nl.add" in c.source]
    assert copy_reduce and all(c.options.lowering > 0 for c in copy_reduce)
    assert any("nisa.tensor_reduce(" in c.source for c in cands if c.options.lowering == 0)
    assert _check("layernorm", sizes, copy_reduce[0]).ok
    assert lw.statuses == [] or set(lw.statuses) <= {"proved"}


def test_scalar_engine_placement_on_trn2_only():
    sizes = SUITE["softmax_matmul"].sizes("small")
    on_scalar = [c for c in _candidates("softmax_matmul", sizes)[0] if "engine=nisa.engine.scalar" in c.source]
    assert on_scalar
    assert _check("softmax_matmul", sizes, on_scalar[0]).ok
    trn1 = TrainiumTarget("trn1")  # NeuronCore-v2's Scalar Engine has no tensor_copy / tensor_scalar
    assert not any("engine=nisa.engine.scalar" in c.source for c in _candidates("softmax_matmul", sizes, trn1)[0])


def test_input_shapes_make_no_data():
    b = SUITE["gated_mlp"]
    shapes = b.program.input_shapes(b.sizes("llama3_70b"), "bfloat16")
    assert shapes["w1"].shape == (8192, 28672) and str(shapes["w1"].dtype) == "bfloat16"
    assert not hasattr(shapes["w1"], "__array__")


def test_tiling_combinations_past_the_limit_are_the_cheapest_not_the_first(monkeypatch):
    import itertools

    from axon.search import candidates

    # each tiling stands for its pass's cost
    monkeypatch.setattr(candidates, "static_cost", lambda world, passes, sizes, dtype: sum(p.tiling for p in passes))
    per_group = [[5, 1, 3], [4, 0, 2], [9, 8]]
    got = candidates._combos(None, ["a", "b", "c"], per_group, {}, "bfloat16", 4)
    assert got[0] == (1, 0, 8) and len(set(got)) == 4
    assert sorted(map(sum, got)) == sorted(map(sum, itertools.product(*per_group)))[:4]
    # no more combinations than asked for: all of them, in the passes' own order
    assert candidates._combos(None, ["a", "b", "c"], per_group, {}, "bfloat16", 18) == list(itertools.product(*per_group))


def test_every_pass_of_a_multi_pass_candidate_gets_its_good_tilings():
    # gated_projection unfused at Llama-3-70B sizes: four passes with up to eight tilings each. The
    # first combinations of the product kept both matmul passes at one row tile per weight load
    # (the weights read sixteen times instead of four)
    cands, _ = _candidates("gated_projection", {"m": 2048, "k": 8192, "n": 28672})
    from axon.semantics.ops import Op

    unfused = [c for c in cands if c.fusion == "unfused"]
    matmul_blocks = {tuple(p.tiling.row_block for p in c.passes if any(n.op is Op.MATMUL for n in p.group.nodes))
                     for c in unfused}
    assert unfused and all(len(b) == 2 for b in matmul_blocks)
    assert (4, 4) in matmul_blocks


def test_a_combos_stationary_layouts_come_together():
    """The static traffic estimate ties a kernel whose operands the DMA engine transposes with the
    one whose operands the Tensor Engine transposes, and ranking keeps the candidates' order among
    ties: each tiling's "pe" and "dma" kernels are next to each other, so a tie of many tilings
    cannot rank every "pe" kernel before the first "dma" one."""
    import itertools

    cands, _ = _candidates("gqa", {"kv": 2, "g": 2, "s": 256, "t": 512, "d": 64})
    same_combo = lambda c: (c.variant, c.fusion, c.options.engines, c.options.fold, c.options.packed,
                            tuple(p.tiling for p in c.passes))
    runs = [list(run) for _, run in itertools.groupby(cands, key=same_combo)]
    plain = [run for run in runs if not any(p.tiling.kv_chunk for p in run[0].passes)]
    assert len(plain) > 4
    assert all({c.options.stationary for c in run} == {"pe", "dma"} for run in plain)


def test_transposed_weights_through_dma_are_a_choice_and_stay_correct():
    """Keys read transposed (q @ k^T) reach the contraction layout through Tensor Engine
    transposes of the rows loaded, or through DMA transposes on the way in: beside the all-"pe"
    layout and the DMA-transposed stationary one, each whole-row attention tiling is also offered
    with both by DMA, whose kernel has no Tensor Engine transpose of the keys and matches."""
    sizes = {"kv": 1, "g": 2, "s": 128, "t": 256, "d": 64}
    cands, _ = _candidates("gqa", sizes)
    plain = [c for c in cands if not any(p.tiling.kv_chunk for p in c.passes)]
    layouts = {(c.options.stationary, c.options.weights) for c in plain}
    assert layouts == {("pe", "pe"), ("dma", "pe"), ("dma", "dma")}
    both = [c for c in plain if c.options.weights == "dma" and c.options.precision == "kernel"]
    keys_by_pe = [c for c in plain if c.options.weights == "pe" and c.options.stationary == "dma"]
    assert both and keys_by_pe
    assert all("wrows" not in c.source and c.source.count("nisa.dma_transpose(") >= 2 for c in both)
    assert all("wrows" in c.source for c in keys_by_pe)
    assert "transposed weights by dma" in both[0].source
    assert _check("gqa", sizes, both[0]).ok, both[0].describe()


def test_a_causal_pass_takes_its_keys_through_dma_where_the_target_can():
    """Each run of a causal pass's row blocks loads the keys it sees again: on trn2 they come
    through DMA transposes (no Tensor Engine transposes of them, no PSUM copies), as an online
    walk's do; trn1 has no DMA transpose and keeps the Tensor Engine's."""
    sizes = {"kv": 1, "g": 2, "s": 512, "t": 512, "d": 64}
    for target, layout in ((TRN2, "dma"), (TrainiumTarget("trn1"), "pe")):
        cands, _ = _candidates("causal_gqa", sizes, target)
        causal = [c for c in cands if "the masked tiles beyond are skipped" in c.source]
        assert causal and {(c.options.stationary, c.options.weights) for c in causal} == {(layout, layout)}
        assert all(("nisa.dma_transpose(" in c.source) == (layout == "dma") for c in causal)
