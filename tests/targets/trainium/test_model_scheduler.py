"""The performance model's list scheduler against a plain reference: the engine's candidate
window with parking (perfmodel._choose) gives exactly the schedule of the straightforward
selection it replaced (look at up to candidate_limit + 1 waiting instructions at every event and
re-check each from scratch), on random traces and on simulated kernels, trn1 (shared ports) and
trn2, with windows small enough that the limits bind."""
import dataclasses
import gc
import random
from heapq import heappop, heappush
from pathlib import Path

import pytest

from axon.targets.trainium import perfmodel
from axon.targets.trainium.hardware import TRN1, TRN2, SchedulerRules
from axon.targets.trainium.simulator import ShapeDtype, load_kernel, simulate
from axon.targets.trainium.trace import Engine, Instruction, Memory, Region, cyclic_gc_paused

ROOT = Path(__file__).resolve().parents[3]
HERE = Path(__file__).resolve().parent


# ----- the reference selection (the scheduler before parking) -----------------------------------

def _reference_may_overtake(later, earlier, lookahead):
    for a, b in zip(later, earlier):
        if a is b or a == b:
            continue
        return a[0] == b[0] and not a[2] and 0 < a[1] - b[1] <= lookahead
    return False


def _reference_eligible(eng, i, scan, lookahead):
    """Every unstarted earlier instruction of the engine may be overtaken by i, looking at no more
    than `scan` of them per call (continuing where the last call stopped)."""
    target = eng.pos[i]
    p, looked = eng.first_unstarted(eng.checked[target]), 0
    while p < target:
        if not _reference_may_overtake(eng.paths[target], eng.paths[p], lookahead):
            eng.checked[target] = p
            return False
        looked += 1
        if looked > scan:
            eng.checked[target] = p
            return False
        p = eng.first_unstarted(p + 1)
    eng.checked[target] = p
    return True


def _reference_choose(eng, now, needs, port_free, scan, lookahead):
    """Pop up to scan + 1 waiting instructions in program order, take the first whose ports are
    free and that may overtake, push the others back (nothing is ever parked)."""
    held, chosen = [], None
    while eng.ready and len(held) <= scan:
        i = heappop(eng.ready)
        if all(port_free[q] <= now for q in needs[i]) and _reference_eligible(eng, i, scan, lookahead):
            chosen = i
            break
        held.append(i)
    for i in held:
        heappush(eng.ready, i)
    return chosen


def _both(trace, hw, monkeypatch):
    """(optimised estimate, reference estimate, how often the optimised one parked)."""
    parked = []
    real_park = perfmodel._Engine.park
    with monkeypatch.context() as m:
        m.setattr(perfmodel._Engine, "park", lambda self, i, b: (parked.append(i), real_park(self, i, b)))
        fast = perfmodel.estimate(trace, hw, keep_schedule=True)
    with monkeypatch.context() as m:
        m.setattr(perfmodel, "_choose", _reference_choose)
        ref = perfmodel.estimate(trace, hw, keep_schedule=True)
    return fast, ref, len(parked)


def _assert_same(fast, ref):
    assert fast.latency_ns == ref.latency_ns
    assert fast.engine_busy_ns == ref.engine_busy_ns
    assert fast.schedule.rows == ref.schedule.rows


def _with_scheduler(hw, lookahead, limit):
    return dataclasses.replace(hw, scheduler=SchedulerRules(affine_lookahead=lookahead, candidate_limit=limit))


# ----- random traces ----------------------------------------------------------------------------

def _random_trace(seed: int) -> list[Instruction]:
    """Nested loops (affine or sequential, mostly with fresh loop ids per instance as the simulator
    makes them) issuing loads, matmuls and Vector/Scalar/GpSimd work over per-iteration tiles and a few
    shared ones: many ready instructions that the loop rules hold back."""
    rng = random.Random(seed)
    trace: list[Instruction] = []
    ids = iter(range(1, 10**6))
    shared = [next(ids) for _ in range(3)]
    hbm = next(ids)
    loop_ids = iter(range(1, 10**6))

    def sbuf(buf, nbytes=512, off=0):
        return Region(buf, Memory.SBUF, 0, 128, off, off + nbytes)

    def emit(path, opcode, engine, reads, writes, **extra):
        if rng.random() < 0.2:  # equal loop paths need not be the same objects
            path = tuple(tuple(e) for e in path)
        n = 128 * (writes[0].b_stop - writes[0].b_start)
        dma = {"dma_bytes": n, "hbm_bytes": n} if engine is Engine.DMA else {}
        trace.append(Instruction(opcode, engine, 128, rng.choice((64, 256, 512)), "bfloat16", tuple(reads),
                                 tuple(writes), len(trace), extra={"loops": path, **extra}, **dma))

    def body(path):
        a, b, ps = next(ids), next(ids), next(ids)
        emit(path, "dma_copy", Engine.DMA, [Region(hbm, Memory.HBM, 0, 1, 0, 4096)], [sbuf(a)])
        if rng.random() < 0.5:
            emit(path, "dma_copy", Engine.DMA, [Region(hbm, Memory.HBM, 0, 1, 4096, 8192)], [sbuf(b)])
        else:
            emit(path, "memset", Engine.GPSIMD, [], [sbuf(b)])
        for _ in range(rng.randint(1, 3)):
            emit(path, "nc_matmul", Engine.TENSOR, [sbuf(a), sbuf(b)], [Region(ps, Memory.PSUM, 0, 128, 0, 2048)],
                 stationary_free=128, moving_free=512)
        for _ in range(rng.randint(1, 4)):
            engine = rng.choice((Engine.VECTOR, Engine.SCALAR, Engine.GPSIMD))
            src = rng.choice((Region(ps, Memory.PSUM, 0, 128, 0, 2048), sbuf(a), sbuf(rng.choice(shared))))
            dst = sbuf(rng.choice((a, b, rng.choice(shared))), off=rng.choice((0, 512)))
            emit(path, rng.choice(("tensor_copy", "activation", "tensor_tensor")), engine, [src], [dst])

    def nest(path, depth):
        # A hand-built trace may reuse a loop id in every iteration of the outer loop.
        loop = next(loop_ids) if rng.random() < 0.7 else -depth
        sequential = rng.random() < 0.25
        for it in range(rng.randint(2, 4)):
            inner = path + ((loop, it, sequential),)
            if depth and rng.random() < 0.7:
                nest(inner, depth - 1)
            else:
                body(inner)
            if rng.random() < 0.3:
                body(inner)

    nest((), 3)
    body(())
    return trace


@pytest.mark.parametrize("seed", range(12))
def test_random_traces_schedule_like_the_reference(seed, monkeypatch):
    trace = _random_trace(seed)
    parked = 0
    for hw in (TRN1, TRN2):
        for lookahead, limit in ((2, 64), (1, 3), (2, 1), (0, 2)):
            fast, ref, n = _both(trace, _with_scheduler(hw, lookahead, limit), monkeypatch)
            _assert_same(fast, ref)
            parked += n
    assert parked  # the comparison covers instructions parked and released


# ----- simulated kernels ------------------------------------------------------------------------

KERNELS = [  # (kernel file, its bf16 inputs' shapes, other arguments)
    (HERE / "sim_kernel_matmul_blocked.py", {"lhsT": (512, 512), "rhs": (512, 2048)}, {"BM": 2, "BN": 2, "BK": 2}),
    (ROOT / "examples/nki/matmul_tutorial/block_free.py", {"lhsT": (512, 512), "rhs": (512, 2048)}, {}),
    (ROOT / "examples/nki/matmul_tutorial/fully_optimized.py", {"lhsT": (1024, 2048), "rhs": (1024, 1024)}, {}),
    (ROOT / "axon/targets/trainium/baselines/softmax.py", {"x": (1024, 2048)}, {}),
    (ROOT / "axon/targets/trainium/baselines/layernorm.py", {"x": (512, 1024), "g": (1024,), "b": (1024,)}, {}),
]


@pytest.mark.parametrize("path, shapes, other", KERNELS, ids=[k[0].stem for k in KERNELS])
def test_simulated_kernels_schedule_like_the_reference(path, shapes, other, monkeypatch):
    kernel = load_kernel(str(path))
    args = {k: ShapeDtype(s, "bfloat16") for k, s in shapes.items()} | other
    for hw in (TRN1, TRN2):
        trace = simulate(kernel, args, target=hw, timing_only=True).trace
        for lookahead, limit in ((2, 64), (2, 4)):
            fast, ref, _ = _both(trace, _with_scheduler(hw, lookahead, limit), monkeypatch)
            _assert_same(fast, ref)


# ----- helpers the speed relies on ---------------------------------------------------------------

def test_overtake_level_agrees_with_may_overtake():
    rng = random.Random(0)
    elems = [(loop, it, seq) for loop in (1, 2) for it in range(4) for seq in (False, True)]
    for _ in range(2000):
        later = tuple(rng.choice(elems) for _ in range(rng.randint(0, 3)))
        earlier = tuple(rng.choice(elems) for _ in range(rng.randint(0, 3)))
        for lookahead in (0, 1, 2):
            level = perfmodel._overtake_level(later, earlier, lookahead)
            assert (level >= 0) == _reference_may_overtake(later, earlier, lookahead)
            if level >= 0:
                assert later[:level] == earlier[:level] and later[level] != earlier[level]


def test_cyclic_gc_paused_restores_the_setting():
    assert gc.isenabled()
    with cyclic_gc_paused():
        assert not gc.isenabled()
    assert gc.isenabled()
    gc.disable()
    try:
        with cyclic_gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()
    with pytest.raises(ValueError):
        with cyclic_gc_paused():
            raise ValueError
    assert gc.isenabled()


def test_region_is_still_a_frozen_dataclass():
    r = Region(3, Memory.HBM, 0, 1, 16, 4096, 256, 8, 128)
    assert r == Region(buffer=3, memory=Memory.HBM, p_start=0, p_stop=1, b_start=16, b_stop=4096,
                       row_stride=256, rows=8, row_bytes=128)
    assert hash(r) == hash(dataclasses.replace(r))
    assert dataclasses.astuple(r) == (3, Memory.HBM, 0, 1, 16, 4096, 256, 8, 128)
    assert Region(1, Memory.SBUF, 0, 128, 0, 64).rows == 0
    assert repr(r).startswith("Region(buffer=3, memory=<Memory.HBM")
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.rows = 2


def _matmuls_on(tiles: tuple, steps: int = 32) -> float:
    """Latency of two accumulation chains of bf16 [128 x 64] x [128 x 512] matmuls, interleaved,
    the first on PE tile tiles[0] and the second on tiles[1] (None: the whole array)."""
    import ml_dtypes
    import numpy as np

    a, b = np.ones((128, 128), ml_dtypes.bfloat16), np.ones((128, 512), ml_dtypes.bfloat16)
    kernel = load_kernel(str(HERE / "sim_kernel_pe_tiles.py"), "two_chains")
    trace = simulate(kernel, {"a": a, "b": b, "steps": steps, "left": tiles[0], "right": tiles[1]},
                     target="trn2").trace
    return perfmodel.estimate(trace, TRN2, serve_repeats=False).latency_ns


def test_matmuls_on_different_pe_tiles_run_side_by_side_and_on_one_tile_in_turn():
    left, right = ((0, 0), (128, 64)), ((0, 64), (128, 64))
    whole, halves, same = _matmuls_on((None, None)), _matmuls_on((left, right)), _matmuls_on((left, left))
    matmul_ns = 512 / TRN2.clock_ghz(Engine.TENSOR)  # N = 512 columns streamed per matmul
    # 64 matmuls: side by side they take the time of 32 in a row, in turn (or whole) that of 64
    assert whole - halves == pytest.approx(32 * matmul_ns, rel=0.15)
    assert same == pytest.approx(whole, rel=0.01)
    # a whole-array matmul waits for the tiled ones before it and they for it
    assert _matmuls_on((left, None)) == pytest.approx(whole, rel=0.01)
