"""The shape of attention kernels: each matmul of a pass gets its own widest tile, a kv head's K and
V are loaded once for the query heads of its group, and engine placement weighs work by how often
it runs. Each kernel still matches the reference."""
import numpy as np

from axon.fusion.nodes import RowWorld, groups
from axon.search.candidates import Counts, enumerate_candidates
from axon.search.lowering import Lowerer
from axon.search.select import compare
from axon.semantics.bounds import kernel_reference
from axon.suite import SUITE
from axon.targets.trainium.emitter import NkiEmitter
from axon.targets.trainium.target import TrainiumTarget
from axon.tiling.space import Tiling, enumerate_tilings

TARGET = TrainiumTarget("trn2")
GQA_SMALL = {"kv": 2, "g": 2, "s": 128, "t": 256, "d": 64}


def _gqa_candidates(sizes):
    b = SUITE["gqa"]
    return enumerate_candidates("gqa", [(b.program.graph, ())], sizes, TARGET, "bfloat16", Lowerer(TARGET), Counts())


def test_each_matmul_takes_its_widest_divisor_of_the_n_tile():
    t = Tiling(row_tile=128, row_block=1, n_tile=512, n_block=0, k_tile=128)
    assert [t.n_tile_for(n) for n in (2048, 128, 640, 384)] == [512, 128, 320, 384]


def test_attention_pass_tiles_the_scores_bank_wide():
    w = RowWorld.of(SUITE["gqa"].program.graph)
    (g,) = groups(w, "fused")
    fits, _ = enumerate_tilings(w, g, {"kv": 8, "g": 4, "s": 512, "t": 2048, "d": 128}, TARGET.limits())
    assert fits and {t.n_tile for t in fits} == {512}  # scores 512 wide; P @ V (d = 128) 128 wide


def test_kv_blocks_are_loaded_once_per_kv_head_and_the_kernels_match():
    fused = [c for c in _gqa_candidates(GQA_SMALL) if len(c.passes) == 1]
    assert fused
    b = SUITE["gqa"]
    inputs = b.program.random_inputs(GQA_SMALL, "bfloat16", seed=3)
    want, tol = kernel_reference(b.program.graph, inputs, "bfloat16")
    for cand in fused[:3]:
        body = cand.source.split("@nki.jit", 1)[1]
        heads = body.index("for i_b1 in")
        assert body.index("src=k[i_b0, 0,") < heads and body.index("src=v[i_b0, 0,") < heads
        m = TARGET.run(cand.source, inputs, timing_only=False)
        assert compare(m.outputs, want, tol).ok, cand.describe()


def test_balanced_psum_copies_name_their_engine():
    # an engine-less copy out of PSUM runs where the compiler puts it (ScalarE), not where
    # placement counted it
    for cand in _gqa_candidates(GQA_SMALL)[:20]:
        psum = {line.split(" = ", 1)[0].strip() for line in cand.source.splitlines() if "buffer=nl.psum" in line}
        for line in cand.source.splitlines():
            if "nisa.tensor_copy(" in line and line.split("src=", 1)[1].split("[", 1)[0].rstrip(")") in psum:
                assert "engine=" in line, line


def test_placement_weighs_work_by_its_loop_runs():
    em = NkiEmitter("bfloat16", scalar_copies=True)
    em.balance = True
    em.preload({0: {"vector": 0.0, "gpsimd": 0.0, "scalar": 0.0}})
    acc = em.alloc("acc", 128, 512, "accum")
    sb = em.alloc("s", 128, 512, "kernel")
    with em.loop("i_n", 16):
        em.copy(f"{sb}[0:128, 0:512]", f"{acc}[0:128, 0:512]")  # 16 runs on one engine
    em.copy(f"{sb}[0:128, 0:512]", f"{acc}[0:128, 0:512]")
    # the second copy goes to the other engine: the first weighs 16 copies, not one
    first, second = [line for line in em.lines if "tensor_copy" in line]
    assert first.split("engine=")[1] != second.split("engine=")[1]
    assert em.load["vector"] > 10 * em.load["scalar"] or em.load["scalar"] > 10 * em.load["vector"]


def test_placement_balances_each_region_on_its_own():
    """A loop nest that runs after another (a pass, a causal run) is balanced within itself: the
    copies of a later region do not go to the engine the earlier one left idle overall."""
    em = NkiEmitter("bfloat16", scalar_copies=True)
    em.balance = True
    em.preload({r: {"vector": 0.0, "gpsimd": 0.0, "scalar": 0.0} for r in range(3)})
    acc = em.alloc("acc", 128, 512, "accum")
    sb = em.alloc("s", 128, 512, "kernel")
    for _ in range(2):
        em.begin_region()
        with em.loop("i_n", 16):
            em.copy(f"{sb}[0:128, 0:512]", f"{acc}[0:128, 0:512]")
    first, second = [line.split("engine=")[1] for line in em.lines if "tensor_copy" in line]
    assert first == second == "nisa.engine.scalar)"  # each region's one copy, where it is cheapest


def test_query_heads_fold_into_the_rows_where_kv_is_shared():
    from axon.frontend.program import program
    from axon.semantics.sizes import Size
    from axon.tiling.packing import fold_heads

    folded = fold_heads(SUITE["gqa"].program.graph)
    q, k, v = folded.inputs
    assert q.shape == (Size.of("kv"), Size.of(1), Size.of("g") * Size.of("s"), Size.of("d"))
    assert k.shape == SUITE["gqa"].program.graph.inputs[1].shape  # one load per kv head
    assert folded.outputs[0].shape == q.shape

    @program(a=("b", "h", "m", "k"), w=("b", "h", "k", "n"))
    def per_head_weights(a, w):  # each head has its own weights: its rows cannot share a matmul
        return a @ w

    assert fold_heads(per_head_weights.graph) is None


def test_decode_folds_its_heads_and_the_check_sees_the_callers_shapes():
    from axon.search.check import check
    from axon.search.lowering import Lowerer as L

    sizes = {"kv": 2, "g": 4, "s": 8, "t": 256, "d": 64}  # 8 query rows per head: 32 per kv head
    b = SUITE["gqa"]
    lowerer = L(TARGET)
    cands = enumerate_candidates("gqa", [(b.program.graph, ())], sizes, TARGET, "bfloat16", lowerer, Counts())
    folded = [c for c in cands if c.options.fold == 4]
    assert folded and all(c.passes[0].tiling.row_tile == 32 for c in folded)
    cand = folded[0]
    assert "out = nl.ndarray((2, 4, 8, 64)" in cand.source and "q.reshape((2, 1, 32, 64))" in cand.source
    data = b.program.random_inputs(sizes, "bfloat16", seed=7)
    assert check(TARGET, "gqa", b.program.graph, cand, sizes, "bfloat16", lowerer, data, None).ok
    # its outputs are in the caller's layout: with two heads' rows swapped they fail
    out = TARGET.run(cand.source, data, timing_only=False).outputs[0]
    want, tol = kernel_reference(b.program.graph, data, "bfloat16")
    assert compare([out], want, tol).ok
    assert not compare([np.asarray(out)[:, [1, 0, 2, 3]]], want, tol).ok


def test_a_row_max_of_bf16_scores_is_kept_in_bf16_and_runs_at_the_double_rate():
    # max of bf16 values is one of them (exact in bf16): its column is bf16, so the Vector
    # Engine's bf16-in, bf16-out tensor_reduce rate applies; f32 scores keep an f32 max
    import re

    from axon.targets.trainium.hardware import get_target
    from axon.targets.trainium.perfmodel import compute_cycles
    from axon.targets.trainium.simulator import load_source, simulate

    b, hw = SUITE["gqa"], get_target("trn2")
    inputs = b.program.random_inputs(GQA_SMALL, "bfloat16", seed=4)
    want, tol = kernel_reference(b.program.graph, inputs, "bfloat16")
    seen = set()
    for cand in [c for c in _gqa_candidates(GQA_SMALL) if len(c.passes) == 1][:12]:
        m = re.search(r"nisa\.tensor_reduce\(dst=(\w+)\[.*?data=(\w+)\[.*?op=nl\.maximum", cand.source)
        dtype = lambda name: re.search(rf"\b{name} = nl\.ndarray\(\(.*?\), dtype=([\w.]+)", cand.source).group(1)
        narrow = dtype(m.group(2)) == "DT"
        assert dtype(m.group(1)) == ("DT" if narrow else "nl.float32"), cand.describe()
        trace = simulate(load_source(cand.source), inputs, target="trn2").trace
        red = next(i for i in trace if i.opcode == "tensor_reduce" and i.extra.get("op") == "maximum")
        full = compute_cycles(red, hw) - (hw.engines[red.engine].access_start_cycles + hw.overhead.static_cycles)
        assert (full <= red.free_elems / 2 + 1) == narrow  # the double rate, only in bf16
        assert compare(TARGET.run(cand.source, inputs, timing_only=False).outputs, want, tol).ok, cand.describe()
        seen.add(narrow)
    assert seen == {True, False}
