"""The performance model on hand-built traces: costs, dependencies, overlap, DMA, roofline, trace file."""
import json

import pytest

from axon.targets.trainium.hardware import TRN1, TRN2
from axon.targets.trainium.perfmodel import compute_cycles, estimate, write_perfetto
from axon.targets.trainium.trace import Engine, Instruction, Memory, Region


class Trace:
    """A tiny trace builder: fresh buffer ids, SBUF/PSUM/HBM regions, the common instructions."""

    def __init__(self):
        self.ins: list[Instruction] = []
        self._next = 0

    def buf(self) -> int:
        self._next += 1
        return self._next

    @staticmethod
    def sb(buf, nbytes, p=128, off=0):
        return Region(buf, Memory.SBUF, 0, p, off, off + nbytes)

    @staticmethod
    def ps(buf, nbytes=2048, p=128):
        return Region(buf, Memory.PSUM, 0, p, 0, nbytes)

    @staticmethod
    def hbm(buf, start, stop):
        return Region(buf, Memory.HBM, 0, 1, start, stop)

    def load(self, dst, src, p=128):
        n = (dst.b_stop - dst.b_start) * p
        self.ins.append(Instruction("dma_copy", Engine.DMA, p, (dst.b_stop - dst.b_start) // 2, "bfloat16",
                                    (src,), (dst,), 1, dma_bytes=n, hbm_bytes=n))

    def store(self, dst, src, p=128):
        n = (src.b_stop - src.b_start) * p
        self.ins.append(Instruction("dma_copy", Engine.DMA, p, (src.b_stop - src.b_start) // 2, "bfloat16",
                                    (src,), (dst,), 2, dma_bytes=n, hbm_bytes=n))

    def matmul(self, stat, mov, out, accumulate, dtype="bfloat16", moving_free=512):
        reads = (stat, mov) + ((out,) if accumulate else ())
        self.ins.append(Instruction("nc_matmul", Engine.TENSOR, 128, moving_free, dtype, reads, (out,), 3,
                                    extra={"stationary_free": 128, "moving_free": moving_free}))

    def op(self, opcode, engine, reads, writes, n=512, dtype="float32", **extra):
        self.ins.append(Instruction(opcode, engine, 128, n, dtype, tuple(reads), tuple(writes), 4, extra=extra))


def _matmul(**kw):
    t = Trace()
    a, b, c = t.buf(), t.buf(), t.buf()
    t.matmul(t.sb(a, 256), t.sb(b, 1024), t.ps(c), False, **kw)
    return t.ins[0]


# ----- instruction costs -------------------------------------------------------------------------

def test_matmul_cost_is_moving_size_plus_init():
    assert compute_cycles(_matmul(), TRN1) == 512 + 64
    assert compute_cycles(_matmul(dtype="float32"), TRN1) == 4 * 512 + 64
    # a short moving tile still streams at least min(64, stationary) columns, plus static overhead
    assert compute_cycles(_matmul(moving_free=16), TRN1) == 64 + 64 + 100


def test_vector_costs_follow_the_formulas():
    t = Trace()
    s, p = t.buf(), t.buf()
    t.op("tensor_tensor", Engine.VECTOR, [t.sb(s, 4096), t.sb(s, 4096, off=4096)], [t.sb(s, 4096, off=8192)], n=1024)
    t.op("tensor_tensor", Engine.VECTOR, [t.sb(s, 4096), t.ps(p)], [t.sb(s, 4096, off=8192)], n=1024)
    t.op("activation", Engine.SCALAR, [t.sb(s, 64)], [t.sb(s, 64, off=64)], n=16)
    t.op("reciprocal", Engine.VECTOR, [t.sb(s, 4096)], [t.sb(s, 4096, off=4096)], n=1024)
    t.op("mystery_op", Engine.GPSIMD, [t.sb(s, 4096)], [t.sb(s, 4096, off=4096)], n=1024)
    tt_sbuf, tt_psum, act_small, recip, unknown = (compute_cycles(i, TRN1) for i in t.ins)
    assert tt_sbuf == 2 * 1024 + 60
    assert tt_psum == 1024 + 60  # one input in PSUM: one cycle per element
    assert act_small == 64 + 60 + 100  # floor MIN_II, plus the small-N static overhead
    assert recip == 8 * 1024 + 60
    assert unknown == 1024 + 60


def test_engine_clocks_turn_cycles_into_ns():
    t = Trace()
    a, b = t.buf(), t.buf()
    t.op("tensor_copy", Engine.VECTOR, [t.sb(a, 4096)], [t.sb(b, 4096)], n=1024)
    v1 = estimate(t.ins, TRN1).latency_ns
    v2 = estimate(t.ins, TRN2).latency_ns
    assert v1 == pytest.approx((1024 + 60) / 1.12)
    assert v2 == pytest.approx((1024 + 60) / 0.96)


@pytest.mark.parametrize("hw", [TRN1, TRN2])
@pytest.mark.parametrize("opcode,engine,width", [
    ("tensor_copy", Engine.VECTOR, 16),  # under MIN_II, and the small-N static overhead
    ("tensor_copy", Engine.SCALAR, 2048),
    ("tensor_tensor", Engine.GPSIMD, 40),
    ("tensor_reduce", Engine.VECTOR, 512),  # no MIN_II floor
    ("activation_reduce", Engine.SCALAR, 512),  # MIN_II more for the reduction
])
def test_the_emitters_placement_costs_are_the_models(hw, opcode, engine, width):
    """The emitter places flexible instructions by the hardware description's cost of each
    (HardwareDescription.instruction_ns): the time the model then charges the instruction."""
    from axon.targets.trainium.emitter import NkiEmitter

    t = Trace()
    a, b = t.buf(), t.buf()
    t.op(opcode, engine, [t.sb(a, 4 * width)], [t.sb(b, 4 * width)], n=width)
    assert NkiEmitter("float32", hw)._ns(opcode, engine.value, width) == pytest.approx(estimate(t.ins, hw).latency_ns)


# ----- scheduling --------------------------------------------------------------------------------

def test_independent_engines_overlap_and_dependencies_serialise():
    t = Trace()
    a, b, c, d = (t.buf() for _ in range(4))
    t.op("tensor_copy", Engine.VECTOR, [t.sb(a, 4096)], [t.sb(b, 4096)], n=1024)
    t.op("activation", Engine.SCALAR, [t.sb(c, 4096)], [t.sb(d, 4096)], n=1024)
    both = estimate(t.ins, TRN1)
    assert both.latency_ns == pytest.approx(max(both.engine_busy_ns["vector"], both.engine_busy_ns["scalar"]))
    t2 = Trace()
    a, b, c = (t2.buf() for _ in range(3))
    t2.op("tensor_copy", Engine.VECTOR, [t2.sb(a, 4096)], [t2.sb(b, 4096)], n=1024)
    t2.op("activation", Engine.SCALAR, [t2.sb(b, 4096)], [t2.sb(c, 4096)], n=1024)  # reads b: RAW
    chain = estimate(t2.ins, TRN1)
    assert chain.latency_ns == pytest.approx(chain.engine_busy_ns["vector"] + chain.engine_busy_ns["scalar"])


def test_write_after_read_waits_and_disjoint_regions_do_not():
    t = Trace()
    a, b, c = t.buf(), t.buf(), t.buf()
    t.op("tensor_copy", Engine.VECTOR, [t.sb(a, 4096)], [t.sb(b, 4096)], n=1024)
    t.op("activation", Engine.SCALAR, [t.sb(c, 4096)], [t.sb(a, 4096)], n=1024)  # overwrites a: WAR
    war = estimate(t.ins, TRN1)
    t.ins[1] = Instruction("activation", Engine.SCALAR, 128, 1024, "float32", (t.sb(c, 4096),),
                           (t.sb(a, 4096, off=4096),), 4)  # a different part of a: independent
    free = estimate(t.ins, TRN1)
    assert war.latency_ns > free.latency_ns
    assert free.latency_ns == pytest.approx(max(free.engine_busy_ns["vector"], free.engine_busy_ns["scalar"]))


def test_psum_accumulation_chain_does_not_serialise_other_engines():
    """Matmul groups accumulate in PSUM; the Vector engine drains finished groups while TensorE
    works on the next one (fresh PSUM tile per group)."""
    t = Trace()
    lhs, rhs = t.buf(), t.buf()
    groups, k_tiles = 8, 4
    for g in range(groups):
        out, res = t.buf(), t.buf()
        for k in range(k_tiles):
            t.matmul(t.sb(lhs, 256, off=256 * k), t.sb(rhs, 1024, off=1024 * k), t.ps(out), k > 0)
        t.op("tensor_copy", Engine.VECTOR, [t.ps(out)], [t.sb(res, 2048)])
    est = estimate(t.ins, TRN1)
    pe = est.engine_busy_ns["tensor"]
    assert pe == pytest.approx(groups * k_tiles * (512 + 64) / 2.8)
    # only the last copy sticks out beyond TensorE
    assert est.latency_ns == pytest.approx(pe + est.engine_busy_ns["vector"] / groups)


def test_fresh_buffers_let_loop_iterations_overlap_and_reuse_serialises():
    def build(fresh):
        t = Trace()
        src, dst = t.buf(), t.buf()
        shared = t.buf()
        for i in range(16):
            tile = t.buf() if fresh else shared
            t.load(t.sb(tile, 2048), t.hbm(src, i * 262144, (i + 1) * 262144))
            t.op("activation", Engine.SCALAR, [t.sb(tile, 2048)], [t.sb(tile, 2048)], n=1024)
            t.store(t.hbm(dst, i * 262144, (i + 1) * 262144), t.sb(tile, 2048))
        return estimate(t.ins, TRN1)
    assert build(fresh=True).latency_ns < 0.5 * build(fresh=False).latency_ns


# ----- DMA -----------------------------------------------------------------------------------------

def test_dma_fixed_cost_and_bandwidth():
    t = Trace()
    src, tile = t.buf(), t.buf()
    t.load(t.sb(tile, 4096), t.hbm(src, 0, 128 * 4096))
    one = estimate(t.ins, TRN1)
    eff = TRN1.dma.efficiency(4096)
    assert one.latency_ns == pytest.approx(1300 + 128 * 4096 / (272 * eff))
    # many independent transfers share the aggregate bandwidth: time is bytes / bandwidth
    t = Trace()
    src = t.buf()
    for i in range(64):
        t.load(t.sb(t.buf(), 4096), t.hbm(src, i * 524288, (i + 1) * 524288))
    many = estimate(t.ins, TRN1)
    data = 64 * 128 * 4096 / (272 * eff)
    assert data <= many.latency_ns <= data + 1300 + 400
    assert many.hbm_bytes == 64 * 128 * 4096
    assert many.utilisation["dma"] > 0.95


def test_small_payloads_per_partition_are_slower_per_byte():
    def rate(per_partition, count):
        t = Trace()
        src = t.buf()
        for i in range(count):  # distinct regions: repeated ones would be hoisted loads
            t.load(t.sb(t.buf(), per_partition), t.hbm(src, i * 128 * per_partition, (i + 1) * 128 * per_partition))
        est = estimate(t.ins, TRN1)
        return est.dma_bytes / est.latency_ns
    assert rate(128, 512) < 0.5 * rate(4096, 16)
    assert rate(4096, 16) > 0.7 * 272


def test_a_late_store_does_not_block_earlier_ready_loads():
    t = Trace()
    src, dst, a, b = t.buf(), t.buf(), t.buf(), t.buf()
    t.op("reciprocal", Engine.VECTOR, [t.sb(a, 4096)], [t.sb(b, 4096)], n=8192)  # slow producer
    t.store(t.hbm(dst, 0, 128 * 4096), t.sb(b, 4096))
    for i in range(8):
        t.load(t.sb(t.buf(), 4096), t.hbm(src, 0, 128 * 4096))
    est = estimate(t.ins, TRN1, keep_schedule=True)
    loads_end = max(row[2] for row in est.schedule.rows[2:])
    assert loads_end < est.schedule.rows[0][2]  # all loads done before the producer is


def test_a_dma_transpose_on_chip_runs_at_half_a_copys_rate_on_trn2():
    """Trainium2's DMA transposes at ~90% of a copy's throughput from HBM, ~50% SBUF -> SBUF."""
    def data_ns(src_in_hbm: bool, transpose: bool):
        t = Trace()
        src = t.hbm(t.buf(), 0, 128 * 4096) if src_in_hbm else t.sb(t.buf(), 4096)
        n = 128 * 4096
        t.ins.append(Instruction("dma_transpose" if transpose else "dma_copy", Engine.DMA, 128, 2048, "bfloat16",
                                 (src,), (t.sb(t.buf(), 4096),), 1, dma_bytes=n, hbm_bytes=n if src_in_hbm else 0,
                                 extra={"transpose": transpose, "chunk_bytes": 4096}))
        return estimate(t.ins, TRN2).latency_ns - TRN2.dma.fixed_ns
    assert data_ns(True, True) == pytest.approx(data_ns(True, False) / 0.9)
    assert data_ns(False, True) == pytest.approx(data_ns(False, False) / 0.5)


def test_few_partitions_use_few_dma_engines():
    def latency(p):
        t = Trace()
        t.load(t.sb(t.buf(), 16384 // p, p=p), t.hbm(t.buf(), 0, 16384), p=p)
        return estimate(t.ins, TRN1).latency_ns
    # one partition: one engine at 17 B/ns; 16 partitions: all engines share the bytes
    assert latency(1) == pytest.approx(1300 + 16384 / (17 * TRN1.dma.efficiency(16384)))
    assert latency(16) - 1300 < 0.2 * (latency(1) - 1300)


def test_zeroing_a_psum_accumulator_is_folded_into_the_first_matmul():
    def build(zero_first):
        t = Trace()
        lhs, rhs = t.buf(), t.buf()
        for g in range(4):
            out, res = t.buf(), t.buf()
            if zero_first:
                t.op("memset", Engine.VECTOR, [], [t.ps(out)])
            for k in range(4):
                t.matmul(t.sb(lhs, 256), t.sb(rhs, 1024), t.ps(out), k > 0 or zero_first)
            t.op("tensor_copy", Engine.VECTOR, [t.ps(out)], [t.sb(res, 2048)])
        return estimate(t.ins, TRN1, keep_schedule=True)
    folded, plain = build(True), build(False)
    assert folded.latency_ns == pytest.approx(plain.latency_ns)
    assert len(folded.schedule.rows) == len(plain.schedule.rows)
    # a memset that something else reads first is real work
    t = Trace()
    out, res = t.buf(), t.buf()
    t.op("memset", Engine.VECTOR, [], [t.ps(out)])
    t.op("tensor_copy", Engine.VECTOR, [t.ps(out)], [t.sb(res, 2048)])
    assert estimate(t.ins, TRN1).engine_busy_ns["vector"] == pytest.approx((2 * (512 + 60) + 100) / 1.12)


# ----- the kernel's own bound, outputs --------------------------------------------------------

def test_kernel_bound_counts_matmul_flops_and_compulsory_bytes():
    t = Trace()
    src, dst = t.buf(), t.buf()
    lhs, rhs, out, res = t.buf(), t.buf(), t.buf(), t.buf()
    # the same HBM bytes loaded twice count once in the compulsory traffic
    t.load(t.sb(lhs, 256), t.hbm(src, 0, 32768))
    t.load(t.sb(lhs, 256, off=256), t.hbm(src, 0, 32768))
    t.load(t.sb(rhs, 1024), t.hbm(src, 32768, 32768 + 131072))
    t.matmul(t.sb(lhs, 256), t.sb(rhs, 1024), t.ps(out), False)
    t.op("tensor_copy", Engine.VECTOR, [t.ps(out)], [t.sb(res, 1024)], dtype="bfloat16")
    t.store(t.hbm(dst, 0, 131072), t.sb(res, 1024))
    est = estimate(t.ins, TRN1)
    assert est.flops == est.scheduled_flops == 2 * 128 * 128 * 512
    assert est.kernel_bound_compute_ns == pytest.approx(est.flops / TRN1.tensor_peak_flops[next(iter(TRN1.tensor_peak_flops))] * 1e9)
    assert est.compulsory_hbm_bytes == 32768 + 131072 + 131072
    # the repeated load of the same (never written) region is hoisted: served from SBUF
    assert est.hoisted == 1
    assert est.hbm_bytes == 32768 + 131072 * 2
    assert est.kernel_bound_memory_ns == pytest.approx(est.compulsory_hbm_bytes / 410.0)
    assert est.kernel_bound_ns == max(est.kernel_bound_compute_ns, est.kernel_bound_memory_ns)
    assert 0 < est.kernel_bound_fraction < 1


def test_empty_trace():
    est = estimate([], TRN2)
    assert est.latency_ns == 0 and est.kernel_bound_ns == 0 and est.kernel_bound_fraction == 0
    assert est.instructions == est.scheduled == 0


def test_perfetto_trace_is_valid_json_with_one_track_per_engine(tmp_path):
    t = Trace()
    src, a, b, out = t.buf(), t.buf(), t.buf(), t.buf()
    t.load(t.sb(a, 1024), t.hbm(src, 0, 131072))
    t.matmul(t.sb(a, 256), t.sb(a, 1024), t.ps(out), False)
    t.op("tensor_copy", Engine.VECTOR, [t.ps(out)], [t.sb(b, 1024)])
    est = estimate(t.ins, TRN1, keep_schedule=True)
    path = tmp_path / "trace.json"
    write_perfetto(est, path)
    doc = json.loads(path.read_text())
    spans = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    names = {e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "thread_name"}
    assert [s["name"] for s in spans] == ["dma_copy", "nc_matmul", "tensor_copy"]
    assert {"tensor", "vector", "dma.q0"} <= names
    assert all(s["dur"] > 0 for s in spans)
    assert spans[1]["ts"] >= spans[0]["ts"] + spans[0]["dur"]  # matmul waits for its load
    with pytest.raises(ValueError):
        write_perfetto(estimate(t.ins, TRN1), path)


def test_same_trace_same_numbers():
    t = Trace()
    src = t.buf()
    for i in range(50):
        tile, out = t.buf(), t.buf()
        t.load(t.sb(tile, 1024), t.hbm(src, i * 1024, i * 1024 + 131072))
        t.matmul(t.sb(tile, 256), t.sb(tile, 1024), t.ps(out), False)
    assert estimate(t.ins, TRN1) == estimate(list(t.ins), TRN1)


def test_model_is_cheap_per_instruction():
    t = Trace()
    src, dst = t.buf(), t.buf()
    big_lhs = t.buf()
    for k in range(64):
        t.load(t.sb(big_lhs, 256, off=256 * k), t.hbm(src, k * 32768, (k + 1) * 32768))
    for n in range(40):
        rhs, out, res = t.buf(), t.buf(), t.buf()
        for k in range(64):
            t.load(t.sb(rhs, 1024, off=1024 * k), t.hbm(src, k * 131072, (k + 1) * 131072))
        for k in range(64):
            t.matmul(t.sb(big_lhs, 256, off=256 * k), t.sb(rhs, 1024, off=1024 * k), t.ps(out), k > 0)
        t.op("tensor_copy", Engine.VECTOR, [t.ps(out)], [t.sb(res, 1024)])
        t.store(t.hbm(dst, n * 131072, (n + 1) * 131072), t.sb(res, 1024))
    assert len(t.ins) > 5000
    assert estimate(t.ins, TRN1).latency_ns > 0


# ----- the compiler's reordering, engine specifics, strides, HBM rows -----------------------------

def _loop_trace(sequential: bool):
    """Two iterations of a loop on VectorE: a copy that waits for a slow ScalarE producer, then the
    next iteration's independent copy; with affine_range the second may run first."""
    t = Trace()
    a, b, c, d, e = (t.buf() for _ in range(5))
    t.op("reciprocal", Engine.SCALAR, [t.sb(a, 4096)], [t.sb(b, 4096)], n=4096, loops=((1, 0, sequential),))
    t.op("tensor_copy", Engine.VECTOR, [t.sb(b, 4096)], [t.sb(c, 4096)], n=1024, loops=((1, 0, sequential),))
    t.op("tensor_copy", Engine.VECTOR, [t.sb(d, 4096)], [t.sb(e, 4096)], n=1024, loops=((1, 1, sequential),))
    return estimate(t.ins, TRN1, keep_schedule=True)


def test_affine_iterations_interleave_on_an_engine_and_sequential_ones_keep_order():
    affine, sequential = _loop_trace(False), _loop_trace(True)
    a_rows, s_rows = affine.schedule.rows, sequential.schedule.rows
    assert a_rows[2][1] == 0.0  # iteration 1's copy runs while iteration 0's waits
    assert s_rows[2][1] >= s_rows[1][2]  # sequential_range: after iteration 0's copy
    assert affine.latency_ns < sequential.latency_ns


def test_overtaking_is_limited_to_the_lookahead_window():
    t = Trace()
    a, b = t.buf(), t.buf()
    t.op("reciprocal", Engine.SCALAR, [t.sb(a, 4096)], [t.sb(b, 4096)], n=8192, loops=((1, 0, False),))
    t.op("tensor_copy", Engine.VECTOR, [t.sb(b, 4096)], [t.sb(t.buf(), 4096)], n=64, loops=((1, 0, False),))
    for it in range(1, 6):  # independent work of later iterations
        t.op("tensor_copy", Engine.VECTOR, [t.sb(t.buf(), 256)], [t.sb(t.buf(), 256)], n=64, loops=((1, it, False),))
    rows = estimate(t.ins, TRN1, keep_schedule=True).schedule.rows
    waiting_end = rows[1][2]
    lookahead = TRN1.scheduler.affine_lookahead
    assert all(r[2] <= rows[0][2] for r in rows[2:2 + lookahead])  # within the window: ahead of it
    assert all(r[1] >= waiting_end for r in rows[2 + lookahead:])  # beyond: after it


def test_plain_softmax_loop_models_like_the_hand_grouped_kernel():
    from pathlib import Path

    from axon.targets.trainium.baselines import run_hand_kernel
    from axon.targets.trainium.runner import InputSpec, run

    plain = Path(__file__).with_name("sim_kernel_softmax_plain.py")
    for target in ("trn2", "trn1"):
        p = run(f"{plain}:softmax_plain", {"x": InputSpec((1024, 2048), "bfloat16")}, target=target,
                timing_only=True).estimate.latency_ns
        g = run_hand_kernel("softmax", {"m": 1024, "n": 2048}, target=target, timing_only=True).estimate.latency_ns
        assert p == pytest.approx(g, rel=0.05)


def test_bf16_fast_path_is_vector_engine_only_and_needs_contiguous_bf16():
    def tt(engine=Engine.VECTOR, out="bfloat16", contiguous=True, dtypes=("bfloat16", "bfloat16")):
        t = Trace()
        s = t.buf()
        t.op("tensor_tensor", engine, [t.sb(s, 2048), t.sb(s, 2048, off=2048)], [t.sb(s, 2048, off=4096)],
             n=1024, dtype="bfloat16", op="add", dtypes=dtypes, out_dtype=out, contiguous=contiguous)
        return compute_cycles(t.ins[0], TRN1)
    assert tt() == 1024 + 60
    assert tt(engine=Engine.GPSIMD) == 2 * 1024 + 60
    assert tt(out="float32") == 2 * 1024 + 60
    assert tt(contiguous=False) == 2 * 1024 + 60
    assert tt(dtypes=("float16", "float16")) == 2 * 1024 + 60


def test_tensor_reduce_halves_only_bf16_to_bf16():
    def red(out):
        t = Trace()
        s = t.buf()
        t.op("tensor_reduce", Engine.VECTOR, [t.sb(s, 2048)], [t.sb(s, 4, off=4096)], n=1024, dtype="bfloat16",
             op="maximum", out_dtype=out)
        return compute_cycles(t.ins[0], TRN1)
    assert red("bfloat16") == 512 + 60
    assert red("float32") == 1024 + 60


def test_trn2_vector_performance_mode_speeds_up_half_copies_and_tensor_scalar():
    def copy(hw, opcode="tensor_copy", dtype="bfloat16", out="bfloat16", psum=False, contiguous=True,
             engine=Engine.VECTOR):
        t = Trace()
        s = t.buf()
        src = t.ps(s, 2048) if psum else t.sb(s, 2048)
        t.op(opcode, engine, [src], [t.sb(t.buf(), 2048)], n=1024, dtype=dtype, out_dtype=out,
             contiguous=contiguous, out_stride_bytes=2)
        return compute_cycles(t.ins[0], hw)
    assert copy(TRN1) == 1024 + 60  # NeuronCore-v2 has no performance mode
    assert copy(TRN2) == 1024 / 4 + 60  # SBUF in and out, half, contiguous: 4x
    assert copy(TRN2, "tensor_scalar", dtype="float16") == 1024 / 4 + 60
    assert copy(TRN2, psum=True) == 1024 / 2 + 60  # one side in PSUM: 2x
    assert copy(TRN2, contiguous=False) == 1024 / 2 + 60  # strided SBUF: 2x
    assert copy(TRN2, psum=True, contiguous=False) == 1024 + 60
    assert copy(TRN2, out="float32") == copy(TRN2, dtype="float32") == 1024 + 60  # fp32 on either side
    assert copy(TRN2, engine=Engine.GPSIMD) == 1024 + 60  # the Vector Engine's mode only
    assert copy(TRN2, "tensor_reduce") == 1024 + 60  # not one of its instructions


def test_a_wide_innermost_stride_halves_the_streaming_rate():
    def act(stride):
        t = Trace()
        s = t.buf()
        t.op("activation", Engine.SCALAR, [t.sb(s, 4096)], [t.sb(s, 2048, off=4096)], n=1024, dtype="bfloat16",
             free_stride_bytes=stride, out_stride_bytes=2)
        return compute_cycles(t.ins[0], TRN1)
    assert act(8) == 1024 + 60
    assert act(16) == 2 * 1024 + 60


def test_trn1_vector_and_gpsimd_take_turns_on_sbuf():
    t = Trace()
    a, b, c, d = (t.buf() for _ in range(4))
    t.op("tensor_copy", Engine.VECTOR, [t.sb(a, 4096)], [t.sb(b, 4096)], n=1024)
    t.op("tensor_copy", Engine.GPSIMD, [t.sb(c, 4096)], [t.sb(d, 4096)], n=1024)
    v1, v2 = estimate(t.ins, TRN1), estimate(t.ins, TRN2)
    assert v1.latency_ns == pytest.approx(v1.engine_busy_ns["vector"] + v1.engine_busy_ns["gpsimd"])
    assert v2.latency_ns == pytest.approx(max(v2.engine_busy_ns["vector"], v2.engine_busy_ns["gpsimd"]))


def test_stores_of_neighbouring_tiles_of_a_wide_matrix_do_not_depend_on_each_other():
    row = 8192 * 2  # bytes per row of a [M, 8192] bf16 matrix; tiles are [128, 512]

    def build(exact):
        t = Trace()
        out = t.buf()
        for c in range(4):
            tile = t.buf()
            t.op("memset", Engine.VECTOR, [], [t.sb(tile, 1024)])
            start = c * 1024
            hbm = (Region(out, Memory.HBM, 0, 1, start, start + 127 * row + 1024, row, 128, 1024) if exact
                   else t.hbm(out, start, start + 127 * row + 1024))
            t.store(hbm, t.sb(tile, 1024))
        return estimate(t.ins, TRN1, keep_schedule=True)
    exact, bounding = build(True), build(False)
    stores = [r for r in exact.schedule.rows if r[3] == "dma_copy"]
    assert stores[1][1] < stores[0][2]  # the second store starts before the first ends
    assert exact.latency_ns < bounding.latency_ns


def test_region_row_overlap_is_exact():
    from axon.targets.trainium.trace import rows_overlap

    def tile(r0, c0, rows=4, cols=8, width=64):
        start = r0 * width + c0
        return Region(1, Memory.HBM, 0, 1, start, start + (rows - 1) * width + cols, width, rows, cols)

    def cells(r):
        return {r.b_start + i * r.row_stride + j for i in range(r.rows) for j in range(r.row_bytes)}
    tiles = [tile(r, c) for r in (0, 2, 4) for c in (0, 4, 8, 56)]
    for a in tiles:
        for b in tiles:
            assert a.overlaps(b) == bool(cells(a) & cells(b))
    assert rows_overlap(0, 100, 16, 4, 8, 9, 12, 0, 0, 0) is False  # a plain range between two rows
    assert rows_overlap(0, 100, 16, 4, 8, 9, 17, 0, 0, 0) is True
