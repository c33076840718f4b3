"""Regression: a guarded sqrt keeps its guard. `where(x > 0, sqrt(x), -1) @ w` was optimized
through a "proved" rewrite into sqrt(where(x > 0, x, -1)) @ w, whose every output is NaN, and the
check passed it against that rewrite's own NaN reference (tests/verification/test_verify_domains.py)."""
import numpy as np

import axon
from axon.search.optimize import optimize
from axon.targets.trainium.target import TrainiumTarget


@axon.program(x=("m", "k"), w=("k", "n"))
def guarded_sqrt_matmul(x, w):
    return axon.where(x > 0, axon.sqrt(x), -1.0) @ w


def test_the_kernel_is_the_program_as_written_where_the_guard_is_false(monkeypatch, tmp_path):
    monkeypatch.setenv("AXON_CACHE_DIR", str(tmp_path / "cache"))
    sizes = {"m": 128, "k": 128, "n": 128}
    r = optimize(guarded_sqrt_matmul, sizes, dtype="float32", budget_s=5)
    rng = np.random.default_rng(3)
    x = rng.standard_normal((128, 128)).astype(np.float32)  # half of it <= 0
    w = rng.standard_normal((128, 128)).astype(np.float32)
    out = np.asarray(TrainiumTarget("trn2").run(r.kernel_source, {"x": x, "w": w}, timing_only=False).outputs[0])
    want = guarded_sqrt_matmul(x.astype(np.float64), w.astype(np.float64))
    assert np.isfinite(out).all()
    np.testing.assert_allclose(out, want, rtol=1e-3, atol=1e-3 * np.abs(want).max())
