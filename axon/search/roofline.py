"""The roofline of a program at one case: the lower bound its kernels are measured against.

    roofline_ns = max(matmul FLOPs / the target's matmul peak at the case's dtype,
                      bytes of the program's inputs and outputs at the case's dtype / memory bandwidth)

It is a fact about the case (program, sizes, dtype, target), computed once per case and the same
for every candidate, the baseline and a hand-written kernel: a kernel that moves more bytes (spills
to HBM) or spends the matmul engine on transposes is slower against it, never given a more lenient
bound. The target supplies only its peak rates (`target.peaks(dtype)`, from its hardware
description); nothing here names a target.

What counts:
- FLOPs: 2 * M * N * K per matmul of the program as written (batch dimensions multiply M * N). A
  proved rewrite could in principle remove matmul work and let a kernel beat this bound (a fraction
  above 1 would show it); the suite's rewrites move element-wise work around matmuls and keep it.
- Element-wise and reduction operators: not counted as compute. The target's published peak is
  the matmul engine's; no rate bounds element-wise work from below without knowing how the
  instructions fuse it (one activation instruction computes exp(scale * x + bias), three
  operators), so a per-operator count would not be a lower bound. Their data is in the bytes term
  whenever it is a program input or output.
- Bytes: every input read once and every output written once, at the case's dtype: the compulsory
  traffic of any kernel that keeps its intermediates on chip.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from axon.ir import Graph
from axon.semantics.evaluate import dtype_named
from axon.semantics.ops import Op


@dataclass(frozen=True)
class Peaks:
    """A target's rates for the roofline, at one dtype."""

    matmul_flops_per_ns: float
    memory_bytes_per_ns: float


@dataclass(frozen=True)
class Roofline:
    flops: int
    bytes: int
    compute_ns: float
    memory_ns: float

    @property
    def ns(self) -> float:
        return max(self.compute_ns, self.memory_ns)


def _elements(shape, sizes: Mapping[str, int]) -> int:
    n = 1
    for d in shape:
        n *= d.evaluate_int(sizes)
    return n


def matmul_macs(graph: Graph, sizes: Mapping[str, int]) -> int:
    """Multiply-adds of the graph's matmuls at `sizes`: output elements times the contraction."""
    return sum(_elements(n.shape, sizes) * n.inputs[0].shape[-1].evaluate_int(sizes)
               for n in graph.nodes() if n.op is Op.MATMUL)


def io_bytes(graph: Graph, sizes: Mapping[str, int], dtype: str) -> int:
    """Bytes of the graph's inputs plus its (distinct) outputs, every element at `dtype`."""
    item = dtype_named(dtype).itemsize
    tensors = list(graph.inputs) + list(dict.fromkeys(graph.outputs))
    return sum(_elements(t.shape, sizes) for t in tensors) * item


def program_roofline(graph: Graph, sizes: Mapping[str, int], dtype: str, peaks: Peaks) -> Roofline:
    flops = 2 * matmul_macs(graph, sizes)
    nbytes = io_bytes(graph, sizes, dtype)
    return Roofline(flops=flops, bytes=nbytes, compute_ns=flops / peaks.matmul_flops_per_ns,
                    memory_ns=nbytes / peaks.memory_bytes_per_ns)
