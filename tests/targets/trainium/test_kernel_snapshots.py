"""Snapshots of emitted kernels: what a Trainium engineer gets, byte for byte. A change to the
emitter or the search shows up here as a diff to read; AXON_UPDATE_SNAPSHOTS=1 rewrites them."""
import os
from pathlib import Path

import pytest

from axon.search.optimize import optimize
from axon.suite import SUITE
from axon.targets.trainium.nki_api import lint
from axon.targets.trainium.simulator import ShapeDtype, load_source, simulate
from axon.targets.trainium.perfmodel import unread_results

SNAPSHOTS = Path(__file__).with_name("snapshots")
CASES = {
    "rmsnorm_matmul": {"m": 128, "k": 256, "n": 512},
    "softmax": {"m": 256, "n": 1024},
    "gated_mlp": {"m": 128, "k": 256, "n": 256},
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_emitted_kernel_is_its_snapshot(name, tmp_path, monkeypatch):
    monkeypatch.setenv("AXON_CACHE_DIR", str(tmp_path))
    r = optimize(name, CASES[name], "trn2", "bfloat16", budget_s=5)
    path = SNAPSHOTS / f"{name}_trn2.py"
    if os.environ.get("AXON_UPDATE_SNAPSHOTS") == "1":
        path.write_text(r.kernel_source)
    assert r.kernel_source == path.read_text(), f"{path.name} changed: AXON_UPDATE_SNAPSHOTS=1 to accept"
    assert not [f for f in lint(r.kernel_source, target="trn2") if f.severity == "error"]
    body = r.kernel_source.split('"""', 2)[2]
    assert "assert tuple(" in body and " = 0\n" not in body  # shapes checked at entry, no dead loop variables
    prog, named = SUITE[name].program.generalized()
    inputs = prog.random_inputs({**CASES[name], **named}, "bfloat16", seed=0)
    shapes = {k: ShapeDtype(v.shape, "bfloat16") for k, v in inputs.items()}
    trace = simulate(load_source(r.kernel_source), shapes, target="trn2", timing_only=True).trace
    assert not unread_results(trace), "instructions whose results nothing reads"
