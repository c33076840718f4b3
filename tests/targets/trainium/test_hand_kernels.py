"""The hand-written NKI baselines (axon/targets/trainium/baselines): each matches its benchmark
program's reference on the simulator at the `small` case, at a size that is not a multiple of 128
where the kernel claims to support one, and in fp32; and the performance model gives each a
plausible latency at the `quick` case (above the roofline, not absurdly far from it).

Tolerances: bf16 outputs rtol = atol = 2e-2 (a bf16 ulp is 2^-8 relative; the outputs are rounded
once or twice); fp32 rtol = atol = 1e-4 (accumulation order only)."""
import numpy as np
import pytest

from axon import suite, targets
from axon.errors import InputError
from axon.search.roofline import program_roofline
from axon.targets.trainium.baselines import HAND_KERNELS, run_hand_kernel

NAMES = ["matmul", "transpose_matmul", "rmsnorm_matmul", "rmsnorm", "softmax", "layernorm", "cumsum", "rope"]
TOL = {"bfloat16": 2e-2, "float32": 1e-4}

# Sizes off the 128 grid (and off the column-chunk grid) for the kernels that support them; the
# matmul kernels get a multi-block size instead (several row tiles, transposes per bank, columns).
ODD = {
    "rmsnorm": [{"m": 200, "n": 384}],
    "softmax": [{"m": 200, "n": 384}, {"m": 1000, "n": 256}],
    "layernorm": [{"m": 200, "n": 384}, {"m": 1000, "n": 256}],
    "cumsum": [{"m": 200, "n": 4500}],
    "rope": [{"m": 201, "h": 33}, {"m": 128, "h": 2500}],
    "matmul": [{"m": 256, "k": 512, "n": 1024}],
    "transpose_matmul": [{"m": 256, "k": 512, "n": 1024}],
    "rmsnorm_matmul": [{"m": 256, "k": 512, "n": 1024}],
}


def _check(name, sizes, dtype):
    report = run_hand_kernel(name, sizes, dtype=dtype, seed=1)
    program = suite.get(name).program
    inputs = program.random_inputs(sizes, dtype=dtype, seed=1)
    want = program.reference(**{k: v.astype(np.float32) for k, v in inputs.items()})
    got = report.outputs if isinstance(report.outputs, tuple) else (report.outputs,)
    assert len(got) == len(want)
    tol = TOL[dtype]
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == inputs[program.input_names[0]].dtype
        err = np.abs(g.astype(np.float64) - w)
        assert np.all(err <= tol + tol * np.abs(w)), f"{name} {sizes} {dtype}: max error {err.max()}"
    return report


def test_registry_covers_the_benchmarks():
    assert sorted(HAND_KERNELS) == sorted(NAMES)
    for name, hk in HAND_KERNELS.items():
        assert hk.file.is_file() and hk.technique
        assert f"def {hk.function}(" in hk.file.read_text()
        assert suite.get(name).program.input_names  # the benchmark exists


@pytest.mark.parametrize("name", NAMES)
def test_small_case_matches_reference_bf16(name):
    report = _check(name, suite.get(name).sizes("small"), "bfloat16")
    assert report.reference_ok  # the runner's own bf16 check agrees


@pytest.mark.parametrize("name, sizes", [(n, s) for n in NAMES for s in ODD[n]])
def test_other_supported_sizes_match_reference(name, sizes):
    _check(name, sizes, "bfloat16")


@pytest.mark.parametrize("name", NAMES)
def test_small_case_matches_reference_fp32(name):
    _check(name, suite.get(name).sizes("small"), "float32")


@pytest.mark.parametrize("name", ["matmul", "transpose_matmul", "rmsnorm_matmul"])
def test_matmul_kernels_refuse_sizes_off_their_tile_grid(name):
    with pytest.raises(InputError, match="% 512 == 0"):
        run_hand_kernel(name, {"m": 128, "k": 256, "n": 300})


@pytest.mark.parametrize("name", NAMES)
def test_quick_case_latency_is_plausible(name):
    sizes = suite.get(name).sizes("quick")
    e = run_hand_kernel(name, sizes, target="trn2", timing_only=True).estimate
    assert not e.uncosted_opcodes
    roof = program_roofline(suite.get(name).program.graph, sizes, "bfloat16", targets.get("trn2").peaks("bfloat16"))
    assert roof.ns < e.latency_ns < 4 * roof.ns, (e.latency_ns, roof.ns)
    if name.endswith("matmul"):
        assert e.flops == roof.flops == 2 * sizes["m"] * sizes["k"] * sizes["n"]
        assert roof.ns / e.latency_ns > 0.6  # TensorE-bound and kept busy
