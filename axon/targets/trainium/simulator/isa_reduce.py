"""nki.isa reductions and scans: tensor_reduce (free axes), tensor_partition_reduce (across
partitions, GpSimd), tensor_tensor_scan and tensor_scalar_cumulative (running results along the
free axis, the latter through the Vector Engine's accumulator registers), and the batch-norm
statistics pair bn_stats / bn_aggr (per-partition mean and variance).

Invariant: a reduced or scanned element counts as initialised only when every input element it
depends on was (a scan carries an uninitialised element forward).
"""
from __future__ import annotations

import numpy as np

from axon.errors import KernelError
from axon.targets.trainium.trace import Engine

from . import ops
from .operands import (F32, PSUM, SBUF, and_init, apply_op, as_tile, bcast_shape, check_layout,
                       dst_tile, dtype_of, elementwise_operand, finish, free_size, mask_of, norm_axes,
                       onchip, pcol, read, registers, src_extra)


def tensor_reduce(ctx, dst, op, data, axis, negate=False, keepdims=False, mask=None, dtype=None,
                  name=None, **_):
    opc = "tensor_reduce"
    fn = ops.lookup(op, 2)
    if fn.reduce_fn is None:
        raise KernelError(f"nisa.tensor_reduce: {fn.name} is not a reduction operator")
    src = onchip(ctx, data, "data", opc)
    check_layout(ctx, src, opc, "data")
    axes = norm_axes(axis, len(src.shape), opc)
    shape = tuple(1 if (i in axes) else s for i, s in enumerate(src.shape)) if keepdims else \
        tuple(s for i, s in enumerate(src.shape) if i not in axes)
    v, ini = read(ctx, src, opc, "data")
    out, fresh = dst_tile(ctx, dst, shape, dtype_of(dst, dtype, src.dtype), SBUF, opc, mask)
    check_layout(ctx, out, opc, "dst")
    ins = ctx.emit(opc, Engine.VECTOR, src.shape[0], free_size(src.shape), src.dtype, (src.region(),),
                   (out.region(),), {**src_extra(src), "op": fn.name})
    vals = None
    if v is not None:
        if fn.bitvec:
            vals = fn.reduce_fn(v.astype(np.int32), axis=axes)
        else:
            vals = fn.reduce_fn(v, axis=axes, dtype=F32) if fn.name in ("add", "multiply") else fn.reduce_fn(v, axis=axes)
            if negate:
                vals = -vals
    init = None if ini is None else ini.all(axis=axes)
    return finish(ctx, out, fresh, None if vals is None else np.asarray(vals).reshape(out.shape),
                   None if init is None else init.reshape(out.shape), mask, ins)


def tensor_partition_reduce(ctx, dst, op, data, mask=None, dtype=None, name=None, **_):
    opc = "tensor_partition_reduce"
    mean = getattr(op, "name", "") == "mean"  # nl.mean: the sum over partitions, divided by their number
    fn = ops.OPS["add"] if mean else ops.lookup(op, 2)
    src = onchip(ctx, data, "data", opc)
    check_layout(ctx, src, opc, "data")
    shape = (1,) + tuple(src.shape[1:])
    v, ini = read(ctx, src, opc, "data")
    out, fresh = dst_tile(ctx, dst, shape, dtype_of(dst, dtype, src.dtype), SBUF, opc, mask)
    ins = ctx.emit(opc, Engine.GPSIMD, src.shape[0], free_size(src.shape), src.dtype, (src.region(),),
                   (out.region(),), {**src_extra(src), "op": fn.name})
    vals = None
    if v is not None:
        vals = (fn.reduce_fn(v.astype(np.int32), axis=0) if fn.bitvec else fn.reduce_fn(v, axis=0))
        vals = np.asarray(vals, dtype=np.float32 if not fn.bitvec else np.int32).reshape(shape)
        if mean:
            vals = vals / F32(src.shape[0])
    return finish(ctx, out, fresh, vals, None if ini is None else ini.all(axis=0).reshape(shape), mask, ins)


def tensor_tensor_scan(ctx, dst, data0, data1, initial, op0, op1, reverse0=False, reverse1=False,
                       mask=None, dtype=None, name=None, **_):
    opc = "tensor_tensor_scan"
    f0, f1 = ops.lookup(op0, 2), ops.lookup(op1, 2)
    a = onchip(ctx, data0, "data0", opc)
    shape, P = a.shape, a.shape[0]
    a, av, ai = elementwise_operand(ctx, a, shape, opc, "data0")
    b, bv, bi = elementwise_operand(ctx, data1, shape, opc, "data1")
    if a.buf.memory is PSUM and b.buf.memory is PSUM:
        raise KernelError("nisa.tensor_tensor_scan: data0 and data1 cannot both be in PSUM")
    iv, ii, it = pcol(ctx, initial, P, opc, "initial")
    out, fresh = dst_tile(ctx, dst, shape, dtype_of(dst, dtype, a.dtype), SBUF, opc, mask)
    check_layout(ctx, out, opc, "dst")
    reads = [a.region(), b.region()] + ([it.region()] if it is not None else [])
    ins = ctx.emit(opc, Engine.VECTOR, P, free_size(shape), a.dtype, reads, (out.region(),),
                   {**src_extra(a, b), "op0": f0.name, "op1": f1.name})
    vals = None
    if av is not None:
        x0, x1 = av.reshape(P, -1), bv.reshape(P, -1)
        res = np.empty_like(x0)
        prev = np.broadcast_to(np.asarray(iv, F32).reshape(-1), (P,)) if np.ndim(iv) else np.full(P, iv, F32)
        for i in range(x0.shape[1]):
            t = apply_op(f0, x0[:, i], prev, reverse0)
            prev = apply_op(f1, t, x1[:, i], reverse1).astype(F32)
            res[:, i] = prev
        vals = res.reshape(shape)
    init = and_init(ai, bi)
    if init is not None:  # a scan carries an uninitialised element forward
        init = np.logical_and.accumulate(init.reshape(P, -1), axis=1).reshape(shape)
    if ii is not None:
        init = and_init(init, np.broadcast_to(ii.reshape(P, *([1] * (len(shape) - 1))), shape))
    return finish(ctx, out, fresh, vals, init, mask, ins)


_CUMULATIVE_RESET = {"add": 0.0, "subtract": 0.0, "multiply": 1.0, "maximum": -np.inf, "minimum": np.inf}


def tensor_scalar_cumulative(ctx, dst, src, op0, op1, imm0, imm1=None, reduce_cmd="reset_reduce",
                             reverse0=False, mask=None, dtype=None, name=None, **_):
    opc = "tensor_scalar_cumulative"
    f0, f1 = ops.lookup(op0, 2), ops.lookup(op1, 2)
    if f1.name not in _CUMULATIVE_RESET:
        raise KernelError(f"nisa.{opc}: op1 must be add, subtract, multiply, max or min, got {f1.name}")
    s = onchip(ctx, src, "src", opc)
    shape, P = s.shape, s.shape[0]
    check_layout(ctx, s, opc, "src")
    v, ini = read(ctx, s, opc, "src")
    o0, i0, t0 = pcol(ctx, imm0, P, opc, "imm0")
    out, fresh = dst_tile(ctx, dst, shape, dtype_of(dst, dtype, s.dtype), SBUF, opc, mask)
    check_layout(ctx, out, opc, "dst")
    reads = [s.region()] + ([t0.region()] if t0 is not None else [])
    ins = ctx.emit(opc, Engine.VECTOR, P, free_size(shape), s.dtype, reads, (out.region(),),
                   {**src_extra(s), "op0": f0.name, "op1": f1.name})
    regs = registers(ctx, "vector_regs")
    cmd = getattr(reduce_cmd, "value", reduce_cmd)
    if cmd == "reset_reduce":
        regs[:P] = _CUMULATIVE_RESET[f1.name]
    elif cmd == "load_reduce":
        iv, _, _ = pcol(ctx, imm1, P, opc, "imm1")
        regs[:P] = np.broadcast_to(np.asarray(iv, F32).reshape(-1), (P,))
    vals = None
    if v is not None:
        x = apply_op(f0, v.reshape(P, -1), o0 if np.ndim(o0) == 0 else o0.reshape(P, 1), reverse0)
        res = np.empty_like(x, dtype=F32)
        reg = regs[:P].copy()
        for i in range(x.shape[1]):
            reg = ops.apply_binary(f1, x[:, i], reg).astype(F32)
            res[:, i] = reg
        regs[:P] = reg
        vals = res.reshape(shape)
    init = and_init(ini, bcast_shape(i0, shape))
    if init is not None:
        init = np.logical_and.accumulate(init.reshape(P, -1), axis=1).reshape(shape)
    return finish(ctx, out, fresh, vals, init, mask, ins)


# ----- batch-norm statistics (Vector Engine) -------------------------------------------------
# bn_stats writes, per partition, two (count, mean, variance * count) groups: one over the even
# and one over the odd elements of its input; bn_aggr merges any number of such groups into a
# mean and a (population) variance [isa bn_stats, bn_aggr]. Both compute in float32.

def bn_stats(ctx, dst, data, mask=None, dtype=None, name=None, **_):
    """Elements masked off do not count; "even" and "odd" follow the order in which the active
    elements stream through the engine (for a prefix mask, their free index parity)."""
    opc = "bn_stats"
    src = as_tile(data, "data", opc)
    m = mask_of(mask, src.shape)
    onchip(ctx, src, "data", opc, mask=m)
    check_layout(ctx, src, opc, "data")
    P, F = src.shape[0], free_size(src.shape)
    fmax = ctx.hw.tiles.bn_stats_free_max
    if F > fmax:
        raise KernelError(f"nisa.bn_stats: data has {F} elements per partition, more than "
                          f"bn_stats_fmax = {fmax}; split it and merge the stats with bn_aggr")
    v, ini = read(ctx, src, opc, "data", m)
    active = np.ones((P, F), bool) if m is None else m.reshape(P, F)
    rows = active.any(axis=1)  # a partition with no active element is not written
    wmask = None if m is None else np.broadcast_to(rows[:, None], (P, 6))
    out, fresh = dst_tile(ctx, dst, (P, 6), dtype_of(dst, dtype, src.dtype), SBUF, opc, wmask)
    if wmask is not None:
        wmask = np.broadcast_to(rows.reshape((P,) + (1,) * (len(out.shape) - 1)), out.shape)
    check_layout(ctx, out, opc, "dst")
    ins = ctx.emit(opc, Engine.VECTOR, P, F, src.dtype, (src.region(),), (out.region(),), src_extra(src))
    vals = None
    if v is not None:
        rank = np.cumsum(active, axis=1) - 1
        x = v.reshape(P, F)
        groups = []
        for parity in (0, 1):
            sel = active & (rank % 2 == parity)
            n = sel.sum(axis=1).astype(F32)
            mean = np.divide(np.where(sel, x, 0).sum(axis=1, dtype=F32), n,
                             out=np.zeros(P, F32), where=n > 0)
            m2 = np.where(sel, x - mean[:, None], 0)
            groups += [n, mean, (m2 * m2).sum(axis=1, dtype=F32)]
        vals = np.stack(groups, axis=1).astype(F32)
    init = None
    if ini is not None:
        ok = (ini.reshape(P, F) | ~active).all(axis=1, keepdims=True)
        init = np.broadcast_to(ok, (P, 6))
    return finish(ctx, out, fresh, vals, init, wmask, ins)


def bn_aggr(ctx, dst, data, mask=None, dtype=None, name=None, **_):
    """A partition whose groups all have count 0 gets mean 0 and variance 0 (undocumented)."""
    opc = "bn_aggr"
    src = onchip(ctx, data, "data", opc)
    check_layout(ctx, src, opc, "data")
    P, F = src.shape[0], free_size(src.shape)
    if F % 3:
        raise KernelError(f"nisa.bn_aggr: data must hold (count, mean, variance*count) groups, a "
                          f"multiple of 3 elements per partition; got {F}")
    v, ini = read(ctx, src, opc, "data")
    out, fresh = dst_tile(ctx, dst, (P, 2), dtype_of(dst, dtype, src.dtype), SBUF, opc, mask)
    check_layout(ctx, out, opc, "dst")
    ins = ctx.emit(opc, Engine.VECTOR, P, F, src.dtype, (src.region(),), (out.region(),), src_extra(src))
    vals = None
    if v is not None:
        g = v.reshape(P, F // 3, 3)
        n, mean, m2 = g[..., 0], g[..., 1], g[..., 2]
        has = n > 0
        total = np.where(has, n, 0).sum(axis=1, dtype=F32)
        some = total > 0
        mu = np.divide(np.where(has, n * mean, 0).sum(axis=1, dtype=F32), total,
                       out=np.zeros(P, F32), where=some)
        d = np.where(has, mean - mu[:, None], 0)
        M2 = np.where(has, m2 + n * d * d, 0).sum(axis=1, dtype=F32)
        var = np.divide(M2, total, out=np.zeros(P, F32), where=some)
        vals = np.stack([mu, var], axis=1).astype(F32)
    init = None if ini is None else np.broadcast_to(ini.reshape(P, F).all(axis=1, keepdims=True), (P, 2))
    return finish(ctx, out, fresh, vals, init, mask, ins)


_TOP = 8  # values per partition that max8 / nc_find_index8 handle [nki.isa docs]
_FREE_RANGE = (8, 16384)  # elements per partition they read
_NOT_FOUND = {np.dtype(np.uint32): 0xFFFFFFFF, np.dtype(np.uint16): 0xFFFF}


def _eight_per_partition(t, P, opc, what):
    if t.shape[0] != P or free_size(t.shape) != _TOP:
        raise KernelError(f"nisa.{opc}: {what} must be [{P}, {_TOP}], got {t.shape}")


def _free_elements(src, opc, what):
    n = free_size(src.shape)
    if not _FREE_RANGE[0] <= n <= _FREE_RANGE[1]:
        raise KernelError(f"nisa.{opc}: {what} has {n} elements per partition; "
                          f"{_FREE_RANGE[0]}..{_FREE_RANGE[1]} are allowed")
    return n


def max8(ctx, dst, src, mask=None, dtype=None, name=None, **_):
    """The 8 largest values of each partition (read in float32), in descending order, on the
    Vector Engine [nki.isa.max8]."""
    opc = "max8"
    s = onchip(ctx, src, "src", opc)
    n = _free_elements(s, opc, "src")
    P = s.shape[0]
    out, fresh = dst_tile(ctx, dst, (P, _TOP), dtype_of(dst, dtype, s.dtype), SBUF, opc, mask)
    _eight_per_partition(out, P, opc, "dst")
    ins = ctx.emit(opc, Engine.VECTOR, P, n, s.dtype, (s.region(),), (out.region(),), src_extra(s))
    v, ini = read(ctx, s, opc, "src")
    vals = None if v is None else -np.sort(-v.reshape(P, n), axis=1)[:, :_TOP].reshape(out.shape)
    init = None if ini is None else np.broadcast_to(ini.reshape(P, n).all(axis=1)[:, None], (P, _TOP))
    return finish(ctx, out, fresh, vals, None if init is None else init.reshape(out.shape), mask, ins)


def nc_find_index8(ctx, dst, data, vals, mask=None, dtype=None, name=None, **_):
    """For each partition, the index (into its flattened free elements) of the first element of
    `data` equal to each of the 8 `vals`, compared in float32; a value not present gives the
    all-ones sentinel of the index dtype (uint32 by default, or uint16) [nki.isa.nc_find_index8]."""
    opc = "nc_find_index8"
    d, w = onchip(ctx, data, "data", opc), onchip(ctx, vals, "vals", opc)
    n = _free_elements(d, opc, "data")
    P = d.shape[0]
    _eight_per_partition(w, P, opc, "vals")
    out, fresh = dst_tile(ctx, dst, (P, _TOP), dtype_of(dst, dtype, np.dtype(np.uint32)), SBUF, opc, mask)
    _eight_per_partition(out, P, opc, "dst")
    if out.dtype not in _NOT_FOUND:
        raise KernelError(f"nisa.{opc}: dst must be uint32 or uint16, got {out.dtype.name}")
    ins = ctx.emit(opc, Engine.VECTOR, P, n, d.dtype, (w.region(), d.region()), (out.region(),),
                   src_extra(d, w))
    m = mask_of(mask, d.shape)  # the mask applies to data only: masked-off elements never match
    dv, dini = read(ctx, d, opc, "data", m)
    wv, wini = read(ctx, w, opc, "vals")
    idx = None
    if dv is not None:
        hits = dv.reshape(P, 1, n) == wv.reshape(P, _TOP, 1)
        if m is not None:
            hits &= m.reshape(P, 1, n)
        idx = np.where(hits.any(axis=2), hits.argmax(axis=2), _NOT_FOUND[out.dtype]).reshape(out.shape)
    init = None if wini is None else wini.reshape(P, _TOP)
    return finish(ctx, out, fresh, idx, None if init is None else np.asarray(init).reshape(out.shape), None, ins)


def nc_match_replace8(ctx, dst, data, vals, imm, dst_idx=None, mask=None, dtype=None, name=None, **_):
    """`data` with the first occurrence, per partition, of each of the 8 `vals` replaced by `imm`
    (compared in float32), on the Vector Engine; with `dst_idx`, the matched positions (into the
    flattened free elements). The vals are taken in reverse order (7 down to 0), each matching the
    first position no earlier val took, so repeated vals pair with distinct occurrences: the first
    occurrence goes to the highest slot [nki.isa.nc_match_replace8]. A val with no occurrence left
    gives the all-ones sentinel of the index dtype, as nc_find_index8's does."""
    opc = "nc_match_replace8"
    d, w = onchip(ctx, data, "data", opc), onchip(ctx, vals, "vals", opc)
    n = _free_elements(d, opc, "data")
    P = d.shape[0]
    _eight_per_partition(w, P, opc, "vals")
    out, fresh = dst_tile(ctx, dst, d.shape, dtype_of(dst, dtype, d.dtype), SBUF, opc, mask)
    idx_out = None
    if dst_idx is not None:
        idx_out, _ = dst_tile(ctx, dst_idx, (P, _TOP), dst_idx.dtype, SBUF, opc)
        if idx_out.dtype not in _NOT_FOUND:
            raise KernelError(f"nisa.{opc}: dst_idx must be uint32 or uint16, got {idx_out.dtype.name}")
    outs = (out.region(),) + ((idx_out.region(),) if idx_out is not None else ())
    ins = ctx.emit(opc, Engine.VECTOR, P, n, d.dtype, (w.region(), d.region()), outs, src_extra(d, w))
    dv, dini = read(ctx, d, opc, "data")
    wv, wini = read(ctx, w, opc, "vals")
    replaced = idx = None
    if dv is not None:
        dv, wv = dv.reshape(P, n), wv.reshape(P, _TOP)
        replaced, taken = dv.copy(), np.zeros((P, n), bool)
        idx = np.full((P, _TOP), _NOT_FOUND[idx_out.dtype if idx_out is not None else np.dtype(np.uint32)])
        for slot in reversed(range(_TOP)):
            hits = (dv == wv[:, slot:slot + 1]) & ~taken
            rows = np.nonzero(hits.any(axis=1))[0]
            pos = hits[rows].argmax(axis=1)
            taken[rows, pos] = True
            replaced[rows, pos] = F32(imm)
            idx[rows, slot] = pos
        replaced = replaced.reshape(out.shape)
    result = finish(ctx, out, fresh, replaced, dini, mask, ins)
    if idx_out is not None:
        init = None if wini is None else np.asarray(wini).reshape(idx_out.shape)
        finish(ctx, idx_out, False, None if idx is None else idx.reshape(idx_out.shape), init, None, ins)
    return result
