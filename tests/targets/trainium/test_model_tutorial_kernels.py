"""Our matmul-tutorial kernels: numerically right on the simulator, and the model's timing of the
full-size fully optimised kernel (the fidelity benchmark's slowest-to-get-wrong case) is fast and
close to the published trn1 measurement."""
from pathlib import Path

import pytest

from axon.targets.trainium.runner import InputSpec, run

TUTORIAL = Path(__file__).resolve().parents[3] / "examples" / "nki" / "matmul_tutorial"
REFERENCE = f"{TUTORIAL / 'reference.py'}:matmul"


@pytest.mark.parametrize("kernel, m, k, n", [
    ("tiled", 256, 256, 1024),
    ("hoist_load", 256, 256, 1024),
    ("block_free", 256, 256, 1024),
    ("fully_optimized", 2048, 1024, 1024),
])
def test_kernels_match_numpy(kernel, m, k, n):
    inputs = {"lhsT": InputSpec((k, m), "bfloat16"), "rhs": InputSpec((k, n), "bfloat16")}
    report = run(str(TUTORIAL / f"{kernel}.py"), inputs, target="trn1", reference=REFERENCE, seed=3)
    assert report.reference_ok, report.max_abs_err
    assert report.estimate.flops == 2 * m * k * n


def test_the_steps_get_faster_in_tutorial_order_at_a_small_size():
    inputs = {"lhsT": InputSpec((2048, 2048), "bfloat16"), "rhs": InputSpec((2048, 2048), "bfloat16")}
    latency = [run(str(TUTORIAL / f"{k}.py"), inputs, target="trn1", timing_only=True).estimate.latency_ns
               for k in ("tiled", "hoist_load", "block_free", "fully_optimized")]
    assert latency == sorted(latency, reverse=True)


@pytest.mark.slow
def test_full_size_fully_optimized_is_close_to_published():
    inputs = {"lhsT": InputSpec((8192, 4096), "bfloat16"), "rhs": InputSpec((8192, 8192), "bfloat16")}
    report = run(str(TUTORIAL / "fully_optimized.py"), inputs, target="trn1", timing_only=True)
    assert report.estimate.latency_ns / 1e6 == pytest.approx(6.97, rel=0.25)
    assert report.estimate.kernel_bound_ns / 1e6 == pytest.approx(2 * 4096 * 8192 * 8192 / 91.75e12 * 1e3, rel=1e-3)
