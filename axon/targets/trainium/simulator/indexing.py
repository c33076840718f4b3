"""Index expressions (`nl.arange`, `nl.mgrid`, `nl.ds`), mask predicates, and turning a subscript
into a NumPy view.

Invariant: an `IndexExpr` always carries its concrete integer values (`arr`, a small broadcastable
array) and, when it is `coef * arange + const` of a single arange, that affine form (`axis`,
`coef`, `const`, `size`) so the subscript becomes a strided slice, i.e. a NumPy *view*. Anything
else falls back to gathered ("fancy") indices. Subscripts never silently clip: an index past the
end is recorded as out-of-bounds positions that a mask must switch off.
"""
from __future__ import annotations

import numbers
from dataclasses import dataclass

import numpy as np

from axon.errors import KernelError


class IndexExpr:
    """An integer array expression over `nl.arange` indices."""

    __slots__ = ("_arr", "axis", "coef", "const", "size", "ndim")

    def __init__(self, arr=None, axis=None, coef=0, const=0, size=0, ndim=None):
        self._arr = arr
        self.axis = axis  # axis of the single arange, None if not affine in one arange
        self.coef = coef
        self.const = const
        self.size = size
        self.ndim = arr.ndim if ndim is None else ndim

    @property
    def arr(self):
        if self._arr is None:  # affine in one arange: built on demand
            shape = [1] * self.ndim
            shape[self.axis] = self.size
            self._arr = (self.const + self.coef * np.arange(self.size, dtype=np.int64)).reshape(shape)
        return self._arr

    @property
    def shape(self):
        if self._arr is None:
            shape = [1] * self.ndim
            shape[self.axis] = self.size
            return tuple(shape)
        return self._arr.shape

    def __getitem__(self, key):  # nl.arange(n)[:, None] / [None, :]
        if not isinstance(key, tuple):
            key = (key,)
        real = [i for i, k in enumerate(key) if k is not None]
        if self.axis is not None and self.ndim == 1 and len(real) == 1 and key[real[0]] == slice(None):
            return IndexExpr(None, real[0], self.coef, self.const, self.size, len(key))
        return IndexExpr(self.arr[key])

    def _combine(self, other, fn, affine):
        if type(other) is IndexExpr:
            return IndexExpr(fn(self.arr, other.arr))
        if type(other) is int or isinstance(other, numbers.Integral):
            other = int(other)
            if self.axis is not None and affine is not None:
                coef, const = affine(self.coef, self.const, other)
                return IndexExpr(None, self.axis, coef, const, self.size, self.ndim)
            return IndexExpr(fn(self.arr, other))
        return NotImplemented

    def __add__(self, o):
        return self._combine(o, np.add, lambda c, k, o: (c, k + o))

    __radd__ = __add__

    def __sub__(self, o):
        return self._combine(o, np.subtract, lambda c, k, o: (c, k - o))

    def __rsub__(self, o):
        return self._combine(o, lambda a, b: b - a, lambda c, k, o: (-c, o - k))

    def __mul__(self, o):
        return self._combine(o, np.multiply, lambda c, k, o: (c * o, k * o))

    __rmul__ = __mul__

    def __floordiv__(self, o):
        return self._combine(o, np.floor_divide, None)

    def __mod__(self, o):
        return self._combine(o, np.mod, None)

    def __neg__(self):
        return self * -1

    def _cmp(self, o, fn):
        other = o.arr if isinstance(o, IndexExpr) else o
        return Predicate(fn(self.arr, other))

    def __lt__(self, o):
        return self._cmp(o, np.less)

    def __le__(self, o):
        return self._cmp(o, np.less_equal)

    def __gt__(self, o):
        return self._cmp(o, np.greater)

    def __ge__(self, o):
        return self._cmp(o, np.greater_equal)

    def __eq__(self, o):  # type: ignore[override]
        return self._cmp(o, np.equal)

    def __ne__(self, o):  # type: ignore[override]
        return self._cmp(o, np.not_equal)

    __hash__ = object.__hash__


class Predicate:
    """A boolean mask built from comparisons of index expressions; combine with & | ~.
    `combined`: built with & or | (nisa.affine_select takes only a single comparison)."""

    __slots__ = ("arr", "combined")

    def __init__(self, arr, combined=False):
        self.arr = np.asarray(arr, dtype=bool)
        self.combined = combined

    def __and__(self, o):
        return Predicate(self.arr & _pred(o), True)

    __rand__ = __and__

    def __or__(self, o):
        return Predicate(self.arr | _pred(o), True)

    __ror__ = __or__

    def __invert__(self):
        return Predicate(~self.arr, self.combined)

    def __bool__(self):
        raise KernelError("a mask predicate has no single truth value (use & and |, not and/or)")


def _pred(o):
    return o.arr if isinstance(o, Predicate) else np.asarray(o, dtype=bool)


def mask_array(mask, shape):
    """The mask broadcast to `shape` (None stays None)."""
    if mask is None:
        return None
    arr = mask.arr if isinstance(mask, Predicate) else np.asarray(mask, dtype=bool)
    if arr.ndim > len(shape) and all(n == 1 for n in arr.shape[len(shape):]):
        arr = arr.reshape(arr.shape[:len(shape)])  # e.g. a [P, 1] mask on a reduced [P] tile
    try:
        return np.broadcast_to(arr, shape)
    except ValueError:
        pass
    # Trailing size-1 axes a slice added after the index-expression axes (a [128, 512, 1] mgrid
    # view of a [128, F, 1] tile is [128, 512, 1, 1]) take no part in the mask.
    core = tuple(shape)
    while core and core[-1] == 1:
        core = core[:-1]
        try:
            return np.broadcast_to(arr, core).reshape(shape)
        except ValueError:
            continue
    if arr.ndim > len(shape):
        # a mask over an instruction's input iteration space (a reduction's [P, a, b] on its
        # reduced [P] result): a result element is written where any of its inputs is active
        extra = tuple(range(len(shape), arr.ndim))
        try:
            return np.broadcast_to(arr.any(axis=extra), shape)
        except ValueError:
            pass
    raise KernelError(f"mask of shape {arr.shape} does not fit the tile shape {tuple(shape)}")


def arange(*args):
    """nl.arange(stop) or nl.arange(start, stop[, step]): a 1-D index over a new axis."""
    if len(args) == 1:
        start, stop, step = 0, args[0], 1
    elif len(args) == 2:
        (start, stop), step = args, 1
    else:
        start, stop, step = args
    return IndexExpr(None, 0, step, start, len(range(start, stop, step)), 1)


class _Grid:
    """Result of nl.mgrid[...]: unpackable, and named .p, .x, .y, .z (partition first)."""

    def __init__(self, exprs):
        self._exprs = exprs

    def __iter__(self):
        return iter(self._exprs)

    def __len__(self):
        return len(self._exprs)

    def __getitem__(self, i):
        return self._exprs[i]

    def __getattr__(self, name):
        names = {"p": 0, "x": 1, "y": 2, "z": 3}
        if name in names and names[name] < len(self._exprs):
            return self._exprs[names[name]]
        raise AttributeError(name)


class _MGrid:
    def __getitem__(self, key):
        if not isinstance(key, tuple):
            key = (key,)
        n = len(key)
        exprs = []
        for axis, s in enumerate(key):
            if not isinstance(s, slice):
                raise KernelError("nl.mgrid takes slices, e.g. nl.mgrid[0:128, 0:512]")
            start, step = s.start or 0, s.step or 1
            exprs.append(IndexExpr(None, axis, step, start, len(range(start, s.stop, step)), n))
        return _Grid(exprs)


mgrid = _MGrid()


def ds(start, size):
    """nl.ds(start, size): a dynamic slice."""
    return slice(start, start + size)


@dataclass
class Resolved:
    """How a subscript maps onto an array of `src_shape`.

    kind "basic": `src[key]` is a view; then `transpose(perm)`, `reshape(shape_valid)` (inserts
    size-1 axes) give the logical tile. `valid` is the valid extent per logical axis when the
    subscript runs past the end (positions beyond are out of bounds), else None.
    kind "fancy": `src[idx]` gathers the logical tile; `oob` marks out-of-bounds positions.
    """

    kind: str
    shape: tuple
    key: tuple = ()
    perm: tuple | None = None
    reshape: tuple | None = None
    valid: tuple | None = None
    idx: tuple = ()
    oob: np.ndarray | None = None


def _as_int(k):
    if type(k) is int:
        return k
    if isinstance(k, (bool, np.bool_)):
        return None
    if isinstance(k, numbers.Integral):
        return int(k)
    return None


def resolve(shape: tuple, key, pdim: int | None = None) -> Resolved:
    """Resolve `key` against an array of `shape`; `pdim` is the partition axis (an integer
    index there keeps a size-1 partition axis, as NKI tiles always have one)."""
    if type(key) is not tuple:
        key = (key,)
    ndim = len(shape)
    if len(key) <= ndim and _plain(key):  # the common case: ints and slices, a view
        if len(key) < ndim:
            key = key + (slice(None),) * (ndim - len(key))
        return _resolve_basic(shape, key, pdim)
    fast = _resolve_fast(shape, key)
    if fast is not None:
        return fast
    if any(k is Ellipsis for k in key):
        i = next(i for i, k in enumerate(key) if k is Ellipsis)
        key = key[:i] + (slice(None),) * (ndim - len(key) + 1) + key[i + 1:]
    if len(key) > ndim:
        raise KernelError(f"too many indices ({len(key)}) for a tensor of rank {ndim}")
    key = key + (slice(None),) * (ndim - len(key))
    if not any(isinstance(k, IndexExpr) for k in key):
        return _resolve_basic(shape, key, pdim)
    return _resolve_expr(shape, key)


def _plain(key) -> bool:
    """Only ints and slices (what the general path below would hand to _resolve_basic)."""
    for k in key:
        t = type(k)
        if t is not slice and t is not int:
            return False
    return True


def _resolve_fast(shape, key):
    """Ints plus affine expressions of one rank, each on its own axis, all in bounds."""
    if len(key) != len(shape):
        return None
    np_key, axes, E = [], [], -1
    out = None
    for k, n in zip(key, shape):
        t = type(k)
        if t is int:
            if k < 0 or k >= n:
                return None
            np_key.append(k)
        elif t is IndexExpr:
            ax = k.axis
            if ax is None or k.coef <= 0 or k.const < 0 or k.const + k.coef * (k.size - 1) >= n:
                return None
            if E < 0:
                E = k.ndim
                out = [1] * E
            elif k.ndim != E or out[ax] != 1:
                return None
            out[ax] = k.size
            axes.append(ax)
            np_key.append(slice(k.const, k.const + k.coef * (k.size - 1) + 1, k.coef))
        else:
            return None
    if E < 0 or len(axes) != E or any(axes[i] > axes[i + 1] for i in range(E - 1)):
        return None
    shape_out = tuple(out)
    return Resolved("basic", shape_out, key=tuple(np_key), reshape=shape_out)


def _resolve_basic(shape, key, pdim):
    np_key, out = [], []
    d = 0
    for k in key:  # a hot path: kept free of generic helpers for the common int and slice cases
        n = shape[d]
        if type(k) is slice:
            step = 1 if k.step is None else int(k.step)
            if step <= 0:
                raise KernelError("slice steps must be positive")
            start, stop = k.start, k.stop
            if type(start) is not int:
                start = 0 if start is None else int(start)
            if type(stop) is not int:
                stop = n if stop is None else int(stop)
            if start < 0 or stop > n or start > stop:
                raise KernelError(f"slice {start}:{stop} is out of bounds for axis {d} of size {n}")
            np_key.append(slice(start, stop, step))
            out.append(stop - start if step == 1 else len(range(start, stop, step)))
        else:
            i = k if type(k) is int else _as_int(k)
            if i is None:
                raise KernelError(f"unsupported index {k!r} (use ints, slices, nl.arange or nl.mgrid)")
            if i < 0 or i >= n:
                raise KernelError(f"index {i} is out of bounds for axis {d} of size {n}")
            if d == pdim:
                np_key.append(slice(i, i + 1))
                out.append(1)
            else:
                np_key.append(i)
        d += 1
    if pdim is not None and len(out) == 1 and len(key) > 1:
        _keep_free_axis(np_key, out, pdim)
    return Resolved("basic", tuple(out), key=tuple(np_key))


def _keep_free_axis(np_key: list, out: list, pdim: int):
    """An on-chip tile always has a free axis, as `nl.ndarray((P,))` is a [P, 1] tile: integers on
    every free axis (`l[:, i]` of a [P, n] tile) leave the innermost one as size 1, so the view
    is [P, 1] and can be subscripted as such (`l[:, i][:, 0]`)."""
    for d in range(len(np_key) - 1, pdim, -1):
        k = np_key[d]
        if type(k) is int:
            np_key[d] = slice(k, k + 1)
            out.append(1)
            return


def _resolve_expr(shape, key):
    exprs = [k for k in key if type(k) is IndexExpr]
    try:
        eshape = np.broadcast_shapes(*(e.shape for e in exprs))
    except ValueError:
        raise KernelError("index expressions have incompatible shapes") from None
    E = len(eshape)
    # Slices next to arange expressions become extra logical axes after the expression axes.
    trailing = [d for d, k in enumerate(key) if isinstance(k, slice)]
    out_shape = tuple(eshape) + tuple(len(range(*key[d].indices(shape[d]))) for d in trailing)
    np_key, view_axes, valid = [], [], list(out_shape)
    clipped = False
    affine = True
    used = set()
    for d, (k, n) in enumerate(zip(key, shape)):
        i = _as_int(k)
        if i is not None:
            if i < 0 or i >= n:
                raise KernelError(f"index {i} is out of bounds for axis {d} of size {n}")
            np_key.append(i)
        elif isinstance(k, slice):
            start, stop, step = k.indices(n)
            if (k.stop is not None and k.stop > n) or (k.start is not None and k.start < 0) or step <= 0:
                raise KernelError(f"slice {k.start}:{k.stop} is out of bounds for axis {d} of size {n}")
            np_key.append(slice(start, stop, step))
            view_axes.append(E + trailing.index(d))
        elif isinstance(k, IndexExpr):
            ax = k.axis + (E - k.ndim) if k.axis is not None else None
            if ax is None or k.coef <= 0 or ax in used or k.ndim > E:
                affine = False
                break
            used.add(ax)
            start, coef, size = k.const, k.coef, k.size
            if start < 0:
                raise KernelError(f"index {start} is out of bounds for axis {d} of size {n}")
            last = start + coef * (size - 1)
            if last >= n:
                nvalid = max(0, -(-(n - start) // coef)) if start < n else 0
                clipped = True
                valid[ax] = nvalid
            else:
                nvalid = size
            s0 = min(start, n)
            np_key.append(slice(s0, s0 + coef * (nvalid - 1) + 1 if nvalid else s0, coef))
            view_axes.append(ax)
        else:
            raise KernelError(f"unsupported index {k!r}")
    if affine and all(eshape[a] == 1 or a in used for a in range(E)):
        perm = tuple(sorted(range(len(view_axes)), key=lambda i: view_axes[i]))
        perm = None if perm == tuple(range(len(perm))) else perm
        vshape = tuple(valid)
        return Resolved("basic", out_shape, key=tuple(np_key), perm=perm,
                        reshape=vshape, valid=vshape if clipped else None)
    # Gathered indices: broadcast every subscript to the logical shape.
    if trailing:
        raise KernelError("slices cannot be mixed with non-affine index expressions")
    idx, oob = [], np.zeros(out_shape, dtype=bool)
    for d, (k, n) in enumerate(zip(key, shape)):
        a = np.broadcast_to(k.arr if isinstance(k, IndexExpr) else np.int64(_as_int(k)), out_shape)
        bad = (a < 0) | (a >= n)
        if bad.any():
            oob |= bad
            a = np.clip(a, 0, n - 1)
        idx.append(a)
    return Resolved("fancy", out_shape, idx=tuple(idx), oob=oob if oob.any() else None)
