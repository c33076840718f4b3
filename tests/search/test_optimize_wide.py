"""Wide rows: what the fit model accepts runs within the simulator's capacity, the vocabulary and
long-RoPE cases get checked kernels, and every bad fit is one clear error; a trn1 smoke."""
import pytest

import axon
from axon.errors import AxonError
from axon.search.optimize import optimize
from axon.suite import SUITE
from axon.targets.trainium.target import TrainiumTarget


@pytest.fixture(autouse=True)
def _no_home_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("AXON_CACHE_DIR", str(tmp_path / "cache"))


@pytest.mark.parametrize("name,case,target", [("cumsum", "qwen_vocab", "trn2"), ("rope", "rope_128x32768", "trn2"),
                                              ("layernorm", "m128_n8192", "trn2"), ("rmsnorm", "m128_n8192", "trn1"),
                                              ("rope", "m128_d8192", "trn1")])
def test_fit_model_accepted_candidates_fit_the_simulator(name, case, target, simulate_all):
    assert simulate_all(name, SUITE[name].sizes(case), TrainiumTarget(target))[1] == []


def test_fit_model_accepts_only_what_fits_for_a_very_wide_softmax(simulate_all):
    assert simulate_all("softmax", {"m": 128, "n": 100000}, TrainiumTarget("trn2"))[1] == []


@pytest.mark.slow
@pytest.mark.parametrize("case", ["llama3_vocab", "qwen_vocab"])
def test_cumsum_over_a_vocabulary(case):
    r = optimize("cumsum", case)
    assert r.tiling[0]["col_chunk"] and r.check.startswith(f"full size {SUITE['cumsum'].sizes(case)}")
    assert r.latency_ns <= r.baseline_latency_ns and 0 < r.roofline_fraction <= 1


@pytest.mark.slow
def test_long_rope():
    r = optimize("rope", "rope_128x32768")
    assert r.check.startswith("full size") and r.latency_ns <= r.baseline_latency_ns


def test_no_tiling_fits_names_the_operator():
    @axon.program(x=("m", "n"))
    def cumsum_t(x):
        return x.cumsum(axis=-1).T  # stored transposed: whole rows, no chunks

    with pytest.raises(AxonError, match=r"cumsum: on-chip footprint .* \(a row of 151936 .*\) exceeds the 208.0 KiB"):
        optimize(cumsum_t, {"m": 128, "n": 151936})


@pytest.mark.slow
@pytest.mark.parametrize("name", ["softmax", "cumsum", "rope", "rmsnorm_matmul", "gqa"])
def test_small_cases_on_trn1(name):
    r = optimize(name, "small", target="trn1")
    assert r.target == "trn1" and r.latency_ns <= r.baseline_latency_ns
