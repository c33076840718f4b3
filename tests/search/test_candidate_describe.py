"""What a candidate's one-line description says: a matmul's stationary layout only where there is one."""
from axon.search.candidates import direct_lowering
from axon.search.lowering import Lowerer
from axon.search.optimize import get_target
from axon.suite import SUITE


def _describe(name):
    target = get_target("trn2")
    b = SUITE[name]
    return direct_lowering(name, b.program.graph, b.sizes("small"), target, "bfloat16", Lowerer(target)).describe()


def test_only_a_kernel_with_a_matmul_names_its_stationary_layout():
    assert "stationary via" in _describe("rmsnorm_matmul")
    assert "stationary via" not in _describe("relu") and "pass 1: rows" in _describe("relu")
