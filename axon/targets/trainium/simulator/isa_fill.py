"""nki.isa instructions driven by positions rather than data: iota (values from index
expressions or an affine pattern, GpSimd), memset (a constant), and affine_select (a tile or a
constant, chosen per element by an affine predicate of the indices, GpSimd).

Invariant: a generated value or a selection depends only on its position (partition and free
indices) and compile-time constants, never on tile data.
"""
from __future__ import annotations

import numpy as np

from axon.errors import KernelError
from axon.targets.trainium.trace import Engine

from . import dtypes, ops
from .indexing import IndexExpr, Predicate, mask_array
from .memory import Tile
from .operands import (F32, SBUF, check_layout, dst_tile, dtype_of, engine_of, finish, free_size,
                       mask_of, onchip, read, src_extra)


def _affine_pattern(P, pattern, offset, channel_multiplier):
    """offset + channel_multiplier * p + sum(step_i * index_i), shaped [P, num_1, ...]."""
    grids = np.ix_(*[np.arange(n) * step for step, n in pattern]) if pattern else ()
    free = sum(grids) if pattern else np.zeros(1)
    return offset + channel_multiplier * np.arange(P).reshape((P,) + (1,) * np.ndim(free)) + free


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
        vals_i = _affine_pattern(dst.shape[0], pattern, offset, channel_multiplier)
        shape = vals_i.shape
    else:
        raise KernelError("nisa.iota needs an index expression (nl.arange / nl.mgrid) or a pattern")
    out, fresh = dst_tile(ctx, dst, shape, dtype_of(dst, dtype, dtypes.int32), SBUF, opc, mask)
    check_layout(ctx, out, opc, "dst")
    ins = ctx.emit(opc, Engine.GPSIMD, out.shape[0], free_size(out.shape), out.dtype, (), (out.region(),))
    vals = None if ctx.timing_only else np.asarray(vals_i).reshape(out.shape)
    return finish(ctx, out, fresh, vals, None, mask, ins)


def memset(ctx, dst, value, dtype=None, engine=None, shape=None, mask=None, name=None, *,
           explicit=False, **_):
    """dst = value. `explicit`: the kernel called nisa.memset itself, an instruction the compiler
    keeps (a PSUM zeroing from nl.zeros or an assignment it may fold into the first matmul)."""
    opc = "memset"
    if dst is None:
        out, fresh = dst_tile(ctx, None, shape, dtypes.to_dtype(dtype or dtypes.float32), SBUF, opc)
    else:
        out, fresh = onchip(ctx, dst, "dst", opc), False
    check_layout(ctx, out, opc, "dst")
    ins = ctx.emit(opc, engine_of(engine, Engine.VECTOR), out.shape[0], free_size(out.shape), out.dtype,
                   (), (out.region(),), extra={"explicit": True} if explicit else None)
    return finish(ctx, out, fresh, None if ctx.timing_only else value, None, mask, ins)


_SELECT_CURRENT = ("pattern", "offset", "channel_multiplier", "on_true_tile", "on_false_value", "cmp_op")
_SELECT_BETA1 = ("pred", "on_true_tile", "on_false_value")


def affine_select(ctx, dst, *args, mask=None, dtype=None, name=None, **kw):
    """out = on_true_tile where the predicate holds, else on_false_value (a float32 constant).
    Current form: affine_select(dst, pattern, offset, channel_multiplier, on_true_tile,
    on_false_value, cmp_op=nl.equal), predicate cmp_op(offset + channel_multiplier * p +
    sum(step_i * index_i), 0) over the pattern's [[step, num], ...]. Beta-1 form:
    affine_select(pred, on_true_tile, on_false_value), pred a single comparison of affine index
    expressions (combine several with nl.where instead)."""
    opc = "affine_select"
    if dst is None and args and isinstance(args[0], Tile):  # a current-form call, dst positional
        dst, args = args[0], args[1:]
    current = dst is not None or "pattern" in kw
    names = _SELECT_CURRENT if current else _SELECT_BETA1
    if len(args) > len(names):
        raise KernelError(f"nisa.{opc} takes at most {len(names)} positional arguments after dst")
    a = dict(zip(names, args))
    for k, val in kw.items():
        if k not in names or k in a:
            raise KernelError(f"nisa.{opc}: unexpected or repeated argument {k!r}")
        a[k] = val
    missing = [k for k in (names[0], "on_true_tile", "on_false_value") if k not in a]
    if missing:
        raise KernelError(f"nisa.{opc} needs {', '.join(missing)}")
    on_true = onchip(ctx, a["on_true_tile"], "on_true_tile", opc)
    shape, P = on_true.shape, on_true.shape[0]
    check_layout(ctx, on_true, opc, "on_true_tile")
    false_value = a["on_false_value"]
    if isinstance(false_value, Tile) or not isinstance(false_value, (int, float, np.integer, np.floating)):
        raise KernelError(f"nisa.{opc}: on_false_value must be a float32 constant, "
                          f"got {type(false_value).__name__}")
    if current:
        if dst is None:
            raise KernelError(f"nisa.{opc} with a pattern needs dst")
        cmp = ops.lookup(a.get("cmp_op", ops.OPS["equal"]), 2)
        aff = _affine_pattern(P, a["pattern"], a.get("offset", 0), a.get("channel_multiplier", 0))
        if aff.size != P * free_size(shape):
            raise KernelError(f"nisa.{opc}: the pattern covers {aff.shape}, on_true_tile has shape {shape}")
        pred = np.asarray(ops.apply_binary(cmp, aff.astype(F32), F32(0)) != 0).reshape(shape)
    else:
        p = a["pred"]
        if not isinstance(p, Predicate):
            raise KernelError(f"nisa.{opc}: pred must be a comparison of index expressions "
                              f"(nl.arange / nl.mgrid), got {type(p).__name__}")
        if p.combined:
            raise KernelError(f"nisa.{opc}: pred must be one affine comparison, not several combined "
                              f"with & or | (use nl.where for a compound condition)")
        pred = mask_array(p, shape)
    m = mask_of(mask, shape)
    v, ini = read(ctx, on_true, opc, "on_true_tile", m)
    out, fresh = dst_tile(ctx, dst, shape, dtype_of(dst, dtype, on_true.dtype), SBUF, opc, mask)
    check_layout(ctx, out, opc, "dst")
    ins = ctx.emit(opc, Engine.GPSIMD, P, free_size(shape), on_true.dtype, (on_true.region(),),
                   (out.region(),), src_extra(on_true))
    vals = None if v is None else np.where(pred, v, F32(false_value))
    init = None if ini is None else (ini | ~pred)
    return finish(ctx, out, fresh, vals, init, mask, ins)


_QUADRANT = 32  # partitions a stream shuffle permutes within [nki.isa.nc_stream_shuffle docs]
_KEEP = 255  # a shuffle_mask entry that leaves its destination partition unmodified


def nc_stream_shuffle(ctx, dst, src, shuffle_mask, mask=None, name=None, **_):
    """Cross-partition move on the Vector Engine: destination partition j (counted from dst's first
    partition) takes source partition 32 * (j // 32) + shuffle_mask[j % 32] (counted from src's
    first); a mask entry of 255 leaves partition j unmodified. Same dtype and free size."""
    opc = "nc_stream_shuffle"
    s, out = onchip(ctx, src, "src", opc), onchip(ctx, dst, "dst", opc)
    if s.dtype != out.dtype:
        raise KernelError(f"nisa.{opc}: dst is {out.dtype.name} but src is {s.dtype.name} (no conversion)")
    if free_size(s.shape) != free_size(out.shape):
        raise KernelError(f"nisa.{opc}: dst {out.shape} and src {s.shape} differ in elements per partition")
    picks = _shuffle_sources(shuffle_mask, out.shape[0], s.shape[0], opc)
    ins = ctx.emit(opc, Engine.VECTOR, out.shape[0], free_size(out.shape), out.dtype, (s.region(),),
                   (out.region(),), src_extra(s))
    v, ini = read(ctx, s, opc, "src", exact=True)  # a move: integers keep every bit
    rows = np.array([j for j, _ in picks], dtype=np.int64)
    from_rows = np.array([p for _, p in picks], dtype=np.int64)
    written = np.zeros(out.shape, dtype=bool)
    written[rows] = True
    vals = None
    if v is not None:
        vals = np.zeros(out.shape, dtype=v.dtype)
        vals[rows] = v.reshape(s.shape[0], -1)[from_rows].reshape((len(rows),) + out.shape[1:])
    init = None
    if ini is not None:
        init = np.zeros(out.shape, dtype=bool)
        init[rows] = ini.reshape(s.shape[0], -1)[from_rows].reshape((len(rows),) + out.shape[1:])
    out.write(vals, init, written)
    return out


def _shuffle_sources(shuffle_mask, n_dst: int, n_src: int, opc: str) -> list[tuple[int, int]]:
    """(destination partition, source partition) pairs, both relative to their tiles."""
    try:
        entries = [int(m) for m in shuffle_mask]
    except (TypeError, ValueError):
        raise KernelError(f"nisa.{opc}: shuffle_mask must be a list of {_QUADRANT} integers") from None
    if len(entries) != _QUADRANT or any(not (0 <= m < _QUADRANT or m == _KEEP) for m in entries):
        raise KernelError(f"nisa.{opc}: shuffle_mask must hold {_QUADRANT} entries in 0..31 or 255, got {entries}")
    picks = []
    for j in range(n_dst):
        m = entries[j % _QUADRANT]
        if m == _KEEP:
            continue
        source = (j // _QUADRANT) * _QUADRANT + m
        if source >= n_src:
            raise KernelError(f"nisa.{opc}: destination partition {j} reads source partition {source}, "
                              f"but src spans {n_src} partitions")
        picks.append((j, source))
    return picks


def nc_n_gather(ctx, dst, data, indices, mask=None, name=None, **_):
    """Per-partition gather on the GpSimd Engine: dst[p, j] = data[p, indices[p, j]], the free
    elements of data (and of indices) flattened; all three in SBUF, indices uint32, dst of data's
    dtype and of indices' free shape [nki.isa.nc_n_gather]. An index past data's elements is an
    error (the documentation gives it no meaning)."""
    opc = "nc_n_gather"
    d = onchip(ctx, data, "data", opc, allowed=(SBUF,))
    ix = onchip(ctx, indices, "indices", opc, allowed=(SBUF,))
    if ix.dtype != np.uint32:
        raise KernelError(f"nisa.{opc}: indices must be uint32, got {ix.dtype.name}")
    P, n, m = d.shape[0], free_size(d.shape), free_size(ix.shape)
    if ix.shape[0] != P:
        raise KernelError(f"nisa.{opc}: data has {P} partitions but indices has {ix.shape[0]}")
    out, fresh = dst_tile(ctx, dst, ix.shape, dtype_of(dst, None, d.dtype), SBUF, opc, mask)
    if out.dtype != d.dtype:
        raise KernelError(f"nisa.{opc}: dst is {out.dtype.name} but data is {d.dtype.name}")
    ins = ctx.emit(opc, Engine.GPSIMD, P, m, d.dtype, (d.region(), ix.region()), (out.region(),), src_extra(d, ix))
    _, dini = read(ctx, d, opc, "data")
    _, iini = read(ctx, ix, opc, "indices")
    vals = init = None
    if not ctx.timing_only:
        at = ix.values().reshape(P, m).astype(np.int64)
        if at.size and (at.max() >= n):
            p, j = np.argwhere(at >= n)[0]
            raise KernelError(f"nisa.{opc}: index {at[p, j]} at partition {p} is past data's {n} elements per partition")
        vals = np.take_along_axis(d.values().reshape(P, n), at, axis=1).reshape(out.shape)
        if dini is not None:
            init = np.take_along_axis(np.broadcast_to(dini, d.shape).reshape(P, n), at, axis=1).reshape(out.shape)
            init = init if iini is None else init & np.broadcast_to(iini, ix.shape).reshape(out.shape)
    return finish(ctx, out, fresh, vals, init, mask, ins)
