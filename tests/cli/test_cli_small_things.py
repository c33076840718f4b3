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


def test_bad_output_folder_and_budget_are_one_line_before_the_search(tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("")
    for args, says in ((("-o", str(afile)), "cannot write -o"), (("-o", str(afile / "sub")), "cannot write -o"),
                       (("--budget", "-5"), "bad --budget"), (("--budget", "nan"), "bad --budget")):
        out = _axon("optimize", "relu", "--case", "small", "--quiet", *args)
        assert out.returncode != 0 and says in out.stderr and "Traceback" not in out.stderr
        assert len(out.stderr.strip().splitlines()) == 1


def test_an_output_that_is_an_input_or_returned_twice_is_refused():
    import pytest
    from axon.errors import UnsupportedError

    @axon.program(x=("m", "n"), y=("m", "n"))
    def passthrough(x, y):
        return x * y, y

    @axon.program(x=("m", "n"))
    def twice(x):
        e = axon.exp(x)
        return e, e

    with pytest.raises(UnsupportedError, match="output 1 is the input y itself"):
        axon.optimize(passthrough, {"m": 128, "n": 128}, dtype="float32")
    with pytest.raises(UnsupportedError, match="output 1 is the same value"):
        axon.optimize(twice, {"m": 128, "n": 128}, dtype="float32")

    @axon.program(x=("m", "n"), t=())
    def scaled(x, t):
        return x * t

    with pytest.raises(UnsupportedError, match="input t has rank 0"):
        axon.optimize(scaled, {"m": 128, "n": 128}, dtype="float32")
