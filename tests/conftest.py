"""Shared test helpers."""
import os
import subprocess
import sys

import pytest

from axon.errors import AxonError
from axon.fusion.nodes import FUSION_MODES
from axon.search.candidates import Counts, direct_lowering, enumerate_candidates
from axon.search.lowering import Lowerer
from axon.suite import SUITE


def _simulate_all(name, sizes, target, modes=FUSION_MODES):
    """Timing-only simulation of every candidate the fit model accepts and of the direct lowering:
    (the candidates, one error line per kernel the simulator refused)."""
    b = SUITE[name]
    lowerer = Lowerer(target)
    cands = enumerate_candidates(name, [(b.program.graph, ())], sizes, target, "bfloat16", lowerer, Counts(),
                                 modes=modes)
    direct = direct_lowering(name, b.program.graph, sizes, target, "bfloat16", lowerer)
    assert cands and not direct.misfit
    shapes = b.program.input_shapes(sizes, "bfloat16")
    errors = []
    for c in cands + [direct]:
        try:
            target.run(c.source, shapes, timing_only=True)
        except AxonError as err:
            errors.append(f"{c.describe()}: {err}")
    return cands, errors


@pytest.fixture
def simulate_all():
    return _simulate_all


@pytest.fixture(autouse=True)
def _own_kernel_database(tmp_path_factory, monkeypatch):
    """Each test starts with an empty kernel database (not the user's ~/.cache/axon): a stored
    winner from another test or an earlier run never answers for a search a test means to run."""
    monkeypatch.setenv("AXON_CACHE_DIR", str(tmp_path_factory.mktemp("axon-cache")))


@pytest.fixture
def in_child(request):
    """`in_child("check_x")` runs the test module's function `check_x` in a fresh interpreter;
    its failure (stderr shown) fails the test. For tests that import PyTorch or JAX: the suite's
    own process never loads them, so its forks (z3 queries, sandboxed simulations) stay small and
    never happen beside JAX's threads."""
    path = request.module.__file__

    def run(check: str, timeout: float = 180):
        code = ("import importlib.util; spec = importlib.util.spec_from_file_location('child_checks', "
                f"{path!r}); m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m); m.{check}()")
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout,
                           env={**os.environ})
        assert r.returncode == 0, r.stderr[-4000:]
    return run
