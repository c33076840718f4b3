"""nki.isa: one function per hardware instruction, written once in the current (dst-first) form.

Each instruction checks its hardware rules (memories, partition count and start, free sizes,
PSUM banks), records one trace `Instruction`, and, unless the simulation is timing-only,
computes its result in float32 and rounds it to the destination dtype. The beta-1 form
(instructions returning a fresh tile) calls the same function with `dst=None`.

Invariant: a fresh result tile returned by an instruction remembers its producer, so
`t[...] = nisa.x(...)` and `psum[...] += nisa.nc_matmul(...)` retarget that one instruction
instead of issuing a copy (see language.assign / language.iadd).
"""
from __future__ import annotations

import math
import weakref

import numpy as np

from axon.errors import KernelError
from axon.targets.trainium.trace import Engine, Memory

from . import dtypes, ops
from .indexing import IndexExpr, mask_array
from .memory import Tile, alloc

F32 = np.float32
SBUF, PSUM, HBM = Memory.SBUF, Memory.PSUM, Memory.HBM


class reduce_cmd:  # nisa.reduce_cmd
    idle, reset, reduce, reset_reduce, load_reduce = "idle", "reset", "reduce", "reset_reduce", "load_reduce"


class engine:  # nisa.engine
    tensor, vector, scalar, gpsimd, activation, unknown = "tensor", "vector", "scalar", "gpsimd", "scalar", "unknown"


class dge_mode:  # nisa.dge_mode
    unknown, swdge, hwdge, none = "unknown", "swdge", "hwdge", "none"


_ENGINES = {"tensor": Engine.TENSOR, "vector": Engine.VECTOR, "scalar": Engine.SCALAR,
            "gpsimd": Engine.GPSIMD, "activation": Engine.SCALAR}


def _engine(value, default: Engine) -> Engine:
    if value is None or value == "unknown":
        return default
    try:
        return _ENGINES[getattr(value, "value", value)]
    except (KeyError, TypeError):
        raise KernelError(f"unknown engine {value!r}") from None


# ----- operand checks ------------------------------------------------------------------------

def _tile(x, what: str, opcode: str) -> Tile:
    if not isinstance(x, Tile):
        raise KernelError(f"nisa.{opcode}: {what} must be a tile, got {type(x).__name__}")
    return x


def _onchip(ctx, t: Tile, what: str, opcode: str, allowed=(SBUF, PSUM)) -> Tile:
    _tile(t, what, opcode)
    if t.buf.memory not in allowed:
        names = " or ".join(m.value.upper() for m in allowed)
        raise KernelError(f"nisa.{opcode}: {what} must be in {names}, "
                          f"got a {t.buf.memory.value.upper()} tensor")
    if t.has_oob():
        raise KernelError(f"nisa.{opcode}: {what} indexes past the end of its tile")
    return t


def _free(shape) -> int:
    n = len(shape)
    if n == 2:
        return shape[1]
    return math.prod(shape[1:]) if n > 2 else 1


def _check_layout(ctx, t: Tile, opcode: str, what: str):
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
    free = _free(t.shape)
    limit = tiles.free_max_psum_elems if t.buf.memory is PSUM else tiles.free_max_sbuf_elems
    if free > limit:
        raise KernelError(f"nisa.{opcode}: {what} has {free} elements per partition, more than "
                          f"the {limit} allowed in {t.buf.memory.value.upper()}")


def _check_init(t: Tile, opcode: str, what: str, mask=None):
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


def _read(ctx, t: Tile, opcode: str, what: str, mask=None):
    """(float32 values or None in timing-only mode, initialised-mask or None)."""
    _check_init(t, opcode, what, mask)
    ini = t.initialised()
    if ctx.timing_only:
        t.buf.read_since_write = True
        return None, ini
    v = t.values()
    if v.dtype != F32:
        v = v.astype(F32)
    return v, ini


def _and(*inits):
    out = None
    for i in inits:
        if i is None:
            continue
        out = i if out is None else (out & i)
    return out


def _pcol(ctx, x, P: int, opcode: str, what: str):
    """A scalar, or a [P, 1] tile broadcast along the free axis: (values, init, tile or None)."""
    if isinstance(x, Tile):
        _onchip(ctx, x, what, opcode)
        if x.shape[0] != P or _free(x.shape) != 1:
            raise KernelError(f"nisa.{opcode}: {what} must be a scalar or a [{P}, 1] tile, "
                              f"got shape {x.shape}")
        v, ini = _read(ctx, x, opcode, what)
        if v is not None:
            v = v.reshape(P, 1)
        return v, (None if ini is None else ini.reshape(P, 1)), x
    if isinstance(x, (int, float, np.integer, np.floating)):
        return F32(x), None, None
    raise KernelError(f"nisa.{opcode}: {what} must be a scalar or a tile, got {type(x).__name__}")


def _bcast_shape(v, shape):
    """Broadcast an operand of shape [P, 1...] or [P, free] onto `shape` (same element count)."""
    if v is None or np.ndim(v) == 0:
        return v
    if v.shape == tuple(shape):
        return v
    if v.size == math.prod(shape):
        return v.reshape(shape)
    return v.reshape((v.shape[0],) + (1,) * (len(shape) - 1))


def _dst(ctx, dst, shape, dtype, memory, opcode, mask=None):
    """The destination tile (allocating a fresh one for the beta-1 form)."""
    if dst is None:
        # Charged when the next instruction issues, unless stored in place before that.
        t = alloc(ctx, shape, dtype, memory, name=opcode, charge=False)
        ctx.add_pending(weakref.ref(t.buf))
        return t, True
    _tile(dst, "dst", opcode)
    if dst.buf.memory is HBM:
        raise KernelError(f"nisa.{opcode}: dst must be in SBUF or PSUM (use dma_copy/nl.store for HBM)")
    if dst.has_oob() and mask is None:
        raise KernelError(f"nisa.{opcode}: dst indexes past the end of its tile")
    if _free(dst.shape) != _free(shape) or dst.shape[0] != shape[0]:
        raise KernelError(f"nisa.{opcode}: dst has shape {dst.shape}, the result has shape {tuple(shape)}")
    return dst, False


def _finish(ctx, dst, fresh, vals, init, mask, ins):
    m = mask_array(mask, dst.shape) if mask is not None else None
    if vals is not None:
        vals = _bcast_shape(np.asarray(vals), dst.shape) if np.ndim(vals) else vals
    if init is not None and init.shape != dst.shape:
        init = init.reshape(dst.shape) if init.size == math.prod(dst.shape) else np.broadcast_to(
            init.reshape((init.shape[0],) + (1,) * (len(dst.shape) - 1)), dst.shape)
    dst.write(vals, init, m)
    _note_output(ins, dst)
    if fresh:
        dst.producer = ins
        dst.wmask = m
    return dst


def _mask(mask, shape):
    return None if mask is None else mask_array(mask, shape)


def _dtype_of(dst, dtype, default):
    if dst is not None:
        return dst.dtype
    return dtypes.to_dtype(dtype) if dtype is not None else default


def _free_stride(t: Tile) -> int:
    """Bytes between consecutive elements of the innermost free dimension of an on-chip access
    (its element size when that dimension has one element; large for a gathered access)."""
    a = t.arr
    if a is None:
        return 1 << 30
    for n, st in zip(reversed(a.shape[1:]), reversed(a.strides[1:])):
        if n > 1:
            return abs(st)
    return a.itemsize


def _src_extra(*tiles):
    """Facts about an instruction's input tiles for the performance model: whether one is in PSUM,
    whether all are contiguous along the free dimension (innermost stride one element) and the
    largest innermost stride in bytes (`_note_output` adds the output's)."""
    ts = [t for t in tiles if isinstance(t, Tile)]
    strides = [_free_stride(t) for t in ts]
    return {"src_psum": any(t.buf.memory is PSUM for t in ts),
            "contiguous": all(st == t.dtype.itemsize for st, t in zip(strides, ts)),
            "free_stride_bytes": max(strides, default=0)}


def _note_output(ins, dst: Tile):
    """Record the output's dtype and innermost stride on a Vector/Scalar/GpSimd instruction (again
    when a result is retargeted to another tile: the output cast and the store access are its)."""
    if ins.engine in (Engine.VECTOR, Engine.SCALAR, Engine.GPSIMD):
        ins.extra["out_dtype"] = dst.dtype.name
        ins.extra["out_stride_bytes"] = _free_stride(dst)


# ----- Tensor Engine -------------------------------------------------------------------------

def nc_matmul(ctx, dst, stationary, moving, is_stationary_onezero=False, is_moving_onezero=False,
              is_transpose=False, accumulate=None, tile_position=(), tile_size=(), perf_mode=None,
              mask=None, name=None, **_):
    op = "nc_matmul"
    st = _onchip(ctx, stationary, "stationary", op, (SBUF,))
    mv = _onchip(ctx, moving, "moving", op, (SBUF,))
    if is_transpose:
        raise KernelError("nisa.nc_matmul(is_transpose=True) is not supported; use nisa.nc_transpose")
    tiles = ctx.hw.tiles
    K, M, N = st.shape[0], _free(st.shape), _free(mv.shape)
    if mv.shape[0] != K:
        raise KernelError(f"nisa.nc_matmul: stationary and moving must have the same partition "
                          f"(contraction) size, got {K} and {mv.shape[0]}")
    if K > tiles.matmul_contraction_max:
        raise KernelError(f"nisa.nc_matmul: contraction size {K} exceeds {tiles.matmul_contraction_max}")
    if M > tiles.matmul_stationary_free_max:
        raise KernelError(f"nisa.nc_matmul: stationary free size {M} exceeds "
                          f"{tiles.matmul_stationary_free_max}")
    if N > tiles.matmul_moving_free_max:
        raise KernelError(f"nisa.nc_matmul: moving free size {N} exceeds {tiles.matmul_moving_free_max}")
    _check_layout(ctx, st, op, "stationary")
    _check_layout(ctx, mv, op, "moving")
    if dst is not None:
        _tile(dst, "dst", op)
        if dst.buf.memory is not PSUM:
            raise KernelError(f"nisa.nc_matmul: the result must go to PSUM, dst is in "
                              f"{dst.buf.memory.value.upper()}")
    out, fresh = _dst(ctx, dst, (M, N), dtypes.float32, PSUM, op, mask)
    _check_layout(ctx, out, op, "dst")
    reg = out.region()
    bank = ctx.hw.memory.psum_bank_bytes
    if reg.b_start // bank != (reg.b_stop - 1) // bank:
        raise KernelError(f"nisa.nc_matmul: the result ({reg.b_stop - reg.b_start} bytes per "
                          f"partition at offset {reg.b_start}) must fit in one {bank}-byte PSUM bank")
    if accumulate is None:  # the first matmul into a PSUM location overwrites, later ones add
        ini = out.initialised()
        accumulate = not fresh and (ini is None or bool(ini.all()))
    sv, si = _read(ctx, st, op, "stationary")
    mvv, mi = _read(ctx, mv, op, "moving")
    reads = (st.region(), mv.region()) + ((reg,) if accumulate else ())
    ins = ctx.emit(op, Engine.TENSOR, K, N, mv.dtype, reads, (reg,),
                   {"stationary_free": M, "moving_free": N, "contraction": K,
                    "accumulate": bool(accumulate)})
    init = None
    if si is not None or mi is not None:
        s_ok = np.ones(M, bool) if si is None else si.reshape(K, M).all(axis=0)
        m_ok = np.ones(N, bool) if mi is None else mi.reshape(K, N).all(axis=0)
        init = s_ok[:, None] & m_ok[None, :]
    vals = None
    if sv is not None:
        vals = sv.reshape(K, M).T @ mvv.reshape(K, N)
    if accumulate:
        old, oi = _read(ctx, out, op, "dst")
        if vals is not None:
            vals = old.reshape(M, N) + vals
        init = _and(init, None if oi is None else oi.reshape(M, N))
    return _finish(ctx, out, fresh, vals, init, mask, ins)


def nc_transpose(ctx, dst, data, engine=None, mask=None, dtype=None, name=None, **_):
    op = "nc_transpose"
    src = _onchip(ctx, data, "data", op)
    if len(src.shape) != 2:
        raise KernelError(f"nisa.nc_transpose: data must be 2-D, got shape {src.shape}")
    P, F = src.shape
    default = Engine.TENSOR if (dst is None or dst.buf.memory is PSUM) else Engine.VECTOR
    eng = _engine(engine, default)
    if eng is Engine.TENSOR:
        if F > ctx.hw.tiles.pmax:
            raise KernelError(f"nisa.nc_transpose: free size {F} exceeds {ctx.hw.tiles.pmax} on the Tensor Engine")
        if src.buf.memory is not SBUF:
            raise KernelError("nisa.nc_transpose: the Tensor Engine reads its input from SBUF")
        mem = PSUM
    else:
        if P > 32 or F > 32:
            raise KernelError(f"nisa.nc_transpose: the Vector Engine transposes at most 32x32, got {P}x{F}")
        mem = SBUF
    _check_layout(ctx, src, op, "data")
    out, fresh = _dst(ctx, dst, (F, P), _dtype_of(dst, dtype, src.dtype), mem, op, mask)
    if eng is Engine.TENSOR and out.buf.memory is not PSUM:
        raise KernelError("nisa.nc_transpose: the Tensor Engine writes its result to PSUM")
    _check_layout(ctx, out, op, "dst")
    v, ini = _read(ctx, src, op, "data")
    ins = ctx.emit(op, eng, P, F, src.dtype, (src.region(),), (out.region(),),
                   {"stationary_free": P, "moving_free": P, "contraction": P} if eng is Engine.TENSOR else None)
    return _finish(ctx, out, fresh, None if v is None else v.T, None if ini is None else ini.T, mask, ins)


# ----- Scalar Engine -------------------------------------------------------------------------

def _regs(ctx, kind: str):
    regs = getattr(ctx, kind, None)
    if regs is None:
        regs = np.zeros(ctx.hw.tiles.pmax, dtype=F32)
        setattr(ctx, kind, regs)
    return regs


def activation(ctx, dst, op, data, bias=None, scale=1.0, reduce_op=None, reduce_res=None,
               reduce_cmd="idle", mask=None, dtype=None, name=None, _opcode="activation", **_):
    opname = _opcode
    fn = ops.lookup(op, 1)
    src = _onchip(ctx, data, "data", opname)
    P, shape = src.shape[0], src.shape
    _check_layout(ctx, src, opname, "data")
    out, fresh = _dst(ctx, dst, shape, _dtype_of(dst, dtype, src.dtype), SBUF, opname, mask)
    _check_layout(ctx, out, opname, "dst")
    m = _mask(mask, shape)
    v, ini = _read(ctx, src, opname, "data", m)
    sv, si, st = _pcol(ctx, scale, P, opname, "scale")
    reads = [src.region()]
    bv, bi, bt = (None, None, None)
    if bias is not None:
        bv, bi, bt = _pcol(ctx, bias, P, opname, "bias")
    for t in (st, bt):
        if t is not None:
            reads.append(t.region())
    writes = [out.region()]
    if reduce_res is not None:
        _onchip(ctx, reduce_res, "reduce_res", opname)
        if reduce_res.shape[0] != P or _free(reduce_res.shape) != 1:
            raise KernelError(f"nisa.{opname}: reduce_res must have shape [{P}, 1], got {reduce_res.shape}")
        if reduce_op is not None and ops.lookup(reduce_op, 2).name != "add":
            raise KernelError(f"nisa.{opname}: the Scalar Engine can only reduce with nl.add")
        writes.append(reduce_res.region())
    ins = ctx.emit(opname, Engine.SCALAR, P, _free(shape), src.dtype, reads, writes,
                   {**_src_extra(src), "function": fn.name})
    init = _and(ini, _bcast_shape(si, shape), _bcast_shape(bi, shape))
    vals = None
    if v is not None:
        x = v * _bcast_shape(sv, shape)
        if bv is not None:
            x = x + _bcast_shape(bv, shape)
        vals = ops.apply_unary(fn, x).astype(F32)
    _finish(ctx, out, fresh, vals, init, mask, ins)
    cmd = getattr(reduce_cmd, "value", reduce_cmd)
    if reduce_res is not None or cmd != "idle":
        regs = _regs(ctx, "scalar_regs")
        if cmd in ("reset", "reset_reduce") or (reduce_res is not None and cmd == "idle"):
            regs[:P] = 0
        if cmd in ("reduce", "reset_reduce") or (reduce_res is not None and cmd == "idle"):
            if vals is not None:
                r = vals if m is None else np.where(m, vals, 0)
                regs[:P] += r.reshape(P, -1).sum(axis=1)
        if reduce_res is not None:
            rini = None if init is None else init.reshape(P, -1).all(axis=1, keepdims=True)
            reduce_res.write(None if v is None else regs[:P].reshape(reduce_res.shape).copy(),
                             None if rini is None else rini.reshape(reduce_res.shape), None)
    return out


def activation_reduce(ctx, dst, op, data, reduce_op=None, reduce_res=None, bias=None, scale=1.0,
                      mask=None, dtype=None, name=None, **_):
    if reduce_res is None:
        raise KernelError("nisa.activation_reduce needs reduce_res")
    return activation(ctx, dst, op, data, bias=bias, scale=scale, reduce_op=reduce_op,
                      reduce_res=reduce_res, reduce_cmd="reset_reduce", mask=mask, dtype=dtype,
                      _opcode="activation_reduce")


# ----- Vector / GpSimd Engine ----------------------------------------------------------------

def _elementwise_operand(ctx, x, shape, opcode, what, m=None):
    t = _onchip(ctx, x, what, opcode)
    if t.shape[0] != shape[0] or _free(t.shape) != _free(shape):
        raise KernelError(f"nisa.{opcode}: {what} has shape {t.shape}, expected {tuple(shape)}")
    _check_layout(ctx, t, opcode, what)
    v, ini = _read(ctx, t, opcode, what, m if t.shape == tuple(shape) else None)
    return t, _bcast_shape(v, shape), _bcast_shape(ini, shape)


def tensor_tensor(ctx, dst, data1, data2, op, engine=None, mask=None, dtype=None, name=None, **_):
    opc = "tensor_tensor"
    fn = ops.lookup(op, 2)
    a = _onchip(ctx, data1, "data1", opc)
    shape = a.shape
    m = _mask(mask, shape)
    a, av, ai = _elementwise_operand(ctx, a, shape, opc, "data1", m)
    b, bv, bi = _elementwise_operand(ctx, data2, shape, opc, "data2", m)
    if a.buf.memory is PSUM and b.buf.memory is PSUM:
        raise KernelError("nisa.tensor_tensor: data1 and data2 cannot both be in PSUM")
    out, fresh = _dst(ctx, dst, shape, _dtype_of(dst, dtype, a.dtype), SBUF, opc, mask)
    _check_layout(ctx, out, opc, "dst")
    ins = ctx.emit(opc, _engine(engine, Engine.VECTOR), shape[0], _free(shape), a.dtype,
                   (a.region(), b.region()), (out.region(),),
                   {**_src_extra(a, b), "op": fn.name, "dtypes": (a.dtype.name, b.dtype.name)})
    vals = None if av is None else ops.apply_binary(fn, av, bv)
    return _finish(ctx, out, fresh, vals, _and(ai, bi), mask, ins)


def _apply(fn, x, operand, reverse):
    return ops.apply_binary(fn, operand, x) if reverse else ops.apply_binary(fn, x, operand)


def tensor_scalar(ctx, dst, data, op0, operand0, reverse0=False, op1=None, operand1=None,
                  reverse1=False, engine=None, mask=None, dtype=None, name=None, **_):
    opc = "tensor_scalar"
    src = _onchip(ctx, data, "data", opc)
    shape, P = src.shape, src.shape[0]
    _check_layout(ctx, src, opc, "data")
    f0 = ops.lookup(op0, 2)
    f1 = ops.lookup(op1, 2) if op1 is not None else None
    m = _mask(mask, shape)
    v, ini = _read(ctx, src, opc, "data", m)
    o0, i0, t0 = _pcol(ctx, operand0, P, opc, "operand0")
    o1, i1, t1 = (None, None, None) if f1 is None else _pcol(ctx, operand1, P, opc, "operand1")
    out, fresh = _dst(ctx, dst, shape, _dtype_of(dst, dtype, src.dtype), SBUF, opc, mask)
    _check_layout(ctx, out, opc, "dst")
    reads = [src.region()] + [t.region() for t in (t0, t1) if t is not None]
    ins = ctx.emit(opc, _engine(engine, Engine.VECTOR), P, _free(shape), src.dtype, reads,
                   (out.region(),), {**_src_extra(src), "op0": f0.name,
                                     "op1": None if f1 is None else f1.name})
    vals = None
    if v is not None:
        vals = _apply(f0, v, _bcast_shape(o0, shape), reverse0)
        if f1 is not None:
            vals = _apply(f1, vals, _bcast_shape(o1, shape), reverse1)
    init = _and(ini, _bcast_shape(i0, shape), _bcast_shape(i1, shape))
    return _finish(ctx, out, fresh, vals, init, mask, ins)


def scalar_tensor_tensor(ctx, dst, data, op0, operand0, op1, operand1, reverse0=False,
                         reverse1=False, mask=None, dtype=None, name=None, **_):
    opc = "scalar_tensor_tensor"
    src = _onchip(ctx, data, "data", opc)
    shape, P = src.shape, src.shape[0]
    _check_layout(ctx, src, opc, "data")
    f0, f1 = ops.lookup(op0, 2), ops.lookup(op1, 2)
    m = _mask(mask, shape)
    v, ini = _read(ctx, src, opc, "data", m)
    o0, i0, t0 = _pcol(ctx, operand0, P, opc, "operand0")
    t1, o1, i1 = _elementwise_operand(ctx, operand1, shape, opc, "operand1", m)
    if src.buf.memory is PSUM and t1.buf.memory is PSUM:
        raise KernelError("nisa.scalar_tensor_tensor: data and operand1 cannot both be in PSUM")
    out, fresh = _dst(ctx, dst, shape, _dtype_of(dst, dtype, src.dtype), SBUF, opc, mask)
    _check_layout(ctx, out, opc, "dst")
    reads = [src.region(), t1.region()] + ([t0.region()] if t0 is not None else [])
    ins = ctx.emit(opc, Engine.VECTOR, P, _free(shape), src.dtype, reads, (out.region(),),
                   {**_src_extra(src, t1), "op0": f0.name, "op1": f1.name})
    vals = None
    if v is not None:
        vals = _apply(f1, _apply(f0, v, _bcast_shape(o0, shape), reverse0), o1, reverse1)
    return _finish(ctx, out, fresh, vals, _and(ini, _bcast_shape(i0, shape), i1), mask, ins)


def _norm_axes(axis, ndim, opc):
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    axes = tuple(sorted(a + ndim if a < 0 else a for a in axes))
    if not axes or 0 in axes:
        raise KernelError(f"nisa.{opc}: cannot reduce the partition axis 0 (use tensor_partition_reduce)")
    if axes != tuple(range(axes[0], ndim)):
        raise KernelError(f"nisa.{opc}: reduction axes {axes} must be the last contiguous free axes")
    return axes


def tensor_reduce(ctx, dst, op, data, axis, negate=False, keepdims=False, mask=None, dtype=None,
                  name=None, **_):
    opc = "tensor_reduce"
    fn = ops.lookup(op, 2)
    if fn.reduce_fn is None:
        raise KernelError(f"nisa.tensor_reduce: {fn.name} is not a reduction operator")
    src = _onchip(ctx, data, "data", opc)
    _check_layout(ctx, src, opc, "data")
    axes = _norm_axes(axis, len(src.shape), opc)
    shape = tuple(1 if (i in axes) else s for i, s in enumerate(src.shape)) if keepdims else \
        tuple(s for i, s in enumerate(src.shape) if i not in axes)
    v, ini = _read(ctx, src, opc, "data")
    out, fresh = _dst(ctx, dst, shape, _dtype_of(dst, dtype, src.dtype), SBUF, opc, mask)
    _check_layout(ctx, out, opc, "dst")
    ins = ctx.emit(opc, Engine.VECTOR, src.shape[0], _free(src.shape), src.dtype, (src.region(),),
                   (out.region(),), {**_src_extra(src), "op": fn.name})
    vals = None
    if v is not None:
        if fn.bitvec:
            vals = fn.reduce_fn(v.astype(np.int32), axis=axes)
        else:
            vals = fn.reduce_fn(v, axis=axes, dtype=F32) if fn.name in ("add", "multiply") else fn.reduce_fn(v, axis=axes)
            if negate:
                vals = -vals
    init = None if ini is None else ini.all(axis=axes)
    return _finish(ctx, out, fresh, None if vals is None else np.asarray(vals).reshape(out.shape),
                   None if init is None else init.reshape(out.shape), mask, ins)


def tensor_partition_reduce(ctx, dst, op, data, mask=None, dtype=None, name=None, **_):
    opc = "tensor_partition_reduce"
    mean = getattr(op, "op", op) is not None and getattr(op, "name", "") in ("mean", "average")
    fn = ops.lookup(op, 2)
    src = _onchip(ctx, data, "data", opc)
    _check_layout(ctx, src, opc, "data")
    shape = (1,) + tuple(src.shape[1:])
    v, ini = _read(ctx, src, opc, "data")
    out, fresh = _dst(ctx, dst, shape, _dtype_of(dst, dtype, src.dtype), SBUF, opc, mask)
    ins = ctx.emit(opc, Engine.GPSIMD, src.shape[0], _free(src.shape), src.dtype, (src.region(),),
                   (out.region(),), {**_src_extra(src), "op": fn.name})
    vals = None
    if v is not None:
        vals = (fn.reduce_fn(v.astype(np.int32), axis=0) if fn.bitvec else fn.reduce_fn(v, axis=0))
        vals = np.asarray(vals, dtype=np.float32 if not fn.bitvec else np.int32).reshape(shape)
        if mean:
            vals = vals / F32(src.shape[0])
    return _finish(ctx, out, fresh, vals, None if ini is None else ini.all(axis=0).reshape(shape), mask, ins)


def tensor_tensor_scan(ctx, dst, data0, data1, initial, op0, op1, reverse0=False, reverse1=False,
                       mask=None, dtype=None, name=None, **_):
    opc = "tensor_tensor_scan"
    f0, f1 = ops.lookup(op0, 2), ops.lookup(op1, 2)
    a = _onchip(ctx, data0, "data0", opc)
    shape, P = a.shape, a.shape[0]
    a, av, ai = _elementwise_operand(ctx, a, shape, opc, "data0")
    b, bv, bi = _elementwise_operand(ctx, data1, shape, opc, "data1")
    if a.buf.memory is PSUM and b.buf.memory is PSUM:
        raise KernelError("nisa.tensor_tensor_scan: data0 and data1 cannot both be in PSUM")
    iv, ii, it = _pcol(ctx, initial, P, opc, "initial")
    out, fresh = _dst(ctx, dst, shape, _dtype_of(dst, dtype, a.dtype), SBUF, opc, mask)
    _check_layout(ctx, out, opc, "dst")
    reads = [a.region(), b.region()] + ([it.region()] if it is not None else [])
    ins = ctx.emit(opc, Engine.VECTOR, P, _free(shape), a.dtype, reads, (out.region(),),
                   {**_src_extra(a, b), "op0": f0.name, "op1": f1.name})
    vals = None
    if av is not None:
        x0, x1 = av.reshape(P, -1), bv.reshape(P, -1)
        res = np.empty_like(x0)
        prev = np.broadcast_to(np.asarray(iv, F32).reshape(-1), (P,)) if np.ndim(iv) else np.full(P, iv, F32)
        for i in range(x0.shape[1]):
            t = _apply(f0, x0[:, i], prev, reverse0)
            prev = _apply(f1, t, x1[:, i], reverse1).astype(F32)
            res[:, i] = prev
        vals = res.reshape(shape)
    init = _and(ai, bi)
    if init is not None:  # a scan carries an uninitialised element forward
        init = np.logical_and.accumulate(init.reshape(P, -1), axis=1).reshape(shape)
    if ii is not None:
        init = _and(init, np.broadcast_to(ii.reshape(P, *([1] * (len(shape) - 1))), shape))
    return _finish(ctx, out, fresh, vals, init, mask, ins)


_CUMULATIVE_RESET = {"add": 0.0, "subtract": 0.0, "multiply": 1.0, "maximum": -np.inf, "minimum": np.inf}


def tensor_scalar_cumulative(ctx, dst, src, op0, op1, imm0, imm1=None, reduce_cmd="reset_reduce",
                             reverse0=False, mask=None, dtype=None, name=None, **_):
    opc = "tensor_scalar_cumulative"
    f0, f1 = ops.lookup(op0, 2), ops.lookup(op1, 2)
    if f1.name not in _CUMULATIVE_RESET:
        raise KernelError(f"nisa.{opc}: op1 must be add, subtract, multiply, max or min, got {f1.name}")
    s = _onchip(ctx, src, "src", opc)
    shape, P = s.shape, s.shape[0]
    _check_layout(ctx, s, opc, "src")
    v, ini = _read(ctx, s, opc, "src")
    o0, i0, t0 = _pcol(ctx, imm0, P, opc, "imm0")
    out, fresh = _dst(ctx, dst, shape, _dtype_of(dst, dtype, s.dtype), SBUF, opc, mask)
    _check_layout(ctx, out, opc, "dst")
    reads = [s.region()] + ([t0.region()] if t0 is not None else [])
    ins = ctx.emit(opc, Engine.VECTOR, P, _free(shape), s.dtype, reads, (out.region(),),
                   {**_src_extra(s), "op0": f0.name, "op1": f1.name})
    regs = _regs(ctx, "vector_regs")
    cmd = getattr(reduce_cmd, "value", reduce_cmd)
    if cmd == "reset_reduce":
        regs[:P] = _CUMULATIVE_RESET[f1.name]
    elif cmd == "load_reduce":
        iv, _, _ = _pcol(ctx, imm1, P, opc, "imm1")
        regs[:P] = np.broadcast_to(np.asarray(iv, F32).reshape(-1), (P,))
    vals = None
    if v is not None:
        x = _apply(f0, v.reshape(P, -1), o0 if np.ndim(o0) == 0 else o0.reshape(P, 1), reverse0)
        res = np.empty_like(x, dtype=F32)
        reg = regs[:P].copy()
        for i in range(x.shape[1]):
            reg = ops.apply_binary(f1, x[:, i], reg).astype(F32)
            res[:, i] = reg
        regs[:P] = reg
        vals = res.reshape(shape)
    init = _and(ini, _bcast_shape(i0, shape))
    if init is not None:
        init = np.logical_and.accumulate(init.reshape(P, -1), axis=1).reshape(shape)
    return _finish(ctx, out, fresh, vals, init, mask, ins)


def tensor_copy(ctx, dst, src, engine=None, mask=None, dtype=None, name=None, _opcode="tensor_copy", **_):
    opc = _opcode
    s = _onchip(ctx, src, "src", opc)
    _check_layout(ctx, s, opc, "src")
    m = _mask(mask, s.shape)
    v, ini = _read(ctx, s, opc, "src", m)
    out, fresh = _dst(ctx, dst, s.shape, _dtype_of(dst, dtype, s.dtype), SBUF, opc, mask)
    _check_layout(ctx, out, opc, "dst")
    ins = ctx.emit(opc, _engine(engine, Engine.VECTOR), s.shape[0], _free(s.shape), s.dtype,
                   (s.region(),), (out.region(),), _src_extra(s))
    return _finish(ctx, out, fresh, v, ini, mask, ins)


def reciprocal(ctx, dst, data, mask=None, dtype=None, name=None, **_):
    opc = "reciprocal"
    s = _onchip(ctx, data, "data", opc)
    _check_layout(ctx, s, opc, "data")
    m = _mask(mask, s.shape)
    v, ini = _read(ctx, s, opc, "data", m)
    out, fresh = _dst(ctx, dst, s.shape, _dtype_of(dst, dtype, s.dtype), SBUF, opc, mask)
    _check_layout(ctx, out, opc, "dst")
    ins = ctx.emit(opc, Engine.VECTOR, s.shape[0], _free(s.shape), s.dtype, (s.region(),),
                   (out.region(),), _src_extra(s))
    with np.errstate(all="ignore"):
        vals = None if v is None else F32(1.0) / v
    return _finish(ctx, out, fresh, vals, ini, mask, ins)


def exponential(ctx, dst, src, max_value=0.0, reduce_res=None, reduce_cmd="idle", reduce_init=0.0,
                mask=None, dtype=None, name=None, **_):
    opc = "exponential"
    if ctx.hw.core in ("NeuronCore-v2", "NeuronCore-v3"):
        raise KernelError(f"nisa.exponential needs NeuronCore-v4 or newer; target {ctx.hw.name} "
                          f"({ctx.hw.core}) lacks it (use nisa.activation with nl.exp)")
    s = _onchip(ctx, src, "src", opc)
    shape, P = s.shape, s.shape[0]
    _check_layout(ctx, s, opc, "src")
    v, ini = _read(ctx, s, opc, "src")
    mv, mi, mt = _pcol(ctx, max_value, P, opc, "max_value")
    out, fresh = _dst(ctx, dst, shape, _dtype_of(dst, dtype, s.dtype), SBUF, opc, mask)
    writes = [out.region()] + ([reduce_res.region()] if reduce_res is not None else [])
    reads = [s.region()] + ([mt.region()] if mt is not None else [])
    ins = ctx.emit(opc, Engine.VECTOR, P, _free(shape), s.dtype, reads, writes, _src_extra(s))
    vals = None
    if v is not None:
        with np.errstate(all="ignore"):
            vals = np.exp(v - _bcast_shape(mv, shape)).astype(F32)
    init = _and(ini, _bcast_shape(mi, shape))
    _finish(ctx, out, fresh, vals, init, mask, ins)
    cmd = getattr(reduce_cmd, "value", reduce_cmd)
    if cmd != "idle" or reduce_res is not None:
        regs = _regs(ctx, "vector_regs")
        if cmd in ("reset", "reset_reduce"):
            regs[:P] = 0
        elif cmd == "load_reduce":
            rv, _, _ = _pcol(ctx, reduce_init, P, opc, "reduce_init")
            regs[:P] = np.broadcast_to(np.asarray(rv, F32).reshape(-1), (P,))
        if cmd in ("reduce", "reset_reduce", "load_reduce") and vals is not None:
            regs[:P] += vals.reshape(P, -1).sum(axis=1)
        if reduce_res is not None:
            rini = None if init is None else init.reshape(P, -1).all(axis=1).reshape(reduce_res.shape)
            reduce_res.write(None if v is None else regs[:P].reshape(reduce_res.shape).copy(), rini, None)
    return out


def iota(ctx, dst, expr=None, offset=0, channel_multiplier=0, pattern=None, mask=None, dtype=None,
         name=None, **_):
    """Beta-1: iota(expr, dtype); current: iota(dst, pattern=[[step, num], ...], offset,
    channel_multiplier): value = offset + channel_multiplier * p + sum(step_i * index_i)."""
    opc = "iota"
    if pattern is None and isinstance(expr, (list, tuple)):
        pattern, expr = expr, None
    if isinstance(expr, IndexExpr):
        vals_i = np.asarray(expr.arr)
        shape = vals_i.shape if vals_i.ndim >= 2 else (1,) + vals_i.shape
        vals_i = np.broadcast_to(vals_i.reshape(shape) if vals_i.ndim < 2 else vals_i, shape)
    elif pattern is not None:
        if dst is None:
            raise KernelError("nisa.iota with a pattern needs dst")
        P = dst.shape[0]
        grids = np.ix_(*[np.arange(n) * step for step, n in pattern]) if pattern else ()
        free = sum(grids) if pattern else np.zeros(1)
        vals_i = offset + channel_multiplier * np.arange(P).reshape((P,) + (1,) * np.ndim(free)) + free
        shape = vals_i.shape
    else:
        raise KernelError("nisa.iota needs an index expression (nl.arange / nl.mgrid) or a pattern")
    out, fresh = _dst(ctx, dst, shape, _dtype_of(dst, dtype, dtypes.int32), SBUF, opc, mask)
    _check_layout(ctx, out, opc, "dst")
    ins = ctx.emit(opc, Engine.GPSIMD, out.shape[0], _free(out.shape), out.dtype, (), (out.region(),))
    vals = None if ctx.timing_only else np.asarray(vals_i).reshape(out.shape)
    return _finish(ctx, out, fresh, vals, None, mask, ins)


def memset(ctx, dst, value, dtype=None, engine=None, shape=None, mask=None, name=None, **_):
    opc = "memset"
    if dst is None:
        out, fresh = _dst(ctx, None, shape, dtypes.to_dtype(dtype or dtypes.float32), SBUF, opc)
    else:
        out, fresh = _onchip(ctx, dst, "dst", opc), False
    _check_layout(ctx, out, opc, "dst")
    ins = ctx.emit(opc, _engine(engine, Engine.VECTOR), out.shape[0], _free(out.shape), out.dtype,
                   (), (out.region(),))
    return _finish(ctx, out, fresh, None if ctx.timing_only else value, None, mask, ins)


# ----- DMA -----------------------------------------------------------------------------------

def _contiguous_bytes(t: Tile) -> int:
    """Bytes of the innermost contiguous run of an access (DMA efficiency depends on it)."""
    a = t.arr if t.arr is not None else t.buf.data
    item, run = a.itemsize, a.itemsize
    for n, s in zip(reversed(a.shape), reversed(a.strides)):
        if n == 1:
            continue
        if s != run:
            break
        run *= n
    return run


def dma(ctx, dst, src, opcode="dma_copy", api="nisa.dma_copy", mask=None, transpose=False):
    """One DMA transfer dst <- src (both are views; either may be in HBM, SBUF or PSUM)."""
    _tile(src, "src", opcode)
    _tile(dst, "dst", opcode)
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
    _check_init(src, opcode, "src", m if src.shape == dst.shape else None)
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
    ins = ctx.emit(opcode, Engine.DMA, part, _free(dst.shape), src.dtype, (srcreg,), (dstreg,),
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
        dst, _ = _dst(ctx, None, tuple(reversed(src.shape)), src.dtype, SBUF, "dma_transpose")
    dma(ctx, dst, src, "dma_transpose", "nisa.dma_transpose", mask, transpose=True)
    return dst


# Beta-1 positional arity: a current-API call passes one more positional argument (dst).
BETA1_POSITIONAL = {
    "nc_matmul": 2, "nc_transpose": 1, "activation": 2, "activation_reduce": 2,
    "tensor_tensor": 3, "tensor_scalar": 3, "scalar_tensor_tensor": 5, "tensor_reduce": 3,
    "tensor_partition_reduce": 2, "tensor_tensor_scan": 6, "tensor_scalar_cumulative": 5,
    "tensor_copy": 1, "reciprocal": 1, "exponential": 1, "iota": 2, "memset": 3,
    "dma_copy": 2, "dma_transpose": 1,
}

INSTRUCTIONS = {name: globals()[name] for name in BETA1_POSITIONAL}
