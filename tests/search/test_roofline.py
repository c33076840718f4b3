"""The roofline is the program's: computed from its matmul FLOPs and its inputs' and outputs' bytes,
once per case, identical for every kernel of the case whatever traffic that kernel makes."""
import pytest

import axon
from axon import suite, targets
from axon.search.optimize import optimize
from axon.search.roofline import Peaks, io_bytes, matmul_macs, program_roofline

# trn2 (NeuronCore-v3): 128 x 128 PEs x 2 FLOP x 2.4 GHz at bf16, 2.9 TB/s HBM over 8 cores
TRN2_BF16_FLOPS_PER_NS = 2 * 128 * 128 * 2.4
TRN2_HBM_BYTES_PER_NS = 2900 / 8


@pytest.fixture(autouse=True)
def _no_home_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("AXON_CACHE_DIR", str(tmp_path / "cache"))


def test_matmul_roofline_is_the_hand_computed_value():
    m, k, n = 1024, 4096, 4096
    roof = program_roofline(suite.get("matmul").program.graph, {"m": m, "k": k, "n": n}, "bfloat16",
                            targets.get("trn2").peaks("bfloat16"))
    assert roof.flops == 2 * m * n * k
    assert roof.bytes == 2 * (m * k + k * n + m * n)
    assert roof.compute_ns == pytest.approx(2 * m * n * k / TRN2_BF16_FLOPS_PER_NS)  # 436.9 us
    assert roof.memory_ns == pytest.approx(2 * (m * k + k * n + m * n) / TRN2_HBM_BYTES_PER_NS)
    assert roof.ns == roof.compute_ns == pytest.approx(436906.7, rel=1e-6)


def test_fp32_halves_nothing_but_the_matmul_rate():
    sizes = {"m": 128, "k": 256, "n": 512}
    graph = suite.get("matmul").program.graph
    half = program_roofline(graph, sizes, "bfloat16", targets.get("trn2").peaks("bfloat16"))
    full = program_roofline(graph, sizes, "float32", targets.get("trn2").peaks("float32"))
    assert full.flops == half.flops and full.bytes == 2 * half.bytes
    assert full.compute_ns == pytest.approx(4 * half.compute_ns)  # TensorE runs fp32 at 1/4 rate


def test_element_wise_work_is_not_compute_and_batch_dims_multiply():
    @axon.program(x=("b", "m", "k"), w=("b", "k", "n"))
    def batched(x, w):
        return axon.exp(x) @ w

    sizes = {"b": 3, "m": 128, "k": 256, "n": 64}
    assert matmul_macs(batched.graph, sizes) == 3 * 128 * 64 * 256
    assert io_bytes(batched.graph, sizes, "bfloat16") == 2 * 3 * (128 * 256 + 256 * 64 + 128 * 64)
    roof = program_roofline(batched.graph, sizes, "bfloat16", Peaks(matmul_flops_per_ns=1.0, memory_bytes_per_ns=1.0))
    assert roof.flops == 2 * 3 * 128 * 64 * 256  # exp adds no FLOPs


def test_different_candidates_of_one_case_share_the_programs_roofline():
    """With fusion, the winner keeps the softmax on chip; without, every operator is its own pass
    and its intermediates go through HBM, so the two winners' own traffic bounds differ. The
    roofline both are measured against is the program's, the same number."""
    name, sizes = "softmax_matmul", suite.get("softmax_matmul").sizes("small")
    fused = optimize(name, sizes, budget_s=5)
    unfused = optimize(name, sizes, budget_s=5, fusion=False)
    assert fused.kernel_source != unfused.kernel_source
    tgt = targets.get("trn2")
    expected = program_roofline(suite.get(name).program.graph, sizes, "bfloat16", tgt.peaks("bfloat16")).ns
    assert fused.roofline_ns == unfused.roofline_ns == expected
    shapes = suite.get(name).program.input_shapes(sizes, "bfloat16")
    own = [tgt.run(r.kernel_source, shapes, timing_only=True).estimate.kernel_bound_ns for r in (fused, unfused)]
    assert own[0] != own[1]  # what each kernel's trace alone would have called its roofline
