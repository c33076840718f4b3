"""nki.isa Tensor Engine instructions: nc_matmul (stationary^T @ moving into PSUM, accumulating)
and nc_transpose (on the Tensor Engine into PSUM, or 32x32 on the Vector Engine).

Invariant: a matmul result occupies one PSUM bank; the first matmul into a PSUM location
overwrites it and later ones add, unless `accumulate` says otherwise.
"""
from __future__ import annotations

import numpy as np

from axon.errors import KernelError
from axon.targets.trainium.trace import Engine

from . import dtypes
from .operands import (PSUM, SBUF, and_init, as_tile, check_layout, dst_tile, dtype_of, engine_of,
                       finish, free_size, holds_data, onchip, read)


def nc_matmul(ctx, dst, stationary, moving, is_stationary_onezero=False, is_moving_onezero=False,
              is_transpose=False, accumulate=None, tile_position=(), tile_size=(), perf_mode=None,
              mask=None, name=None, **_):
    op = "nc_matmul"
    st = onchip(ctx, stationary, "stationary", op, (SBUF,))
    # the moving tile may be read from PSUM (the compiler accepts it; the PE array streams it)
    mv = onchip(ctx, moving, "moving", op, (SBUF, PSUM))
    # is_transpose=True: the PE array passes the stationary tile through an identity moving tile,
    # which is the same product stationary.T @ moving; the one-zero flags only speed it up.
    tiles = ctx.hw.tiles
    K, M, N = st.shape[0], free_size(st.shape), free_size(mv.shape)
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
    pe_tile = _pe_tile(ctx, tile_position, tile_size, K, M, perf_mode)
    check_layout(ctx, st, op, "stationary")
    check_layout(ctx, mv, op, "moving")
    if dst is not None:
        as_tile(dst, "dst", op)
        if dst.buf.memory is not PSUM:
            raise KernelError(f"nisa.nc_matmul: the result must go to PSUM, dst is in "
                              f"{dst.buf.memory.value.upper()}")
    out, fresh = dst_tile(ctx, dst, (M, N), dtypes.float32, PSUM, op, mask)
    check_layout(ctx, out, op, "dst")
    reg = out.region()
    bank = ctx.hw.memory.psum_bank_bytes
    if reg.b_start // bank != (reg.b_stop - 1) // bank:
        raise KernelError(f"nisa.nc_matmul: the result ({reg.b_stop - reg.b_start} bytes per "
                          f"partition at offset {reg.b_start}) must fit in one {bank}-byte PSUM bank")
    if accumulate is None:  # the first matmul into a PSUM location overwrites, later ones add
        accumulate = not fresh and holds_data(out, everywhere=True)
    sv, si = read(ctx, st, op, "stationary")
    mvv, mi = read(ctx, mv, op, "moving")
    reads = (st.region(), mv.region()) + ((reg,) if accumulate else ())
    ins = ctx.emit(op, Engine.TENSOR, K, N, mv.dtype, reads, (reg,),
                   {"stationary_free": M, "moving_free": N, "contraction": K,
                    "accumulate": bool(accumulate), **({"pe_tile": pe_tile} if pe_tile else {})})
    init = None
    if si is not None or mi is not None:
        s_ok = np.ones(M, bool) if si is None else si.reshape(K, M).all(axis=0)
        m_ok = np.ones(N, bool) if mi is None else mi.reshape(K, N).all(axis=0)
        init = s_ok[:, None] & m_ok[None, :]
    vals = None
    if sv is not None:
        vals = sv.reshape(K, M).T @ mvv.reshape(K, N)
    if accumulate:
        old, oi = read(ctx, out, op, "dst")
        if vals is not None:
            vals = old.reshape(M, N) + vals
        init = and_init(init, None if oi is None else oi.reshape(M, N))
    return finish(ctx, out, fresh, vals, init, mask, ins)


def _pe_tile(ctx, tile_position, tile_size, K: int, M: int, perf_mode):
    """(start row, start column, rows, columns) of the PE-array tile a matmul runs on in tiling
    mode, checked as the ISA states it; None for the whole array (neither argument given)."""
    op = "nisa.nc_matmul"
    if not tile_position and not tile_size:
        return None
    if not tile_position or not tile_size:
        raise KernelError(f"{op}: tile_position and tile_size must both be set to use tiling mode")
    try:
        (r0, c0), (rows, cols) = ((int(a), int(b)) for a, b in (tile_position, tile_size))
    except (TypeError, ValueError):
        raise KernelError(f"{op}: tile_position and tile_size are (row, column) pairs of integers, got "
                          f"{tile_position!r} and {tile_size!r}") from None
    sizes, side = ctx.hw.tiles.pe_tile_sizes, ctx.hw.tiles.pmax
    for what, start, size in (("row", r0, rows), ("column", c0, cols)):
        if size not in sizes:
            raise KernelError(f"{op}: a {what} tile of {size} PEs; {ctx.hw.name} slices its array into "
                              f"{' or '.join(map(str, sizes))}")
        if start < 0 or start % size or start + size > side:
            raise KernelError(f"{op}: the {what} tile starts at {start}: a multiple of its size {size} "
                              f"within the {side} PE {what}s")
    if K > rows:
        raise KernelError(f"{op}: contraction size {K} exceeds the row tile size {rows}")
    if M > cols:
        raise KernelError(f"{op}: stationary free size {M} exceeds the column tile size {cols}")
    if perf_mode == "double_row" and cols < side:
        raise KernelError(f"{op}: double_row performance mode cannot be combined with column tiling")
    return (r0, c0, rows, cols)


def nc_transpose(ctx, dst, data, engine=None, mask=None, dtype=None, name=None, **_):
    op = "nc_transpose"
    src = onchip(ctx, data, "data", op)
    if len(src.shape) < 2:
        raise KernelError(f"nisa.nc_transpose: data needs a free axis, got shape {src.shape}")
    P, F = src.shape[0], free_size(src.shape)  # several free axes: flattened into one [isa]
    default = Engine.TENSOR if (dst is None or dst.buf.memory is PSUM) else Engine.VECTOR
    eng = engine_of(engine, default)
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
    check_layout(ctx, src, op, "data")
    out, fresh = dst_tile(ctx, dst, (F, P), dtype_of(dst, dtype, src.dtype), mem, op, mask)
    if eng is Engine.TENSOR and out.buf.memory is not PSUM:
        raise KernelError("nisa.nc_transpose: the Tensor Engine writes its result to PSUM")
    check_layout(ctx, out, op, "dst")
    v, ini = read(ctx, src, op, "data")
    ins = ctx.emit(op, eng, P, F, src.dtype, (src.region(),), (out.region(),),
                   {"stationary_free": P, "moving_free": P, "contraction": P} if eng is Engine.TENSOR else None)
    flat = lambda a: None if a is None else a.reshape(P, F).T
    return finish(ctx, out, fresh, flat(v), flat(ini), mask, ins)
