"""nki.isa element-wise compute instructions of the Scalar and Vector Engines: activation (with
its free-axis add-reduction), tensor_tensor, tensor_scalar, scalar_tensor_tensor, tensor_copy,
reciprocal, exponential, tensor_scalar_reduce (tensor_scalar plus a free-axis reduction),
tensor_copy_predicated and select_reduce.

Invariant: every instruction computes in float32 and rounds once, to the destination dtype, when
the result is written; a reduction into `reduce_res` sees the float32 values before that rounding.
"""
from __future__ import annotations

import numpy as np

from axon.errors import KernelError
from axon.targets.trainium.trace import Engine

from . import ops
from .operands import (F32, PSUM, SBUF, and_init, apply_op, bcast_shape, check_layout, dst_tile,
                       dtype_of, elementwise_operand, engine_of, finish, free_size, integer_operands,
                       mask_of, onchip, pcol, read, registers, src_extra)


def activation(ctx, dst, op, data, bias=None, scale=1.0, reduce_op=None, reduce_res=None,
               reduce_cmd="idle", mask=None, dtype=None, name=None, _opcode="activation", **_):
    opname = _opcode
    fn = ops.lookup(op, 1)
    src = onchip(ctx, data, "data", opname)
    P, shape = src.shape[0], src.shape
    check_layout(ctx, src, opname, "data")
    out, fresh = dst_tile(ctx, dst, shape, dtype_of(dst, dtype, src.dtype), SBUF, opname, mask)
    check_layout(ctx, out, opname, "dst")
    m = mask_of(mask, shape)
    v, ini = read(ctx, src, opname, "data", m)
    sv, si, st = pcol(ctx, scale, P, opname, "scale")
    reads = [src.region()]
    bv, bi, bt = (None, None, None)
    if bias is not None:
        bv, bi, bt = pcol(ctx, bias, P, opname, "bias")
    for t in (st, bt):
        if t is not None:
            reads.append(t.region())
    writes = [out.region()]
    if reduce_res is not None:
        onchip(ctx, reduce_res, "reduce_res", opname)
        if reduce_res.shape[0] != P or free_size(reduce_res.shape) != 1:
            raise KernelError(f"nisa.{opname}: reduce_res must have shape [{P}, 1], got {reduce_res.shape}")
        if reduce_op is not None and ops.lookup(reduce_op, 2).name != "add":
            raise KernelError(f"nisa.{opname}: the Scalar Engine can only reduce with nl.add")
        writes.append(reduce_res.region())
    ins = ctx.emit(opname, Engine.SCALAR, P, free_size(shape), src.dtype, reads, writes,
                   {**src_extra(src), "function": fn.name})
    init = and_init(ini, bcast_shape(si, shape), bcast_shape(bi, shape))
    vals = None
    if v is not None:
        x = v * bcast_shape(sv, shape)
        if bv is not None:
            x = x + bcast_shape(bv, shape)
        vals = ops.apply_unary(fn, x).astype(F32)
    finish(ctx, out, fresh, vals, init, mask, ins)
    cmd = getattr(reduce_cmd, "value", reduce_cmd)
    if reduce_res is not None or cmd != "idle":
        regs = registers(ctx, "scalar_regs")
        # idle leaves the registers as they are: with reduce_res it reads them out [isa activation]
        if cmd in ("reset", "reset_reduce"):
            regs[:P] = 0
        if cmd in ("reduce", "reset_reduce"):
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


def tensor_tensor(ctx, dst, data1, data2, op, engine=None, mask=None, dtype=None, name=None, **_):
    opc = "tensor_tensor"
    fn = ops.lookup(op, 2)
    a = onchip(ctx, data1, "data1", opc)
    shape = a.shape
    m = mask_of(mask, shape)
    integer_operands(opc, fn, ("data1", data1), ("data2", data2))
    a, av, ai = elementwise_operand(ctx, a, shape, opc, "data1", m, exact=fn.bitvec)
    b, bv, bi = elementwise_operand(ctx, data2, shape, opc, "data2", m, exact=fn.bitvec)
    if a.buf.memory is PSUM and b.buf.memory is PSUM:
        raise KernelError("nisa.tensor_tensor: data1 and data2 cannot both be in PSUM")
    out, fresh = dst_tile(ctx, dst, shape, dtype_of(dst, dtype, a.dtype), SBUF, opc, mask)
    check_layout(ctx, out, opc, "dst")
    ins = ctx.emit(opc, engine_of(engine, Engine.VECTOR), shape[0], free_size(shape), a.dtype,
                   (a.region(), b.region()), (out.region(),),
                   {**src_extra(a, b), "op": fn.name, "dtypes": (a.dtype.name, b.dtype.name)})
    vals = None if av is None else ops.apply_binary(fn, av, bv)
    return finish(ctx, out, fresh, vals, and_init(ai, bi), mask, ins)


def tensor_scalar(ctx, dst, data, op0, operand0, reverse0=False, op1=None, operand1=None,
                  reverse1=False, engine=None, mask=None, dtype=None, name=None, **_):
    opc = "tensor_scalar"
    src = onchip(ctx, data, "data", opc)
    shape, P = src.shape, src.shape[0]
    check_layout(ctx, src, opc, "data")
    f0 = ops.lookup(op0, 2)
    f1 = ops.lookup(op1, 2) if op1 is not None else None
    m = mask_of(mask, shape)
    integer_operands(opc, f0, ("data", data), ("operand0", operand0))
    integer_operands(opc, f1, ("operand1", operand1))
    v, ini = read(ctx, src, opc, "data", m, exact=f0.bitvec)
    o0, i0, t0 = pcol(ctx, operand0, P, opc, "operand0", exact=f0.bitvec)
    o1, i1, t1 = (None, None, None) if f1 is None else pcol(ctx, operand1, P, opc, "operand1", exact=f1.bitvec)
    out, fresh = dst_tile(ctx, dst, shape, dtype_of(dst, dtype, src.dtype), SBUF, opc, mask)
    check_layout(ctx, out, opc, "dst")
    reads = [src.region()] + [t.region() for t in (t0, t1) if t is not None]
    # Engine left to the compiler: arithmetic on a PSUM tile is an accumulator evacuation that
    # scales on the way out, placed on ScalarE like the plain PSUM copies (tensor_copy below);
    # bitvec operators run on VectorE only [isa tensor_scalar]; the rest stays on VectorE.
    evacuates = src.buf.memory is PSUM and not (f0.bitvec or (f1 is not None and f1.bitvec))
    ins = ctx.emit(opc, engine_of(engine, Engine.SCALAR if evacuates else Engine.VECTOR), P,
                   free_size(shape), src.dtype, reads,
                   (out.region(),), {**src_extra(src), "op0": f0.name,
                                     "op1": None if f1 is None else f1.name})
    vals = None
    if v is not None:
        vals = apply_op(f0, v, bcast_shape(o0, shape), reverse0)
        if f1 is not None:
            vals = apply_op(f1, vals, bcast_shape(o1, shape), reverse1)
    init = and_init(ini, bcast_shape(i0, shape), bcast_shape(i1, shape))
    return finish(ctx, out, fresh, vals, init, mask, ins)


def scalar_tensor_tensor(ctx, dst, data, op0, operand0, op1, operand1, reverse0=False,
                         reverse1=False, mask=None, dtype=None, name=None, **_):
    opc = "scalar_tensor_tensor"
    src = onchip(ctx, data, "data", opc)
    shape, P = src.shape, src.shape[0]
    check_layout(ctx, src, opc, "data")
    f0, f1 = ops.lookup(op0, 2), ops.lookup(op1, 2)
    m = mask_of(mask, shape)
    v, ini = read(ctx, src, opc, "data", m)
    o0, i0, t0 = pcol(ctx, operand0, P, opc, "operand0")
    t1, o1, i1 = elementwise_operand(ctx, operand1, shape, opc, "operand1", m)
    if src.buf.memory is PSUM and t1.buf.memory is PSUM:
        raise KernelError("nisa.scalar_tensor_tensor: data and operand1 cannot both be in PSUM")
    out, fresh = dst_tile(ctx, dst, shape, dtype_of(dst, dtype, src.dtype), SBUF, opc, mask)
    check_layout(ctx, out, opc, "dst")
    reads = [src.region(), t1.region()] + ([t0.region()] if t0 is not None else [])
    ins = ctx.emit(opc, Engine.VECTOR, P, free_size(shape), src.dtype, reads, (out.region(),),
                   {**src_extra(src, t1), "op0": f0.name, "op1": f1.name})
    vals = None
    if v is not None:
        vals = apply_op(f1, apply_op(f0, v, bcast_shape(o0, shape), reverse0), o1, reverse1)
    return finish(ctx, out, fresh, vals, and_init(ini, bcast_shape(i0, shape), i1), mask, ins)


def tensor_copy(ctx, dst, src, engine=None, mask=None, dtype=None, name=None, _opcode="tensor_copy", **_):
    # Engine left to the compiler: copies out of PSUM (accumulator evacuation) go to ScalarE, as the
    # Neuron compiler places them (shared/fidelity.md: the profiles show them on ScalarE), and so
    # do copies that move data to other partitions (a shift of the partition base, like the one-row
    # broadcasts of nl.language); others stay on VectorE.
    buf = getattr(src, "buf", None)
    evacuates = buf is not None and buf.memory is PSUM
    default = Engine.SCALAR if (evacuates or _moves_partitions(src, dst)) else Engine.VECTOR
    eng = engine_of(engine, default)
    # bit-accurate when the dtypes agree (Vector, GpSimd); else through float32 [isa tensor_copy]
    same = getattr(src, "dtype", None) is not None and dtype_of(dst, dtype, src.dtype) == src.dtype
    return _unary(ctx, _opcode, eng, dst, src, "src", mask, dtype, lambda v: v, exact=same and eng is not Engine.SCALAR)


PREDICATE_DTYPES = ("uint8", "uint16", "uint32")  # [isa tensor_copy_predicated]


def tensor_copy_predicated(ctx, dst, src, predicate, reverse_pred=False, mask=None, dtype=None, name=None, **_):
    """dst = src where the predicate is non-zero (zero with reverse_pred), dst unchanged elsewhere;
    src a tile of dst's dtype or a number (Vector Engine) [isa tensor_copy_predicated]."""
    opc = "tensor_copy_predicated"
    if dst is None:
        raise KernelError(f"nisa.{opc} needs dst: it keeps dst's values where the predicate is false")
    p = onchip(ctx, predicate, "predicate", opc)
    if str(p.dtype) not in PREDICATE_DTYPES:
        raise KernelError(f"nisa.{opc}: predicate must be {', '.join(PREDICATE_DTYPES)}, got {p.dtype}")
    out, _ = dst_tile(ctx, dst, p.shape, dst.dtype, SBUF, opc, mask)
    m = mask_of(mask, p.shape)
    reads = [p.region(), out.region()]
    tile_src = not isinstance(src, (int, float))
    if tile_src:
        s = onchip(ctx, src, "src", opc)
        if s.shape[0] != p.shape[0] or free_size(s.shape) != free_size(p.shape):
            raise KernelError(f"nisa.{opc}: src has shape {s.shape}, the predicate {p.shape}")
        if s.dtype != out.dtype:
            raise KernelError(f"nisa.{opc}: src ({s.dtype}) and dst ({out.dtype}) must share the same data type")
        if s.buf.memory is PSUM and p.buf.memory is PSUM:
            raise KernelError(f"nisa.{opc}: src and predicate cannot both be in PSUM")
        reads.append(s.region())
    pv, pini = read(ctx, p, opc, "predicate", m)
    sv, sini = read(ctx, s, opc, "src", m) if tile_src else (F32(src), None)
    ins = ctx.emit(opc, Engine.VECTOR, p.shape[0], free_size(p.shape), s.dtype if tile_src else out.dtype,
                   reads, (out.region(),), src_extra(s if tile_src else p))
    old_ini = out.initialised()
    if pv is None:  # timing only: which elements are copied is unknown
        return finish(ctx, out, False, None, and_init(old_ini, sini, pini), mask, ins)
    taken = (pv.reshape(p.shape) != 0) != bool(reverse_pred)
    old = out.values().astype(F32)
    vals = np.where(taken, bcast_shape(sv, p.shape) if np.ndim(sv) else sv, old)
    init = None if old_ini is None and sini is None else np.where(
        taken, True if sini is None else sini.reshape(p.shape), True if old_ini is None else old_ini.reshape(p.shape))
    return finish(ctx, out, False, vals, and_init(init, pini), mask, ins)


SELECT_PREDICATE_DTYPES = ("int8", "uint8", "int16", "uint16")  # [isa select_reduce]


def select_reduce(ctx, dst, predicate, on_true, on_false, reduce_res=None, reduce_cmd="idle", reduce_op=None,
                  reverse_pred=False, mask=None, dtype=None, name=None, **_):
    """dst = on_true where the predicate is non-zero (zero with reverse_pred), else on_false (a
    number or a [P, 1] column); with reduce_res, the maximum of dst's values along the free axes
    too, combined with the Vector Engine's registers as reduce_cmd says [isa select_reduce]."""
    opc = "select_reduce"
    p = onchip(ctx, predicate, "predicate", opc)
    if str(p.dtype) not in SELECT_PREDICATE_DTYPES:
        raise KernelError(f"nisa.{opc}: predicate must be {', '.join(SELECT_PREDICATE_DTYPES)}, got {p.dtype}")
    t = onchip(ctx, on_true, "on_true", opc)
    shape, P = t.shape, t.shape[0]
    if p.shape[0] != P or free_size(p.shape) != free_size(shape):
        raise KernelError(f"nisa.{opc}: predicate has shape {p.shape}, on_true {shape}")
    if t.buf.memory is PSUM and p.buf.memory is PSUM:
        raise KernelError(f"nisa.{opc}: on_true and predicate cannot both be in PSUM")
    if reduce_op is not None and ops.lookup(reduce_op, 2).name != "maximum":
        raise KernelError(f"nisa.{opc}: reduce_op must be nl.maximum")
    m = mask_of(mask, shape)
    pv, pini = read(ctx, p, opc, "predicate", m)
    tv, tini = read(ctx, t, opc, "on_true", m)
    fv, fini, ft = pcol(ctx, on_false, P, opc, "on_false")
    out, fresh = dst_tile(ctx, dst, shape, dtype_of(dst, dtype, t.dtype), SBUF, opc, mask)
    reads = [p.region(), t.region()] + ([ft.region()] if ft is not None else [])
    writes = [out.region()] + ([reduce_res.region()] if reduce_res is not None else [])
    ins = ctx.emit(opc, Engine.VECTOR, P, free_size(shape), t.dtype, reads, writes, src_extra(t))
    vals = None
    if pv is not None:
        taken = (pv.reshape(shape) != 0) != bool(reverse_pred)
        vals = np.where(taken, tv, bcast_shape(fv, shape)).astype(F32)
    init = and_init(pini, tini, bcast_shape(fini, shape))
    finish(ctx, out, fresh, vals, init, mask, ins)
    cmd = getattr(reduce_cmd, "value", reduce_cmd)
    if reduce_res is not None or cmd != "idle":
        regs = registers(ctx, "vector_regs")
        if cmd in ("reset", "reset_reduce") or (cmd == "idle" and reduce_res is not None):
            regs[:P] = -np.inf
        if cmd in ("reduce", "reset_reduce", "idle") and vals is not None:
            regs[:P] = np.maximum(regs[:P], vals.reshape(P, -1).max(axis=1))
        if reduce_res is not None:
            onchip(ctx, reduce_res, "reduce_res", opc)
            rini = None if init is None else init.reshape(P, -1).all(axis=1).reshape(reduce_res.shape)
            reduce_res.write(None if vals is None else regs[:P].reshape(reduce_res.shape).copy(), rini, None)
    return out


def _moves_partitions(src, dst) -> bool:
    """Whether a copy's output starts on another partition than its input (a fresh result starts
    on partition 0)."""
    if not hasattr(src, "region"):
        return False
    out = dst.region().p_start if hasattr(dst, "region") else 0
    return src.region().p_start != out


def reciprocal(ctx, dst, data, mask=None, dtype=None, name=None, engine=None, **_):
    # Scalar Engine: max(MIN_II, N); Vector Engine: max(MIN_II, 8N), "suggested" only below 64
    # elements per partition [isa reciprocal]. Left to the compiler, it takes ScalarE from 64 up.
    shape = getattr(data, "shape", None)
    default = Engine.SCALAR if (shape is not None and free_size(shape) >= 64) else Engine.VECTOR
    return _unary(ctx, "reciprocal", engine_of(engine, default), dst, data, "data", mask, dtype,
                  lambda v: F32(1.0) / v)


def _unary(ctx, opc, engine, dst, src, slot, mask, dtype, fn, exact: bool = False):
    """One on-chip tile in, `fn` of it out (element-wise), on `engine`; `exact` as for `read`."""
    s = onchip(ctx, src, slot, opc)
    check_layout(ctx, s, opc, slot)
    m = mask_of(mask, s.shape)
    v, ini = read(ctx, s, opc, slot, m, exact=exact)
    out, fresh = dst_tile(ctx, dst, s.shape, dtype_of(dst, dtype, s.dtype), SBUF, opc, mask)
    check_layout(ctx, out, opc, "dst")
    ins = ctx.emit(opc, engine, s.shape[0], free_size(s.shape), s.dtype, (s.region(),), (out.region(),),
                   src_extra(s))
    with np.errstate(all="ignore"):
        vals = None if v is None else fn(v)
    return finish(ctx, out, fresh, vals, ini, mask, ins)


def exponential(ctx, dst, src, max_value=0.0, reduce_res=None, reduce_cmd="idle", reduce_init=0.0,
                mask=None, dtype=None, name=None, **_):
    opc = "exponential"
    if ctx.hw.core in ("NeuronCore-v2", "NeuronCore-v3"):
        raise KernelError(f"nisa.exponential needs NeuronCore-v4 or newer; target {ctx.hw.name} "
                          f"({ctx.hw.core}) lacks it (use nisa.activation with nl.exp)")
    s = onchip(ctx, src, "src", opc)
    shape, P = s.shape, s.shape[0]
    check_layout(ctx, s, opc, "src")
    v, ini = read(ctx, s, opc, "src")
    mv, mi, mt = pcol(ctx, max_value, P, opc, "max_value")
    out, fresh = dst_tile(ctx, dst, shape, dtype_of(dst, dtype, s.dtype), SBUF, opc, mask)
    writes = [out.region()] + ([reduce_res.region()] if reduce_res is not None else [])
    reads = [s.region()] + ([mt.region()] if mt is not None else [])
    ins = ctx.emit(opc, Engine.VECTOR, P, free_size(shape), s.dtype, reads, writes, src_extra(s))
    vals = None
    if v is not None:
        with np.errstate(all="ignore"):
            vals = np.exp(v - bcast_shape(mv, shape)).astype(F32)
    init = and_init(ini, bcast_shape(mi, shape))
    finish(ctx, out, fresh, vals, init, mask, ins)
    cmd = getattr(reduce_cmd, "value", reduce_cmd)
    if cmd != "idle" or reduce_res is not None:
        regs = registers(ctx, "vector_regs")
        if cmd in ("reset", "reset_reduce"):
            regs[:P] = 0
        elif cmd == "load_reduce":
            rv, _, _ = pcol(ctx, reduce_init, P, opc, "reduce_init")
            regs[:P] = np.broadcast_to(np.asarray(rv, F32).reshape(-1), (P,))
        if cmd in ("reduce", "reset_reduce", "load_reduce") and vals is not None:
            regs[:P] += vals.reshape(P, -1).sum(axis=1)
        if reduce_res is not None:
            rini = None if init is None else init.reshape(P, -1).all(axis=1).reshape(reduce_res.shape)
            reduce_res.write(None if v is None else regs[:P].reshape(reduce_res.shape).copy(), rini, None)
    return out


_REDUCE_IDENTITY = {"add": 0.0, "multiply": 1.0, "maximum": -np.inf, "minimum": np.inf}


def tensor_scalar_reduce(ctx, dst, data, op0, operand0, reduce_op, reduce_res=None, reverse0=False,
                         reduce_cmd=None, reduce_init=None, reduce_res_negate=False, mask=None,
                         dtype=None, name=None, **_):
    """dst = data <op0> operand0; reduce_res = reduce_op over all free axes of that result (the
    float32 values, before rounding to dst's dtype; masked-off elements do not take part).
    reduce_cmd works the Vector Engine's accumulator registers: omitted, idle or reset_reduce start
    from the operator's identity, reduce continues from the registers, load_reduce from
    reduce_init, reset only resets them; any command but idle leaves the result in them."""
    opc = "tensor_scalar_reduce"
    f0, fr = ops.lookup(op0, 2), ops.lookup(reduce_op, 2)
    if f0.bitvec:
        raise KernelError(f"nisa.{opc}: op0 must be an arithmetic operator, got {f0.name}")
    if fr.name not in _REDUCE_IDENTITY:
        raise KernelError(f"nisa.{opc}: reduce_op must be add, multiply, max or min, got {fr.name}")
    src = onchip(ctx, data, "data", opc)
    shape, P = src.shape, src.shape[0]
    check_layout(ctx, src, opc, "data")
    cmd = getattr(reduce_cmd, "value", reduce_cmd)
    if reduce_res is None and cmd in (None, "idle"):
        raise KernelError(f"nisa.{opc} needs reduce_res (or a reduce_cmd that accumulates)")
    m = mask_of(mask, shape)
    v, ini = read(ctx, src, opc, "data", m)
    o0, i0, t0 = pcol(ctx, operand0, P, opc, "operand0")
    out, fresh = dst_tile(ctx, dst, shape, dtype_of(dst, dtype, src.dtype), SBUF, opc, mask)
    check_layout(ctx, out, opc, "dst")
    reads = [src.region()] + ([t0.region()] if t0 is not None else [])
    writes = [out.region()]
    if reduce_res is not None:
        onchip(ctx, reduce_res, "reduce_res", opc)
        if reduce_res.shape[0] != P or free_size(reduce_res.shape) != 1:
            raise KernelError(f"nisa.{opc}: reduce_res must have shape [{P}, 1], got {reduce_res.shape}")
        writes.append(reduce_res.region())
    rv, ri, rt = (None, None, None)
    if cmd == "load_reduce":
        rv, ri, rt = pcol(ctx, 0.0 if reduce_init is None else reduce_init, P, opc, "reduce_init")
        if rt is not None:
            reads.append(rt.region())
    ins = ctx.emit(opc, Engine.VECTOR, P, free_size(shape), src.dtype, reads, writes,
                   {**src_extra(src), "op0": f0.name, "reduce_op": fr.name})
    vals = None if v is None else apply_op(f0, v, bcast_shape(o0, shape), reverse0).astype(F32)
    init = and_init(ini, bcast_shape(i0, shape))
    finish(ctx, out, fresh, vals, init, mask, ins)
    regs = registers(ctx, "vector_regs")
    ident = F32(_REDUCE_IDENTITY[fr.name])
    if cmd == "reduce":
        acc = regs[:P].copy()
    elif cmd == "load_reduce":
        acc = np.broadcast_to(np.asarray(rv, F32).reshape(-1), (P,)).copy()
    else:
        acc = np.full(P, ident, F32)
    if vals is not None and cmd != "reset":
        part = vals.reshape(P, -1) if m is None else np.where(m, vals, ident).reshape(P, -1)
        acc = ops.apply_binary(fr, acc, fr.reduce_fn(part, axis=1)).astype(F32)
    if cmd not in (None, "idle"):
        regs[:P] = acc
    if reduce_res is not None:
        rini = None
        if init is not None or ri is not None:
            ok = np.ones((P, 1), bool) if init is None else (
                init.reshape(P, -1) | (False if m is None else ~m.reshape(P, -1))).all(axis=1, keepdims=True)
            rini = and_init(ok, ri).reshape(reduce_res.shape)
        res = None if v is None else (-acc if reduce_res_negate else acc).reshape(reduce_res.shape)
        reduce_res.write(res, rini, None)
    return out
