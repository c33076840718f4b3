"""Hardware access patterns: `tensor.ap(pattern=[[step, num], ...], offset=0)` (NKI 0.2+).

The tensor is seen flattened to 1-D in its logical order; the view's element [i0, i1, ...] is
flat[offset + sum(i_k * step_k)] and its shape is the nums [NKI docs, "NKI Access Patterns"].
A step of 0 repeats an element (a broadcast). On SBUF/PSUM the first pair walks partitions and
must step over a whole partition's free elements. A `scalar_offset` (a one-element SBUF tensor,
read when the pattern is built, i.e. just before the instruction that uses it) moves the start by
that many elements of dimension `indirect_dim`: value * the tensor's stride there. The instruction
records the pattern's region, not the read of the offset tensor (an approximation of the model's
dependencies: the offset is usually written well before).

Invariant: the view is a NumPy view of the buffer (`as_strided` over its flattened data), so
instructions read and write the buffer itself, and its region (memory.Tile._region) is computed
from the view's own strides like any other view.
"""
from __future__ import annotations

import math

import numpy as np
from numpy.lib.stride_tricks import as_strided

from axon.errors import KernelError
from axon.targets.trainium.trace import Memory

from . import dtypes


def access_pattern(tile, pattern, offset=0, dtype=None, scalar_offset=None, vector_offset=None,
                   indirect_dim=0):
    """The view `tile.ap(...)` describes (a `memory.Tile`)."""
    from .memory import Tile

    if vector_offset is not None:
        raise KernelError("ap() with vector_offset (per-partition indirect access) is not supported "
                          "by the Axon NKI simulator")
    cast = None if dtype is None or dtypes.to_dtype(dtype) == tile.dtype else dtypes.to_dtype(dtype)
    steps, nums = _pairs(pattern)
    offset = _integer(offset, "offset")
    if scalar_offset is not None:
        offset += _dynamic_start(tile, scalar_offset, indirect_dim)
    flat, ini = _flat(tile)
    if cast is not None:
        flat, ini = _reinterpret(flat, ini, cast, tile)
    _check_bounds(steps, nums, offset, flat.size, tile.shape)
    if tile.buf.memory is not Memory.HBM and nums and nums[0] > 1:
        free = math.prod(tile.shape[1:]) * tile.dtype.itemsize // flat.itemsize  # in the view's elements
        if steps[0] != free:
            raise KernelError(f"ap(): the partition step {steps[0]} must equal the tensor's free size "
                              f"{free} (partitions are read contiguously)")
    item = flat.itemsize
    strides = tuple(s * item for s in steps)
    t = Tile.__new__(Tile)
    t.buf, t.shape = tile.buf, tuple(nums)
    t.arr = as_strided(flat[offset:], shape=t.shape, strides=strides)
    t.ini = None if ini is None else as_strided(ini[offset:], shape=t.shape,
                                                strides=tuple(s * ini.itemsize for s in steps),
                                                writeable=cast is None)
    t.valid = t.oob = t.idx = t.producer = t.reg = t.wmask = None
    t.iadd = False
    t.off = tile.off + offset * item
    return t


def _reinterpret(flat, ini, cast, tile):
    """The tensor's bytes seen as `cast` elements (pattern and offset then count those): a read-only
    view of the data, and an element counts as written when all its bytes were."""
    old, new = flat.itemsize, cast.itemsize
    if flat.nbytes % new:
        raise KernelError(f"ap(dtype={cast.name}): a {tile.dtype.name} tensor of shape {tile.shape} "
                          f"is not a whole number of {cast.name} elements")
    view = flat.view(cast)
    view.flags.writeable = False
    if ini is None:
        return view, None
    if old >= new:
        return view, np.repeat(ini, old // new)
    return view, ini.reshape(-1, new // old).all(axis=1)


def _dynamic_start(tile, scalar_offset, indirect_dim) -> int:
    """Elements the scalar offset moves the start by: its value times the stride of dimension
    `indirect_dim` of the tensor (row-major over its shape)."""
    from .memory import Tile

    dim = _integer(indirect_dim, "indirect_dim")
    if not 0 <= dim < len(tile.shape):
        raise KernelError(f"ap(): indirect_dim {dim} is not a dimension of a tensor of shape {tile.shape}")
    if not isinstance(scalar_offset, Tile) or math.prod(scalar_offset.shape) != 1:
        raise KernelError("ap(): scalar_offset must be a tensor holding one element")
    if tile.buf.ctx.timing_only:
        raise KernelError("ap(): a scalar_offset is a value read at run time; a timing-only "
                          "simulation has none")
    v = float(np.asarray(scalar_offset.values()).reshape(-1)[0])
    if not v.is_integer():
        raise KernelError(f"ap(): scalar_offset holds {v}, not an integer")
    return int(v) * math.prod(tile.shape[dim + 1:])


def _integer(value, what) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise KernelError(f"ap(): {what} must be a compile-time integer, got {value!r}")
    return int(value)


def _pairs(pattern) -> tuple[list[int], list[int]]:
    try:
        pairs = [tuple(p) for p in pattern]
    except TypeError:
        raise KernelError(f"ap(): pattern must be a list of [step, num] pairs, got {pattern!r}") from None
    if not pairs or any(len(p) != 2 for p in pairs):
        raise KernelError(f"ap(): pattern must be a non-empty list of [step, num] pairs, got {pattern!r}")
    steps = [_integer(s, "a step") for s, _ in pairs]
    nums = [_integer(n, "a size") for _, n in pairs]
    if any(n <= 0 for n in nums):
        raise KernelError(f"ap(): sizes must be positive, got {nums}")
    return steps, nums


def _flat(tile):
    """The tensor's data (and initialisation marks) flattened in logical order, as views."""
    if tile.arr is None or tile.valid is not None:
        raise KernelError("ap() applies to a tensor, not to a gathered or out-of-bounds view")
    arr = tile.arr
    if not arr.flags.c_contiguous:
        raise KernelError(f"ap() applies to a whole tensor (nl.ndarray), not to a strided view of "
                          f"shape {tile.shape}")
    ini = tile.ini
    return arr.reshape(-1), (None if ini is None else ini.reshape(-1))


def _check_bounds(steps, nums, offset, size, shape):
    lo = offset + sum((n - 1) * s for s, n in zip(steps, nums) if s < 0)
    hi = offset + sum((n - 1) * s for s, n in zip(steps, nums) if s > 0)
    if lo < 0 or hi >= size:
        raise KernelError(f"ap(): the pattern reaches elements {lo}..{hi} of a tensor of shape {shape} "
                          f"({size} elements)")
