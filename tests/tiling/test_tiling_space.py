"""Symbolic tiling: parameters from the hardware limits, misfits rejected by the model."""
from axon.fusion.nodes import RowWorld, groups
from axon.suite import SUITE
from axon.targets.trainium.target import TrainiumTarget
from axon.tiling.space import Limits, check, default_tiling, enumerate_tilings, footprint

LIMITS = TrainiumTarget("trn2").limits()


def _world(name):
    return RowWorld.of(SUITE[name].program.graph)


def test_limits_come_from_the_hardware_description():
    assert LIMITS.partitions == 128 and LIMITS.moving_free_max == 512 and LIMITS.onchip_bytes == 212984


def test_every_fitting_tiling_respects_the_limits():
    w = _world("matmul")
    (g,) = groups(w, "fused")
    sizes = SUITE["matmul"].sizes("quick")
    fits, rejected = enumerate_tilings(w, g, sizes, LIMITS)
    assert fits and rejected
    for t in fits:
        assert t.row_tile <= 128 and t.n_tile <= 512 and t.k_tile <= 128
        assert footprint(w, g, t, sizes) <= LIMITS.onchip_bytes
    for t, why in rejected:
        assert "exceeds" in why and footprint(w, g, t, sizes) > LIMITS.onchip_bytes


def test_small_sbuf_rejects_everything_by_the_model():
    w = _world("rmsnorm_matmul")
    (g,) = groups(w, "fused")
    tiny = Limits(**{**LIMITS.__dict__, "onchip_bytes": 1024})
    fits, rejected = enumerate_tilings(w, g, SUITE["rmsnorm_matmul"].sizes("quick"), tiny)
    assert not fits and all("footprint" in why for _, why in rejected)


def test_default_tiling_is_one_row_tile_and_one_bank():
    w = _world("matmul")
    (g,) = groups(w, "unfused")
    t = default_tiling(w, g, {"m": 256, "k": 256, "n": 1024}, LIMITS)
    assert (t.row_tile, t.row_block, t.n_tile, t.n_block, t.k_tile) == (128, 1, 512, 512, 128)
    assert check(w, g, t, {"m": 256, "k": 256, "n": 1024}, LIMITS) == ""
