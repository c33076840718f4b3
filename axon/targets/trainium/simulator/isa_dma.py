"""nki.isa DMA instructions: dma_copy and dma_transpose, and the one `dma` transfer that
nl.load / nl.store and tile assignments across HBM also lower onto.

Invariant: a DMA never reads out of bounds or uninitialised data (masked-off elements aside) and
never stores uninitialised data to HBM; every transfer records its bytes (and HBM bytes) on its
trace `Instruction`.
"""
from __future__ import annotations

import math

import numpy as np

from axon.errors import KernelError
from axon.targets.trainium.trace import Engine

from . import ops
from .indexing import mask_array
from .memory import Tile
from .operands import HBM, SBUF, as_tile, check_init, dst_tile, free_size


def _contiguous_bytes(t: Tile) -> int:
    """Bytes of the innermost contiguous run of an access (DMA efficiency depends on it)."""
    a = t.arr if t.arr is not None else t.buf.data
    run = a.itemsize
    for n, s in zip(reversed(a.shape), reversed(a.strides)):
        if n == 1:
            continue
        if s != run:
            break
        run *= n
    return run


def dma(ctx, dst, src, opcode="dma_copy", api="nisa.dma_copy", mask=None, transpose=None):
    """One DMA transfer dst <- src (both are views; either may be in HBM, SBUF or PSUM);
    `transpose`: the permutation of src's axes that dst holds (dst axis i is src axis perm[i])."""
    as_tile(src, "src", opcode)
    as_tile(dst, "dst", opcode)
    expect = tuple(src.shape[a] for a in transpose) if transpose else src.shape
    if math.prod(dst.shape) != math.prod(expect) or (transpose and dst.shape != expect):
        raise KernelError(f"{api}: dst has shape {dst.shape}, src has shape {src.shape}")
    for t, what in ((src, "src"), (dst, "dst")):
        if t.buf.memory is not HBM:
            n = t.shape[0]
            if n > ctx.hw.tiles.pmax:
                raise KernelError(f"{api}: {what} spans {n} partitions, more than {ctx.hw.tiles.pmax}")
    m = mask_array(mask, dst.shape) if mask is not None else None
    src_oob = src.oob_mask()
    if src_oob is not None:
        bad = src_oob if m is None else (src_oob & (m if src.shape == dst.shape else True))
        if bad.any():
            raise KernelError(f"{api} reads out of bounds of a {src.buf.memory.value.upper()} tensor "
                              f"of shape {src.buf.data.shape} (mask those elements off)")
    check_init(src, opcode, "src", m if src.shape == dst.shape else None)
    ini = src.initialised()
    if dst.buf.memory is HBM and ini is not None and not ctx.reads_unwritten:
        sel = ini if m is None or ini.shape != m.shape else (ini | ~m)
        if not sel.all():
            raise KernelError(f"{api} stores uninitialised data to HBM "
                              f"({int((~sel).sum())} elements were never written)")
    nbytes = (math.prod(dst.shape) if m is None else int(m.sum())) * src.dtype.itemsize
    hbm = nbytes * ((src.buf.memory is HBM) + (dst.buf.memory is HBM))
    srcreg, dstreg = src.region(), dst.region()
    part = dst.shape[0] if dst.buf.memory is not HBM else (src.shape[0] if src.shape else 1)
    ins = ctx.emit(opcode, Engine.DMA, part, free_size(dst.shape), src.dtype, (srcreg,), (dstreg,),
                   {"api": api, "src": src.buf.memory.value, "dst": dst.buf.memory.value,
                    "chunk_bytes": _contiguous_bytes(src if src.buf.memory is HBM else dst),
                    "transpose": bool(transpose)},
                   dma_bytes=nbytes, hbm_bytes=hbm)
    vals = None
    if not ctx.timing_only:
        vals = src.values()
        vals = vals.transpose(transpose) if transpose else vals.reshape(dst.shape) if vals.shape != dst.shape else vals
    else:
        src.buf.read_since_write = True
    if ini is not None:
        ini = ini.transpose(transpose) if transpose else ini.reshape(dst.shape)
    # A DMA between different dtypes casts (through float32 in the DMA engine) [nki.isa.dma_copy,
    # nki.isa.dma_compute docs]: dst.write converts, integers from floats by truncation.
    dst.write(vals, ini, m)
    return ins


def dma_copy(ctx, dst, src, mask=None, dge_mode=None, oob_mode=None, name=None, **_):
    dma(ctx, dst, src, mask=mask)
    return dst


def dma_compute(ctx, dst, srcs, reduce_op=None, scales=None, unique_indices=True, oob_mode=None,
                name=None, **_):
    """dst = reduce_op(srcs[0] * scales[0], srcs[1] * scales[1], ...) computed in float32 inside a
    DMA engine and rounded to dst's dtype; reduce_op must be nl.add and every scale 1.0
    [nki.isa.dma_compute docs]. One DMA that reads every source."""
    api = "nisa.dma_compute"
    as_tile(dst, "dst", "dma_compute")
    if not isinstance(srcs, (list, tuple)) or not srcs:
        raise KernelError(f"{api}: srcs must be a non-empty list of tensors")
    for i, src in enumerate(srcs):
        as_tile(src, f"srcs[{i}]", "dma_compute")
        if math.prod(src.shape) != math.prod(dst.shape):
            raise KernelError(f"{api}: dst has shape {dst.shape}, srcs[{i}] has shape {src.shape}")
        if src.has_oob():
            raise KernelError(f"{api}: srcs[{i}] reads out of bounds of its tensor")
        check_init(src, "dma_compute", f"srcs[{i}]", None)
    if reduce_op is None or ops.lookup(reduce_op, 2).name != "add":
        raise KernelError(f"{api}: reduce_op must be nl.add (the only reduction DMA engines compute)")
    if scales is not None and (len(scales) != len(srcs) or any(float(c) != 1.0 for c in scales)):
        raise KernelError(f"{api}: scales must be one 1.0 per source (the only scale DMA engines apply)")
    src_bytes = sum(math.prod(s.shape) * s.dtype.itemsize for s in srcs)
    dst_bytes = math.prod(dst.shape) * dst.dtype.itemsize
    hbm = sum(math.prod(s.shape) * s.dtype.itemsize for s in srcs if s.buf.memory is HBM)
    hbm += dst_bytes if dst.buf.memory is HBM else 0
    ctx.emit("dma_compute", Engine.DMA, dst.shape[0] if dst.buf.memory is not HBM else srcs[0].shape[0],
             free_size(dst.shape), dst.dtype, tuple(s.region() for s in srcs), (dst.region(),),
             {"api": api, "src": srcs[0].buf.memory.value, "dst": dst.buf.memory.value,
              "chunk_bytes": _contiguous_bytes(dst if dst.buf.memory is HBM else srcs[0]),
              "transpose": False}, dma_bytes=src_bytes + dst_bytes, hbm_bytes=hbm)
    vals = None
    if not ctx.timing_only:
        vals = sum(np.asarray(s.values(), np.float32).reshape(dst.shape) for s in srcs)
    else:
        for s in srcs:
            s.buf.read_since_write = True
    dst.write(vals, None, None)
    return dst


# The permutations a DMA transpose performs, by rank of src: the only ones `axes` may name
# [nki.isa.dma_transpose docs].
_DMA_TRANSPOSES = {2: (1, 0), 3: (2, 1, 0), 4: (3, 1, 2, 0)}


def dma_transpose(ctx, dst, src, axes=None, mask=None, dge_mode=None, name=None, **_):
    as_tile(src, "src", "dma_transpose")
    perm = _DMA_TRANSPOSES.get(len(src.shape))
    if perm is None:
        raise KernelError(f"nisa.dma_transpose: src must be 2-D, 3-D or 4-D, got shape {src.shape}")
    if axes is not None and tuple(axes) != perm:
        raise KernelError(f"nisa.dma_transpose: axes {tuple(axes)} on a {len(src.shape)}-D src; "
                          f"the DMA engine transposes only as {perm}")
    if dst is None:
        dst, _ = dst_tile(ctx, None, tuple(src.shape[a] for a in perm), src.dtype, SBUF, "dma_transpose")
    dma(ctx, dst, src, "dma_transpose", "nisa.dma_transpose", mask, transpose=perm)
    return dst


# Beta-1 positional arity: a current-API call passes one more positional argument (dst).
