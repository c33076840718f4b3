"""Hand-written NKI kernels for the benchmark suite: the baseline Axon's generated kernels are
compared against in the benchmark report.

Each file here is an NKI kernel source (beta-1 `neuronxcc.nki` API, written in the style of
AWS's public NKI tutorials: 128-partition tiles, wide contiguous DMAs, PSUM accumulation, fused
activation + reduce, work spread over the engines); the files are loaded by the simulator, never
imported as Python modules. `HAND_KERNELS` says, per benchmark, which file and function, what
sizes the kernel supports, and how benchmark inputs and outputs map onto the kernel's.
`run_hand_kernel` simulates one on a benchmark case and checks it against the benchmark
program's NumPy reference.

Invariant: every kernel takes the benchmark program's inputs by name, in the program's own
layout and dtype (no host-side transposes or reshapes, so nothing outside the kernel goes
uncounted), and returns the program's outputs in order, in the input dtype.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from axon import suite
from axon.errors import InputError
from axon.targets.trainium.runner import InputSpec, RunReport, run

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class HandKernel:
    benchmark: str
    file: Path
    function: str
    technique: str  # one line; the file's docstring has the details
    multiples: tuple[tuple[str, int], ...] = ()  # (dimension, what it must be a multiple of)

    @property
    def spec(self) -> str:
        """`FILE.py:FUNC`, as the runner and `axon simulate` take it."""
        return f"{self.file}:{self.function}"

    def unsupported(self, sizes: dict[str, int]) -> str | None:
        """Why the kernel cannot run at `sizes`, or None if it can."""
        bad = [f"{d} % {k} == 0" for d, k in self.multiples if sizes.get(d, 0) % k]
        return f"{self.benchmark} hand kernel needs {', '.join(bad)} (sizes {sizes})" if bad else None

    def arguments(self, inputs: dict[str, Any]) -> dict[str, Any]:
        """Kernel arguments from the program's named inputs: the same names, unchanged."""
        return dict(inputs)


def _kernel(name: str, technique: str, *multiples: tuple[str, int]) -> HandKernel:
    return HandKernel(name, HERE / f"{name}.py", f"{name}_kernel", technique, tuple(multiples))


_MATMUL_DIMS = (("m", 128), ("k", 128), ("n", 512))

HAND_KERNELS: dict[str, HandKernel] = {k.benchmark: k for k in [
    _kernel("matmul", "x row tiles transposed on TensorE (4 per PSUM bank); x^T strip resident, w strip "
            "loaded once per strip; k accumulated in one PSUM bank per [128, 512] tile", *_MATMUL_DIMS),
    _kernel("transpose_matmul", "x is already lhsT: tutorial's fully-optimised blocking; x strip resident, "
            "w strip loaded once per strip; k accumulated in one PSUM bank per [128, 512] tile", *_MATMUL_DIMS),
    _kernel("rmsnorm_matmul", "matmul.py plus one ScalarE square+sum per row tile; rstd applied as the "
            "free activation scale when PSUM is copied out (diag(rstd) commutes with @ w)", *_MATMUL_DIMS),
    _kernel("rmsnorm", "128-row tiles; ScalarE activation_reduce (square, sum) then x*rstd as the free "
            "activation scale; VectorE multiplies by g (loaded once, broadcast)"),
    _kernel("softmax", "128-row tiles in groups; VectorE negated row max, ScalarE exp with -max as free "
            "bias and the row sum fused (activation_reduce), VectorE scale by 1/sum"),
    _kernel("layernorm", "128-row tiles in groups; ScalarE mean and exact two-pass variance (shift as "
            "free bias) via activation_reduce; VectorE (x-mean)*rstd; g, b on VectorE/GpSimd"),
    _kernel("cumsum", "128-row tiles, 4096-column chunks; VectorE tensor_tensor_scan (ones*prev + x) in "
            "fp32, seeded with the previous chunk's fp32 last column; ScalarE converts to bf16"),
    _kernel("rope", "all tensors viewed as 128 partitions of consecutive pairs (row tiles if 128 does "
            "not divide m*h); even/odd as stride-2 SBUF views; VectorE one output, GpSimd the other"),
]}


def _shapes(bench: suite.Benchmark, sizes: dict[str, int]) -> dict[str, tuple[int, ...]]:
    return {node.params.name: tuple(s.evaluate_int(sizes) for s in node.shape)
            for node in bench.program.graph.inputs}


def run_hand_kernel(benchmark_name: str, sizes: dict[str, int], dtype: str = "bfloat16",
                    target: str = "trn2", timing_only: bool = False, seed: int = 0) -> RunReport:
    """Simulate the hand-written kernel of a benchmark at `sizes` and estimate its latency.

    Unless `timing_only`, the inputs are seeded standard-normal data and the outputs are checked
    against the benchmark program's reference (`report.reference_ok`, within the per-element error
    bounds of the program's graph); data runs simulate every element, so keep them small."""
    if benchmark_name not in HAND_KERNELS:
        raise InputError(f"no hand-written kernel for {benchmark_name!r}; have {', '.join(HAND_KERNELS)}")
    hk = HAND_KERNELS[benchmark_name]
    bench = suite.get(benchmark_name)
    why = hk.unsupported(sizes)
    if why:
        raise InputError(why)
    if timing_only:
        inputs: dict[str, Any] = {n: InputSpec(s, dtype) for n, s in _shapes(bench, sizes).items()}
    else:
        inputs = bench.program.random_inputs(sizes, dtype=dtype, seed=seed)

    # the program itself is the reference: its graph gives the per-element error bounds
    return run(hk.spec, hk.arguments(inputs), target=target, timing_only=timing_only,
               reference=None if timing_only else bench.program, seed=seed)
