"""Calling cumsum (cumsum_trn2.py, beside this file) from PyTorch on Neuron and from JAX.

On a Trainium instance an @nki.jit kernel takes PyTorch tensors on the XLA device (torch-neuronx)
or JAX arrays (jax-neuronx) as they are. The kernel was built and checked for the shapes
below in bfloat16, and check them at entry. Run this file there, or import it and call
with_torch() / with_jax() / call(...) on your own arrays.
"""
from cumsum_trn2 import cumsum

SHAPES = {
    "x": (128, 512),
}


def call(*args, run=None):
    """The kernel on `args` (in SHAPES' order); `run(kernel, *args)` replaces each kernel call
    (a simulator, a profiler)."""
    return (run or (lambda kernel, *a: kernel(*a)))(cumsum, *args)


def with_torch(device=None, run=None, seed=0):
    """Random normal inputs as PyTorch tensors on `device` (default: the Neuron XLA device)."""
    import torch

    if device is None:
        import torch_xla.core.xla_model as xm

        device = xm.xla_device()
    g = torch.Generator().manual_seed(seed)
    args = [torch.randn(shape, generator=g).to(torch.bfloat16).to(device) for shape in SHAPES.values()]
    return call(*args, run=run)


def with_jax(run=None, seed=0):
    """Random normal inputs as JAX arrays (on the Neuron device when jax-neuronx is installed)."""
    import jax
    import jax.numpy as jnp

    keys = jax.random.split(jax.random.PRNGKey(seed), len(SHAPES))
    args = [jax.random.normal(k, shape, dtype=jnp.bfloat16) for k, shape in zip(keys, SHAPES.values())]
    return call(*args, run=run)


if __name__ == "__main__":
    print(with_torch())
