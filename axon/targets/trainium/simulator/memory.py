"""Buffers, tiles (views of buffers), allocation and capacity accounting, regions for the trace,
and masked reads/writes with initialisation tracking.

Invariants:
- Every allocation is a `Buffer` with its own id. On-chip buffers store partition-major
  (`storage` is [P, blocks..., free...]) and expose `data` in the kernel's logical order
  (blocks..., P, free...), so the byte offset of any view gives its partition range and its
  per-partition byte range directly.
- `Buffer.init` marks which elements hold written data (None: all of them, e.g. kernel inputs).
  New buffers hold garbage (NaN for floats), never zeros.
- A `Tile` is a logical view: `arr`/`ini` are NumPy views of the valid part; positions past the
  end of the buffer (allowed only under a mask) are described by `valid` or `oob`.
- On-chip capacity is accounted by liveness after the run (liveness.py): `alloc` registers each
  on-chip buffer with its allocation unit (one block; the whole buffer without block dimensions)
  and refuses, before the NumPy allocation, a unit that could never fit on its own.
"""
from __future__ import annotations

import math
import mmap
import sys
import weakref

import numpy as np

from axon.errors import KernelError
from axon.targets.trainium.trace import Memory, Region

from . import dtypes
from .indexing import Resolved, resolve

_GARBAGE_INT = 0x5A  # byte pattern of fresh integer buffers


class Buffer:
    __slots__ = ("id", "memory", "storage", "data", "init", "dtype", "pdim", "pp_bytes", "base",
                 "ctx", "name", "read_since_write", "written", "__weakref__")

    def __init__(self, ctx, memory: Memory, shape: tuple, dtype: np.dtype, pdim: int | None,
                 name: str = "", data: np.ndarray | None = None, initialised: bool = False):
        self.ctx, self.memory, self.dtype, self.pdim, self.name = ctx, memory, dtype, pdim, name
        self.id = ctx.new_buffer_id()
        self.read_since_write = False
        if data is not None:
            self.storage = self.data = data
        elif pdim is None:
            self.storage = self.data = _fresh(shape, dtype, ctx.timing_only)
        else:
            pshape = (shape[pdim],) + shape[:pdim] + shape[pdim + 1:]
            self.storage = _fresh(pshape, dtype, ctx.timing_only)
            self.data = np.moveaxis(self.storage, 0, pdim) if pdim else self.storage
        self.base = 0
        self.pp_bytes = self.storage.nbytes // self.storage.shape[0] if pdim is not None else 0
        # Timing-only mode tracks initialisation per buffer (`written`), not per element.
        self.written = initialised
        if initialised or ctx.timing_only:
            self.init = None
        else:
            self.init = np.zeros(self.data.shape, dtype=bool)

    def full_tile(self) -> "Tile":
        t = Tile.__new__(Tile)
        t.buf, t.arr, t.ini, t.shape = self, self.data, self.init, self.data.shape
        t.valid = t.oob = t.idx = t.reg = t.wmask = None
        t.producer = None
        t.iadd = False
        t.off = 0
        return t


def _fresh(shape, dtype, timing_only):
    if timing_only:
        return untouched(shape, dtype)
    if dtypes.is_float(dtype):
        return np.full(shape, np.nan, dtype=dtype)
    a = np.empty(shape, dtype=dtype)
    a.view(np.uint8)[...] = _GARBAGE_INT
    return a


UNTOUCHED_MIN = 64 << 20  # smaller arrays simply count against the memory limit


def untouched(shape, dtype) -> np.ndarray:
    """An array whose values a timing-only run never reads or writes: a large one's address space
    is let past the sandbox's memory limit (sandbox.reserve_untouched) while it lives."""
    nbytes = math.prod(shape) * np.dtype(dtype).itemsize
    if nbytes < UNTOUCHED_MIN:
        return np.empty(shape, dtype=dtype)
    from .sandbox import reserve_untouched

    give_back = reserve_untouched(nbytes)
    try:
        array = _mapped(nbytes, dtype).reshape(shape)
    except (MemoryError, OSError):
        give_back()
        raise MemoryError(f"cannot map {nbytes / 2**30:.1f} GiB for an array of shape {tuple(shape)}") from None
    weakref.finalize(array, give_back)
    return array


# Linux's MAP_NORESERVE (Python 3.11's mmap does not name it): no swap is reserved for the mapping,
# so the kernel's overcommit heuristic does not refuse one larger than memory that is never touched
_NORESERVE = getattr(mmap, "MAP_NORESERVE", 0x4000 if sys.platform.startswith("linux") else 0)


def _mapped(nbytes: int, dtype) -> np.ndarray:
    if not hasattr(mmap, "MAP_ANONYMOUS"):
        return np.empty(nbytes // np.dtype(dtype).itemsize, dtype=dtype)
    region = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | _NORESERVE)
    return np.frombuffer(region, dtype=dtype)


class Tile:
    """What a kernel holds: an SBUF/PSUM tile, an HBM tensor, or a view of either."""

    # `off`: byte offset of arr's first element from the start of the buffer's storage.
    # `wmask`: for a fresh instruction result, the mask its producer wrote under (else None).
    __slots__ = ("buf", "arr", "ini", "shape", "valid", "oob", "idx", "producer", "iadd", "reg",
                 "off", "wmask", "__weakref__")

    # ----- facts -------------------------------------------------------------------------
    @property
    def dtype(self):  # a reinterpret-cast view (access.py) has its own
        return self.buf.dtype if self.arr is None else self.arr.dtype

    @property
    def ndim(self):
        return len(self.shape)

    @property
    def buffer(self):
        return self.buf.memory.value

    @property
    def memory(self) -> Memory:
        return self.buf.memory

    def __len__(self):
        return self.shape[0]

    def __repr__(self):
        return f"<{self.buf.memory.value} tile {self.buf.name or self.buf.id} {self.shape} {self.dtype.name}>"

    def __bool__(self):
        raise KernelError("a tile has no truth value (kernels cannot branch on data)")

    # ----- views -------------------------------------------------------------------------
    def view(self, key) -> "Tile":
        if self.idx is not None or self.valid is not None or self.oob is not None:
            raise KernelError("cannot subscript a view that is itself out of bounds or gathered")
        pdim = None if self.buf.memory is Memory.HBM else (
            self.buf.pdim if self.arr is self.buf.data else 0)
        r = resolve(self.shape, key, pdim)
        return self._apply(r)

    def _apply(self, r: Resolved) -> "Tile":
        t = Tile.__new__(Tile)
        t.buf, t.shape, t.producer, t.iadd, t.oob, t.reg = self.buf, r.shape, None, False, None, None
        t.wmask = None
        if r.kind == "basic":
            off = self.off
            for k, st in zip(r.key, self.arr.strides):
                off += (k if type(k) is int else k.start) * st
            t.off = off
            arr, ini = self.arr[r.key], (None if self.ini is None else self.ini[r.key])
            if r.perm is not None:
                arr = arr.transpose(r.perm)
                ini = None if ini is None else ini.transpose(r.perm)
            if r.reshape is not None and arr.shape != r.reshape:
                arr = arr.reshape(r.reshape)
                ini = None if ini is None else ini.reshape(r.reshape)
            t.arr, t.ini, t.valid, t.idx = arr, ini, r.valid, None
        else:
            t.arr = t.ini = t.valid = None
            t.idx, t.oob, t.off = self._buffer_indices(r.idx), r.oob, 0
        return t

    def _buffer_indices(self, idx: tuple) -> tuple:
        """Gathered indices into this view (`x.reshape(...)[b, index_tile, f]`, a slice of a tensor)
        as indices into its whole buffer, through the view's element offset and strides."""
        data, arr = self.buf.data, self.arr
        if arr is data:
            return idx
        if not data.flags.c_contiguous:
            raise KernelError("gathered (non-affine) subscripts of a view need a contiguous tensor "
                              "(index the whole on-chip tensor instead)")
        item = data.itemsize
        flat = (arr.__array_interface__["data"][0] - data.__array_interface__["data"][0]) // item
        for i, st in zip(idx, arr.strides):
            flat = flat + i.astype(np.int64) * (st // item)
        return np.unravel_index(flat, data.shape)

    def reshape(self, shape):
        """Reshape an HBM tensor (or a contiguous view) without copying."""
        shape = tuple(int(s) for s in shape)
        if math.prod(shape) != math.prod(self.shape):
            raise KernelError(f"cannot reshape {self.shape} to {shape}")
        if self.arr is None or self.valid is not None:
            raise KernelError("cannot reshape a gathered or out-of-bounds view")
        arr = self.arr.reshape(shape)
        if not np.shares_memory(arr, self.buf.data) and arr.size:
            raise KernelError("reshape of a non-contiguous view would copy")
        t = Tile.__new__(Tile)
        t.buf, t.arr, t.shape = self.buf, arr, shape
        t.ini = None if self.ini is None else self.ini.reshape(shape)
        t.valid = t.oob = t.idx = t.producer = t.reg = t.wmask = None
        t.iadd = False
        t.off = self.off
        return t

    def ap(self, pattern, offset=0, **kw) -> "Tile":
        """An explicit access pattern over this tensor (access.py)."""
        from .access import access_pattern

        return access_pattern(self, pattern, offset, **kw)

    def redirect(self, other: "Tile"):
        """Make this tile an alias of `other` (used when a fresh result is stored in place)."""
        self.buf, self.arr, self.ini, self.shape = other.buf, other.arr, other.ini, other.shape
        self.valid, self.oob, self.idx, self.producer = other.valid, other.oob, other.idx, None
        self.reg, self.off, self.wmask = other.reg, other.off, None

    # ----- regions -----------------------------------------------------------------------
    def region(self) -> Region:
        if self.reg is not None:
            return self.reg
        self.reg = r = self._region()
        return r

    def _region(self) -> Region:
        buf = self.buf
        if self.arr is None:
            return self._gathered_region()
        a = self.arr
        item = a.itemsize
        if a.size == 0:
            return Region(buf.id, buf.memory, 0, 0, 0, 0)
        off = self.off if self.arr is not None else 0
        pp = buf.pp_bytes
        if pp:
            pext = bext = 0
            for n, s in zip(a.shape, a.strides):
                if n > 1:
                    if s >= pp:
                        pext += (n - 1) * (s // pp)
                    else:
                        bext += (n - 1) * s
            p0, b0 = divmod(off, pp)
            return Region(buf.id, buf.memory, p0, p0 + pext + 1, b0, b0 + bext + item)
        ext = 0
        dims = [(n, s) for n, s in zip(a.shape, a.strides) if n > 1]
        for n, s in dims:
            ext += (n - 1) * s
        if len(dims) >= 2 and all(s > 0 for _, s in dims):
            # rows: the outermost dimension; a row: the bounding range of the rest (exact when the
            # rest is contiguous). Lets the model tell apart tiles of a wider matrix.
            n0, s0 = max(dims, key=lambda d: d[1])
            row = ext - (n0 - 1) * s0 + item
            if row < s0:
                return Region(buf.id, buf.memory, 0, 1, off, off + ext + item, s0, n0, row)
        return Region(buf.id, buf.memory, 0, 1, off, off + ext + item)

    def _gathered_region(self) -> Region:
        """A gathered view's bounding rectangle: the partitions and the per-partition bytes its
        elements span. Not the whole buffer: liveness charges every block a region touches, so a
        gather into one block of a multi-block tensor (`v[i, p, 128 * j + f]` with a 3-D index)
        must not keep all blocks live."""
        buf = self.buf
        item = buf.data.itemsize
        if not self.idx or self.idx[0].size == 0:
            return Region(buf.id, buf.memory, 0, 0, 0, 0)
        flat = sum(i.astype(np.int64) * s for i, s in zip(self.idx, buf.data.strides))
        pp = buf.pp_bytes
        if pp:
            p, b = np.divmod(flat, pp)
            return Region(buf.id, buf.memory, int(p.min()), int(p.max()) + 1, int(b.min()),
                          int(b.max()) + item)
        return Region(buf.id, buf.memory, 0, 1, int(flat.min()), int(flat.max()) + item)

    def partition_range(self) -> tuple[int, int]:
        r = self.region()
        return r.p_start, r.p_stop

    # ----- data access -------------------------------------------------------------------
    def has_oob(self) -> bool:
        return self.valid is not None or self.oob is not None

    def oob_mask(self) -> np.ndarray | None:
        if self.oob is not None:
            return self.oob
        if self.valid is None:
            return None
        m = np.ones(self.shape, dtype=bool)
        m[tuple(slice(0, v) for v in self.valid)] = False
        return m

    def values(self) -> np.ndarray:
        """The logical tile's values (a view when possible); out-of-bounds positions are NaN/0."""
        self.buf.read_since_write = True
        if self.idx is not None:
            return self.buf.data[self.idx]
        if self.valid is None:
            return self.arr
        full = _fresh(self.shape, self.dtype, False)
        full[tuple(slice(0, v) for v in self.valid)] = self.arr
        return full

    def initialised(self) -> np.ndarray | None:
        """Which logical positions hold written data (None: all). Out-of-bounds: False."""
        if self.buf.init is None and self.valid is None and self.oob is None:
            return None
        if self.idx is not None:
            ini = np.ones(self.shape, bool) if self.buf.init is None else self.buf.init[self.idx]
            if self.oob is not None:
                ini = ini & ~self.oob
            return ini
        if self.valid is None:
            return self.ini
        full = np.zeros(self.shape, dtype=bool)
        full[tuple(slice(0, v) for v in self.valid)] = True if self.ini is None else self.ini
        return full

    def write(self, values, init, mask):
        """Store `values` (logical shape, any dtype: cast here) where `mask` holds; `init` says
        which of the written values are themselves initialised (None: all)."""
        buf = self.buf
        buf.read_since_write = False
        buf.written = True
        if self.valid is None and self.oob is None and self.idx is None and values is None and self.ini is None:
            return  # timing-only mode: nothing to store
        oob = self.oob_mask()
        if oob is not None:
            bad = oob if mask is None else (oob & mask)
            if bad.any():
                raise KernelError(f"writes out of bounds of a {buf.memory.value} tensor of shape "
                                  f"{buf.data.shape} (mask those elements off)")
        if self.idx is not None:
            sel = np.ones(self.shape, bool) if mask is None else mask.copy()
            if oob is not None:
                sel &= ~oob
            if values is not None:
                vals = np.broadcast_to(values, self.shape)
                buf.data[tuple(i[sel] for i in self.idx)] = vals[sel].astype(buf.dtype, copy=False)
            if buf.init is not None:
                ini = True if init is None else np.broadcast_to(init, self.shape)[sel]
                buf.init[tuple(i[sel] for i in self.idx)] = ini
            return
        if self.valid is not None:
            box = tuple(slice(0, v) for v in self.valid)
            if values is not None and np.ndim(values):
                values = np.broadcast_to(values, self.shape)[box]
            if init is not None and np.ndim(init):
                init = np.broadcast_to(init, self.shape)[box]
            if mask is not None:
                mask = mask[box]
        arr = self.arr
        if not arr.flags.writeable:
            raise KernelError("cannot write through a reinterpret-cast view (ap(dtype=...)); it is read-only")
        if values is not None:
            if mask is None:
                arr[...] = values
            else:
                np.copyto(arr, np.asarray(values).astype(buf.dtype, copy=False), where=mask)
        ini = self.ini
        if ini is not None:
            if mask is None:
                ini[...] = True if init is None else init
            elif init is None:
                ini |= mask
            else:
                np.copyto(ini, init, where=mask)


def alloc(ctx, shape, dtype, memory: Memory, name="", pdim=None) -> Tile:
    """Allocate a fresh (uninitialised) buffer and return its whole-buffer tile."""
    shape = tuple(int(s) for s in shape)
    if any(s <= 0 for s in shape):
        raise KernelError(f"tensor shape {shape} has a non-positive dimension")
    dtype = dtypes.to_dtype(dtype)
    if memory is Memory.HBM:
        pdim = None
    else:
        pdim = 0 if pdim is None else pdim
        pmax = ctx.hw.tiles.pmax
        if shape[pdim] > pmax:
            raise KernelError(f"partition dimension {shape[pdim]} exceeds {pmax} "
                              f"(tile shape {shape}, {memory.value})")
        # one block: what is allocated (and spilled) as a unit
        unit = math.prod(shape[pdim + 1:]) * dtype.itemsize
        # capacity before the NumPy allocation: a block that cannot fit is never allocated or filled
        ctx.check_fits(memory, unit)
    buf = Buffer(ctx, memory, shape, dtype, pdim, name)
    if memory is not Memory.HBM:
        ctx.register(buf, unit, shape[pdim])
    return buf.full_tile()


def wrap_array(ctx, array: np.ndarray, name: str, initialised=True) -> Tile:
    buf = Buffer(ctx, Memory.HBM, array.shape, array.dtype, None, name, data=array,
                 initialised=initialised)
    return buf.full_tile()
