"""Empirical selection and the `optimize` entry point.

    from axon.search import optimize
    result = optimize("rmsnorm_matmul", "quick", target="trn2", dtype="bfloat16")
"""
from axon.search.optimize import OptimizeResult, optimize

__all__ = ["optimize", "OptimizeResult"]
