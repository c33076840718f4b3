"""The launcher written beside each kernel runs the user's path, from PyTorch tensors and from JAX
arrays, here with each kernel call on the simulator; the kernel refuses other shapes at entry."""
import tempfile

import numpy as np
import pytest

import axon
from axon.suite import SUITE


def check_a_kernels_launcher_runs_from_pytorch_and_from_jax():
    from axon.search.optimize import launcher_path
    from axon.targets.trainium.launch import as_numpy, simulated_launcher, simulated_run

    r = axon.optimize("rmsnorm_matmul", {"m": 128, "k": 256, "n": 512}, "trn2", "bfloat16", budget_s=2,
                      out_dir=tempfile.mkdtemp(), algebra=False)
    ns = simulated_launcher(str(launcher_path(r.kernel_path)))
    simulate, seen = simulated_run(r.kernel_path), []

    def run(kernel, *args):
        seen.append([as_numpy(a) for a in args])
        return simulate(kernel, *args)

    program = SUITE["rmsnorm_matmul"].program
    for launch in (lambda: ns["with_torch"](device="cpu", run=run), lambda: ns["with_jax"](run=run)):
        got = launch()
        args = seen[-1]
        assert [a.shape for a in args] == list(ns["SHAPES"].values())
        assert all(a.dtype.name == "bfloat16" for a in args)
        want = program(*[a.astype(np.float64) for a in args])
        assert got.dtype.name == "bfloat16" and got.shape == want.shape
        assert np.max(np.abs(got.astype(np.float64) - want)) <= 0.05 * np.max(np.abs(want))
    assert not np.array_equal(seen[0][0], seen[1][0])  # two frameworks' random inputs, both run
    x, w = seen[-1]
    with pytest.raises(Exception, match=r"x: expected shape \(128, 256\), got \(64, 256\)"):
        ns["call"](x[:64], w, run=simulate)


def test_a_kernels_launcher_runs_from_pytorch_and_from_jax(in_child):
    in_child("check_a_kernels_launcher_runs_from_pytorch_and_from_jax", timeout=300)
