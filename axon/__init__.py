"""Axon: a synthesizing superoptimizer for tensor programs.

    import axon

    @axon.program(x=("m", "k"), w=("k", "n"))
    def rmsnorm_matmul(x, w):
        return (x / axon.sqrt((x * x).mean(axis=-1, keepdims=True) + 1e-6)) @ w
"""
from axon.errors import AxonError, InputError, KernelError, ShapeError, UnsupportedError
from axon.frontend import Program, program
from axon.frontend.functions import (arange, concatenate, equal, exp, gelu, log, matmul, maximum, minimum, reciprocal, relu, rsqrt,
                                     sigmoid, silu, sqrt, square, tanh, transpose, where)
from axon.suite import benchmark

__version__ = "0.1.0"


def optimize(program, sizes=None, target: str = "trn2", dtype: str = "bfloat16", **options):
    """The fastest proved-and-checked kernel for `program` at `sizes` on `target`; see
    axon.search.optimize. Imported on first use: it loads the solver and the simulator."""
    from axon.search.optimize import optimize as _optimize

    return _optimize(program, sizes, target=target, dtype=dtype, **options)


def from_torch(fn, example_inputs, dims=None, name=None):
    """The Axon program of a PyTorch function or module at example inputs (torch.export's ATen
    graph); see axon.frontend.from_torch. Needs the [torch] extra."""
    from axon.frontend.from_torch import from_torch as _from_torch

    return _from_torch(fn, example_inputs, dims=dims, name=name)


def from_jax(fn, example_inputs, dims=None, name=None):
    """The Axon program of a JAX function at example inputs (its jaxpr); see
    axon.frontend.from_jax. Needs the [jax] extra."""
    from axon.frontend.from_jax import from_jax as _from_jax

    return _from_jax(fn, example_inputs, dims=dims, name=name)


def verify(f, g, **options):
    """Prove two programs equivalent for all sizes, or refute them with a NumPy-confirmed
    counterexample; see axon.verification. Imported on first use: it loads z3."""
    from axon.verification import verify as _verify

    return _verify(f, g, **options)


__all__ = [
    "program", "Program", "benchmark", "verify", "optimize", "from_torch", "from_jax",
    "exp", "log", "sqrt", "rsqrt", "reciprocal", "square", "silu", "relu", "sigmoid", "tanh", "gelu",
    "maximum", "minimum", "matmul", "transpose", "where", "arange", "concatenate", "equal",
    "AxonError", "ShapeError", "UnsupportedError", "InputError", "KernelError",
]
