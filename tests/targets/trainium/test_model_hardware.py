"""The hardware descriptions: complete, self-consistent, and the numbers the docs give."""
import pytest

from axon.errors import InputError
from axon.targets.trainium.hardware import COSTS, TRN1, TRN2, CostFormula, DType, get_target
from axon.targets.trainium.trace import Engine

COMPUTE = (Engine.TENSOR, Engine.VECTOR, Engine.SCALAR, Engine.GPSIMD)


@pytest.mark.parametrize("hw", [TRN1, TRN2], ids=lambda h: h.name)
def test_every_engine_has_a_clock_and_peaks_follow_from_the_array(hw):
    assert set(COMPUTE) <= set(hw.engines)
    assert all(hw.engines[e].clock_ghz > 0 for e in COMPUTE)
    half = hw.tensor_peak_flops[DType.HALF]
    assert half == pytest.approx(2 * 128 * 128 * hw.clock_ghz(Engine.TENSOR) * 1e9)
    assert hw.tensor_peak_flops[DType.FP32] == pytest.approx(half / 4)
    assert hw.hbm_bytes_per_ns > 0 and hw.dma.queues == 16 and hw.dma.engines == 16


def test_published_numbers():
    assert TRN1.tensor_peak_flops[DType.HALF] / 1e12 == pytest.approx(92, rel=0.01)
    assert TRN2.tensor_peak_flops[DType.HALF] / 1e12 == pytest.approx(79, rel=0.01)
    assert TRN2.tensor_peak_flops[DType.FP8] / 1e12 == pytest.approx(158, rel=0.01)
    assert TRN1.dma.bytes_per_ns == 272 and TRN2.dma.bytes_per_ns == 368
    assert TRN1.dma.fixed_ns == 1300 and TRN2.dma.fixed_ns == 600
    # the tutorial's ridge point: 222 FLOP/B on trn1
    assert TRN1.tensor_peak_flops[DType.HALF] / (TRN1.hbm_bytes_per_ns * 1e9) == pytest.approx(222, rel=0.02)
    # the memory/tile limits the simulator reads are unchanged
    assert TRN1.memory.sbuf_bytes_per_partition == 180224 and TRN2.memory.sbuf_bytes_per_partition == 212984
    assert TRN1.tiles.matmul_moving_free_max == 512


def test_dma_efficiency_has_the_documented_shape():
    e = TRN1.dma.efficiency
    assert e(64) < e(256) < e(1024) < e(2048) < e(4096)
    assert e(128) < 0.15  # < 256 B per partition: badly overhead-bound
    assert e(2048) >= 0.6  # >= 2 KiB: approaches peak
    assert e(4096) == e(1 << 20) == 1.0  # >= 4 KiB: saturates the DMA engines


def test_cost_table_is_data():
    assert all(isinstance(f, CostFormula) for f in COSTS.values())
    assert COSTS["nc_matmul"].fp32_mult == 4
    assert TRN1.cost("no_such_opcode").floor == 64


def test_unknown_target_is_one_clear_error():
    with pytest.raises(InputError, match="trn1, trn2"):
        get_target("trn9")
