"""The small launcher written next to each emitted kernel: how to call it from PyTorch on Neuron
(torch-neuronx, tensors on the XLA device) and from JAX (jax-neuronx), where an `@nki.jit` kernel
takes the framework's arrays as they are.

`launcher_source` gives the file's text; its `call(*args, run=None)` is the one place a kernel
is called. Off Neuron, `simulated_launcher` loads the file as the simulator loads kernels and
`simulated_run` is a `run` that simulates each call, so the path a user runs can be run here.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

_TORCH_DTYPE = {"bfloat16": "torch.bfloat16", "float16": "torch.float16", "float32": "torch.float32"}
_JAX_DTYPE = {"bfloat16": "jnp.bfloat16", "float16": "jnp.float16", "float32": "jnp.float32"}


def launcher_source(module: str, entry: str, shapes: dict[str, tuple], dtype: str, pipeline: bool) -> str:
    """`module`: the kernel file's module name (it sits beside the launcher); `entry`: the kernel,
    or for a program of several kernels the function that runs them in order (`pipeline`);
    `shapes`: each input's shape, in the entry's parameter order."""
    what = "the kernels" if pipeline else "the kernel"
    call = (f"    return {entry}(*args, run=run)" if pipeline else
            f"    return (run or (lambda kernel, *a: kernel(*a)))({entry}, *args)")
    shape_lines = "".join(f'    "{name}": {tuple(shape)!r},\n' for name, shape in shapes.items())
    built = "were built and checked" if pipeline else "was built and checked"
    return f'''"""Calling {entry} ({module}.py, beside this file) from PyTorch on Neuron and from JAX.

On a Trainium instance an @nki.jit kernel takes PyTorch tensors on the XLA device (torch-neuronx)
or JAX arrays (jax-neuronx) as they are. {what.capitalize()} {built} for the shapes
below in {dtype}, and check them at entry. Run this file there, or import it and call
with_torch() / with_jax() / call(...) on your own arrays.
"""
from {module} import {entry}

SHAPES = {{
{shape_lines}}}


def call(*args, run=None):
    """{what.capitalize()} on `args` (in SHAPES' order); `run(kernel, *args)` replaces each kernel call
    (a simulator, a profiler)."""
{call}


def with_torch(device=None, run=None, seed=0):
    """Random normal inputs as PyTorch tensors on `device` (default: the Neuron XLA device)."""
    import torch

    if device is None:
        import torch_xla.core.xla_model as xm

        device = xm.xla_device()
    g = torch.Generator().manual_seed(seed)
    args = [torch.randn(shape, generator=g).to({_TORCH_DTYPE[dtype]}).to(device) for shape in SHAPES.values()]
    return call(*args, run=run)


def with_jax(run=None, seed=0):
    """Random normal inputs as JAX arrays (on the Neuron device when jax-neuronx is installed)."""
    import jax
    import jax.numpy as jnp

    keys = jax.random.split(jax.random.PRNGKey(seed), len(SHAPES))
    args = [jax.random.normal(k, shape, dtype={_JAX_DTYPE[dtype]}) for k, shape in zip(keys, SHAPES.values())]
    return call(*args, run=run)


if __name__ == "__main__":
    print(with_torch())
'''


def simulated_launcher(path: str, target: str = "trn2") -> dict:
    """The launcher at `path`, loaded as the simulator loads a kernel (its kernels' `nki` is the
    simulator's): its namespace, whose call / with_torch / with_jax take `run=simulated_run(...)`."""
    from axon.targets.trainium.hardware import get_target
    from axon.targets.trainium.simulator import SimContext
    from axon.targets.trainium.simulator.loader import execute

    source = Path(path).read_text()
    ctx = SimContext(get_target(target), path, timing_only=True, max_instructions=0)
    return execute(compile(source, path, "exec"), path, ctx, source)


def simulated_run(kernel_path: str, target: str = "trn2"):
    """A launcher's `run`: each kernel call (a kernel object, or its name) simulated on the CPU
    with the arrays given (PyTorch tensors, JAX or NumPy arrays); NumPy arrays come back."""
    from axon.targets.trainium.simulator import simulate_source

    source = Path(kernel_path).read_text()

    def run(kernel, *args):
        name = kernel if isinstance(kernel, str) else getattr(kernel, "fn", kernel).__name__
        inputs = dict(zip(kernel_params(source, name), map(as_numpy, args)))
        out = simulate_source(source, name, inputs, path=kernel_path, target=target).outputs
        outs = list(out) if isinstance(out, (tuple, list)) else [out]
        return outs[0] if len(outs) == 1 else tuple(outs)

    return run


def kernel_params(source: str, name: str) -> list[str]:
    head = next(line for line in source.splitlines() if line.startswith(f"def {name}("))
    return [p.strip() for p in head[head.index("(") + 1:head.rindex(")")].split(",")]


def as_numpy(value) -> np.ndarray:
    """A PyTorch tensor (any device), JAX or NumPy array as a NumPy array of its own dtype."""
    if hasattr(value, "detach"):  # torch: NumPy has no bfloat16, ml_dtypes does
        from axon.semantics.evaluate import dtype_named

        dtype = str(value.dtype).removeprefix("torch.")
        return value.detach().cpu().float().numpy().astype(dtype_named(dtype))
    return np.asarray(value)
