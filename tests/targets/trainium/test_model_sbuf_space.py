"""SBUF space and DMA queues in the performance model: a tile's space is free only once the tile
that held it before is dead (simulator/liveness.space_reuse), so loads run ahead of their use only
as far as SBUF holds, and a spill reload waits for the store that frees its space; a transfer
holds one of the DMA queues, and a free queue takes the ready transfer that comes first in
program order."""
import textwrap

import numpy as np

from axon.targets.trainium.hardware import get_target
from axon.targets.trainium.perfmodel import estimate
from axon.targets.trainium.simulator import ShapeDtype, simulate_source
from axon.targets.trainium.trace import Memory

NEW = "import nki\nimport nki.isa as nisa\nimport nki.language as nl\n"
HW = get_target("trn2")

PASS_A = """
    for i in nl.affine_range(16):  # pass A: 16 row tiles of 8 KB per partition, compute-bound
        t = nl.load(x[nl.ds(i * 128, 128), 0:2048])
        e = nl.exp(nl.tanh(nl.exp(nl.tanh(t))))
        nl.store(out[nl.ds(i * 128, 128), 0:2048], value=e)
"""
PASS_B = """
    for i in nl.affine_range(32):  # pass B: independent of A, its loads ready from the start
        t = nl.load(y[nl.ds(i * 128, 128), 0:2048])
        e = nl.tanh(nl.exp(nl.tanh(nl.exp(t))))
        nl.store(out2[nl.ds(i * 128, 128), 0:2048], value=e)
"""
HEAD = """
@nki.jit
def k(x, y):
    out = nl.ndarray((2048, 2048), dtype=x.dtype, buffer=nl.shared_hbm)
    out2 = nl.ndarray((4096, 2048), dtype=x.dtype, buffer=nl.shared_hbm)
"""
A_ONLY = NEW + textwrap.dedent(HEAD) + PASS_A + "    return out, out2\n"
A_THEN_B = NEW + textwrap.dedent(HEAD) + PASS_A + PASS_B + "    return out, out2\n"
INPUTS = {"x": ShapeDtype((2048, 2048), "float32"), "y": ShapeDtype((4096, 2048), "float32")}


def _schedule(src):
    trace = simulate_source(src, "k", INPUTS, target=HW, timing_only=True).trace
    return trace, estimate(trace, HW, keep_schedule=True)


def _sbuf_held(trace, rows, unit_bytes):
    """Peak SBUF bytes per partition held at once in the schedule: each buffer from the start of
    its first access to the end of its last."""
    span: dict[int, list[float]] = {}
    for _, start, end, _, _, i in rows:
        for r in trace[i].reads + trace[i].writes:
            if r.memory is Memory.SBUF:
                s = span.setdefault(r.buffer, [start, end])
                s[0], s[1] = min(s[0], start), max(s[1], end)
    events = sorted([(s, unit_bytes) for s, _ in span.values()] + [(e, -unit_bytes) for _, e in span.values()],
                    key=lambda ev: (ev[0], ev[1]))
    held = peak = 0
    for _, step in events:
        held += step
        peak = max(peak, held)
    return peak


def test_loads_run_ahead_only_as_far_as_sbuf_holds():
    """48 row tiles of 8 KB per partition (and their temporaries), each loaded and computed on in
    one iteration: the loads are faster than the compute, so they would run ahead of it by more
    than SBUF holds. The schedule never holds more than SBUF."""
    trace, est = _schedule(A_THEN_B)
    assert any(ins.extra.get("space_after") for ins in trace)
    capacity = HW.memory.sbuf_bytes_per_partition
    assert _sbuf_held(trace, est.schedule.rows, 8192) <= capacity
    # without the space each load waits for, every load starts at once: more than SBUF
    free = [ins if "space_after" not in ins.extra else
            type(ins)(**{**ins.__dict__, "extra": {k: v for k, v in ins.extra.items() if k != "space_after"}})
            for ins in trace]
    unbounded = estimate(free, HW, keep_schedule=True)
    assert _sbuf_held(free, unbounded.schedule.rows, 8192) > capacity


def test_a_later_pass_loads_do_not_delay_an_earlier_pass():
    """Pass B's loads are ready from the start, but pass A's stores come first in program order:
    pass A ends when it ends alone (its stores are not queued behind B's prefetched loads)."""
    alone = _schedule(A_ONLY)[1].latency_ns
    trace, est = _schedule(A_THEN_B)
    a_store_line = next(ins.line for ins in trace if ins.opcode == "dma_copy" and ins.writes[0].memory is Memory.HBM)
    a_end = max(end for _, _, end, _, line, _ in est.schedule.rows if line == a_store_line)
    assert a_end <= 1.03 * alone
    assert est.latency_ns > 2 * alone  # pass B's own work comes after


def test_dma_queues_hold_at_most_queues_transfers():
    trace, est = _schedule(A_THEN_B)
    dma_rows = [(s, e) for track, s, e, _, _, _ in est.schedule.rows if est.schedule.tracks[track].startswith("dma")]
    events = sorted([(s, 1) for s, _ in dma_rows] + [(e, -1) for _, e in dma_rows], key=lambda ev: (ev[0], ev[1]))
    in_flight = peak = 0
    for _, step in events:
        in_flight += step
        peak = max(peak, in_flight)
    assert 1 < peak <= HW.dma.queues


# four 64 KB tiles all live at once (256 KB per partition): a user kernel that spills
WIDE = NEW + textwrap.dedent("""
@nki.jit
def k(x):
    out = nl.ndarray((128, 16384), dtype=x.dtype, buffer=nl.shared_hbm)
    a = nl.load(x[0])
    b = nl.load(x[1])
    c = nl.load(x[2])
    d = nl.load(x[3])
    s = nl.add(a, b)
    s = nl.add(s, c)
    s = nl.add(s, d)
    nl.store(out, value=s)
    return out
""")


def test_a_spill_reload_waits_for_the_store_that_frees_its_space():
    x = np.random.default_rng(0).standard_normal((4, 128, 16384)).astype(np.float32)
    r = simulate_source(WIDE, "k", {"x": x}, target=HW)
    assert r.reloads >= 1
    np.testing.assert_allclose(r.outputs, x.sum(axis=0), rtol=1e-5, atol=1e-5)
    est = estimate(r.trace, HW, keep_schedule=True)
    at = {i: (s, e) for _, s, e, _, _, i in est.schedule.rows}
    index = {id(ins): i for i, ins in enumerate(r.trace)}
    reloads = [i for i, ins in enumerate(r.trace) if ins.extra.get("spill") and ins.reads[0].memory is Memory.HBM]
    for i in reloads:
        after = r.trace[i].extra.get("space_after")
        waits = [index[id(w)] for w in after.instructions] if after else []
        assert waits, "a reload takes the space of a tile that was stored or died before it"
        assert at[i][0] >= max(at[w][1] for w in waits) - 1e-6
