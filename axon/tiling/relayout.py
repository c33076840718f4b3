"""The copy kernel between two pieces of a partitioned program (fusion.kernels.Relayout).

Its input is a stored value read in one shape; its output is that value with the axes permuted.
The last axis stays last, so a row's elements stay contiguous: each DMA moves a tile of rows,
strided in the source and contiguous in the output, HBM to HBM, and no engine computes anything.
Nothing is synthesized or proved here: a permutation of elements, checked with the pipeline.
"""
from __future__ import annotations

from axon.errors import UnsupportedError


def relayout_kernel(name: str, shape: tuple[int, ...], perm: tuple[int, ...], emitter, partitions: int) -> str:
    """Kernel text: out = x.transpose(perm), x of `shape` (every axis but the last moves)."""
    rank = len(shape)
    if rank < 2 or perm[-1] != rank - 1 or sorted(perm) != list(range(rank)):
        raise UnsupportedError(f"relayout {perm} of a {shape} value: only axes before the last can move")
    out = [shape[p] for p in perm]
    cols = out[-1]
    # each DMA moves a [tile, cols] block along the output axis `along`: the longest one that
    # fits the partitions, so the fewest DMAs run
    along = max(range(rank - 1), key=lambda a: (_tile(out[a], partitions), a))
    tile = _tile(out[along], partitions)
    em = emitter
    em.begin(name, ["x"], [f"{name}: x{tuple(shape)} with its axes permuted by {perm}, giving {tuple(out)}: "
                           "a relayout between two of a program's kernels (HBM to HBM, no compute)."])
    em.line(f"assert tuple(x.shape) == {tuple(shape)}, f\"{name}: x has shape {{x.shape}}, expected {tuple(shape)}\"")
    em.hbm("out", out, "kernel", output=True)
    dst = [f"0:{cols}"] * rank
    loops = []
    for axis in range(rank - 1):
        size, step = out[axis], (tile if axis == along else 1)
        if size // step > 1:
            loops.append(em.loop(f"i_{axis}", size // step))
            loops[-1].__enter__()
        i = f"i_{axis}" if size // step > 1 else "0"
        dst[axis] = (f"{i} * {step}:{i} * {step} + {step}" if size // step > 1 else f"0:{step}") if axis == along else i
    src = [""] * rank
    for j, p in enumerate(perm):
        src[p] = dst[j]
    em.dma(f"out[{', '.join(dst)}]", f"x[{', '.join(src)}]")
    for ctx in loops[::-1]:
        ctx.__exit__(None, None, None)
    return em.finish(["out"])


def _tile(size: int, partitions: int) -> int:
    """The largest divisor of `size` that is at most `partitions`."""
    return max(d for d in range(1, min(size, partitions) + 1) if size % d == 0)
