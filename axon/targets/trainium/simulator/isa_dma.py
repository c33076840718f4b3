"""nki.isa DMA instructions: dma_copy and dma_transpose, and the one `dma` transfer that
nl.load / nl.store and tile assignments across HBM also lower onto.

Invariant: a DMA never reads out of bounds or uninitialised data (masked-off elements aside) and
never stores uninitialised data to HBM; every transfer records its bytes (and HBM bytes) on its
trace `Instruction`.
"""
from __future__ import annotations

import math

from axon.errors import KernelError
from axon.targets.trainium.trace import Engine

from . import dtypes
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


def dma(ctx, dst, src, opcode="dma_copy", api="nisa.dma_copy", mask=None, transpose=False):
    """One DMA transfer dst <- src (both are views; either may be in HBM, SBUF or PSUM)."""
    as_tile(src, "src", opcode)
    as_tile(dst, "dst", opcode)
    expect = tuple(reversed(src.shape)) if transpose else src.shape
    if math.prod(dst.shape) != math.prod(expect) or (transpose and len(src.shape) != 2):
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
    if dst.buf.memory is HBM and ini is not None:
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
                    "transpose": transpose},
                   dma_bytes=nbytes, hbm_bytes=hbm)
    vals = None
    if not ctx.timing_only:
        vals = src.values()
        vals = vals.T if transpose else vals.reshape(dst.shape) if vals.shape != dst.shape else vals
    else:
        src.buf.read_since_write = True
    if ini is not None:
        ini = ini.T if transpose else ini.reshape(dst.shape)
    if vals is not None and vals.dtype != dst.dtype:
        if dst.buf.memory is HBM or src.buf.memory is HBM:
            if not (dtypes.is_float(vals.dtype) and dtypes.is_float(dst.dtype)):
                raise KernelError(f"{api}: cannot convert {vals.dtype.name} to {dst.dtype.name} during a DMA")
    dst.write(vals, ini, m)
    return ins


def dma_copy(ctx, dst, src, mask=None, dge_mode=None, oob_mode=None, name=None, **_):
    dma(ctx, dst, src, mask=mask)
    return dst


def dma_transpose(ctx, dst, src, axes=None, mask=None, dge_mode=None, name=None, **_):
    if dst is None:
        if len(src.shape) != 2:
            raise KernelError("nisa.dma_transpose: src must be 2-D")
        dst, _ = dst_tile(ctx, None, tuple(reversed(src.shape)), src.dtype, SBUF, "dma_transpose")
    dma(ctx, dst, src, "dma_transpose", "nisa.dma_transpose", mask, transpose=True)
    return dst


# Beta-1 positional arity: a current-API call passes one more positional argument (dst).
