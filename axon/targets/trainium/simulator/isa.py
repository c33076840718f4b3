"""nki.isa: the instruction registry and the enum namespaces the loader exposes as `nki.isa`.

Each instruction is one function, written once in the current (dst-first) form, in the module of
its kind: isa_tensor (Tensor Engine), isa_compute (element-wise Scalar/Vector), isa_reduce
(reductions, scans, batch-norm statistics), isa_fill (values and selections driven by indices) and
isa_dma (DMA); operands.py holds what they share. Every instruction checks its hardware rules,
records one trace `Instruction`, and, unless the simulation is timing-only, computes its result
in float32 and rounds it to the destination dtype. The beta-1 form (instructions returning a
fresh tile) calls the same function with `dst=None`.

Invariant: `INSTRUCTIONS` is the whole `nki.isa` instruction namespace (the loader adds the enums
below, their deprecated constants `nisa.vector_engine` etc., and nothing else), and every name in
it has a `BETA1_POSITIONAL` arity. A fresh result tile returned by an instruction remembers its producer, so `t[...] = nisa.x(...)` and
`psum[...] += nisa.nc_matmul(...)` retarget that one instruction instead of issuing a copy (see
language.assign / language.iadd).
"""
from __future__ import annotations

import functools

import numpy as np

from .indexing import Predicate
from .isa_compute import (activation, activation_reduce, exponential, reciprocal, scalar_tensor_tensor,
                          select_reduce, tensor_copy, tensor_copy_predicated, tensor_scalar, tensor_scalar_reduce,
                          tensor_tensor)
from .isa_dma import dma, dma_compute, dma_copy, dma_transpose
from .isa_fill import affine_select, iota, memset, nc_n_gather, nc_stream_shuffle
from .isa_reduce import (bn_aggr, bn_stats, max8, nc_find_index8, nc_match_replace8, tensor_partition_reduce,
                         tensor_reduce, tensor_scalar_cumulative, tensor_tensor_scan)
from .isa_tensor import nc_matmul, nc_transpose
from .spmd import core_barrier


class reduce_cmd:  # nisa.reduce_cmd
    idle, reset, reduce, reset_reduce, load_reduce = "idle", "reset", "reduce", "reset_reduce", "load_reduce"


class engine:  # nisa.engine
    tensor, vector, scalar, gpsimd, activation, unknown = "tensor", "vector", "scalar", "gpsimd", "scalar", "unknown"


class dge_mode:  # nisa.dge_mode
    unknown, swdge, hwdge, none = "unknown", "swdge", "hwdge", "none"


# Beta-1 positional arity: a current-API call passes one more positional argument (dst).
BETA1_POSITIONAL = {
    "nc_matmul": 2, "nc_transpose": 1, "activation": 2, "activation_reduce": 2,
    "tensor_tensor": 3, "tensor_scalar": 3, "scalar_tensor_tensor": 5, "tensor_reduce": 3,
    "tensor_partition_reduce": 2, "tensor_tensor_scan": 6, "tensor_scalar_cumulative": 5,
    "tensor_copy": 1, "reciprocal": 1, "exponential": 1, "iota": 2, "memset": 3,
    "dma_copy": 2, "dma_transpose": 1, "dma_compute": 3, "nc_stream_shuffle": 2,
    "core_barrier": 2, "max8": 1, "nc_find_index8": 2, "nc_match_replace8": 3, "nc_n_gather": 2,
    "tensor_scalar_reduce": 5, "bn_stats": 1, "bn_aggr": 1, "affine_select": 3,
    "tensor_copy_predicated": 0, "select_reduce": 0,  # keyword-only in beta-1
}

INSTRUCTIONS = {
    "nc_matmul": nc_matmul, "nc_transpose": nc_transpose, "activation": activation,
    "activation_reduce": activation_reduce, "tensor_tensor": tensor_tensor,
    "tensor_scalar": tensor_scalar, "scalar_tensor_tensor": scalar_tensor_tensor,
    "tensor_reduce": tensor_reduce, "tensor_partition_reduce": tensor_partition_reduce,
    "tensor_tensor_scan": tensor_tensor_scan, "tensor_scalar_cumulative": tensor_scalar_cumulative,
    "tensor_copy": tensor_copy, "reciprocal": reciprocal, "exponential": exponential, "iota": iota,
    "memset": memset, "dma_copy": dma_copy, "dma_transpose": dma_transpose, "dma_compute": dma_compute,
    "tensor_scalar_reduce": tensor_scalar_reduce, "bn_stats": bn_stats, "bn_aggr": bn_aggr,
    "affine_select": affine_select, "nc_stream_shuffle": nc_stream_shuffle, "core_barrier": core_barrier,
    "max8": max8, "nc_find_index8": nc_find_index8, "nc_match_replace8": nc_match_replace8,
    "nc_n_gather": nc_n_gather, "tensor_copy_predicated": tensor_copy_predicated, "select_reduce": select_reduce,
}

# Instructions that write no tile: every argument is an operand, in both APIs.
NO_DST = ("core_barrier",)



def _off_everywhere(mask) -> bool:
    arr = mask.arr if isinstance(mask, Predicate) else mask
    try:
        return not np.asarray(arr, dtype=bool).any()
    except (TypeError, ValueError):
        return False


def _masked_off_reads_nothing(impl):
    """An instruction whose mask is off everywhere (`mask=(g * 128 < rows)` for a tile group past
    the end) reads none of its operands: their never-written data is no error. What it writes
    is decided by the mask as before."""
    @functools.wraps(impl)
    def call(ctx, *args, mask=None, **kw):
        if mask is None or ctx.masked_off or not _off_everywhere(mask):
            return impl(ctx, *args, mask=mask, **kw)
        ctx.masked_off = True
        try:
            return impl(ctx, *args, mask=mask, **kw)
        finally:
            ctx.masked_off = False
    return call


INSTRUCTIONS = {name: _masked_off_reads_nothing(impl) for name, impl in INSTRUCTIONS.items()}
dma = _masked_off_reads_nothing(dma)
globals().update(INSTRUCTIONS)  # language.py calls `isa.<name>`: the same wrapped functions

__all__ = ["BETA1_POSITIONAL", "INSTRUCTIONS", "dge_mode", "dma", "engine", "reduce_cmd",
           *INSTRUCTIONS]
