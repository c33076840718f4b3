"""Shared test helpers."""
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
