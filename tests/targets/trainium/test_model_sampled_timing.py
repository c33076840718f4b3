"""Loop-sampled timing (sampled_timing.py, simulator/sampling.py): long loops cut after two
iterations and extended give the full timing-only path's latency, for a fraction of the
instructions; an extension the schedule does not bear out is refused and the loop runs whole."""
import textwrap

import pytest

from axon.targets.trainium import perfmodel, sampled_timing
from axon.targets.trainium.hardware import get_target
from axon.targets.trainium.perfmodel import estimate
from axon.targets.trainium.sampled_timing import sampled_latency
from axon.targets.trainium.simulator import LoopSampling, ShapeDtype, load_source, simulate, simulate_source

NEW = "import nki\nimport nki.isa as nisa\nimport nki.language as nl\n"
HW = get_target("trn2")


def matmul_pass(out: str) -> str:
    """16 output tiles of `out`, each the sum of 16 matmuls over loaded tiles: TensorE and DMA
    bound per tile."""
    return textwrap.indent(textwrap.dedent(f"""
        for i_n in nl.affine_range(16):
            acc = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)
            for i_k in nl.affine_range(16):
                a = nl.ndarray((128, 128), dtype=xT.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=a, src=xT[nl.ds(i_k * 128, 128), 0:128])
                b = nl.ndarray((128, 512), dtype=w.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=b, src=w[nl.ds(i_k * 128, 128), nl.ds(i_n * 512, 512)])
                nisa.nc_matmul(dst=acc, stationary=a, moving=b)
            o = nl.ndarray((128, 512), dtype=w.dtype, buffer=nl.sbuf)
            nisa.tensor_copy(dst=o, src=acc)
            nisa.dma_copy(dst={out}[0:128, nl.ds(i_n * 512, 512)], src=o)
        """), "    ")


def hbm_out(name: str) -> str:
    return f"    {name} = nl.ndarray((128, 8192), dtype=w.dtype, buffer=nl.shared_hbm)\n"


MATMUL = NEW + "@nki.jit\ndef mm(xT, w):\n" + hbm_out("out") + matmul_pass("out") + "    return out\n"
# the same pass twice, one after the other: two loop statements cut alike
TWO_PASSES = (NEW + "@nki.jit\ndef mm(xT, w):\n" + hbm_out("out") + hbm_out("out2") + matmul_pass("out")
              + matmul_pass("out2") + "    return out, out2\n")
MATMUL_IN = {"xT": ShapeDtype((2048, 128), "bfloat16"), "w": ShapeDtype((2048, 8192), "bfloat16")}

# per block: 32 weight loads, then 16 row tiles of 64 matmuls each; two row tiles hide behind the
# block's loads, sixteen do not (a cut loop whose extension the schedule refuses)
HIDDEN = NEW + textwrap.dedent("""
@nki.jit
def mm(xT, w):
    out = nl.ndarray((2048, 4096), dtype=w.dtype, buffer=nl.shared_hbm)
    lhsT = nl.ndarray((128, 65536), dtype=xT.dtype, buffer=nl.sbuf)
    for i_kt in nl.affine_range(32):
        nisa.dma_copy(dst=lhsT[0:128, nl.ds(i_kt * 2048, 2048)], src=xT[nl.ds(i_kt * 128, 128), 0:2048])
    for i_nb in nl.affine_range(4):
        w1 = nl.ndarray((128, 32768), dtype=w.dtype, buffer=nl.sbuf)
        for i_kt in nl.affine_range(32):
            nisa.dma_copy(dst=w1[0:128, nl.ds(i_kt * 1024, 1024)],
                          src=w[nl.ds(i_kt * 128, 128), nl.ds(i_nb * 1024, 1024)])
        for i_r in nl.affine_range(16):
            o = nl.ndarray((128, 1024), dtype=w.dtype, buffer=nl.sbuf)
            for i_nt in nl.affine_range(2):
                acc = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)
                for i_kt in nl.affine_range(32):
                    nisa.nc_matmul(dst=acc, stationary=lhsT[0:128, nl.ds(i_kt * 2048 + i_r * 128, 128)],
                                   moving=w1[0:128, nl.ds(i_kt * 1024 + i_nt * 512, 512)])
                nisa.tensor_copy(dst=o[0:128, nl.ds(i_nt * 512, 512)], src=acc)
            nisa.dma_copy(dst=out[nl.ds(i_r * 128, 128), nl.ds(i_nb * 1024, 1024)], src=o)
    return out
""")
HIDDEN_IN = {"xT": ShapeDtype((4096, 2048), "bfloat16"), "w": ShapeDtype((4096, 4096), "bfloat16")}



def row_blocks(trip: int) -> str:
    """`trip` row blocks, each a matmul pass of 16 output tiles with 48 matmuls each: a block's
    first iteration, its tile loop cut at 2, issues 2 x 146 instructions (a long body)."""
    inner = matmul_pass("out").replace("range(16):\n            a", "range(48):\n            a")
    inner = inner.replace("xT[nl.ds(i_k * 128, 128), 0:128]", "xT[nl.ds(i_k * 128, 128), nl.ds(i_m * 128, 128)]")
    inner = inner.replace("out[0:128, nl.ds(i_n * 512, 512)]", "out[nl.ds(i_m * 128, 128), nl.ds(i_n * 512, 512)]")
    return (NEW + "@nki.jit\ndef mm(xT, w):\n"
            + f"    out = nl.ndarray(({trip * 128}, 8192), dtype=w.dtype, buffer=nl.shared_hbm)\n"
            + f"    for i_m in nl.affine_range({trip}):\n" + textwrap.indent(inner, "    ") + "    return out\n")


def row_blocks_in(trip: int) -> dict:
    return {"xT": ShapeDtype((6144, trip * 128), "bfloat16"), "w": ShapeDtype((6144, 8192), "bfloat16")}


# two passes over the same 16 x 32 weight tiles (128 KiB per partition: more than the model keeps
# resident, so the second pass loads them again); cut to 2 x 32 tiles they would fit
REREAD = NEW + textwrap.dedent("""
@nki.jit
def reread(w):
    out = nl.ndarray((128, 512), dtype=w.dtype, buffer=nl.shared_hbm)
    for r in nl.affine_range(2):
        for i_n in nl.affine_range(16):
            t = nl.ndarray((128, 4096), dtype=w.dtype, buffer=nl.sbuf)
            for j in nl.affine_range(32):
                nisa.dma_copy(dst=t[0:128, nl.ds(j * 128, 128)], src=w[0:128, nl.ds((i_n * 32 + j) * 128, 128)])
            o = nl.ndarray((128, 512), dtype=w.dtype, buffer=nl.sbuf)
            nisa.tensor_copy(dst=o, src=t[0:128, 0:512])
            nisa.dma_copy(dst=out, src=o)
    return out
""")
REREAD_IN = {"w": ShapeDtype((128, 65536), "bfloat16")}


def full_latency(source, inputs):
    sim = simulate_source(source, None, inputs, target="trn2", timing_only=True)
    return estimate(sim.trace, HW).latency_ns, len(sim.trace)


def test_a_long_loop_is_cut_and_extended_to_the_full_latency():
    full, issued = full_latency(MATMUL, MATMUL_IN)
    got = sampled_latency(load_source(MATMUL, "<mm>", None), MATMUL_IN, HW)
    assert not got.exact and len(got.loops) == 1
    (skipped, instances, _), = got.loops.values()
    assert (skipped, instances) == (14, 1)  # 16 iterations, 2 run, in the loop's one instance
    assert got.latency_ns == pytest.approx(full, rel=0.01)
    assert got.work < issued / 2


def test_floors_grow_to_the_latency_and_a_stop_ends_the_runs_at_the_first_one_past_it():
    kernel = load_source(TWO_PASSES, "<two>", None)
    whole = sampled_latency(kernel, MATMUL_IN, HW)
    works, floors = zip(*whole.floors)
    # the cut run's latency, then one more after the two loops' shared longer run: the latency
    assert len(floors) == 2 and floors[0] < floors[1] == whole.latency_ns and works[-1] == whole.work
    assert list(works) == sorted(works) and not whole.stopped
    # with a stop, the cut run runs alone first: its latency, then the floor of its steady loops,
    # which for these DMA-bound loops is the whole latency already: the longer run is never made
    stop = (floors[0] + floors[1]) / 2
    stopped = sampled_latency(kernel, MATMUL_IN, HW, stop_above_ns=stop)
    assert stopped.stopped and stopped.floors[0][1] == floors[0] and len(stopped.floors) == 2
    assert stop <= stopped.latency_ns <= whole.latency_ns * (1 + 1e-9) and stopped.work < whole.work / 2
    early = sampled_latency(kernel, MATMUL_IN, HW, stop_above_ns=floors[0])
    assert early.stopped and early.floors == stopped.floors[:1] and early.work == stopped.work


@pytest.mark.parametrize("source, inputs", [(MATMUL, MATMUL_IN), (TWO_PASSES, MATMUL_IN), (HIDDEN, HIDDEN_IN),
                                            (REREAD, REREAD_IN), (row_blocks(4), row_blocks_in(4)),
                                            (row_blocks(8), row_blocks_in(8))])
def test_a_run_that_may_stop_reaches_the_same_latency_and_no_floor_passes_it(source, inputs):
    kernel = load_source(source, "<k>", None)
    free = sampled_latency(kernel, inputs, HW)
    may_stop = sampled_latency(kernel, inputs, HW, stop_above_ns=1e18)  # the cut run first, never stopped
    assert may_stop.latency_ns == pytest.approx(free.latency_ns, rel=1e-12) and not may_stop.stopped
    assert all(f <= may_stop.latency_ns * (1 + 1e-9) for _, f in may_stop.floors)
    assert [f for _, f in may_stop.floors] == sorted(f for _, f in may_stop.floors)


def test_the_cut_run_runs_two_iterations_of_the_long_loop_only():
    cut = LoopSampling(2)
    sim = simulate_source(MATMUL, None, MATMUL_IN, target="trn2", timing_only=True, sampling=cut)
    matmuls = [i for i in sim.trace if i.opcode == "nc_matmul"]
    assert len(matmuls) == 2 * 16  # the inner 16-matmul loop (3 instructions a turn) is never cut
    view = cut.view()
    assert list(view.cut.values()) == [1] and list(view.skipped.values()) == [14]


def test_a_kernel_without_long_loops_is_timed_whole_and_exactly():
    full, _ = full_latency(REREAD.replace("range(16)", "range(4)"), REREAD_IN)
    got = sampled_latency(load_source(REREAD.replace("range(16)", "range(4)"), "<r>", None), REREAD_IN, HW)
    assert got.exact and got.latency_ns == full


def test_an_extension_hidden_behind_other_work_is_refused_and_the_loop_runs_whole(monkeypatch):
    full, _ = full_latency(HIDDEN, HIDDEN_IN)
    kernel = load_source(HIDDEN, "<h>", None)
    got = sampled_latency(kernel, HIDDEN_IN, HW)
    assert got.latency_ns == pytest.approx(full, rel=1e-9) and got.loops == {}
    monkeypatch.setattr(sampled_timing, "TRUST", 0.0)  # trusting it anyway is off
    trusted = sampled_latency(kernel, HIDDEN_IN, HW)
    assert trusted.loops and trusted.latency_ns != pytest.approx(full, rel=0.015)


def test_what_the_model_keeps_resident_is_sized_by_the_uncut_kernel(monkeypatch):
    full, _ = full_latency(REREAD, REREAD_IN)
    kernel = load_source(REREAD, "<r>", None)
    got = sampled_latency(kernel, REREAD_IN, HW)
    assert not got.exact and got.latency_ns == pytest.approx(full, rel=0.02)
    monkeypatch.setattr(perfmodel, "_uncut_share", lambda *a: 1.0)  # sized by the cut trace instead
    monkeypatch.setattr(sampled_timing, "TRUST", 0.0)
    assert sampled_latency(kernel, REREAD_IN, HW).latency_ns < 0.8 * full


def test_a_loop_of_few_iterations_with_a_long_body_is_cut_after_one_and_extended_to_the_full_latency():
    source, inputs = row_blocks(4), row_blocks_in(4)
    full, issued = full_latency(source, inputs)
    assert issued == 4 * 16 * (3 * 48 + 2)
    cut = LoopSampling(2, sampled_timing.STEP)
    simulate_source(source, None, inputs, target="trn2", timing_only=True, sampling=cut)
    blocks, tiles = sorted(cut.view().cut)
    assert cut.keep_of(blocks) == cut.extra_of(blocks) == 1  # 4 iterations: 1 run, 1 more in its longer view
    assert (cut.keep_of(tiles), cut.extra_of(tiles)) == (2, sampled_timing.STEP)  # a short body: as before
    got = sampled_latency(load_source(source, "<blocks>", None), inputs, HW)
    assert not got.exact and got.loops[blocks][:2] == (3, 1) and got.latency_ns == pytest.approx(full, rel=0.01)
    assert got.work < issued / 5


def test_a_long_loop_with_a_long_body_runs_two_iterations_and_one_more():
    source, inputs = row_blocks(8), row_blocks_in(8)
    cut = LoopSampling(2, sampled_timing.STEP)
    simulate_source(source, None, inputs, target="trn2", timing_only=True, sampling=cut)
    blocks = min(cut.view().cut)
    assert (cut.keep_of(blocks), cut.extra_of(blocks)) == (2, 1)
    assert cut.view().ran[blocks] == 2 and cut.view({blocks}).ran[blocks] == 3


def test_sampling_is_refused_for_a_run_with_data():
    with pytest.raises(ValueError, match="timing-only"):
        simulate(load_source(MATMUL, "<mm>", None), MATMUL_IN, target="trn2", sampling=LoopSampling())


def test_loops_cut_alike_one_after_the_other_share_one_longer_run():
    full, _ = full_latency(TWO_PASSES, MATMUL_IN)
    cut = LoopSampling(2)
    trace = simulate_source(TWO_PASSES, None, MATMUL_IN, target="trn2", timing_only=True, sampling=cut).trace
    view = cut.view()
    assert len(view.cut) == 2 and sampled_timing._groups(view) == [tuple(sorted(view.cut))]
    got = sampled_latency(load_source(TWO_PASSES, "<two>", None), MATMUL_IN, HW)
    assert len(got.loops) == 2 and got.latency_ns == pytest.approx(full, rel=0.01)
    # one simulation with both loops STEP iterations longer (4 of 16 turns instead of 2), timed as
    # the cut run and as one run with both loops longer
    longer = len(trace) * (2 + sampled_timing.STEP) // 2
    assert got.work == sampled_timing._work(longer, len(trace) + longer)


def test_loops_inside_one_another_are_never_grouped():
    cut = LoopSampling(2, min_body=3)  # the 16-matmul loop is cut too, inside the cut i_n loop
    simulate_source(MATMUL, None, MATMUL_IN, target="trn2", timing_only=True, sampling=cut)
    assert len(cut.view().cut) == 2 and len(sampled_timing._groups(cut.view())) == 2


def _no_ids(trace):
    """A trace's instructions as comparable values: buffers numbered by first use and loops by
    iteration only (ids count what was allocated and entered before, extra iterations included)."""
    from dataclasses import replace

    number: dict = {}

    def regions(rs):
        return tuple(replace(r, buffer=number.setdefault(r.buffer, len(number))) for r in rs)

    out = []
    for i in trace:
        after = tuple((w.opcode, w.line) for w in i.extra["space_after"].instructions) if "space_after" in i.extra else ()
        out.append((i.opcode, i.engine, regions(i.reads), regions(i.writes), i.line,
                    tuple(it for _, it, _ in i.extra.get("loops", ())), after))
    return out


@pytest.mark.parametrize("source, inputs, min_body", [(MATMUL, MATMUL_IN, 3), (TWO_PASSES, MATMUL_IN, 32),
                                                      (HIDDEN, HIDDEN_IN, 32), (REREAD, REREAD_IN, 32),
                                                      (row_blocks(4), row_blocks_in(4), 32)])
def test_each_view_of_one_longer_run_is_the_run_it_stands_for(source, inputs, min_body):
    """The cut run and each loop's longer run, read off one simulation, issue what separate
    runs with those loops cut at 2 and 4 iterations issue, and count alike."""
    run = LoopSampling(2, 2, min_body=min_body)
    base = simulate_source(source, None, inputs, target="trn2", timing_only=True, sampling=run).trace
    alone = LoopSampling(2, min_body=min_body)
    assert _no_ids(base) == _no_ids(simulate_source(source, None, inputs, target="trn2", timing_only=True,
                                                    sampling=alone).trace)
    assert run.decided == alone.decided and (run.view().cut, run.view().ran) == (alone.view().cut, alone.view().ran)
    for line in run.view().cut:
        # that loop alone run its keep + extra iterations: what a separate longer run would do
        decided = {k: v for k, v in run.decided.items() if k != line}
        runs = run.keep_of(line) + run.extra_of(line)
        longer = LoopSampling(runs, decided={**decided, line: True}, min_body=0, min_trip=10**9, long_body=None)
        expected = simulate_source(source, None, inputs, target="trn2", timing_only=True, sampling=longer)
        shorter = {k for k, v in run.decided.items() if v and k != line}
        if shorter:  # the other cut loops keep 2 iterations: not one keep for a run of its own; counts only
            assert run.view({line}).cut[line] == run.view().cut[line]
            continue
        view = run.view({line})
        assert _no_ids(view.accounting().trace) == _no_ids(expected.trace)
        assert (view.ran, view.skipped, view.cut) == (longer.view().ran, longer.view().skipped, longer.view().cut)


def test_a_loop_first_met_in_extra_iterations_runs_whole():
    source = NEW + textwrap.dedent("""
    @nki.jit
    def k(w):
        out = nl.ndarray((128, 512), dtype=w.dtype, buffer=nl.shared_hbm)
        o = nl.ndarray((128, 512), dtype=w.dtype, buffer=nl.sbuf)
        for i in nl.affine_range(16):
            for j in nl.affine_range(40):
                nisa.dma_copy(dst=o, src=w[0:128, nl.ds(j * 512, 512)])
            if i == 3:
                for j in nl.affine_range(40):
                    nisa.dma_copy(dst=o, src=w[0:128, nl.ds(j * 512, 512)])
        nisa.dma_copy(dst=out, src=o)
        return out
    """)
    run = LoopSampling(2, 2)
    simulate_source(source, None, {"w": ShapeDtype((128, 20480), "bfloat16")}, target="trn2", timing_only=True,
                    sampling=run)
    late = max(run.decided)  # the loop under `if i == 3`: only the longer view reaches it
    assert run.decided[late] is False and late not in run.view().ran
    assert run.view(set(run.view().cut)).ran[late] == 40


def test_busy_time_is_shared_out_as_asked():
    trace = simulate_source(MATMUL, None, MATMUL_IN, target="trn2", timing_only=True).trace
    est = estimate(trace, HW, busy_of=lambda ins: ins.opcode)
    for engine, busy in est.engine_busy_ns.items():
        assert sum(ns for (_, e), ns in est.busy_by.items() if e == engine) == pytest.approx(busy)
    assert {op for op, _ in est.busy_by} == {i.opcode for i in trace}


# a cut 8-iteration pass beside an uncut 4-iteration one: cutting saves 300 of 600 instructions,
# less than one longer run would cost
NOT_WORTH = (NEW + "@nki.jit\ndef mm(xT, w):\n" + hbm_out("out") + hbm_out("out2")
             + matmul_pass("out").replace("i_n in nl.affine_range(16)", "i_n in nl.affine_range(8)")
             + matmul_pass("out2").replace("i_n in nl.affine_range(16)", "i_n in nl.affine_range(4)")
             + "    return out, out2\n")


@pytest.mark.parametrize("source, inputs", [(MATMUL, MATMUL_IN), (TWO_PASSES, MATMUL_IN), (HIDDEN, HIDDEN_IN),
                                            (REREAD, REREAD_IN), (NOT_WORTH, MATMUL_IN),
                                            (row_blocks(4), row_blocks_in(4)), (row_blocks(8), row_blocks_in(8))])
def test_the_source_counts_what_the_cut_and_the_whole_kernel_issue(source, inputs):
    cut = LoopSampling(2)
    cut_run = simulate_source(source, None, inputs, target="trn2", timing_only=True, sampling=cut)
    _, issued = full_latency(source, inputs)
    run = LoopSampling(2, sampled_timing.STEP)
    simulate_source(source, None, inputs, target="trn2", timing_only=True, sampling=run)
    assert sampled_timing.static_counts(source) == (len(cut_run.trace), len(run.trace), issued)


def test_a_kernel_where_sampling_cannot_pay_runs_whole_without_a_cut_run_first():
    full, issued = full_latency(NOT_WORTH, MATMUL_IN)
    assert sampled_timing.static_counts(NOT_WORTH) == (300, 400, 600)
    got = sampled_latency(load_source(NOT_WORTH, "<n>", None), MATMUL_IN, HW)
    assert got.exact and got.latency_ns == full and got.work == issued  # no cut run spent before it


def test_a_kernel_the_source_cannot_count_is_left_to_the_runs():
    assert sampled_timing.static_counts(MATMUL.replace("nl.affine_range(16)", "range(16)")) is None
    assert sampled_timing.static_counts(MATMUL.replace("    return out\n", "    if True:\n        return out\n")) is None
    assert sampled_timing.static_counts(MATMUL.replace("nisa.tensor_copy(", "nl.copy(")) is None
    helper = "def helper():\n    for i in nl.affine_range(4):\n        pass\n\n\n"
    assert sampled_timing.static_counts(MATMUL.replace("@nki.jit", helper + "@nki.jit"), "mm") == \
        sampled_timing.static_counts(MATMUL)  # the kernel's function, not the module's first


def test_the_source_counts_agree_with_the_runs_on_every_stored_quick_kernel_they_count():
    import ast
    from pathlib import Path

    folder = Path(__file__).resolve().parents[3] / "benchmarks" / "results" / "optimize_quick"
    counted = 0
    for launch in sorted(folder.glob("*_launch.py")):
        kernel = launch.with_name(launch.name.replace("_launch.py", ".py"))
        text = launch.read_text()
        shapes = next(ast.literal_eval(n.value) for n in ast.parse(text).body
                      if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "SHAPES")
        inputs = {k: ShapeDtype(tuple(v), "bfloat16" if "bfloat16" in text else "float32") for k, v in shapes.items()}
        source = kernel.read_text()
        static = sampled_timing.static_counts(source)
        if static is None:
            continue
        cut = LoopSampling(2, sampled_timing.STEP)
        run = simulate_source(source, None, inputs, target="trn2", timing_only=True, sampling=cut)
        uncut = sampled_timing._uncut_instructions(run.trace, sampled_timing._cut_loops(cut.view()))
        assert static == (len(run.trace), len(cut.trace), round(uncut)), kernel.name
        counted += 1
    assert counted >= 20  # Axon's kernels are what the source counts


def test_the_source_counts_a_cut_loop_inside_another_as_the_sampled_run_issues_it():
    # the matmul pass inside an 8-iteration loop
    source = (NEW + "@nki.jit\ndef mm(xT, w):\n" + hbm_out("out") + "    for i_m in nl.affine_range(8):\n"
              + textwrap.indent(matmul_pass("out"), "    ") + "    return out\n")
    run = LoopSampling(2, sampled_timing.STEP)
    simulate_source(source, None, MATMUL_IN, target="trn2", timing_only=True, sampling=run)
    assert len(run.view().cut) == 2  # i_m and i_n, one inside the other
    # i_m's 4 turns hold i_n cut at 2 except in i_m's first 2 turns, where i_n runs 4: 2x4 + 2x2 bodies
    body = 3 * 16 + 2
    assert len(run.trace) == (2 * 4 + 2 * 2) * body
    assert sampled_timing.static_counts(source)[:2] == (2 * 2 * body, len(run.trace))
    with pytest.raises(ValueError, match="inside another"):
        run.view(set(run.view().cut))
