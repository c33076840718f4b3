"""Small things a new user meets first: --version, help that states the real defaults, a result
whose repr does not print the whole kernel."""
import subprocess
import sys

import axon
from axon.search.optimize import DEFAULT_BUDGET_S


def _axon(*args):
    return subprocess.run([sys.executable, "-m", "axon", *args], capture_output=True, text=True, timeout=120)


def test_version():
    out = _axon("--version")
    assert out.returncode == 0 and out.stdout.strip() == f"axon {axon.__version__}"


def test_budget_help_states_the_default_used():
    out = _axon("optimize", "--help")
    assert f"default {DEFAULT_BUDGET_S:g})" in " ".join(out.stdout.split())


def test_result_repr_leaves_the_kernel_out(tmp_path, monkeypatch):
    monkeypatch.setenv("AXON_CACHE_DIR", str(tmp_path))

    @axon.program(x=("m", "n"))
    def double(x):
        return x * 2.0

    r = axon.optimize(double, {"m": 128, "n": 128}, dtype="float32")
    assert "nki.jit" in r.kernel_source and "nki.jit" not in repr(r)


def test_a_kernel_without_a_matmul_says_nothing_of_matmul_tiles(tmp_path, monkeypatch):
    monkeypatch.setenv("AXON_CACHE_DIR", str(tmp_path))

    @axon.program(x=("m", "n"))
    def scaled_exp(x):
        return axon.exp(x) * 2.0

    source = axon.optimize(scaled_exp, {"m": 128, "n": 256}, dtype="float32").kernel_source
    assert "stationary" not in source and "n_tile" not in source and "matmul n tile" not in source
    mm = axon.optimize("matmul", {"m": 128, "k": 128, "n": 512}, dtype="float32").kernel_source
    assert "stationary operands transposed by" in mm and "matmul n tile" in mm
