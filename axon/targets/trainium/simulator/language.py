"""nki.language: allocation, loads/stores, element-wise math, reductions, matmul/transpose,
loops, and the tile operators (`t[...] = x`, `t[...] += y`, `a + b`).

Each function takes the `SimContext` first; loader.py binds them per simulation. Language-level
calls lower onto the nki.isa instructions in isa.py (one trace entry per hardware instruction):
unary math -> activation (Scalar Engine), binary math -> tensor_tensor / tensor_scalar,
reductions -> tensor_reduce, matmul -> [nc_transpose + tensor_copy] + nc_matmul.

Invariant: storing a fresh, unread instruction result into a tile (`t[...] = nl.exp(x)`,
`psum[...] += nisa.nc_matmul(a, b)`) moves that instruction's write instead of adding a copy.
"""
from __future__ import annotations

import math
import os
import numbers

import numpy as np

from axon.errors import KernelError
from axon.targets.trainium.trace import Engine, Memory

from . import dtypes, isa, operands, ops
from .indexing import IndexExpr, mask_array
from .memory import Tile, alloc

SBUF, PSUM, HBM = Memory.SBUF, Memory.PSUM, Memory.HBM


class BufferKind:
    """nl.sbuf, nl.psum, nl.hbm, nl.shared_hbm, nl.private_hbm."""

    def __init__(self, name: str, memory: Memory):
        self.name, self.memory = name, memory

    def __repr__(self):
        return f"nl.{self.name}"

    def __eq__(self, other):  # `tensor.buffer == nl.sbuf`: a tile's buffer is its memory's name
        if isinstance(other, str):
            return other == self.memory.value
        return self is other

    def __hash__(self):
        return hash(self.memory.value)


class Placement(BufferKind):
    """An explicit placement (`ncc.sbuf.mod_alloc(base_addr=...)`, `ncc.psum.mod_alloc(base_bank=...)`):
    the simulator still allocates each tensor itself, but a tensor placed where an earlier one of
    the same layout was placed (an allocation inside a loop) starts with that one's contents, as
    it is the same memory: reading data an earlier iteration left there is no error."""

    def __init__(self, kind: BufferKind, args: tuple, kwargs: dict):
        super().__init__(kind.name, kind.memory)
        self.key = (kind.memory, repr(args), repr(sorted(kwargs.items())))


BUFFERS = {"sbuf": BufferKind("sbuf", SBUF), "psum": BufferKind("psum", PSUM),
           "hbm": BufferKind("hbm", HBM), "shared_hbm": BufferKind("shared_hbm", HBM),
           "private_hbm": BufferKind("private_hbm", HBM)}


class par_dim(int):
    """nl.par_dim(n): marks the partition axis of a multi-block on-chip allocation."""

    def __new__(cls, n):
        return super().__new__(cls, int(n))


def _memory(buffer) -> Memory:
    if buffer is None:
        return SBUF
    if isinstance(buffer, BufferKind):
        return buffer.memory
    if isinstance(buffer, Memory):
        return buffer
    raise KernelError(f"unknown buffer {buffer!r} (use nl.sbuf, nl.psum or nl.shared_hbm)")


def _shape(shape):
    if isinstance(shape, numbers.Integral):
        shape = (shape,)
    shape = tuple(shape)
    pdims = [i for i, s in enumerate(shape) if isinstance(s, par_dim)]
    if len(pdims) > 1:
        raise KernelError("a tensor can have only one nl.par_dim")
    return tuple(int(s) for s in shape), (pdims[0] if pdims else None)


# ----- allocation ----------------------------------------------------------------------------

def ndarray(ctx, shape, dtype, buffer=None, name="", **_):
    shape, pdim = _shape(shape)
    mem = _memory(buffer)
    if mem is not HBM and len(shape) == 1:
        shape = shape + (1,)
    shared = mem is HBM and ctx.grid and getattr(buffer, "name", "") != "private_hbm"
    if shared and ctx.hbm_cursor < len(ctx.hbm_allocs):  # a later SPMD instance: the same tensor
        t = ctx.hbm_allocs[ctx.hbm_cursor]
        ctx.hbm_cursor += 1
        if t.shape != shape or t.dtype != dtypes.to_dtype(dtype):
            raise KernelError(f"SPMD instance {ctx.program_ids} allocates shared HBM tensor "
                              f"{shape} {dtype} where instance 0 allocated {t.shape} {t.dtype}")
        return t.buf.full_tile()
    t = alloc(ctx, shape, dtype, mem, name=name, pdim=pdim)
    if isinstance(buffer, Placement) and mem is not HBM:
        _take_over_placement(ctx, buffer.key, t.buf)
    if shared:
        ctx.hbm_allocs.append(t)
        ctx.hbm_cursor += 1
    return t


def _take_over_placement(ctx, key, buf):
    prev = ctx.placements.get(key)
    ctx.placements[key] = buf
    if prev is None or prev.storage.shape != buf.storage.shape or prev.dtype != buf.dtype:
        return
    if not prev.written and prev.id not in ctx.holds_earlier_data:
        return
    buf.storage[...] = prev.storage
    ctx.holds_earlier_data.add(buf.id)


def full(ctx, shape, fill_value, dtype, buffer=None, name="", **_):
    t = ndarray(ctx, shape, dtype, buffer, name)
    if t.buf.memory is HBM:
        raise KernelError("nl.zeros/ones/full allocate on-chip tiles (SBUF or PSUM)")
    if t.buf.pdim:  # blocks before the partition axis: one memset per block
        for idx in np.ndindex(*t.shape[:t.buf.pdim]):
            isa.memset(ctx, t.view(idx), fill_value, _api="nl.full")
    else:
        isa.memset(ctx, t, fill_value)
    return t


def zeros(ctx, shape, dtype, buffer=None, name="", **_):
    return full(ctx, shape, 0, dtype, buffer, name)


def ones(ctx, shape, dtype, buffer=None, name="", **_):
    return full(ctx, shape, 1, dtype, buffer, name)


def _like(ctx, t, dtype, buffer, fill):
    dtype = t.dtype if dtype is None else dtype
    buffer = buffer if buffer is not None else BUFFERS["sbuf" if t.buf.memory is not PSUM else "psum"]
    return ndarray(ctx, t.shape, dtype, buffer) if fill is None else full(ctx, t.shape, fill, dtype, buffer)


def empty_like(ctx, t, dtype=None, buffer=None, **_):
    return _like(ctx, t, dtype, buffer, None)


def zeros_like(ctx, t, dtype=None, buffer=None, **_):
    return _like(ctx, t, dtype, buffer, 0)


def ones_like(ctx, t, dtype=None, buffer=None, **_):
    return _like(ctx, t, dtype, buffer, 1)


def shared_identity_matrix(ctx, n, dtype=dtypes.float32, **_):
    t = ndarray(ctx, (n, n), dtype)
    i = np.arange(n)
    isa.iota(ctx, t, IndexExpr((i[:, None] == i[None, :]).astype(np.int64)))
    return t


# ----- DMA -----------------------------------------------------------------------------------

def load(ctx, src, mask=None, dtype=None, **_):
    if not isinstance(src, Tile):
        raise KernelError(f"nl.load expects an HBM tensor, got {type(src).__name__}")
    if src.buf.memory is not HBM:
        raise KernelError(f"nl.load reads HBM; the source is in {src.buf.memory.value.upper()}")
    shape = src.shape if len(src.shape) > 1 else src.shape + (1,)
    dst, _ = operands.dst_tile(ctx, None, shape, src.dtype, SBUF, "load")
    ins = isa.dma(ctx, dst, src, api="nl.load", mask=mask)
    dst.producer = ins
    dst.wmask = None if mask is None else mask_array(mask, dst.shape)
    if dtype is not None and dtypes.to_dtype(dtype) != src.dtype:
        return isa.tensor_copy(ctx, None, dst, dtype=dtype)
    return dst


def store(ctx, dst, value, mask=None, **_):
    if not isinstance(dst, Tile) or dst.buf.memory is not HBM:
        raise KernelError("nl.store writes to an HBM tensor")
    if not isinstance(value, Tile):
        raise KernelError(f"nl.store: value must be a tile, got {type(value).__name__}")
    isa.dma(ctx, dst, value, api="nl.store", mask=mask)


def load_transpose2d(ctx, src, mask=None, dtype=None, **_):
    return isa.dma_transpose(ctx, None, src, mask=mask)


# ----- element-wise math ---------------------------------------------------------------------

def _is_scalar(x):
    return isinstance(x, (numbers.Number, np.number)) and not isinstance(x, bool)


def _is_column(t: Tile, P: int):
    return t.shape[0] == P and operands.free_size(t.shape) == 1


def unary(ctx, op: ops.Op, x, dtype=None, mask=None, **_):
    if not isinstance(x, Tile):
        raise KernelError(f"nl.{op.name} expects a tile, got {type(x).__name__}")
    if op.name == "copy":
        return isa.tensor_copy(ctx, None, x, dtype=dtype, mask=mask)
    if op.name == "reciprocal":
        return isa.reciprocal(ctx, None, x, dtype=dtype, mask=mask)
    return isa.activation(ctx, None, op, x, dtype=dtype, mask=mask)


def binary(ctx, op: ops.Op, x, y, dtype=None, mask=None, dst=None, **_):
    xt, yt = isinstance(x, Tile), isinstance(y, Tile)
    if not xt and not yt:
        raise KernelError(f"nl.{op.name} needs at least one tile operand")
    if xt and not yt:
        if not _is_scalar(y):
            raise KernelError(f"nl.{op.name}: unsupported operand {type(y).__name__}")
        return isa.tensor_scalar(ctx, dst, x, op, y, dtype=dtype, mask=mask)
    if yt and not xt:
        if not _is_scalar(x):
            raise KernelError(f"nl.{op.name}: unsupported operand {type(x).__name__}")
        return isa.tensor_scalar(ctx, dst, y, op, x, reverse0=True, dtype=dtype, mask=mask)
    P = x.shape[0]
    same = y.shape[0] == P and operands.free_size(x.shape) == operands.free_size(y.shape)
    if same:
        if dtype is None and dst is None and x.dtype != y.dtype:
            dtype = _promote(x.dtype, y.dtype)
        return isa.tensor_tensor(ctx, dst, x, y, op, dtype=dtype, mask=mask)
    if y.shape[0] == P and len(x.shape) == len(y.shape) and not _is_column(y, P):
        try:
            full = np.broadcast_shapes(x.shape, y.shape)
        except ValueError:
            full = None
        if full is not None and full[0] == P:  # free axes of size 1 broadcast
            if full == x.shape:
                return isa.tensor_tensor(ctx, dst, x, y, op, dtype=dtype or (
                    _promote(x.dtype, y.dtype) if dst is None and x.dtype != y.dtype else None), mask=mask)
            if full == y.shape and op.name in _COMMUTATIVE:
                return binary(ctx, op, y, x, dtype, mask, dst)
    if y.shape[0] == P and _is_column(y, P):
        return isa.tensor_scalar(ctx, dst, x, op, y, dtype=dtype, mask=mask)
    if x.shape[0] == y.shape[0] and _is_column(x, P):
        return isa.tensor_scalar(ctx, dst, y, op, x, reverse0=True, dtype=dtype, mask=mask)
    if y.shape[0] == 1 and operands.free_size(y.shape) == operands.free_size(x.shape):
        return binary(ctx, op, x, broadcast_to(ctx, y, x.shape), dtype, mask, dst)
    if x.shape[0] == 1 and operands.free_size(y.shape) == operands.free_size(x.shape):
        return binary(ctx, op, broadcast_to(ctx, x, y.shape), y, dtype, mask, dst)
    full = _common_shape(x.shape, y.shape)
    if full is not None:  # shapes broadcastable to a common one [nl.add]: partitions first
        if y.shape[0] == 1 and full[0] != 1:
            return binary(ctx, op, x, broadcast_to(ctx, y, full[:1] + tuple(y.shape[1:])), dtype, mask, dst)
        if x.shape[0] == 1 and full[0] != 1:
            return binary(ctx, op, broadcast_to(ctx, x, full[:1] + tuple(x.shape[1:])), y, dtype, mask, dst)
        if full != tuple(x.shape):  # x broadcast along free axes (y's are zero-stride reads)
            return binary(ctx, op, broadcast_to(ctx, x, full), y, dtype, mask, dst)
    raise KernelError(f"nl.{op.name}: operand shapes {x.shape} and {y.shape} do not broadcast")


def _common_shape(a, b):
    if len(a) != len(b):
        return None
    try:
        return tuple(np.broadcast_shapes(tuple(a), tuple(b)))
    except ValueError:
        return None


_COMMUTATIVE = {"add", "multiply", "maximum", "minimum", "equal", "not_equal", "bitwise_and",
                "bitwise_or", "bitwise_xor", "logical_and", "logical_or", "logical_xor"}


def _promote(a, b):
    if dtypes.float32 in (a, b):
        return dtypes.float32
    return a if a.itemsize >= b.itemsize else b


def broadcast_to(ctx, x, shape, **_):
    """Partition broadcast of a [1, F] tile (or free broadcast of [P, 1]) to `shape`."""
    shape = tuple(shape)
    if x.shape == shape:
        return x
    out = operands.dst_tile(ctx, None, shape, x.dtype, SBUF, "broadcast")[0]
    if x.shape[0] not in (1, shape[0]):
        raise KernelError(f"cannot broadcast a tile of shape {x.shape} to {shape}")
    operands.check_init(x, "tensor_copy", "src")
    # A partition broadcast of one row runs on ScalarE where the compiler places it (the NKIBench
    # Mamba profile: ScalarE time for it, GpSimd idle; shared/fidelity.md); a free-axis one on VectorE.
    ins = ctx.emit("tensor_copy", Engine.SCALAR if x.shape[0] == 1 else Engine.VECTOR,
                   shape[0], operands.free_size(shape), x.dtype, (x.region(),), (out.region(),),
                   {"broadcast": True, **operands.src_extra(x)})
    # the source's free elements laid out as the target's ([1, F, 1] -> [1, F]), or one per partition
    if len(x.shape) == len(shape):
        src_shape = tuple(x.shape)
    elif operands.free_size(x.shape) == operands.free_size(shape):
        src_shape = (x.shape[0],) + shape[1:]
    else:
        src_shape = x.shape[:1] + (1,) * (len(shape) - 1)
    vals = None if ctx.timing_only else np.broadcast_to(x.values().reshape(src_shape), shape)
    ini = x.initialised()
    out.write(vals, None if ini is None else np.broadcast_to(ini.reshape(src_shape), shape), None)
    out.producer = ins
    return out


# ----- reductions ----------------------------------------------------------------------------

def reduce(ctx, op: ops.Op, x, axis, dtype=None, keepdims=False, mask=None, mean=False, **_):
    if not isinstance(x, Tile):
        raise KernelError(f"nl reduction expects a tile, got {type(x).__name__}")
    r = isa.tensor_reduce(ctx, None, op, x, axis, keepdims=keepdims, dtype=dtype, mask=mask)
    if mean:
        axes = operands.norm_axes(axis, len(x.shape), "tensor_reduce")
        n = math.prod(x.shape[a] for a in axes)
        r = isa.tensor_scalar(ctx, r, r, ops.OPS["multiply"], 1.0 / n)
    return r


# ----- Tensor Engine -------------------------------------------------------------------------

def matmul(ctx, x, y, transpose_x=False, mask=None, **_):
    if not transpose_x:  # x is [M, K]: bring K onto the partitions first
        xt = isa.nc_transpose(ctx, None, x)
        x = isa.tensor_copy(ctx, None, xt)
    return isa.nc_matmul(ctx, None, x, y, mask=mask)


def transpose(ctx, x, dtype=None, mask=None, **_):
    return isa.nc_transpose(ctx, None, x, dtype=dtype, mask=mask)


# ----- loops and misc ------------------------------------------------------------------------

def _range_args(args):
    if not args:
        raise KernelError("a range needs at least a stop value")
    for a in args:
        if not isinstance(a, numbers.Integral):
            raise KernelError(f"loop bounds must be Python ints, got {type(a).__name__}")
    return range(*args)


def affine_range(ctx, *args, **_):
    return ctx.loop(_range_args(args), False, "affine_range")


def sequential_range(ctx, *args, **_):
    return ctx.loop(_range_args(args), True, "sequential_range")


def static_range(ctx, *args, **_):
    return ctx.loop(_range_args(args), True, "static_range")


def program_id(ctx, axis=0, **_):
    """This SPMD instance's index along `axis` of the launch grid (0 outside a grid)."""
    grid, ids = getattr(ctx, "grid", ()), getattr(ctx, "program_ids", ())
    axis = int(axis)
    if axis < 0 or (grid and axis >= len(grid)):
        raise KernelError(f"nl.program_id({axis}): the launch grid has {len(grid) or 1} axis(es)")
    return ids[axis] if axis < len(ids) else 0


def num_programs(ctx, axes=None, **_):
    """Instances along `axes` of the launch grid (an int, or a tuple for several axes; all axes
    when None)."""
    grid = tuple(getattr(ctx, "grid", ())) or (1,)
    if axes is None:
        return math.prod(grid) if len(grid) > 1 else grid[0]
    if isinstance(axes, (tuple, list)):
        return tuple(grid[a] if a < len(grid) else 1 for a in axes)
    return grid[axes] if axes < len(grid) else 1


def program_ndim(ctx, **_):
    return len(getattr(ctx, "grid", ()))


def shared_constant(ctx, constant, dtype=None, **_):
    """nl.shared_constant: an HBM tensor holding `constant` (a NumPy array, or the path of an
    .npy file holding one, as kernels that build their constants on the host pass it)."""
    from .memory import wrap_array

    if isinstance(constant, (str, os.PathLike)):
        try:
            constant = np.load(constant, allow_pickle=False)
        except (OSError, ValueError) as err:
            raise KernelError(f"shared_constant: cannot load the array file {os.fspath(constant)!r}: {err}") from None
    arr = np.asarray(constant)
    if dtype is None and arr.dtype in (np.float64, np.int64):
        dtype = np.float32 if arr.dtype == np.float64 else np.int32
    arr = arr.astype(dtypes.to_dtype(dtype if dtype is not None else arr.dtype))
    return wrap_array(ctx, np.array(arr, copy=True), "shared_constant")


class LoopReduce:
    """What nl.loop_reduce(x, op, loop_indices) returns: assigned into a tile `dst`, it becomes
    `dst = op(dst, x)` (the destination is the other operand of the reduction), and `dst = x` on
    the reduction's first iteration (every loop index 0; without indices: while dst is unwritten)."""

    def __init__(self, x, op, dtype, mask, first=None):
        self.x, self.op, self.dtype, self.mask, self.first = x, op, dtype, mask, first


def loop_reduce(ctx, x, op, loop_indices=None, dtype=None, mask=None, **_):
    if not isinstance(x, Tile):
        raise KernelError(f"nl.loop_reduce expects a tile, got {type(x).__name__}")
    first = None
    if loop_indices is not None:
        idx = loop_indices if isinstance(loop_indices, (list, tuple)) else [loop_indices]
        first = all(isinstance(i, numbers.Integral) and int(i) == 0 for i in idx)
    return LoopReduce(x, ops.lookup(op, 2), dtype, mask, first)


class finfo:
    """nl.finfo(dtype): the dtype's limits (max, min, eps, tiny, bits)."""

    def __init__(self, dtype):
        import ml_dtypes

        dt = dtypes.to_dtype(dtype)
        info = np.finfo(dt) if dt.kind == "f" and dt.itemsize >= 2 and dt != dtypes.bfloat16 \
            else ml_dtypes.finfo(dt)
        self.dtype, self.bits = dt, info.bits
        self.max, self.min, self.eps = float(info.max), float(info.min), float(info.eps)
        self.tiny = float(info.tiny)
        self.smallest_normal = self.tiny


class iinfo:
    """nl.iinfo(dtype): an integer dtype's limits."""

    def __init__(self, dtype):
        info = np.iinfo(dtypes.to_dtype(dtype))
        self.dtype, self.bits, self.max, self.min = info.dtype, info.bits, int(info.max), int(info.min)


class NKIObject:
    """nki.language.NKIObject: base class of kernel dataclasses and configuration objects.

    NKI's default constructor takes every class attribute as a keyword with its class value as
    default, None where only annotated [NKI language guide, "classes"]: `x = None` without an
    annotation is a field too. So a subclass's plain data attributes are annotated here and
    missing defaults set to None before `@dataclass` (applied after the class body) reads them."""

    def __init_subclass__(cls, **kw):
        super().__init_subclass__(**kw)
        own = cls.__dict__.get("__annotations__", {})
        plain = [n for n, v in cls.__dict__.items() if n not in own and not n.startswith("_")
                 and not callable(v) and not hasattr(v, "__get__")]
        if plain:
            cls.__annotations__ = {**own, **{n: object for n in plain}}
        for n in own:
            if n not in cls.__dict__:
                setattr(cls, n, None)


def where(ctx, condition, x, y, dtype=None, mask=None, **_):
    """nl.where(condition, x, y): x where condition is true, else y (one Vector Engine select)."""
    if not isinstance(condition, Tile):
        raise KernelError("nl.where: the condition must be a tile")
    shape = condition.shape
    # x.shape and y.shape broadcast to the condition's [nl.where]: a one-partition operand is
    # broadcast across partitions first (as in nl.add); free axes of size 1 broadcast in the select
    x, y = (_partition_broadcast(ctx, t, shape) for t in (x, y))
    tiles = [t for t in (condition, x, y) if isinstance(t, Tile)]
    out, fresh = operands.dst_tile(ctx, None, shape, dtypes.to_dtype(dtype) if dtype is not None else
                                   next((t.dtype for t in (x, y) if isinstance(t, Tile)), dtypes.float32),
                                   SBUF, "select", mask)
    vals, inits = [], []
    for what, t in (("condition", condition), ("x", x), ("y", y)):
        if isinstance(t, Tile):
            _, v, ini = operands.elementwise_operand(ctx, t, shape, "select", what)
        else:
            v, ini = (None if ctx.timing_only else np.asarray(t, np.float32)), None
        vals.append(v)
        inits.append(ini)
    ins = ctx.emit("tensor_tensor", Engine.VECTOR, shape[0], operands.free_size(shape), condition.dtype,
                   tuple(t.region() for t in tiles), (out.region(),),
                   {**operands.src_extra(*tiles), "op": "select"})
    res = None if vals[0] is None else np.where(np.asarray(vals[0]) != 0, vals[1], vals[2]).astype(np.float32)
    return operands.finish(ctx, out, fresh, None if res is None else np.broadcast_to(res, shape),
                           operands.and_init(*inits), mask, ins)


def _partition_broadcast(ctx, t, shape):
    if not isinstance(t, Tile) or t.shape[0] != 1 or shape[0] == 1 or len(t.shape) != len(shape):
        return t
    return broadcast_to(ctx, t, (shape[0],) + tuple(t.shape[1:]))


def device_print(ctx, *args, **_):
    return None


class TileSize:
    def __init__(self, tiles, mem):
        self.pmax = tiles.pmax
        self.gemm_stationary_fmax = tiles.matmul_stationary_free_max
        self.gemm_moving_fmax = tiles.matmul_moving_free_max
        self.psum_fmax = mem.psum_bank_bytes // 4
        self.bn_stats_fmax = tiles.bn_stats_free_max
        self.psum_partition_bytes = mem.psum_bytes_per_partition
        self.sbuf_partition_bytes = mem.sbuf_bytes_per_partition
        # "usable SBUF free dimension per partition, in bytes" despite its name [nl.tile_size docs]
        self.total_available_sbuf_size = mem.sbuf_bytes_per_partition


# ----- tile operators ------------------------------------------------------------------------

def _can_retarget(value: Tile, dst: Tile) -> bool:
    ins = value.producer
    if ins is None or value.buf.read_since_write or value.arr is not value.buf.data:
        return False
    if value.shape[0] != dst.shape[0] or operands.free_size(value.shape) != operands.free_size(dst.shape) or dst.has_oob():
        return False
    if ins.opcode in ("dma_copy", "dma_transpose"):
        return value.dtype == dst.dtype
    if dst.buf.memory is HBM:
        return False
    if ins.opcode == "nc_matmul" or (ins.opcode == "nc_transpose" and ins.engine is Engine.TENSOR):
        return dst.buf.memory is PSUM
    return True


def _retarget(ctx, value: Tile, dst: Tile, accumulate=False):
    ins = value.producer
    old = value.region()
    if ins.engine is not Engine.DMA:
        operands.check_layout(ctx, dst, ins.opcode, "dst")
    new = dst.region()
    if ins.opcode == "nc_matmul":
        bank = ctx.hw.memory.psum_bank_bytes
        if new.b_start // bank != (new.b_stop - 1) // bank:
            raise KernelError(f"nisa.nc_matmul: the result ({new.b_stop - new.b_start} bytes per "
                              f"partition at offset {new.b_start}) must fit in one {bank}-byte PSUM bank")
    vals = None if ctx.timing_only else value.values().reshape(dst.shape)
    ini = value.initialised()
    ini = None if ini is None else ini.reshape(dst.shape)
    if accumulate:
        operands.check_init(dst, ins.opcode, "the accumulator")
        di = dst.initialised()
        if vals is not None:
            vals = dst.values().astype(np.float32) + vals
        ini = operands.and_init(ini, di)
        ins.reads = ins.reads + (new,)
        ins.extra["accumulate"] = True
    wmask = None if value.wmask is None else value.wmask.reshape(dst.shape)
    dst.write(vals, ini, wmask)
    ins.writes = tuple(new if w == old else w for w in ins.writes)
    operands.note_output(ins, dst)
    value.redirect(dst)


def assign(ctx, dst: Tile, value):
    """`dst[...] = value`"""
    if isinstance(value, LoopReduce):
        first = value.first if value.first is not None else not dst.buf.written
        if first:
            isa.tensor_copy(ctx, dst, value.x, dtype=value.dtype, mask=value.mask)
        else:
            binary(ctx, value.op, dst, value.x, dtype=value.dtype, mask=value.mask, dst=dst)
        return
    if isinstance(value, Tile):
        if value.iadd:
            value.iadd = False
            if value.buf is dst.buf and value.region() == dst.region():
                return  # the store half of `dst[...] += x`, already done in place
        if _can_retarget(value, dst):
            _retarget(ctx, value, dst)
        elif dst.buf.memory is HBM or value.buf.memory is HBM:
            isa.dma(ctx, dst, value, api="assignment")
        else:
            isa.tensor_copy(ctx, dst, value)
    elif _is_scalar(value):
        isa.memset(ctx, dst, value)
    elif isinstance(value, IndexExpr):
        isa.iota(ctx, dst, value)
    else:
        raise KernelError(f"cannot assign a {type(value).__name__} to a tile")


def iadd(ctx, target: Tile, value, op=None):
    """`target += value` (and -=, *=, ...): accumulates a fresh nc_matmul in PSUM for free."""
    op = op or ops.OPS["add"]
    if (op.name == "add" and isinstance(value, Tile) and value.producer is not None
            and value.producer.opcode == "nc_matmul" and target.buf.memory is PSUM
            and _can_retarget(value, target)):
        # the first matmul of an accumulation group into a never-written PSUM tile overwrites it
        _retarget(ctx, value, target, accumulate=operands.holds_data(target, everywhere=False))
    else:
        binary(ctx, op, target, value, dst=target)
    target.iadd = True
    return target


def _install_operators():
    O = ops.OPS

    def bin_(name, reverse=False):
        op = O[name]
        if reverse:
            return lambda self, other: binary(self.buf.ctx, op, other, self)
        return lambda self, other: binary(self.buf.ctx, op, self, other)

    def inplace(name):
        op = O[name]
        return lambda self, other: iadd(self.buf.ctx, self, other, op)

    for dunder, name in (("add", "add"), ("sub", "subtract"), ("mul", "multiply"),
                         ("truediv", "divide"), ("pow", "power"), ("and", "bitwise_and"),
                         ("or", "bitwise_or"), ("xor", "bitwise_xor"), ("mod", "mod")):
        setattr(Tile, f"__{dunder}__", bin_(name))
        setattr(Tile, f"__r{dunder}__", bin_(name, reverse=True))
        setattr(Tile, f"__i{dunder}__", inplace(name))
    for dunder, name in (("lt", "less"), ("le", "less_equal"), ("gt", "greater"),
                         ("ge", "greater_equal")):
        setattr(Tile, f"__{dunder}__", bin_(name))
    Tile.__neg__ = lambda self: unary(self.buf.ctx, O["negative"], self)
    Tile.__getitem__ = _view
    Tile.__setitem__ = lambda self, key, value: assign(self.buf.ctx, self.view(key), value)
    Tile.broadcast_to = lambda self, shape: broadcast_to(self.buf.ctx, self, shape)
    Tile.__array__ = _no_array


def _view(self, key):
    """`t[key]`; an integer tile in the key (indirect addressing: a gather DMA's row offsets)
    indexes with its values, as an index expression of the tile's shape."""
    parts = key if isinstance(key, tuple) else (key,)
    if any(isinstance(k, Tile) for k in parts):
        parts = tuple(_index_tile(self.buf.ctx, k) if isinstance(k, Tile) else k for k in parts)
        key = parts if isinstance(key, tuple) else parts[0]
    return self.view(key)


def _index_tile(ctx, t: Tile) -> IndexExpr:
    if t.dtype.kind not in "iu":
        raise KernelError(f"an index tile must hold integers, got {t.dtype}")
    if t.buf.memory is HBM:
        raise KernelError("an index tile must be on chip (SBUF)")
    if ctx.timing_only:  # no data: the first row stands for every offset
        return IndexExpr(np.zeros(t.shape, dtype=np.int64))
    operands.check_init(t, "indirect index", "the index tile")
    return IndexExpr(np.asarray(t.values(), dtype=np.int64))


def _no_array(self, *a, **k):
    raise KernelError("a tile cannot be turned into a NumPy array inside a kernel")


_install_operators()
