"""Operand handling shared by every nki.isa instruction: engine names, operand checks (memory,
partition count and start, free size, initialisation), reading values as float32, scalar-or-column
operands, destination allocation for the beta-1 form, writing results, and the facts about input
and output accesses the performance model reads from a trace `Instruction`.

Invariant: an instruction reads its operands only through `read` (which refuses data that was
never written) and writes its result only through `finish` (which records the output facts on
the instruction and marks a fresh result with its producer so a store can retarget it).
"""
from __future__ import annotations

import math

import numpy as np

from axon.errors import KernelError
from axon.targets.trainium.trace import Engine, Memory

from . import dtypes, ops
from .indexing import mask_array
from .memory import Tile, alloc

F32 = np.float32
SBUF, PSUM, HBM = Memory.SBUF, Memory.PSUM, Memory.HBM


ENGINES = {"tensor": Engine.TENSOR, "vector": Engine.VECTOR, "scalar": Engine.SCALAR,
            "gpsimd": Engine.GPSIMD, "activation": Engine.SCALAR}


def engine_of(value, default: Engine) -> Engine:
    if value is None or value == "unknown":
        return default
    try:
        return ENGINES[getattr(value, "value", value)]
    except (KeyError, TypeError):
        raise KernelError(f"unknown engine {value!r}") from None


# ----- operand checks ------------------------------------------------------------------------

def as_tile(x, what: str, opcode: str) -> Tile:
    if not isinstance(x, Tile):
        raise KernelError(f"nisa.{opcode}: {what} must be a tile, got {type(x).__name__}")
    return x


def onchip(ctx, t: Tile, what: str, opcode: str, allowed=(SBUF, PSUM), mask=None) -> Tile:
    """An SBUF/PSUM operand. It may index past the end of its tile only where `mask` (an array of
    the operand's shape, for instructions whose mask selects input elements) is off."""
    as_tile(t, what, opcode)
    if t.buf.memory not in allowed:
        names = " or ".join(m.value.upper() for m in allowed)
        raise KernelError(f"nisa.{opcode}: {what} must be in {names}, "
                          f"got a {t.buf.memory.value.upper()} tensor")
    if t.has_oob() and (mask is None or (t.oob_mask() & mask).any()):
        raise KernelError(f"nisa.{opcode}: {what} indexes past the end of its tile")
    return t


def free_size(shape) -> int:
    n = len(shape)
    if n == 2:
        return shape[1]
    return math.prod(shape[1:]) if n > 2 else 1


def check_layout(ctx, t: Tile, opcode: str, what: str):
    """Partition count, partition start alignment, and free-size limits of one on-chip operand."""
    tiles = ctx.hw.tiles
    p0 = t.region().p_start
    n = t.shape[0] if t.shape else 1
    if n > tiles.pmax:
        raise KernelError(f"nisa.{opcode}: {what} spans {n} partitions, more than {tiles.pmax}")
    if n > 64 and p0 != 0:
        raise KernelError(f"nisa.{opcode}: {what} uses {n} partitions starting at partition {p0}; "
                          f"more than 64 partitions must start at 0")
    if 32 < n <= 64 and p0 not in (0, 64):
        raise KernelError(f"nisa.{opcode}: {what} uses {n} partitions starting at partition {p0}; "
                          f"33-64 partitions must start at 0 or 64")
    if n <= 32 and p0 not in (0, 32, 64, 96):
        raise KernelError(f"nisa.{opcode}: {what} starts at partition {p0}; "
                          f"a partition start must be 0, 32, 64 or 96")
    free = free_size(t.shape)
    limit = tiles.free_max_psum_elems if t.buf.memory is PSUM else tiles.free_max_sbuf_elems
    if free > limit:
        raise KernelError(f"nisa.{opcode}: {what} has {free} elements per partition, more than "
                          f"the {limit} allowed in {t.buf.memory.value.upper()}")


def check_init(t: Tile, opcode: str, what: str, mask=None):
    if t.buf.ctx.masked_off or (mask is not None and not mask.any()):
        return  # masked off everywhere: the instruction reads nothing
    if t.buf.ctx.reads_unwritten:
        return  # a check's kernel on part of its blocks: unwritten data flows on as NaN
    if t.buf.id in t.buf.ctx.holds_earlier_data:
        return  # explicitly placed over an earlier tensor: its data is there (language.Placement)
    if not t.buf.written:
        raise KernelError(f"nisa.{opcode} reads uninitialised {t.buf.memory.value.upper()} "
                          f"data: {what} was never written")
    ini = t.initialised()
    if ini is None:
        return
    if mask is not None and mask.shape == ini.shape:
        ini = ini[mask]
        if ini.size == 0:
            return
    if not ini.any():
        raise KernelError(f"nisa.{opcode} reads uninitialised {t.buf.memory.value.upper()} "
                          f"data: {what} was never written")


def holds_data(t: Tile, everywhere: bool) -> bool:
    """Whether `t` already holds written data (everywhere, or anywhere): what decides whether a
    matmul with `accumulate=None` adds to PSUM or overwrites it. Timing-only mode tracks
    initialisation per buffer, so there a tile holds data once its buffer was written; an
    untracked `initialised()` (None) must not be read as "all written" before that."""
    if t.buf.ctx.timing_only:
        return t.buf.written
    ini = t.initialised()
    if ini is None:
        return True
    return bool(ini.all()) if everywhere else bool(ini.any())


def read(ctx, t: Tile, opcode: str, what: str, mask=None, exact: bool = False):
    """(float32 values or None in timing-only mode, initialised-mask or None). `exact`: an
    integer tile's values as they are, for what treats them as bit patterns (bitvec operators, a
    copy to the same dtype): float32 holds integers exactly only up to 2^24."""
    check_init(t, opcode, what, mask)
    ini = t.initialised()
    if ctx.timing_only:
        t.buf.read_since_write = True
        return None, ini
    v = t.values()
    if v.dtype != F32 and not (exact and v.dtype.kind in "iu"):
        v = v.astype(F32)
    return v, ini


def and_init(*inits):
    out = None
    for i in inits:
        if i is None:
            continue
        out = i if out is None else (out & i)
    return out


def pcol(ctx, x, P: int, opcode: str, what: str, exact: bool = False):
    """A scalar, or a [P, 1] tile broadcast along the free axis: (values, init, tile or None);
    `exact` as for `read` (an integer immediate stays an integer)."""
    if isinstance(x, Tile):
        onchip(ctx, x, what, opcode)
        if x.shape[0] != P or free_size(x.shape) != 1:
            raise KernelError(f"nisa.{opcode}: {what} must be a scalar or a [{P}, 1] tile, "
                              f"got shape {x.shape}")
        v, ini = read(ctx, x, opcode, what, exact=exact)
        if v is not None:
            v = v.reshape(P, 1)
        return v, (None if ini is None else ini.reshape(P, 1)), x
    if exact and isinstance(x, (int, np.integer)) and not isinstance(x, bool):
        return np.int64(x), None, None
    if isinstance(x, (int, float, np.integer, np.floating)):
        return F32(x), None, None
    raise KernelError(f"nisa.{opcode}: {what} must be a scalar or a tile, got {type(x).__name__}")


def bcast_shape(v, shape):
    """Broadcast an operand of shape [P, 1...] or [P, free] onto `shape` (same element count)."""
    if v is None or np.ndim(v) == 0:
        return v
    if v.shape == tuple(shape):
        return v
    if v.size == math.prod(shape):
        return v.reshape(shape)
    return v.reshape((v.shape[0],) + (1,) * (len(shape) - 1))


def dst_tile(ctx, dst, shape, dtype, memory, opcode, mask=None):
    """The destination tile (allocating a fresh one for the beta-1 form)."""
    if dst is None:
        t = alloc(ctx, shape, dtype, memory, name=opcode)
        return t, True
    as_tile(dst, "dst", opcode)
    if dst.buf.memory is HBM:
        raise KernelError(f"nisa.{opcode}: dst must be in SBUF or PSUM (use dma_copy/nl.store for HBM)")
    if dst.has_oob() and mask is None:
        raise KernelError(f"nisa.{opcode}: dst indexes past the end of its tile")
    if free_size(dst.shape) != free_size(shape) or dst.shape[0] != shape[0]:
        raise KernelError(f"nisa.{opcode}: dst has shape {dst.shape}, the result has shape {tuple(shape)}")
    return dst, False


def finish(ctx, dst, fresh, vals, init, mask, ins):
    m = mask_array(mask, dst.shape) if mask is not None else None
    if vals is not None:
        vals = bcast_shape(np.asarray(vals), dst.shape) if np.ndim(vals) else vals
    if init is not None and init.shape != dst.shape:
        init = init.reshape(dst.shape) if init.size == math.prod(dst.shape) else np.broadcast_to(
            init.reshape((init.shape[0],) + (1,) * (len(dst.shape) - 1)), dst.shape)
    dst.write(vals, init, m)
    note_output(ins, dst)
    if fresh:
        dst.producer = ins
        dst.wmask = m
    return dst


def mask_of(mask, shape):
    return None if mask is None else mask_array(mask, shape)


def dtype_of(dst, dtype, default):
    if dst is not None:
        return dst.dtype
    return dtypes.to_dtype(dtype) if dtype is not None else default


def free_stride(t: Tile) -> int:
    """Bytes between consecutive elements of the innermost free dimension of an on-chip access
    (its element size when that dimension has one element; large for a gathered access)."""
    a = t.arr
    if a is None:
        return 1 << 30
    for n, st in zip(reversed(a.shape[1:]), reversed(a.strides[1:])):
        if n > 1:
            return abs(st)
    return a.itemsize


def src_extra(*tiles):
    """Facts about an instruction's input tiles for the performance model: whether one is in PSUM,
    whether all are contiguous along the free dimension (innermost stride one element) and the
    largest innermost stride in bytes (`note_output` adds the output's)."""
    ts = [t for t in tiles if isinstance(t, Tile)]
    strides = [free_stride(t) for t in ts]
    return {"src_psum": any(t.buf.memory is PSUM for t in ts),
            "contiguous": all(st == t.dtype.itemsize for st, t in zip(strides, ts)),
            "free_stride_bytes": max(strides, default=0)}


def note_output(ins, dst: Tile):
    """Record the output's dtype and innermost stride on a Vector/Scalar/GpSimd instruction (again
    when a result is retargeted to another tile: the output cast and the store access are its)."""
    if ins.engine in (Engine.VECTOR, Engine.SCALAR, Engine.GPSIMD):
        ins.extra["out_dtype"] = dst.dtype.name
        ins.extra["out_stride_bytes"] = free_stride(dst)


# ----- engine state and element-wise helpers ----------------------------------------------

def registers(ctx, kind: str):
    regs = getattr(ctx, kind, None)
    if regs is None:
        regs = np.zeros(ctx.hw.tiles.pmax, dtype=F32)
        setattr(ctx, kind, regs)
    return regs


def elementwise_operand(ctx, x, shape, opcode, what, m=None, exact: bool = False):
    t = onchip(ctx, x, what, opcode)
    if (t.shape[0] == shape[0] and len(t.shape) == len(shape) and t.shape != tuple(shape)
            and all(a in (1, b) for a, b in zip(t.shape[1:], shape[1:]))):
        # free axes of size 1 broadcast (a zero-stride access pattern)
        check_layout(ctx, t, opcode, what)
        v, ini = read(ctx, t, opcode, what, exact=exact)
        return (t, None if v is None else np.broadcast_to(v, shape),
                None if ini is None else np.broadcast_to(ini, shape))
    if t.shape[0] != shape[0] or free_size(t.shape) != free_size(shape):
        raise KernelError(f"nisa.{opcode}: {what} has shape {t.shape}, expected {tuple(shape)}")
    check_layout(ctx, t, opcode, what)
    v, ini = read(ctx, t, opcode, what, m if t.shape == tuple(shape) else None, exact=exact)
    return t, bcast_shape(v, shape), bcast_shape(ini, shape)


def integer_operands(opcode: str, fn, *tiles) -> None:
    """A bitvec operator reads bit patterns: its tile operands must hold integers [isa: "Supported
    Math Operators", bitvec operators expect integer data types]."""
    if fn is not None and fn.bitvec:
        for what, t in tiles:
            if isinstance(t, Tile) and t.dtype.kind not in "iu":
                raise KernelError(f"nisa.{opcode}: nl.{fn.name} treats elements as bit patterns and needs "
                                  f"integer operands; {what} is {t.dtype}")


def apply_op(fn, x, operand, reverse):
    return ops.apply_binary(fn, operand, x) if reverse else ops.apply_binary(fn, x, operand)


def norm_axes(axis, ndim, opc):
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    axes = tuple(sorted(a + ndim if a < 0 else a for a in axes))
    if not axes or 0 in axes:
        raise KernelError(f"nisa.{opc}: cannot reduce the partition axis 0 (use tensor_partition_reduce)")
    if len(set(axes)) != len(axes) or axes[-1] >= ndim:
        raise KernelError(f"nisa.{opc}: bad reduction axes {axes} for a {ndim}-D tile")
    return axes  # any free axes: the access pattern walks them innermost
